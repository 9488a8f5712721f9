package privacy

import (
	"errors"
	"fmt"
	"math"
)

// Noise calibration for DP-SADMM (Liu et al. 2022), digest sec. 3.3: sigma is the std of
// the noise on the mini-batch MEAN gradient (recipes A, B) or the noise multiplier z of the
// Poisson-subsampled Gaussian on the clipped SUM (recipe C, the one the walk's ls-sgd and
// sgd steps account with: sigma_sum = z C).

// ErrTheorem2Infeasible is returned when no theta in (0,1) satisfies Theorem 2's conditions.
var ErrTheorem2Infeasible = errors.New("privacy: Liu et al. 2022 Theorem 2 gives no guarantee at these settings (conditions C1, C2 fail for every theta)")

// Theorem2Sigma is recipe A: Liu et al. 2022, Theorem 2 (DP-SADMM), l-Lipschitz f_i, n
// records, batch b without replacement, T iterations:
//
//	sigma^2 = 20 alpha T l^2 / (theta eps n^2),  alpha = ln(1/delta)/((1-theta) eps) + 1,
//	(C1) alpha <= ln(theta eps n^3 / (5 alpha b^3 T + theta eps b n^2)),
//	(C2) 5 alpha b^2 T / (theta eps n^2) >= 1.5,
//
// minimised over theta on the grid k/10^4, k = 1..9999. It returns the best theta, its
// alpha and sigma, or ErrTheorem2Infeasible. C1 and C2 together force alpha <= ln(n/(2.5 b)),
// while alpha >= ln(1/delta)/eps + 1: at the paper's own settings (delta = 5e-4, eps <= 1)
// the theorem certifies nothing (digest sec. 3.2).
func Theorem2Sigma(eps, delta float64, T, n, b int, l float64) (theta, alpha, sigma float64, err error) {
	if err := validateRecipe(eps, delta, T, n, b, l); err != nil {
		return 0, 0, 0, err
	}
	fn, fb, fT := float64(n), float64(b), float64(T)
	best := math.Inf(1)
	for k := 1; k <= 9999; k++ {
		th := float64(k) / 10000
		a := math.Log(1/delta)/((1-th)*eps) + 1
		s2 := 20 * a * fT * l * l / (th * eps * fn * fn)
		c1 := math.Log(th * eps * fn * fn * fn / (5*a*fb*fb*fb*fT + th*eps*fb*fn*fn))
		c2 := 5 * a * fb * fb * fT / (th * eps * fn * fn)
		if a <= c1 && c2 >= 1.5 && s2 < best {
			best, theta, alpha = s2, th, a
		}
	}
	if math.IsInf(best, 1) {
		return 0, 0, 0, ErrTheorem2Infeasible
	}
	return theta, alpha, math.Sqrt(best), nil
}

// LemmaSigma is recipe B: the lemmas behind Theorem 2 solved numerically (sensitivity
// Delta = 2l/b of the mean under replace-one, q = b/n, r = sigma^2/Delta^2 >= 1.5,
// alpha <= ln(1/(q (1+r))), eps(sigma) = K alpha + ln(1/delta)/(alpha-1) with
// K = 5 T q^2 / r and alpha = min(1 + sqrt(ln(1/delta)/K), alpha_max)). eps(sigma) is not
// monotone, so sigma is scanned upward from Delta sqrt(1.5) in ratio steps 10^-5 over four
// decades, and the first sigma meeting eps is returned.
func LemmaSigma(eps, delta float64, T, n, b int, l float64) (float64, error) {
	if err := validateRecipe(eps, delta, T, n, b, l); err != nil {
		return 0, err
	}
	D := 2 * l / float64(b)
	q := float64(b) / float64(n)
	L := math.Log(1 / delta)
	s0 := D * math.Sqrt(1.5)
	for k := 0; k <= 400000; k++ {
		s := s0 * math.Pow(10, float64(k)/100000)
		r := s * s / (D * D)
		if r < 1.5 {
			continue
		}
		amax := math.Log(1 / (q * (1 + r)))
		K := 5 * float64(T) * q * q / r
		a := math.Min(1+math.Sqrt(L/K), amax)
		if a <= 1 {
			continue
		}
		if K*a+L/(a-1) <= eps {
			return s, nil
		}
	}
	return 0, fmt.Errorf("privacy: Liu et al. 2022 lemma recipe: no sigma up to 10^4 x %v meets eps %v", s0, eps)
}

// SubsampledSigma is recipe C: the smallest noise multiplier z (noise std over the L2
// sensitivity of the clipped sum) such that T compositions of the Poisson-subsampled
// Gaussian at rate q meet (eps, delta) with this package's accountant
// (SubsampledGaussianCurve, ToDP), add/remove adjacency: the recipe of the paper. The walk's
// gradient steps are accounted under replace-one (SubsampledReplaceCurve); their noise is
// calibrated with SGDReplaceSigma.
func SubsampledSigma(eps, delta float64, T int, q float64) (float64, error) {
	if err := validateSubsampled(q, 1, T); err != nil {
		return 0, err
	}
	return CalibrateSigma(eps, delta, func(z float64) Curve { return SubsampledGaussianCurve(q, z, T) })
}

func validateRecipe(eps, delta float64, T, n, b int, l float64) error {
	switch {
	case !(eps > 0) || math.IsInf(eps, 0):
		return fmt.Errorf("privacy: epsilon %v must be > 0 and finite", eps)
	case validateDelta(delta) != nil:
		return validateDelta(delta)
	case T < 1 || n < 1 || b < 1 || b > n:
		return fmt.Errorf("privacy: need T >= 1 and 1 <= b <= n, got T %d, n %d, b %d", T, n, b)
	case !(l > 0) || math.IsInf(l, 0):
		return fmt.Errorf("privacy: Lipschitz constant %v must be > 0 and finite", l)
	}
	return nil
}

// SGDReplaceSigma is the smallest noise multiplier z (noise std over the per-example clip
// C) such that T compositions of the Poisson-subsampled Gaussian at rate q meet
// (eps, delta) under replace-one adjacency (SubsampledReplaceCurve): the calibration of the
// walk's ls-sgd and sgd steps.
func SGDReplaceSigma(eps, delta float64, T int, q float64) (float64, error) {
	if err := validateSubsampled(q, 1, T); err != nil {
		return 0, err
	}
	return CalibrateSigma(eps, delta, func(z float64) Curve { return SubsampledReplaceCurve(q, z, T) })
}
