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
	"github.com/rs/zerolog"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/node"
	"github.com/dpadmm/dpadmm/privacy"
)

// MemConfig configures an in-process network of real libp2p hosts (loopback TCP), one
// node.Node per shard. Per-node randomness, shards, weights and the initial holder are
// those of NewSim for the same seed, so the final model is bit-identical to the
// simulator's after the same number of hops.
type MemConfig struct {
	Shards     []*consensus.Dataset
	Problem    consensus.Problem
	Gamma      float64
	Lambda     float64
	Clip       float64
	Sigma      float64
	MaxUpdates int
	Seed       uint64
	Run        string // "" = "mem"
	Hops       uint64
	Delta      float64 // for model.json; 0 = 1e-5
	// Dir is the parent of the per-node data directories (node-<i>); "" uses a temporary
	// directory that is removed afterwards.
	Dir string
	// Sync makes ledger and checkpoint writes fsync (off by default: testnets).
	Sync bool
	// Degree is how many ring successors each host connects to up front (the others are
	// dialled on demand); 0 = all (full mesh) up to 16 nodes, else 4.
	Degree int
	Logger zerolog.Logger
}

// MemResult is the outcome of RunMem.
type MemResult struct {
	Model   []float64 // final model (identical on every node; checked)
	Peers   []string  // peer IDs by node index
	Ledger  []int     // ledger entries per node (sum = Hops)
	Updates []int     // noisy updates per node
	Models  []node.Model
	Wall    time.Duration
}

// RunMem runs a walk of cfg.Hops hops over len(cfg.Shards) real libp2p hosts in this
// process and returns when every node has the final model.
func RunMem(ctx context.Context, cfg MemConfig) (*MemResult, error) {
	n := len(cfg.Shards)
	if n < 1 {
		return nil, errors.New("testnet: mem: no shards")
	}
	if cfg.Hops < 1 {
		return nil, errors.New("testnet: mem: hops must be >= 1")
	}
	if cfg.Run == "" {
		cfg.Run = "mem"
	}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "dpadmm-mem-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	total := 0
	for i, s := range cfg.Shards {
		if s.Rows < 1 {
			return nil, fmt.Errorf("testnet: mem: node %d has no rows", i)
		}
		total += s.Rows
	}
	ids := make([]peer.ID, n)
	dirs := make([]string, n)
	for i := range ids {
		dirs[i] = filepath.Join(dir, fmt.Sprintf("node-%d", i))
		id, err := node.DataDirPeerID(dirs[i])
		if err != nil {
			return nil, err
		}
		ids[i] = id
	}
	holder := NodeRand(cfg.Seed, -1).IntN(n)
	nodes := make([]*node.Node, n)
	defer func() {
		for _, nd := range nodes {
			if nd != nil {
				nd.Close()
			}
		}
	}()
	for i, sh := range cfg.Shards {
		c := node.Config{
			Run: cfg.Run, DataDir: dirs[i], Data: sh, Problem: cfg.Problem, Gamma: cfg.Gamma, Lambda: cfg.Lambda,
			Clip: cfg.Clip, Sigma: cfg.Sigma, MaxUpdates: cfg.MaxUpdates, Hops: cfg.Hops, Delta: cfg.Delta,
			Members: ids, Holder: holder, Weight: float64(n) * float64(sh.Rows) / float64(total),
			Rand:             func(i int) *rand.Rand { return NodeRand(cfg.Seed, i) },
			Noise:            func(i int) privacy.Noise { return NodeNoise(cfg.Seed, i) },
			AllowSeededNoise: true, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, NoSync: !cfg.Sync,
			Logger: cfg.Logger.With().Int("node", i).Logger(),
		}
		nd, err := node.New(ctx, c)
		if err != nil {
			return nil, fmt.Errorf("testnet: mem: node %d: %w", i, err)
		}
		nodes[i] = nd
	}
	deg := cfg.Degree
	if deg <= 0 {
		deg = 4
		if n <= 16 {
			deg = n
		}
	}
	for i, a := range nodes {
		for j, b := range nodes {
			if i != j {
				a.Host.Peerstore().AddAddrs(b.ID(), b.Host.Addrs(), time.Hour)
			}
		}
		for k := 1; k <= deg && k < n; k++ {
			b := nodes[(i+k)%n]
			if err := a.Host.Connect(ctx, peer.AddrInfo{ID: b.ID(), Addrs: b.Host.Addrs()}); err != nil {
				return nil, fmt.Errorf("testnet: mem: connect %d->%d: %w", i, (i+k)%n, err)
			}
		}
	}
	start := time.Now()
	models := make([]*node.Model, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, nd := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); models[i], errs[i] = nd.Run(ctx) }()
	}
	wg.Wait()
	res := &MemResult{Wall: time.Since(start), Peers: make([]string, n), Ledger: make([]int, n), Updates: make([]int, n)}
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("testnet: mem: node %d: %w", i, err)
		}
	}
	entries := 0
	for i, m := range models {
		res.Peers[i] = ids[i].String()
		res.Ledger[i] = nodes[i].Store().Entries()
		res.Updates[i] = m.Privacy.Updates
		res.Models = append(res.Models, *m)
		entries += res.Ledger[i]
		for k := range m.Model {
			if m.Model[k] != models[0].Model[k] {
				return nil, fmt.Errorf("testnet: mem: node %d ended with a different model", i)
			}
		}
	}
	if uint64(entries) != cfg.Hops {
		return nil, fmt.Errorf("testnet: mem: invariant: %d ledger entries for %d hops", entries, cfg.Hops)
	}
	res.Model = models[0].Model
	return res, nil
}
