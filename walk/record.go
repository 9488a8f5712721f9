package walk

import (
	"fmt"
	"math"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
)

// Lipschitz returns L, the bound on the norm of one row's loss gradient in the model over
// every model and every row of norm at most rowBound: rowBound for the logistic loss,
// sqrt(2) rowBound for the multinomial one (the gradient (p - e_y) x^T, ||p - e_y|| <=
// sqrt(2)); +Inf for the squared loss (not Lipschitz) and when no public row bound holds
// (rowBound <= 0).
func Lipschitz(loss consensus.Loss, rowBound float64) float64 {
	if !(rowBound > 0) || math.IsInf(rowBound, 0) {
		return math.Inf(1)
	}
	switch loss {
	case consensus.Logistic:
		return rowBound
	case consensus.Multinomial:
		return math.Sqrt2 * rowBound
	}
	return math.Inf(1)
}

// RecordClip is the record-level radius of one update of cfg's step by a node with local
// loss l (privacy.RecordClip): gamma (c L + tol), c = l.RowWeight(), L = Lipschitz(loss,
// cfg.RowBound), tol = consensus.ProxTolerance for the prox step (whose solver is
// certified to it) and 0 for the linearized one (exact). +Inf for the other steps (they
// clip per example) and when L is not finite.
func RecordClip(cfg Config, l *consensus.LocalLoss) float64 {
	if l == nil {
		return math.Inf(1)
	}
	return recordClip(cfg, l.RowWeight(), l.Loss())
}

// PlanRecordClip is RecordClip before the shards exist: for a run of `nodes` members
// holding totalRows rows in all, one row weighs LossWeight(nodes, 1, totalRows) in every
// node's loss (n rows_i/M over rows_i rows); a relative margin of 1e-12 covers the
// rounding of each node's weight/rows, so the planned radius is never below a node's.
func PlanRecordClip(cfg Config, loss consensus.Loss, nodes, totalRows int) float64 {
	c := LossWeight(nodes, 1, totalRows)
	if !(c > 0) {
		return math.Inf(1)
	}
	return recordClip(cfg, c*(1+1e-12), loss)
}

func recordClip(cfg Config, rowWeight float64, loss consensus.Loss) float64 {
	tol := 0.0
	switch cfg.Step.Kind {
	case StepProx:
		tol = consensus.ProxTolerance
	case StepLinearized:
	default:
		return math.Inf(1)
	}
	return privacy.RecordClip(cfg.Gamma, rowWeight, Lipschitz(loss, cfg.RowBound), tol)
}

// checkUnit refuses a unit the step has no figure for and, under the record unit with a
// public row bound, a node whose own rows exceed it (a driver that promised the bound
// without projecting its rows).
func checkUnit(cfg Config, l *consensus.LocalLoss) error {
	u := cfg.Unit
	if u == "" {
		u = privacy.UnitRecord
	}
	if _, err := privacy.ParseUnit(string(u)); err != nil {
		return err
	}
	if u == privacy.UnitNode && (cfg.Step.Kind == StepLSSGD || cfg.Step.Kind == StepSGD) {
		return fmt.Errorf("walk: --privacy-unit node: the %s step's figures are per record (each example's gradient is clipped and sampled, not the node's update); use --privacy-unit record", cfg.Step.Kind.Name())
	}
	if cfg.RowBound > 0 && l != nil {
		for r := 0; r < l.Rows(); r++ {
			a, _ := l.Example(r)
			s := 0.0
			for _, v := range a {
				s += v * v
			}
			if nn := math.Sqrt(s); nn > cfg.RowBound*(1+1e-12) {
				return fmt.Errorf("walk: row %d has norm %.6g above the public row bound %g (project rows onto the unit ball: --scale unitball)", r, nn, cfg.RowBound)
			}
		}
	}
	return nil
}

// PlanRun is the privacy.WalkRun a walk plans its figures with before it runs: the step,
// clip and unit of cfg (Step, Clip, Unit, Gamma, RowBound), and the record radius
// (PlanRecordClip) of `nodes` members holding totalRows rows in all (totalRows 0: no radius
// is known and the clip bounds the record). Every calibration (the commands, the
// scorecard) starts from it.
func PlanRun(cfg Config, loss consensus.Loss, nodes, totalRows int) privacy.WalkRun {
	r := privacy.WalkRun{Clip: cfg.Clip, Step: cfg.Step.Kind.Name(), Rate: cfg.Step.Rate, Unit: cfg.Unit, RecordClip: math.Inf(1)}
	if totalRows > 0 && nodes > 0 {
		r.RecordClip = PlanRecordClip(cfg, loss, nodes, totalRows)
	}
	return r
}
