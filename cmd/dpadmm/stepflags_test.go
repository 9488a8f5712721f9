package main

import (
	"bytes"
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
		{[]string{"--step-size", "0.1"}, "--step-size does not apply to the prox step"},
		{[]string{"--local-step", "linearized", "--step-size", "0.1", "--beta", "2"}, "--beta does not apply"},
		{[]string{"--local-step", "ls-sgd", "--step-size", "0.1", "--nu", "-1"}, "--nu must be"},
		{[]string{"--local-step", "ls-sgd", "--step-size", "0.1", "--sample-rate", "1.5"}, "--sample-rate must be in (0,1]"},
		{[]string{"--local-step", "linearized", "--step-size", "NaN"}, "--step-size must be"},
		{[]string{"--algo", "walk-gadmm", "--step-size", "0.1", "--beta", "0"}, "--beta must be"},
		{[]string{"--algo", "walk-gadmm", "--local-step", "prox", "--step-size", "0.1"}, "--local-step applies to --algo walk"},
		{[]string{"--algo", "walk-sgd", "--step-size", "0.1", "--nu", "2"}, "--nu does not apply"},
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
		{[]string{"--gossip-plan", "p.json"}, "--gossip-plan: test-harness flag(s)"},
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
