package privacy

import (
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
)

// sgIntegrate returns ln of I = integral N(x; 0, s^2) r(x)^beta dx, with
// r(x) = (1-q) + q exp((2x-1)/(2 s^2)) the density ratio of P = (1-q)N(0,s^2) + qN(1,s^2)
// to Q = N(0,s^2). beta = alpha gives (alpha-1) D_alpha(P||Q); beta = 1-alpha gives
// (alpha-1) D_alpha(Q||P). The trapezoid rule on a fine uniform grid converges
// exponentially for this analytic integrand (r has no zero within pi s^2 of the real axis);
// the interval covers every mixture component of the integrand with 40 s margin. When I is
// close to 1, I - 1 is integrated directly (expm1 form) so tiny divergences keep their
// relative precision.
func sgIntegrate(q, s, beta float64) float64 {
	lo := -40*s - 2
	hi := math.Max(beta, 0) + 40*s + 2
	h := s / 25
	n := int(math.Ceil((hi - lo) / h))
	h = (hi - lo) / float64(n)
	logR := func(x float64) float64 {
		return math.Log1p(q * math.Expm1((2*x-1)/(2*s*s)))
	}
	logPhi := func(x float64) float64 {
		return -x*x/(2*s*s) - math.Log(s) - 0.5*math.Log(2*math.Pi)
	}
	w := func(i int) float64 {
		if i == 0 || i == n {
			return 0.5 * h
		}
		return h
	}
	// Log-space pass: streaming log-sum-exp with a running maximum.
	mx, sum := math.Inf(-1), 0.0
	for i := 0; i <= n; i++ {
		x := lo + float64(i)*h
		v := logPhi(x) + beta*logR(x) + math.Log(w(i))
		if v > mx {
			sum = sum*math.Exp(mx-v) + 1
			mx = v
		} else {
			sum += math.Exp(v - mx)
		}
	}
	logI := mx + math.Log(sum)
	if math.Abs(logI) > 0.5 {
		return logI
	}
	// expm1 pass: I - 1 = integral phi (r^beta - 1), the mass of phi on the grid being 1 up
	// to exponentially small error.
	d, comp := 0.0, 0.0
	for i := 0; i <= n; i++ {
		x := lo + float64(i)*h
		u := beta * logR(x)
		var f float64
		if u > 700 {
			f = math.Exp(logPhi(x) + u + math.Log1p(-math.Exp(-u)))
		} else {
			f = math.Exp(logPhi(x)) * math.Expm1(u)
		}
		y := f*w(i) - comp // Kahan summation
		t := d + y
		comp = (t - d) - y
		d = t
	}
	return math.Log1p(d)
}

// sgRenyi returns D_alpha(P||Q) (reverse=false) or D_alpha(Q||P) (reverse=true) by
// quadrature.
func sgRenyi(q, s, alpha float64, reverse bool) float64 {
	beta := alpha
	if reverse {
		beta = 1 - alpha
	}
	return sgIntegrate(q, s, beta) / (alpha - 1)
}

func sgAt(t *testing.T, c Curve, a float64) float64 {
	t.Helper()
	return c[orderIndex(t, a)]
}

// Abadi et al. 2016 DP-SGD example (q = 0.01, z = 4, 10^4 steps, delta = 1e-5). The
// laplacian-smoothing-admm digest (Recipe C) reports eps = 1.2586 from integer orders
// 2..256 with the classic conversion eps = T rdp + ln(1/delta)/(alpha-1) (Mironov 2017
// Prop. 3), i.e. about 1.26.
func TestSubsampledAbadiExample(t *testing.T) {
	c := SubsampledGaussianCurve(0.01, 4, 10000)
	classic, aC := ToDPClassic(c, 1e-5)
	if math.Abs(classic-1.2586) > 5e-5 {
		t.Errorf("classic conversion eps = %v at order %v, digest gives 1.2586", classic, aC)
	}
	// The digest restricts to integer orders 2..256: recompute that minimum independently
	// of ToDPClassic from the curve values on the integer orders of the grid.
	best := math.Inf(1)
	for k, a := range Orders {
		if a == math.Trunc(a) && a >= 2 && a <= 256 {
			best = math.Min(best, c[k]+math.Log(1e5)/(a-1))
		}
	}
	if math.Abs(best-classic) > 1e-12 {
		t.Errorf("integer-order classic minimum %v differs from ToDPClassic %v", best, classic)
	}
	cks, aK := ToDP(c, 1e-5)
	if !(cks <= classic) || !(cks > 0) {
		t.Errorf("CKS eps %v (order %v) should be in (0, classic %v]", cks, aK, classic)
	}
	t.Logf("Abadi example: classic (Mironov Prop. 3) eps = %.6f at order %v; CKS eps = %.6f at order %v", classic, aC, cks, aK)
}

func TestSubsampledAgainstQuadrature(t *testing.T) {
	ints := []float64{2, 3, 5, 8, 16, 32}
	fracs := []float64{1.01, 1.5, 2.5, 3.7, 7.3, 10.5}
	for _, q := range []float64{0.001, 0.01, 0.1, 0.5, 0.9} {
		for _, s := range []float64{0.8, 1, 2, 4} {
			c := SubsampledGaussianCurve(q, s, 1)
			for _, a := range ints {
				got := sgAt(t, c, a)
				fw, rv := sgRenyi(q, s, a, false), sgRenyi(q, s, a, true)
				if got < fw || got < rv {
					t.Errorf("q=%v s=%v alpha=%v: accountant %v under-reports (forward %v, reverse %v)", q, s, a, got, fw, rv)
				}
				if m := math.Max(fw, rv); !relClose(got, m, 1e-8) {
					t.Errorf("q=%v s=%v alpha=%v: accountant %v, quadrature max %v (rel %.2g)", q, s, a, got, m, (got-m)/m)
				}
			}
			for _, a := range fracs {
				got := sgAt(t, c, a)
				fw, rv := sgRenyi(q, s, a, false), sgRenyi(q, s, a, true)
				if got < fw || got < rv {
					t.Errorf("q=%v s=%v alpha=%v: fractional value %v under-reports (forward %v, reverse %v)", q, s, a, got, fw, rv)
				}
				// Fractional orders are exact too (the float64 quadrature here is good to
				// about 1e-9 relative at q = 0.001).
				if m := math.Max(fw, rv); !relClose(got, m, 1e-8) {
					t.Errorf("q=%v s=%v alpha=%v: accountant %v, quadrature max %v (rel %.2g)", q, s, a, got, m, (got-m)/m)
				}
			}
		}
	}
}

// Random (q, s, order) over the grid's orders up to 12 (fractional and integer): the
// curve is never below either direction's divergence, and equals the larger one.
func TestSubsampledNeverUnderReportsQuadrature(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 150; i++ {
		q := math.Min(math.Exp(-r.Float64()*9), 0.995) // 1.2e-4 .. 0.995
		s := math.Exp(r.Float64()*3 - 1.5)             // 0.22 .. 4.5
		k := r.IntN(orderIndex(t, 12) + 1)
		a := Orders[k]
		got := SubsampledGaussianCurve(q, s, 1)[k]
		fw, rv := sgRenyi(q, s, a, false), sgRenyi(q, s, a, true)
		if got < fw || got < rv {
			t.Errorf("q=%v s=%v alpha=%v: %v under-reports (forward %v, reverse %v)", q, s, a, got, fw, rv)
		}
		if !relClose(got, math.Max(fw, rv), 1e-7) {
			t.Errorf("q=%v s=%v alpha=%v: %v, quadrature %v", q, s, a, got, math.Max(fw, rv))
		}
	}
}

// sgBigExp returns e^x (x >= 0) at the precision of prec bits: Taylor series after halving
// x below 1/2, then repeated squaring.
func sgBigExp(x float64, prec uint) *big.Float {
	m := 0
	for r := x; r > 0.5; r /= 2 {
		m++
	}
	y := new(big.Float).SetPrec(prec).SetFloat64(x)
	y.SetMantExp(y, -m)
	sum := new(big.Float).SetPrec(prec).SetInt64(1)
	term := new(big.Float).SetPrec(prec).SetInt64(1)
	eps := new(big.Float).SetPrec(prec).SetMantExp(big.NewFloat(1), -int(prec)-8)
	for i := 1; i < 1000; i++ {
		term.Mul(term, y)
		term.Quo(term, new(big.Float).SetPrec(prec).SetInt64(int64(i)))
		sum.Add(sum, term)
		if term.Cmp(eps) < 0 {
			break
		}
	}
	for ; m > 0; m-- {
		sum.Mul(sum, sum)
	}
	return sum
}

// sgBigRDP is a math/big reference for integer orders: B = A_alpha - 1 =
// sum_{k>=2} C(alpha,k) (1-q)^(alpha-k) q^k (e^{(k^2-k)/(2 z^2)} - 1) summed at 320 bits,
// then RDP = ln(1+B)/(alpha-1) in float64 (log1p for small B, mantissa/exponent split for
// large B), accurate to a few ulps.
func sgBigRDP(q, z float64, alpha int) float64 {
	const prec = 320
	bq := new(big.Float).SetPrec(prec).SetFloat64(q)
	b1q := new(big.Float).SetPrec(prec).SetInt64(1)
	b1q.Sub(b1q, bq)
	B := new(big.Float).SetPrec(prec)
	one := new(big.Float).SetPrec(prec).SetInt64(1)
	for k := 2; k <= alpha; k++ {
		tm := new(big.Float).SetPrec(prec).SetInt(new(big.Int).Binomial(int64(alpha), int64(k)))
		for i := 0; i < k; i++ {
			tm.Mul(tm, bq)
		}
		for i := 0; i < alpha-k; i++ {
			tm.Mul(tm, b1q)
		}
		// (k^2-k)/(2 z^2) in float64 is the exponent the accountant uses too; its rounding
		// (relative 1e-16) is far below the tolerances below.
		e := sgBigExp(float64(k)*float64(k-1)/(2*z*z), prec)
		e.Sub(e, one)
		tm.Mul(tm, e)
		B.Add(B, tm)
	}
	bf, _ := B.Float64()
	if bf < 1e-3 {
		return math.Log1p(bf) / float64(alpha-1)
	}
	A := new(big.Float).SetPrec(prec).Add(B, one)
	mant := new(big.Float)
	exp := A.MantExp(mant)
	mf, _ := mant.Float64()
	return (math.Log(mf) + float64(exp)*math.Ln2) / float64(alpha-1)
}

// Property test against the math/big reference: never under-reports, and exceeds the
// reference by at most the documented outward rounding.
func TestSubsampledNeverUnderReportsBig(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	intOrders := []int{2, 3, 4, 7, 10, 16, 33, 64, 96, 256}
	for i := 0; i < 60; i++ {
		q := math.Exp(-r.Float64() * 12) // 6e-6 .. 1
		if q >= 1 {
			q = 0.5
		}
		z := math.Exp(r.Float64()*4 - 1) // 0.37 .. 20
		a := intOrders[r.IntN(len(intOrders))]
		got := subsampledGaussianOn([]float64{float64(a)}, q, z)[0]
		ref := sgBigRDP(q, z, a)
		if ref > float64(a)/(2*z*z) {
			t.Errorf("q=%v z=%v alpha=%v: reference %v above the unsampled Gaussian", q, z, a, ref)
		}
		if got < ref {
			t.Errorf("q=%v z=%v alpha=%v: %v under-reports the reference %v", q, z, a, got, ref)
		}
		if got > ref*(1+3e-9) {
			t.Errorf("q=%v z=%v alpha=%v: %v exceeds the reference %v by %.3g relative", q, z, a, got, ref, got/ref-1)
		}
	}
	// The largest order of the grid, where log-gamma rounding is largest.
	for _, tc := range [][2]float64{{0.01, 1}, {0.3, 0.7}, {1e-4, 8}} {
		got := subsampledGaussianOn([]float64{1024}, tc[0], tc[1])[0]
		ref := sgBigRDP(tc[0], tc[1], 1024)
		if got < ref || got > ref*(1+3e-9) {
			t.Errorf("q=%v z=%v alpha=1024: %v vs reference %v (rel %.3g)", tc[0], tc[1], got, ref, got/ref-1)
		}
	}
}

func TestSubsampledFullSamplingIsGaussian(t *testing.T) {
	for _, z := range []float64{0.3, 1, 4.5} {
		for _, steps := range []int{1, 17, 10000} {
			got := SubsampledGaussianCurve(1, z, steps)
			want := GaussianCurve(1, z).Scale(float64(steps))
			for k := range Orders {
				if got[k] != want[k] {
					t.Fatalf("z=%v steps=%v order %v: %v, want %v", z, steps, Orders[k], got[k], want[k])
				}
			}
		}
	}
	// Close to q = 1 the value stays at or below the unsampled Gaussian (joint convexity).
	c := SubsampledGaussianCurve(0.999999, 1, 1)
	g := GaussianCurve(1, 1)
	for k := range Orders {
		if c[k] > g[k] {
			t.Fatalf("q near 1, order %v: %v above Gaussian %v", Orders[k], c[k], g[k])
		}
	}
}

func TestSubsampledZero(t *testing.T) {
	for _, c := range []Curve{SubsampledGaussianCurve(0, 1, 100), SubsampledGaussianCurve(0.3, 1, 0)} {
		if len(c) != len(Orders) {
			t.Fatalf("length %d", len(c))
		}
		for k, v := range c {
			if v != 0 {
				t.Fatalf("order %v: %v, want 0", Orders[k], v)
			}
		}
	}
}

func TestSubsampledMonotone(t *testing.T) {
	qs := []float64{1e-5, 1e-3, 0.01, 0.05, 0.2, 0.5, 0.9, 0.99, 1}
	zs := []float64{0.5, 0.8, 1, 1.5, 3, 10}
	for _, z := range zs {
		prev := ZeroCurve()
		for _, q := range qs {
			c := SubsampledGaussianCurve(q, z, 1)
			for k := range Orders {
				if c[k] < prev[k] {
					t.Fatalf("z=%v: not nondecreasing in q at q=%v order %v: %v < %v", z, q, Orders[k], c[k], prev[k])
				}
			}
			prev = c
		}
	}
	for _, q := range qs {
		var prev Curve
		for _, z := range zs {
			c := SubsampledGaussianCurve(q, z, 1)
			for k := range Orders {
				if prev != nil && c[k] > prev[k] {
					t.Fatalf("q=%v: not nonincreasing in z at z=%v order %v: %v > %v", q, z, Orders[k], c[k], prev[k])
				}
				// RDP is nondecreasing in the order; the fractional bounds keep that.
				if k > 0 && c[k] < c[k-1] {
					t.Fatalf("q=%v z=%v: decreasing in order at %v: %v < %v", q, z, Orders[k], c[k], c[k-1])
				}
				if !(c[k] >= 0) {
					t.Fatalf("q=%v z=%v order %v: %v", q, z, Orders[k], c[k])
				}
			}
			prev = c
		}
	}
}

func TestSubsampledCompositionLinear(t *testing.T) {
	one := SubsampledGaussianCurve(0.02, 1.3, 1)
	c3, c4, c7 := SubsampledGaussianCurve(0.02, 1.3, 3), SubsampledGaussianCurve(0.02, 1.3, 4), SubsampledGaussianCurve(0.02, 1.3, 7)
	sum := c3.Add(c4)
	scaled := one.Scale(7)
	for k := range Orders {
		if !relClose(c7[k], sum[k], 1e-14) || !relClose(c7[k], scaled[k], 1e-14) {
			t.Fatalf("order %v: 7 steps %v, 3+4 steps %v, 7x one step %v", Orders[k], c7[k], sum[k], scaled[k])
		}
	}
}

// Naive float64 evaluation of the binomial expansion (no logs) for small orders.
func TestSubsampledMatchesNaiveSum(t *testing.T) {
	for _, q := range []float64{0.05, 0.3, 0.7} {
		for _, z := range []float64{1, 2} {
			c := SubsampledGaussianCurve(q, z, 1)
			for a := 2; a <= 10; a++ {
				A, binom := 0.0, 1.0
				for k := 0; k <= a; k++ {
					if k > 0 {
						binom = binom * float64(a-k+1) / float64(k)
					}
					A += binom * math.Pow(1-q, float64(a-k)) * math.Pow(q, float64(k)) * math.Exp(float64(k*k-k)/(2*z*z))
				}
				want := math.Log(A) / float64(a-1)
				if got := sgAt(t, c, float64(a)); !relClose(got, want, 1e-8) {
					t.Errorf("q=%v z=%v alpha=%d: %v, naive %v", q, z, a, got, want)
				}
			}
		}
	}
}

// Extreme but valid parameters: finite or +Inf, never NaN or negative, no panic.
func TestSubsampledExtremes(t *testing.T) {
	for _, tc := range []struct {
		q, z  float64
		steps int
	}{
		{1e-300, 1, 1}, {5e-324, 1e-3, 1}, {0.5, 1e-150, 1}, {0.5, 1e-300, 1}, {0.5, 1e150, 1},
		{math.Nextafter(1, 0), 0.1, 1}, {0.01, 4, math.MaxInt32},
	} {
		c, err := SubsampledGaussianCurveChecked(tc.q, tc.z, tc.steps)
		if err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		for k, v := range c {
			if math.IsNaN(v) || v < 0 {
				t.Fatalf("%+v order %v: %v", tc, Orders[k], v)
			}
		}
	}
}

func TestSubsampledBadInput(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	for _, tc := range []struct {
		q, z  float64
		steps int
		msg   string
	}{
		{nan, 1, 1, "q is NaN"},
		{-0.1, 1, 1, "must be in [0,1]"},
		{1.5, 1, 1, "must be in [0,1]"},
		{-inf, 1, 1, "must be in [0,1]"},
		{0.1, nan, 1, "noise multiplier is NaN"},
		{0.1, 0, 1, "must be > 0"},
		{0.1, -2, 1, "must be > 0"},
		{0.1, inf, 1, "must be finite"},
		{0.1, 1, -1, "steps = -1 must be >= 0"},
	} {
		c, err := SubsampledGaussianCurveChecked(tc.q, tc.z, tc.steps)
		if err == nil || !strings.Contains(err.Error(), tc.msg) || !strings.HasPrefix(err.Error(), "privacy: ") {
			t.Errorf("(%v, %v, %v): error %v, want %q", tc.q, tc.z, tc.steps, err, tc.msg)
		}
		u := SubsampledGaussianCurve(tc.q, tc.z, tc.steps)
		for k := range Orders {
			if !math.IsInf(c[k], 1) || !math.IsInf(u[k], 1) {
				t.Fatalf("(%v, %v, %v) order %v: got %v / %v, want +Inf", tc.q, tc.z, tc.steps, Orders[k], c[k], u[k])
			}
		}
	}
}

func BenchmarkSubsampledGaussianCurve(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		_ = SubsampledGaussianCurve(0.01, 4, 10000)
	}
}
