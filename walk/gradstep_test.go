package walk

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
)

// logisticNet builds n machines over shards of a synthetic logistic dataset (weights
// n rows_i / total, as the simulator sets them) and returns them with the dataset, the
// problem and the initial token.
func logisticNet(t testing.TB, n, rows, p int, reg consensus.Regularizer, step StepParams, sigma, clip float64,
	noise func(i int) privacy.Noise) ([]*Machine, *consensus.Dataset, consensus.Problem, Token) {
	t.Helper()
	d, _ := consensus.SyntheticLogistic(rows, p, 3, 11)
	prob := consensus.Problem{Loss: consensus.Logistic, Reg: reg}
	shards, err := consensus.Split(d, n, "iid", 5)
	if err != nil {
		t.Fatal(err)
	}
	ms := make([]*Machine, n)
	for i, sh := range shards {
		ll, err := consensus.NewLocalLoss(sh, consensus.Logistic, float64(n)*float64(sh.Rows)/float64(rows))
		if err != nil {
			t.Fatal(err)
		}
		cfg := Config{Node: i, Nodes: n, Gamma: 1, Lambda: 0.5, Clip: clip, Sigma: sigma, Reg: reg,
			Rand: rand.New(rand.NewPCG(3, uint64(i))), Run: "r", Step: step}
		if noise != nil {
			cfg.Noise = noise(i)
		}
		if ms[i], err = New(cfg, ll, p); err != nil {
			t.Fatal(err)
		}
	}
	return ms, d, prob, NewToken("r", 0, p, reg, 1)
}

// runNet walks the token for hops hops and returns it.
func runNet(t testing.TB, ms []*Machine, tok Token, hops int) Token {
	t.Helper()
	at := 0
	for h := 0; h < hops; h++ {
		if err := ms[at].Step(Message{Token: tok}); err != nil {
			t.Fatal(err)
		}
		rd := ms[at].Ready()
		ms[at].Advance(rd)
		tok, at = rd.Outbox[0].Token, rd.Outbox[0].To
	}
	return tok
}

func relGap(t testing.TB, d *consensus.Dataset, prob consensus.Problem, z []float64) float64 {
	t.Helper()
	_, ref, err := consensus.Solve(d, prob, consensus.SolveOptions{Tol: 1e-12, MaxIter: 100000})
	if err != nil {
		t.Fatal(err)
	}
	return (prob.Objective(d, z) - ref) / ref
}

// TestLinearizedAcceptance: sigma = 0, 8 nodes, logistic + L2: the linearized walk reaches a
// relative objective gap <= 1e-3 of the centralized optimum.
func TestLinearizedAcceptance(t *testing.T) {
	reg := consensus.Regularizer{L2: 0.01}
	ms, d, prob, tok := logisticNet(t, 8, 400, 10, reg, StepParams{Kind: StepLinearized, Eta: 1}, 0, math.Inf(1), nil)
	tok = runNet(t, ms, tok, 8000)
	gap := relGap(t, d, prob, tok.Z)
	t.Logf("relative gap %.3g", gap)
	if !(gap <= 1e-3) || gap < -1e-9 {
		t.Fatalf("relative gap %v, want <= 1e-3", gap)
	}
}
