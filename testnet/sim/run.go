package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/consensus/graph"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/walk"
)

// Options configures a complete simulated run: data preparation, the walk, the reference
// solve and the privacy figures.
type Options struct {
	Train, Test *consensus.Dataset // Train is already scaled; Test may be nil
	Data        string             // name of the data source, for the report
	Scaling     string             // scaling used, for the report
	// Scaler is the scaling with its parameters, recorded in the report so that its model
	// can be scored on new data (dpadmm eval); nil: not recorded.
	Scaler  *consensus.Scaler
	Nodes   int
	Split   string
	Problem consensus.Problem
	Gamma   float64
	Lambda  float64
	Clip    float64
	Sigma   float64
	// Step is the walk's local step and its parameters (zero value: the exact prox of
	// Algorithm 4).
	Step walk.StepParams
	// Unit is what the figures protect ("" is privacy.UnitRecord).
	Unit privacy.Unit
	// RowBound is the public bound on every row's norm; 0 takes Scaler.RowBound() (1
	// when the scaling projects rows onto the unit ball, else none).
	RowBound   float64
	Hops       uint64
	Seed       uint64
	Graph      string
	MaxUpdates int
	Delta      float64
	CurveEvery uint64
	Curve      io.Writer // CSV "hop,objective,gap" at hop 0, every CurveEvery hops and the last hop; nil = none
	// Progress is called about once per second of wall time; nil = silent.
	Progress func(hop, total uint64, obj float64)
	// KeepTrace keeps the (hop, node, noisy) path in Report.Trace, with the view steps of
	// redirected releases on real hosts (TraceStep.View).
	KeepTrace bool
	// Budget, when non-nil, is each node's privacy budget (see BudgetSpec).
	Budget *BudgetSpec
	// LedgerDir, when set, receives one append-only ledger file per node.
	LedgerDir string
	// Coalition, when non-nil, lists observers that pool their views; the report then
	// carries privacy.pairwise_realised.coalition.
	Coalition []int
	// Warn, when set, is called with each warning about the plan (hops that cannot change
	// the model, a planned privacy figure the run will lose) before the first hop. These
	// warnings open Report.Warnings, in the same order; the ones found after the run
	// follow them there.
	Warn func(msg string)
}

// Report is the JSON report of a run.
type Report struct {
	Algo               string   `json:"algo"`
	Objective          float64  `json:"objective"`
	ReferenceObjective float64  `json:"reference_objective"`
	Gap                float64  `json:"gap"`
	TestObjective      *float64 `json:"test_objective,omitempty"`
	Accuracy           *float64 `json:"accuracy,omitempty"`
	TrainAccuracy      *float64 `json:"train_accuracy,omitempty"`
	RMSE               *float64 `json:"rmse,omitempty"`       // squared loss: on the test rows
	R2                 *float64 `json:"r2,omitempty"`         // squared loss: absent for constant targets
	TrainRMSE          *float64 `json:"train_rmse,omitempty"` // squared loss: on the training rows
	TrainR2            *float64 `json:"train_r2,omitempty"`
	Hops               uint64   `json:"hops"`
	Nodes              int      `json:"nodes"`
	Dims               int      `json:"dims"`
	TrainRows          int      `json:"train_rows"`
	TestRows           int      `json:"test_rows"`
	WallSeconds        float64  `json:"wall_seconds"`
	UsPerHop           float64  `json:"us_per_hop"`
	Seed               uint64   `json:"seed"`
	Loss               string   `json:"loss"`
	L1                 float64  `json:"l1"`
	L2                 float64  `json:"l2"`
	Gamma              float64  `json:"gamma"`
	Lambda             float64  `json:"lambda"`
	Clip               float64  `json:"clip"`
	Sigma              float64  `json:"sigma"`
	// LocalStep names the walk's local step (walk.StepKind: prox, linearized, ls-sgd,
	// gadmm, sgd); the step's parameters follow, absent where the step has none.
	LocalStep      string  `json:"local_step"`
	StepSize       float64 `json:"step_size,omitempty"`
	Beta           float64 `json:"beta,omitempty"`
	Nu             float64 `json:"nu,omitempty"`
	SampleRate     float64 `json:"sample_rate,omitempty"`
	StronglyConvex bool    `json:"strongly_convex,omitempty"`
	MaxUpdates     int     `json:"max_updates"`
	Scale          string  `json:"scale"`
	// Scaling is the feature scaling with its parameters (a simulator's data is not
	// private), which inputs of Model must get first.
	Scaling   *consensus.Scaler `json:"scaling,omitempty"`
	Split     string            `json:"split"`
	Graph     string            `json:"graph"`
	Data      string            `json:"data"`
	TraceHash string            `json:"trace_hash"`
	Model     []float64         `json:"model"`
	// Predictor is the model in the self-describing form that dpadmm predict, eval and
	// export read (consensus.ModelSpec); absent when the run has no scaling recorded.
	Predictor *consensus.ModelSpec `json:"predictor,omitempty"`
	// Ended is "hops" when the run made all its hops, "budget exhausted" when every
	// node had used up its privacy budget first, "interrupted" when it was stopped early
	// (a signal): the report then describes the state reached, Hops the hops done.
	Ended string `json:"ended"`
	// Interrupted marks a partial report (Ended "interrupted"); HopsPlanned is then the
	// length the run was meant to have (iterations for the neighbour exchange).
	Interrupted bool   `json:"interrupted,omitempty"`
	HopsPlanned uint64 `json:"hops_planned,omitempty"`
	// Warnings says where the run disappoints or will: hops that only forwarded the
	// token, a planned privacy figure the run loses, a model no better than the trivial
	// predictor. Never null: [] when there is none.
	Warnings []string      `json:"warnings"`
	Budget   *BudgetReport `json:"budget,omitempty"`
	Privacy  Privacy       `json:"privacy"`
	Trace    []TraceStep   `json:"trace,omitempty"`
	// Network describes a run on real libp2p hosts (--mem, --procs); nil for the simulator.
	Network *NetworkReport `json:"network,omitempty"`
	// Pairs holds the pairwise matrices for WritePairsCSV and WritePairsPNG (nil for one node).
	Pairs *PairMatrices `json:"-"`
	// StepRun holds the local step's fields of the run's privacy.WalkRun (StepRun), for
	// a trace of the run.
	StepRun privacy.WalkRun `json:"-"`
}

// Privacy holds the privacy figures of a run. Every epsilon is an (epsilon, Delta)-DP
// figure obtained with Conversion from an RDP curve, and names its theorem, its
// conditions and whether they hold.
type Privacy struct {
	Delta      float64 `json:"delta"`
	Conversion string  `json:"conversion"`
	// Updates is the number of noisy updates made by each node during the run.
	Updates []int `json:"updates"`
	// Unit is what every figure of the report protects (privacy.Unit: "record", one row
	// replaced, or "node", a node's whole data set), UnitNote which radius binds and
	// RecordClip the record-level radius (0: none holds).
	Unit       privacy.Unit `json:"unit"`
	UnitNote   string       `json:"unit_note"`
	RecordClip float64      `json:"record_clip,omitempty"`
	Local      Local        `json:"local"`
	// PairwisePlanned is the figure over the secret random path (expected over the path).
	PairwisePlanned Pairwise `json:"pairwise_planned"`
	// PairwiseRealised is computed from the run's own path; nil only from Accounting.
	PairwiseRealised *Pairwise `json:"pairwise_realised,omitempty"`
}

// Local is the local (eavesdropper on all of a node's messages) guarantee per node: the
// figure of the worst node (max over nodes), with the accountant that gave it.
type Local struct {
	privacy.Figure
	// Accountant names what gave Epsilon: "gdp" (the exact Gaussian-DP conversion, for
	// the prox and linearized steps), "pld" (the privacy loss distribution of the
	// subsampled ls-sgd and sgd steps) or "rdp"; EpsilonRDP is the RDP conversion of the
	// same node, never below Epsilon.
	Accountant     string            `json:"accountant"`
	EpsilonRDP     privacy.Epsilon   `json:"epsilon_rdp"`
	Updates        int               `json:"updates"` // max over nodes of the noisy updates made (K_i)
	PerNodeEpsilon []privacy.Epsilon `json:"per_node_epsilon"`
}

// Worst is the worst pair (i -> j): what observer j learns about node i's data.
type Worst = privacy.Pair

// Pairwise is a network-DP figure over all ordered pairs (i, j), i != j.
type Pairwise = privacy.PairwiseFigure

// Coalition is the realised figure against a set of observers that pool their views.
type Coalition = privacy.CoalitionFigure

// jsonNum maps +Inf and NaN to a large finite value so the report stays valid JSON. It is
// for the numbers of a report that are not epsilons (clip, alpha); an epsilon is a
// privacy.Epsilon, whose JSON form of +Inf is null.
func jsonNum(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return math.MaxFloat64
	}
	return x
}

// AccountInput is what Account needs to compute the privacy section of a run.
type AccountInput struct {
	Updates []int   // noisy updates made by each node; len(Updates) is the number of nodes n
	Clip    float64 // clip bound C on ||x - z||
	Sigma   float64 // std of eta in eq. (7); 0 = no noise
	Delta   float64 // delta of every (epsilon, delta) figure, in (0,1)
	// Graph is the communication graph; nil or Complete means the complete graph with a
	// uniform next hop (self included).
	Graph *graph.Graph
	// Cap is the hard cap K_i on noisy updates per node (0 = none).
	Cap int
	// Caps, when non-nil, are per-node hard caps from a privacy budget.
	Caps []int
	// Hops is the number of hops of the run, the horizon of the planned figure.
	Hops uint64
	// Path is the run's realised path; nil leaves the realised figure at the local bound
	// with RealisedNote as the reason. It has Hops + Views steps.
	Path []privacy.TraceStep
	// Views is the number of steps of Path that are views, not hops: a peer that received
	// a release and did not step it (a hand-off redirected after a withheld or lost ack),
	// entered as a step that adds no noise right after the release (LedgerPath).
	Views        int
	RealisedNote string
	// FinalReleasedToAll: the final model is published to every node, so updates an
	// observer never saw during the run are charged at the end of the path.
	FinalReleasedToAll bool
	// Coalition, when non-empty, lists observers that pool their views.
	Coalition []int
	// Step carries the local step's fields of a privacy.WalkRun (Step, Rate,
	// SGDNonExpansive, GADMM; walk.StepRun); the zero value is the prox step.
	Step privacy.WalkRun
}

// WalkBase is the walk.Config fields that decide the run's figures (StepRun).
func (o *Options) WalkBase() walk.Config {
	return walk.Config{Gamma: o.Gamma, Clip: o.Clip, Sigma: o.Sigma, Step: o.Step, Unit: o.Unit, RowBound: o.rowBound()}
}

// RowBoundOf is RowBound, or the scaler's: the public row bound the run's figures use.
func (o *Options) RowBoundOf() float64 { return o.rowBound() }

// rowBound is RowBound, or the scaler's.
func (o *Options) rowBound() float64 {
	if o.RowBound > 0 {
		return o.RowBound
	}
	return o.Scaler.RowBound()
}

// walkRun returns r with in's clip, noise and step fields.
func (in AccountInput) walkRun(r privacy.WalkRun) privacy.WalkRun {
	r.Clip, r.Sigma = in.Clip, in.Sigma
	r.Step, r.Rate, r.SGDNonExpansive, r.GADMM = in.Step.Step, in.Step.Rate, in.Step.SGDNonExpansive, in.Step.GADMM
	r.Unit, r.RecordClip = in.Step.Unit, in.Step.RecordClip
	return r
}

// Short labels of the pairwise figures' theorems, for plot titles.
const (
	LabelTheorem4     = "Cyffers et al. Thm 4, conservative form"
	LabelFirstPassage = "first-passage law of the walk (Thm 4 proof)"
	LabelRealised     = "realised path, amplification by iteration per view of j"
	LabelLocal        = "local bound (pairwise conditions fail)"
)

// realisedConditions are the assumptions of the realised-path figure.
const realisedConditions = privacy.RealisedConditions

// ValidateCoalition checks coalition members against n nodes: non-empty, in [0, n),
// no repeats.
func ValidateCoalition(members []int, n int) error {
	if len(members) == 0 {
		return errors.New("testnet: coalition: no members")
	}
	seen := make(map[int]bool, len(members))
	for _, v := range members {
		if v < 0 || v >= n {
			return fmt.Errorf("testnet: coalition: node %d outside [0, %d)", v, n)
		}
		if seen[v] {
			return fmt.Errorf("testnet: coalition: node %d listed twice", v)
		}
		seen[v] = true
	}
	return nil
}

// Account computes the privacy section of a run: the local figure per node, the planned
// pairwise figure (Theorem 4 on the complete graph, the first-passage law of the walk on
// other graphs) and the realised pairwise figure from the run's path. It also returns the
// pairwise matrices for CSV and plot output (nil for fewer than 2 nodes).
func Account(in AccountInput) (Privacy, *PairMatrices, error) {
	n := len(in.Updates)
	if n < 1 {
		return Privacy{}, nil, errors.New("testnet: account: no nodes")
	}
	if !(in.Delta > 0 && in.Delta < 1) {
		return Privacy{}, nil, fmt.Errorf("testnet: account: delta must be in (0,1), got %v", in.Delta)
	}
	if math.IsNaN(in.Sigma) || in.Sigma < 0 || math.IsInf(in.Sigma, 0) {
		return Privacy{}, nil, fmt.Errorf("testnet: account: sigma must be finite and >= 0, got %v", in.Sigma)
	}
	if !(in.Clip > 0) {
		return Privacy{}, nil, fmt.Errorf("testnet: account: clip must be > 0, got %v", in.Clip)
	}
	if in.Graph != nil && !in.Graph.Complete && in.Graph.N != n {
		return Privacy{}, nil, fmt.Errorf("testnet: account: graph has %d nodes, want %d", in.Graph.N, n)
	}
	if in.Views < 0 {
		return Privacy{}, nil, fmt.Errorf("testnet: account: views must be >= 0, got %d", in.Views)
	}
	if in.Path != nil && uint64(len(in.Path)) != in.Hops+uint64(in.Views) {
		return Privacy{}, nil, fmt.Errorf("testnet: account: path has %d steps for %d hops and %d views", len(in.Path), in.Hops, in.Views)
	}
	if len(in.Coalition) > 0 {
		if err := ValidateCoalition(in.Coalition, n); err != nil {
			return Privacy{}, nil, err
		}
	}
	pr := Privacy{Delta: in.Delta, Conversion: privacy.Conversion, Updates: append([]int(nil), in.Updates...)}
	wr := in.walkRun(privacy.WalkRun{})
	pr.Unit, pr.UnitNote = wr.UnitOf(), wr.UnitNote()
	if rc := wr.RecordClip; rc > 0 && !math.IsInf(rc, 0) {
		pr.RecordClip = rc
	}
	pr.Local = localSection(in)
	if n < 2 {
		pr.PairwisePlanned = Pairwise{Note: "one node: no pairwise figure"}
		pr.PairwiseRealised = &Pairwise{Note: "one node: no pairwise figure"}
		return pr, nil, nil
	}
	pm := &PairMatrices{N: n, Delta: in.Delta}
	pr.PairwisePlanned = plannedSection(in, pm)
	pr.PairwiseRealised = realisedSection(in, pm)
	return pr, pm, nil
}

// localSection is the local figure per node, composed over its realised updates.
func localSection(in AccountInput) Local {
	updates, delta := in.Updates, in.Delta
	r := in.walkRun(privacy.WalkRun{})
	loc := Local{
		Figure: privacy.Figure{Theorem: privacy.StepLocalName(r), Conditions: privacy.StepLocalConditions(r),
			ConditionsHold: privacy.StepNoisy(r)},
		PerNodeEpsilon: make([]privacy.Epsilon, len(updates)),
	}
	if !loc.ConditionsHold {
		loc.Note = noPrivacyNote(in.Clip, in.Sigma)
	}
	worst := 0.0
	loc.Accountant = privacy.AccountantRDP
	type fig struct {
		eps, rdp, ord float64
		acct          string
	}
	memo := map[int]fig{}
	kmax := slices.Max(append([]int{0}, updates...))
	var top fig
	top.eps, top.rdp, top.ord, top.acct = privacy.StepLocalEpsilon(r, kmax, delta)
	// The PLD of the subsampled steps costs about a second: it is computed for the
	// busiest node only, and bounds every node with fewer updates (the loss of fewer
	// releases is smaller), next to each node's own RDP figure.
	pldOnce := !r.Step.ProxFigures() && r.Step != privacy.StepGADMM
	for i, k := range updates {
		f, ok := memo[k]
		switch {
		case ok:
		case k == kmax:
			f = top
		case pldOnce:
			f.rdp, f.ord = privacy.ToDP(privacy.StepLocalCurve(r, k), delta)
			f.eps, f.acct = f.rdp, privacy.AccountantRDP
			if top.eps < f.eps {
				f.eps, f.acct = top.eps, top.acct
			}
		default:
			f.eps, f.rdp, f.ord, f.acct = privacy.StepLocalEpsilon(r, k, delta)
		}
		memo[k] = f
		eps, rdp, ord, acct := f.eps, f.rdp, f.ord, f.acct
		loc.PerNodeEpsilon[i] = privacy.Eps(eps)
		if eps > worst || i == 0 {
			worst, loc.Order, loc.EpsilonRDP, loc.Accountant = eps, ord, privacy.Eps(rdp), acct
		}
		loc.Updates = max(loc.Updates, k)
	}
	loc.Epsilon = privacy.Eps(worst)
	return loc
}

// noisy reports whether updates carry a finite-sensitivity Gaussian (sigma > 0, C finite).
func noPrivacyNote(clip, sigma float64) string {
	if math.IsInf(clip, 0) {
		return "no clipping (clip +Inf): unbounded sensitivity, no privacy"
	}
	return "sigma 0: no noise, no privacy"
}

// noPrivacy is a pairwise figure for runs without a guarantee.
func noPrivacy(theorem, conditions, note string) Pairwise {
	inf := privacy.Unbounded
	return Pairwise{Worst: Worst{Epsilon: inf, I: 0, J: 1}, Mean: inf, P50: inf, P90: inf, P99: inf,
		Theorem: theorem, Conditions: conditions, Note: note}
}

// fromSummary copies the numbers of a pairwise summary into the report form (theorem,
// conditions and note are the caller's).
func fromSummary(s privacy.PairwiseSummary) Pairwise {
	s.Theorem, s.Conditions, s.ConditionsHold, s.Note = "", "", false, ""
	return s.Figure()
}

// plannedSection is the planned pairwise figure. K_i is the hard cap (the smaller of
// Cap and the budget's caps); the checked conditions are the order condition, the hard
// cap and that every hop of the run was a noisy update. When one fails the figures are
// the local bound at K_i, which holds regardless, and Note says why.
func plannedSection(in AccountInput, pm *PairMatrices) Pairwise {
	n := len(in.Updates)
	complete := in.Graph == nil || in.Graph.Complete
	theorem, conditions, label := privacy.Theorem4Name, privacy.Theorem4Conditions+"; every hop is a noisy update", LabelTheorem4
	if !complete {
		theorem, conditions, label = privacy.TheoremPlannedGraph, "", LabelFirstPassage
	}
	if !privacy.StepNoisy(in.walkRun(privacy.WalkRun{})) {
		return noPrivacy(theorem, conditions, noPrivacyNote(in.Clip, in.Sigma))
	}
	kmax, busiest, noisyHops := 0, 0, uint64(0)
	for i, k := range in.Updates {
		if k > kmax {
			kmax, busiest = k, i
		}
		noisyHops += uint64(k)
	}
	hard := in.Cap
	if len(in.Caps) > 0 {
		kb := 0
		for _, c := range in.Caps {
			kb = max(kb, c)
		}
		if hard == 0 || kb < hard {
			hard = kb
		}
	}
	wr := in.walkRun(privacy.WalkRun{Nodes: n, Complete: complete,
		Cap: max(hard, 0), Hops: in.Hops, Updates: kmax, Forwards: in.Hops - min(noisyHops, in.Hops), Resends: uint64(in.Views)})
	verdict := privacy.WalkDecide(wr)
	K := max(verdict.K, 1)
	if !wr.Step.ProxFigures() {
		// No pairwise matrix: the planned figure of these steps is one number for every
		// pair, named and computed by privacy.WalkPlannedBound as every other output does
		// (a plan cannot promise their amplification: the local figure).
		return uniformPlanned(in, wr, verdict, busiest, pm)
	}
	horizon := 0
	if in.Hops > 0 {
		horizon = int(min(in.Hops, uint64(math.MaxInt)))
	}
	var adj [][]int
	if !complete {
		adj = in.Graph.Adj
	}
	reasons, notes := verdict.Reasons, append([]string(nil), verdict.Warnings...)
	plan, err := PlannedPairwise(n, adj, complete, privacy.PlanOptions{
		Clip: wr.FigureClip(), Sigma: in.Sigma, Updates: K, Horizon: horizon})
	var pw Pairwise
	if err != nil {
		reasons = append(reasons, "not computed: "+err.Error())
	} else {
		theorem, conditions = plan.Theorem, plan.Conditions
		pw = fromSummary(plan.Pairs.Summarize(in.Delta))
		if plan.TailBounded {
			notes = append(notes, fmt.Sprintf("first-passage law computed for %d hops; the remaining mass is charged as if it arrived at the next hop (upper bound)", plan.Hops))
		}
		pm.Planned = plan.Pairs
	}
	pw.Theorem, pw.Conditions = theorem, conditions
	if len(reasons) > 0 {
		loc := privacy.StepLocalBound(wr, K, in.Delta)
		e := privacy.Eps(loc.Epsilon)
		if pw.Worst.I == pw.Worst.J {
			pw.Worst.I, pw.Worst.J = busiest, (busiest+1)%n
		}
		pairEps := pw.Worst.Epsilon
		pw.Worst.Epsilon, pw.Worst.Order = e, loc.Order
		pw.Mean, pw.P50, pw.P90, pw.P99 = e, e, e, e
		pw.ConditionsHold = false
		msg := "conditions fail: " + strings.Join(reasons, "; ") +
			fmt.Sprintf(". The figures shown are the local bound at K_i = %d (%s), which holds regardless", K, loc.Theorem)
		if pm.Planned != nil && pairEps.Bounded() {
			msg += fmt.Sprintf("; the pairwise form would give %.4g for the worst pair", pairEps)
		}
		notes = append([]string{msg}, notes...)
		pm.PlannedHold, pm.PlannedFallback, pm.PlannedLabel = false, jsonNum(loc.Epsilon), LabelLocal
	} else {
		pw.ConditionsHold = true
		lead := fmt.Sprintf("planning figure over the secret random path with K_i = %d (hard cap); the final model is charged as a view of every node", K)
		if complete {
			lead += "; every pair has the same figure; the paper's amplification argument has unverified steps (digest 3.6 E5); the local figure always holds"
		} else {
			lead += "; the local figure always holds"
		}
		notes = append([]string{lead}, notes...)
		pm.PlannedHold, pm.PlannedLabel = true, label
	}
	pw.Note = strings.Join(notes, "; ")
	return pw
}

// capRealised caps the realised summary at the local figure loc of the busiest node
// (kmax updates) where the step's local figure bounds every observer too
// (privacy.StepRealised.Cap, the rule the audit's claims use): each pair gets the smaller.
func capRealised(pw *Pairwise, info privacy.StepRealised, loc privacy.Bound, kmax int) {
	e := privacy.Eps(loc.Epsilon)
	if _, capped := info.Cap(float64(pw.Worst.Epsilon), float64(e)); !capped {
		return
	}
	pw.Worst.Epsilon, pw.Worst.Order = e, loc.Order
	pw.Mean, pw.P50, pw.P90, pw.P99 = min(pw.Mean, e), min(pw.P50, e), min(pw.P90, e), min(pw.P99, e)
	pw.Note += fmt.Sprintf("; capped at the local figure of the busiest node (%s, %d updates), which bounds every observer", loc.Theorem, kmax)
}

// realisedSection is the realised-path pairwise figure from the run's own path.
func realisedSection(in AccountInput, pm *PairMatrices) *Pairwise {
	n := len(in.Updates)
	wr := in.walkRun(privacy.WalkRun{Nodes: n, Complete: in.Graph == nil || in.Graph.Complete})
	if !privacy.StepNoisy(wr) {
		pw := noPrivacy(privacy.TheoremRealised, realisedConditions, noPrivacyNote(in.Clip, in.Sigma))
		return &pw
	}
	kmax, busiest := 0, 0
	for i, k := range in.Updates {
		if k > kmax {
			kmax, busiest = k, i
		}
	}
	fallback := func(reason string) *Pairwise {
		loc := privacy.StepLocalBound(wr, kmax, in.Delta)
		e := privacy.Eps(loc.Epsilon)
		return &Pairwise{Worst: Worst{Epsilon: e, Order: loc.Order, I: busiest, J: (busiest + 1) % n},
			Mean: e, P50: e, P90: e, P99: e, Theorem: privacy.TheoremRealised, Conditions: realisedConditions,
			Note: "realised figure not computed: " + reason + fmt.Sprintf(". The figures shown are the local bound of the busiest node (%d updates, %s), which holds regardless", kmax, loc.Theorem)}
	}

	if in.Path == nil {
		reason := in.RealisedNote
		if reason == "" {
			reason = "no path kept"
		}
		return fallback(reason)
	}
	tr := &privacy.Trace{Nodes: n, Clip: in.Clip, Sigma: in.Sigma, Steps: in.Path, FinalReleasedToAll: in.FinalReleasedToAll}
	var coal [][]int
	if len(in.Coalition) > 0 {
		coal = [][]int{in.Coalition}
	}
	res, info, err := privacy.StepRealisedPairwiseSpread(tr, wr, Spread, coal...)
	if reason, ok := privacy.NoNetworkReason(err); ok {
		return fallback(reason)
	}
	if err != nil {
		return fallback(err.Error())
	}
	theorem, conditions, gaps := info.Theorem, info.Conditions, info.Gaps
	for i, u := range res.Updates {
		if u != in.Updates[i] {
			return fallback(fmt.Sprintf("the path has %d noisy updates of node %d, the counters %d", u, i, in.Updates[i]))
		}
	}
	pw := fromSummary(res.Pairs.Summarize(in.Delta))
	pw.Theorem, pw.Conditions, pw.ConditionsHold = theorem, conditions, true
	pw.Note = "computed from this run's own path: the bound holds even for an observer who knows the path; " +
		"it is the realisation, the planned figure the expectation over a secret path"
	if in.Views > 0 {
		pw.Note += fmt.Sprintf("; %d time(s) a release was also received by a peer that did not go on with the token "+
			"(a hand-off redirected after a withheld or lost ack): each such peer is in the path as a view of that release, charged as if it held the token there", in.Views)
	}
	if in.FinalReleasedToAll {
		pw.Note += "; the final model (the report's model) is treated as released to every node, so updates an observer never saw during the run are charged at the end"
	}
	pw.Note += "; " + gaps
	capRealised(&pw, info, privacy.StepLocalBound(wr, kmax, in.Delta), kmax)
	pm.Realised, pm.RealisedLabel = res.Pairs, LabelRealised
	if len(res.Coalitions) == 1 {
		pw.Coalition = res.Coalitions[0].Figure(res.Pairs.Unit, in.Delta, theorem, conditions)
	}
	return &pw
}

// Limits of the realised figure computed by Run: the path is kept in memory (16 bytes
// per hop) and the computation costs about 10 ns per hop and node (each observer's sweep
// builds the convex minorants of every node's updates between its views). Longer runs
// report the local bound instead and say so; 'dpadmm account trace' recomputes from a
// trace file.
const (
	RealisedMaxHops = 1 << 26 // ~1 GiB of path
	RealisedMaxWork = 6e9     // hops * nodes, about a minute
)

// realisedFeasible says whether Run keeps the path for the realised figure, and why not.
func realisedFeasible(n int, hops uint64) (bool, string) {
	switch {
	case n < 2:
		return false, "one node"
	case hops > RealisedMaxHops:
		return false, fmt.Sprintf("%d hops exceed the in-memory limit of %d (write the path with --trace and run 'dpadmm account trace')", hops, uint64(RealisedMaxHops))
	case float64(hops)*float64(n) > RealisedMaxWork:
		return false, fmt.Sprintf("%d hops x %d nodes exceed the work limit %.0g (write the path with --trace and run 'dpadmm account trace')", hops, n, RealisedMaxWork)
	case n > 1<<27 || int64(n)*int64(n) > 1<<27:
		return false, fmt.Sprintf("%d nodes need a %d x %d matrix, too large", n, n, n)
	}
	return true, ""
}

// Prepared is what every testnet mode needs before the walk: checked options, the
// graph, the shards and the reference objective.
type Prepared struct {
	g      *graph.Graph
	split  string
	shards []*consensus.Dataset
	refObj float64
	// refWarn, when not empty, says the reference solve stopped before converging.
	refWarn string
	// step holds the local step's fields of the run's privacy.WalkRun (StepRun).
	step privacy.WalkRun
}

// prepare checks o, splits the training set and solves the reference problem.
func prepare(ctx context.Context, o Options) (*Prepared, error) {
	if o.Train == nil || o.Train.Rows == 0 {
		return nil, fmt.Errorf("testnet: empty training set")
	}
	if o.Nodes < 1 || o.Nodes > o.Train.Rows {
		return nil, fmt.Errorf("testnet: nodes must be in [1,%d] (training rows), got %d", o.Train.Rows, o.Nodes)
	}
	if !(o.Delta > 0 && o.Delta < 1) {
		return nil, fmt.Errorf("testnet: delta must be in (0,1), got %v", o.Delta)
	}
	if math.IsNaN(o.Sigma) || o.Sigma < 0 || math.IsInf(o.Sigma, 0) {
		return nil, fmt.Errorf("testnet: sigma must be finite and >= 0, got %v", o.Sigma)
	}
	if !(o.Clip > 0) {
		return nil, fmt.Errorf("testnet: clip must be > 0, got %v", o.Clip)
	}
	if o.Coalition != nil {
		if err := ValidateCoalition(o.Coalition, o.Nodes); err != nil {
			return nil, err
		}
	}
	p := &Prepared{split: o.Split}
	var err error
	if o.Graph != "" && o.Graph != "complete" {
		if p.g, err = graph.Parse(o.Graph, o.Nodes, o.Seed); err != nil {
			return nil, err
		}
	}
	if p.split == "" {
		p.split = "iid"
	}
	if p.shards, err = consensus.Split(o.Train, o.Nodes, p.split, o.Seed); err != nil {
		return nil, err
	}
	if p.step, err = StepRun(o.WalkBase(), o.Problem, p.shards); err != nil {
		return nil, fmt.Errorf("testnet: %w", err)
	}
	if _, p.refObj, err = consensus.Solve(o.Train, o.Problem, consensus.SolveOptions{Tol: 1e-12, MaxIter: 100000, Done: ctx.Done()}); err != nil {
		if errors.Is(err, consensus.ErrSolveCanceled) {
			return nil, fmt.Errorf("testnet: interrupted while solving for the reference objective, before the run: %w", ctx.Err())
		}
		if !errors.Is(err, consensus.ErrNoConvergence) {
			return nil, fmt.Errorf("testnet: reference solve: %w", err)
		}
		p.refWarn = fmt.Sprintf("the reference solver did not converge (%v): the reference objective and the gap are those of its last iterate", err)
	}
	return p, nil
}

// StepRun returns the step fields of a privacy.WalkRun (walk.StepRun) for a walk with the
// step, gamma, clip, sigma, unit and row bound of base and problem prob over shards (one
// per node, weights n*rows_i/N as in the simulator): what every figure of the run needs to
// know of its step, its unit and its record-level radius. Clip and Sigma of the result
// are base's.
func StepRun(base walk.Config, prob consensus.Problem, shards []*consensus.Dataset) (privacy.WalkRun, error) {
	var r privacy.WalkRun
	s := base.Step
	total := 0
	for _, sh := range shards {
		total += sh.Rows
	}
	n := len(shards)
	losses := make([]*consensus.LocalLoss, n)
	for i, sh := range shards {
		l, err := consensus.NewLocalLoss(sh, prob.Loss, walk.LossWeight(n, sh.Rows, total))
		if err != nil {
			return r, err
		}
		losses[i] = l
	}
	cfg := walk.Config{Gamma: base.Gamma, Clip: base.Clip, Sigma: base.Sigma, Reg: prob.Reg, Step: s, Unit: base.Unit, RowBound: base.RowBound}
	dim := 0
	if n > 0 {
		dim = shards[0].ModelDim()
	}
	err := walk.StepRun(cfg, losses, dim, n, &r)
	r.Clip, r.Sigma = base.Clip, base.Sigma
	return r, err
}

func (p *Prepared) gap(obj float64) float64 {
	return (obj - p.refObj) / math.Max(math.Abs(p.refObj), 1e-300)
}

// NetWalk is what a network launcher (--mem, --procs) measured of a walk: the model it
// ended with (nil: interrupted before the first release), its hops, each node's noisy
// updates, the path rebuilt from the nodes' ledgers, the wall time, and the plan's
// warnings as NetPlanWarnings gave them.
type NetWalk struct {
	Model        []float64
	Hops         uint64
	Updates      []int
	Path         []TraceStep
	Views        int
	Wall         time.Duration
	Interrupted  bool
	PlanWarnings []string
}

// Prepare checks o and prepares its run (shards, reference objective, plan) for a
// launcher; the launcher's report comes from NetReport, the same report as Run's. When
// ctx is canceled while the reference objective is being solved, it returns ctx's error.
func Prepare(ctx context.Context, o Options) (*Prepared, error) { return prepare(ctx, o) }

// Shards returns the run's shards, one per node.
func (p *Prepared) Shards() []*consensus.Dataset { return p.shards }

// NetPlanWarnings returns the warnings about the plan of a run on hosts (no simulator
// caps: the nodes apply their own) and passes each to Options.Warn.
func (p *Prepared) NetPlanWarnings(o Options) []string { return warnPlan(o, p, planCaps(o, nil), nil) }

// NetReport builds the report of a walk run on hosts from what the launcher measured:
// the simulator's report rules (objective, gap, accuracy, the privacy section), with the
// realised figure over the ledgers' path.
func (p *Prepared) NetReport(o Options, m NetWalk) (*Report, error) {
	z := m.Model
	if z == nil {
		z = walk.NewToken("", 0, o.Train.ModelDim(), o.Problem.Reg, o.Gamma).Z
	}
	w := outcome{z: z, hops: m.Hops, dim: len(z), updates: m.Updates, traceHash: PathHash(m.Path),
		wall: m.Wall, stepTime: m.Wall, views: m.Views, interrupted: m.Interrupted, planWarnings: m.PlanWarnings}
	for _, st := range m.Path {
		if st.Noisy && !st.View {
			w.lastNoisy = max(w.lastNoisy, st.Hop+1)
		}
	}
	if keep, why := realisedFeasible(o.Nodes, m.Hops); keep {
		// View steps are steps that add no noise (Noisy false): the realised accountant
		// charges the viewer for the state the release produced.
		w.path = make([]privacy.TraceStep, len(m.Path))
		for k, st := range m.Path {
			w.path[k] = privacy.TraceStep{Node: st.Node, Noisy: st.Noisy}
		}
	} else {
		w.realisedNote = why
	}
	if o.KeepTrace {
		w.trace = m.Path
	}
	return p.report(o, w)
}

// PathHash is the trace fingerprint of a path, as the simulator computes it hop by hop
// (Report.TraceHash): a network run's path rebuilt from its ledgers has the simulator's
// fingerprint when it is the same path.
func PathHash(path []TraceStep) uint64 {
	h := uint64(traceSeed)
	for _, st := range path {
		var nb uint64
		if st.Noisy {
			nb = 1
		}
		h = TraceMix(h, st.Hop+1, uint64(st.Node)<<1|nb)
	}
	return h
}

// traceSeed is the initial value of the simulator's trace fingerprint (see NewSim).
const traceSeed = 0x6a09e667f3bcc908

// SameBits reports whether a and b hold the same float64 values bit for bit.
func SameBits(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if math.Float64bits(a[k]) != math.Float64bits(b[k]) {
			return false
		}
	}
	return true
}

// outcome is the result of a walk, whatever ran it (simulator or real hosts).
type outcome struct {
	z            []float64
	hops         uint64
	dim          int
	updates      []int
	path         []privacy.TraceStep // nil: realised figure falls back, realisedNote says why
	views        int                 // steps of path that are views (AccountInput.Views)
	realisedNote string
	traceHash    uint64
	trace        []TraceStep // Report.Trace (o.KeepTrace)
	wall         time.Duration
	stepTime     time.Duration // time charged to the hops, for us_per_hop
	budget       *BudgetReport
	exhausted    bool
	interrupted  bool // stopped early: the report is partial
	// lastNoisy is the hop (1 = the first) of the last noisy update, 0 when none was made;
	// planWarnings the warnings about the plan, given to Options.Warn before the walk.
	lastNoisy    uint64
	planWarnings []string
}

// report builds the report of a finished walk: objective, gap, accuracy and the privacy
// section.
func (p *Prepared) report(o Options, w outcome) (*Report, error) {
	z := w.z
	obj := o.Problem.Objective(o.Train, z)
	r := &Report{
		Algo: WalkAlgo(o.Step), Objective: obj, ReferenceObjective: p.refObj, Gap: p.gap(obj),
		Hops: w.hops, Nodes: o.Nodes, Dims: w.dim, TrainRows: o.Train.Rows,
		WallSeconds: w.wall.Seconds(), Seed: o.Seed, Loss: o.Problem.Loss.String(),
		L1: o.Problem.Reg.L1, L2: o.Problem.Reg.L2, Gamma: o.Gamma, Lambda: o.Lambda,
		Clip: jsonNum(o.Clip), Sigma: o.Sigma, MaxUpdates: o.MaxUpdates, Scale: o.Scaling, Scaling: o.Scaler, Split: p.split,
		Graph: graphName(o.Graph), Data: o.Data, TraceHash: fmt.Sprintf("%016x", w.traceHash), Model: z,
		Ended: "hops", Budget: w.budget,
	}
	s := o.Step
	r.LocalStep, r.StepSize, r.Beta, r.Nu, r.SampleRate, r.StronglyConvex = s.Kind.String(), s.Eta, s.Beta, s.Nu, s.Rate, s.Strong
	if o.KeepTrace {
		r.Trace = w.trace
	}
	if w.exhausted {
		r.Ended = "budget exhausted"
	}
	if w.interrupted {
		r.Ended, r.Interrupted, r.HopsPlanned = "interrupted", true, o.Hops
	}
	if w.hops > 0 {
		r.UsPerHop = float64(w.stepTime.Nanoseconds()) / 1e3 / float64(w.hops)
	}
	if o.Problem.Loss.Classifies() {
		a := o.Problem.Accuracy(o.Train, z)
		r.TrainAccuracy = &a
	}
	if o.Test != nil && o.Test.Rows > 0 {
		r.TestRows = o.Test.Rows
		t := o.Problem.Objective(o.Test, z)
		r.TestObjective = &t
		if o.Problem.Loss.Classifies() {
			a := o.Problem.Accuracy(o.Test, z)
			r.Accuracy = &a
		}
	}
	r.setRegression(o.Problem.Loss, o.Train, o.Test, z)
	r.setPredictor(o.Problem.Loss, o.Scaler, o.Train, z)
	in := AccountInput{
		Updates: w.updates, Clip: o.Clip, Sigma: o.Sigma, Delta: o.Delta, Graph: p.g,
		Cap: o.MaxUpdates, Hops: w.hops, Path: w.path, Views: w.views, RealisedNote: w.realisedNote,
		FinalReleasedToAll: true, Coalition: o.Coalition, Step: p.step,
	}
	if r.Budget != nil {
		in.Caps = r.Budget.Caps
	}
	pr, pm, err := Account(in)
	if err != nil {
		return nil, err
	}
	r.Privacy, r.Pairs, r.StepRun = pr, pm, p.step
	r.Warnings = append([]string{}, w.planWarnings...)
	if msg := TrailingWarning(w.hops, w.lastNoisy, o.Nodes); msg != "" {
		r.Warnings = append(r.Warnings, msg)
	}
	if !w.interrupted {
		r.Warnings = append(r.Warnings, UtilityWarnings(o.Problem, o.Train, o.Test, z, walkUtilityHint)...)
	}
	return r, nil
}

// warnPlan returns the warnings about the plan of o (planWarnings) and passes each to
// o.Warn.
func warnPlan(o Options, p *Prepared, caps, budgetCaps []int) []string {
	ws := planWarnings(o, p.g == nil || p.g.Complete, caps, budgetCaps, p.step)
	if p.refWarn != "" {
		ws = append(ws, p.refWarn)
	}
	if o.Warn != nil {
		for _, m := range ws {
			o.Warn(m)
		}
	}
	return ws
}

// Run performs a complete simulated run and returns its report. The walk stops after
// o.Hops hops or when every node has exhausted its budget (Report.Ended says which).
func Run(o Options) (*Report, error) { return RunContext(context.Background(), o) }

// RunContext is Run stopped early when ctx is canceled: the walk checks ctx between
// blocks of a few thousand hops and the report then describes the hops done, with
// Report.Interrupted set (no error).
func RunContext(ctx context.Context, o Options) (rep *Report, err error) {
	p, err := prepare(ctx, o)
	if err != nil {
		return nil, err
	}
	budget := o.Budget
	if budget != nil && budget.Hops == 0 {
		b := *budget
		b.Hops = o.Hops // the run's length: the network figure charges the final release
		budget = &b
	}
	sim, err := NewSim(SimConfig{
		Shards: p.shards, Problem: o.Problem, Gamma: o.Gamma, Lambda: o.Lambda, Clip: o.Clip,
		Sigma: o.Sigma, Step: o.Step, Graph: o.Graph, MaxUpdates: o.MaxUpdates, Seed: o.Seed,
		Budget: budget, LedgerDir: o.LedgerDir, Unit: o.Unit, RowBound: o.rowBound(),
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := sim.Close(); cerr != nil && err == nil {
			rep, err = nil, fmt.Errorf("testnet: close: %w", cerr)
		}
	}()
	var budgetCaps []int
	if sim.plan != nil {
		budgetCaps = sim.plan.Caps
	}
	planWarned := warnPlan(o, p, sim.caps, budgetCaps)
	keepPath, whyNot := realisedFeasible(o.Nodes, o.Hops)
	sim.Store.KeepTrace = o.KeepTrace || keepPath
	r := &simRun{o: o, p: p, sim: sim, keepPath: keepPath}
	if keepPath {
		r.path = make([]privacy.TraceStep, 0, min(o.Hops, 1<<22))
	}
	if o.Curve != nil {
		fmt.Fprintln(o.Curve, "hop,objective,gap")
		r.writePoint()
	}
	start := time.Now()
	interrupted, err := r.hops(ctx)
	if err != nil {
		return nil, err
	}
	path, simDur := r.path, r.simDur
	w := outcome{
		z: append([]float64(nil), sim.Z()...), hops: sim.Hops(), dim: sim.Dim, updates: sim.Updates(),
		path: path, realisedNote: whyNot, traceHash: sim.TraceHash(), wall: time.Since(start),
		stepTime: simDur, budget: sim.Budget(), exhausted: sim.Exhausted(), interrupted: interrupted,
		lastNoisy: sim.Store.LastNoisy, planWarnings: planWarned,
	}
	if o.KeepTrace {
		w.trace = sim.Store.Path
	}
	if keepPath && interrupted && float64(w.hops)*float64(o.Nodes) > InterruptedMaxWork {
		keepPath, w.realisedNote = false, fmt.Sprintf("the run was interrupted after %d hops x %d nodes, above %.0g (the partial report is written at once); "+
			"write the path with --trace and run 'dpadmm account trace'", w.hops, o.Nodes, InterruptedMaxWork)
	}
	if !keepPath {
		w.path = nil
	}
	return p.report(o, w)
}

// simRun drives the simulator of a run hop by hop: it keeps the path for the realised
// figure, writes the curve and reports progress.
type simRun struct {
	o        Options
	p        *Prepared
	sim      *Sim
	keepPath bool                // keep the path for the realised figure
	path     []privacy.TraceStep // the path kept
	drained  int                 // steps of sim.Store.Path already kept (with KeepTrace)
	curveAt  uint64              // hop of the last curve point
	simDur   time.Duration       // time spent in the simulator
}

// drain moves the steps the simulator recorded into the path.
func (r *simRun) drain() {
	if r.keepPath {
		for _, st := range r.sim.Store.Path[r.drained:] {
			r.path = append(r.path, privacy.TraceStep{Node: st.Node, Noisy: st.Noisy})
		}
	}
	if r.o.KeepTrace {
		r.drained = len(r.sim.Store.Path)
	} else {
		r.sim.Store.Path = r.sim.Store.Path[:0]
	}
}

// writePoint writes the curve point of the current hop. The curve has a point every
// CurveEvery hops and always the last hop made (the end of the run or of the budget), once.
func (r *simRun) writePoint() {
	obj := r.o.Problem.Objective(r.o.Train, r.sim.Z())
	fmt.Fprintf(r.o.Curve, "%d,%.10g,%.6g\n", r.sim.Hops(), obj, r.p.gap(obj))
	r.curveAt = r.sim.Hops()
}

// hops runs the simulator until the hops are made, every node is out of budget or ctx
// ends (interrupted).
func (r *simRun) hops(ctx context.Context) (interrupted bool, err error) {
	o, sim := r.o, r.sim
	last := time.Now()
	const chunk = 4096
	stop := ctx.Done()
	for sim.Hops() < o.Hops && !sim.Exhausted() {
		select {
		case <-stop:
			interrupted = true
		default:
		}
		if interrupted {
			break
		}
		before := sim.Hops()
		k := min(uint64(chunk), o.Hops-before)
		if o.Curve != nil && o.CurveEvery > 0 {
			k = min(k, o.CurveEvery-before%o.CurveEvery)
		}
		t0 := time.Now()
		err := sim.RunHops(k, 0, nil)
		r.simDur += time.Since(t0)
		r.drain()
		if err != nil && !(errors.Is(err, ErrExhausted) && sim.Exhausted()) {
			return interrupted, err
		}
		if sim.Hops() == before {
			if sim.Exhausted() {
				break
			}
			return interrupted, fmt.Errorf("testnet: simulator made no progress at hop %d", before)
		}
		if o.Curve != nil && o.CurveEvery > 0 && sim.Hops()%o.CurveEvery == 0 {
			r.writePoint()
		}
		if o.Progress != nil && time.Since(last) >= time.Second {
			last = time.Now()
			o.Progress(sim.Hops(), o.Hops, o.Problem.Objective(o.Train, sim.Z()))
		}
	}
	if o.Curve != nil && r.curveAt != sim.Hops() {
		r.writePoint()
	}
	return interrupted, nil
}

// InterruptedMaxWork bounds the realised figure of an interrupted run (hops * nodes,
// about a second): a run stopped by a signal reports promptly and leaves longer
// computations to 'dpadmm account trace'.
const InterruptedMaxWork = 5e8

func graphName(s string) string {
	if s == "" {
		return "complete"
	}
	return s
}

// setRegression sets the RMSE and R^2 of model w on train and test (squared loss only).
// setPredictor sets the report's self-describing model (nothing without a scaler, or
// when the spec cannot be built: a report of data prepared by the caller).
func (r *Report) setPredictor(loss consensus.Loss, sc *consensus.Scaler, train *consensus.Dataset, w []float64) {
	if t := PredictorTemplate(loss, sc, train); t != nil {
		if m, err := t.WithWeights(w); err == nil {
			r.Predictor = m
		}
	}
}

// PredictorTemplate is the description (features, scaling, ranges, classes; zero
// weights) of the models of a run on train, scaled by sc: the report's predictor, and
// that of the nodes of a testnet on hosts, whose data the testnet prepared
// (node.Harness.Predictor). nil without a scaler or when the spec cannot be built.
func PredictorTemplate(loss consensus.Loss, sc *consensus.Scaler, train *consensus.Dataset) *consensus.ModelSpec {
	if sc == nil || train == nil {
		return nil
	}
	m, err := consensus.NewModelSpec(train, sc, loss, make([]float64, train.ModelDim()))
	if err != nil {
		return nil
	}
	return m
}

func (r *Report) setRegression(loss consensus.Loss, train, test *consensus.Dataset, w []float64) {
	if loss != consensus.Squared {
		return
	}
	set := func(d *consensus.Dataset, rmse, r2 **float64) {
		if d == nil || d.Rows == 0 {
			return
		}
		e, q, ok := consensus.Regression(d, w)
		*rmse = &e
		if ok {
			*r2 = &q
		}
	}
	set(train, &r.TrainRMSE, &r.TrainR2)
	set(test, &r.RMSE, &r.R2)
}

// WalkAlgo returns the algorithm name of a walk with local step p: "walk-gadmm" and
// "walk-sgd" for gradient ADMM and the DP-SGD walk, "walk" for the ADMM steps (prox,
// linearized, ls-sgd).
func WalkAlgo(p walk.StepParams) string {
	switch p.Kind {
	case walk.StepGADMM:
		return "walk-gadmm"
	case walk.StepSGD:
		return "walk-sgd"
	}
	return "walk"
}

// uniformPlanned is the planned section of the steps whose planned figure is one number
// for every pair (gradient ADMM and ls-sgd: privacy.WalkPlannedBound, the local figure at
// K_i with the verdict's reasons).
func uniformPlanned(in AccountInput, wr privacy.WalkRun, v privacy.WalkVerdict, busiest int, pm *PairMatrices) Pairwise {
	n := len(in.Updates)
	b := privacy.WalkPlannedBound(wr, in.Delta)
	e := privacy.Eps(b.Epsilon)
	pw := Pairwise{Worst: Worst{Epsilon: e, Order: b.Order, I: busiest, J: (busiest + 1) % n},
		Mean: e, P50: e, P90: e, P99: e, Theorem: b.Theorem, Conditions: b.Conditions, ConditionsHold: b.ConditionsHold, Note: b.Note}
	if len(v.Reasons) > 0 && b.ConditionsHold {
		pw.ConditionsHold = false
		pw.Note = "conditions fail: " + strings.Join(v.Reasons, "; ") + "; " + pw.Note
	}
	pm.PlannedHold, pm.PlannedFallback, pm.PlannedLabel = false, jsonNum(b.Epsilon), LabelLocal
	return pw
}
