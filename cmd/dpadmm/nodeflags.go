package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/dpadmm/dpadmm/gossip"
	"github.com/dpadmm/dpadmm/node"
	"github.com/dpadmm/dpadmm/node/wire"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/walk"
)

// Modes of 'dpadmm node' (modeFlags): "walk:STEP" for a random-walk node with its local
// step, "gossip" for a neighbour-exchange node.
const nodeModeGossip = "gossip"

// Sections of the help of 'dpadmm node' and 'dpadmm testnet' (modeFlags groups).
const (
	sectionWalk   = "the random walk (--algo walk, walk-gadmm, walk-sgd)"
	sectionGossip = "neighbour exchange (--algo radmm, mradmm, madmm, admm, admm-dvp, admm-pvp)"
)

// walkAlgos are the --algo values that run a random walk, with the local step each fixes
// ("walk" takes it from --local-step).
var walkAlgos = map[string]walk.StepKind{"walk": walk.StepProx, "walk-gadmm": walk.StepGADMM, "walk-sgd": walk.StepSGD}

// algoList is the list of every --algo value, for messages.
const algoList = "walk, walk-gadmm, walk-sgd, auto, radmm, mradmm, madmm, admm, admm-dvp, admm-pvp"

// algoMode returns the algorithm part of a mode: "walk:STEP" for a walk algorithm (the
// step from --local-step for --algo walk) or "gossip", and how to name it in messages.
func algoMode(algo, localStep string, localSet bool) (mode, what string, err error) {
	if kind, ok := walkAlgos[algo]; ok {
		if algo == "walk" {
			k, err := walk.ParseStep(localStep)
			if err != nil || k == walk.StepGADMM || k == walk.StepSGD {
				return "", "", fmt.Errorf("--local-step must be prox, linearized or ls-sgd, got %q (gradient ADMM and the DP-SGD walk are --algo walk-gadmm and walk-sgd)", localStep)
			}
			kind = k
		}
		what = "--algo " + algo
		if algo == "walk" && localSet {
			what += " --local-step " + kind.String()
		}
		return "walk:" + kind.String(), what, nil
	}
	if _, err := gossip.ParseAlgo(algo); err != nil {
		return "", "", fmt.Errorf("unknown --algo %q (available: %s)", algo, algoList)
	}
	return nodeModeGossip, "--algo " + algo, nil
}

// nodeFlags are the flags of 'dpadmm node'.
type nodeFlags struct {
	m  *modeFlags
	df *dataFlags

	// every mode
	run, datadir, logFormat, logLevel *string
	noSync, insecure                  *bool

	// walk and neighbour-exchange nodes joined over the network
	algo, shard, profile, httpAddr, swarmKey, allowFile, rvSecret, starterID, static *string
	lossName                                                                         *string
	splitSeed, seed                                                                  *uint64
	start, relayService, debugStatus, quiet                                          *bool
	minPeers, maxRows, minRows                                                       *int
	joinWindow, statusPeriod, finalLinger, mismatchWait                              *time.Duration
	l1, l2                                                                           *float64
	listen, peers, bootstrap, relays                                                 multiFlag

	// the walk
	hops, pauseAt                                                  *uint64
	gamma, lambda, clip, sigma, delta, budgetEps, target, rowBound *float64
	maxEps                                                         *float64
	unit                                                           *string
	// auto is what --algo auto chose (nil: not auto); its settings are fitted to the
	// node's rows once they are loaded (loadData).
	auto *autoChoice
	// targetMsg reports the --target-epsilon calibration ("" without one).
	targetMsg                              string
	targetWarn                             bool // targetMsg is a warning (the node-level calibration)
	maxUpd, heartbeatMisses, custodyDepth  *int
	budgetKind, pausePhase                 *string
	ackTimeout, heartbeat, fallbackTimeout *time.Duration
	withhold                               *bool
	harnessPredictor                       *string
	sf                                     *stepFlags

	// neighbour exchange
	graphSpec, alphaStr, etaFile, onMissing   *string
	graphSeed                                 *uint64
	iters, pauseIter                          *int
	eta, etaGrowth, etaMax, paperC, evenGamma *float64
	barrier, maxWait                          *time.Duration
	etaTable                                  [][]float64 // from --run-config

	runConfig *string
}

// newNodeFlags defines the flags of 'dpadmm node' with their modes; the defaults come
// from node.DefaultConfig and node.DefaultRADMMParams.
func newNodeFlags(stdout io.Writer) *nodeFlags {
	f := &nodeFlags{m: newModeFlags("node", nodeHelp, stdout)}
	d, gp := node.DefaultConfig(), node.DefaultRADMMParams()
	f.defineCommon()
	f.m.in("walk and neighbour-exchange nodes (every --algo)", "", "walk:*", nodeModeGossip)
	f.defineNetwork(d)
	f.m.in(sectionWalk, "", "walk:*")
	f.defineWalk(d)
	f.sf = addStepFlags(f.m, sectionWalk, "")
	f.m.in(sectionGossip, "", nodeModeGossip)
	f.defineGossip(gp)
	f.m.common("target-epsilon") // the walk's sigma, or neighbour exchange's alpha
	return f
}

func (f *nodeFlags) defineCommon() {
	fs := f.m
	f.run = fs.String("run", "", "run name (required unless --run-config gives it); selects the protocol and topic names")
	f.runConfig = fs.String("run-config", "", "a run configuration file (JSON, YAML, or TOML when named *.toml: the run's announced configuration, every key that enters the config hash); it sets every run parameter that no flag on the command line sets (flags win, and a difference is reported)")
	fs.StringVar(f.runConfig, "config", "", "the same as --run-config")
	f.datadir = fs.String("datadir", "", "data directory: identity, ledger, checkpoints, model.json (required)")
	f.logFormat = fs.String("log-format", "text", "log format: text|json")
	f.logLevel = fs.String("log-level", "warn", "log level: debug|info|warn|error")
	f.noSync = fs.Bool("no-fsync", false, "skip fsync of ledger and checkpoints (tmpfs testnets only; the write order is kept)")
	f.insecure = fs.Bool("insecure-testnet", false, "test harnesses only: allows --seed, --static, --pause-at-hop, --pause-at-iter, --pause-phase, --withhold-acks and --harness-predictor; every listen, peer and member address must be loopback, and model.json then says NO guarantee")
	f.harnessPredictor = fs.String("harness-predictor", "", "test harnesses only: a model file whose predictor describes the run's models in raw units, when the harness prepared --data itself (scaled, classes as indices); model.json carries it with this node's weights")
}

func (f *nodeFlags) defineNetwork(d node.Config) {
	fs := f.m
	f.df = addDataFlags(fs.FlagSet, nodeData)
	f.algo = fs.String("algo", "walk", "algorithm: walk (random-walk ADMM), walk-gadmm (random-walk gradient ADMM), walk-sgd (random-walk DP-SGD), or neighbour exchange: radmm|mradmm|madmm|admm|admm-dvp|admm-pvp; auto: walk-sgd with the scorecard's settings fitted to --min-rows (hops --min-peers x cap: every member gives the same), measured best in most cells")
	f.shard = fs.String("shard", "", "use only shard I/N of --data (iid split with --split-seed), e.g. 0/3; for demos on one dataset")
	f.splitSeed = fs.Uint64("split-seed", 1, "seed of the --shard split")
	f.start = fs.Bool("start", false, "start the run: announce, collect joins, create the token")
	f.minPeers = fs.Int("min-peers", d.MinPeers, "with --start: nodes (starter included) to wait for")
	f.joinWindow = fs.Duration("join-window", 0, "with --start: how long joins stay open once --min-peers is reached (default: profile)")
	f.mismatchWait = fs.Duration("mismatch-wait", 30*time.Second, "a joiner that sees only announcements of its run with another configuration stops after this long, naming the keys that differ; 0 = wait forever")
	f.profile = fs.String("profile", node.ProfileLAN, strings.Join(node.Profiles, "|")+" (listen addresses, discovery, timeouts)")
	fs.Var(&f.listen, "listen", "listen multiaddr (repeatable; default: profile)")
	fs.Var(&f.peers, "peer", "multiaddr with /p2p/ID to dial directly (repeatable)")
	fs.Var(&f.bootstrap, "bootstrap", "bootstrap peer of an existing libp2p network: a multiaddr ending in /p2p/<peer ID>, a /dnsaddr name (resolved to the peers it lists), or 'default' for the public network's bootstrap peers; enables the Kademlia DHT rendezvous on the run name (repeatable)")
	fs.Var(&f.relays, "relay", "circuit-relay v2 relay, a multiaddr ending in /p2p/<peer ID> (repeatable): when AutoNAT finds this node unreachable it reserves a slot there and publishes the relayed address; every member should list the same relays (the gater admits them after the run starts); a relay sees when hops reach or leave the members it carries. Default with --profile internet and --bootstrap: candidates from the DHT routing table")
	f.relayService = fs.Bool("relay-service", false, "serve as a circuit-relay v2 relay for others while AutoNAT finds this node publicly reachable (go-libp2p's default limits: 2 minutes and 128 KiB per relayed connection)")
	f.httpAddr = fs.String("http", "", "serve /status (JSON) and /metrics (Prometheus) on this address, e.g. 127.0.0.1:9090 (a port alone, :9090, means loopback)")
	f.debugStatus = fs.Bool("debug-status", false, "serve the per-hop counters on /status (hops_seen, ledger_entries, model_age_seconds, hop, holding, paused, live counts) and /metrics (hops, hand-offs, custody events, Go and process collectors); polled on several nodes they reveal the secret path of the token, which the network figures assume secret")
	f.statusPeriod = fs.Duration("status-period", d.StatusPeriod, "without --debug-status: /status is a snapshot refreshed this often")
	f.quiet = fs.Bool("quiet", false, "no progress lines on stdout (waiting for peers; hops, updates and epsilon during the run)")
	f.lossName = fs.String("loss", d.Problem.Loss.String(), "loss: logistic|squared")
	f.l1 = fs.Float64("l1", d.Problem.Reg.L1, "L1 weight")
	f.l2 = fs.Float64("l2", d.Problem.Reg.L2, fmt.Sprintf("L2 weight (neighbour exchange: default %g)", node.RADMMDefaultL2))
	f.finalLinger = fs.Duration("final-linger", -1, "how long the node that releases the final model keeps it for members that are down (a member restarted with its --datadir meanwhile asks for it); negative = profile (test 0, lan 1m, internet 2m)")
	f.static = fs.String("static", "", "testnets: fixed membership file written by 'dpadmm testnet --procs' (members in index order with addresses, total rows, initial holder); skips announce/join")
	f.seed = fs.Uint64("seed", 0, "testnets, with --static: seed every random source (next hop, noise) as the simulator does for this seed; the noise is then NOT secure")
	f.swarmKey = fs.String("swarm-key", "", "pre-shared key file (Kubo's swarm.key format; 'dpadmm keys swarm-key'): only peers with the key can connect (libp2p private network, TCP only)")
	f.allowFile = fs.String("allow", "", "allow-list signed by the run's owner ('dpadmm keys allow'): only listed peers are admitted, with their max rows; the owner is the only accepted starter")
	f.rvSecret = fs.String("rendezvous-secret", "", "with --bootstrap: derive the DHT rendezvous key from the run name and this secret (HMAC-SHA256), so that the public DHT does not learn the run name; every member must give the same secret")
	f.starterID = fs.String("starter", "", "pin the starter's peer ID: announcements and start messages of any other peer are ignored")
	f.maxRows = fs.Int("max-rows", 0, "the most rows any member may claim (enters the config hash; weights are n*rows_i/N); 0 = none set: a starter without an allow-list then admits at most 10 times its own rows per member")
	f.minRows = fs.Int("min-rows", 0, "the fewest rows any member may hold (enters the config hash): one row then weighs at most 1/min-rows, which lets --target-epsilon plan the per-record figure before the members are known; 0 = none")
}

func (f *nodeFlags) defineWalk(d node.Config) {
	fs := f.m
	f.hops = fs.Uint64("hops", d.Hops, "number of hops K of the walk")
	f.gamma = fs.Float64("gamma", d.Gamma, "ADMM prox parameter gamma > 0")
	f.lambda = fs.Float64("lambda", d.Lambda, "relaxation lambda in (0,1]")
	f.clip = fs.Float64("clip", d.Clip, "clip bound C on ||x - z||")
	f.sigma = fs.Float64("sigma", d.Sigma, "noise std sigma of eq. (7); 0 = no privacy")
	f.target = fs.Float64("target-epsilon", DefaultTargetEpsilon, targetHelp)
	f.unit = fs.String("privacy-unit", string(privacy.UnitRecord), unitHelp)
	f.maxEps = fs.Float64("max-epsilon", DefaultMaxEpsilon, "refuse to run (before any update, once the members are known) when this node's local epsilon over its cap would exceed this ceiling; 0 = no ceiling")
	f.rowBound = fs.Float64("row-bound", 0, "the public bound on every row's norm the record figure uses (default: 1 when --scale ends in unitball, else none); this node's rows must be within it")
	f.maxUpd = fs.Int("max-updates", d.MaxUpdates, "cap K_i on this node's noisy updates; 0 = no cap")
	f.delta = fs.Float64("delta", d.Delta, "delta of the reported (epsilon, delta)")
	f.budgetEps = fs.Float64("budget-epsilon", 0, "this node's privacy budget at --delta; 0 = none. Before a noisy update that would exceed it the node forwards the token unchanged (no data use, no cost)")
	f.budgetKind = fs.String("budget-kind", d.BudgetKind, "what --budget-epsilon bounds: local (observer of every message) or network (planned worst pair on the complete graph, never above the local figure)")
	f.ackTimeout = fs.Duration("ack-timeout", 0, "wait this long for a hand-off ack before retrying (default: profile)")
	f.heartbeat = fs.Duration("heartbeat", d.Heartbeat, "interval of the fixed-schedule heartbeats to every member (they carry no token information); negative disables heartbeats and the regeneration of a token lost with a crashed holder")
	f.heartbeatMisses = fs.Int("heartbeat-misses", d.HeartbeatMisses, "a member silent for this many heartbeat intervals is declared down (its unreleased backups are regenerated with a new epoch)")
	f.custodyDepth = fs.Int("custody-depth", d.Depth, "keep each release as a backup until the token is this many acked hand-offs further on")
	f.fallbackTimeout = fs.Duration("fallback-timeout", 0, "slow global fallback: after this long without any token, ack or release, re-send this node's last release under a new epoch (recovers a token lost with the holder and every backup holder); 0 = derived, max(2*(heartbeat-misses*heartbeat + ack-timeout), 20 x members x slowest observed hop time); negative disables")
	f.pauseAt = fs.Uint64("pause-at-hop", 0, "fault injection for test harnesses: on receiving the token of this hop, store and ack it, then stop processing (status: paused) until killed; 0 = off")
	f.pausePhase = fs.String("pause-phase", "received", "with --pause-at-hop: received (token stored and acked, not stepped) or custody (stepped, ledger and custody durable, not sent)")
	f.withhold = fs.Bool("withhold-acks", false, "fault injection for test harnesses: read every token hand-off sent to this node and never ack it (the sender redirects the release to another member)")
	fs.hint("gamma", "the even-step proximal weight of neighbour exchange is --even-gamma")
}

func (f *nodeFlags) defineGossip(gp node.RADMMParams) {
	fs := f.m
	f.graphSpec = fs.String("graph", gp.Graph, "graph over the members in membership order: ring|complete|grid|regular:d|er:p")
	f.graphSeed = fs.Uint64("graph-seed", gp.GraphSeed, "seed of a random graph (announced)")
	f.iters = fs.Int("iters", gp.Iters, "number of iterations T (fixed in advance)")
	f.alphaStr = fs.String("alpha", "", fmt.Sprintf("noise density exp(-alpha*||eps||), larger = less noise; inf = no noise (default %g, inf for admm)", gp.Alpha))
	f.eta = fs.Float64("eta", gp.Eta, "penalty eta (mradmm/madmm: eta(k) = eta*q^k)")
	f.etaGrowth = fs.Float64("eta-growth", gp.EtaGrowth, "growth factor q >= 1 of the penalty schedule (mradmm, madmm)")
	f.etaMax = fs.Float64("eta-max", gp.EtaMax, "cap of the geometric penalty schedule; 0 = none")
	f.etaFile = fs.String("eta-file", "", "penalty schedule file as for 'dpadmm testnet --eta-file': one line per k = 1..K holding eta(k) for every member, or one comma-separated eta_i(k) per member by member index (mradmm); announced (enters the config hash); replaces --eta, --eta-growth, --eta-max")
	f.paperC = fs.Float64("paper-c", gp.PaperC, "the paper's C; C_i/B_i = C*n/M, rho/N = C*l2")
	f.evenGamma = fs.Float64("even-gamma", gp.Gamma, "even-step proximal weight gamma >= 0 of the recycled algorithms (the walk's prox parameter is --gamma)")
	f.onMissing = fs.String("on-missing", gp.OnMissing.String(), "a neighbour's vector missing at the barrier: stop|wait|stale")
	f.barrier = fs.Duration("barrier-timeout", gp.Barrier, "wait at an iteration before checking a missing neighbour")
	f.maxWait = fs.Duration("max-wait", gp.MaxWait, "longest wait for a still-connected neighbour; 0 = 10 x --barrier-timeout")
	f.pauseIter = fs.Int("pause-at-iter", 0, "fault injection for test harnesses: once the release of this iteration is durable (journal and ledger), stop before sending it and wait until killed; 0 = off")
	fs.hint("even-gamma", "the walk's prox parameter is --gamma")
}

// mode returns the mode of the parsed flags and how to name it in messages.
func (f *nodeFlags) mode() (mode, what string, err error) {
	return algoMode(*f.algo, *f.sf.local, f.m.isSet("local-step"))
}

// checkWalk checks the values of the walk's flags.
func (f *nodeFlags) checkWalk() error {
	switch {
	case *f.hops < 1:
		return fmt.Errorf("--hops must be >= 1")
	case math.IsNaN(*f.sigma) || *f.sigma < 0 || math.IsInf(*f.sigma, 0):
		return fmt.Errorf("--sigma must be finite and >= 0, got %v", *f.sigma)
	case !(*f.clip > 0):
		return fmt.Errorf("--clip must be > 0, got %v", *f.clip)
	case !(*f.delta > 0 && *f.delta < 1):
		return fmt.Errorf("--delta must be in (0,1), got %v", *f.delta)
	case *f.maxUpd < 0:
		return fmt.Errorf("--max-updates must be >= 0, got %d", *f.maxUpd)
	case math.IsNaN(*f.budgetEps) || *f.budgetEps < 0 || math.IsInf(*f.budgetEps, 0):
		return fmt.Errorf("--budget-epsilon must be finite and >= 0, got %v", *f.budgetEps)
	case *f.budgetKind != walk.BudgetLocal && *f.budgetKind != walk.BudgetNetwork:
		return fmt.Errorf("--budget-kind must be local or network, got %q", *f.budgetKind)
	case *f.heartbeatMisses < 0:
		return fmt.Errorf("--heartbeat-misses must be >= 0, got %d", *f.heartbeatMisses)
	case *f.custodyDepth < 0 || *f.custodyDepth > wire.MaxDepth:
		return fmt.Errorf("--custody-depth must be in 0..%d (0 = 8), got %d", wire.MaxDepth, *f.custodyDepth)
	case *f.ackTimeout < 0:
		return fmt.Errorf("--ack-timeout must be >= 0 (0 = profile), got %v", *f.ackTimeout)
	case *f.pausePhase != "received" && *f.pausePhase != "custody":
		return fmt.Errorf("--pause-phase must be received or custody, got %q", *f.pausePhase)
	}
	if err := checkGamma("node", *f.gamma); err != nil {
		return err
	}
	return checkLambda("node", *f.lambda)
}

// gossipParams checks the neighbour-exchange flags and returns the parameters they give.
func (f *nodeFlags) gossipParams() (*node.RADMMParams, error) {
	alpha, err := parseAlpha(*f.alphaStr, *f.algo)
	if err != nil {
		return nil, fmt.Errorf("--alpha: %v", err)
	}
	pol, err := node.ParseMissingPolicy(*f.onMissing)
	if err != nil {
		return nil, fmt.Errorf("--on-missing: %v", err)
	}
	switch {
	case *f.barrier <= 0 || *f.maxWait < 0 || (*f.maxWait > 0 && *f.maxWait < *f.barrier):
		return nil, fmt.Errorf("--barrier-timeout must be > 0 and --max-wait 0 or >= it")
	case *f.iters < 1:
		return nil, fmt.Errorf("--iters must be >= 1, got %d", *f.iters)
	case !(*f.eta > 0) || math.IsInf(*f.eta, 0):
		return nil, fmt.Errorf("--eta must be finite and > 0, got %v", *f.eta)
	case !(*f.etaGrowth >= 1) || math.IsInf(*f.etaGrowth, 0):
		return nil, fmt.Errorf("--eta-growth must be finite and >= 1, got %v", *f.etaGrowth)
	case !(*f.etaMax >= 0) || math.IsInf(*f.etaMax, 0):
		return nil, fmt.Errorf("--eta-max must be finite and >= 0 (0 = none), got %v", *f.etaMax)
	case !(*f.paperC > 0) || math.IsInf(*f.paperC, 0):
		return nil, fmt.Errorf("--paper-c must be finite and > 0, got %v", *f.paperC)
	case !(*f.evenGamma >= 0) || math.IsInf(*f.evenGamma, 0):
		return nil, fmt.Errorf("--even-gamma (the even-step proximal weight) must be finite and >= 0, got %v", *f.evenGamma)
	case *f.pauseIter < 0 || *f.pauseIter > *f.iters:
		return nil, fmt.Errorf("--pause-at-iter must be in [0, --iters], got %d", *f.pauseIter)
	}
	gp := &node.RADMMParams{Algo: *f.algo, Graph: *f.graphSpec, GraphSeed: *f.graphSeed, Iters: *f.iters, Alpha: alpha,
		Eta: *f.eta, EtaGrowth: *f.etaGrowth, EtaMax: *f.etaMax, Gamma: *f.evenGamma, PaperC: *f.paperC,
		Barrier: *f.barrier, MaxWait: *f.maxWait, OnMissing: pol, PauseAt: *f.pauseIter}
	if f.m.isSet("target-epsilon") {
		if err := gossipTarget(*f.target, f.m.isSet("alpha")); err != nil {
			return nil, err
		}
		gp.TargetEpsilon = *f.target
	}
	if f.etaTable != nil {
		gp.EtaTable = f.etaTable
	}
	if *f.etaFile != "" {
		if f.m.isSet("eta") || f.m.isSet("eta-growth") || f.m.isSet("eta-max") {
			return nil, fmt.Errorf("--eta-file replaces --eta, --eta-growth and --eta-max; give one or the other")
		}
		rows, err := readEtaFile(*f.etaFile)
		if err != nil {
			return nil, fmt.Errorf("--eta-file: %v", err)
		}
		gp.EtaTable = rows
	}
	return gp, nil
}
