package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/dpadmm/dpadmm/node"
	"github.com/dpadmm/dpadmm/node/store"
)

func TestTestnetGossipReport(t *testing.T) {
	for _, algo := range []string{"mradmm", "madmm", "admm-dvp"} {
		t.Run(algo, func(t *testing.T) { testGossipReport(t, algo) })
	}
}

func testGossipReport(t *testing.T, algo string) {
	dir := t.TempDir()
	rep := filepath.Join(dir, "r.json")
	curve := filepath.Join(dir, "c.csv")
	var out, errb bytes.Buffer
	args := []string{"testnet", "--algo", algo, "--iters", "40", "--report", rep, "--curve", curve}
	if algo != "admm-dvp" {
		args = append(args, "--eta-growth", "1.05")
	}
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}
	var r struct {
		Algo      string  `json:"algo"`
		Objective float64 `json:"objective"`
		Ref       float64 `json:"reference_objective"`
		Nodes     int     `json:"nodes"`
		Iters     int     `json:"iters"`
		Graph     string  `json:"graph"`
		Gossip    struct {
			Epsilon        float64   `json:"epsilon"`
			PerNode        []float64 `json:"per_node_epsilon"`
			LedgerEpsilon  []float64 `json:"ledger_epsilon"`
			ConditionsHold bool      `json:"conditions_hold"`
			Theorem        string    `json:"theorem"`
		} `json:"gossip_privacy"`
	}
	b, err := os.ReadFile(rep)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if r.Algo != algo || r.Nodes != 5 || r.Iters != 40 || r.Graph != "ring" {
		t.Fatalf("report header: %+v", r)
	}
	if !(r.Objective >= r.Ref) || !r.Gossip.ConditionsHold || !strings.Contains(r.Gossip.Theorem, "Theorem V.1") {
		t.Fatalf("objective %v ref %v, privacy %+v", r.Objective, r.Ref, r.Gossip)
	}
	mx := 0.0
	for i, e := range r.Gossip.PerNode {
		mx = math.Max(mx, e)
		if math.Abs(e-r.Gossip.LedgerEpsilon[i]) > 1e-9*e {
			t.Fatalf("node %d: live %v, from ledger %v", i, e, r.Gossip.LedgerEpsilon[i])
		}
	}
	if len(r.Gossip.PerNode) != 5 || mx != r.Gossip.Epsilon {
		t.Fatalf("network epsilon %v is not the max %v of %v", r.Gossip.Epsilon, mx, r.Gossip.PerNode)
	}
	c, err := os.ReadFile(curve)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(string(c), "\n"); lines < 41 {
		t.Fatalf("curve has %d lines", lines)
	}
	if !strings.Contains(out.String(), "network epsilon") {
		t.Fatalf("summary: %s", out.String())
	}
}

func TestTestnetGossipNoNoiseMatchesOptimum(t *testing.T) {
	dir := t.TempDir()
	rep := filepath.Join(dir, "r.json")
	var out, errb bytes.Buffer
	if code := run([]string{"testnet", "--algo", "admm", "--iters", "300", "--graph", "complete", "--quiet", "--report", rep}, &out, &errb); code != 0 {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}
	var r struct {
		Gap float64 `json:"gap"`
	}
	b, _ := os.ReadFile(rep)
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if !(r.Gap < 1e-3) {
		t.Fatalf("admm without noise: gap %v", r.Gap)
	}
}

func TestTestnetGossipBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "eta.txt")
	if err := os.WriteFile(bad, []byte("1\n-2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--algo", "radmm", "--alpha", "-1"}, "--alpha"},
		{[]string{"--algo", "radmm", "--alpha", "NaN"}, "--alpha"},
		{[]string{"--algo", "radmm", "--iters", "0"}, "--iters"},
		{[]string{"--algo", "mradmm", "--eta-growth", "0.5"}, "--eta-growth"},
		{[]string{"--algo", "walk", "--alpha", "2"}, "--alpha applies to neighbour exchange"},
		{[]string{"--algo", "sgd"}, "unknown --algo"},
		{[]string{"--algo", "mradmm", "--eta-file", bad}, "eta.txt:2"},
		{[]string{"--algo", "radmm", "--l1", "0.1"}, "l1"},
		{[]string{"--algo", "radmm", "--nodes", "1"}, "nodes"},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		code := run(append([]string{"testnet", "--quiet"}, c.args...), &out, &errb)
		if code == 0 {
			t.Fatalf("%v: no error", c.args)
		}
		msg := errb.String()
		if !strings.Contains(msg, c.want) {
			t.Fatalf("%v: error %q does not mention %q", c.args, msg, c.want)
		}
	}
}

// readJSONMap reads a JSON report as a generic map.
func readJSONMap(t *testing.T, path string) map[string]any {
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

// TestTestnetGossipMemMatchesSim: for one seed, --mem (5 libp2p hosts) and --sim give the
// same model and objective exactly (compared as float64 bits from the JSON) and the same
// report keys, --mem adding only "network" (no stale use in a fault-free run).
func TestTestnetGossipMemMatchesSim(t *testing.T) {
	dir := t.TempDir()
	common := []string{"testnet", "--algo", "radmm", "--nodes", "5", "--iters", "20", "--seed", "3", "--quiet"}
	simPath, memPath := filepath.Join(dir, "sim.json"), filepath.Join(dir, "mem.json")
	var out, errb bytes.Buffer
	if code := run(append(common, "--report", simPath), &out, &errb); code != 0 {
		t.Fatalf("sim: exit %d\n%s", code, errb.String())
	}
	if code := run(append(common, "--mem", "--dir", filepath.Join(dir, "nodes"), "--barrier-timeout", "20s", "--report", memPath), &out, &errb); code != 0 {
		t.Fatalf("mem: exit %d\n%s", code, errb.String())
	}
	sim, mem := readJSONMap(t, simPath), readJSONMap(t, memPath)
	sameGossipReport(t, "mem", mem, sim)
	if _, ok := sim["network"]; ok {
		t.Error("sim report has a network section")
	}
	nw, _ := mem["network"].(map[string]any)
	if nw["mode"] != "mem" || nw["hosts"] != 5.0 || nw["stale_uses"] != 0.0 || nw["on_missing"] != "stop" ||
		nw["barrier_timeout_seconds"] != 20.0 || nw["ledger_entries"] != 5.0*21 {
		t.Fatalf("network section %v", nw)
	}
	for i := 0; i < 5; i++ {
		if _, err := os.Stat(filepath.Join(dir, "nodes", fmt.Sprintf("node-%d", i), "ledger")); err != nil {
			t.Errorf("node %d ledger: %v", i, err)
		}
	}
}

// sameGossipReport requires the model, objective, deviation, message count and privacy
// section of a network report to equal the simulator's exactly, and the same keys apart
// from "network".
func sameGossipReport(t *testing.T, mode string, net, sim map[string]any) {
	t.Helper()
	for _, k := range []string{"objective", "max_node_deviation", "messages", "gap"} {
		a, ok1 := net[k].(float64)
		b, ok2 := sim[k].(float64)
		if !ok1 || !ok2 || math.Float64bits(a) != math.Float64bits(b) {
			t.Errorf("%s: %s %v, sim %v", k, mode, net[k], sim[k])
		}
	}
	ms, mm := sim["model"].([]any), net["model"].([]any)
	if len(ms) == 0 || len(ms) != len(mm) {
		t.Fatalf("model lengths: sim %d, %s %d", len(ms), mode, len(mm))
	}
	for j := range ms {
		if math.Float64bits(ms[j].(float64)) != math.Float64bits(mm[j].(float64)) {
			t.Fatalf("model[%d]: %s %v, sim %v", j, mode, mm[j], ms[j])
		}
	}
	for _, k := range []string{"gossip_privacy", "privacy"} {
		if !reflect.DeepEqual(net[k], sim[k]) {
			t.Fatalf("%s: %s %v, sim %v", k, mode, net[k], sim[k])
		}
	}
	for k := range sim {
		if _, ok := net[k]; !ok {
			t.Errorf("%s report lacks %q", mode, k)
		}
	}
	for k := range net {
		if _, ok := sim[k]; !ok && k != "network" {
			t.Errorf("%s report has extra key %q", mode, k)
		}
	}
}

// TestTestnetGossipProcsMatchesSim: --procs (3 node processes: this test binary run as
// dpadmm) gives the simulator's model and objective exactly, for private MR-ADMM.
func TestTestnetGossipProcsMatchesSim(t *testing.T) {
	t.Setenv(asMainEnv, "1")
	dir := t.TempDir()
	common := []string{"testnet", "--algo", "mradmm", "--eta-growth", "1.05", "--nodes", "3", "--iters", "12", "--seed", "2", "--quiet"}
	simPath, procsPath := filepath.Join(dir, "sim.json"), filepath.Join(dir, "procs.json")
	var out, errb bytes.Buffer
	if code := run(append(common, "--report", simPath), &out, &errb); code != 0 {
		t.Fatalf("sim: exit %d\n%s", code, errb.String())
	}
	nodes := filepath.Join(dir, "nodes")
	if code := run(append(common, "--procs", "--dir", nodes, "--barrier-timeout", "20s", "--report", procsPath), &out, &errb); code != 0 {
		t.Fatalf("procs: exit %d\n%s", code, errb.String())
	}
	sim, procs := readJSONMap(t, simPath), readJSONMap(t, procsPath)
	sameGossipReport(t, "procs", procs, sim)
	nw, _ := procs["network"].(map[string]any)
	if nw["mode"] != "procs" || nw["hosts"] != 3.0 || nw["stale_uses"] != 0.0 || nw["ledger_entries"] != 3.0*13 {
		t.Fatalf("network section %v", nw)
	}
	for i := 0; i < 3; i++ {
		for _, f := range []string{"node-%d/ledger", "node-%d/model.json", "node-%d/gossip-journal", "node-%d.csv"} {
			if _, err := os.Stat(filepath.Join(nodes, fmt.Sprintf(f, i))); err != nil {
				t.Errorf("node %d: %v", i, err)
			}
		}
	}

	// The same run with node 1 SIGKILLed after its durable release of iteration 5 and
	// restarted: it resumes from its journal and the report is still the simulator's.
	killPath := filepath.Join(dir, "kill.json")
	if code := run(append(common, "--procs", "--barrier-timeout", "20s", "--kill-at-iter", "5", "--kill-node", "1", "--report", killPath), &out, &errb); code != 0 {
		t.Fatalf("procs with kill: exit %d\n%s", code, errb.String())
	}
	killed := readJSONMap(t, killPath)
	sameGossipReport(t, "procs with kill", killed, sim)
	nw, _ = killed["network"].(map[string]any)
	if nw["restarts"] != 1.0 || nw["stale_uses"] != 0.0 || nw["ledger_entries"] != 3.0*13 {
		t.Fatalf("network section after a kill: %v", nw)
	}
}

// TestTestnetGossipProcsEtaFileMatchesSim: --procs with a per-node penalty file (MR-ADMM,
// one column per node, passed to every node as its own --eta-file and entering the
// config hash the static membership file carries) gives --sim's report exactly.
func TestTestnetGossipProcsEtaFileMatchesSim(t *testing.T) {
	t.Setenv(asMainEnv, "1")
	dir := t.TempDir()
	eta := filepath.Join(dir, "eta.csv")
	// Values without a short decimal form, so that an inexact round trip would show.
	var b strings.Builder
	for k := 1; k <= 4; k++ {
		fmt.Fprintf(&b, "%v,%v,%v\n", 0.1*math.Pow(1.1, float64(k))/3, 0.2*math.Pow(1.07, float64(k)), math.Sqrt(float64(k))/7)
	}
	if err := os.WriteFile(eta, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	common := []string{"testnet", "--algo", "mradmm", "--eta-file", eta, "--nodes", "3", "--iters", "8", "--seed", "5", "--quiet"}
	simPath, procsPath := filepath.Join(dir, "sim.json"), filepath.Join(dir, "procs.json")
	var out, errb bytes.Buffer
	if code := run(append(common, "--report", simPath), &out, &errb); code != 0 {
		t.Fatalf("sim: exit %d\n%s", code, errb.String())
	}
	nodes := filepath.Join(dir, "nodes")
	if code := run(append(common, "--procs", "--dir", nodes, "--barrier-timeout", "20s", "--report", procsPath), &out, &errb); code != 0 {
		t.Fatalf("procs: exit %d\n%s", code, errb.String())
	}
	sameGossipReport(t, "procs", readJSONMap(t, procsPath), readJSONMap(t, simPath))
	var st node.StaticFile
	if b, err := os.ReadFile(filepath.Join(nodes, "static.json")); err != nil || json.Unmarshal(b, &st) != nil || len(st.ConfigHash) != 64 {
		t.Fatalf("static.json: %+v (%v)", st, err)
	}
	for i := 0; i < 3; i++ {
		var m node.RADMMModel
		b, err := os.ReadFile(filepath.Join(nodes, fmt.Sprintf("node-%d", i), store.ModelFile))
		if err != nil || json.Unmarshal(b, &m) != nil {
			t.Fatalf("node %d: model.json: %v", i, err)
		}
		if m.ConfigHash != st.ConfigHash || m.Index != i || m.Guarantee == "" {
			t.Fatalf("node %d: model.json config %s index %d guarantee %q; static.json config %s", i, m.ConfigHash, m.Index, m.Guarantee, st.ConfigHash)
		}
	}
}

func TestTestnetGossipNetworkBadFlags(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--algo", "radmm", "--mem"}, "explicit node count"},
		{[]string{"--algo", "radmm", "--mem", "--nodes", "3", "--on-missing", "retry"}, "--on-missing"},
		{[]string{"--algo", "radmm", "--on-missing", "stale"}, "with --mem"},
		{[]string{"--algo", "walk", "--mem", "--nodes", "3", "--max-wait", "1m"}, "with --mem"},
		{[]string{"--algo", "radmm", "--mem", "--nodes", "3", "--barrier-timeout", "0s"}, "--barrier-timeout"},
		{[]string{"--algo", "radmm", "--mem", "--nodes", "3", "--barrier-timeout", "2s", "--max-wait", "1s"}, "--max-wait"},
		{[]string{"--algo", "radmm", "--mem", "--nodes", "3", "--curve", "c.csv"}, "--curve applies to the simulator"},
		{[]string{"--algo", "radmm", "--mem", "--nodes", "3", "--kill-holder-at", "2"}, "random walk"},
		{[]string{"--algo", "radmm", "--mem", "--nodes", "3", "--kill-at-iter", "2"}, "with --procs"},
		{[]string{"--algo", "radmm", "--procs", "--nodes", "3", "--iters", "10", "--kill-at-iter", "10"}, "--kill-at-iter must be in [1, --iters)"},
		{[]string{"--algo", "radmm", "--procs", "--nodes", "3", "--kill-at-iter", "2", "--kill-node", "3"}, "--kill-node must be in [0, 3)"},
		{[]string{"--algo", "radmm", "--procs", "--nodes", "3", "--kill-node", "1"}, "--kill-node needs --kill-at-iter"},
		{[]string{"--algo", "radmm", "--mem", "--nodes", "3", "--scale", "standardize"}, "norm"},
		{[]string{"--algo", "radmm", "--procs", "--nodes", "3", "--scale", "standardize"}, "norm"},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		code := run(append([]string{"testnet", "--quiet"}, c.args...), &out, &errb)
		if code == 0 {
			t.Fatalf("%v: no error", c.args)
		}
		if msg := errb.String(); !strings.Contains(msg, c.want) {
			t.Fatalf("%v: error %q does not mention %q", c.args, msg, c.want)
		}
	}
}

// TestTestnetGossipPerNodeEtaFile: an eta file with one column per node gives every node
// its own MR-ADMM schedule; the privacy figure of each node follows its own schedule
// (a larger penalty gives a smaller Theorem V.1 term), and a file with the wrong number
// of columns is refused with the file and line.
func TestTestnetGossipPerNodeEtaFile(t *testing.T) {
	dir := t.TempDir()
	eta := filepath.Join(dir, "eta.csv")
	var b strings.Builder
	for k := 1; k <= 10; k++ {
		// node 0 keeps eta = 1, node 4 grows fastest.
		fmt.Fprintf(&b, "1, %g, %g, %g, %g\n", 1+0.1*float64(k), 1+0.2*float64(k), 1+0.3*float64(k), 1+0.4*float64(k))
	}
	if err := os.WriteFile(eta, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	rep := filepath.Join(dir, "r.json")
	var out, errb bytes.Buffer
	if code := run([]string{"testnet", "--algo", "mradmm", "--iters", "20", "--eta-file", eta, "--quiet", "--report", rep}, &out, &errb); code != 0 {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}
	var r struct {
		Gossip struct {
			Formula []float64 `json:"per_node_formula"`
		} `json:"gossip_privacy"`
	}
	raw, err := os.ReadFile(rep)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Gossip.Formula) != 5 {
		t.Fatalf("per-node figures: %v", r.Gossip.Formula)
	}
	// Nodes differ in their data (B_i, V_i) too, so compare a node with itself: rerun with a
	// single constant column and check node 4's figure drops with its growing schedule.
	flat := filepath.Join(dir, "flat.csv")
	if err := os.WriteFile(flat, []byte(strings.Repeat("1\n", 10)), 0o644); err != nil {
		t.Fatal(err)
	}
	rep2 := filepath.Join(dir, "r2.json")
	if code := run([]string{"testnet", "--algo", "mradmm", "--iters", "20", "--eta-file", flat, "--quiet", "--report", rep2}, &out, &errb); code != 0 {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}
	var r2 struct {
		Gossip struct {
			Formula []float64 `json:"per_node_formula"`
		} `json:"gossip_privacy"`
	}
	raw, _ = os.ReadFile(rep2)
	if err := json.Unmarshal(raw, &r2); err != nil {
		t.Fatal(err)
	}
	if r.Gossip.Formula[0] != r2.Gossip.Formula[0] {
		t.Fatalf("node 0 has the same schedule in both files: %v vs %v", r.Gossip.Formula[0], r2.Gossip.Formula[0])
	}
	if !(r.Gossip.Formula[4] < r2.Gossip.Formula[4]) {
		t.Fatalf("node 4's growing schedule should lower its bound: %v vs %v", r.Gossip.Formula[4], r2.Gossip.Formula[4])
	}
	bad := filepath.Join(dir, "bad.csv")
	if err := os.WriteFile(bad, []byte("1,2\n1,2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	errb.Reset()
	if code := run([]string{"testnet", "--algo", "mradmm", "--iters", "4", "--eta-file", bad, "--quiet"}, &out, &errb); code == 0 ||
		!strings.Contains(errb.String(), "2 values per line") {
		t.Fatalf("bad eta file: exit %d, %q", code, errb.String())
	}
}

// TestRADMMTargetEpsilon: --target-epsilon calibrates each node's alpha (its degree on an
// Erdos-Renyi graph differs) so that its Theorem V.1 figure is the target: the network
// figure is the target (never above), the simulator, --mem and --procs give the same
// model bit for bit (the nodes calibrate themselves), the nodes' configuration records
// the target, and a target no alpha reaches is an error naming what lowers it.
func TestRADMMTargetEpsilon(t *testing.T) {
	t.Setenv(asMainEnv, "1")
	dir := t.TempDir()
	args := []string{"testnet", "--algo", "radmm", "--nodes", "5", "--graph", "er:0.6", "--iters", "6", "--target-epsilon", "1.5", "--json", "--quiet"}
	var models []string
	for _, mode := range []string{"", "--mem", "--procs"} {
		a := append([]string(nil), args...)
		nodes := filepath.Join(dir, "n"+mode)
		if mode != "" {
			a = append(a, mode, "--dir", nodes)
		}
		r := runJSON(t, a...).(map[string]any)
		eps := r["gossip_privacy"].(map[string]any)["epsilon"].(float64)
		if eps > 1.5 || eps < 1.5-1e-9 || r["target_epsilon"].(float64) != 1.5 {
			t.Fatalf("%q: network epsilon %v, target %v", mode, eps, r["target_epsilon"])
		}
		// The walk's settings a neighbour-exchange run has no value for are left out.
		for _, k := range []string{"sigma", "clip", "lambda", "local_step", "max_updates", "ended"} {
			if _, ok := r[k]; ok {
				t.Errorf("%q: report key %q", mode, k)
			}
		}
		if u := r["privacy"].(map[string]any)["unit"]; u != "record" {
			t.Errorf("%q: privacy unit %v", mode, u)
		}
		alphas := r["alphas"].([]any)
		distinct := map[float64]bool{}
		for _, a := range alphas {
			distinct[a.(float64)] = true
		}
		if len(alphas) != 5 || len(distinct) < 2 {
			t.Fatalf("%q: alphas %v: the degrees differ, so should some alphas", mode, alphas)
		}
		for i, e := range r["privacy"].(map[string]any)["local"].(map[string]any)["per_node_epsilon"].([]any) {
			if v := e.(float64); v > 1.5 || v < 1.5-1e-9 {
				t.Fatalf("%q: node %d epsilon %v, want the target", mode, i, v)
			}
		}
		models = append(models, fmt.Sprint(r["model"]))
		if mode != "" {
			m := readModelFile(t, filepath.Join(nodes, "node-1", "model.json"))
			if m.Config == nil || m.Config.TargetEpsilon != 1.5 || m.Config.Alpha != "" {
				t.Fatalf("%q: node configuration %+v", mode, m.Config)
			}
		}
	}
	if models[1] != models[0] || models[2] != models[0] {
		t.Fatalf("models differ between the simulator, --mem and --procs:\n%s\n%s\n%s", models[0], models[1], models[2])
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--alpha", "3"}, 2, "--target-epsilon calibrates --alpha: give one of them"},
		{[]string{"--target-epsilon", "0.01", "--iters", "100"}, 1, "no alpha reaches epsilon 0.01; fewer --iters, a larger --eta or --l2, or a smaller --paper-c lower it"},
	} {
		code, _, e := runCmd(append(append([]string(nil), args[:len(args)-2]...), c.args...)...)
		if code != c.code || !strings.Contains(e, c.want) {
			t.Errorf("%v: exit %d: %s", c.args, code, e)
		}
	}
}
