package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/testnet/experiment"
)

const utilityHelp = `Usage: dpadmm experiment utility [flags]

The utility scorecard: for every shipped data set (breast_cancer, wine, iris, diabetes),
node count, split (iid, or label: each node's rows sorted by label) and target per-record
epsilon, over several seeds, the test accuracy (R^2 for diabetes) of the random walk (the
testnet defaults, sigma calibrated so that each node's local per-record figure at delta
1e-5 is the target) and of R-ADMM (one-vs-rest for three classes; alpha calibrated so
that its pure per-record epsilon is the target), with the non-private model of the same
objective (which equals scikit-learn's on the same split) as the reference and the majority
class as the floor. Writes OUT/NAME.csv (one line per run) and OUT/NAME.png (one panel
per data set, node count and split), and prints the table of means.

A target R-ADMM cannot reach (its figure has a part that does not shrink with the noise)
is reported as out of reach with the smallest epsilon it can claim.
`

// utilityDatasets are the shipped data sets of the scorecard: name -> data flags (paths
// relative to --examples).
var utilityDatasets = map[string][]string{
	"breast_cancer": {"--data", "embedded"},
	"wine":          {"--data", "wine.csv", "--label", "class", "--schema", "wine.schema.json"},
	"iris":          {"--data", "iris.csv", "--label", "species", "--schema", "iris.schema.json"},
	"diabetes":      {"--data", "diabetes.csv", "--label", "target", "--schema", "diabetes.schema.json", "--loss", "squared"},
}

// runExperimentUtility is 'dpadmm experiment utility'.
func runExperimentUtility(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("experiment utility", utilityHelp, stdout)
	datasets := fs.String("datasets", "breast_cancer,wine,iris,diabetes", "comma-separated data sets: breast_cancer, wine, iris, diabetes")
	examples := fs.String("examples", "examples", "the directory holding wine.csv, iris.csv, diabetes.csv and their schemas")
	nodesStr := fs.String("nodes", "3,50", "comma-separated node counts")
	splits := fs.String("splits", "iid,label", "comma-separated splits: iid, label, contiguous")
	epsStr := fs.String("epsilons", "0.5,1,2,4,8", "comma-separated target per-record epsilons")
	algos := fs.String("algos", "walk,walk-sgd,radmm", "comma-separated algorithms: walk (prox step), walk-sgd (the DP-SGD walk: step size 2, rate 0.1, cap 100), radmm")
	seeds := fs.Int("seeds", 3, "runs per cell (seed, seed+1, ...): split, noise and path")
	seed := fs.Uint64("seed", 1, "first seed; the train/test split uses it too")
	iters := fs.Int("iters", 2, "R-ADMM iterations (2: one perturbed and one recycled iteration, measured best of 2, 4, 6, 10 and 20 on these data; docs/measurements.md)")
	outDir := fs.String("out", "utility", "output directory (created if missing)")
	name := fs.String("name", "utility", "base name of the outputs: OUT/NAME.csv and OUT/NAME.png")
	quiet := fs.Bool("quiet", false, "no progress line on stderr")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return experimentUsage(stderr, "unexpected argument %q", fs.Arg(0))
	}
	nodes, err := parseIntList(*nodesStr)
	if err != nil {
		return experimentUsage(stderr, "--nodes: %v", err)
	}
	var eps []float64
	for _, f := range strings.Split(*epsStr, ",") {
		e, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(e > 0) || math.IsInf(e, 0) {
			return experimentUsage(stderr, "--epsilons: want comma-separated targets, each finite and > 0, got %q", f)
		}
		eps = append(eps, e)
	}
	for _, c := range []struct {
		flag, list string
		ok         []string
	}{{"--splits", *splits, []string{"iid", "label", "contiguous"}}, {"--algos", *algos, []string{"walk", "walk-sgd", "radmm"}}} {
		for _, v := range splitList(c.list) {
			if !slices.Contains(c.ok, v) {
				return experimentUsage(stderr, "%s: unknown %q (want %s)", c.flag, v, strings.Join(c.ok, ", "))
			}
		}
	}
	if *seeds < 1 {
		return experimentUsage(stderr, "--seeds must be >= 1, got %d", *seeds)
	}
	if *iters < 2 {
		return experimentUsage(stderr, "--iters must be >= 2, got %d", *iters)
	}
	var data []experiment.UtilityData
	for _, dn := range strings.Split(*datasets, ",") {
		dn = strings.TrimSpace(dn)
		d, err := loadUtilityData(dn, *examples, *seed)
		if err != nil {
			return err
		}
		data = append(data, d)
	}
	o := experiment.UtilityOptions{Data: data, Nodes: nodes, Splits: splitList(*splits), Epsilons: eps, Algos: splitList(*algos),
		Seeds: *seeds, Seed: *seed, Iters: *iters}
	prog := newProgress(stderr, *quiet)
	if prog != nil {
		o.Progress = func(done, total int) { prog.Printf("experiment utility: run %d/%d", done, total) }
	}
	rows, err := experiment.RunUtility(ctx, o)
	if prog != nil {
		prog.Done()
	}
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*outDir, 0o755); err != nil {
		return err
	}
	cells := experiment.SummariseUtility(rows)
	printUtilityTable(stdout, cells) // first: a failed write loses no result
	if err := writeFileWith(filepath.Join(*outDir, *name+".csv"), func(w io.Writer) error { return experiment.WriteUtilityCSV(w, rows) }); err != nil {
		return err
	}
	var png bytes.Buffer
	if err := experiment.WriteUtilityPNG(&png, cells); err != nil {
		return err // no empty PNG left behind
	}
	if err := writeFileAtomic(filepath.Join(*outDir, *name+".png"), png.Bytes()); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s and %s\n", filepath.Join(*outDir, *name+".csv"), filepath.Join(*outDir, *name+".png"))
	return nil
}

// loadUtilityData loads one shipped data set with its public schema (breast cancer: the
// embedded data, standardised on the whole public data), as 'dpadmm testnet' does.
func loadUtilityData(name, examples string, seed uint64) (experiment.UtilityData, error) {
	a, ok := utilityDatasets[name]
	if !ok {
		return experiment.UtilityData{}, usagef("experiment", "--datasets: unknown data set %q (want breast_cancer, wine, iris or diabetes)", name)
	}
	args := append([]string(nil), a...)
	for i := 0; i+1 < len(args); i++ {
		if (args[i] == "--data" && args[i+1] != "embedded") || args[i] == "--schema" {
			args[i+1] = filepath.Join(examples, args[i+1])
		}
	}
	fs := flag.NewFlagSet("utility", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	df := addDataFlags(fs, testnetData)
	lossName := fs.String("loss", "logistic", "")
	if err := fs.Parse(args); err != nil {
		return experiment.UtilityData{}, err
	}
	loss, err := consensus.ParseLoss(*lossName)
	if err != nil {
		return experiment.UtilityData{}, err
	}
	if err := df.check(loss); err != nil {
		return experiment.UtilityData{}, err
	}
	ld, err := df.load(loadRequest{loss: loss, seed: seed, multiclass: true})
	if err != nil {
		return experiment.UtilityData{}, fmt.Errorf("%s: %w (run from the repository root or give --examples)", name, err)
	}
	prob := consensus.Problem{Loss: loss, Reg: consensus.Regularizer{L2: 1e-3}}
	return experiment.UtilityData{Name: name, Train: ld.train, Test: ld.test, Problem: ld.problem(prob, true), Scaler: ld.scaler}, nil
}

// printUtilityTable prints the mean metric of every cell.
func printUtilityTable(w io.Writer, cells []experiment.UtilityCell) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "data\tnodes\tsplit\talgo\ttarget eps\tepsilon\tmetric\tmean\tmin\tmax\tnon-private\tfloor")
	f := func(x float64) string {
		if math.IsNaN(x) {
			return "-"
		}
		return strconv.FormatFloat(x, 'f', 3, 64)
	}
	for _, c := range cells {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%g\t%.3g\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Data, c.Nodes, c.Split, c.Algo, c.Target, c.Epsilon, c.Metric,
			f(c.Mean), f(c.Min), f(c.Max), f(c.Reference), f(c.Floor))
	}
	tw.Flush()
}

// parseIntList parses a comma-separated list of integers >= 1.
func parseIntList(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		v, err := strconv.Atoi(f)
		if err != nil || v < 1 {
			return nil, fmt.Errorf("want integers >= 1, got %q", f)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("empty list")
	}
	return out, nil
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
