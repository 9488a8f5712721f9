package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/consensus/graph"
	"github.com/dpadmm/dpadmm/node"
	"github.com/dpadmm/dpadmm/node/drive"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/testnet"
	"github.com/dpadmm/dpadmm/testnet/sim"
	"github.com/dpadmm/dpadmm/walk"
)

// Networks of 'dpadmm testnet', the second part of its modes ("walk:STEP/NET",
// "gossip/NET"): the simulator, hosts in this process, one process per node.
const (
	netSim   = "sim"
	netMem   = "mem"
	netProcs = "procs"
)

// testnetFlags are the flags of 'dpadmm testnet'.
type testnetFlags struct {
	m  *modeFlags
	df *dataFlags
	sf *stepFlags

	// every mode
	sim, asJSON, quiet               *bool
	mem                              *bool
	procs                            procsFlag
	algo, split, lossName, graphSpec *string
	reportPath                       *string
	nodes                            *int
	seed                             *uint64
	l1, l2, delta                    *float64
	curvePath                        *string
	netDir                           *string
	fsync                            *bool

	// the walk
	gamma, lambda, clip, sigma, budgetEps, target *float64
	// targetMsg reports the --target-epsilon calibration ("" without one).
	targetMsg                                                       string
	hops, curveEvery, killAt                                        *uint64
	maxUpd                                                          *int
	tracePath, pairsPath, plotPath, plotKind, coalition, budgetKind *string
	unit                                                            *string
	ledgerDir, transport, killPhase, withhold                       *string

	// neighbour exchange
	iters, killIter, killNode                 *int
	alphaStr, etaFile, onMissing              *string
	eta, etaGrowth, etaMax, paperC, evenGamma *float64
	barrierTimeout, maxWait                   *time.Duration
	ackTimeout                                *time.Duration
}

// newTestnetFlags defines the flags of 'dpadmm testnet' with their modes; the defaults
// are those of testnet.DefaultOptions and testnet.DefaultGossipOptions (the walk's
// hyperparameters are node.DefaultConfig's).
func newTestnetFlags(stdout io.Writer) *testnetFlags {
	f := &testnetFlags{m: newModeFlags("testnet", testnetHelp, stdout)}
	o, g := testnet.DefaultOptions(), testnet.DefaultGossipOptions()
	f.defineCommon(o, g)
	f.m.in(sectionWalk, "", "walk:*/*")
	f.defineWalk(o)
	f.sf = addStepFlags(f.m, sectionWalk, "/*")
	f.m.in("the random walk on the simulator (--sim)", "", "walk:*/"+netSim)
	f.budgetEps = f.m.Float64("budget-epsilon", 0, "per-node privacy budget epsilon (at --delta); 0 = no budget. A node whose next noisy update would exceed it forwards the token unchanged")
	f.budgetKind = f.m.String("budget-kind", walk.BudgetLocal, "what --budget-epsilon bounds: local (observer of every message) or network (worst pair, planned)")
	f.ledgerDir = f.m.String("ledger-dir", "", "write one append-only ledger file per node to this directory")
	f.curveEvery = f.m.Uint64("curve-every", 0, "hops between curve points; 0 = --hops / 100 (about 100 points)")
	f.m.in("the random walk over real hosts (--mem, --procs)", "the random walk with --mem", "walk:*/"+netMem)
	f.transport = f.m.String("transport", testnet.TransportTCP, "with --mem: tcp (loopback TCP) or mock (go-libp2p's in-memory mock network, for thousands of hosts)")
	f.m.in("the random walk over real hosts (--mem, --procs)", "the random walk with --procs", "walk:*/"+netProcs)
	f.killAt = f.m.Uint64("kill-holder-at", 0, "with --procs: SIGKILL the token holder at this hop (hops done) and restart it on the same data directory; 0 = no kill")
	f.killPhase = f.m.String("kill-phase", "received", "with --kill-holder-at: received (the holder has acked the token, not stepped it) or custody (stepped; ledger entry and outgoing token durable, not sent)")
	f.m.in("the random walk over real hosts (--mem, --procs)", "fault injection", "walk:*/"+netMem, "walk:*/"+netProcs)
	f.ackTimeout = f.m.Duration("ack-timeout", 0, "the nodes' hand-off ack timeout; 0 = the mode's default (10 s with --procs), 300ms with --withhold-acks")
	f.withhold = f.m.String("withhold-acks", "", "fault injection: comma-separated node indices (not the initial holder) that read every token hand-off and never ack it, so each release sent to them is redirected and seen by two peers; the report charges every such view")
	f.m.in(sectionGossip, "", "gossip/*")
	f.defineGossip(g)
	f.m.common("target-epsilon") // the walk's sigma, or neighbour exchange's alpha
	f.defineNetworks()
	return f
}

func (f *testnetFlags) defineCommon(o sim.Options, g sim.GossipOptions) {
	fs := f.m
	f.sim = fs.Bool("sim", true, "run the deterministic in-process simulator")
	f.mem = fs.Bool("mem", false, "run over --nodes real libp2p hosts in this process (loopback TCP), the walk or a neighbour-exchange --algo; same report as --sim")
	fs.Var(&f.procs, "procs", "run one 'dpadmm node' process per node on loopback (--procs with --nodes N, or --procs=N); same report as --sim")
	f.algo = fs.String("algo", "walk", "algorithm: walk (random-walk private ADMM), walk-gadmm, walk-sgd, or neighbour exchange: admm|radmm|mradmm|madmm|admm-dvp|admm-pvp; auto: walk-sgd with the scorecard's settings fitted to the rows per node (hops nodes x cap), measured best in most cells")
	f.nodes = fs.Int("nodes", 0, fmt.Sprintf("number of nodes n (default %d for the walk, %d for neighbour exchange)", o.Nodes, g.Nodes))
	f.df = addDataFlags(fs.FlagSet, testnetData)
	f.split = fs.String("split", o.Split, "how rows are split over nodes: iid|contiguous|label")
	f.lossName = fs.String("loss", o.Problem.Loss.String(), "loss: logistic|squared")
	f.l1 = fs.Float64("l1", o.Problem.Reg.L1, "L1 weight a: adds a*||w||_1")
	f.l2 = fs.Float64("l2", o.Problem.Reg.L2, fmt.Sprintf("L2 weight mu: adds (mu/2)*||w||^2 (neighbour exchange: default %g)", node.RADMMDefaultL2))
	f.seed = fs.Uint64("seed", o.Seed, "seed of the simulation (data split, path, noise)")
	f.delta = fs.Float64("delta", o.Delta, "delta of the (epsilon, delta) figures")
	f.reportPath = fs.String("report", "", "write the JSON report to this file; - = stdout (the summary then goes to stderr)")
	f.asJSON = fs.Bool("json", false, "print the JSON report to stdout (the summary then goes to stderr)")
	f.quiet = fs.Bool("quiet", false, "no progress line and no summary")
	fs.in("", "the simulator and neighbour exchange (the walk over --mem or --procs runs on the complete graph)", "walk:*/"+netSim, "gossip/*")
	f.graphSpec = fs.String("graph", "", fmt.Sprintf("graph: complete|ring|grid|er:p|regular:d|file:PATH (default %s for the walk, %s for neighbour exchange)", o.Graph, g.Graph))
}

// defineNetworks defines the flags of one network whatever the algorithm.
func (f *testnetFlags) defineNetworks() {
	fs := f.m
	fs.in("the simulator (--sim)", "", "*/"+netSim)
	f.curvePath = fs.String("curve", "", "write the learning curve as CSV to this file: hop,objective,gap for the walk, iter,avg_loss,objective,test_error,privacy_bound for neighbour exchange")
	fs.in("real hosts (--mem, --procs)", "", "*/"+netMem, "*/"+netProcs)
	f.netDir = fs.String("dir", "", "keep the nodes' data directories (ledgers, model.json) and logs here (default: a temporary directory, removed)")
	f.fsync = fs.Bool("fsync", false, "fsync every ledger and checkpoint write (default off: testnet)")
}

func (f *testnetFlags) defineWalk(o sim.Options) {
	fs := f.m
	f.gamma = fs.Float64("gamma", o.Gamma, "ADMM prox parameter gamma > 0")
	f.lambda = fs.Float64("lambda", o.Lambda, "relaxation lambda in (0,1]; 0.5 is classical ADMM")
	f.clip = fs.Float64("clip", o.Clip, "clip bound C on ||x - z||")
	f.sigma = fs.Float64("sigma", o.Sigma, "std of eta in eq. (7) (noise on u has std lambda*sigma); 0 = no privacy")
	f.target = fs.Float64("target-epsilon", DefaultTargetEpsilon, targetHelp)
	f.unit = fs.String("privacy-unit", string(privacy.UnitRecord), unitHelp)
	f.hops = fs.Uint64("hops", o.Hops, "number of hops (token hand-offs); default --nodes x --max-updates, as many as the caps allow noisy updates (1000 without a cap)")
	f.maxUpd = fs.Int("max-updates", o.MaxUpdates, "cap K_i on noisy updates per node; 0 = no cap")
	f.tracePath = fs.String("trace", "", "write the walk trace (holder and noisy flag per hop) to this file, for 'dpadmm account trace'")
	f.pairsPath = fs.String("pairs", "", "write the full pairwise matrix as CSV i,j,planned_epsilon,realised_epsilon (ordered pairs i != j)")
	f.plotPath = fs.String("plot", "", "draw the pairwise epsilon heat map (PNG) to this file")
	f.plotKind = fs.String("plot-kind", sim.PlotBoth, "panels of --plot: both, planned or realised")
	f.coalition = fs.String("coalition", "", "comma-separated observers j1,j2,... pooling their views: adds privacy.pairwise_realised.coalition")
	fs.hint("gamma", "the even-step proximal weight of neighbour exchange is --even-gamma")
}

func (f *testnetFlags) defineGossip(g sim.GossipOptions) {
	fs := f.m
	f.iters = fs.Int("iters", g.Iters, "number of iterations T (fixed in advance)")
	f.alphaStr = fs.String("alpha", "", fmt.Sprintf("noise density exp(-alpha*||eps||), larger = less noise; inf = no noise (default %g for radmm, mradmm, admm-dvp, admm-pvp; inf for admm)", g.Alpha))
	f.eta = fs.Float64("eta", g.Eta, "penalty eta (MR-ADMM: eta(k) = eta*q^k)")
	f.etaGrowth = fs.Float64("eta-growth", g.EtaGrowth, "MR-ADMM growth factor q >= 1 of the penalty schedule")
	f.etaMax = fs.Float64("eta-max", g.EtaMax, "cap of the geometric penalty schedule; 0 = none")
	f.etaFile = fs.String("eta-file", "", "penalty schedule file, one line per k = 1..K holding eta(k) for every node, or one comma-separated eta_i(k) per node (overrides --eta, --eta-growth)")
	f.paperC = fs.Float64("paper-c", g.C, "the paper's C (weight of the data term against the penalties and the noise); rho = C*N*l2")
	f.evenGamma = fs.Float64("even-gamma", g.Gamma, "even-step proximal weight gamma >= 0 of the recycled algorithms (the walk's prox parameter is --gamma)")
	fs.hint("even-gamma", "the walk's prox parameter is --gamma")
	gp := node.DefaultRADMMParams()
	fs.in(sectionGossip, "neighbour exchange with --mem or --procs", "gossip/"+netMem, "gossip/"+netProcs)
	f.onMissing = fs.String("on-missing", gp.OnMissing.String(), "with --mem/--procs: what a node does when a neighbour's vector is missing at the barrier timeout: stop (end the run with an error), wait (keep waiting) or stale (continue with its last vector, recorded and reported)")
	f.barrierTimeout = fs.Duration("barrier-timeout", gp.Barrier, "with --mem/--procs: how long a node waits at an iteration before it checks a missing neighbour")
	f.maxWait = fs.Duration("max-wait", gp.MaxWait, "with --mem/--procs: longest wait for a neighbour that is still connected before it is declared missing; 0 = 10 x --barrier-timeout")
	fs.in(sectionGossip, "neighbour exchange with --procs", "gossip/"+netProcs)
	f.killIter = fs.Int("kill-at-iter", 0, "with --procs: SIGKILL node --kill-node once its release of this iteration is durable (not yet sent), then restart it on its data directory, where it resumes from its journal; 0 = no kill")
	f.killNode = fs.Int("kill-node", 0, "with --kill-at-iter: the index of the node to kill")
}

// mode returns the mode of the parsed flags ("walk:STEP/NET" or "gossip/NET") and how to
// name it in messages.
func (f *testnetFlags) mode() (mode, what string, err error) {
	am, what, err := algoMode(*f.algo, *f.sf.local, f.m.isSet("local-step"))
	if err != nil {
		return "", "", err
	}
	switch {
	case *f.mem && f.procs.on:
		return "", "", errors.New("choose one of --mem and --procs")
	case *f.mem:
		return am + "/" + netMem, what + " with --mem", nil
	case f.procs.on:
		return am + "/" + netProcs, what + " with --procs", nil
	case !*f.sim:
		return "", "", errors.New("--sim=false needs --mem or --procs")
	}
	return am + "/" + netSim, what + " on the simulator", nil
}

// isGossip reports whether mode is a neighbour-exchange mode.
func isGossip(mode string) bool { return strings.HasPrefix(mode, nodeModeGossip+"/") }

// network returns the network part of mode.
func network(mode string) string { return mode[strings.LastIndexByte(mode, '/')+1:] }

// defaults fills the node count and the graph of the algorithm family when they were not
// given, and takes the node count from --procs=N.
func (f *testnetFlags) defaults(mode string) error {
	o, g := testnet.DefaultOptions(), testnet.DefaultGossipOptions()
	net := network(mode)
	switch {
	case f.procs.n > 0 && f.m.isSet("nodes") && *f.nodes != f.procs.n:
		return fmt.Errorf("--procs=%d and --nodes %d disagree", f.procs.n, *f.nodes)
	case f.procs.n > 0:
		*f.nodes = f.procs.n
	case net != netSim && !f.m.isSet("nodes"):
		// The simulator demo's 50 nodes would start 50 hosts or processes.
		return errors.New("--mem and --procs need an explicit node count: --nodes N (or --procs=N)")
	}
	if !f.m.isSet("nodes") && f.procs.n == 0 {
		*f.nodes = o.Nodes
		if isGossip(mode) {
			*f.nodes = g.Nodes
		}
	}
	if *f.graphSpec == "" {
		*f.graphSpec = o.Graph
		if isGossip(mode) {
			*f.graphSpec = g.Graph
		}
	}
	if !isGossip(mode) && !f.m.isSet("hops") && *f.maxUpd > 0 && *f.nodes > 0 {
		// As many hops as the caps allow noisy updates (the demo's 50 x 20 = 1000):
		// more would only forward the token, fewer leave updates unspent.
		*f.hops = uint64(*f.nodes) * uint64(*f.maxUpd)
	}
	return nil
}

// checkCommon checks the values of the flags of every mode.
func (f *testnetFlags) checkCommon() (consensus.Problem, error) {
	switch {
	case f.m.NArg() > 0:
		return consensus.Problem{}, fmt.Errorf("unexpected argument %q", f.m.Arg(0))
	case *f.nodes < 1:
		return consensus.Problem{}, fmt.Errorf("--nodes must be >= 1, got %d", *f.nodes)
	case !(*f.delta > 0 && *f.delta < 1):
		return consensus.Problem{}, fmt.Errorf("--delta must be in (0,1), got %v", *f.delta)
	}
	prob, err := checkProblemFlags("testnet", *f.lossName, *f.l1, *f.l2)
	if err != nil {
		return prob, err
	}

	if err := checkSplit("testnet", *f.split); err != nil {
		return prob, err
	}
	if _, err := graph.Parse(*f.graphSpec, *f.nodes, *f.seed); err != nil {
		return prob, fmt.Errorf("--graph: %v", err)
	}
	return prob, f.df.check(prob.Loss)
}

// checkWalk checks the values of the walk's flags and returns its local step.
func (f *testnetFlags) checkWalk(mode string) (walk.StepParams, error) {
	switch {
	case *f.hops < 1:
		return walk.StepParams{}, fmt.Errorf("--hops must be >= 1, got %d", *f.hops)
	case math.IsNaN(*f.sigma) || *f.sigma < 0 || math.IsInf(*f.sigma, 0):
		return walk.StepParams{}, fmt.Errorf("--sigma must be finite and >= 0, got %v", *f.sigma)
	case !(*f.clip > 0):
		return walk.StepParams{}, fmt.Errorf("--clip must be > 0, got %v", *f.clip)
	case *f.maxUpd < 0:
		return walk.StepParams{}, fmt.Errorf("--max-updates must be >= 0, got %d", *f.maxUpd)
	case math.IsNaN(*f.budgetEps) || *f.budgetEps < 0 || math.IsInf(*f.budgetEps, 0):
		return walk.StepParams{}, fmt.Errorf("--budget-epsilon must be finite and >= 0, got %v", *f.budgetEps)
	case *f.budgetKind != walk.BudgetLocal && *f.budgetKind != walk.BudgetNetwork:
		return walk.StepParams{}, fmt.Errorf("--budget-kind must be local or network, got %q", *f.budgetKind)
	case *f.plotKind != sim.PlotBoth && *f.plotKind != sim.PlotPlanned && *f.plotKind != sim.PlotRealised:
		return walk.StepParams{}, fmt.Errorf("--plot-kind must be both, planned or realised, got %q", *f.plotKind)
	case (*f.pairsPath != "" || *f.plotPath != "") && *f.nodes < 2:
		return walk.StepParams{}, fmt.Errorf("--pairs and --plot need at least 2 nodes")
	case *f.transport != testnet.TransportTCP && *f.transport != testnet.TransportMock:
		return walk.StepParams{}, fmt.Errorf("--transport must be tcp or mock, got %q", *f.transport)
	case *f.killPhase != "received" && *f.killPhase != "custody":
		return walk.StepParams{}, fmt.Errorf("--kill-phase must be received or custody, got %q", *f.killPhase)
	case *f.killAt > *f.hops:
		return walk.StepParams{}, fmt.Errorf("--kill-holder-at %d is beyond --hops %d", *f.killAt, *f.hops)
	case *f.killAt == *f.hops && *f.killPhase == "custody":
		return walk.StepParams{}, fmt.Errorf("--kill-phase custody needs --kill-holder-at below --hops %d: the last token is released, never held in custody", *f.hops)
	case *f.killAt > 0 && *f.nodes < 2:
		return walk.StepParams{}, errors.New("--kill-holder-at needs at least 2 nodes")
	}
	if _, err := parseWithhold(*f.withhold, *f.nodes, drive.SeededHolder(*f.seed, *f.nodes)); err != nil {
		return walk.StepParams{}, err
	}
	if *f.ackTimeout < 0 {
		return walk.StepParams{}, fmt.Errorf("--ack-timeout must be >= 0, got %v", *f.ackTimeout)
	}
	if err := checkGamma("testnet", *f.gamma); err != nil {
		return walk.StepParams{}, err
	}
	if err := checkLambda("testnet", *f.lambda); err != nil {
		return walk.StepParams{}, err
	}
	step, err := f.sf.params(stepKind(mode), f.m.isSet("step-size"))
	if err != nil {
		return step, err
	}
	if _, err := privacy.ParseUnit(*f.unit); err != nil {
		return step, fmt.Errorf("--privacy-unit: %v", err)
	}
	if f.m.isSet("target-epsilon") && f.m.isSet("sigma") {
		return step, errors.New("--target-epsilon calibrates --sigma: give one of them")
	}
	if !useTarget(f.m.isSet("target-epsilon"), f.m.isSet("sigma"), step, *f.maxUpd) {
		return step, nil
	}
	return step, checkTarget(step, *f.maxUpd, *f.target)
}

// calibrate applies --target-epsilon once the data is loaded: the record radius needs the
// loss (a third label makes it multinomial), the rows M and the scaling's row bound.
func (f *testnetFlags) calibrate(opt *sim.Options) error {
	if !useTarget(f.m.isSet("target-epsilon"), f.m.isSet("sigma"), opt.Step, opt.MaxUpdates) {
		f.targetMsg = noTargetNote(f.m.isSet("target-epsilon"), f.m.isSet("sigma"), opt.Step, opt.MaxUpdates, opt.Sigma)
		return nil
	}
	r := planWalkRun(opt.Step, opt.Gamma, opt.Clip, opt.Unit, opt.RowBoundOf(), opt.Problem.Loss, opt.Nodes, opt.Train.Rows)
	sigma, b, err := calibrateSigma(r, opt.Step, opt.MaxUpdates, *f.target, opt.Delta)
	if err != nil {
		return err
	}
	*f.sigma, opt.Sigma = sigma, sigma
	f.targetMsg = targetLine(r, sigma, b, opt.MaxUpdates, *f.target, opt.Delta)
	return nil
}

// gossipTarget is --target-epsilon for neighbour exchange: given explicitly, else 0 (the
// run takes --alpha).
func (f *testnetFlags) gossipTarget() float64 {
	if f.m.isSet("target-epsilon") {
		return *f.target
	}
	return 0
}

// checkGossip checks the values of the neighbour-exchange flags and returns alpha.
func (f *testnetFlags) checkGossip() (float64, error) {
	if f.m.isSet("target-epsilon") {
		if err := gossipTarget(*f.target, f.m.isSet("alpha")); err != nil {
			return 0, err
		}
	}
	alpha, err := parseAlpha(*f.alphaStr, *f.algo)
	if err != nil {
		return 0, fmt.Errorf("--alpha: %v", err)
	}
	_, perr := node.ParseMissingPolicy(*f.onMissing)
	switch {
	case *f.iters < 1:
		return 0, fmt.Errorf("--iters must be >= 1, got %d", *f.iters)
	case !(*f.eta > 0) || math.IsInf(*f.eta, 0) || !(*f.etaGrowth >= 1) || math.IsInf(*f.etaGrowth, 0):
		return 0, fmt.Errorf("--eta must be > 0 and --eta-growth >= 1, got %v and %v", *f.eta, *f.etaGrowth)
	case !(*f.paperC > 0) || math.IsInf(*f.paperC, 0):
		return 0, fmt.Errorf("--paper-c must be finite and > 0, got %v", *f.paperC)
	case !(*f.etaMax >= 0) || math.IsInf(*f.etaMax, 0):
		return 0, fmt.Errorf("--eta-max must be finite and >= 0 (0 = none), got %v", *f.etaMax)
	case !(*f.evenGamma >= 0) || math.IsInf(*f.evenGamma, 0):
		return 0, fmt.Errorf("--even-gamma (the even-step proximal weight) must be finite and >= 0, got %v", *f.evenGamma)
	case perr != nil:
		return 0, fmt.Errorf("--on-missing: want stop, wait or stale, got %q", *f.onMissing)
	case !(*f.barrierTimeout > 0):
		return 0, fmt.Errorf("--barrier-timeout must be > 0, got %v", *f.barrierTimeout)
	case *f.maxWait != 0 && *f.maxWait < *f.barrierTimeout:
		return 0, fmt.Errorf("--max-wait (%v) must be 0 or at least --barrier-timeout (%v)", *f.maxWait, *f.barrierTimeout)
	case f.m.isSet("kill-node") && !f.m.isSet("kill-at-iter"):
		return 0, errors.New("--kill-node needs --kill-at-iter")
	case *f.killIter < 0 || (f.m.isSet("kill-at-iter") && (*f.killIter < 1 || *f.killIter >= *f.iters)):
		return 0, fmt.Errorf("--kill-at-iter must be in [1, --iters) = [1, %d), got %d", *f.iters, *f.killIter)
	case *f.killIter > 0 && (*f.killNode < 0 || *f.killNode >= *f.nodes):
		return 0, fmt.Errorf("--kill-node must be in [0, %d), got %d", *f.nodes, *f.killNode)
	}
	return alpha, nil
}

// parseWithhold parses --withhold-acks: distinct node indices in [0, nodes) other than the
// initial holder (which starts the walk and receives no token first). "" is none.
func parseWithhold(s string, nodes, holder int) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	seen := map[int]bool{}
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("--withhold-acks: %q is not a node index", strings.TrimSpace(f))
		}
		switch {
		case v < 0 || v >= nodes:
			return nil, fmt.Errorf("--withhold-acks: node %d outside [0, %d)", v, nodes)
		case v == holder:
			return nil, fmt.Errorf("--withhold-acks: node %d is the initial holder of this seed and cannot withhold acks", v)
		case seen[v]:
			return nil, fmt.Errorf("--withhold-acks: node %d listed twice", v)
		}
		seen[v] = true
		out = append(out, v)
	}
	if len(out) >= nodes-1 {
		return nil, fmt.Errorf("--withhold-acks: %d of %d nodes withhold: at least one node besides the initial holder must ack", len(out), nodes)
	}
	return out, nil
}
