package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTestnetDemo: 'dpadmm testnet' with no flags runs the demo, prints a summary and,
// with --report, writes a complete JSON report.
func TestTestnetDemo(t *testing.T) {
	dir := t.TempDir()
	rep := filepath.Join(dir, "r.json")
	curve := filepath.Join(dir, "c.csv")
	var out, errb bytes.Buffer
	if code := run([]string{"testnet", "--report", rep, "--curve", curve, "--curve-every", "500"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"objective", "reference", "accuracy", "us/hop", "local", "Theorem 4"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	b, err := os.ReadFile(rep)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["nodes"].(float64) != 50 || m["data"] != "embedded:breast_cancer" || m["accuracy"].(float64) < 0.85 {
		t.Errorf("report: nodes %v data %v accuracy %v", m["nodes"], m["data"], m["accuracy"])
	}
	pr := m["privacy"].(map[string]any)
	loc := pr["local"].(map[string]any)
	if len(loc["per_node_epsilon"].([]any)) != 50 || len(pr["updates"].([]any)) != 50 {
		t.Errorf("privacy section: %v", pr)
	}
	c, err := os.ReadFile(curve)
	if err != nil || !strings.HasPrefix(string(c), "hop,objective,gap\n0,") {
		t.Errorf("curve: %v %q", err, c)
	}
}

func TestTestnetFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"testnet", "--mem"},
		{"testnet", "--procs"},
		{"testnet", "--algo", "gossip"},
		{"testnet", "--lambda", "2", "--hops", "10"},
		{"testnet", "--data", "/nonexistent.csv"},
		{"testnet", "--nodes", "0"},
	} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code == 0 {
			t.Errorf("%v: exit 0", args)
		} else if errb.Len() == 0 {
			t.Errorf("%v: no error message", args)
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"testnet", "--help"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "lambda*S") || errb.Len() != 0 {
		t.Errorf("help: exit %d\n%s", code, out.String())
	}
}
