package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/consensus/graph"
	"github.com/dpadmm/dpadmm/node"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/testnet/experiment"
)

const experimentHelp = `Usage: dpadmm experiment radmm [flags]

Reproduces the comparison of Fig. 5 of Zhang, Khalili, Liu, "Recycled ADMM" (IEEE TIFS 15,
2020) on any binary classification data set: average training loss L(t) (mean over nodes
of the local model's mean logistic loss on its own shard), test error of the averaged
model and the privacy bound P(t) over t = 0..T for
  admm-dvp  conventional ADMM with dual variable perturbation (baseline, Zhang and Zhu 2017)
  madmm     M-ADMM-style penalty perturbation (baseline after Zhang, Khalili, Liu, ICML 2018):
            conventional ADMM, penalty eta*q^ceil(t/2) (MR-ADMM's penalty at the same t),
            linear noise eta(t)*eps in every solve
  radmm     private R-ADMM, penalty eta
  mradmm    private MR-ADMM, penalty eta*q^k at outer step k
  admm      non-private conventional ADMM (reference)
at every alpha of --alphas, over --seeds runs (mean and min-max range).

Matched privacy: R-ADMM and MR-ADMM use alpha. For each seed, the baselines' alpha is
solved by bisection on their own accountant so that their network P(T) (max over nodes,
every iteration charged) equals R-ADMM's P(T) from Theorem V.1, eq. (32) (MR-ADMM's P(T) is
slightly lower at the same alpha). The baselines' bound is the objective-perturbation
argument of Theorem V.1 applied to every iteration (M-ADMM: with alpha/eta(t)).

Outputs in --out: NAME.csv (algo, alpha, noise_alpha, iter, mean/min/max of loss, test
error and P(t)) and NAME.png (one row per alpha: loss with bands, test error, P(t)); a
summary table on stdout. Constants as in 'dpadmm testnet --algo radmm': node i minimises
(C/B_i)*sum of its losses + (rho/N)||f||^2/2 with C = --paper-c*N*B_i/M, rho = --paper-c*N*l2.
Theorem V.1 needs rows of norm <= 1 (--scale unitball, rownorm, standardize+unitball or
standardize+rownorm) and C_i <= B_i.

UCI Adult (adult.data as distributed: no header, label in column 14 with values <=50K and
>50K, categorical columns one-hot encoded, '?' kept as a category), with the paper's
C = 1750 and rho = 0.22 (l2 = rho/(C N)); 20% of the rows are held out for testing:
  dpadmm experiment radmm --data adult.data --label 14 --positive '>50K' \
      --categorical auto --paper-c 1750 --l2 2.514e-5 --out fig5-adult
One run takes about a minute there (26,000 training rows, about 105 dense features after
standardisation), so the default 130 runs take over an hour per core; --seeds 3 is quicker.
`

// parseAlphas parses a comma-separated list of alphas > 0.
func parseAlphas(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		a, err := strconv.ParseFloat(f, 64)
		if err != nil || math.IsNaN(a) || math.IsInf(a, 0) || !(a > 0) {
			return nil, fmt.Errorf("alpha must be a finite number > 0, got %q", f)
		}
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, errors.New("no alpha given")
	}
	return out, nil
}

// experimentUsage returns a usage error of "experiment" (run prints it; exit code 2).
func experimentUsage(_ io.Writer, format string, a ...any) error {
	return usagef("experiment", format, a...)
}

func runExperiment(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help" || args[0] == "help") {
		// radmm is the only experiment: its help is the command's.
		return runExperiment(ctx, []string{"radmm", "--help"}, stdout, stderr)
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return experimentUsage(stderr, "which experiment? available: radmm (Fig. 5 of Recycled ADMM), gadmm (Sec. 10 of the gradient-ADMM amplification paper), walk (privacy/utility of the random-walk methods), utility (the scorecard: accuracy against per-record epsilon, every shipped data set, against the non-private model)")
	}
	switch args[0] {
	case "walk":
		return runExperimentWalk(ctx, args[1:], stdout, stderr)
	case "gadmm":
		return runExperimentGADMM(ctx, args[1:], stdout, stderr)
	case "utility":
		return runExperimentUtility(ctx, args[1:], stdout, stderr)
	}
	if args[0] != "radmm" {
		return unknownCommand("experiment", "experiment", args[0], []string{"radmm", "gadmm", "walk", "utility"})
	}
	return runExperimentRADMM(ctx, args[1:], stdout, stderr)
}

// runExperimentRADMM is 'dpadmm experiment radmm'.
func runExperimentRADMM(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("experiment radmm", experimentHelp, stdout)
	df := addDataFlags(fs, experimentData)
	split := fs.String("split", "iid", "how training rows are split over nodes: iid|contiguous|label")
	nodes := fs.Int("nodes", 5, "number of nodes N")
	graphSpec := fs.String("graph", "ring", "graph: complete|ring|grid|er:p|regular:d|file:PATH")
	iters := fs.Int("iters", 50, "iterations T (R-ADMM: T/2 perturbed odd iterations)")
	alphasStr := fs.String("alphas", "2,1,0.5", "comma-separated alphas of R-ADMM and MR-ADMM (noise density exp(-alpha*||eps||))")
	seeds := fs.Int("seeds", 10, "runs per algorithm and alpha (seed, seed+1, ...): partition, f(0) and noise")
	seed := fs.Uint64("seed", 1, "first seed; also the train/test split")
	paperC := fs.Float64("paper-c", 20, "the paper's C: weight of the data term; privacy grows with C/B_i (20 on the default data gives 2C/B_i = 0.44, the paper's value for Adult, N = 5)")
	l2 := fs.Float64("l2", 2.2e-3, "L2 weight mu of the reported objective; rho = C*N*mu (default: the paper's rho = 0.22 with C = 20, N = 5)")
	eta := fs.Float64("eta", 1, "penalty eta of R-ADMM and ADMM-DVP, base of the MR-ADMM and M-ADMM schedules")
	etaGrowth := fs.Float64("eta-growth", 1.04, "MR-ADMM: eta(2k-1) = eta*q^k; M-ADMM-style: eta(t) = eta*q^ceil(t/2)")
	gamma := fs.Float64("even-gamma", node.DefaultRADMMParams().Gamma, "even-step proximal weight gamma >= 0 of R-ADMM and MR-ADMM")
	noNonPriv := fs.Bool("no-nonprivate", false, "leave out the non-private ADMM reference curve")
	outDir := fs.String("out", "fig5", "output directory (created if missing)")
	name := fs.String("name", "fig5", "base name of the outputs: OUT/NAME.csv and OUT/NAME.png")
	quiet := fs.Bool("quiet", false, "no progress line on stderr")
	workers := fs.Int("workers", 0, "runs in parallel (the results do not depend on it); 0 = GOMAXPROCS, the usable CPUs")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return experimentUsage(stderr, "unexpected argument %q", fs.Arg(0))
	}
	alphas, err := parseAlphas(*alphasStr)
	switch {
	case err != nil:
		return experimentUsage(stderr, "--alphas: %v", err)
	case *workers < 0:
		return experimentUsage(stderr, "--workers must be >= 0, got %d", *workers)
	case *seeds < 1:
		return experimentUsage(stderr, "--seeds must be >= 1, got %d", *seeds)
	case *iters < 1:
		return experimentUsage(stderr, "--iters must be >= 1, got %d", *iters)
	case *nodes < 2:
		return experimentUsage(stderr, "--nodes must be >= 2, got %d", *nodes)
	case !(*paperC > 0) || math.IsInf(*paperC, 0):
		return experimentUsage(stderr, "--paper-c must be > 0 and finite, got %v", *paperC)
	case !(*l2 > 0) || math.IsInf(*l2, 0):
		return experimentUsage(stderr, "--l2 must be > 0 and finite (rho > 0), got %v", *l2)
	case !(*eta > 0) || math.IsInf(*eta, 0):
		return experimentUsage(stderr, "--eta must be > 0 and finite, got %v", *eta)
	case !(*etaGrowth >= 1) || math.IsInf(*etaGrowth, 0):
		return experimentUsage(stderr, "--eta-growth must be >= 1 and finite, got %v", *etaGrowth)
	case !(*gamma >= 0) || math.IsInf(*gamma, 0):
		return experimentUsage(stderr, "--even-gamma must be >= 0 and finite, got %v", *gamma)
	case *name == "" || strings.ContainsAny(*name, `/\`):
		return experimentUsage(stderr, "--name must be a plain file name, got %q", *name)
	}
	if err := checkSplit("experiment radmm", *split); err != nil {
		return err
	}
	if *workers == 0 {
		*workers = runtime.GOMAXPROCS(0)
	}
	if _, err := graph.Parse(*graphSpec, *nodes, *seed); err != nil {
		return experimentUsage(stderr, "--graph: %v", err)
	}
	if err := df.check(consensus.Logistic); err != nil {
		return experimentUsage(stderr, "%v", err)
	}
	ld, err := df.load(loadRequest{loss: consensus.Logistic, seed: *seed})
	if err != nil {
		return err
	}
	opt := experiment.ExperimentOptions{
		Train: ld.train, Test: ld.test, Nodes: *nodes, Graph: *graphSpec, Split: *split,
		Problem: consensus.Problem{Loss: consensus.Logistic, Reg: consensus.Regularizer{L2: *l2}},
		Iters:   *iters, Alphas: alphas, Seeds: *seeds, Seed: *seed, Eta: *eta, EtaGrowth: *etaGrowth,
		Gamma: *gamma, C: *paperC, NoNonPriv: *noNonPriv, Workers: *workers,
	}
	prog := newProgress(stderr, *quiet)
	if prog != nil {
		opt.Progress = func(done, total int) { prog.Printf("experiment radmm: run %d/%d", done, total) }
	}
	if err := os.MkdirAll(*outDir, 0o755); err != nil {
		return err
	}
	return runExperimentOutputs(ctx, opt, prog, *outDir, *name, ld, stdout)
}

// runExperimentOutputs runs the experiment of opt and writes OUT/NAME.csv and .png (a
// partial CSV when interrupted) and the summary.
func runExperimentOutputs(ctx context.Context, opt experiment.ExperimentOptions, prog *progress, outDir, name string, ld *loadedData, stdout io.Writer) error {
	start := time.Now()
	res, err := experiment.RunExperimentContext(ctx, opt)
	prog.Done()
	if err != nil {
		return err
	}
	wall := time.Since(start)
	if res.Interrupted {
		// The series whose every run completed, in a file of their own: a complete
		// NAME.csv from an earlier run is not overwritten by a partial one.
		csvPath := filepath.Join(outDir, name+".partial.csv")
		if err := writeFileWith(csvPath, res.WriteCSV); err != nil {
			return err
		}
		return interrupted("stopped after %d of %d runs (%.1f s); the %d series whose runs all completed are in %s (no plot)",
			res.Runs, res.Total, wall.Seconds(), len(res.Series), csvPath)
	}
	csvPath, pngPath, err := writeCSVAndPNG(outDir, name, res.WriteCSV, res.WritePNG)
	if err != nil {
		return err
	}
	printExperimentSummary(stdout, res, ld, wall)
	fmt.Fprintf(stdout, "wrote %s and %s\n", csvPath, pngPath)
	return nil
}

func printExperimentSummary(w io.Writer, r *experiment.ExperimentResult, ld *loadedData, wall time.Duration) {
	o := r.Options
	testRows := 0
	if o.Test != nil {
		testRows = o.Test.Rows
	}
	fmt.Fprintf(w, "Fig. 5 comparison on %s: %d train / %d test rows, %d features, scale %s\n",
		ld.name, o.Train.Rows, testRows, o.Train.Cols, ld.scaling)
	fmt.Fprintf(w, "N = %d nodes (%s, split %s), T = %d iterations, %d seeds from %d, C = %g, l2 = %g (rho = %g), eta = %g, q = %g, gamma = %g\n",
		o.Nodes, o.Graph, o.Split, o.Iters, o.Seeds, o.Seed, o.C, o.Problem.Reg.L2, o.C*float64(o.Nodes)*o.Problem.Reg.L2,
		o.Eta, o.EtaGrowth, o.Gamma)
	fmt.Fprintf(w, "%d runs in %.1f s\n\n", r.Runs, wall.Seconds())
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "alpha\talgo\tnoise alpha\tloss L(T) mean [min, max]\ttest error(T) mean [min, max]\tP(T) pure DP\tconditions")
	for _, s := range r.Series {
		T := len(s.Loss.Mean) - 1
		a, na, p, cond := "-", "-", "none (no noise)", "-"
		if !math.IsInf(s.Alpha, 1) {
			a = strconv.FormatFloat(s.Alpha, 'g', 4, 64)
			na = fmt.Sprintf("%.4g", s.NoiseAlpha)
			if s.NoiseAlphaMax-s.NoiseAlphaMin > 1e-9*s.NoiseAlpha {
				na += fmt.Sprintf(" [%.4g, %.4g]", s.NoiseAlphaMin, s.NoiseAlphaMax)
			}
			p = fmt.Sprintf("%.4f", s.Privacy.Mean[T])
			cond = "hold"
			if !s.ConditionsHold {
				cond = "do NOT hold: " + s.Reason
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.4f [%.4f, %.4f]\t%.4f [%.4f, %.4f]\t%s\t%s\n", a, s.Algo, na,
			s.Loss.Mean[T], s.Loss.Min[T], s.Loss.Max[T], s.TestError.Mean[T], s.TestError.Min[T], s.TestError.Max[T], p, cond)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nP(T): radmm, mradmm: %s.\n  admm-dvp, madmm: %s (madmm with alpha/eta(t)).\n  Conditions: %s.\n",
		privacy.ObjPertTheorem, privacy.ConvTheoremDVP, privacy.ObjPertConditions)
	fmt.Fprintln(w, "\nAt matched P(T) (baselines' P(T) = R-ADMM's; MR-ADMM's is lower), lower final mean loss than ADMM-DVP?")
	yes := func(b bool) string {
		if b {
			return "yes"
		}
		return "NO"
	}
	for _, s := range r.Summary() {
		fmt.Fprintf(w, "  alpha %g: R-ADMM %.4f vs DVP %.4f: %s; MR-ADMM %.4f: %s (M-ADMM-style %.4f)\n", s.Alpha,
			s.Loss[experiment.ExpRADMM], s.Loss[experiment.ExpDVP], yes(s.RBeatsDVP), s.Loss[experiment.ExpMRADMM], yes(s.MRBeatsDVP), s.Loss[experiment.ExpMADMM])
	}
}

// writeCSVAndPNG writes an experiment's outputs, OUT/NAME.csv and OUT/NAME.png, and
// returns their paths.
func writeCSVAndPNG(outDir, name string, csv, png func(io.Writer) error) (string, string, error) {
	csvPath := filepath.Join(outDir, name+".csv")
	pngPath := filepath.Join(outDir, name+".png")
	if err := writeFileWith(csvPath, csv); err != nil {
		return "", "", err
	}
	if err := writeFileWith(pngPath, png); err != nil {
		return "", "", err
	}
	return csvPath, pngPath, nil
}
