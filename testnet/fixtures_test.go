package testnet

import (
	"math"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/testnet/sim"
)

// gossipData is a synthetic logistic problem with rows scaled to norm <= 1 (Theorem V.1),
// the data of the simulator's own gossip tests (testnet/sim/gossip_test.go).
func gossipData(t *testing.T, rows int) (*consensus.Dataset, *consensus.Dataset) {
	t.Helper()
	d, _ := consensus.SyntheticLogistic(rows, 5, 3, 21)
	for r := 0; r < d.Rows; r++ {
		row := d.Row(r)
		s := 0.0
		for _, v := range row {
			s += v * v
		}
		if s = math.Sqrt(s); s > 1 {
			for j := range row {
				row[j] /= s
			}
		}
	}
	train, test := consensus.TrainTest(d, 0.2, 1)
	return train, test
}

// gossipOpts are the gossip options of the simulator's own tests on 8 nodes.
func gossipOpts(train, test *consensus.Dataset, algo, graphSpec string, iters int, alpha float64) sim.GossipOptions {
	return sim.GossipOptions{
		Train: train, Test: test, Data: "synthetic", Nodes: 8, Problem: consensus.Problem{Loss: consensus.Logistic, Reg: consensus.Regularizer{L2: 0.02}},
		Algo: algo, Graph: graphSpec, Iters: iters, Alpha: alpha, Eta: 0.05, Gamma: 0.5, C: 1, Seed: 4,
	}
}
