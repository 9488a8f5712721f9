package privacy

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// meanRealisedWeight is an independent estimate of E[W_ij] over uniform paths: paths of
// `hops` hops on the complete graph (uniform next hop, self included, the starter node 0),
// every hop a noisy update, each run through RealisedPairwise; returns the largest per-pair
// mean over the paths and its standard error.
func meanRealisedWeight(t *testing.T, n, hops, paths int, final bool, seed uint64) (worst, se float64) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 11))
	sum := make([]float64, n*n)
	sum2 := make([]float64, n*n)
	for p := 0; p < paths; p++ {
		tr := &Trace{Nodes: n, Clip: 1, Sigma: 1, FinalReleasedToAll: final}
		node := 0
		for k := 0; k < hops; k++ {
			tr.Steps = append(tr.Steps, TraceStep{Node: node, Noisy: true})
			node = r.IntN(n)
		}
		res, err := RealisedPairwise(tr)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			for j := 0; j < n; j++ {
				w := res.Pairs.Weight(i, j)
				sum[i*n+j] += w
				sum2[i*n+j] += w * w
			}
		}
	}
	fp := float64(paths)
	for k := range sum {
		if k/n == k%n {
			continue
		}
		m := sum[k] / fp
		if m > worst {
			worst = m
			se = math.Sqrt(math.Max(sum2[k]/fp-m*m, 0) / fp)
		}
	}
	return worst, se
}

// TestPlannedCompleteWeightCoversJointCost: what "planned" promises. For small and middle
// networks the planned weight is at least the expected joint realised weight of every pair
// (estimated over random paths, independently of the segment formula, with four standard
// errors of slack for the estimate), with and without the final release; the per-update
// form of the printed Theorem 4 (K ln(n)/(n-1) plus the final-release term) is below that
// expectation, so a plan built from it would make this test fail.
func TestPlannedCompleteWeightCoversJointCost(t *testing.T) {
	for _, c := range []struct{ n, hops int }{{3, 150}, {4, 200}, {5, 250}, {8, 400}, {12, 600}, {30, 1500}} {
		K := c.hops / c.n
		for _, final := range []bool{true, false} {
			mean, se := meanRealisedWeight(t, c.n, c.hops, 300, final, uint64(c.n))
			h := uint64(0)
			if final {
				h = uint64(c.hops)
			}
			plan := PlannedCompleteWeight(c.n, K, h)
			if plan < mean+4*se {
				t.Errorf("n %d hops %d final %v: planned weight %.4g below the mean realised %.4g (se %.2g)", c.n, c.hops, final, plan, mean, se)
			}
			old := float64(K) * GeometricFactor(c.n)
			if final {
				old += FinalReleaseWeight(1/float64(c.n), h, K)
			}
			if !(old < mean-4*se) {
				t.Errorf("n %d final %v: the per-update form %.4g is not below the joint mean %.4g: the test cannot catch it", c.n, final, old, mean)
			}
		}
	}
}

// TestJointSegmentRho: the Monte Carlo bound is below the closed form for small n (it is
// the tighter one there) and above the per-update factor ln(n)/(n-1) everywhere (the joint
// cost is never below the per-update one); n < 3 has none.
func TestJointSegmentRho(t *testing.T) {
	for _, n := range []int{3, 5, 10, 50, 256, 257, 1000, 100000} {
		r, a, g := JointSegmentRho(n), JointSegmentRhoAnalytic(n), GeometricFactor(n)
		if !(r <= a) || !(r > g) {
			t.Errorf("n %d: rho %v, closed form %v, per-update %v", n, r, a, g)
		}
		if n <= 50 && !(r < a) {
			t.Errorf("n %d: the Monte Carlo bound %v is not below the closed form %v", n, r, a)
		}
	}
	if !math.IsInf(JointSegmentRho(2), 1) || !math.IsInf(PlannedCompleteWeight(2, 10, 100), 1) || PlannedCompleteWeight(5, 0, 10) != 0 {
		t.Error("edge cases")
	}
	// F(n, H) with the geometric tail cut equals the full sum.
	for _, n := range []int{3, 20} {
		full := 0.0
		fn := float64(n)
		for L := 1; L <= 200000; L++ {
			full += math.Pow(1-1/fn, float64(L-1)) / fn * (1/float64(L) + 2*float64(L-1)/((fn-1)*float64(L)))
		}
		full += 1/200000.0 + 2*(200000.0-1)/((fn-1)*200000)
		if got := FinalSegmentWeight(n, 200000); math.Abs(got-full) > 1e-9*full || got < full*(1-1e-12) {
			t.Errorf("n %d: F %v want %v", n, got, full)
		}
	}
}

// TestTwoNodesNoAmplification: with two nodes no planned network figure holds; the
// planned bound is the local one with the reason.
func TestTwoNodesNoAmplification(t *testing.T) {
	r := WalkRun{Nodes: 2, Complete: true, Clip: 0.1, Sigma: 10, Cap: 125, Hops: 200, Planning: true}
	v := WalkDecide(r)
	if v.PlannedHolds || !strings.Contains(strings.Join(v.Reasons, "|"), "n = 2") {
		t.Fatalf("verdict %+v", v)
	}
	b := WalkPlannedBound(r, 1e-5)
	if loc := LocalBound(0.1, 10, 125, 1e-5); b.ConditionsHold || b.Epsilon != loc.Epsilon {
		t.Errorf("bound %+v, local %v", b, loc.Epsilon)
	}
	r.Nodes, r.Hops = 3, 300
	if v := WalkDecide(r); !v.PlannedHolds {
		t.Errorf("n 3: %+v", v)
	}
	r.Complete = false
	if v := WalkDecide(r); v.PlannedHolds || !strings.Contains(strings.Join(v.Reasons, "|"), "other than the complete") {
		t.Errorf("ring: %+v", v)
	}
}
