package testnet

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/dpadmm/dpadmm/gossip"
	"github.com/dpadmm/dpadmm/node"
	"github.com/dpadmm/dpadmm/testnet/sim"
)

// GossipInitRand returns the source NewGossipSim draws node i's f_i(0) from for a run
// seed. 'dpadmm node --algo ... --seed S' uses it, so that a node of a static run starts
// where the simulator's node with the same index does. Testnets only: it is not secret.
func GossipInitRand(seed uint64, i int) *rand.Rand {
	return rand.New(rand.NewPCG(sim.Mix(seed, i, 4), sim.Mix(seed, i, 5)))
}

// GossipParamsFor returns the node parameters of a neighbour-exchange run equivalent to
// the simulator's options o (after NewGossipSim filled its defaults): the same graph
// (seeded with o.Seed), schedules (an explicit per-node table for NodeSchedules, a
// one-column table for EtaList), constants and M = o.Train.Rows.
func GossipParamsFor(o *sim.GossipOptions) (node.RADMMParams, error) {
	p := node.RADMMParams{
		Algo: o.Algo, Graph: o.Graph, GraphSeed: o.Seed, Iters: o.Iters, Alpha: o.Alpha, TargetEpsilon: o.TargetEpsilon, Eta: o.Eta,
		EtaGrowth: o.EtaGrowth, EtaMax: o.EtaMax, Gamma: o.Gamma, PaperC: o.C, TotalRows: o.Train.Rows,
	}
	algo, err := gossip.ParseAlgo(o.Algo)
	if err != nil {
		return p, err
	}
	K := algo.PerturbedCount(o.Iters)
	switch {
	case o.NodeSchedules != nil:
		p.EtaTable = make([][]float64, K)
		for k := range p.EtaTable {
			p.EtaTable[k] = make([]float64, len(o.NodeSchedules))
		}
		for i, s := range o.NodeSchedules {
			for k, v := range s.Values(K) {
				p.EtaTable[k][i] = v
			}
		}
	case len(o.EtaList) > 0:
		for _, v := range o.EtaList[:min(K, len(o.EtaList))] {
			p.EtaTable = append(p.EtaTable, []float64{v})
		}
	}
	return p, nil
}

// RunGossipNodes runs the simulator's options o over full nodes (node.New and
// node.Node.RunRADMM, the runtime of 'dpadmm node --algo'), one per simulated node, in
// this process on loopback (GossipMem with the given run name and barrier timeout). Each
// node's data directory is dir/node-<i> (dir "" = a temporary directory, removed
// afterwards). It returns each node's model.json content by index; without stale uses
// every model equals the simulator's machine's bit for bit. status, when set, is called
// with the started nodes before the run begins (tests use it to watch /status).
func RunGossipNodes(ctx context.Context, o sim.GossipOptions, run, dir string, barrier time.Duration, status func([]*node.Node)) ([]*node.RADMMModel, error) {
	if run == "" {
		run = "gnodes"
	}
	gm, err := NewGossipMem(ctx, GossipMemConfig{Options: o, Run: run, Dir: dir, Barrier: barrier})
	if err != nil {
		return nil, err
	}
	defer gm.Close()
	if status != nil {
		status(gm.Nodes())
	}
	res, err := gm.Run(ctx)
	if err != nil {
		return nil, err
	}
	return res.Outputs, nil
}
