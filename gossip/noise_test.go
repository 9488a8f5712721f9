package gossip

import (
	"math"
	"testing"

	"github.com/dpadmm/dpadmm/privacy"
)

// TestGammaMoments: Marsaglia-Tsang samples match the mean shape*scale and variance
// shape*scale^2 (within 5 standard errors), for the noise-norm case (d = 105, alpha = 2;
// digest 7.4: mean 52.5, sd 5.123475) and for shape < 1.
func TestGammaMoments(t *testing.T) {
	src := privacy.NewSeededNoise(7)
	for _, c := range []struct{ shape, scale float64 }{{105, 0.5}, {2, 1}, {0.5, 3}, {1, 1}} {
		const n = 40000
		s, s2 := 0.0, 0.0
		for i := 0; i < n; i++ {
			x := SampleGamma(src, c.shape, c.scale)
			if !(x > 0) {
				t.Fatalf("sample %v", x)
			}
			s += x
			s2 += x * x
		}
		mean := s / n
		v := s2/n - mean*mean
		wm, wv := c.shape*c.scale, c.shape*c.scale*c.scale
		if math.Abs(mean-wm) > 5*math.Sqrt(wv/n) {
			t.Errorf("Gamma(%v,%v): mean %v, want %v", c.shape, c.scale, mean, wm)
		}
		// Var of the sample variance: (m4 - v^2)/n with m4 = v^2 (3 + 6/shape).
		if math.Abs(v-wv) > 5*wv*math.Sqrt((2+6/c.shape)/n) {
			t.Errorf("Gamma(%v,%v): variance %v, want %v", c.shape, c.scale, v, wv)
		}
	}
	if !math.IsNaN(SampleGamma(src, 0, 1)) || !math.IsNaN(SampleGamma(src, 1, math.Inf(1))) {
		t.Error("invalid parameters must give NaN")
	}
}

// TestSphereUniform: directions have unit norm, coordinate means about 0 and E[u_c^2] = 1/d.
func TestSphereUniform(t *testing.T) {
	src := privacy.NewSeededNoise(11)
	const d, n = 5, 40000
	u := make([]float64, d)
	m1, m2 := make([]float64, d), make([]float64, d)
	for i := 0; i < n; i++ {
		SampleDirection(src, u)
		if math.Abs(math.Sqrt(dot(u, u))-1) > 1e-12 {
			t.Fatalf("norm %v", math.Sqrt(dot(u, u)))
		}
		for c, v := range u {
			m1[c] += v / n
			m2[c] += v * v / n
		}
	}
	// Var(u_c) = 1/d; Var(u_c^2) = 3/(d(d+2)) - 1/d^2.
	for c := range u {
		if math.Abs(m1[c]) > 5*math.Sqrt(1.0/d/n) {
			t.Errorf("coordinate %d mean %v", c, m1[c])
		}
		if math.Abs(m2[c]-1.0/d) > 5*math.Sqrt((3.0/(d*(d+2))-1.0/(d*d))/n) {
			t.Errorf("coordinate %d second moment %v, want %v", c, m2[c], 1.0/d)
		}
	}
}

// TestObjNoiseNorm: ||eps|| has mean d/alpha and sd sqrt(d)/alpha; alpha = +Inf gives zeros.
func TestObjNoiseNorm(t *testing.T) {
	src := privacy.NewSeededNoise(3)
	const d, alpha, n = 20, 1.3, 20000
	e := make([]float64, d)
	s, s2 := 0.0, 0.0
	for i := 0; i < n; i++ {
		SampleObjNoise(src, e, alpha)
		r := math.Sqrt(dot(e, e))
		s += r
		s2 += r * r
	}
	mean, sd := s/n, math.Sqrt(s2/n-(s/n)*(s/n))
	if math.Abs(mean-d/alpha) > 5*math.Sqrt(d)/alpha/math.Sqrt(n) {
		t.Errorf("mean norm %v, want %v", mean, d/alpha)
	}
	if math.Abs(sd-math.Sqrt(d)/alpha) > 0.05*math.Sqrt(d)/alpha {
		t.Errorf("sd norm %v, want %v", sd, math.Sqrt(d)/alpha)
	}
	SampleObjNoise(src, e, math.Inf(1))
	if dot(e, e) != 0 {
		t.Error("alpha = +Inf must give zero noise")
	}
}
