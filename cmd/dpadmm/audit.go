package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dpadmm/dpadmm/consensus"
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

func runAudit(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("audit", auditHelp, stdout)
	algo := fs.String("algo", "walk", "mechanism to audit: walk or radmm")
	trials := fs.Int("trials", 12000, "trials per dataset (D and D'); half choose the tests, half evaluate them")
	sigma := fs.Float64("sigma", 1, "walk: std of eta in eq. (7) (noise on u has std lambda*sigma)")
	clip := fs.Float64("clip", 0.1, "walk: clip bound C on ||x - z||")
	delta := fs.Float64("delta", 1e-5, "walk: delta of the (epsilon, delta) bounds (R-ADMM's claim is pure DP: delta 0)")
	confidence := fs.Float64("confidence", 0.95, "confidence of the lower bound and of its interval")
	seed := fs.Uint64("seed", 0, "use seeded noise with this seed (reproducible, NOT secure); default crypto/rand noise")
	asJSON := fs.Bool("json", false, "print the results as a JSON list instead of the table")
	pngPath := fs.String("png", "", "draw the lower bounds, their intervals and the upper bounds (PNG) to this file")
	outPath := fs.String("out", "", "write the results as a JSON list to this file")
	nodes := fs.Int("nodes", 0, "number of nodes (default 50 for walk, 5 for radmm)")
	node := fs.Int("node", 0, "the audited node i")
	pairHops := fs.Int("pair-hops", 4, "walk: noisy updates by other nodes before the pairwise observer holds the token")
	finalHops := fs.Int("final-hops", 20, "walk: noisy updates by other nodes before the final model is released")
	gamma := fs.Float64("gamma", 0, "walk: ADMM prox parameter; radmm: even-step weight (0 means the mode's default: 100 for walk, 0.5 for radmm)")
	lambda := fs.Float64("lambda", 0.5, "walk: relaxation lambda in (0,1]")
	l2 := fs.Float64("l2", 1e-2, "L2 weight mu: adds (mu/2)*||w||^2")
	alpha := fs.Float64("alpha", 2, "radmm: noise density exp(-alpha*||eps||)")
	eta := fs.Float64("eta", 1, "radmm: penalty eta")
	paperC := fs.Float64("paper-c", 10, "radmm: the paper's C; C_i/B_i = C*N/M and rho/N = C*l2")
	df := addDataFlags(fs, experimentData)
	workers := fs.Int("workers", 0, "goroutines running trials (default: min(2, CPUs))")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return auditUsage(stderr, "unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	bad := func(x float64) bool { return math.IsNaN(x) || math.IsInf(x, 0) }
	switch {
	case *algo != "walk" && *algo != "radmm":
		return auditUsage(stderr, "--algo must be walk or radmm, got %q", *algo)
	case *trials < 20:
		return auditUsage(stderr, "--trials must be >= 20, got %d", *trials)
	case !(*confidence > 0 && *confidence < 1):
		return auditUsage(stderr, "--confidence must be in (0,1), got %v", *confidence)
	case !(*delta > 0 && *delta < 1):
		return auditUsage(stderr, "--delta must be in (0,1), got %v", *delta)
	case !(*sigma > 0) || bad(*sigma):
		return auditUsage(stderr, "--sigma must be finite and > 0, got %v", *sigma)
	case !(*clip > 0) || bad(*clip):
		return auditUsage(stderr, "--clip must be finite and > 0, got %v", *clip)
	case !(*lambda > 0 && *lambda <= 1):
		return auditUsage(stderr, "--lambda must be in (0,1], got %v", *lambda)
	case !(*l2 > 0) || bad(*l2):
		return auditUsage(stderr, "--l2 must be finite and > 0, got %v", *l2)
	case *gamma < 0 || bad(*gamma):
		return auditUsage(stderr, "--gamma must be finite and > 0 (0: the default), got %v", *gamma)
	case !(*alpha > 0) || bad(*alpha) || !(*eta > 0) || bad(*eta) || !(*paperC > 0) || bad(*paperC):
		return auditUsage(stderr, "--alpha, --eta and --paper-c must be finite and > 0")
	case *nodes < 0 || *node < 0 || *workers < 0:
		return auditUsage(stderr, "--nodes, --node and --workers must be >= 0")
	case *pairHops < 1 || *finalHops <= *pairHops:
		return auditUsage(stderr, "need 1 <= --pair-hops < --final-hops, got %d and %d", *pairHops, *finalHops)
	}
	if *algo == "walk" {
		for _, f := range []string{"alpha", "eta", "paper-c"} {
			if set[f] {
				return auditUsage(stderr, "--%s applies to --algo radmm", f)
			}
		}
	} else {
		for _, f := range []string{"sigma", "clip", "delta", "lambda", "pair-hops", "final-hops"} {
			if set[f] {
				return auditUsage(stderr, "--%s applies to --algo walk (R-ADMM's claim is pure DP, audited at delta 0)", f)
			}
		}
	}
	if err := df.check(consensus.Logistic); err != nil {
		return auditUsage(stderr, "%v", err)
	}
	ld, err := df.load(loadRequest{loss: consensus.Logistic, seed: 1})
	if err != nil {
		return err
	}
	seeded := set["seed"]
	noise := testnet.AuditNoise(seeded, *seed)
	prob := consensus.Problem{Loss: consensus.Logistic, Reg: consensus.Regularizer{L2: *l2}}
	start := time.Now()
	var res []testnet.AuditResult
	var header string
	if *algo == "walk" {
		o := testnet.WalkAuditOptions{
			Train: ld.train, Nodes: *nodes, Seed: 1, Problem: prob, Gamma: *gamma, Lambda: *lambda, Clip: *clip,
			Sigma: *sigma, Node: *node, PairHops: *pairHops, FinalHops: *finalHops, Trials: *trials, Delta: *delta,
			Confidence: *confidence, Noise: noise, Workers: *workers,
		}
		if o.Nodes == 0 {
			o.Nodes = 50
		}
		if o.Gamma == 0 {
			o.Gamma = 100
		}
		header = fmt.Sprintf("audit of the walk on %s: node %d of %d, gamma %g, lambda %g, clip %g, sigma %g, l2 %g, logistic loss",
			ld.name, o.Node, o.Nodes, o.Gamma, o.Lambda, o.Clip, o.Sigma, *l2)
		res, err = testnet.WalkAudit(o)
	} else {
		o := testnet.RADMMAuditOptions{
			Train: ld.train, Nodes: *nodes, Seed: 1, Problem: prob, Alpha: *alpha, Eta: *eta, Gamma: *gamma,
			PaperC: *paperC, Node: *node, Trials: *trials, Confidence: *confidence, Noise: noise, Workers: *workers,
		}
		if o.Nodes == 0 {
			o.Nodes = 5
		}
		header = fmt.Sprintf("audit of R-ADMM on %s: node %d of %d (ring), alpha %g, eta %g, C %g, l2 %g, logistic loss",
			ld.name, o.Node, o.Nodes, o.Alpha, o.Eta, o.PaperC, *l2)
		res, err = testnet.RADMMAudit(o)
	}
	if err != nil {
		return err
	}
	wall := time.Since(start)
	if *outPath != "" {
		if err := writeFileWith(*outPath, func(w io.Writer) error { return writeAuditJSON(w, res) }); err != nil {
			return err
		}
	}
	if *pngPath != "" {
		title := strings.Replace(header, ": ", "\n", 1)
		if err := writeFileWith(*pngPath, func(w io.Writer) error { return testnet.WriteAuditPNG(w, res, title) }); err != nil {
			return err
		}
	}
	if *asJSON {
		if err := writeAuditJSON(stdout, res); err != nil {
			return err
		}
	} else {
		noiseName := "crypto/rand (secure)"
		if seeded {
			noiseName = fmt.Sprintf("seeded with %d: reproducible, NOT secure", *seed)
		}
		fmt.Fprintln(stdout, header)
		fmt.Fprintf(stdout, "noise %s; %d trials per dataset (%d choose each test, %d evaluate it); %.4g s\n",
			noiseName, *trials, *trials/2, *trials-*trials/2, wall.Seconds())
		if len(res) > 0 {
			what := "4 lambda C (i's data part)"
			if *algo == "radmm" {
				what = "2 C_i/B_i (gradient of i's objective)"
			}
			fmt.Fprintf(stdout, "neighbouring datasets %s\nwithout noise the canary attains %.3g of the sensitivity %s\n",
				canaryOf(res[0].Note), res[0].SensitivityUsed, what)
		}
		printAuditTable(stdout, res)
	}
	if v := violations(res); v > 0 {
		return fmt.Errorf("VIOLATION: on %d of %d lines the empirical lower bound exceeds the claimed upper bound", v, len(res))
	}
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
