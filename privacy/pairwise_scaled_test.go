package privacy

import (
	"math"
	"math/rand/v2"
	"testing"
)

// scaledPairBrute is an independent computation of the weight of pair (i, j) with
// per-step scales: for each segment (the noisy steps between two views of j, and the last
// one when final), the greatest convex minorant of ALL the points (V_k, D_k), k = 0..m,
// found by gift wrapping (from each vertex, the point of least slope, the farthest on
// ties), and the sum of rise^2/run along it.
func scaledPairBrute(steps []TraceStep, scale []float64, i, j int, final bool) float64 {
	w := 0.0
	var xs, ys []float64
	reset := func() { xs, ys = xs[:0], ys[:0]; xs, ys = append(xs, 0), append(ys, 0) }
	seg := func() float64 {
		c := 0.0
		for a := 0; a < len(xs)-1; {
			best := a + 1
			for b := a + 2; b < len(xs); b++ {
				// slope(a, b) <= slope(a, best)
				if (ys[b]-ys[a])*(xs[best]-xs[a]) <= (ys[best]-ys[a])*(xs[b]-xs[a]) {
					best = b
				}
			}
			if dy := ys[best] - ys[a]; dy > 0 {
				c += dy * dy / (xs[best] - xs[a])
			}
			a = best
		}
		return c
	}
	reset()
	for k, st := range steps {
		if st.Node == j {
			w += seg()
			reset()
			continue
		}
		if !st.Noisy {
			continue
		}
		s := scale[k]
		d := 0.0
		if st.Node == i {
			d = s
		}
		xs = append(xs, xs[len(xs)-1]+s*s)
		ys = append(ys, ys[len(ys)-1]+d)
	}
	if final {
		w += seg()
	}
	return w
}

func randomScaledTrace(r *rand.Rand, n, K int) *Trace {
	tr := &Trace{Nodes: n, Clip: 0.5, Sigma: 2, FinalReleasedToAll: r.IntN(2) == 0}
	for k := 0; k < K; k++ {
		tr.Steps = append(tr.Steps, TraceStep{Node: r.IntN(n), Noisy: r.IntN(8) != 0})
	}
	return tr
}

// TestScaledAgainstBruteForce: on random small paths with random step sizes, every pair's
// weight equals the brute-force minorant (to 1e-9 relative) and is never below it.
func TestScaledAgainstBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 300; trial++ {
		n := 2 + r.IntN(4)
		tr := randomScaledTrace(r, n, 1+r.IntN(40))
		scale := make([]float64, len(tr.Steps))
		for k := range scale {
			scale[k] = math.Exp(r.NormFloat64())
		}
		res, err := RealisedPairwiseScaled(tr, scale)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			for j := 0; j < n; j++ {
				if i == j {
					continue
				}
				got, want := res.Pairs.Weight(i, j), scaledPairBrute(tr.Steps, scale, i, j, tr.FinalReleasedToAll)
				if got < want*(1-1e-9)-1e-12 || got > want*(1+1e-9)+1e-12 {
					t.Fatalf("trial %d pair (%d,%d): %v, brute force %v; steps %v scales %v", trial, i, j, got, want, tr.Steps, scale)
				}
			}
		}
	}
}

// TestScaledUnitScalesIsRealised: with every scale 1 the scaled accountant is the
// constant-noise one (RealisedPairwise), coalitions included.
func TestScaledUnitScalesIsRealised(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for trial := 0; trial < 50; trial++ {
		n := 2 + r.IntN(6)
		tr := randomScaledTrace(r, n, 1+r.IntN(200))
		ones := make([]float64, len(tr.Steps))
		for k := range ones {
			ones[k] = 1
		}
		coal := []int{0, n - 1}
		a, err1 := RealisedPairwise(tr, coal)
		b, err2 := RealisedPairwiseScaled(tr, ones, coal)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		for i := 0; i < n; i++ {
			for j := 0; j < n; j++ {
				if x, y := a.Pairs.Weight(i, j), b.Pairs.Weight(i, j); math.Abs(x-y) > 1e-9*math.Max(x, 1) {
					t.Fatalf("pair (%d,%d): %v vs %v", i, j, x, y)
				}
			}
			if x, y := a.Coalitions[0].Weight[i], b.Coalitions[0].Weight[i]; math.Abs(x-y) > 1e-9*math.Max(x, 1) {
				t.Fatalf("coalition node %d: %v vs %v", i, x, y)
			}
		}
	}
}

// TestSGDRealisedChargesEachHop: the sgd realised figure (StepRealisedPairwise) is never
// below the brute force with the steps' own sizes eta/sqrt(k); the constant-noise charge
// (one scale for every hop) is below it for some pair of these paths, so a figure that
// used it would make this test fail.
func TestSGDRealisedChargesEachHop(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	under := 0
	for trial := 0; trial < 100; trial++ {
		n := 3 + r.IntN(5)
		tr := randomScaledTrace(r, n, 20+r.IntN(200))
		run := tr.WalkRun()
		run.Step, run.Rate, run.SGDNonExpansive = "sgd", 1, true
		res, _, err := StepRealisedPairwise(tr, run)
		if err != nil {
			t.Fatal(err)
		}
		half := *tr
		half.Clip = tr.Clip / 2
		scale := SGDStepScales(&half)
		flat, _ := RealisedPairwise(&half)
		for i := 0; i < n; i++ {
			for j := 0; j < n; j++ {
				if i == j {
					continue
				}
				want := scaledPairBrute(tr.Steps, scale, i, j, tr.FinalReleasedToAll)
				if got := res.Pairs.Weight(i, j); got < want*(1-1e-9)-1e-12 {
					t.Fatalf("pair (%d,%d): %v below the brute force %v", i, j, got, want)
				}
				if flat.Pairs.Weight(i, j) < want*(1-1e-6) {
					under++
				}
			}
		}
		if !sameCurve(res.Pairs.Unit, WalkUpdateCurve(tr.Clip/2, tr.Sigma)) {
			t.Fatal("unit is not one replace-one sgd update (clip C/2)")
		}
	}
	if under == 0 {
		t.Error("the constant-noise charge was never below the per-hop one: the test cannot catch it")
	}
}

// TestSGDStepScales: 1/sqrt(k) for the holder's k-th noisy update, 1 for forwards.
func TestSGDStepScales(t *testing.T) {
	tr := &Trace{Nodes: 2, Clip: 1, Sigma: 1, Steps: []TraceStep{{0, true}, {1, true}, {0, true}, {0, false}, {0, true}, {1, true}}}
	want := []float64{1, 1, 1 / math.Sqrt(2), 1, 1 / math.Sqrt(3), 1 / math.Sqrt(2)}
	for k, s := range SGDStepScales(tr) {
		if s != want[k] {
			t.Errorf("step %d: %v want %v", k, s, want[k])
		}
	}
	if _, err := RealisedPairwiseScaled(tr, []float64{1}); err == nil {
		t.Error("short scales accepted")
	}
	if _, err := RealisedPairwiseScaled(tr, []float64{1, 1, 0, 1, 1, 1}); err == nil {
		t.Error("scale 0 accepted")
	}
}
