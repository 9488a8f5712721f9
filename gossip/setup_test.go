package gossip

import (
	"math"
	"strings"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
)

// TestAlphaFor: the calibrated alpha gives every scheme a figure at most the target and
// within rounding of it, with the figure worked out here by hand for R-ADMM (eq. (32)
// summed over the perturbed iterations); a target below the noise-free part is an error.
func TestAlphaFor(t *testing.T) {
	s := NewSetup(consensus.Logistic, 10, 0.001, 5, 455)
	etas := []float64{1, 1.1, 1.21}
	for _, algo := range []Algo{RADMM, MRADMM, ADMMDVP, ADMMPVP, MADMM} {
		for _, target := range []float64{0.5, 2, 7.3} {
			a, err := s.AlphaFor(algo, 3, 91, etas, target)
			if err != nil {
				t.Fatalf("%s target %v: %v", algo, target, err)
			}
			f := privacy.ObjPertBound(s.Account(algo, 3, 91, 1, true, a, etas)).Epsilon
			if f > target || f < target*(1-1e-12) {
				t.Errorf("%s target %v: alpha %v gives %v", algo, target, a, f)
			}
		}
	}
	// By hand: w = C N/M, r = C l2, V = 3; each perturbed iteration 2w(1.4/4/(r+2 eta V) + alpha).
	w, r := 10*5/455.0, 10*0.001
	fixed := 0.0
	for _, e := range etas {
		fixed += 2 * w * 1.4 * 0.25 / (r + 2*e*3)
	}
	want := (2 - fixed) / (2 * w * float64(len(etas)))
	if a, _ := s.AlphaFor(RADMM, 3, 91, etas, 2); math.Abs(a-want) > 1e-12*want {
		t.Errorf("R-ADMM alpha %v, by hand %v", a, want)
	}
	if _, err := s.AlphaFor(RADMM, 3, 91, etas, fixed/2); err == nil || !strings.Contains(err.Error(), "no alpha reaches") {
		t.Errorf("a target below the noise-free part: %v", err)
	}
	for _, bad := range []float64{0, -1, math.Inf(1), math.NaN()} {
		if _, err := s.AlphaFor(RADMM, 3, 91, etas, bad); err == nil {
			t.Errorf("target %v accepted", bad)
		}
	}
}
