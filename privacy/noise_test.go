package privacy

import (
	"math"
	"testing"

	"gonum.org/v1/gonum/stat/distuv"
)

// Tolerances for n = 125000 samples of N(0, s^2), in units of s: each check is at about
// 5 standard errors (two-sided false rejection ~6e-7 per check):
// mean SE = 1/sqrt(n) = 0.00283, variance SE = sqrt(2/n) = 0.0040,
// excess-kurtosis SE ~ sqrt(24/n) = 0.0139.
const (
	momentN      = 125000
	meanTol      = 0.0142
	varTol       = 0.020
	kurtosisTol  = 0.070
	momentSigma  = 2.5
	momentChunks = 1000
)

func checkMoments(t *testing.T, name string, nz Noise) {
	t.Helper()
	buf := make([]float64, momentN/momentChunks)
	var s1, s2, s4 float64
	for c := 0; c < momentChunks; c++ {
		nz.Normal(buf, momentSigma)
		for _, v := range buf {
			z := v / momentSigma
			s1 += z
			s2 += z * z
			s4 += z * z * z * z
		}
	}
	n := float64(momentN)
	mean := s1 / n
	m2 := s2 / n
	kurt := (s4/n)/(m2*m2) - 3
	if math.Abs(mean) > meanTol {
		t.Errorf("%s: mean %v, want |mean| <= %v", name, mean, meanTol)
	}
	if math.Abs(m2-1) > varTol {
		t.Errorf("%s: variance %v, want 1 +- %v", name, m2, varTol)
	}
	if math.Abs(kurt) > kurtosisTol {
		t.Errorf("%s: excess kurtosis %v, want 0 +- %v", name, kurt, kurtosisTol)
	}
}

func TestSeededMoments(t *testing.T) { checkMoments(t, "seeded", NewSeededNoise(12345)) }
func TestSecureMoments(t *testing.T) { checkMoments(t, "secure", NewSecureNoise()) }

func TestSecureLattice(t *testing.T) {
	nz := NewSecureNoise()
	if !nz.Secure() {
		t.Fatal("secure source reports Secure() == false")
	}
	for _, sigma := range []float64{1e-9, 0.3, 1, 1.5, 2, 7.77, 1e6} {
		g := Granularity(sigma)
		// g is a power of two with sigma <= g*2^40 < 2*sigma.
		if fr, _ := math.Frexp(g); fr != 0.5 {
			t.Fatalf("granularity %v for sigma %v is not a power of two", g, sigma)
		}
		if top := g * (1 << GranularityBits); !(sigma <= top && top < 2*sigma) {
			t.Fatalf("granularity %v for sigma %v: g*2^40 = %v not in [sigma, 2 sigma)", g, sigma, top)
		}
		buf := make([]float64, 20000)
		nz.Normal(buf, sigma)
		nonzero := 0
		for _, v := range buf {
			q := v / g
			if q != math.Trunc(q) || math.IsInf(q, 0) {
				t.Fatalf("sigma %v: output %v is not a multiple of granularity %v", sigma, v, g)
			}
			if v != 0 {
				nonzero++
			}
		}
		if nonzero < len(buf)/2 {
			t.Fatalf("sigma %v: only %d nonzero outputs", sigma, nonzero)
		}
	}
}

func TestSeededDeterminism(t *testing.T) {
	a, b, c := NewSeededNoise(7), NewSeededNoise(7), NewSeededNoise(8)
	x, y, z := make([]float64, 100), make([]float64, 100), make([]float64, 100)
	a.Normal(x, 1)
	b.Normal(y, 1)
	c.Normal(z, 1)
	same := 0
	for i := range x {
		if x[i] != y[i] {
			t.Fatalf("same seed differs at %d: %v vs %v", i, x[i], y[i])
		}
		if x[i] == z[i] {
			same++
		}
	}
	if same == len(x) {
		t.Fatal("different seeds gave identical streams")
	}
	if a.Uniform() != b.Uniform() {
		t.Fatal("Uniform not deterministic")
	}
	if a.Secure() {
		t.Fatal("seeded source reports Secure() == true")
	}
}

func TestSigmaZeroAndInvalid(t *testing.T) {
	for _, nz := range []Noise{NewSeededNoise(1), NewSecureNoise()} {
		buf := []float64{1, 2, 3}
		nz.Normal(buf, 0)
		for _, v := range buf {
			if v != 0 {
				t.Fatalf("sigma=0 gave %v", v)
			}
		}
		for _, s := range []float64{-1, math.NaN(), math.Inf(1), math.Inf(-1)} {
			buf := []float64{1, 2, 3}
			nz.Normal(buf, s)
			for _, v := range buf {
				if !math.IsNaN(v) {
					t.Fatalf("invalid sigma %v gave %v, want NaN", s, v)
				}
			}
			if ValidateSigma(s) == nil {
				t.Fatalf("ValidateSigma(%v) accepted", s)
			}
		}
	}
	if ValidateSigma(0) != nil || ValidateSigma(3) != nil {
		t.Fatal("ValidateSigma rejected a valid sigma")
	}
}

func TestUniformOpenInterval(t *testing.T) {
	for _, nz := range []Noise{NewSeededNoise(3), NewSecureNoise()} {
		var sum float64
		const n = 100000
		for i := 0; i < n; i++ {
			u := nz.Uniform()
			if !(u > 0 && u < 1) {
				t.Fatalf("Uniform() = %v outside (0,1)", u)
			}
			sum += u
		}
		// SE of the mean is sqrt(1/12/n) = 0.00091; 5 SE.
		if m := sum / n; math.Abs(m-0.5) > 0.0046 {
			t.Fatalf("Uniform mean %v", m)
		}
	}
}

// TestDiscreteGaussianPMF checks the exact sampler at small sigma against the discrete
// Gaussian pmf exp(-y^2/(2 sigma^2))/Z with a chi-square test (false rejection 1e-6).
func TestDiscreteGaussianPMF(t *testing.T) {
	s := NewSecureNoise().(*secure)
	for _, tc := range []struct {
		m uint64
		f uint
	}{{3, 1}, {5, 2}, {1, 1}, {7, 0}} {
		sigma := float64(tc.m) / float64(uint64(1)<<tc.f)
		const n = 60000
		const maxBin = 12 // bins -12..12 plus a lumped tail
		counts := make([]float64, 2*maxBin+2)
		for i := 0; i < n; i++ {
			y := s.discreteGaussian(tc.m, tc.f)
			if y < -maxBin || y > maxBin {
				counts[len(counts)-1]++
			} else {
				counts[y+maxBin]++
			}
		}
		var z float64
		for y := -200; y <= 200; y++ {
			z += math.Exp(-float64(y*y) / (2 * sigma * sigma))
		}
		var chi2 float64
		df := -1
		var tailP float64 = 1
		for b := 0; b < 2*maxBin+1; b++ {
			y := float64(b - maxBin)
			p := math.Exp(-y*y/(2*sigma*sigma)) / z
			tailP -= p
			if e := n * p; e >= 5 {
				d := counts[b] - e
				chi2 += d * d / e
				df++
			} else if counts[b] > 20 {
				t.Errorf("sigma %v: y=%v seen %v times, expected %v", sigma, y, counts[b], e)
			}
		}
		if e := n * tailP; e >= 5 {
			d := counts[len(counts)-1] - e
			chi2 += d * d / e
			df++
		} else if counts[len(counts)-1] > 20 {
			t.Errorf("sigma %v: %v samples beyond |y|>%d (tail prob %v)", sigma, counts[len(counts)-1], maxBin, tailP)
		}
		q := distuv.ChiSquared{K: float64(df)}.Quantile(1 - 1e-6)
		if chi2 > q {
			t.Errorf("sigma %v: chi2 %v > %v (df %d)", sigma, chi2, q, df)
		}
		t.Logf("sigma %v: chi2 %.2f df %d (critical %.1f)", sigma, chi2, df, q)
	}
}
