package walk

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
)

// TestSGDOneStep checks one sgd update (third of the node, rate 1, sigma 0, one example
// clipped) against a transcription: theta' = prox_{eta_3 r}(theta - eta_3 G), Zhat = Z, u
// untouched, ledger entry subsampled with lambda 0.
func TestSGDOneStep(t *testing.T) {
	d := smallLogistic()
	const clip, eta, weight = 1.2, 0.9, 2.0
	reg := consensus.Regularizer{L1: 0.03, L2: 0.2}
	cfg := Config{Node: 0, Nodes: 3, Gamma: 1, Lambda: 0.5, Clip: clip, Reg: reg, Rand: rand.New(rand.NewPCG(1, 2)),
		Run: "r", Step: StepParams{Kind: StepSGD, Eta: eta, Rate: 1}}
	m := oneNode(t, d, weight, cfg, nil)
	if err := m.Restore(Checkpoint{Updates: 2, U: make([]float64, 4)}); err != nil {
		t.Fatal(err)
	}
	theta := []float64{0.5, -1, 0.25, 2}
	G := make([]float64, 4)
	clipped := 0
	for r := 0; r < d.Rows; r++ {
		a := d.Row(r)
		mgn := 0.0
		for k := range a {
			mgn += a[k] * theta[k]
		}
		dr := -d.Y[r] / (1 + math.Exp(d.Y[r]*mgn))
		s := 1.0
		if nrm := math.Abs(dr) * math.Sqrt(dotSeq(a, a)); nrm > clip {
			s, clipped = clip/nrm, clipped+1
		}
		for k := range a {
			G[k] += weight / float64(d.Rows) * s * dr * a[k]
		}
	}
	if clipped == 0 || clipped == d.Rows {
		t.Fatalf("clipped %d", clipped)
	}
	e3 := eta / math.Sqrt(3)
	want := make([]float64, 4)
	for k := range want {
		v := theta[k] - e3*G[k]
		want[k] = math.Copysign(math.Max(math.Abs(v)-e3*reg.L1, 0), v) / (1 + e3*reg.L2)
	}
	if err := m.Step(Message{Token: Token{Run: "r", Z: append([]float64(nil), theta...), Zhat: make([]float64, 4)}}); err != nil {
		t.Fatal(err)
	}
	rd := m.Ready()
	out := rd.Outbox[0].Token
	for k := range want {
		if math.Abs(out.Z[k]-want[k]) > 1e-14 || out.Zhat[k] != out.Z[k] || rd.State.U[k] != 0 {
			t.Errorf("coord %d: z %v want %v, zhat %v, u %v", k, out.Z[k], want[k], out.Zhat[k], rd.State.U[k])
		}
	}
	if e := rd.Ledger[0]; e.Mechanism != MechSubsampled || e.Sensitivity != clip || e.Rate != 1 || e.Lambda != 0 {
		t.Errorf("entry %+v", e)
	}
}

// TestSGDConverges: the non-private random-walk proximal SGD (full local batches, decaying
// step) approaches the optimum of mean loss + r.
func TestSGDConverges(t *testing.T) {
	reg := consensus.Regularizer{L2: 0.01}
	ms, d, prob, tok := logisticNet(t, 8, 400, 10, reg, StepParams{Kind: StepSGD, Eta: 1, Rate: 1}, 0, 10, nil)
	tok = runNet(t, ms, tok, 8000)
	gap := relGap(t, d, prob, tok.Z)
	t.Logf("relative gap %.3g", gap)
	if !(gap <= 1e-3) {
		t.Fatalf("relative gap %v", gap)
	}
}

// TestSGDNoisyLattice: with the secure sampler (crypto-backed Poisson sampling and
// discrete Gaussian noise) the private walk makes progress and stays finite.
func TestSGDNoisyLattice(t *testing.T) {
	reg := consensus.Regularizer{L2: 0.01}
	ms, d, prob, tok := logisticNet(t, 4, 400, 5, reg, StepParams{Kind: StepSGD, Eta: 0.5, Rate: 0.5}, 1, 1,
		func(int) privacy.Noise { return privacy.NewSecureNoise() })
	start := prob.Objective(d, tok.Z)
	tok = runNet(t, ms, tok, 2000)
	if end := prob.Objective(d, tok.Z); !(end < start) || !AllFinite(tok.Z) {
		t.Fatalf("objective %v -> %v", start, end)
	}
}

// TestSGDNonExpansive: beta = c_q curvature sum ||a_r||^2, by hand; the condition follows
// eta <= 2/beta.
func TestSGDNonExpansive(t *testing.T) {
	d := smallLogistic() // ||a||^2 = 1.5, 2.25, 6
	ll, _ := consensus.NewLocalLoss(d, consensus.Logistic, 2)
	const q = 0.5
	beta := 2 / (q * 3) * 0.25 * (1.5 + 2.25 + 6)
	if got := SGDSmoothness(ll, q); math.Abs(got-beta) > 1e-14 {
		t.Fatalf("smoothness %v want %v", got, beta)
	}
	for _, c := range []struct {
		eta  float64
		want bool
	}{{2 / beta * 0.999, true}, {2 / beta * 1.001, false}} {
		cfg := Config{Node: 0, Nodes: 2, Gamma: 1, Lambda: 0.5, Clip: 1, Rand: rand.New(rand.NewPCG(1, 1)), Noise: &fixedNoise{},
			Run: "r", Step: StepParams{Kind: StepSGD, Eta: c.eta, Rate: q}}
		m := oneNode(t, d, 2, cfg, nil)
		if m.SGDNonExpansive() != c.want {
			t.Errorf("eta %v: non-expansive %v, want %v", c.eta, !c.want, c.want)
		}
	}
}

// TestGradBudgetCap: the cap is the largest K whose epsilon is within the budget (checked
// at K and K+1), and the network kind gives the local cap (a plan cannot promise the sgd
// amplification).
func TestGradBudgetCap(t *testing.T) {
	b := Budget{Kind: BudgetLocal, Epsilon: 2, Delta: 1e-5}
	for _, step := range []StepKind{StepLSSGD, StepSGD} {
		k, name, err := GradBudgetCap(b, 20, step, 0.1, 1, 3, true)
		if err != nil || k < 1 || name != privacy.SGDLocalName {
			t.Fatalf("%s: cap %d %q %v", step, k, name, err)
		}
		e1, _ := privacy.ToDP(privacy.SubsampledReplaceCurve(0.1, 3, k), 1e-5)
		e2, _ := privacy.ToDP(privacy.SubsampledReplaceCurve(0.1, 3, k+1), 1e-5)
		if !(e1 <= 2) || !(e2 > 2) {
			t.Errorf("%s: cap %d: eps %v, next %v", step, k, e1, e2)
		}
	}
	loc, _, _ := GradBudgetCap(b, 200, StepSGD, 1, 1, 4, true)
	b.Kind, b.Hops = BudgetNetwork, 1000
	// A plan cannot promise the sgd amplification (per-hop step sizes): the network cap is
	// the local one.
	net, name, _ := GradBudgetCap(b, 200, StepSGD, 1, 1, 4, true)
	if net != loc || name != privacy.SGDLocalName {
		t.Errorf("network cap %d (%s), local %d", net, name, loc)
	}
	if ls, _, _ := GradBudgetCap(b, 200, StepLSSGD, 1, 1, 4, true); ls != loc {
		t.Errorf("ls-sgd network cap %d, want the local %d", ls, loc)
	}
	if _, _, err := GradBudgetCap(b, 20, StepSGD, 0, 1, 4, true); err == nil {
		t.Error("rate 0 accepted")
	}
}
