package main

import (
	"fmt"
	"math"

	"github.com/dpadmm/dpadmm/walk"
)

// stepFlags are the flags of the walk's local step, shared by 'dpadmm node' and
// 'dpadmm testnet' so that each means the same thing in both.
type stepFlags struct {
	local  *string
	size   *float64
	beta   *float64
	nu     *float64
	rate   *float64
	strong *bool
}

// addStepFlags defines the step flags in m, in the help section, each in a group read by
// the steps that use it: the modes "walk:STEP" followed by suffix ("" for 'dpadmm node'
// and 'account plan', "/*" for 'dpadmm testnet', whose modes also name the network).
func addStepFlags(m *modeFlags, section, suffix string) *stepFlags {
	modes := func(steps ...walk.StepKind) []string {
		var out []string
		for _, k := range steps {
			out = append(out, "walk:"+k.String()+suffix)
		}
		return out
	}
	s := &stepFlags{}
	m.in(section, "--algo walk", modes(walk.StepProx, walk.StepLinearized, walk.StepLSSGD)...)
	s.local = m.String("local-step", "prox", "walk: the noisy local step: prox (exact prox, Algorithm 4), linearized (one gradient step in place of the prox), ls-sgd (Laplacian-smoothed subsampled DP-SGD step); --algo walk-gadmm and walk-sgd fix their own")
	m.in(section, "the walk's gradient steps (--local-step linearized or ls-sgd, --algo walk-gadmm or walk-sgd)",
		modes(walk.StepLinearized, walk.StepLSSGD, walk.StepGADMM, walk.StepSGD)...)
	s.size = m.Float64("step-size", 0, "walk gradient steps (linearized, ls-sgd, walk-gadmm, walk-sgd): step size eta; required by those steps")
	m.in(section, "the walk's gradient ADMM step (--algo walk-gadmm)", modes(walk.StepGADMM)...)
	s.beta = m.Float64("beta", 1, "walk-gadmm: ADMM penalty beta > 0")
	s.strong = m.Bool("strongly-convex", false, "walk-gadmm: strongly convex mode (step inside the paper's interval (23), contraction-based accountant)")
	m.in(section, "the walk's ls-sgd step (--local-step ls-sgd)", modes(walk.StepLSSGD)...)
	s.nu = m.Float64("nu", 0, "ls-sgd: Laplacian smoothing nu >= 0 (0 = no smoothing)")
	m.in(section, "the walk's subsampled steps (--local-step ls-sgd, --algo walk-sgd)", modes(walk.StepLSSGD, walk.StepSGD)...)
	s.rate = m.Float64("sample-rate", 1, "ls-sgd, walk-sgd: Poisson sampling rate q in (0,1] of each local row per step")
	return s
}

// params returns the parameters of the step kind from the flags (m.check has refused the
// flags kind does not read, so the others hold their defaults); stepSet reports whether
// --step-size was given.
func (s *stepFlags) params(kind walk.StepKind, stepSet bool) (walk.StepParams, error) {
	if kind != walk.StepProx && !stepSet {
		return walk.StepParams{Kind: kind}, fmt.Errorf("the %s step needs --step-size", kind)
	}
	return s.paramsSize(kind, *s.size)
}

// paramsSize is params with the step size eta in place of --step-size, for a command that
// has its own default step size ('dpadmm audit').
func (s *stepFlags) paramsSize(kind walk.StepKind, eta float64) (walk.StepParams, error) {
	p := walk.StepParams{Kind: kind}
	if kind == walk.StepProx {
		return p, nil
	}
	switch {
	case !(eta > 0) || math.IsInf(eta, 0):
		return p, fmt.Errorf("--step-size must be finite and > 0, got %v", eta)
	case !(*s.beta > 0) || math.IsInf(*s.beta, 0):
		return p, fmt.Errorf("--beta must be finite and > 0, got %v", *s.beta)
	case !(*s.nu >= 0) || math.IsInf(*s.nu, 0):
		return p, fmt.Errorf("--nu must be finite and >= 0, got %v", *s.nu)
	case !(*s.rate > 0 && *s.rate <= 1):
		return p, fmt.Errorf("--sample-rate must be in (0,1], got %v", *s.rate)
	}
	p.Eta = eta
	switch kind {
	case walk.StepGADMM:
		p.Beta, p.Strong = *s.beta, *s.strong
	case walk.StepLSSGD:
		p.Nu, p.Rate = *s.nu, *s.rate
	case walk.StepSGD:
		p.Rate = *s.rate
	}
	return p, nil
}

// stepKind returns the step of a walk mode "walk:STEP[/...]".
func stepKind(mode string) walk.StepKind {
	name := mode[len("walk:"):]
	for i, c := range name {
		if c == '/' {
			name = name[:i]
			break
		}
	}
	k, _ := walk.ParseStep(name)
	return k
}
