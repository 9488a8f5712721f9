package testnet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/rs/zerolog"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/gossip"
	"github.com/dpadmm/dpadmm/node"
	"github.com/dpadmm/dpadmm/privacy"
)

// GossipOutputFile is the file a gossip node started from a plan writes into its data
// directory at the end of its run (GossipNodeOutput as JSON).
const GossipOutputFile = "gossip-model.json"

// GossipPlan is what one `dpadmm node --gossip-plan` process needs besides its shard to
// build the machine NewGossipSim builds for node Self and to run it over libp2p with a
// fixed membership. Every value is data-independent. Floats are written by encoding/json,
// which round-trips float64 exactly.
type GossipPlan struct {
	Run       string              `json:"run"`
	Self      int                 `json:"self"`
	Members   []node.StaticMember `json:"members"` // by node index; Addrs[0] is the listen address
	Neighbors []int               `json:"neighbors"`
	Algo      string              `json:"algo"`
	Iters     int                 `json:"iters"`
	Penalty   gossip.Schedule     `json:"penalty"`
	Gamma     float64             `json:"gamma"`
	Alpha     string              `json:"alpha"` // strconv form; "+Inf" = no noise
	C1        float64             `json:"c1"`
	Loss      string              `json:"loss"`
	RowWeight float64             `json:"row_weight"` // C_i/B_i
	RegOverN  float64             `json:"reg_over_n"` // rho/N
	Init      []float64           `json:"init"`       // f_i(0)
	// Seed seeds the noise source as the simulator does (NodeNoise): a testnet feature;
	// such noise is NOT secure.
	Seed      uint64 `json:"seed"`
	Rows      int    `json:"rows"` // expected shard size
	Cols      int    `json:"cols"`
	Barrier   string `json:"barrier_timeout"` // time.Duration strings
	MaxWait   string `json:"max_wait"`
	OnMissing string `json:"on_missing"`
	// PauseAt, when > 0, is fault injection (node.GossipConfig.PauseAt): the node stops
	// once its release of iteration PauseAt is durable, before sending it, and waits to be
	// killed.
	PauseAt int `json:"pause_at,omitempty"`
}

// GossipNodeOutput is the outcome of a node run from a plan (GossipOutputFile).
type GossipNodeOutput struct {
	Run           string          `json:"run"`
	Self          int             `json:"self"`
	Peer          string          `json:"peer"`
	Iter          int             `json:"iter"`
	Model         []float64       `json:"model"`
	InexactSolves int             `json:"inexact_solves"`
	MaxResidual   float64         `json:"max_residual"`
	Stale         []node.StaleUse `json:"stale"`
	Rejected      int             `json:"rejected_frames"`
	Ignored       int             `json:"ignored_frames"`
	WallSeconds   float64         `json:"wall_seconds"`
	// Interrupted marks the output of a node stopped (SIGINT, SIGTERM) before the end:
	// Iter and Model are the machine's state then.
	Interrupted bool            `json:"interrupted,omitempty"`
	Ledger      []privacy.Entry `json:"-"`
}

// ParseGossipPlan decodes and checks a plan.
func ParseGossipPlan(b []byte) (*GossipPlan, error) {
	var p GossipPlan
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("testnet: gossip plan: %w", err)
	}
	n := len(p.Members)
	switch {
	case p.Run == "":
		return nil, errors.New("testnet: gossip plan: no run name")
	case n < 2:
		return nil, fmt.Errorf("testnet: gossip plan: %d members, want >= 2", n)
	case p.Self < 0 || p.Self >= n:
		return nil, fmt.Errorf("testnet: gossip plan: self %d out of range [0,%d)", p.Self, n)
	case len(p.Neighbors) == 0:
		return nil, errors.New("testnet: gossip plan: no neighbours")
	case p.Iters < 0:
		return nil, fmt.Errorf("testnet: gossip plan: iterations %d < 0", p.Iters)
	case p.Rows < 1 || p.Cols < 1 || len(p.Init) != p.Cols:
		return nil, fmt.Errorf("testnet: gossip plan: shard %dx%d with an initial vector of %d", p.Rows, p.Cols, len(p.Init))
	}
	for i, m := range p.Members {
		if m.ID == "" || len(m.Addrs) == 0 {
			return nil, fmt.Errorf("testnet: gossip plan: member %d has no ID or address", i)
		}
	}
	seen := make(map[int]bool, len(p.Neighbors))
	for _, j := range p.Neighbors {
		if j < 0 || j >= n || j == p.Self || seen[j] {
			return nil, fmt.Errorf("testnet: gossip plan: bad neighbour %d (out of range, self or repeated)", j)
		}
		seen[j] = true
	}
	if _, err := p.alpha(); err != nil {
		return nil, err
	}
	if _, _, _, err := p.waits(); err != nil {
		return nil, err
	}
	return &p, nil
}

func (p *GossipPlan) alpha() (float64, error) {
	a, err := strconv.ParseFloat(p.Alpha, 64)
	if err != nil || math.IsNaN(a) || !(a > 0) {
		return 0, fmt.Errorf("testnet: gossip plan: alpha must be > 0 or +Inf, got %q", p.Alpha)
	}
	return a, nil
}

func (p *GossipPlan) waits() (time.Duration, time.Duration, node.MissingPolicy, error) {
	b, err := time.ParseDuration(p.Barrier)
	if err != nil || b <= 0 {
		return 0, 0, 0, fmt.Errorf("testnet: gossip plan: barrier timeout %q", p.Barrier)
	}
	w, err := time.ParseDuration(p.MaxWait)
	if err != nil || w < b {
		return 0, 0, 0, fmt.Errorf("testnet: gossip plan: max wait %q (must be >= the barrier timeout)", p.MaxWait)
	}
	pol, err := node.ParseMissingPolicy(p.OnMissing)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("testnet: gossip plan: %w", err)
	}
	return b, w, pol, nil
}

// Machine builds the plan's machine on shard (the simulator's shard of node Self).
func (p *GossipPlan) Machine(shard *consensus.Dataset) (*gossip.Machine, error) {
	m, _, err := p.machine(shard)
	return m, err
}

// machine is Machine that also returns the journaled noise source the machine draws from
// (nil without noise), so that a restarted node can replay its releases.
func (p *GossipPlan) machine(shard *consensus.Dataset) (*gossip.Machine, *node.JournalNoise, error) {
	var jn *node.JournalNoise
	m, err := p.build(shard, func(n privacy.Noise) privacy.Noise { jn = node.NewJournalNoise(n); return jn })
	return m, jn, err
}

func (p *GossipPlan) build(shard *consensus.Dataset, wrap func(privacy.Noise) privacy.Noise) (*gossip.Machine, error) {
	if shard == nil || shard.Rows != p.Rows || shard.Cols != p.Cols {
		return nil, fmt.Errorf("testnet: gossip plan: the shard must have %d rows and %d columns", p.Rows, p.Cols)
	}
	loss, err := consensus.ParseLoss(p.Loss)
	if err != nil {
		return nil, err
	}
	algo, err := gossip.ParseAlgo(p.Algo)
	if err != nil {
		return nil, err
	}
	alpha, err := p.alpha()
	if err != nil {
		return nil, err
	}
	obj, err := gossip.NewObjective(shard, loss, p.RowWeight, p.RegOverN)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(p.Members))
	for i := range names {
		names[i] = strconv.Itoa(i)
	}
	cfg := gossip.Config{
		Node: p.Self, Nodes: len(p.Members), Neighbors: p.Neighbors, Algo: algo, Iters: p.Iters, Penalty: p.Penalty,
		Gamma: p.Gamma, Alpha: alpha, C1: p.C1, Init: append([]float64(nil), p.Init...), Run: p.Run, Names: names,
	}
	if !math.IsInf(alpha, 1) {
		cfg.Noise = wrap(NodeNoise(p.Seed, p.Self))
	}
	return gossip.New(cfg, obj)
}

// RunGossipPlanNode runs node p.Self of a plan on shard with data directory dir: it builds
// the machine, starts a host on the plan's listen address, connects to its neighbours
// (retrying until they listen, at most one barrier timeout), runs the node.GossipNode and
// writes GossipOutputFile (model, solve residuals, stale uses, frame counters) to dir.
// Started again on the same data directory after a crash, the node resumes from its
// journal (node.GossipJournalFile) at the iteration it had reached.
func RunGossipPlanNode(ctx context.Context, p *GossipPlan, shard *consensus.Dataset, dir string, noSync bool, log zerolog.Logger) (*GossipNodeOutput, error) {
	m, jn, err := p.machine(shard)
	if err != nil {
		return nil, err
	}
	barrier, maxWait, policy, err := p.waits()
	if err != nil {
		return nil, err
	}
	ids := make([]peer.ID, len(p.Members))
	for i, mb := range p.Members {
		if ids[i], err = peer.Decode(mb.ID); err != nil {
			return nil, fmt.Errorf("testnet: gossip plan: member %d: %w", i, err)
		}
	}
	self, err := node.DataDirPeerID(dir)
	if err != nil {
		return nil, err
	}
	if self != ids[p.Self] {
		return nil, fmt.Errorf("testnet: gossip plan: %s holds peer %s, the plan names %s for node %d", dir, self, ids[p.Self], p.Self)
	}
	gn, err := node.NewGossipNode(ctx, node.GossipConfig{
		Run: p.Run, DataDir: dir, NoSync: noSync, Members: ids, Self: p.Self, Neighbors: p.Neighbors, Machine: m,
		Iters: p.Iters, Listen: p.Members[p.Self].Addrs[:1], Barrier: barrier, MaxWait: maxWait, OnMissing: policy,
		Logger: log, Noise: jn, PauseAt: p.PauseAt,
	})
	if err != nil {
		return nil, err
	}
	defer gn.Close()
	for _, j := range p.Neighbors {
		var addrs []ma.Multiaddr
		for _, s := range p.Members[j].Addrs {
			a, err := ma.NewMultiaddr(s)
			if err != nil {
				return nil, fmt.Errorf("testnet: gossip plan: member %d address %q: %w", j, s, err)
			}
			addrs = append(addrs, a)
		}
		gn.Host.Peerstore().AddAddrs(ids[j], addrs, time.Hour)
	}
	if err := connectNeighbors(ctx, gn, ids, p.Neighbors, barrier, log); err != nil {
		return nil, err
	}
	start := time.Now()
	r, err := gn.Run(ctx)
	if err != nil && ctx.Err() != nil {
		// Stopped: leave the state reached for the launcher's partial report.
		out := &GossipNodeOutput{Run: p.Run, Self: p.Self, Peer: self.String(), Iter: m.Iter(), Model: m.Model(),
			Stale: []node.StaleUse{}, WallSeconds: time.Since(start).Seconds(), Interrupted: true}
		out.MaxResidual, out.InexactSolves = m.MaxResidual()
		if werr := writeGossipOutput(dir, out); werr != nil {
			return nil, werr
		}
		return nil, err
	}
	if err != nil {
		return nil, err
	}
	out := &GossipNodeOutput{
		Run: p.Run, Self: p.Self, Peer: self.String(), Iter: r.Iter, Model: r.Model, Stale: r.Stale,
		Rejected: r.Rejected, Ignored: r.Ignored, WallSeconds: r.Wall.Seconds(), Ledger: r.Ledger,
	}
	out.MaxResidual, out.InexactSolves = m.MaxResidual()
	if out.Stale == nil {
		out.Stale = []node.StaleUse{}
	}
	if err := writeGossipOutput(dir, out); err != nil {
		return nil, err
	}
	return out, nil
}

// writeGossipOutput writes out as GossipOutputFile in dir (via a temporary file and a
// rename).
func writeGossipOutput(dir string, out *GossipNodeOutput) error {
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, GossipOutputFile+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, GossipOutputFile))
}

// connectNeighbors dials every neighbour until connected (node.ConnectNeighbors).
func connectNeighbors(ctx context.Context, gn *node.GossipNode, ids []peer.ID, nbrs []int, timeout time.Duration, log zerolog.Logger) error {
	return node.ConnectNeighbors(ctx, gn.Host, ids, nbrs, timeout, log)
}

// GossipProcsConfig configures a neighbour-exchange testnet of one `dpadmm node
// --gossip-plan` process per node on loopback.
type GossipProcsConfig struct {
	Options GossipOptions
	// Binary is the dpadmm executable; Env is added to the processes' environment.
	Binary string
	Env    []string
	Run    string // "" = "gprocs"
	// Dir receives node-<i>/ (data directory), node-<i>.csv (shard), node-<i>.plan.json,
	// node-<i>.log and node-<i>.out; "" uses a temporary directory, removed afterwards.
	Dir  string
	Sync bool
	// Barrier, MaxWait (0 = node defaults: 30 s and 10 x Barrier) and OnMissing: see
	// node.GossipConfig.
	Barrier   time.Duration
	MaxWait   time.Duration
	OnMissing node.MissingPolicy
	// KillAtIter, when > 0, is fault injection: node KillNode stops once its release of
	// iteration KillAtIter is durable and before it is sent, is killed with SIGKILL and
	// is started again on the same data directory, where it resumes from its journal.
	// The neighbours must wait for it (OnMissing wait, or a barrier and max wait longer
	// than the restart). KillAtIter must be below Iters.
	KillNode   int
	KillAtIter int
	Logger     zerolog.Logger
}

// RunGossipProcs starts one process per node with the machine NewGossipSim builds for it
// (shard as exact CSV, everything else in a GossipPlan, noise seeded as in the simulator),
// waits for every process to exit and returns the report RunGossip gives for the options,
// built from the processes' final models and durable ledgers, with a network section
// (mode "procs"). Without stale uses the model equals the simulator's bit for bit.
func RunGossipProcs(ctx context.Context, cfg GossipProcsConfig) (*GossipReport, error) {
	o := cfg.Options
	if o.Curve != nil {
		return nil, errors.New("testnet: gprocs: the curve is simulator-only")
	}
	if cfg.Binary == "" {
		return nil, errors.New("testnet: gprocs: no dpadmm binary")
	}
	if cfg.Run == "" {
		cfg.Run = "gprocs"
	}
	if len(cfg.Run) > node.MaxRunName {
		return nil, fmt.Errorf("testnet: gprocs: run name longer than %d bytes", node.MaxRunName)
	}
	barrier, maxWait := effectiveWaits(cfg.Barrier, cfg.MaxWait)
	if maxWait < barrier || barrier < 0 {
		return nil, fmt.Errorf("testnet: gprocs: max wait %v must be >= the barrier timeout %v > 0", maxWait, barrier)
	}
	sim, err := NewGossipSim(&o)
	if err != nil {
		return nil, err
	}
	n := len(sim.Machines)
	if cfg.KillAtIter < 0 || cfg.KillAtIter >= max(o.Iters, 1) || (cfg.KillAtIter > 0 && (cfg.KillNode < 0 || cfg.KillNode >= n)) {
		return nil, fmt.Errorf("testnet: gprocs: kill at iteration %d of node %d: want 1 <= iteration < %d and 0 <= node < %d", cfg.KillAtIter, cfg.KillNode, o.Iters, n)
	}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "dpadmm-gprocs-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("testnet: gprocs: %w", err)
	}
	ports, err := freePorts(n)
	if err != nil {
		return nil, err
	}
	dirs := make([]string, n)
	members := make([]node.StaticMember, n)
	for i := range dirs {
		dirs[i] = filepath.Join(dir, fmt.Sprintf("node-%d", i))
		if _, err := os.Stat(filepath.Join(dirs[i], node.LedgerFile)); err == nil {
			return nil, fmt.Errorf("testnet: gprocs: %s already holds a ledger (use an empty --dir per run)", dirs[i])
		}
		id, err := node.DataDirPeerID(dirs[i])
		if err != nil {
			return nil, err
		}
		members[i] = node.StaticMember{ID: id.String(), Addrs: []string{fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", ports[i])}}
	}
	logs := make([]string, n)
	args := make([][]string, n)
	var restartArgs []string
	for i := 0; i < n; i++ {
		c := sim.Configs[i]
		plan := GossipPlan{
			Run: cfg.Run, Self: i, Members: members, Neighbors: c.Neighbors, Algo: c.Algo.String(), Iters: c.Iters,
			Penalty: c.Penalty, Gamma: c.Gamma, Alpha: strconv.FormatFloat(c.Alpha, 'g', -1, 64), C1: c.C1,
			Loss: sim.Loss.String(), RowWeight: sim.RowWeight, RegOverN: sim.RegOverN, Init: c.Init, Seed: o.Seed,
			Rows: sim.Shards[i].Rows, Cols: sim.Shards[i].Cols, Barrier: barrier.String(), MaxWait: maxWait.String(),
			OnMissing: cfg.OnMissing.String(),
		}
		b, err := json.MarshalIndent(plan, "", "  ")
		if err != nil {
			return nil, err
		}
		planPath := filepath.Join(dir, fmt.Sprintf("node-%d.plan.json", i))
		if err := os.WriteFile(planPath, append(b, '\n'), 0o644); err != nil {
			return nil, err
		}
		restartPlan := ""
		if cfg.KillAtIter > 0 && i == cfg.KillNode {
			// The first process pauses at the release; the restarted one runs on.
			restartPlan = filepath.Join(dir, fmt.Sprintf("node-%d.restart.plan.json", i))
			if err := os.WriteFile(restartPlan, append(b, '\n'), 0o644); err != nil {
				return nil, err
			}
			plan.PauseAt = cfg.KillAtIter
			pb, _ := json.MarshalIndent(plan, "", "  ")
			if err := os.WriteFile(planPath, append(pb, '\n'), 0o644); err != nil {
				return nil, err
			}
		}
		csv := filepath.Join(dir, fmt.Sprintf("node-%d.csv", i))
		if err := writeShardCSV(csv, sim.Shards[i]); err != nil {
			return nil, err
		}
		logs[i] = filepath.Join(dir, fmt.Sprintf("node-%d.log", i))
		a := []string{"node", "--gossip-plan", planPath, "--insecure-testnet", "--data", csv, "--datadir", dirs[i],
			"--log-format", "json", "--log-level", "warn"}
		if !cfg.Sync {
			a = append(a, "--no-fsync")
		}
		args[i] = a
		if restartPlan != "" {
			restartArgs = append([]string(nil), a...)
			restartArgs[slices.Index(a, "--gossip-plan")+1] = restartPlan
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	procs := make([]*proc, n)
	defer killAll(procs) // on any early return: no process outlives the launcher
	pc := ProcsConfig{Binary: cfg.Binary, Env: cfg.Env}
	start := time.Now()
	for i := range procs {
		if procs[i], err = startProc(ctx, pc, args[i], dir, i); err != nil {
			return nil, err
		}
	}
	restarts := 0
	if cfg.KillAtIter > 0 {
		k := cfg.KillNode
		if err := waitLedger(ctx, procs[k], dirs[k], cfg.KillAtIter+1); err != nil {
			if ctx.Err() != nil {
				return interruptedGossipProcs(&o, sim, procs, dirs, cfg, start)
			}
			return nil, withLogs(fmt.Errorf("testnet: gprocs: node %d: %w", k, err), logs[k:k+1])
		}
		procs[k].cmd.Process.Kill() // SIGKILL: no handler runs
		<-procs[k].done
		cfg.Logger.Warn().Int("node", k).Int("iter", cfg.KillAtIter).Msg("node killed after its release became durable; restarting it on the same data directory")
		if procs[k], err = startProc(ctx, pc, restartArgs, dir, k); err != nil {
			return nil, err
		}
		restarts++
	}
	stopProgress := func() {}
	if o.Progress != nil {
		stopProgress = pollEvery(ctx, time.Second, func() { o.Progress(ledgerIters(dirs), o.Iters) })
	}
	for i, p := range procs {
		select {
		case <-p.done:
		case <-ctx.Done():
		}
		if ctx.Err() != nil && !allExitedOK(procs) {
			stopProgress()
			return interruptedGossipProcs(&o, sim, procs, dirs, cfg, start)
		}
		if p.err != nil {
			stopProgress()
			return nil, withLogs(fmt.Errorf("testnet: gprocs: node %d: %v", i, p.err), logs[i:i+1])
		}
	}
	stopProgress()
	wall := time.Since(start)

	models := make([][]float64, n)
	inexact := make([]bool, n)
	ledgers := make([][]privacy.Entry, n)
	stale := make([][]node.StaleUse, n)
	rejected, ignored := make([]int, n), make([]int, n)
	for i, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, GossipOutputFile))
		if err != nil {
			return nil, fmt.Errorf("testnet: gprocs: node %d: %w", i, err)
		}
		var out GossipNodeOutput
		if err := json.Unmarshal(b, &out); err != nil {
			return nil, fmt.Errorf("testnet: gprocs: node %d: %s: %w", i, GossipOutputFile, err)
		}
		if out.Run != cfg.Run || out.Self != i || out.Peer != members[i].ID || out.Iter != o.Iters {
			return nil, fmt.Errorf("testnet: gprocs: node %d: %s of run %q node %d peer %s at iteration %d",
				i, GossipOutputFile, out.Run, out.Self, out.Peer, out.Iter)
		}
		models[i], inexact[i], stale[i] = out.Model, out.InexactSolves > 0, out.Stale
		rejected[i], ignored[i] = out.Rejected, out.Ignored
		lb, err := os.ReadFile(filepath.Join(d, node.LedgerFile))
		if err != nil {
			return nil, fmt.Errorf("testnet: gprocs: node %d: %w", i, err)
		}
		if ledgers[i], err = privacy.ParseLedger(bytes.NewReader(lb)); err != nil {
			return nil, fmt.Errorf("testnet: gprocs: node %d: ledger: %w", i, err)
		}
		if len(ledgers[i]) != o.Iters+1 {
			return nil, fmt.Errorf("testnet: gprocs: node %d: %d ledger entries, want %d (one per release)", i, len(ledgers[i]), o.Iters+1)
		}
	}
	nw := GossipNetworkReport{
		Mode: "procs", OnMissing: cfg.OnMissing.String(), BarrierSeconds: barrier.Seconds(),
		MaxWaitSeconds: maxWait.Seconds(), Dir: cfg.Dir, Restarts: restarts,
	}
	return gossipNetReport(&o, sim, models, inexact, ledgers, stale, rejected, ignored, wall, nw)
}

// interruptedGossipProcs waits for the stopped processes (startProc sends them SIGTERM
// when the launcher's context ends; each writes the state it reached) and builds the
// partial report from their outputs and ledgers. A node without an output (killed, or
// stopped before its run began) contributes its initial vector f_i(0).
func interruptedGossipProcs(o *GossipOptions, sim *GossipSim, procs []*proc, dirs []string, cfg GossipProcsConfig, start time.Time) (*GossipReport, error) {
	for _, p := range procs {
		if p != nil {
			<-p.done
		}
	}
	wall := time.Since(start)
	n := len(dirs)
	models := make([][]float64, n)
	inexact := make([]bool, n)
	ledgers := make([][]privacy.Entry, n)
	stale := make([][]node.StaleUse, n)
	for i, d := range dirs {
		models[i] = sim.Configs[i].Init
		var out GossipNodeOutput
		if b, err := os.ReadFile(filepath.Join(d, GossipOutputFile)); err == nil && json.Unmarshal(b, &out) == nil && len(out.Model) == len(models[i]) {
			models[i], inexact[i], stale[i] = out.Model, out.InexactSolves > 0, out.Stale
		}
		es, err := readLedgerFile(d)
		if err != nil {
			return nil, fmt.Errorf("testnet: gprocs: interrupted: node %d: ledger: %w", i, err)
		}
		if es == nil {
			es = []privacy.Entry{}
		}
		ledgers[i] = es
	}
	barrier, maxWait := effectiveWaits(cfg.Barrier, cfg.MaxWait)
	nw := GossipNetworkReport{
		Mode: "procs", OnMissing: cfg.OnMissing.String(), BarrierSeconds: barrier.Seconds(),
		MaxWaitSeconds: maxWait.Seconds(), Dir: cfg.Dir,
	}
	rep, err := gossipNetReport(o, sim, models, inexact, ledgers, stale, make([]int, n), make([]int, n), wall, nw)
	if err != nil {
		return nil, err
	}
	rep.markInterrupted(ledgerIters(dirs))
	return rep, nil
}

// waitLedger waits until the ledger in dir holds at least entries entries while p is still
// running (a process that exits first is an error).
func waitLedger(ctx context.Context, p *proc, dir string, entries int) error {
	for {
		if b, err := os.ReadFile(filepath.Join(dir, node.LedgerFile)); err == nil && bytes.Count(b, []byte{'\n'}) >= entries {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("exited before its ledger held %d entries: %v", entries, p.err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}
