package main

import (
	"errors"
	"fmt"
	"math"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/walk"
)

// targetHelp is the help of --target-epsilon on testnet and node.
const targetHelp = "the walk: calibrate --sigma so that each node's local figure (the one that always holds: an observer of every message of the node, " +
	"composed over its --max-updates noisy updates, for --privacy-unit) is at most this epsilon at --delta; needs --max-updates > 0; " +
	"the walk's prox, linearized, ls-sgd and sgd steps; applies unless --sigma is given. Neighbour exchange, when given: calibrate each " +
	"node's --alpha so that its Theorem V.1 figure (pure DP), hence the network figure, is this epsilon"

// gossipTarget checks --target-epsilon for neighbour exchange (given explicitly).
func gossipTarget(target float64, alphaSet bool) error {
	switch {
	case alphaSet:
		return errors.New("--target-epsilon calibrates --alpha: give one of them")
	case !(target > 0) || math.IsInf(target, 0):
		return fmt.Errorf("--target-epsilon must be finite and > 0, got %v", target)
	}
	return nil
}

// DefaultMaxEpsilon is the default ceiling of 'dpadmm node' on its local epsilon over its
// cap: a node refuses settings beyond it unless told (--max-epsilon).
const DefaultMaxEpsilon = 10

// DefaultTargetEpsilon is the walk's default --target-epsilon: a per-record figure a DP
// practitioner accepts, at which the default demo still learns (README: the scorecard).
const DefaultTargetEpsilon = 2

// useTarget reports whether --target-epsilon applies: given explicitly, or by default
// when --sigma is not given and the step can be calibrated (gadmm's sensitivity depends
// on the data, and without a cap there is no figure to calibrate: both keep --sigma).
func useTarget(targetSet, sigmaSet bool, step walk.StepParams, maxUpd int) bool {
	return targetSet || !sigmaSet && step.Kind != walk.StepGADMM && maxUpd > 0
}

// noTargetNote says why the default --target-epsilon did not apply, when it did not for
// want of a cap ("" otherwise): the run then takes the default --sigma, whose figure grows
// with every update.
func noTargetNote(targetSet, sigmaSet bool, step walk.StepParams, maxUpd int, sigma float64) string {
	if targetSet || sigmaSet || step.Kind == walk.StepGADMM || maxUpd > 0 {
		return ""
	}
	return fmt.Sprintf("note: --max-updates 0 (no cap): the default --target-epsilon %d composes over a cap, so it does not apply; sigma is the default %g "+
		"and each node's epsilon grows with its updates (give --max-updates for a calibrated sigma, or --sigma to say this is meant)", DefaultTargetEpsilon, sigma)
}

// unitHelp is the help of --privacy-unit.
const unitHelp = "what the figures protect: record (one row of one node replaced; the prox and linearized steps then use the record radius " +
	"gamma*(c*L + 1e-9), c = n/M the weight of one row, L the loss's Lipschitz constant over rows projected onto the unit ball) or node " +
	"(a node's whole data set replaced; prox and linearized steps only)"

// checkTarget checks the --target-epsilon preconditions that need no data.
func checkTarget(step walk.StepParams, maxUpd int, target float64) error {
	switch {
	case !(target > 0) || math.IsInf(target, 0):
		return fmt.Errorf("--target-epsilon must be finite and > 0, got %v", target)
	case maxUpd <= 0:
		return fmt.Errorf("--target-epsilon needs a hard cap --max-updates > 0 (the figure composes over K_i updates)")
	case step.Kind == walk.StepGADMM:
		return fmt.Errorf("--target-epsilon: the gadmm step's sensitivity depends on the data (give --sigma; 'dpadmm account plan --local-step gadmm --target-epsilon' plans it)")
	}
	return nil
}

// planWalkRun is walk.PlanRun with the command's values.
func planWalkRun(step walk.StepParams, gamma, clip float64, unit privacy.Unit, rowBound float64, loss consensus.Loss, nodes, totalRows int) privacy.WalkRun {
	return walk.PlanRun(walk.Config{Gamma: gamma, Clip: clip, Step: step, Unit: unit, RowBound: rowBound}, loss, nodes, totalRows)
}

// calibrateSigma returns the smallest sigma whose local figure (privacy.StepLocalBound, the
// figure every output reports as the guarantee that always holds) over maxUpd noisy
// updates of r's step is at most target at delta, with that figure.
func calibrateSigma(r privacy.WalkRun, step walk.StepParams, maxUpd int, target, delta float64) (float64, privacy.Bound, error) {
	if err := checkTarget(step, maxUpd, target); err != nil {
		return 0, privacy.Bound{}, err
	}
	sigma, b, err := privacy.CalibrateLocal(r, maxUpd, target, delta)
	if err != nil {
		return 0, privacy.Bound{}, fmt.Errorf("--target-epsilon %v: %v", target, err)
	}
	return sigma, b, nil
}

// targetLine is the line that reports a calibration.
func targetLine(r privacy.WalkRun, sigma float64, b privacy.Bound, maxUpd int, target, delta float64) string {
	r.Sigma = sigma
	return fmt.Sprintf("--target-epsilon %g: sigma %.6g gives each node a local epsilon of %.4g over %d noisy updates (delta %g; %s; %s)",
		target, sigma, b.Epsilon, maxUpd, delta, r.UnitNote(), b.Theorem)
}
