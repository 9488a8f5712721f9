package main

import (
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"testing"
)

// TestTargetEpsilon: --target-epsilon calibrates sigma so that the local figure over the
// cap is the target: a testnet whose every node reaches its cap reports that figure (to
// the calibration's tolerance, never above), 'account plan --target-epsilon' finds the same
// sigma on its own path, a node configured with the flag gets that sigma in its
// configuration (so in its config hash), and the flag refuses what it cannot calibrate.
func TestTargetEpsilon(t *testing.T) {
	rep := filepath.Join(t.TempDir(), "r.json")
	code, _, e := runCmd("testnet", "--target-epsilon", "2", "--nodes", "3", "--hops", "300", "--max-updates", "100", "--quiet", "--report", rep,
		"--privacy-unit", "node")
	if code != 0 || !strings.Contains(e, "--target-epsilon 2: sigma") {
		t.Fatalf("testnet: exit %d: %s", code, e)
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

// TestAlgoAuto: --algo auto picks the prox walk for a Lipschitz loss and the DP-SGD walk
// with the measured settings for the squared loss (hops nodes x cap), says so, and keeps
// what the command line sets.
func TestAlgoAuto(t *testing.T) {
	code, _, e := runCmd("testnet", "--algo", "auto", "--nodes", "3", "--quiet")
	if code != 0 || !strings.Contains(e, "--algo auto: walk (prox step)") {
		t.Fatalf("logistic: exit %d: %s", code, e)
	}
	rep := filepath.Join(t.TempDir(), "r.json")
	code, _, e = runCmd("testnet", "--algo", "auto", "--loss", "squared", "--data", "../../examples/diabetes.csv", "--label", "target",
		"--schema", "../../examples/diabetes.schema.json", "--nodes", "3", "--quiet", "--report", rep, "--step-size", "1")
	if code != 0 || !strings.Contains(e, "--algo auto: walk-sgd (step size 1, sample rate 0.1, cap 100, hops 300)") {
		t.Fatalf("squared: exit %d: %s", code, e)
	}
	m := readReport(t, rep)
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
