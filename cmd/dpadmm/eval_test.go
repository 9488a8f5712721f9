package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
)

// evalJSON runs 'dpadmm eval --json' and decodes its output.
func evalJSON(t *testing.T, args ...string) evalReport {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(append([]string{"eval", "--json"}, args...), &out, &errb); code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, errb.String())
	}
	var r evalReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out.String())
	}
	return r
}

func writeEvalFile(t *testing.T, path, s string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestEvalHandComputed: scores of a two-feature model on four rows, worked out by hand,
// from each kind of model file.
func TestEvalHandComputed(t *testing.T) {
	dir := t.TempDir()
	// w = (1, -2). Classification rows (label, x1, x2) and margins x.w:
	//   +1 (1,0): 1 right;  -1 (0,1): -2 right;  +1 (0,1): -2 wrong;  -1 (1,1): -1 right.
	cls := writeEvalFile(t, filepath.Join(dir, "cls.csv"), "1,1,0\n-1,0,1\n1,0,1\n-1,1,1\n")
	sp := func(m float64) float64 { return math.Log1p(math.Exp(m)) }
	wantLogLoss := (sp(-1) + sp(-2) + sp(2) + sp(-1)) / 4
	// Regression rows (y, x1, x2), predictions and residuals x.w - y:
	//   2 (1,0): 1, -1;  -1 (0,1): -2, -1;  0.5 (1,1): -1, -1.5;  3 (2,0): 2, -1.
	reg := writeEvalFile(t, filepath.Join(dir, "reg.csv"), "2,1,0\n-1,0,1\n0.5,1,1\n3,2,0\n")
	ssRes := 1 + 1 + 2.25 + 1.0
	mean := (2 - 1 + 0.5 + 3) / 4.0
	ssTot := (2-mean)*(2-mean) + (-1-mean)*(-1-mean) + (0.5-mean)*(0.5-mean) + (3-mean)*(3-mean)
	wantRMSE, wantR2, wantSqLoss := math.Sqrt(ssRes/4), 1-ssRes/ssTot, 0.5*ssRes/4

	walkModel := writeEvalFile(t, filepath.Join(dir, "walk.json"),
		`{"run":"r","config_hash":"h","peer":"p","index":0,"nodes":2,"hops":10,"epoch":0,"released_by":"q","dims":2,"model":[1,-2],"privacy":{}}`)
	gossipDir := filepath.Join(dir, "node-0")
	os.Mkdir(gossipDir, 0o755)
	writeEvalFile(t, filepath.Join(gossipDir, "model.json"),
		`{"run":"g","algo":"radmm","loss":"squared","index":0,"nodes":2,"members":["a","b"],"dims":2,"model":[1,-2]}`)
	report := writeEvalFile(t, filepath.Join(dir, "report.json"),
		`{"algo":"walk","objective":1,"reference_objective":1,"gap":0,"loss":"squared","scale":"none","dims":2,"model":[1,-2]}`)
	averaged := writeEvalFile(t, filepath.Join(dir, "avg.json"),
		`{"run":"g","algo":"radmm","nodes":2,"averaged":[0,1],"missing":[],"partial":false,"dims":2,"model":[1,-2]}`)

	check := func(what string, r evalReport, loss string, wantLoss float64) {
		t.Helper()
		if r.Loss != loss || r.Rows != 4 || r.Dims != 2 || math.Abs(r.MeanLoss-wantLoss) > 1e-12 {
			t.Errorf("%s: %+v, want %s loss with mean %v on 4 rows", what, r, loss, wantLoss)
		}
		if loss == "logistic" && (r.Accuracy == nil || *r.Accuracy != 0.75 || r.RMSE != nil || r.R2 != nil ||
			r.MajorityShare == nil || *r.MajorityShare != 0.5 || len(r.Warnings) != 0) {
			t.Errorf("%s: accuracy %v rmse %v majority %v warnings %q, want 0.75, no RMSE, 0.5, none", what, r.Accuracy, r.RMSE, r.MajorityShare, r.Warnings)
		}
		if loss == "squared" && (r.Accuracy != nil || r.RMSE == nil || r.R2 == nil ||
			math.Abs(*r.RMSE-wantRMSE) > 1e-12 || math.Abs(*r.R2-wantR2) > 1e-12) {
			t.Errorf("%s: accuracy %v rmse %v r2 %v, want RMSE %v and R^2 %v", what, r.Accuracy, r.RMSE, r.R2, wantRMSE, wantR2)
		}
	}
	r := evalJSON(t, "--data", cls, "--scale", "none", walkModel)
	check("walk model.json", r, "logistic", wantLogLoss)
	if !strings.Contains(r.Source, "walk node") || r.ModelFile != walkModel || r.Data != cls || r.Scale != "none" {
		t.Errorf("walk model.json: %+v", r)
	}
	// The loss recorded in the file is the default; a directory means DIR/model.json.
	r = evalJSON(t, "--data", reg, "--scale", "none", gossipDir)
	check("R-ADMM model.json", r, "squared", wantSqLoss)
	if !strings.Contains(r.Source, "radmm node") || r.ModelFile != filepath.Join(gossipDir, "model.json") {
		t.Errorf("R-ADMM model.json: %+v", r)
	}
	// The scaling recorded in a testnet report is the default.
	r = evalJSON(t, "--data", reg, report)
	check("testnet report", r, "squared", wantSqLoss)
	if !strings.Contains(r.Source, "testnet report") {
		t.Errorf("testnet report: %+v", r)
	}
	r = evalJSON(t, "--data", reg, "--scale", "none", "--loss", "squared", averaged)
	check("averaged model", r, "squared", wantSqLoss)
	// LIBSVM with fewer columns than the model: padded to the model's dimension.
	svm := writeEvalFile(t, filepath.Join(dir, "d.svm"), "1 1:1\n-1 2:1\n1 2:1\n-1 1:1 2:1\n")
	check("LIBSVM", evalJSON(t, "--data", svm, "--scale", "none", walkModel), "logistic", wantLogLoss)
	// Feature 2 never appears: the rows are padded to the model's 2 features (margins 1 and
	// -1, both right).
	one := writeEvalFile(t, filepath.Join(dir, "one.svm"), "1 1:1\n-1 1:-1\n")
	if r := evalJSON(t, "--data", one, "--scale", "none", walkModel); r.Dims != 2 || r.Accuracy == nil || *r.Accuracy != 1 ||
		math.Abs(r.MeanLoss-sp(-1)) > 1e-12 {
		t.Errorf("padded LIBSVM: %+v", r)
	}
	// A model no better than the trivial predictor is named so: w = (-1, 2) gets 1 of 4
	// rows right (the majority class holds 2), and on the regression rows R^2 < 0.
	flipped := writeEvalFile(t, filepath.Join(dir, "flipped.json"),
		`{"run":"r","config_hash":"h","peer":"p","index":0,"nodes":2,"hops":10,"epoch":0,"released_by":"q","dims":2,"model":[-1,2],"privacy":{}}`)
	if r := evalJSON(t, "--data", cls, "--scale", "none", flipped); r.Accuracy == nil || *r.Accuracy != 0.25 || len(r.Warnings) != 1 ||
		!strings.Contains(r.Warnings[0], "no better than always predicting the most frequent class (0.5000") {
		t.Errorf("flipped classifier: %+v", r)
	}
	if r := evalJSON(t, "--data", reg, "--scale", "none", "--loss", "squared", flipped); r.R2 == nil || *r.R2 >= 0 || len(r.Warnings) != 1 ||
		!strings.Contains(r.Warnings[0], "no better than their mean") {
		t.Errorf("flipped regression: %+v", r)
	}
	var fo, fe bytes.Buffer
	if c := run([]string{"eval", "--data", cls, "--scale", "none", flipped}, &fo, &fe); c != 0 ||
		!strings.Contains(fo.String(), "accuracy 0.2500 (most frequent class 0.5000)\nwarning: accuracy 0.2500") {
		t.Errorf("flipped classifier, text: exit %d: %s%s", c, fo.String(), fe.String())
	}
	// Text classes with --positive.
	txt := writeEvalFile(t, filepath.Join(dir, "txt.csv"), "yes,1,0\nno,0,1\nyes,0,1\nno,1,1\n")
	check("--positive", evalJSON(t, "--data", txt, "--positive", "yes", "--scale", "none", walkModel), "logistic", wantLogLoss)

	// Human output.
	var out, errb bytes.Buffer
	if code := run([]string{"eval", "--data", reg, report}, &out, &errb); code != 0 ||
		!strings.Contains(out.String(), "squared loss: mean loss") || !strings.Contains(out.String(), "RMSE") || !strings.Contains(out.String(), "R^2") {
		t.Errorf("human output: exit %d\n%s%s", code, out.String(), errb.String())
	}

	// Errors.
	noModel := writeEvalFile(t, filepath.Join(dir, "nomodel.json"), `{"hello":1}`)
	badDims := writeEvalFile(t, filepath.Join(dir, "baddims.json"), `{"dims":3,"model":[1,2]}`)
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--data", reg, "--loss", "logistic", gossipDir}, 2, "records the squared loss"},
		{[]string{"--data", reg, "--positive", "x", gossipDir}, 2, "--positive applies to the logistic loss"},
		{[]string{"--data", cls, noModel}, 1, `no "model" array`},
		{[]string{"--data", cls, badDims}, 1, "dims says 3"},
		{[]string{"--data", cls, filepath.Join(dir, "none.json")}, 1, "no such file"},
		{[]string{"--data", cls, walkModel, report}, 2, "want exactly one model file, got 2"},
	} {
		var out, errb bytes.Buffer
		code := run(append([]string{"eval"}, c.args...), &out, &errb)
		if code != c.code || !strings.Contains(errb.String(), c.msg) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, errb.String(), c.code, c.msg)
		}
	}
}

// TestEvalTestnetReport: a testnet run on a whole data file (no test split) and eval of
// its report on the same file with the same scaling agree: eval's accuracy is the
// report's train_accuracy (logistic), its RMSE and R^2 the report's train_rmse and
// train_r2 (squared).
func TestEvalTestnetReport(t *testing.T) {
	dir := t.TempDir()
	d, _ := consensus.SyntheticLogistic(120, 4, 3, 7)
	data := filepath.Join(dir, "d.csv")
	writeDatasetCSV(t, data, d)
	for _, loss := range []string{"logistic", "squared"} {
		rep := filepath.Join(dir, loss+".json")
		var out, errb bytes.Buffer
		if code := run([]string{"testnet", "--data", data, "--nodes", "4", "--hops", "300", "--test-frac", "0", "--loss", loss, "--quiet", "--report", rep}, &out, &errb); code != 0 {
			t.Fatalf("%s: exit %d: %s", loss, code, errb.String())
		}
		var tr struct {
			TrainAccuracy *float64 `json:"train_accuracy"`
			TrainRMSE     *float64 `json:"train_rmse"`
			TrainR2       *float64 `json:"train_r2"`
			TrainRows     int      `json:"train_rows"`
		}
		b, _ := os.ReadFile(rep)
		if err := json.Unmarshal(b, &tr); err != nil {
			t.Fatal(err)
		}
		r := evalJSON(t, "--data", data, rep)
		if r.Rows != tr.TrainRows || r.Loss != loss {
			t.Fatalf("%s: eval %+v, report %d rows", loss, r, tr.TrainRows)
		}
		switch loss {
		case "logistic":
			if tr.TrainAccuracy == nil || r.Accuracy == nil || *r.Accuracy != *tr.TrainAccuracy {
				t.Errorf("logistic: eval accuracy %v, report train accuracy %v", r.Accuracy, tr.TrainAccuracy)
			}
		case "squared":
			if tr.TrainRMSE == nil || r.RMSE == nil || tr.TrainR2 == nil || r.R2 == nil ||
				math.Abs(*r.RMSE-*tr.TrainRMSE) > 1e-12 || math.Abs(*r.R2-*tr.TrainR2) > 1e-12 {
				t.Errorf("squared: eval RMSE %v R^2 %v, report %v %v", r.RMSE, r.R2, tr.TrainRMSE, tr.TrainR2)
			}
		}
	}
}

// TestEvalBrokenPredictor: a report whose predictor is present but broken (a weight row
// cut short) is an error, as in predict and export, not scored by its bare "model"
// array.
func TestEvalBrokenPredictor(t *testing.T) {
	dir := t.TempDir()
	rep := filepath.Join(dir, "r.json")
	var out, errb bytes.Buffer
	if code := run([]string{"testnet", "--nodes", "3", "--quiet", "--report", rep}, &out, &errb); code != 0 {
		t.Fatalf("testnet: exit %d: %s", code, errb.String())
	}
	var m map[string]any
	b, _ := os.ReadFile(rep)
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	w := m["predictor"].(map[string]any)["weights"].([]any)
	w[0] = w[0].([]any)[:3]
	b, _ = json.Marshal(m)
	broken := filepath.Join(dir, "broken.json")
	if err := os.WriteFile(broken, b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{{"eval", "--data", "embedded", broken}, {"predict", "--model", broken, "--data", "../../examples/test.csv"}} {
		out.Reset()
		errb.Reset()
		if code := run(cmd, &out, &errb); code != 1 || !strings.Contains(errb.String(), "weight row of 3 values") {
			t.Errorf("%v: exit %d: %s", cmd, code, errb.String())
		}
	}
}
