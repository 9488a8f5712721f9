package privacy

import (
	"fmt"
	"math"
)

// SubsampledGaussianNote names the result computed by SubsampledGaussianCurve and the
// conditions under which it holds.
const SubsampledGaussianNote = "Poisson-subsampled Gaussian mechanism, RDP of Mironov, Talwar and Zhang 2019 " +
	"(Sec. 3.3, A_alpha = E_mu0[(mu/mu0)^alpha]: integer orders by the binomial expansion in log space, " +
	"fractional orders by certified trapezoidal quadrature of the defining integral (the log-convexity " +
	"chord between integer orders where that is unaffordable, noise multiplier below about 0.1), all rounded " +
	"upward; the values TF Privacy / Opacus compute); conditions: add/remove-one " +
	"adjacency, each record included independently with probability q, Gaussian noise of std " +
	"noiseMultiplier times the L2 sensitivity of the summed query"

// subsampledRoundUp is the relative outward rounding applied to every finite value. The
// floating-point evaluation (log-gamma binomials and log-sum-exp at integer orders, the
// quadrature sum of at most sgQuadMaxNodes positive terms at fractional orders) has a
// relative error below about 1e-11; the margin makes the computed value an upper bound on
// the exact one despite it, and is far below any accounting tolerance.
const subsampledRoundUp = 1 + 1e-9

// SubsampledGaussianCurve returns the RDP curve of steps adaptive compositions of the
// Poisson-subsampled Gaussian mechanism: each record is included independently with
// probability q, and Gaussian noise of std noiseMultiplier*Delta is added to a query of L2
// sensitivity Delta (add/remove-one adjacency). See SubsampledGaussianNote.
//
// With z = noiseMultiplier, mu0 = N(0, z^2), mu1 = N(1, z^2) and mu = (1-q) mu0 + q mu1,
// the per-step value at order alpha is RDP(alpha) = ln(A_alpha)/(alpha-1) with
// A_alpha = E_{x~mu0}[(mu(x)/mu0(x))^alpha], which is D_alpha(mu||mu0); Mironov, Talwar and
// Zhang 2019 (MTZ) show it is the larger of the two directions (the tests check both by
// quadrature).
//
// Integer orders are computed exactly (up to a documented 1e-9 relative outward rounding)
// from the binomial expansion of MTZ Sec. 3.3:
//
//	A_alpha = sum_{k=0..alpha} C(alpha,k) (1-q)^(alpha-k) q^k exp((k^2-k)/(2 z^2)).
//
// It is evaluated in log space, so it never overflows. Since the binomial weights sum to
// one, A_alpha - 1 is the sum of the non-negative terms k >= 2 with exp(.) replaced by
// expm1(.); summing those keeps full relative precision when the RDP is tiny (small q or
// large z). Cost: one exp per binomial term, about 5,000 over the grid's integer orders.
//
// Fractional orders are computed from the defining integral, see sgEval.fracLogA:
// A_alpha - 1 = integral of N(x; 0, z^2) h(q (e^{(2x-1)/(2z^2)} - 1)) dx with
// h(y) = (1+y)^alpha - 1 - alpha y >= 0 (the subtracted terms integrate to exactly 1), by
// the trapezoidal rule with a certified error bound (Trefethen and Weideman 2014, Thm 5.1)
// and bounded truncation tails, all added to the sum: before the 1e-9 outward rounding it
// is within sgQuadTol (1e-11) relative of the exact A_alpha - 1, and never below it (the
// tests check it against a 192-bit evaluation of the integral). This is the quantity MTZ's
// two-series formula (TF Privacy's _compute_log_a_frac, Opacus' analysis/rdp.py) sums; the
// quadrature is used instead because that series converges only polynomially (like
// i^(-alpha-2)) when the split point z^2 ln(1/q-1) + 1/2 lies near the bulk of mu0, and
// sums terms of size one to get A_alpha, losing the relative precision of A_alpha - 1 when
// the RDP is tiny; the integrand here is positive, so the sum loses nothing, and the
// quadrature error bound decays like exp(-2 pi a/h). When the quadrature would need more
// than sgQuadMaxNodes nodes (on the order grid: noise multiplier below about 0.1, where the
// RDP exceeds about 50 per step), the order falls back to the log-convexity bound: for each
// direction g(alpha) = (alpha-1) D_alpha = ln E_0[(p/p0)^alpha] is convex in alpha
// (Hoelder) with g(1) = 0, so for n < alpha < n+1 the chord through (n, g(n)) and
// (n+1, g(n+1)) lies above g, and for 1 < alpha < 2 RDP(alpha) <= RDP(2). The smaller of the
// two bounds is reported.
//
// Every order is also capped by the unsampled Gaussian value alpha/(2 z^2), valid because
// subsampling never increases Renyi divergence (joint convexity); q == 1 therefore gives
// exactly GaussianCurve(1, noiseMultiplier).Scale(steps). q == 0 or steps == 0 gives the
// zero curve. Invalid input (q outside [0,1] or NaN, noiseMultiplier not > 0 and finite,
// steps < 0) gives InfCurve(); SubsampledGaussianCurveChecked reports it as an error.
func SubsampledGaussianCurve(q, noiseMultiplier float64, steps int) Curve {
	c, err := SubsampledGaussianCurveChecked(q, noiseMultiplier, steps)
	if err != nil {
		return InfCurve()
	}
	return c
}

// SubsampledGaussianCurveChecked is SubsampledGaussianCurve returning an error for invalid
// input instead of the +Inf curve.
func SubsampledGaussianCurveChecked(q, noiseMultiplier float64, steps int) (Curve, error) {
	if err := validateSubsampled(q, noiseMultiplier, steps); err != nil {
		return InfCurve(), err
	}
	if q == 0 || steps == 0 {
		return ZeroCurve(), nil
	}
	per := subsampledGaussianOn(Orders, q, noiseMultiplier)
	s := float64(steps)
	for k := range per {
		per[k] *= s
	}
	return per, nil
}

func validateSubsampled(q, z float64, steps int) error {
	switch {
	case math.IsNaN(q):
		return fmt.Errorf("privacy: sampling rate q is NaN")
	case q < 0 || q > 1:
		return fmt.Errorf("privacy: sampling rate q = %v must be in [0,1]", q)
	case math.IsNaN(z):
		return fmt.Errorf("privacy: noise multiplier is NaN")
	case math.IsInf(z, 0):
		return fmt.Errorf("privacy: noise multiplier %v must be finite", z)
	case !(z > 0):
		return fmt.Errorf("privacy: noise multiplier %v must be > 0", z)
	case steps < 0:
		return fmt.Errorf("privacy: steps = %d must be >= 0", steps)
	}
	return nil
}

// subsampledGaussianOn returns the single-step curve on the given orders (each > 1 and
// finite; anything else gets +Inf). q must be in (0,1] and z > 0 finite.
// subsampledMaxExact is the largest order computed exactly; above it the curve is the
// unsampled Gaussian's alpha/(2 z^2), an upper bound.
const subsampledMaxExact = 1024

func subsampledGaussianOn(orders []float64, q, z float64) Curve {
	c := make(Curve, len(orders))
	r := 1 / z // as in gaussianOn, so that q == 1 reproduces GaussianCurve bit for bit
	if q == 1 {
		for k, a := range orders {
			c[k] = a * r * r / 2
			if !(a > 1) || math.IsInf(a, 0) {
				c[k] = math.Inf(1)
			}
		}
		return c
	}
	maxN := 2
	for _, a := range orders {
		if a > 1 && a <= subsampledMaxExact && math.Ceil(a) > float64(maxN) {
			maxN = int(math.Ceil(a))
		}
	}
	e := newSGEval(q, z, maxN)
	for k, a := range orders {
		if !(a > 1) || math.IsInf(a, 0) {
			c[k] = math.Inf(1)
			continue
		}
		var v float64
		n := math.Floor(a)
		switch {
		case a > subsampledMaxExact:
			// Subsampling never increases the divergence: the unsampled Gaussian bounds it
			// (set below). The exact sums would cost O(a) terms at these orders.
			v = math.Inf(1)
		case a == n:
			v = e.logA(int(n)) / (a - 1)
		default:
			// Log-convexity chord, then the exact value where the quadrature is affordable.
			if a < 2 {
				v = e.logA(2)
			} else {
				lo, hi := e.logA(int(n)), e.logA(int(n)+1)
				v = ((n+1-a)*lo + (a-n)*hi) / (a - 1)
			}
			gUp := (a - 1) * math.Min(v, a*r*r/2) // upper bound on ln A_alpha
			if la, ok := e.fracLogA(a, gUp); ok {
				if x := la / (a - 1) * subsampledRoundUp; x < v {
					v = x
				}
			}
		}
		if math.IsNaN(v) {
			v = math.Inf(1)
		}
		c[k] = math.Min(v, a*r*r/2)
	}
	return c
}

// sgEval evaluates ln A_alpha for fixed (q, z): integer orders by logA (cached),
// fractional orders by fracLogA.
type sgEval struct {
	q, z         float64
	logQ, log1mQ float64
	lgam         []float64 // lgam[k] = ln k!
	lem          []float64 // lem[k] = ln expm1((k^2-k)/(2 z^2)), k >= 2
	cache        []float64 // cache[n] = rounded-up ln A_n, NaN when not yet computed
	buf          []float64
}

func newSGEval(q, z float64, maxN int) *sgEval {
	e := &sgEval{
		q:      q,
		z:      z,
		logQ:   math.Log(q),
		log1mQ: math.Log1p(-q),
		lgam:   make([]float64, maxN+1),
		lem:    make([]float64, maxN+1),
		cache:  make([]float64, maxN+1),
		buf:    make([]float64, maxN+1),
	}
	inv := 1 / (2 * z * z)
	for k := 0; k <= maxN; k++ {
		e.lgam[k], _ = math.Lgamma(float64(k) + 1)
		e.cache[k] = math.NaN()
		if k < 2 {
			e.lem[k] = math.Inf(-1)
			continue
		}
		x := float64(k) * float64(k-1) * inv
		if x > 1 {
			// ln(e^x - 1) = x + ln(1 - e^-x), accurate and overflow-free.
			e.lem[k] = x + math.Log1p(-math.Exp(-x))
		} else {
			e.lem[k] = math.Log(math.Expm1(x))
		}
	}
	return e
}

// logA returns an upper bound (relative rounding subsampledRoundUp) on ln A_n, n >= 2.
func (e *sgEval) logA(n int) float64 {
	if v := e.cache[n]; !math.IsNaN(v) {
		return v
	}
	// ln(A_n - 1) = logsumexp_k t_k over k = 2..n.
	fn := float64(n)
	mx := math.Inf(-1)
	t := e.buf[:n+1]
	for k := 2; k <= n; k++ {
		fk := float64(k)
		v := e.lgam[n] - e.lgam[k] - e.lgam[n-k] + (fn-fk)*e.log1mQ + fk*e.logQ + e.lem[k]
		t[k] = v
		if v > mx {
			mx = v
		}
	}
	var r float64
	switch {
	case math.IsInf(mx, 1) || math.IsNaN(mx):
		r = math.Inf(1)
	case math.IsInf(mx, -1):
		r = 0
	default:
		s := 0.0
		for k := 2; k <= n; k++ {
			s += math.Exp(t[k] - mx)
		}
		logB := mx + math.Log(s)
		// ln A = ln(1 + B).
		if logB > 0 {
			r = logB + math.Log1p(math.Exp(-logB))
		} else {
			r = math.Log1p(math.Exp(logB))
		}
		r *= subsampledRoundUp
	}
	e.cache[n] = r
	return r
}
