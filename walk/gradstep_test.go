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

// oneNode returns a single machine (of n nodes) over dataset d with logistic loss and the
// given weight, u restored to u0.
func oneNode(t testing.TB, d *consensus.Dataset, weight float64, cfg Config, u0 []float64) *Machine {
	t.Helper()
	ll, err := consensus.NewLocalLoss(d, consensus.Logistic, weight)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(cfg, ll, d.Cols)
	if err != nil {
		t.Fatal(err)
	}
	if u0 != nil {
		if err := m.Restore(Checkpoint{Node: cfg.Node, U: u0}); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

func smallLogistic() *consensus.Dataset {
	return &consensus.Dataset{Name: "t", Rows: 3, Cols: 4,
		X: []float64{1, 0.5, -0.5, 0, 0, -1, 0.5, 1, 2, 1, 0, -1}, Y: []float64{1, -1, 1}}
}

// TestLinearizedOneStepNaive checks one linearized update (sigma 0, clip active, second
// update of the node so that eta_2 = eta/sqrt 2) against a transcription built on
// LocalLoss.Grad.
func TestLinearizedOneStepNaive(t *testing.T) {
	d := smallLogistic()
	const n, gamma, lambda, clip, eta, weight = 4, 0.8, 0.6, 0.3, 2.0, 1.5
	reg := consensus.Regularizer{L1: 0.02, L2: 0.1}
	cfg := Config{Node: 1, Nodes: n, Gamma: gamma, Lambda: lambda, Clip: clip, Reg: reg,
		Rand: rand.New(rand.NewPCG(1, 2)), Run: "r", Step: StepParams{Kind: StepLinearized, Eta: eta}}
	u0 := []float64{0.3, -0.2, 0.1, 0.4}
	m := oneNode(t, d, weight, cfg, u0)
	if err := m.Restore(Checkpoint{Node: 1, Updates: 1, U: u0}); err != nil {
		t.Fatal(err)
	}
	zhat := []float64{0.5, -1, 0.25, 2}
	z := make([]float64, 4)
	reg.Prox(z, zhat, gamma)

	ll, _ := consensus.NewLocalLoss(d, consensus.Logistic, weight)
	g := make([]float64, 4)
	ll.Grad(g, z)
	// x = argmin <g,x> + ||x-z||^2/(2 e) + ||x-v||^2/(2 gamma), solved coordinate-wise.
	e := eta / math.Sqrt(2)
	v, dx := make([]float64, 4), make([]float64, 4)
	nd := 0.0
	for k := range v {
		v[k] = 2*z[k] - u0[k]
		x := (z[k]/e + v[k]/gamma - g[k]) / (1/e + 1/gamma)
		dx[k] = x - z[k]
		nd += dx[k] * dx[k]
	}
	nd = math.Sqrt(nd)
	if nd <= clip {
		t.Fatalf("vector should exercise clipping, ||x-z|| = %v", nd)
	}
	wantU, wantZhat, wantZ := make([]float64, 4), make([]float64, 4), make([]float64, 4)
	for k := range dx {
		du := 2 * lambda * dx[k] * clip / nd
		wantU[k], wantZhat[k] = u0[k]+du, zhat[k]+du/n
	}
	reg.Prox(wantZ, wantZhat, gamma)
	if err := m.Step(Message{Token: Token{Run: "r", Z: z, Zhat: zhat}}); err != nil {
		t.Fatal(err)
	}
	rd := m.Ready()
	out := rd.Outbox[0].Token
	for k := range wantU {
		if math.Abs(rd.State.U[k]-wantU[k]) > 1e-13 || math.Abs(out.Zhat[k]-wantZhat[k]) > 1e-13 || math.Abs(out.Z[k]-wantZ[k]) > 1e-13 {
			t.Errorf("coord %d: u %v want %v, zhat %v want %v, z %v want %v", k, rd.State.U[k], wantU[k], out.Zhat[k], wantZhat[k], out.Z[k], wantZ[k])
		}
	}
	if e := rd.Ledger[0]; e.Mechanism != MechGaussian || e.Rate != 0 {
		t.Errorf("entry %+v", e)
	}
}

// TestLinearizedLedgerGaussian: with noise, a linearized update is the walk's Gaussian
// mechanism (sensitivity 4 lambda C, std lambda sigma) and moves u by a lattice multiple.
func TestLinearizedLedgerGaussian(t *testing.T) {
	d := smallLogistic()
	const lambda, clip, sigma = 0.5, 0.7, 1.3
	cfg := Config{Node: 0, Nodes: 3, Gamma: 1, Lambda: lambda, Clip: clip, Sigma: sigma, Rand: rand.New(rand.NewPCG(1, 2)),
		Noise: privacy.NewSecureNoise(), Run: "r", Step: StepParams{Kind: StepLinearized, Eta: 1}}
	m := oneNode(t, d, 1, cfg, nil)
	if err := m.Step(Message{Token: NewToken("r", 0, 4, consensus.Regularizer{}, 1)}); err != nil {
		t.Fatal(err)
	}
	rd := m.Ready()
	e := rd.Ledger[0]
	if e.Mechanism != MechGaussian || e.Sensitivity != 4*lambda*clip || e.Sigma != lambda*sigma || e.Rate != 0 || e.Validate() != nil {
		t.Fatalf("entry %+v", e)
	}
	h := privacy.Granularity(lambda * sigma)
	for k, u := range rd.State.U {
		if q := u / h; q != math.Round(q) {
			t.Errorf("u[%d] = %v is not on the lattice of step %v", k, u, h)
		}
	}
}

// twinNets runs a linearized and an ls-sgd network (nu 0, sigma 0, rate 1) side by side and
// requires the same bits at every hop.
func TestLSSGDEqualsLinearized(t *testing.T) {
	for _, clip := range []float64{math.Inf(1), 1e6} {
		reg := consensus.Regularizer{L1: 0.01, L2: 0.01}
		a, _, _, ta := logisticNet(t, 6, 120, 7, reg, StepParams{Kind: StepLinearized, Eta: 3}, 0, clip, nil)
		b, _, _, tb := logisticNet(t, 6, 120, 7, reg, StepParams{Kind: StepLSSGD, Eta: 3, Rate: 1}, 0, clip, nil)
		at, bt := 0, 0
		for h := 0; h < 600; h++ {
			if err := a[at].Step(Message{Token: ta}); err != nil {
				t.Fatal(err)
			}
			if err := b[bt].Step(Message{Token: tb}); err != nil {
				t.Fatal(err)
			}
			ra, rb := a[at].Ready(), b[bt].Ready()
			a[at].Advance(ra)
			b[bt].Advance(rb)
			ta, at, tb, bt = ra.Outbox[0].Token, ra.Outbox[0].To, rb.Outbox[0].Token, rb.Outbox[0].To
			for k := range ta.Z {
				if math.Float64bits(ta.Z[k]) != math.Float64bits(tb.Z[k]) || math.Float64bits(ta.Zhat[k]) != math.Float64bits(tb.Zhat[k]) ||
					math.Float64bits(ra.State.U[k]) != math.Float64bits(rb.State.U[k]) {
					t.Fatalf("clip %v hop %d coord %d: linearized z %v zhat %v u %v, ls-sgd z %v zhat %v u %v", clip, h, k,
						ta.Z[k], ta.Zhat[k], ra.State.U[k], tb.Z[k], tb.Zhat[k], rb.State.U[k])
				}
			}
			if rb.Ledger[0].Mechanism != MechSubsampled {
				t.Fatalf("ls-sgd entry %+v", rb.Ledger[0])
			}
		}
		if ta.Z[0] == 0 && ta.Z[1] == 0 {
			t.Fatal("the model did not move")
		}
	}
}
