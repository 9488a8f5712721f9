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

	"github.com/dpadmm/dpadmm/node"
	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/testnet/sim"
)

// GossipMemConfig configures an in-process neighbour-exchange network of full nodes
// (node.New and node.Node.RunRADMM, the runtime of 'dpadmm node --algo radmm|...') on
// loopback TCP, one per graph node, with a static membership in node-index order. Graph,
// shards, initial vectors and noise sources are those of NewGossipSim for the same
// options, so a fault-free run ends with models bit-identical to the simulator's.
type GossipMemConfig struct {
	Options sim.GossipOptions
	Run     string // "" = "gmem"
	// Dir is the parent of the per-node data directories (node-<i>); "" uses a temporary
	// directory that is removed afterwards.
	Dir string
	// Sync makes ledger and stale-record writes fsync (off by default: testnets).
	Sync bool
	// Barrier, MaxWait and OnMissing are the nodes' barrier timeout, the longest wait for a
	// connected neighbour, and the missing-neighbour policy (see node.RADMMParams).
	Barrier   time.Duration
	MaxWait   time.Duration
	OnMissing node.MissingPolicy
	// HaltNode, when HaltAfter > 0, is a node that stops (and closes its host) once its
	// release of iteration HaltAfter is acknowledged: fault injection
	// (node.RADMMParams.HaltAfter).
	HaltNode  int
	HaltAfter int
	Logger    zerolog.Logger
}

// GossipMemResult is the outcome of a gossip run over real hosts.
type GossipMemResult struct {
	// Model is the average of the nodes' final models, computed as GossipSim.Average; a
	// node that failed or halted contributes the vector it last released (its journal).
	Model        []float64
	MaxDeviation float64
	Models       [][]float64        // per node; nil for a node that failed or halted
	Outputs      []*node.RADMMModel // per node, its model.json; nil for a node that failed or halted
	Stale        [][]node.StaleUse  // per node (nil: none)
	Ledger       [][]privacy.Entry  // per node, read back from its data directory; nil for a node that failed or halted
	Errs         []error            // per node (node.ErrHalted for the halted node)
	Rejected     []int              // per node: inbound frames rejected
	Ignored      []int              // per node: inbound frames ignored (stale, duplicate)
	Peers        []string           // peer IDs by node index
	Wall         time.Duration      // from the start of Run to the last node's end
	Iters        int
}

// GossipMem is a built, connected network ready to Run.
type GossipMem struct {
	cfg     GossipMemConfig
	sim     *sim.GossipSim // the run's setup (graph, shards, f_i(0), accountant inputs); its machines are not run
	nodes   []*node.Node
	ids     []peer.ID
	dirs    []string // data directories by node index
	cleanup func()
	closed  []bool
	mu      sync.Mutex
}

// NewGossipMem builds the run's setup (NewGossipSim), starts one full node per graph node
// with its data directory and connects every pair of graph neighbours.
func NewGossipMem(ctx context.Context, cfg GossipMemConfig) (*GossipMem, error) {
	if cfg.Run == "" {
		cfg.Run = "gmem"
	}
	gs, err := sim.NewGossipSim(&cfg.Options)
	if err != nil {
		return nil, err
	}
	if err := checkNodeRows(gs); err != nil {
		return nil, err
	}
	p, err := gossipNetParams(&cfg.Options, cfg.Barrier, cfg.MaxWait, cfg.OnMissing)
	if err != nil {
		return nil, err
	}
	n := len(gs.Machines)
	if cfg.HaltAfter > 0 && (cfg.HaltNode < 0 || cfg.HaltNode >= n) {
		return nil, fmt.Errorf("testnet: gmem: halt node %d out of range [0,%d)", cfg.HaltNode, n)
	}
	gm := &GossipMem{cfg: cfg, sim: gs, closed: make([]bool, n), cleanup: func() {}}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "dpadmm-gmem-")
		if err != nil {
			return nil, err
		}
		gm.cleanup = func() { os.RemoveAll(d) }
		dir = d
	}
	fail := func(err error) (*GossipMem, error) { gm.Close(); return nil, err }
	dirs := make([]string, n)
	gm.dirs = dirs
	gm.ids = make([]peer.ID, n)
	for i := range dirs {
		dirs[i] = filepath.Join(dir, fmt.Sprintf("node-%d", i))
		if gm.ids[i], err = store.DataDirPeerID(dirs[i]); err != nil {
			return fail(err)
		}
	}
	gm.nodes = make([]*node.Node, n)
	seed := cfg.Options.Seed
	for i := 0; i < n; i++ {
		q := p
		if cfg.HaltAfter > 0 && i == cfg.HaltNode {
			q.HaltAfter = cfg.HaltAfter
		}
		c := node.Config{
			Run: cfg.Run, DataDir: dirs[i], Data: gs.Shards[i], RADMM: &q, Logger: cfg.Logger.With().Int("node", i).Logger(),
			Training:    node.Training{Problem: cfg.Options.Problem},
			Admission:   node.Admission{Members: gm.ids},
			Seeding:     node.Seeding{AllowSeededNoise: true, Rand: func(i int) *rand.Rand { return GossipInitRand(seed, i) }, Noise: func(i int) privacy.Noise { return sim.NodeNoise(seed, i) }},
			Network:     node.Network{Listen: []string{"/ip4/127.0.0.1/tcp/0"}},
			Reliability: node.Reliability{NoSync: !cfg.Sync},
			Harness:     node.Harness{Insecure: true, Predictor: sim.PredictorTemplate(cfg.Options.Problem.Loss, cfg.Options.Scaler, cfg.Options.Train)},
		}
		if gm.nodes[i], err = node.New(ctx, c); err != nil {
			return fail(fmt.Errorf("testnet: gmem: node %d: %w", i, err))
		}
	}
	for _, a := range gm.nodes {
		for _, b := range gm.nodes {
			if a != b {
				a.Host.Peerstore().AddAddrs(b.ID(), b.Host.Addrs(), time.Hour)
			}
		}
	}
	for i, a := range gm.nodes {
		for _, j := range gs.Graph.Neighbors(i) {
			if j < i {
				continue
			}
			b := gm.nodes[j]
			if err := a.Host.Connect(ctx, peer.AddrInfo{ID: b.ID(), Addrs: b.Host.Addrs()}); err != nil {
				return fail(fmt.Errorf("testnet: gmem: connect %d-%d: %w", i, j, err))
			}
		}
	}
	return gm, nil
}

// Nodes returns the started nodes by index (tests watch their /status).
func (gm *GossipMem) Nodes() []*node.Node { return gm.nodes }

// Close closes every node and removes a temporary directory.
func (gm *GossipMem) Close() error {
	var first error
	for i := range gm.nodes {
		if err := gm.closeNode(i); err != nil && first == nil {
			first = err
		}
	}
	gm.cleanup()
	gm.cleanup = func() {}
	return first
}

func (gm *GossipMem) closeNode(i int) error {
	gm.mu.Lock()
	nd := gm.nodes[i]
	if nd == nil || gm.closed[i] {
		gm.mu.Unlock()
		return nil
	}
	gm.closed[i] = true
	gm.mu.Unlock()
	return nd.Close()
}

// Run runs every node to the end of the run. A node that halts or fails is closed at once
// (as its process would exit), so that its neighbours see it disconnect. It returns the
// result and, if any node other than the halted one failed, the first such error (by node
// index); the result is returned in both cases.
func (gm *GossipMem) Run(ctx context.Context) (*GossipMemResult, error) {
	n := len(gm.nodes)
	res := &GossipMemResult{
		Models: make([][]float64, n), Outputs: make([]*node.RADMMModel, n), Stale: make([][]node.StaleUse, n),
		Ledger: make([][]privacy.Entry, n), Errs: make([]error, n), Peers: make([]string, n), Iters: gm.cfg.Options.Iters,
		Rejected: make([]int, n), Ignored: make([]int, n),
	}
	start := time.Now()
	var wg sync.WaitGroup
	for i, nd := range gm.nodes {
		res.Peers[i] = gm.ids[i].String()
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := nd.RunRADMM(ctx)
			if err == nil && m.Index != i {
				err = fmt.Errorf("testnet: gmem: node %d took index %d of the static membership", i, m.Index)
			}
			if err == nil {
				res.Outputs[i] = m
			}
			res.Errs[i] = err
			if err != nil {
				// A halted or failed node leaves at once, as its process would, so that
				// its neighbours see it disconnect. A node that completed stays up until
				// the end, so that its last acknowledgements reach the neighbours.
				gm.closeNode(i)
			}
		}()
	}
	if gm.cfg.Options.Progress != nil {
		stop := pollEvery(ctx, time.Second, func() { gm.cfg.Options.Progress(ledgerIters(gm.dirs), res.Iters) })
		wg.Wait()
		stop()
	} else {
		wg.Wait()
	}
	res.Wall = time.Since(start)
	left, err := gm.left(res.Outputs)
	if err != nil {
		return res, err
	}
	all := make([][]float64, n)
	for i, l := range left {
		all[i] = l.Model
		res.Stale[i] = l.Stale
		if res.Outputs[i] != nil {
			res.Models[i], res.Ledger[i] = l.Model, l.Ledger
			res.Rejected[i], res.Ignored[i] = l.Rejected, l.Ignored
		}
	}
	res.Model, res.MaxDeviation = sim.AverageModels(all, gm.sim.Objs[0].Dim())
	var first error
	for i, err := range res.Errs {
		if err == nil || gm.cfg.HaltAfter > 0 && i == gm.cfg.HaltNode && errors.Is(err, node.ErrHalted) {
			continue
		}
		if first == nil {
			first = fmt.Errorf("testnet: gmem: node %d: %w", i, err)
		}
	}
	return res, first
}

// left reads what every node left in its data directory (outs[i]: its model.json, nil
// when it did not complete the run).
func (gm *GossipMem) left(outs []*node.RADMMModel) ([]gossipLeft, error) {
	left := make([]gossipLeft, len(gm.dirs))
	for i, d := range gm.dirs {
		var err error
		if left[i], err = readGossipLeft(d, gm.cfg.Run, gm.sim.Configs[i].Init, outs[i]); err != nil {
			return nil, fmt.Errorf("testnet: gmem: node %d: %w", i, err)
		}
	}
	return left, nil
}

// RunGossipMem builds a GossipMem network, runs it and closes it.
func RunGossipMem(ctx context.Context, cfg GossipMemConfig) (*GossipMemResult, error) {
	gm, err := NewGossipMem(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer gm.Close()
	return gm.Run(ctx)
}

// gossipTraceNote explains the empty trace_hash of a network report.
const gossipTraceNote = "trace_hash is empty: the vectors travel between hosts and are not fingerprinted; " +
	"messages counts the vectors released to neighbours (ledger entries times degree)"

// effectiveWaits returns the barrier timeout and maximum wait a node uses for cfg's values
// (node.RADMMParams' defaults for zeros).
func effectiveWaits(barrier, maxWait time.Duration) (time.Duration, time.Duration) {
	if barrier == 0 {
		barrier = 30 * time.Second
	}
	if maxWait == 0 {
		maxWait = 10 * barrier
	}
	return barrier, maxWait
}

// gossipNetReport builds the report of a completed run over hosts: the simulator's report
// (NewGossipReport) computed from the machines' final state and the nodes' durable ledgers,
// plus the network section.
func gossipNetReport(o *sim.GossipOptions, gs *sim.GossipSim, models [][]float64, inexact []bool, ledgers [][]privacy.Entry,
	stale [][]node.StaleUse, rejected, ignored []int, wall time.Duration, nw sim.GossipNetworkReport) (*sim.GossipReport, error) {
	n := len(gs.Machines)
	messages := 0
	for i := 0; i < n; i++ {
		if ledgers[i] == nil {
			return nil, fmt.Errorf("testnet: node %d did not complete the run", i)
		}
		messages += len(ledgers[i]) * gs.Graph.Degree(i)
		nw.LedgerEntries += len(ledgers[i])
		for _, u := range stale[i] {
			nw.Stale = append(nw.Stale, sim.GossipStale{Node: i, StaleUse: u})
		}
		nw.Rejected += rejected[i]
		nw.Ignored += ignored[i]
	}
	if nw.Stale == nil {
		nw.Stale = []sim.GossipStale{}
	}
	nw.StaleUses = len(nw.Stale)
	nw.Hosts = n
	nw.WallSeconds = wall.Seconds()
	nw.Note = gossipTraceNote
	if nw.StaleUses > 0 {
		nw.Note += fmt.Sprintf("; %d stale uses: the model is not the fault-free algorithm's and the accuracy figures "+
			"describe a perturbed run. The privacy figures are kept: Theorem V.1's per-iteration charge does not depend on "+
			"the neighbours' vectors and the substitution is chosen from timing alone (docs/radmm-network.md); a "+
			"fixed, static exchange is an assumption of the convergence analysis, not of the privacy bound", nw.StaleUses)
	}
	rep, err := sim.NewGossipReport(o, gs, sim.GossipOutcome{Models: models, Inexact: inexact, Ledgers: ledgers, Messages: messages, Wall: wall})
	if err != nil {
		return nil, err
	}
	rep.Network = &nw
	return rep, nil
}

// RunGossipMemReport runs cfg like RunGossipMem and, when every node completed, returns the
// report RunGossip gives for cfg.Options (same keys; the same model and objective bit for
// bit when no stale vector was used) with a "network" section. On a failed run it returns
// the result and the error, and no report. When ctx is canceled first, it returns the
// report of the state reached (each node's last durable release, the ledgers on disk),
// marked interrupted.
func RunGossipMemReport(ctx context.Context, cfg GossipMemConfig) (*sim.GossipReport, *GossipMemResult, error) {
	gm, err := NewGossipMem(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	defer gm.Close()
	res, err := gm.Run(ctx)
	interrupted := err != nil && ctx.Err() != nil
	if err != nil && !interrupted {
		return nil, res, err
	}
	for i, m := range res.Outputs {
		if m == nil && !interrupted {
			return nil, res, fmt.Errorf("testnet: node %d did not complete the run", i)
		}
	}
	left, err := gm.left(res.Outputs)
	if err != nil {
		return nil, res, err
	}
	barrier, maxWait := effectiveWaits(cfg.Barrier, cfg.MaxWait)
	nw := sim.GossipNetworkReport{
		Mode: "mem", OnMissing: cfg.OnMissing.String(), BarrierSeconds: barrier.Seconds(),
		MaxWaitSeconds: maxWait.Seconds(), Dir: cfg.Dir,
	}
	o := gm.cfg.Options // as filled in by NewGossipSim
	rep, err := gossipLeftReport(&o, gm.sim, left, res.Wall, nw)
	if err != nil {
		return nil, res, err
	}
	if interrupted {
		rep.MarkInterrupted(ledgerIters(gm.dirs))
	}
	return rep, res, nil
}

// gossipLeftReport is gossipNetReport on what the nodes left.
func gossipLeftReport(o *sim.GossipOptions, gs *sim.GossipSim, left []gossipLeft, wall time.Duration, nw sim.GossipNetworkReport) (*sim.GossipReport, error) {
	n := len(left)
	models, inexact := make([][]float64, n), make([]bool, n)
	ledgers, stale := make([][]privacy.Entry, n), make([][]node.StaleUse, n)
	rejected, ignored := make([]int, n), make([]int, n)
	for i, l := range left {
		models[i], inexact[i], ledgers[i], stale[i], rejected[i], ignored[i] = l.Model, l.Inexact, l.Ledger, l.Stale, l.Rejected, l.Ignored
	}
	return gossipNetReport(o, gs, models, inexact, ledgers, stale, rejected, ignored, wall, nw)
}
