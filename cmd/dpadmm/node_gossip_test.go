package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/node"
	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/testnet"
	"github.com/dpadmm/dpadmm/testnet/sim"
)

// TestNodeGossipCLI: three 'dpadmm node --algo mradmm --eta-file F' members on loopback
// go through announce/join/start, each writes model.json with its own model and its own
// Theorem V.1 figure, and its ledger charges every odd iteration with the penalty of its
// own column of F (by member index).
func TestNodeGossipCLI(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	id0, err := store.DataDirPeerID(dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	etaFile := filepath.Join(t.TempDir(), "eta.csv")
	table := [][]float64{{1, 0.5, 2}, {1.25, 0.5, 2.5}, {1.5, 0.75, 3}}
	if err := os.WriteFile(etaFile, []byte("# eta_i(2k-1), one column per member\n1,0.5,2\n1.25, 0.5, 2.5\n\n1.5,0.75,3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	common := []string{"node", "--run", "gcli", "--algo", "mradmm", "--data", "embedded", "--iters", "6", "--alpha", "2",
		"--paper-c", "10", "--l2", "0.01", "--profile", "test", "--no-fsync", "--insecure-testnet", "--seed", "3", "--barrier-timeout", "20s",
		"--eta-file", etaFile}
	outs := make([]bytes.Buffer, 3)
	errs := make([]syncBuf, 3)
	codes := make([]int, 3)
	var wg sync.WaitGroup
	start := func(i int, extra ...string) {
		args := append(append(append([]string(nil), common...), "--datadir", dirs[i], "--shard", fmt.Sprintf("%d/3", i)), extra...)
		wg.Add(1)
		go func() { defer wg.Done(); codes[i] = run(args, &outs[i], &errs[i]) }()
	}
	start(0, "--start", "--min-peers", "3", "--join-window", "300ms", "--listen", fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", port))
	for k := 0; ; k++ {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
			break
		}
		if k > 500 {
			t.Fatal("starter not listening")
		}
		time.Sleep(10 * time.Millisecond)
	}
	peer := fmt.Sprintf("/ip4/127.0.0.1/tcp/%d/p2p/%s", port, id0)
	start(1, "--peer", peer, "--http", "127.0.0.1:0")
	start(2, "--peer", peer)
	wg.Wait()
	seen := map[int]bool{}
	for i := range dirs {
		if codes[i] != 0 {
			t.Fatalf("node %d: exit %d: %s", i, codes[i], errs[i].String())
		}
		if !strings.Contains(outs[i].String(), "Theorem V.1") || !strings.Contains(outs[i].String(), "own model") {
			t.Errorf("node %d output lacks the figure's theorem: %s", i, outs[i].String())
		}
		b, err := os.ReadFile(filepath.Join(dirs[i], store.ModelFile))
		if err != nil {
			t.Fatal(err)
		}
		var m node.RADMMModel
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		if m.Nodes != 3 || m.Iters != 6 || len(m.Neighbors) != 2 || m.Algo != "mradmm" || len(m.Model) != 31 || // 30 features and the intercept
			!m.Privacy.ConditionsHold || !(m.Privacy.Epsilon > 0) || m.Privacy.SecureNoise || m.Members[0] != id0.String() {
			t.Fatalf("node %d: model.json %s", i, b)
		}
		seen[m.Index] = true
		led, err := readLedger(dirs[i])
		if err != nil || len(led) != 7 {
			t.Fatalf("node %d: %d ledger entries (%v)", i, len(led), err)
		}
		for _, e := range led {
			if e.Mechanism == privacy.MechPure && e.Lambda != table[(e.Hop-1)/2][m.Index] {
				t.Fatalf("node %d (index %d): iteration %d charged with eta %v, want %v", i, m.Index, e.Hop, e.Lambda, table[(e.Hop-1)/2][m.Index])
			}
		}
	}
	if len(seen) != 3 {
		t.Fatalf("indices %v, want 0, 1, 2", seen)
	}
	if !strings.Contains(outs[1].String(), "status on http://127.0.0.1:") {
		t.Errorf("node 1 (--http) did not report its status endpoint: %s", outs[1].String())
	}
}

// TestNodeGossipFlagErrors: walk-only flags with a neighbour-exchange algorithm and
// neighbour-exchange flags with the walk are usage errors.
func TestNodeGossipFlagErrors(t *testing.T) {
	base := []string{"node", "--run", "x", "--data", "embedded", "--datadir", t.TempDir()}
	for _, extra := range [][]string{
		{"--algo", "radmm", "--hops", "5"},
		{"--algo", "radmm", "--sigma", "1"},
		{"--algo", "radmm", "--budget-epsilon", "2"},
		{"--algo", "radmm", "--alpha", "-1"},
		{"--algo", "radmm", "--on-missing", "later"},
		{"--graph", "complete"},
		{"--iters", "5"},
		{"--eta-file", "x.csv"},
		{"--algo", "mradmm", "--eta-file", "x.csv", "--eta", "2"},
		{"--algo", "mradmm", "--eta-file", filepath.Join(t.TempDir(), "missing.csv")},
		{"--insecure-testnet", "--pause-at-iter", "3"},
		{"--insecure-testnet", "--algo", "radmm", "--iters", "5", "--pause-at-iter", "6"},
		{"--insecure-testnet", "--algo", "radmm", "--pause-at-iter", "-1"},
	} {
		var out, errb bytes.Buffer
		if code := run(append(append([]string(nil), base...), extra...), &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", extra, code, errb.String())
		} else if !strings.Contains(errb.String(), "dpadmm node:") {
			t.Errorf("%v: no message: %q", extra, errb.String())
		}
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func readLedger(dir string) ([]privacy.Entry, error) {
	st, err := store.Open(dir)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	return st.Ledger()
}

// TestNodeGossipStaticCLI: three 'dpadmm node --algo radmm --static F' members (no
// --start, no join) run to the end with the indices of F; a member whose configuration
// does not hash to F's config_hash is refused before it starts.
func TestNodeGossipStaticCLI(t *testing.T) {
	const n = 3
	dirs := make([]string, n)
	ports := make([]int, n)
	sf := node.StaticFile{Run: "gstatic", TotalRows: 0}
	for i := range dirs {
		dirs[i] = t.TempDir()
		id, err := store.DataDirPeerID(dirs[i])
		if err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
		sf.Members = append(sf.Members, node.StaticMember{ID: id.String(), Addrs: []string{fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", ports[i])}})
	}
	common := []string{"node", "--run", "gstatic", "--algo", "radmm", "--data", "embedded", "--iters", "6", "--alpha", "2",
		"--paper-c", "10", "--l2", "0.01", "--profile", "test", "--no-fsync", "--insecure-testnet", "--seed", "3", "--barrier-timeout", "20s"}
	// M: the embedded set has the rows the three shards split.
	total := 0
	for i := 0; i < n; i++ {
		total += shardRows(t, i, n)
	}
	sf.TotalRows = total
	write := func(f node.StaticFile) string {
		b, _ := json.Marshal(f)
		p := filepath.Join(t.TempDir(), "static.json")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// A wrong config hash is refused (before any network activity).
	bad := sf
	bad.ConfigHash = strings.Repeat("ab", 32)
	var out0, err0 bytes.Buffer
	args := append(append([]string(nil), common...), "--datadir", dirs[0], "--shard", "0/3", "--static", write(bad))
	if code := run(args, &out0, &err0); code == 0 || !strings.Contains(err0.String(), "config hash") {
		t.Fatalf("wrong config hash: exit %d, %s", code, err0.String())
	}
	path := write(sf)
	outs := make([]bytes.Buffer, n)
	errs := make([]syncBuf, n)
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		args := append(append([]string(nil), common...), "--datadir", dirs[i], "--shard", fmt.Sprintf("%d/3", i),
			"--static", path, "--listen", fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", ports[i]))
		wg.Add(1)
		go func() { defer wg.Done(); codes[i] = run(args, &outs[i], &errs[i]) }()
	}
	wg.Wait()
	for i := 0; i < n; i++ {
		if codes[i] != 0 {
			t.Fatalf("node %d: exit %d: %s", i, codes[i], errs[i].String())
		}
		b, err := os.ReadFile(filepath.Join(dirs[i], store.ModelFile))
		if err != nil {
			t.Fatal(err)
		}
		var m node.RADMMModel
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		if m.Index != i || m.Nodes != n || m.TotalRows != total || m.Iters != 6 || !m.Privacy.ConditionsHold || m.Members[i] != sf.Members[i].ID {
			t.Fatalf("node %d: model.json %s", i, b)
		}
	}
}

// shardRows returns the rows of shard i/n of the embedded data set (the CLI's --shard).
func shardRows(t *testing.T, i, n int) int {
	t.Helper()
	d, err := consensus.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	sh, err := consensus.Split(d, n, "iid", 1)
	if err != nil {
		t.Fatal(err)
	}
	return sh[i].Rows
}

// TestGossipProcsKillResume: a --procs neighbour-exchange testnet (three node processes:
// this test binary run as dpadmm) where node 1 is killed with SIGKILL right after its
// release of iteration 5 is durable and before it is sent, then started again on the same
// data directory. It resumes from its journal and, with the neighbours on policy wait,
// the run completes with the simulator's model bit for bit (no release was re-noised: the
// seeded noise continues where it stood) and every ledger on disk holds each iteration
// 0..T exactly once.
func TestGossipProcsKillResume(t *testing.T) {
	t.Setenv(asMainEnv, "1")
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	d, _ := consensus.SyntheticLogistic(150, 4, 3, 5)
	sc, err := consensus.FitScaler(d, consensus.ScaleRowNorm)
	if err != nil {
		t.Fatal(err)
	}
	const T = 12
	o := sim.GossipOptions{Train: sc.Apply(d), Data: "synthetic", Nodes: 3, Algo: "radmm", Graph: "ring", Iters: T, Alpha: 2,
		Eta: 1, Gamma: 0.5, C: 5, Seed: 8, Problem: consensus.Problem{Loss: consensus.Logistic, Reg: consensus.Regularizer{L2: 0.01}}}
	sim, err := sim.RunGossip(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	rep, err := testnet.RunGossipProcs(ctx, testnet.GossipProcsConfig{Options: o, Binary: bin, Dir: dir, Barrier: 200 * time.Millisecond,
		MaxWait: time.Minute, OnMissing: node.MissingWait, KillNode: 1, KillAtIter: 5})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Network == nil || rep.Network.Restarts != 1 || rep.Network.StaleUses != 0 {
		t.Fatalf("network report %+v", rep.Network)
	}
	for k := range sim.Model {
		if math.Float64bits(rep.Model[k]) != math.Float64bits(sim.Model[k]) {
			t.Fatalf("model after the kill %v, simulator %v", rep.Model, sim.Model)
		}
	}
	for i := 0; i < 3; i++ {
		led, err := readLedger(filepath.Join(dir, fmt.Sprintf("node-%d", i)))
		if err != nil || len(led) != T+1 {
			t.Fatalf("node %d: %d ledger entries (%v)", i, len(led), err)
		}
		for k, e := range led {
			if e.Hop != uint64(k) {
				t.Fatalf("node %d: ledger entry %d is for iteration %d", i, k, e.Hop)
			}
		}
	}
	b, _ := os.ReadFile(filepath.Join(dir, "node-1.log"))
	if !strings.Contains(string(b), "resumed from the journal") {
		t.Errorf("node 1 log does not show the resumption:\n%s", b)
	}
}
