package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/dpadmm/dpadmm/consensus"
)

// evalSpec scores a self-describing model (a file with a "predictor") on --data: the rows
// are read as dpadmm predict reads them (columns by name, the model's vocabulary and
// scaling), the labels must be the model's classes, and a classifier gets per-class
// precision, recall and F1, the confusion matrix and (binary) the ROC AUC; a regression
// model the RMSE, MAE and R^2 in the target's units.
func evalSpec(spec *consensus.ModelSpec, path string, df *dataFlags, set map[string]bool, lossFlag string, asJSON bool, stdout io.Writer) error {
	for _, n := range []string{"positive", "scale-file", "categorical", "test", "test-frac", "schema"} {
		if set[n] {
			return usagef("eval", "--%s does not apply: %s describes its model (loss, classes, scaling, vocabulary)", n, path)
		}
	}
	// --scale and --loss may repeat the model's own; another is refused.
	if k, err := consensus.ParseScaling(*df.scale); set["scale"] && (err != nil || k != spec.Scaling.Kind) {
		return usagef("eval", "--scale %s, but %s was trained with the %s scaling (which eval applies itself)", *df.scale, path, spec.Scaling.Kind)
	}
	if set["loss"] {
		if l, err := consensus.ParseLoss(lossFlag); err != nil || consensus.LossFor(&consensus.Dataset{}, l).String() != spec.Loss && !(l == consensus.Logistic && spec.Loss == "multinomial") {
			return usagef("eval", "--loss %s, but %s records the %s loss", lossFlag, path, spec.Loss)
		}
	}
	rows, scores, err := scoreSpec(spec, df, "eval")
	if err != nil {
		return err
	}
	rep := evalReport{ModelFile: path, Source: "model with its predictor", Data: *df.path, Rows: rows,
		Dims: len(spec.Features), Loss: spec.Loss, Scale: describeScaler(spec.Scaling), Task: spec.Task, evalScores: scores}
	if asJSON {
		return writeJSON(stdout, rep)
	}
	fmt.Fprintf(stdout, "model %s: %s, %s, %d features\n", path, spec.Task, spec.Loss, rep.Dims)
	fmt.Fprintf(stdout, "data %s: %d rows\n", rep.Data, rep.Rows)
	printScores(stdout, specLossName(spec), rep.evalScores)
	if c := rep.Classification; c != nil {
		printClassReport(stdout, c)
	}
	return nil
}

// specLossName names the mean loss eval gives a model with a predictor: the log loss
// (mean -log of the probability of the true class) of a classifier, whatever loss trained
// it (for one-vs-rest, the probabilities are the softmax of the scores, as predict gives
// them), and the squared loss of a regression.
func specLossName(spec *consensus.ModelSpec) string {
	if spec.Task == consensus.TaskRegression {
		return spec.Loss
	}
	return "log"
}

// scoreSpec reads the rows of --data as dpadmm predict reads them (--label may name
// another label column) and scores spec on them; it returns the number of rows.
func scoreSpec(spec *consensus.ModelSpec, df *dataFlags, cmd string) (int, evalScores, error) {
	delim, err := df.delim()
	if err != nil {
		return 0, evalScores{}, usagef(cmd, "%v", err)
	}
	if *df.label != "" {
		spec.Label = *df.label
	}
	var rows *consensus.RawRows
	if df.embedded() {
		rows, err = spec.ReadRows("embedded:breast_cancer", bytes.NewReader(consensus.EmbeddedCSV()), ',')
	} else {
		rows, err = readRawRows(spec, *df.path, delim)
	}
	if err != nil {
		return 0, evalScores{}, err
	}
	if rows.Labels == nil {
		return 0, evalScores{}, fmt.Errorf("%s has no label column %q (the model's; --label names another)", *df.path, spec.Label)
	}
	var s evalScores
	if spec.Task == consensus.TaskRegression {
		s, err = regressionScores(spec, rows)
	} else {
		s, err = classScores(spec, rows)
	}
	return len(rows.X), s, err
}

// classScores scores a classifier: mean log-loss, accuracy and the class report.
func classScores(spec *consensus.ModelSpec, rows *consensus.RawRows) (evalScores, error) {
	var s evalScores
	truth, pred := make([]int, len(rows.X)), make([]int, len(rows.X))
	var pos []float64
	var bad []string
	for i, x := range rows.X {
		t := spec.ClassIndex(rows.Labels[i])
		if t < 0 {
			if len(bad) < 3 {
				bad = append(bad, fmt.Sprintf("%q (line %d)", rows.Labels[i], rows.Lines[i]))
			}
			continue
		}
		sc := spec.Scores(x)
		p := spec.Probabilities(sc)
		truth[i], pred[i] = t, spec.Predict(sc)
		s.MeanLoss -= math.Log(math.Max(p[t], 1e-300)) / float64(len(rows.X))
		if spec.Task == consensus.TaskBinary {
			pos = append(pos, p[1])
		}
	}
	if bad != nil {
		return s, errors.New("labels " + strings.Join(bad, ", ") + " are not among the model's classes " + fmt.Sprintf("%q", spec.Classes) +
			": the evaluation data must use the run's labels (a different positive label or class list would score a different question)")
	}
	r := consensus.Classify(spec.Classes, truth, pred, pos)
	s.Accuracy, s.Classification = &r.Accuracy, &r
	if len(rows.X) > 0 {
		most := 0
		for _, c := range r.PerClass {
			most = max(most, c.Support)
		}
		m := float64(most) / float64(len(rows.X))
		s.MajorityShare = &m
	}
	s.judge()
	return s, nil
}

// regressionScores scores a regression model in the target's units.
func regressionScores(spec *consensus.ModelSpec, rows *consensus.RawRows) (evalScores, error) {
	var s evalScores
	n := float64(len(rows.X))
	ys := make([]float64, len(rows.X))
	mean := 0.0
	for i, l := range rows.Labels {
		v, ok := parseFloatLabel(l)
		if !ok {
			return s, fmt.Errorf("line %d: target %q is not a number", rows.Lines[i], l)
		}
		ys[i] = v
		mean += v / n
	}
	res, tot, abs := 0.0, 0.0, 0.0
	for i, x := range rows.X {
		e := spec.Scores(x)[0] - ys[i]
		res += e * e
		abs += math.Abs(e)
		tot += (ys[i] - mean) * (ys[i] - mean)
	}
	rmse, mae := math.Sqrt(res/n), abs/n
	s.MeanLoss, s.RMSE, s.MAE = res/(2*n), &rmse, &mae
	if tot > 0 {
		r2 := 1 - res/tot
		s.R2 = &r2
	}
	s.judge()
	return s, nil
}

// printClassReport prints the per-class table and the confusion matrix.
func printClassReport(w io.Writer, c *consensus.ClassReport) {
	fmt.Fprintf(w, "macro F1 %.4f", c.MacroF1)
	if c.ROCAUC != nil {
		fmt.Fprintf(w, ", ROC AUC %.4f", *c.ROCAUC)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-20s %9s %9s %9s %8s\n", "class", "precision", "recall", "F1", "rows")
	for _, p := range c.PerClass {
		fmt.Fprintf(w, "%-20s %9.4f %9.4f %9.4f %8d\n", clipName(p.Class, 20), p.Precision, p.Recall, p.F1, p.Support)
	}
	fmt.Fprintln(w, "confusion matrix (rows: true class, columns: predicted):")
	fmt.Fprintf(w, "%-20s", "")
	for _, k := range c.Classes {
		fmt.Fprintf(w, " %10s", clipName(k, 10))
	}
	fmt.Fprintln(w)
	for i, row := range c.Confusion {
		fmt.Fprintf(w, "%-20s", clipName(c.Classes[i], 20))
		for _, v := range row {
			fmt.Fprintf(w, " %10d", v)
		}
		fmt.Fprintln(w)
	}
}

func clipName(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "~"
}

// parseFloatLabel parses a numeric target; a non-finite value is refused.
func parseFloatLabel(s string) (float64, bool) {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	return v, err == nil && !math.IsNaN(v) && !math.IsInf(v, 0)
}
