package testnet

import (
	"github.com/dpadmm/dpadmm/node"

	"github.com/dpadmm/dpadmm/testnet/sim"
)

// DefaultOptions returns the options of the no-flag demo of 'dpadmm testnet' (without
// data): 50 nodes on the complete graph, 1,000 hops (50 nodes x the cap), seed 1, an iid
// split, and the walk's hyperparameters of a real node (node.DefaultConfig: gamma 0.03,
// lambda 0.1, clip 0.1, cap 20 updates, delta 1e-5, L2-regularised logistic regression;
// the command calibrates sigma to its default --target-epsilon).
func DefaultOptions() sim.Options {
	d := node.DefaultConfig()
	return sim.Options{
		Nodes: 50, Split: "iid", Problem: d.Problem, Gamma: d.Gamma, Lambda: d.Lambda, Clip: d.Clip, Sigma: d.Sigma,
		Hops: 1000, Seed: 1, Graph: "complete", MaxUpdates: d.MaxUpdates, Delta: d.Delta,
	}
}

// DefaultGossipOptions returns the neighbour-exchange defaults of 'dpadmm testnet --algo
// radmm|...' (without data and algorithm): the paper's N = 5 nodes and node's parameters
// (node.DefaultRADMMParams: ring, 100 iterations, alpha 2, eta 1, gamma 0.5, C 10), seed 1.
func DefaultGossipOptions() sim.GossipOptions {
	p := node.DefaultRADMMParams()
	return sim.GossipOptions{
		Nodes: 5, Split: "iid", Problem: node.DefaultConfig().Problem, Graph: p.Graph, Iters: p.Iters, Alpha: p.Alpha,
		Eta: p.Eta, EtaGrowth: p.EtaGrowth, EtaMax: p.EtaMax, Gamma: p.Gamma, C: p.PaperC, Seed: 1,
	}
}
