package main

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/node/store"
)

const predictHelp = `Usage: dpadmm predict --model FILE --data FILE [--out FILE] [--format csv|json] [--delimiter D]

Applies a trained model to raw rows: the CSV file's columns are read by name as the model
names its features (any column order; other columns, the label's included, are ignored),
text columns are one-hot encoded with the model's own vocabulary (a value it has not seen
gives zeros, as scikit-learn's handle_unknown='ignore'), and the model's own scaling and
intercept are applied. FILE is a walk node's model.json, a neighbour-exchange node's
model.json (that node's own model), a 'dpadmm testnet --report' file, or a directory
holding model.json.

Output, one row per data row in file order: for a classifier the predicted label (the
original class strings, column "label") and one probability column per class, named by
the class; for a regression model the prediction ("prediction", in the target's units).
--format json writes {"classes": [...], "predictions": [{"label", "probabilities"} or
{"prediction"}]}. Without --out the output goes to stdout.
`

// prediction is one row of predict's JSON output.
type prediction struct {
	Label         string    `json:"label,omitempty"`
	Probabilities []float64 `json:"probabilities,omitempty"`
	Prediction    *float64  `json:"prediction,omitempty"`
}

// predictOutput is predict's JSON output.
type predictOutput struct {
	Model       string       `json:"model"`
	Task        string       `json:"task"`
	Classes     []string     `json:"classes,omitempty"`
	Rows        int          `json:"rows"`
	Unseen      int          `json:"unseen_categories"`
	Predictions []prediction `json:"predictions"`
}

// runPredict is 'dpadmm predict'.
func runPredict(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("predict", predictHelp, stdout)
	model := fs.String("model", "", "model file: model.json, a testnet report, or a directory holding model.json (required)")
	data := fs.String("data", "", "raw rows, CSV with a header (required)")
	out := fs.String("out", "", "write the predictions to this file (default: stdout)")
	format := fs.String("format", "csv", "output format: csv|json")
	delimiter := fs.String("delimiter", ",", "CSV field delimiter of --data: one character, or tab")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return usagef("predict", "unexpected argument %q", fs.Arg(0))
	case *model == "":
		return usagef("predict", "--model is required")
	case *data == "":
		return usagef("predict", "--data is required")
	case *format != "csv" && *format != "json":
		return usagef("predict", "--format must be csv or json, got %q", *format)
	}
	df := &dataFlags{delimiter: delimiter}
	delim, err := df.delim()
	if err != nil {
		return usagef("predict", "%v", err)
	}
	spec, path, err := readSpec(*model)
	if err != nil {
		return err
	}
	rows, err := readRawRows(spec, *data, delim)
	if err != nil {
		return err
	}
	if rows.Unseen > 0 {
		fmt.Fprintf(stderr, "warning: %d cell(s) of %s hold a category the model has not seen; encoded as zeros\n", rows.Unseen, *data)
	}
	if n := outsideRanges(spec, rows.X); n > 0 {
		fmt.Fprintf(stderr, "warning: %d cell(s) of %s lie outside the model's feature ranges (its schema's); clipped to them, as the training rows were\n", n, *data)
	}
	res := predictOutput{Model: path, Task: spec.Task, Classes: spec.Classes, Rows: len(rows.X), Unseen: rows.Unseen}
	for i, x := range rows.X {
		sc := spec.Scores(x)
		for _, v := range sc {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("%s:%d: the model's score of this row is not finite (values far beyond any the model was trained on; a schema's ranges would clip them)", *data, rows.Lines[i])
			}
		}
		var p prediction
		if spec.Task == consensus.TaskRegression {
			v := sc[0]
			p.Prediction = &v
		} else {
			p.Label, p.Probabilities = spec.Classes[spec.Predict(sc)], spec.Probabilities(sc)
		}
		res.Predictions = append(res.Predictions, p)
	}
	var buf bytes.Buffer
	if *format == "json" {
		if err := writeJSON(&buf, res); err != nil {
			return err
		}
	} else if err := writePredictionsCSV(&buf, spec, res.Predictions); err != nil {
		return err
	}
	if *out == "" {
		_, err := stdout.Write(buf.Bytes())
		return err
	}
	return writeFileAtomic(*out, buf.Bytes())
}

// readSpec reads the self-describing model of a model file (a directory means
// DIR/model.json).
func readSpec(path string) (*consensus.ModelSpec, string, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, store.ModelFile)
	}
	b, err := readLimited(path, maxModelFile)
	if err != nil {
		return nil, path, err
	}
	m, err := consensus.ParseModelSpec(b)
	if err != nil {
		return nil, path, fmt.Errorf("%s: %w", path, err)
	}
	return m, path, nil
}

// readLimited reads a file of at most limit bytes.
func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes: not a model file", path, limit)
	}
	return b, nil
}

// readRawRows reads the rows of a data file for spec.
func readRawRows(spec *consensus.ModelSpec, path string, delim rune) (*consensus.RawRows, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return spec.ReadRows(path, f, delim)
}

// writePredictionsCSV writes predictions as CSV: label and one probability column per
// class, or the prediction of a regression model.
func writePredictionsCSV(w io.Writer, spec *consensus.ModelSpec, ps []prediction) error {
	cw := csv.NewWriter(w)
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', 17, 64) }
	if spec.Task == consensus.TaskRegression {
		_ = cw.Write([]string{"prediction"})
		for _, p := range ps {
			_ = cw.Write([]string{f(*p.Prediction)})
		}
	} else {
		_ = cw.Write(append([]string{"label"}, spec.Classes...))
		for _, p := range ps {
			rec := []string{p.Label}
			for _, v := range p.Probabilities {
				rec = append(rec, f(v))
			}
			_ = cw.Write(rec)
		}
	}
	cw.Flush()
	return cw.Error()
}

// writeFileAtomic writes b to path through a temporary file in the same directory, so
// that a failed write leaves no partial file. The file gets mode 0644, as the reports
// (a temporary file is created 0600).
func writeFileAtomic(path string, b []byte) error {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return fmt.Errorf("%s is a directory, not a file", path)
	}
	dir := filepath.Dir(path)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("cannot write %s: its directory %s does not exist", path, dir)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the temporary file's name says nothing to the user
		}
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	name := tmp.Name()
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		os.Remove(name)
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(name)
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(name)
		return err
	}
	if err := os.Rename(name, path); err != nil {
		os.Remove(name)
		return err
	}
	return nil
}

// outsideRanges counts the cells of rows outside spec's feature ranges (which Scores
// clips them to).
func outsideRanges(spec *consensus.ModelSpec, rows [][]float64) int {
	n := 0
	for _, x := range rows {
		n += spec.Outside(x)
	}
	return n
}
