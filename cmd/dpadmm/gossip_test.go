package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
		{[]string{"--algo", "walk", "--alpha", "2"}, "neighbour-exchange"},
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
