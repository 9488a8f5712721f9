package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dpadmm/dpadmm/privacy"
)

// spreadTrace is a random walk trace of n nodes and k hops, most of them noisy.
func spreadTrace(seed uint64, n, k int) *privacy.Trace {
	r := rand.New(rand.NewPCG(seed, seed))
	tr := &privacy.Trace{Nodes: n, Clip: 0.5, Sigma: 3, FinalReleasedToAll: true, Steps: make([]privacy.TraceStep, k)}
	for i := range tr.Steps {
		tr.Steps[i] = privacy.TraceStep{Node: r.IntN(n), Noisy: r.Float64() < 0.9}
	}
	return tr
}

// TestSpreadSameBits: the realised matrix with the observers spread over goroutines
// (Spread) is the serial one to the last bit, for a network large enough to be spread.
func TestSpreadSameBits(t *testing.T) {
	tr := spreadTrace(3, 300, 20000)
	run := tr.WalkRun()
	want, _, err := privacy.StepRealisedPairwise(tr, run, []int{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := privacy.StepRealisedPairwiseSpread(tr, run, Spread, []int{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	for k := range want.Pairs.W {
		if math.Float64bits(got.Pairs.W[k]) != math.Float64bits(want.Pairs.W[k]) {
			t.Fatalf("weight %d: %v spread, %v serial", k, got.Pairs.W[k], want.Pairs.W[k])
		}
	}
}

// BenchmarkRealisedSpread: the realised matrix of a 10^6-hop trace, serially (the
// baseline, in the same run) and with the observers spread over the cores.
//
//	go test -run '^$' -bench RealisedSpread -benchtime 1x ./testnet/sim/
func BenchmarkRealisedSpread(b *testing.B) {
	tr := spreadTrace(5, 1000, 1_000_000)
	run := tr.WalkRun()
	for _, c := range []struct {
		name   string
		spread privacy.Spread
	}{{"serial", nil}, {"spread", Spread}} {
		b.Run(fmt.Sprintf("n=1000/hops=1e6/%s", c.name), func(b *testing.B) {
			for b.Loop() {
				if _, _, err := privacy.StepRealisedPairwiseSpread(tr, run, c.spread); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
