package main

import (
	"flag"
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

// walkAlgos are the --algo values that run a random walk, with the local step each fixes
// ("walk" takes it from --local-step).
var walkAlgos = map[string]walk.StepKind{"walk": walk.StepProx, "walk-gadmm": walk.StepGADMM, "walk-sgd": walk.StepSGD}

func addStepFlags(fs *flag.FlagSet) *stepFlags {
	return &stepFlags{
		local:  fs.String("local-step", "prox", "walk: the noisy local step: prox (exact prox, Algorithm 4), linearized (one gradient step in place of the prox), ls-sgd (Laplacian-smoothed subsampled DP-SGD step); --algo walk-gadmm and walk-sgd fix their own"),
		size:   fs.Float64("step-size", 0, "walk gradient steps (linearized, ls-sgd, walk-gadmm, walk-sgd): step size eta; required by those steps"),
		beta:   fs.Float64("beta", 1, "walk-gadmm: ADMM penalty beta > 0"),
		nu:     fs.Float64("nu", 0, "ls-sgd: Laplacian smoothing nu >= 0 (0 = no smoothing)"),
		rate:   fs.Float64("sample-rate", 1, "ls-sgd, walk-sgd: Poisson sampling rate q in (0,1] of each local row per step"),
		strong: fs.Bool("strongly-convex", false, "walk-gadmm: strongly convex mode (step inside the paper's interval (23), contraction-based accountant)"),
	}
}

// params returns the step of --algo algo (a key of walkAlgos) from the flags; set holds
// the flags given on the command line. A flag that the chosen step does not read is an
// error, so that no flag is silently ignored.
func (s *stepFlags) params(algo string, set map[string]bool) (walk.StepParams, error) {
	kind, ok := walkAlgos[algo]
	if !ok {
		return walk.StepParams{}, fmt.Errorf("--algo %q is not a walk", algo)
	}
	if algo == "walk" {
		k, err := walk.ParseStep(*s.local)
		if err != nil || k == walk.StepGADMM || k == walk.StepSGD {
			return walk.StepParams{}, fmt.Errorf("--local-step must be prox, linearized or ls-sgd, got %q (gradient ADMM and the DP-SGD walk are --algo walk-gadmm and walk-sgd)", *s.local)
		}
		kind = k
	} else if set["local-step"] {
		return walk.StepParams{}, fmt.Errorf("--local-step applies to --algo walk; --algo %s fixes its own step", algo)
	}
	uses := map[walk.StepKind][]string{
		walk.StepProx:       nil,
		walk.StepLinearized: {"step-size"},
		walk.StepLSSGD:      {"step-size", "nu", "sample-rate"},
		walk.StepGADMM:      {"step-size", "beta", "strongly-convex"},
		walk.StepSGD:        {"step-size", "sample-rate"},
	}[kind]
	for _, f := range []string{"step-size", "beta", "nu", "sample-rate", "strongly-convex"} {
		if set[f] && !contains(uses, f) {
			return walk.StepParams{}, fmt.Errorf("--%s does not apply to the %s step", f, kind)
		}
	}
	p := walk.StepParams{Kind: kind}
	if kind == walk.StepProx {
		return p, nil
	}
	switch {
	case !set["step-size"]:
		return p, fmt.Errorf("the %s step needs --step-size", kind)
	case !(*s.size > 0) || math.IsInf(*s.size, 0):
		return p, fmt.Errorf("--step-size must be finite and > 0, got %v", *s.size)
	case !(*s.beta > 0) || math.IsInf(*s.beta, 0):
		return p, fmt.Errorf("--beta must be finite and > 0, got %v", *s.beta)
	case !(*s.nu >= 0) || math.IsInf(*s.nu, 0):
		return p, fmt.Errorf("--nu must be finite and >= 0, got %v", *s.nu)
	case !(*s.rate > 0 && *s.rate <= 1):
		return p, fmt.Errorf("--sample-rate must be in (0,1], got %v", *s.rate)
	}
	p.Eta = *s.size
	if contains(uses, "beta") {
		p.Beta, p.Strong = *s.beta, *s.strong
	}
	if contains(uses, "nu") {
		p.Nu = *s.nu
	}
	if contains(uses, "sample-rate") {
		p.Rate = *s.rate
	}
	return p, nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
