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
	"github.com/dpadmm/dpadmm/testnet"
)

const auditHelp = `Usage: dpadmm audit [--algo walk|radmm] [flags]

Empirical privacy audit: puts an empirical lower bound on epsilon next to every upper bound
the accountant claims. Node i's data is given two neighbouring values D and D' (its shard plus
a canary row labelled +1, or the same row labelled -1, the row chosen to make i's update differ
the most). The real machine code then runs many times on each, with fresh noise, and a
distinguishing test is applied to what each observer sees. Half the trials choose the test's
threshold, the other half evaluate it; the false-positive and false-negative rates, with
one-sided Clopper-Pearson bounds, give a lower confidence bound on epsilon: with probability
--confidence the mechanism is not (eps, delta)-DP for any eps below it (Jagielski et al.
2020, Nasr et al. 2021). A lower bound above the claimed upper bound is a VIOLATION: the
mechanism or its accounting is wrong, and the command exits with status 1.

--algo walk (default) audits one noisy update of node i (random-walk private ADMM, the
settings of 'dpadmm testnet': 50 nodes, gamma 100, lambda 0.5, --clip 0.1, --sigma 1) from
the initial state, seen by three observers:
  local     the next holder (knows the token i received): claim one update's local bound
            (Cyffers et al. Theorem 3)
  pairwise  node j, who receives the token after --pair-hops further noisy updates by other
            nodes (their real machines): claim the realised-path figure of that path
  final     a node off the path that sees only the final model, released after
            --final-hops further updates: claim the realised-path figure, final model
            released to all
Each observer gets two tests: "projection", the likelihood-ratio test of a Gaussian shift
(the view projected on the difference of its noiseless values under D and D'), and
"lattice residue", which checks whether the released update, modulo the secure sampler's
lattice step, carries the low-order bits of D's or of D''s noiseless update (a floating-point
data part added to lattice noise would leak them whatever sigma is).

--algo radmm audits one release of R-ADMM with objective perturbation (5 nodes on a ring,
--alpha 2, --eta 1, --paper-c 10): node i's first odd-iteration primal vector as its
neighbours see it, with the projection test and a noise-recovery likelihood-ratio test. The
claim is that release's Theorem V.1 figure (Zhang, Khalili, Liu 2020), pure DP, so the lower
bound is at delta 0.

With no flags it audits the walk on the embedded breast cancer data with --trials 12000 per
dataset and crypto/rand noise, in about a minute on two cores, and prints one line per
observer and test: the lower bound with its two-sided interval, the upper bound, the theorem
and the verdict. --seed S uses seeded noise instead (reproducible, NOT secure: for tests).
--json prints the results as a JSON list instead of the table, --out FILE writes that list to
FILE, --png FILE draws each lower bound with its interval next to the upper bound.
  dpadmm audit --trials 2000 --png audit.png
  dpadmm audit --algo radmm --alpha 50 --json
`

// auditFlags are the flags of 'dpadmm audit'; its modes are "walk" and "radmm".
type auditFlags struct {
	m                                 *modeFlags
	df                                *dataFlags
	algo, pngPath, outPath            *string
	trials, nodes, node, workers      *int
	pairHops, finalHops               *int
	confidence, l2                    *float64
	sigma, clip, delta, gamma, lambda *float64
	alpha, eta, paperC, evenGamma     *float64
	seed                              *uint64
	asJSON                            *bool
}

func newAuditFlags(stdout io.Writer) *auditFlags {
	m := newModeFlags("audit", auditHelp, stdout)
	f := &auditFlags{m: m}
	d, gp := node.DefaultConfig(), node.DefaultRADMMParams()
	f.algo = m.String("algo", "walk", "mechanism to audit: walk or radmm")
	f.trials = m.Int("trials", 12000, "trials per dataset (D and D'); half choose the tests, half evaluate them")
	f.confidence = m.Float64("confidence", 0.95, "confidence of the lower bound and of its interval")
	f.seed = m.Uint64("seed", 0, "use seeded noise with this seed (reproducible, NOT secure); default crypto/rand noise")
	f.asJSON = m.Bool("json", false, "print the results as a JSON list instead of the table")
	f.pngPath = m.String("png", "", "draw the lower bounds, their intervals and the upper bounds (PNG) to this file")
	f.outPath = m.String("out", "", "write the results as a JSON list to this file")
	f.nodes = m.Int("nodes", 0, "number of nodes (default 50 for walk, 5 for radmm)")
	f.node = m.Int("node", 0, "the audited node i")
	f.l2 = m.Float64("l2", d.Problem.Reg.L2, "L2 weight mu: adds (mu/2)*||w||^2")
	f.df = addDataFlags(m.FlagSet, experimentData)
	f.workers = m.Int("workers", 0, "goroutines running trials (default: min(2, CPUs))")
	m.in("--algo walk", "", "walk")
	f.sigma = m.Float64("sigma", d.Sigma, "std of eta in eq. (7) (noise on u has std lambda*sigma)")
	f.clip = m.Float64("clip", d.Clip, "clip bound C on ||x - z||")
	f.delta = m.Float64("delta", d.Delta, "delta of the (epsilon, delta) bounds (R-ADMM's claim is pure DP: delta 0)")
	f.pairHops = m.Int("pair-hops", 4, "noisy updates by other nodes before the pairwise observer holds the token")
	f.finalHops = m.Int("final-hops", 20, "noisy updates by other nodes before the final model is released")
	f.gamma = m.Float64("gamma", d.Gamma, "ADMM prox parameter gamma > 0")
	f.lambda = m.Float64("lambda", d.Lambda, "relaxation lambda in (0,1]")
	m.hint("gamma", "the even-step proximal weight of R-ADMM is --even-gamma")
	m.in("--algo radmm", "--algo radmm (R-ADMM's claim is pure DP, audited at delta 0)", "radmm")
	f.alpha = m.Float64("alpha", gp.Alpha, "noise density exp(-alpha*||eps||)")
	f.eta = m.Float64("eta", gp.Eta, "penalty eta")
	f.paperC = m.Float64("paper-c", gp.PaperC, "the paper's C; C_i/B_i = C*N/M and rho/N = C*l2")
	f.evenGamma = m.Float64("even-gamma", gp.Gamma, "even-step proximal weight gamma > 0 (the walk's prox parameter is --gamma)")
	m.hint("even-gamma", "the walk's prox parameter is --gamma")
	return f
}

// check checks the flag values.
func (f *auditFlags) check() error {
	bad := func(x float64) bool { return math.IsNaN(x) || math.IsInf(x, 0) }
	switch {
	case f.m.NArg() > 0:
		return fmt.Errorf("unexpected argument %q", f.m.Arg(0))
	case *f.trials < 20:
		return fmt.Errorf("--trials must be >= 20, got %d", *f.trials)
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
	if *f.algo != "walk" && *f.algo != "radmm" {
		return auditUsage(stderr, "--algo must be walk or radmm, got %q", *f.algo)
	}
	if err := f.m.check(*f.algo, "--algo "+*f.algo); err != nil {
		return err
	}
	if err := f.check(); err != nil {
		return auditUsage(stderr, "%v", err)
	}
	ld, err := f.df.load(loadRequest{loss: consensus.Logistic, seed: 1})
	if err != nil {
		return err
	}
	start := time.Now()
	res, header, err := f.audit(ld)
	if err != nil {
		return err
	}
	if err := f.writeOutputs(res, header, time.Since(start), stdout); err != nil {
		return err
	}
	if v := violations(res); v > 0 {
		return fmt.Errorf("VIOLATION: on %d of %d lines the empirical lower bound exceeds the claimed upper bound", v, len(res))
	}
	return nil
}

// audit runs the audit of --algo and returns its results and the header of its outputs.
func (f *auditFlags) audit(ld *loadedData) ([]testnet.AuditResult, string, error) {
	noise := testnet.AuditNoise(f.m.isSet("seed"), *f.seed)
	prob := consensus.Problem{Loss: consensus.Logistic, Reg: consensus.Regularizer{L2: *f.l2}}
	if *f.algo == "walk" {
		o := testnet.WalkAuditOptions{
			Train: ld.train, Nodes: *f.nodes, Seed: 1, Problem: prob, Gamma: *f.gamma, Lambda: *f.lambda, Clip: *f.clip,
			Sigma: *f.sigma, Node: *f.node, PairHops: *f.pairHops, FinalHops: *f.finalHops, Trials: *f.trials, Delta: *f.delta,
			Confidence: *f.confidence, Noise: noise, Workers: *f.workers,
		}
		if o.Nodes == 0 {
			o.Nodes = testnet.DefaultOptions().Nodes
		}
		header := fmt.Sprintf("audit of the walk on %s: node %d of %d, gamma %g, lambda %g, clip %g, sigma %g, l2 %g, logistic loss",
			ld.name, o.Node, o.Nodes, o.Gamma, o.Lambda, o.Clip, o.Sigma, *f.l2)
		res, err := testnet.WalkAudit(o)
		return res, header, err
	}
	o := testnet.RADMMAuditOptions{
		Train: ld.train, Nodes: *f.nodes, Seed: 1, Problem: prob, Alpha: *f.alpha, Eta: *f.eta, Gamma: *f.evenGamma,
		PaperC: *f.paperC, Node: *f.node, Trials: *f.trials, Confidence: *f.confidence, Noise: noise, Workers: *f.workers,
	}
	if o.Nodes == 0 {
		o.Nodes = testnet.DefaultGossipOptions().Nodes
	}
	header := fmt.Sprintf("audit of R-ADMM on %s: node %d of %d (ring), alpha %g, eta %g, C %g, l2 %g, logistic loss",
		ld.name, o.Node, o.Nodes, o.Alpha, o.Eta, o.PaperC, *f.l2)
	res, err := testnet.RADMMAudit(o)
	return res, header, err
}

// writeOutputs writes the results to --out, --png and stdout (the table, or --json).
func (f *auditFlags) writeOutputs(res []testnet.AuditResult, header string, wall time.Duration, stdout io.Writer) error {
	if *f.outPath != "" {
		if err := writeFileWith(*f.outPath, func(w io.Writer) error { return writeAuditJSON(w, res) }); err != nil {
			return err
		}
	}
	if *f.pngPath != "" {
		title := strings.Replace(header, ": ", "\n", 1)
		if err := writeFileWith(*f.pngPath, func(w io.Writer) error { return testnet.WriteAuditPNG(w, res, title) }); err != nil {
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
	fmt.Fprintln(stdout, header)
	fmt.Fprintf(stdout, "noise %s; %d trials per dataset (%d choose each test, %d evaluate it); %.4g s\n",
		noiseName, *f.trials, *f.trials/2, *f.trials-*f.trials/2, wall.Seconds())
	if len(res) > 0 {
		what := "4 lambda C (i's data part)"
		if *f.algo == "radmm" {
			what = "2 C_i/B_i (gradient of i's objective)"
		}
		fmt.Fprintf(stdout, "neighbouring datasets %s\nwithout noise the canary attains %.3g of the sensitivity %s\n",
			canaryOf(res[0].Note), res[0].SensitivityUsed, what)
	}
	printAuditTable(stdout, res)
	return nil
}

// auditUsage prints a usage error and returns errUsage (exit code 2).
func auditUsage(_ io.Writer, format string, a ...any) error {
	return usagef("audit", format, a...)
}

func writeAuditJSON(w io.Writer, res []testnet.AuditResult) error {
	if res == nil {
		res = []testnet.AuditResult{}
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

func violations(res []testnet.AuditResult) int {
	v := 0
	for _, r := range res {
		if r.Violation {
			v++
		}
	}
	return v
}

// printAuditTable prints one line per result and the theorems they cite.
func printAuditTable(w io.Writer, res []testnet.AuditResult) {
	var thms []string
	ref := map[string]int{}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	conf := 0.95
	if len(res) > 0 {
		conf = res[0].Confidence
	}
	fmt.Fprintf(tw, "observer\ttest\tlower eps [%g%% CI]\tupper eps\tdelta\ttheorem\tverdict\n", 100*conf)
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
		fmt.Fprintf(tw, "%s\t%s\t%s [%s, %s]\t%s\t%g\t[%d]%s\t%s\n", r.Observer, r.Test, fmtEps(r.LowerEpsilon),
			fmtEps(r.LowerEpsilonCI[0]), fmtEps(r.LowerEpsilonCI[1]), fmtEps(r.UpperEpsilon), r.Delta, k, cond, r.Verdict())
	}
	tw.Flush()
	for k, t := range thms {
		fmt.Fprintf(w, "[%d] %s\n", k+1, t)
	}
}
