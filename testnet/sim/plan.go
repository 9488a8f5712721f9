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
	if complete || n < 256 || runtime.GOMAXPROCS(0) < 2 {
		return privacy.PlannedPairwise(n, adj, complete, opt)
	}
	b, err := privacy.NewPlanBuilder(n, adj, opt)
	if err != nil {
		return nil, err
	}
	// Small interleaved chunks: the targets' costs differ (hitting times), so equal
	// halves could leave one goroutine idle.
	inChunks(n, 32, b.Columns)
	return b.Plan(), nil
}

// Spread is the privacy.Spread of the simulators and the command line: the observers of a
// realised accountant in chunks over up to GOMAXPROCS goroutines (the matrix is the same
// bit for bit, privacy.TestRealisedSpreadSameBits). Small sweeps run in the caller.
func Spread(n int, f func(lo, hi int)) {
	workers := runtime.GOMAXPROCS(0)
	if n < 64 || workers < 2 {
		f(0, n)
		return
	}
	// Interleaved chunks: observers' sweeps cost about the same, but a chunk per worker
	// would leave one idle if another core is busy.
	inChunks(n, max(8, n/(8*workers)), f)
}

// inChunks runs f over [0, n) in chunks of the given size, taken in order by up to
// GOMAXPROCS goroutines, and returns when every chunk is done.
func inChunks(n, chunk int, f func(lo, hi int)) {
	var next int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for {
				mu.Lock()
				lo := next
				next += chunk
				mu.Unlock()
				if lo >= n {
					return
				}
				f(lo, min(lo+chunk, n))
			}
		})
	}
	wg.Wait()
}
