package privacy

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

// Theorem names used in pairwise summaries.
const (
	// TheoremRealised names the realised-path pairwise accountant.
	TheoremRealised = "realised-path pairwise bound (Cyffers et al. App. C.5 fixed-m bound eps_loc/m, RDP composition over i's updates)"
	// TheoremPlannedGraph names the planned bound on an arbitrary graph.
	TheoremPlannedGraph = "planned pairwise bound, first-passage law of the walk (Cyffers et al. Thm 4 proof with weak convexity factor (1+c))"
)

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
	Epsilon float64 `json:"epsilon"`
	Order   float64 `json:"order"`
	I       int     `json:"i"`
	J       int     `json:"j"`
}

// PairwiseSummary summarises the epsilons of all ordered pairs i != j at one delta.
type PairwiseSummary struct {
	Worst          PairEpsilon `json:"worst"`
	Mean           float64     `json:"mean"`
	P50            float64     `json:"p50"`
	P90            float64     `json:"p90"`
	P99            float64     `json:"p99"`
	Theorem        string      `json:"theorem"`
	Conditions     string      `json:"conditions"`
	ConditionsHold bool        `json:"conditions_hold"`
	Note           string      `json:"note,omitempty"`
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

// unitConverter returns w -> ToDP(w*Unit, delta) evaluated without allocation. The
// conversion at each order is r + g(alpha) (clamped at 0); g is read off ToDP itself
// with a single finite order so that the conversion stays the package's one. As in ToDP,
// a curve w*Unit that is 0 at some order (w == 0, or Unit 0 there) converts to 0.
func (m *PairwiseMatrix) unitConverter(delta float64) func(w float64) float64 {
	const probe = 1000.0
	var us, gs []float64
	one := make(Curve, len(Orders))
	unitZero := false
	for a := range Orders {
		u := m.Unit.at(a)
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

// RealisedPairwise computes the realised-path pairwise accountant of a trace. For each
// ordered pair (i, j) and each noisy update of i at step k, let t > k be the first later
// step with Steps[t].Node == j and m the number of noisy updates in steps k..t-1 (i's
// own included): the update costs WalkUpdateCurve/m. Updates never observed by j cost 0,
// unless FinalReleasedToAll, in which case m counts the noisy updates from k to the end.
// Only j's first observation after each update is charged (later ones are treated as
// post-processing, as in the paper). Each coalition is a set of observers treated as one:
// its first observation is the first step at which any member holds the token.
//
// The cost is O(K n) time with K = len(Steps), and O(n^2) memory.
func RealisedPairwise(tr *Trace, coalitions ...[]int) (*Realised, error) {
	if err := tr.Validate(); err != nil {
		return nil, err
	}
	n := tr.Nodes
	if n < 2 {
		return nil, errors.New("privacy: realised pairwise: need at least 2 nodes")
	}
	if int64(n)*int64(n) > 1<<27 {
		return nil, fmt.Errorf("privacy: realised pairwise: %d nodes need a %d x %d matrix, too large", n, n, n)
	}
	for c, members := range coalitions {
		if len(members) == 0 {
			return nil, fmt.Errorf("privacy: realised pairwise: coalition %d is empty", c)
		}
		for _, v := range members {
			if v < 0 || v >= n {
				return nil, fmt.Errorf("privacy: realised pairwise: coalition %d: node %d outside [0, %d)", c, v, n)
			}
		}
	}
	K := len(tr.Steps)
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
	inv := make([]float64, K+1)
	for c := 1; c <= K; c++ {
		inv[c] = 1 / float64(c)
	}
	// last[j] is the last step at which j holds the token, -1 if never.
	last := make([]int, n)
	for j := range last {
		last[j] = -1
	}
	for k := K - 1; k >= 0; k-- {
		v := int(code[k] >> 1)
		if last[v] < 0 {
			last[v] = k
		}
	}
	obs := make([]float64, n*n) // obs[j*n+i]: observer-major while sweeping
	for j := 0; j < n; j++ {
		realisedRow(obs[j*n:(j+1)*n], code, inv, int32(j), last[j], tr.FinalReleasedToAll)
	}
	w := make([]float64, n*n)
	for j := 0; j < n; j++ {
		row := obs[j*n : (j+1)*n]
		for i, x := range row {
			w[i*n+j] = x
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
	mask := make([]bool, n)
	for _, members := range coalitions {
		for v := range mask {
			mask[v] = false
		}
		for _, v := range members {
			mask[v] = true
		}
		cw := CoalitionWeights{Members: append([]int(nil), members...), Weight: make([]float64, n)}
		realisedCoalition(cw.Weight, code, inv, mask, tr.FinalReleasedToAll)
		res.Coalitions = append(res.Coalitions, cw)
	}
	return res, nil
}

// realisedRow adds, for observer j, the weight of every node's updates into row
// (indexed by the updating node). lastJ is j's last visit.
func realisedRow(row []float64, code []int32, inv []float64, j int32, lastJ int, final bool) {
	K := len(code)
	if K == 0 {
		return
	}
	cnt := 0
	start := K - 1
	if lastJ >= 0 {
		start = lastJ
	}
	if final {
		// Updates after j's last visit are seen in the final release.
		for k := K - 1; k > start; k-- {
			c := code[k]
			if c&1 != 0 {
				cnt++
				row[c>>1] += inv[cnt]
			}
		}
	}
	if lastJ < 0 {
		if !final {
			return
		}
		// j never holds the token; the loop above did not cover step start itself.
		if c := code[start]; c&1 != 0 {
			cnt++
			row[c>>1] += inv[cnt]
		}
		for k := start - 1; k >= 0; k-- {
			if c := code[k]; c&1 != 0 {
				cnt++
				row[c>>1] += inv[cnt]
			}
		}
		return
	}
	cnt = 0
	for k := start - 1; k >= 0; k-- {
		c := code[k]
		if c>>1 == j {
			cnt = 0
			continue
		}
		if c&1 != 0 {
			cnt++
			row[c>>1] += inv[cnt]
		}
	}
}

// realisedCoalition is realisedRow for a set of observers given by mask.
func realisedCoalition(row []float64, code []int32, inv []float64, mask []bool, final bool) {
	cnt := 0
	active := final
	for k := len(code) - 1; k >= 0; k-- {
		c := code[k]
		if mask[c>>1] {
			cnt = 0
			active = true
			continue
		}
		if c&1 != 0 {
			cnt++
			if active {
				row[c>>1] += inv[cnt]
			}
		}
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
	if n < 2 {
		return nil, fmt.Errorf("privacy: plan: nodes must be >= 2, got %d", n)
	}
	if !(opt.Clip > 0) || math.IsInf(opt.Clip, 0) {
		return nil, fmt.Errorf("privacy: plan: clip must be finite and > 0, got %v", opt.Clip)
	}
	if !(opt.Sigma > 0) || math.IsInf(opt.Sigma, 0) {
		return nil, fmt.Errorf("privacy: plan: sigma must be finite and > 0, got %v", opt.Sigma)
	}
	if opt.Updates < 1 {
		return nil, fmt.Errorf("privacy: plan: updates must be >= 1, got %d", opt.Updates)
	}
	if opt.Horizon < 0 {
		return nil, fmt.Errorf("privacy: plan: horizon must be >= 0, got %d", opt.Horizon)
	}
	if complete {
		if opt.Horizon > 0 {
			return &Plan{
				Pairs:        &PairwiseMatrix{N: n, Uniform: true, UniformWeight: 1, Unit: Theorem4FinalCurve(n, opt.Updates, uint64(opt.Horizon), opt.Clip, opt.Sigma)},
				Theorem:      Theorem4FinalName,
				Conditions:   Theorem4Conditions + "; the final model is released to every node",
				FinalCharged: true,
			}, nil
		}
		return &Plan{
			Pairs:      &PairwiseMatrix{N: n, Uniform: true, UniformWeight: 1, Unit: Theorem4Curve(n, opt.Updates, opt.Clip, opt.Sigma)},
			Theorem:    Theorem4Name,
			Conditions: Theorem4Conditions,
		}, nil
	}
	if len(adj) != n {
		return nil, fmt.Errorf("privacy: plan: adjacency has %d lists, want %d", len(adj), n)
	}
	if int64(n)*int64(n) > 1<<27 {
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
	horizon := opt.Horizon
	if horizon == 0 {
		horizon = math.MaxInt32
	}
	w := make([]float64, n*n)
	prev := make([]float64, n)
	next := make([]float64, n)
	mass := make([]float64, n)
	expInv := make([]float64, n)
	maxHops := 0
	tail := false
	for j := 0; j < n; j++ {
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
			if t >= tcap {
				tail = true
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
		if t > maxHops {
			maxHops = t
		}
		for i := 0; i < n; i++ {
			if i != j {
				w[i*n+j] = expInv[i]
			}
		}
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
	return &Plan{
		Pairs:        &PairwiseMatrix{N: n, W: w, Unit: amplifiedUnit(opt.Clip, opt.Sigma, opt.Updates)},
		Hops:         maxHops,
		TailBounded:  tail,
		FinalCharged: opt.Horizon > 0,
		Theorem:      TheoremPlannedGraph,
		Conditions:   conditions,
	}, nil
}
