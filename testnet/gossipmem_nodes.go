package testnet

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/dpadmm/dpadmm/gossip"
	"github.com/dpadmm/dpadmm/node"
	"github.com/dpadmm/dpadmm/privacy"
)

// GossipInitRand returns the source NewGossipSim draws node i's f_i(0) from for a run
// seed. 'dpadmm node --algo ... --seed S' uses it, so that a node of a static run starts
// where the simulator's node with the same index does. Testnets only: it is not secret.
func GossipInitRand(seed uint64, i int) *rand.Rand {
	return rand.New(rand.NewPCG(mix(seed, i, 4), mix(seed, i, 5)))
}

// GossipParamsFor returns the node parameters of a neighbour-exchange run equivalent to
// the simulator's options o (after NewGossipSim filled its defaults): the same graph
// (seeded with o.Seed), schedules (an explicit per-node table for NodeSchedules, a
// one-column table for EtaList), constants and M = o.Train.Rows.
func GossipParamsFor(o *GossipOptions) (node.GossipParams, error) {
	p := node.GossipParams{
		Algo: o.Algo, Graph: o.Graph, GraphSeed: o.Seed, Iters: o.Iters, Alpha: o.Alpha, Eta: o.Eta,
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
// node.Node.RunGossip, the runtime of 'dpadmm node --algo'), one per simulated node, in
// this process on loopback, with a static membership in index order (no announce/join),
// the simulator's shards, f_i(0) (GossipInitRand) and seeded noise (NodeNoise). Each
// node's data directory is dir/node-<i> (dir "" = a temporary directory, removed
// afterwards). It returns each node's model.json content by index; without stale uses
// every model equals the simulator's machine's bit for bit. status, when set, is called
// with the started nodes before the run begins (tests use it to watch /status).
func RunGossipNodes(ctx context.Context, o GossipOptions, run, dir string, barrier time.Duration, status func([]*node.Node)) ([]*node.GossipModel, error) {
	sim, err := NewGossipSim(&o)
	if err != nil {
		return nil, err
	}
	p, err := GossipParamsFor(&o)
	if err != nil {
		return nil, err
	}
	p.Barrier = barrier
	if run == "" {
		run = "gnodes"
	}
	if dir == "" {
		d, err := os.MkdirTemp("", "dpadmm-gnodes-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	n := len(sim.Machines)
	ids := make([]peer.ID, n)
	dirs := make([]string, n)
	for i := range ids {
		dirs[i] = filepath.Join(dir, fmt.Sprintf("node-%d", i))
		if ids[i], err = node.DataDirPeerID(dirs[i]); err != nil {
			return nil, err
		}
	}
	nodes := make([]*node.Node, n)
	defer func() {
		for _, nd := range nodes {
			if nd != nil {
				nd.Close()
			}
		}
	}()
	seed := o.Seed
	for i := range nodes {
		q := p
		c := node.Config{
			Run: run, DataDir: dirs[i], Data: sim.Shards[i], Problem: o.Problem, Members: ids, Gossip: &q,
			Listen: []string{"/ip4/127.0.0.1/tcp/0"}, NoSync: true, AllowSeededNoise: true, Insecure: true,
			Rand:  func(i int) *rand.Rand { return GossipInitRand(seed, i) },
			Noise: func(i int) privacy.Noise { return NodeNoise(seed, i) },
		}
		if nodes[i], err = node.New(ctx, c); err != nil {
			return nil, fmt.Errorf("testnet: gnodes: node %d: %w", i, err)
		}
	}
	for _, a := range nodes {
		for _, b := range nodes {
			if a != b {
				a.Host.Peerstore().AddAddrs(b.ID(), b.Host.Addrs(), time.Hour)
			}
		}
	}
	if status != nil {
		status(nodes)
	}
	models := make([]*node.GossipModel, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, nd := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); models[i], errs[i] = nd.RunGossip(ctx) }()
	}
	wg.Wait()
	for i, m := range models {
		if errs[i] != nil {
			return nil, fmt.Errorf("testnet: gnodes: node %d: %w", i, errs[i])
		}
		if m.Index != i {
			return nil, errors.New("testnet: gnodes: a node's index differs from the static order")
		}
	}
	return models, nil
}
