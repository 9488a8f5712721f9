package privacy

import (
	"math"
	"strings"
	"testing"
)

// paperNode is an R-ADMM/MR-ADMM node in the paper's constants with every checked
// precondition satisfied.
func paperNode(C float64, B int, rho float64, N int, c1 float64, V int, alphas, etas []float64) ObjPertNode {
	return ObjPertNode{
		Scheme: SchemeRecycled, RowWeight: C / float64(B), RegOverN: rho / float64(N), C1: c1,
		Degree: V, Rows: B, C: C, Alphas: alphas, Etas: etas,
		MaxRowNorm: 1, LabelsPM1: true, LossOK: true, ExactSolves: true, FixedIters: true,
	}
}

func rep(v float64, k int) []float64 {
	out := make([]float64, k)
	for i := range out {
		out[i] = v
	}
	return out
}

func near(t *testing.T, name string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol {
		t.Errorf("%s = %.10g, want %.10g (tol %g)", name, got, want, tol)
	}
}

// TestTheoremV1Example1 checks digest 7.1 Example 1 (private R-ADMM, eta = 1, N = 5,
// B = 8000, C = 1750, rho = 0.22, c1 = 1/4, K = 25), all printed to 6 decimals.
func TestTheoremV1Example1(t *testing.T) {
	type row struct {
		V                          int
		alpha, x, odd, beta, exact float64
	}
	rows := []row{
		{1, 2.0, 0.026755, 0.949914, 23.747860, 23.230979},
		{1, 1.0, 0.026755, 0.512414, 12.810360, 12.293479},
		{1, 0.5, 0.026755, 0.293664, 7.341610, 6.824729},
		{2, 2.0, 0.013523, 0.912865, 22.821618, 22.555770},
		{2, 1.0, 0.013523, 0.475365, 11.884118, 11.618270},
		{2, 0.5, 0.013523, 0.256615, 6.415368, 6.149520},
		{3, 2.0, 0.009048, 0.900335, 22.508376, 22.329471},
		{3, 1.0, 0.009048, 0.462835, 11.570876, 11.391971},
		{3, 0.5, 0.009048, 0.244085, 6.102126, 5.923221},
		{4, 2.0, 0.006799, 0.894036, 22.350898, 22.216088},
		{4, 1.0, 0.006799, 0.456536, 11.413398, 11.278588},
		{4, 0.5, 0.006799, 0.237786, 5.944648, 5.809838},
	}
	const N, C, rho, c1, K, B = 5, 1750.0, 0.22, 0.25, 25, 8000
	for _, r := range rows {
		near(t, "eps_odd", ObjPertOddEpsilon(r.alpha, c1, C, B, rho, N, 1, r.V), r.odd, 5e-7)
		x := c1 * C / (B * (rho/N + 2*float64(r.V)))
		near(t, "x", x, r.x, 5e-7)
		f := ObjPertBound(paperNode(C, B, rho, N, c1, r.V, rep(r.alpha, K), rep(1, K)))
		if !f.ConditionsHold {
			t.Fatalf("V=%d alpha=%v: conditions should hold: %s", r.V, r.alpha, f.Reason)
		}
		near(t, "beta", f.Epsilon, r.beta, 5e-7)
		near(t, "exact", f.Exact, r.exact, 5e-7)
		near(t, "guarantee", f.Guarantee(), r.beta, 5e-7)
		near(t, "noise+jacobian", f.NoisePart+f.JacobianPart, f.Epsilon, 1e-9)
		if f.Exact > f.Epsilon {
			t.Errorf("exact form %v exceeds the relaxed (32) form %v", f.Exact, f.Epsilon)
		}
	}
}

// TestTheoremV1Example2 checks digest 7.1 Example 2 (MR-ADMM, eta(2k-1) = 1.04^k, V = 2),
// including P(t) at t = 0, 1, 2, 3, 4, 49, 50.
func TestTheoremV1Example2(t *testing.T) {
	const N, C, rho, c1, K, B = 5, 1750.0, 0.22, 0.25, 25, 8000
	etas := make([]float64, K)
	for k := range etas {
		etas[k] = math.Pow(1.04, float64(k+1))
	}
	cases := []struct {
		alpha, beta, first, last float64
		P                        []float64
	}{
		{2, 22.468633, 0.911424, 0.889301, []float64{0, 0.911424, 0.911424, 1.82146, 1.82146, 22.468633, 22.468633}},
		{1, 11.531133, 0.473924, 0.451801, []float64{0, 0.473924, 0.473924, 0.94646, 0.94646, 11.531133, 11.531133}},
		{0.5, 6.062383, 0.255174, 0.233051, []float64{0, 0.255174, 0.255174, 0.50896, 0.50896, 6.062383, 6.062383}},
	}
	ts := []int{0, 1, 2, 3, 4, 49, 50}
	for _, c := range cases {
		net := ObjPertNetwork([]ObjPertNode{paperNode(C, B, rho, N, c1, 2, rep(c.alpha, K), etas)})
		if !net.ConditionsHold {
			t.Fatal(net.Reason)
		}
		f := net.PerNode[0]
		near(t, "beta", f.Epsilon, c.beta, 5e-7)
		near(t, "first", f.PerIteration[0], c.first, 5e-7)
		near(t, "last", f.PerIteration[K-1], c.last, 5e-7)
		for k, tt := range ts {
			near(t, "P(t)", net.PrivacyAt(SchemeRecycled, tt), c.P[k], 5e-6)
		}
	}
}

// TestTheoremV1Fig4Table checks digest 7.2: P(50) for eta(2k-1) = q^k, V = 2.
func TestTheoremV1Fig4Table(t *testing.T) {
	const N, C, rho, c1, K, B = 5, 1750.0, 0.22, 0.25, 25, 8000
	want := map[float64][]float64{ // R-ADMM(eta=1), q = 1.01..1.05
		2.0: {22.8216, 22.7099, 22.6159, 22.5363, 22.4686, 22.4108},
		1.0: {11.8841, 11.7724, 11.6784, 11.5988, 11.5311, 11.4733},
		0.5: {6.4154, 6.3037, 6.2096, 6.1301, 6.0624, 6.0046},
	}
	for alpha, w := range want {
		for qi, q := range []float64{1, 1.01, 1.02, 1.03, 1.04, 1.05} {
			etas := make([]float64, K)
			for k := range etas {
				etas[k] = math.Pow(q, float64(k+1))
			}
			f := ObjPertBound(paperNode(C, B, rho, N, c1, 2, rep(alpha, K), etas))
			near(t, "P(50)", f.Epsilon, w[qi], 5e-5)
		}
	}
	// Perturbing all 50 iterations the same way (conventional DVP accounting) doubles it.
	n := paperNode(C, B, rho, N, c1, 2, rep(1, 50), rep(1, 50))
	n.Scheme = SchemeDVP
	near(t, "all-50", ObjPertBound(n).Epsilon, 23.7682, 5e-5)
}

// TestTheoremV1Example3 checks digest 7.3: heterogeneous 4-node network and network max.
func TestTheoremV1Example3(t *testing.T) {
	const N, C, rho, c1, K = 4, 500.0, 0.5, 0.25, 10
	geo := func(e0, q float64) []float64 {
		out := make([]float64, K)
		for k := range out {
			out[k] = e0 * math.Pow(q, float64(k+1))
		}
		return out
	}
	a3 := make([]float64, K)
	for k := range a3 {
		a3[k] = 0.5 + 0.1*float64(k+1)
	}
	nodes := []ObjPertNode{
		paperNode(C, 5000, rho, N, c1, 1, rep(1, K), geo(0.5, 1.02)),
		paperNode(C, 10000, rho, N, c1, 2, rep(1, K), rep(1, K)),
		paperNode(C, 12000, rho, N, c1, 3, a3, geo(1, 1.05)),
		paperNode(C, 13000, rho, N, c1, 2, rep(2, K), rep(0.8, K)),
	}
	want := []struct{ first, beta, exact float64 }{
		{0.261135371, 2.565141160, 2.407812788},
		{0.108484848, 1.084848485, 1.060698074},
		{0.054539559, 0.911930675, 0.901396796},
		{0.161943320, 1.619433198, 1.596382228},
	}
	net := ObjPertNetwork(nodes)
	if !net.ConditionsHold {
		t.Fatal(net.Reason)
	}
	for i, w := range want {
		f := net.PerNode[i]
		near(t, "first", f.PerIteration[0], w.first, 5e-9)
		near(t, "beta", f.Epsilon, w.beta, 5e-9)
		near(t, "exact", f.Exact, w.exact, 5e-9)
	}
	near(t, "network", net.Guarantee(), 2.565141160, 5e-9)
	if net.Node != 0 {
		t.Errorf("worst node %d, want 0", net.Node)
	}
	// Hand check for node 3, k = 1 (digest 7.3).
	near(t, "hand", (1000.0/12000)*(0.6+0.35/6.425), net.PerNode[2].PerIteration[0], 1e-12)
}

// TestTheoremV1PreconditionFailures: every failed hypothesis is reported and the guarantee
// is refused.
func TestTheoremV1PreconditionFailures(t *testing.T) {
	// Digest 7.3: B = 100, C = 100, rho = 0.22, N = 5, eta = 0.1, V = 1: x = 1.0245901639.
	n := paperNode(100, 100, 0.22, 5, 0.25, 1, rep(1, 3), rep(0.1, 3))
	f := ObjPertBound(n)
	if f.ConditionsHold || !math.IsInf(f.Guarantee(), 1) || !strings.Contains(f.Reason, "1.02459") {
		t.Errorf("precondition failure not reported: hold=%v reason=%q", f.ConditionsHold, f.Reason)
	}
	if !math.IsInf(f.Exact, 1) {
		t.Errorf("exact form with x >= 1 should be +Inf, got %v", f.Exact)
	}
	base := paperNode(1750, 8000, 0.22, 5, 0.25, 2, rep(1, 5), rep(1, 5))
	if f := ObjPertBound(base); !f.ConditionsHold {
		t.Fatalf("base should hold: %s", f.Reason)
	}
	cases := []struct {
		name string
		mod  func(n *ObjPertNode)
		want string
	}{
		{"rownorm", func(n *ObjPertNode) { n.MaxRowNorm = 1.5 }, "not normalised"},
		{"labels", func(n *ObjPertNode) { n.LabelsPM1 = false }, "labels"},
		{"loss", func(n *ObjPertNode) { n.LossOK = false }, "loss"},
		{"inexact", func(n *ObjPertNode) { n.ExactSolves = false }, "exact"},
		{"iters", func(n *ObjPertNode) { n.FixedIters = false }, "iteration count"},
		{"decreasing", func(n *ObjPertNode) { n.Etas = []float64{1, 1, 0.9, 1, 1} }, "decreases"},
		{"noise off", func(n *ObjPertNode) { n.Alphas = rep(math.Inf(1), 5) }, "no noise"},
		{"alpha<=0", func(n *ObjPertNode) { n.Alphas = rep(0, 5) }, "alpha"},
		{"C>B", func(n *ObjPertNode) { n.C = 9000 }, "exceeds"},
	}
	for _, c := range cases {
		n := base
		n.Etas = append([]float64(nil), base.Etas...)
		c.mod(&n)
		f := ObjPertBound(n)
		if f.ConditionsHold || !strings.Contains(f.Reason, c.want) || !math.IsInf(f.Guarantee(), 1) {
			t.Errorf("%s: hold=%v reason=%q, want failure mentioning %q", c.name, f.ConditionsHold, f.Reason, c.want)
		}
		net := ObjPertNetwork([]ObjPertNode{base, n})
		if net.ConditionsHold || !strings.HasPrefix(net.Reason, "node 1:") {
			t.Errorf("%s: network should fail on node 1, got hold=%v reason=%q", c.name, net.ConditionsHold, net.Reason)
		}
	}
}

// TestPVPTerm checks the output-perturbation baseline: alpha * 2w/(r + 2 eta V), composed
// over every iteration.
func TestPVPTerm(t *testing.T) {
	n := paperNode(1750, 8000, 0.22, 5, 0.25, 2, rep(1, 4), rep(1, 4))
	n.Scheme = SchemePVP
	f := ObjPertBound(n)
	one := 1.0 * 2 * (1750.0 / 8000) / (0.22/5 + 4)
	near(t, "pvp", f.Epsilon, 4*one, 1e-12)
	if !f.ConditionsHold || f.Theorem != ConvTheoremPVP {
		t.Errorf("pvp: hold=%v theorem=%q reason=%q", f.ConditionsHold, f.Theorem, f.Reason)
	}
	net := ObjPertNetwork([]ObjPertNode{n})
	near(t, "P(2) pvp", net.PrivacyAt(SchemePVP, 2), 2*one, 1e-12)
}

// TestObjPertLedgerComposition: per-iteration entries compose to the theorem's total under
// the ledger's pure-DP curve (the first RDP order term is min(eps, a eps^2/2) per entry).
func TestObjPertLedgerComposition(t *testing.T) {
	f := ObjPertBound(paperNode(1750, 8000, 0.22, 5, 0.25, 2, rep(1, 25), rep(1, 25)))
	var es []Entry
	for k, e := range f.PerIteration {
		es = append(es, Entry{Seq: uint64(k + 1), Mechanism: MechPure, Epsilon: ObjPertEntryEpsilon(e, true)})
		es = append(es, Entry{Seq: uint64(k + 1), Mechanism: MechForward})
	}
	total := 0.0
	for _, e := range es {
		total += e.Epsilon
	}
	near(t, "ledger sum", total, f.Epsilon, 1e-9)
	c := LedgerCurve(es)
	last := len(Orders) - 1
	if c[last] > f.Epsilon+1e-9 || c[last] < 0 {
		t.Errorf("ledger curve at the largest order %v exceeds the pure-DP total %v", c[last], f.Epsilon)
	}
	if ObjPertEntryEpsilon(math.Inf(1), true) != math.MaxFloat64 || ObjPertEntryEpsilon(1, false) != math.MaxFloat64 {
		t.Error("entries without a guarantee must carry MaxFloat64")
	}
}
