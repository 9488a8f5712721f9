package privacy

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

// Theorem names used in pairwise summaries.
const (
	// TheoremRealised names the realised-path pairwise accountant (see RealisedPairwise).
	TheoremRealised = "realised-path pairwise bound: privacy amplification by iteration with several changed steps " +
		"(Feldman, Mironov, Talwar, Thakurta 2018, Thm 22; Cyffers et al. Thm 6) applied jointly to all of i's updates " +
		"between two views of j, shift allocation minimised per view (greatest convex minorant), RDP composition over " +
		"j's views; the final model is a view of every node"
	// TheoremPlannedGraph names the planned bound on an arbitrary graph.
	TheoremPlannedGraph = "planned pairwise bound, first-passage law of the walk (Cyffers et al. Thm 4 proof with weak convexity factor (1+c))"
)

// RealisedConditions are the assumptions of the realised-path bound (TheoremRealised).
const RealisedConditions = "clip C bounds ||x - z||, so each noisy update of i shifts the observed state by at most " +
	"4*lambda*C against fresh Gaussian noise of std lambda*sigma (per update RDP e1 = 8*alpha*C^2/sigma^2); the maps " +
	"between noise injections (other nodes' updates, forwards, the observer's own updates) are non-expansive on the " +
	"observed state; the trace is the run's true path (the bound holds even against an observer who knows the whole " +
	"path); hidden from the observer: the other nodes' u_l and i's own u_i"

// RealisedGaps are the steps of the realised-path bound that remain unproven for the walk
// (Cyffers et al. App. C.5, digest 3.6 E5); reports carry them in their note.
const RealisedGaps = "unproven steps (Cyffers et al., digest 3.6 E5): the walk update map is non-expansive jointly in " +
	"u-space but not shown to be in z (zhat) alone; the other nodes' persistent u_l absorb information about i's data " +
	"that re-enters later states, and the bound does not charge it"

// PairwiseMatrix holds pairwise RDP curves in factored form: the curve of the ordered
// pair (i, j), i's data as seen by observer j, is Weight(i, j) times Unit.
type PairwiseMatrix struct {
	N int // number of nodes
	// W is row-major n*n: W[i*N+j] is the weight of pair (i, j); the diagonal is 0.
	// W is nil when Uniform is true.
	W []float64
	// Uniform is true when every pair i != j has weight UniformWeight (complete graph).
	Uniform       bool
	UniformWeight float64
	// Unit is the RDP curve of weight 1.
	Unit Curve
}

// Weight returns the weight of the ordered pair (i, j); 0 when i == j.
func (m *PairwiseMatrix) Weight(i, j int) float64 {
	if i == j {
		return 0
	}
	if m.Uniform {
		return m.UniformWeight
	}
	return m.W[i*m.N+j]
}

// Curve returns the RDP curve of the ordered pair (i, j).
func (m *PairwiseMatrix) Curve(i, j int) Curve {
	return m.Unit.Scale(m.Weight(i, j))
}

// Epsilon returns the (epsilon, delta)-DP figure of the pair (i, j) and the order used.
func (m *PairwiseMatrix) Epsilon(i, j int, delta float64) (eps, order float64) {
	return ToDP(m.Curve(i, j), delta)
}

// PairEpsilon is one ordered pair and its epsilon.
type PairEpsilon struct {
	Epsilon, Order float64
	I, J           int
}

// PairwiseSummary summarises the epsilons of all ordered pairs i != j at one delta (its
// JSON form, which every output writes, is PairwiseFigure).
type PairwiseSummary struct {
	Worst               PairEpsilon
	Mean, P50, P90, P99 float64
	Theorem             string
	Conditions          string
	ConditionsHold      bool
	Note                string
}

// Summarize computes the distribution of pairwise epsilons at delta. Epsilon is
// nondecreasing in the weight, so quantiles are taken on sorted weights. The theorem,
// conditions and note fields are left for the caller.
func (m *PairwiseMatrix) Summarize(delta float64) PairwiseSummary {
	var s PairwiseSummary
	n := m.N
	if n < 2 {
		return s
	}
	if m.Uniform {
		e, o := ToDP(m.Unit.Scale(m.UniformWeight), delta)
		s.Worst = PairEpsilon{Epsilon: e, Order: o, I: 0, J: 1}
		s.Mean, s.P50, s.P90, s.P99 = e, e, e, e
		return s
	}
	// Worst pair: largest weight, first in row-major order on ties.
	wi, wj, wmax := 0, 1, math.Inf(-1)
	ws := make([]float64, 0, n*(n-1))
	for i := 0; i < n; i++ {
		row := m.W[i*n : (i+1)*n]
		for j, w := range row {
			if i == j {
				continue
			}
			ws = append(ws, w)
			if w > wmax {
				wmax, wi, wj = w, i, j
			}
		}
	}
	sort.Float64s(ws)
	epsOf := m.unitConverter(delta)
	eps := make([]float64, len(ws))
	sum := 0.0
	for k, w := range ws {
		if k > 0 && w == ws[k-1] {
			eps[k] = eps[k-1]
		} else {
			eps[k] = epsOf(w)
		}
		sum += eps[k]
	}
	s.Mean = sum / float64(len(eps))
	q := func(p float64) float64 {
		idx := int(math.Ceil(p*float64(len(eps)))) - 1
		if idx < 0 {
			idx = 0
		}
		return eps[idx]
	}
	s.P50, s.P90, s.P99 = q(0.5), q(0.9), q(0.99)
	e, o := m.Epsilon(wi, wj, delta)
	s.Worst = PairEpsilon{Epsilon: e, Order: o, I: wi, J: wj}
	return s
}

// unitConverter is UnitConverter(m.Unit, delta).
func (m *PairwiseMatrix) unitConverter(delta float64) func(w float64) float64 {
	return UnitConverter(m.Unit, delta)
}

// UnitConverter returns w -> ToDP(w*unit, delta) evaluated without allocation per call:
// the one converter of weighted curves (pairwise summaries, per-pair CSVs and plots,
// coalitions). The conversion at each order is w*unit(alpha) + g(alpha), clamped at 0; g
// is read off ToDP itself with a single finite order, so that the conversion stays the
// package's one. As in ToDP, a curve w*unit that is 0 at some order (w == 0, or unit 0
// there) converts to ToDP of the zero curve; a negative or NaN weight gives +Inf.
func UnitConverter(unit Curve, delta float64) func(w float64) float64 {
	const probe = 1000.0
	var us, gs []float64
	one := make(Curve, len(Orders))
	unitZero := false
	for a := range Orders {
		u := unit.at(a)
		if u == 0 {
			unitZero = true
		}
		if math.IsInf(u, 1) || u < 0 {
			continue
		}
		for k := range one {
			one[k] = math.Inf(1)
		}
		one[a] = probe
		e, _ := ToDP(one, delta)
		if math.IsInf(e, 1) {
			continue
		}
		us = append(us, u)
		gs = append(gs, e-probe)
	}
	eps0, _ := ToDP(ZeroCurve(), delta) // weight 0: no loss at any order (0 for a valid delta)
	return func(w float64) float64 {
		if w == 0 || unitZero && w > 0 && !math.IsInf(w, 1) {
			return eps0
		}
		if !(w > 0) {
			return math.Inf(1)
		}
		best := math.Inf(1)
		for k, u := range us {
			if e := w*u + gs[k]; e < best {
				best = e
			}
		}
		if best < 0 {
			best = 0
		}
		return best
	}
}

// CoalitionWeights is the realised bound against a coalition of observers that pool
// their views: Weight[i] multiplies the unit curve for node i's data; members get 0.
type CoalitionWeights struct {
	Members []int
	Weight  []float64
}

// Realised is the output of RealisedPairwise.
type Realised struct {
	Pairs      *PairwiseMatrix
	Coalitions []CoalitionWeights
	// Updates[i] is the number of noisy updates of node i in the trace.
	Updates []int
	// Local is the local (no amplification) curve of the node with most updates:
	// max_i Updates[i] times the per-update curve.
	Local Curve
}

// RealisedPairwise computes the realised-path pairwise accountant of a trace: for each
// ordered pair (i, j), a bound on the Renyi divergence of everything observer j sees
// between two runs on the same path whose data differ only in node i's.
//
// Views. Steps[k].Node holds the token at hop k; if Noisy it makes one noisy update whose
// result goes to Steps[k+1].Node. Observer j views the state at every step t with
// Steps[t].Node == j (the token produced by step t-1). With FinalReleasedToAll the final
// model, the state after the last step, is one more view of every node. The observed state
// is the token's zhat (z is a function of it). Forward steps (Noisy false) add neither
// noise nor shift.
//
// One view. Number the noisy steps 1..m between two consecutive views of j (or from the
// start) and let s_k = 1 if step k is an update by i, else 0, and S_k = s_1+..+s_k. Given all
// that j saw up to its previous view, both runs enter the segment in the same state. Noisy
// step k is X_k = psi_k(X_{k-1}) + Z_k, Z_k Gaussian of std lambda*sigma (in u units; the
// 1/n of the zhat update scales shift and noise alike), and psi_k absorbs the maps without
// noise before it. The runs' maps differ only at i's steps, by at most 4*lambda*C whatever
// u_i holds (the update moves by 2*lambda*Clip(x - z, C)), so s_k*4*lambda*C bounds
// sup ||psi_k - psi'_k||. Privacy amplification by iteration (Feldman, Mironov, Talwar,
// Thakurta 2018, Thm 22): for reals a_k >= 0 with prefix sums A_k <= S_k for every k and
// A_m = S_m,
//
//	D_alpha(X_m || X'_m) <= sum_k D_alpha(N(a_k*4*lambda*C, (lambda*sigma)^2) || N(0, (lambda*sigma)^2))
//	                      = e1 * sum_k a_k^2,      e1 = 8*alpha*C^2/sigma^2 = WalkUpdateCurve.
//
// The maps after the segment's last noise up to the view are post-processing. j's own
// update at its previous view uses j's data (the same in both runs) and j's noise, which j
// knows: it is a known map with no shift, not a noise injection, and is left out. (Counting
// it would change nothing: it comes first, where S = 0 forces its a to 0.)
//
// The best allocation. Minimise sum_k a_k^2 subject to A_k <= S_k (k < m), A_m = S_m. The
// minimiser A is the greatest convex minorant (GCM) of the points (k, S_k), k = 0..m. It is
// feasible (below every point, through both end points), and it meets the KKT conditions
// of this convex problem: with multipliers mu_k >= 0 for A_k <= S_k and a free one for
// A_m = S_m, stationarity 2 a_k + sum_{l >= k} mu_l = 0 gives a_{k+1} - a_k = mu_k/2 >= 0 with
// mu_k > 0 only where A_k = S_k, i.e. a convex A whose slope rises only where it touches
// the staircase: the GCM. Its first slope is min_k S_k/k >= 0, so every a_k >= 0 as FMTT
// require. The cost is the sum over the GCM's pieces of rise^2/run. Since S rises by 0 or
// 1, a vertex strictly inside is a lower-left corner, a point k with s_{k+1} = 1 (just
// before one of i's updates): any other point has one at its height to its right and a
// lower one to its left, and lies on or above their chord. The hull of the corners and the
// end points, built by a monotone chain with exact integer slope tests, takes time linear
// in the segment (the sweep builds it from the view backwards, see sweeper.sweep).
//
// Examples: one update of i followed by m-1 others, then the view: 1/m (the fixed-m bound
// of Cyffers et al. App. C.5); r consecutive updates seen directly (j, i x r, j): r, no
// amplification; another node's update, then i's, then the view: 1 (noise before i's
// update cannot hide it). Charging each update of i separately with 1/L, L the noisy steps
// from it to the view, is never above the joint cost (on a hull piece of run R and rise D,
// the d-th last update in it has L >= d*R/D, so its charges sum to at most (D/R)*H_D <=
// D^2/R) and is below it once i makes two updates in a segment (j, i, i, j: 1/2+1 against 2).
//
// Composition. Given the earlier views, each view's divergence is bounded by its segment's
// cost, so adaptive RDP composition over j's views sums them: Weight(i, j) is the sum of
// the segment costs over j's segments and the curve is Weight(i, j) times e1. Noisy steps
// after j's last view are never seen (cost 0) unless FinalReleasedToAll, which closes one
// more segment at the end (the whole trace when j never holds the token). The bound holds
// for every path, hence also against an observer who knows the path. It assumes
// RealisedConditions; RealisedGaps lists what remains unproven for the walk.
//
// Each coalition is a set of observers pooled as one: a view is any step at which a member
// holds the token; members' updates are views (no shift, noise known to the coalition) and
// members get weight 0.
//
// The cost is O(K n) time with K = len(Steps) (one backward sweep per observer, amortised
// O(1) per step) and O(n^2 + K) memory. K must stay below 2^31.
func RealisedPairwise(tr *Trace, coalitions ...[]int) (*Realised, error) {
	return realisedPairwise(tr, nil, coalitions...)
}

// Spread runs f over the range [0, n), split into sub-ranges that it may run concurrently
// (a driver's workers: this package starts no goroutine); each call of f touches only the
// state of its own sub-range. The realised accountants sweep one observer per index, so a
// spread result is the serial one to the last bit. nil runs f(0, n) in the caller.
type Spread func(n int, f func(lo, hi int))

// run calls f over [0, n) through sp, or serially when sp is nil.
func (sp Spread) run(n int, f func(lo, hi int)) {
	if sp == nil {
		f(0, n)
		return
	}
	sp(n, f)
}

func realisedPairwise(tr *Trace, spread Spread, coalitions ...[]int) (*Realised, error) {
	if err := checkRealisedInput(tr, coalitions); err != nil {
		return nil, err
	}
	n, K := tr.Nodes, len(tr.Steps)
	code := make([]int32, K)
	updates := make([]int, n)
	for k, s := range tr.Steps {
		c := int32(s.Node) << 1
		if s.Noisy {
			c |= 1
			updates[s.Node]++
		}
		code[k] = c
	}
	// gap[k]: for a noisy step k, the noisy steps from k up to the next noisy update of
	// the same node (r counts the noisy steps after k, next[v] the r of v's next update).
	gap := make([]int32, K)
	next := make([]int32, n)
	for v := range next {
		next[v] = -1
	}
	r := int32(0)
	for k := K - 1; k >= 0; k-- {
		if c := code[k]; c&1 != 0 {
			v := c >> 1
			gap[k] = math.MaxInt32
			if next[v] >= 0 {
				gap[k] = r - next[v]
			}
			next[v] = r
			r++
		}
	}
	// The longest segment of any observer (noisy steps between two visits of a node, or
	// before its first or after its last) bounds the indices of the sweeps.
	seen := make([]int32, n) // noisy steps before the node's last visit, plus 1; 0 before any
	longest := int32(0)
	r = 0
	for _, c := range code {
		v := c >> 1
		if d := r - max(seen[v]-1, 0); d > longest {
			longest = d
		}
		seen[v] = r + 1
		r += c & 1
	}
	for _, s := range seen {
		if d := r - max(s-1, 0); d > longest {
			longest = d
		}
	}
	obs := make([]float64, n*n) // obs[j*n+i]: observer-major while sweeping
	spread.run(n, func(lo, hi int) {
		sw := newSweeper(longest)
		for j := lo; j < hi; j++ {
			sw.sweep(obs[j*n:(j+1)*n], code, gap, int32(j), nil, tr.FinalReleasedToAll)
		}
	})
	sw := newSweeper(longest)
	w := make([]float64, n*n)
	for j := 0; j < n; j++ {
		row := obs[j*n : (j+1)*n]
		for i, x := range row {
			if i != j {
				w[i*n+j] = x
			}
		}
	}
	unit := WalkUpdateCurve(tr.Clip, tr.Sigma)
	res := &Realised{
		Pairs:   &PairwiseMatrix{N: n, W: w, Unit: unit},
		Updates: updates,
	}
	maxU := 0
	for _, u := range updates {
		if u > maxU {
			maxU = u
		}
	}
	res.Local = unit.Scale(float64(maxU))
	view := make([]bool, n)
	for _, members := range coalitions {
		for _, v := range members {
			view[v] = true
		}
		cw := CoalitionWeights{Members: append([]int(nil), members...), Weight: make([]float64, n)}
		sw.sweep(cw.Weight, code, gap, -1, view, tr.FinalReleasedToAll)
		for _, v := range members {
			view[v] = false
			cw.Weight[v] = 0
		}
		res.Coalitions = append(res.Coalitions, cw)
	}
	return res, nil
}

// checkRealisedInput checks the trace and the coalitions of a realised accountant
// (RealisedPairwise, RealisedPairwiseScaled): a valid trace of at least 2 nodes and fewer
// than 2^31 steps, an n x n matrix of reasonable size, coalitions non-empty and of members.
func checkRealisedInput(tr *Trace, coalitions [][]int) error {
	if err := tr.Validate(); err != nil {
		return err
	}
	n := tr.Nodes
	switch {
	case n < 2:
		return errors.New("privacy: realised pairwise: need at least 2 nodes")
	case n > 1<<27 || int64(n)*int64(n) > 1<<27: // the first test keeps the product from overflowing
		return fmt.Errorf("privacy: realised pairwise: %d nodes need a %d x %d matrix, too large", n, n, n)
	case int64(len(tr.Steps)) >= 1<<31:
		return fmt.Errorf("privacy: realised pairwise: %d steps, at most %d", len(tr.Steps), 1<<31-1)
	}
	for c, members := range coalitions {
		if len(members) == 0 {
			return fmt.Errorf("privacy: realised pairwise: coalition %d is empty", c)
		}
		for _, v := range members {
			if v < 0 || v >= n {
				return fmt.Errorf("privacy: realised pairwise: coalition %d: node %d outside [0, %d)", c, v, n)
			}
		}
	}
	return nil
}

// hullPt is a vertex of a node's hull in a sweep, stored at the index L of its update (the
// noisy steps from that update to the view, itself included): c is the number of the
// node's updates among them and prev the index of the vertex before it (0, the origin, for
// the first).
type hullPt struct{ c, prev int32 }

// multi is an update of node v at index L whose node has a later update in the same
// segment, at index next < L.
type multi struct{ L, next, v int32 }

// sweeper holds the scratch of the per-observer sweeps, reused across observers.
// newSweeper returns the scratch of a sweep over segments of at most longest noisy steps.
func newSweeper(longest int32) *sweeper {
	sw := &sweeper{pool: make([]hullPt, longest+1), buf: make([]multi, longest+1), inv: make([]float64, longest+1)}
	for x := 1; x <= int(longest); x++ {
		sw.inv[x] = 1 / float64(x)
	}
	return sw
}

type sweeper struct {
	pool []hullPt  // pool[L]: the vertex of the update at index L of the current segment
	buf  []multi   // the current segment's updates whose node has a later one in it
	inv  []float64 // inv[x] = 1/x
}

// sweep adds to row[v], for every node v that is not a view node, the realised weight of
// v's noisy updates against one observer (see RealisedPairwise). The observer views the
// steps held by node j, or, when view is not nil, by any node v with view[v] true (pass
// j = -1). gap[k] is, for a noisy step k, the number of noisy steps from k up to (not
// including) the next noisy update of the same node, MaxInt32 if none. Rows of view nodes
// are left unchanged.
//
// The sweep runs backwards, so that a segment's end (the view) is met first. Seen from
// the end, the staircase of node v turned by 180 degrees becomes the points (L, c): for
// each update of v, L the noisy steps from it to the view and c the updates of v among
// them, with the view itself at the origin. The greatest convex minorant becomes the
// least concave majorant of the origin and these points (the segment's start only adds a
// flat piece, of cost 0), with the same rise^2/run costs. The points arrive in increasing
// L, so each update of v pushes one point onto v's upper hull (monotone chain).
//
// An update that is the only one of its node in the segment costs 1/L, as in the
// per-update charge. The sweep charges 1/L to every update and writes its single-point
// hull, without a data-dependent branch (on a random walk about half the updates have a
// later one of their node in the segment, so a branch on it would be mispredicted
// often). It lists the updates whose node has a later one in the segment (gap < L), and at
// the segment's end fix pushes them onto their node's hull in increasing L and adds the
// change of the hull's cost minus the 1/L already charged.
func (sw *sweeper) sweep(row []float64, code, gap []int32, j int32, view []bool, final bool) {
	pool, buf, inv := sw.pool, sw.buf, sw.inv
	nb := 0
	L := int32(0)
	active := final // the steps after the last view are seen only in the final model
	for k := len(code) - 1; k >= 0; k-- {
		c := code[k]
		v := c >> 1
		if v == j || (view != nil && view[v]) {
			// A view: the noisy steps before it form a new segment. The viewer's own update
			// at this step is neither noise nor shift for the others: it is left out.
			if nb > 0 {
				fix(row, pool, buf[:nb])
				nb = 0
			}
			L = 0
			active = true
			continue
		}
		if c&1 == 0 || !active {
			continue // a forward (no noise, no shift), or never viewed
		}
		L++
		row[v] += inv[L]
		pool[L] = hullPt{c: 1}
		g := gap[k]
		buf[nb] = multi{L: L, next: L - g, v: v}
		if g < L {
			nb++
		}
	}
	if nb > 0 {
		fix(row, pool, buf[:nb])
	}
}

// fix pushes the listed updates of one segment onto their nodes' hulls (see sweep). For
// each, the hull of its node ends at the vertex of the node's next update; the push pops
// the vertices b not strictly above the chord from their predecessor a to the new point p
// (slope(a, b) <= slope(b, p); integer coordinates below 2^31, exact in int64). A piece
// of rise d and run x costs d^2 (1/x). The reciprocals are divided here rather than read
// from the sweep's table (the same values, to the bit): the runs are scattered over the
// table, whose loads missed the cache (12.8 -> 9.5-10.3 ns per hop and observer at
// n = 10,000).
func fix(row []float64, pool []hullPt, buf []multi) {
	for _, e := range buf {
		L, b := e.L, e.next
		bp := pool[b]
		pc := bp.c + 1
		delta := -(1 / float64(L)) // charged by the sweep (inv[L])
		for b != 0 {
			a := bp.prev
			ap := pool[a]
			rise := bp.c - ap.c
			if int64(rise)*int64(L-b) > int64(pc-bp.c)*int64(b-a) {
				break
			}
			delta -= float64(rise) * float64(rise) * (1 / float64(b-a)) // the popped piece
			b, bp = a, ap
		}
		d := float64(pc - bp.c)
		pool[L] = hullPt{c: pc, prev: b}
		row[e.v] += delta + d*d*(1/float64(L-b))
	}
}

// PlanOptions configures PlannedPairwise.
type PlanOptions struct {
	Clip    float64 // clipping bound C
	Sigma   float64 // noise parameter sigma
	Updates int     // K_i: cap on the number of noisy updates of each node
	// Horizon is the number of hops of the run; first passages later than Horizon are
	// never observed during the run, and the contributions they leave unseen are charged
	// through the final release (FinalReleaseWeight). 0 means unbounded: no final release
	// is charged, and Plan.FinalCharged is false.
	Horizon int
	// MaxWork bounds the number of multiply-adds of the first-passage recursion
	// (default 1e9). When the recursion stops early the remaining probability mass R
	// is charged as if it arrived at the next step (R/(T+1)), an upper bound.
	MaxWork float64
}

// Plan is the output of PlannedPairwise.
type Plan struct {
	Pairs *PairwiseMatrix
	// Hops is the number of first-passage steps computed (0 for the closed form).
	Hops int
	// TailBounded is true when the recursion stopped before the remaining mass fell
	// below 1e-12 and the remainder was charged with the R/(T+1) upper bound.
	TailBounded bool
	// FinalCharged is true when the final model, released to every node, is charged
	// (FinalReleaseWeight, which needs the run's length: Horizon > 0).
	FinalCharged bool
	Theorem      string
	Conditions   string
}

// AmplifiedUpdateCurve returns K_i (1+c) e1 with e1 = WalkUpdateCurve(clip, sigma) and
// c = (alpha-1) e1, orders with c > 1 set to +Inf (Feldman et al. weak convexity). It is
// the unit curve of PlannedPairwise on a general graph: the pair (i, j) gets it times
// E_i[1/m_j]. On the complete graph, times ln(n)/(n-1), it equals Theorem4Curve.
func AmplifiedUpdateCurve(clip, sigma float64, updates int) Curve {
	return amplifiedUnit(clip, sigma, updates)
}

func amplifiedUnit(clip, sigma float64, updates int) Curve {
	e1 := WalkUpdateCurve(clip, sigma)
	out := make(Curve, len(e1))
	for a, e := range e1 {
		c := (Orders[a] - 1) * e
		if c > 1 || math.IsNaN(c) {
			out[a] = math.Inf(1)
			continue
		}
		out[a] = float64(updates) * (1 + c) * e
	}
	return out
}

// PlannedPairwise bounds each pair (i, j) before the run from the first-passage law
// of the walk. adj lists the neighbours of each node (the walk moves uniformly over
// adj[i]); for the complete graph pass complete = true and adj = nil (the walk moves
// uniformly over all n nodes, self included) and the closed form Theorem4Curve is used.
//
// For pair (i, j) the curve is K_i (1+c) e1 E_i[1/m_j] where m_j is the first-passage
// time from i to j (every hop is taken to be a noisy update), computed per target j
// by the taboo recursion q_t = P_{-j} q_{t-1}.
func PlannedPairwise(n int, adj [][]int, complete bool, opt PlanOptions) (*Plan, error) {
	if err := validatePlan(n, opt); err != nil {
		return nil, err
	}
	if complete {
		// The joint per-segment form (planned_joint.go); n = 2 has none (+Inf, and
		// WalkDecide says why).
		if opt.Horizon > 0 {
			return &Plan{
				Pairs:        &PairwiseMatrix{N: n, Uniform: true, UniformWeight: 1, Unit: Theorem4FinalCurve(n, opt.Updates, uint64(opt.Horizon), opt.Clip, opt.Sigma)},
				Theorem:      Theorem4FinalName,
				Conditions:   Theorem4Conditions + "; the final model is released to every node",
				FinalCharged: true,
			}, nil
		}
		return &Plan{
			Pairs:      &PairwiseMatrix{N: n, Uniform: true, UniformWeight: 1, Unit: PlannedCompleteCurve(n, opt.Updates, 0, opt.Clip, opt.Sigma)},
			Theorem:    Theorem4FinalName,
			Conditions: Theorem4Conditions,
		}, nil
	}
	b, err := NewPlanBuilder(n, adj, opt)
	if err != nil {
		return nil, err
	}
	b.Columns(0, n)
	return b.Plan(), nil
}

// validatePlan checks the arguments shared by PlannedPairwise and NewPlanBuilder.
func validatePlan(n int, opt PlanOptions) error {
	switch {
	case n < 2:
		return fmt.Errorf("privacy: plan: nodes must be >= 2, got %d", n)
	case !(opt.Clip > 0) || math.IsInf(opt.Clip, 0):
		return fmt.Errorf("privacy: plan: clip must be finite and > 0, got %v", opt.Clip)
	case !(opt.Sigma > 0) || math.IsInf(opt.Sigma, 0):
		return fmt.Errorf("privacy: plan: sigma must be finite and > 0, got %v", opt.Sigma)
	case opt.Updates < 1:
		return fmt.Errorf("privacy: plan: updates must be >= 1, got %d", opt.Updates)
	case opt.Horizon < 0:
		return fmt.Errorf("privacy: plan: horizon must be >= 0, got %d", opt.Horizon)
	}
	return nil
}

// PlanBuilder computes the planned matrix of a general graph (PlannedPairwise) one
// range of targets j (columns) at a time, so that a caller can spread the targets over
// goroutines: Columns calls on disjoint ranges touch disjoint memory and may run
// concurrently; Plan, after every column is done, returns what PlannedPairwise would.
// The cost is O(edges * T_j) per target j, T_j <= the step cap that MaxWork sets.
type PlanBuilder struct {
	n      int
	opt    PlanOptions
	off    []int32
	col    []int32
	invDeg []float64
	tcap   int
	w      []float64
	hops   []int32 // steps computed per target
	tail   []bool  // per target: the recursion stopped at the step cap
	plan   *Plan
}

// NewPlanBuilder checks the graph and options as PlannedPairwise does (general graph)
// and allocates the n x n matrix.
func NewPlanBuilder(n int, adj [][]int, opt PlanOptions) (*PlanBuilder, error) {
	if err := validatePlan(n, opt); err != nil {
		return nil, err
	}
	if len(adj) != n {
		return nil, fmt.Errorf("privacy: plan: adjacency has %d lists, want %d", len(adj), n)
	}
	if n > 1<<27 || int64(n)*int64(n) > 1<<27 {
		return nil, fmt.Errorf("privacy: plan: %d nodes on a general graph need a %d x %d matrix, too large (the complete graph has a closed form)", n, n, n)
	}
	// CSR form.
	off := make([]int32, n+1)
	for i, nb := range adj {
		if len(nb) == 0 {
			return nil, fmt.Errorf("privacy: plan: node %d has no neighbours", i)
		}
		off[i+1] = off[i] + int32(len(nb))
	}
	col := make([]int32, 0, off[n])
	for i, nb := range adj {
		for _, v := range nb {
			if v < 0 || v >= n {
				return nil, fmt.Errorf("privacy: plan: node %d: neighbour %d outside [0, %d)", i, v, n)
			}
			col = append(col, int32(v))
		}
	}
	invDeg := make([]float64, n)
	for i := range invDeg {
		invDeg[i] = 1 / float64(off[i+1]-off[i])
	}
	maxWork := opt.MaxWork
	if !(maxWork > 0) {
		maxWork = 1e9
	}
	tcap := int(maxWork / (float64(n) * float64(len(col)+n)))
	if tcap < 1 {
		tcap = 1
	}
	return &PlanBuilder{n: n, opt: opt, off: off, col: col, invDeg: invDeg, tcap: tcap,
		w: make([]float64, n*n), hops: make([]int32, n), tail: make([]bool, n)}, nil
}

// Columns computes the weights w[i][j] of the targets j in [lo, hi) (clamped to
// [0, n)): per target, the taboo recursion q_t = P_{-j} q_{t-1}, stopped once every
// start has first-passage mass 1 - 1e-12, at the horizon, or at the step cap (the rest
// then charged R/(T+1)).
func (b *PlanBuilder) Columns(lo, hi int) {
	n, off, col, invDeg := b.n, b.off, b.col, b.invDeg
	lo, hi = max(lo, 0), min(hi, n)
	horizon := b.opt.Horizon
	if horizon == 0 {
		horizon = math.MaxInt32
	}
	prev := make([]float64, n)
	next := make([]float64, n)
	mass := make([]float64, n)
	expInv := make([]float64, n)
	for j := lo; j < hi; j++ {
		// q_1(i) = P(i, j).
		for i := 0; i < n; i++ {
			s := 0.0
			for _, v := range col[off[i]:off[i+1]] {
				if int(v) == j {
					s++
				}
			}
			prev[i] = s * invDeg[i]
			mass[i] = prev[i]
			expInv[i] = prev[i]
		}
		t := 1
		for {
			rem := 0.0
			for i := 0; i < n; i++ {
				if i != j && 1-mass[i] > rem {
					rem = 1 - mass[i]
				}
			}
			if rem < 1e-12 || t >= horizon {
				break
			}
			if t >= b.tcap {
				b.tail[j] = true
				for i := 0; i < n; i++ {
					if r := 1 - mass[i]; r > 0 {
						expInv[i] += r / float64(t+1)
					}
				}
				break
			}
			t++
			prev[j] = 0 // taboo: paths through j have already arrived
			inv := 1 / float64(t)
			for i := 0; i < n; i++ {
				s := 0.0
				for _, v := range col[off[i]:off[i+1]] {
					s += prev[v]
				}
				s *= invDeg[i]
				next[i] = s
				mass[i] += s
				expInv[i] += s * inv
			}
			prev, next = next, prev
		}
		b.hops[j] = int32(t)
		for i := 0; i < n; i++ {
			if i != j {
				b.w[i*n+j] = expInv[i]
			}
		}
	}
}

// Plan returns the plan once Columns has covered every target (it owns the matrix;
// later calls return the same plan).
func (b *PlanBuilder) Plan() *Plan {
	if b.plan != nil {
		return b.plan
	}
	n, off, col, invDeg, opt, w := b.n, b.off, b.col, b.invDeg, b.opt, b.w
	maxHops, tail := 0, false
	for j := range n {
		maxHops = max(maxHops, int(b.hops[j]))
		tail = tail || b.tail[j]
	}
	conditions := "walk uniform over neighbours; path secret from j; every hop a noisy update; each node makes at most K_i noisy updates; c=(alpha-1)e1 <= 1 at the order used; only j's first view after each update is charged"
	if opt.Horizon > 0 {
		// The final model is a view of every node: add FinalReleaseWeight in units of
		// K_i (1+c) e1. maxIn[i] = max over nodes v with i in adj[v] of 1/deg(v).
		maxIn := make([]float64, n)
		for v := 0; v < n; v++ {
			for _, i := range col[off[v]:off[v+1]] {
				maxIn[i] = math.Max(maxIn[i], invDeg[v])
			}
		}
		for i := 0; i < n; i++ {
			f := FinalReleaseWeight(maxIn[i], uint64(opt.Horizon), opt.Updates) / float64(opt.Updates)
			for j := 0; j < n; j++ {
				if i != j {
					w[i*n+j] += f
				}
			}
		}
		conditions += "; the final model is released to every node"
	}
	b.plan = &Plan{
		Pairs:        &PairwiseMatrix{N: n, W: w, Unit: amplifiedUnit(opt.Clip, opt.Sigma, opt.Updates)},
		Hops:         maxHops,
		TailBounded:  tail,
		FinalCharged: opt.Horizon > 0,
		Theorem:      TheoremPlannedGraph,
		Conditions:   conditions,
	}
	return b.plan
}
