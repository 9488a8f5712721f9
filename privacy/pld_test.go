package privacy

import (
	"math"
	"testing"
)

// TestPLDGolden: the published values of the Fourier accountant (Koskela, Jälkö, Honkela,
// github.com/DPBayes/PLD-Accountant, README: epsilon 1.99312 at delta 1e-5 for the
// substitute relation and delta 4.2435e-6 at epsilon 1 for remove/add, Poisson-subsampled
// Gaussian with q = 0.01 and noise multiplier 4). The README's example names 1,000
// compositions, but those values are the library's default of 10,000 compositions: at
// 1,000 the exact RDP accountant (subsampled.go, checked against Opacus and TF Privacy)
// already gives epsilon 0.30 at delta 1e-5 for remove/add, which no delta of 4e-6 at
// epsilon 1 can be. This accountant rounds every loss up to its grid of 1e-5 (a
// pessimistic estimate, up to 1e-5 per composition), so its figures may only be at or
// slightly above the published ones.
func TestPLDGolden(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 compositions take a few seconds")
	}
	// The rounding moves each release's loss up by at most h, the t-grid's cells by at
	// most their loss increment (below h in the bulk): the composed loss by at most about
	// k h = 0.1.
	const k, h = 10000, 1e-5
	eps, err := SubsampledGaussianEpsilonGrid(0.01, 4, k, RelationSubstitute, 1e-5, h)
	if err != nil {
		t.Fatal(err)
	}
	if eps < 1.99312-1e-3 || eps > 1.99312+k*h {
		t.Errorf("substitute: epsilon %v, published 1.99312", eps)
	}
	rem, err := SubsampledGaussianEpsilonGrid(0.01, 4, k, RelationRemove, 4.2435e-6, h)
	if err != nil {
		t.Fatal(err)
	}
	if rem < 1-1e-3 || rem > 1+k*h {
		t.Errorf("remove: epsilon at delta 4.2435e-6 is %v, published 1", rem)
	}
	t.Logf("substitute epsilon %v, remove epsilon %v", eps, rem)
}

// TestPLDBelowRDP: the PLD figure of the sgd walk's local composition never exceeds the
// RDP figure of the same composition (SGDLocalCurve: the replace-one subsampled Gaussian),
// and is close to it where both are tight (q = 1: the Gaussian of sensitivity 2C, whose
// exact figure GDPEpsilon gives).
func TestPLDBelowRDP(t *testing.T) {
	for _, c := range []struct {
		q, s float64
		k    int
	}{{0.1, 2, 50}, {0.05, 1, 100}, {0.5, 3, 20}, {1, 4, 10}} {
		pld, err := SubsampledGaussianEpsilon(c.q, c.s, c.k, RelationSubstitute, 1e-5)
		if err != nil {
			t.Fatal(err)
		}
		rdp, _ := ToDP(SGDLocalCurve(c.q, 1, c.s, c.k), 1e-5)
		if pld > rdp*(1+1e-9) {
			t.Errorf("q %v s %v k %d: PLD %v above RDP %v", c.q, c.s, c.k, pld, rdp)
		}
		if c.q == 1 {
			exact := GDPEpsilon(2*math.Sqrt(float64(c.k))/c.s, 1e-5)
			if pld < exact-1e-6 || pld > exact*1.002 {
				t.Errorf("q = 1: PLD %v, exact Gaussian %v", pld, exact)
			}
		}
		t.Logf("q %v s %v k %d: PLD %.4f RDP %.4f", c.q, c.s, c.k, pld, rdp)
	}
}
