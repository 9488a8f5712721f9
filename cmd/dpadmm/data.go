package main

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/dpadmm/dpadmm/consensus"
)

// dataSpec says where a command's data comes from and how it is prepared.
type dataSpec struct {
	path        string  // CSV or LIBSVM; "" = embedded breast cancer data
	testPath    string  // separate test file; "" = hold out testFrac of path
	testFrac    float64 // in [0, 1)
	label       string  // CSV label column: name or 0-based index ("" = first column)
	categorical string  // none or auto
	scale       string  // consensus.ParseScaling name
	positive    string  // when set, the CSV label column holds text classes; this one is +1
	seed        uint64  // train/test split
	regression  bool    // squared loss: labels are kept as they are (not mapped to -1/+1)
	minCols     int     // LIBSVM: pad to at least this many features (a model's dimension)
}

// loadedData is the prepared data: train and test scaled with a scaler fitted on train,
// labels in {-1, +1} (with spec.regression: as read from the file).
type loadedData struct {
	train, test *consensus.Dataset
	name        string
	scaling     consensus.Scaling
}

// loadData loads, relabels, splits and scales the data of spec.
func loadData(spec dataSpec) (*loadedData, error) {
	kind, err := consensus.ParseScaling(spec.scale)
	if err != nil {
		return nil, err
	}
	if !(spec.testFrac >= 0 && spec.testFrac < 1) {
		return nil, fmt.Errorf("test fraction must be in [0,1), got %v", spec.testFrac)
	}
	opt := consensus.LoadOptions{Label: spec.label, Categorical: spec.categorical, MinCols: spec.minCols}
	out := &loadedData{name: "embedded:breast_cancer", scaling: kind}
	load := func(path string) (*consensus.Dataset, error) { return loadFile(path, opt, spec.positive) }
	if spec.regression {
		if spec.positive != "" {
			return nil, errors.New("--positive applies to classification (logistic loss) only")
		}
		load = func(path string) (*consensus.Dataset, error) { return consensus.Load(path, opt) }
	}
	var full *consensus.Dataset
	if spec.path == "" {
		if spec.positive != "" {
			return nil, errors.New("--positive needs --data (the embedded data has labels -1/+1)")
		}
		full, err = consensus.Embedded()
	} else {
		out.name = spec.path
		full, err = load(spec.path)
	}
	if err != nil {
		return nil, err
	}
	train, test := full, (*consensus.Dataset)(nil)
	if spec.testPath != "" {
		if test, err = load(spec.testPath); err != nil {
			return nil, err
		}
		if test.Cols != train.Cols {
			return nil, fmt.Errorf("%s has %d features, %s has %d (with --categorical auto both files must hold the same categories)", spec.testPath, test.Cols, out.name, train.Cols)
		}
	} else if spec.testFrac > 0 {
		train, test = consensus.TrainTest(full, spec.testFrac, spec.seed)
	}
	sc, err := consensus.FitScaler(train, kind)
	if err != nil {
		return nil, err
	}
	out.train = sc.Apply(train)
	if test != nil {
		out.test = sc.Apply(test)
	}
	return out, nil
}

// loadFile loads one file and maps its labels to -1/+1: with positive set, the CSV label
// field (trimmed, a trailing '.' dropped, as in UCI Adult's test file) equal to positive
// becomes +1 and any other value -1; otherwise labels must be {-1,1}, {0,1} or {1,2}.
func loadFile(path string, opt consensus.LoadOptions, positive string) (*consensus.Dataset, error) {
	var d *consensus.Dataset
	var err error
	if positive == "" {
		d, err = consensus.Load(path, opt)
	} else {
		var f *os.File
		if f, err = os.Open(path); err != nil {
			return nil, err
		}
		defer f.Close()
		var buf []byte
		if buf, err = relabelCSV(f, opt.Label, positive); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		opt.Format = "csv"
		d, err = consensus.Parse(path, bytes.NewReader(buf), opt)
	}
	if err != nil {
		return nil, err
	}
	if err := d.BinaryLabels(); err != nil {
		return nil, err
	}
	return d, nil
}

// relabelCSV rewrites the label column of a CSV to 1 (field equal to positive) or -1.
// A label given by name makes the first row the header, which is kept as is.
func relabelCSV(r io.Reader, label, positive string) ([]byte, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.TrimLeadingSpace = true
	var out bytes.Buffer
	cw := csv.NewWriter(&out)
	col, byName := 0, false
	if label != "" {
		if v, err := strconv.Atoi(strings.TrimSpace(label)); err == nil && v >= 0 {
			col = v
		} else {
			byName, col = true, -1
		}
	}
	clean := func(s string) string { return strings.TrimSuffix(strings.TrimSpace(s), ".") }
	pos, rows := 0, 0
	for first := true; ; first = false {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("malformed CSV: %w", err)
		}
		if len(rec) == 1 && strings.TrimSpace(rec[0]) == "" {
			continue
		}
		if first && byName {
			for j, n := range rec {
				if strings.TrimSpace(n) == strings.TrimSpace(label) {
					col = j
				}
			}
			if col < 0 {
				return nil, fmt.Errorf("label column %q not found", label)
			}
			cw.Write(rec)
			continue
		}
		if col >= len(rec) {
			return nil, fmt.Errorf("row %d has %d fields, no label column %d", rows+1, len(rec), col)
		}
		if clean(rec[col]) == clean(positive) {
			rec[col] = "1"
			pos++
		} else {
			rec[col] = "-1"
		}
		rows++
		cw.Write(rec)
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return nil, err
	}
	if pos == 0 {
		return nil, fmt.Errorf("no row has the positive label %q in column %d", positive, col)
	}
	if pos == rows {
		return nil, fmt.Errorf("every row has the positive label %q: need two classes", positive)
	}
	return out.Bytes(), nil
}
