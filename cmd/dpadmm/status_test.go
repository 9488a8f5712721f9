package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/node"
	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/rs/zerolog"
)

// TestStatusCommand: 'dpadmm status --http' reads a real node's /readyz and /status:
// before its run it prints the waiting state and exits 1; after the run it prints the run,
// the updates and the epsilon spent and exits 0; --json gives both documents; a node that
// does not answer is an error, and the flags are checked.
func TestStatusCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d, _ := consensus.SyntheticLogistic(60, 4, 3, 5)
	var c node.Config
	c.Run, c.Data, c.DataDir, c.HTTP = "st", d, t.TempDir(), "127.0.0.1:0"
	c.Problem = consensus.Problem{Loss: consensus.Logistic, Reg: consensus.Regularizer{L2: 0.01}}
	c.Gamma, c.Lambda, c.Clip, c.Sigma, c.Hops, c.MaxUpdates = 1, 0.5, 1, 0.5, 6, 10
	c.AllowSeededNoise, c.Noise = true, func(int) privacy.Noise { return privacy.NewSeededNoise(3) }
	c.Listen, c.NoSync, c.Logger = []string{"/ip4/127.0.0.1/tcp/0"}, true, zerolog.New(io.Discard)
	id, _ := store.DataDirPeerID(c.DataDir)
	c.Members, c.Weight = []peer.ID{id}, 1
	nd, err := node.New(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer nd.Close()
	var out, errb bytes.Buffer
	if code := run([]string{"status", "--http", nd.HTTPAddr}, &out, &errb); code != 1 ||
		!strings.Contains(out.String(), "run st: waiting") || !strings.Contains(errb.String(), "not ready") {
		t.Fatalf("before the run: exit %d\n%s%s", code, out.String(), errb.String())
	}
	if _, err := nd.Run(ctx); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errb.Reset()
	if code := run([]string{"status", "--http", nd.HTTPAddr}, &out, &errb); code != 0 ||
		!strings.Contains(out.String(), "run st: done") || !strings.Contains(out.String(), "own updates 6") ||
		!strings.Contains(out.String(), "epsilon spent") {
		t.Fatalf("after the run: exit %d\n%s%s", code, out.String(), errb.String())
	}
	out.Reset()
	if code := run([]string{"status", "--http", "http://" + nd.HTTPAddr + "/", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("--json: exit %d %s", code, errb.String())
	}
	var m map[string]map[string]any
	if err := json.Unmarshal(out.Bytes(), &m); err != nil || m["ready"]["state"] != "done" || m["status"]["run"] != "st" {
		t.Fatalf("--json: %v %s", err, out.String())
	}
	for _, args := range [][]string{{"status"}, {"status", "--http", "x", "extra"}, {"status", "--http", "x", "--timeout", "0s"}} {
		if code := run(args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	if code := run([]string{"status", "--http", "127.0.0.1:1", "--timeout", "1s"}, &out, &errb); code != 1 {
		t.Errorf("unreachable node: exit %d, want 1", code)
	}
}

// TestStatusJoining: a node that has not joined yet (index -1, no membership) is printed
// as such, not as "member -1 of 0"; a starter counts its members against the target.
func TestStatusJoining(t *testing.T) {
	var b strings.Builder
	printNodeStatus(&b, map[string]any{"state": "joining"}, map[string]any{"run": "r", "peer": "p", "index": -1.0, "members": 0.0,
		"join": map[string]any{"role": "joiner", "joined": 1.0, "want": 0.0}})
	out := b.String()
	if strings.Contains(out, "member -1") || strings.Contains(out, "of 0") || !strings.Contains(out, "not a member yet") ||
		!strings.Contains(out, "waiting for the starter") {
		t.Fatalf("joiner status:\n%s", out)
	}
	b.Reset()
	printNodeStatus(&b, map[string]any{"state": "joining"}, map[string]any{"run": "r", "peer": "p", "index": 0.0, "members": 0.0,
		"join": map[string]any{"role": "starter", "joined": 2.0, "want": 3.0}})
	if !strings.Contains(b.String(), "joining as starter: 2 of 3 members") {
		t.Fatalf("starter status:\n%s", b.String())
	}
}

// TestStatusGossip: a neighbour-exchange node's status shows its iteration and figure,
// not the walk's update counters (0 and -1 there).
func TestStatusGossip(t *testing.T) {
	var b strings.Builder
	printNodeStatus(&b, map[string]any{"state": "running"}, map[string]any{"run": "g", "peer": "p", "index": 1.0, "members": 3.0,
		"own_updates": 0.0, "updates_left": -1.0,
		"gossip": map[string]any{"algo": "radmm", "iter": 872.0, "iters": 3000.0, "epsilon_spent": 12.5, "epsilon_theorem": "Theorem V.1"}})
	out := b.String()
	if !strings.Contains(out, "radmm iteration 872 of 3000, epsilon spent 12.5: Theorem V.1") || strings.Contains(out, "own updates") {
		t.Fatalf("gossip status:\n%s", out)
	}
}
