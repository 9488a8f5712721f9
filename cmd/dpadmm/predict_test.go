package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
)

// runCmd runs dpadmm with args and returns the exit code, stdout and stderr.
func runCmd(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// byHand computes the class probabilities of one raw row from a report's predictor
// written out in plain JSON: standardise (here with the schema's ranges: mean the middle,
// std the half-width), divide by max(1, norm), scale by sqrt(1-c^2), append c, then
// softmax of the weight rows (sigmoid for one row).
func byHand(t *testing.T, p map[string]any, x []float64) []float64 {
	t.Helper()
	sc := p["scaling"].(map[string]any)
	mean, std := sc["mean"].([]any), sc["std"].([]any)
	z := make([]float64, len(x))
	n := 0.0
	for j, v := range x {
		z[j] = (v - mean[j].(float64)) / std[j].(float64)
		n += z[j] * z[j]
	}
	n = math.Max(1, math.Sqrt(n))
	c := sc["intercept"].(float64)
	for j := range z {
		z[j] = z[j] / n * math.Sqrt(1-c*c)
	}
	z = append(z, c)
	var s []float64
	for _, row := range p["weights"].([]any) {
		w := row.([]any)
		v := 0.0
		for j := range z {
			v += w[j].(float64) * z[j]
		}
		s = append(s, v)
	}
	if len(s) == 1 {
		q := 1 / (1 + math.Exp(-s[0]))
		return []float64{1 - q, q}
	}
	mx, sum := math.Inf(-1), 0.0
	for _, v := range s {
		mx = math.Max(mx, v)
	}
	out := make([]float64, len(s))
	for k, v := range s {
		out[k] = math.Exp(v - mx)
		sum += out[k]
	}
	for k := range out {
		out[k] /= sum
	}
	return out
}

// TestPredictMulticlass: a 3-class testnet report's model, applied by dpadmm predict to the
// raw iris rows (columns shuffled, an extra column added), gives the probabilities of a
// computation by hand from the report, the label of their maximum, and the same numbers in
// JSON; eval's confusion matrix and per-class scores match a count from those predictions.
func TestPredictMulticlass(t *testing.T) {
	dir := t.TempDir()
	data := "../../../shared/data/iris.csv"
	if _, err := os.Stat(data); err != nil {
		t.Fatalf("the shared data are needed beside the repository: %v", err)
	}
	rep := filepath.Join(dir, "r.json")
	if code, _, e := runCmd("testnet", "--data", data, "--label", "species", "--schema", "../../examples/iris.schema.json", "--nodes", "6", "--hops", "600", "--quiet", "--report", rep); code != 0 {
		t.Fatalf("testnet: exit %d: %s", code, e)
	}
	p := readReport(t, rep)["predictor"].(map[string]any)
	if p["task"] != "multiclass" || len(p["classes"].([]any)) != 3 || len(p["weights"].([]any)) != 3 {
		t.Fatalf("predictor %v", p)
	}
	raw, err := os.ReadFile(data)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(bytes.NewReader(raw)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	// The same rows with the columns reversed and an unrelated column.
	var b strings.Builder
	w := csv.NewWriter(&b)
	for i, r := range recs {
		extra := "id"
		if i > 0 {
			extra = strconv.Itoa(i)
		}
		_ = w.Write([]string{extra, r[4], r[3], r[2], r[1], r[0]})
	}
	w.Flush()
	shuffled := writeFile(t, dir, "shuffled.csv", b.String())
	code, out, e := runCmd("predict", "--model", rep, "--data", shuffled)
	if code != 0 {
		t.Fatalf("predict: exit %d: %s", code, e)
	}
	got, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	classes := p["classes"].([]any)
	if strings.Join(got[0], ",") != "label,setosa,versicolor,virginica" || len(got) != len(recs) {
		t.Fatalf("header %v, %d rows", got[0], len(got))
	}
	for i := 1; i < len(recs); i++ {
		x := make([]float64, 4)
		for j := range x {
			x[j], _ = strconv.ParseFloat(recs[i][j], 64)
		}
		want := byHand(t, p, x)
		best := 0
		for k := range want {
			v, _ := strconv.ParseFloat(got[i][k+1], 64)
			if math.Abs(v-want[k]) > 1e-12 {
				t.Fatalf("row %d class %d: probability %v, by hand %v", i, k, v, want[k])
			}
			if want[k] > want[best] {
				best = k
			}
		}
		if got[i][0] != classes[best] {
			t.Fatalf("row %d: label %q, by hand %q", i, got[i][0], classes[best])
		}
	}
	// JSON: the same predictions.
	code, js, e := runCmd("predict", "--model", rep, "--data", data, "--format", "json")
	if code != 0 {
		t.Fatalf("predict --format json: exit %d: %s", code, e)
	}
	var po predictOutput
	if err := json.Unmarshal([]byte(js), &po); err != nil {
		t.Fatal(err)
	}
	if po.Rows != len(recs)-1 || po.Predictions[7].Label != got[8][0] || po.Task != "multiclass" {
		t.Fatalf("json %d rows, row 8 %+v, csv %v", po.Rows, po.Predictions[7], got[8])
	}
	// eval: accuracy, confusion and per-class recall counted from predict's labels.
	code, ev, e := runCmd("eval", "--json", "--data", data, rep)
	if code != 0 {
		t.Fatalf("eval: exit %d: %s", code, e)
	}
	var er evalReport
	if err := json.Unmarshal([]byte(ev), &er); err != nil {
		t.Fatal(err)
	}
	conf := map[[2]string]int{}
	ok := 0
	for i := 1; i < len(recs); i++ {
		conf[[2]string{recs[i][4], got[i][0]}]++
		if recs[i][4] == got[i][0] {
			ok++
		}
	}
	c := er.Classification
	if c == nil || er.Task != "multiclass" || math.Abs(*er.Accuracy-float64(ok)/150) > 1e-12 || c.ROCAUC != nil {
		t.Fatalf("eval %+v", er)
	}
	for ti, tc := range c.Classes {
		for pi, pc := range c.Classes {
			if c.Confusion[ti][pi] != conf[[2]string{tc, pc}] {
				t.Fatalf("confusion[%s][%s] = %d, counted %d", tc, pc, c.Confusion[ti][pi], conf[[2]string{tc, pc}])
			}
		}
		if r := float64(c.Confusion[ti][ti]) / 50; math.Abs(c.PerClass[ti].Recall-r) > 1e-12 {
			t.Fatalf("recall of %s %v, counted %v", tc, c.PerClass[ti].Recall, r)
		}
	}
	// A label outside the model's classes is refused with the label named.
	bad := writeFile(t, dir, "bad.csv", "species,sepal_length,sepal_width,petal_length,petal_width\nrose,1,2,3,4\nsetosa,1,2,3,4\n")
	if code, _, e := runCmd("eval", "--data", bad, rep); code != 1 || !strings.Contains(e, `"rose" (line 2)`) || !strings.Contains(e, "setosa") {
		t.Fatalf("foreign label: exit %d: %s", code, e)
	}
	// A missing feature column is named.
	miss := writeFile(t, dir, "miss.csv", "species,sepal_length,sepal_width,petal_length\nsetosa,1,2,3\n")
	if code, _, e := runCmd("predict", "--model", rep, "--data", miss); code != 1 || !strings.Contains(e, "petal_width") {
		t.Fatalf("missing column: exit %d: %s", code, e)
	}
}

// TestPredictCategoricalAndRegression: a squared-loss model over a text column (one-hot)
// predicts in the target's units: predict equals the raw-unit coefficients of the
// predictor (the scaling is linear), a category the model has not seen counts as zeros
// with a warning, and eval's RMSE, MAE and R^2 match a computation from the predictions.
func TestPredictCategoricalAndRegression(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("y,colour,x\n")
	for i := 0; i < 60; i++ {
		col := []string{"red", "green", "blue"}[i%3]
		x := math.Sin(float64(i))
		y := 100 + 20*x + map[string]float64{"red": 5, "green": -5, "blue": 0}[col]
		b.WriteString(strconv.FormatFloat(y, 'g', -1, 64) + "," + col + "," + strconv.FormatFloat(x, 'g', -1, 64) + "\n")
	}
	train := writeFile(t, dir, "train.csv", b.String())
	rep := filepath.Join(dir, "r.json")
	if code, _, e := runCmd("testnet", "--data", train, "--loss", "squared", "--categorical", "auto", "--scale", "standardize",
		"--nodes", "3", "--sigma", "0", "--max-updates", "0", "--hops", "3000", "--gamma", "1", "--test-frac", "0", "--quiet", "--report", rep); code != 0 {
		t.Fatalf("testnet: exit %d: %s", code, e)
	}
	spec, _, err := readSpec(rep)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Task != consensus.TaskRegression || len(spec.Categorical) != 1 || spec.Coef == nil || !spec.Scaling.HasTarget() {
		t.Fatalf("spec %+v", spec)
	}
	test := writeFile(t, dir, "test.csv", "x,colour,y\n0.5,red,115\n-0.25,purple,95\n0,blue,100\n")
	code, out, e := runCmd("predict", "--model", rep, "--data", test)
	if code != 0 || !strings.Contains(e, "1 cell(s)") {
		t.Fatalf("predict: exit %d: %s", code, e)
	}
	got, _ := csv.NewReader(strings.NewReader(out)).ReadAll()
	// Raw-unit coefficients: features colour=blue, colour=green, colour=red, x.
	rows := [][]float64{{0, 0, 1, 0.5}, {0, 0, 0, -0.25}, {1, 0, 0, 0}}
	ys := []float64{115, 95, 100}
	res, abs, mean, tot := 0.0, 0.0, (115+95+100)/3.0, 0.0
	for i, x := range rows {
		want := spec.Intercept[0]
		for j, v := range x {
			want += spec.Coef[0][j] * v
		}
		v, _ := strconv.ParseFloat(got[i+1][0], 64)
		if math.Abs(v-want) > 1e-9 {
			t.Fatalf("row %d: prediction %v, raw-unit coefficients give %v", i, v, want)
		}
		res += (v - ys[i]) * (v - ys[i])
		abs += math.Abs(v - ys[i])
		tot += (ys[i] - mean) * (ys[i] - mean)
	}
	code, ev, e := runCmd("eval", "--json", "--data", test, rep)
	if code != 0 {
		t.Fatalf("eval: exit %d: %s", code, e)
	}
	var er evalReport
	if err := json.Unmarshal([]byte(ev), &er); err != nil {
		t.Fatal(err)
	}
	if er.RMSE == nil || math.Abs(*er.RMSE-math.Sqrt(res/3)) > 1e-9 || math.Abs(*er.MAE-abs/3) > 1e-9 || math.Abs(*er.R2-(1-res/tot)) > 1e-9 {
		t.Fatalf("eval %+v, want rmse %v mae %v r2 %v", er, math.Sqrt(res/3), abs/3, 1-res/tot)
	}
}

// TestPredictErrors: bad input gets a clear error and writes nothing.
func TestPredictErrors(t *testing.T) {
	dir := t.TempDir()
	old := writeFile(t, dir, "old.json", `{"model":[1,2],"loss":"logistic"}`)
	data := writeFile(t, dir, "d.csv", "a,b\n1,2\n")
	out := filepath.Join(dir, "out.csv")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"predict", "--data", data}, 2, "--model is required"},
		{[]string{"predict", "--model", old}, 2, "--data is required"},
		{[]string{"predict", "--model", old, "--data", data, "--format", "xml"}, 2, "csv or json"},
		{[]string{"predict", "--model", old, "--data", data, "--out", out}, 1, `no "predictor"`},
		{[]string{"predict", "--model", filepath.Join(dir, "none.json"), "--data", data, "--out", out}, 1, "no such file"},
		{[]string{"predict", "--model", writeFile(t, dir, "corrupt.json", `{"predictor":{"format":"dpadmm-linear/1","task":"binary"`), "--data", data, "--out", out}, 1, "model file"},
	} {
		code, _, e := runCmd(c.args...)
		if code != c.code || !strings.Contains(e, c.want) {
			t.Errorf("%v: exit %d: %s", c.args, code, e)
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("a failed predict wrote %s", out)
	}
}

// TestRADMMOneVsRest: the neighbour-exchange algorithms fit a 3-class label one-vs-rest:
// the simulator, --mem and --procs give the same averaged model bit for bit, the model has
// one weight vector per class, its ledger-recomputed figure equals the Theorem V.1 figure
// (each iteration charging the three blocks), and predict applies its predictor.
func TestRADMMOneVsRest(t *testing.T) {
	t.Setenv(asMainEnv, "1") // --procs runs this test binary as dpadmm
	dir := t.TempDir()
	iris, schema := "../../examples/iris.csv", "../../examples/iris.schema.json"
	var models [][]any
	for _, mode := range []string{"", "--mem", "--procs"} {
		rep := filepath.Join(dir, "r"+strings.TrimPrefix(mode, "--")+".json")
		args := []string{"testnet", "--algo", "radmm", "--nodes", "3", "--iters", "6", "--data", iris, "--label", "species",
			"--schema", schema, "--quiet", "--report", rep}
		nodes := filepath.Join(dir, "nodes"+mode)
		if mode != "" {
			args = append(args, mode, "--dir", nodes)
		}
		if code, _, e := runCmd(args...); code != 0 {
			t.Fatalf("%q: exit %d: %s", mode, code, e)
		}
		m := readReport(t, rep)
		if mode != "" {
			checkNodePredictors(t, rep, nodes, 3, iris)
		}
		models = append(models, m["model"].([]any))
		p := m["predictor"].(map[string]any)
		if p["loss"] != "logistic-ovr" || p["task"] != "multiclass" || len(p["weights"].([]any)) != 3 || len(m["model"].([]any)) != 15 {
			t.Fatalf("%q: predictor %v", mode, p)
		}
		if mode == "" {
			if code, out, e := runCmd("predict", "--model", rep, "--data", iris); code != 0 || !strings.HasPrefix(out, "label,setosa,versicolor,virginica") {
				t.Fatalf("predict: exit %d: %s %s", code, e, out[:min(len(out), 80)])
			}
		}
	}
	for i := 1; i < len(models); i++ {
		for j := range models[0] {
			if models[i][j] != models[0][j] {
				t.Fatalf("mode %d coordinate %d: %v, simulator %v", i, j, models[i][j], models[0][j])
			}
		}
	}
}

// checkNodePredictors: the model.json of each of the nodes a testnet ran on hosts (its
// data prepared by the testnet) describes its model as the report describes the run's
// (raw features, scaling, ranges, classes), with the node's own weights, and eval reads
// the raw data through it.
func checkNodePredictors(t *testing.T, report, nodes string, n int, data string) {
	t.Helper()
	want, _, err := readSpec(report)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		dir := filepath.Join(nodes, fmt.Sprintf("node-%d", i))
		got, path, err := readSpec(dir)
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		if err := got.SameInputs(want); err != nil {
			t.Fatalf("%s: the predictor is not the run's: %v", path, err)
		}
		var mf struct {
			Model []float64 `json:"model"`
		}
		b, _ := os.ReadFile(path)
		if err := json.Unmarshal(b, &mf); err != nil || fmt.Sprint(mf.Model) != fmt.Sprint(got.Flat()) {
			t.Fatalf("%s: predictor weights %v, model %v (%v)", path, got.Flat(), mf.Model, err)
		}
		if code, _, e := runCmd("eval", "--data", data, dir); code != 0 {
			t.Fatalf("eval %s: exit %d: %s", dir, code, e)
		}
	}
}

// TestPredictorGolden: the predictor of a fixed run (iris, the example schema, seed 3,
// no noise) is the golden file testdata/predictor-iris.json, weights to 6 decimals: the
// model file's layout is a contract (go test -run PredictorGolden -update rewrites it).
func TestPredictorGolden(t *testing.T) {
	rep := filepath.Join(t.TempDir(), "r.json")
	if code, _, e := runCmd("testnet", "--data", "../../examples/iris.csv", "--label", "species", "--schema", "../../examples/iris.schema.json",
		"--nodes", "4", "--hops", "200", "--sigma", "0", "--seed", "3", "--quiet", "--report", rep); code != 0 {
		t.Fatalf("testnet: exit %d: %s", code, e)
	}
	p := readReport(t, rep)["predictor"].(map[string]any)
	var round func(v any) any
	round = func(v any) any {
		switch x := v.(type) {
		case float64:
			return math.Round(x*1e6) / 1e6
		case []any:
			for i := range x {
				x[i] = round(x[i])
			}
		case map[string]any:
			for k := range x {
				x[k] = round(x[k])
			}
		}
		return v
	}
	got, err := json.MarshalIndent(round(p), "", " ")
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "predictor-iris.json")
	if *update {
		if err := os.WriteFile(golden, append(got, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != string(got)+"\n" {
		t.Fatalf("predictor differs from %s (go test -run PredictorGolden -update rewrites it):\n%s", golden, got)
	}
}

// TestPredictClipsToRanges: a model trained with a schema clips its inputs to the
// schema's ranges, as training clipped the rows: two rows that differ only in a value at
// the top of its range and far above it get the same prediction, and the cell outside is
// reported.
func TestPredictClipsToRanges(t *testing.T) {
	dir := t.TempDir()
	rep := filepath.Join(dir, "wine.json")
	if code, _, e := runCmd("testnet", "--data", "../../examples/wine.csv", "--label", "class", "--schema", "../../examples/wine.schema.json",
		"--nodes", "3", "--quiet", "--report", rep); code != 0 {
		t.Fatalf("testnet: exit %d: %s", code, e)
	}
	spec, _, err := readSpec(rep)
	if err != nil {
		t.Fatal(err)
	}
	j := slices.Index(spec.Features, "proline")
	if len(spec.Ranges) != len(spec.Features) || j < 0 || spec.Ranges[j] != [2]float64{270, 1700} {
		t.Fatalf("model ranges %v (features %v)", spec.Ranges, spec.Features)
	}
	head := "alcohol,malic_acid,ash,alcalinity_of_ash,magnesium,total_phenols,flavanoids,nonflavanoid_phenols,proanthocyanins,color_intensity,hue,od280_od315_of_diluted_wines,proline\n"
	row := "13.2,1.78,2.14,11.2,100.0,2.65,2.76,0.26,1.28,4.38,1.05,3.4,"
	test := writeFile(t, dir, "t.csv", head+row+"1700\n"+row+"100000\n")
	code, out, e := runCmd("predict", "--model", rep, "--data", test)
	if code != 0 || !strings.Contains(e, "1 cell(s)") || !strings.Contains(e, "clipped") {
		t.Fatalf("predict: exit %d: %s", code, e)
	}
	got, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || len(got) != 3 {
		t.Fatalf("predictions %q: %v", out, err)
	}
	if !slices.Equal(got[1], got[2]) {
		t.Fatalf("proline 1700 (the range's top) and 100000 predicted differently: %v vs %v", got[1], got[2])
	}
}

// TestPredictLIBSVM: a model trained on a LIBSVM file scores a LIBSVM file: eval on the
// training file gives the report's training accuracy, and predict labels every row.
func TestPredictLIBSVM(t *testing.T) {
	dir := t.TempDir()
	d, err := consensus.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for i := 0; i < d.Rows; i++ {
		b.WriteString(strconv.FormatFloat(d.Y[i], 'g', -1, 64))
		for j, v := range d.Row(i) {
			if v != 0 {
				fmt.Fprintf(&b, " %d:%s", j+1, strconv.FormatFloat(v, 'g', -1, 64))
			}
		}
		b.WriteString("\n")
	}
	data := writeFile(t, dir, "bc.libsvm", b.String())
	rep := filepath.Join(dir, "r.json")
	if code, _, e := runCmd("testnet", "--data", data, "--nodes", "3", "--test-frac", "0", "--quiet", "--report", rep); code != 0 {
		t.Fatalf("testnet: exit %d: %s", code, e)
	}
	want := readReport(t, rep)["train_accuracy"].(float64)
	er := evalJSON(t, "--data", data, rep)
	if er.Rows != d.Rows || er.Accuracy == nil || *er.Accuracy != want {
		t.Fatalf("eval on the LIBSVM file: %d rows, accuracy %v; the report's training accuracy %v", er.Rows, er.Accuracy, want)
	}
	code, out, e := runCmd("predict", "--model", rep, "--data", data)
	if code != 0 || strings.Count(out, "\n") != d.Rows+1 {
		t.Fatalf("predict: exit %d, %d lines: %s", code, strings.Count(out, "\n"), e)
	}
}
