package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/advancedclimatesystems/gonnx"
	"github.com/advancedclimatesystems/gonnx/onnx"
	"github.com/advancedclimatesystems/gonnx/ops"
	"github.com/advancedclimatesystems/gonnx/ops/opset13"
	"gorgonia.org/tensor"

	"github.com/dpadmm/dpadmm/consensus"
)

// exportTol is the largest difference allowed between an exported model's outputs and
// the Go computation (ModelSpec.Scores, Probabilities).
const exportTol = 1e-9

// exportScalings are every scaling kind.
var exportScalings = []consensus.Scaling{consensus.ScaleNone, consensus.ScaleUnitBall, consensus.ScaleStandardize,
	consensus.ScaleStandardizeUnitBall, consensus.ScaleRowNorm, consensus.ScaleStandardizeNorm}

// exportCase is a model under test with raw rows to score.
type exportCase struct {
	name string
	spec *consensus.ModelSpec
	rows [][]float64
}

// exportFeatures are three numeric features and a text column "color" one-hot encoded.
var exportFeatures = []string{"age", "income", "score", "color=blue", "color=green", "color=red"}

// exportMagnitude is the typical size of each feature of exportRawRows.
var exportMagnitude = []float64{40, 3000, 0.5, 1, 1, 1}

// exportRawRows returns n raw rows for the features of exportFeatures: the numeric columns
// around their own means and spreads, shrunk or stretched row by row so that the scaled
// rows fall both inside and outside the unit ball, the color one-hot; one row in five is
// small with no color (inside the unit ball before any standardization). The first row
// is the mean of the numeric columns with no color.
func exportRawRows(rng *rand.Rand, n int) [][]float64 {
	mean, sd := exportMagnitude[:3], []float64{12, 900, 0.2}
	rows := [][]float64{append(slices.Clone(mean), 0, 0, 0)}
	for len(rows) < n {
		s := []float64{0.02, 0.3, 1, 3}[rng.IntN(4)]
		x := make([]float64, len(exportFeatures))
		for j := range mean {
			x[j] = mean[j] + s*sd[j]*rng.NormFloat64()
		}
		if rng.IntN(5) == 0 {
			// A small row with no color: inside the unit ball unscaled.
			for j := range mean {
				x[j] *= 1e-4
			}
		} else {
			x[3+rng.IntN(3)] = 1
		}
		rows = append(rows, x)
	}
	return rows
}

// exportSpec builds the model of task with scaling kind through consensus.NewModelSpec:
// the scaler fitted on rows (an intercept feature c when c > 0, a target scaling for
// regression when target), random weights.
func exportSpec(t *testing.T, rng *rand.Rand, task string, kind consensus.Scaling, c float64, target bool, rows [][]float64) *consensus.ModelSpec {
	t.Helper()
	p := len(exportFeatures)
	fit := &consensus.Dataset{Rows: len(rows), Cols: p, Features: slices.Clone(exportFeatures)}
	for _, x := range rows {
		fit.X = append(fit.X, x...)
		fit.Y = append(fit.Y, 1)
	}
	sc, err := consensus.FitScaler(fit, kind)
	if err != nil {
		t.Fatal(err)
	}
	sc.Intercept = c
	// The names NewModelSpec takes from the (scaled) training data.
	d := &consensus.Dataset{Cols: p, Features: slices.Clone(exportFeatures), Label: "outcome",
		Categories: []consensus.Categorical{{Column: "color", Values: []string{"blue", "green", "red"}}}}
	if c > 0 {
		// Public ranges (a schema's) that many rows exceed: the middle 60% of each
		// numeric column's span, [0, 1] for the one-hot color.
		for j := range p {
			lo, hi := math.Inf(1), math.Inf(-1)
			for _, x := range rows {
				lo, hi = math.Min(lo, x[j]), math.Max(hi, x[j])
			}
			r := [2]float64{lo + 0.2*(hi-lo), hi - 0.2*(hi-lo)}
			if strings.HasPrefix(exportFeatures[j], "color=") {
				r = [2]float64{0, 1}
			}
			d.Ranges = append(d.Ranges, r)
		}
		d.Cols, d.Features = p+1, append(d.Features, consensus.InterceptFeature)
	}
	loss, k := consensus.Logistic, 1
	switch task {
	case consensus.TaskBinary:
		d.Classes = &consensus.Classes{Negative: "no", Positive: "yes"}
	case consensus.TaskMulticlass:
		loss, k, d.Classes = consensus.Multinomial, 3, &consensus.Classes{List: []string{"setosa", "versicolor", "virginica"}}
	case consensus.TaskRegression:
		loss = consensus.Squared
		if target {
			sc.TargetCenter, sc.TargetScale = 50, 20
		}
	}
	cols := d.Cols
	// Weights of a few units per feature on the scaled rows; without a scaling, per unit
	// of the raw features' magnitudes (scores of thousands overflow a naive softmax).
	w := make([]float64, k*cols)
	for i := range w {
		w[i] = 2 * rng.NormFloat64()
		if j := i % cols; kind == consensus.ScaleNone && j < len(exportMagnitude) {
			w[i] /= exportMagnitude[j]
		}
	}
	spec, err := consensus.NewModelSpec(d, sc, loss, w)
	if err != nil {
		t.Fatal(err)
	}
	if err := spec.Validate(); err != nil {
		t.Fatalf("%s %s: %v", task, kind, err)
	}
	if spec.Task != task {
		t.Fatalf("task %s, want %s", spec.Task, task)
	}
	return spec
}

// exportCases are the models of every task and scaling kind, with and without an
// intercept (regression: with a target scaling when it has an intercept).
func exportCases(t *testing.T) []exportCase {
	rng := rand.New(rand.NewPCG(7, 11))
	var out []exportCase
	for _, task := range []string{consensus.TaskBinary, consensus.TaskMulticlass, consensus.TaskRegression} {
		for _, kind := range exportScalings {
			for _, c := range []float64{0, 0.1} {
				rows := exportRawRows(rng, 50)
				spec := exportSpec(t, rng, task, kind, c, c > 0, rows)
				if sc := spec.Scaling; sc.Mean != nil {
					// Rows close to the mean: standardized, inside the unit ball.
					for i := 1; i <= 5; i++ {
						for j := range rows[i] {
							rows[i][j] = sc.Mean[j] + 0.1*sc.Std[j]*rng.NormFloat64()
						}
					}
				}
				out = append(out, exportCase{name: fmt.Sprintf("%s-%s-c%g", task, strings.ReplaceAll(string(kind), "+", "_"), c), spec: spec, rows: rows})
			}
		}
	}
	return out
}

// writeSpecFile writes spec as a file holding it under "predictor", as a node's
// model.json does.
func writeSpecFile(t *testing.T, path string, spec *consensus.ModelSpec) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"model": spec.Weights[0], "predictor": spec})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// runExportCmd runs 'dpadmm export' and fails the test unless it exits 0.
func runExportCmd(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(append([]string{"export"}, args...), &out, &errb); code != 0 {
		t.Fatalf("export %v: exit %d: %s", args, code, errb.String())
	}
	return out.String()
}

// TestExportONNXMatchesGo: for every task and scaling kind, the ONNX file that 'dpadmm
// export' writes, run by gonnx (a pure-Go ONNX runtime, independent of the exporter) on
// raw rows, gives the scores, probabilities, labels and predictions of ModelSpec within
// 1e-9; the file declares what the docs say (opset, input, outputs, metadata), and onnx's
// own checker accepts it (TestExportONNXChecker).
func TestExportONNXMatchesGo(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range exportCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			model := writeSpecFile(t, filepath.Join(dir, tc.name+".json"), tc.spec)
			out := filepath.Join(dir, tc.name+".onnx")
			msg := runExportCmd(t, "--model", model, "--out", out)
			if !strings.Contains(msg, "wrote "+out) {
				t.Errorf("output %q does not name the file", msg)
			}
			checkONNXFile(t, out, tc.spec)
			got := runONNX(t, out, tc.rows)
			spec := tc.spec
			for i, x := range tc.rows {
				want := spec.Scores(x)
				near(t, fmt.Sprintf("row %d scores", i), got["scores"].([]float64)[i*len(want):(i+1)*len(want)], want)
				if spec.Task == consensus.TaskRegression {
					near(t, fmt.Sprintf("row %d prediction", i), got["prediction"].([]float64)[i:i+1], want)
					continue
				}
				probs := spec.Probabilities(want)
				near(t, fmt.Sprintf("row %d probabilities", i), got["probabilities"].([]float64)[i*len(probs):(i+1)*len(probs)], probs)
				if l, w := got["label"].([]int64)[i], spec.Predict(want); l != int64(w) {
					t.Errorf("row %d: label %d, want %d (scores %v)", i, l, w, want)
				}
			}
		})
	}
}

// TestExportONNXTieLabel: a binary score of exactly 0 is the positive class, as Predict
// counts it, and equal multiclass scores give the first class.
func TestExportONNXTieLabel(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	rows := exportRawRows(rng, 5)
	for _, task := range []string{consensus.TaskBinary, consensus.TaskMulticlass} {
		spec := exportSpec(t, rng, task, consensus.ScaleStandardize, 0, false, rows)
		out := filepath.Join(dir, task+".onnx")
		runExportCmd(t, "--model", writeSpecFile(t, filepath.Join(dir, task+".json"), spec), "--out", out)
		// The scaler's mean standardizes to 0: every score is 0.
		tie := [][]float64{spec.Scaling.Mean}
		sc := spec.Scores(tie[0])
		for _, s := range sc {
			if s != 0 {
				t.Fatalf("%s: score %v of the mean row, want 0", task, s)
			}
		}
		got := runONNX(t, out, tie)
		if l, w := got["label"].([]int64)[0], spec.Predict(sc); l != int64(w) {
			t.Errorf("%s: label %d at a tie, want %d", task, l, w)
		}
	}
}

// checkONNXFile checks the declared parts of an exported file: opset and IR version,
// input and outputs with their element types and shapes, the metadata and doc string.
func checkONNXFile(t *testing.T, path string, spec *consensus.ModelSpec) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := gonnx.ModelProtoFromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	if m.IrVersion != onnxIRVersion || len(m.OpsetImport) != 1 || m.OpsetImport[0].Version != onnxOpset || m.OpsetImport[0].Domain != "" {
		t.Errorf("ir_version %d, opsets %v", m.IrVersion, m.OpsetImport)
	}
	type io struct {
		name string
		elem onnx.TensorProto_DataType
		dims string
	}
	describe := func(vs []*onnx.ValueInfoProto) []io {
		var out []io
		for _, v := range vs {
			tt := v.GetType().GetTensorType()
			var dims []string
			for _, d := range tt.GetShape().GetDim() {
				if d.GetDimParam() != "" {
					dims = append(dims, d.GetDimParam())
				} else {
					dims = append(dims, strconv.FormatInt(d.GetDimValue(), 10))
				}
			}
			out = append(out, io{v.Name, onnx.TensorProto_DataType(tt.GetElemType()), strings.Join(dims, ",")})
		}
		return out
	}
	p, k := len(spec.Features), len(spec.Weights)
	f64, i64 := onnx.TensorProto_DOUBLE, onnx.TensorProto_INT64
	if got, want := describe(m.Graph.Input), []io{{"x", f64, fmt.Sprintf("N,%d", p)}}; !slices.Equal(got, want) {
		t.Errorf("inputs %v, want %v", got, want)
	}
	want := []io{{"scores", f64, fmt.Sprintf("N,%d", k)}, {"probabilities", f64, fmt.Sprintf("N,%d", len(spec.Classes))}, {"label", i64, "N"}}
	if spec.Task == consensus.TaskRegression {
		want = []io{{"scores", f64, "N,1"}, {"prediction", f64, "N"}}
	}
	if got := describe(m.Graph.Output); !slices.Equal(got, want) {
		t.Errorf("outputs %v, want %v", got, want)
	}
	meta := map[string]string{}
	for _, e := range m.MetadataProps {
		meta[e.Key] = e.Value
	}
	var features, classes []string
	if err := json.Unmarshal([]byte(meta["features"]), &features); err != nil || !slices.Equal(features, spec.Features) {
		t.Errorf("metadata features %q (%v), want %v", meta["features"], err, spec.Features)
	}
	if spec.Task != consensus.TaskRegression {
		if err := json.Unmarshal([]byte(meta["classes"]), &classes); err != nil || !slices.Equal(classes, spec.Classes) {
			t.Errorf("metadata classes %q (%v), want %v", meta["classes"], err, spec.Classes)
		}
	}
	var sc consensus.Scaler
	if err := json.Unmarshal([]byte(meta["scaling"]), &sc); err != nil || sc.Fingerprint() != spec.Scaling.Fingerprint() {
		t.Errorf("metadata scaling %q (%v), want %+v", meta["scaling"], err, spec.Scaling)
	}
	var ranges [][2]float64
	if r, ok := meta["ranges"]; ok != (spec.Ranges != nil) || ok && (json.Unmarshal([]byte(r), &ranges) != nil || !slices.Equal(ranges, spec.Ranges)) {
		t.Errorf("metadata ranges %q, want %v", meta["ranges"], spec.Ranges)
	}
	if meta["task"] != spec.Task || meta["model_format"] != consensus.ModelFormat || !strings.Contains(meta["categorical"], `"color"`) {
		t.Errorf("metadata %v", meta)
	}
	for _, s := range append(slices.Clone(spec.Features), spec.Classes...) {
		if !strings.Contains(m.DocString, s) {
			t.Errorf("doc_string does not name %q:\n%s", s, m.DocString)
		}
	}
	for _, n := range m.Graph.Node {
		if n.Domain != "" {
			t.Errorf("node %s of domain %q: not a standard operator", n.Name, n.Domain)
		}
	}
}

// near fails the test unless got and want have the same length and agree within exportTol.
func near(t *testing.T, what string, got, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if !(math.Abs(got[i]-want[i]) <= exportTol) {
			t.Errorf("%s[%d] = %.17g, want %.17g (difference %.3g)", what, i, got[i], want[i], got[i]-want[i])
		}
	}
}

// runONNX runs the ONNX file at path with gonnx on rows and returns every output's data.
func runONNX(t *testing.T, path string, rows [][]float64) map[string]any {
	t.Helper()
	m, err := gonnx.NewModelFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m.GetOperator = onnxTestOperators
	var x []float64
	for _, r := range rows {
		x = append(x, r...)
	}
	res, err := m.Run(gonnx.Tensors{"x": tensor.New(tensor.WithShape(len(rows), len(rows[0])), tensor.WithBacking(x))})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]any{}
	for name, v := range res {
		if v == nil {
			t.Fatalf("output %s not computed", name)
		}
		out[name] = v.Data()
		switch name {
		case "scores", "probabilities":
			if sh := v.Shape(); len(sh) != 2 || sh[0] != len(rows) {
				t.Errorf("%s: shape %v for %d rows", name, sh, len(rows))
			}
		case "label", "prediction":
			if sh := v.Shape(); len(sh) != 1 || sh[0] != len(rows) {
				t.Errorf("%s: shape %v for %d rows", name, sh, len(rows))
			}
		}
		if name == "label" {
			if _, ok := v.Data().([]int64); !ok {
				t.Fatalf("label is %T, want []int64", v.Data())
			}
		}
	}
	return out
}

// onnxTestOperators is gonnx's opset 13 with the four operators of the exported graphs
// that gonnx v1.1.0 does not implement: ReduceL2, Max, Min and ArgMax, written here from the
// ONNX operator specification for what the graphs use (2-D inputs, reduction over axis 1)
// and refusing anything else.
func onnxTestOperators(op string) (ops.Operator, error) {
	switch op {
	case "ReduceL2":
		return &testReduceL2{}, nil
	case "Max":
		return &testMax{name: "Max", f: math.Max}, nil
	case "Min":
		return &testMax{name: "Min", f: math.Min}, nil
	case "ArgMax":
		return &testArgMax{}, nil
	}
	return opset13.GetOperator(op)
}

// testOp holds what the three test operators share.
type testOp struct {
	name     string
	min, max int
}

func (o *testOp) String() string    { return o.name + " operator (test)" }
func (o *testOp) GetMinInputs() int { return o.min }
func (o *testOp) GetMaxInputs() int { return o.max }
func (o *testOp) GetInputTypeConstraints() [][]tensor.Dtype {
	c := make([][]tensor.Dtype, o.max)
	for i := range c {
		c[i] = []tensor.Dtype{tensor.Float64}
	}
	return c
}

// testAttrs returns the INT and INTS attributes of n, refusing names not in allowed.
func testAttrs(n *onnx.NodeProto, allowed ...string) (map[string][]int64, error) {
	out := map[string][]int64{}
	for _, a := range n.GetAttribute() {
		if !slices.Contains(allowed, a.GetName()) {
			return nil, fmt.Errorf("%s: attribute %q not supported by the test operator", n.GetOpType(), a.GetName())
		}
		switch a.GetType() {
		case onnx.AttributeProto_INT:
			out[a.GetName()] = []int64{a.GetI()}
		case onnx.AttributeProto_INTS:
			out[a.GetName()] = a.GetInts()
		default:
			return nil, fmt.Errorf("%s: attribute %q of type %v", n.GetOpType(), a.GetName(), a.GetType())
		}
	}
	return out, nil
}

// matrix returns the data and shape of a 2-D float64 tensor.
func matrix(x tensor.Tensor) ([]float64, int, int, error) {
	sh := x.Shape()
	d, ok := x.Data().([]float64)
	if len(sh) != 2 || !ok {
		return nil, 0, 0, fmt.Errorf("want a 2-D float64 tensor, got shape %v of %v", sh, x.Dtype())
	}
	return d, sh[0], sh[1], nil
}

// testReduceL2 is ReduceL2 (opset 13) with axes [1]: sqrt of the sum of squares of each
// row, keepdims 1 (the default) giving [N, 1], 0 giving [N].
type testReduceL2 struct {
	testOp
	keep bool
}

func (o *testReduceL2) Init(n *onnx.NodeProto) error {
	o.testOp = testOp{"ReduceL2", 1, 1}
	a, err := testAttrs(n, "axes", "keepdims")
	if err != nil {
		return err
	}
	if !slices.Equal(a["axes"], []int64{1}) {
		return fmt.Errorf("ReduceL2: axes %v, the test operator reduces over [1]", a["axes"])
	}
	o.keep = a["keepdims"] == nil || a["keepdims"][0] == 1
	return nil
}

func (o *testReduceL2) ValidateInputs(in []tensor.Tensor) ([]tensor.Tensor, error) {
	return ops.ValidateInputs(o, in)
}

func (o *testReduceL2) Apply(in []tensor.Tensor) ([]tensor.Tensor, error) {
	d, n, p, err := matrix(in[0])
	if err != nil {
		return nil, err
	}
	out := make([]float64, n)
	for i := range out {
		s := 0.0
		for _, v := range d[i*p : (i+1)*p] {
			s += v * v
		}
		out[i] = math.Sqrt(s)
	}
	shape := []int{n}
	if o.keep {
		shape = []int{n, 1}
	}
	return []tensor.Tensor{tensor.New(tensor.WithShape(shape...), tensor.WithBacking(out))}, nil
}

// testMax is Max or Min (opset 13, name and f) of two inputs with multidirectional
// broadcasting.
type testMax struct {
	testOp
	name string
	f    func(a, b float64) float64
}

func (o *testMax) Init(n *onnx.NodeProto) error {
	o.testOp = testOp{o.name, 2, 2}
	_, err := testAttrs(n)
	return err
}

func (o *testMax) ValidateInputs(in []tensor.Tensor) ([]tensor.Tensor, error) {
	return ops.ValidateInputs(o, in)
}

func (o *testMax) Apply(in []tensor.Tensor) ([]tensor.Tensor, error) {
	a, b, err := ops.MultidirectionalBroadcast(in[0], in[1])
	if err != nil {
		return nil, err
	}
	// Materialise the broadcast views.
	ad, bd := a.(*tensor.Dense).Materialize().Data().([]float64), b.(*tensor.Dense).Materialize().Data().([]float64)
	out := make([]float64, len(ad))
	for i := range out {
		out[i] = o.f(ad[i], bd[i])
	}
	return []tensor.Tensor{tensor.New(tensor.WithShape(a.Shape().Clone()...), tensor.WithBacking(out))}, nil
}

// testArgMax is ArgMax (opset 13) over axis 1 of a 2-D input: the index of the first
// maximum, the last with select_last_index 1; keepdims 1 (the default) gives [N, 1],
// 0 gives [N]; int64.
type testArgMax struct {
	testOp
	keep, last bool
}

func (o *testArgMax) Init(n *onnx.NodeProto) error {
	o.testOp = testOp{"ArgMax", 1, 1}
	a, err := testAttrs(n, "axis", "keepdims", "select_last_index")
	if err != nil {
		return err
	}
	if a["axis"] == nil || a["axis"][0] != 1 {
		return fmt.Errorf("ArgMax: axis %v, the test operator reduces axis 1", a["axis"])
	}
	o.keep = a["keepdims"] == nil || a["keepdims"][0] == 1
	o.last = a["select_last_index"] != nil && a["select_last_index"][0] == 1
	return nil
}

func (o *testArgMax) ValidateInputs(in []tensor.Tensor) ([]tensor.Tensor, error) {
	return ops.ValidateInputs(o, in)
}

func (o *testArgMax) Apply(in []tensor.Tensor) ([]tensor.Tensor, error) {
	d, n, p, err := matrix(in[0])
	if err != nil {
		return nil, err
	}
	out := make([]int64, n)
	for i := range out {
		row, best := d[i*p:(i+1)*p], 0
		for j, v := range row {
			if v > row[best] || (o.last && v == row[best]) {
				best = j
			}
		}
		out[i] = int64(best)
	}
	shape := []int{n}
	if o.keep {
		shape = []int{n, 1}
	}
	return []tensor.Tensor{tensor.New(tensor.WithShape(shape...), tensor.WithBacking(out))}, nil
}

// TestExportONNXChecker: onnx's own checker (full_check: with strict shape inference)
// accepts the file of every task and scaling kind. It needs Python's onnx package
// (Debian: apt-get install python3-onnx; CI installs it).
func TestExportONNXChecker(t *testing.T) {
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import onnx").Run(); err != nil {
		t.Skipf("onnx's checker needs Python's onnx package: apt-get install python3-onnx (%s -c 'import onnx': %v)", py, err)
	}
	dir := t.TempDir()
	var files []string
	for _, tc := range exportCases(t) {
		out := filepath.Join(dir, tc.name+".onnx")
		runExportCmd(t, "--model", writeSpecFile(t, filepath.Join(dir, tc.name+".json"), tc.spec), "--out", out)
		files = append(files, out)
	}
	script := `import onnx, sys
bad = 0
for f in sys.argv[1:]:
    try:
        onnx.checker.check_model(onnx.load(f), full_check=True)
    except Exception as e:
        bad += 1
        print("%s: %s" % (f, e))
print("checked %d files, %d rejected" % (len(sys.argv) - 1, bad))
sys.exit(1 if bad else 0)
`
	out, err := exec.Command(py, append([]string{"-c", script}, files...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("onnx.checker: %v\n%s", err, out)
	}
	t.Logf("%s", bytes.TrimSpace(out))
}

// readExportCSV parses an exported CSV: the header, and the rows by space.
func readExportCSV(t *testing.T, path string) ([]string, map[string][][]string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) < 2 {
		t.Fatalf("%s: %d records", path, len(recs))
	}
	bySpace := map[string][][]string{}
	for _, r := range recs[1:] {
		bySpace[r[1]] = append(bySpace[r[1]], r)
	}
	return recs[0], bySpace
}

func parseFloats(t *testing.T, s []string) []float64 {
	t.Helper()
	out := make([]float64, len(s))
	for i, v := range s {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = f
	}
	return out
}

// TestExportCSVReproducesScores: the CSV export, parsed back and applied as docs/export.md
// says (raw space: intercept + coefficients . x; unitball space: the same on the row
// standardized with the "mean" and "std" rows, then divided by max(1, its norm)), gives
// ModelSpec.Scores; the raw coefficients are the model file's "coef" and "intercept".
func TestExportCSVReproducesScores(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range exportCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			spec := tc.spec
			out := filepath.Join(dir, tc.name+".csv")
			runExportCmd(t, "--model", writeSpecFile(t, filepath.Join(dir, tc.name+".json"), spec), "--format", "csv", "--out", out)
			header, rows := readExportCSV(t, out)
			first := "class"
			if spec.Task == consensus.TaskRegression {
				first = "target"
			}
			if want := append([]string{first, "space", "intercept"}, spec.Features...); !slices.Equal(header, want) {
				t.Fatalf("header %v, want %v", header, want)
			}
			kind := spec.Scaling.Kind
			unit := kind == consensus.ScaleUnitBall || kind == consensus.ScaleStandardizeUnitBall
			space := "raw"
			if unit {
				space = "unitball"
			}
			score := rows[space]
			want := map[bool]int{false: 1, true: 3}[kind == consensus.ScaleStandardizeUnitBall]
			if spec.Ranges != nil {
				want += 2 // the min and max rows
			}
			if len(score) != len(spec.Weights) || len(rows) != want {
				t.Fatalf("rows by space %v", rows)
			}
			var lo, hi []float64
			if spec.Ranges != nil {
				lo, hi = parseFloats(t, rows["min"][0][3:]), parseFloats(t, rows["max"][0][3:])
			}
			var names []string
			for _, r := range score {
				names = append(names, r[0])
			}
			wantNames := map[string][]string{consensus.TaskBinary: {"yes"}, consensus.TaskMulticlass: spec.Classes, consensus.TaskRegression: {"outcome"}}[spec.Task]
			if !slices.Equal(names, wantNames) {
				t.Errorf("classes %v, want %v", names, wantNames)
			}
			var mean, std []float64
			if kind == consensus.ScaleStandardizeUnitBall {
				mean, std = parseFloats(t, rows["mean"][0][3:]), parseFloats(t, rows["std"][0][3:])
			}
			for k, r := range score {
				icpt, coef := parseFloats(t, r[2:3])[0], parseFloats(t, r[3:])
				if !unit {
					near(t, "intercept", []float64{icpt}, spec.Intercept[k:k+1])
					near(t, "coef", coef, spec.Coef[k])
				}
				for i, x := range tc.rows {
					u := slices.Clone(x)
					for j := range lo {
						u[j] = math.Max(lo[j], math.Min(hi[j], u[j]))
					}
					if unit {
						for j := range u {
							if mean != nil {
								u[j] = (u[j] - mean[j]) / std[j]
							}
						}
						n := 0.0
						for _, v := range u {
							n += v * v
						}
						for j := range u {
							u[j] /= math.Max(1, math.Sqrt(n))
						}
					}
					s := icpt
					for j, v := range u {
						s += coef[j] * v
					}
					near(t, fmt.Sprintf("row %d score %d", i, k), []float64{s}, spec.Scores(x)[k:k+1])
				}
			}
		})
	}
}

// TestExportInputs: the forms of --model (a bare spec, a file with "predictor", a
// directory holding model.json) give the same file; outputs are overwritten whole.
func TestExportInputs(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(3, 4))
	spec := exportSpec(t, rng, consensus.TaskMulticlass, consensus.ScaleStandardizeUnitBall, 0.1, false, exportRawRows(rng, 20))
	bare, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "spec.json"), bare, 0o644)
	os.Mkdir(filepath.Join(dir, "node"), 0o755)
	writeSpecFile(t, filepath.Join(dir, "node", "model.json"), spec)
	var files [][]byte
	for _, m := range []string{filepath.Join(dir, "spec.json"), filepath.Join(dir, "node", "model.json"), filepath.Join(dir, "node")} {
		for _, format := range []string{"onnx", "csv"} {
			out := filepath.Join(dir, "out."+format)
			os.WriteFile(out, []byte("old contents, longer than nothing"), 0o644)
			runExportCmd(t, "--model", m, "--format", format, "--out", out)
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, b)
		}
	}
	for i := 2; i < len(files); i++ {
		if !bytes.Equal(files[i], files[i%2]) {
			t.Errorf("output %d differs from the bare spec's", i)
		}
	}
}

// TestExportErrors: bad input gives a clear error and its exit code (2: usage, 1: a file
// that cannot be read or is not a model), and writes nothing.
func TestExportErrors(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(5, 6))
	spec := exportSpec(t, rng, consensus.TaskBinary, consensus.ScaleStandardize, 0.1, false, exportRawRows(rng, 20))
	good := writeSpecFile(t, filepath.Join(dir, "good.json"), spec)
	noPred := filepath.Join(dir, "nopred.json")
	os.WriteFile(noPred, []byte(`{"model":[1,2],"dims":2}`), 0o644)
	corrupt := filepath.Join(dir, "corrupt.json")
	bad := *spec
	bad.Weights = [][]float64{spec.Weights[0][:2]}
	b, _ := json.Marshal(map[string]any{"predictor": bad})
	os.WriteFile(corrupt, b, 0o644)
	truncated := filepath.Join(dir, "truncated.json")
	full, _ := os.ReadFile(good)
	os.WriteFile(truncated, full[:len(full)/2], 0o644)
	missing := filepath.Join(dir, "missing.json")
	out := filepath.Join(dir, "out", "model.onnx")
	os.Mkdir(filepath.Dir(out), 0o755)
	cases := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--model", missing, "--out", out}, 1, missing + ": no such file or directory"},
		{[]string{"--model", noPred, "--out", out}, 1, `nopred.json: model file: no "predictor"`},
		{[]string{"--model", corrupt, "--out", out}, 1, "corrupt.json: model spec: a weight row of 2 values, want 7"},
		{[]string{"--model", truncated, "--out", out}, 1, "truncated.json: model file: "},
		{[]string{"--model", good, "--format", "pmml", "--out", out}, 2, `--format must be onnx or csv, got "pmml"`},
		{[]string{"--model", good}, 2, "--out is required"},
		{[]string{"--out", out}, 2, "--model is required"},
		{[]string{"--model", good, "--out", out, "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"--model", good, "--out", out, "--opset", "18"}, 2, "unknown flag --opset"},
		{[]string{"--model", good, "--fromat", "csv", "--out", out}, 2, "did you mean --format?"},
		{[]string{"--model", good, "--out", filepath.Join(dir, "no", "such", "dir", "m.onnx")}, 1, "no/such/dir does not exist"},
	}
	for _, c := range cases {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"export"}, c.args...), &stdout, &stderr)
		if code != c.code || !strings.Contains(stderr.String(), c.msg) {
			t.Errorf("export %v: exit %d, stderr %q; want exit %d and %q", c.args, code, stderr.String(), c.code, c.msg)
		}
		if c.code == 2 && !strings.Contains(stderr.String(), "run 'dpadmm export --help' for usage") {
			t.Errorf("export %v: usage error without the pointer to --help: %q", c.args, stderr.String())
		}
		if stdout.Len() != 0 {
			t.Errorf("export %v: stdout %q", c.args, stdout.String())
		}
		if ents, _ := os.ReadDir(filepath.Dir(out)); len(ents) != 0 {
			t.Errorf("export %v: wrote %v", c.args, ents)
		}
	}
}

// TestExportHelpGolden: 'dpadmm export --help' (and -h) prints its text and flags to
// stdout and equals testdata/help/export.txt (go test -run HelpGolden -update rewrites it);
// the flags are listed with two dashes.
func TestExportHelpGolden(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"export", "--help"}, &out, &errb); code != 0 || errb.Len() != 0 {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	golden := filepath.Join("testdata", "help", "export.txt")
	if *update {
		if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -run HelpGolden -update to create it)", err)
	}
	if got := out.String(); got != string(want) {
		t.Errorf("help differs from %s (go test -run HelpGolden -update rewrites it):\n%s", golden, firstDiff(got, string(want)))
	}
	var short bytes.Buffer
	if code := run([]string{"export", "-h"}, &short, &errb); code != 0 || short.String() != out.String() {
		t.Errorf("-h: exit %d, output differs from --help", code)
	}
	_, flags, _ := strings.Cut(out.String(), "\nFlags:\n")
	for _, f := range []string{"--model string", "--format string", "--out string"} {
		if !strings.Contains(flags, f) {
			t.Errorf("flags do not list %q:\n%s", f, flags)
		}
	}
}
