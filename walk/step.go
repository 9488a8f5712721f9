package walk

import (
	"errors"
	"fmt"
	"math"

	"github.com/dpadmm/dpadmm/privacy"
)

// StepKind selects the noisy local step a walk node makes when it holds the token.
type StepKind uint8

// Local steps. StepProx is the zero value and the default.
const (
	// StepProx is Algorithm 4 of the random-walk ADMM paper: the exact prox x-step, the
	// clipped x - z, noise on u_i; the token carries (z, zhat).
	StepProx StepKind = iota
	// StepLinearized replaces the exact prox by one linearized (gradient) step on f_i; the
	// rest of Algorithm 4 (clip, noise on u_i, token (z, zhat)) is unchanged.
	StepLinearized
	// StepLSSGD is the Laplacian-smoothed DP-SADMM-style step: a Poisson-subsampled
	// minibatch of the node's rows, per-example clipped gradients, Gaussian noise on the
	// gradient and the smoothing operator Q_nu^-1 on the whole bracket.
	StepLSSGD
	// StepGADMM is gradient (linearized) ADMM with amplification by iteration: the token
	// carries (x~, lambda), the holder makes one y-step, the lambda update, one gradient of
	// f_i at x~ and the closed-form x-step, and adds N(0, sigma^2 I) to x.
	StepGADMM
	// StepSGD is the DP-SGD random walk: the token is the model, the holder takes one
	// clipped, noised proximal gradient step on its data.
	StepSGD
)

var stepNames = [...]privacy.StepName{StepProx: privacy.StepProx, StepLinearized: privacy.StepLinearized,
	StepLSSGD: privacy.StepLSSGD, StepGADMM: privacy.StepGADMM, StepSGD: privacy.StepSGD}

// String returns the step's name as used on the command line and in reports.
func (k StepKind) String() string {
	if int(k) < len(stepNames) {
		return string(stepNames[k])
	}
	return fmt.Sprintf("step(%d)", uint8(k))
}

// Name returns the step's name in the accountants' vocabulary (privacy.StepName).
func (k StepKind) Name() privacy.StepName {
	if int(k) < len(stepNames) {
		return stepNames[k]
	}
	return privacy.StepName(k.String())
}

// ParseStep returns the step named s ("prox", "linearized", "ls-sgd", "gadmm", "sgd").
func ParseStep(s string) (StepKind, error) {
	for k, n := range stepNames {
		if string(n) == s {
			return StepKind(k), nil
		}
	}
	return 0, fmt.Errorf("walk: unknown local step %q (want prox, linearized, ls-sgd, gadmm or sgd)", s)
}

// StepParams are the parameters of the local step. StepProx uses none of them.
type StepParams struct {
	// Kind selects the step.
	Kind StepKind
	// Eta is the step size of the gradient steps (linearized, ls-sgd: the first step of the
	// decaying schedule; gadmm: eta of the x-step; sgd: the step size).
	Eta float64
	// Beta is the ADMM penalty of gadmm.
	Beta float64
	// Nu >= 0 is the Laplacian smoothing parameter of ls-sgd (0: no smoothing).
	Nu float64
	// Rate is the Poisson sampling rate q in (0, 1] of each row in ls-sgd and sgd.
	Rate float64
	// Strong selects the strongly convex mode of gadmm (step inside interval (23) and the
	// contraction-based accountant).
	Strong bool
}

// ErrStepNotImplemented is returned by a local step that this build does not provide.
var ErrStepNotImplemented = errors.New("walk: local step not implemented")

// validateStep checks the step parameters of c.
func (c Config) validateStep() error {
	s := c.Step
	if int(s.Kind) >= len(stepNames) {
		return fmt.Errorf("walk: unknown local step %d", s.Kind)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"eta", s.Eta}, {"beta", s.Beta}, {"nu", s.Nu}, {"rate", s.Rate}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 {
			return fmt.Errorf("walk: step parameter %s must be finite and >= 0, got %v", f.name, f.v)
		}
	}
	switch s.Kind {
	case StepLinearized, StepLSSGD, StepSGD:
		return c.validateGradStep()
	case StepGADMM:
		return c.validateGADMM()
	}
	return nil
}

// updateStep performs one local step of a kind other than StepProx.
func (m *Machine) updateStep(z, zhat []float64) error {
	switch m.cfg.Step.Kind {
	case StepLinearized, StepLSSGD:
		return m.updateLinear(z, zhat)
	case StepSGD:
		return m.updateSGD(z, zhat)
	case StepGADMM:
		return m.updateGADMM(z, zhat)
	}
	return fmt.Errorf("%w: %s", ErrStepNotImplemented, m.cfg.Step.Kind)
}

// newStep builds the state of a step other than StepProx (called by New).
func (m *Machine) newStep() error {
	switch m.cfg.Step.Kind {
	case StepLinearized, StepLSSGD, StepSGD:
		return m.newGradStep()
	}
	return nil
}

// stepEntry writes the mechanism fields (Mechanism, Sensitivity, Sigma, Clip, Lambda) of the
// ledger entry of one noisy update made by a step other than StepProx.
func (m *Machine) stepEntry(e *privacy.Entry) {
	switch m.cfg.Step.Kind {
	case StepLSSGD, StepSGD:
		m.gradEntry(e)
	case StepGADMM:
		m.gadmmEntry(e)
	}
}
