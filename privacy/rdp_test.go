package privacy

import (
	"math"
	"math/rand/v2"
	"testing"
)

// digestAlphas is the order grid of the digest's section 7 script (ALPHAS).
func digestAlphas() []float64 {
	var o []float64
	for x := 1; x < 100; x++ {
		o = append(o, 1+float64(x)/10)
	}
	for a := 12; a < 64; a++ {
		o = append(o, float64(a))
	}
	return append(o, 64, 80, 96, 128, 160, 192, 256, 384, 512, 1024)
}

func relClose(got, want, tol float64) bool {
	return math.Abs(got-want) <= tol*math.Abs(want)
}

func orderIndex(t *testing.T, a float64) int {
	t.Helper()
	for k, o := range Orders {
		if o == a {
			return k
		}
	}
	t.Fatalf("order %v not in Orders", a)
	return -1
}

func TestOrdersGrid(t *testing.T) {
	if Orders[0] != 1.01 || Orders[len(Orders)-1] != 1<<20 {
		t.Fatalf("grid ends %v..%v", Orders[0], Orders[len(Orders)-1])
	}
	for k := 1; k < len(Orders); k++ {
		if !(Orders[k] > Orders[k-1]) {
			t.Fatalf("grid not increasing at %d: %v then %v", k, Orders[k-1], Orders[k])
		}
	}
	for _, a := range []float64{1.05, 1.1, 5.5, 10.5, 10.9, 12, 63, 64, 128, 512} {
		orderIndex(t, a)
	}
}

// Ex1 of the digest (section 7): Theorem 4 as printed, n=100, K_i=10, L*gamma=0.1.
func TestGoldenEx1Printed(t *testing.T) {
	if got := thm4PrintedValue(8, 100, 10, 0.1, 1); !relClose(got, 0.2947308919032379, 1e-12) {
		t.Errorf("printed eps_RDP(8) = %v, want 0.2947308919032379", got)
	}
	grid := digestAlphas()
	c := theorem4On(grid, 100, 10, 0.1, 1, true)
	eps, a := toDPOn(grid, c, 1e-5, true)
	if !relClose(eps, 2.761055369287971, 1e-12) || a != 5.5 {
		t.Errorf("sigma=1 enforced: (%v, %v), want (2.761055369287971, 5.5)", eps, a)
	}
	// The condition fails at alpha = 8 (sigma = 1 < 1.4967).
	if k := orderIndex(t, 8); !math.IsInf(Theorem4PrintedCurve(100, 10, 0.1, 1)[k], 1) {
		t.Error("printed curve finite at alpha=8 although the condition fails")
	}
	c2 := theorem4On(grid, 100, 10, 0.1, 2, true)
	eps, a = toDPOn(grid, c2, 1e-5, true)
	if !relClose(eps, 1.3085954649552476, 1e-12) || a != 10.5 {
		t.Errorf("sigma=2 enforced: (%v, %v), want (1.3085954649552476, 10.5)", eps, a)
	}
	if k := orderIndex(t, 8); !relClose(Theorem4PrintedCurve(100, 10, 0.1, 2)[k], 0.07368272297580948, 1e-12) {
		t.Errorf("sigma=2 eps_RDP(8) = %v", Theorem4PrintedCurve(100, 10, 0.1, 2)[k])
	}
}

// Ex1c: conservative corrected form, n=100, K_i=10, C=0.1, sigma=2.
func TestGoldenEx1cConservative(t *testing.T) {
	c := Theorem4Curve(100, 10, 0.1, 2)
	for _, tc := range []struct{ a, want float64 }{{2, 0.019351}, {4, 0.046145}, {6, 0.089312}} {
		if got := c[orderIndex(t, tc.a)]; math.Abs(got-tc.want) > 5e-7 {
			t.Errorf("alpha=%v: conservative %v, want %v", tc.a, got, tc.want)
		}
	}
	if got := c[orderIndex(t, 8)]; !math.IsInf(got, 1) {
		t.Errorf("alpha=8 (c=1.12>1): got %v, want +Inf", got)
	}
	// Conservative >= printed wherever both are finite.
	p := Theorem4PrintedCurve(100, 10, 0.1, 2)
	for k := range c {
		if !math.IsInf(c[k], 1) && !math.IsInf(p[k], 1) && c[k] < p[k] {
			t.Errorf("alpha=%v: conservative %v < printed %v", Orders[k], c[k], p[k])
		}
	}
}

// Ex4: sum_k (1/n)(1-1/n)^(k-1)/k = ln(n)/(n-1).
func TestGoldenEx4Geometric(t *testing.T) {
	for _, n := range []int{10, 100, 1000} {
		var s float64
		q := 1 - 1/float64(n)
		p := 1.0
		for k := 1; k < 300000; k++ {
			s += p / float64(n) / float64(k)
			p *= q
		}
		if !relClose(GeometricFactor(n), s, 1e-9) {
			t.Errorf("n=%d: GeometricFactor %v, series %v", n, GeometricFactor(n), s)
		}
	}
	want := map[int]float64{10: 0.255843, 100: 0.046517, 1000: 0.006915}
	for _, n := range []int{10, 100, 1000} {
		if math.Abs(GeometricFactor(n)-want[n]) > 5e-7 {
			t.Errorf("n=%d: %v, want %v", n, GeometricFactor(n), want[n])
		}
	}
}

// Ex5: realised path, n=4, alpha=4, C=0.1, sigma=1, e1 = 8*4*0.01 = 0.32. Observer 1 views
// at steps 3, 7, 10; node 0's updates fall in three segments: (2, 0, 3) costs 1/2 (minorant
// (1,0)->(3,1)), (0, 0, 2) costs 4/3 (one chord (0,0)->(3,2)), (3, 0) costs 1. The digest's
// per-update figure 0.32*(1/2+1/3+1/2+1) = 0.746667 charged the two consecutive updates of
// node 0 separately; jointly they cost 4/3, not 1/3+1/2.
func TestGoldenEx5RealizedPath(t *testing.T) {
	path := []int{2, 0, 3, 1, 0, 0, 2, 1, 3, 0, 1, 2}
	k := orderIndex(t, 4)
	want := 0.32 * (1.0/2 + 4.0/3 + 1)
	if got := RealizedPathCurve(path, 0, 1, 0.1, 1, false)[k]; !relClose(got, want, 1e-12) {
		t.Errorf("realised path = %v, want %v", got, want)
	}
	if got := WalkLocalCurve(0.1, 1, 4)[k]; !relClose(got, 1.28, 1e-12) {
		t.Errorf("local = %v, want 1.28", got)
	}
	if got := Theorem4PrintedCurve(4, 4, 0.1, 1)[k]; !relClose(got, 0.44361419555836507, 1e-12) {
		t.Errorf("printed Thm 4 = %v, want 0.443614", got)
	}
	// Final release: the last contribution of i (step 9) is observed at step 10 anyway;
	// use a path whose last update by i is unobserved: after the view at step 10 come
	// node 2's update then node 0's, seen in the final model: staircase 0,0,1, cost 1, so
	// 0.32 extra.
	p2 := append(append([]int{}, path...), 0)
	a := RealizedPathCurve(p2, 0, 1, 0.1, 1, false)[k]
	b := RealizedPathCurve(p2, 0, 1, 0.1, 1, true)[k]
	if !relClose(a, want, 1e-12) || !relClose(b-a, 0.32, 1e-12) {
		t.Errorf("final release: %v then %v", a, b)
	}
}

// Ex2 (Theorem 2) exercises GaussianCurve composition and the classic conversion on the
// digest grid: eps_RDP(alpha) = 8*alpha*K*L^2*gamma^2/(sigma^2 n^2), n=1000, K=100.
func TestGoldenEx2Composition(t *testing.T) {
	grid := digestAlphas()
	one := gaussianOn(grid, 4.0/1000, 1) // sensitivity 4 L gamma / n, noise sigma
	c := make(Curve, len(grid))
	for k := range c {
		c[k] = 100 * one[k]
	}
	eps, a := toDPOn(grid, c, 1e-5, true)
	if !relClose(eps, 0.19305295641708842, 1e-12) || a != 128 {
		t.Errorf("Ex2 (1e-5): (%v, %v)", eps, a)
	}
	eps, a = toDPOn(grid, c, 1e-6, true)
	if !relClose(eps, 0.2111835477005061, 1e-12) || a != 128 {
		t.Errorf("Ex2 (1e-6): (%v, %v)", eps, a)
	}
}

func TestCompositionInvariants(t *testing.T) {
	one := WalkUpdateCurve(0.5, 3)
	sum := Curve(nil)
	for i := 0; i < 7; i++ {
		sum = sum.Add(one)
	}
	scaled := one.Scale(7)
	local := WalkLocalCurve(0.5, 3, 7)
	es := make([]Entry, 7)
	for i := range es {
		es[i] = Entry{Seq: uint64(i), Mechanism: MechGaussian, Sensitivity: 4 * 0.7 * 0.5, Sigma: 0.7 * 3, Lambda: 0.7, Clip: 0.5}
	}
	es = append(es, Entry{Mechanism: MechForward})
	led := LedgerCurve(es)
	for k := range Orders {
		for _, v := range []float64{scaled[k], local[k], led[k]} {
			if !relClose(v, sum[k], 1e-12) {
				t.Fatalf("alpha=%v: compositions disagree: %v vs %v", Orders[k], v, sum[k])
			}
		}
	}
	// The zero curve (no data use) converts to exactly 0; see TestToDPZeroCurve.
	if e, _ := ToDP(Curve(nil), 1e-5); e != 0 {
		t.Errorf("zero curve gives %v", e)
	}
	if e, _ := ToDP(GaussianCurve(1, 0), 1e-5); !math.IsInf(e, 1) {
		t.Errorf("sigma=0 gives eps %v, want +Inf", e)
	}
	if c := GaussianCurve(1, math.NaN()); !math.IsInf(c[0], 1) {
		t.Errorf("NaN sigma gives %v", c[0])
	}
}

func TestConversions(t *testing.T) {
	for _, s := range []float64{0.5, 1, 4, 30} {
		c := GaussianCurve(1, s)
		for _, d := range []float64{1e-3, 1e-5, 1e-9} {
			e, a := ToDP(c, d)
			ec, _ := ToDPClassic(c, d)
			if !(e <= ec) || e < 0 {
				t.Errorf("sigma=%v delta=%v: tight %v > classic %v", s, d, e, ec)
			}
			// Independent evaluation of the tight formula at the returned order.
			k := orderIndex(t, a)
			want := math.Max(0, c[k]+math.Log1p(-1/a)-(math.Log(d)+math.Log(a))/(a-1))
			if !relClose(e, want, 1e-12) {
				t.Errorf("tight conversion %v, recomputed %v", e, want)
			}
			// Smaller delta must cost more.
			e2, _ := ToDP(c, d/10)
			if !(e2 > e) {
				t.Errorf("eps not decreasing in delta")
			}
		}
	}
	for _, d := range []float64{0, 1, -1, math.NaN()} {
		if e, _ := ToDP(GaussianCurve(1, 1), d); !math.IsInf(e, 1) {
			t.Errorf("delta %v: eps %v, want +Inf", d, e)
		}
		if _, _, err := ToDPChecked(GaussianCurve(1, 1), d); err == nil {
			t.Errorf("delta %v accepted", d)
		}
	}
	if _, _, err := ToDPChecked(InfCurve(), 1e-5); err == nil {
		t.Error("infinite curve accepted")
	}
	// Known value: Gaussian mechanism, sensitivity 1, sigma 1, delta 1e-5, classic
	// conversion optimum over continuous alpha is rho + 2 sqrt(rho ln(1/delta)), rho=1/2;
	// the grid optimum is within 1e-3 of it and never below.
	ec, _ := ToDPClassic(GaussianCurve(1, 1), 1e-5)
	cf := 0.5 + 2*math.Sqrt(0.5*math.Log(1e5))
	if ec < cf-1e-12 || ec > cf+1e-3 {
		t.Errorf("classic %v vs closed form %v", ec, cf)
	}
}

// renyiGaussQuad computes D_alpha(N(0,s^2) || N(d,s^2)) by composite Simpson quadrature
// (n even intervals) of p^alpha q^(1-alpha) in log space, independently of the closed form.
func renyiGaussQuad(alpha, d, s float64, n int) float64 {
	logp := func(x float64) float64 { return -x * x / (2 * s * s) }
	logq := func(x float64) float64 { return -(x - d) * (x - d) / (2 * s * s) }
	f := func(x float64) float64 { return alpha*logp(x) + (1-alpha)*logq(x) }
	// Locate the maximum of f numerically (golden-section on a wide bracket).
	lo, hi := -1e3*(math.Abs(d)+s)*alpha, 1e3*(math.Abs(d)+s)*alpha
	for i := 0; i < 300; i++ {
		m1, m2 := lo+(hi-lo)*0.382, lo+(hi-lo)*0.618
		if f(m1) < f(m2) {
			lo = m1
		} else {
			hi = m2
		}
	}
	mu := (lo + hi) / 2
	fmax := f(mu)
	a, b := mu-40*s, mu+40*s
	h := (b - a) / float64(n)
	sum := 0.0
	for i := 0; i <= n; i++ {
		w := 2.0
		if i == 0 || i == n {
			w = 1
		} else if i%2 == 1 {
			w = 4
		}
		sum += w * math.Exp(f(a+float64(i)*h)-fmax)
	}
	integral := sum * h / 3
	// Normalisation of p and q: 1/(s sqrt(2 pi)) each, and p^alpha q^(1-alpha) carries one.
	logI := math.Log(integral) + fmax - math.Log(s*math.Sqrt(2*math.Pi))
	return logI / (alpha - 1)
}

func TestGaussianCurveAgainstQuadrature(t *testing.T) {
	cases := []struct{ d, s float64 }{{1, 1}, {0.4, 1}, {0.1, 0.3}, {2, 5}, {0.05, 0.02}}
	alphas := []float64{1.01, 1.5, 2, 5.5, 10, 32, 64}
	for _, tc := range cases {
		c := GaussianCurve(tc.d, tc.s)
		for _, a := range alphas {
			got := c[orderIndex(t, a)]
			ref := renyiGaussQuad(a, tc.d, tc.s, 40000)
			if !relClose(got, ref, 1e-6) {
				t.Errorf("d=%v s=%v alpha=%v: curve %v, quadrature %v", tc.d, tc.s, a, got, ref)
			}
			if got < ref*(1-1e-9) {
				t.Errorf("d=%v s=%v alpha=%v: curve under-reports: %v < %v", tc.d, tc.s, a, got, ref)
			}
		}
	}
}

// PureDPCurve must upper-bound the exact RDP of randomized response, a concrete eps-DP
// mechanism: P = (p, 1-p), Q = (1-p, p), p = e^eps/(1+e^eps).
func TestPureDPCurveDominatesRandomizedResponse(t *testing.T) {
	for _, eps := range []float64{0.01, 0.1, 0.5, 1, 2, 5} {
		c := PureDPCurve(eps)
		p := 1 / (1 + math.Exp(-eps))
		q := 1 - p
		for k, a := range Orders {
			x, y := a*math.Log(p)+(1-a)*math.Log(q), a*math.Log(q)+(1-a)*math.Log(p)
			m := math.Max(x, y)
			rr := (m + math.Log(math.Exp(x-m)+math.Exp(y-m))) / (a - 1)
			if c[k] < rr*(1-1e-12) {
				t.Errorf("eps=%v alpha=%v: PureDPCurve %v < randomized response %v", eps, a, c[k], rr)
			}
			if c[k] > eps*(1+1e-15) {
				t.Errorf("eps=%v alpha=%v: curve %v exceeds eps", eps, a, c[k])
			}
		}
	}
	if c := PureDPCurve(-1); !math.IsInf(c[0], 1) {
		t.Error("negative eps accepted")
	}
}

func TestCalibrateSigma(t *testing.T) {
	curve := func(s float64) Curve { return Theorem4Curve(100, 10, 0.1, s) }
	s, err := CalibrateSigma(1, 1e-5, curve)
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := ToDP(curve(s), 1e-5); e > 1 {
		t.Errorf("calibrated sigma %v gives eps %v > 1", s, e)
	}
	if e, _ := ToDP(curve(s*(1-1e-6)), 1e-5); e <= 1 {
		t.Errorf("sigma %v is not the smallest: %v", s, e)
	}
	if _, err := CalibrateSigma(0, 1e-5, curve); err == nil {
		t.Error("target 0 accepted")
	}
	if _, err := CalibrateSigma(1, 2, curve); err == nil {
		t.Error("delta 2 accepted")
	}
	if _, err := CalibrateSigma(1, 1e-5, func(float64) Curve { return InfCurve() }); err == nil {
		t.Error("unreachable target accepted")
	}
}

func TestBounds(t *testing.T) {
	b := Theorem4Bound(100, 10, 0.1, 2, 1e-5)
	if !b.ConditionsHold || b.Theorem != Theorem4Name || b.Conditions == "" || b.Note == "" || math.IsInf(b.Epsilon, 1) {
		t.Errorf("bound %+v", b)
	}
	loc := LocalBound(0.1, 2, 10, 1e-5)
	if !(b.Epsilon < loc.Epsilon) {
		t.Errorf("network bound %v not below local %v", b.Epsilon, loc.Epsilon)
	}
	// sigma so small that c > 1 at every order (alpha >= 1.01): c(1.01) = 0.01*8*1.01*C^2/sigma^2.
	bad := Theorem4Bound(100, 10, 1, 0.05, 1e-5)
	if bad.ConditionsHold || bad.Note == "" {
		t.Errorf("failing conditions not reported: %+v", bad)
	}
	if want := LocalBound(1, 0.05, 10, 1e-5); bad.Epsilon != want.Epsilon {
		t.Errorf("fallback eps %v, want local %v", bad.Epsilon, want.Epsilon)
	}
	if c := Theorem4Curve(1, 10, 0.1, 1); !math.IsInf(c[0], 1) {
		t.Error("n=1 gives a finite curve")
	}
}

// TestGaussianCurveNeverUnderReports is a randomized property test: for 400 random
// (order, sensitivity, sigma) the closed form is never below the quadrature reference.
func TestGaussianCurveNeverUnderReports(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	under := 0
	for i := 0; i < 400; i++ {
		k := r.IntN(len(Orders))
		a := Orders[k]
		if a > 200 {
			continue // the integrand is too peaked for the fixed-grid reference
		}
		s := math.Exp(r.Float64()*6 - 3)
		d := s * math.Exp(r.Float64()*5-4) // ratio d/s in [e^-4, e]
		got := GaussianCurve(d, s)[k]
		ref := renyiGaussQuad(a, d, s, 4000)
		if got < ref*(1-1e-9) {
			under++
			t.Errorf("alpha=%v d=%v s=%v: %v < reference %v", a, d, s, got, ref)
		}
		if !relClose(got, ref, 1e-6) {
			t.Errorf("alpha=%v d=%v s=%v: %v vs reference %v", a, d, s, got, ref)
		}
	}
	if under != 0 {
		t.Errorf("%d under-reports", under)
	}
}

// TestToDPZeroCurve: a curve that is exactly 0 at some order converts to epsilon 0 at
// every valid delta (D_alpha = 0 means identical distributions), while the formula alone
// would leave its grid-limited term, ln(1023/1024) - (ln(delta) + ln(1024))/1023 at the
// largest order (about 0.0035 at delta 1e-5), which a positive curve still pays.
func TestToDPZeroCurve(t *testing.T) {
	partial := WalkUpdateCurve(1, 1)
	partial[5] = 0
	halfInf := InfCurve()
	halfInf[0] = 0 // zero at one order, no bound elsewhere
	for _, d := range []float64{1e-9, 1e-5, 0.3} {
		for name, c := range map[string]Curve{
			"nil": nil, "zeros": ZeroCurve(), "zero at one order": partial, "zero and +Inf": halfInf,
			"no updates": WalkLocalCurve(1, 1, 0), "Theorem 4, no updates": Theorem4Curve(10, 0, 1, 0.5),
			"scaled by 0": WalkUpdateCurve(1, 1).Scale(0), "forward entries": LedgerCurve([]Entry{{Mechanism: MechForward}}),
		} {
			if e, a := ToDP(c, d); e != 0 || !(a > 1) {
				t.Errorf("delta %v, %s: ToDP (%v, %v), want 0", d, name, e, a)
			}
			if e, _ := ToDPClassic(c, d); e != 0 {
				t.Errorf("delta %v, %s: ToDPClassic %v, want 0", d, name, e)
			}
		}
		if b := LocalBound(1, 1, 0, d); b.Epsilon != 0 || !b.ConditionsHold {
			t.Errorf("delta %v: local bound with no updates %+v", d, b)
		}
		if b := Theorem4Bound(10, 0, 1, 0.5, d); b.Epsilon != 0 || !b.ConditionsHold {
			t.Errorf("delta %v: Theorem 4 bound with no updates %+v", d, b)
		}
		if d > 0.01 {
			continue // the formula is clamped at 0 there anyway
		}
		// A tiny positive curve keeps the formula's own value, minimised over the top of the
		// grid (powers of two from 1024 to 2^20) and clamped at 0.
		tiny := constCurve(1e-300)
		want, wantA := math.Inf(1), 0.0
		for a := 1024.0; a <= 1<<20; a *= 2 {
			if v := math.Max(0, math.Log((a-1)/a)-(math.Log(d)+math.Log(a))/(a-1)); v < want {
				want, wantA = v, a
			}
		}
		if e, a := ToDP(tiny, d); (want > 0 && (a != wantA || !relClose(e, want, 1e-9))) || (want == 0 && e != 0) {
			t.Errorf("delta %v: tiny curve gives (%v, %v), want (%v, %v)", d, e, a, want, wantA)
		}
	}
	for _, d := range []float64{0, 1, math.NaN()} {
		if e, _ := ToDP(ZeroCurve(), d); !math.IsInf(e, 1) {
			t.Errorf("zero curve at invalid delta %v: %v, want +Inf", d, e)
		}
	}
}
