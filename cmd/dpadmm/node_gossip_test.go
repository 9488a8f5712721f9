package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dpadmm/dpadmm/node"
)

// TestNodeGossipCLI: three 'dpadmm node --algo radmm' members on loopback go through
// announce/join/start, each writes model.json with its own model and its own Theorem V.1
// figure.
func TestNodeGossipCLI(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	id0, err := node.DataDirPeerID(dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	common := []string{"node", "--run", "gcli", "--algo", "radmm", "--data", "embedded", "--iters", "6", "--alpha", "2",
		"--paper-c", "10", "--l2", "0.01", "--profile", "test", "--no-fsync", "--seed", "3", "--barrier-timeout", "20s"}
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
	start(1, "--peer", peer)
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
		b, err := os.ReadFile(filepath.Join(dirs[i], node.ModelFile))
		if err != nil {
			t.Fatal(err)
		}
		var m node.GossipModel
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		if m.Nodes != 3 || m.Iters != 6 || len(m.Neighbors) != 2 || m.Algo != "radmm" || len(m.Model) != 30 ||
			!m.Privacy.ConditionsHold || !(m.Privacy.Epsilon > 0) || m.Privacy.SecureNoise || m.Members[0] != id0.String() {
			t.Fatalf("node %d: model.json %s", i, b)
		}
		seen[m.Index] = true
	}
	if len(seen) != 3 {
		t.Fatalf("indices %v, want 0, 1, 2", seen)
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
