package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/testnet/experiment"
)

const experimentWalkHelp = `Usage: dpadmm experiment walk [flags]

The privacy/utility comparison of the random-walk paper (Cyffers, Bellet, Basu, Fig. 1)
in the decentralized setting: every training row is one node, the model travels on a random
walk over the complete graph, and for every epsilon of --epsilons each method's noise is
calibrated by dpadmm's accountant to that epsilon at --delta. Methods:
  walk ADMM            Algorithm 4, exact prox x-step (--algo walk)
  walk gradient ADMM   gradient ADMM with amplification by iteration (--algo walk-gadmm)
  walk ls-sgd nu=0,2,3 Laplacian-smoothed subsampled DP-SGD local step (--local-step ls-sgd)
  walk DP-SGD          the private random-walk SGD baseline (--algo walk-sgd)
All run the same number of hops (--hops) with the same cap K_i on every node's noisy
updates. Each method's gamma or step size and its clip are tuned once by grid search on the
smallest epsilon (mean training objective over --tune-seeds runs) and kept for every
epsilon, as the paper does (--tune each tunes at every epsilon instead). Grids: walk ADMM
gamma in {0.3, 1, 3, 10}; gradient ADMM step in {0.1, 0.3, 0.9} (beta 1; a step above 1/nu
is left out); ls-sgd and DP-SGD step in {0.03, 0.1, 0.3, 1} (decaying as step/sqrt(k) with
the node's update count k, sampling rate 1: one row per node); clip in {0.001, 0.01, 0.1, 1}
for all. The metric is the test objective of the final model, mean and min-max over --seeds
runs.

--figure says what the noise is calibrated to: pairwise (default: the planned network
figure of the worst pair, which falls back to the local figure where its conditions fail,
and equals it for ls-sgd, which no network amplification theorem covers) or local (an
observer of every message).

Data: the paper's synthetic lasso by default (--data synthetic: 1,000 rows drawn uniformly
on the unit sphere of R^64, a ground truth with 8 nonzero coordinates uniform in [0,1),
noise std 0.1, 800 training rows = 800 nodes, 200 test rows), or any regression CSV or
LIBSVM file (squared loss; features scaled to rows of norm <= 1, the target standardized
by the training rows' mean and standard deviation), e.g.
  dpadmm experiment walk --data ../shared/data/diabetes.csv --label target

Outputs: OUT/NAME.csv (one line per method and epsilon: sigma, tuned parameters, test
objective mean/min/max/std) and OUT/NAME.png (log-log), and a table on stdout.
`

func runExperimentWalk(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("experiment walk", experimentWalkHelp, stdout)
	df := addDataFlags(fs, dataFlagConfig{dataUsage: "data: synthetic (the paper's lasso, the default) or a regression CSV or LIBSVM file",
		test: true, scale: consensus.ScaleStandardizeNorm, fit: true})
	l1 := fs.Float64("l1", 1e-3, "lasso weight kappa: the objective is mean (1/2)(a.w - y)^2 + kappa ||w||_1")
	hops := fs.Uint64("hops", 0, "hops of every run (0 = 100 x nodes)")
	epsStr := fs.String("epsilons", "0.01,0.028173,0.07937,0.22361,0.62996,1.7748,5", "comma-separated epsilons (default: the authors' geomspace(0.01, 5, 7))")
	delta := fs.Float64("delta", 1e-6, "delta of every figure")
	figure := fs.String("figure", "pairwise", "what the noise is calibrated to: pairwise or local")
	capK := fs.Int("cap", 0, "hard cap K_i on every node's noisy updates (0 = expected visits + 6 sd)")
	seeds := fs.Int("seeds", 10, "runs per method and epsilon")
	tuneSeeds := fs.Int("tune-seeds", 3, "runs per grid point when tuning")
	seed := fs.Uint64("seed", 1, "first seed (runs use seed, seed+1, ...); also the data and the train/test split")
	methods := fs.String("methods", "", "comma-separated subset of the methods by index (0 walk ADMM, 1 gradient ADMM, 2-4 ls-sgd nu=0,2,3, 5 DP-SGD); empty = all")
	tuneAt := fs.String("tune", "smallest", "when to tune each method's grid: smallest (once, at the smallest epsilon, the paper's protocol) or each (at every epsilon)")
	nonPriv := fs.Bool("nonprivate", true, "also run every tuned method without noise (the CSV's nonprivate_test)")
	outDir := fs.String("out", "walk-experiment", "output directory (created if missing)")
	name := fs.String("name", "walk", "base name of the outputs: OUT/NAME.csv and OUT/NAME.png")
	quiet := fs.Bool("quiet", false, "no progress line on stderr")
	workers := fs.Int("workers", 0, "runs in parallel (the results do not depend on it); 0 = GOMAXPROCS")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	bad := func(format string, a ...any) error { return experimentUsage(stderr, format, a...) }
	eps, err := parseEpsilons(*epsStr)
	if err != nil {
		return bad("--epsilons: %v", err)
	}
	switch {
	case fs.NArg() > 0:
		return bad("unexpected argument %q", fs.Arg(0))
	case !(*l1 >= 0) || math.IsInf(*l1, 0):
		return bad("--l1 must be finite and >= 0, got %v", *l1)
	case !(*delta > 0 && *delta < 1):
		return bad("--delta must be in (0,1), got %v", *delta)
	case *figure != "pairwise" && *figure != "local":
		return bad("--figure must be pairwise or local, got %q", *figure)
	case *seeds < 1 || *tuneSeeds < 1:
		return bad("--seeds and --tune-seeds must be >= 1")
	case *capK < 0 || *workers < 0:
		return bad("--cap and --workers must be >= 0")
	case *tuneAt != "smallest" && *tuneAt != "each":
		return bad("--tune must be smallest or each, got %q", *tuneAt)
	case *name == "" || strings.ContainsAny(*name, `/\`):
		return bad("--name must be a plain file name, got %q", *name)
	}
	ms, err := walkMethods(*methods)
	if err != nil {
		return bad("--methods: %v", err)
	}
	if *workers == 0 {
		*workers = runtime.GOMAXPROCS(0)
	}
	var train, test *consensus.Dataset
	dataName := "synthetic lasso: unit sphere, p=64, support 8"
	if *df.path == "" || *df.path == "synthetic" {
		full, _ := consensus.SyntheticLassoSphere(1000, 64, 8, 0.1, *seed)
		train, test = consensus.TrainTest(full, 0.2, *seed)
	} else {
		if err := df.check(consensus.Squared); err != nil {
			return bad("%v", err)
		}
		ld, err := df.load(loadRequest{loss: consensus.Squared, seed: *seed})
		if err != nil {
			return err
		}
		train, test, dataName = ld.train, ld.test, ld.name
		standardizeTarget(train, test)
		dataName += " (target standardized)"
	}
	opt := experiment.WalkExperimentOptions{Train: train, Test: test, Data: dataName,
		Problem: consensus.Problem{Loss: consensus.Squared, Reg: consensus.Regularizer{L1: *l1}},
		Hops:    *hops, Epsilons: eps, Delta: *delta, Figure: *figure, Cap: *capK, Seeds: *seeds, TuneSeeds: *tuneSeeds,
		Seed: *seed, Methods: ms, Workers: *workers, NonPrivate: *nonPriv, TuneEach: *tuneAt == "each"}
	prog := newProgress(stderr, *quiet)
	if prog != nil {
		opt.Progress = func(done, total int) { prog.Printf("experiment walk: run %d/%d", done, total) }
	}
	if err := os.MkdirAll(*outDir, 0o755); err != nil {
		return err
	}
	start := time.Now()
	res, err := experiment.RunWalkExperiment(ctx, opt)
	prog.Done()
	if err != nil {
		if ctx.Err() != nil {
			return interrupted("stopped after %.1f s; nothing written", time.Since(start).Seconds())
		}
		return err
	}
	return printWalkExperiment(stdout, res, *outDir, *name, start)
}

// parseEpsilons parses a comma-separated list of finite epsilons > 0.
func parseEpsilons(list string) ([]float64, error) {
	var eps []float64
	for _, f := range strings.Split(list, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(v > 0) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("want finite numbers > 0, got %q", f)
		}
		eps = append(eps, v)
	}
	return eps, nil
}

// walkMethods returns the methods of experiment.DefaultWalkMethods named by a
// comma-separated list of indices, or all of them for an empty list.
func walkMethods(list string) ([]experiment.WalkMethod, error) {
	all := experiment.DefaultWalkMethods()
	if list == "" {
		return all, nil
	}
	var ms []experiment.WalkMethod
	for _, f := range strings.Split(list, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || k < 0 || k >= len(all) {
			return nil, fmt.Errorf("want indices in 0..%d, got %q", len(all)-1, f)
		}
		ms = append(ms, all[k])
	}
	return ms, nil
}

// printWalkExperiment writes OUT/NAME.csv and .png and prints the summary table.
func printWalkExperiment(stdout io.Writer, res *experiment.WalkExperimentResult, outDir, name string, start time.Time) error {
	csvPath, pngPath, err := writeCSVAndPNG(outDir, name, res.WriteCSV, res.WritePNG)
	if err != nil {
		return err
	}
	o := res.Options
	fmt.Fprintf(stdout, "walk comparison on %s: %d nodes (one training row each), %d test rows, %d hops, cap K_i = %d, delta %g, %s figure, %d seeds; %.1f s\n",
		o.Data, o.Train.Rows, rowsOf(o.Test), o.Hops, o.Cap, o.Delta, o.Figure, o.Seeds, time.Since(start).Seconds())
	fmt.Fprintf(stdout, "test objective of the non-private optimum %.6g, of the zero model %.6g\n\n", res.Reference, res.Zero)
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "method\tepsilon\tsigma\tgamma\tstep\tclip\ttest objective mean [min, max]")
	for _, p := range res.Points {
		fmt.Fprintf(tw, "%s\t%.4g\t%.4g\t%g\t%g\t%g\t%.5g [%.5g, %.5g]\n", p.Method, p.Epsilon, p.Sigma, p.Gamma, p.Eta, p.Clip, p.Mean, p.Min, p.Max)
	}
	tw.Flush()
	fmt.Fprintf(stdout, "wrote %s and %s\n", csvPath, pngPath)
	return nil
}

func rowsOf(d *consensus.Dataset) int {
	if d == nil {
		return 0
	}
	return d.Rows
}

// standardizeTarget centers and scales the regression target by the training rows' mean
// and standard deviation (train and test alike), so that a clipped update can reach the
// model: the experiment's rows have norm <= 1 and its clip grid is made for targets of
// order one.
func standardizeTarget(train, test *consensus.Dataset) {
	mean, sd := 0.0, 0.0
	for _, y := range train.Y {
		mean += y / float64(len(train.Y))
	}
	for _, y := range train.Y {
		sd += (y - mean) * (y - mean) / float64(len(train.Y))
	}
	sd = math.Sqrt(sd)
	if !(sd > 0) {
		sd = 1
	}
	for _, d := range []*consensus.Dataset{train, test} {
		if d == nil {
			continue
		}
		for i, y := range d.Y {
			d.Y[i] = (y - mean) / sd
		}
	}
}
