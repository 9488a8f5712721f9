package privacy

import (
	"math"
	"testing"
)

// renyiMixtures is an independent computation: D_alpha(P || R) for the one-dimensional
// mixtures P = (1-q) N(0, z^2) + q N(a, z^2) and R = (1-q) N(0, z^2) + q N(b, z^2), by the
// trapezoidal rule on a fine grid in log space.
func renyiMixtures(q, z, a, b, alpha float64) float64 {
	lo, hi := math.Min(a, b)-40*z, math.Max(a, b)+40*z
	const n = 40000
	dx := (hi - lo) / n
	lphi := func(x, m float64) float64 { d := (x - m) / z; return -d*d/2 - math.Log(z*math.Sqrt(2*math.Pi)) }
	lmix := func(x, m float64) float64 {
		u, v := math.Log1p(-q)+lphi(x, 0), math.Log(q)+lphi(x, m)
		if q == 1 {
			return lphi(x, m)
		}
		mx := math.Max(u, v)
		return mx + math.Log(math.Exp(u-mx)+math.Exp(v-mx))
	}
	ls := make([]float64, n+1)
	mx := math.Inf(-1)
	for k := 0; k <= n; k++ {
		x := lo + float64(k)*dx
		ls[k] = alpha*lmix(x, a) + (1-alpha)*lmix(x, b)
		mx = math.Max(mx, ls[k])
	}
	s := 0.0
	for k, v := range ls {
		w := 1.0
		if k == 0 || k == n {
			w = 0.5
		}
		s += w * math.Exp(v-mx)
	}
	return (mx + math.Log(s*dx)) / (alpha - 1)
}

// TestReplaceOneAgainstBruteForce: the replace-one curve is never below the divergence of
// a replace-one pair (one row's clipped contribution +C replaced by -C, C = 1, in both
// directions), computed independently by quadrature; at q = 1 it is exactly the Gaussian of
// sensitivity 2; and the add/remove curve is below that true divergence (a figure that
// used it would under-charge), which is what makes this test fail for the wrong adjacency.
func TestReplaceOneAgainstBruteForce(t *testing.T) {
	underAR := 0
	for _, q := range []float64{1, 0.5, 0.2, 0.05} {
		for _, z := range []float64{0.8, 1.5, 4} {
			c := SubsampledReplaceCurve(q, z, 1)
			ar := SubsampledGaussianCurve(q, z, 1)
			for _, a := range []float64{1.5, 2, 4, 8, 16} {
				if a*(a-1)*4/(2*z*z) > 200 {
					continue // beyond what the quadrature resolves
				}
				k := orderIndex(t, a)
				bf := math.Max(renyiMixtures(q, z, 1, -1, a), renyiMixtures(q, z, -1, 1, a))
				if c[k] < bf*(1-1e-7) {
					t.Errorf("q %v z %v order %v: replace-one curve %v below the brute force %v", q, z, a, c[k], bf)
				}
				if q == 1 {
					if w := a * 4 / (2 * z * z); math.Abs(c[k]-w) > 1e-12*w || math.Abs(bf-w) > 1e-6*w {
						t.Errorf("q 1 z %v order %v: %v (brute force %v) want %v", z, a, c[k], bf, w)
					}
				}
				if ar[k] < bf*(1-1e-6) {
					underAR++
				}
			}
		}
	}
	if underAR == 0 {
		t.Error("the add/remove curve was never below the replace-one divergence: the test cannot tell the adjacencies apart")
	}
}

// TestReplaceOneCurveShape: zero and invalid inputs, linear composition, monotone in q and
// z, and never above the unsampled Gaussian of sensitivity 2 nor below the add/remove curve.
func TestReplaceOneCurveShape(t *testing.T) {
	if c := SubsampledReplaceCurve(0, 1, 5); c[10] != 0 {
		t.Error("q 0")
	}
	if c := SubsampledReplaceCurve(0.3, 1, 0); c[10] != 0 {
		t.Error("0 steps")
	}
	for _, bad := range [][2]float64{{-0.1, 1}, {1.1, 1}, {math.NaN(), 1}, {0.5, 0}, {0.5, math.Inf(1)}} {
		if _, err := SubsampledReplaceCurveChecked(bad[0], bad[1], 1); err == nil {
			t.Errorf("accepted %v", bad)
		}
	}
	one, ten := SubsampledReplaceCurve(0.1, 2, 1), SubsampledReplaceCurve(0.1, 2, 10)
	g := GaussianCurve(2, 2)
	ar := SubsampledGaussianCurve(0.1, 2, 1)
	for k := range Orders {
		if math.Abs(ten[k]-10*one[k]) > 1e-12*ten[k] {
			t.Fatalf("order %v: 10 steps %v, 10 x one %v", Orders[k], ten[k], 10*one[k])
		}
		if one[k] > g[k] || one[k] < ar[k] {
			t.Fatalf("order %v: %v outside [add/remove %v, Gaussian of sensitivity 2 %v]", Orders[k], one[k], ar[k], g[k])
		}
	}
	e1, _ := ToDP(SubsampledReplaceCurve(0.05, 1, 100), 1e-5)
	e2, _ := ToDP(SubsampledReplaceCurve(0.1, 1, 100), 1e-5)
	e3, _ := ToDP(SubsampledReplaceCurve(0.1, 2, 100), 1e-5)
	if !(e1 < e2) || !(e3 < e2) {
		t.Errorf("not monotone: %v %v %v", e1, e2, e3)
	}
	// The walk-sgd example: sigma/C = 10 at q = 1 is the add/remove figure at multiplier 5.
	e, _ := ToDP(SubsampledReplaceCurve(1, 10, 100), 1e-5)
	w, _ := ToDP(SubsampledGaussianCurve(1, 5, 100), 1e-5)
	if math.Abs(e-w) > 1e-9*w {
		t.Errorf("q 1, z 10: %v want %v", e, w)
	}
}
