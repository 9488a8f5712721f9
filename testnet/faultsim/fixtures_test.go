package faultsim

import (
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/testnet/internal/fixture"
	"github.com/dpadmm/dpadmm/testnet/sim"
)

// gossipData is the shared synthetic logistic problem (fixture.GossipData).
func gossipData(t *testing.T, rows int) (*consensus.Dataset, *consensus.Dataset) {
	return fixture.GossipData(t, rows)
}

// gossipOpts are the gossip options of the simulator's own tests on 8 nodes.
func gossipOpts(train, test *consensus.Dataset, algo, graphSpec string, iters int, alpha float64) sim.GossipOptions {
	return sim.GossipOptions{
		Train: train, Test: test, Data: "synthetic", Nodes: 8, Problem: consensus.Problem{Loss: consensus.Logistic, Reg: consensus.Regularizer{L2: 0.02}},
		Algo: algo, Graph: graphSpec, Iters: iters, Alpha: alpha, Eta: 0.05, Gamma: 0.5, C: 1, Seed: 4,
	}
}

// runSimLedgers drives a fresh simulator to the end and returns it (machines and ledgers).
func runSimLedgers(t *testing.T, o sim.GossipOptions) *sim.GossipSim {
	t.Helper()
	s, err := sim.NewGossipSim(&o)
	if err == nil {
		err = s.Finish()
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}
