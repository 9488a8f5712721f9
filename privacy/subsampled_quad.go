package privacy

import "math"

// Fractional orders of the Poisson-subsampled Gaussian: certified trapezoidal quadrature.

const (
	// sgQuadTol is the accuracy the fractional-order quadrature certifies: its
	// discretisation bound and both truncation bounds together are at most sgQuadTol times
	// the computed value of A_alpha - 1 (all three are added to it).
	sgQuadTol = 1e-11
	// sgQuadMaxNodes caps the nodes of one fractional-order quadrature. The node count is
	// about (max(alpha,2) + 24 z)/h with h = 2 pi min(2.8 z^2, 4 z)/E and E about 40 to 80;
	// on the order grid the cap is reached only for noise multipliers below about 0.1 (RDP
	// above about 50 per step), where the chord bound is used instead. Cost: about 60 ns
	// per node, 1-5 ms for a whole curve when the noise multiplier is at least 0.3.
	sgQuadMaxNodes = 1 << 14
)

// fracLogA returns an upper bound on ln A_alpha at a fractional order alpha > 1, within
// about sgQuadTol relative of the exact value of A_alpha - 1, and false when the
// quadrature is not affordable (see sgQuadMaxNodes) or the parameters are outside its
// range. gUp must be an upper bound on ln A_alpha (the chord bound); it enters the error
// bound only through a logarithm. q must be in (0,1).
//
// Method. With s = z and phi the N(0, s^2) density,
//
//	A_alpha - 1 = integral phi(x) H(y(x)) dx,  y(x) = q (e^{w(x)} - 1),  w(x) = (2x-1)/(2 s^2),
//
// where H(y) = (1+y)^alpha - 1 - alpha y >= 0 for y >= -1 (convexity), because
// E_0[e^w] = 1 makes the subtracted terms integrate to exactly 1. H is evaluated without
// cancellation: by its power series sum_{k>=2} C(alpha,k) y^k when |y| (alpha+1) <= 1/2,
// otherwise in closed form (log space for large y); see sgLogH. The integral is approximated by the
// infinite-grid trapezoidal sum h sum_k f(kh), f = phi H(y), of which the nodes in
// [xLo, xHi] are summed (log-sum-exp, all terms positive) and the rest bounded:
//
//   - Discretisation (Trefethen and Weideman, SIAM Review 56(3), 2014, Theorem 5.1): f is
//     analytic in the strip |Im x| < a for a < pi s^2, since there 1-q+q e^w stays off
//     (-inf, 0] and the principal power is analytic; on the line Im x = b,
//     |phi| = phi(Re x) e^{b^2/(2 s^2)}, |1-q+q e^w| <= 1-q+q e^{Re w} and
//     |1 + alpha q (e^w - 1)| <= |1 - alpha q| + alpha q e^{Re w}, so
//     integral |f(x+ib)| dx <= M = e^{a^2/(2 s^2)} (A_alpha + |1 - alpha q| + alpha q), and the
//     infinite trapezoidal sum is within 2M/(e^{2 pi a/h} - 1) of the integral. We take
//     a = min(0.9 pi s^2, 4 s) and bound A_alpha by e^gUp.
//   - Lower omitted nodes x <= xLo - h < 0: there -q < y < 0, and Taylor's theorem gives
//     H(y) = C(alpha,2) (1+xi)^(alpha-2) y^2 <= C(alpha,2) max(1, (1-q)^(alpha-2)) q^2; phi
//     increases there, so h times the sum of phi over those nodes is at most Phi(xLo/s).
//   - Upper omitted nodes x >= xHi + h with xHi >= max(alpha, 2): there 0 < y <= q e^w, so
//     H(y) <= C(alpha,2) q^2 e^{2w} c_p (1 + [alpha > 2] q^p e^{pw}) with p = alpha - 2 and
//     c_p = max(1, 2^(p-1)) (c_p = 1 and no second term when alpha <= 2); with
//     phi(x) e^{jw} = e^{(j^2-j)/(2 s^2)} phi(x - j), h times the sum over those nodes is at
//     most the matching upper Gaussian tails Q((xHi - j)/s), j = 2 and j = alpha.
//
// The grid starts at a = 36 h/(2 pi) over [-12 s, max(alpha,2) + 12 s]; a side whose tail
// bound exceeds sgQuadTol/4 of the sum is extended by 4 s, and h is halved (reusing the
// nodes) while the discretisation bound exceeds sgQuadTol/2 of it. The returned value is
// ln(1 + sum + all three bounds).
func (e *sgEval) fracLogA(alpha, gUp float64) (float64, bool) {
	q, z := e.q, e.z
	s2 := z * z
	if !(s2 > 1e-290 && s2 < 1e290) || !(alpha > 1) || math.IsInf(alpha, 0) || !(q > 0 && q < 1) || math.IsNaN(gUp) {
		return 0, false
	}
	inv2s2 := 1 / (2 * s2)
	logNorm := -math.Log(z) - 0.5*math.Log(2*math.Pi)
	a := math.Min(0.9*math.Pi*s2, 4*z)
	logM := a*a*inv2s2 + sgLogAdd(gUp, math.Log(math.Abs(1-alpha*q)+alpha*q))
	if math.IsInf(logM, 0) || math.IsNaN(logM) {
		return 0, false
	}
	lc2 := math.Log(alpha * (alpha - 1) / 2)
	logKl := 0.0
	if alpha < 2 {
		logKl = (alpha - 2) * e.log1mQ
	}
	p := alpha - 2
	logCp := 0.0
	if p > 1 {
		logCp = (p - 1) * math.Ln2
	}
	jHi := math.Max(alpha, 2)
	thr := 1 / (2 * (alpha + 1))
	logf := func(x float64) float64 {
		return -x*x*inv2s2 + logNorm + sgLogH(alpha, q, e.logQ, thr, (2*x-1)*inv2s2)
	}

	h := 2 * math.Pi * a / 36
	kLo := math.Floor(-12 * z / h)
	kHi := math.Ceil((jHi + 12*z) / h)
	if !(kHi-kLo+1 <= sgQuadMaxNodes) {
		return 0, false
	}
	acc := newSGLSE()
	for k := kLo; k <= kHi; k++ {
		acc.add(logf(k * h))
	}
	logTol := math.Log(sgQuadTol)
	for iter := 0; iter < 100; iter++ {
		logT := math.Log(h) + acc.log()
		if math.IsNaN(logT) || math.IsInf(logT, 0) {
			return 0, false // the sum underflowed or overflowed: no certified value
		}
		xLo, xHi := kLo*h, kHi*h
		logStrip := math.Ln2 + logM - sgLogExpm1(2*math.Pi*a/h)
		logLow := lc2 + logKl + 2*e.logQ + sgLogUpperTail(-xLo/z)
		logUp := lc2 + 2*e.logQ + logCp + 2*inv2s2 + sgLogUpperTail((xHi-2)/z)
		if p > 0 {
			logUp = sgLogAdd(logUp, lc2+2*e.logQ+logCp+p*e.logQ+(alpha*alpha-alpha)*inv2s2+sgLogUpperTail((xHi-alpha)/z))
		}
		okS := logStrip <= logT+logTol-math.Ln2
		okL := logLow <= logT+logTol-2*math.Ln2
		okU := logUp <= logT+logTol-2*math.Ln2
		if okS && okL && okU {
			logErr := sgLogAdd(logStrip, sgLogAdd(logLow, logUp))
			return sgLog1pExp(sgLogAdd(logT, logErr)), true
		}
		ext := math.Ceil(4 * z / h)
		switch {
		case !okL || !okU:
			if !(kHi-kLo+1+ext <= sgQuadMaxNodes) {
				return 0, false
			}
			if !okL {
				for k := kLo - ext; k < kLo; k++ {
					acc.add(logf(k * h))
				}
				kLo -= ext
			} else {
				for k := kHi + 1; k <= kHi+ext; k++ {
					acc.add(logf(k * h))
				}
				kHi += ext
			}
		default:
			// Give up early when the step the bound asks for would exceed the node budget.
			eNeed := logM + 2*math.Ln2 - logT - logTol
			if !(2*(kHi-kLo)+1 <= sgQuadMaxNodes) || !((kHi-kLo)*eNeed*h/(2*math.Pi*a) <= sgQuadMaxNodes) {
				return 0, false
			}
			h /= 2
			kLo, kHi = 2*kLo, 2*kHi
			for k := kLo + 1; k < kHi; k += 2 {
				acc.add(logf(k * h))
			}
		}
	}
	return 0, false
}

// sgLogH returns ln H(y) for H(y) = (1+y)^alpha - 1 - alpha y and y = q (e^w - 1), given
// logQ = ln q and thr = 1/(2 (alpha+1)); -Inf when H(y) = 0 (w = 0).
func sgLogH(alpha, q, logQ, thr, w float64) float64 {
	if w == 0 {
		return math.Inf(-1)
	}
	if w < 600 {
		em := math.Expm1(w)
		y := q * em
		ay := math.Abs(y)
		if ay <= thr {
			s := sgHSeries(alpha, y)
			if ay > 1e-150 {
				return math.Log(y * y * s)
			}
			return 2*(logQ+math.Log(math.Abs(em))) + math.Log(s)
		}
		if y < 0 {
			// -1 < y < -thr: H is not small against alpha |y|, so the difference is accurate.
			v := math.Expm1(alpha*math.Log1p(y)) - alpha*y
			if !(v > 0) {
				return math.Inf(-1)
			}
			return math.Log(v)
		}
		// H = (1+y)^alpha (1 - (1 + alpha y)/(1+y)^alpha).
		pw := alpha * math.Log1p(y)
		d := math.Log1p(alpha*y) - pw
		if d >= 0 {
			return math.Inf(-1)
		}
		return pw + math.Log(-math.Expm1(d))
	}
	// w >= 600: the same in log space, ly = ln y.
	ly := logQ + w + math.Log1p(-math.Exp(-w))
	if ly <= math.Log(thr) {
		return 2*ly + math.Log(sgHSeries(alpha, math.Exp(ly)))
	}
	pw := alpha * sgLog1pExp(ly)
	d := sgLog1pExp(math.Log(alpha)+ly) - pw
	if d >= 0 {
		return math.Inf(-1)
	}
	return pw + math.Log(-math.Expm1(d))
}

// sgHSeries returns H(y)/y^2 = sum_{k>=2} C(alpha,k) y^(k-2) for |y| (alpha+1) <= 1/2. The
// term ratio (alpha-k) y/(k+1) is then at most 1/6 in modulus, so the sum stays within
// [5/6, 7/6] of C(alpha,2) > 0 and converges fast.
func sgHSeries(alpha, y float64) float64 {
	t := alpha * (alpha - 1) / 2
	s := t
	for k := 2.0; k < 200; k++ {
		t *= (alpha - k) / (k + 1) * y
		s += t
		if math.Abs(t) <= 1e-17*s {
			break
		}
	}
	return s
}

// sgLogUpperTail returns ln P(N(0,1) > t), or an upper bound on it for t >= 30 (the Mills
// ratio bound Q(t) <= phi(t)/t), never underflowing.
func sgLogUpperTail(t float64) float64 {
	if t < 30 {
		return math.Log(0.5 * math.Erfc(t/math.Sqrt2))
	}
	return -t*t/2 - math.Log(t) - 0.5*math.Log(2*math.Pi)
}

// sgLogAdd returns ln(e^x + e^y).
func sgLogAdd(x, y float64) float64 {
	if x < y {
		x, y = y, x
	}
	if math.IsInf(y, -1) {
		return x
	}
	return x + math.Log1p(math.Exp(y-x))
}

// sgLog1pExp returns ln(1 + e^x).
func sgLog1pExp(x float64) float64 {
	if x > 0 {
		return x + math.Log1p(math.Exp(-x))
	}
	return math.Log1p(math.Exp(x))
}

// sgLogExpm1 returns ln(e^x - 1) for x > 0.
func sgLogExpm1(x float64) float64 {
	if x > 1 {
		return x + math.Log1p(-math.Exp(-x))
	}
	return math.Log(math.Expm1(x))
}

// sgLSE accumulates ln(sum_i e^{v_i}) without overflow; a NaN term makes the result NaN.
type sgLSE struct{ mx, s float64 }

func newSGLSE() sgLSE { return sgLSE{mx: math.Inf(-1)} }

func (l *sgLSE) add(v float64) {
	switch {
	case math.IsNaN(v):
		l.mx = math.NaN()
	case math.IsInf(v, -1):
	case v > l.mx:
		l.s = l.s*math.Exp(l.mx-v) + 1
		l.mx = v
	default:
		l.s += math.Exp(v - l.mx)
	}
}

func (l *sgLSE) log() float64 {
	if math.IsNaN(l.mx) {
		return math.NaN()
	}
	if l.s == 0 {
		return math.Inf(-1)
	}
	return l.mx + math.Log(l.s)
}
