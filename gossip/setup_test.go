package gossip

import (
	"errors"
	"math"
	"math/rand/v2"
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
			if f > target || f < target*(1-1e-9) {
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
	if a, _ := s.AlphaFor(RADMM, 3, 91, etas, 2); math.Abs(a-want) > 1e-10*want {
		t.Errorf("R-ADMM alpha %v, by hand %v", a, want)
	}
	if _, err := s.AlphaFor(RADMM, 3, 91, etas, fixed/2); !errors.Is(err, ErrTargetOutOfReach) || !strings.Contains(err.Error(), "no alpha reaches") {
		t.Errorf("a target below the noise-free part: %v", err)
	}
	for _, bad := range []float64{0, -1, math.Inf(1), math.NaN()} {
		if _, err := s.AlphaFor(RADMM, 3, 91, etas, bad); err == nil {
			t.Errorf("target %v accepted", bad)
		}
	}
}

// TestAlphaForRandom: over random set-ups, schemes, schedules and targets just above the
// part no noise removes to far above it, the calibration succeeds and its figure, and the
// figure summed term by term in iteration order (as a ledger sums), never exceed the
// target.
func TestAlphaForRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	algos := []Algo{RADMM, MRADMM, ADMMDVP, ADMMPVP, MADMM}
	for c := 0; c < 3000; c++ {
		s := NewSetup(consensus.Logistic, 0.1+20*r.Float64(), 1e-4+0.1*r.Float64(), 2+r.IntN(50), 100+r.IntN(5000))
		if r.IntN(4) == 0 {
			s.Loss, s.Classes = consensus.LogisticOvR, 3+r.IntN(5)
		}
		algo := algos[r.IntN(len(algos))]
		k := 1 + r.IntN(60)
		etas := make([]float64, k)
		e := 0.05 + 3*r.Float64()
		for i := range etas {
			etas[i] = e
			e *= 1 + 0.2*r.Float64()
		}
		deg := 1 + r.IntN(10)
		fixed := privacy.ObjPertBound(s.Account(algo, deg, 50, 1, true, 1, etas)).JacobianPart
		if algo == ADMMPVP {
			fixed = 0
		}
		target := fixed*(1+1e-3) + math.Exp(r.Float64()*9-5)
		a, err := s.AlphaFor(algo, deg, 50, etas, target)
		if err != nil {
			t.Fatalf("case %d (%s, %d iterations, degree %d, target %v, floor %v): %v", c, algo, k, deg, target, fixed, err)
		}
		f := privacy.ObjPertBound(s.Account(algo, deg, 50, 1, true, a, etas))
		sum := 0.0
		for _, term := range f.PerIteration {
			sum += term
		}
		if f.Epsilon > target || sum > target {
			t.Fatalf("case %d (%s): alpha %v gives %v (term by term %v) above the target %v", c, algo, a, f.Epsilon, sum, target)
		}
	}
}
