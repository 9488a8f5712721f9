package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/node/store"
)

const evalHelp = `Usage: dpadmm eval --data FILE [--label L] [--positive P] [--loss L] [--scale S] [--json] MODEL.json

Scores a linear model on a dataset (CSV or LIBSVM, or "embedded" for the embedded breast
cancer data): the mean loss, and the accuracy for the logistic loss or the RMSE and R^2 for
the squared loss (R^2 = 1 - SS_res/SS_tot; it is undefined when the labels do not vary).
MODEL.json is any file with a "model" array: a walk node's model.json, a neighbour-exchange
node's model.json (that node's own f_i(T)), the averaged model of 'dpadmm account models
--out', or a 'dpadmm testnet --report' file (its averaged or final model). A directory
means DIR/model.json.

The data is read with the data flags of the other commands. The features are scaled as in
the run: with the scaling the model file records ("scaling": node model.json files and
averaged models), else with --scale, or --scale-file for a scaling with parameters (as
written by 'dpadmm testnet --scale-out'); a scaling with parameters is never fitted on the
evaluation data. The loss defaults to the one the file records ("loss": testnet reports and
neighbour-exchange model.json), else logistic.
The keys of --json are listed in docs/report-schema.md.
`

// evalScores are a model's scores on a dataset.
type evalScores struct {
	MeanLoss float64 `json:"mean_loss"`
	// MAE is the mean absolute error of a regression model in the target's units.
	MAE *float64 `json:"mae,omitempty"`
	// Classification holds the per-class precision, recall and F1, the confusion matrix
	// and, for a binary model, the ROC AUC.
	Classification *consensus.ClassReport `json:"classification,omitempty"`
	Accuracy       *float64               `json:"accuracy,omitempty"` // logistic loss
	RMSE           *float64               `json:"rmse,omitempty"`     // squared loss
	R2             *float64               `json:"r2,omitempty"`       // squared loss; absent when the labels do not vary
	// MajorityShare is the accuracy of always predicting the data's most frequent class
	// (classifiers): the floor a model must beat.
	MajorityShare *float64 `json:"majority_share,omitempty"`
	// Warnings: an accuracy no better than MajorityShare, or an R^2 <= 0.
	Warnings []string `json:"warnings,omitempty"`
}

// judge fills the warnings of s: a classifier no better than always predicting the
// majority class, a regression no better than predicting the mean target.
func (s *evalScores) judge() {
	switch {
	case s.Accuracy != nil && s.MajorityShare != nil && *s.Accuracy <= *s.MajorityShare:
		s.Warnings = append(s.Warnings, fmt.Sprintf("accuracy %.4f is no better than always predicting the most frequent class (%.4f of the rows): "+
			"the model has learnt nothing useful on these data", *s.Accuracy, *s.MajorityShare))
	case s.R2 != nil && *s.R2 <= 0:
		s.Warnings = append(s.Warnings, fmt.Sprintf("R^2 %.4g <= 0: the model predicts these targets no better than their mean", *s.R2))
	}
}

// scoreModel scores w on d (already scaled) with loss.
func scoreModel(d *consensus.Dataset, w []float64, loss consensus.Loss) evalScores {
	pb := consensus.Problem{Loss: loss}
	s := evalScores{MeanLoss: pb.MeanLoss(d, w)}
	finite := func(v float64) *float64 {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil
		}
		return &v
	}
	switch {
	case loss.Classifies():
		s.Accuracy = finite(pb.Accuracy(d, w))
		m := d.MajorityShare()
		s.MajorityShare = &m
	case loss == consensus.Squared:
		rmse, r2, ok := consensus.Regression(d, w)
		s.RMSE = finite(rmse)
		if ok {
			s.R2 = finite(r2)
		}
	}
	s.judge()
	return s
}

// printScores writes the scores in one line.
func printScores(w io.Writer, loss string, s evalScores) {
	fmt.Fprintf(w, "%s loss: mean loss %.6g", loss, s.MeanLoss)
	if s.Accuracy != nil {
		fmt.Fprintf(w, ", accuracy %.4f", *s.Accuracy)
		if s.MajorityShare != nil {
			fmt.Fprintf(w, " (most frequent class %.4f)", *s.MajorityShare)
		}
	}
	if s.RMSE != nil {
		fmt.Fprintf(w, ", RMSE %.6g", *s.RMSE)
		if s.R2 != nil {
			fmt.Fprintf(w, ", R^2 %.4f", *s.R2)
		} else {
			fmt.Fprint(w, ", R^2 undefined (constant labels)")
		}
	}
	fmt.Fprintln(w)
	for _, m := range s.Warnings {
		fmt.Fprintf(w, "warning: %s\n", m)
	}
}

// evalReport is the JSON output of "eval".
type evalReport struct {
	// Task is the model's task (binary, multiclass, regression) when the file describes
	// its model (a "predictor"); absent for older files.
	Task      string `json:"task,omitempty"`
	ModelFile string `json:"model_file"`
	Source    string `json:"source"` // what kind of file the model came from
	Data      string `json:"data"`
	Rows      int    `json:"rows"`
	Dims      int    `json:"dims"`
	Loss      string `json:"loss"`
	Scale     string `json:"scale"`
	evalScores
}

// modelFile is what eval reads from a file holding a model.
type modelFile struct {
	w     []float64
	loss  string // "" = not recorded
	scale string // "" = not recorded
	// scaling is the run's scaling with its parameters, as node model files record it
	// (nil: none recorded).
	scaling *consensus.Scaler
	source  string
}

// readModelAny reads the "model" of a model.json, averaged model or testnet report.
func readModelAny(path string) (*modelFile, string, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, store.ModelFile)
	}
	b, err := readLimited(path, maxModelFile)
	if err != nil {
		return nil, path, err
	}
	var raw map[string]json.RawMessage
	var m struct {
		Model   []float64         `json:"model"`
		Dims    *int              `json:"dims"`
		Loss    string            `json:"loss"`
		Scale   string            `json:"scale"`
		Algo    string            `json:"algo"`
		Scaling *consensus.Scaler `json:"scaling"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, path, fmt.Errorf("%s: not a JSON object: %w", path, err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, path, fmt.Errorf("%s: %w", path, err)
	}
	has := func(k string) bool { _, ok := raw[k]; return ok }
	switch {
	case len(m.Model) == 0:
		return nil, path, fmt.Errorf("%s: no \"model\" array: not a model.json or testnet report", path)
	case m.Dims != nil && *m.Dims != len(m.Model):
		return nil, path, fmt.Errorf("%s: model has %d coordinates, dims says %d", path, len(m.Model), *m.Dims)
	}
	for j, v := range m.Model {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, path, fmt.Errorf("%s: model coordinate %d is %v, not finite", path, j, v)
		}
	}
	out := &modelFile{w: m.Model, loss: m.Loss, scale: m.Scale, scaling: m.Scaling, source: "model file"}
	switch {
	case has("reference_objective"):
		out.source = fmt.Sprintf("testnet report (%s)", m.Algo)
	case has("released_by"):
		out.source = "walk node model.json (the released network model)"
	case has("members") && m.Algo != "":
		out.source = fmt.Sprintf("%s node model.json (this node's own f_i(T))", m.Algo)
	case has("averaged"):
		out.source = fmt.Sprintf("averaged %s model (account models --out)", m.Algo)
	}
	return out, path, nil
}

// runEval is 'dpadmm eval'.
func runEval(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("eval", evalHelp, stdout)
	df := addDataFlags(fs, evalData)
	lossName := fs.String("loss", "logistic", "loss: logistic|squared (default: the file's \"loss\", else logistic)")
	asJSON := fs.Bool("json", false, "print JSON")
	files, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case len(files) != 1:
		return usagef("eval", "want exactly one model file, got %d", len(files))
	case *df.path == "":
		return usagef("eval", "--data is required (a CSV or LIBSVM file, or embedded)")
	}
	loss, err := consensus.ParseLoss(*lossName)
	if err != nil {
		return usagef("eval", "--loss must be logistic or squared, got %q", *lossName)
	}
	// A file with a predictor is scored by it; one whose predictor is broken is an error
	// (not scored by its bare "model" array); only a file without one falls back to it.
	spec, path, err := readSpec(files[0])
	switch {
	case err == nil:
		return evalSpec(spec, path, df, set, *lossName, *asJSON, stdout)
	case !errors.Is(err, consensus.ErrNoPredictor):
		return err
	}
	mf, path, err := readModelAny(files[0])
	if err != nil {
		return err
	}
	if mf.loss != "" {
		fl, err := consensus.ParseLoss(mf.loss)
		if err != nil {
			return fmt.Errorf("%s records an unknown loss %q", path, mf.loss)
		}
		if set["loss"] && fl != loss {
			return usagef("eval", "--loss %s, but %s records the %s loss", loss, path, fl)
		}
		loss = fl
	}
	if err := df.check(loss); err != nil {
		return usagef("eval", "%v", err)
	}
	run := mf.scaling
	if run == nil && mf.scale != "" && !df.isSet("scale") && !df.isSet("scale-file") {
		// A file that names a parameter-free scaling ("none", "unitball") without
		// parameters: that scaling is the run's.
		kind, err := consensus.ParseScaling(strings.SplitN(mf.scale, " ", 2)[0])
		if err == nil && !kind.DataDependent() {
			p := len(mf.w)
			zero := &consensus.Dataset{Rows: 1, Cols: p, X: make([]float64, p), Y: []float64{1}}
			if run, err = consensus.FitScaler(zero, kind); err != nil {
				return err
			}
		}
	}
	ld, err := df.load(loadRequest{loss: loss, dims: len(mf.w), run: run})
	if err != nil {
		return err
	}
	d := ld.train
	if d.Rows == 0 {
		return fmt.Errorf("%s has no rows", ld.name)
	}
	if d.Cols != len(mf.w) {
		return fmt.Errorf("%s has %d features, the model has %d", ld.name, d.Cols, len(mf.w))
	}
	rep := evalReport{ModelFile: path, Source: mf.source, Data: ld.name, Rows: d.Rows, Dims: len(mf.w),
		Loss: loss.String(), Scale: string(ld.scaling), evalScores: scoreModel(d, mf.w, loss)}
	if *asJSON {
		return writeJSON(stdout, rep)
	}
	fmt.Fprintf(stdout, "model %s: %s, %d features\n", path, rep.Source, rep.Dims)
	fmt.Fprintf(stdout, "data %s: %d rows, scale %s\n", rep.Data, rep.Rows, rep.Scale)
	printScores(stdout, rep.Loss, rep.evalScores)
	return nil
}
