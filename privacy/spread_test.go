package privacy

import (
	"math"
	"math/rand/v2"
	"testing"
)

// reverseSpread runs f over ranges of size k from the last to the first: an order and a
// split no serial sweep uses, so a result that depended on the scratch a previous
// observer left, or on the order, would differ.
func reverseSpread(k int) Spread {
	return func(n int, f func(lo, hi int)) {
		for hi := n; hi > 0; hi -= k {
			f(max(hi-k, 0), hi)
		}
	}
}

// TestRealisedSpreadSameBits: the realised pairwise accountants of every step that has one
// (prox, sgd, gradient ADMM) give, with the observers' sweeps split and reordered by a
// Spread, the serial matrix and coalition weights to the last bit.
func TestRealisedSpreadSameBits(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	for trial := 0; trial < 30; trial++ {
		n := 2 + r.IntN(9)
		tr := randomTrace(r, n, 1+r.IntN(400), 0.3+0.7*r.Float64(), trial%2 == 0)
		coal := []int{r.IntN(n)}
		for _, step := range []StepName{StepProx, StepSGD, StepGADMM} {
			run := tr.WalkRun()
			run.Step = step
			switch step {
			case StepSGD:
				run.Rate, run.SGDNonExpansive, run.Complete = 1, true, true
			case StepGADMM:
				run.GADMM = GADMMParams{Eta: 0.25, Beta: 6, Sigma: tr.Sigma, Sensitivity: 0.5, Nu: 4}
			}
			want, _, err := StepRealisedPairwise(tr, run, coal)
			if err != nil {
				t.Fatalf("%s: %v", step, err)
			}
			got, _, err := StepRealisedPairwiseSpread(tr, run, reverseSpread(1+r.IntN(3)), coal)
			if err != nil {
				t.Fatalf("%s spread: %v", step, err)
			}
			for k := range want.Pairs.W {
				if math.Float64bits(got.Pairs.W[k]) != math.Float64bits(want.Pairs.W[k]) {
					t.Fatalf("trial %d %s: weight %d: %v spread, %v serial", trial, step, k, got.Pairs.W[k], want.Pairs.W[k])
				}
			}
			for k := range want.Coalitions[0].Weight {
				if math.Float64bits(got.Coalitions[0].Weight[k]) != math.Float64bits(want.Coalitions[0].Weight[k]) {
					t.Fatalf("trial %d %s: coalition weight %d differs", trial, step, k)
				}
			}
		}
	}
}
