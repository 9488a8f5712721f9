package main

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// TestStepFlagErrors: a flag the chosen step does not read, a missing or invalid step
// parameter, or a step given twice is a usage error (exit 2) that names the flag.
func TestStepFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--local-step", "linearized"}, "needs --step-size"},
		{[]string{"--local-step", "newton"}, "--local-step must be prox, linearized or ls-sgd"},
		{[]string{"--local-step", "gadmm"}, "--algo walk-gadmm"},
		{[]string{"--step-size", "0.1"}, "--step-size applies to the walk's gradient steps"},
		{[]string{"--local-step", "linearized", "--step-size", "0.1", "--beta", "2"}, "--beta applies to the walk's gradient ADMM step"},
		{[]string{"--local-step", "ls-sgd", "--step-size", "0.1", "--nu", "-1"}, "--nu must be"},
		{[]string{"--local-step", "ls-sgd", "--step-size", "0.1", "--sample-rate", "1.5"}, "--sample-rate must be in (0,1]"},
		{[]string{"--local-step", "linearized", "--step-size", "NaN"}, "--step-size must be"},
		{[]string{"--algo", "walk-gadmm", "--step-size", "0.1", "--beta", "0"}, "--beta must be"},
		{[]string{"--algo", "walk-gadmm", "--local-step", "prox", "--step-size", "0.1"}, "--local-step applies to --algo walk"},
		{[]string{"--algo", "walk-sgd", "--step-size", "0.1", "--nu", "2"}, "--nu applies to the walk's ls-sgd step"},
		{[]string{"--algo", "radmm", "--step-size", "0.1"}, "--step-size applies to the walk"},
	} {
		var out, errb bytes.Buffer
		code := run(append([]string{"testnet", "--nodes", "3", "--hops", "5"}, c.args...), &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", c.args, code, errb.String(), c.want)
		}
		out.Reset()
		errb.Reset()
		code = run(append([]string{"node", "--run", "r", "--data", "embedded", "--datadir", t.TempDir()}, c.args...), &out, &errb)
		if c.args[0] == "--algo" && c.args[1] == "radmm" {
			continue // a node's neighbour-exchange flags are checked elsewhere
		}
		if code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("node %v: exit %d, stderr %q; want exit 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
}

// TestInsecureTestnetGate: every test-harness flag of 'dpadmm node' is refused without
// --insecure-testnet, and --insecure-testnet refuses addresses that are not loopback.
func TestInsecureTestnetGate(t *testing.T) {
	base := []string{"node", "--run", "r", "--data", "embedded", "--datadir", t.TempDir(), "--profile", "test"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--seed", "3", "--algo", "radmm"}, "--seed: test-harness flag(s)"},
		{[]string{"--static", "s.json"}, "--static: test-harness flag(s)"},
		{[]string{"--pause-at-hop", "4"}, "--pause-at-hop: test-harness flag(s)"},
		{[]string{"--withhold-acks"}, "--withhold-acks: test-harness flag(s)"},
		{[]string{"--pause-at-iter", "3", "--algo", "radmm"}, "--pause-at-iter: test-harness flag(s)"},
		{[]string{"--insecure-testnet", "--listen", "/ip4/0.0.0.0/tcp/0"}, "loopback addresses only, got /ip4/0.0.0.0/tcp/0"},
		{[]string{"--insecure-testnet", "--peer", "/ip4/10.1.2.3/tcp/4001/p2p/12D3KooWGzxzKZYveHXtpG6AsrUJBcWxHBFS2HsEoGTxrMLvKXtf"}, "loopback addresses only"},
	} {
		var out, errb bytes.Buffer
		if code := run(append(append([]string(nil), base...), c.args...), &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
	for _, a := range []string{"/ip4/127.0.0.1/tcp/0", "/ip6/::1/udp/0/quic-v1", "/dns/localhost/tcp/1"} {
		if !loopbackAddr(a) {
			t.Errorf("%s not taken for loopback", a)
		}
	}
	for _, a := range []string{"/ip4/0.0.0.0/tcp/0", "/ip4/192.168.1.2/tcp/1", "/dns/example.com/tcp/1", "junk"} {
		if loopbackAddr(a) {
			t.Errorf("%s taken for loopback", a)
		}
	}
}

// TestHTTPListen: a port alone listens on loopback; a public address is flagged.
func TestHTTPListen(t *testing.T) {
	for in, want := range map[string]string{"9090": "127.0.0.1:9090", ":9090": "127.0.0.1:9090",
		"0.0.0.0:9090": "0.0.0.0:9090", "127.0.0.1:0": "127.0.0.1:0", "": ""} {
		if got := httpListen(in); got != want {
			t.Errorf("httpListen(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]bool{"127.0.0.1:9090": false, "localhost:1": false, "[::1]:2": false,
		"0.0.0.0:9090": true, "192.168.1.4:80": true, "[::]:1": true} {
		if got := publicHTTP(in); got != want {
			t.Errorf("publicHTTP(%q) = %v, want %v", in, got, want)
		}
	}
}

// TestAccountPlanSteps: 'account plan' for the other steps uses the same figures as every
// output: a calibrated sigma meets the target (and 1% less noise does not); ls-sgd's
// pairwise figure is its local one; the DP-SGD walk's pairwise figure needs the
// non-expansive certificate (else it is the local one) and never exceeds the local one;
// other graphs are refused.
func TestAccountPlanSteps(t *testing.T) {
	plan := func(args ...string) map[string]any {
		t.Helper()
		var out, errb bytes.Buffer
		a := append([]string{"account", "plan", "--nodes", "100", "--hops", "10000", "--clip", "0.1", "--max-updates", "150", "--json"}, args...)
		if code := run(a, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		var m map[string]any
		if err := json.Unmarshal(out.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	eps := func(m map[string]any, sec string) float64 {
		if sec == "local" {
			return m["local"].(map[string]any)["epsilon"].(float64)
		}
		return m["pairwise_planned"].(map[string]any)["worst"].(map[string]any)["epsilon"].(float64)
	}
	ls := plan("--local-step", "ls-sgd", "--step-size", "1", "--sample-rate", "0.1", "--target-epsilon", "2")
	s := ls["sigma"].(float64)
	if e := eps(ls, "pairwise"); e > 2 || e != eps(ls, "local") || ls["local_step"] != "ls-sgd" {
		t.Errorf("ls-sgd: pairwise %v, local %v", e, eps(ls, "local"))
	}
	less := plan("--local-step", "ls-sgd", "--step-size", "1", "--sample-rate", "0.1", "--sigma", strconv.FormatFloat(s*0.99, 'g', -1, 64))
	if eps(less, "pairwise") <= 2 {
		t.Errorf("sigma %v x 0.99 still meets epsilon 2", s)
	}
	// A plan never promises the sgd amplification (its step eta/sqrt(k) gives every hop
	// its own noise scale), certified or not: the planned figure is the local one, named
	// by the one verdict function, with the reason.
	sgd := plan("--algo", "walk-sgd", "--step-size", "0.1", "--sigma", "1")
	cert := plan("--algo", "walk-sgd", "--step-size", "0.1", "--sigma", "1", "--sgd-non-expansive")
	pc := cert["pairwise_planned"].(map[string]any)
	if eps(sgd, "pairwise") != eps(sgd, "local") || eps(cert, "pairwise") != eps(cert, "local") ||
		pc["conditions_hold"] != false || !strings.Contains(pc["note"].(string), "own noise scale") {
		t.Errorf("sgd: uncertified pairwise %v local %v; certified pairwise %v local %v, %v",
			eps(sgd, "pairwise"), eps(sgd, "local"), eps(cert, "pairwise"), eps(cert, "local"), pc)
	}
	g := plan("--algo", "walk-gadmm", "--step-size", "0.1", "--beta", "1", "--sigma", "0.5")
	if !(eps(g, "local") > 0) || eps(g, "pairwise") != eps(g, "local") {
		t.Errorf("gadmm: pairwise %v local %v", eps(g, "pairwise"), eps(g, "local"))
	}
	var out, errb bytes.Buffer
	if code := run([]string{"account", "plan", "--nodes", "10", "--hops", "100", "--clip", "1", "--sigma", "1", "--graph", "ring",
		"--algo", "walk-sgd", "--step-size", "0.1"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "complete graph only") {
		t.Errorf("ring: exit %d, %s", code, errb.String())
	}
}
