package privacy

import (
	"math"
	"math/rand/v2"
)

// The planned weight of a pair on the complete graph, from the JOINT per-segment cost.
//
// What "planned" promises. The planned walk figure is (1+c) e1 W_plan with W_plan an upper
// bound on E[W_ij], the expectation over a uniformly random secret path of the weight that
// the realised accountant (RealisedPairwise: all of i's updates between two views of j
// charged jointly, the greatest convex minorant of their staircase) gives the pair (i, j),
// for every pair. It is an expectation over the path, as Cyffers et al.'s Theorem 4 is, not
// a bound for every path: the realised figure of one run can be above it (RealisedPairwise
// reports that figure after the run). Charging i's updates one by one (K_i E[1/m], the
// printed Theorem 4) is below E[W_ij] whenever two updates of i can fall between two views
// of j, by up to 10% for n <= 10 (it is never above the joint cost; see RealisedPairwise).
//
// The bound (complete graph, n >= 3, uniform next hop with self included, every hop a
// noisy update, H hops, cap K_i >= H/n). Split j's view of the run into segments: seg_0
// from the start to j's first visit, one segment after each visit of j (the holders
// strictly between two visits, i.i.d. uniform over the n-1 other nodes, a geometric number
// of them), and the last one closed by the final release. By linearity
// E[W] = sum of the segments' expected costs, and:
//
//   - The segments after j's visits that end at a later visit: a sequence of i.i.d.
//     segments read up to a stopping time (the number of visits, at most H/n + 1 <= K_i + 1
//     in expectation, read one segment late so that Wald's identity applies), so at most
//     (K_i + 1) rho(n), rho(n) = E[cost of one segment] (JointSegmentRho).
//   - seg_0: the starter (who may be i) followed by a segment: by Minkowski's inequality
//     on the two allocations, at most 2/L_0 + 2 cost(rest), in expectation at most
//     2 ln(n)/(n-1) + 2 rho(n).
//   - The segment closed by the final release (FinalReleasedToAll): for the allocation
//     that spreads each update d of i evenly over the L_d noisy steps from it to the end,
//     the cost is sum_{d,e} 1/max(L_d, L_e) = sum_d (2 r_d - 1)/L_d with r_d the updates of i
//     from d on; given L_d = L the L-1 later holders are uniform over the n-1 nodes other
//     than j, so E[r_d - 1 | L] = (L-1)/(n-1), and i holds step t with no visit of j after it
//     with probability (1/n)(1-1/n)^(H-1-t) (the starter at most 1):
//     F(n, H) = sum_{L=1..H} (1/n)(1-1/n)^(L-1) g(L) + g(H), g(L) = 1/L + 2(L-1)/((n-1) L).
//
// So W_plan = (K_i + 3) rho(n) + 2 ln(n)/(n-1) + F(n, H) (F only with a final release).
// n = 2 gets no planned amplification (the observer holds every other hop; WalkDecide).

// JointSegmentRhoAnalytic is a closed-form upper bound on rho(n): the same allocation as
// for the final segment applied to a complete one, ln(n)/(n-1) + 2 (1 - ln(n)/(n-1))/(n-1)
// (E[1/L] = ln(n)/(n-1) for each update, E[r] = 1 updates of i per segment).
func JointSegmentRhoAnalytic(n int) float64 {
	g := GeometricFactor(n)
	return g + 2*(1-g)/float64(n-1)
}

// Monte Carlo estimate of rho(n), with a stated confidence.
const (
	// jointSamples segments are drawn per n.
	jointSamples = 1 << 22
	// jointTrunc: segments with more than this many updates of i count as their upper
	// bound r (the cost of placing each update's shift on its own noise), whose expected
	// excess E[r; r > R] = (R+2)/2^(R+1) is added exactly.
	jointTrunc = 24
	// jointBeta is the probability that the empirical Bernstein bound fails.
	jointBeta = 1e-9
)

// JointSegmentNote states how JointSegmentRho is computed.
const JointSegmentNote = "rho(n), the expected joint cost of the segment between two views of an observer on the complete " +
	"graph, is the smaller of a closed-form allocation bound and (n <= 256) a seeded Monte Carlo estimate over 2^22 segments " +
	"with an empirical Bernstein upper confidence bound (Maurer and Pontil 2009, Thm 4) at failure probability 1e-9, segments " +
	"with more than 24 updates of i counted at their bound r and that tail's mean added exactly"

// jointTableMax is the largest n whose Monte Carlo bound is tabulated.
const jointTableMax = 256

// JointSegmentRho returns an upper bound on rho(n) for n >= 3 (+Inf below): the smaller of
// JointSegmentRhoAnalytic and the Monte Carlo upper confidence bound (JointSegmentNote).
// The estimate is seeded by n, so the value is the same on every machine; for n <=
// jointTableMax it is read from jointRhoTable (planned_joint_table.go, written and checked
// by TestJointRhoTable), above it the closed form is used (the Monte Carlo margin is then
// no longer smaller than the closed form's excess).
func JointSegmentRho(n int) float64 {
	switch {
	case n < 3:
		return math.Inf(1)
	case n <= jointTableMax:
		return math.Min(JointSegmentRhoAnalytic(n), jointRhoTable[n-3])
	}
	return JointSegmentRhoAnalytic(n)
}

// jointSegmentMC is the empirical Bernstein upper confidence bound on rho(n) from s
// sampled segments. A segment: each holder is j with probability 1/n (the segment ends),
// i with 1/n, another node otherwise; between two events (i or j) the number of other
// holders is geometric with success probability 2/n, and each event is i or j with
// probability 1/2.
func jointSegmentMC(n, s int) float64 {
	r := rand.New(rand.NewPCG(uint64(n), 0x6a6f696e74)) // fixed seed: a deterministic figure
	p := 2 / float64(n)
	lq := math.Log1p(-p)
	geo := func() float64 {
		if n == 2 {
			return 0
		}
		u := 1 - r.Float64() // (0, 1]
		return math.Floor(math.Log(u) / lq)
	}
	var xs, ys [jointTrunc + 2]float64
	var hull [jointTrunc + 2][2]float64
	sum, sum2 := 0.0, 0.0
	for k := 0; k < s; k++ {
		pos := geo() // holders before the first event
		m := 0
		for r.Uint64()&1 == 1 && m <= jointTrunc { // the event is an update of i
			xs[m], ys[m] = pos, float64(m)
			m++
			pos += 1 + geo()
		}
		var x float64
		switch {
		case m > jointTrunc:
			// Counted in the exact tail term below (cost at most r); here 0.
			for r.Uint64()&1 == 1 {
			}
		case m > 0:
			// Lower hull of (0,0), the corners (xs[d], d) and the end (pos, m).
			h := 0
			add := func(px, py float64) {
				if h > 0 && hull[h-1][0] == px {
					if py >= hull[h-1][1] {
						return
					}
					h--
				}
				for h >= 2 {
					o, a := hull[h-2], hull[h-1]
					if (a[0]-o[0])*(py-o[1])-(a[1]-o[1])*(px-o[0]) > 0 {
						break
					}
					h--
				}
				hull[h] = [2]float64{px, py}
				h++
			}
			add(0, 0)
			for d := 0; d < m; d++ {
				add(xs[d], ys[d])
			}
			add(pos, float64(m))
			for t := 1; t < h; t++ {
				if dy := hull[t][1] - hull[t-1][1]; dy > 0 {
					x += dy * dy / (hull[t][0] - hull[t-1][0])
				}
			}
		}
		sum += x
		sum2 += x * x
	}
	fs := float64(s)
	mean := sum / fs
	v := math.Max(sum2/fs-mean*mean, 0) * fs / (fs - 1)
	l := math.Log(2 / jointBeta)
	ucb := mean + math.Sqrt(2*v*l/fs) + 7*jointTrunc*l/(3*(fs-1))
	tail := float64(jointTrunc+2) / math.Exp2(jointTrunc+1)
	return ucb + tail
}

// FinalSegmentWeight is F(n, H) of the comment above: the expected cost of the segment an
// observer sees only in the final release, for the even allocation of each update.
func FinalSegmentWeight(n int, hops uint64) float64 {
	if n < 3 || hops == 0 {
		return math.Inf(1)
	}
	fn := float64(n)
	g := func(L float64) float64 { return 1/L + 2*(L-1)/((fn-1)*L) }
	s := 0.0
	w := 1 / fn
	for L := uint64(1); L <= hops; L++ {
		s += w * g(float64(L))
		w *= 1 - 1/fn
		if w < 1e-18*s {
			// The rest: at most w/(1/n) * max g <= n w (1/L + 2/(n-1)), a geometric tail.
			s += fn * w * (1/float64(L+1) + 2/(fn-1))
			break
		}
	}
	return s + g(float64(hops))
}

// PlannedCompleteWeight is W_plan of the comment above for n >= 3 on the complete graph:
// (K+3) rho(n) + 2 ln(n)/(n-1), plus FinalSegmentWeight(n, hops) when hops > 0 (a run
// whose final model is released to every node). n < 3 gives +Inf; updates 0 gives 0.
func PlannedCompleteWeight(n, updates int, hops uint64) float64 {
	if updates <= 0 {
		return 0
	}
	if n < 3 {
		return math.Inf(1)
	}
	w := float64(updates+3)*JointSegmentRho(n) + 2*GeometricFactor(n)
	if hops > 0 {
		w += FinalSegmentWeight(n, hops)
	}
	return w
}
