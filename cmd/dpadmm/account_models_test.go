package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/node"
	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/testnet"
	"github.com/dpadmm/dpadmm/testnet/sim"
)

// accountModelsRun runs a small R-ADMM run over four full nodes (node.Node.RunRADMM on
// loopback) and returns the data directory of each, the options and the training data.
func accountModelsRun(t *testing.T) ([]string, sim.GossipOptions) {
	t.Helper()
	d, _ := consensus.SyntheticLogistic(150, 4, 3, 5)
	sc, err := consensus.FitScaler(d, consensus.ScaleRowNorm)
	if err != nil {
		t.Fatal(err)
	}
	o := sim.GossipOptions{Train: sc.Apply(d), Data: "synthetic", Nodes: 4, Algo: "radmm", Graph: "er:0.5", Iters: 10, Alpha: 2,
		Eta: 1, Gamma: 0.5, C: 5, Seed: 8, Problem: consensus.Problem{Loss: consensus.Logistic, Reg: consensus.Regularizer{L2: 0.01}}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	if _, err := testnet.RunGossipNodes(ctx, o, "am-test", dir, 10*time.Second, nil); err != nil {
		t.Fatal(err)
	}
	dirs := make([]string, o.Nodes)
	for i := range dirs {
		dirs[i] = filepath.Join(dir, fmt.Sprintf("node-%d", i))
	}
	return dirs, o
}

// readModelFile decodes a model.json independently of the code under test.
func readModelFile(t *testing.T, path string) node.RADMMModel {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m node.RADMMModel
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func writeModelFile(t *testing.T, path string, m node.RADMMModel) string {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func runModels(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(append([]string{"account", "models"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func closeTo(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Max(1, math.Abs(b)) }

// TestAccountModels: the average, deviation and network figure of three real model.json
// files against an independent computation and against the simulator of the same run;
// --out, --data, --allow-missing, a member without a guarantee, and a table of bad inputs.
func TestAccountModels(t *testing.T) {
	dirs, o := accountModelsRun(t)
	files := make([]string, len(dirs))
	ms := make([]node.RADMMModel, len(dirs))
	for i, d := range dirs {
		files[i] = filepath.Join(d, store.ModelFile)
		ms[i] = readModelFile(t, files[i])
	}
	dims := ms[0].Dims
	mean := func(idx ...int) []float64 {
		avg := make([]float64, dims)
		for j := 0; j < dims; j++ {
			for _, i := range idx {
				avg[j] += ms[i].Model[j] / float64(len(idx))
			}
		}
		return avg
	}
	N := len(files)
	all := make([]int, N)
	for i := range all {
		all[i] = i
	}
	want := mean(all...)
	// rest is every file but the last one.
	rest := func(extra ...string) []string { return append(append([]string{}, files[:N-1]...), extra...) }
	wantDev := 0.0
	for _, m := range ms {
		s := 0.0
		for j, v := range m.Model {
			s += (v - want[j]) * (v - want[j])
		}
		wantDev = math.Max(wantDev, math.Sqrt(s))
	}
	wantEps, minEps := math.Inf(-1), math.Inf(1)
	for _, m := range ms {
		minEps = math.Min(minEps, float64(m.Privacy.Epsilon))
		if !m.Privacy.ConditionsHold || !m.Privacy.Epsilon.Bounded() {
			t.Fatalf("node %d has no guarantee in this run: %+v", m.Index, m.Privacy)
		}
		wantEps = math.Max(wantEps, float64(m.Privacy.Epsilon))
	}
	if minEps == wantEps {
		t.Fatalf("every member has epsilon %v: the maximum is not tested", wantEps)
	}
	sim, err := sim.RunGossip(o)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("json", func(t *testing.T) {
		// Files in any order, as a directory or a file.
		code, out, errs := runModels(append([]string{"--json", dirs[N-1]}, rest()...)...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		var r modelsReport
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		if len(r.Model) != dims || r.Partial || len(r.Missing) != 0 || fmt.Sprint(r.Averaged) != fmt.Sprint(all) {
			t.Fatalf("report %+v", r)
		}
		for j := range want {
			if !closeTo(r.Model[j], want[j]) || !closeTo(r.Model[j], sim.Model[j]) {
				t.Fatalf("f_bar %v, independent %v, simulator %v", r.Model, want, sim.Model)
			}
		}
		if !closeTo(r.MaxDeviation, wantDev) || !closeTo(r.MaxDeviation, sim.MaxDeviation) {
			t.Fatalf("deviation %v, independent %v, simulator %v", r.MaxDeviation, wantDev, sim.MaxDeviation)
		}
		g := r.Privacy
		if float64(g.Epsilon) != wantEps || !g.ConditionsHold || g.Theorem != ms[0].Privacy.Theorem || g.Reason != "" || len(g.FailingNodes) != 0 {
			t.Fatalf("network figure %+v, want epsilon %v", g, wantEps)
		}
		if float64(ms[g.WorstNode].Privacy.Epsilon) != wantEps || !closeTo(float64(g.Epsilon), float64(sim.Gossip.Epsilon)) {
			t.Fatalf("worst node %d, simulator network epsilon %v, got %v", g.WorstNode, sim.Gossip.Epsilon, g.Epsilon)
		}
		for i, n := range r.PerNode {
			m := ms[i]
			if n.Index != i || n.Peer != m.Peer || n.PeerShort != m.Peer[len(m.Peer)-8:] || n.Epsilon != m.Privacy.Epsilon ||
				n.StaleUses != len(m.Stale) || n.Inexact != m.Inexact {
				t.Fatalf("row %d: %+v, file %+v", i, n, m)
			}
		}
	})

	t.Run("text", func(t *testing.T) {
		code, out, errs := runModels(dirs...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		for _, s := range []string{
			"radmm on er:0.5", "largest node deviation", "f_bar: [", "index  peer",
			"privacy: network epsilon " + fmtEps(privacy.Eps(wantEps)), ms[0].Privacy.Theorem, "(hold on every member)",
			ms[1].Peer[len(ms[1].Peer)-8:],
		} {
			if !strings.Contains(out, s) {
				t.Fatalf("output lacks %q:\n%s", s, out)
			}
		}
	})

	t.Run("out-and-data", func(t *testing.T) {
		tmp := t.TempDir()
		outFile := filepath.Join(tmp, "avg.json")
		// The run's own training rows, already scaled (--scale none), label first.
		var csv strings.Builder
		for i := 0; i < o.Train.Rows; i++ {
			csv.WriteString(strconv.FormatFloat(o.Train.Y[i], 'g', -1, 64))
			for _, v := range o.Train.Row(i) {
				csv.WriteString("," + strconv.FormatFloat(v, 'g', -1, 64))
			}
			csv.WriteString("\n")
		}
		dataFile := filepath.Join(tmp, "d.csv")
		if err := os.WriteFile(dataFile, []byte(csv.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, errs := runModels("--json", "--out", outFile, "--data", dataFile, "--scale", "none", files[0], files[1], files[2], files[3])
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		var r modelsReport
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		var am averagedModel
		b, err := os.ReadFile(outFile)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &am); err != nil {
			t.Fatal(err)
		}
		if am.Run != "am-test" || am.Dims != dims || am.Partial || fmt.Sprint(am.Model) != fmt.Sprint(r.Model) {
			t.Fatalf("--out %+v, report model %v", am, r.Model)
		}
		ok, loss := 0, 0.0
		for i := 0; i < o.Train.Rows; i++ {
			m := 0.0
			for j, v := range o.Train.Row(i) {
				m += v * want[j]
			}
			if (m >= 0) == (o.Train.Y[i] > 0) {
				ok++
			}
			loss += math.Log1p(math.Exp(-o.Train.Y[i] * m))
		}
		e := r.Eval
		if e == nil || e.Rows != o.Train.Rows || e.Accuracy == nil || e.Loss != "logistic" ||
			math.Abs(*e.Accuracy-float64(ok)/float64(o.Train.Rows)) > 1e-12 || math.Abs(e.MeanLoss-loss/float64(o.Train.Rows)) > 1e-9 {
			t.Fatalf("evaluation %+v, want accuracy %v mean loss %v", e, float64(ok)/float64(o.Train.Rows), loss/float64(o.Train.Rows))
		}
		if *e.Accuracy < 0.6 {
			t.Fatalf("accuracy %v of the averaged model on its own training data", *e.Accuracy)
		}
		pos := 0
		for _, y := range o.Train.Y {
			if y > 0 {
				pos++
			}
		}
		major := math.Max(float64(pos), float64(o.Train.Rows-pos)) / float64(o.Train.Rows)
		if e.MajorityShare == nil || *e.MajorityShare != major || len(e.Warnings) != 0 {
			t.Fatalf("majority share %v warnings %q, want %v and none", e.MajorityShare, e.Warnings, major)
		}
		// --out carries f_bar's predictor: predict and eval read it, and score as the
		// evaluation above (and as account models without --scale, through the predictor).
		if am.Predictor == nil || fmt.Sprint(am.Predictor.Flat()) != fmt.Sprint(r.Model) {
			t.Fatalf("--out predictor %+v, model %v", am.Predictor, r.Model)
		}
		var eo, ee bytes.Buffer
		if c := run([]string{"eval", "--json", "--data", dataFile, outFile}, &eo, &ee); c != 0 {
			t.Fatalf("eval of --out: exit %d: %s", c, ee.String())
		}
		var er evalReport
		if err := json.Unmarshal(eo.Bytes(), &er); err != nil {
			t.Fatal(err)
		}
		if er.Source != "model with its predictor" || er.Accuracy == nil || *er.Accuracy != *e.Accuracy || *er.MajorityShare != major {
			t.Fatalf("eval of --out: %+v, want accuracy %v", er, *e.Accuracy)
		}
		code, out, errs = runModels("--json", "--data", dataFile, files[0], files[1], files[2], files[3])
		var rp modelsReport
		if code != 0 || json.Unmarshal([]byte(out), &rp) != nil || rp.Eval == nil || rp.Eval.Accuracy == nil || *rp.Eval.Accuracy != *e.Accuracy {
			t.Fatalf("--data through the predictor: exit %d %s: %s", code, errs, out)
		}
		var po, pe bytes.Buffer
		if c := run([]string{"predict", "--model", outFile, "--data", dataFile, "--format", "json"}, &po, &pe); c != 0 || !strings.Contains(po.String(), "predictions") {
			t.Fatalf("predict with --out: exit %d: %s %s", c, pe.String(), po.String())
		}
		// A member's file without a predictor (an earlier version): --out has none, and
		// the text says why.
		var m0 map[string]any
		b, _ = os.ReadFile(files[0])
		json.Unmarshal(b, &m0)
		delete(m0, "predictor")
		b, _ = json.Marshal(m0)
		noPred := filepath.Join(tmp, "nopred.json")
		os.WriteFile(noPred, b, 0o644)
		out2 := filepath.Join(tmp, "avg2.json")
		code, out, errs = runModels("--out", out2, noPred, files[1], files[2], files[3])
		if code != 0 || !strings.Contains(out, "without a predictor: "+noPred+" holds no predictor") {
			t.Fatalf("exit %d %s: %s", code, errs, out)
		}
		if c := run([]string{"predict", "--model", out2, "--data", dataFile}, &po, &pe); c == 0 {
			t.Fatalf("predict with a model file without a predictor succeeded")
		}
		// Members whose predictors disagree (here the classes) give none either.
		m1 := readModelFile(t, files[1])
		m1.Predictor.Classes = []string{m1.Predictor.Classes[1], m1.Predictor.Classes[0]}
		swapped := writeModelFile(t, filepath.Join(tmp, "swapped.json"), m1)
		code, out, errs = runModels("--json", files[0], swapped, files[2], files[3])
		var rw modelsReport
		if code != 0 || json.Unmarshal([]byte(out), &rw) != nil || rw.Predictor != nil || !strings.Contains(rw.PredictorNote, "classes differ") {
			t.Fatalf("swapped classes: exit %d %s: predictor %v note %q", code, errs, rw.Predictor, rw.PredictorNote)
		}
		// The files record the run's loss; a different --loss is refused.
		code, _, errs = runModels("--data", dataFile, "--loss", "squared", files[0], files[1], files[2], files[3])
		if code != 2 || !strings.Contains(errs, "record the logistic loss") {
			t.Fatalf("--loss squared on logistic files: exit %d: %s", code, errs)
		}
		// Files without the loss field (written before it was recorded) take --loss.
		var old []string
		for i, f := range files[:4] {
			var m map[string]any
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &m); err != nil || m["loss"] != "logistic" {
				t.Fatalf("%s: loss field %v (%v)", f, m["loss"], err)
			}
			delete(m, "loss")
			b, _ = json.Marshal(m)
			p := filepath.Join(tmp, fmt.Sprintf("old%d.json", i))
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			old = append(old, p)
		}
		code, out, errs = runModels(append([]string{"--json", "--data", dataFile, "--scale", "none", "--loss", "squared"}, old...)...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		var rs modelsReport
		if err := json.Unmarshal([]byte(out), &rs); err != nil {
			t.Fatal(err)
		}
		want2 := consensus.Problem{Loss: consensus.Squared}.MeanLoss(o.Train, want)
		if rs.Eval == nil || rs.Eval.Accuracy != nil || math.Abs(rs.Eval.MeanLoss-want2) > 1e-9 {
			t.Fatalf("squared evaluation %+v, want mean loss %v", rs.Eval, want2)
		}
		// RMSE = sqrt(2 * mean squared loss), the loss being (1/2) r^2; R^2 = 1 - SS_res/SS_tot.
		ym, sst := 0.0, 0.0
		for _, y := range o.Train.Y {
			ym += y / float64(o.Train.Rows)
		}
		for _, y := range o.Train.Y {
			sst += (y - ym) * (y - ym)
		}
		wantRMSE, wantR2 := math.Sqrt(2*want2), 1-2*want2*float64(o.Train.Rows)/sst
		if rs.Eval.RMSE == nil || rs.Eval.R2 == nil || math.Abs(*rs.Eval.RMSE-wantRMSE) > 1e-9 || math.Abs(*rs.Eval.R2-wantR2) > 1e-9 {
			t.Fatalf("squared evaluation %+v, want RMSE %v and R^2 %v", rs.Eval, wantRMSE, wantR2)
		}
		// A dataset of the wrong dimension.
		bad := filepath.Join(tmp, "bad.csv")
		os.WriteFile(bad, []byte("1,0.1,0.2\n-1,0.3,0.1\n"), 0o644)
		code, _, errs = runModels(append([]string{"--data", bad}, files...)...)
		if code != 1 || !strings.Contains(errs, "3 columns for the model's 4 features") {
			t.Fatalf("exit %d: %s", code, errs)
		}
	})

	t.Run("allow-missing", func(t *testing.T) {
		code, _, errs := runModels(rest()...)
		if code != 1 || !strings.Contains(errs, "members 3 of 4 have no file") || !strings.Contains(errs, "--allow-missing") {
			t.Fatalf("exit %d: %s", code, errs)
		}
		code, out, errs := runModels(append([]string{"--json", "--allow-missing"}, rest()...)...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		var r modelsReport
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		w2 := mean(all[:N-1]...)
		for j := range w2 {
			if !closeTo(r.Model[j], w2[j]) {
				t.Fatalf("partial f_bar %v, want %v", r.Model, w2)
			}
		}
		g := r.Privacy
		if !r.Partial || fmt.Sprint(r.Missing) != "[3]" || g.Epsilon.Bounded() || g.ConditionsHold ||
			g.GivenMax != max(ms[0].Privacy.Epsilon, ms[1].Privacy.Epsilon, ms[2].Privacy.Epsilon) || !strings.Contains(g.Reason, "members 3 missing") {
			t.Fatalf("partial report %+v", r)
		}
		_, out, _ = runModels(append([]string{"--allow-missing"}, rest()...)...)
		if !strings.Contains(out, "PARTIAL (--allow-missing): averaged 3 of 4 members") || !strings.Contains(out, "privacy: NO guarantee: members 3 missing") {
			t.Fatalf("partial text:\n%s", out)
		}
	})

	t.Run("member-without-guarantee", func(t *testing.T) {
		m := ms[1]
		m.Privacy.Epsilon, m.Privacy.ConditionsHold, m.Privacy.Reason = privacy.Unbounded, false, "rows not normalised: max ||x|| = 2 > 1"
		f := writeModelFile(t, filepath.Join(t.TempDir(), "m1.json"), m)
		b, err := os.ReadFile(f)
		if err != nil || !strings.Contains(string(b), `"epsilon":null`) {
			t.Fatalf("model.json without guarantee: %s, %v", b, err)
		}
		// Files of earlier builds wrote -1 (model.json) or the largest float64 (reports) for
		// no guarantee: they read the same.
		for _, legacy := range []string{"-1", "1.7976931348623157e+308"} {
			lf := filepath.Join(t.TempDir(), "m1.json")
			if err := os.WriteFile(lf, []byte(strings.Replace(string(b), `"epsilon":null`, `"epsilon":`+legacy, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			code, out, errs := runModels("--json", files[0], lf, files[2], files[3])
			var r modelsReport
			if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Privacy.Epsilon.Bounded() || r.PerNode[1].Epsilon.Bounded() ||
				fmt.Sprint(r.Privacy.FailingNodes) != "[1]" || !strings.Contains(out, `"epsilon": null`) {
				t.Fatalf("legacy %s: exit %d, %s %s", legacy, code, out, errs)
			}
		}
		code, out, errs := runModels("--json", files[0], f, files[2], files[3])
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		var r modelsReport
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		if g := r.Privacy; g.Epsilon.Bounded() || g.ConditionsHold || fmt.Sprint(g.FailingNodes) != "[1]" || g.WorstNode != -1 ||
			g.Reason != "member 1: rows not normalised: max ||x|| = 2 > 1" {
			t.Fatalf("network figure %+v", g)
		}
		_, out, _ = runModels(files[0], f, files[2], files[3])
		if !strings.Contains(out, "privacy: NO guarantee: member 1: rows not normalised") || !strings.Contains(out, ms[0].Privacy.Theorem) {
			t.Fatalf("text:\n%s", out)
		}
	})

	t.Run("bad-input", func(t *testing.T) {
		tmp := t.TempDir()
		mod := func(name string, f func(m *node.RADMMModel)) string {
			m := ms[N-1]
			m.Model = append([]float64(nil), m.Model...)
			f(&m)
			return writeModelFile(t, filepath.Join(tmp, name), m)
		}
		raw := func(name, text string) string {
			p := filepath.Join(tmp, name)
			if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			return p
		}
		orig, err := os.ReadFile(files[N-1])
		if err != nil {
			t.Fatal(err)
		}
		first := strconv.FormatFloat(ms[N-1].Model[0], 'g', -1, 64)
		if !bytes.Contains(orig, []byte(first)) {
			t.Fatalf("model.json does not spell %s", first)
		}
		withCoord := func(name, v string) string {
			return raw(name, strings.Replace(string(orig), first, v, 1))
		}
		withEps := func(name, v string) string {
			return raw(name, epsilonRE.ReplaceAllLiteralString(string(orig), `"epsilon":`+v))
		}
		walk, _ := json.Marshal(node.Model{Run: "am-test", ConfigHash: ms[0].ConfigHash, Peer: ms[N-1].Peer, Index: N - 1, Nodes: N, Dims: dims, Model: ms[N-1].Model})
		emptyDir := t.TempDir()
		cases := []struct {
			name  string
			third string
			want  []string
		}{
			{"wrong hash", mod("hash.json", func(m *node.RADMMModel) { m.ConfigHash = "deadbeef" }), []string{"hash.json", "config hash deadbeef differs"}},
			{"wrong run", mod("run.json", func(m *node.RADMMModel) { m.Run = "other" }), []string{"run.json", `run "other" differs`}},
			{"other members", mod("mem.json", func(m *node.RADMMModel) { m.Members = append([]string{}, m.Members...); m.Members[0] = "x" }), []string{"mem.json", "member list"}},
			{"duplicate index", files[1], []string{"both hold member index 1", files[1]}},
			{"dimension", mod("dim.json", func(m *node.RADMMModel) { m.Dims++; m.Model = append(m.Model, 0) }), []string{"dim.json", "dimension 5 differs"}},
			{"dims vs model", mod("len.json", func(m *node.RADMMModel) { m.Model = m.Model[:2] }), []string{"len.json", "model has 2 coordinates, dims says 4"}},
			{"iterations", mod("it.json", func(m *node.RADMMModel) { m.Iters = 3 }), []string{"it.json", "iteration count 3 differs"}},
			{"index range", mod("idx.json", func(m *node.RADMMModel) { m.Index = 7 }), []string{"idx.json", "index 7 out of range"}},
			{"epsilon", withEps("eps.json", "-3"), []string{"eps.json", "epsilon -3 is negative"}},
			{"epsilon string", withEps("epss.json", `"2"`), []string{"epss.json", "want a number or null"}},
			{"overflowing coordinate", withCoord("inf.json", "1e999"), []string{"inf.json", "not a valid model.json"}},
			{"string coordinate", withCoord("nan.json", `"NaN"`), []string{"nan.json", "not a valid model.json"}},
			{"unreadable", filepath.Join(tmp, "absent.json"), []string{"absent.json", "no such file"}},
			{"dir without model.json", emptyDir, []string{filepath.Join(emptyDir, store.ModelFile), "no such file"}},
			{"not JSON", raw("txt.json", "model: 1,2,3"), []string{"txt.json", "not a valid model.json"}},
			{"truncated", raw("trunc.json", string(orig[:len(orig)/2])), []string{"trunc.json", "not a valid model.json"}},
			{"array", raw("arr.json", "[1,2,3]"), []string{"arr.json", "not a valid model.json"}},
			{"other object", raw("obj.json", `{"hello": 1}`), []string{"obj.json", "not the model.json of a neighbour-exchange run"}},
			{"null", raw("null.json", "null"), []string{"null.json", "not the model.json of a neighbour-exchange run"}},
			{"walk model", raw("walk.json", string(walk)), []string{"walk.json", "not the model.json of a neighbour-exchange run"}},
		}
		for _, c := range cases {
			code, out, errs := runModels(rest(c.third)...)
			if code != 1 || out != "" {
				t.Fatalf("%s: exit %d, stdout %q, stderr %q", c.name, code, out, errs)
			}
			for _, w := range c.want {
				if !strings.Contains(errs, w) {
					t.Fatalf("%s: error %q lacks %q", c.name, errs, w)
				}
			}
		}
		// Usage errors exit 2.
		for _, args := range [][]string{{}, {"--loss", "hinge", files[0]}, {"--scale", "log", files[0]}, {"--label", "y", files[0]},
			{"--positive", "yes", "--loss", "squared", "--data", "x.csv", files[0]}, {"--bogus", files[0]}} {
			if code, _, errs := runModels(args...); code != 2 || errs == "" {
				t.Fatalf("%v: exit %d, stderr %q", args, code, errs)
			}
		}
	})
}

// FuzzAccountModelsDecode: decoding any bytes as a model.json never panics, and what it
// accepts is finite and consistent.
func FuzzAccountModelsDecode(f *testing.F) {
	good, _ := json.Marshal(node.RADMMModel{Run: "r", ConfigHash: "h", Peer: "p", Algo: "radmm", Index: 0, Nodes: 1,
		Members: []string{"p"}, Dims: 2, Model: []float64{1, -2}, Privacy: node.RADMMPriv{PureFigure: privacy.PureFigure{Epsilon: 1, Formula: 1, Theorem: "T"}}})
	for _, s := range []string{string(good), "", "null", "[]", "{}", `{"algo":"radmm","members":["a"],"nodes":1,"index":5}`,
		`{"model":[1e999]}`, `{"dims":-1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeGossipModel(b)
		if err != nil {
			return
		}
		if m.Index < 0 || m.Index >= len(m.Members) || len(m.Model) != m.Dims || m.Dims < 1 {
			t.Fatalf("accepted %+v", m)
		}
		for _, v := range m.Model {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("accepted coordinate %v", v)
			}
		}
	})
}

// epsilonRE matches the key "epsilon" of a compact R-ADMM model.json (its privacy epsilon)
// with its value.
var epsilonRE = regexp.MustCompile(`"epsilon":(null|-?[0-9.e+-]+)`)
