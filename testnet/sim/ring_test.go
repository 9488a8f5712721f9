package sim

import (
	"math"
	"strings"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
)

// TestRingNeighbourLeaksMore runs the walk on a ring of 24 nodes. What a ring neighbour
// (i, i+1) learns about node i must be visibly more than what the opposite node
// (i, i+12) learns: the walk reaches a neighbour after about one update and the far node
// only after about 144 hops on average. No planned network figure holds on a ring (the
// first-passage form charges updates one by one, below their joint cost): the planned
// figure is the local one, with the reason, and the realised figure is never above it.
func TestRingNeighbourLeaksMore(t *testing.T) {
	const n, hops, delta = 24, 24 * 150, 1e-5
	full, err := consensus.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	sc, _ := consensus.FitScaler(full, "standardize+rownorm")
	rep, err := Run(Options{Train: sc.Apply(full), Nodes: n,
		Problem: consensus.Problem{Loss: consensus.Squared, Reg: consensus.Regularizer{L2: 1e-2}},
		Gamma:   30, Lambda: 0.5, Clip: 0.1, Sigma: 2, Hops: hops, Seed: 5, Delta: delta,
		MaxUpdates: 400, // never reached: every hop is a noisy update
		Graph:      "ring"})
	if err != nil {
		t.Fatal(err)
	}
	pl, re := rep.Privacy.PairwisePlanned, rep.Privacy.PairwiseRealised
	if pl.ConditionsHold || !strings.Contains(pl.Note, "other than the complete one") || re == nil || !re.ConditionsHold {
		t.Fatalf("planned %+v\nrealised %+v", pl, re)
	}
	planned, realised := rep.Pairs.PlannedEpsilons(), rep.Pairs.RealisedEpsilons()
	ratioSum := 0.0
	for i := 0; i < n; i++ {
		near, far := i*n+(i+1)%n, i*n+(i+n/2)%n
		if !(realised[near] > 2*realised[far]) {
			t.Errorf("node %d: realised neighbour %.4g not above 2x far node %.4g", i, realised[near], realised[far])
		}
		for _, k := range []int{near, far} {
			if !(realised[k] <= planned[k]) {
				t.Errorf("pair (%d,%d): realised %.4g above the planned (local) %.4g", k/n, k%n, realised[k], planned[k])
			}
		}
		ratioSum += realised[near] / realised[far]
		if local := rep.Privacy.Local.PerNodeEpsilon[i]; realised[near] > float64(local) {
			t.Errorf("node %d: realised %.4g above its local figure %.4g", i, realised[near], local)
		}
	}
	t.Logf("ring n=%d, %d hops: mean realised neighbour/far ratio %.3g; node 0: neighbour planned %.4g realised %.4g, far planned %.4g realised %.4g",
		n, hops, ratioSum/n, planned[1], realised[1], planned[n/2], realised[n/2])
	if math.IsNaN(ratioSum) {
		t.Fatal("NaN epsilons")
	}
}
