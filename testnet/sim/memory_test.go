package sim

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
)

// simHeap builds an n-node one-row lasso simulator with p features, runs hops hops and
// returns the live heap in bytes attributable to it (after GC, minus the baseline).
func simHeap(t *testing.T, n, p int, hops uint64) uint64 {
	t.Helper()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	d, _ := consensus.SyntheticLasso(n, p, 8, 0.1, 7)
	shards, err := consensus.Split(d, n, "iid", 1)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSim(SimConfig{Shards: shards, Problem: consensus.Problem{Loss: consensus.Squared, Reg: consensus.Regularizer{L1: 0.01}},
		Gamma: 1, Lambda: 0.5, Clip: 1, Sigma: 0.1, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RunHops(hops, 0, nil); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(s)
	runtime.KeepAlive(d)
	if after.HeapAlloc < before.HeapAlloc {
		return 0
	}
	return after.HeapAlloc - before.HeapAlloc
}

// memChildEnv makes the test binary act as the measuring child of TestSimMemoryLinear:
// the heap is measured in a process of its own, so that goroutines left by other tests
// of the package (libp2p hosts shutting down, for instance) cannot disturb the figures.
const memChildEnv = "DPADMM_MEM_CHILD"

// memChild is TestSimMemoryLinear in its child role: it prints the heap of an n-node
// simulator (v is "n,hops").
func memChild(t *testing.T, v string) {
	var n, hops int
	if _, err := fmt.Sscanf(v, "%d,%d", &n, &hops); err != nil {
		t.Fatalf("%s=%q: %v", memChildEnv, v, err)
	}
	h := simHeap(t, n, 64, uint64(hops))
	fmt.Printf("HEAP %d RSS %s\n", h, strings.ReplaceAll(vmHWM(t), " ", ""))
}

// childHeap runs TestSimMemoryLinear as a child in a new process and returns its heap and peak RSS.
func childHeap(t *testing.T, n, hops int) (uint64, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSimMemoryLinear$", "-test.count=1")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d,%d", memChildEnv, n, hops))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child for %d nodes: %v\n%s", n, err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		var h uint64
		var rss string
		if _, err := fmt.Sscanf(line, "HEAP %d RSS %s", &h, &rss); err == nil {
			return h, rss
		}
	}
	t.Fatalf("child for %d nodes printed no heap figure:\n%s", n, out)
	return 0, ""
}

// TestSimMemoryLinear: the simulator's memory is O(n*p). The heap of a 4,000-node run is
// about 4 times that of a 1,000-node run, and the bytes per node are a small multiple of
// the p floats every node must hold (its row, u_i and its cached factor). Each size is
// measured in a child process. DPADMM_RSS_NODES=10000 also measures that many nodes
// (200,000 hops) and logs the child's peak RSS (VmHWM).
func TestSimMemoryLinear(t *testing.T) {
	if v := os.Getenv(memChildEnv); v != "" {
		memChild(t, v)
		return
	}
	const p = 64
	h1, _ := childHeap(t, 1000, 20000)
	h4, _ := childHeap(t, 4000, 20000)
	ratio := float64(h4) / float64(h1)
	perNode := float64(h4) / 4000
	t.Logf("heap: 1000 nodes %.1f MB, 4000 nodes %.1f MB (ratio %.2f), %.0f bytes per node = %.1f x 8p",
		float64(h1)/1e6, float64(h4)/1e6, ratio, perNode, perNode/(8*p))
	if ratio < 3 || ratio > 5 {
		t.Fatalf("heap grows by %.2f for 4x the nodes: not linear", ratio)
	}
	if perNode > 40*8*p {
		t.Fatalf("%.0f bytes per node, more than 40 vectors of p = %d floats", perNode, p)
	}
	if v := os.Getenv("DPADMM_RSS_NODES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("DPADMM_RSS_NODES=%q: want a positive integer", v)
		}
		h, rss := childHeap(t, n, 200000)
		t.Logf("%d nodes, p=%d, 200000 hops: heap %.1f MB, peak RSS of the process %s", n, p, float64(h)/1e6, rss)
	}
}

// vmHWM returns the process's peak resident set size from /proc/self/status.
func vmHWM(t *testing.T) string {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "VmHWM:") {
			return strings.TrimSpace(strings.TrimPrefix(sc.Text(), "VmHWM:"))
		}
	}
	return "unknown"
}
