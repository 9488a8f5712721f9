package testnet

import (
	"os"
	"strings"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/testnet/sim"
	"github.com/dpadmm/dpadmm/walk"
)

// irisOptions is a 3-node walk on the 3-class iris data (../shared/data/iris.csv):
// multinomial loss, standardize+unitball with the intercept, the intercepts unpenalised.
func irisOptions(t *testing.T, n int, hops, seed uint64) sim.Options {
	t.Helper()
	const path = "../../shared/data/iris.csv"
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the shared data are needed beside the repository: %v", err)
	}
	d, err := consensus.Load(path, consensus.LoadOptions{Label: "species", Binary: true, Multiclass: true})
	if err != nil {
		t.Fatal(err)
	}
	train, test := consensus.TrainTest(d, 0.2, seed)
	sc, err := consensus.FitScaler(train, consensus.ScaleStandardizeUnitBall)
	if err != nil {
		t.Fatal(err)
	}
	sc.Intercept = consensus.DefaultIntercept
	tr := sc.Apply(train)
	return sim.Options{
		Train: tr, Test: sc.Apply(test), Data: "iris", Scaling: "standardize+unitball", Scaler: sc, Nodes: n,
		Problem: consensus.Problem{Loss: consensus.Multinomial, Reg: consensus.Regularizer{L2: 1e-3, Free: 1, Block: tr.Cols}},
		Gamma:   100, Lambda: 0.5, Clip: 0.1, Sigma: 1, Hops: hops, Seed: seed, MaxUpdates: 100, Delta: 1e-5,
	}
}

// TestMultinomialSameModelInEveryMode: a 3-class walk (the prox step and the sgd step)
// gives the simulator's report, model bit for bit, on real libp2p hosts in one process
// (--mem) and as 'dpadmm node' processes reading their shards from CSV with the class
// names (--procs), and its predictor describes a 3-class model. Without -tags long only
// the prox step also runs on hosts.
func TestMultinomialSameModelInEveryMode(t *testing.T) {
	bin := buildDpadmm(t)
	const n, hops, seed = 3, 60, 5
	steps := []walk.StepParams{{}, {Kind: walk.StepSGD, Eta: 0.5, Rate: 0.5}, {Kind: walk.StepGADMM, Eta: 0.1, Beta: 1}}
	for i, st := range steps {
		t.Run(st.Kind.String(), func(t *testing.T) {
			o := irisOptions(t, n, hops, seed)
			o.Step = st
			gs, err := sim.Run(o)
			if err != nil {
				t.Fatal(err)
			}
			if len(gs.Model) != 3*o.Train.Cols || gs.Predictor == nil || gs.Predictor.Task != consensus.TaskMulticlass ||
				len(gs.Predictor.Classes) != 3 || gs.Accuracy == nil {
				t.Fatalf("report: model of %d values, predictor %+v", len(gs.Model), gs.Predictor)
			}
			if st.Kind == walk.StepGADMM || st.Kind == walk.StepSGD {
				// Not certified for this loss: the realised figure is refused, with the reason.
				if pr := gs.Privacy.PairwiseRealised; pr == nil || pr.ConditionsHold || !strings.Contains(pr.Note, "multinomial") {
					t.Fatalf("%s: realised section %+v, want the local figure with the multinomial reason", st.Kind, pr)
				}
			}
			if longRun || i == 0 { // the gradient steps on hosts with -tags long
				sameInEveryMode(t, o, gs, bin)
			}
		})
	}
}
