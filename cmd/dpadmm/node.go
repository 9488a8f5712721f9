package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/node"
	"github.com/dpadmm/dpadmm/node/drive"
	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/walk"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

const nodeHelp = `Usage: dpadmm node --run NAME --data FILE --datadir DIR [flags]

Runs one node of a random-walk private ADMM run over libp2p. Every node of a run must
use the same --run, hyperparameters and data dimension (their hash is checked).

One node starts the run (--start): it announces the configuration on the GossipSub
topic dpadmm/<run>/control, waits for --min-peers nodes (itself included) to join,
keeps the join window open a little longer, fixes the membership and creates the token.
The token travels only over direct streams (/dpadmm/<run>/walk/1). After --hops hops the
last holder publishes the released model; every member writes DIR/model.json (model and
privacy report) and exits.

DIR holds the node identity (the peer ID survives restarts), the privacy ledger,
checkpoints and model.json. A checkpoint without an intact ledger is refused.

Testnets: 'dpadmm testnet --procs' starts nodes with --static FILE (fixed membership in
node-index order, skipping announce/join; each node waits until it is connected to every
member before the walk starts; with --algo radmm|... the file's total_rows is M, holder
is ignored, and an optional config_hash must equal the node's) and --seed S (every random
source seeded as in the simulator, so the model equals the simulator's for that seed; such
noise is not secure). With --algo radmm|... the hyperparameters come as the node's own
flags, the shard as CSV with --scale none, and --pause-at-iter I (fault injection) stops
the node once its release of iteration I is durable, before it is sent, until it is killed.

Neighbour exchange (R-ADMM family) on a LAN or an existing libp2p network: with --algo
radmm|mradmm|madmm|admm|admm-dvp|admm-pvp the node takes part in a neighbour-exchange run
instead of a walk. The starter announces algorithm, --graph, --graph-seed, --iters, --alpha
(or --target-epsilon, which each node turns into its own alpha), the penalty schedule
(--eta, --eta-growth, --eta-max, or --eta-file FILE in the format of 'dpadmm testnet
--eta-file': one value per line for every member, or one comma-separated column per member
index for MR-ADMM), --even-gamma (the even-step proximal weight), --paper-c, --loss, --l2
and the data dimension; their hash must match. The start message fixes the ordered
membership and the total row count M; every member builds the same graph from (--graph,
members, --graph-seed), its objective with C_i/B_i = C*n/M and rho/N = C*l2 (as the
simulator), f_i(0) and its noise from crypto/rand, dials its neighbours and exchanges
vectors over /dpadmm/<run>/radmm/1 (ledger fsynced before every send; --barrier-timeout,
--max-wait, --on-missing as in 'dpadmm testnet'). Every node writes DIR/model.json with ITS
OWN model f_i(T) (the network average is not known to one node: average the members' files)
and its own Theorem V.1 figure from its ledger, with the theorem's conditions and whether
they hold. Rows must have norm <= 1 after --scale (checked; the node refuses otherwise).
--seed S seeds f_i(0) and the noise as the simulator does for node i (testnets only: NOT
secure). --static FILE fixes the membership in index order and M (total_rows) and skips
announce/join. --http ADDR serves /status (a "gossip" section: iteration, neighbours
reachable, stale uses, ledger entries, the running Theorem V.1 epsilon with its conditions)
and /metrics (dpadmm_gossip_*). The walk's flags (--hops, --gamma, --clip, --sigma, ...) are
refused. A node killed or crashed mid-run resumes when started again with the same --datadir
(and --run, configuration, --listen port): its journal (DIR/gossip-journal, written with the
ledger before every send) restores the machine exactly and it re-sends the vectors it
already released unchanged, never re-noised; it refuses to resume when the journal does not
reproduce its ledger bit for bit. Neighbours wait for it with --on-missing wait (or a
barrier and --max-wait longer than the restart).

  dpadmm node --run g1 --algo radmm --data examples/a.csv --schema examples/breast_cancer.schema.json --datadir /tmp/g0 --start --min-peers 2 --graph ring --iters 2 --target-epsilon 2 --profile lan
  dpadmm node --run g1 --algo radmm --data examples/b.csv --schema examples/breast_cancer.schema.json --datadir /tmp/g1 --graph ring --iters 2 --target-epsilon 2 --profile lan

Profiles set listen addresses, discovery and timeouts together:
  test      listen 127.0.0.1 TCP, no mDNS, short timeouts (ack 2s, join window 1s)
  lan       listen all interfaces TCP+QUIC, mDNS discovery (ack 10s, join window 5s)
  internet  listen all interfaces TCP+QUIC, no mDNS, NAT port mapping, AutoNAT service,
            hole punching and AutoRelay (circuit-relay v2 on the --relay peers, or on relays
            found in the DHT routing table), use --bootstrap/--peer (ack 30s, join window 30s)

Examples:
  dpadmm node --run demo --data embedded --shard 0/3 --min-rows 150 --datadir /tmp/n0 --start --min-peers 3 --profile lan
  dpadmm node --run demo --data embedded --shard 1/3 --min-rows 150 --datadir /tmp/n1 --profile lan

A run name (--run) is 1 to 64 characters from A-Z a-z 0-9 . _ - (it becomes part of
protocol IDs and topic names). The keys of model.json are listed in docs/report-schema.md.
`

// multiFlag collects a repeatable, comma-separable string flag.
type multiFlag []string

func (m *multiFlag) String() string { return strings.Join(*m, ",") }

func (m *multiFlag) Set(s string) error {
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*m = append(*m, p)
		}
	}
	return nil
}

func runNode(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newNodeFlags(stdout)
	if err := f.m.parse(args); err != nil {
		return err
	}
	bad := func(format string, a ...any) error { return usagef("node", format, a...) }
	var rc *node.RunConfig
	var overridden []string
	if *f.runConfig != "" {
		var err error
		if rc, overridden, err = f.applyRunConfig(*f.runConfig); err != nil {
			return bad("%v", err)
		}
	}
	var harness []string
	f.m.Visit(func(fl *flag.Flag) {
		if harnessFlags[fl.Name] {
			harness = append(harness, "--"+fl.Name)
		}
	})
	if len(harness) > 0 && !*f.insecure {
		return bad("%s: test-harness flag(s) (seeded noise, fixed membership, fault injection) that void every guarantee; they need --insecure-testnet, which allows loopback addresses only", strings.Join(harness, ", "))
	}
	if *f.run != "" {
		if err := checkRunName("node", *f.run); err != nil {
			return err
		}
	}
	auto, err := resolveAuto(f.m, f.algo, f.lossName)
	if err == nil {
		err = auto.fillHops(*f.minPeers)
	}
	if err != nil {
		return bad("%v", err)
	}
	f.auto = auto
	mode, what, err := f.mode()
	if err != nil {
		return bad("%v", err)
	}
	if err := f.m.check(mode, what); err != nil {
		return err
	}
	cfg, err := f.config(mode)
	if err != nil {
		return bad("%v", err)
	}
	log, err := node.NewLogger(stderr, *f.logFormat, *f.logLevel)
	if err != nil {
		return bad("--log-level: %v", err)
	}
	node.RouteLibp2pLogs(log)
	cfg.Logger = log
	if cfg.HTTP != "" && publicHTTP(cfg.HTTP) {
		log.Warn().Str("http", cfg.HTTP).Msg("--http listens beyond loopback: anyone who can reach it reads this node's /status and /metrics")
	}
	if cfg.DebugStatus {
		log.Warn().Msg("--debug-status: /status and /metrics show per-hop counters; polled on several nodes they reveal the token's path, which the network privacy figures assume secret")
	}
	if err := f.loadData(&cfg); err != nil {
		return err
	}
	switch {
	case f.targetWarn:
		log.Warn().Msg(f.targetMsg)
	case f.targetMsg != "":
		log.Info().Msg(f.targetMsg)
	}
	if err := f.applyStatic(&cfg); err != nil {
		return err
	}
	warns, err := checkRunConfig(&cfg, rc, overridden)
	if err != nil {
		return bad("%v", err)
	}
	for _, w := range warns {
		log.Warn().Msg(w)
	}
	if cfg.RADMM != nil {
		return runGossipMember(ctx, cfg, *f.datadir, stdout, *f.quiet)
	}
	return runWalkMember(ctx, cfg, *f.datadir, stdout, *f.quiet)
}

// config checks the flag values of a walk or neighbour-exchange node and returns its
// configuration (without data, logger and static membership).
func (f *nodeFlags) config(mode string) (node.Config, error) {
	cfg := node.DefaultConfig()
	if mode == nodeModeGossip {
		gp, err := f.gossipParams()
		if err != nil {
			return cfg, err
		}
		cfg.RADMM = gp
	} else {
		if err := f.checkWalk(); err != nil {
			return cfg, err
		}
		step, err := f.sf.params(stepKind(mode), f.m.isSet("step-size"))
		if err != nil {
			return cfg, err
		}
		cfg.Step = step
		if _, err := privacy.ParseUnit(*f.unit); err != nil {
			return cfg, fmt.Errorf("--privacy-unit: %v", err)
		}
		cfg.Unit = privacy.Unit(*f.unit)
		if f.m.isSet("target-epsilon") && f.m.isSet("sigma") {
			return cfg, fmt.Errorf("--target-epsilon calibrates --sigma: give one of them")
		}
		if useTarget(f.m.isSet("target-epsilon"), f.m.isSet("sigma"), step, *f.maxUpd) {
			if err := checkTarget(step, *f.maxUpd, *f.target); err != nil {
				return cfg, err
			}
		}
	}
	switch {
	case f.m.NArg() > 0:
		return cfg, fmt.Errorf("unexpected argument %q", f.m.Arg(0))
	case *f.run == "":
		return cfg, fmt.Errorf("--run is required")
	case *f.df.path == "":
		return cfg, fmt.Errorf("--data is required")
	case *f.datadir == "":
		return cfg, fmt.Errorf("--datadir is required")
	case *f.minPeers < 1:
		return cfg, fmt.Errorf("--min-peers must be >= 1")
	case *f.logFormat != "text" && *f.logFormat != "json":
		return cfg, fmt.Errorf("--log-format must be text or json, got %q", *f.logFormat)
	case *f.joinWindow < 0:
		return cfg, fmt.Errorf("--join-window must be >= 0 (0 = profile), got %v", *f.joinWindow)
	case *f.mismatchWait < 0:
		return cfg, fmt.Errorf("--mismatch-wait must be >= 0 (0 = forever), got %v", *f.mismatchWait)
	case f.m.isSet("seed") && *f.static == "" && cfg.RADMM == nil:
		return cfg, fmt.Errorf("--seed needs --static (seeded randomness is for testnets only)")
	}
	prob, err := checkProblemFlags("node", *f.lossName, *f.l1, *f.l2)
	if err != nil {
		return cfg, err
	}
	if err := f.df.check(prob.Loss); err != nil {
		return cfg, err
	}
	if cfg.RADMM != nil && !f.m.isSet("l2") {
		prob.Reg.L2 = node.RADMMDefaultL2
	}
	cfg.Problem = prob
	cfg.Run, cfg.DataDir, cfg.Start, cfg.MinPeers, cfg.Hops = *f.run, *f.datadir, *f.start, *f.minPeers, *f.hops
	cfg.Gamma, cfg.Lambda, cfg.Clip, cfg.Sigma, cfg.MaxUpdates, cfg.Delta = *f.gamma, *f.lambda, *f.clip, *f.sigma, *f.maxUpd, *f.delta
	cfg.BudgetEpsilon, cfg.BudgetKind = *f.budgetEps, *f.budgetKind
	if cfg.RADMM == nil {
		if m := *f.maxEps; !(m >= 0) || math.IsInf(m, 0) {
			return cfg, fmt.Errorf("--max-epsilon must be finite and >= 0, got %v", m)
		}
		cfg.MaxEpsilon = *f.maxEps
	}
	cfg.Peers, cfg.Bootstrap, cfg.Relays, cfg.RelayService = f.peers, f.bootstrap, f.relays, *f.relayService
	cfg.HTTP, cfg.NoSync, cfg.DebugStatus, cfg.StatusPeriod, cfg.RendezvousSecret = httpListen(*f.httpAddr), *f.noSync, *f.debugStatus, *f.statusPeriod, *f.rvSecret
	if err := f.network(&cfg); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// network applies the profile and the network, membership, custody and fault-injection
// flags to cfg.
func (f *nodeFlags) network(cfg *node.Config) error {
	if err := node.ApplyProfile(cfg, *f.profile); err != nil {
		return fmt.Errorf("--profile must be test, lan or internet, got %q", *f.profile)
	}
	if len(f.listen) > 0 {
		cfg.Listen = f.listen
	}
	if *f.finalLinger >= 0 {
		cfg.FinalLinger = *f.finalLinger
	}
	if err := membershipFlags(cfg, *f.swarmKey, *f.allowFile, *f.starterID, *f.maxRows); err != nil {
		return err
	}
	if err := minRowsFlag(cfg, *f.minRows); err != nil {
		return err
	}
	if *f.insecure {
		for _, a := range append(append(append(append([]string(nil), cfg.Listen...), f.peers...), f.bootstrap...), f.relays...) {
			if !loopbackAddr(a) {
				return fmt.Errorf("--insecure-testnet allows loopback addresses only, got %s (use --profile test or --listen /ip4/127.0.0.1/tcp/0)", a)
			}
		}
		cfg.Insecure = true
	}
	cfg.Heartbeat, cfg.HeartbeatMisses, cfg.Depth = *f.heartbeat, *f.heartbeatMisses, *f.custodyDepth
	cfg.FallbackTimeout = *f.fallbackTimeout
	if *f.ackTimeout > 0 {
		cfg.AckTimeout = *f.ackTimeout
	}
	if cfg.FallbackTimeout > 0 && cfg.FallbackTimeout <= cfg.AckTimeout {
		return fmt.Errorf("--fallback-timeout (%v) must exceed the ack timeout (%v); 0 = derived, negative = off", cfg.FallbackTimeout, cfg.AckTimeout)
	}
	cfg.PauseAtHop, cfg.WithholdAcks, cfg.PauseAfterStep = *f.pauseAt, *f.withhold, *f.pausePhase == "custody"
	switch {
	case *f.mismatchWait > 0:
		cfg.MismatchWait = *f.mismatchWait
	case *f.mismatchWait == 0:
		cfg.MismatchWait = -1 // forever
	}
	if *f.joinWindow > 0 {
		cfg.JoinWindow = *f.joinWindow
	}
	return nil
}

// loadData loads the node's data into cfg: one public scaling for the run (unitball, no
// parameters; --scale-file; or fitted on the whole public embedded data before the shard
// is taken), whose fingerprint enters the config hash and model.json records, then the
// --shard.
func (f *nodeFlags) loadData(cfg *node.Config) error {
	ld, err := f.df.load(loadRequest{loss: cfg.Problem.Loss, multiclass: true})
	if err != nil {
		return err
	}
	for _, m := range ld.warnings {
		cfg.Logger.Warn().Msg(m)
	}
	d := ld.train
	cfg.Scaling = ld.scaler
	if ld.schema != nil {
		cfg.Schema = ld.schema.Hash()
	}
	cfg.Problem = ld.problem(cfg.Problem, cfg.RADMM == nil)
	if *f.shard != "" {
		i, n, ok := parseShard(*f.shard)
		if !ok {
			return usagef("node", "--shard must be I/N with 0 <= I < N, got %q", *f.shard)
		}
		sh, err := consensus.Split(d, n, "iid", *f.splitSeed)
		if err != nil {
			return err
		}
		d = sh[i]
	}
	cfg.Data = d
	if *f.harnessPredictor != "" {
		spec, _, err := readSpec(*f.harnessPredictor)
		if err != nil {
			return fmt.Errorf("--harness-predictor: %w", err)
		}
		if len(spec.Flat()) != cfg.Data.ModelDim() {
			return fmt.Errorf("--harness-predictor: %s has %d weights, the data give a model of %d", *f.harnessPredictor, len(spec.Flat()), cfg.Data.ModelDim())
		}
		cfg.Harness.Predictor = spec
	}
	if cfg.RADMM != nil {
		return nil
	}
	basis := fmt.Sprintf("fitted to --min-rows %d", cfg.MinRows)
	if cfg.MinRows <= 0 {
		basis = "not fitted: give every member --min-rows, the fewest rows any member holds, to fit them"
	}
	var msg string
	if cfg.Step, msg = f.auto.fit(cfg.Step, float64(cfg.MinRows), basis); msg != "" {
		cfg.Logger.Info().Msg(msg)
	}
	cfg.RowBound = ld.scaler.RowBound()
	if f.m.isSet("row-bound") {
		if b := *f.rowBound; !(b >= 0) || math.IsInf(b, 0) {
			return usagef("node", "--row-bound must be finite and >= 0, got %v", b)
		}
		cfg.RowBound = *f.rowBound
	}
	return f.calibrate(cfg)
}

// calibrate applies --target-epsilon once the data is loaded. Under the record unit the
// radius needs a bound on the weight of one row before the members are known: --min-rows
// R gives n/M <= 1/R; without it the node-level clip bounds the record, and the line says
// so.
func (f *nodeFlags) calibrate(cfg *node.Config) error {
	if !useTarget(f.m.isSet("target-epsilon"), f.m.isSet("sigma"), cfg.Step, cfg.MaxUpdates) {
		f.targetMsg = noTargetNote(f.m.isSet("target-epsilon"), f.m.isSet("sigma"), cfg.Step, cfg.MaxUpdates, cfg.Sigma)
		f.targetWarn = f.targetMsg != ""
		return nil
	}
	nodes, rows := 0, 0
	if cfg.MinRows > 0 {
		nodes, rows = 1, cfg.MinRows
	}
	r := planWalkRun(cfg.Step, cfg.Gamma, cfg.Clip, cfg.Unit, cfg.RowBound, cfg.Problem.Loss, nodes, rows)
	r.WeightUnknown = cfg.MinRows <= 0
	sigma, b, err := calibrateSigma(r, cfg.Step, cfg.MaxUpdates, *f.target, cfg.Delta)
	if err != nil {
		return usagef("node", "%v", err)
	}
	*f.sigma, cfg.Sigma = sigma, sigma
	f.targetMsg = targetLine(r, sigma, b, cfg.MaxUpdates, *f.target, cfg.Delta)
	if cfg.Unit != privacy.UnitNode && cfg.MinRows == 0 {
		// The whole shard's bound: far more noise than one record needs. Say how much, with
		// this node's own row count as the example bound.
		hint := ""
		if cfg.Data != nil && cfg.Data.Rows > 0 {
			r1 := planWalkRun(cfg.Step, cfg.Gamma, cfg.Clip, cfg.Unit, cfg.RowBound, cfg.Problem.Loss, 1, cfg.Data.Rows)
			if s1, _, err := calibrateSigma(r1, cfg.Step, cfg.MaxUpdates, *f.target, cfg.Delta); err == nil && s1 > 0 {
				hint = fmt.Sprintf(" (with --min-rows %d, this node's rows, sigma would be %.3g, %.0f times less noise)", cfg.Data.Rows, s1, sigma/s1)
			}
		}
		f.targetMsg += "; without --min-rows the weight of one row is unknown before the members are, so the clip (a node-level bound) was calibrated: give every member --min-rows, the fewest rows any member holds, for the per-record calibration" + hint
		f.targetWarn = true
	}
	return nil
}

// applyStatic applies --static (a fixed membership) and --seed (every random source
// seeded as the simulator seeds node i) to cfg.
func (f *nodeFlags) applyStatic(cfg *node.Config) error {
	seedSet, s := f.m.isSet("seed"), *f.seed
	if *f.static != "" {
		b, err := os.ReadFile(*f.static)
		if err != nil {
			return err
		}
		sf, err := node.ParseStatic(b)
		if err != nil {
			return fmt.Errorf("%s: %w", *f.static, err)
		}
		if sf.Run != cfg.Run {
			return fmt.Errorf("%s is for run %q, not %q", *f.static, sf.Run, cfg.Run)
		}
		for _, a := range sf.PeerAddrs() {
			if !loopbackAddr(a) {
				return fmt.Errorf("%s: member address %s is not loopback (--insecure-testnet)", *f.static, a)
			}
		}
		n := len(sf.Members)
		cfg.Members, cfg.Holder = sf.IDs(), sf.Holder
		cfg.Weight = walk.LossWeight(n, cfg.Data.Rows, sf.TotalRows)
		cfg.Peers = append(cfg.Peers, sf.PeerAddrs()...)
		cfg.WaitMembers = 30 * time.Second
		if gp := cfg.RADMM; gp != nil {
			// Neighbour exchange: M from the file; the holder does not apply; RunRADMM
			// dials the neighbours (WaitMembers only keeps New from dialling everyone).
			gp.TotalRows, cfg.Weight, cfg.Holder = sf.TotalRows, 0, 0
		} else if seedSet {
			cfg.Sources = func(i int) (*rand.PCG, *rand.PCG) { return drive.SeededSources(s, i) }
			cfg.AllowSeededNoise = true
			if want := drive.SeededHolder(s, n); want != sf.Holder {
				return fmt.Errorf("%s names holder %d, seed %d gives %d", *f.static, sf.Holder, s, want)
			}
		}
		if h := cfg.RunConfig().Hash(); sf.ConfigHash != "" && sf.ConfigHash != h {
			return fmt.Errorf("%s is for config hash %.12s, this node's configuration hashes to %.12s (different data dimensions or hyperparameters)",
				*f.static, sf.ConfigHash, h)
		}
	}
	if cfg.RADMM != nil && seedSet {
		// f_i(0) and the noise as the simulator draws them for node i and this seed.
		cfg.Rand = func(i int) *rand.Rand { return drive.SeededRADMMInit(s, i) }
		cfg.Noise = func(i int) privacy.Noise { return drive.SeededNoise(s, i) }
		cfg.AllowSeededNoise = true
	}
	return nil
}

// runWalkMember runs one member of a random walk and prints where its model and privacy
// figures were written.
func runWalkMember(ctx context.Context, cfg node.Config, datadir string, stdout io.Writer, quiet bool) error {
	nd, err := node.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer nd.Close()
	fmt.Fprintf(stdout, "node %s run %q config %.12s\n", nd.ID(), cfg.Run, nd.ConfigHash())
	for _, a := range nd.Host.Addrs() {
		fmt.Fprintf(stdout, "  listening on %s/p2p/%s\n", a, nd.ID())
	}
	if nd.HTTPAddr != "" {
		fmt.Fprintf(stdout, "  status on http://%s/status, metrics on /metrics\n", nd.HTTPAddr)
	}
	stopProgress := nodeProgress(ctx, nd, cfg.Run, newProgress(stdout, quiet))
	m, err := nd.Run(ctx)
	stopProgress()
	if err != nil {
		if ctx.Err() != nil {
			return interrupted("stopped before the run ended; its state is checkpointed in %s (start the node again with the same --datadir to resume)", datadir)
		}
		return err
	}
	fmt.Fprintf(stdout, "run %q done after %d hops: model written to %s\n", m.Run, m.Hops, filepath.Join(datadir, store.ModelFile))
	fmt.Fprintf(stdout, "  own noisy updates %d, ledger entries %d\n", m.Privacy.Updates, m.Privacy.LedgerEntries)
	// The figures in short; their theorems, conditions and reasons are in model.json.
	loc, nw := m.Privacy.Local, m.Privacy.Network
	fmt.Fprintf(stdout, "  local epsilon %s at delta %g (an observer of every message of this node; conditions hold: %v)\n", loc.Epsilon, m.Privacy.Delta, loc.ConditionsHold)
	if nw.ConditionsHold {
		fmt.Fprintf(stdout, "  planned network epsilon %s (the worst pair of members, the path secret)\n", nw.Epsilon)
	} else {
		fmt.Fprintf(stdout, "  planned network figure not claimed (its conditions fail; the local figure is the guarantee)\n")
	}
	fmt.Fprintf(stdout, "  theorems, conditions and reasons: %s, key \"privacy\"\n", filepath.Join(datadir, store.ModelFile))
	return nil
}

// runGossipMember runs one member of a neighbour-exchange run joined over the control
// plane and prints where its model and its own Theorem V.1 figure were written.
func runGossipMember(ctx context.Context, cfg node.Config, datadir string, stdout io.Writer, quiet bool) error {
	nd, err := node.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer nd.Close()
	fmt.Fprintf(stdout, "node %s run %q algo %s config %.12s\n", nd.ID(), cfg.Run, cfg.RADMM.Algo, nd.ConfigHash())
	for _, a := range nd.Host.Addrs() {
		fmt.Fprintf(stdout, "  listening on %s/p2p/%s\n", a, nd.ID())
	}
	if nd.HTTPAddr != "" {
		fmt.Fprintf(stdout, "  status on http://%s/status (section gossip), metrics on /metrics (dpadmm_gossip_*)\n", nd.HTTPAddr)
	}
	stopProgress := nodeProgress(ctx, nd, cfg.Run, newProgress(stdout, quiet))
	m, err := nd.RunRADMM(ctx)
	stopProgress()
	if err != nil {
		if ctx.Err() != nil {
			return interrupted("stopped before the run ended; its journal and ledger are in %s (start the node again with the same --datadir to resume)", datadir)
		}
		return err
	}
	fmt.Fprintf(stdout, "run %q node %d of %d (%s, neighbours %v): %d iterations done; this node's own model f_i(T) written to %s\n",
		m.Run, m.Index, m.Nodes, m.Graph, m.Neighbors, m.Iters, filepath.Join(datadir, store.ModelFile))
	fmt.Fprintf(stdout, "  %d stale uses, %d inexact solves, %d ledger entries\n", len(m.Stale), m.Inexact, m.Privacy.LedgerEntries)
	fmt.Fprintf(stdout, "  this node's pure epsilon %s (delta 0), Theorem V.1 (conditions hold: %v", m.Privacy.Epsilon, m.Privacy.ConditionsHold)
	if m.Privacy.Reason != "" {
		fmt.Fprintf(stdout, "; %s", m.Privacy.Reason)
	}
	fmt.Fprintf(stdout, "); noise secure: %v; the theorem and its conditions: %s\n", m.Privacy.SecureNoise, filepath.Join(datadir, store.ModelFile))
	return nil
}

func parseShard(s string) (i, n int, ok bool) {
	a, b, found := strings.Cut(s, "/")
	if !found {
		return 0, 0, false
	}
	i, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	return i, n, err1 == nil && err2 == nil && n >= 1 && i >= 0 && i < n
}

// harnessFlags are the flags of 'dpadmm node' that only test harnesses may use: each needs
// --insecure-testnet.
var harnessFlags = map[string]bool{"seed": true, "static": true, "pause-at-hop": true, "pause-at-iter": true,
	"pause-phase": true, "withhold-acks": true, "harness-predictor": true}

// loopbackAddr reports whether the multiaddr s is on a loopback interface (/ip4/127.0.0.0/8,
// /ip6/::1, /dns/localhost).
func loopbackAddr(s string) bool {
	m, err := multiaddr.NewMultiaddr(s)
	if err != nil {
		return false
	}
	if ip, err := manet.ToIP(m); err == nil {
		return ip.IsLoopback()
	}
	v, err := m.ValueForProtocol(multiaddr.P_DNS)
	return err == nil && v == "localhost"
}

// httpListen returns the listen address of --http: a port alone (":9090" or "9090") is
// on loopback, so that /status and /metrics are never public by accident.
func httpListen(s string) string {
	if s == "" {
		return ""
	}
	if !strings.Contains(s, ":") {
		return "127.0.0.1:" + s
	}
	if strings.HasPrefix(s, ":") {
		return "127.0.0.1" + s
	}
	return s
}

// publicHTTP reports whether the --http address s listens beyond loopback.
func publicHTTP(s string) bool {
	host, _, err := net.SplitHostPort(s)
	if err != nil {
		return true
	}
	if host == "localhost" {
		return false
	}
	ip := net.ParseIP(host)
	return ip == nil || !ip.IsLoopback()
}

// membershipFlags sets the run's closing options from --swarm-key, --allow, --starter and
// --max-rows.
func membershipFlags(cfg *node.Config, swarmKey, allowFile, starter string, maxRows int) error {
	if swarmKey != "" {
		b, err := os.ReadFile(swarmKey)
		if err != nil {
			return fmt.Errorf("--swarm-key: %v", err)
		}
		psk, err := node.ParseSwarmKey(b)
		if err != nil {
			return fmt.Errorf("--swarm-key %s: %v", swarmKey, err)
		}
		cfg.SwarmKey = psk
	}
	if allowFile != "" {
		b, err := os.ReadFile(allowFile)
		if err != nil {
			return fmt.Errorf("--allow: %v", err)
		}
		a, err := node.ParseAllowList(b, cfg.Run)
		if err != nil {
			return fmt.Errorf("--allow %s: %v", allowFile, err)
		}
		cfg.Allow = a
	}
	if starter != "" {
		p, err := peer.Decode(starter)
		if err != nil {
			return fmt.Errorf("--starter: %v", err)
		}
		if cfg.Allow != nil && cfg.Allow.Owner != p.String() {
			return fmt.Errorf("--starter %s is not the allow-list's owner %s", p, cfg.Allow.Owner)
		}
		cfg.Starter = p
	}
	if maxRows < 0 {
		return fmt.Errorf("--max-rows must be >= 0, got %d", maxRows)
	}
	cfg.MaxRows = maxRows
	return nil
}

// minRowsFlag sets Config.MinRows from --min-rows.
func minRowsFlag(cfg *node.Config, minRows int) error {
	if minRows < 0 {
		return fmt.Errorf("--min-rows must be >= 0, got %d", minRows)
	}
	cfg.MinRows = minRows
	return nil
}
