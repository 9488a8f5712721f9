package privacy

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// The realised bound of one segment (the noisy steps between two views) is the minimum of
// sum_k a_k^2 over reals a_1..a_m with prefix sums A_k <= S_k for k < m and A_m = S_m, S_k
// the number of i's updates among the first k steps. At the optimum the allocation is
// constant between consecutive "active" steps (A_k = S_k; KKT: a changes only where a
// constraint binds), so the optimum is the cheapest feasible piecewise-linear
// interpolation of (k, S_k) through a set of active steps that contains 0 and m. The two
// solvers below search those interpolations without any convexity argument: enumSegment
// tries every subset of interior steps, dpSegment finds the cheapest chain of feasible
// chords by dynamic programming (the same minimum, in O(m^3)).

// staircase returns S_0..S_m for the segment s.
func staircase(s []bool) []int {
	S := make([]int, len(s)+1)
	for k, b := range s {
		S[k+1] = S[k]
		if b {
			S[k+1]++
		}
	}
	return S
}

// chordFeasible reports whether the straight line from (a, S_a) to (b, S_b) stays at or
// below S at every integer step in between (exact integer test).
func chordFeasible(S []int, a, b int) bool {
	for k := a + 1; k < b; k++ {
		if (S[b]-S[a])*(k-a) > (S[k]-S[a])*(b-a) {
			return false
		}
	}
	return true
}

func chordCost(S []int, a, b int) float64 {
	d := float64(S[b] - S[a])
	return d * d / float64(b-a)
}

// enumSegment is the exact segment cost by enumeration of all active sets (m <= ~16).
func enumSegment(s []bool) float64 {
	m := len(s)
	if m == 0 {
		return 0
	}
	S := staircase(s)
	best := math.Inf(1)
	for mask := 0; mask < 1<<(m-1); mask++ {
		cost, prev, ok := 0.0, 0, true
		for k := 1; k <= m && ok; k++ {
			if k < m && mask&(1<<(k-1)) == 0 {
				continue
			}
			if ok = chordFeasible(S, prev, k); ok {
				cost += chordCost(S, prev, k)
				prev = k
			}
		}
		if ok && cost < best {
			best = cost
		}
	}
	return best
}

// dpSegment is the exact segment cost as the cheapest chain of feasible chords from 0 to m.
func dpSegment(s []bool) float64 {
	m := len(s)
	S := staircase(s)
	best := make([]float64, m+1)
	for b := 1; b <= m; b++ {
		best[b] = math.Inf(1)
		for a := 0; a < b; a++ {
			if c := best[a] + chordCost(S, a, b); c < best[b] && chordFeasible(S, a, b) {
				best[b] = c
			}
		}
	}
	return best[m]
}

// segmentsOf cuts a trace into the segments of the observer: for every view (a step held
// by an observer) the noisy steps since the previous view, excluding the observer's own;
// with the final release, the noisy steps after the last view. Entry k of a segment is
// true when that noisy step is node i's.
func segmentsOf(tr *Trace, observer func(int) bool, i int) [][]bool {
	var segs [][]bool
	var cur []bool
	for _, s := range tr.Steps {
		if observer(s.Node) {
			segs = append(segs, cur)
			cur = nil
			continue
		}
		if s.Noisy {
			cur = append(cur, s.Node == i)
		}
	}
	if tr.FinalReleasedToAll {
		segs = append(segs, cur)
	}
	return segs
}

// bruteWeight is the realised weight of node i against an observer: segment costs by
// dpSegment, composed (summed) over the observer's views.
func bruteWeight(tr *Trace, observer func(int) bool, i int) float64 {
	w := 0.0
	for _, seg := range segmentsOf(tr, observer, i) {
		w += dpSegment(seg)
	}
	return w
}

// perUpdateWeight is the per-update charge: every noisy update of i at step k costs 1/m
// with m the noisy steps from k to the observer's next view (or to the end, with the final
// release); unobserved updates cost 0.
func perUpdateWeight(tr *Trace, observer func(int) bool, i int) float64 {
	K := len(tr.Steps)
	total := 0.0
	for k := 0; k < K; k++ {
		if tr.Steps[k].Node != i || !tr.Steps[k].Noisy {
			continue
		}
		m := 0
		seen := false
		for t := k; t < K; t++ {
			if t > k && observer(tr.Steps[t].Node) {
				seen = true
				break
			}
			if tr.Steps[t].Noisy {
				m++
			}
		}
		if seen || tr.FinalReleasedToAll {
			total += 1 / float64(m)
		}
	}
	return total
}

// segmentTrace is a trace whose only segment for observer 2 is s: node 2 holds the token,
// then the noisy steps of s (node 0 for true, node 1 for false), then node 2 again.
func segmentTrace(s []bool) *Trace {
	tr := &Trace{Nodes: 3, Clip: 0.1, Sigma: 1, Steps: []TraceStep{{2, true}}}
	for _, b := range s {
		v := 1
		if b {
			v = 0
		}
		tr.Steps = append(tr.Steps, TraceStep{v, true})
	}
	tr.Steps = append(tr.Steps, TraceStep{2, true})
	return tr
}

// TestPairwiseRealisedSegmentExact: on random segments of up to 12 noisy steps, the
// accountant's weight equals the exact minimum found by enumerating active sets (and the
// dynamic program agrees), never below it beyond rounding.
func TestPairwiseRealisedSegmentExact(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for trial := 0; trial < 3000; trial++ {
		m := 1 + r.IntN(12)
		p := r.Float64()
		s := make([]bool, m)
		for k := range s {
			s[k] = r.Float64() < p
		}
		want := enumSegment(s)
		if d := dpSegment(s); math.Abs(d-want) > 1e-12*(1+want) {
			t.Fatalf("segment %v: dynamic program %v, enumeration %v", s, d, want)
		}
		res, err := RealisedPairwise(segmentTrace(s))
		if err != nil {
			t.Fatal(err)
		}
		got := res.Pairs.Weight(0, 2)
		if math.Abs(got-want) > 1e-9 || got < want*(1-1e-12) {
			t.Fatalf("segment %v: fast %v, exact %v", s, got, want)
		}
		if ref := gcmCost(s); math.Abs(ref-want) > 1e-9 {
			t.Fatalf("segment %v: gcmCost %v, exact %v", s, ref, want)
		}
	}
}

// TestPairwiseRealisedClosedForms checks the segment costs with closed forms: one update
// of i followed by m-1 others then the view, 1/m; r consecutive updates seen directly, r
// (j,i,i,j: 2); another node's update then i's then the view, 1.
func TestPairwiseRealisedClosedForms(t *testing.T) {
	check := func(name string, s []bool, want float64) {
		t.Helper()
		res, err := RealisedPairwise(segmentTrace(s))
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Pairs.Weight(0, 2); math.Abs(got-want) > 1e-12*(1+want) {
			t.Errorf("%s: weight %v, want %v", name, got, want)
		}
	}
	for m := 1; m <= 40; m++ {
		s := make([]bool, m)
		s[0] = true
		check("one update then m-1 others", s, 1/float64(m))
	}
	for r := 1; r <= 20; r++ {
		s := make([]bool, r)
		for k := range s {
			s[k] = true
		}
		check("r consecutive updates", s, float64(r))
	}
	check("other, i, view", []bool{false, true}, 1)
	// Long runs: rises far above 2^16 (their squares overflow 32 bits). r consecutive
	// updates then others: one chord, r^2/m; then a gap and one more: the corner before the
	// last update is a vertex.
	long := make([]bool, 150000)
	for k := range 100000 {
		long[k] = true
	}
	check("100000 updates then 50000 others", long, 1e10/150000)
	long = append(long, true)
	check("... then one more", long, 1e10/150000+1)
	// i at the first and last of m steps: the corner before the last update is a vertex,
	// 1/(m-1) + 1.
	for m := 2; m <= 20; m++ {
		s := make([]bool, m)
		s[0], s[m-1] = true, true
		check("i first and last", s, 1/float64(m-1)+1)
	}
	// i, other, i: staircase 0,1,1,2; the chord (0,0)->(3,2) passes above (2,1), so the
	// minorant is (0,0)->(2,1)->(3,2): 1/2 + 1.
	check("i, other, i", []bool{true, false, true}, 1.5)
	// i, i, other: staircase 0,1,2,2; one chord (0,0)->(3,2): 4/3.
	check("i, i, other", []bool{true, true, false}, 4.0/3)
}

func TestPairwiseRealisedEx5(t *testing.T) {
	// Digest section 7, Ex5: n=4, alpha=4, C=0.1, sigma=1, every step noisy.
	walk := []int{2, 0, 3, 1, 0, 0, 2, 1, 3, 0, 1, 2}
	tr := &Trace{Nodes: 4, Clip: 0.1, Sigma: 1}
	for _, v := range walk {
		tr.Steps = append(tr.Steps, TraceStep{Node: v, Noisy: true})
	}
	res, err := RealisedPairwise(tr)
	if err != nil {
		t.Fatal(err)
	}
	// Observer 1 views at steps 3, 7 and 10. Segments for i = 0: steps 0-2 (2, 0, 3):
	// staircase 0,0,1,1, minorant (1,0)->(3,1), cost 1/2; steps 4-6 (0, 0, 2): staircase
	// 0,1,2,2, one chord (0,0)->(3,2), cost 4/3; steps 8-9 (3, 0): cost 1. Step 11 is never
	// viewed. Total 17/6 (the per-update charge was 1/2 + 1/3 + 1/2 + 1 = 7/3).
	want := 1.0/2 + 4.0/3 + 1
	if got := res.Pairs.Weight(0, 1); math.Abs(got-want) > 1e-12 {
		t.Fatalf("weight(0,1) = %v, want %v", got, want)
	}
	if res.Updates[0] != 4 {
		t.Fatalf("updates of node 0 = %d, want 4", res.Updates[0])
	}
	c := res.Pairs.Curve(0, 1)
	found := false
	for a, o := range Orders {
		if o == 4 {
			found = true
			// e1 = 8*4*0.01 = 0.32 at alpha = 4.
			if math.Abs(c[a]-0.32*17/6) > 1e-12 {
				t.Fatalf("curve at alpha=4: %v, want %v", c[a], 0.32*17/6)
			}
			if math.Abs(res.Local[a]-1.28) > 1e-12 {
				t.Fatalf("local at alpha=4: %v, want 1.28", res.Local[a])
			}
		}
	}
	if !found {
		t.Log("order 4 not on the grid; checked the weight only")
	}
	// Cross-check every pair against the per-pair reference in walk.go.
	for _, final := range []bool{false, true} {
		tr.FinalReleasedToAll = final
		res, err := RealisedPairwise(tr)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 4; i++ {
			for j := 0; j < 4; j++ {
				if i == j {
					continue
				}
				ref := RealizedPathCurve(walk, i, j, 0.1, 1, final)
				got := res.Pairs.Curve(i, j)
				for a := range ref {
					if math.Abs(ref[a]-got[a]) > 1e-12*(1+ref[a]) {
						t.Fatalf("final=%v pair (%d,%d) order %v: %v vs %v", final, i, j, Orders[a], got[a], ref[a])
					}
				}
			}
		}
	}
}

// TestPairwiseRealisedMatchesBruteForce: on random whole paths (forward steps included,
// with and without the final release) every pair and a two-member coalition equal the
// exact solver composed over the views; the weight is never below the per-update charge,
// and all-noisy paths give the same figures through RealizedPathCurve.
func TestPairwiseRealisedMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for trial := 0; trial < 400; trial++ {
		n := 2 + r.IntN(4)
		noisy := 0.6
		if trial%3 == 0 {
			noisy = 1
		}
		tr := randomTrace(r, n, r.IntN(31), noisy, trial%2 == 0)
		coal := []int{r.IntN(n), r.IntN(n)}
		res, err := RealisedPairwise(tr, coal)
		if err != nil {
			t.Fatal(err)
		}
		var path []int
		if noisy == 1 {
			for _, s := range tr.Steps {
				path = append(path, s.Node)
			}
		}
		for i := 0; i < n; i++ {
			for j := 0; j < n; j++ {
				if i == j {
					if w := res.Pairs.Weight(i, j); w != 0 {
						t.Fatalf("diagonal weight %v", w)
					}
					continue
				}
				jj := j
				obs := func(v int) bool { return v == jj }
				want := bruteWeight(tr, obs, i)
				got := res.Pairs.Weight(i, j)
				if math.Abs(got-want) > 1e-9 || got < want*(1-1e-12) {
					t.Fatalf("trial %d pair (%d,%d): fast %v exact %v", trial, i, j, got, want)
				}
				if old := perUpdateWeight(tr, obs, i); got < old*(1-1e-12) {
					t.Fatalf("trial %d pair (%d,%d): joint %v below per-update %v", trial, i, j, got, old)
				}
				if path != nil {
					ref := RealizedPathCurve(path, i, j, 0.5, 3, tr.FinalReleasedToAll)
					cur := res.Pairs.Curve(i, j)
					for a := range ref {
						if math.Abs(ref[a]-cur[a]) > 1e-9*(1+ref[a]) {
							t.Fatalf("trial %d pair (%d,%d) order %v: matrix %v, RealizedPathCurve %v", trial, i, j, Orders[a], cur[a], ref[a])
						}
					}
				}
			}
			in := i == coal[0] || i == coal[1]
			want := 0.0
			if !in {
				want = bruteWeight(tr, func(v int) bool { return v == coal[0] || v == coal[1] }, i)
			}
			if got := res.Coalitions[0].Weight[i]; math.Abs(got-want) > 1e-9 || got < want*(1-1e-12) {
				t.Fatalf("trial %d coalition %v node %d: fast %v exact %v", trial, coal, i, got, want)
			}
			if !in {
				// The pooled view sees at least what either member sees alone.
				for _, v := range coal {
					if c := res.Coalitions[0].Weight[i]; c < res.Pairs.Weight(i, v)-1e-12 {
						t.Fatalf("trial %d node %d: coalition %v below member %d alone %v", trial, i, c, v, res.Pairs.Weight(i, v))
					}
				}
			}
		}
	}
}

// TestPairwiseRealisedAboveOldCharge: on longer random paths the joint weight is never
// below the per-update charge, and strictly above it for some pair once a node updates
// twice before an observer's next view.
func TestPairwiseRealisedAboveOldCharge(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 20; trial++ {
		n := 2 + r.IntN(6)
		tr := randomTrace(r, n, 200, 0.8, trial%2 == 0)
		res, err := RealisedPairwise(tr)
		if err != nil {
			t.Fatal(err)
		}
		above := false
		for i := 0; i < n; i++ {
			for j := 0; j < n; j++ {
				if i == j {
					continue
				}
				jj := j
				old := perUpdateWeight(tr, func(v int) bool { return v == jj }, i)
				got := res.Pairs.Weight(i, j)
				if got < old*(1-1e-12) {
					t.Fatalf("trial %d pair (%d,%d): joint %v below per-update %v", trial, i, j, got, old)
				}
				above = above || got > old*(1+1e-9)
			}
		}
		if !above {
			t.Fatalf("trial %d: no pair above the per-update charge on a 200-step path", trial)
		}
	}
}

func TestPairwiseRealisedErrors(t *testing.T) {
	tr := &Trace{Nodes: 3, Clip: 1, Sigma: 1, Steps: []TraceStep{{0, true}, {5, true}}}
	if _, err := RealisedPairwise(tr); err == nil {
		t.Fatal("node out of range accepted")
	}
	tr.Steps[1].Node = 1
	if _, err := RealisedPairwise(tr, []int{}); err == nil {
		t.Fatal("empty coalition accepted")
	}
	if _, err := RealisedPairwise(tr, []int{3}); err == nil {
		t.Fatal("coalition member out of range accepted")
	}
	tr.Sigma = math.NaN()
	if _, err := RealisedPairwise(tr); err == nil {
		t.Fatal("NaN sigma accepted")
	}
}

func completeAdj(n int) [][]int {
	adj := make([][]int, n)
	for i := range adj {
		for v := 0; v < n; v++ {
			adj[i] = append(adj[i], v)
		}
	}
	return adj
}

func ringAdj(n int) [][]int {
	adj := make([][]int, n)
	for i := range adj {
		adj[i] = []int{(i + n - 1) % n, (i + 1) % n}
	}
	return adj
}

// TestPairwisePlannedCompleteMatchesTheorem4: the first-passage recursion on the complete
// adjacency gives E[1/m] = ln(n)/(n-1) per update, the printed Theorem 4's weight; the
// planned figure of the complete graph is the joint per-segment form, never below it.
func TestPairwisePlannedCompleteMatchesTheorem4(t *testing.T) {
	for _, n := range []int{2, 5, 20} {
		opt := PlanOptions{Clip: 0.1, Sigma: 2, Updates: 7}
		plan, err := PlannedPairwise(n, completeAdj(n), false, opt)
		if err != nil {
			t.Fatal(err)
		}
		if plan.TailBounded {
			t.Fatalf("n=%d: recursion did not converge", n)
		}
		closed, err := PlannedPairwise(n, nil, true, opt)
		if err != nil {
			t.Fatal(err)
		}
		ref := Theorem4Curve(n, 7, 0.1, 2)
		for i := 0; i < n; i++ {
			for j := 0; j < n; j++ {
				if i == j {
					continue
				}
				if w := plan.Pairs.Weight(i, j); math.Abs(w-GeometricFactor(n)) > 1e-9*GeometricFactor(n) {
					t.Fatalf("n=%d: E[1/m] = %v, want ln(n)/(n-1) = %v", n, w, GeometricFactor(n))
				}
				got := plan.Pairs.Curve(i, j)
				cl := closed.Pairs.Curve(i, j)
				for a := range ref {
					if math.IsInf(ref[a], 1) {
						if !math.IsInf(got[a], 1) {
							t.Fatalf("order %v: got %v, want +Inf", Orders[a], got[a])
						}
						continue
					}
					if math.Abs(got[a]-ref[a]) > 1e-9*ref[a] || !(cl[a] >= ref[a]) {
						t.Fatalf("n=%d order %v: planned %v closed %v Theorem4 %v", n, Orders[a], got[a], cl[a], ref[a])
					}
					if n > 2 && math.Abs(cl[a]-PlannedCompleteCurve(n, 7, 0, 0.1, 2)[a]) > 0 {
						t.Fatalf("n=%d order %v: closed %v is not the joint form", n, Orders[a], cl[a])
					}
				}
			}
		}
		s1, s2 := plan.Pairs.Summarize(1e-5), closed.Pairs.Summarize(1e-5)
		if !(s1.Worst.Epsilon <= s2.Worst.Epsilon) {
			t.Fatalf("n=%d: worst %v above the joint form's %v", n, s1.Worst.Epsilon, s2.Worst.Epsilon)
		}
	}
}

func TestPairwisePlannedRing(t *testing.T) {
	n := 30
	plan, err := PlannedPairwise(n, ringAdj(n), false, PlanOptions{Clip: 0.1, Sigma: 3, Updates: 5})
	if err != nil {
		t.Fatal(err)
	}
	near, far := plan.Pairs.Weight(0, 1), plan.Pairs.Weight(0, n/2)
	if !(near > far) || near < 0.5 {
		t.Fatalf("ring: neighbour weight %v, far weight %v", near, far)
	}
	en, _ := plan.Pairs.Epsilon(0, 1, 1e-5)
	ef, _ := plan.Pairs.Epsilon(0, n/2, 1e-5)
	if !(en > ef) {
		t.Fatalf("ring: neighbour eps %v <= far eps %v", en, ef)
	}
	s := plan.Pairs.Summarize(1e-5)
	if math.Abs(plan.Pairs.Weight(s.Worst.I, s.Worst.J)-near) > 1e-12 {
		t.Fatalf("worst pair %+v is not a neighbour pair", s.Worst)
	}
	if !(s.P50 <= s.P90 && s.P90 <= s.P99 && s.P99 <= s.Worst.Epsilon && s.Mean <= s.Worst.Epsilon) {
		t.Fatalf("summary not ordered: %+v", s)
	}
	// A small work budget truncates the recursion and must only raise the bound.
	cut, err := PlannedPairwise(n, ringAdj(n), false, PlanOptions{Clip: 0.1, Sigma: 3, Updates: 5, MaxWork: float64(n) * 3 * float64(n) * 20})
	if err != nil {
		t.Fatal(err)
	}
	if !cut.TailBounded {
		t.Fatal("expected a truncated recursion")
	}
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			if cut.Pairs.Weight(i, j) < plan.Pairs.Weight(i, j)-1e-12 {
				t.Fatalf("truncated bound below full bound at (%d,%d)", i, j)
			}
		}
	}
}

func TestPairwisePlannedErrors(t *testing.T) {
	good := PlanOptions{Clip: 1, Sigma: 1, Updates: 1}
	bad := []PlanOptions{
		{Clip: 1, Sigma: math.NaN(), Updates: 1},
		{Clip: 1, Sigma: -1, Updates: 1},
		{Clip: 0, Sigma: 1, Updates: 1},
		{Clip: 1, Sigma: 1, Updates: 0},
	}
	for _, o := range bad {
		if _, err := PlannedPairwise(4, ringAdj(4), false, o); err == nil {
			t.Fatalf("accepted %+v", o)
		}
	}
	if _, err := PlannedPairwise(1, nil, true, good); err == nil {
		t.Fatal("accepted n=1")
	}
	if _, err := PlannedPairwise(4, ringAdj(3), false, good); err == nil {
		t.Fatal("accepted short adjacency")
	}
	if _, err := PlannedPairwise(3, [][]int{{1}, {}, {0}}, false, good); err == nil {
		t.Fatal("accepted isolated node")
	}
}

func BenchmarkRealised1000x1e6(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	tr := randomTrace(r, 1000, 1_000_000, 0.9, true)
	b.ResetTimer()
	for b.Loop() {
		if _, err := RealisedPairwise(tr); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRealisedSummary1000(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	tr := randomTrace(r, 1000, 100_000, 0.9, true)
	res, err := RealisedPairwise(tr)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		res.Pairs.Summarize(1e-6)
	}
}

func BenchmarkPlanned1000Sparse(b *testing.B) {
	n := 1000
	r := rand.New(rand.NewPCG(9, 10))
	// Random 8-regular-ish graph: ring plus random chords, symmetric.
	adj := ringAdj(n)
	for e := 0; e < 3*n; e++ {
		u, v := r.IntN(n), r.IntN(n)
		if u != v {
			adj[u] = append(adj[u], v)
			adj[v] = append(adj[v], u)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := PlannedPairwise(n, adj, false, PlanOptions{Clip: 0.1, Sigma: 5, Updates: 10, Horizon: 10000}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkComplete1e5(b *testing.B) {
	for b.Loop() {
		p, err := PlannedPairwise(100000, nil, true, PlanOptions{Clip: 0.1, Sigma: 5, Updates: 10})
		if err != nil {
			b.Fatal(err)
		}
		p.Pairs.Summarize(1e-6)
	}
}

func TestPairwiseUnitConverterMatchesToDP(t *testing.T) {
	for _, unit := range []Curve{amplifiedUnit(0.1, 2, 9), amplifiedUnit(0.1, 2, 0), ZeroCurve()} {
		m := &PairwiseMatrix{N: 2, Unit: unit}
		for _, delta := range []float64{1e-9, 1e-5, 0.3} {
			f := m.unitConverter(delta)
			for _, w := range []float64{0, 1e-6, 0.01, 0.3, 1, 7, 300} {
				want, _ := ToDP(m.Unit.Scale(w), delta)
				if got := f(w); math.Abs(got-want) > 1e-9*(1+want) {
					t.Fatalf("delta %v w %v: %v vs ToDP %v", delta, w, got, want)
				}
				if w == 0 && f(w) != 0 {
					t.Fatalf("delta %v: weight 0 gives %v, want 0", delta, f(w))
				}
			}
		}
	}
}

func TestPairwiseSummarizeKnownMatrix(t *testing.T) {
	// n=3: six off-diagonal weights.
	w := []float64{
		0, 0.5, 2,
		0.1, 0, 0.1,
		3, 0.7, 0,
	}
	m := &PairwiseMatrix{N: 3, W: w, Unit: WalkUpdateCurve(0.2, 4)}
	s := m.Summarize(1e-5)
	var eps []float64
	sum := 0.0
	for i := 0; i < 3; i++ {
		for j := 0; j < 3; j++ {
			if i != j {
				e, _ := ToDP(m.Unit.Scale(w[i*3+j]), 1e-5)
				eps = append(eps, e)
				sum += e
			}
		}
	}
	sortFloats(eps)
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*(1+math.Abs(b)) }
	if s.Worst.I != 2 || s.Worst.J != 0 || !near(s.Worst.Epsilon, eps[5]) {
		t.Fatalf("worst %+v, want (2,0) eps %v", s.Worst, eps[5])
	}
	// Nearest-rank quantiles on 6 values: p50 -> 3rd, p90 and p99 -> 6th.
	if !near(s.P50, eps[2]) || !near(s.P90, eps[5]) || !near(s.P99, eps[5]) || !near(s.Mean, sum/6) {
		t.Fatalf("summary %+v, eps %v", s, eps)
	}
	b, err := json.Marshal(s.Figure())
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"worst":{"epsilon":`, `"i":2`, `"j":0`, `"p99":`, `"theorem":`, `"conditions_hold":false`} {
		if !strings.Contains(string(b), key) {
			t.Fatalf("JSON %s lacks %s", b, key)
		}
	}
}

func sortFloats(x []float64) {
	for i := 1; i < len(x); i++ {
		for k := i; k > 0 && x[k] < x[k-1]; k-- {
			x[k], x[k-1] = x[k-1], x[k]
		}
	}
}

// TestPairwiseRealisedLongPathsMatchReference: on long all-noisy paths with few nodes
// (long segments, hulls of many vertices) the matrix and the coalition weights equal
// RealizedPathCurve, which finds each minorant by gift wrapping instead of the sweep's
// backward monotone chain.
func TestPairwiseRealisedLongPathsMatchReference(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for _, n := range []int{2, 3, 8} {
		for _, final := range []bool{false, true} {
			tr := randomTrace(r, n, 3000, 1, final)
			path := make([]int, len(tr.Steps))
			for k, s := range tr.Steps {
				path[k] = s.Node
			}
			res, err := RealisedPairwise(tr, []int{n - 1})
			if err != nil {
				t.Fatal(err)
			}
			e1 := WalkUpdateCurve(tr.Clip, tr.Sigma)[0]
			for i := 0; i < n; i++ {
				for j := 0; j < n; j++ {
					if i == j {
						continue
					}
					want := RealizedPathCurve(path, i, j, tr.Clip, tr.Sigma, final)[0] / e1
					if got := res.Pairs.Weight(i, j); math.Abs(got-want) > 1e-9*(1+want) {
						t.Fatalf("n=%d final=%v pair (%d,%d): %v, reference %v", n, final, i, j, got, want)
					}
					if j == n-1 {
						if got := res.Coalitions[0].Weight[i]; math.Abs(got-res.Pairs.Weight(i, j)) > 1e-12*(1+got) {
							t.Fatalf("n=%d: one-member coalition %v, pair %v", n, got, res.Pairs.Weight(i, j))
						}
					}
				}
			}
		}
	}
}

// TestPlanBuilderColumns: on the 3-cycle the first passage from i to j != i is
// geometric with p = 1/2 (each step hits j with probability 1/2, else the third node),
// so E_i[1/m_j] = sum_t 2^-t / t = ln 2 for every pair, whichever order the columns are
// computed in; and on a sparse graph, columns computed in ranges (in any order, as
// goroutines of a caller would) give PlannedPairwise's plan bit for bit.
func TestPlanBuilderColumns(t *testing.T) {
	b, err := NewPlanBuilder(3, ringAdj(3), PlanOptions{Clip: 0.1, Sigma: 3, Updates: 2})
	if err != nil {
		t.Fatal(err)
	}
	b.Columns(2, 3)
	b.Columns(0, 2)
	p := b.Plan()
	for i := range 3 {
		for j := range 3 {
			want := math.Ln2
			if i == j {
				want = 0
			}
			if got := p.Pairs.Weight(i, j); math.Abs(got-want) > 1e-9 {
				t.Fatalf("3-cycle weight (%d,%d) = %v, want %v", i, j, got, want)
			}
		}
	}
	if b.Plan() != p {
		t.Fatal("a second Plan call built another plan")
	}
	const n = 60
	adj := sparseAdj(n, 3)
	for _, opt := range []PlanOptions{
		{Clip: 0.1, Sigma: 3, Updates: 4},
		{Clip: 0.1, Sigma: 3, Updates: 4, Horizon: 500, MaxWork: n * 9 * n * 15},
	} {
		whole, err := PlannedPairwise(n, adj, false, opt)
		if err != nil {
			t.Fatal(err)
		}
		if opt.MaxWork > 0 && !whole.TailBounded {
			t.Fatal("the small work budget did not truncate the recursion: the tail is not exercised")
		}
		b, err := NewPlanBuilder(n, adj, opt)
		if err != nil {
			t.Fatal(err)
		}
		b.Columns(41, 1000)
		b.Columns(0, 17)
		b.Columns(17, 41)
		parts := b.Plan()
		if parts.Hops != whole.Hops || parts.TailBounded != whole.TailBounded || parts.FinalCharged != whole.FinalCharged {
			t.Fatalf("%+v: ranges give hops %d tail %v final %v, whole %d %v %v", opt, parts.Hops, parts.TailBounded,
				parts.FinalCharged, whole.Hops, whole.TailBounded, whole.FinalCharged)
		}
		for i := range n {
			for j := range n {
				if math.Float64bits(parts.Pairs.Weight(i, j)) != math.Float64bits(whole.Pairs.Weight(i, j)) {
					t.Fatalf("%+v: weight (%d,%d): ranges %v, whole %v", opt, i, j, parts.Pairs.Weight(i, j), whole.Pairs.Weight(i, j))
				}
			}
		}
	}
}

// TestRealisedHugeNodeCount: a trace header naming more nodes than any matrix can hold is
// refused before anything is allocated, also when n*n overflows int64.
func TestRealisedHugeNodeCount(t *testing.T) {
	for _, n := range []int{100_000_000, 3_000_000_000_000} {
		tr := &Trace{Nodes: n, Clip: 0.1, Sigma: 1, Steps: []TraceStep{{Node: 0, Noisy: true}, {Node: 1, Noisy: true}}}
		if _, err := RealisedPairwise(tr); err == nil || !strings.Contains(err.Error(), "too large") {
			t.Errorf("%d nodes: %v", n, err)
		}
	}
}
