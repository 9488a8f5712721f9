package walk

import (
	"fmt"
	"math"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/consensus/graph"
	"github.com/dpadmm/dpadmm/privacy"
)

// StepRun fills the step fields of r (Step, Rate, SGDNonExpansive, GADMM) for a run with
// configuration cfg (Node ignored; Clip, Sigma, Step as every node has them) whose nodes
// have the local losses `losses` (weights as in the run). With every node's loss (a
// simulator, a testnet) the figures cover the run; a node that passes only its own loss
// gets its own sensitivity and smoothness, and SGDNonExpansive is then false unless it is
// the only node (it cannot certify the others' steps), so that its network figure falls
// back to the local one. r's other fields are left as they are.
func StepRun(cfg Config, losses []*consensus.LocalLoss, dim int, nodes int, r *privacy.WalkRun) error {
	s := cfg.Step
	r.Step, r.Rate, r.SGDNonExpansive, r.GADMM = "", 0, false, privacy.GADMMParams{}
	r.Unit, r.RecordClip = cfg.Unit, math.Inf(1)
	if r.Unit == "" {
		r.Unit = privacy.UnitRecord
	}
	for _, l := range losses {
		if err := checkUnit(cfg, l); err != nil {
			return err
		}
	}
	if s.Kind == StepProx || s.Kind == StepLinearized {
		// The run's radius is the largest of its nodes' (one row weighs n/M in every
		// node's loss, so they agree; the maximum is what holds if they do not).
		rc := 0.0
		for _, l := range losses {
			rc = math.Max(rc, RecordClip(cfg, l))
		}
		if len(losses) > 0 {
			r.RecordClip = rc
		}
	}
	switch s.Kind {
	case StepProx:
		return nil
	case StepLinearized:
		r.Step = s.Kind.Name()
		return nil
	case StepLSSGD, StepSGD:
		r.Step, r.Rate = s.Kind.Name(), s.Rate
		if s.Kind == StepSGD && len(losses) == nodes {
			ok := len(losses) > 0
			for _, l := range losses {
				ok = ok && SGDCertified(l, s.Eta, s.Rate)
			}
			r.SGDNonExpansive = ok
		}
		return nil
	case StepGADMM:
		p, err := GADMMRunParams(cfg, losses, dim)
		if err != nil {
			return err
		}
		r.Step, r.GADMM = privacy.StepGADMM, p
		return nil
	}
	return fmt.Errorf("walk: unknown local step %d", s.Kind)
}

// BudgetCapsStep is BudgetCaps for the step described by r (StepRun): the prox and
// linearized steps use BudgetCaps with r.Clip and r.Sigma; ls-sgd and sgd the figure of
// GradBudgetEpsilon; gradient ADMM the local figure (GADMMBudgetCap: a plan cannot promise
// its amplification). For the steps other than prox and linearized every node gets the
// same cap, and on a graph other than the complete one the network kind is charged the
// local figure (which bounds it).
func BudgetCapsStep(b Budget, n int, g *graph.Graph, r privacy.WalkRun) (*BudgetPlan, error) {
	if r.Step.ProxFigures() {
		return BudgetCaps(b, n, g, r.FigureClip(), r.Sigma)
	}
	if err := b.Validate(); err != nil {
		return nil, err
	}
	if n < 1 {
		return nil, fmt.Errorf("%w: nodes must be >= 1, got %d", errBudget, n)
	}
	complete := g == nil || g.Complete
	p := &BudgetPlan{Budget: b, Caps: make([]int, n), n: n, clip: r.Clip, sigma: r.Sigma, ConditionsHold: true}
	loc := privacy.StepLocalBound(r, 1, b.Delta)
	p.Theorem, p.Conditions = loc.Theorem, loc.Conditions
	switch r.Step {
	case privacy.StepGADMM:
		unit := privacy.StepLocalCurve(r, 1)
		p.eps = func(k int) float64 {
			e, _ := privacy.ToDP(unit.Scale(float64(k)), b.Delta)
			return e
		}
		if b.Kind == BudgetNetwork {
			p.Note = "gradient ADMM: a plan cannot promise amplification (the receiver learns the hop count), so the network budget is the local figure"
		}
	default:
		kind, err := ParseStep(string(r.Step))
		if err != nil {
			return nil, err
		}
		nonExp := r.SGDNonExpansive && complete
		name := privacy.SGDLocalName
		if b.Kind == BudgetNetwork {
			p.Note = "a plan cannot promise a network figure for this step (ls-sgd has none; the sgd step size eta/sqrt(k) " +
				"gives every hop its own noise scale, which only the realised figure charges): the network budget is the local figure"
		}
		p.Theorem = name
		p.eps = func(k int) float64 { return GradBudgetEpsilon(b, n, kind, r.Rate, r.Clip, r.Sigma, nonExp, k) }
	}
	c := 0
	if r.Sigma > 0 {
		c = capOf(p.eps, b.Epsilon)
	}
	for i := range p.Caps {
		p.Caps[i] = c
	}
	return p, nil
}
