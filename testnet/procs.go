package testnet

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/node"
	"github.com/dpadmm/dpadmm/node/drive"
	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/testnet/sim"
	"github.com/dpadmm/dpadmm/walk"
)

// ProcsConfig configures a testnet of one `dpadmm node` process per shard on loopback.
// Randomness, shards, weights and the initial holder are those of NewSim for the same
// seed, so without kills the final model is bit-identical to the simulator's.
type ProcsConfig struct {
	// Binary is the dpadmm executable; Env is added to the processes' environment.
	Binary string
	Env    []string

	Shards []*consensus.Dataset
	// Predictor describes the run's models in raw units (sim.PredictorTemplate): the
	// nodes' model.json files carry it with their weights (node.Harness.Predictor); nil:
	// the predictor describes the prepared shards.
	Predictor  *consensus.ModelSpec
	Problem    consensus.Problem
	Gamma      float64
	Lambda     float64
	Clip       float64
	Sigma      float64
	Unit       privacy.Unit    // what the figures protect (node.Training.Unit)
	RowBound   float64         // the public row bound (node.Training.RowBound)
	Step       walk.StepParams // the local step (zero value: prox)
	MaxUpdates int
	Seed       uint64
	Run        string // "" = "procs"
	Hops       uint64
	Delta      float64 // 0 = 1e-5
	// Dir receives node-<i>/ (data directory), node-<i>.csv (shard), node-<i>.log
	// (stderr, JSON log lines), node-<i>.out (stdout) and static.json; "" uses a
	// temporary directory that is removed afterwards.
	Dir string
	// Sync makes ledger and checkpoint writes fsync (off by default: testnets).
	Sync bool
	// KillHolderAt, when > 0, kills the node that receives the token of this hop with
	// SIGKILL and restarts it with the same data directory (see RunProcs).
	KillHolderAt uint64
	// KillPhase is when the holder is killed: "received" (default: the token is stored
	// and acked, not stepped; the restarted node steps it) or "custody" (stepped, ledger
	// entry and outgoing token durable, not sent; the restarted node resends it).
	KillPhase string
	// AckTimeout is the nodes' hand-off ack timeout; 0 = 10 s (long enough that a busy
	// machine does not redirect the token, which would change the path).
	AckTimeout time.Duration
	// Withhold is fault injection: the nodes with these indices run with --withhold-acks
	// (see MemConfig.Withhold). None of them may be the initial holder.
	Withhold []int
	// Logger receives the launcher's own log lines.
	Logger zerolog.Logger
	// Progress, when set, is called about once a second with the ledger entries the nodes
	// report on their status endpoints and cfg.Hops.
	Progress func(entries, hops uint64)
}

// ProcsResult is the outcome of RunProcs.
type ProcsResult struct {
	Model   []float64 // final model (identical in every node's model.json; checked)
	Peers   []string  // peer IDs by node index
	Ledger  []int     // ledger entries per node
	Updates []int     // noisy updates per node (model.json, checked against the ledger)
	Models  []node.Model
	Path    *PathFromLedgers
	Kills   []sim.Kill
	Wall    time.Duration // from the first process start to the last exit
	Logs    []string      // stderr log file of each node (under Dir; gone if Dir was "")
	// Hops is the number of hops made: cfg.Hops, or, when Interrupted is set (ctx was
	// canceled before the end; the processes were sent SIGTERM, SIGKILL after a grace
	// period), the highest hop in their ledgers; Model is then the latest release found
	// (nil if none) and Models is empty (see MemResult).
	Interrupted bool
	Hops        uint64
}

// proc is one running `dpadmm node` process.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // Wait's result, valid after done
	mu   sync.Mutex
	addr string // status endpoint host:port
}

func (p *proc) statusAddr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addr
}

// RunProcs starts one `dpadmm node` process per shard on 127.0.0.1 with a static
// membership (node --static), every source of randomness seeded (node --seed), waits
// for all of them to exit and collects their model.json files and ledgers.
//
// Kill: every node is started with --pause-at-hop KillHolderAt: the node receiving the
// token of that hop stores and acks it, then stops and sets "paused" on its /status.
// The launcher learns who holds the token by polling every node's /status endpoint
// (--http 127.0.0.1:0; the bound address is read from the node's stdout), kills the
// paused node with SIGKILL, and restarts it with the same arguments minus the pause,
// on the same data directory and port. The restarted node finds the acked, unprocessed
// token in its inbox and goes on. Its next-hop and noise sources restart from their
// seeds, so the path after the kill differs from the simulator's; the ledgers must still
// cover every hop exactly once (LedgerPath).
func RunProcs(ctx context.Context, cfg ProcsConfig) (*ProcsResult, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	dir, cleanup, err := workDir(cfg.Dir, "dpadmm-procs-", "procs")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	res, dirs, args, err := cfg.prepare(dir)
	if err != nil {
		return nil, err
	}
	if done, err := cfg.runNodes(ctx, dir, res, dirs, args); done != nil || err != nil {
		return done, err
	}
	if err := cfg.collect(res, dirs); err != nil {
		return nil, err
	}
	res.Model = res.Models[0].Model
	return res, nil
}

// check validates cfg and fills its defaults.
func (cfg *ProcsConfig) check() error {
	n := len(cfg.Shards)
	switch {
	case n < 1:
		return errors.New("testnet: procs: no shards")
	case cfg.Hops < 1:
		return errors.New("testnet: procs: hops must be >= 1")
	case cfg.Binary == "":
		return errors.New("testnet: procs: no dpadmm binary")
	case cfg.KillHolderAt > cfg.Hops:
		return fmt.Errorf("testnet: procs: kill-holder-at %d beyond the %d hops", cfg.KillHolderAt, cfg.Hops)
	case cfg.KillHolderAt > 0 && n < 2:
		return errors.New("testnet: procs: killing the holder needs at least 2 nodes")
	case cfg.KillPhase != "" && cfg.KillPhase != "received" && cfg.KillPhase != "custody":
		return fmt.Errorf("testnet: procs: kill phase must be received or custody, got %q", cfg.KillPhase)
	}
	if cfg.KillPhase == "" {
		cfg.KillPhase = "received"
	}
	if cfg.KillPhase == "custody" && cfg.KillHolderAt == cfg.Hops {
		return fmt.Errorf("testnet: procs: the token of hop %d is the final one: it is released, never held in custody (kill in phase received)", cfg.Hops)
	}
	if cfg.Run == "" {
		cfg.Run = "procs"
	}
	if cfg.Delta == 0 {
		cfg.Delta = privacy.DefaultDelta
	}
	if cfg.AckTimeout <= 0 {
		cfg.AckTimeout = 10 * time.Second
	}
	return nil
}

// prepare writes the static membership file and the nodes' shards into dir and returns
// the result to fill, the nodes' data directories and their command lines.
func (cfg *ProcsConfig) prepare(dir string) (*ProcsResult, []string, [][]string, error) {
	n := len(cfg.Shards)
	total := 0
	for i, s := range cfg.Shards {
		if s.Rows < 1 {
			return nil, nil, nil, fmt.Errorf("testnet: procs: node %d has no rows", i)
		}
		total += s.Rows
	}
	ports, err := freePorts(n)
	if err != nil {
		return nil, nil, nil, err
	}
	st := node.StaticFile{Run: cfg.Run, TotalRows: total, Holder: drive.SeededHolder(cfg.Seed, n)}
	withhold := make([]bool, n)
	for _, w := range cfg.Withhold {
		switch {
		case w < 0 || w >= n:
			return nil, nil, nil, fmt.Errorf("testnet: procs: withholding node %d outside [0, %d)", w, n)
		case w == st.Holder:
			return nil, nil, nil, fmt.Errorf("testnet: procs: node %d is the initial holder and cannot withhold acks", w)
		}
		withhold[w] = true
	}
	res := &ProcsResult{Peers: make([]string, n), Ledger: make([]int, n), Updates: make([]int, n), Logs: make([]string, n), Hops: cfg.Hops}
	// The run's parameters go to every node as one file, the canonical configuration whose
	// hash every member checks (node.Config.RunConfig), not as flags rebuilt one by one: a
	// parameter the launcher forgot could not then silently take a node's default.
	var runCfg node.Config
	runCfg.Run, runCfg.Problem, runCfg.Gamma, runCfg.Lambda, runCfg.Clip = cfg.Run, cfg.Problem, cfg.Gamma, cfg.Lambda, cfg.Clip
	runCfg.Sigma, runCfg.MaxUpdates, runCfg.Hops, runCfg.Step, runCfg.Data = cfg.Sigma, cfg.MaxUpdates, cfg.Hops, cfg.Step, asShardFile(cfg.Shards[0])
	runCfg.Unit, runCfg.RowBound = cfg.Unit, cfg.RowBound
	rcPath := filepath.Join(dir, "run-config.json")
	if err := node.WriteRunConfig(rcPath, runCfg.RunConfig()); err != nil {
		return nil, nil, nil, fmt.Errorf("testnet: procs: %w", err)
	}
	st.ConfigHash = runCfg.RunConfig().Hash()
	pred, err := harnessPredictor(dir, cfg.Predictor)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("testnet: procs: %w", err)
	}
	dirs := make([]string, n)
	args := make([][]string, n)
	for i, sh := range cfg.Shards {
		dirs[i] = filepath.Join(dir, fmt.Sprintf("node-%d", i))
		if _, err := os.Stat(filepath.Join(dirs[i], store.LedgerFile)); err == nil {
			return nil, nil, nil, fmt.Errorf("testnet: procs: %s already holds a ledger (use an empty --dir per run)", dirs[i])
		}
		id, err := store.DataDirPeerID(dirs[i])
		if err != nil {
			return nil, nil, nil, err
		}
		res.Peers[i] = id.String()
		st.Members = append(st.Members, node.StaticMember{ID: id.String(), Addrs: []string{fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", ports[i])}})
		csv := filepath.Join(dir, fmt.Sprintf("node-%d.csv", i))
		if err := writeShardCSV(csv, sh); err != nil {
			return nil, nil, nil, err
		}
		res.Logs[i] = filepath.Join(dir, fmt.Sprintf("node-%d.log", i))
		f := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
		a := []string{"node", "--insecure-testnet", "--run-config", rcPath, "--data", csv, "--scale", "none", "--intercept", "0", "--datadir", dirs[i],
			"--static", filepath.Join(dir, "static.json"), "--seed", strconv.FormatUint(cfg.Seed, 10), "--profile", "test",
			"--listen", st.Members[i].Addrs[0], "--http", "127.0.0.1:0",
			"--log-format", "json", "--log-level", "info", "--ack-timeout", cfg.AckTimeout.String(), "--delta", f(cfg.Delta),
			"--max-epsilon", "0"} // the testnet warns about its figures itself
		a = append(a, classArgs(sh, cfg.Problem.Loss)...)
		a = append(a, pred...)
		if !cfg.Sync {
			a = append(a, "--no-fsync")
		}
		if withhold[i] {
			a = append(a, "--withhold-acks")
		}
		args[i] = a
	}
	b, _ := json.MarshalIndent(st, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "static.json"), b, 0o644); err != nil {
		return nil, nil, nil, err
	}
	return res, dirs, args, nil
}

// runNodes starts the nodes, kills and restarts the holder (KillHolderAt) and waits for
// every node to exit. It returns a non-nil result only when the run was interrupted.
func (cfg *ProcsConfig) runNodes(ctx context.Context, dir string, res *ProcsResult, dirs []string, args [][]string) (*ProcsResult, error) {
	n := len(args)
	var err error
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	procs := make([]*proc, n)
	defer killAll(procs) // on any early return: no process outlives the launcher
	start := time.Now()
	for i := range procs {
		a := args[i]
		if cfg.KillHolderAt > 0 {
			a = append(append([]string(nil), a...), "--pause-at-hop", strconv.FormatUint(cfg.KillHolderAt, 10), "--pause-phase", cfg.KillPhase, "--debug-status")
		}
		if procs[i], err = startProc(ctx, *cfg, a, dir, i); err != nil {
			return nil, err
		}
	}
	if cfg.KillHolderAt > 0 {
		k, killed, err := killHolder(ctx, *cfg, procs, res.Peers)
		if err != nil && ctx.Err() != nil {
			return interruptedProcs(res, procs, dirs, start)
		}
		if err != nil {
			return nil, withLogs(err, res.Logs)
		}
		if procs[k.Node], err = startProc(ctx, *cfg, args[k.Node], dir, k.Node); err != nil {
			return nil, err
		}
		k.DownSeconds = time.Since(killed).Seconds()
		res.Kills = append(res.Kills, k)
		cfg.Logger.Info().Int("node", k.Node).Uint64("hop", k.Hop).Msg("holder killed and restarted")
	}
	stopProgress := func() {}
	if cfg.Progress != nil {
		client := &http.Client{Timeout: time.Second}
		stopProgress = pollEvery(ctx, time.Second, func() {
			total := 0
			for _, p := range procs {
				if addr := p.statusAddr(); addr != "" {
					if st, err := getStatus(ctx, client, addr); err == nil {
						total += st.Ledger
					}
				}
			}
			cfg.Progress(uint64(total), cfg.Hops)
		})
	}
	for i, p := range procs {
		select {
		case <-p.done:
		case <-ctx.Done():
		}
		if ctx.Err() != nil && !allExitedOK(procs) {
			stopProgress()
			return interruptedProcs(res, procs, dirs, start)
		}
		if p.err != nil {
			stopProgress()
			return nil, withLogs(fmt.Errorf("testnet: procs: node %d: %v", i, p.err), res.Logs[i:i+1])
		}
	}
	stopProgress()
	res.Wall = time.Since(start)

	return nil, nil
}

// collect reads the nodes' models and ledgers into res and rebuilds the path.
func (cfg *ProcsConfig) collect(res *ProcsResult, dirs []string) error {
	n := len(dirs)
	var err error
	ledgers := make([][]privacy.Entry, n)
	for i, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, store.ModelFile))
		if err != nil {
			return fmt.Errorf("testnet: procs: node %d: %w", i, err)
		}
		var m node.Model
		if err := json.Unmarshal(b, &m); err != nil {
			return fmt.Errorf("testnet: procs: node %d: %s: %w", i, store.ModelFile, err)
		}
		if m.Peer != res.Peers[i] || m.Hops != cfg.Hops {
			return fmt.Errorf("testnet: procs: node %d: model.json of peer %s at hop %d", i, m.Peer, m.Hops)
		}
		res.Models = append(res.Models, m)
		res.Updates[i] = m.Privacy.Updates
		if !sim.SameBits(m.Model, res.Models[0].Model) {
			return fmt.Errorf("testnet: procs: node %d ended with a different model", i)
		}
		lb, err := os.ReadFile(filepath.Join(d, store.LedgerFile))
		if err != nil {
			return fmt.Errorf("testnet: procs: node %d: %w", i, err)
		}
		if ledgers[i], _, _, err = privacy.ReadLedgerChain(lb); err != nil {
			return fmt.Errorf("testnet: procs: node %d: ledger: %w", i, err)
		}
		res.Ledger[i] = len(ledgers[i])
	}
	if res.Path, err = LedgerPath(ledgers, res.Peers, cfg.Hops, res.Models[0].ReleasedBy); err != nil {
		return fmt.Errorf("testnet: procs: %w", err)
	}
	for i, u := range res.Path.Updates {
		if u != res.Updates[i] {
			return fmt.Errorf("testnet: procs: node %d: %d noisy updates in its ledger, %d in model.json", i, u, res.Updates[i])
		}
	}
	return nil
}

// startProc starts node i; its stderr (the JSON log) is appended to node-<i>.log and its
// stdout to node-<i>.out, scanned for the status endpoint's address.
func startProc(ctx context.Context, cfg ProcsConfig, args []string, dir string, i int) (*proc, error) {
	logf, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("node-%d.log", i)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	outf, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("node-%d.out", i)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		logf.Close()
		return nil, err
	}
	cmd := exec.Command(cfg.Binary, args...)
	cmd.Env = append(os.Environ(), cfg.Env...)
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		outf.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		outf.Close()
		return nil, fmt.Errorf("testnet: procs: start node %d: %w", i, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(outf, line)
			if _, rest, ok := strings.Cut(line, "status on http://"); ok {
				if a, _, ok := strings.Cut(rest, "/"); ok {
					p.mu.Lock()
					p.addr = a
					p.mu.Unlock()
				}
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	go func() {
		<-scanned
		p.err = cmd.Wait()
		logf.Close()
		outf.Close()
		close(p.done)
	}()
	go func() { // the launcher's context bounds the process
		select {
		case <-ctx.Done():
			stopProc(p)
		case <-p.done:
		}
	}()
	return p, nil
}

// stopProc asks a node process to stop (SIGTERM: it ends its run with its data directory
// consistent) and kills it if it has not exited after stopGrace.
func stopProc(p *proc) {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopGrace):
		p.cmd.Process.Kill()
	}
}

// allExitedOK waits for every started process to exit and reports whether all exited
// with status 0 (a run complete although the launcher's context ended meanwhile).
func allExitedOK(procs []*proc) bool {
	ok := true
	for _, p := range procs {
		if p != nil {
			<-p.done
			ok = ok && p.err == nil
		}
	}
	return ok
}

// interruptedProcs waits for the stopped processes (startProc sends them SIGTERM when
// the launcher's context ends) and reads the state the walk reached from their data
// directories.
func interruptedProcs(res *ProcsResult, procs []*proc, dirs []string, start time.Time) (*ProcsResult, error) {
	for _, p := range procs {
		if p != nil {
			<-p.done
		}
	}
	res.Wall = time.Since(start)
	pw, err := readPartialWalk(dirs, res.Peers)
	if err != nil {
		return nil, fmt.Errorf("testnet: procs: interrupted: %w", err)
	}
	res.Interrupted, res.Hops, res.Model, res.Ledger = true, pw.hops, pw.z, pw.entries
	res.Path, res.Updates = pw.path, pw.path.Updates
	return res, nil
}

// killHolder polls every node's /status until one reports that it paused at
// cfg.KillHolderAt, kills it with SIGKILL and waits for it to exit.
func killHolder(ctx context.Context, cfg ProcsConfig, procs []*proc, peers []string) (sim.Kill, time.Time, error) {
	client := &http.Client{Timeout: 2 * time.Second}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		for i, p := range procs {
			select {
			case <-p.done:
				return sim.Kill{}, time.Time{}, fmt.Errorf("testnet: procs: node %d exited (%v) before any node held the token of hop %d", i, p.err, cfg.KillHolderAt)
			default:
			}
			addr := p.statusAddr()
			if addr == "" {
				continue
			}
			st, err := getStatus(ctx, client, addr)
			if err != nil || !st.Paused {
				continue
			}
			if st.Hop != cfg.KillHolderAt || !st.Holding || st.Peer != peers[i] {
				return sim.Kill{}, time.Time{}, fmt.Errorf("testnet: procs: node %d paused with status %+v, want hop %d", i, st, cfg.KillHolderAt)
			}
			// Kill only once no other node holds the token: the sender has read the
			// paused holder's ack. A kill with the ack in flight resets the connection,
			// loses the ack and makes the sender redirect a duplicate of the token, which
			// the custody layer fences correctly but which is not the fault this option
			// injects (and the run would no longer equal the simulator's).
			if err := waitAcked(ctx, client, procs, i); err != nil {
				return sim.Kill{}, time.Time{}, err
			}
			killed := time.Now()
			if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				return sim.Kill{}, time.Time{}, fmt.Errorf("testnet: procs: kill node %d: %w", i, err)
			}
			<-p.done
			return sim.Kill{Hop: st.Hop, Phase: cfg.KillPhase, Node: i, Peer: peers[i]}, killed, nil
		}
		select {
		case <-ctx.Done():
			return sim.Kill{}, time.Time{}, fmt.Errorf("testnet: procs: no node paused at hop %d: %w", cfg.KillHolderAt, ctx.Err())
		case <-tick.C:
		}
	}
}

// waitAcked polls the /status of every node but the paused one until none reports that
// it holds the token (received, or sent and not yet acked).
func waitAcked(ctx context.Context, client *http.Client, procs []*proc, paused int) error {
	for {
		holding := -1
		for j, q := range procs {
			if j == paused {
				continue
			}
			addr := q.statusAddr()
			if addr == "" {
				continue
			}
			st, err := getStatus(ctx, client, addr)
			if err == nil && st.Holding {
				holding = j
			}
		}
		if holding < 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testnet: procs: node %d never saw the paused holder's ack: %w", holding, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func getStatus(ctx context.Context, c *http.Client, addr string) (*node.Status, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/status", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var st node.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, err
	}
	return &st, nil
}

// freePorts returns n distinct free TCP ports on 127.0.0.1 (bound together, then
// released, so a port is free when a node binds it unless another program takes it in
// between).
func freePorts(n int) ([]int, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("testnet: procs: free port: %w", err)
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// harnessPredictor writes the run's predictor description to dir/predictor.json and
// returns the node flags that pass it (none when t is nil).
func harnessPredictor(dir string, t *consensus.ModelSpec) ([]string, error) {
	if t == nil {
		return nil, nil
	}
	b, err := json.Marshal(t)
	if err != nil {
		return nil, err
	}
	p := filepath.Join(dir, "predictor.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		return nil, err
	}
	return []string{"--harness-predictor", p}, nil
}

// shardLabel is the name of the label column of the shard's CSV (the first column,
// whatever its name): one no feature has.
func shardLabel(d *consensus.Dataset) string {
	label := "label"
	for slices.Contains(d.Features, label) {
		label += "_"
	}
	return label
}

// asShardFile returns d as a node reading its shard CSV sees it (a header, so a label
// column name): the data a launcher computes the run's configuration from, so that its
// hash is the nodes' own.
func asShardFile(d *consensus.Dataset) *consensus.Dataset {
	c := *d
	c.Label = shardLabel(d)
	return &c
}

// writeShardCSV writes a shard as CSV (label first, then the features, every value in
// the shortest form that parses back to the same float64), so that a node reading it
// with --scale none --intercept 0 sees exactly the simulator's shard. Class labels are
// written as the class names (Dataset.Classes), which shardArgs passes with --classes.
func writeShardCSV(path string, d *consensus.Dataset) error {
	var b strings.Builder
	w := csv.NewWriter(&b)
	// The features keep their names (they enter the run's configuration hash, which the
	// launcher computes from the prepared data); a node reading the shard with
	// --intercept 0 knows the intercept's column by its name, and leaves it unpenalised
	// as the simulator does.
	head := []string{shardLabel(d)}
	for j := 0; j < d.Cols; j++ {
		name := fmt.Sprintf("f%d", j)
		if j < len(d.Features) {
			name = d.Features[j]
		}
		head = append(head, name)
	}
	_ = w.Write(head)
	names := shardClasses(d)
	for i := 0; i < d.Rows; i++ {
		rec := make([]string, 0, d.Cols+1)
		rec = append(rec, labelText(d, names, d.Y[i]))
		for _, v := range d.Row(i) {
			rec = append(rec, strconv.FormatFloat(v, 'g', -1, 64))
		}
		_ = w.Write(rec)
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// shardClasses returns the class names of a classification shard in the order of
// --classes (binary: negative, positive), nil for numeric targets or unnamed classes.
func shardClasses(d *consensus.Dataset) []string {
	c := d.Classes
	switch {
	case c == nil:
		return nil
	case len(c.List) > 0:
		return c.List
	case c.Negative != "" && c.Positive != "":
		return []string{c.Negative, c.Positive}
	}
	return nil
}

// labelText is the label of a row as written to a shard file.
func labelText(d *consensus.Dataset, names []string, y float64) string {
	switch {
	case names == nil:
		return strconv.FormatFloat(y, 'g', -1, 64)
	case len(names) > 2:
		return names[int(y)]
	case y > 0:
		return names[1]
	}
	return names[0]
}

// classArgs are the node flags that give a shard's classes: --classes with the names, or
// -1,1 for unnamed -1/+1 labels (a shard may hold one class only).
func classArgs(d *consensus.Dataset, loss consensus.Loss) []string {
	if loss == consensus.Squared {
		return nil
	}
	if names := shardClasses(d); names != nil {
		return []string{"--classes", strings.Join(names, ",")}
	}
	return []string{"--classes", "-1,1"}
}

// withLogs appends the last lines of the given node logs to err.
func withLogs(err error, logs []string) error {
	var b strings.Builder
	for _, l := range logs {
		data, rerr := os.ReadFile(l)
		if rerr != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(lines) > 8 {
			lines = lines[len(lines)-8:]
		}
		fmt.Fprintf(&b, "\n--- %s (last lines) ---\n%s", filepath.Base(l), strings.Join(lines, "\n"))
	}
	if b.Len() == 0 {
		return err
	}
	return fmt.Errorf("%w%s", err, b.String())
}

// NetOptions selects the real-stack testnet of RunNet.
type NetOptions struct {
	// Mode is "mem" (RunMem: libp2p hosts in this process) or "procs" (RunProcs).
	Mode string
	// Dir keeps the nodes' data directories and logs; "" = temporary.
	Dir string
	// Binary and Env: the dpadmm executable for "procs" (see ProcsConfig).
	Binary string
	Env    []string
	// KillHolderAt and KillPhase ("procs" only): see ProcsConfig.
	KillHolderAt uint64
	KillPhase    string
	// Sync makes the nodes fsync their ledgers and checkpoints.
	Sync bool
	// Transport ("mem" only): TransportTCP ("" = tcp) or TransportMock.
	Transport string
	// AckTimeout and Withhold: see MemConfig (0 = the mode's default ack timeout).
	AckTimeout time.Duration
	Withhold   []int
	Logger     zerolog.Logger
	// Progress, when set, is called about once a second with the ledger entries written
	// so far and the hops of the run.
	Progress func(entries, hops uint64)
}

// RunNet performs the run described by o on real libp2p hosts and returns the same
// report as Run (plus Report.Network): the data preparation, the split, the seeds and
// the report are Run's, the walk runs over loopback TCP between node.Node runtimes, and
// the path and update counts come from the nodes' ledgers and model.json files. For a
// given seed the model, the path (trace_hash) and the privacy section equal the
// simulator's bit for bit, unless a node was killed. The walk runs on the complete
// graph, without privacy budget, curve or simulator ledger directory. When ctx is
// canceled first, the report describes the state reached (Report.Interrupted).
func RunNet(ctx context.Context, o sim.Options, no NetOptions) (*sim.Report, error) {
	switch {
	case o.Graph != "" && o.Graph != "complete":
		return nil, fmt.Errorf("testnet: %s: the nodes run the walk on the complete graph only, not %q", no.Mode, o.Graph)
	case o.Budget != nil:
		return nil, fmt.Errorf("testnet: %s: privacy budgets are simulator-only", no.Mode)
	case o.Curve != nil || o.LedgerDir != "":
		return nil, fmt.Errorf("testnet: %s: the curve and the ledger directory are simulator-only (the nodes' ledgers are in their data directories)", no.Mode)
	case no.Mode != "mem" && no.Mode != "procs":
		return nil, fmt.Errorf("testnet: unknown network mode %q (mem or procs)", no.Mode)
	case no.Mode != "mem" && no.Transport != "" && no.Transport != TransportTCP:
		return nil, fmt.Errorf("testnet: %s: transport %q is for in-process hosts (mem)", no.Mode, no.Transport)
	case no.Mode == "mem" && no.KillHolderAt > 0:
		return nil, errors.New("testnet: mem: killing the holder needs separate processes (procs)")
	}
	p, err := sim.Prepare(ctx, o)
	if err != nil {
		return nil, err
	}
	planWarned := p.NetPlanWarnings(o)
	nr := &sim.NetworkReport{Mode: no.Mode, Hosts: o.Nodes, Dir: no.Dir}
	var (
		z           []float64
		updates     []int
		lp          *PathFromLedgers
		wall        time.Duration
		hops        = o.Hops
		interrupted bool
	)
	if no.Mode == "mem" {
		r, err := RunMem(ctx, MemConfig{
			Shards: p.Shards(), Predictor: sim.PredictorTemplate(o.Problem.Loss, o.Scaler, o.Train),
			Problem: o.Problem, Gamma: o.Gamma, Lambda: o.Lambda, Clip: o.Clip, Sigma: o.Sigma, Step: o.Step, Unit: o.Unit, RowBound: o.RowBoundOf(), MaxUpdates: o.MaxUpdates, Seed: o.Seed, Hops: o.Hops, Delta: o.Delta, Dir: no.Dir, Sync: no.Sync, Logger: no.Logger,
			AckTimeout: no.AckTimeout, Withhold: no.Withhold, Progress: no.Progress, Transport: no.Transport,
		})
		if err != nil {
			return nil, err
		}
		z, updates, wall, hops, interrupted = r.Model, r.Updates, r.Wall, r.Hops, r.Interrupted
		nr.Transport, nr.PeakRSSBytes, nr.HeapBytes = r.Transport, r.PeakRSS, r.Heap
		nr.PeakRSSPerHost, nr.HeapPerHostBytes = float64(r.PeakRSS)/float64(o.Nodes), float64(r.Heap)/float64(o.Nodes)
		lp = &PathFromLedgers{Path: r.Path, Redirects: r.Redirects, Views: r.Views}
		for _, e := range r.Ledger {
			lp.Entries += e
		}
	} else {
		r, err := RunProcs(ctx, ProcsConfig{
			Binary: no.Binary, Env: no.Env, Shards: p.Shards(), Predictor: sim.PredictorTemplate(o.Problem.Loss, o.Scaler, o.Train), Problem: o.Problem, Gamma: o.Gamma, Lambda: o.Lambda,
			Clip: o.Clip, Sigma: o.Sigma, Step: o.Step, MaxUpdates: o.MaxUpdates, Seed: o.Seed, Hops: o.Hops, Delta: o.Delta,
			Unit: o.Unit, RowBound: o.RowBoundOf(),
			Dir: no.Dir, Sync: no.Sync, KillHolderAt: no.KillHolderAt, KillPhase: no.KillPhase, Logger: no.Logger,
			AckTimeout: no.AckTimeout, Withhold: no.Withhold, Progress: no.Progress,
		})
		if err != nil {
			return nil, err
		}
		z, updates, wall, lp, hops, interrupted = r.Model, r.Updates, r.Wall, r.Path, r.Hops, r.Interrupted
		nr.Kills = r.Kills
	}
	nr.LedgerEntries, nr.Redirects, nr.Repeats, nr.Views = lp.Entries, lp.Redirects, lp.Repeats, lp.Views
	if wall > 0 {
		nr.HopsPerSecond = float64(hops) / wall.Seconds()
	}
	rep, err := p.NetReport(o, sim.NetWalk{Model: z, Hops: hops, Updates: updates, Path: lp.Path, Views: lp.Views,
		Wall: wall, Interrupted: interrupted, PlanWarnings: planWarned})
	if err != nil {
		return nil, err
	}
	rep.Network = nr
	return rep, nil
}

// killAll kills every started process that has not exited and waits for it.
func killAll(procs []*proc) {
	for _, p := range procs {
		if p != nil {
			select {
			case <-p.done:
			default:
				p.cmd.Process.Kill()
				<-p.done
			}
		}
	}
}

// workDir returns dir, created if needed, or a new temporary directory named after
// prefix when dir is empty; cleanup removes the temporary directory (a given dir is
// kept). what names the launcher in errors.
func workDir(dir, prefix, what string) (string, func(), error) {
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", nil, fmt.Errorf("testnet: %s: %w", what, err)
		}
		return dir, func() {}, nil
	}
	d, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", nil, fmt.Errorf("testnet: %s: %w", what, err)
	}
	return d, func() { os.RemoveAll(d) }, nil
}
