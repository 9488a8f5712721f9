package privacy

import (
	"math"
)

// Gaussian differential privacy (Dong, Roth and Su 2022, "Gaussian differential privacy",
// JRSS B): a mechanism is mu-GDP when distinguishing neighbours is no easier than
// distinguishing N(0,1) from N(mu,1). A Gaussian mechanism of sensitivity Delta and noise
// std s is exactly (Delta/s)-GDP, and the adaptive composition of mu_k-GDP mechanisms is
// sqrt(sum mu_k^2)-GDP (their Corollary 3.3), with no loss. Its (epsilon, delta) curve is
// exact (Corollary 2.13):
//
//	delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2).
//
// The walk's local figure (k noisy updates of sensitivity 4 lambda C and noise std
// lambda sigma each, no subsampling) is the composition of k Gaussian mechanisms, so
// mu = 4 C sqrt(k)/sigma and GDPEpsilon gives the smallest epsilon that holds at delta:
// the RDP conversion (ToDP) can only be larger.

// GDPName names the exact Gaussian accountant.
const GDPName = "exact Gaussian DP (Dong, Roth and Su 2022, Cor. 2.13 and 3.3: k Gaussian mechanisms compose to mu = sqrt(sum Delta_k^2/s_k^2), " +
	"converted exactly at delta)"

// GDPDelta returns delta(eps) of a mu-GDP mechanism.
func GDPDelta(mu, eps float64) float64 {
	if !(mu > 0) {
		return 0
	}
	if math.IsInf(mu, 1) {
		return 1
	}
	a := -eps/mu + mu/2
	b := -eps/mu - mu/2
	d := normCDF(a) - math.Exp(eps+logNormCDF(b))
	return math.Max(d, 0)
}

// GDPEpsilon returns the smallest eps >= 0 with delta(eps) <= delta for a mu-GDP mechanism:
// 0 for mu = 0, +Inf for an infinite or NaN mu or a delta outside (0, 1).
func GDPEpsilon(mu, delta float64) float64 {
	switch {
	case validateDelta(delta) != nil || math.IsNaN(mu) || math.IsInf(mu, 0) || mu < 0:
		return math.Inf(1)
	case mu == 0 || GDPDelta(mu, 0) <= delta:
		return 0
	}
	lo, hi := 0.0, 1.0
	for GDPDelta(mu, hi) > delta {
		lo, hi = hi, 2*hi
		if hi > 1e6 {
			return math.Inf(1)
		}
	}
	for it := 0; it < 200 && hi-lo > 1e-12*hi; it++ {
		m := (lo + hi) / 2
		if GDPDelta(mu, m) > delta {
			lo = m
		} else {
			hi = m
		}
	}
	return hi // delta(hi) <= delta: hi holds
}

// GaussianMu is the GDP parameter of k Gaussian mechanisms of sensitivity sens and noise
// std sigma: sqrt(k) sens/sigma (+Inf for sigma 0 with a positive sensitivity).
func GaussianMu(sens, sigma float64, k int) float64 {
	switch {
	case k <= 0 || sens == 0:
		return 0
	case !(sigma > 0):
		return math.Inf(1)
	}
	return math.Sqrt(float64(k)) * sens / sigma
}

// normCDF is the standard normal distribution function.
func normCDF(x float64) float64 { return 0.5 * math.Erfc(-x/math.Sqrt2) }

// logNormCDF is log Phi(x), accurate in the far left tail (where Phi underflows) by the
// asymptotic series of the Mills ratio.
func logNormCDF(x float64) float64 {
	if x > -30 {
		return math.Log(normCDF(x))
	}
	// Phi(x) = phi(x)/|x| (1 - 1/x^2 + 3/x^4 - 15/x^6 + ...), x -> -inf
	x2 := x * x
	s := 1 - 1/x2 + 3/(x2*x2) - 15/(x2*x2*x2)
	return -x2/2 - math.Log(-x) - 0.5*math.Log(2*math.Pi) + math.Log(s)
}
