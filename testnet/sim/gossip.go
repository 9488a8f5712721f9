package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/consensus/graph"
	"github.com/dpadmm/dpadmm/gossip"
	"github.com/dpadmm/dpadmm/privacy"
)

// GossipOptions configures a simulated neighbour-exchange run (R-ADMM, MR-ADMM, conventional
// ADMM and its DVP/PVP baselines).
//
// Mapping of the paper's constants (Zhang-Khalili-Liu 2020, Sec. V) onto Problem: node i's
// objective is O(f, D_i) = (C_i/B_i) sum_{D_i} L + (rho/N) ||f||^2/2 with
// C_i = C * N * B_i / M (M = training rows; C_i = C for an even split) and rho = C * N * L2.
// Then sum_i O(f, D_i) = C N (mean loss over all rows + (L2/2)||f||^2) = C N * Objective,
// so the consensus problem has the same minimizer as consensus.Solve on the full data, and
// the reported objective stays Problem.Objective (mean loss + regularizer). The paper's
// setting C = 1750, rho = 0.22, N = 5 corresponds to L2 = rho/(C N) = 2.514e-5. C scales the
// data term against the penalties (like 1/eta) and enters the privacy bound through
// C_i/B_i = C N/M.
type GossipOptions struct {
	Train, Test *consensus.Dataset // Train is already scaled; Test may be nil
	Data        string             // name of the data source, for the report
	Scaling     string             // scaling used, for the report
	Scaler      *consensus.Scaler  // the scaling with its parameters, recorded in the report
	Nodes       int
	Split       string            // iid (default), contiguous or label
	Problem     consensus.Problem // L1 must be 0 (R must be smooth and strongly convex)
	Algo        string            // admm, radmm, mradmm, admm-dvp, admm-pvp
	Graph       string            // graph spec (graph.Parse); "" = ring
	Iters       int               // T, fixed
	Delta       float64           // delta of the RDP-converted figure (0 = 1e-5)
	Alpha       float64           // noise density exp(-alpha||eps||); +Inf = no noise
	// TargetEpsilon, when > 0, replaces Alpha: each node's alpha is calibrated so that its
	// Theorem V.1 figure is this epsilon (gossip.Setup.AlphaFor, as a node calibrates its
	// own), so the network figure, their maximum, is it too.
	TargetEpsilon float64
	Eta           float64   // base penalty (default 1)
	EtaGrowth     float64   // q: eta(k) = Eta q^k (mradmm); 0 or 1 = constant
	EtaMax        float64   // cap of the geometric schedule; 0 = none
	EtaList       []float64 // explicit eta(k), k = 1..K, for every node (overrides Eta/EtaGrowth)
	// NodeSchedules, when set (len Nodes), gives each node its own penalty schedule
	// (MR-ADMM's heterogeneous eta_i(2k-1)); it overrides Eta, EtaGrowth, EtaMax and EtaList.
	NodeSchedules []gossip.Schedule
	Gamma         float64 // even-step proximal weight (paper: 0.5)
	C             float64 // the paper's C (default 1)
	Seed          uint64
	// Curve, when set, receives the CSV "iter,avg_loss,objective,test_error,privacy_bound":
	// the paper's L(t) (mean over nodes of the local classifier's mean loss on its own
	// shard), the objective of the averaged model, the error of the averaged classifier on
	// Test (Train when Test is nil) and P(t) (formula value; empty when the theorem's
	// conditions fail).
	Curve io.Writer
	// Progress, when set, is called about once a second with the iterations every node
	// has completed and Iters (RunGossipContext, and the runs over hosts).
	Progress func(iter, total int)
}

// GossipReport is the report of a gossip run: the walk report fields (Algo, Objective of the
// average model, gap, accuracy, timing, Privacy.Local holding the per-node Theorem V.1
// figures) plus the gossip-specific fields below.
type GossipReport struct {
	*Report
	Iters        int     `json:"iters"`
	MaxDeviation float64 `json:"max_node_deviation"` // max_i ||f_i(T) - mean_j f_j(T)||
	UsPerIter    float64 `json:"us_per_iter"`
	Messages     int     `json:"messages"`
	PaperC       float64 `json:"paper_c"`
	Rho          float64 `json:"rho"`
	Alpha        float64 `json:"alpha"` // MaxFloat64 for +Inf (no noise); with a target, the smallest node's
	// TargetEpsilon is the target each node's alpha was calibrated to (0: none), and
	// Alphas those alphas, by node (with a target only).
	TargetEpsilon float64       `json:"target_epsilon,omitempty"`
	Alphas        []float64     `json:"alphas,omitempty"`
	Eta           float64       `json:"eta"`
	EtaGrowth     float64       `json:"eta_growth"`
	Degrees       []int         `json:"degrees"`
	Gossip        GossipPrivacy `json:"gossip_privacy"`
	// Network describes a run on real libp2p hosts (--mem, --procs); nil for the simulator.
	// It takes the place of the walk's network section in the JSON.
	Network *GossipNetworkReport `json:"network,omitempty"`
}

// GossipPrivacy is the pure-DP figure of a gossip run.
type GossipPrivacy struct {
	// Epsilon is the network guarantee max_i beta_i, or unbounded (JSON null) when the
	// conditions fail; Formula the formula value regardless of the conditions.
	privacy.PureFigure
	Exact          privacy.Epsilon   `json:"exact_epsilon"` // tighter un-relaxed form (54)+(56)
	WorstNode      int               `json:"worst_node"`
	PerNode        []privacy.Epsilon `json:"per_node_epsilon"` // guarantees (unbounded when failing)
	PerNodeFormula []privacy.Epsilon `json:"per_node_formula"`
	LedgerEpsilon  []privacy.Epsilon `json:"ledger_epsilon"` // recomputed from each node's ledger
	// RDP is the same ledger seen through the RDP accountant that the walk uses: each
	// pure eps-DP release becomes the curve min(eps, alpha eps^2/2) (Bun-Steinke 2016,
	// Prop. 3.3), composed per node and converted to (epsilon, delta) at Delta, or the
	// pure-DP sum when that is smaller (order 0); it is below the pure sum for many small
	// releases. It holds only when ConditionsHold.
	RDP GossipRDP `json:"rdp"`
}

// GossipRDP is the (epsilon, delta) figure of a gossip run from the RDP accountant.
type GossipRDP struct {
	Delta      float64           `json:"delta"`
	Epsilon    privacy.Epsilon   `json:"epsilon"` // max over nodes; unbounded when the conditions fail
	Order      float64           `json:"order"`
	PerNode    []privacy.Epsilon `json:"per_node_epsilon"`
	Conversion string            `json:"conversion"`
	Theorem    string            `json:"theorem"`
}

// GossipSim holds the machines of one gossip run, driven in one goroutine.
type GossipSim struct {
	Algo     gossip.Algo
	Graph    *graph.Graph
	Machines []*gossip.Machine
	Objs     []*gossip.Objective
	Shards   []*consensus.Dataset
	Ledgers  [][]privacy.Entry
	Messages int
	Trace    uint64 // fingerprint of every broadcast vector
	K        int    // charged iterations per node
	// Acc holds each node's accountant inputs; ExactSolves is updated from the run by RunGossip.
	Acc []privacy.ObjPertNode
	// Alphas are the nodes' noise parameters: Options.Alpha, or calibrated to
	// Options.TargetEpsilon.
	Alphas []float64
	// Configs are the machines' configurations (f_i(0) among them) and RowWeight,
	// RegOverN and Loss the parameters of their objectives (gossip.NewObjective on
	// Shards[i]): what is needed to build the same machine again (a restart).
	Configs             []gossip.Config
	RowWeight, RegOverN float64
	Loss                consensus.Loss

	queue []gossip.Envelope
}

// GossipGraph builds a connected graph (er:p is resampled by graph.Parse).
func GossipGraph(spec string, n int, seed uint64) (*graph.Graph, error) {
	if spec == "" {
		spec = "ring"
	}
	if n == 1 {
		return nil, errors.New("testnet: gossip needs at least 2 nodes")
	}
	g, err := graph.Parse(spec, n, seed)
	if err != nil {
		return nil, fmt.Errorf("testnet: gossip graph: %w", err)
	}
	if !g.Connected() {
		return nil, fmt.Errorf("testnet: gossip graph %s with n=%d is not connected", spec, n)
	}
	for i := 0; i < n; i++ {
		if g.Degree(i) == 0 {
			return nil, fmt.Errorf("testnet: gossip graph %s: node %d has no neighbours", spec, i)
		}
	}
	return g, nil
}

// Step runs one delivery round: apply every pending Ready (ledger, then state, then send),
// then deliver the queued messages in order. It reports whether anything happened.
func (s *GossipSim) Step() (bool, error) {
	moved := false
	for i, m := range s.Machines {
		if !m.HasReady() {
			continue
		}
		rd := m.Ready()
		moved = true
		// Ledger durable before send.
		for _, e := range rd.Ledger {
			if err := e.Validate(); err != nil {
				return false, fmt.Errorf("testnet: node %d: %w", i, err)
			}
			s.Ledgers[i] = append(s.Ledgers[i], e)
		}
		if len(rd.Ledger) != 1 || rd.State == nil {
			return false, fmt.Errorf("testnet: invariant: node %d: %d ledger entries, state %v", i, len(rd.Ledger), rd.State != nil)
		}
		for _, env := range rd.Outbox {
			if uint64(env.Msg.Iter) != rd.Ledger[0].Hop {
				return false, fmt.Errorf("testnet: invariant: node %d: message of iteration %d not covered by ledger iteration %d", i, env.Msg.Iter, rd.Ledger[0].Hop)
			}
			s.queue = append(s.queue, env)
		}
		if len(rd.Outbox) > 0 {
			v := rd.Outbox[0].Msg.Vec
			s.Trace = TraceMix(s.Trace, uint64(rd.Outbox[0].Msg.Iter), uint64(i))
			for _, x := range v {
				if math.IsNaN(x) || math.IsInf(x, 0) {
					return false, fmt.Errorf("testnet: invariant: node %d sent a non-finite vector", i)
				}
				s.Trace = TraceMix(s.Trace, math.Float64bits(x), 0)
			}
		}
		m.Advance(rd)
	}
	q := s.queue
	s.queue = nil
	for _, env := range q {
		moved = true
		s.Messages++
		if err := s.Machines[env.To].Step(env.Msg); err != nil {
			return false, fmt.Errorf("testnet: deliver %d->%d iteration %d: %w", env.Msg.From, env.To, env.Msg.Iter, err)
		}
	}
	return moved, nil
}

// Done reports whether every machine has completed its iterations and nothing is pending.
func (s *GossipSim) Done() bool {
	for _, m := range s.Machines {
		if !m.Done() || m.HasReady() {
			return false
		}
	}
	return len(s.queue) == 0
}

// Finish steps the simulator until every machine is done (no progress, no curve).
func (s *GossipSim) Finish() error {
	for !s.Done() {
		moved, err := s.Step()
		if err != nil {
			return err
		}
		if !moved {
			return errors.New("testnet: gossip deadlock: no machine can progress")
		}
	}
	return nil
}

// MinIter returns the smallest iteration reached by any node.
func (s *GossipSim) MinIter() int {
	t := math.MaxInt
	for _, m := range s.Machines {
		t = min(t, m.Iter())
	}
	return t
}

// Average returns mean_i f_i and max_i ||f_i - mean||.
func (s *GossipSim) Average() ([]float64, float64) {
	return AverageModels(s.Models(), s.Objs[0].Dim())
}

// Models returns the machines' current f_i (views, not copies).
func (s *GossipSim) Models() [][]float64 {
	ms := make([][]float64, len(s.Machines))
	for i, m := range s.Machines {
		ms[i] = m.ModelView()
	}
	return ms
}

// Inexact reports, per machine, whether any of its local solves missed its tolerance.
func (s *GossipSim) Inexact() []bool {
	b := make([]bool, len(s.Machines))
	for i, m := range s.Machines {
		_, bad := m.MaxResidual()
		b[i] = bad > 0
	}
	return b
}

// AverageModels returns mean_i f_i and max_i ||f_i - mean|| (gossip.Average).
func AverageModels(models [][]float64, dim int) ([]float64, float64) {
	avg, devs := gossip.Average(models, dim)
	dev := 0.0
	for _, d := range devs {
		dev = math.Max(dev, d)
	}
	return avg, dev
}

// NewGossipSim validates the options (filling defaults in o), builds the connected graph,
// splits the data and builds one machine per node, plus the accountant's inputs (Acc).
func NewGossipSim(o *GossipOptions) (*GossipSim, error) {
	algo, err := gossipDefaults(o)
	if err != nil {
		return nil, err
	}
	n := o.Nodes
	g, err := GossipGraph(o.Graph, n, o.Seed)
	if err != nil {
		return nil, err
	}
	shards, err := consensus.Split(o.Train, n, o.Split, o.Seed)
	if err != nil {
		return nil, err
	}
	if o.NodeSchedules != nil && len(o.NodeSchedules) != n {
		return nil, fmt.Errorf("testnet: %d node schedules for %d nodes", len(o.NodeSchedules), n)
	}
	setup := gossip.NewSetup(o.Problem.Loss, o.C, o.Problem.Reg.L2, n, o.Train.Rows).WithClasses(o.Train)
	sim := &GossipSim{Algo: algo, Graph: g, Shards: shards, Ledgers: make([][]privacy.Entry, n), Trace: 0x6a09e667f3bcc908,
		RowWeight: setup.RowWeight, RegOverN: setup.RegOverN, Loss: o.Problem.Loss}
	if sim.Alphas, err = NodeAlphas(o, algo, setup, g, shards); err != nil {
		return nil, err
	}
	if err := sim.buildMachines(o, setup); err != nil {
		return nil, err
	}
	sim.accountingInputs(o, setup)
	return sim, nil
}

// gossipDefaults validates o and fills its defaults; it returns the parsed algorithm.
func gossipDefaults(o *GossipOptions) (gossip.Algo, error) {
	if o.Train == nil || o.Train.Rows == 0 {
		return 0, errors.New("testnet: empty training set")
	}
	if o.Nodes < 2 || o.Nodes > o.Train.Rows {
		return 0, fmt.Errorf("testnet: gossip nodes must be in [2,%d] (training rows), got %d", o.Train.Rows, o.Nodes)
	}
	if o.Iters < 0 {
		return 0, fmt.Errorf("testnet: iterations must be >= 0, got %d", o.Iters)
	}
	if err := o.Problem.Validate(); err != nil {
		return 0, err
	}
	if o.Problem.Loss == consensus.Multinomial {
		return 0, fmt.Errorf("testnet: gossip has no figure for the multinomial loss (Theorem V.1 is proven for the logistic loss): a label of 3 or more classes is fitted one-vs-rest (loss logistic-ovr)")
	}
	if o.Problem.Reg.L1 != 0 {
		return 0, fmt.Errorf("testnet: gossip needs a smooth regularizer: l1 must be 0, got %v", o.Problem.Reg.L1)
	}
	if !(o.Problem.Reg.L2 > 0) {
		return 0, errors.New("testnet: gossip needs l2 > 0 (the paper's rho > 0: R must be strongly convex)")
	}
	algo, err := gossip.ParseAlgo(o.Algo)
	if err != nil {
		return 0, err
	}
	if !(o.TargetEpsilon >= 0) || math.IsInf(o.TargetEpsilon, 0) {
		return 0, fmt.Errorf("testnet: the target epsilon must be finite and >= 0 (0: none), got %v", o.TargetEpsilon)
	}
	if o.TargetEpsilon == 0 && (math.IsNaN(o.Alpha) || !(o.Alpha > 0)) {
		return 0, fmt.Errorf("testnet: alpha must be > 0 (inf = no noise), got %v", o.Alpha)
	}
	if o.C == 0 {
		o.C = 1
	}
	if !(o.C > 0) || math.IsInf(o.C, 0) {
		return 0, fmt.Errorf("testnet: C must be > 0 and finite, got %v", o.C)
	}
	if o.Eta == 0 && len(o.EtaList) == 0 {
		o.Eta = 1
	}
	if o.Split == "" {
		o.Split = "iid"
	}
	if o.Graph == "" {
		o.Graph = "ring"
	}
	return algo, nil
}

// schedule returns node i's penalty schedule.
func (o *GossipOptions) schedule(i int) gossip.Schedule {
	if o.NodeSchedules != nil {
		return o.NodeSchedules[i]
	}
	return gossip.Schedule{Eta: o.Eta, Q: o.EtaGrowth, Max: o.EtaMax, List: o.EtaList}
}

// NodeAlphas returns each node's noise parameter: o.Alpha, or with o.TargetEpsilon the
// alpha that gives the node (its degree, rows and penalties) that figure.
func NodeAlphas(o *GossipOptions, algo gossip.Algo, setup gossip.Setup, g *graph.Graph, shards []*consensus.Dataset) ([]float64, error) {
	out := make([]float64, o.Nodes)
	K := algo.PerturbedCount(o.Iters)
	for i := range out {
		out[i] = o.Alpha
		if o.TargetEpsilon > 0 {
			a, err := setup.AlphaFor(algo, g.Degree(i), shards[i].Rows, o.schedule(i).Values(K), o.TargetEpsilon)
			if err != nil {
				return nil, fmt.Errorf("testnet: node %d: %w", i, err)
			}
			out[i] = a
		}
	}
	return out, nil
}

// buildMachines builds one machine per node (with its objective and configuration).
func (sim *GossipSim) buildMachines(o *GossipOptions, setup gossip.Setup) error {
	n, dim, g := o.Nodes, o.Train.ModelDim(), sim.Graph
	names := make([]string, n)
	for i := range names {
		names[i] = strconv.Itoa(i)
	}
	for i := 0; i < n; i++ {
		obj, err := setup.Objective(sim.Shards[i])
		if err != nil {
			return err
		}
		// f_i(0): random and data-independent (Thm V.1 (f)).
		r := rand.New(rand.NewPCG(Mix(o.Seed, i, 4), Mix(o.Seed, i, 5)))
		init := make([]float64, dim)
		for j := range init {
			init[j] = 0.1 * r.NormFloat64()
		}
		cfg := gossip.Config{
			Node: i, Nodes: n, Neighbors: g.Neighbors(i), Algo: sim.Algo, Iters: o.Iters, Penalty: o.schedule(i),
			Gamma: o.Gamma, Alpha: sim.Alphas[i], C1: setup.C1, Init: init, Run: "sim", Names: names,
		}
		if !math.IsInf(sim.Alphas[i], 1) {
			cfg.Noise = NodeNoise(o.Seed, i)
		}
		m, err := gossip.New(cfg, obj)
		if err != nil {
			return err
		}
		sim.Machines = append(sim.Machines, m)
		sim.Objs = append(sim.Objs, obj)
		sim.Configs = append(sim.Configs, cfg)
	}
	return nil
}

// accountingInputs fills K and Acc: the accountant's inputs, data-independent except for
// the checked preconditions (gossip.Setup.Account, as a node builds its own).
func (sim *GossipSim) accountingInputs(o *GossipOptions, setup gossip.Setup) {
	n, algo := o.Nodes, sim.Algo
	K := algo.PerturbedCount(o.Iters)
	sim.K = K
	sim.Acc = make([]privacy.ObjPertNode, n)
	for i := 0; i < n; i++ {
		sh := sim.Shards[i]
		maxNorm, pm1 := gossip.RowChecks(sh)
		sim.Acc[i] = setup.Account(algo, sim.Graph.Degree(i), sh.Rows, maxNorm, pm1, sim.Alphas[i], o.schedule(i).Values(K))
	}
}

// RunGossip performs a complete simulated gossip run and returns its report. The same
// options and seed give a bit-identical report (apart from timing fields).
func RunGossip(o GossipOptions) (*GossipReport, error) {
	return RunGossipContext(context.Background(), o)
}

// RunGossipContext is RunGossip stopped early when ctx is canceled (checked before every
// local step): the report then describes the models reached, Hops the iterations every
// node completed, with Report.Interrupted set (no error).
func RunGossipContext(ctx context.Context, o GossipOptions) (*GossipReport, error) {
	sim, err := NewGossipSim(&o)
	if err != nil {
		return nil, err
	}
	algo, shards, n := sim.Algo, sim.Shards, len(sim.Machines)
	planned := privacy.ObjPertNetwork(sim.Acc)

	evalTest := o.Test
	if evalTest == nil || evalTest.Rows == 0 {
		evalTest = o.Train
	}
	writeCurve := func(t int) {
		avg, _ := sim.Average()
		L := 0.0
		for i, m := range sim.Machines {
			L += o.Problem.MeanLoss(shards[i], m.ModelView())
		}
		L /= float64(n)
		pt := ""
		if planned.ConditionsHold {
			pt = strconv.FormatFloat(planned.PrivacyAt(algo.Scheme(), t), 'g', 10, 64)
		}
		fmt.Fprintf(o.Curve, "%d,%.10g,%.10g,%.6g,%s\n", t, L, o.Problem.Objective(o.Train, avg),
			1-o.Problem.Accuracy(evalTest, avg), pt)
	}
	if o.Curve != nil {
		fmt.Fprintln(o.Curve, "iter,avg_loss,objective,test_error,privacy_bound")
		writeCurve(0)
	}
	start := time.Now()
	last := 0
	shown := start
	for !sim.Done() {
		if ctx.Err() != nil {
			rep, err := NewGossipReport(&o, sim, GossipOutcome{
				Models: sim.Models(), Inexact: sim.Inexact(), Ledgers: sim.Ledgers, Messages: sim.Messages, TraceHash: fmt.Sprintf("%016x", sim.Trace), Wall: time.Since(start),
			})
			if err != nil {
				return nil, err
			}
			rep.MarkInterrupted(sim.MinIter())
			return rep, nil
		}
		if o.Progress != nil && time.Since(shown) >= time.Second {
			shown = time.Now()
			o.Progress(sim.MinIter(), o.Iters)
		}
		moved, err := sim.Step()
		if err != nil {
			return nil, err
		}
		if !moved {
			return nil, errors.New("testnet: gossip deadlock: no machine can progress")
		}
		if t := sim.MinIter(); o.Curve != nil && t > last {
			// Every node has computed f(t) (rounds are synchronous: all nodes are at t).
			last = t
			writeCurve(t)
		}
	}
	return NewGossipReport(&o, sim, GossipOutcome{
		Models: sim.Models(), Inexact: sim.Inexact(), Ledgers: sim.Ledgers, Messages: sim.Messages, TraceHash: fmt.Sprintf("%016x", sim.Trace), Wall: time.Since(start),
	})
}

// MarkInterrupted marks a partial report of a run stopped after iter iterations of every
// node. The privacy figures stay those of the whole planned run (an upper bound). The
// utility warnings are dropped: a model stopped early says nothing about the settings.
func (r *GossipReport) MarkInterrupted(iter int) {
	r.Ended, r.Interrupted, r.HopsPlanned, r.Hops = "interrupted", true, uint64(r.Iters), uint64(iter)
	r.Warnings = []string{}
}

// GossipOutcome is what a finished gossip run (simulated or over hosts) contributes to its
// report besides the final state of the machines.
type GossipOutcome struct {
	Models    [][]float64       // per node, f_i(T)
	Inexact   []bool            // per node: a local solve missed its tolerance
	Ledgers   [][]privacy.Entry // per node, the entries made durable
	Messages  int               // vectors sent to neighbours
	TraceHash string            // fingerprint of every broadcast vector; "" when not observed
	Wall      time.Duration
}

// NewGossipReport builds the report of a finished run from the options as filled by
// NewGossipSim, the run's setup in sim (graph, accountant inputs; its machines are not
// used) and the run's outcome (final models, solve residuals, ledgers).
func NewGossipReport(o *GossipOptions, sim *GossipSim, out GossipOutcome) (*GossipReport, error) {
	_, refObj, err := consensus.Solve(o.Train, o.Problem, consensus.SolveOptions{Tol: 1e-12, MaxIter: 100000})
	if err != nil {
		return nil, fmt.Errorf("testnet: reference solve: %w", err)
	}
	g, n, K, nodesAcc := sim.Graph, len(sim.Machines), sim.K, sim.Acc
	dim, wall := o.Train.ModelDim(), out.Wall
	if len(out.Ledgers) != n || len(out.Models) != n || len(out.Inexact) != n {
		return nil, fmt.Errorf("testnet: invariant: %d ledgers, %d models, %d solve flags for %d nodes",
			len(out.Ledgers), len(out.Models), len(out.Inexact), n)
	}
	for i, f := range out.Models {
		if len(f) != dim {
			return nil, fmt.Errorf("testnet: node %d: model of dimension %d, want %d", i, len(f), dim)
		}
	}

	// Exact-solve precondition from the run.
	for i, bad := range out.Inexact {
		if bad {
			nodesAcc[i].ExactSolves = false
		}
	}
	fig := privacy.ObjPertNetwork(nodesAcc)

	avg, dev := AverageModels(out.Models, dim)
	r := gossipUtility(o, sim.Algo, n, refObj, avg, out)
	gp := gossipPrivacyOf(o, fig, out.Ledgers)
	updates := make([]int, n)
	for i := range updates {
		updates[i] = K
	}
	r.Privacy = Privacy{
		Conversion: "none: pure epsilon-DP (delta = 0)",
		Unit:       privacy.UnitRecord,
		UnitNote:   "per record: one row of one node replaced (Theorem V.1)",
		Updates:    updates,
		Local: Local{
			Figure:         privacy.Figure{Epsilon: gp.Epsilon, Theorem: fig.Theorem, Conditions: fig.Conditions, ConditionsHold: fig.ConditionsHold},
			PerNodeEpsilon: gp.PerNode,
		},
		PairwisePlanned: Pairwise{
			Worst:   Worst{Epsilon: gp.Epsilon, I: fig.Node, J: -1},
			Theorem: fig.Theorem, Conditions: fig.Conditions, ConditionsHold: fig.ConditionsHold,
			Note: "Definition V.1's adversary sees every message of every node, so any observer j (or coalition) " +
				"is bounded by beta_i; worst.j = -1 means any observer",
		},
	}
	rep := &GossipReport{
		Report: r, Iters: o.Iters, MaxDeviation: dev, Messages: out.Messages, PaperC: o.C,
		Rho: o.C * float64(n) * o.Problem.Reg.L2, Alpha: jsonNum(o.Alpha), Eta: o.Eta, EtaGrowth: o.EtaGrowth,
		Gossip: gp,
	}
	for i := 0; i < n; i++ {
		rep.Degrees = append(rep.Degrees, g.Degree(i))
	}
	if o.TargetEpsilon > 0 {
		rep.TargetEpsilon, rep.Alphas = o.TargetEpsilon, append([]float64(nil), sim.Alphas...)
		rep.Alpha = slices.Min(sim.Alphas)
	}
	if o.Iters > 0 {
		rep.UsPerIter = float64(wall.Nanoseconds()) / 1e3 / float64(o.Iters)
		r.UsPerHop = rep.UsPerIter // one "hop" of a gossip run is one iteration of all nodes
	}
	return rep, nil
}

// MarshalJSON writes the report without the walk's keys that a neighbour-exchange run
// has no value for (sigma, clip, lambda, local_step, max_updates, and ended unless the
// run was interrupted): a 0 there would read as a setting. The other keys keep their order.
func (r *GossipReport) MarshalJSON() ([]byte, error) {
	type plain GossipReport
	b, err := json.Marshal((*plain)(r))
	if err != nil {
		return nil, err
	}
	drop := map[string]bool{"sigma": true, "clip": true, "lambda": true, "local_step": true, "max_updates": true}
	if r.Report == nil || r.Ended == "" {
		drop["ended"] = true
	}
	return dropKeys(b, drop)
}

// dropKeys rewrites the JSON object b without the top-level keys in drop, the others in
// their order.
func dropKeys(b []byte, drop map[string]bool) ([]byte, error) {
	var fields []struct {
		k string
		v json.RawMessage
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("testnet: report: not a JSON object")
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if k := t.(string); !drop[k] {
			fields = append(fields, struct {
				k string
				v json.RawMessage
			}{k, v})
		}
	}
	var out bytes.Buffer
	out.WriteByte('{')
	for i, f := range fields {
		if i > 0 {
			out.WriteByte(',')
		}
		k, _ := json.Marshal(f.k)
		out.Write(k)
		out.WriteByte(':')
		out.Write(f.v)
	}
	out.WriteByte('}')
	return out.Bytes(), nil
}

// gossipPrivacyOf is the privacy section of a gossip report: the Theorem V.1 figures per
// node, the pure epsilon each ledger sums to, and the ledgers seen through the RDP
// accountant.
func gossipPrivacyOf(o *GossipOptions, fig privacy.ObjPertNetworkFigure, ledgers [][]privacy.Entry) GossipPrivacy {
	gp := GossipPrivacy{PureFigure: fig.Pure(), WorstNode: fig.Node}
	exact := 0.0
	for i, f := range fig.PerNode {
		gp.PerNode = append(gp.PerNode, privacy.Eps(f.Guarantee()))
		gp.PerNodeFormula = append(gp.PerNodeFormula, privacy.Eps(f.Epsilon))
		exact = math.Max(exact, f.Exact)
		s := 0.0
		for _, e := range ledgers[i] {
			if e.Mechanism == privacy.MechPure {
				s += e.Epsilon
			}
		}
		gp.LedgerEpsilon = append(gp.LedgerEpsilon, privacy.Eps(s))
	}
	gp.Exact = privacy.Eps(exact)
	delta := o.Delta
	if delta == 0 {
		delta = privacy.DefaultDelta
	}
	gp.RDP = GossipRDP{
		Delta: delta, Conversion: privacy.Conversion,
		Theorem: "per-release pure eps-DP (Theorem V.1) as RDP min(eps, alpha eps^2/2) (Bun-Steinke 2016, Prop. 3.3), composed over the node's ledger",
	}
	worst := 0.0
	for i := range fig.PerNode {
		e, ord := math.Inf(1), 0.0
		if fig.ConditionsHold {
			e, ord = privacy.ToDP(privacy.LedgerCurve(ledgers[i]), delta)
			// Pure eps-DP is also (eps, delta)-DP: keep the smaller (order 0 = the pure figure).
			if p := fig.PerNode[i].Guarantee(); p <= e {
				e, ord = p, 0
			}
		}
		gp.RDP.PerNode = append(gp.RDP.PerNode, privacy.Eps(e))
		if i == 0 || e > worst {
			worst, gp.RDP.Order = e, ord
		}
	}
	gp.RDP.Epsilon = privacy.Eps(worst)
	return gp
}

// gossipUtility is the utility part of a gossip report for the average model avg.
func gossipUtility(o *GossipOptions, algo gossip.Algo, n int, refObj float64, avg []float64, out GossipOutcome) *Report {
	dim, split, wall := o.Train.ModelDim(), o.Split, out.Wall
	obj := o.Problem.Objective(o.Train, avg)
	gap := (obj - refObj) / math.Max(math.Abs(refObj), 1e-300)
	r := &Report{
		Algo: algo.String(), Objective: obj, ReferenceObjective: refObj, Gap: gap,
		Hops: uint64(o.Iters), Nodes: n, Dims: dim, TrainRows: o.Train.Rows,
		WallSeconds: wall.Seconds(), Seed: o.Seed, Loss: o.Problem.Loss.String(),
		L1: o.Problem.Reg.L1, L2: o.Problem.Reg.L2, Gamma: o.Gamma, Scale: o.Scaling, Scaling: o.Scaler, Split: split,
		Graph: o.Graph, Data: o.Data, TraceHash: out.TraceHash, Model: avg,
	}
	if o.Problem.Loss.Classifies() {
		a := o.Problem.Accuracy(o.Train, avg)
		r.TrainAccuracy = &a
	}
	if o.Test != nil && o.Test.Rows > 0 {
		r.TestRows = o.Test.Rows
		t := o.Problem.Objective(o.Test, avg)
		r.TestObjective = &t
		if o.Problem.Loss.Classifies() {
			a := o.Problem.Accuracy(o.Test, avg)
			r.Accuracy = &a
		}
	}
	r.setRegression(o.Problem.Loss, o.Train, o.Test, avg)
	r.setPredictor(o.Problem.Loss, o.Scaler, o.Train, avg)
	hint := gossipUtilityHint
	if o.TargetEpsilon > 0 {
		hint = gossipTargetHint
	}
	r.Warnings = append([]string{}, UtilityWarnings(o.Problem, o.Train, o.Test, avg, hint)...)
	return r
}
