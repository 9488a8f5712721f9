package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/testnet"
	"github.com/dpadmm/dpadmm/testnet/sim"
)

// schemaDoc is the document listing the stable JSON keys.
const schemaDoc = "../../docs/report-schema.md"

// schemaBlocks reads the key blocks of the schema document: fenced blocks with the info
// string "keys NAME", one key per line (first field), by NAME.
func schemaBlocks(t *testing.T) map[string][]string {
	t.Helper()
	f, err := os.Open(schemaDoc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	blocks := map[string][]string{}
	name := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case name == "" && strings.HasPrefix(line, "```keys "):
			name = strings.TrimSpace(strings.TrimPrefix(line, "```keys "))
			if _, dup := blocks[name]; dup || name == "" {
				t.Fatalf("%s: block %q repeated or unnamed", schemaDoc, name)
			}
			blocks[name] = nil
		case name != "" && strings.HasPrefix(line, "```"):
			if len(blocks[name]) == 0 {
				t.Fatalf("%s: block %q lists no key", schemaDoc, name)
			}
			name = ""
		case name != "":
			if fs := strings.Fields(line); len(fs) > 0 {
				blocks[name] = append(blocks[name], fs[0])
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if name != "" {
		t.Fatalf("%s: block %q not closed", schemaDoc, name)
	}
	return blocks
}

// hasPath reports whether v holds the key path p: keys joined by dots, "name[]" an array
// of objects whose every element must hold the rest of the path.
func hasPath(v any, p string) bool {
	if p == "" {
		return true
	}
	head, rest, _ := strings.Cut(p, ".")
	arr := strings.HasSuffix(head, "[]")
	head = strings.TrimSuffix(head, "[]")
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	x, ok := m[head]
	if !ok {
		return false
	}
	if !arr {
		return hasPath(x, rest)
	}
	a, ok := x.([]any)
	if !ok || len(a) == 0 {
		return false
	}
	for _, e := range a {
		if !hasPath(e, rest) {
			return false
		}
	}
	return true
}

func TestSchemaHasPath(t *testing.T) {
	var v any
	if err := json.Unmarshal([]byte(`{"a":{"b":1},"l":[{"x":1},{"x":2,"y":3}],"e":[]}`), &v); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{"a": true, "a.b": true, "a.c": false, "b": false, "l[].x": true,
		"l[].y": false, "l": true, "e[].x": false, "a[].b": false, "a.b.c": false} {
		if got := hasPath(v, p); got != want {
			t.Errorf("hasPath(%q) = %v, want %v", p, got, want)
		}
	}
}

// runJSON runs dpadmm with args, requires exit 0 and returns stdout parsed as JSON.
func runJSON(t *testing.T, args ...string) any {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, errb.String())
	}
	var v any
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatalf("%v: stdout is not JSON: %v\n%s", args, err, out.String())
	}
	return v
}

// readJSONAny parses a JSON file.
func readJSONAny(t *testing.T, path string) any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// writeDatasetCSV writes d as CSV, label first, at full precision.
func writeDatasetCSV(t *testing.T, path string, d *consensus.Dataset) {
	t.Helper()
	var b strings.Builder
	for i := 0; i < d.Rows; i++ {
		fmt.Fprintf(&b, "%.17g", d.Y[i])
		for _, v := range d.Row(i) {
			fmt.Fprintf(&b, ",%.17g", v)
		}
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// gossipNodeDirs runs a small R-ADMM run over full nodes (node.Node.RunRADMM, the
// runtime of 'dpadmm node --algo radmm') and returns their data directories and the
// training data, which it also writes as CSV to dir/train.csv.
func gossipNodeDirs(t *testing.T, dir string) ([]string, *consensus.Dataset) {
	t.Helper()
	d, _ := consensus.SyntheticLogistic(90, 4, 3, 5)
	sc, err := consensus.FitScaler(d, consensus.ScaleRowNorm)
	if err != nil {
		t.Fatal(err)
	}
	train := sc.Apply(d)
	o := sim.GossipOptions{Train: train, Data: "synthetic", Nodes: 3, Algo: "radmm", Graph: "ring", Iters: 4, Alpha: 2,
		Eta: 1, Gamma: 0.5, C: 5, Seed: 2, Problem: consensus.Problem{Loss: consensus.Logistic, Reg: consensus.Regularizer{L2: 0.01}}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nodes := filepath.Join(dir, "gossip")
	if _, err := testnet.RunGossipNodes(ctx, o, "schema-test", nodes, 10*time.Second, nil); err != nil {
		t.Fatal(err)
	}
	dirs := make([]string, o.Nodes)
	for i := range dirs {
		dirs[i] = filepath.Join(nodes, fmt.Sprintf("node-%d", i))
	}
	writeDatasetCSV(t, filepath.Join(dir, "train.csv"), train)
	return dirs, train
}

// TestSchemaKeys: every key listed in docs/report-schema.md is present in the output it
// documents, every block is produced by a command here and every command has a block.
func TestSchemaKeys(t *testing.T) {
	blocks := schemaBlocks(t)
	dir := t.TempDir()
	// The squared loss where the loss does not matter: its reference solve is quick.
	small := []string{"testnet", "--nodes", "5", "--hops", "200", "--json", "--quiet"}
	with := func(a ...string) []string { return append(append([]string(nil), small...), a...) }

	walk := runJSON(t, small...)
	squared := runJSON(t, with("--loss", "squared")...)
	budget := runJSON(t, with("--loss", "squared", "--budget-epsilon", "30", "--coalition", "1,2")...)
	memDir := filepath.Join(dir, "mem")
	mem := runJSON(t, "testnet", "--mem", "--nodes", "3", "--hops", "30", "--loss", "squared", "--dir", memDir, "--json", "--quiet")
	radmm := runJSON(t, "testnet", "--algo", "radmm", "--iters", "6", "--json", "--quiet")

	tracePath := filepath.Join(dir, "trace.jsonl")
	var out, errb bytes.Buffer
	if code := run(with("--loss", "squared", "--trace", tracePath), &out, &errb); code != 0 {
		t.Fatalf("trace: exit %d: %s", code, errb.String())
	}
	gdirs, _ := gossipNodeDirs(t, dir)
	data := filepath.Join(dir, "train.csv")
	models := runJSON(t, append([]string{"account", "models", "--json", "--data", data, "--scale", "none"}, gdirs...)...)

	// A squared-loss model for eval: the walk's report on the embedded data, scored on a
	// CSV of that data with real-valued labels.
	sqReport := filepath.Join(dir, "sq.json")
	if code := run([]string{"testnet", "--nodes", "5", "--hops", "200", "--quiet", "--loss", "squared", "--report", sqReport}, &out, &errb); code != 0 {
		t.Fatalf("squared report: exit %d: %s", code, errb.String())
	}

	outputs := map[string]any{
		"testnet-walk":          walk,
		"testnet-walk-logistic": walk,
		"testnet-walk-squared":  squared,
		"testnet-walk-budget":   budget,
		"testnet-walk-network":  mem,
		"testnet-walk-ls-sgd":   runJSON(t, with("--loss", "squared", "--local-step", "ls-sgd", "--step-size", "0.5", "--nu", "2", "--sample-rate", "0.5")...),
		"testnet-walk-gadmm":    runJSON(t, with("--loss", "squared", "--algo", "walk-gadmm", "--step-size", "0.05", "--beta", "1")...),
		"testnet-radmm":         radmm,
		"account-plan":          runJSON(t, "account", "plan", "--nodes", "10", "--hops", "100", "--clip", "0.1", "--sigma", "1", "--json"),
		"account-trace":         runJSON(t, "account", "trace", tracePath, "--json"),
		"account-subsampled":    runJSON(t, "account", "subsampled", "--q", "0.01", "--noise-multiplier", "4", "--steps", "100", "--json"),
		"account-models":        models,
		"account-models-data":   models,
		"eval-logistic":         runJSON(t, "eval", "--data", data, "--scale", "none", "--json", gdirs[0]),
		"eval-squared":          runJSON(t, "eval", "--data", "embedded", "--json", sqReport),
		"model-walk":            readJSONAny(t, filepath.Join(memDir, "node-1", store.ModelFile)),
		"model-radmm":           readJSONAny(t, filepath.Join(gdirs[1], store.ModelFile)),
		// A JSON list: its keys are written "[].key", the list under the empty key.
		"audit": map[string]any{"": runJSON(t, "audit", "--json", "--trials", "60", "--seed", "3", "--nodes", "8", "--pair-hops", "1", "--final-hops", "3")},
	}
	var names []string
	for name := range blocks {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		v, ok := outputs[name]
		if !ok {
			t.Errorf("%s: block %q: no command in this test produces it", schemaDoc, name)
			continue
		}
		for _, k := range blocks[name] {
			if !hasPath(v, k) {
				t.Errorf("%s: block %q lists %q, the output lacks it", schemaDoc, name, k)
			}
		}
	}
	for name := range outputs {
		if _, ok := blocks[name]; !ok {
			t.Errorf("output %q has no block in %s", name, schemaDoc)
		}
	}
}

// TestSchemaGapFraction: "gap" is a fraction in the JSON of the walk and of R-ADMM,
// (objective - reference) / |reference|, and the human summaries print it in percent.
func TestSchemaGapFraction(t *testing.T) {
	for _, args := range [][]string{
		{"testnet", "--nodes", "5", "--hops", "300", "--loss", "squared", "--report", "-"},
		{"testnet", "--algo", "radmm", "--iters", "6", "--report", "-"},
	} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		var r struct {
			Objective float64 `json:"objective"`
			Reference float64 `json:"reference_objective"`
			Gap       float64 `json:"gap"`
		}
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatalf("%v: stdout is not the JSON report: %v", args, err)
		}
		want := (r.Objective - r.Reference) / math.Abs(r.Reference)
		if !(want > 1e-4) || math.Abs(r.Gap-want) > 1e-12*math.Abs(want) {
			t.Fatalf("%v: gap %v, want the fraction %v (objective %v, reference %v)", args, r.Gap, want, r.Objective, r.Reference)
		}
		pct := fmt.Sprintf("gap %.3g%%", 100*want)
		if !strings.Contains(errb.String(), pct) {
			t.Errorf("%v: the summary on stderr lacks %q:\n%s", args, pct, errb.String())
		}
	}
}

// TestSchemaReportToStdout: --report - and --json put the JSON report, and only it, on
// stdout and the summary on stderr; --report FILE keeps the summary on stdout; --json with
// --report FILE writes both.
func TestSchemaReportToStdout(t *testing.T) {
	file := filepath.Join(t.TempDir(), "r.json")
	base := []string{"testnet", "--nodes", "5", "--loss", "squared"}
	for _, c := range []struct {
		args            []string
		jsonOut, toFile bool
	}{
		{[]string{"--hops", "100", "--report", "-"}, true, false},
		{[]string{"--hops", "100", "--json"}, true, false},
		{[]string{"--hops", "100", "--json", "--report", file}, true, true},
		{[]string{"--hops", "100", "--report", file}, false, true},
		{[]string{"--algo", "radmm", "--iters", "4", "--json"}, true, false},
	} {
		os.Remove(file)
		var out, errb bytes.Buffer
		args := append(append([]string(nil), base...), c.args...)
		if code := run(args, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		var m map[string]any
		isJSON := json.Unmarshal(out.Bytes(), &m) == nil && m["objective"] != nil
		if isJSON != c.jsonOut {
			t.Errorf("%v: stdout JSON %v, want %v:\n%.300s", args, isJSON, c.jsonOut, out.String())
		}
		summaryIn := &out
		if c.jsonOut {
			summaryIn = &errb
		}
		if !strings.Contains(summaryIn.String(), "objective") || !strings.Contains(summaryIn.String(), "gap") {
			t.Errorf("%v: summary missing from the expected stream:\nstdout %.300s\nstderr %.300s", args, out.String(), errb.String())
		}
		_, err := os.Stat(file)
		if (err == nil) != c.toFile {
			t.Errorf("%v: report file written %v, want %v", args, err == nil, c.toFile)
		}
		if c.toFile && c.jsonOut {
			b, _ := os.ReadFile(file)
			if !bytes.Equal(b, out.Bytes()) {
				t.Errorf("%v: the file and stdout differ", args)
			}
		}
	}
}

// TestSchemaOutLearns: a user's CSV without public scaling parameters learns nothing at
// the defaults (its largest column decides every row), and the schema --schema-out
// drafts, with the columns' centers and scales, gives it the model the embedded data
// gets (3 nodes, epsilon 2: 0.96).
func TestSchemaOutLearns(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "bc.csv")
	if err := os.WriteFile(data, consensus.EmbeddedCSV(), 0o644); err != nil {
		t.Fatal(err)
	}
	schema := filepath.Join(dir, "bc.schema.json")
	acc := func(args ...string) float64 {
		t.Helper()
		r := runJSON(t, append([]string{"testnet", "--data", data, "--label", "label", "--nodes", "3", "--json", "--quiet"}, args...)...)
		return r.(map[string]any)["accuracy"].(float64)
	}
	if a := acc("--schema-out", schema); a > 0.7 {
		t.Errorf("without a schema: accuracy %v, want the majority share or so", a)
	}
	if a := acc("--schema", schema); a < 0.93 {
		t.Errorf("with the drafted schema: accuracy %v, want >= 0.93", a)
	}
}
