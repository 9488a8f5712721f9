package main

import (
	"fmt"
	"strconv"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/testnet/experiment"
	"github.com/dpadmm/dpadmm/walk"
)

// The --algo auto rule, from the scorecard's measurements (README: utility at a target
// epsilon; 'dpadmm experiment utility', docs/utility.csv): the DP-SGD walk, for every
// loss, with the scorecard's settings (experiment.UtilitySGD, cap UtilitySGDCap) fitted
// to the rows per node once the data is loaded (experiment.SGDFor):
//
//   - a Lipschitz loss (logistic, multinomial): the DP-SGD walk measured above the prox
//     walk in 23 of the 30 cells of breast cancer, wine and iris on 3 and 50 nodes at
//     epsilon 0.5 to 8 (mean of 3 seeds and both splits; breast cancer on 50 nodes at epsilon 1: 0.909
//     against 0.699; iris on 50 at epsilon 2: 0.611 against 0.444), equal in 2 and below
//     in 5, all on wine (with 3 nodes at epsilon 2: 0.829 against 0.889);
//   - the squared loss (no Lipschitz constant, so no record radius for the prox step: its
//     figure would be the node-level clip's): the DP-SGD walk clips every example and
//     gives a per-record figure (diabetes on 3 nodes, epsilon 4: R^2 0.44 against -0.39;
//     on 50 nodes below epsilon 2 both are below 0, the DP-SGD walk further).
//
// A flag given on the command line is kept; the rule fills only what is not set.

// autoSGD are the DP-SGD walk's settings --algo auto fills before the data is loaded.
var autoSGD = map[string]string{"step-size": strconv.FormatFloat(experiment.UtilitySGD.Eta, 'g', -1, 64),
	"sample-rate": strconv.FormatFloat(experiment.UtilitySGD.Rate, 'g', -1, 64), "max-updates": strconv.Itoa(experiment.UtilitySGDCap)}

// autoChoice is what --algo auto chose: which of the DP-SGD walk's settings the rule
// filled (those are fitted to the rows per node once the data is loaded, fit) and the
// loss it chose for.
type autoChoice struct {
	rate, eta, hops bool
	loss            consensus.Loss
	m               *modeFlags
}

// resolveAuto replaces --algo auto by the DP-SGD walk and fills its unset settings (hops
// once the node count is known: fillHops). It returns nil when --algo is not auto.
func resolveAuto(m *modeFlags, algo, lossName *string) (*autoChoice, error) {
	if *algo != "auto" {
		return nil, nil
	}
	loss, err := consensus.ParseLoss(*lossName)
	if err != nil {
		return nil, fmt.Errorf("--loss: %v", err)
	}
	*algo = "walk-sgd"
	a := &autoChoice{rate: !m.isSet("sample-rate"), eta: !m.isSet("step-size"), hops: !m.isSet("hops"), loss: loss, m: m}
	for name, v := range autoSGD {
		if !m.isSet(name) {
			if err := m.Set(name, v); err != nil {
				return nil, err
			}
		}
	}
	return a, nil
}

// fillHops sets --hops to nodes x cap unless the command line set it (a nil choice or
// nodes < 1: nothing).
func (a *autoChoice) fillHops(nodes int) error {
	if a == nil || !a.hops || nodes < 1 {
		return nil
	}
	k, _ := strconv.Atoi(a.m.Lookup("max-updates").Value.String())
	return a.m.Set("hops", strconv.Itoa(nodes*k))
}

// fit fits the filled settings of step to shards of rows rows each (experiment.SGDFor)
// and returns the step and the line that says what was chosen and why; basis says where
// rows came from. rows <= 0 leaves the settings unfitted. A nil choice (--algo was not
// auto) returns step unchanged and "".
//
// Every member of a run must fit to the same number, since the settings enter the
// configuration hash that members compare (and a rate fitted to a node's own rows would
// announce them): testnet fits to the rows of the smallest iid shard, the scorecard's
// number; a node to --min-rows, which every member gives alike.
func (a *autoChoice) fit(step walk.StepParams, rows float64, basis string) (walk.StepParams, string) {
	if a == nil {
		return step, ""
	}
	step = experiment.SGDFor(step, rows, a.rate, a.eta)
	why := "the DP-SGD walk measured above the prox walk in 23 of the scorecard's 30 classification cells, below in 5 (all wine; --algo walk is the prox walk)"
	if a.loss == consensus.Squared {
		why = "the squared loss is not Lipschitz, so the prox step has no per-record radius; the DP-SGD walk clips every example (measured: diabetes R^2 0.44 at epsilon 4 on 3 nodes)"
	}
	return step, fmt.Sprintf("--algo auto: walk-sgd (step size %.4g, sample rate %.4g, cap %s, hops %s; %s): %s",
		step.Eta, step.Rate, a.m.Lookup("max-updates").Value, a.m.Lookup("hops").Value, basis, why)
}
