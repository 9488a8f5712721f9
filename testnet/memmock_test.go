package testnet

import (
	"context"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/node"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/testnet/sim"
)

// lassoMemVsSim runs an n-node one-row lasso walk (p features, 8 active) of hops hops
// on RunMem over transport and in the simulator with the same seed, and requires the
// same final model bit for bit, the same path (trace hash) and the same update counts.
func lassoMemVsSim(t *testing.T, n, p int, hops uint64, transport string, idle, timeout time.Duration, tweak ...func(*MemConfig)) *MemResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	const seed = 5
	d, _ := consensus.SyntheticLasso(n, p, 8, 0.1, 42)
	sh, err := consensus.Split(d, n, "iid", seed)
	if err != nil {
		t.Fatal(err)
	}
	prob := consensus.Problem{Loss: consensus.Squared, Reg: consensus.Regularizer{L1: 0.01}}
	cfg := MemConfig{Shards: sh, Problem: prob, Gamma: 1, Lambda: 0.5, Clip: 1, Sigma: 0.5,
		MaxUpdates: 0, Seed: seed, Hops: hops, Transport: transport, mockIdle: idle, atEnd: heapProfileAtEnd(t)}
	for _, f := range tweak {
		f(&cfg)
	}
	res, err := RunMem(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Transport != transport {
		t.Fatalf("transport %q, want %q", res.Transport, transport)
	}
	gs, err := sim.NewSim(sim.SimConfig{Shards: sh, Problem: prob, Gamma: 1, Lambda: 0.5, Clip: 1, Sigma: 0.5, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	simStart := time.Now()
	if err := gs.RunHops(hops, 0, nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("the simulator's run of the same walk: %v (the network run: %v, %.0fx)", time.Since(simStart), res.Wall, res.Wall.Seconds()/time.Since(simStart).Seconds())
	want := gs.Z()
	if len(res.Model) != len(want) {
		t.Fatalf("dimension %d, want %d", len(res.Model), len(want))
	}
	nonzero := false
	for k := range want {
		if math.Float64bits(res.Model[k]) != math.Float64bits(want[k]) {
			t.Fatalf("coordinate %d: mem %v, sim %v", k, res.Model[k], want[k])
		}
		nonzero = nonzero || want[k] != 0
	}
	if !nonzero {
		t.Fatal("model is all zeros: the comparison is vacuous")
	}
	if got, w := sim.PathHash(res.Path), gs.TraceHash(); got != w {
		t.Fatalf("trace hash %016x, simulator %016x", got, w)
	}
	for i, u := range gs.Updates() {
		if res.Updates[i] != u {
			t.Fatalf("node %d: %d updates on mem, %d in sim", i, res.Updates[i], u)
		}
	}
	if res.PeakRSS == 0 || res.Heap == 0 {
		t.Fatalf("memory figures missing: peak RSS %d, heap %d", res.PeakRSS, res.Heap)
	}
	return res
}

// TestMemMockMatchesSim: 40 hosts on the mock transport give the simulator's model and
// path bit for bit, with connections closed by the hosts' limit on the way (their
// cached streams reopened).
func TestMemMockMatchesSim(t *testing.T) {
	const n, hops = 40, 1000
	res := lassoMemVsSim(t, n, 10, hops, TransportMock, 50*time.Millisecond, time.Minute)
	t.Logf("mock: %d hops over %d hosts in %v (%.0f hops/s), heap %.1f MB, %d connections closed by the limit",
		hops, n, res.Wall, hops/res.Wall.Seconds(), float64(res.Heap)/1e6, res.Trimmed)
	if res.Trimmed == 0 {
		t.Fatal("no connection was closed: the connection limit is not exercised")
	}
}

// TestMemTransportUnknown: an unknown transport is refused before any host starts.
func TestMemTransportUnknown(t *testing.T) {
	d, _ := consensus.SyntheticLasso(4, 2, 1, 0.1, 1)
	sh, _ := consensus.Split(d, 2, "iid", 1)
	_, err := RunMem(context.Background(), MemConfig{Shards: sh, Problem: consensus.Problem{Loss: consensus.Squared},
		Gamma: 1, Lambda: 0.5, Clip: 1, Sigma: 0.5, Seed: 1, Hops: 10, Transport: "udp"})
	if err == nil {
		t.Fatal("transport udp accepted")
	}
}

// TestPlannedPairwiseParallelSame: the planned matrix of a sparse graph computed over
// goroutines equals privacy.PlannedPairwise's bit for bit.
func TestPlannedPairwiseParallelSame(t *testing.T) {
	const n = 300
	adj := make([][]int, n)
	for i := range n {
		for _, d := range []int{1, 7, 31} {
			adj[i] = append(adj[i], (i+d)%n, (i+n-d)%n)
		}
	}
	opt := privacy.PlanOptions{Clip: 0.1, Sigma: 3, Updates: 4, Horizon: 2000, MaxWork: 2e7}
	want, err := privacy.PlannedPairwise(n, adj, false, opt)
	if err != nil {
		t.Fatal(err)
	}
	got, err := sim.PlannedPairwise(n, adj, false, opt)
	if err != nil {
		t.Fatal(err)
	}
	if got.Hops != want.Hops || got.TailBounded != want.TailBounded {
		t.Fatalf("hops %d tail %v, want %d %v", got.Hops, got.TailBounded, want.Hops, want.TailBounded)
	}
	for i := range n {
		for j := range n {
			if math.Float64bits(got.Pairs.Weight(i, j)) != math.Float64bits(want.Pairs.Weight(i, j)) {
				t.Fatalf("weight (%d,%d) = %v, want %v", i, j, got.Pairs.Weight(i, j), want.Pairs.Weight(i, j))
			}
		}
	}
}

// BenchmarkPlannedPairwiseParallel: the planned matrix of a sparse graph (ring plus
// chords, degree 6) at n = 4,000 with 50 first-passage steps per target, computed in one
// goroutine (privacy) and spread over GOMAXPROCS (testnet):
//
//	go test -run x -bench PlannedPairwiseParallel -benchtime 1x ./testnet/
func BenchmarkPlannedPairwiseParallel(b *testing.B) {
	const n = 4000
	adj := make([][]int, n)
	for i := range n {
		for _, d := range []int{1, 7, 31} {
			adj[i] = append(adj[i], (i+d)%n, (i+n-d)%n)
		}
	}
	opt := privacy.PlanOptions{Clip: 0.1, Sigma: 5, Updates: 10, Horizon: 50, MaxWork: 1e15}
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			if _, err := privacy.PlannedPairwise(n, adj, false, opt); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		for b.Loop() {
			if _, err := sim.PlannedPairwise(n, adj, false, opt); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// heapProfileAtEnd returns a hook that writes a heap profile (after a collection) to the
// file named by DPADMM_HEAP_PROFILE when the walk has ended and the hosts are still up:
// where the per-host memory of a large --mem run goes. nil without the variable.
func heapProfileAtEnd(t *testing.T) func([]*node.Node) {
	p := os.Getenv("DPADMM_HEAP_PROFILE")
	if p == "" {
		return nil
	}
	return func([]*node.Node) {
		f, err := os.Create(p)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		runtime.GC()
		if err := pprof.WriteHeapProfile(f); err != nil {
			t.Error(err)
		}
	}
}

// TestMemNoControlTopic: above memTopicMax hosts (lowered to 4 here) the nodes run
// without the GossipSub control topic: no host speaks a GossipSub protocol nor answers
// identify (its only user here), and this program's streams still open; every node
// still gets the final model (pushed directly), and the model and path are the
// simulator's bit for bit.
func TestMemNoControlTopic(t *testing.T) {
	const n, hops = 12, 300
	var protos []string
	res := lassoMemVsSim(t, n, 10, hops, TransportMock, 0, time.Minute, func(c *MemConfig) {
		c.topicMax = 4
		c.atEnd = func(nodes []*node.Node) {
			for _, nd := range nodes {
				for _, p := range nd.Host.Mux().Protocols() {
					protos = append(protos, string(p))
				}
			}
		}
	})
	if len(protos) == 0 {
		t.Fatal("no protocols listed")
	}
	for _, p := range protos {
		if strings.Contains(p, "meshsub") || strings.Contains(p, "floodsub") || strings.HasPrefix(p, "/ipfs/id/") {
			t.Fatalf("a host speaks %s without the control topic", p)
		}
	}
	if len(res.Models) != n {
		t.Fatalf("%d nodes returned a final model, want %d", len(res.Models), n)
	}
}
