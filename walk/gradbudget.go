package walk

import (
	"fmt"
	"math"

	"github.com/dpadmm/dpadmm/privacy"
)

// GradBudgetEpsilon returns the epsilon, at b.Delta, of k noisy updates of one node of an
// ls-sgd or sgd run on n nodes (the complete graph), of the budget's kind:
//
//   - local: ToDP(privacy.SGDLocalCurve(rate, clip, sigma, k), delta) (replace-one);
//   - network: the local figure too. ls-sgd has no network figure; for sgd a plan cannot
//     promise the amplification, because the step eta_k = eta/sqrt(k) gives every hop its
//     own noise scale and every update its own shift, which the planned form (one noise
//     scale) does not charge (privacy.WalkDecide); only the realised figure, which charges
//     each hop its own variance, amplifies. nonExpansive is kept for the callers and is
//     not used.
//
// k <= 0 gives 0.
func GradBudgetEpsilon(b Budget, n int, step StepKind, rate, clip, sigma float64, nonExpansive bool, k int) float64 {
	if k <= 0 {
		return 0
	}
	e, _ := privacy.ToDP(privacy.SGDLocalCurve(rate, clip, sigma, k), b.Delta)
	return e
}

// GradBudgetCap returns the cap K_i (the same for every node) that keeps
// GradBudgetEpsilon within b.Epsilon for an ls-sgd or sgd run, and the name of the figure
// it bounds. sigma 0 gives cap 0 (one update has infinite epsilon). The caller sets
// Config.Budgeted and Config.BudgetCap from it.
func GradBudgetCap(b Budget, n int, step StepKind, rate, clip, sigma float64, nonExpansive bool) (int, string, error) {
	if err := b.Validate(); err != nil {
		return 0, "", err
	}
	switch {
	case step != StepLSSGD && step != StepSGD:
		return 0, "", fmt.Errorf("%w: GradBudgetCap is for ls-sgd and sgd, got %s", errBudget, step)
	case n < 1:
		return 0, "", fmt.Errorf("%w: nodes must be >= 1, got %d", errBudget, n)
	case !(rate > 0 && rate <= 1):
		return 0, "", fmt.Errorf("%w: sampling rate must be in (0,1], got %v", errBudget, rate)
	case !(clip > 0) || math.IsInf(clip, 0):
		return 0, "", fmt.Errorf("%w: clip must be > 0 and finite, got %v", errBudget, clip)
	case !(sigma >= 0) || math.IsInf(sigma, 0):
		return 0, "", fmt.Errorf("%w: sigma must be >= 0 and finite, got %v", errBudget, sigma)
	}
	name := privacy.SGDLocalName
	if sigma == 0 {
		return 0, name, nil
	}
	return capOf(func(k int) float64 { return GradBudgetEpsilon(b, n, step, rate, clip, sigma, nonExpansive, k) }, b.Epsilon), name, nil
}
