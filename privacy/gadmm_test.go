package privacy

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func gnear(got, want, rel float64) bool {
	return math.Abs(got-want) <= rel*math.Max(math.Abs(want), 1e-300)
}

// TestGADMMExample1 is the digest's worked example 1 (section 8): consensus A = I, nu = 4,
// eta = 1/nu, beta = 6, Delta = 2, sigma = 0.5: C = 5, eps_loc = 0.5, and the table of B(t).
func TestGADMMExample1(t *testing.T) {
	p := GADMMParams{Eta: 0.25, Beta: 6, Sigma: 0.5, Sensitivity: 0.25 * 2, Nu: 4}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if c := GADMMConvexC(6, 0.25, 1); c != 5 {
		t.Errorf("C = %v, want 5", c)
	}
	if e := p.LocalTerm(); e != 0.5 {
		t.Errorf("eps_loc = %v, want 0.5", e)
	}
	table := []struct {
		t  int
		dz float64
	}{{0, 0.5}, {1, 0.5}, {2, 0.5}, {3, 0.5}, {10, 0.5}, {11, 0.5}, {12, 0.416667}, {13, 0.416667},
		{20, 0.25}, {21, 0.25}, {100, 0.05}, {1000, 0.005}}
	for _, r := range table {
		if got := p.DZ(r.t); !gnear(got, r.dz, 1e-6) {
			t.Errorf("B(%d) = %v, want %v", r.t, got, r.dz)
		}
		// RDP at alpha: alpha B(t); the unit curve is alpha eps_loc.
		for _, a := range []float64{2, 8} {
			if got := a * p.DZ(r.t); !gnear(got, a*r.dz, 1e-6) {
				t.Errorf("RDP_%v(%d) = %v", a, r.t, got)
			}
		}
	}
	// At t = 100, rho = 0.05 and delta = 1e-5: the zCDP conversion gives 1.567427; the
	// package's RDP conversion on its order grid is never worse than that.
	rho := p.DZ(100)
	if e := rho + 2*math.Sqrt(rho*math.Log(1e5)); !gnear(e, 1.567427, 1e-6) {
		t.Errorf("zCDP epsilon %v", e)
	}
	if e, _ := ToDP(p.Unit().Scale(p.Factor(100)), 1e-5); e > 1.567427+1e-3 {
		t.Errorf("ToDP at t = 100: %v above the zCDP conversion 1.567427", e)
	}
}

// TestGADMMExample2: A = [I|D] with ||A||^2 = 1.5, nu = 10, eta = 0.1, beta = 5, Delta = 1,
// sigma = 0.1: C = 10.5, eps_loc = 0.5.
func TestGADMMExample2(t *testing.T) {
	p := GADMMParams{Eta: 0.1, Beta: 5, Sigma: 0.1, Sensitivity: 0.1, Nu: 10, NormA2: 1.5}
	if c := GADMMConvexC(5, 0.1, 1.5); !gnear(c, 10.5, 1e-12) {
		t.Errorf("C = %v", c)
	}
	for _, r := range []struct {
		t  int
		dz float64
	}{{0, 0.5}, {2, 0.5}, {20, 0.5}, {21, 0.5}, {22, 0.477273}, {23, 0.477273}, {50, 0.21}, {51, 0.21}, {200, 0.0525}} {
		if got := p.DZ(r.t); !gnear(got, r.dz, 1e-6) {
			t.Errorf("B(%d) = %v, want %v", r.t, got, r.dz)
		}
	}
	for _, r := range []struct{ be, c float64 }{{0.5, 10.5}, {1, 7.5}, {1.5, 6.5}, {2, 8}, {3, 11}} {
		if c := GADMMConvexC(r.be, 1, 1.5); !gnear(c, r.c, 1e-12) {
			t.Errorf("C(beta eta = %v) = %v, want %v", r.be, c, r.c)
		}
	}
}

// TestGADMMExample3: the strongly convex mode at the paper's Table 1 row 1 (nu = mu = 0.5,
// mu_g = 0.2, beta = 0.9, consensus form), eta the midpoint of (23), Delta = 1, sigma = 2.
func TestGADMMExample3(t *testing.T) {
	lo, hi, err := GADMMInterval(0.5, 0.5, 0.2, 0.9, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !gnear(lo, 1.506173, 1e-6) || hi != 2 {
		t.Errorf("interval (%v, %v)", lo, hi)
	}
	if lb1 := 4 / (1 + math.Sqrt(1+8*0.25)); !gnear(lb1, 1.464102, 1e-6) {
		t.Errorf("LB1 %v", lb1)
	}
	eta, _ := GADMMMidpoint(0.5, 0.5, 0.2, 0.9, 1)
	k, err := StrongConstants(0.5, 0.5, 0.2, 0.9, eta, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"eta", eta, 1.7530864}, {"R", k.R, 0.264302}, {"P", k.P, 0.859155}, {"S", k.S, 1.947874}, {"Q", k.Q, 2.056089},
		{"L", k.Contraction, 18.0 / 19}, {"M", k.M, 7.567105}, {"C", k.C, 13.939211}} {
		if !gnear(c.got, c.want, 2e-6) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	p := GADMMParams{Eta: eta, Beta: 0.9, Sigma: 2, Sensitivity: eta, Nu: 0.5, Mu: 0.5, MuG: 0.2, Strong: true}
	if e := p.LocalTerm(); !gnear(e, 0.384164, 1e-5) {
		t.Errorf("eps_loc %v", e)
	}
	pr := p
	pr.Printed = true
	for _, r := range []struct {
		T                  int
		printed, optimized float64
	}{{1, 0.384164, 0.384164}, {2, 0.384164, 0.384164}, {5, 0.384164, 0.384164}, {10, 0.191696, 0.297303},
		{25, 0.015144, 0.0415896}, {50, 0.000507173, 0.0026108}} {
		for _, t2 := range []int{2 * r.T, 2*r.T + 1} {
			if got := p.DZ(t2); !gnear(got, r.optimized, 1e-5) {
				t.Errorf("T = %d (t %d): conservative %v, want %v", r.T, t2, got, r.optimized)
			}
			if got := pr.DZ(t2); !gnear(got, r.printed, 1e-5) {
				t.Errorf("T = %d (t %d): printed %v, want %v", r.T, t2, got, r.printed)
			}
		}
	}
	// The raw printed values above the local term (digest: 5.0731 at T = 1, 0.658347 at T = 5).
	if raw := strongFactor(k.C, k.Contraction, 1, true) * p.LocalTerm(); !gnear(raw, 5.0731, 1e-4) {
		t.Errorf("raw printed T=1 %v", raw)
	}
	if raw := strongFactor(k.C, k.Contraction, 5, true) * p.LocalTerm(); !gnear(raw, 0.658347, 1e-5) {
		t.Errorf("raw printed T=5 %v", raw)
	}
	// The conservative form is never below the printed one.
	for T := 1; T < 400; T++ {
		if a, b := strongFactor(k.C, k.Contraction, T, false), strongFactor(k.C, k.Contraction, T, true); a < b*(1-1e-12) {
			t.Fatalf("T = %d: conservative %v below printed %v", T, a, b)
		}
	}
}

// TestGADMMValidate: the parameter refusals name their reason.
func TestGADMMValidate(t *testing.T) {
	ok := GADMMParams{Eta: 0.25, Beta: 6, Sigma: 0.5, Sensitivity: 0.5, Nu: 4}
	for _, c := range []struct {
		mod  func(*GADMMParams)
		want string
	}{
		{func(p *GADMMParams) { p.Eta = 0 }, "eta"},
		{func(p *GADMMParams) { p.Beta = -1 }, "beta"},
		{func(p *GADMMParams) { p.Sigma = -1 }, "sigma"},
		{func(p *GADMMParams) { p.Eta = 0.3 }, "exceeds 1/nu"},
		{func(p *GADMMParams) { p.Strong, p.Mu, p.MuG = true, 1, 0.5 }, "outside interval (23)"},
		{func(p *GADMMParams) { p.Strong, p.Mu, p.MuG = true, 0, 0.5 }, "mu must be"},
		{func(p *GADMMParams) { p.Strong, p.Mu, p.MuG = true, 5, 0.5 }, "exceeds the smoothness"},
	} {
		p := ok
		c.mod(&p)
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", p, err, c.want)
		}
		if f := p.Factor(100); f != 1 {
			t.Errorf("%+v: factor %v with invalid parameters, want 1 (local)", p, f)
		}
	}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestGADMMRealisedByHand checks the realised weights on short paths against the rules of
// digest 3.10 worked by hand (C = 5, so a contribution needs T > 5 pairs to gain).
func TestGADMMRealisedByHand(t *testing.T) {
	p := GADMMParams{Eta: 0.25, Beta: 6, Sigma: 0.5, Sensitivity: 0.5, Nu: 4}
	st := func(nodes ...int) []TraceStep {
		s := make([]TraceStep, len(nodes))
		for k, v := range nodes {
			s[k] = TraceStep{Node: v, Noisy: true}
		}
		return s
	}
	long := []int{0}
	for k := 0; k < 24; k++ { // 24 iterations by node 2, then j = 1 views
		long = append(long, 2)
	}
	long = append(long, 1)
	for _, c := range []struct {
		name  string
		steps []TraceStep
		final bool
		want  float64
	}{
		{"i then j", st(0, 1), false, 1},
		{"i then never j", st(0, 2, 2), false, 0},
		{"i, 24 others, j", st(long...), false, 5.0 / 12},
		{"i, 24 others, j, then i again seen at the end", append(st(long...), TraceStep{Node: 0, Noisy: true}), true, 5.0/12 + 1},
		// i at 0 and at 2; j sees only the state after i's second contribution (state 3):
		// the first contribution is charged at the handed state 1 (t = 1, factor 1).
		{"i, x, i, x, j", st(0, 2, 0, 2, 1), false, 2},
		{"final only", st(0, 2, 2), true, 1},
	} {
		tr := &Trace{Nodes: 3, Clip: 1, Sigma: 1, Steps: c.steps, FinalReleasedToAll: c.final}
		got := GADMMPathWeight(c.steps, 0, 1, c.final, p)
		if !gnear(got, c.want, 1e-12) && !(got == 0 && c.want == 0) {
			t.Errorf("%s: path weight %v, want %v", c.name, got, c.want)
		}
		r, err := GADMMRealisedPairwise(tr, p)
		if err != nil {
			t.Fatal(err)
		}
		if w := r.Pairs.Weight(0, 1); !gnear(w, c.want, 1e-12) && !(w == 0 && c.want == 0) {
			t.Errorf("%s: realised weight %v, want %v", c.name, w, c.want)
		}
	}
}

// TestGADMMRealisedMatchesBruteForce: the O(nK) sweep equals the direct evaluation of the
// rules (GADMMPathWeight) on random paths with forwards, in both modes, and no pair is ever
// charged more than the local figure (one full update per contribution) nor less than 0.
func TestGADMMRealisedMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	ps := []GADMMParams{
		{Eta: 0.25, Beta: 6, Sigma: 0.5, Sensitivity: 0.5, Nu: 4},
		{Eta: 1.7530864, Beta: 0.9, Sigma: 2, Sensitivity: 1, Nu: 0.5, Mu: 0.5, MuG: 0.2, Strong: true},
		{Eta: 0.3, Beta: 6, Sigma: 0.5, Sensitivity: 0.5, Nu: 4}, // invalid: local only
	}
	for it := 0; it < 200; it++ {
		n := 2 + r.IntN(5)
		K := r.IntN(120)
		steps := make([]TraceStep, K)
		for k := range steps {
			steps[k] = TraceStep{Node: r.IntN(n), Noisy: r.IntN(6) != 0}
		}
		final := r.IntN(2) == 0
		p := ps[it%len(ps)]
		tr := &Trace{Nodes: n, Clip: 1, Sigma: 1, Steps: steps, FinalReleasedToAll: final}
		coal := []int{r.IntN(n), r.IntN(n)}
		re, err := GADMMRealisedPairwise(tr, p, coal)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			want := gadmmSetWeight(steps, i, coal, final, p)
			if got := re.Coalitions[0].Weight[i]; !gnear(got, want, 1e-12) && !(got == 0 && want == 0) {
				t.Fatalf("iteration %d coalition %v node %d: sweep %v, direct %v", it, coal, i, got, want)
			}
			// Pooling observers never charges less than any one member alone.
			for _, j := range coal {
				if re.Coalitions[0].Weight[i] < re.Pairs.Weight(i, j)-1e-12 && i != j && i != coal[0] && i != coal[1] {
					t.Fatalf("iteration %d: coalition weight %v below member %d's %v", it, re.Coalitions[0].Weight[i], j, re.Pairs.Weight(i, j))
				}
			}
		}
		for i := 0; i < n; i++ {
			for j := 0; j < n; j++ {
				want := GADMMPathWeight(steps, i, j, final, p)
				got := re.Pairs.Weight(i, j)
				if !gnear(got, want, 1e-12) && !(got == 0 && want == 0) {
					t.Fatalf("iteration %d pair (%d,%d): sweep %v, direct %v", it, i, j, got, want)
				}
				if got < 0 || got > float64(re.Updates[i])+1e-12 {
					t.Fatalf("iteration %d pair (%d,%d): weight %v outside [0, K_i = %d]", it, i, j, got, re.Updates[i])
				}
			}
		}
	}
}

// TestGADMMVerdict: WalkDecide and WalkPlannedBound dispatch to the gradient-ADMM figures.
func TestGADMMVerdict(t *testing.T) {
	g := GADMMParams{Eta: 0.25, Beta: 6, Sensitivity: 0.5, Nu: 4}
	r := WalkRun{Nodes: 10, Complete: true, Clip: 1, Sigma: 0.5, Cap: 3, Hops: 20, Planning: true, Step: StepGADMM, GADMM: g}
	v := WalkDecide(r)
	if !v.PlannedHolds || v.K != 3 {
		t.Fatalf("verdict %+v", v)
	}
	b := WalkPlannedBound(r, 1e-5)
	g.Sigma = 0.5
	want, _ := ToDP(g.Unit().Scale(3), 1e-5)
	if !b.ConditionsHold || b.Epsilon != want || !strings.Contains(b.Theorem, "Chan, Xie, Zhao") {
		t.Errorf("bound %+v, want epsilon %v", b, want)
	}
	// The prox figure differs (sensitivity 4C against sigma): the dispatch matters.
	r2 := r
	r2.Step = ""
	if b2 := WalkPlannedBound(r2, 1e-5); b2.Epsilon == b.Epsilon {
		t.Errorf("prox and gadmm figures coincide: %v", b2.Epsilon)
	}
	r.GADMM.Eta = 0.3 // eta > 1/nu
	v = WalkDecide(r)
	if v.PlannedHolds || len(v.Reasons) == 0 || !strings.Contains(v.Reasons[0], "1/nu") {
		t.Errorf("verdict with eta > 1/nu: %+v", v)
	}
	r.GADMM.Eta = 0.25
	r.Sigma = 0
	if b := WalkPlannedBound(r, 1e-5); !math.IsInf(b.Epsilon, 1) || b.ConditionsHold {
		t.Errorf("sigma 0: %+v", b)
	}
}

// TestGADMMLedgerEntry: the "gadmm" mechanism is valid and costs a Gaussian mechanism.
func TestGADMMLedgerEntry(t *testing.T) {
	e := Entry{Seq: 1, Node: "0", Mechanism: MechGADMM, Sensitivity: 0.5, Sigma: 0.5}
	if err := e.Validate(); err != nil {
		t.Fatal(err)
	}
	c := e.Curve()
	for k, a := range Orders {
		if !gnear(c[k], a*0.5, 1e-12) {
			t.Fatalf("curve at %v: %v, want %v", a, c[k], a*0.5)
		}
	}
	b := e.MarshalLine()
	es, err := ParseLedger(strings.NewReader(string(b)))
	if err != nil || len(es) != 1 || es[0] != e {
		t.Fatalf("round trip %v %v", es, err)
	}
}

// TestGADMMDriftCharged: with the dimension known, the factor of a contribution seen after
// t steps is the paper's factor times (1 + t h sqrt(p)/Sensitivity)^2 (capped at 1), never
// below the factor without the drift; without the dimension it is the paper's factor.
func TestGADMMDriftCharged(t *testing.T) {
	p := GADMMParams{Eta: 0.5, Beta: 1, Sigma: 1e-9, Sensitivity: 1e-9, Nu: 1}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	q := p
	q.Dim = 400
	d := Granularity(p.Sigma) * 20
	if q.Drift() != d || p.Drift() != 0 {
		t.Fatalf("drift %v want %v", q.Drift(), d)
	}
	for _, tt := range []int{0, 1, 2, 10, 1000, 100000} {
		base, got := p.Factor(tt), q.Factor(tt)
		g := 1 + float64(tt)*d/p.Sensitivity
		want := math.Min(1, base*g*g)
		if tt < 2 {
			want = 1
		}
		if got != want || got < base {
			t.Errorf("t %d: factor %v want %v (without drift %v)", tt, got, want, base)
		}
	}
	if !(q.Factor(100000) > p.Factor(100000)) {
		t.Error("the drift changes nothing at t = 100000: the test cannot catch it")
	}
}
