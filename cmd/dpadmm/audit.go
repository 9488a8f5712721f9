package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/node"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/testnet"
	"github.com/dpadmm/dpadmm/testnet/audit"
	"github.com/dpadmm/dpadmm/walk"
)

const auditHelp = `Usage: dpadmm audit [--algo all|walk|walk-gadmm|walk-sgd|radmm] [--local-step STEP] [flags]

Empirical privacy audit: puts an empirical lower bound on epsilon next to every upper bound
the accountant claims. Node i's data is given two neighbouring values D and D' (its shard plus
a canary row labelled +1, or the same row labelled -1, the row chosen to make i's update differ
the most). The real machine code then runs many times on each, with fresh noise, and a
distinguishing test is applied to what each observer sees. Half the trials choose the test's
threshold, the other half evaluate it; the false-positive and false-negative rates, with
one-sided Clopper-Pearson bounds, give a lower confidence bound on epsilon: with probability
--confidence the mechanism is not (eps, delta)-DP for any eps below it (Jagielski et al.
2020, Nasr et al. 2021). The run reports R bounds (one per mechanism, observer and test) and
each is computed at confidence 1 - (1 - --confidence)/R (Bonferroni), so that all of them hold
together with probability --confidence. A lower bound above the claimed upper bound is a
VIOLATION: the mechanism or its accounting is wrong, and the command exits with status 1.

--algo all (default) audits every local step of the walk (prox, linearized, ls-sgd, sgd,
gadmm) and R-ADMM in one run; --algo walk audits the step of --local-step (prox, linearized or
ls-sgd), --algo walk-sgd the DP-SGD walk, --algo walk-gadmm gradient ADMM, --algo radmm
R-ADMM.

The walk (the settings of 'dpadmm testnet': 50 nodes, gamma 100, lambda 0.5, --clip 0.1,
--sigma 1; the step flags as there, with --step-size defaulting to 1, or 0.5 for walk-sgd,
and --sample-rate 1): one noisy update of node i from the initial state, seen by three
observers:
  local     the next holder (knows the token i received): claim one update's local bound
            of the step (prox, linearized: Cyffers et al. Theorem 3)
  pairwise  node j, who receives the token after --pair-hops further noisy updates by other
            nodes (their real machines): claim the realised-path figure of the step on that
            path (ls-sgd, which no network theorem covers: the local figure)
  final     a node off the path that sees only the final model, released after
            --final-hops further updates: claim the realised-path figure, final model
            released to all
Every observer gets "projection", the likelihood-ratio test of a Gaussian shift (the view
projected on the difference of its noiseless values under D and D'). "lattice residue"
checks whether the released update, modulo the secure sampler's lattice step, carries the
low-order bits of D's or of D''s noiseless update (a floating-point data part added to
lattice noise would leak them whatever sigma is): at every observer for prox and linearized,
at the local observer for the gradient steps (their integer noisy query read off the
release). ls-sgd and sgd also get "row-count scale" at the local observer: their release
encodes the total row count M, and the test finds the M that puts the release on the lattice;
it tells add/remove neighbours apart in every trial and finds nothing between replace-one
neighbours, the adjacency of their figures (the canary keeps the row counts equal). The
canary reaches the per-example clip of the gradient steps; for gadmm, whose figures are
node-level, it replaces every row of node i.

--algo radmm audits one release of R-ADMM with objective perturbation (5 nodes on a ring,
--alpha 2, --eta 1, --paper-c 10): node i's first odd-iteration primal vector as its
neighbours see it, with the projection test and a noise-recovery likelihood-ratio test. The
claim is that release's Theorem V.1 figure (Zhang, Khalili, Liu 2020), pure DP, so the lower
bound is at delta 0.

With no flags it audits every mechanism on the embedded breast cancer data with 3000 trials
per dataset and mechanism (12000 for a single --algo) and crypto/rand noise, in well under a
minute on two cores, and prints one line per step, observer and test: the lower bound with its
two-sided interval, the upper bound, the theorem and the verdict. --seed S uses seeded noise
instead (reproducible, NOT secure: for tests). --json prints the results as a JSON list
instead of the table, --out FILE writes that list to FILE, --png FILE draws each lower bound
with its interval next to the upper bound.
  dpadmm audit --trials 2000 --png audit.png
  dpadmm audit --algo walk-sgd --step-size 0.5 --sample-rate 1 --json
  dpadmm audit --algo radmm --alpha 50 --json
`

// Modes of 'dpadmm audit' (modeFlags): "walk:STEP" for one step of the walk, "radmm", and
// auditModeAll for every walk step and R-ADMM.
const (
	auditModeAll     = "all"
	auditModeRADMM   = "radmm"
	auditSectionWalk = "the random walk (--algo walk, walk-gadmm, walk-sgd, all)"
)

// auditSteps are the walk steps --algo all audits, in order.
var auditSteps = []walk.StepKind{walk.StepProx, walk.StepLinearized, walk.StepLSSGD, walk.StepSGD, walk.StepGADMM}

// auditStepSize is the step size of a gradient step when --step-size is not given: the
// README's examples (linearized and ls-sgd 1, walk-sgd 0.5) and 1 for walk-gadmm (within
// 1/nu on the embedded data, rows of norm at most 1).
var auditStepSize = map[walk.StepKind]float64{walk.StepLinearized: 1, walk.StepLSSGD: 1, walk.StepSGD: 0.5, walk.StepGADMM: 1}

// Trials per dataset when --trials is not given: for one mechanism, and for each mechanism
// of --algo all (six of them: the run stays well under a minute on two cores).
const auditTrialsOne, auditTrialsAll = 12000, 3000

// auditFlags are the flags of 'dpadmm audit'; its modes are "walk:STEP", "radmm" and "all".
type auditFlags struct {
	m                                 *modeFlags
	df                                *dataFlags
	sf                                *stepFlags
	algo, pngPath, outPath            *string
	trials, nodes, node, workers      *int
	pairHops, finalHops               *int
	confidence, l2                    *float64
	sigma, clip, delta, gamma, lambda *float64
	unit                              *string
	alpha, eta, paperC, evenGamma     *float64
	seed                              *uint64
	asJSON                            *bool
}

func newAuditFlags(stdout io.Writer) *auditFlags {
	m := newModeFlags("audit", auditHelp, stdout)
	f := &auditFlags{m: m}
	d, gp := node.DefaultConfig(), node.DefaultRADMMParams()
	f.algo = m.String("algo", auditModeAll, "mechanism to audit: all (every walk step and radmm), walk (the step of --local-step), walk-gadmm, walk-sgd or radmm")
	f.trials = m.Int("trials", 0, fmt.Sprintf("trials per dataset (D and D') and mechanism; half choose the tests, half evaluate them (default %d, %d each with --algo all)", auditTrialsOne, auditTrialsAll))
	f.confidence = m.Float64("confidence", 0.95, "confidence that every lower bound of the run holds (each row at 1 - (1-confidence)/rows: Bonferroni)")
	f.seed = m.Uint64("seed", 0, "use seeded noise with this seed (reproducible, NOT secure); default crypto/rand noise")
	f.asJSON = m.Bool("json", false, "print the results as a JSON list instead of the table")
	f.pngPath = m.String("png", "", "draw the lower bounds, their intervals and the upper bounds (PNG) to this file")
	f.outPath = m.String("out", "", "write the results as a JSON list to this file")
	f.nodes = m.Int("nodes", 0, "number of nodes (default 50 for the walk, 5 for radmm)")
	f.node = m.Int("node", 0, "the audited node i")
	f.l2 = m.Float64("l2", d.Problem.Reg.L2, "L2 weight mu: adds (mu/2)*||w||^2")
	f.df = addDataFlags(m.FlagSet, auditData)
	f.workers = m.Int("workers", 0, "goroutines running trials (default: min(2, CPUs))")
	m.in(auditSectionWalk, "", "walk:*", auditModeAll)
	f.sigma = m.Float64("sigma", d.Sigma, "std of the noise: on eta in eq. (7) for prox, linearized (noise on u has std lambda*sigma); on the clipped gradient sum for ls-sgd, walk-sgd; on x for walk-gadmm")
	f.clip = m.Float64("clip", d.Clip, "clip bound C: on ||x - z|| for prox, linearized; per-example gradient clip for ls-sgd, walk-sgd, walk-gadmm")
	f.delta = m.Float64("delta", d.Delta, "delta of the (epsilon, delta) bounds (R-ADMM's claim is pure DP: delta 0)")
	f.pairHops = m.Int("pair-hops", 4, "noisy updates by other nodes before the pairwise observer holds the token")
	f.finalHops = m.Int("final-hops", 20, "noisy updates by other nodes before the final model is released")
	f.gamma = m.Float64("gamma", d.Gamma, "ADMM prox parameter gamma > 0")
	f.lambda = m.Float64("lambda", d.Lambda, "relaxation lambda in (0,1]")
	f.unit = m.String("privacy-unit", string(privacy.UnitRecord), "the claim audited: record (the record radius gamma (c L + tol) when it binds; every canary row is projected onto the scaling's row bound) or node (the clip)")
	m.hint("gamma", "the even-step proximal weight of R-ADMM is --even-gamma")
	f.sf = addStepFlags(m, auditSectionWalk, "")
	m.Lookup("step-size").Usage = "walk gradient steps (linearized, ls-sgd, walk-gadmm, walk-sgd): step size eta (default 1, 0.5 for walk-sgd)"
	m.in("R-ADMM (--algo radmm, all)", "--algo radmm (R-ADMM's claim is pure DP, audited at delta 0)", auditModeRADMM, auditModeAll)
	f.alpha = m.Float64("alpha", gp.Alpha, "noise density exp(-alpha*||eps||)")
	f.eta = m.Float64("eta", gp.Eta, "penalty eta")
	f.paperC = m.Float64("paper-c", gp.PaperC, "the paper's C; C_i/B_i = C*N/M and rho/N = C*l2")
	f.evenGamma = m.Float64("even-gamma", gp.Gamma, "even-step proximal weight gamma > 0 (the walk's prox parameter is --gamma)")
	m.hint("even-gamma", "the walk's prox parameter is --gamma")
	return f
}

// mode returns the mode of the flags and how to name it in messages.
func (f *auditFlags) mode() (mode, what string, err error) {
	switch *f.algo {
	case auditModeAll, auditModeRADMM:
		return *f.algo, "--algo " + *f.algo, nil
	}
	if _, ok := walkAlgos[*f.algo]; !ok {
		return "", "", fmt.Errorf("--algo must be all, walk, walk-gadmm, walk-sgd or radmm, got %q", *f.algo)
	}
	return algoMode(*f.algo, *f.sf.local, f.m.isSet("local-step"))
}

// check checks the flag values.
func (f *auditFlags) check() error {
	bad := func(x float64) bool { return math.IsNaN(x) || math.IsInf(x, 0) }
	switch {
	case f.m.NArg() > 0:
		return fmt.Errorf("unexpected argument %q", f.m.Arg(0))
	case f.m.isSet("trials") && *f.trials < 20:
		return fmt.Errorf("--trials must be >= 20, got %d", *f.trials)
	case f.unit != nil && *f.unit != string(privacy.UnitRecord) && *f.unit != string(privacy.UnitNode):
		return fmt.Errorf("--privacy-unit must be record or node, got %q", *f.unit)
	case !(*f.confidence > 0 && *f.confidence < 1):
		return fmt.Errorf("--confidence must be in (0,1), got %v", *f.confidence)
	case !(*f.delta > 0 && *f.delta < 1):
		return fmt.Errorf("--delta must be in (0,1), got %v", *f.delta)
	case !(*f.sigma > 0) || bad(*f.sigma):
		return fmt.Errorf("--sigma must be finite and > 0, got %v", *f.sigma)
	case !(*f.clip > 0) || bad(*f.clip):
		return fmt.Errorf("--clip must be finite and > 0, got %v", *f.clip)
	case !(*f.lambda > 0 && *f.lambda <= 1):
		return fmt.Errorf("--lambda must be in (0,1], got %v", *f.lambda)
	case !(*f.l2 > 0) || bad(*f.l2):
		return fmt.Errorf("--l2 must be finite and > 0, got %v", *f.l2)
	case !(*f.gamma > 0) || bad(*f.gamma):
		return fmt.Errorf("--gamma must be finite and > 0, got %v", *f.gamma)
	case !(*f.evenGamma > 0) || bad(*f.evenGamma):
		return fmt.Errorf("--even-gamma must be finite and > 0, got %v", *f.evenGamma)
	case !(*f.alpha > 0) || bad(*f.alpha) || !(*f.eta > 0) || bad(*f.eta) || !(*f.paperC > 0) || bad(*f.paperC):
		return fmt.Errorf("--alpha, --eta and --paper-c must be finite and > 0")
	case *f.nodes < 0 || *f.node < 0 || *f.workers < 0:
		return fmt.Errorf("--nodes, --node and --workers must be >= 0")
	case *f.pairHops < 1 || *f.finalHops <= *f.pairHops:
		return fmt.Errorf("need 1 <= --pair-hops < --final-hops, got %d and %d", *f.pairHops, *f.finalHops)
	}
	return f.df.check(consensus.Logistic)
}

func runAudit(args []string, stdout, stderr io.Writer) error {
	f := newAuditFlags(stdout)
	if err := f.m.parse(args); err != nil {
		return err
	}
	mode, what, err := f.mode()
	if err != nil {
		return auditUsage(stderr, "%v", err)
	}
	if mode == auditModeAll {
		// Every flag applies to some mechanism of the run; --local-step would choose one.
		if f.m.isSet("local-step") {
			return auditUsage(stderr, "--local-step chooses the step of --algo walk; --algo all audits every step (%s)", stepNames(auditSteps))
		}
	} else if err := f.m.check(mode, what); err != nil {
		return err
	}
	if err := f.check(); err != nil {
		return auditUsage(stderr, "%v", err)
	}
	// The walk audits take a label of three or more classes (the multinomial loss).
	ld, err := f.df.load(loadRequest{loss: consensus.Logistic, seed: 1, multiclass: !isGossip(mode)})
	if err != nil {
		return err
	}
	start := time.Now()
	res, mechs, err := f.audit(ld, mode)
	if err != nil {
		return err
	}
	if err := f.writeOutputs(res, mechs, auditTitle(mode, mechs, ld.name), time.Since(start), stdout); err != nil {
		return err
	}
	if v := violations(res); v > 0 {
		return fmt.Errorf("VIOLATION: on %d of %d lines the empirical lower bound exceeds the claimed upper bound", v, len(res))
	}
	return nil
}

func stepNames(ks []walk.StepKind) string {
	var s []string
	for _, k := range ks {
		s = append(s, k.String())
	}
	return strings.Join(s, ", ")
}

// auditMech is one audited mechanism of a run, for the outputs: its header line and its
// first row (canary and sensitivity).
type auditMech struct {
	header string
	first  audit.AuditResult
}

// auditTitle is the title of the PNG.
func auditTitle(mode string, mechs []auditMech, data string) string {
	if len(mechs) == 1 {
		return strings.Replace(mechs[0].header, ": ", "\n", 1)
	}
	return fmt.Sprintf("audit of every local step of the walk and of R-ADMM\non %s", data)
}

// trialCount is the number of trials per dataset of each mechanism.
func (f *auditFlags) trialCount(mode string) int {
	switch {
	case f.m.isSet("trials"):
		return *f.trials
	case mode == auditModeAll:
		return auditTrialsAll
	}
	return auditTrialsOne
}

// audit runs the audits of mode and returns their results, corrected together for
// multiple testing, and one auditMech per mechanism.
func (f *auditFlags) audit(ld *loadedData, mode string) ([]audit.AuditResult, []auditMech, error) {
	var kinds []walk.StepKind
	radmm := mode == auditModeAll || mode == auditModeRADMM
	switch mode {
	case auditModeAll:
		kinds = auditSteps
	case auditModeRADMM:
	default:
		kinds = []walk.StepKind{stepKind(mode)}
	}
	// Every step's parameters are checked before any trial runs.
	steps := make([]walk.StepParams, len(kinds))
	for k, kind := range kinds {
		size := *f.sf.size
		if !f.m.isSet("step-size") {
			size = auditStepSize[kind]
		}
		var err error
		if steps[k], err = f.sf.paramsSize(kind, size); err != nil {
			return nil, nil, usagef("audit", "%v", err)
		}
	}
	trials := f.trialCount(mode)
	var res []audit.AuditResult
	var mechs []auditMech
	add := func(r []audit.AuditResult, header string, err error) error {
		if err != nil {
			return err
		}
		if len(r) > 0 {
			mechs = append(mechs, auditMech{header: header, first: r[0]})
		}
		res = append(res, r...)
		return nil
	}
	for _, step := range steps {
		r, h, err := f.auditWalk(ld, step, trials)
		if err := add(r, h, err); err != nil {
			return nil, nil, fmt.Errorf("audit of the %s step: %w", step.Kind, err)
		}
	}
	if radmm {
		r, h, err := f.auditRADMM(ld, trials)
		if err := add(r, h, err); err != nil {
			return nil, nil, err
		}
	}
	if err := audit.AuditBonferroni(res, *f.confidence); err != nil {
		return nil, nil, err
	}
	return res, mechs, nil
}

// auditWalk audits one noisy update of the walk with local step step.
func (f *auditFlags) auditWalk(ld *loadedData, step walk.StepParams, trials int) ([]audit.AuditResult, string, error) {
	o := audit.WalkAuditOptions{
		Train: ld.train, Nodes: *f.nodes, Seed: 1, Problem: ld.problem(f.problem(), true), Gamma: *f.gamma, Lambda: *f.lambda, Clip: *f.clip,
		Sigma: *f.sigma, Step: step, Node: *f.node, PairHops: *f.pairHops, FinalHops: *f.finalHops, Trials: trials, Delta: *f.delta,
		Confidence: *f.confidence, Noise: f.noise(), Workers: *f.workers, Unit: privacy.Unit(*f.unit),
	}
	if !privacy.StepName(step.Kind.Name()).ProxFigures() {
		o.Unit = privacy.UnitRecord // the gradient steps' claims are per record whatever the flag
	}
	if o.Unit != privacy.UnitNode {
		o.RowBound = ld.scaler.RowBound()
	}
	if o.Nodes == 0 {
		o.Nodes = testnet.DefaultOptions().Nodes
	}
	header := fmt.Sprintf("audit of the walk (%s) on %s: node %d of %d, gamma %g, lambda %g, clip %g, sigma %g, l2 %g, %s loss",
		audit.AuditStepNote(step), ld.name, o.Node, o.Nodes, o.Gamma, o.Lambda, o.Clip, o.Sigma, *f.l2, o.Problem.Loss)
	res, err := audit.WalkAudit(o)
	return res, header, err
}

// auditRADMM audits one release of R-ADMM.
func (f *auditFlags) auditRADMM(ld *loadedData, trials int) ([]audit.AuditResult, string, error) {
	o := audit.RADMMAuditOptions{
		Train: ld.train, Nodes: *f.nodes, Seed: 1, Problem: ld.problem(f.problem(), false), Alpha: *f.alpha, Eta: *f.eta, Gamma: *f.evenGamma,
		PaperC: *f.paperC, Node: *f.node, Trials: trials, Confidence: *f.confidence, Noise: f.noise(), Workers: *f.workers,
	}
	if o.Nodes == 0 {
		o.Nodes = testnet.DefaultGossipOptions().Nodes
	}
	header := fmt.Sprintf("audit of R-ADMM on %s: node %d of %d (ring), alpha %g, eta %g, C %g, l2 %g, logistic loss",
		ld.name, o.Node, o.Nodes, o.Alpha, o.Eta, o.PaperC, *f.l2)
	res, err := audit.RADMMAudit(o)
	return res, header, err
}

func (f *auditFlags) problem() consensus.Problem {
	return consensus.Problem{Loss: consensus.Logistic, Reg: consensus.Regularizer{L2: *f.l2}}
}

func (f *auditFlags) noise() func(uint64) privacy.Noise {
	return audit.AuditNoise(f.m.isSet("seed"), *f.seed)
}

// writeOutputs writes the results to --out, --png and stdout (the table, or --json).
func (f *auditFlags) writeOutputs(res []audit.AuditResult, mechs []auditMech, title string, wall time.Duration, stdout io.Writer) error {
	if *f.outPath != "" {
		if err := writeFileWith(*f.outPath, func(w io.Writer) error { return writeAuditJSON(w, res) }); err != nil {
			return err
		}
	}
	if *f.pngPath != "" {
		if err := writeFileWith(*f.pngPath, func(w io.Writer) error { return audit.WriteAuditPNG(w, res, title) }); err != nil {
			return err
		}
	}
	if *f.asJSON {
		return writeAuditJSON(stdout, res)
	}
	noiseName := "crypto/rand (secure)"
	if f.m.isSet("seed") {
		noiseName = fmt.Sprintf("seeded with %d: reproducible, NOT secure", *f.seed)
	}
	for _, m := range mechs {
		fmt.Fprintln(stdout, m.header)
		fmt.Fprintf(stdout, "  neighbouring datasets %s\n  without noise the canary attains %.3g of the sensitivity %s\n",
			canaryOf(m.first.Note), m.first.SensitivityUsed, m.first.SensitivityOf)
	}
	if len(res) > 0 {
		r := res[0]
		fmt.Fprintf(stdout, "noise %s; %d trials per dataset and mechanism (%d choose each test, %d evaluate it); %.4g s\n",
			noiseName, r.Trials, r.Trials-r.EvalTrials, r.EvalTrials, wall.Seconds())
		fmt.Fprintf(stdout, "%d bounds, each at confidence %.6g (Bonferroni), so that all hold together with probability %g\n",
			r.FamilySize, r.RowConfidence, r.Confidence)
	}
	printAuditTable(stdout, res)
	return nil
}

// auditUsage prints a usage error and returns errUsage (exit code 2).
func auditUsage(_ io.Writer, format string, a ...any) error {
	return usagef("audit", format, a...)
}

func writeAuditJSON(w io.Writer, res []audit.AuditResult) error {
	if res == nil {
		res = []audit.AuditResult{}
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// canaryOf extracts the description of D and D' from a result note ("...; D: ...; ...").
func canaryOf(note string) string {
	for _, part := range strings.Split(note, "; ") {
		if strings.HasPrefix(part, "D: ") {
			return part
		}
	}
	return "see the notes (--json)"
}

func violations(res []audit.AuditResult) int {
	v := 0
	for _, r := range res {
		if r.Violation {
			v++
		}
	}
	return v
}

// printAuditTable prints one line per result and the theorems they cite.
func printAuditTable(w io.Writer, res []audit.AuditResult) {
	var thms []string
	ref := map[string]int{}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	conf := 0.95
	if len(res) > 0 {
		conf = res[0].Confidence
		if res[0].RowConfidence > 0 {
			conf = res[0].RowConfidence
		}
	}
	fmt.Fprintf(tw, "step\tobserver\ttest\tlower eps [%.4g%% CI]\tupper eps\tdelta\ttheorem\tverdict\n", 100*conf)
	for _, r := range res {
		k, ok := ref[r.Theorem]
		if !ok {
			thms = append(thms, r.Theorem)
			k = len(thms)
			ref[r.Theorem] = k
		}
		cond := ""
		if !r.ConditionsHold {
			cond = " (conditions fail)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s [%s, %s]\t%s\t%g\t[%d]%s\t%s\n", r.Step, r.Observer, r.Test, fmtEps(r.LowerEpsilon),
			fmtEps(r.LowerEpsilonCI[0]), fmtEps(r.LowerEpsilonCI[1]), fmtEps(r.UpperEpsilon), r.Delta, k, cond, r.Verdict())
	}
	tw.Flush()
	for k, t := range thms {
		fmt.Fprintf(w, "[%d] %s\n", k+1, t)
	}
}
