package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/node"
	"github.com/dpadmm/dpadmm/node/store"
)

// loadFlags parses args with the data flags of cfg, checks them and loads the data.
func loadFlags(cfg dataFlagConfig, req loadRequest, args ...string) (*loadedData, error) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	df := addDataFlags(fs, cfg)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if err := df.check(req.loss); err != nil {
		return nil, err
	}
	return df.load(req)
}

// labelled writes a CSV "y,a,b" of n rows to dir/name: a and b are deterministic, shifted
// by shift and stretched by stretch, and the label is pos when a + 0.3 b > 0 (before the
// shift), else neg. It returns the path.
func labelled(t *testing.T, dir, name string, n int, neg, pos string, shift, stretch float64) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("y,a,b\n")
	for i := 0; i < n; i++ {
		a, c := math.Sin(1.3*float64(i)+0.2), math.Cos(0.7*float64(i))
		y := neg
		if a+0.3*c > 0 {
			y = pos
		}
		fmt.Fprintf(&b, "%s,%g,%g\n", y, stretch*a+shift, c-shift)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func readReport(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestDataLabelsTestnet: 'dpadmm testnet' takes 0/1, 1/2, -1/1 and text labels; all
// give the same model (the larger label, or "yes", is +1), and the weight of the feature
// that rises with the positive class is positive.
func TestDataLabelsTestnet(t *testing.T) {
	dir := t.TempDir()
	var models []string
	for k, c := range [][2]string{{"0", "1"}, {"1", "2"}, {"-1", "1"}, {"no", "yes"}, {"0.0", "1."}} {
		data := labelled(t, dir, fmt.Sprintf("d%d.csv", k), 120, c[0], c[1], 0, 1)
		rep := filepath.Join(dir, fmt.Sprintf("r%d.json", k))
		var out, errb bytes.Buffer
		if code := run([]string{"testnet", "--data", data, "--nodes", "4", "--hops", "400", "--sigma", "0", "--max-updates", "0",
			"--scale", "standardize+unitball", "--quiet", "--report", rep}, &out, &errb); code != 0 {
			t.Fatalf("labels %v: exit %d: %s", c, code, errb.String())
		}
		m := readReport(t, rep)
		w := m["model"].([]any)
		if acc := m["accuracy"].(float64); acc < 0.8 || w[0].(float64) <= 0 {
			t.Fatalf("labels %v: accuracy %v, model %v", c, acc, w)
		}
		if _, ok := m["rmse"]; ok {
			t.Errorf("logistic report has an RMSE")
		}
		if !strings.Contains(m["scale"].(string), "fitted on the pooled training rows") {
			t.Errorf("report scale %q does not say where the scaling was fitted", m["scale"])
		}
		models = append(models, fmt.Sprint(w))
	}
	for k := range models {
		if models[k] != models[0] {
			t.Fatalf("label encoding %d gives model %s, encoding 0 %s", k, models[k], models[0])
		}
	}
	// --positive chooses the other class: the model flips sign.
	data := filepath.Join(dir, "d0.csv")
	rep := filepath.Join(dir, "flip.json")
	var out, errb bytes.Buffer
	if code := run([]string{"testnet", "--data", data, "--positive", "0", "--nodes", "4", "--hops", "400", "--sigma", "0",
		"--max-updates", "0", "--quiet", "--report", rep}, &out, &errb); code != 0 {
		t.Fatalf("--positive 0: exit %d: %s", code, errb.String())
	}
	if w := readReport(t, rep)["model"].([]any); w[0].(float64) >= 0 {
		t.Fatalf("--positive 0: model %v, want a negative first weight", w)
	}
}

// TestDataLabelsExperiment: 'dpadmm experiment radmm' takes 0/1 labels.
func TestDataLabelsExperiment(t *testing.T) {
	dir := t.TempDir()
	data := labelled(t, dir, "d.csv", 80, "0", "1", 0, 1)
	var out, errb bytes.Buffer
	if code := run([]string{"experiment", "radmm", "--data", data, "--seeds", "1", "--alphas", "2", "--iters", "2",
		"--paper-c", "1", "--out", dir, "--quiet"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "64 train / 16 test rows") {
		t.Errorf("summary: %s", out.String())
	}
}

// TestDataErrorsCLI: data errors through the commands name the file line and give a hint
// with the command's own flags.
func TestDataErrorsCLI(t *testing.T) {
	dir := t.TempDir()
	var quote strings.Builder
	quote.WriteString("y,a,b\n")
	for i := 2; i <= 30; i++ {
		if i == 11 {
			quote.WriteString("1,\"2,3\n")
			continue
		}
		fmt.Fprintf(&quote, "%d,%d,%d\n", i%2, i, i+1)
	}
	files := map[string]string{
		"three.csv": "y,a\n0,1\n1,2\n2,3\n",
		"quote.csv": quote.String(),
		"empty.csv": "y,a,b\n1,2,3\n0,4,\n",
		"semi.csv":  "y;a;b\n1;2.5;3\n0;4;5\n1;1;1\n",
		"text.csv":  "y,a,b\n1,x,3\n0,y,4\n",
		"one.csv":   "y,a\n1,2\n1,3\n",
		"train.svm": "1 1:0.5 4:1\n0 2:1\n1 3:0.2\n0 1:-0.5 2:0.1\n",
		"short.svm": "1 1:0.4\n0 2:0.3\n",
		"long.svm":  "1 1:0.4\n0 6:0.3\n",
		"reg.csv":   "y,a\n1.5,2\n2.5,3\n",
	}
	p := map[string]string{}
	for n, c := range files {
		p[n] = writeFile(t, dir, n, c)
	}
	tn := func(args ...string) []string {
		return append([]string{"testnet", "--nodes", "2", "--hops", "20", "--quiet"}, args...)
	}
	nd := func(args ...string) []string {
		return append([]string{"node", "--run", "x", "--datadir", t.TempDir(), "--profile", "test"}, args...)
	}
	cases := []struct {
		name string
		args []string
		code int
		want []string
	}{
		// Three labels: the walk fits the multinomial loss, the neighbour-exchange
		// algorithms one-vs-rest; the paper's experiments take two classes.
		{"three-labels", tn("--data", p["three.csv"]), 0, nil},
		{"three-labels-gossip", []string{"testnet", "--nodes", "2", "--quiet", "--data", p["three.csv"], "--algo", "radmm", "--test-frac", "0"}, 0, nil},
		{"three-labels-experiment", []string{"experiment", "radmm", "--data", p["three.csv"], "--out", dir}, 1, []string{"three.csv:4:", "--label"}},
		{"three-labels-squared", tn("--data", p["three.csv"], "--loss", "squared", "--test-frac", "0"), 0, nil},
		{"quote", tn("--data", p["quote.csv"]), 1, []string{"quote.csv:11:", "starting on line 11"}},
		{"empty", tn("--data", p["empty.csv"]), 1, []string{"empty.csv:3:", "column 2 (b)", "empty"}},
		{"semicolon", tn("--data", p["semi.csv"]), 1, []string{"semi.csv:1:", `--delimiter ";"`}},
		{"semicolon-delimiter", tn("--data", p["semi.csv"], "--delimiter", ";", "--test-frac", "0"), 0, nil},
		{"text-node", nd("--data", p["text.csv"]), 1, []string{"text.csv:2:", "--categorical auto"}},
		{"categorical-node-flag", nd("--data", p["text.csv"], "--categorical", "auto", "--scale", "standardize"), 2, []string{"--scale-file"}},
		{"one-class", tn("--data", p["one.csv"]), 1, []string{"one.csv", "--positive"}},
		{"positive-squared", tn("--data", p["reg.csv"], "--loss", "squared", "--positive", "1"), 2, []string{"--positive applies to the logistic loss"}},
		{"libsvm-test-fewer-features", tn("--data", p["train.svm"], "--test", p["short.svm"], "--report", filepath.Join(dir, "svm.json")), 0, nil},
		{"libsvm-test-more-features", tn("--data", p["train.svm"], "--test", p["long.svm"]), 1, []string{"long.svm:2:", "feature index 6", "4 features"}},
		{"bad-delimiter", tn("--delimiter", "ab", "--data", p["semi.csv"]), 2, []string{"--delimiter"}},
		{"node-scale-standardize", nd("--data", p["train.svm"], "--scale", "standardize"), 2, []string{"--scale-file", "this node's own rows"}},
		{"node-scale-rownorm", nd("--data", p["train.svm"], "--scale", "rownorm"), 2, []string{"--scale-file"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(c.args, &out, &errb)
			if code != c.code {
				t.Fatalf("exit %d, want %d: %s", code, c.code, errb.String())
			}
			for _, w := range c.want {
				if !strings.Contains(errb.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, errb.String())
				}
			}
		})
	}
	m := readReport(t, filepath.Join(dir, "svm.json"))
	if m["dims"].(float64) != 5 || m["test_rows"].(float64) != 2 { // 4 features and the intercept
		t.Fatalf("LIBSVM test file: dims %v test rows %v", m["dims"], m["test_rows"])
	}
}

// TestDataRegressionMetrics: a squared-loss testnet reports RMSE and R^2 of its model on
// the test file, equal to a computation from the report's model and the file.
func TestDataRegressionMetrics(t *testing.T) {
	dir := t.TempDir()
	gen := func(name string, n, off int) (string, [][2]float64, []float64) {
		var b strings.Builder
		b.WriteString("y,a,b\n")
		var xs [][2]float64
		var ys []float64
		for i := off; i < off+n; i++ {
			a, c := math.Sin(0.9*float64(i)), math.Cos(1.7*float64(i))
			y := 0.8*a - 0.5*c + 0.1*math.Sin(5.1*float64(i))
			fmt.Fprintf(&b, "%v,%v,%v\n", y, a, c)
			xs, ys = append(xs, [2]float64{a, c}), append(ys, y)
		}
		return writeFile(t, dir, name, b.String()), xs, ys
	}
	train, _, _ := gen("train.csv", 60, 0)
	test, xs, ys := gen("test.csv", 30, 100)
	rep := filepath.Join(dir, "r.json")
	var out, errb bytes.Buffer
	if code := run([]string{"testnet", "--data", train, "--test", test, "--loss", "squared", "--scale", "none", "--nodes", "3",
		"--hops", "600", "--sigma", "0", "--max-updates", "0", "--gamma", "1", "--l2", "1e-3", "--report", rep}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	m := readReport(t, rep)
	w := m["model"].([]any)
	// The report's scaling: the intercept and the target's centre and scale (fitted on the
	// pooled training targets), applied by hand.
	sc := m["scaling"].(map[string]any)
	if sc["intercept"] != consensus.DefaultIntercept || !(sc["target_scale"].(float64) > 0) || len(w) != 3 {
		t.Fatalf("scaling %v, model %v: want an intercept and a target scaling", sc, w)
	}
	c, h := sc["target_center"].(float64), sc["target_scale"].(float64)
	ic := consensus.DefaultIntercept
	f := math.Sqrt(1 - ic*ic)
	res, mean, tot := 0.0, 0.0, 0.0
	for _, y := range ys {
		mean += y / float64(len(ys))
	}
	for i, x := range xs {
		mg := (x[0]*w[0].(float64)+x[1]*w[1].(float64))*f + w[2].(float64)*ic
		r := c + h*mg - ys[i]
		res += r * r
		tot += (ys[i] - mean) * (ys[i] - mean)
	}
	rmse, r2 := math.Sqrt(res/float64(len(ys))), 1-res/tot
	if math.Abs(m["rmse"].(float64)-rmse) > 1e-12 || math.Abs(m["r2"].(float64)-r2) > 1e-12 {
		t.Fatalf("report rmse %v r2 %v, want %v %v", m["rmse"], m["r2"], rmse, r2)
	}
	if _, ok := m["train_rmse"].(float64); !ok {
		t.Fatalf("no train_rmse in %v", m)
	}
	if r2 < 0.5 || !strings.Contains(out.String(), fmt.Sprintf("test RMSE %.6g R^2 %.4f", rmse, r2)) {
		t.Fatalf("R^2 %v; summary:\n%s", r2, out.String())
	}
	if _, ok := m["accuracy"]; ok {
		t.Fatal("squared-loss report has an accuracy")
	}
}

// TestDataScaleSameOnEveryNode: two nodes with very different shards get the same
// scaling: unitball by default (no parameter), the file's numbers with --scale-file;
// their config hashes agree, and differ from a node with other numbers.
func TestDataScaleSameOnEveryNode(t *testing.T) {
	dir := t.TempDir()
	a := labelled(t, dir, "a.csv", 40, "0", "1", 0, 1)
	b := labelled(t, dir, "b.csv", 50, "0", "1", 7, 20) // shifted and stretched
	sf := writeFile(t, dir, "scale.json", `{"kind":"standardize+unitball","mean":[0.5,-1],"std":[4,2]}`)
	other := writeFile(t, dir, "other.json", `{"kind":"standardize+unitball","mean":[0.5,-1],"std":[4,3]}`)
	hash := func(ld *loadedData) string {
		c := node.Config{
			Run: "r", Data: ld.train, Scaling: ld.scaler,
			Training: node.Training{Problem: consensus.Problem{Loss: consensus.Logistic}},
		}
		return c.RunConfig().Hash()
	}
	for _, extra := range [][]string{nil, {"--scale-file", sf}} {
		la, err := loadFlags(nodeData, loadRequest{loss: consensus.Logistic}, append([]string{"--data", a}, extra...)...)
		if err != nil {
			t.Fatal(err)
		}
		lb, err := loadFlags(nodeData, loadRequest{loss: consensus.Logistic}, append([]string{"--data", b}, extra...)...)
		if err != nil {
			t.Fatal(err)
		}
		ja, _ := json.Marshal(la.scaler)
		jb, _ := json.Marshal(lb.scaler)
		if string(ja) != string(jb) || hash(la) != hash(lb) {
			t.Fatalf("%v: scalers %s and %s, hashes %s %s", extra, ja, jb, hash(la), hash(lb))
		}
		// Every row as computed by hand: standardised with the file's numbers (when
		// given), then divided by max(1, norm).
		raw, _ := consensus.Load(b, consensus.LoadOptions{Binary: true})
		for i := 0; i < raw.Rows; i++ {
			x := append([]float64(nil), raw.Row(i)...)
			if extra != nil {
				x[0], x[1] = (x[0]-0.5)/4, (x[1]+1)/2
			}
			// With the intercept (on by default): [sqrt(1-c^2) x, c].
			ic := consensus.DefaultIntercept
			n := math.Max(1, math.Hypot(x[0], x[1])) / math.Sqrt(1-ic*ic)
			got := lb.train.Row(i)
			if len(got) != 3 || math.Abs(got[0]-x[0]/n) > 1e-12 || math.Abs(got[1]-x[1]/n) > 1e-12 || got[2] != ic {
				t.Fatalf("%v: row %d scaled to %v, want %v", extra, i, got, []float64{x[0] / n, x[1] / n, ic})
			}
		}
	}
	lo, err := loadFlags(nodeData, loadRequest{loss: consensus.Logistic}, "--data", a, "--scale-file", other)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := loadFlags(nodeData, loadRequest{loss: consensus.Logistic}, "--data", a, "--scale-file", sf)
	if err != nil {
		t.Fatal(err)
	}
	if hash(lo) == hash(ls) {
		t.Fatal("nodes with different scale files have the same config hash")
	}
	// A node never fits a data-dependent scaling on its own rows.
	if _, err := loadFlags(nodeData, loadRequest{loss: consensus.Logistic}, "--data", a, "--scale", "standardize"); err == nil ||
		!strings.Contains(err.Error(), "--scale-file") {
		t.Fatalf("--scale standardize on a node: %v", err)
	}
	// On the embedded data (public) a node may fit, on the whole of it (runNode takes its
	// --shard afterwards), so nodes holding different shards get the same numbers: those
	// of the full data set.
	full, err := consensus.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	want, err := consensus.FitScaler(full, consensus.ScaleStandardizeUnitBall)
	if err != nil {
		t.Fatal(err)
	}
	want.Intercept = consensus.DefaultIntercept
	le, err := loadFlags(nodeData, loadRequest{loss: consensus.Logistic}, "--data", "embedded", "--scale", "standardize+unitball")
	if err != nil {
		t.Fatal(err)
	}
	if le.scaler.Fingerprint() != want.Fingerprint() || le.train.Rows != full.Rows {
		t.Fatalf("embedded standardize+unitball %+v on %d rows, want the full data's %+v", le.scaler, le.train.Rows, want)
	}
	// A scale file of the wrong dimension, or of another kind than --scale, is refused.
	bad := writeFile(t, dir, "bad.json", `{"kind":"standardize","mean":[0],"std":[1]}`)
	if _, err := loadFlags(nodeData, loadRequest{loss: consensus.Logistic}, "--data", a, "--scale-file", bad); err == nil ||
		!strings.Contains(err.Error(), "the data has 2 features") {
		t.Fatalf("scale file of 1 feature: %v", err)
	}
	if _, err := loadFlags(nodeData, loadRequest{loss: consensus.Logistic}, "--data", a, "--scale", "unitball", "--scale-file", sf); err == nil ||
		!strings.Contains(err.Error(), "holds a standardize+unitball scaling") {
		t.Fatalf("--scale and --scale-file disagree: %v", err)
	}
	// The simulators may fit, and --scale-out writes what they fitted in the file format.
	out := filepath.Join(dir, "fitted.json")
	ld, err := loadFlags(testnetData, loadRequest{loss: consensus.Logistic}, "--data", a, "--scale", "standardize", "--test-frac", "0", "--scale-out", out)
	if err != nil {
		t.Fatal(err)
	}
	back, err := consensus.LoadScaler(out, 2)
	if err != nil || back.Fingerprint() != ld.scaler.Fingerprint() {
		t.Fatalf("--scale-out: %v, %+v vs %+v", err, back, ld.scaler)
	}
}

// TestDataNodeModels: three 'dpadmm node --algo radmm' members read non-iid shards with 0/1
// labels and one --scale-file; every model.json records the same scaling, and 'account
// models --data' evaluates the averaged model with it (never fitted on the test file),
// matching a computation by hand; a scaling that differs from the run's is refused.
func TestDataNodeModels(t *testing.T) {
	const n = 3
	dir := t.TempDir()
	scaleFile := writeFile(t, dir, "scale.json", `{"kind":"standardize+unitball","mean":[1,-2],"std":[3,2]}`)
	shards := make([]string, n)
	total := 0
	for i := range shards {
		rows := 30 + 10*i
		shards[i] = labelled(t, dir, fmt.Sprintf("s%d.csv", i), rows, "0", "1", float64(3*i), float64(1+4*i))
		total += rows
	}
	dirs := make([]string, n)
	ports := make([]int, n)
	sf := node.StaticFile{Run: "gdata", TotalRows: total}
	for i := range dirs {
		dirs[i] = t.TempDir()
		id, err := store.DataDirPeerID(dirs[i])
		if err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
		sf.Members = append(sf.Members, node.StaticMember{ID: id.String(), Addrs: []string{fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", ports[i])}})
	}
	b, _ := json.Marshal(sf)
	static := writeFile(t, dir, "static.json", string(b))
	outs := make([]bytes.Buffer, n)
	errs := make([]syncBuf, n)
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		args := []string{"node", "--run", "gdata", "--algo", "radmm", "--data", shards[i], "--scale-file", scaleFile,
			"--iters", "6", "--alpha", "2", "--paper-c", "1", "--l2", "0.01", "--profile", "test", "--no-fsync", "--insecure-testnet", "--seed", "5",
			"--barrier-timeout", "20s", "--datadir", dirs[i], "--static", static, "--listen", fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", ports[i])}
		wg.Add(1)
		go func() { defer wg.Done(); codes[i] = run(args, &outs[i], &errs[i]) }()
	}
	wg.Wait()
	ms := make([]node.RADMMModel, n)
	for i := 0; i < n; i++ {
		if codes[i] != 0 {
			t.Fatalf("node %d: exit %d: %s", i, codes[i], errs[i].String())
		}
		ms[i] = readModelFile(t, filepath.Join(dirs[i], store.ModelFile))
		sc := ms[i].Scaling
		if sc == nil || sc.Kind != consensus.ScaleStandardizeUnitBall || fmt.Sprint(sc.Mean, sc.Std) != "[1 -2] [3 2]" {
			t.Fatalf("node %d: model.json scaling %+v", i, sc)
		}
		if ms[i].ConfigHash != ms[0].ConfigHash {
			t.Fatalf("node %d: config hash %s, node 0 %s", i, ms[i].ConfigHash, ms[0].ConfigHash)
		}
	}
	// The evaluation set: another distribution (its own standardisation would differ).
	test := labelled(t, dir, "test.csv", 50, "0", "1", -4, 9)
	code, out, errOut := runModels("--json", "--data", test, dirs[0], dirs[1], dirs[2])
	if code != 0 {
		t.Fatalf("account models: exit %d: %s", code, errOut)
	}
	var r modelsReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	// By hand: f_bar, the file's standardisation, unitball, labels 0 -> -1 and 1 -> +1.
	avg := make([]float64, 3) // two features and the intercept
	for _, m := range ms {
		for j, v := range m.Model {
			avg[j] += v / n
		}
	}
	raw, err := os.ReadFile(test)
	if err != nil {
		t.Fatal(err)
	}
	ok, loss, rows := 0, 0.0, 0
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n")[1:] {
		var y, x0, x1 float64
		if _, err := fmt.Sscanf(strings.ReplaceAll(line, ",", " "), "%g %g %g", &y, &x0, &x1); err != nil {
			t.Fatal(err)
		}
		y = 2*y - 1
		x0, x1 = (x0-1)/3, (x1+2)/2
		nrm := math.Max(1, math.Hypot(x0, x1))
		ic := consensus.DefaultIntercept
		m := (x0*avg[0]+x1*avg[1])/nrm*math.Sqrt(1-ic*ic) + avg[2]*ic
		if (m >= 0) == (y > 0) {
			ok++
		}
		loss += math.Log1p(math.Exp(-y * m))
		rows++
	}
	e := r.Eval
	if e == nil || e.Rows != rows || e.Accuracy == nil || math.Abs(*e.Accuracy-float64(ok)/float64(rows)) > 1e-12 ||
		math.Abs(e.MeanLoss-loss/float64(rows)) > 1e-9 || !strings.Contains(e.Scale, "the run's") {
		t.Fatalf("evaluation %+v, want accuracy %v mean loss %v with the run's scaling", e, float64(ok)/float64(rows), loss/float64(rows))
	}
	if r.Scaling == nil || r.Scaling.Fingerprint() != ms[0].Scaling.Fingerprint() {
		t.Fatalf("report scaling %+v", r.Scaling)
	}
	// A data-dependent scaling is never fitted on the evaluation data; another scaling
	// than the run's is refused.
	code, _, errOut = runModels("--data", test, "--scale", "standardize", dirs[0], dirs[1], dirs[2])
	if code != 2 || !strings.Contains(errOut, "--scale-file") || !strings.Contains(errOut, "evaluation data") {
		t.Fatalf("--scale standardize: exit %d: %s", code, errOut)
	}
	code, _, errOut = runModels("--data", test, "--scale", "unitball", dirs[0], dirs[1], dirs[2])
	if code != 1 || !strings.Contains(errOut, "differs from the run's") {
		t.Fatalf("--scale unitball: exit %d: %s", code, errOut)
	}
	code, _, errOut = runModels("--data", test, "--scale-file", scaleFile, dirs[0], dirs[1], dirs[2])
	if code != 0 {
		t.Fatalf("--scale-file with the run's numbers: exit %d: %s", code, errOut)
	}
	// Squared loss (the files rewritten to record it): RMSE and R^2 by hand.
	reg := writeFile(t, dir, "reg.csv", "y,a,b\n0.5,1,2\n-0.25,4,-2\n1.5,-2,0\n")
	var sq []string
	for i, m := range ms {
		m.Loss = "squared"
		sq = append(sq, writeModelFile(t, filepath.Join(dir, fmt.Sprintf("sq%d.json", i)), m))
	}
	code, out, errOut = runModels(append([]string{"--json", "--data", reg}, sq...)...)
	if code != 0 {
		t.Fatalf("squared: exit %d: %s", code, errOut)
	}
	var rs modelsReport
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatal(err)
	}
	ys := []float64{0.5, -0.25, 1.5}
	xs := [][2]float64{{1, 2}, {4, -2}, {-2, 0}}
	res, mean, tot := 0.0, (0.5-0.25+1.5)/3, 0.0
	for i, x := range xs {
		x0, x1 := (x[0]-1)/3, (x[1]+2)/2
		nrm := math.Max(1, math.Hypot(x0, x1))
		ic := consensus.DefaultIntercept
		d := (x0*avg[0]+x1*avg[1])/nrm*math.Sqrt(1-ic*ic) + avg[2]*ic - ys[i]
		res += d * d
		tot += (ys[i] - mean) * (ys[i] - mean)
	}
	if ev := rs.Eval; ev == nil || ev.RMSE == nil || ev.R2 == nil || ev.Accuracy != nil ||
		math.Abs(*ev.RMSE-math.Sqrt(res/3)) > 1e-12 || math.Abs(*ev.R2-(1-res/tot)) > 1e-12 {
		t.Fatalf("squared evaluation %+v, want rmse %v r2 %v", rs.Eval, math.Sqrt(res/3), 1-res/tot)
	}
	code, out, _ = runModels(append([]string{"--data", reg}, sq...)...)
	if code != 0 || !strings.Contains(out, "RMSE") || !strings.Contains(out, "R^2") {
		t.Fatalf("squared text output: exit %d\n%s", code, out)
	}
}

// TestSchemaSharedDefaults: testnet and node scale alike by default: with the same
// --schema both take its ranges (the same scaler and the same rows), on the embedded data
// both fit the whole public set, and on a file without a schema both use unitball (the
// simulator warning that the columns' magnitudes differ). The schema's hash enters a
// node's configuration hash.
func TestSchemaSharedDefaults(t *testing.T) {
	schema := "../../examples/wine.schema.json"
	data := "../../examples/wine.csv"
	lt, err := loadFlags(testnetData, loadRequest{loss: consensus.Logistic, multiclass: true}, "--data", data, "--label", "class", "--schema", schema, "--test-frac", "0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := loadFlags(nodeData, loadRequest{loss: consensus.Logistic, multiclass: true}, "--data", data, "--schema", schema)
	if err != nil {
		t.Fatal(err)
	}
	if lt.scaler.Fingerprint() != ln.scaler.Fingerprint() || lt.scaler.Kind != consensus.ScaleStandardizeUnitBall || ln.train.NumClasses() != 3 {
		t.Fatalf("testnet scaler %s, node %s", describeScaler(lt.scaler), describeScaler(ln.scaler))
	}
	for i := range lt.train.X {
		if lt.train.X[i] != ln.train.X[i] {
			t.Fatalf("value %d: testnet %v, node %v", i, lt.train.X[i], ln.train.X[i])
		}
	}
	et, err := loadFlags(testnetData, loadRequest{loss: consensus.Logistic}, "--data", "embedded")
	if err != nil {
		t.Fatal(err)
	}
	en, err := loadFlags(nodeData, loadRequest{loss: consensus.Logistic}, "--data", "embedded")
	if err != nil {
		t.Fatal(err)
	}
	if et.scaler.Fingerprint() != en.scaler.Fingerprint() || !strings.Contains(et.scaling, "whole public embedded data") {
		t.Fatalf("embedded: testnet %s (%s), node %s", describeScaler(et.scaler), et.scaling, describeScaler(en.scaler))
	}
	ut, err := loadFlags(testnetData, loadRequest{loss: consensus.Logistic, multiclass: true}, "--data", data, "--label", "class")
	if err != nil {
		t.Fatal(err)
	}
	if ut.scaler.Kind != consensus.ScaleUnitBall || len(ut.warnings) != 1 || !strings.Contains(ut.warnings[0], "proline") {
		t.Fatalf("no schema: scaler %s, warnings %q", describeScaler(ut.scaler), ut.warnings)
	}
	// The hash: two nodes with other schemas differ.
	cfg := func(ld *loadedData) node.Config {
		c := node.Config{Run: "r", Data: ld.train, Scaling: ld.scaler, Schema: ld.schema.Hash(),
			Training: node.Training{Problem: consensus.Problem{Loss: consensus.Multinomial}}}
		return c
	}
	other := writeFile(t, t.TempDir(), "s.json", strings.Replace(readText(t, schema), `"max": 15`, `"max": 16`, 1))
	lo, err := loadFlags(nodeData, loadRequest{loss: consensus.Logistic, multiclass: true}, "--data", data, "--schema", other)
	if err != nil {
		t.Fatal(err)
	}
	a, b := cfg(ln), cfg(lo)
	if d := a.RunConfig().Diff(b.RunConfig()); !strings.Contains(strings.Join(d, " "), "--schema") {
		t.Fatalf("schemas differing in one range: diff %v", d)
	}
}

func readText(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestTestFileByName: a --test CSV is read by the names of its header: the same columns in
// another order score the same, and other names are refused with both lists named.
func TestTestFileByName(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile("../../examples/test.csv")
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var rev, renamed bytes.Buffer
	wr, wn := csv.NewWriter(&rev), csv.NewWriter(&renamed)
	for i, r := range recs {
		out := append([]string(nil), r...)
		slices.Reverse(out)
		wr.Write(out)
		if i == 0 {
			r = append([]string(nil), r...)
			r[3] = "x3"
		}
		wn.Write(r)
	}
	wr.Flush()
	wn.Flush()
	revPath, renPath := filepath.Join(dir, "rev.csv"), filepath.Join(dir, "renamed.csv")
	os.WriteFile(revPath, rev.Bytes(), 0o644)
	os.WriteFile(renPath, renamed.Bytes(), 0o644)
	args := []string{"testnet", "--data", "../../examples/a.csv", "--label", "label", "--nodes", "3", "--hops", "2000", "--sigma", "0", "--max-updates", "0", "--scale", "standardize", "--json", "--quiet"}
	acc := func(test string) float64 {
		r := runJSON(t, append(args, "--test", test)...).(map[string]any)
		return r["accuracy"].(float64)
	}
	a, r := acc("../../examples/test.csv"), acc(revPath)
	if a != r || a < 0.8 {
		t.Fatalf("test accuracy %v with the columns in order, %v reversed", a, r)
	}
	code, _, e := runCmd(append(args, "--test", renPath)...)
	if code != 1 || !strings.Contains(e, `missing ["mean_perimeter"]`) || !strings.Contains(e, `["x3"]`) {
		t.Fatalf("renamed column: exit %d: %s", code, e)
	}
}
