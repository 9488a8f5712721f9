package main

import (
	"encoding/json"
	"io"
	"math"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/dpadmm/dpadmm/node"
)

// TestTargetEpsilon: --target-epsilon calibrates sigma so that the local figure over the
// cap is the target: a testnet whose every node reaches its cap reports that figure (to
// the calibration's tolerance, never above), 'account plan --target-epsilon' finds the same
// sigma on its own path, a node configured with the flag gets that sigma in its
// configuration (so in its config hash), and the flag refuses what it cannot calibrate.
func TestTargetEpsilon(t *testing.T) {
	rep := filepath.Join(t.TempDir(), "r.json")
	code, _, e := runCmd("testnet", "--target-epsilon", "2", "--nodes", "3", "--hops", "300", "--max-updates", "100", "--report", rep,
		"--privacy-unit", "node")
	if code != 0 || !strings.Contains(e, "--target-epsilon 2: sigma") {
		t.Fatalf("testnet: exit %d: %s", code, e)
	}
	// --quiet leaves the calibration line out.
	if code, _, e := runCmd("testnet", "--nodes", "3", "--hops", "30", "--quiet"); code != 0 || strings.Contains(e, "--target-epsilon") {
		t.Fatalf("testnet --quiet: exit %d: %s", code, e)
	}
	m := readReport(t, rep)
	loc := m["privacy"].(map[string]any)["local"].(map[string]any)["epsilon"].(float64)
	sigma := m["sigma"].(float64)
	if loc > 2 || loc < 1.99 {
		t.Fatalf("local epsilon %v with sigma %v, want the target 2", loc, sigma)
	}
	// The record unit (the default): the record radius gamma (c L + tol) binds, the
	// calibrated sigma is smaller and the report names the unit and the radius.
	rrep := filepath.Join(t.TempDir(), "rr.json")
	if code, _, e := runCmd("testnet", "--target-epsilon", "2", "--nodes", "3", "--hops", "300", "--max-updates", "100", "--quiet", "--report", rrep); code != 0 {
		t.Fatalf("testnet record: exit %d: %s", code, e)
	}
	rm := readReport(t, rrep)
	rp := rm["privacy"].(map[string]any)
	rloc := rp["local"].(map[string]any)["epsilon"].(float64)
	if rp["unit"] != "record" || !(rp["record_clip"].(float64) > 0) || rloc > 2 || rloc < 1.99 || !(rm["sigma"].(float64) < sigma/10) {
		t.Fatalf("record unit: unit %v radius %v local %v sigma %v (node-level sigma %v)", rp["unit"], rp["record_clip"], rloc, rm["sigma"], sigma)
	}
	code, out, e := runCmd("account", "plan", "--nodes", "3", "--hops", "300", "--clip", "0.1", "--max-updates", "100", "--target-epsilon", "2",
		"--budget-kind", "local", "--json")
	if code != 0 {
		t.Fatalf("account plan: exit %d: %s", code, e)
	}
	if !strings.Contains(out, `"sigma"`) {
		t.Fatalf("plan output %s", out)
	}
	var plan map[string]any
	if err := json.Unmarshal([]byte(out), &plan); err != nil {
		t.Fatal(err)
	}
	// account plan calibrates the RDP conversion; testnet the exact Gaussian-DP one where
	// it is smaller (the same composition), so the plan's sigma is at least testnet's.
	if ps := plan["sigma"].(float64); ps < sigma || ps > 1.3*sigma {
		t.Fatalf("account plan calibrates sigma %v, testnet %v", ps, sigma)
	}
	cfg, _, err := nodeConfigFrom(t, "--run", "t", "--data", "embedded", "--datadir", t.TempDir(), "--target-epsilon", "2", "--max-updates", "100",
		"--privacy-unit", "node")
	if err != nil || cfg.Sigma != sigma {
		t.Fatalf("node: sigma %v (%v), testnet %v", cfg.Sigma, err, sigma)
	}
	// Without a cap the default target does not apply, and the run says so.
	if code, _, e := runCmd("testnet", "--nodes", "3", "--hops", "30", "--max-updates", "0", "--quiet"); code != 0 ||
		!strings.Contains(e, "note: --max-updates 0 (no cap): the default --target-epsilon 2 composes over a cap, so it does not apply; sigma is the default 1") {
		t.Errorf("--max-updates 0: exit %d: %s", code, e)
	}
	for _, c := range [][]string{
		{"testnet", "--target-epsilon", "2", "--max-updates", "0"},
		{"testnet", "--target-epsilon", "2", "--sigma", "1"},
		{"testnet", "--target-epsilon", "-1"},
		{"testnet", "--target-epsilon", "2", "--algo", "walk-gadmm", "--step-size", "0.1"},
	} {
		if code, _, e := runCmd(c...); code != 2 || !strings.Contains(e, "target-epsilon") {
			t.Errorf("%v: exit %d: %s", c, code, e)
		}
	}
}

// TestAlgoAuto: --algo auto picks the DP-SGD walk with the scorecard's settings fitted to
// the rows of the smallest iid shard (experiment.SGDFor; hops nodes x cap), says so, and
// keeps what the command line sets: 3 nodes of the embedded data (151 rows each) keep the
// rate 0.1 and the step size 2; 50 nodes (9 rows) get the rate 1.5/9 and the step size 0.1.
func TestAlgoAuto(t *testing.T) {
	code, _, e := runCmd("testnet", "--algo", "auto", "--nodes", "3", "--quiet")
	if code != 0 || !strings.Contains(e, "--algo auto: walk-sgd (step size 2, sample rate 0.1, cap 100, hops 300; fitted to 151 rows per node)") {
		t.Fatalf("logistic, 3 nodes: exit %d: %s", code, e)
	}
	rep := filepath.Join(t.TempDir(), "r50.json")
	code, _, e = runCmd("testnet", "--algo", "auto", "--quiet", "--report", rep)
	if code != 0 || !strings.Contains(e, "--algo auto: walk-sgd (step size 0.1, sample rate 0.1667, cap 100, hops 5000; fitted to 9 rows per node)") {
		t.Fatalf("logistic, 50 nodes: exit %d: %s", code, e)
	}
	m := readReport(t, rep)
	if m["local_step"] != "sgd" || m["step_size"].(float64) != 0.1 || m["hops"].(float64) != 5000 || !(m["accuracy"].(float64) > 0.9) {
		t.Fatalf("logistic, 50 nodes: step %v step size %v hops %v accuracy %v", m["local_step"], m["step_size"], m["hops"], m["accuracy"])
	}
	rep = filepath.Join(t.TempDir(), "r.json")
	code, _, e = runCmd("testnet", "--algo", "auto", "--loss", "squared", "--data", "../../examples/diabetes.csv", "--label", "target",
		"--schema", "../../examples/diabetes.schema.json", "--nodes", "3", "--quiet", "--report", rep, "--step-size", "1")
	if code != 0 || !strings.Contains(e, "--algo auto: walk-sgd (step size 1, sample rate 0.1, cap 100, hops 300;") {
		t.Fatalf("squared: exit %d: %s", code, e)
	}
	m = readReport(t, rep)
	if m["local_step"] != "sgd" || m["step_size"].(float64) != 1 || m["hops"].(float64) != 300 || !(m["r2"].(float64) > 0) {
		t.Fatalf("squared: step %v step size %v hops %v R^2 %v", m["local_step"], m["step_size"], m["hops"], m["r2"])
	}
}

// TestAccountPlanRecord: 'account plan --rows M' plans the per-record figure: the record
// radius gamma (c L + 1e-9) with c = n/M replaces the clip when smaller (said on stderr),
// so the calibrated sigma shrinks by the same factor; --privacy-unit node keeps the clip.
func TestAccountPlanRecord(t *testing.T) {
	plan := func(extra ...string) (float64, string) {
		t.Helper()
		args := append([]string{"account", "plan", "--nodes", "3", "--hops", "60", "--clip", "0.1", "--max-updates", "20",
			"--target-epsilon", "2", "--budget-kind", "local", "--json"}, extra...)
		code, out, e := runCmd(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, e)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatal(err)
		}
		return m["sigma"].(float64), e
	}
	node, _ := plan()
	rec, e := plan("--rows", "455", "--gamma", "0.03")
	same, _ := plan("--rows", "455", "--gamma", "0.03", "--privacy-unit", "node")
	radius := 0.03 * (3.0/455 + 1e-9)
	if !strings.Contains(e, "record radius") || math.Abs(rec/node-radius/0.1) > 1e-6 || same != node {
		t.Errorf("sigma: node %v, record %v (ratio %v, want %v), node unit with rows %v; stderr %q", node, rec, rec/node, radius/0.1, same, e)
	}
}

// TestAlgoAutoNode: 'dpadmm node --algo auto' fits the DP-SGD walk's settings to
// --min-rows (9: rate 1.5/9, step size 0.1), which every member gives alike, before it
// calibrates sigma, and logs the choice.
func TestAlgoAutoNode(t *testing.T) {
	dd := filepath.Join(t.TempDir(), "n0")
	c := startChild(t, "node", "--run", "auto", "--data", "embedded", "--shard", "0/50", "--datadir", dd,
		"--algo", "auto", "--min-rows", "9", "--start", "--min-peers", "3", "--profile", "test", "--log-level", "info")
	c.waitFor(t, c.stderr, "--algo auto: walk-sgd (step size 0.1, sample rate 0.1667, cap 100, hops 300; fitted to --min-rows 9)", 30*time.Second)
	if code, _ := c.stop(t, syscall.SIGINT, 10*time.Second); code != 130 {
		t.Fatalf("exit %d, want 130\n%s", code, c.stderr)
	}
	if s := c.stderr.String(); !strings.Contains(s, "--target-epsilon 2: sigma") || strings.Index(s, "--algo auto: walk-sgd") > strings.Index(s, "--target-epsilon 2: sigma") {
		t.Errorf("the calibration came before the settings were fitted:\n%s", s)
	}
}

// TestAlgoAutoNodeSameConfig: members of one run with shards of different sizes (11 and
// 12 rows of the embedded data as 1 of 50) get the same settings and configuration hash
// under --algo auto, since the fit uses --min-rows and not their own rows (a hash that
// differed would make them refuse each other); without --min-rows the settings are not
// fitted.
func TestAlgoAutoNodeSameConfig(t *testing.T) {
	cfgOf := func(args ...string) node.Config {
		t.Helper()
		f := newNodeFlags(io.Discard)
		if err := f.m.parse(append([]string{"--run", "auto", "--data", "embedded", "--algo", "auto", "--datadir", t.TempDir()}, args...)); err != nil {
			t.Fatal(err)
		}
		auto, err := resolveAuto(f.m, f.algo, f.lossName)
		if err == nil {
			err = auto.fillHops(*f.minPeers)
		}
		if err != nil {
			t.Fatal(err)
		}
		f.auto = auto
		mode, _, err := f.mode()
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := f.config(mode)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Logger = zerolog.Nop()
		if err := f.loadData(&cfg); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	a, b := cfgOf("--shard", "0/50", "--min-rows", "9"), cfgOf("--shard", "49/50", "--min-rows", "9")
	if a.Data.Rows == b.Data.Rows {
		t.Fatalf("both shards have %d rows: the test needs two sizes", a.Data.Rows)
	}
	if a.Step.Rate != 1.5/9 || a.Step.Eta != 0.1 || a.Step != b.Step || a.Sigma != b.Sigma {
		t.Fatalf("shards of %d and %d rows: steps %+v and %+v, sigma %v and %v", a.Data.Rows, b.Data.Rows, a.Step, b.Step, a.Sigma, b.Sigma)
	}
	if ha, hb := a.RunConfig().Hash(), b.RunConfig().Hash(); ha != hb {
		t.Fatalf("configuration hashes differ: %s and %s", ha, hb)
	}
	if c := cfgOf("--shard", "0/50"); c.Step.Rate != 0.1 || c.Step.Eta != 2 {
		t.Fatalf("without --min-rows: %+v, want the unfitted rate 0.1 and step size 2", c.Step)
	}
}

// TestNodeTargetWithoutMinRows: a node calibrating --target-epsilon without --min-rows
// (the whole shard's bound) warns at the default log level and says how much less noise
// --min-rows would need; with --min-rows the calibration line stays at info.
func TestNodeTargetWithoutMinRows(t *testing.T) {
	for _, c := range []struct {
		extra []string
		warn  bool
	}{{nil, true}, {[]string{"--min-rows", "50"}, false}} {
		args := append([]string{"node", "--run", "tgt", "--data", "../../examples/wine.csv", "--label", "class", "--schema", "../../examples/wine.schema.json",
			"--datadir", filepath.Join(t.TempDir(), "n"), "--start", "--min-peers", "3", "--profile", "test"}, c.extra...)
		ch := startChild(t, args...)
		ch.waitFor(t, ch.stderr, "open run", 30*time.Second)
		if code, _ := ch.stop(t, syscall.SIGINT, 10*time.Second); code != 130 {
			t.Fatalf("%v: exit %d, want 130\n%s", c.extra, code, ch.stderr)
		}
		s := ch.stderr.String()
		warned := strings.Contains(s, "WRN --target-epsilon 2: sigma") && strings.Contains(s, "times less noise")
		if warned != c.warn || !c.warn && strings.Contains(s, "--target-epsilon") {
			t.Errorf("%v: warned %v, want %v:\n%s", c.extra, warned, c.warn, s)
		}
	}
}
