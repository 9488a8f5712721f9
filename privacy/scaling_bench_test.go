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
	for _, n := range []int{250, 500, 1000, 2000} {
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
