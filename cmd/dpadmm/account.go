package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/consensus/graph"
	"github.com/dpadmm/dpadmm/node"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/testnet/experiment"
	"github.com/dpadmm/dpadmm/testnet/sim"
	"github.com/dpadmm/dpadmm/walk"
)

const accountHelp = `Usage:
  dpadmm account plan --nodes N --hops K --graph G --clip C --sigma S --delta D [flags]
  dpadmm account trace [--delta D] [--json] [--coalition 1,2,3] [--pairs F.csv] [--plot F.png] FILE
  dpadmm account subsampled --q Q (--noise-multiplier Z | --target-epsilon E) --steps T [--delta D] [--json]
  dpadmm account models [--allow-missing] [--json] [--out F] [--data F] FILE|DIR ...

plan: privacy figures of a planned run before it starts. The local figure holds against an
observer of every message; the pairwise figure bounds node i's data as seen by node j when
the path of the walk is secret (Cyffers et al. Theorem 4 on the complete graph, the
first-passage law of the walk on other graphs).
trace: realised pairwise figures recomputed from a trace file (JSON lines, see privacy.WriteTrace).
subsampled: the Poisson-subsampled Gaussian mechanism composed T times (DP-SGD accounting),
or the smallest noise multiplier meeting --target-epsilon.
models: the averaged model and the network figure (Theorem V.1, maximum over the members) of a
neighbour-exchange run from the members' model.json files.

Run 'dpadmm account <plan|trace|subsampled|models> --help' for the flags of each.
The keys of --json are listed in docs/report-schema.md.
`

const accountPlanHelp = `Usage:
  dpadmm account plan --nodes N --hops K --graph G --clip C --sigma S --delta D [flags]

Privacy figures of a planned run before it starts. The local figure holds against an
observer of every message; the pairwise figure bounds node i's data as seen by node j when
the path of the walk is secret (Cyffers et al. Theorem 4 on the complete graph, the
first-passage law of the walk on other graphs). --target-epsilon calibrates sigma instead.
`

const accountTraceHelp = `Usage:
  dpadmm account trace [--delta D] [--json] [--coalition 1,2,3] [--pairs F.csv] [--plot F.png] FILE

Realised pairwise figures recomputed from a trace file (JSON lines, see privacy.WriteTrace;
'dpadmm testnet --trace FILE' writes one), and the verdict on the planned figure for that
path. Flags may come before or after FILE.
`

// localReport is the local-DP part of the account output: the figure (privacy.Figure)
// and the noisy updates it is composed over.
type localReport struct {
	privacy.Figure
	Updates int `json:"updates"`
}

func localJSON(b privacy.Bound, updates int) localReport {
	return localReport{Figure: b.Figure(), Updates: updates}
}

// planReport is the JSON output of "account plan".
type planReport struct {
	Delta           float64                `json:"delta"`
	Conversion      string                 `json:"conversion"`
	Graph           string                 `json:"graph"`
	Nodes           int                    `json:"nodes"`
	Hops            int                    `json:"hops"`
	Clip            float64                `json:"clip"`
	Sigma           float64                `json:"sigma"`
	SigmaCalibrated bool                   `json:"sigma_calibrated"`
	UpdatesCapped   bool                   `json:"updates_capped"`
	Local           localReport            `json:"local"`
	Pairwise        privacy.PairwiseFigure `json:"pairwise_planned"`
	PassageHops     int                    `json:"first_passage_hops,omitempty"`
	TailBounded     bool                   `json:"first_passage_tail_bounded,omitempty"`
	// LocalStep names the walk's local step when it is not the exact prox.
	LocalStep string `json:"local_step,omitempty"`
}

// traceReport is the JSON output of "account trace".
type traceReport struct {
	Delta      float64                  `json:"delta"`
	Conversion string                   `json:"conversion"`
	Nodes      int                      `json:"nodes"`
	Steps      int                      `json:"steps"`
	Clip       float64                  `json:"clip"`
	Sigma      float64                  `json:"sigma"`
	Local      localReport              `json:"local"`
	Pairwise   privacy.PairwiseFigure   `json:"pairwise_realised"`
	Coalition  *privacy.CoalitionFigure `json:"coalition,omitempty"`
	// Planned is the verdict on the planned (Theorem 4) figure for this path: the same
	// decision the simulator's report and the nodes make (privacy.WalkDecide).
	Planned plannedVerdict `json:"planned_verdict"`
}

// plannedVerdict is privacy.WalkDecide's answer for a run.
type plannedVerdict struct {
	ConditionsHold bool     `json:"conditions_hold"`
	K              int      `json:"k_i"`
	Reasons        []string `json:"reasons,omitempty"`
	Warnings       []string `json:"warnings,omitempty"`
}

func runAccount(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("account", "which subcommand? plan, trace, subsampled or models")
	}
	switch args[0] {
	case "plan":
		return runAccountPlan(args[1:], stdout, stderr)
	case "trace":
		return runAccountTrace(args[1:], stdout, stderr)
	case "subsampled":
		return runAccountSubsampled(args[1:], stdout, stderr)
	case "models":
		return runAccountModels(args[1:], stdout, stderr)
	case "-h", "--help", "-help", "help":
		fmt.Fprint(stdout, accountHelp)
		return nil
	default:
		return unknownCommand("account", "subcommand", args[0], accountSubcommands)
	}
}

// accountSubcommands are the subcommands of "account".
var accountSubcommands = []string{"plan", "trace", "subsampled", "models"}

// usageErr returns a usage error of "account"; a message that starts with a subcommand
// name ("plan: ...") is a usage error of that subcommand. run prints it (exit code 2).
func usageErr(_ io.Writer, format string, a ...any) error {
	msg := fmt.Sprintf(format, a...)
	if sub, rest, ok := strings.Cut(msg, ": "); ok && slices.Contains(accountSubcommands, sub) {
		return &usageError{cmd: "account " + sub, msg: rest}
	}
	return &usageError{cmd: "account", msg: msg}
}

func finitePositive(v float64) bool { return v > 0 && !math.IsInf(v, 0) }

// sectionSteps is the help section of the local steps' flags of 'account plan'.
const sectionSteps = "the walk's local steps (--algo, --local-step)"

// planFlags are the flags of 'dpadmm account plan'.
type planFlags struct {
	m               *modeFlags
	sf              *stepFlags
	nodes, hops     *int
	maxUpd          *int
	graphSpec, algo *string
	budgetKind      *string
	clip, sigma     *float64
	target, delta   *float64
	weight          *float64
	rows            *int
	gamma           *float64
	lossName, unit  *string
	asJSON, nonExp  *bool
	seed            *uint64
}

func newPlanFlags(stdout io.Writer) *planFlags {
	m := newModeFlags("account plan", accountPlanHelp, stdout)
	f := &planFlags{m: m}
	f.nodes = m.Int("nodes", 0, "number of nodes n (>= 2)")
	f.hops = m.Int("hops", 0, "number of hops of the run (>= 1)")
	f.graphSpec = m.String("graph", "complete", "graph: complete|ring|grid|er:p|regular:d|file:PATH")
	f.clip = m.Float64("clip", 0, "clip bound C on ||x - z|| (> 0)")
	f.sigma = m.Float64("sigma", 0, "std of eta in eq. (7) (> 0); ignored with --target-epsilon")
	f.rows = m.Int("rows", 0, "prox and linearized steps, --privacy-unit record: the run's total rows M; with --gamma and --loss it gives the record radius gamma (c L + 1e-9), c = n/M, rows on the unit ball, and the figures use the smaller of it and --clip (0: no radius, the clip bounds the record)")
	f.gamma = m.Float64("gamma", node.DefaultConfig().Gamma, "the walk's gamma, for the record radius")
	f.lossName = m.String("loss", "logistic", "the loss, for the record radius: logistic, multinomial or squared (no radius)")
	f.unit = m.String("privacy-unit", string(privacy.UnitRecord), "record or node (see 'dpadmm testnet --help')")
	f.maxUpd = m.Int("max-updates", 0, "hard cap K_i on noisy updates per node; 0 = no cap (the plan then uses hops/n)")
	f.target = m.Float64("target-epsilon", 0, "calibrate sigma: smallest sigma meeting this epsilon")
	f.budgetKind = m.String("budget-kind", "pairwise", "what --target-epsilon constrains: pairwise (worst pair) or local")
	f.delta = m.Float64("delta", privacy.DefaultDelta, "delta of the (epsilon, delta) figures, in (0,1)")
	f.asJSON = m.Bool("json", false, "print JSON")
	f.seed = m.Uint64("seed", 1, "seed of random graphs (er, regular)")
	f.algo = m.String("algo", "walk", "walk, walk-gadmm or walk-sgd (the local step's figures; see 'dpadmm testnet --help')")
	f.sf = addStepFlags(m, sectionSteps, "")
	m.in(sectionSteps, "--algo walk-sgd", "walk:sgd")
	f.nonExp = m.Bool("sgd-non-expansive", false, "walk-sgd: every node's step is known to be non-expansive (eta <= 2/beta for its data; 'dpadmm testnet' checks it on the data): the pairwise figure may then use amplification")
	m.in(sectionSteps, "--algo walk-gadmm", "walk:gadmm")
	f.weight = m.Float64("weight", 1, "walk-gadmm: the largest node weight n*rows_i/N (the sensitivity is the step size times twice weight times clip)")
	return f
}

func runAccountPlan(args []string, stdout, stderr io.Writer) error {
	f := newPlanFlags(stdout)
	if err := f.m.parse(args); err != nil {
		return err
	}
	if f.m.NArg() > 0 {
		return usageErr(stderr, "plan: unexpected argument %q", f.m.Arg(0))
	}
	if _, ok := walkAlgos[*f.algo]; !ok {
		return usageErr(stderr, "plan: --algo must be walk, walk-gadmm or walk-sgd, got %q", *f.algo)
	}
	mode, what, err := algoMode(*f.algo, *f.sf.local, f.m.isSet("local-step"))
	if err != nil {
		return usageErr(stderr, "plan: %v", err)
	}
	if err := f.m.check(mode, what); err != nil {
		return err
	}
	step, err := f.sf.params(stepKind(mode), f.m.isSet("step-size"))
	if err != nil {
		return usageErr(stderr, "plan: %v", err)
	}
	if err := f.recordRadius(stderr, step); err != nil {
		return err
	}
	if step.Kind != walk.StepProx && step.Kind != walk.StepLinearized {
		if !finitePositive(*f.weight) {
			return usageErr(stderr, "plan: --weight must be finite and > 0, got %v", *f.weight)
		}
		return planStep(stdout, stderr, step, planStepArgs{nodes: *f.nodes, hops: *f.hops, graph: *f.graphSpec, clip: *f.clip,
			sigma: *f.sigma, maxUpd: *f.maxUpd, target: *f.target, calibrate: f.m.isSet("target-epsilon"), kind: *f.budgetKind,
			delta: *f.delta, json: *f.asJSON, nonExp: *f.nonExp, weight: *f.weight})
	}
	return f.planWalk(stdout, stderr)
}

// recordRadius applies --privacy-unit record with --rows: every figure of the prox and
// linearized steps is a function of the clip, so the plan uses FigureClip, the smaller of
// --clip and the record radius (walk.PlanRecordClip), and says so on stderr.
func (f *planFlags) recordRadius(stderr io.Writer, step walk.StepParams) error {
	unit, err := privacy.ParseUnit(*f.unit)
	switch {
	case err != nil:
		return usageErr(stderr, "plan: --privacy-unit: %v", err)
	case *f.rows < 0:
		return usageErr(stderr, "plan: --rows must be >= 0, got %d", *f.rows)
	case *f.rows == 0 || unit == privacy.UnitNode || (step.Kind != walk.StepProx && step.Kind != walk.StepLinearized):
		return nil
	case !finitePositive(*f.gamma):
		return usageErr(stderr, "plan: --gamma must be finite and > 0, got %v", *f.gamma)
	}
	var loss consensus.Loss
	switch *f.lossName {
	case "multinomial":
		loss = consensus.Multinomial
	default:
		if loss, err = consensus.ParseLoss(*f.lossName); err != nil {
			return usageErr(stderr, "plan: --loss: %v", err)
		}
	}
	r := planWalkRun(step, *f.gamma, *f.clip, unit, 1, loss, *f.nodes, *f.rows)
	if c := r.FigureClip(); c < *f.clip {
		fmt.Fprintf(stderr, "plan: per record (%d rows, gamma %g, %s loss): the record radius %.4g is below --clip %g; every figure uses it\n",
			*f.rows, *f.gamma, loss, c, *f.clip)
		*f.clip = c
	}
	return nil
}

// planWalk is 'account plan' for the prox and linearized steps: the local figure and the
// planned pairwise figure of the graph (Theorem 4 or the first-passage law), with sigma
// calibrated on --target-epsilon.
// maxPlanNodes bounds --nodes on a graph other than the complete one: the planned matrix
// is n x n (privacy.NewPlanBuilder refuses above 2^27 entries).
const maxPlanNodes = 11585

func (f *planFlags) planWalk(stdout, stderr io.Writer) error {
	nodes, hops, graphSpec, clip, sigma, maxUpd := f.nodes, f.hops, f.graphSpec, f.clip, f.sigma, f.maxUpd
	target, budgetKind, delta, seed := f.target, f.budgetKind, f.delta, f.seed
	switch {
	case *nodes < 2:
		return usageErr(stderr, "plan: --nodes must be >= 2, got %d", *nodes)
	case *hops < 1:
		return usageErr(stderr, "plan: --hops must be >= 1, got %d", *hops)
	case !finitePositive(*clip):
		return usageErr(stderr, "plan: --clip must be finite and > 0, got %v", *clip)
	case *maxUpd < 0:
		return usageErr(stderr, "plan: --max-updates must be >= 0, got %d", *maxUpd)
	case !(*delta > 0 && *delta < 1):
		return usageErr(stderr, "plan: --delta must be in (0,1), got %v", *delta)
	case *budgetKind != "pairwise" && *budgetKind != "local":
		return usageErr(stderr, "plan: --budget-kind must be pairwise or local, got %q", *budgetKind)
	}
	calibrate := f.m.isSet("target-epsilon")
	if calibrate && !finitePositive(*target) {
		return usageErr(stderr, "plan: --target-epsilon must be finite and > 0, got %v", *target)
	}
	if !calibrate && !finitePositive(*sigma) {
		return usageErr(stderr, "plan: --sigma must be finite and > 0, got %v", *sigma)
	}
	if *graphSpec != "complete" && *nodes > maxPlanNodes {
		// The first-passage plan holds an n x n matrix: refuse before building the graph.
		return usageErr(stderr, "plan: --graph %s with %d nodes needs a %d x %d matrix; at most %d nodes on a graph other than the complete one (which has a closed form)",
			*graphSpec, *nodes, *nodes, *nodes, maxPlanNodes)
	}
	g, err := graph.Parse(*graphSpec, *nodes, *seed)
	if err != nil {
		return usageErr(stderr, "plan: --graph: %v", err)
	}
	return f.planWalkFigures(stdout, g, calibrate)
}

// planWalkFigures computes and prints the figures of planWalk on the graph g, with sigma
// calibrated on --target-epsilon when calibrate.
func (f *planFlags) planWalkFigures(stdout io.Writer, g *graph.Graph, calibrate bool) error {
	nodes, hops, graphSpec, clip, sigma, maxUpd := f.nodes, f.hops, f.graphSpec, f.clip, f.sigma, f.maxUpd
	target, budgetKind, delta, asJSON := f.target, f.budgetKind, f.delta, f.asJSON
	var err error
	n := *nodes
	updates, capped := *maxUpd, *maxUpd > 0
	if !capped {
		updates = (*hops + n - 1) / n
	}
	// The first-passage weights do not depend on sigma: compute them once.
	s0 := *sigma
	if calibrate {
		s0 = 1
	}
	plan, err := sim.PlannedPairwise(n, g.Adj, g.Complete, privacy.PlanOptions{
		Clip: *clip, Sigma: s0, Updates: updates, Horizon: *hops})
	if err != nil {
		return err
	}
	wmax := 1.0
	if !g.Complete {
		wmax = 0
		for i := 0; i < n; i++ {
			for j := 0; j < n; j++ {
				if w := plan.Pairs.Weight(i, j); w > wmax {
					wmax = w
				}
			}
		}
	}
	unitFor := func(s float64) privacy.Curve {
		if g.Complete {
			return privacy.Theorem4FinalCurve(n, updates, uint64(*hops), *clip, s)
		}
		return privacy.AmplifiedUpdateCurve(*clip, s, updates)
	}
	sg := *sigma
	if calibrate {
		if sg, err = calibratePlan(*target, *delta, *budgetKind, *clip, updates, wmax, unitFor); err != nil {
			return err
		}
	}
	plan.Pairs.Unit = unitFor(sg)
	sum := plan.Pairs.Summarize(*delta)
	sum.Theorem, sum.Conditions = plan.Theorem, plan.Conditions
	// The one verdict of every walk figure (the simulator's report, nodes, account trace).
	verdict := privacy.WalkDecide(privacy.WalkRun{Nodes: n, Complete: g.Complete, Clip: *clip, Sigma: sg,
		Cap: *maxUpd, Hops: uint64(*hops), Planning: true})
	sum.ConditionsHold = verdict.PlannedHolds
	var notes []string
	if plan.TailBounded {
		notes = append(notes, fmt.Sprintf("first-passage law computed for %d hops; the remaining mass is charged as if it arrived at the next hop (upper bound)", plan.Hops))
	}
	if !g.Complete {
		notes = append(notes, "every hop is treated as a noisy update")
	}
	notes = append(notes, "the final model is charged as a view of every node")
	notes = append(notes, verdict.Warnings...)
	loc := privacy.LocalBound(*clip, sg, updates, *delta)
	if !verdict.PlannedHolds {
		msg := "conditions fail: " + strings.Join(verdict.Reasons, "; ") +
			fmt.Sprintf(". The figures shown are the local bound at K_i = %d, which holds regardless", updates)
		if !math.IsInf(sum.Worst.Epsilon, 1) {
			msg += fmt.Sprintf("; the pairwise form would give %.4g for the worst pair", sum.Worst.Epsilon)
		}
		notes = append([]string{msg}, notes...)
		sum.Worst.Epsilon, sum.Worst.Order = loc.Epsilon, loc.Order
		sum.Mean, sum.P50, sum.P90, sum.P99 = loc.Epsilon, loc.Epsilon, loc.Epsilon, loc.Epsilon
	} else if loc.Epsilon < sum.Worst.Epsilon {
		// The local figure bounds every observer: it caps the pairwise ones.
		notes = append(notes, fmt.Sprintf("capped at the local figure %.4g, which bounds every observer (the amplified form gives %.4g for the worst pair)", loc.Epsilon, sum.Worst.Epsilon))
		sum.Worst.Epsilon, sum.Worst.Order = loc.Epsilon, loc.Order
		sum.Mean, sum.P50, sum.P90, sum.P99 = math.Min(sum.Mean, loc.Epsilon), math.Min(sum.P50, loc.Epsilon), math.Min(sum.P90, loc.Epsilon), math.Min(sum.P99, loc.Epsilon)
	}
	sum.Note = strings.Join(notes, "; ")
	rep := planReport{
		Delta: *delta, Conversion: privacy.Conversion, Graph: *graphSpec, Nodes: n, Hops: *hops,
		Clip: *clip, Sigma: sg, SigmaCalibrated: calibrate, UpdatesCapped: capped,
		Local:       localJSON(loc, updates),
		Pairwise:    sum.Figure(),
		PassageHops: plan.Hops, TailBounded: plan.TailBounded,
	}
	if *asJSON {
		return writeJSON(stdout, rep)
	}
	f.printPlan(stdout, rep, sum, verdict, loc)
	return nil
}

// calibratePlan is the sigma of --target-epsilon for a walk plan: on the local curve
// (--budget-kind local), or on the worst pair's figure capped at the local one, which
// bounds every observer (as every node caps its own): with few nodes the amplified form
// can be weaker than the exact local conversion, and calibrating on it alone would add
// noise for nothing. A target below the RDP conversion's floor stays refused (the first
// calibration says so).
func calibratePlan(target, delta float64, budgetKind string, clip float64, updates int, wmax float64, unitFor func(float64) privacy.Curve) (float64, error) {
	if budgetKind == "local" {
		return privacy.CalibrateSigma(target, delta, func(s float64) privacy.Curve { return privacy.WalkLocalCurve(clip, s, updates) })
	}
	if _, err := privacy.CalibrateSigma(target, delta, func(s float64) privacy.Curve { return unitFor(s).Scale(wmax) }); err != nil {
		return 0, err
	}
	return privacy.CalibrateFigure(target, func(s float64) float64 {
		e, _ := privacy.ToDP(unitFor(s).Scale(wmax), delta)
		return math.Min(e, privacy.LocalBound(clip, s, updates, delta).Epsilon)
	})
}

// printPlan prints the figures of planWalkFigures as text.
func (f *planFlags) printPlan(w io.Writer, rep planReport, sum privacy.PairwiseSummary, verdict privacy.WalkVerdict, loc privacy.Bound) {
	n, graphSpec, hops, clip, sg, updates := rep.Nodes, f.graphSpec, f.hops, f.clip, rep.Sigma, rep.Local.Updates
	calibrate, budgetKind, target, delta := rep.SigmaCalibrated, f.budgetKind, f.target, f.delta
	fmt.Fprintf(w, "plan: %d nodes, graph %s, %d hops, clip %g, sigma %g", n, *graphSpec, *hops, *clip, sg)
	if calibrate {
		fmt.Fprintf(w, " (calibrated for %s epsilon %g)", *budgetKind, *target)
	}
	fmt.Fprintf(w, "\n(epsilon, delta=%g) via %s\n\n", *delta, privacy.Conversion)
	fmt.Fprintf(w, "local:    epsilon %.6g (order %g), K_i = %d updates\n", loc.Epsilon, loc.Order, updates)
	fmt.Fprintf(w, "          theorem: %s\n          conditions: %s\n\n", loc.Theorem, loc.Conditions)
	printPairwise(w, "pairwise (planned)", sum)
	if !verdict.PlannedHolds {
		fmt.Fprintf(w, "\nWARNING: the planned pairwise figure will not hold for this run: %s\n", strings.Join(verdict.Reasons, "; "))
	} else if len(verdict.Warnings) > 0 {
		fmt.Fprintf(w, "\nWARNING: %s\n", strings.Join(verdict.Warnings, "; "))
	}
}

func printPairwise(w io.Writer, title string, s privacy.PairwiseSummary) {
	fmt.Fprintf(w, "%s: worst pair %d -> %d: epsilon %.6g (order %g)\n", title, s.Worst.I, s.Worst.J, s.Worst.Epsilon, s.Worst.Order)
	fmt.Fprintf(w, "          mean %.6g, p50 %.6g, p90 %.6g, p99 %.6g\n", s.Mean, s.P50, s.P90, s.P99)
	fmt.Fprintf(w, "          theorem: %s\n          conditions: %s\n          conditions hold: %v\n", s.Theorem, s.Conditions, s.ConditionsHold)
	if s.Note != "" {
		fmt.Fprintf(w, "          note: %s\n", s.Note)
	}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("account: encode JSON: %w", err)
	}
	return nil
}

func runAccountTrace(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("account trace", accountTraceHelp, stdout)
	delta := fs.Float64("delta", privacy.DefaultDelta, "delta of the (epsilon, delta) figures, in (0,1)")
	asJSON := fs.Bool("json", false, "print JSON")
	coalition := fs.String("coalition", "", "comma-separated observers pooling their views")
	pairsPath := fs.String("pairs", "", "write every ordered pair as CSV i,j,planned_epsilon,realised_epsilon (planned is empty: a trace has no graph)")
	plotPath := fs.String("plot", "", "draw the realised pairwise epsilon heat map (PNG) to this file")
	maxUpd := fs.Int("max-updates", 0, "hard cap K_i of the run, for the planned figure's verdict; 0 = none")
	// Accept flags before and after the file name.
	files, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(files) != 1 {
		return usageErr(stderr, "trace: want exactly one trace file, got %d", len(files))
	}
	if !(*delta > 0 && *delta < 1) {
		return usageErr(stderr, "trace: --delta must be in (0,1), got %v", *delta)
	}
	if *maxUpd < 0 {
		return usageErr(stderr, "trace: --max-updates must be >= 0, got %d", *maxUpd)
	}
	if *coalition != "" {
		// Syntax first; the range is checked once the trace gives the number of nodes.
		if _, err := parseCoalition(*coalition, math.MaxInt); err != nil {
			return usageErr(stderr, "trace: --coalition: %v", err)
		}
	}
	f, err := os.Open(files[0])
	if err != nil {
		return err
	}
	defer f.Close()
	tr, err := privacy.ReadTrace(f)
	if err != nil {
		return fmt.Errorf("%s: %w", files[0], err)
	}
	var coal [][]int
	if *coalition != "" {
		members, err := parseCoalition(*coalition, tr.Nodes)
		if err != nil {
			return usageErr(stderr, "trace: --coalition: %v (the trace has %d nodes)", err, tr.Nodes)
		}
		coal = append(coal, members)
	}
	if tr.Nodes < 2 && (*pairsPath != "" || *plotPath != "") {
		return usageErr(stderr, "trace: --pairs and --plot need at least 2 nodes, the trace has %d", tr.Nodes)
	}
	wr := tr.WalkRun()
	res, info, err := privacy.StepRealisedPairwiseSpread(tr, wr, sim.Spread, coal...)
	if errors.Is(err, privacy.ErrNoNetworkFigure) {
		return fmt.Errorf("%v: 'account trace' computes realised network figures only; the trace's local figure is the one that holds", err)
	}
	if err != nil {
		return err
	}
	rep, sum, loc, v := traceFigures(tr, wr, res, info, *delta, *maxUpd)
	if *pairsPath != "" || *plotPath != "" {
		pm := &sim.PairMatrices{N: tr.Nodes, Delta: *delta, Realised: res.Pairs, RealisedLabel: sim.LabelRealised}
		if *pairsPath != "" {
			if err := writeFileWith(*pairsPath, func(w io.Writer) error { return sim.WritePairsCSV(w, pm) }); err != nil {
				return err
			}
		}
		if *plotPath != "" {
			if err := writeFileWith(*plotPath, func(w io.Writer) error { return sim.WritePairsPNG(w, pm, sim.PlotRealised) }); err != nil {
				return err
			}
		}
	}
	if *asJSON {
		return writeJSON(stdout, rep)
	}
	printTrace(stdout, files[0], tr, rep, sum, loc, v)
	return nil
}

// traceFigures computes the figures of 'account trace' from the realised pairwise result
// of the trace: the local figure of the busiest node, the realised pairwise summary (capped
// at the local figure where the step's figure is), the planned verdict and the coalition.
func traceFigures(tr *privacy.Trace, wr privacy.WalkRun, res *privacy.Realised, info privacy.StepRealised, delta float64, maxUpd int) (
	traceReport, privacy.PairwiseSummary, privacy.Bound, privacy.WalkVerdict) {
	sum := res.Pairs.Summarize(delta)
	sum.Theorem = info.Theorem
	sum.Conditions = info.Conditions
	sum.ConditionsHold = true
	sum.Note = info.Gaps
	if tr.FinalReleasedToAll {
		sum.Note = "the final model is released to every node: unobserved updates are charged at the end of the trace; " + sum.Note
	}
	maxU := 0
	for _, u := range res.Updates {
		if u > maxU {
			maxU = u
		}
	}
	loc := privacy.StepLocalBound(wr, maxU, delta)
	if info.CapAtLocal && sum.Worst.Epsilon > loc.Epsilon {
		sum.Worst.Epsilon, sum.Worst.Order = loc.Epsilon, loc.Order
		sum.Mean, sum.P50, sum.P90, sum.P99 = min(sum.Mean, loc.Epsilon), min(sum.P50, loc.Epsilon), min(sum.P90, loc.Epsilon), min(sum.P99, loc.Epsilon)
		sum.Note += "; capped at the local figure of the busiest node, which bounds every observer"
	}
	fwd := uint64(0)
	for _, st := range tr.Steps {
		if !st.Noisy {
			fwd++
		}
	}
	vr := wr
	vr.Cap, vr.Hops, vr.Updates, vr.Forwards = maxUpd, uint64(len(tr.Steps)), maxU, fwd
	v := privacy.WalkDecide(vr)
	rep := traceReport{
		Planned: plannedVerdict{ConditionsHold: v.PlannedHolds, K: v.K, Reasons: v.Reasons, Warnings: v.Warnings},
		Delta:   delta, Conversion: privacy.Conversion, Nodes: tr.Nodes, Steps: len(tr.Steps),
		Clip: tr.Clip, Sigma: tr.Sigma,
		Local:    localJSON(loc, maxU),
		Pairwise: sum.Figure(),
	}
	if len(res.Coalitions) == 1 {
		rep.Coalition = res.Coalitions[0].Figure(res.Pairs.Unit, delta, sum.Theorem, sum.Conditions)
	}
	return rep, sum, loc, v
}

// printTrace prints the figures of 'account trace' as text.
func printTrace(w io.Writer, file string, tr *privacy.Trace, rep traceReport, sum privacy.PairwiseSummary, loc privacy.Bound, v privacy.WalkVerdict) {
	delta, maxU := rep.Delta, rep.Local.Updates
	fmt.Fprintf(w, "trace %s: %d nodes, %d steps, clip %g, sigma %g\n", file, tr.Nodes, len(tr.Steps), tr.Clip, tr.Sigma)
	fmt.Fprintf(w, "(epsilon, delta=%g) via %s\n\n", delta, privacy.Conversion)
	fmt.Fprintf(w, "local:    epsilon %.6g (order %g), busiest node made %d noisy updates\n", loc.Epsilon, loc.Order, maxU)
	fmt.Fprintf(w, "          theorem: %s\n\n", loc.Theorem)
	printPairwise(w, "pairwise (realised)", sum)
	if v.PlannedHolds {
		fmt.Fprintf(w, "\nplanned figure (complete graph, K_i = %d): its conditions hold for this path\n", v.K)
	} else {
		fmt.Fprintf(w, "\nplanned figure (complete graph, K_i = %d): conditions fail for this path: %s\n", v.K, strings.Join(v.Reasons, "; "))
	}
	if rep.Coalition != nil {
		fmt.Fprintf(w, "\ncoalition %v: worst node %d: epsilon %.6g (order %g)\n", rep.Coalition.Members, rep.Coalition.I, rep.Coalition.Epsilon.Float(), rep.Coalition.Order)
	}
}

// parseInterleaved parses fs from args with flags allowed before, between and after the
// positional arguments, which it returns in order. A parse error is a usage error
// (parseFlags) and -h returns flag.ErrHelp.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	rest := args
	for {
		if err := parseFlags(fs, rest); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		rest = fs.Args()[1:]
	}
}

// planStepArgs are the flags of 'account plan' for a step other than the prox step.
type planStepArgs struct {
	nodes, hops, maxUpd     int
	graph                   string
	clip, sigma, target     float64
	delta, weight           float64
	calibrate, json, nonExp bool
	kind                    string
}

// planStep is 'account plan' for the ls-sgd, gradient-ADMM and DP-SGD steps: the local
// figure (privacy.StepLocalBound) and the planned pairwise figure with its verdict
// (privacy.WalkPlannedBound), both one number for every pair on the complete graph, the
// same functions every other output uses; --target-epsilon calibrates sigma on either.
func planStep(stdout, stderr io.Writer, step walk.StepParams, a planStepArgs) error {
	switch {
	case a.nodes < 2 || a.hops < 1 || !finitePositive(a.clip) || a.maxUpd < 0 || !(a.delta > 0 && a.delta < 1):
		return usageErr(stderr, "plan: --nodes >= 2, --hops >= 1, --clip > 0, --max-updates >= 0 and --delta in (0,1) are required")
	case a.graph != "complete":
		return usageErr(stderr, "plan: the %s step is planned on the complete graph only (its figures have no first-passage form); got --graph %s", step.Kind, a.graph)
	case !a.calibrate && !finitePositive(a.sigma):
		return usageErr(stderr, "plan: --sigma must be finite and > 0, got %v", a.sigma)
	}
	updates := a.maxUpd
	if updates == 0 {
		updates = (a.hops + a.nodes - 1) / a.nodes
	}
	r := privacy.WalkRun{Nodes: a.nodes, Complete: true, Clip: a.clip, Cap: a.maxUpd, Hops: uint64(a.hops), Planning: true,
		Step: step.Kind.Name(), Rate: step.Rate, SGDNonExpansive: a.nonExp}
	if step.Kind == walk.StepGADMM {
		r.Step = privacy.StepGADMM
		// Without the data the smoothness bound is unknown: the plan assumes eta <= 1/nu
		// (which 'dpadmm testnet' and every node check on the data), so that the verdict
		// covers the other conditions.
		r.GADMM = privacy.GADMMParams{Eta: step.Eta, Beta: step.Beta, Sensitivity: step.Eta * walk.GADMMDelta(a.weight, a.clip), Nu: 1 / step.Eta}
	}
	figure := func(s float64) float64 {
		q := r
		q.Sigma = s
		if a.kind == "local" {
			return privacy.StepLocalBound(q, updates, a.delta).Epsilon
		}
		return privacy.WalkPlannedBound(q, a.delta).Epsilon
	}
	sg := a.sigma
	if a.calibrate {
		if !finitePositive(a.target) {
			return usageErr(stderr, "plan: --target-epsilon must be finite and > 0, got %v", a.target)
		}
		var err error
		if sg, err = experiment.CalibrateFigure(a.target, figure); err != nil {
			return err
		}
	}
	r.Sigma = sg
	loc := privacy.StepLocalBound(r, updates, a.delta)
	pb := privacy.WalkPlannedBound(r, a.delta)
	v := privacy.WalkDecide(r)
	sum := privacy.PairwiseSummary{Theorem: pb.Theorem, Conditions: pb.Conditions, ConditionsHold: pb.ConditionsHold && v.PlannedHolds, Note: pb.Note}
	sum.Worst.Epsilon, sum.Worst.Order, sum.Worst.I, sum.Worst.J = pb.Epsilon, pb.Order, 0, 1
	sum.Mean, sum.P50, sum.P90, sum.P99 = pb.Epsilon, pb.Epsilon, pb.Epsilon, pb.Epsilon
	rep := planReport{
		Delta: a.delta, Conversion: privacy.Conversion, Graph: a.graph, Nodes: a.nodes, Hops: a.hops,
		Clip: a.clip, Sigma: sg, SigmaCalibrated: a.calibrate, UpdatesCapped: a.maxUpd > 0,
		Local:    localJSON(loc, updates),
		Pairwise: sum.Figure(), LocalStep: step.Kind.String(),
	}
	if a.json {
		return writeJSON(stdout, rep)
	}
	w := stdout
	fmt.Fprintf(w, "plan: %s step, %d nodes, complete graph, %d hops, clip %g, sigma %g", step.Kind, a.nodes, a.hops, a.clip, sg)
	if a.calibrate {
		fmt.Fprintf(w, " (calibrated for %s epsilon %g)", a.kind, a.target)
	}
	fmt.Fprintf(w, "\n(epsilon, delta=%g) via %s\n\n", a.delta, privacy.Conversion)
	fmt.Fprintf(w, "local:    epsilon %.6g (order %g), K_i = %d updates\n", loc.Epsilon, loc.Order, updates)
	fmt.Fprintf(w, "          theorem: %s\n          conditions: %s\n\n", loc.Theorem, loc.Conditions)
	printPairwise(w, "pairwise (planned, every pair)", sum)
	if len(v.Reasons) > 0 {
		fmt.Fprintf(w, "\nWARNING: %s\n", strings.Join(v.Reasons, "; "))
	}
	return nil
}
