package privacy

import (
	"fmt"
	"math"
)

// WalkUpdateCurve is the RDP curve of one noisy walk update: a Gaussian mechanism with
// sensitivity 4*lambda*C and noise std lambda*sigma, i.e. 8*alpha*C^2/sigma^2 (lambda
// cancels). clip is C, the bound on ||x - z||.
func WalkUpdateCurve(clip, sigma float64) Curve {
	return GaussianCurve(4*clip, sigma)
}

// WalkLocalCurve is the local-DP curve of `updates` noisy walk updates by one user against
// an observer of every message (Cyffers et al. 2023, Theorem 3 local, with L*gamma -> C):
// updates * 8*alpha*C^2/sigma^2. A negative updates count gives +Inf.
func WalkLocalCurve(clip, sigma float64, updates int) Curve {
	if updates < 0 {
		return InfCurve()
	}
	return WalkUpdateCurve(clip, sigma).Scale(float64(updates))
}

// GeometricFactor returns E[1/m] = ln(n)/(n-1) for m geometric with parameter 1/n on
// {1,2,...}: the expected amplification factor of a random walk on the complete graph with
// n users and uniform next hop (self included). It returns +Inf for n < 2.
func GeometricFactor(n int) float64 {
	if n < 2 {
		return math.Inf(1)
	}
	return math.Log(float64(n)) / float64(n-1)
}

// Theorem4Curve is the network-RDP curve of Cyffers et al. 2023, Theorem 4, in the
// conservative corrected form: at order alpha, with e1 = 8*alpha*C^2/sigma^2 and
// c = (alpha-1)*e1, the bound is K_i*(1+c)*e1*ln(n)/(n-1) when c <= 1 and +Inf otherwise.
// n is the number of users, updates the cap K_i on user i's noisy updates.
// Invalid arguments (n < 2, updates < 0, negative or non-finite clip or sigma) give +Inf.
func Theorem4Curve(n, updates int, clip, sigma float64) Curve {
	return theorem4On(Orders, n, updates, clip, sigma, false)
}

// Theorem4PrintedCurve is Theorem 4 exactly as printed: K_i*8*alpha*C^2*ln(n)/(sigma^2*n),
// valid at orders with sigma > 2*C*sqrt(alpha*(alpha-1)), +Inf elsewhere. It can be up to
// about 2n/(n-1) times smaller than Theorem4Curve; prefer Theorem4Curve.
func Theorem4PrintedCurve(n, updates int, clip, sigma float64) Curve {
	return theorem4On(Orders, n, updates, clip, sigma, true)
}

func theorem4On(orders []float64, n, updates int, clip, sigma float64, printed bool) Curve {
	c := make(Curve, len(orders))
	bad := n < 2 || updates < 0 || ValidateSigma(clip) != nil || ValidateSigma(sigma) != nil
	for k, a := range orders {
		switch {
		case bad:
			c[k] = math.Inf(1)
		case updates == 0 || clip == 0:
			c[k] = 0
		case sigma == 0:
			c[k] = math.Inf(1)
		case printed:
			if sigma > 2*clip*math.Sqrt(a*(a-1)) {
				c[k] = thm4PrintedValue(a, n, updates, clip, sigma)
			} else {
				c[k] = math.Inf(1)
			}
		default:
			r := clip / sigma
			e1 := 8 * a * r * r
			cc := (a - 1) * e1
			if cc <= 1 {
				c[k] = float64(updates) * (1 + cc) * e1 * GeometricFactor(n)
			} else {
				c[k] = math.Inf(1)
			}
		}
	}
	return c
}

// thm4PrintedValue is the printed Theorem 4 formula without its order condition.
func thm4PrintedValue(a float64, n, updates int, clip, sigma float64) float64 {
	return float64(updates) * 8 * a * clip * clip * math.Log(float64(n)) / (sigma * sigma * float64(n))
}

// RealizedPathCurve is the realised-path network-RDP curve of user i's data as seen by
// user j, the bound of RealisedPairwise for one pair written out directly (a reference
// for it). path[k] is the user performing noisy update k; the model it produces is
// delivered to path[k+1], and j views the model whenever path[k] == j. The updates between
// two views of j form a segment; with s_k = 1 for i's updates and S_k their prefix sums,
// the segment costs WalkUpdateCurve times the sum of rise^2/run over the greatest convex
// minorant of the points (k, S_k) (privacy amplification by iteration with the best shift
// allocation, see RealisedPairwise), and the costs of j's views add up. When finalReleased
// the final model is one more view of j (the updates after j's last view, or the whole path
// if j never holds it); otherwise those updates cost 0. The minorant is found by gift
// wrapping over every point of the segment, O(m*h) for m updates and h hull vertices.
func RealizedPathCurve(path []int, i, j int, clip, sigma float64, finalReleased bool) Curve {
	w := 0.0
	var seg []bool // seg[k]: update k of the current segment is i's
	for _, v := range path {
		if v == j {
			w += gcmCost(seg)
			seg = seg[:0]
			continue
		}
		seg = append(seg, v == i)
	}
	if finalReleased {
		w += gcmCost(seg)
	}
	return WalkUpdateCurve(clip, sigma).Scale(w)
}

// gcmCost is min sum_k a_k^2 over a_1..a_m with prefix sums A_k <= S_k and A_m = S_m, where
// S_k counts the true entries of s[:k]: the sum of rise^2/run along the greatest convex
// minorant of (k, S_k), k = 0..m. From each vertex the next is the point of least slope
// (the farthest one on ties).
func gcmCost(s []bool) float64 {
	S := make([]int64, len(s)+1)
	for k, b := range s {
		S[k+1] = S[k]
		if b {
			S[k+1]++
		}
	}
	m := int64(len(s))
	cost := 0.0
	for x0 := int64(0); x0 < m; {
		best := x0 + 1
		for x := x0 + 2; x <= m; x++ {
			// slope(x0, x) <= slope(x0, best)
			if (S[x]-S[x0])*(best-x0) <= (S[best]-S[x0])*(x-x0) {
				best = x
			}
		}
		dy := float64(S[best] - S[x0])
		cost += dy * dy / float64(best-x0)
		x0 = best
	}
	return cost
}

// Bound is an (eps, delta) guarantee with the theorem it rests on and its conditions.
type Bound struct {
	Epsilon, Order float64 // eps at the given delta, and the RDP order achieving it
	Theorem        string  // the result the bound rests on
	Conditions     string  // what must hold for the bound to be valid
	ConditionsHold bool    // false when the checkable conditions fail at every order
	Note           string  // what holds instead when ConditionsHold is false, or caveats
}

// Theorem4Name names the result Theorem4Bound rests on.
const Theorem4Name = "Cyffers et al. 2023, Theorem 4 (conservative corrected form: (1+c) weak-convexity factor " +
	"and exact geometric law ln(n)/(n-1))"

// Theorem4Conditions lists the assumptions of Theorem4Bound.
const Theorem4Conditions = "clip C bounds ||x - z|| (or f is L-Lipschitz with L*gamma <= C and the prox is exact), " +
	"so one update has sensitivity 4*lambda*C against noise std lambda*sigma; complete graph with uniform next hop " +
	"(self included); the path is secret from the observer j; order condition c = (alpha-1)*8*alpha*C^2/sigma^2 <= 1; " +
	"user i performs at most K_i noisy updates (hard cap); every hop a noisy update; the figure is an expectation over the " +
	"secret uniform path (the realised figure of one run can be above it)"

// LocalName names the result LocalBound rests on.
const LocalName = "Cyffers et al. 2023, Theorem 3 (local), composed over K_i updates"

// LocalConditions lists the assumptions of LocalBound.
const LocalConditions = "clip C bounds ||x - z|| (sensitivity 4*lambda*C, noise std lambda*sigma per update); " +
	"user i performs at most K_i noisy updates (hard cap); holds against an observer of every message"

// LocalBound is the local-DP (eps, delta) bound of `updates` noisy walk updates.
func LocalBound(clip, sigma float64, updates int, delta float64) Bound {
	eps, order := ToDP(WalkLocalCurve(clip, sigma, updates), delta)
	b := Bound{Epsilon: eps, Order: order, Theorem: LocalName, Conditions: LocalConditions, ConditionsHold: true}
	if err := validateDelta(delta); err != nil {
		b.ConditionsHold = false
		b.Note = err.Error()
	}
	return b
}

// Theorem4Bound is the network-DP (eps, delta) bound of Theorem4Curve for one pair (i, j).
// When the order condition fails at every order, ConditionsHold is false, Epsilon and
// Order are the local-DP bound (which always holds) and Note says so.
func Theorem4Bound(n, updates int, clip, sigma, delta float64) Bound {
	b := Bound{Theorem: Theorem4Name, Conditions: Theorem4Conditions, ConditionsHold: true}
	if err := validateDelta(delta); err != nil {
		b.Epsilon, b.ConditionsHold, b.Note = math.Inf(1), false, err.Error()
		return b
	}
	if n < 2 {
		b.Epsilon, b.ConditionsHold, b.Note = math.Inf(1), false, fmt.Sprintf("privacy: need n >= 2 users, got %d", n)
		return b
	}
	b.Epsilon, b.Order = ToDP(Theorem4Curve(n, updates, clip, sigma), delta)
	b.Note = "the proof of Theorem 4 has known gaps (amplification by iteration is applied to z, where the update " +
		"map is not shown non-expansive; only j's first observation after each update is charged): treat the value " +
		"as the paper's claim, and LocalBound as the guarantee that holds unconditionally"
	if math.IsInf(b.Epsilon, 1) {
		loc := LocalBound(clip, sigma, updates, delta)
		b.ConditionsHold = false
		b.Epsilon, b.Order = loc.Epsilon, loc.Order
		b.Note = "the order condition c <= 1 fails at every order (sigma too small for clip C); " +
			"Epsilon reports the weaker local-DP bound (" + LocalName + "), which holds regardless"
	}
	return b
}
