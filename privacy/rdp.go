package privacy

import (
	"errors"
	"fmt"
	"math"
)

// Orders is the Renyi-DP order grid: 1.01..1.09 in steps of 0.01, 1.1..10.9 in steps of
// 0.1, the integers 12..63, then 64, 80, 96, 128, 160, 192, 256, 384, 512, 1024, and a
// geometric tail 2048 ... 2^20. Curves are aligned with it. It must not be modified.
//
// The tail exists for small targets: with zero loss the conversion at order a still costs
// about (ln(1/delta) + ln a)/(a - 1), 0.0035 at a = 1024 and delta = 1e-5, so epsilon 1e-4
// needs orders near 10^5 (2.4e-5 at 2^20).
var Orders = buildOrders()

func buildOrders() []float64 {
	var o []float64
	for x := 1; x <= 9; x++ {
		o = append(o, 1+float64(x)/100)
	}
	for x := 1; x <= 99; x++ {
		o = append(o, 1+float64(x)/10)
	}
	for a := 12; a <= 63; a++ {
		o = append(o, float64(a))
	}
	o = append(o, 64, 80, 96, 128, 160, 192, 256, 384, 512, 1024)
	for a := 2048.0; a <= 1<<20; a *= 2 {
		o = append(o, a)
	}
	return o
}

// Curve is a Renyi-DP curve: element k is the RDP epsilon at order Orders[k]. +Inf marks an
// order at which no bound is available. A nil Curve means zero privacy loss at every order.
// A non-nil Curve shorter than Orders is treated as +Inf at the missing orders.
type Curve []float64

func (c Curve) at(k int) float64 {
	if c == nil {
		return 0
	}
	if k >= len(c) || math.IsNaN(c[k]) {
		return math.Inf(1)
	}
	return c[k]
}

// ZeroCurve returns a curve with zero privacy loss at every order.
func ZeroCurve() Curve { return make(Curve, len(Orders)) }

// InfCurve returns a curve that is +Inf at every order (no guarantee).
func InfCurve() Curve { return constCurve(math.Inf(1)) }

func constCurve(v float64) Curve {
	c := make(Curve, len(Orders))
	for k := range c {
		c[k] = v
	}
	return c
}

// Add returns the composition c + o (RDP adds under adaptive composition). NaN entries are
// treated as +Inf.
func (c Curve) Add(o Curve) Curve {
	r := make(Curve, len(Orders))
	for k := range r {
		r[k] = c.at(k) + o.at(k)
	}
	return r
}

// Scale returns the k-fold composition k*c. k must be >= 0; k == 0 gives the zero curve and
// a negative or NaN k gives the +Inf curve.
func (c Curve) Scale(k float64) Curve {
	if k == 0 {
		return ZeroCurve()
	}
	if !(k > 0) {
		return InfCurve()
	}
	r := make(Curve, len(Orders))
	for i := range r {
		r[i] = k * c.at(i)
	}
	return r
}

// Min returns the order-wise minimum of c and o: valid whenever both curves are valid
// bounds for the same pair of neighbouring output distributions.
func (c Curve) Min(o Curve) Curve {
	r := make(Curve, len(Orders))
	for k := range r {
		r[k] = math.Min(c.at(k), o.at(k))
	}
	return r
}

// GaussianCurve returns the RDP curve alpha*Delta^2/(2 sigma^2) of the Gaussian mechanism
// with L2 sensitivity Delta and noise std sigma (Mironov 2017, Prop. 7). Delta == 0 gives
// zeros; sigma == 0 with Delta > 0, or any negative, NaN or infinite argument, gives +Inf.
func GaussianCurve(sensitivity, sigma float64) Curve {
	return gaussianOn(Orders, sensitivity, sigma)
}

func gaussianOn(orders []float64, sens, sigma float64) Curve {
	c := make(Curve, len(orders))
	bad := ValidateSigma(sens) != nil || ValidateSigma(sigma) != nil
	for k, a := range orders {
		switch {
		case bad:
			c[k] = math.Inf(1)
		case sens == 0:
			c[k] = 0
		case sigma == 0:
			c[k] = math.Inf(1)
		default:
			r := sens / sigma
			c[k] = a * r * r / 2
		}
	}
	return c
}

// PureDPCurve returns an RDP curve implied by pure eps-DP: min(eps, alpha*eps^2/2) at order
// alpha. The first term is D_alpha <= D_inf; the second is Bun and Steinke (TCC 2016),
// Proposition 3.3: eps-DP implies (eps^2/2)-zCDP, i.e. (alpha, alpha*eps^2/2)-RDP for every
// alpha > 1. eps == 0 gives zeros; a negative, NaN or infinite eps gives +Inf.
func PureDPCurve(eps float64) Curve {
	if ValidateSigma(eps) != nil {
		return InfCurve()
	}
	c := make(Curve, len(Orders))
	for k, a := range Orders {
		c[k] = math.Min(eps, a*eps*eps/2)
	}
	return c
}

// Conversion names the RDP -> (eps, delta)-DP conversion used by ToDP.
const Conversion = "Canonne-Kamath-Steinke 2020 / Asoodeh et al. 2021 (as in Opacus, TF Privacy): " +
	"eps = rdp + ln((alpha-1)/alpha) - (ln(delta) + ln(alpha))/(alpha-1), minimised over orders"

// ConversionClassic names the conversion used by ToDPClassic.
const ConversionClassic = "Mironov 2017 Prop. 3: eps = rdp + ln(1/delta)/(alpha-1), minimised over orders"

// ToDP converts curve c to (eps, delta)-DP with the conversion named by Conversion and
// returns the smallest eps over Orders and the order achieving it. Invalid delta (outside
// (0,1)) or a curve that is +Inf everywhere gives eps = +Inf and order 0. A curve that is
// exactly 0 at some order alpha > 1 (no update, a forward, a zero weight) gives eps = 0 at
// the first such order, see toDPOn.
func ToDP(c Curve, delta float64) (eps, order float64) {
	return toDPOn(Orders, c, delta, false)
}

// ToDPClassic is ToDP with the classic conversion rdp + ln(1/delta)/(alpha-1) (Mironov
// 2017, Prop. 3). It is never smaller than ToDP.
func ToDPClassic(c Curve, delta float64) (eps, order float64) {
	return toDPOn(Orders, c, delta, true)
}

// ToDPChecked is ToDP returning an error for an invalid delta or a curve that gives no
// finite guarantee at any order.
func ToDPChecked(c Curve, delta float64) (eps, order float64, err error) {
	if err := validateDelta(delta); err != nil {
		return math.Inf(1), 0, err
	}
	eps, order = ToDP(c, delta)
	if math.IsInf(eps, 1) {
		return eps, 0, errors.New("privacy: the RDP curve is infinite at every order (no guarantee)")
	}
	return eps, order, nil
}

func validateDelta(delta float64) error {
	if !(delta > 0 && delta < 1) {
		return fmt.Errorf("privacy: delta %v outside (0,1)", delta)
	}
	return nil
}

// toDPOn minimises the conversion over the given orders (c aligned with orders).
//
// A curve that is exactly 0 at an order alpha > 1 converts to eps = 0 (for any valid
// delta): the Renyi divergence of order alpha > 0 vanishes only between equal
// distributions (van Erven and Harremoes 2014, Theorem 8), so the two neighbouring output
// distributions are identical, which is (0, 0)-DP. The conversion formulas themselves
// keep a positive term at every finite order (at alpha = 1024 and delta = 1e-5 about
// 0.0035), which would charge a node that released nothing.
func toDPOn(orders []float64, c Curve, delta float64, classic bool) (float64, float64) {
	best, bestA := math.Inf(1), 0.0
	if validateDelta(delta) != nil {
		return best, bestA
	}
	for k, a := range orders {
		if a > 1 && c.at(k) == 0 {
			return 0, a
		}
	}
	for k, a := range orders {
		r := c.at(k)
		if math.IsInf(r, 1) || r < 0 || !(a > 1) {
			continue
		}
		var e float64
		if classic {
			e = r + math.Log(1/delta)/(a-1)
		} else {
			e = r + math.Log((a-1)/a) - (math.Log(delta)+math.Log(a))/(a-1)
			if e < 0 {
				e = 0
			}
		}
		if e < best {
			best, bestA = e, a
		}
	}
	return best, bestA
}

// CalibrateRelTol is the relative precision of CalibrateSigma: the returned sigma meets the
// target, and sigma/(1+CalibrateRelTol) does not (for a curve non-increasing in sigma).
const CalibrateRelTol = 1e-10

// calibrateMaxLog2 bounds the search: sigma in [2^-1000, 2^1000].
const calibrateMaxLog2 = 1000

// ConversionFloor returns the smallest epsilon that ToDP can report at delta for any curve:
// the conversion's value at zero RDP, max(0, min over Orders of
// ln((alpha-1)/alpha) - (ln(delta) + ln(alpha))/(alpha-1)), and the order achieving it.
// It is positive for small delta because the grid stops at order 1024 (0.0035 at
// delta = 1e-5, 0.00125 at 1e-4, zero from delta about 1e-3; epsilon 1e-4 needs
// delta >= 3.3e-4); targets at or below it cannot be met by any noise level.
func ConversionFloor(delta float64) (eps, order float64) {
	// A positive curve too small to matter: the conversion's own term alone (a curve that is
	// exactly zero converts to 0: identical output distributions).
	return ToDP(constCurve(math.SmallestNonzeroFloat64), delta)
}

// CalibrateSigma returns the smallest sigma, to relative precision CalibrateRelTol, such
// that ToDP(curveFor(sigma), delta) <= targetEps. curveFor must be non-increasing in sigma
// (true of every curve in this package). The returned sigma always meets the target.
//
// The search works on log2(sigma): from sigma = 1 it expands the bracket with steps 1, 2,
// 4, ... (so sigma up to 2^1000 or down to 2^-1000 is reached in about ten evaluations),
// then bisects log2(sigma) until the bracket's ratio is at most 1 + CalibrateRelTol (about
// 45 evaluations). A target below ConversionFloor(delta), or equal to a positive floor, is
// reported as unreachable at once; so is a curve that does not meet the target even at
// sigma = 2^1000. When even sigma = 2^-1000 meets it, that value is returned.
func CalibrateSigma(targetEps, delta float64, curveFor func(sigma float64) Curve) (float64, error) {
	if !(targetEps > 0) || math.IsInf(targetEps, 0) {
		return 0, fmt.Errorf("privacy: target epsilon %v must be positive and finite", targetEps)
	}
	if err := validateDelta(delta); err != nil {
		return 0, err
	}
	if curveFor == nil {
		return 0, errors.New("privacy: nil curve function")
	}
	if floor, order := ConversionFloor(delta); targetEps < floor || (floor > 0 && targetEps == floor) {
		return 0, fmt.Errorf("privacy: target epsilon %v is unreachable at delta %v: the RDP conversion alone gives "+
			"epsilon %.6g (at order %v; the order grid stops at %v), even with no privacy loss; raise delta or the target",
			targetEps, delta, floor, order, Orders[len(Orders)-1])
	}
	return CalibrateFigure(targetEps, func(s float64) float64 {
		e, _ := ToDP(curveFor(s), delta)
		return e
	})
}

// CalibrateFigure returns the smallest sigma, to relative precision CalibrateRelTol, whose
// figure(sigma) is at most targetEps; figure must be non-increasing in sigma (every figure
// of this package is: a local bound, a planned bound with its verdict). It is the one
// search every calibration uses (CalibrateSigma, 'dpadmm account plan', the walk
// experiment): from sigma = 1 it expands the bracket with steps 1, 2, 4, ... in log2(sigma)
// (sigma up to 2^1000 or down to 2^-1000 in about ten evaluations), then bisects until the
// bracket's ratio is at most 1 + CalibrateRelTol (about 45 evaluations). The returned sigma
// always meets the target; when even sigma = 2^-1000 does, that value is returned.
func CalibrateFigure(targetEps float64, figure func(sigma float64) float64) (float64, error) {
	if !(targetEps > 0) || math.IsInf(targetEps, 0) {
		return 0, fmt.Errorf("privacy: target epsilon %v must be positive and finite", targetEps)
	}
	if figure == nil {
		return 0, errors.New("privacy: nil figure function")
	}
	ok := func(l float64) bool { return figure(math.Exp2(l)) <= targetEps }
	// Bracket: ok(hi) and !ok(lo), in log2(sigma).
	var lo, hi float64
	if ok(0) {
		hi = 0
		for step := 1.0; ; step *= 2 {
			l := math.Max(hi-step, -calibrateMaxLog2)
			if !ok(l) {
				lo = l
				break
			}
			hi = l
			if l <= -calibrateMaxLog2 {
				return math.Exp2(hi), nil
			}
		}
	} else {
		lo = 0
		for step := 1.0; ; step *= 2 {
			l := math.Min(lo+step, calibrateMaxLog2)
			if ok(l) {
				hi = l
				break
			}
			lo = l
			if l >= calibrateMaxLog2 {
				return 0, fmt.Errorf("privacy: no sigma up to 2^%d meets epsilon %v", calibrateMaxLog2, targetEps)
			}
		}
	}
	// Bisection on log2(sigma) until sigma_hi/sigma_lo <= 1 + CalibrateRelTol.
	width := math.Log2(1 + CalibrateRelTol)
	for i := 0; i < 200 && hi-lo > width; i++ {
		mid := lo + (hi-lo)/2
		if ok(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return math.Exp2(hi), nil
}
