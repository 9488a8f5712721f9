package main

import (
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dpadmm/dpadmm/node"
	"github.com/dpadmm/dpadmm/node/store"
)

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitExit waits for c to exit and fails unless it exits 0.
func waitExit(t *testing.T, name string, c *child, within time.Duration) {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(within):
		c.cmd.Process.Signal(syscall.SIGQUIT) // its goroutines go to stderr, shown below
		time.Sleep(2 * time.Second)
		t.Fatalf("%s still running after %v\nstdout:\n%s\nstderr:\n%s", name, within, c.stdout, c.stderr)
	}
	if c.err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", name, c.err, c.stdout, c.stderr)
	}
}

// TestNodeRejoinGossipNewPort: three 'dpadmm node --algo radmm' processes joined through
// announce/join/start, each on a port the system chooses. A joiner is stopped with
// SIGINT during the run and started again on its --datadir, on another port: it resumes
// from its journal, dials its neighbours, and they send to it again. Every node ends with
// the model, bit for bit, and the ledger of an uninterrupted run of the same members in
// the same order (a --static run with the same identities, data and seed).
func TestNodeRejoinGossipNewPort(t *testing.T) {
	const iters = 60
	port := freePort(t)
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	id0, err := store.DataDirPeerID(dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	common := []string{"node", "--run", "rejoin-g", "--algo", "radmm", "--data", "embedded", "--iters", fmt.Sprint(iters), "--alpha", "2",
		"--paper-c", "10", "--l2", "0.01", "--profile", "test", "--no-fsync", "--insecure-testnet", "--seed", "3",
		"--barrier-timeout", "20s", "--on-missing", "wait", "--log-level", "info", "--quiet"}
	start := func(i int, more ...string) *child {
		args := append(append([]string(nil), common...), "--datadir", dirs[i], "--shard", fmt.Sprintf("%d/3", i))
		return startChild(t, append(args, more...)...)
	}
	cs := []*child{start(0, "--start", "--min-peers", "3", "--join-window", "500ms", "--listen", fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", port))}
	for k := 0; ; k++ {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			c.Close()
			break
		}
		if k > 1000 {
			t.Fatal("starter not listening")
		}
		time.Sleep(10 * time.Millisecond)
	}
	peer0 := fmt.Sprintf("/ip4/127.0.0.1/tcp/%d/p2p/%s", port, id0)
	cs = append(cs, start(1, "--peer", peer0), start(2, "--peer", peer0))
	// Stop node 1 once it released a few iterations.
	const x = 1
	lines := func(dir string) int {
		b, _ := os.ReadFile(filepath.Join(dir, store.LedgerFile))
		return strings.Count(string(b), "\n")
	}
	deadline := time.Now().Add(40 * time.Second)
	for lines(dirs[x]) < 5 {
		select {
		case <-cs[x].done:
			t.Fatalf("node %d exited (%v) before its fifth release\nstderr:\n%s", x, cs[x].err, cs[x].stderr)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %d: no fifth release after 40 s\nstderr:\n%s", x, cs[x].stderr)
		}
	}
	if code, _ := cs[x].stop(t, syscall.SIGINT, 10*time.Second); code != 130 {
		t.Fatalf("node %d: exit %d after SIGINT, want 130\n%s", x, code, cs[x].stderr)
	}
	before := lines(dirs[x])
	if before >= iters+1 {
		t.Fatalf("node %d had released all %d iterations before it was stopped", x, iters)
	}
	oldAddr := regexp.MustCompile(`listening on (/ip4/127\.0\.0\.1/tcp/[0-9]+)`).FindStringSubmatch(cs[x].stdout.String())
	cs[x] = start(x, "--peer", peer0)
	for i, c := range cs {
		waitExit(t, fmt.Sprintf("node %d", i), c, 50*time.Second)
	}
	newAddr := regexp.MustCompile(`listening on (/ip4/127\.0\.0\.1/tcp/[0-9]+)`).FindStringSubmatch(cs[x].stdout.String())
	if oldAddr == nil || newAddr == nil || oldAddr[1] == newAddr[1] {
		t.Fatalf("node %d listened on %v, then on %v: not a new port", x, oldAddr, newAddr)
	}
	if !strings.Contains(cs[x].stderr.String(), "resuming the neighbour-exchange run from the journal") {
		t.Errorf("node %d did not resume from its journal:\n%s", x, cs[x].stderr)
	}
	t.Logf("node %d stopped after %d of %d ledger entries", x, before, iters+1)
	// The final lines: the figure in short, where its theorem and conditions are.
	if out := cs[0].stdout.String(); !strings.Contains(out, "this node's pure epsilon") || !strings.Contains(out, "the theorem and its conditions: "+filepath.Join(dirs[0], store.ModelFile)) {
		t.Errorf("node 0's summary:\n%s", out)
	}
	got := make([]node.RADMMModel, 3)
	for i := range got {
		b, err := os.ReadFile(filepath.Join(dirs[i], store.ModelFile))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &got[i]); err != nil {
			t.Fatal(err)
		}
	}

	// The reference: the same members in the same order, uninterrupted (--static), on
	// fresh directories holding the same identities.
	sf := node.StaticFile{Run: "rejoin-g", TotalRows: got[0].TotalRows}
	ref := make([]string, 3)
	byID := map[string]int{}
	for i := range dirs {
		id, _ := store.DataDirPeerID(dirs[i])
		byID[id.String()] = i
	}
	ports := make([]int, 3)
	for k, m := range got[0].Members {
		i, ok := byID[m]
		if !ok {
			t.Fatalf("member %s is none of the nodes", m)
		}
		ports[k] = freePort(t)
		sf.Members = append(sf.Members, node.StaticMember{ID: m, Addrs: []string{fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", ports[k])}})
		ref[i] = t.TempDir()
		key, err := os.ReadFile(filepath.Join(dirs[i], store.IdentityFile))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ref[i], store.IdentityFile), key, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := json.Marshal(sf)
	static := filepath.Join(t.TempDir(), "static.json")
	if err := os.WriteFile(static, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var rc []*child
	for i := range ref {
		k := got[i].Index
		args := append(append([]string(nil), common...), "--datadir", ref[i], "--shard", fmt.Sprintf("%d/3", i),
			"--static", static, "--listen", fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", ports[k]))
		rc = append(rc, startChild(t, args...))
	}
	for i, c := range rc {
		waitExit(t, fmt.Sprintf("reference node %d", i), c, 50*time.Second)
	}
	for i := range ref {
		b, err := os.ReadFile(filepath.Join(ref[i], store.ModelFile))
		if err != nil {
			t.Fatal(err)
		}
		var want node.RADMMModel
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		g := got[i]
		if g.Index != want.Index || g.Iters != iters || want.Iters != iters || len(g.Model) == 0 || len(g.Model) != len(want.Model) {
			t.Fatalf("node %d: index %d, %d iterations, %d values; reference index %d, %d iterations, %d values",
				i, g.Index, g.Iters, len(g.Model), want.Index, want.Iters, len(want.Model))
		}
		for k := range g.Model {
			if math.Float64bits(g.Model[k]) != math.Float64bits(want.Model[k]) {
				t.Fatalf("node %d: model[%d] = %v, uninterrupted run %v", i, k, g.Model[k], want.Model[k])
			}
		}
		if g.Privacy.LedgerEntries != iters+1 || g.Privacy.Ledger != want.Privacy.Ledger || g.Privacy.Epsilon != want.Privacy.Epsilon {
			t.Errorf("node %d: privacy %+v, uninterrupted run %+v", i, g.Privacy, want.Privacy)
		}
		if len(g.Stale) != 0 {
			t.Errorf("node %d used stale values: %+v", i, g.Stale)
		}
	}
}
