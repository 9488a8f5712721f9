package main

import (
	"fmt"
	"math"

	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/testnet"
	"github.com/dpadmm/dpadmm/walk"
)

// targetHelp is the help of --target-epsilon on testnet and node.
const targetHelp = "calibrate --sigma so that each node's local figure (the one that always holds: an observer of every message of the node, " +
	"composed over its --max-updates noisy updates) is at most this epsilon at --delta; needs --max-updates > 0; the walk's prox, linearized, ls-sgd and sgd steps"

// calibrateSigma returns the smallest sigma whose local figure (privacy.StepLocalBound, the
// figure every output reports as the guarantee that always holds) over maxUpd noisy
// updates of the step is at most target at delta, with that figure.
func calibrateSigma(step walk.StepParams, clip float64, maxUpd int, target, delta float64) (float64, privacy.Bound, error) {
	switch {
	case !(target > 0) || math.IsInf(target, 0):
		return 0, privacy.Bound{}, fmt.Errorf("--target-epsilon must be finite and > 0, got %v", target)
	case maxUpd <= 0:
		return 0, privacy.Bound{}, fmt.Errorf("--target-epsilon needs a hard cap --max-updates > 0 (the figure composes over K_i updates)")
	case step.Kind == walk.StepGADMM:
		return 0, privacy.Bound{}, fmt.Errorf("--target-epsilon: the gadmm step's sensitivity depends on the data (give --sigma; 'dpadmm account plan --local-step gadmm --target-epsilon' plans it)")
	}
	r := privacy.WalkRun{Clip: clip, Step: step.Kind.Name(), Rate: step.Rate}
	figure := func(s float64) float64 {
		q := r
		q.Sigma = s
		return privacy.StepLocalBound(q, maxUpd, delta).Epsilon
	}
	sigma, err := testnet.CalibrateFigure(target, figure)
	if err != nil {
		return 0, privacy.Bound{}, fmt.Errorf("--target-epsilon %v: %v", target, err)
	}
	r.Sigma = sigma
	return sigma, privacy.StepLocalBound(r, maxUpd, delta), nil
}

// targetLine is the line that reports a calibration.
func targetLine(sigma float64, b privacy.Bound, maxUpd int, target, delta float64) string {
	return fmt.Sprintf("--target-epsilon %g: sigma %.6g gives each node a local epsilon of %.4g over %d noisy updates (delta %g; %s)",
		target, sigma, b.Epsilon, maxUpd, delta, b.Theorem)
}
