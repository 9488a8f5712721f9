package gossip

import (
	"errors"
	"fmt"
	"math"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
)

// Setup is the set-up of one R-ADMM node that every driver builds here and nowhere else:
// the simulator (testnet/sim.NewGossipSim), the in-process and process nodes (node's R-ADMM
// run), and the empirical audit. It fixes the objective's weights and the constant c1 of
// Theorem V.1, and turns a node's schedule into the accountant's input, so that a node's
// figure and the simulator's prediction of it come from the same arithmetic.
//
// The paper's objective of node i is O(f, D_i) = (C_i/B_i) sum_{D_i} L + (rho/N) ||f||^2/2
// with C_i = C N B_i / M (M = rows of all members; C_i = C for an even split) and
// rho = C N l2, so C_i/B_i = C N/M and rho/N = C l2, the same for every node.
type Setup struct {
	// RowWeight is C_i/B_i = C N/M.
	RowWeight float64
	// RegOverN is rho/N = C l2.
	RegOverN float64
	// C1 bounds |L''| (Theorem V.1's c1): 1/4 for the logistic loss, 1 for the squared loss.
	C1 float64
	// Loss is the members' loss.
	Loss consensus.Loss
	// Classes is K of a one-vs-rest run (LogisticOvR), 0 otherwise: the figure is K times
	// a binary run's (privacy.ObjPertNode.Blocks).
	Classes int
}

// NewSetup returns the set-up of a run with N members holding totalRows rows in all, the
// paper's constant C and the L2 weight l2.
func NewSetup(loss consensus.Loss, paperC, l2 float64, members, totalRows int) Setup {
	s := Setup{RowWeight: paperC * float64(members) / float64(totalRows), RegOverN: paperC * l2, C1: 0.25, Loss: loss}
	if loss == consensus.Squared {
		s.C1 = 1
	}
	return s
}

// WithClasses returns s for a one-vs-rest run over the classes of d (unchanged for the
// other losses).
func (s Setup) WithClasses(d *consensus.Dataset) Setup {
	if s.Loss == consensus.LogisticOvR {
		s.Classes = d.NumClasses()
	}
	return s
}

// Objective returns the node's objective on its shard.
func (s Setup) Objective(shard *consensus.Dataset) (*Objective, error) {
	return NewObjective(shard, s.Loss, s.RowWeight, s.RegOverN)
}

// RowChecks returns the largest row norm over the datasets and whether every label is
// -1 or +1: the data preconditions of Theorem V.1 that the accountant checks.
func RowChecks(ds ...*consensus.Dataset) (maxNorm float64, labelsPM1 bool) {
	labelsPM1 = true
	for _, d := range ds {
		for r := 0; r < d.Rows; r++ {
			s := 0.0
			for _, v := range d.Row(r) {
				s += v * v
			}
			maxNorm = math.Max(maxNorm, math.Sqrt(s))
			y := d.Y[r]
			if k := d.NumClasses(); k > 0 {
				// A class index: every one-vs-rest block relabels it -1/+1.
				if !(y >= 0 && y < float64(k) && y == math.Trunc(y)) {
					labelsPM1 = false
				}
			} else if y != 1 && y != -1 {
				labelsPM1 = false
			}
		}
	}
	return maxNorm, labelsPM1
}

// Account returns the accountant's input (privacy.ObjPertNode) of a node of algo with
// the given degree, rows and data checks, whose perturbed iterations use the penalties
// etas (one per perturbed iteration) and the base noise parameter alpha (algo.NoiseAlpha
// gives the alpha of the noise actually added at each).
func (s Setup) Account(algo Algo, degree, rows int, maxNorm float64, labelsPM1 bool, alpha float64, etas []float64) privacy.ObjPertNode {
	alphas := make([]float64, len(etas))
	for k := range alphas {
		alphas[k] = algo.NoiseAlpha(alpha, etas[k])
	}
	return privacy.ObjPertNode{
		Scheme: algo.Scheme(), RowWeight: s.RowWeight, RegOverN: s.RegOverN, C1: s.C1, Degree: degree,
		Rows: rows, C: s.RowWeight * float64(rows), Alphas: alphas, Etas: etas, MaxRowNorm: maxNorm,
		LabelsPM1: labelsPM1, LossOK: s.Loss == consensus.Logistic || s.Loss == consensus.LogisticOvR, FixedIters: true, ExactSolves: true,
		Blocks: s.Classes,
	}
}

// ErrTargetOutOfReach is returned (wrapped) by AlphaFor when the figure's part that no
// noise removes already reaches the target.
var ErrTargetOutOfReach = errors.New("target epsilon out of reach")

// AlphaFor returns the noise parameter alpha that gives a node of algo (its degree, its
// rows and the penalties etas of its perturbed iterations) the Theorem V.1 figure target
// (privacy.ObjPertBound, the function every figure comes from), for --target-epsilon.
//
// The figure is affine in alpha: each perturbed iteration costs 2w(1.4 c1/(r + 2 eta V) +
// alpha_k) (recycled and dual-perturbation schemes; alpha_k = alpha/eta_k for madmm) or
// alpha 2w/(r + 2 eta V) (primal perturbation), summed and times the one-vs-rest blocks.
// Its part that no noise removes is JacobianPart, the rest NoisePart (proportional to
// alpha). alpha = (target' - J)/slope is the estimate; bisection on [0, estimate] then
// finds the largest alpha whose figure is at most target' = target (1 - 1e-12): the
// margin keeps the ledgers' own sums (the same terms added in another order) below the
// target too. An ErrTargetOutOfReach when J alone reaches the target: fewer iterations,
// a larger --eta or --l2, or a smaller --paper-c lower it.
func (s Setup) AlphaFor(algo Algo, degree, rows int, etas []float64, target float64) (float64, error) {
	if !(target > 0) || math.IsInf(target, 0) {
		return 0, fmt.Errorf("gossip: target epsilon must be finite and > 0, got %v", target)
	}
	bound := func(alpha float64) privacy.ObjPertFigure {
		return privacy.ObjPertBound(s.Account(algo, degree, rows, 1, true, alpha, etas))
	}
	goal := target * (1 - 1e-12)
	one := bound(1)
	fixed, slope := one.JacobianPart, one.NoisePart
	if algo.Scheme() == privacy.SchemePVP {
		fixed = 0 // primal perturbation: the whole figure is the noise's
	}
	if !(slope > 0) || math.IsInf(slope, 0) || math.IsNaN(fixed) {
		return 0, fmt.Errorf("gossip: the figure of %s does not grow with alpha (noise part %v at alpha 1): no alpha to calibrate", algo, slope)
	}
	if fixed >= goal {
		return 0, fmt.Errorf("gossip: %w: %s's figure is at least %.4g before any noise term (the objective's curvature, %d perturbed iterations): "+
			"no alpha reaches epsilon %v; fewer --iters, a larger --eta or --l2, or a smaller --paper-c lower it", ErrTargetOutOfReach, algo, fixed, len(etas), target)
	}
	fig := func(alpha float64) float64 { return bound(alpha).Epsilon }
	hi := (goal - fixed) / slope
	if fig(hi) <= goal {
		return hi, nil
	}
	lo := 0.0 // fig(lo) <= goal holds in the limit (the fixed part is below it)
	for i := 0; i < 200 && lo < hi; i++ {
		mid := lo + (hi-lo)/2
		if mid == lo || mid == hi {
			break
		}
		if fig(mid) <= goal {
			lo = mid
		} else {
			hi = mid
		}
	}
	if !(lo > 0) || fig(lo) > goal {
		return 0, fmt.Errorf("gossip: %w: no alpha > 0 gives %s a figure of at most %v", ErrTargetOutOfReach, algo, target)
	}
	return lo, nil
}
