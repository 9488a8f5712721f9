package walk

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
)

// gadmmCfg is a gradient-ADMM configuration for node i of n, with the node-level
// sensitivity 2 eta w C these tests compute by hand (TestGADMMRecordSensitivity: the
// record unit).
func gadmmCfg(i, n int, eta, beta, clip, sigma float64, reg consensus.Regularizer, seed uint64) Config {
	return Config{Node: i, Nodes: n, Gamma: 1, Lambda: 0.5, Clip: clip, Sigma: sigma, Reg: reg,
		Rand: rand.New(rand.NewPCG(seed, uint64(i))), Noise: privacy.NewSeededNoise(seed + uint64(i)), Run: "run",
		Step: StepParams{Kind: StepGADMM, Eta: eta, Beta: beta}, Unit: privacy.UnitNode}
}

// TestGADMMRecordSensitivity: under the record unit (the default) the gradient-ADMM
// sensitivity is eta times 2 c C, c = w/m the weight of one row (every example's gradient
// is clipped at C, so one replaced row moves grad f_i by at most 2 c C), m times below the
// node-level 2 eta w C; the ledger records it.
func TestGADMMRecordSensitivity(t *testing.T) {
	d, _ := consensus.SyntheticLogistic(30, 4, 2, 3)
	for _, unit := range []privacy.Unit{"", privacy.UnitNode} {
		cfg := gadmmCfg(0, 3, 0.5, 1, 0.8, 0.01, consensus.Regularizer{L2: 0.1}, 1)
		cfg.Unit = unit
		l, err := consensus.NewLocalLoss(d, consensus.Logistic, 1.5)
		if err != nil {
			t.Fatal(err)
		}
		st, err := GADMMCheck(cfg, l, d.Cols)
		if err != nil {
			t.Fatal(err)
		}
		want := 0.5 * 2 * 1.5 / float64(d.Rows) * 0.8
		if unit == privacy.UnitNode {
			want = 0.5 * 2 * 1.5 * 0.8
		}
		if math.Abs(st.Sensitivity-want) > 1e-12*want {
			t.Errorf("unit %q: sensitivity %v, want %v", unit, st.Sensitivity, want)
		}
	}
}

func gadmmMachine(t testing.TB, cfg Config, d *consensus.Dataset, loss consensus.Loss, w float64) *Machine {
	t.Helper()
	ll, err := consensus.NewLocalLoss(d, loss, w)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(cfg, ll, d.Cols)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// naiveGADMM is digest 2.2 for A = I, B = -I, c = 0, written out from the paper's general
// form: v = lambda - beta A x~; y = argmin g(y) + (beta/2)||B y - c - v/beta||^2 (elastic net:
// soft threshold); lambda' = lambda - beta (A x~ + B y - c); q = grad f(x~) with rows
// clipped; x = (I + eta beta A^T A)^-1 (x~ - eta (q + A^T (beta (B y - c) - lambda'))).
func naiveGADMM(x, lam []float64, rows [][]float64, ys []float64, weight, clip, eta, beta float64, l1, l2 float64) (xn, ln []float64) {
	p := len(x)
	y := make([]float64, p)
	ln = make([]float64, p)
	for k := range y {
		v := lam[k] - beta*x[k]
		// minimise l1|y| + (l2/2) y^2 + (beta/2)(-y - v/beta)^2 = ... + (beta/2)(y + v/beta)^2
		u := -v // = beta x - lambda; stationarity: l1 sign(y) + l2 y + beta y - u = 0
		switch {
		case u > l1:
			y[k] = (u - l1) / (beta + l2)
		case u < -l1:
			y[k] = (u + l1) / (beta + l2)
		}
		ln[k] = lam[k] - beta*(x[k]-y[k])
	}
	q := make([]float64, p)
	c := weight / float64(len(rows))
	for r, a := range rows {
		m, na := 0.0, 0.0
		for k := range a {
			m += a[k] * x[k]
			na += a[k] * a[k]
		}
		g := make([]float64, p)
		gn := 0.0
		for k := range a {
			g[k] = (m - ys[r]) * a[k]
			gn += g[k] * g[k]
		}
		sc := 1.0
		if gn = math.Sqrt(gn); gn > clip {
			sc = clip / gn
		}
		for k := range g {
			q[k] += c * sc * g[k]
		}
	}
	xn = make([]float64, p)
	for k := range xn {
		xn[k] = (x[k] - eta*(q[k]+(beta*(-y[k])-ln[k]))) / (1 + eta*beta)
	}
	return xn, ln
}

func shard(rows [][]float64, ys []float64) *consensus.Dataset {
	d := &consensus.Dataset{Name: "t", Rows: len(rows), Cols: len(rows[0]), Y: append([]float64(nil), ys...)}
	for _, r := range rows {
		d.X = append(d.X, r...)
	}
	return d
}

// TestGADMMOneStepAgainstNaive checks one noiseless step, with the elastic net and clipping
// active, against the paper's update written out independently, and one noisy step against
// the noiseless one plus the fixed noise (within the lattice rounding).
func TestGADMMOneStepAgainstNaive(t *testing.T) {
	rows := [][]float64{{0.3, -1.2, 0.5}, {2, 0.1, -0.4}, {-0.7, 0.9, 1.5}}
	ys := []float64{0.7, -3, 2}
	const eta, beta, clip, weight = 0.05, 1.3, 0.8, 1.7
	reg := consensus.Regularizer{L1: 0.05, L2: 0.2}
	x0 := []float64{1, -2, 0.5}
	l0 := []float64{0.3, 0.1, -0.2}
	wantX, wantL := naiveGADMM(x0, l0, rows, ys, weight, clip, eta, beta, reg.L1, reg.L2)
	for _, sigma := range []float64{0, 0.01} {
		cfg := gadmmCfg(1, 4, eta, beta, clip, sigma, reg, 3)
		cfg.Noise = &fixedNoise{}
		m := gadmmMachine(t, cfg, shard(rows, ys), consensus.Squared, weight)
		tok := Token{Run: "run", Z: append([]float64(nil), x0...), Zhat: append([]float64(nil), l0...)}
		if err := m.Step(Message{Token: tok}); err != nil {
			t.Fatal(err)
		}
		rd := m.Ready()
		out := rd.Outbox[0].Token
		noise := make([]float64, 3)
		(&fixedNoise{}).Normal(noise, sigma)
		h := privacy.Granularity(sigma)
		for k := range wantX {
			tol := 1e-12 + 2*h
			if d := out.Z[k] - (wantX[k] + noise[k]); math.Abs(d) > tol {
				t.Errorf("sigma %v: x~[%d] = %v, want %v + %v", sigma, k, out.Z[k], wantX[k], noise[k])
			}
			if math.Abs(out.Zhat[k]-wantL[k]) > 1e-12 {
				t.Errorf("sigma %v: lambda[%d] = %v, want %v", sigma, k, out.Zhat[k], wantL[k])
			}
			if sigma > 0 && out.Z[k]/h != math.Round(out.Z[k]/h) {
				t.Errorf("x~[%d] = %v is off the lattice %v", k, out.Z[k], h)
			}
		}
		e := rd.Ledger[0]
		if e.Mechanism != MechGADMM || e.Sensitivity != eta*2*weight*clip || e.Sigma != sigma || e.Validate() != nil {
			t.Errorf("ledger entry %+v", e)
		}
		if sigma > 0 {
			if c := e.Curve(); math.Abs(c[0]-privacy.GaussianCurve(eta*2*weight*clip, sigma)[0]) > 0 {
				t.Errorf("ledger curve %v", c[0])
			}
		}
	}
	// Clipping was active for some row (else the test would not exercise it).
	ll, _ := consensus.NewLocalLoss(shard(rows, ys), consensus.Squared, weight)
	g1, g2 := make([]float64, 3), make([]float64, 3)
	ll.Grad(g1, x0)
	ll.ClippedRowGrad(g2, x0, clip)
	if g1[0] == g2[0] {
		t.Fatal("test vector does not exercise clipping")
	}
}

// TestGADMMReducesToGD: with g = 0 and lambda0 = 0, y = x~ and lambda stays 0, and the step
// is gradient descent with step eta/(1 + eta beta) (digest 2.3).
func TestGADMMReducesToGD(t *testing.T) {
	rows := [][]float64{{0.3, -1.2}, {1, 0.4}}
	ys := []float64{1, -1}
	const eta, beta, weight = 0.3, 2.0, 1.0
	m := gadmmMachine(t, gadmmCfg(0, 1, eta, beta, math.Inf(1), 0, consensus.Regularizer{}, 1), shard(rows, ys), consensus.Logistic, weight)
	ll, _ := consensus.NewLocalLoss(shard(rows, ys), consensus.Logistic, weight)
	x := []float64{0.5, -0.25}
	tok := Token{Run: "run", Z: append([]float64(nil), x...), Zhat: make([]float64, 2)}
	g := make([]float64, 2)
	for h := 0; h < 50; h++ {
		ll.Grad(g, x)
		for k := range x {
			x[k] -= eta / (1 + eta*beta) * g[k]
		}
		if err := m.Step(Message{Token: tok}); err != nil {
			t.Fatal(err)
		}
		rd := m.Ready()
		m.Advance(rd)
		tok = rd.Outbox[0].Token
		for k := range x {
			if tok.Zhat[k] != 0 {
				t.Fatalf("hop %d: lambda = %v, want 0", h, tok.Zhat)
			}
			if math.Abs(tok.Z[k]-x[k]) > 1e-12 {
				t.Fatalf("hop %d: x~ = %v, GD gives %v", h, tok.Z, x)
			}
		}
	}
}

// TestGADMMConverges: 8 nodes, logistic loss with L2, no noise, no clipping, uniform random
// walk; the released model's objective comes within a relative 1e-3 of the reference
// optimum (FISTA on the pooled data). One node's gradient per hop is a stochastic gradient of
// the mean loss, so a constant step leaves a floor proportional to the effective step
// eta/(1 + eta beta): eta = 0.1/nu_max and beta eta = 3/2 (where C of Thm 6.1 is least)
// keep it near 4e-4 here (eta = 1/nu_max stalls near 2e-3).
func TestGADMMConverges(t *testing.T) {
	const n, p, hops = 8, 5, 30000
	d, _ := consensus.SyntheticLogistic(160, p, 3, 11)
	shards, err := consensus.Split(d, n, "iid", 5)
	if err != nil {
		t.Fatal(err)
	}
	reg := consensus.Regularizer{L2: 0.05}
	prob := consensus.Problem{Loss: consensus.Logistic, Reg: reg}
	_, opt, err := consensus.Solve(d, prob, consensus.SolveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	losses := make([]*consensus.LocalLoss, n)
	nu := 0.0
	for i, s := range shards {
		losses[i], err = consensus.NewLocalLoss(s, consensus.Logistic, float64(n)*float64(s.Rows)/float64(d.Rows))
		if err != nil {
			t.Fatal(err)
		}
		nu = math.Max(nu, losses[i].Smoothness())
	}
	eta := 0.1 / nu
	beta := 1.5 / eta
	ms := make([]*Machine, n)
	for i := range ms {
		if ms[i], err = New(gadmmCfg(i, n, eta, beta, math.Inf(1), 0, reg, 21), losses[i], p); err != nil {
			t.Fatal(err)
		}
	}
	tok := NewToken("run", 0, p, reg, 1)
	at := 0
	for h := 0; h < hops; h++ {
		if err := ms[at].Step(Message{Token: tok}); err != nil {
			t.Fatal(err)
		}
		rd := ms[at].Ready()
		ms[at].Advance(rd)
		tok, at = rd.Outbox[0].Token, rd.Outbox[0].To
	}
	got := prob.Objective(d, tok.Z)
	gap := (got - opt) / opt
	t.Logf("objective %v, optimum %v, relative gap %.3g (eta %v, beta %v)", got, opt, gap, eta, beta)
	if !(gap <= 1e-3) {
		t.Fatalf("relative gap %v > 1e-3", gap)
	}
}

// TestGADMMValidation: the refusals, each with its reason.
func TestGADMMValidation(t *testing.T) {
	rows := [][]float64{{3, 0}, {0, 1}}
	d := shard(rows, []float64{1, 2})
	ll, _ := consensus.NewLocalLoss(d, consensus.Squared, 1)
	nu := ll.Smoothness() // c ||A||^2 with c = 1/2; ||A||_2^2 = 9, Frobenius 10, Holder 3*3 = 9
	if want := 0.5 * 9; nu < want || nu > want*(1+1e-12) {
		t.Fatalf("smoothness %v, want %v", nu, want)
	}
	cases := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"eta 0", func(c *Config) { c.Step.Eta = 0 }, "eta must be > 0"},
		{"beta 0", func(c *Config) { c.Step.Beta = 0 }, "beta must be > 0"},
		{"sigma<0", func(c *Config) { c.Sigma = -1 }, "sigma"},
		{"eta > 1/nu", func(c *Config) { c.Step.Eta = 1.01 / nu }, "exceeds 1/nu"},
		{"strong no l2", func(c *Config) { c.Step.Strong = true }, "needs an L2 regularizer"},
		{"strong outside", func(c *Config) { c.Step.Strong = true; c.Reg.L2 = 0.2; c.Step.Eta = 0.01 }, "outside interval (23)"},
	}
	for _, tc := range cases {
		cfg := gadmmCfg(0, 2, 1/nu, 1, 1, 0, consensus.Regularizer{}, 1)
		tc.mod(&cfg)
		_, err := New(cfg, ll, 2)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to mention %q", tc.name, err, tc.want)
		}
		if _, err2 := GADMMCheck(cfg, ll, 2); err2 == nil || (!errors.Is(err2, ErrGADMMParams) && !strings.Contains(err2.Error(), "sigma")) {
			t.Errorf("%s: GADMMCheck error %v", tc.name, err2)
		}
	}
	// Inside the interval (the midpoint) the strong mode is accepted.
	cfg := gadmmCfg(0, 2, 1, 1, 1, 0, consensus.Regularizer{L2: 0.2}, 1)
	cfg.Step.Strong = true
	mid, err := privacy.GADMMMidpoint(nu+0.1, 0.1, 0.1, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Step.Eta = mid
	st, err := GADMMCheck(cfg, ll, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !(st.Strong.Contraction > 0 && st.Strong.Contraction < 1) || st.Mu != 0.1 || st.MuG != 0.1 || st.G.L2 != 0.1 {
		t.Errorf("strong setting %+v", st)
	}
}

// TestGADMMInvariants runs random configurations and tokens and checks: a non-finite token
// is refused with nothing written; a noisy release lies on the lattice; lambda' is the
// data-free function of the received token; two neighbouring shards (every row changed)
// given the same noise release models within eta Delta of each other (the lattice rounding
// is absorbed by the reduced clip); the same seeds give the same bits.
func TestGADMMInvariants(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	for it := 0; it < 600; it++ {
		p := 1 + r.IntN(6)
		nr := 1 + r.IntN(4)
		mk := func() *consensus.Dataset {
			rows := make([][]float64, nr)
			ys := make([]float64, nr)
			for i := range rows {
				rows[i] = make([]float64, p)
				for k := range rows[i] {
					rows[i][k] = r.NormFloat64() * math.Exp(3*r.NormFloat64())
				}
				ys[i] = r.NormFloat64() * 10
			}
			return shard(rows, ys)
		}
		d1, d2 := mk(), mk()
		weight := math.Exp(r.NormFloat64())
		sigma := []float64{0, 1e-3, 0.3, 5}[r.IntN(4)]
		clip := math.Exp(2 * r.NormFloat64())
		reg := consensus.Regularizer{L1: r.Float64() * 0.1, L2: r.Float64()}
		l1, _ := consensus.NewLocalLoss(d1, consensus.Squared, weight)
		l2, _ := consensus.NewLocalLoss(d2, consensus.Squared, weight)
		nu := math.Max(l1.Smoothness(), l2.Smoothness())
		eta := r.Float64() / nu
		beta := math.Exp(r.NormFloat64())
		if sigma > 0 && it%3 == 0 {
			// A clip a few lattice steps wide: the rounding onto the lattice is then a
			// large part of the sensitivity, and only the reduced clip keeps it in bounds.
			clip = privacy.Granularity(sigma) * math.Sqrt(float64(p)) / (2 * weight * eta) * (1.01 + 3*r.Float64())
		}
		cfg := gadmmCfg(0, 3, eta, beta, clip, sigma, reg, uint64(it))
		cfg.Noise = &fixedNoise{}
		m1, err1 := New(cfg, l1, p)
		cfg.Noise = &fixedNoise{}
		m2, err2 := New(cfg, l2, p)
		if err1 != nil || err2 != nil {
			if eta == 0 {
				continue
			}
			t.Fatalf("iteration %d: %v %v", it, err1, err2)
		}
		z := make([]float64, p)
		lam := make([]float64, p)
		for k := range z {
			z[k] = r.NormFloat64() * 3
			lam[k] = r.NormFloat64()
		}
		if r.IntN(5) == 0 { // a bad token
			bad := append([]float64(nil), z...)
			bad[r.IntN(p)] = []float64{math.NaN(), math.Inf(1), math.Inf(-1)}[r.IntN(3)]
			tok := Token{Run: "run", Z: bad, Zhat: append([]float64(nil), lam...)}
			if err := m1.Step(Message{Token: tok}); !errors.Is(err, ErrNotFinite) || m1.HasReady() || m1.Updates() != 0 {
				t.Fatalf("iteration %d: bad token: %v", it, err)
			}
			for k := range lam {
				if tok.Zhat[k] != lam[k] {
					t.Fatalf("iteration %d: refused token was written", it)
				}
			}
		}
		out := func(m *Machine) Token {
			tok := Token{Run: "run", Z: append([]float64(nil), z...), Zhat: append([]float64(nil), lam...)}
			if err := m.Step(Message{Token: tok}); err != nil {
				t.Fatalf("iteration %d: %v", it, err)
			}
			rd := m.Ready()
			m.Advance(rd)
			return rd.Outbox[0].Token
		}
		o1, o2 := out(m1), out(m2)
		wantL := make([]float64, p)
		y := make([]float64, p)
		GADMMY(y, z, lam, reg, beta, false)
		diff := 0.0
		for k := range z {
			wantL[k] = lam[k] - beta*(z[k]-y[k])
			if o1.Zhat[k] != wantL[k] || o2.Zhat[k] != wantL[k] {
				t.Fatalf("iteration %d: lambda' %v / %v, want %v", it, o1.Zhat, o2.Zhat, wantL)
			}
			if h := privacy.Granularity(sigma); sigma > 0 && math.Abs(o1.Z[k]) < 0x1p52*h && o1.Z[k]/h != math.Round(o1.Z[k]/h) {
				t.Fatalf("iteration %d: x~ %v off the lattice %v", it, o1.Z[k], h)
			}
			dd := math.Abs(o1.Z[k] - o2.Z[k])
			// Beyond 2^53 lattice steps the final sum P + N rounds (a function of P and N).
			dd = math.Max(0, dd-2*ulp(math.Max(math.Abs(o1.Z[k]), math.Abs(o2.Z[k]))))
			diff += dd * dd
		}
		if sens := eta * 2 * weight * clip; sigma > 0 && math.Sqrt(diff) > sens {
			t.Fatalf("iteration %d: neighbouring releases %v apart, sensitivity %v (sigma %v)", it, math.Sqrt(diff), sens, sigma)
		}
		cfg.Noise = &fixedNoise{}
		m3, _ := New(cfg, l1, p)
		o3 := out(m3)
		for k := range z {
			if math.Float64bits(o3.Z[k]) != math.Float64bits(o1.Z[k]) {
				t.Fatalf("iteration %d: not deterministic", it)
			}
		}
	}
}

// ulp returns the spacing of the floats at x.
func ulp(x float64) float64 { return math.Nextafter(x, math.Inf(1)) - x }

// TestGADMMNonExpansion checks the machine's step against the geometry of the paper's
// analysis (digest 6, property (i)): one noiseless step with the same data on two tokens
// does not expand ||(x, lambda)||_*^2 = ||x||^2 + (eta/beta) ||lambda - beta x||^2 in the
// convex mode (Lemma 6.5), and contracts R ||x||^2 + (eta/beta) ||lambda - beta x||^2 by the
// factor L in the strongly convex mode with half of L2 in the local function (Lemma 7.6),
// while the Euclidean distance can grow.
func TestGADMMNonExpansion(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 8))
	maxEuclid := 0.0
	for it := 0; it < 400; it++ {
		p, nr := 1+r.IntN(5), 1+r.IntN(4)
		rows := make([][]float64, nr)
		ys := make([]float64, nr)
		for i := range rows {
			rows[i] = make([]float64, p)
			for k := range rows[i] {
				rows[i][k] = r.NormFloat64()
			}
			ys[i] = r.NormFloat64() * 3
		}
		loss := consensus.Loss(r.IntN(2))
		if loss == consensus.Logistic {
			for i := range ys {
				ys[i] = float64(2*r.IntN(2) - 1)
			}
		}
		ll, err := consensus.NewLocalLoss(shard(rows, ys), loss, math.Exp(r.NormFloat64()))
		if err != nil {
			t.Fatal(err)
		}
		strong := it%2 == 1
		reg := consensus.Regularizer{L1: 0.1 * r.Float64(), L2: r.Float64()}
		beta := math.Exp(r.NormFloat64())
		nu := ll.Smoothness()
		eta := r.Float64() / nu
		var k privacy.GADMMStrongConstants
		if strong {
			lo, hi, err := privacy.GADMMInterval(nu+reg.L2/2, reg.L2/2, reg.L2/2, beta, 1)
			if err != nil {
				t.Fatal(err)
			}
			eta = lo + (hi-lo)*(0.05+0.9*r.Float64())
		}
		cfg := gadmmCfg(0, 2, eta, beta, []float64{math.Inf(1), 0.5}[r.IntN(2)], 0, reg, 1)
		cfg.Step.Strong = strong
		m, err := New(cfg, ll, p)
		if err != nil {
			t.Fatalf("iteration %d: %v", it, err)
		}
		if strong {
			k = m.gd.Strong
		}
		step := func(x, l []float64) ([]float64, []float64) {
			tok := Token{Run: "run", Z: append([]float64(nil), x...), Zhat: append([]float64(nil), l...)}
			if err := m.Step(Message{Token: tok}); err != nil {
				t.Fatal(err)
			}
			rd := m.Ready()
			m.Advance(rd)
			return rd.Outbox[0].Token.Z, rd.Outbox[0].Token.Zhat
		}
		vec := func() []float64 {
			v := make([]float64, p)
			for j := range v {
				v[j] = r.NormFloat64() * 2
			}
			return v
		}
		x1, l1, x2, l2 := vec(), vec(), vec(), vec()
		if r.IntN(2) == 0 {
			copy(l2, l1) // same lambda (Thm 6.1's inputs)
		}
		wR := 1.0
		if strong {
			wR = k.R
		}
		norm := func(x1, l1, x2, l2 []float64) (star, euclid float64) {
			for j := range x1 {
				dx, dl := x1[j]-x2[j], l1[j]-l2[j]
				star += wR*dx*dx + eta/beta*(dl-beta*dx)*(dl-beta*dx)
				euclid += dx*dx + dl*dl
			}
			return
		}
		s0, e0 := norm(x1, l1, x2, l2)
		y1, m1 := step(x1, l1)
		y2, m2 := step(x2, l2)
		s1, e1 := norm(y1, m1, y2, m2)
		bound := 1.0
		if strong {
			bound = k.Contraction
		}
		if s1 > bound*s0*(1+1e-9)+1e-12 {
			t.Fatalf("iteration %d (strong %v, loss %v): ||.||_*^2 went from %v to %v, factor %v > %v", it, strong, loss, s0, s1, s1/s0, bound)
		}
		maxEuclid = math.Max(maxEuclid, e1/e0)
	}
	if !(maxEuclid > 1) {
		t.Errorf("the Euclidean distance never grew (max ratio %v): the custom norm test is vacuous", maxEuclid)
	}
	t.Logf("largest Euclidean ratio %v", maxEuclid)
}

// TestGADMMBudgetCap: the cap is the largest K whose local figure fits the budget, checked
// by evaluating K and K+1 directly.
func TestGADMMBudgetCap(t *testing.T) {
	p := privacy.GADMMParams{Eta: 0.25, Beta: 6, Sigma: 0.5, Sensitivity: 0.5, Nu: 4}
	for _, eps := range []float64{0.5, 2, 10, 100} {
		b := Budget{Kind: BudgetNetwork, Epsilon: eps, Delta: 1e-5}
		k, err := GADMMBudgetCap(b, p)
		if err != nil {
			t.Fatal(err)
		}
		at := func(k int) float64 { e, _ := privacy.ToDP(privacy.GADMMLocalCurve(p, k), 1e-5); return e }
		if k > 0 && at(k) > eps || at(k+1) <= eps {
			t.Errorf("eps %v: cap %d, figures %v at K and %v at K+1", eps, k, at(k), at(k+1))
		}
	}
	if k, _ := GADMMBudgetCap(Budget{Kind: BudgetLocal, Epsilon: 1, Delta: 1e-5}, privacy.GADMMParams{Sensitivity: 1}); k != 0 {
		t.Errorf("sigma 0: cap %d", k)
	}
}
