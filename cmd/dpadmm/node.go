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
	"github.com/dpadmm/dpadmm/gossip"
	"github.com/dpadmm/dpadmm/node"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/testnet"
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
is ignored, and an optional config_hash must equal the node's) and --seed S (every random source seeded as in the
simulator, so the model equals the simulator's for that seed; such noise is not secure).

Neighbour exchange (testnets): 'dpadmm testnet --procs --algo radmm|mradmm|...' starts
nodes with --gossip-plan FILE, which fixes the run, the membership (peer IDs and loopback
addresses), this node's index, neighbours, algorithm, penalty schedule, constants, f_i(0)
and the noise seed (NOT secure), with --data the node's shard (used as is, no scaling)
and --datadir its data directory. The node exchanges its vector with its neighbours over
/dpadmm/<run>/radmm/1, writes its ledger before every send and, at the end,
DIR/gossip-model.json (model, solve residuals, stale uses). Only --data, --datadir,
--label, --no-fsync, --log-format, --log-level and --run (must match) apply then.

Neighbour exchange (R-ADMM family) on a LAN or an existing libp2p network: with --algo
radmm|mradmm|madmm|admm|admm-dvp|admm-pvp the node takes part in a neighbour-exchange
run instead of a walk. The starter announces algorithm, --graph, --graph-seed, --iters,
--alpha, the penalty schedule (--eta, --eta-growth, --eta-max, or --eta-file FILE in the
format of 'dpadmm testnet --eta-file': one value per line for every member, or one
comma-separated column per member index for MR-ADMM), --gamma (the even-step proximal
weight, default 0.5 here), --paper-c, --loss, --l2 and the data dimension; their hash
must match. The start message fixes the ordered membership and the total row count M;
every member builds the same graph from (--graph, members, --graph-seed), its objective
with C_i/B_i = C*n/M and rho/N = C*l2 (as the simulator), f_i(0) and its noise from
crypto/rand, dials its neighbours and exchanges vectors over /dpadmm/<run>/radmm/1
(ledger fsynced before every send; --barrier-timeout, --max-wait, --on-missing as in
'dpadmm testnet'). Every node writes DIR/model.json with ITS OWN model f_i(T) (the
network average is not known to one node: average the members' files) and its own
Theorem V.1 figure from its ledger, with the theorem's conditions and whether they hold.
Rows must have norm <= 1 after --scale (checked; the node refuses otherwise). --seed S
seeds f_i(0) and the noise as the simulator does for node i (testnets only: NOT secure).
--static FILE fixes the membership in index order and M (total_rows) and skips
announce/join. --http ADDR serves /status (a "gossip" section: iteration, neighbours
reachable, stale uses, ledger entries, the running Theorem V.1 epsilon with its
conditions) and /metrics (dpadmm_gossip_*). The walk flags (--hops, --clip, --sigma,
--lambda, --max-updates, ...) do not apply. A node killed or crashed mid-run resumes
when started again with the same --datadir (and --run, configuration, --listen port):
its journal (DIR/gossip-journal, written with the ledger before every send) restores the
machine exactly and it re-sends the vectors it already released unchanged, never
re-noised; it refuses to resume when the journal does not reproduce its ledger bit for
bit. Neighbours wait for it with --on-missing wait (or a barrier and --max-wait longer
than the restart).

  dpadmm node --run g1 --algo radmm --data a.csv --datadir /tmp/g0 --start --min-peers 2 --graph ring --iters 100 --alpha 2 --paper-c 10 --profile lan
  dpadmm node --run g1 --algo radmm --data b.csv --datadir /tmp/g1 --graph ring --iters 100 --alpha 2 --paper-c 10 --profile lan

Profiles set listen addresses, discovery and timeouts together:
  test      listen 127.0.0.1 TCP, no mDNS, short timeouts (ack 2s, join window 1s)
  lan       listen all interfaces TCP+QUIC, mDNS discovery (ack 10s, join window 5s)
  internet  listen all interfaces TCP+QUIC, no mDNS, NAT port mapping, AutoNAT service,
            hole punching and AutoRelay (circuit-relay v2 on the --relay peers, or on relays
            found in the DHT routing table), use --bootstrap/--peer (ack 30s, join window 30s)

Examples:
  dpadmm node --run demo --data embedded --shard 0/3 --datadir /tmp/n0 --start --min-peers 3 --profile lan
  dpadmm node --run demo --data embedded --shard 1/3 --datadir /tmp/n1 --profile lan

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
	fs := newFlagSet("node", nodeHelp, stdout)
	run := fs.String("run", "", "run name (required); selects the protocol and topic names")
	df := addDataFlags(fs, nodeData)
	data := df.path
	shard := fs.String("shard", "", "use only shard I/N of --data (iid split with --split-seed), e.g. 0/3; for demos on one dataset")
	splitSeed := fs.Uint64("split-seed", 1, "seed of the --shard split")
	datadir := fs.String("datadir", "", "data directory: identity, ledger, checkpoints, model.json (required)")
	start := fs.Bool("start", false, "start the run: announce, collect joins, create the token")
	minPeers := fs.Int("min-peers", 2, "with --start: nodes (starter included) to wait for")
	joinWindow := fs.Duration("join-window", 0, "with --start: how long joins stay open once --min-peers is reached (default: profile)")
	hops := fs.Uint64("hops", 1000, "number of hops K of the walk")
	profile := fs.String("profile", "lan", "test|lan|internet (listen addresses, discovery, timeouts)")
	var listen, peers, bootstrap, relays multiFlag
	fs.Var(&listen, "listen", "listen multiaddr (repeatable; default: profile)")
	fs.Var(&peers, "peer", "multiaddr with /p2p/ID to dial directly (repeatable)")
	fs.Var(&bootstrap, "bootstrap", "bootstrap peer of an existing libp2p network: a multiaddr ending in /p2p/<peer ID>, a /dnsaddr name (resolved to the peers it lists), or 'default' for the public network's bootstrap peers; enables the Kademlia DHT rendezvous on the run name (repeatable)")
	fs.Var(&relays, "relay", "circuit-relay v2 relay, a multiaddr ending in /p2p/<peer ID> (repeatable): when AutoNAT finds this node unreachable it reserves a slot there and publishes the relayed address; every member should list the same relays (the gater admits them after the run starts); a relay sees when hops reach or leave the members it carries. Default with --profile internet and --bootstrap: candidates from the DHT routing table")
	relayService := fs.Bool("relay-service", false, "serve as a circuit-relay v2 relay for others while AutoNAT finds this node publicly reachable (go-libp2p's default limits: 2 minutes and 128 KiB per relayed connection)")
	httpAddr := fs.String("http", "", "serve /status (JSON) and /metrics (Prometheus) on this address, e.g. 127.0.0.1:9090 (a port alone, :9090, means loopback)")
	debugStatus := fs.Bool("debug-status", false, "serve the per-hop counters on /status (hops_seen, ledger_entries, model_age_seconds, hop, holding, paused, live counts) and /metrics (hops, hand-offs, custody events, Go and process collectors); polled on several nodes they reveal the secret path of the token, which the network figures assume secret")
	statusPeriod := fs.Duration("status-period", node.DefaultStatusPeriod, "without --debug-status: /status is a snapshot refreshed this often")
	logFormat := fs.String("log-format", "text", "log format: text|json")
	logLevel := fs.String("log-level", "warn", "log level: debug|info|warn|error")
	quiet := fs.Bool("quiet", false, "no progress lines on stdout (waiting for peers; hops, updates and epsilon during the run)")
	lossName := fs.String("loss", "logistic", "loss: logistic|squared")
	l1 := fs.Float64("l1", 0, "L1 weight")
	l2 := fs.Float64("l2", 1e-2, "L2 weight")
	gamma := fs.Float64("gamma", 100, "ADMM prox parameter gamma > 0")
	lambda := fs.Float64("lambda", 0.5, "relaxation lambda in (0,1]")
	clip := fs.Float64("clip", 0.1, "clip bound C on ||x - z||")
	sigma := fs.Float64("sigma", 1, "noise std sigma of eq. (7); 0 = no privacy")
	maxUpd := fs.Int("max-updates", 100, "cap K_i on this node's noisy updates; 0 = no cap")
	delta := fs.Float64("delta", 1e-5, "delta of the reported (epsilon, delta)")
	budgetEps := fs.Float64("budget-epsilon", 0, "this node's privacy budget at --delta; 0 = none. Before a noisy update that would exceed it the node forwards the token unchanged (no data use, no cost)")
	budgetKind := fs.String("budget-kind", "local", "what --budget-epsilon bounds: local (observer of every message) or network (planned worst pair on the complete graph, never above the local figure)")
	noSync := fs.Bool("no-fsync", false, "skip fsync of ledger and checkpoints (tmpfs testnets only; the write order is kept)")
	finalLinger := fs.Duration("final-linger", -1, "how long the node that releases the final model keeps it for members that are down (a member restarted with its --datadir meanwhile asks for it); negative = profile (test 0, lan 1m, internet 2m)")
	ackTimeout := fs.Duration("ack-timeout", 0, "wait this long for a hand-off ack before retrying (default: profile)")
	heartbeat := fs.Duration("heartbeat", time.Second, "interval of the fixed-schedule heartbeats to every member (they carry no token information); negative disables heartbeats and the regeneration of a token lost with a crashed holder")
	heartbeatMisses := fs.Int("heartbeat-misses", 15, "a member silent for this many heartbeat intervals is declared down (its unreleased backups are regenerated with a new epoch)")
	custodyDepth := fs.Int("custody-depth", 8, "keep each release as a backup until the token is this many acked hand-offs further on")
	fallbackTimeout := fs.Duration("fallback-timeout", 0, "slow global fallback: after this long without any token, ack or release, re-send this node's last release under a new epoch (recovers a token lost with the holder and every backup holder); 0 = derived, max(2*(heartbeat-misses*heartbeat + ack-timeout), 20 x members x slowest observed hop time); negative disables")
	static := fs.String("static", "", "testnets: fixed membership file written by 'dpadmm testnet --procs' (members in index order with addresses, total rows, initial holder); skips announce/join")
	seed := fs.Uint64("seed", 0, "testnets, with --static: seed every random source (next hop, noise) as the simulator does for this seed; the noise is then NOT secure")
	pauseAt := fs.Uint64("pause-at-hop", 0, "fault injection for test harnesses: on receiving the token of this hop, store and ack it, then stop processing (status: paused) until killed; 0 = off")
	gossipPlan := fs.String("gossip-plan", "", "testnets: run one node of a neighbour-exchange run from this plan file (written by 'dpadmm testnet --procs --algo radmm|...'); see above")
	algo := fs.String("algo", "walk", "algorithm: walk (random-walk ADMM), walk-gadmm (random-walk gradient ADMM), walk-sgd (random-walk DP-SGD), or neighbour exchange: radmm|mradmm|madmm|admm|admm-dvp|admm-pvp")
	sf := addStepFlags(fs)
	graphSpec := fs.String("graph", "ring", "neighbour exchange: graph over the members in membership order: ring|complete|grid|regular:d|er:p")
	graphSeed := fs.Uint64("graph-seed", 1, "neighbour exchange: seed of a random graph (announced)")
	iters := fs.Int("iters", 100, "neighbour exchange: number of iterations T (fixed in advance)")
	alphaStr := fs.String("alpha", "", "neighbour exchange: noise density exp(-alpha*||eps||), larger = less noise; inf = no noise (default 2, inf for admm)")
	eta := fs.Float64("eta", 1, "neighbour exchange: penalty eta (mradmm/madmm: eta(k) = eta*q^k)")
	etaGrowth := fs.Float64("eta-growth", 1, "neighbour exchange: growth factor q >= 1 of the penalty schedule (mradmm, madmm)")
	etaMax := fs.Float64("eta-max", 0, "neighbour exchange: cap of the geometric penalty schedule; 0 = none")
	etaFile := fs.String("eta-file", "", "neighbour exchange: penalty schedule file as for 'dpadmm testnet --eta-file': one line per k = 1..K holding eta(k) for every member, or one comma-separated eta_i(k) per member by member index (mradmm); announced (enters the config hash); replaces --eta, --eta-growth, --eta-max")
	paperC := fs.Float64("paper-c", 10, "neighbour exchange: the paper's C; C_i/B_i = C*n/M, rho/N = C*l2")
	onMissing := fs.String("on-missing", "stop", "neighbour exchange: a neighbour's vector missing at the barrier: stop|wait|stale")
	barrier := fs.Duration("barrier-timeout", 30*time.Second, "neighbour exchange: wait at an iteration before checking a missing neighbour")
	maxWait := fs.Duration("max-wait", 0, "neighbour exchange: longest wait for a still-connected neighbour; 0 = 10 x --barrier-timeout")
	withhold := fs.Bool("withhold-acks", false, "fault injection for test harnesses: read every token hand-off sent to this node and never ack it (the sender redirects the release to another member)")
	pausePhase := fs.String("pause-phase", "received", "with --pause-at-hop: received (token stored and acked, not stepped) or custody (stepped, ledger and custody durable, not sent)")
	swarmKey := fs.String("swarm-key", "", "pre-shared key file (Kubo's swarm.key format; 'dpadmm keys swarm-key'): only peers with the key can connect (libp2p private network, TCP only)")
	allowFile := fs.String("allow", "", "allow-list signed by the run's owner ('dpadmm keys allow'): only listed peers are admitted, with their max rows; the owner is the only accepted starter")
	rvSecret := fs.String("rendezvous-secret", "", "with --bootstrap: derive the DHT rendezvous key from the run name and this secret (HMAC-SHA256), so that the public DHT does not learn the run name; every member must give the same secret")
	starterID := fs.String("starter", "", "pin the starter's peer ID: announcements and start messages of any other peer are ignored")
	maxRows := fs.Int("max-rows", 0, "the most rows any member may claim (enters the config hash; weights are n*rows_i/N); 0 = no bound")
	insecure := fs.Bool("insecure-testnet", false, "test harnesses only: allows --seed, --static, --gossip-plan, --pause-at-hop, --pause-phase and --withhold-acks; every listen, peer and member address must be loopback, and model.json then says NO guarantee")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	bad := func(format string, a ...any) error { return usagef("node", format, a...) }
	var harness []string
	fs.Visit(func(f *flag.Flag) {
		if harnessFlags[f.Name] {
			harness = append(harness, "--"+f.Name)
		}
	})
	if len(harness) > 0 && !*insecure {
		return bad("%s: test-harness flag(s) (seeded noise, fixed membership, fault injection) that void every guarantee; they need --insecure-testnet, which allows loopback addresses only", strings.Join(harness, ", "))
	}
	if *run != "" {
		if err := checkRunName("node", *run); err != nil {
			return err
		}
	}
	if *gossipPlan != "" {
		return runGossipNode(ctx, fs, *gossipPlan, *run, *data, *df.label, *datadir, *noSync, *logFormat, *logLevel, stdout, stderr, bad)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var gp *node.GossipParams
	var step walk.StepParams
	if _, isWalk := walkAlgos[*algo]; !isWalk {
		var walkOnly []string
		for _, f := range []string{"hops", "lambda", "clip", "sigma", "max-updates", "pause-at-hop",
			"pause-phase", "withhold-acks", "ack-timeout", "heartbeat", "heartbeat-misses", "fallback-timeout", "custody-depth", "delta", "budget-epsilon", "budget-kind",
			"local-step", "step-size", "beta", "nu", "sample-rate", "strongly-convex"} {
			if set[f] {
				walkOnly = append(walkOnly, "--"+f)
			}
		}
		if len(walkOnly) > 0 {
			return bad("%s apply to the walk only, not to --algo %s", strings.Join(walkOnly, ", "), *algo)
		}
		alpha, err := parseAlpha(*alphaStr, *algo)
		if err != nil {
			return bad("--alpha: %v", err)
		}
		pol, err := node.ParseMissingPolicy(*onMissing)
		if err != nil {
			return bad("--on-missing: %v", err)
		}
		g := 0.5
		if set["gamma"] {
			g = *gamma
		}
		if *barrier <= 0 || *maxWait < 0 || (*maxWait > 0 && *maxWait < *barrier) {
			return bad("--barrier-timeout must be > 0 and --max-wait 0 or >= it")
		}
		if _, err := gossip.ParseAlgo(*algo); err != nil {
			return bad("unknown --algo %q (available: walk, walk-gadmm, walk-sgd, radmm, mradmm, madmm, admm, admm-dvp, admm-pvp)", *algo)
		}
		switch {
		case *iters < 1:
			return bad("--iters must be >= 1, got %d", *iters)
		case !(*eta > 0) || math.IsInf(*eta, 0):
			return bad("--eta must be finite and > 0, got %v", *eta)
		case !(*etaGrowth >= 1) || math.IsInf(*etaGrowth, 0):
			return bad("--eta-growth must be finite and >= 1, got %v", *etaGrowth)
		case !(*etaMax >= 0) || math.IsInf(*etaMax, 0):
			return bad("--eta-max must be finite and >= 0 (0 = none), got %v", *etaMax)
		case !(*paperC > 0) || math.IsInf(*paperC, 0):
			return bad("--paper-c must be finite and > 0, got %v", *paperC)
		}
		gp = &node.GossipParams{Algo: *algo, Graph: *graphSpec, GraphSeed: *graphSeed, Iters: *iters, Alpha: alpha,
			Eta: *eta, EtaGrowth: *etaGrowth, EtaMax: *etaMax, Gamma: g, PaperC: *paperC,
			Barrier: *barrier, MaxWait: *maxWait, OnMissing: pol}
		if *etaFile != "" {
			if set["eta"] || set["eta-growth"] || set["eta-max"] {
				return bad("--eta-file replaces --eta, --eta-growth and --eta-max; give one or the other")
			}
			rows, err := readEtaFile(*etaFile)
			if err != nil {
				return bad("--eta-file: %v", err)
			}
			gp.EtaTable = rows
		}
	} else {
		for _, f := range []string{"graph", "graph-seed", "iters", "alpha", "eta", "eta-growth", "eta-max", "eta-file", "paper-c",
			"on-missing", "barrier-timeout", "max-wait"} {
			if set[f] {
				return bad("--%s applies to the neighbour-exchange algorithms (--algo radmm|...), not to the walk", f)
			}
		}
		var err error
		if step, err = sf.params(*algo, set); err != nil {
			return bad("%v", err)
		}
	}
	switch {
	case fs.NArg() > 0:
		return bad("unexpected argument %q", fs.Arg(0))
	case *run == "":
		return bad("--run is required")
	case *data == "":
		return bad("--data is required")
	case *datadir == "":
		return bad("--datadir is required")
	case *hops < 1:
		return bad("--hops must be >= 1")
	case *minPeers < 1:
		return bad("--min-peers must be >= 1")
	case math.IsNaN(*sigma) || *sigma < 0 || math.IsInf(*sigma, 0):
		return bad("--sigma must be finite and >= 0, got %v", *sigma)
	case !(*clip > 0):
		return bad("--clip must be > 0, got %v", *clip)
	case !(*delta > 0 && *delta < 1):
		return bad("--delta must be in (0,1), got %v", *delta)
	case *logFormat != "text" && *logFormat != "json":
		return bad("--log-format must be text or json, got %q", *logFormat)
	case *maxUpd < 0:
		return bad("--max-updates must be >= 0, got %d", *maxUpd)
	case math.IsNaN(*budgetEps) || *budgetEps < 0 || math.IsInf(*budgetEps, 0):
		return bad("--budget-epsilon must be finite and >= 0, got %v", *budgetEps)
	case *budgetKind != "local" && *budgetKind != "network":
		return bad("--budget-kind must be local or network, got %q", *budgetKind)
	case *heartbeatMisses < 0:
		return bad("--heartbeat-misses must be >= 0, got %d", *heartbeatMisses)
	case *custodyDepth < 0 || *custodyDepth > node.MaxDepth:
		return bad("--custody-depth must be in 0..%d (0 = 8), got %d", node.MaxDepth, *custodyDepth)
	case *ackTimeout < 0:
		return bad("--ack-timeout must be >= 0 (0 = profile), got %v", *ackTimeout)
	case *joinWindow < 0:
		return bad("--join-window must be >= 0 (0 = profile), got %v", *joinWindow)
	}
	if gp == nil {
		if err := checkGamma("node", *gamma); err != nil {
			return err
		}
		if err := checkLambda("node", *lambda); err != nil {
			return err
		}
	} else if !(*gamma >= 0) || math.IsInf(*gamma, 0) {
		return bad("--gamma (the even-step proximal weight) must be finite and >= 0, got %v", *gamma)
	}
	prob, err := checkProblemFlags("node", *lossName, *l1, *l2)
	if err != nil {
		return err
	}
	cfg := node.Config{Run: *run, DataDir: *datadir, Start: *start, MinPeers: *minPeers, Hops: *hops,
		Gamma: *gamma, Lambda: *lambda, Clip: *clip, Sigma: *sigma, Step: step, MaxUpdates: *maxUpd, Delta: *delta,
		BudgetEpsilon: *budgetEps, BudgetKind: *budgetKind,
		Peers: peers, Bootstrap: bootstrap, Relays: relays, RelayService: *relayService, HTTP: httpListen(*httpAddr), NoSync: *noSync,
		DebugStatus: *debugStatus, StatusPeriod: *statusPeriod, RendezvousSecret: *rvSecret}
	switch *profile {
	case "test":
		cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
		cfg.AckTimeout, cfg.JoinWindow = 2*time.Second, time.Second
	case "lan":
		cfg.Listen = []string{"/ip4/0.0.0.0/tcp/0", "/ip4/0.0.0.0/udp/0/quic-v1"}
		cfg.MDNS, cfg.AckTimeout, cfg.JoinWindow = true, 10*time.Second, 5*time.Second
		cfg.FinalLinger = time.Minute
	case "internet":
		cfg.Listen = []string{"/ip4/0.0.0.0/tcp/0", "/ip4/0.0.0.0/udp/0/quic-v1"}
		cfg.NAT = true
		cfg.AckTimeout, cfg.JoinWindow = 30*time.Second, 30*time.Second
		cfg.FinalLinger = 2 * time.Minute
	default:
		return bad("--profile must be test, lan or internet, got %q", *profile)
	}
	if len(listen) > 0 {
		cfg.Listen = listen
	}
	if *finalLinger >= 0 {
		cfg.FinalLinger = *finalLinger
	}
	if err := membershipFlags(&cfg, *swarmKey, *allowFile, *starterID, *maxRows); err != nil {
		return bad("%v", err)
	}
	if *insecure {
		for _, a := range append(append(append(append([]string(nil), cfg.Listen...), peers...), bootstrap...), relays...) {
			if !loopbackAddr(a) {
				return bad("--insecure-testnet allows loopback addresses only, got %s (use --profile test or --listen /ip4/127.0.0.1/tcp/0)", a)
			}
		}
		cfg.Insecure = true
	}
	cfg.Heartbeat, cfg.HeartbeatMisses, cfg.Depth = *heartbeat, *heartbeatMisses, *custodyDepth
	cfg.FallbackTimeout = *fallbackTimeout
	if *ackTimeout > 0 {
		cfg.AckTimeout = *ackTimeout
	}
	if cfg.FallbackTimeout > 0 && cfg.FallbackTimeout <= cfg.AckTimeout {
		return bad("--fallback-timeout (%v) must exceed the ack timeout (%v); 0 = derived, negative = off", cfg.FallbackTimeout, cfg.AckTimeout)
	}
	cfg.PauseAtHop = *pauseAt
	cfg.WithholdAcks = *withhold
	switch *pausePhase {
	case "received":
	case "custody":
		cfg.PauseAfterStep = true
	default:
		return bad("--pause-phase must be received or custody, got %q", *pausePhase)
	}
	seedSet := false
	fs.Visit(func(f *flag.Flag) { seedSet = seedSet || f.Name == "seed" })
	if seedSet && *static == "" && gp == nil {
		return bad("--seed needs --static (seeded randomness is for testnets only)")
	}
	if *joinWindow > 0 {
		cfg.JoinWindow = *joinWindow
	}
	cfg.Problem = prob
	loss := prob.Loss
	if err := df.check(loss); err != nil {
		return bad("%v", err)
	}
	log, err := node.NewLogger(stderr, *logFormat, *logLevel)
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

	// One public scaling for the run: unitball (no parameters), --scale-file, or fitted on
	// the whole public embedded data before the shard is taken; its fingerprint enters the
	// config hash and model.json records it.
	ld, err := df.load(loadRequest{loss: loss})
	if err != nil {
		return err
	}
	d := ld.train
	cfg.Scaling = ld.scaler
	if *shard != "" {
		i, n, ok := parseShard(*shard)
		if !ok {
			return bad("--shard must be I/N with 0 <= I < N, got %q", *shard)
		}
		sh, err := consensus.Split(d, n, "iid", *splitSeed)
		if err != nil {
			return err
		}
		d = sh[i]
	}
	cfg.Data = d
	if *static != "" {
		b, err := os.ReadFile(*static)
		if err != nil {
			return err
		}
		sf, err := node.ParseStatic(b)
		if err != nil {
			return fmt.Errorf("%s: %w", *static, err)
		}
		if sf.Run != *run {
			return fmt.Errorf("%s is for run %q, not %q", *static, sf.Run, *run)
		}
		for _, a := range sf.PeerAddrs() {
			if !loopbackAddr(a) {
				return fmt.Errorf("%s: member address %s is not loopback (--insecure-testnet)", *static, a)
			}
		}
		n := len(sf.Members)
		cfg.Members, cfg.Holder = sf.IDs(), sf.Holder
		cfg.Weight = float64(n) * float64(cfg.Data.Rows) / float64(sf.TotalRows)
		cfg.Peers = append(cfg.Peers, sf.PeerAddrs()...)
		cfg.WaitMembers = 30 * time.Second
		if gp != nil {
			// Neighbour exchange: M from the file; the holder does not apply; RunGossip
			// dials the neighbours (WaitMembers only keeps New from dialling everyone).
			gp.TotalRows, cfg.Weight, cfg.Holder = sf.TotalRows, 0, 0
			cfg.Gossip = gp
			if h := cfg.RunConfig().Hash(); sf.ConfigHash != "" && sf.ConfigHash != h {
				return fmt.Errorf("%s is for config hash %.12s, this node's configuration hashes to %.12s (different data dimensions or hyperparameters)",
					*static, sf.ConfigHash, h)
			}
		} else if seedSet {
			s := *seed
			cfg.Sources = func(i int) (*rand.PCG, *rand.PCG) { return node.SeededSources(s, i) }
			cfg.AllowSeededNoise = true
			if want := node.SeededHolder(s, n); want != sf.Holder {
				return fmt.Errorf("%s names holder %d, seed %d gives %d", *static, sf.Holder, s, want)
			}
		}
	}

	if gp != nil {
		cfg.Gossip = gp
		if seedSet {
			// f_i(0) and the noise as the simulator draws them for node i and this seed.
			s := *seed
			cfg.Rand = func(i int) *rand.Rand { return node.SeededGossipInit(s, i) }
			cfg.Noise = func(i int) privacy.Noise { return node.SeededNoise(s, i) }
			cfg.AllowSeededNoise = true
		}
		return runGossipMember(ctx, cfg, *datadir, stdout, *quiet)
	}

	nd, err := node.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer nd.Close()
	fmt.Fprintf(stdout, "node %s run %q config %.12s\n", nd.ID(), *run, nd.ConfigHash())
	for _, a := range nd.Host.Addrs() {
		fmt.Fprintf(stdout, "  listening on %s/p2p/%s\n", a, nd.ID())
	}
	if nd.HTTPAddr != "" {
		fmt.Fprintf(stdout, "  status on http://%s/status, metrics on /metrics\n", nd.HTTPAddr)
	}
	stopProgress := nodeProgress(ctx, nd, *run, newProgress(stdout, *quiet))
	m, err := nd.Run(ctx)
	stopProgress()
	if err != nil {
		if ctx.Err() != nil {
			return interrupted("stopped before the run ended; its state is checkpointed in %s (start the node again with the same --datadir to resume)", *datadir)
		}
		return err
	}
	fmt.Fprintf(stdout, "run %q done after %d hops: model written to %s\n", m.Run, m.Hops, filepath.Join(*datadir, node.ModelFile))
	fmt.Fprintf(stdout, "  own noisy updates %d, ledger entries %d\n", m.Privacy.Updates, m.Privacy.LedgerEntries)
	for _, b := range []node.BoundJSON{m.Privacy.Local, m.Privacy.Network} {
		fmt.Fprintf(stdout, "  epsilon %s at delta %g: %s; conditions: %s (hold: %v)\n", b.Epsilon, m.Privacy.Delta, b.Theorem, b.Conditions, b.ConditionsHold)
	}
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
	fmt.Fprintf(stdout, "node %s run %q algo %s config %.12s\n", nd.ID(), cfg.Run, cfg.Gossip.Algo, nd.ConfigHash())
	for _, a := range nd.Host.Addrs() {
		fmt.Fprintf(stdout, "  listening on %s/p2p/%s\n", a, nd.ID())
	}
	if nd.HTTPAddr != "" {
		fmt.Fprintf(stdout, "  status on http://%s/status (section gossip), metrics on /metrics (dpadmm_gossip_*)\n", nd.HTTPAddr)
	}
	stopProgress := nodeProgress(ctx, nd, cfg.Run, newProgress(stdout, quiet))
	m, err := nd.RunGossip(ctx)
	stopProgress()
	if err != nil {
		if ctx.Err() != nil {
			return interrupted("stopped before the run ended; its journal and ledger are in %s (start the node again with the same --datadir to resume)", datadir)
		}
		return err
	}
	fmt.Fprintf(stdout, "run %q node %d of %d (%s, neighbours %v): %d iterations done; this node's own model f_i(T) written to %s\n",
		m.Run, m.Index, m.Nodes, m.Graph, m.Neighbors, m.Iters, filepath.Join(datadir, node.ModelFile))
	fmt.Fprintf(stdout, "  %d stale uses, %d inexact solves, %d ledger entries\n", len(m.Stale), m.Inexact, m.Privacy.LedgerEntries)
	fmt.Fprintf(stdout, "  this node's pure epsilon %s (delta 0): %s; conditions: %s (hold: %v", m.Privacy.Epsilon, m.Privacy.Theorem, m.Privacy.Conditions, m.Privacy.ConditionsHold)
	if m.Privacy.Reason != "" {
		fmt.Fprintf(stdout, "; %s", m.Privacy.Reason)
	}
	fmt.Fprintf(stdout, "); noise secure: %v\n", m.Privacy.SecureNoise)
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

// runGossipNode runs one node of a neighbour-exchange testnet from a plan file
// (testnet.GossipPlan, written by 'dpadmm testnet --procs').
func runGossipNode(ctx context.Context, fs *flag.FlagSet, planPath, run, data, label, datadir string, noSync bool, logFormat, logLevel string,
	stdout, stderr io.Writer, bad func(string, ...any) error) error {
	allowed := map[string]bool{"gossip-plan": true, "insecure-testnet": true, "data": true, "datadir": true, "label": true, "no-fsync": true,
		"log-format": true, "log-level": true, "run": true}
	var other []string
	fs.Visit(func(f *flag.Flag) {
		if !allowed[f.Name] {
			other = append(other, "--"+f.Name)
		}
	})
	switch {
	case fs.NArg() > 0:
		return bad("unexpected argument %q", fs.Arg(0))
	case len(other) > 0:
		return bad("%s do(es) not apply with --gossip-plan (the plan fixes the run)", strings.Join(other, ", "))
	case data == "":
		return bad("--data is required")
	case datadir == "":
		return bad("--datadir is required")
	case logFormat != "text" && logFormat != "json":
		return bad("--log-format must be text or json, got %q", logFormat)
	}
	b, err := os.ReadFile(planPath)
	if err != nil {
		return err
	}
	plan, err := testnet.ParseGossipPlan(b)
	if err != nil {
		return fmt.Errorf("%s: %w", planPath, err)
	}
	for _, m := range plan.Members {
		for _, a := range m.Addrs {
			if !loopbackAddr(a) {
				return fmt.Errorf("%s: member address %s is not loopback (--insecure-testnet)", planPath, a)
			}
		}
	}
	if run != "" && run != plan.Run {
		return fmt.Errorf("%s is for run %q, not %q", planPath, plan.Run, run)
	}
	log, err := node.NewLogger(stderr, logFormat, logLevel)
	if err != nil {
		return bad("--log-level: %v", err)
	}
	node.RouteLibp2pLogs(log)
	d, err := consensus.Load(data, consensus.LoadOptions{Label: label})
	if err != nil {
		return err
	}
	out, err := testnet.RunGossipPlanNode(ctx, plan, d, datadir, noSync, log.With().Int("node", plan.Self).Logger())
	if err != nil {
		if ctx.Err() != nil {
			return interrupted("stopped before the run ended; the state reached is in %s", filepath.Join(datadir, testnet.GossipOutputFile))
		}
		return err
	}
	fmt.Fprintf(stdout, "run %q node %d (%s): %d iterations done, model written to %s; %d stale uses, %d frames rejected\n",
		out.Run, out.Self, out.Peer, out.Iter, filepath.Join(datadir, testnet.GossipOutputFile), len(out.Stale), out.Rejected)
	return nil
}

// harnessFlags are the flags of 'dpadmm node' that only test harnesses may use: each needs
// --insecure-testnet.
var harnessFlags = map[string]bool{"seed": true, "static": true, "gossip-plan": true, "pause-at-hop": true,
	"pause-phase": true, "withhold-acks": true}

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
