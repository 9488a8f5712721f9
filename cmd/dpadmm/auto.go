package main

import (
	"fmt"
	"strconv"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/testnet/experiment"
)

// The --algo auto rule, from public facts only (the loss, the node count) and the
// scorecard's measurements (README: utility at a target epsilon; 'dpadmm experiment
// utility'):
//
//   - a Lipschitz loss (logistic, multinomial): the walk's prox step. Its per-record
//     figure rests on the record radius gamma (c L + tol); it measured above R-ADMM at
//     every target epsilon from 0.5 to 8, on 3 and 50 nodes (R-ADMM cannot reach the
//     lower targets at all: Theorem V.1 has a term the noise does not shrink);
//   - the squared loss (no Lipschitz constant, so no record radius for the prox step: its
//     figure would be the node-level clip's): the DP-SGD walk, whose per-example clip
//     gives a per-record figure, with the measured settings autoSGD (diabetes, 3 nodes,
//     epsilon 4: R^2 0.36-0.48 against -0.39 for the prox step).
//
// A flag given on the command line is kept; the rule fills only what is not set.

// autoSGD are the DP-SGD walk's settings --algo auto uses for the squared loss.
var autoSGD = map[string]string{"step-size": strconv.FormatFloat(experiment.UtilitySGD.Eta, 'g', -1, 64),
	"sample-rate": strconv.FormatFloat(experiment.UtilitySGD.Rate, 'g', -1, 64), "max-updates": strconv.Itoa(experiment.UtilitySGDCap)}

// resolveAuto replaces --algo auto by the algorithm the rule chooses for the loss and
// fills the chosen algorithm's unset settings (hops: nodes x cap), returning the line
// that says what was chosen and why ("" when --algo is not auto).
func resolveAuto(m *modeFlags, algo, lossName *string, nodes int) (string, error) {
	if *algo != "auto" {
		return "", nil
	}
	loss, err := consensus.ParseLoss(*lossName)
	if err != nil {
		return "", fmt.Errorf("--loss: %v", err)
	}
	if loss != consensus.Squared {
		*algo = "walk"
		return "--algo auto: walk (prox step): the loss is Lipschitz, so the per-record figure uses the record radius; the scorecard measured it above R-ADMM at every epsilon from 0.5 to 8", nil
	}
	*algo = "walk-sgd"
	for name, v := range autoSGD {
		if !m.isSet(name) {
			if err := m.Set(name, v); err != nil {
				return "", err
			}
		}
	}
	if !m.isSet("hops") && nodes > 0 {
		k, _ := strconv.Atoi(m.Lookup("max-updates").Value.String())
		if err := m.Set("hops", strconv.Itoa(nodes*k)); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("--algo auto: walk-sgd (step size %s, sample rate %s, cap %s, hops %s): the squared loss is not Lipschitz, so the prox step has no per-record radius; the DP-SGD walk clips every example (measured: diabetes R^2 0.36-0.48 at epsilon 4 on 3 nodes)",
		m.Lookup("step-size").Value, m.Lookup("sample-rate").Value, m.Lookup("max-updates").Value, m.Lookup("hops").Value), nil
}
