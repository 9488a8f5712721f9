package testnet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/dpadmm/dpadmm/node"
	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/node/wire"
	"github.com/dpadmm/dpadmm/testnet/sim"
)

// GossipProcsConfig configures a neighbour-exchange testnet of one 'dpadmm node --algo
// radmm|... --static FILE' process per node on loopback.
type GossipProcsConfig struct {
	Options sim.GossipOptions
	// Binary is the dpadmm executable; Env is added to the processes' environment.
	Binary string
	Env    []string
	Run    string // "" = "gprocs"
	// Dir receives node-<i>/ (data directory), node-<i>.csv (shard), node-<i>.log,
	// node-<i>.out, static.json (the membership) and, for a penalty table, eta.csv; ""
	// uses a temporary directory, removed afterwards.
	Dir  string
	Sync bool
	// Barrier, MaxWait (0 = node defaults: 30 s and 10 x Barrier) and OnMissing: see
	// node.RADMMParams.
	Barrier   time.Duration
	MaxWait   time.Duration
	OnMissing node.MissingPolicy
	// KillAtIter, when > 0, is fault injection: node KillNode stops once its release of
	// iteration KillAtIter is durable and before it is sent (dpadmm node --pause-at-iter),
	// is killed with SIGKILL and is started again on the same data directory, where it
	// resumes from its journal. The neighbours must wait for it (OnMissing wait, or a
	// barrier and max wait longer than the restart). KillAtIter must be below Iters.
	KillNode   int
	KillAtIter int
	Logger     zerolog.Logger
}

// GossipPolicyArgs returns the 'dpadmm node' flags of a neighbour-exchange node's own
// policy, which is not part of the run's configuration (the barrier timeout, the longest
// wait and the policy for a missing neighbour); the run's parameters go in the run
// configuration file (--run-config).
func GossipPolicyArgs(p node.RADMMParams) []string {
	var a []string
	if p.Barrier > 0 {
		a = append(a, "--barrier-timeout", p.Barrier.String())
	}
	if p.MaxWait > 0 {
		a = append(a, "--max-wait", p.MaxWait.String())
	}
	return append(a, "--on-missing", p.OnMissing.String())
}

// RunGossipProcs starts one 'dpadmm node --algo ... --static' process per node: the
// production node (node.New and Node.RunRADMM) with a static membership in node-index
// order (static.json, whose config_hash every node checks against its own
// configuration), the simulator's shard as exact CSV (--scale none), the run's
// run configuration as a file (--run-config), its own policy flags (GossipPolicyArgs) and --seed (f_i(0) and the noise
// as in the simulator; not secure). It waits for every process to exit and returns the
// report RunGossip gives for the options, built from the nodes' model.json files and
// durable ledgers, with a network section (mode "procs"). Without stale uses the model
// equals the simulator's bit for bit.
func RunGossipProcs(ctx context.Context, cfg GossipProcsConfig) (*sim.GossipReport, error) {
	o := cfg.Options
	gs, p, barrier, maxWait, err := gprocsSetup(&cfg, &o)
	if err != nil {
		return nil, err
	}
	n := len(gs.Machines)
	dir, cleanup, err := workDir(cfg.Dir, "dpadmm-gprocs-", "gprocs")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	plan, err := gprocsFiles(&cfg, &o, gs, p, dir)
	if err != nil {
		return nil, err
	}
	dirs, logs, args := plan.dirs, plan.logs, plan.args

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	procs := make([]*proc, n)
	defer killAll(procs) // on any early return: no process outlives the launcher
	pc := ProcsConfig{Binary: cfg.Binary, Env: cfg.Env}
	start := time.Now()
	for i := range procs {
		a := args[i]
		if cfg.KillAtIter > 0 && i == cfg.KillNode {
			// The first process pauses at the release; the restarted one runs on.
			a = append(append([]string(nil), a...), "--pause-at-iter", strconv.Itoa(cfg.KillAtIter))
		}
		if procs[i], err = startProc(ctx, pc, a, dir, i); err != nil {
			return nil, err
		}
	}
	restarts := 0
	if cfg.KillAtIter > 0 {
		k := cfg.KillNode
		if err := waitLedger(ctx, procs[k], dirs[k], cfg.KillAtIter+1); err != nil {
			if ctx.Err() != nil {
				return interruptedGossipProcs(&o, gs, procs, dirs, cfg, start)
			}
			return nil, withLogs(fmt.Errorf("testnet: gprocs: node %d: %w", k, err), logs[k:k+1])
		}
		procs[k].cmd.Process.Kill() // SIGKILL: no handler runs
		<-procs[k].done
		cfg.Logger.Warn().Int("node", k).Int("iter", cfg.KillAtIter).Msg("node killed after its release became durable; restarting it on the same data directory")
		if procs[k], err = startProc(ctx, pc, args[k], dir, k); err != nil {
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
			return interruptedGossipProcs(&o, gs, procs, dirs, cfg, start)
		}
		if p.err != nil {
			stopProgress()
			return nil, withLogs(fmt.Errorf("testnet: gprocs: node %d: %v", i, p.err), logs[i:i+1])
		}
	}
	stopProgress()
	wall := time.Since(start)
	left, err := readGossipLefts(&cfg, &o, gs, plan)
	if err != nil {
		return nil, err
	}
	nw := sim.GossipNetworkReport{
		Mode: "procs", OnMissing: cfg.OnMissing.String(), BarrierSeconds: barrier.Seconds(),
		MaxWaitSeconds: maxWait.Seconds(), Dir: cfg.Dir, Restarts: restarts,
	}
	return gossipLeftReport(&o, gs, left, wall, nw)
}

// gprocsSetup validates cfg and o (filling their defaults) and builds the run's setup: the
// simulator's machines (data, graph, f_i(0)), the node parameters and the waits.
func gprocsSetup(cfg *GossipProcsConfig, o *sim.GossipOptions) (*sim.GossipSim, node.RADMMParams, time.Duration, time.Duration, error) {
	var p node.RADMMParams
	if o.Curve != nil {
		return nil, p, 0, 0, errors.New("testnet: gprocs: the curve is simulator-only")
	}
	if cfg.Binary == "" {
		return nil, p, 0, 0, errors.New("testnet: gprocs: no dpadmm binary")
	}
	if cfg.Run == "" {
		cfg.Run = "gprocs"
	}
	if len(cfg.Run) > wire.MaxRunName {
		return nil, p, 0, 0, fmt.Errorf("testnet: gprocs: run name longer than %d bytes", wire.MaxRunName)
	}
	barrier, maxWait := effectiveWaits(cfg.Barrier, cfg.MaxWait)
	if maxWait < barrier || barrier < 0 {
		return nil, p, 0, 0, fmt.Errorf("testnet: gprocs: max wait %v must be >= the barrier timeout %v > 0", maxWait, barrier)
	}
	gs, err := sim.NewGossipSim(o)
	if err != nil {
		return nil, p, 0, 0, err
	}
	if err := checkNodeRows(gs); err != nil {
		return nil, p, 0, 0, err
	}
	n := len(gs.Machines)
	if cfg.KillAtIter < 0 || cfg.KillAtIter >= max(o.Iters, 1) || (cfg.KillAtIter > 0 && (cfg.KillNode < 0 || cfg.KillNode >= n)) {
		return nil, p, 0, 0, fmt.Errorf("testnet: gprocs: kill at iteration %d of node %d: want 1 <= iteration < %d and 0 <= node < %d", cfg.KillAtIter, cfg.KillNode, o.Iters, n)
	}
	if p, err = gossipNetParams(o, barrier, maxWait, cfg.OnMissing); err != nil {
		return nil, p, 0, 0, err
	}
	if p.EtaGrowth == 0 {
		p.EtaGrowth = 1 // the same constant schedule; the node's flag wants q >= 1
	}
	return gs, p, barrier, maxWait, nil
}

// gprocsPlan is what RunGossipProcs starts: the membership file's content and its
// configuration hash, and per node its data directory, log file and arguments.
type gprocsPlan struct {
	st         node.StaticFile
	hash       string
	dirs, logs []string
	args       [][]string
}

// gprocsFiles writes the shards, the membership file and the penalty table into dir and
// returns the plan of the processes.
func gprocsFiles(cfg *GossipProcsConfig, o *sim.GossipOptions, gs *sim.GossipSim, p node.RADMMParams, dir string) (*gprocsPlan, error) {
	n := len(gs.Machines)
	ports, err := freePorts(n)
	if err != nil {
		return nil, err
	}
	// Every node's configuration hashes alike (same dimension, problem and parameters); the
	// nodes get it as one file (--run-config), not as flags rebuilt one by one.
	runCfg := (&node.Config{
		Run: cfg.Run, Data: asShardFile(gs.Shards[0]), RADMM: &p,
		Training: node.Training{Problem: o.Problem},
	}).RunConfig()
	hash := runCfg.Hash()
	rcPath := filepath.Join(dir, "run-config.json")
	if err := node.WriteRunConfig(rcPath, runCfg); err != nil {
		return nil, err
	}
	pl := &gprocsPlan{st: node.StaticFile{Run: cfg.Run, TotalRows: o.Train.Rows, ConfigHash: hash}, hash: hash,
		dirs: make([]string, n), logs: make([]string, n), args: make([][]string, n)}
	for i := range pl.dirs {
		pl.dirs[i] = filepath.Join(dir, fmt.Sprintf("node-%d", i))
		if _, err := os.Stat(filepath.Join(pl.dirs[i], store.LedgerFile)); err == nil {
			return nil, fmt.Errorf("testnet: gprocs: %s already holds a ledger (use an empty --dir per run)", pl.dirs[i])
		}
		id, err := store.DataDirPeerID(pl.dirs[i])
		if err != nil {
			return nil, err
		}
		pl.st.Members = append(pl.st.Members, node.StaticMember{ID: id.String(), Addrs: []string{fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", ports[i])}})
	}
	b, _ := json.MarshalIndent(pl.st, "", "  ")
	staticPath := filepath.Join(dir, "static.json")
	if err := os.WriteFile(staticPath, append(b, '\n'), 0o644); err != nil {
		return nil, err
	}
	hyper := GossipPolicyArgs(p)
	pred, err := harnessPredictor(dir, sim.PredictorTemplate(o.Problem.Loss, o.Scaler, o.Train))
	if err != nil {
		return nil, fmt.Errorf("testnet: gprocs: %w", err)
	}
	hyper = append(hyper, pred...)
	for i := 0; i < n; i++ {
		csv := filepath.Join(dir, fmt.Sprintf("node-%d.csv", i))
		if err := writeShardCSV(csv, gs.Shards[i]); err != nil {
			return nil, err
		}
		pl.logs[i] = filepath.Join(dir, fmt.Sprintf("node-%d.log", i))
		a := []string{"node", "--insecure-testnet", "--run-config", rcPath, "--data", csv, "--scale", "none", "--intercept", "0", "--datadir", pl.dirs[i],
			"--static", staticPath, "--seed", strconv.FormatUint(o.Seed, 10), "--profile", "test",
			"--listen", pl.st.Members[i].Addrs[0], "--log-format", "json", "--log-level", "info"}
		a = append(a, classArgs(gs.Shards[i], o.Problem.Loss)...)
		a = append(a, hyper...)
		if !cfg.Sync {
			a = append(a, "--no-fsync")
		}
		pl.args[i] = a
	}
	return pl, nil
}

// readGossipLefts reads what every node left in its data directory (model.json, ledger,
// journal) and checks that it belongs to this run and completed it.
func readGossipLefts(cfg *GossipProcsConfig, o *sim.GossipOptions, gs *sim.GossipSim, pl *gprocsPlan) ([]gossipLeft, error) {
	left := make([]gossipLeft, len(pl.dirs))
	for i, d := range pl.dirs {
		m, err := readGossipModel(d)
		if err == nil && m == nil {
			err = fmt.Errorf("no %s", store.ModelFile)
		}
		if err != nil {
			return nil, fmt.Errorf("testnet: gprocs: node %d: %w", i, err)
		}
		if m.Run != cfg.Run || m.Index != i || m.Peer != pl.st.Members[i].ID || m.Iters != o.Iters || m.ConfigHash != pl.hash {
			return nil, fmt.Errorf("testnet: gprocs: node %d: %s of run %q index %d peer %s config %.12s at iteration %d",
				i, store.ModelFile, m.Run, m.Index, m.Peer, m.ConfigHash, m.Iters)
		}
		if left[i], err = readGossipLeft(d, cfg.Run, gs.Configs[i].Init, m); err != nil {
			return nil, fmt.Errorf("testnet: gprocs: node %d: %w", i, err)
		}
		if len(left[i].Ledger) != o.Iters+1 {
			return nil, fmt.Errorf("testnet: gprocs: node %d: %d ledger entries, want %d (one per release)", i, len(left[i].Ledger), o.Iters+1)
		}
	}
	return left, nil
}

// readGossipModel reads model.json of a neighbour-exchange node's data directory; nil
// when there is none (the node did not complete its run).
func readGossipModel(dir string) (*node.RADMMModel, error) {
	b, err := os.ReadFile(filepath.Join(dir, store.ModelFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var m node.RADMMModel
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", store.ModelFile, err)
	}
	return &m, nil
}

// interruptedGossipProcs waits for the stopped processes (startProc sends them SIGTERM
// when the launcher's context ends) and builds the partial report from what they left: a
// node that completed its run contributes its model.json, any other node its last durable
// release (journal), or f_i(0) when it released nothing.
func interruptedGossipProcs(o *sim.GossipOptions, gs *sim.GossipSim, procs []*proc, dirs []string, cfg GossipProcsConfig, start time.Time) (*sim.GossipReport, error) {
	for _, p := range procs {
		if p != nil {
			<-p.done
		}
	}
	wall := time.Since(start)
	left := make([]gossipLeft, len(dirs))
	for i, d := range dirs {
		m, err := readGossipModel(d)
		if err != nil || (m != nil && (m.Run != cfg.Run || m.Index != i)) {
			m = nil // not a model.json of this run: use the journal
		}
		if left[i], err = readGossipLeft(d, cfg.Run, gs.Configs[i].Init, m); err != nil {
			return nil, fmt.Errorf("testnet: gprocs: interrupted: node %d: %w", i, err)
		}
	}
	barrier, maxWait := effectiveWaits(cfg.Barrier, cfg.MaxWait)
	nw := sim.GossipNetworkReport{
		Mode: "procs", OnMissing: cfg.OnMissing.String(), BarrierSeconds: barrier.Seconds(),
		MaxWaitSeconds: maxWait.Seconds(), Dir: cfg.Dir,
	}
	rep, err := gossipLeftReport(o, gs, left, wall, nw)
	if err != nil {
		return nil, err
	}
	rep.MarkInterrupted(ledgerIters(dirs))
	return rep, nil
}

// waitLedger waits until the ledger in dir holds at least entries entries while p is still
// running (a process that exits first is an error).
func waitLedger(ctx context.Context, p *proc, dir string, entries int) error {
	for {
		if b, err := os.ReadFile(filepath.Join(dir, store.LedgerFile)); err == nil && bytes.Count(b, []byte{'\n'}) >= entries {
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
