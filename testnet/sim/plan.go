package sim

import (
	"runtime"
	"sync"

	"github.com/dpadmm/dpadmm/privacy"
)

// PlannedPairwise is privacy.PlannedPairwise with the targets of a general graph spread
// over up to GOMAXPROCS goroutines (privacy.PlanBuilder: disjoint column ranges); the
// plan is the same bit for bit. The complete graph's closed form and small graphs run
// as they are.
func PlannedPairwise(n int, adj [][]int, complete bool, opt privacy.PlanOptions) (*privacy.Plan, error) {
	workers := runtime.GOMAXPROCS(0)
	if complete || n < 256 || workers < 2 {
		return privacy.PlannedPairwise(n, adj, complete, opt)
	}
	b, err := privacy.NewPlanBuilder(n, adj, opt)
	if err != nil {
		return nil, err
	}
	// Small interleaved chunks: the targets' costs differ (hitting times), so equal
	// halves could leave one goroutine idle.
	const chunk = 32
	var next int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				mu.Lock()
				lo := next
				next += chunk
				mu.Unlock()
				if lo >= n {
					return
				}
				b.Columns(lo, lo+chunk)
			}
		})
	}
	wg.Wait()
	return b.Plan(), nil
}
