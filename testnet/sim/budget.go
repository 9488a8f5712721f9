package sim

import (
	"errors"
	"fmt"
	"math"

	"github.com/dpadmm/dpadmm/consensus/graph"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/walk"
)

// BudgetSpec is a per-node privacy budget: a node whose next noisy update would take its
// epsilon (of the given kind, at Delta) above Epsilon forwards the token unchanged instead.
type BudgetSpec struct {
	Kind    string  // "local" or "network"
	Epsilon float64 // budget epsilon, > 0
	Delta   float64 // delta of the budget, in (0,1)
	// Hops is the planned run length (set by Run from Options.Hops): the network figure then
	// charges the final model as a view of every node. 0: unknown, no final-release term.
	Hops uint64
}

// BudgetReport is the budget section of a run report.
type BudgetReport struct {
	Kind      string  `json:"kind"`
	Epsilon   float64 `json:"epsilon"`
	Delta     float64 `json:"delta"`
	Caps      []int   `json:"caps"`      // per node: the most noisy updates the budget allows
	Exhausted int     `json:"exhausted"` // nodes that reached their cap
	Overruns  int     `json:"overruns"`  // nodes whose spent epsilon exceeds the budget (must be 0)
	Theorem   string  `json:"theorem"`
	Note      string  `json:"note,omitempty"`
	// Conditions lists the assumptions of Theorem; ConditionsHold says whether the
	// checkable ones hold (false: nodes are charged the local figure, see Note).
	Conditions     string `json:"conditions"`
	ConditionsHold bool   `json:"conditions_hold"`
	// Conversion names the RDP -> (epsilon, delta) conversion.
	Conversion string `json:"conversion"`
	// Spent is each node's epsilon after its noisy updates so far (0 with none), of the
	// budget's kind and figure; MaxSpent is the largest.
	Spent    []privacy.Epsilon `json:"spent"`
	MaxSpent privacy.Epsilon   `json:"max_spent"`
	// AllExhausted is true when every node reached its cap and the walk ended.
	AllExhausted bool `json:"all_exhausted"`
	// Forwards counts the hops without a noisy update. For the network kind any
	// forward breaks the planned figure's assumption that every hop is a noisy update.
	Forwards int `json:"forwards"`
	// MaxLocal is the largest per-node local epsilon (privacy.LocalName), the figure
	// that holds against any observer whatever the conditions of Theorem.
	MaxLocal privacy.Epsilon `json:"max_local_epsilon"`
}

// ErrExhausted is returned by Sim.Step once every node has used up its budget.
var ErrExhausted = errors.New("testnet: every node has exhausted its privacy budget")

// budgetCaps computes the per-node caps of cfg.Budget (nil without a budget).
func budgetCaps(cfg *SimConfig, n int, g *graph.Graph, step privacy.WalkRun) (*walk.BudgetPlan, error) {
	if cfg.Budget == nil {
		return nil, nil
	}
	b := walk.Budget{Kind: cfg.Budget.Kind, Epsilon: cfg.Budget.Epsilon, Delta: cfg.Budget.Delta, Hops: cfg.Budget.Hops}
	p, err := walk.BudgetCapsStep(b, n, g, step)
	if err != nil {
		return nil, fmt.Errorf("testnet: %w", err)
	}
	return p, nil
}

// Exhausted reports whether every node has used up its budget (the walk ends): each
// node has made as many noisy updates as its cap, the smaller of the budget's cap and
// MaxUpdates. Without a budget it is always false.
func (s *Sim) Exhausted() bool { return s.done }

// Budget returns the budget section, or nil when the run has no budget. Spent and
// Overruns are recomputed from the noisy-update counts of the ledger entries.
func (s *Sim) Budget() *BudgetReport {
	p := s.plan
	if p == nil {
		return nil
	}
	r := &BudgetReport{
		Kind: p.Budget.Kind, Epsilon: p.Budget.Epsilon, Delta: p.Budget.Delta,
		Caps: append([]int(nil), s.caps...), Theorem: p.Theorem, Note: p.Note,
		Conditions: p.Conditions, ConditionsHold: p.ConditionsHold, Conversion: privacy.Conversion,
		Spent: make([]privacy.Epsilon, s.N), AllExhausted: s.Exhausted(),
	}
	maxLocal, maxSpent := 0.0, 0.0
	for i, k := range s.Store.Noisy {
		if k >= s.caps[i] {
			r.Exhausted++
		}
		r.Forwards += s.Store.Entries[i] - k
		if k > 0 {
			loc, _ := privacy.ToDP(privacy.StepLocalCurve(s.step, k), p.Budget.Delta)
			maxLocal = math.Max(maxLocal, loc)
		}
		e := p.Epsilon(i, k)
		r.Spent[i] = privacy.Eps(e)
		maxSpent = math.Max(maxSpent, e)
		if !(e <= p.Budget.Epsilon) {
			r.Overruns++
		}
	}
	if p.Budget.Kind == walk.BudgetNetwork && r.Forwards > 0 {
		// The figure the caps were computed on no longer holds (privacy.WalkDecide: a forward
		// voids the planned figure). Spent and Overruns are then measured on the local
		// figure, which holds regardless, so that an exceeded budget is never reported as
		// 0 overruns.
		r.ConditionsHold = false
		r.Overruns, maxSpent = 0, 0
		for i, k := range s.Store.Noisy {
			e := 0.0
			if k > 0 {
				e, _ = privacy.ToDP(privacy.StepLocalCurve(s.step, k), p.Budget.Delta)
			}
			r.Spent[i] = privacy.Eps(e)
			maxSpent = math.Max(maxSpent, e)
			if !(e <= p.Budget.Epsilon) {
				r.Overruns++
			}
		}
		r.Note = fmt.Sprintf("%d hops were forwards without a noisy update, so the planned figure's condition that every hop "+
			"is a noisy update fails and the network figure the caps bound does not hold: spent and overruns are measured on "+
			"the local figure (%s), which holds regardless. %s", r.Forwards, privacy.LocalName, r.Note)
	}
	r.MaxLocal, r.MaxSpent = privacy.Eps(maxLocal), privacy.Eps(maxSpent)
	return r
}

// Close writes out, fsyncs and closes the ledger, if any. Closing twice is a no-op.
func (s *Sim) Close() error {
	if s.ledger == nil || s.closed {
		return nil
	}
	s.closed = true
	return s.ledger.Close()
}
