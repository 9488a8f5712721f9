package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/dpadmm/dpadmm/gossip"
	"github.com/dpadmm/dpadmm/node"
	"github.com/dpadmm/dpadmm/walk"
)

// runConfigFlags returns the flag values a run configuration determines, by flag name:
// the inverse of node.Config.RunConfig. Keys that a run configuration cannot give as a
// flag (dims and the scaling fingerprint: properties of the data) are checked after the
// data is loaded (checkRunConfig); the penalty table goes in etaTable.
func runConfigFlags(rc node.RunConfig) (map[string]string, error) {
	f := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	set := map[string]string{"run": rc.Run, "loss": rc.Loss, "l1": f(rc.L1), "l2": f(rc.L2)}
	if rc.MaxRows > 0 {
		set["max-rows"] = strconv.Itoa(rc.MaxRows)
	}
	if rc.MinRows > 0 {
		set["min-rows"] = strconv.Itoa(rc.MinRows)
	}
	if len(rc.Classes) > 0 && !slices.Contains(rc.Classes, "") {
		set["classes"] = strings.Join(rc.Classes, ",")
	}
	if rc.Algorithm == "walk" {
		set["gamma"], set["lambda"], set["clip"], set["sigma"] = f(rc.Gamma), f(rc.Lambda), f(rc.Clip), f(rc.Sigma)
		set["max-updates"], set["hops"] = strconv.Itoa(rc.MaxUpdates), strconv.FormatUint(rc.Hops, 10)
		set["algo"] = "walk"
		if rc.Unit != "" {
			set["privacy-unit"] = rc.Unit
		}
		if rc.RowBound > 0 {
			set["row-bound"] = f(rc.RowBound)
		}
		if rc.Step == "" {
			return set, nil
		}
		k, err := walk.ParseStep(rc.Step)
		if err != nil {
			return nil, err
		}
		switch k {
		case walk.StepGADMM:
			set["algo"], set["beta"] = "walk-gadmm", f(rc.Beta)
			if rc.Strong {
				set["strongly-convex"] = "true"
			}
		case walk.StepSGD:
			set["algo"], set["sample-rate"] = "walk-sgd", f(rc.Rate)
		case walk.StepLSSGD:
			set["local-step"], set["nu"], set["sample-rate"] = rc.Step, f(rc.Nu), f(rc.Rate)
		default:
			set["local-step"] = rc.Step
		}
		set["step-size"] = f(rc.StepSize)
		return set, nil
	}
	if _, err := gossip.ParseAlgo(rc.Algorithm); err != nil {
		return nil, fmt.Errorf("algo %q: %v", rc.Algorithm, err)
	}
	set["algo"], set["graph"], set["graph-seed"] = rc.Algorithm, rc.Graph, strconv.FormatUint(rc.GraphSeed, 10)
	set["iters"], set["paper-c"], set["even-gamma"] = strconv.Itoa(rc.Iters), f(rc.PaperC), f(rc.Gamma)
	if rc.TargetEpsilon > 0 {
		set["target-epsilon"] = f(rc.TargetEpsilon)
	} else {
		set["alpha"] = rc.Alpha
	}
	if rc.EtaTable == nil {
		set["eta"], set["eta-growth"], set["eta-max"] = f(rc.Eta), f(rc.EtaGrowth), f(rc.EtaMax)
	}
	return set, nil
}

// applyRunConfig reads --run-config and sets every flag it determines that the command
// line did not set (flags win over the file). It returns the file's configuration and the
// flags given on the command line that differ from it.
func (f *nodeFlags) applyRunConfig(path string) (*node.RunConfig, []string, error) {
	rc, err := node.ReadRunConfig(path)
	if err != nil {
		return nil, nil, err
	}
	set, err := runConfigFlags(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("--run-config %s: %v", path, err)
	}
	var overridden []string
	for name, v := range set {
		if f.m.Lookup(name) == nil {
			return nil, nil, fmt.Errorf("--run-config %s: no flag --%s", path, name)
		}
		if f.m.isSet(name) {
			if cur := f.m.Lookup(name).Value.String(); cur != v {
				overridden = append(overridden, fmt.Sprintf("--%s %s (the file's %s)", name, cur, v))
			}
			continue
		}
		if err := f.m.Set(name, v); err != nil {
			return nil, nil, fmt.Errorf("--run-config %s: --%s %s: %v", path, name, v, err)
		}
	}
	if rc.EtaTable != nil && !f.m.isSet("eta-file") {
		f.etaTable = rc.EtaTable
	}
	return &rc, overridden, nil
}

// checkRunConfig compares the node's configuration, data loaded, with the run file's:
// the keys that no flag gives (dims, scaling) must match; a key changed by a flag given on
// the command line is the user's choice and only reported.
func checkRunConfig(cfg *node.Config, rc *node.RunConfig, overridden []string) (warnings []string, err error) {
	if rc == nil {
		return nil, nil
	}
	mine := cfg.RunConfig()
	if rc.Features == "" {
		mine.Features = "" // a file that gives no features (written by hand) leaves them to the data
	}
	diff := mine.Diff(*rc)
	if len(diff) == 0 {
		return nil, nil
	}
	if len(overridden) == 0 {
		return nil, fmt.Errorf("this node's configuration differs from --run-config: %v", diff)
	}
	return []string{fmt.Sprintf("flags override --run-config (%v): this node's config hash will differ from the run's: %v", overridden, diff)}, nil
}
