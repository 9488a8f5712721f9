package walk

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
)

// gradHop returns a closure making one hop of a 50-node walk with the given step, each
// node holding `rows` examples of dimension p (logistic loss), with noise (seeded, so the
// figures exclude the secure sampler's cost) when sigma > 0.
func gradHop(tb testing.TB, step StepParams, sigma float64, p, rows int) func() {
	const n = 50
	d, _ := consensus.SyntheticLogistic(n*rows, p, 4, 7)
	shards, err := consensus.Split(d, n, "iid", 3)
	if err != nil {
		tb.Fatal(err)
	}
	sc := NewScratch(p)
	ms := make([]*Machine, n)
	for i, sh := range shards {
		ll, err := consensus.NewLocalLoss(sh, consensus.Logistic, 1)
		if err != nil {
			tb.Fatal(err)
		}
		cfg := Config{Node: i, Nodes: n, Gamma: 1, Lambda: 0.5, Clip: 1, Sigma: sigma, Reg: consensus.Regularizer{L2: 1e-3},
			Rand: rand.New(rand.NewPCG(1, uint64(i))), Noise: privacy.NewSeededNoise(uint64(i)), Run: "r",
			Names: make([]string, n), Scratch: sc, Step: step}
		if ms[i], err = New(cfg, ll, p); err != nil {
			tb.Fatal(err)
		}
	}
	tok := NewToken("r", 0, p, consensus.Regularizer{L2: 1e-3}, 1)
	at := 0
	return func() {
		m := ms[at]
		if err := m.Step(Message{Token: tok}); err != nil {
			tb.Fatal(err)
		}
		rd := m.Ready()
		tok, at = rd.Outbox[0].Token, rd.Outbox[0].To
		m.Advance(rd)
	}
}

var gradSteps = []struct {
	name string
	step StepParams
}{
	{"linearized", StepParams{Kind: StepLinearized, Eta: 1}},
	{"ls-sgd", StepParams{Kind: StepLSSGD, Eta: 1, Nu: 2, Rate: 1}},
	{"sgd", StepParams{Kind: StepSGD, Eta: 0.1, Rate: 1}},
	{"gadmm", StepParams{Kind: StepGADMM, Eta: 1e-3, Beta: 1}}, // eta <= 1/nu at p = 1000
}

// TestGradHopAllocationFree: a hop of each gradient step allocates nothing, with and
// without noise.
func TestGradHopAllocationFree(t *testing.T) {
	for _, s := range gradSteps {
		for _, sigma := range []float64{0, 1} {
			hop := gradHop(t, s.step, sigma, 64, 4)
			hop()
			if a := testing.AllocsPerRun(200, hop); a != 0 {
				t.Errorf("%s sigma %v: %v allocs per hop", s.name, sigma, a)
			}
		}
	}
}

// BenchmarkGradHop: one hop of each gradient step, one example per node (the one-row
// setting of BenchmarkHop800) and 10 examples per node, at p = 64 and p = 1000.
func BenchmarkGradHop(b *testing.B) {
	for _, s := range gradSteps {
		for _, p := range []int{64, 1000} {
			for _, rows := range []int{1, 10} {
				for _, sigma := range []float64{0, 1} {
					b.Run(fmt.Sprintf("%s/p=%d/rows=%d/sigma=%v", s.name, p, rows, sigma), func(b *testing.B) {
						hop := gradHop(b, s.step, sigma, p, rows)
						for i := 0; i < 100; i++ {
							hop()
						}
						b.ReportAllocs()
						b.ResetTimer()
						for i := 0; i < b.N; i++ {
							hop()
						}
					})
				}
			}
		}
	}
}
