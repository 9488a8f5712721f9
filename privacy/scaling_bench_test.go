package privacy

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// Growth of the accountant's cost with n. Run with
//
//	go test -run x -bench 'Scaling' -benchtime 1x ./privacy/
//
// Planned (sparse graph): one taboo recursion per target j, each O(edges * horizon), so
// O(n * edges * horizon) in all; realised: O(hops * n) for the per-observer scans;
// complete graph: a closed form, O(orders), independent of n.

func sparseAdj(n int, seed uint64) [][]int {
	r := rand.New(rand.NewPCG(seed, seed+1))
	adj := ringAdj(n)
	for e := 0; e < 3*n; e++ {
		u, v := r.IntN(n), r.IntN(n)
		if u != v {
			adj[u] = append(adj[u], v)
			adj[v] = append(adj[v], u)
		}
	}
	return adj
}

func BenchmarkScalingPlannedSparse(b *testing.B) {
	for _, n := range []int{250, 500, 1000, 2000, 10000} {
		adj := sparseAdj(n, 9)
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := PlannedPairwise(n, adj, false, PlanOptions{Clip: 0.1, Sigma: 5, Updates: 10, Horizon: 10000}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkScalingRealised1e6(b *testing.B) {
	for _, n := range []int{250, 500, 1000, 2000} {
		r := rand.New(rand.NewPCG(5, 6))
		tr := randomTrace(r, n, 1_000_000, 0.9, true)
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := RealisedPairwise(tr); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkScalingComplete(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000, 1000000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			for b.Loop() {
				p, err := PlannedPairwise(n, nil, true, PlanOptions{Clip: 0.1, Sigma: 5, Updates: 10})
				if err != nil {
					b.Fatal(err)
				}
				p.Pairs.Summarize(1e-6)
			}
		})
	}
}

// BenchmarkScalingPlannedSparseFixedSteps is the planned matrix on the sparse graph
// with the recursion held to 50 steps per target (Horizon 50): the cost is then
// n targets x 50 steps x (edges + n), O(n^2) at fixed degree, and the n = 10,000 figure
// is what a full plan costs per 50 steps of first-passage law. Columns of one builder;
// a caller spreads ranges of them over goroutines (testnet/sim.PlannedPairwise).
//
//	go test -run x -bench 'ScalingPlannedSparseFixedSteps' -benchtime 1x ./privacy/
func BenchmarkScalingPlannedSparseFixedSteps(b *testing.B) {
	for _, n := range []int{1000, 2000, 4000, 10000} {
		adj := sparseAdj(n, 9)
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			for b.Loop() {
				p, err := PlannedPairwise(n, adj, false, PlanOptions{Clip: 0.1, Sigma: 5, Updates: 10, Horizon: 50, MaxWork: 1e15})
				if err != nil {
					b.Fatal(err)
				}
				if p.Hops != 50 {
					b.Fatalf("%d steps, want 50", p.Hops)
				}
			}
		})
	}
}

// BenchmarkScalingRealisedHops is the realised matrix at fixed n = 1,000 for growing
// traces (O(hops) at fixed n), and at fixed hops = 10^5 for growing n (O(n) per hop):
// together the O(K n) cost, extrapolated to K = 10^7, n = 10^4. The cases at n = 250 with
// 10^6 and 10^7 hops check that the cost per term stays the same when the trace (80 MB
// at 10^7 hops) no longer fits the caches.
//
//	go test -run x -bench 'ScalingRealisedHops' -benchtime 1x ./privacy/
func BenchmarkScalingRealisedHops(b *testing.B) {
	for _, c := range []struct{ n, hops int }{{1000, 100_000}, {1000, 400_000}, {2500, 100_000}, {5000, 100_000}, {10000, 100_000}, {250, 1_000_000}, {250, 10_000_000}} {
		r := rand.New(rand.NewPCG(5, 6))
		tr := randomTrace(r, c.n, c.hops, 0.9, true)
		b.Run(fmt.Sprintf("n=%d/hops=%d", c.n, c.hops), func(b *testing.B) {
			for b.Loop() {
				if _, err := RealisedPairwise(tr); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(c.n)/float64(c.hops), "ns/hop/observer")
		})
	}
}
