package walk

import (
	"errors"
	"fmt"
	"math"

	"github.com/dpadmm/dpadmm/consensus/graph"
	"github.com/dpadmm/dpadmm/privacy"
)

// Budget kinds.
const (
	// BudgetLocal charges each node its local-DP epsilon (an observer of every message).
	BudgetLocal = "local"
	// BudgetNetwork charges each node its worst planned pairwise (network-DP) epsilon,
	// never more than the local one.
	BudgetNetwork = "network"
)

// MaxCap is the largest cap BudgetCaps returns: a budget that allows more noisy
// updates than this is reported as MaxCap (more than any run makes).
const MaxCap = 1<<31 - 1

// errBudget prefixes budget validation errors.
var errBudget = errors.New("walk: budget")

// Budget is a per-node privacy budget: a node stops making noisy updates (and only
// forwards the token) once its next update would take its epsilon of the given kind,
// at Delta, above Epsilon.
type Budget struct {
	Kind    string  // BudgetLocal or BudgetNetwork
	Epsilon float64 // the budget, > 0 and finite
	Delta   float64 // delta of the (epsilon, delta) figure, in (0,1)
	// Hops is the planned length of the run. With it the network figure includes the final
	// model as a view of every node (privacy.FinalReleaseWeight), as every planned figure
	// the tool prints does; 0 (unknown) leaves that term out.
	Hops uint64
}

// Validate checks the budget.
func (b Budget) Validate() error {
	switch {
	case b.Kind != BudgetLocal && b.Kind != BudgetNetwork:
		return fmt.Errorf("%w: unknown kind %q (want %q or %q)", errBudget, b.Kind, BudgetLocal, BudgetNetwork)
	case !(b.Epsilon > 0) || math.IsInf(b.Epsilon, 0):
		return fmt.Errorf("%w: epsilon must be > 0 and finite, got %v", errBudget, b.Epsilon)
	case !(b.Delta > 0 && b.Delta < 1):
		return fmt.Errorf("%w: delta must be in (0,1), got %v", errBudget, b.Delta)
	}
	return nil
}

// BudgetPlan is the outcome of BudgetCaps: the per-node caps and how the figure they
// bound is computed.
type BudgetPlan struct {
	Budget Budget
	// Caps[i] is K_i, the largest number of noisy updates of node i whose epsilon
	// (Epsilon(i, K_i)) is within the budget; 0 means the node only forwards.
	Caps []int
	// Theorem names the result the figure rests on; Conditions lists its assumptions.
	Theorem    string
	Conditions string
	// ConditionsHold is false when the network figure's order condition fails at
	// every order for some node, which is then charged its local figure.
	ConditionsHold bool
	// Note explains the choices (min with the local figure, caveats).
	Note string

	n        int
	clip     float64
	sigma    float64
	complete bool // network kind on the complete graph (the joint planned form)
	// eps, when set (BudgetCapsStep), is the figure of k updates of every node.
	eps func(k int) float64
}

// Epsilon returns node i's epsilon after k noisy updates, of the plan's kind at the
// plan's delta: 0 for k = 0 (nothing released), otherwise the figure the caps bound.
// It is nondecreasing in k. A node outside [0, n) gets +Inf.
func (p *BudgetPlan) Epsilon(i, k int) float64 {
	if i < 0 || i >= p.n {
		return math.Inf(1)
	}
	if k <= 0 {
		return 0
	}
	if p.eps != nil {
		return p.eps(k)
	}
	d := p.Budget.Delta
	loc, _ := privacy.ToDP(privacy.WalkLocalCurve(p.clip, p.sigma, k), d)
	if p.Budget.Kind == BudgetLocal || !p.complete {
		return loc // local kind, another graph, or no noise (no planned figure: loc is +Inf)
	}
	net, _ := privacy.ToDP(privacy.PlannedCompleteCurve(p.n, k, p.Budget.Hops, p.clip, p.sigma), d)
	return math.Min(net, loc)
}

// Network names and conditions of the budget figures.
const (
	budgetNetworkCompleteName = "min(" + privacy.Theorem4FinalName + "; " + privacy.LocalName + ")"
	budgetNetworkNote         = "per node the smaller of the worst planned pairwise epsilon and the local epsilon: both bound what " +
		"any observer j learns about node i, so the smaller is valid. The planned figure assumes every hop is a noisy update; " +
		"once nodes exhaust their budgets and only forward, fewer noisy updates separate i's update from j's next view, so the " +
		"realised pairwise figure can exceed the planned one. The local budget holds regardless"
)

// BudgetCaps computes, once per run, every node's cap K_i: the largest number of noisy
// updates such that the node's epsilon stays within the budget. The epsilon is
// nondecreasing in K, so the cap is found by doubling and bisection.
//
//   - local: ToDP(privacy.WalkLocalCurve(clip, sigma, K), delta).
//   - network, complete graph (g nil or complete): min of ToDP(privacy.PlannedCompleteCurve(n,
//     K, hops, clip, sigma), delta) (the joint per-segment planned form; n = 2 has none) and
//     the local epsilon.
//   - network, any other graph: the local epsilon (no planned network figure holds there).
//
// sigma = 0 gives cap 0 for every node (one update has infinite epsilon). Caps larger
// than MaxCap are reported as MaxCap.
func BudgetCaps(b Budget, n int, g *graph.Graph, clip, sigma float64) (*BudgetPlan, error) {
	if err := b.Validate(); err != nil {
		return nil, err
	}
	switch {
	case n < 1:
		return nil, fmt.Errorf("%w: nodes must be >= 1, got %d", errBudget, n)
	case !(clip > 0):
		return nil, fmt.Errorf("%w: clip must be > 0, got %v", errBudget, clip)
	case !(sigma >= 0) || math.IsInf(sigma, 0):
		return nil, fmt.Errorf("%w: sigma must be >= 0 and finite, got %v", errBudget, sigma)
	case g != nil && g.N != n:
		return nil, fmt.Errorf("%w: graph has %d nodes, want %d", errBudget, g.N, n)
	}
	p := &BudgetPlan{Budget: b, Caps: make([]int, n), n: n, clip: clip, sigma: sigma, ConditionsHold: true}
	complete := g == nil || g.Complete
	switch {
	case b.Kind == BudgetLocal:
		p.Theorem, p.Conditions = privacy.LocalName, privacy.LocalConditions
	case complete:
		p.complete = true
		p.Theorem, p.Conditions, p.Note = budgetNetworkCompleteName, privacy.Theorem4Conditions, budgetNetworkNote
	default:
		// No planned network figure holds on another graph (privacy.WalkDecide: the
		// first-passage form charges updates one by one, below their joint cost): the
		// network budget is the local figure there.
		p.Theorem, p.Conditions = privacy.LocalName, privacy.LocalConditions
		p.ConditionsHold = false
		p.Note = "graph other than the complete one: no planned network figure holds there (the first-passage form charges " +
			"i's updates one by one, below their joint cost), so every node is charged its local figure, which holds regardless"
	}
	if sigma == 0 || math.IsInf(clip, 1) {
		p.Note = "no noise or no clipping: one noisy update has infinite epsilon, so the budget allows none and every node only forwards"
		if b.Kind == BudgetNetwork {
			p.ConditionsHold = false
		}
		return p, nil
	}
	// Every node has the same figure: one search.
	c := capOf(func(k int) float64 { return p.Epsilon(0, k) }, b.Epsilon)
	for i := range p.Caps {
		p.Caps[i] = c
	}
	if b.Kind == BudgetNetwork {
		// The network figure falls back to local when Theorem 4 / the planned curve is
		// infinite at every order (order condition c <= 1 never met).
		var net float64
		if p.complete {
			net, _ = privacy.ToDP(privacy.PlannedCompleteCurve(n, 1, 0, clip, sigma), b.Delta)
			if math.IsInf(net, 1) || n < 3 {
				p.ConditionsHold = false
				p.Note = "the network figure's order condition c = (alpha-1)*8*alpha*C^2/sigma^2 <= 1 fails at every order (or n < 3: " +
					"no amplification with two nodes): every node is charged its local figure (" + privacy.LocalName + "), which holds regardless"
			}
		}
	}
	return p, nil
}

// capOf returns the largest k in [0, MaxCap] with eps(k) <= budget, for eps
// nondecreasing in k.
func capOf(eps func(k int) float64, budget float64) int {
	ok := func(k int) bool { return eps(k) <= budget }
	if !ok(1) {
		return 0
	}
	lo, hi := 1, 2
	for ok(hi) {
		lo = hi
		if hi >= MaxCap {
			return MaxCap
		}
		hi = min(2*hi, MaxCap)
	}
	// Invariant: ok(lo), !ok(hi).
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if ok(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}
