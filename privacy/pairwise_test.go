package privacy

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// bruteWeights is the O(K^2 n^2) reference: for every pair and every noisy update of i,
// scan forward for j's first reception and count noisy updates on the way.
func bruteWeights(tr *Trace, observer func(int) bool, i int) float64 {
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

func TestPairwiseRealisedEx5(t *testing.T) {
	// Digest section 7, Ex5: n=4, alpha=4, C=L*gamma=0.1, sigma=1, every step noisy.
	walk := []int{2, 0, 3, 1, 0, 0, 2, 1, 3, 0, 1, 2}
	tr := &Trace{Nodes: 4, Clip: 0.1, Sigma: 1}
	for _, v := range walk {
		tr.Steps = append(tr.Steps, TraceStep{Node: v, Noisy: true})
	}
	res, err := RealisedPairwise(tr)
	if err != nil {
		t.Fatal(err)
	}
	want := 1.0/2 + 1.0/3 + 1.0/2 + 1
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
			if math.Abs(c[a]-0.7466666666666668) > 1e-12 {
				t.Fatalf("curve at alpha=4: %v, want 0.746667", c[a])
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

func TestPairwiseRealisedMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for trial := 0; trial < 40; trial++ {
		n := 2 + r.IntN(6)
		tr := randomTrace(r, n, r.IntN(60), 0.6, trial%2 == 0)
		coal := []int{r.IntN(n), r.IntN(n)}
		res, err := RealisedPairwise(tr, coal)
		if err != nil {
			t.Fatal(err)
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
				want := bruteWeights(tr, func(v int) bool { return v == jj }, i)
				if got := res.Pairs.Weight(i, j); math.Abs(got-want) > 1e-9 {
					t.Fatalf("trial %d pair (%d,%d): fast %v brute %v", trial, i, j, got, want)
				}
			}
			in := i == coal[0] || i == coal[1]
			want := 0.0
			if !in {
				want = bruteWeights(tr, func(v int) bool { return v == coal[0] || v == coal[1] }, i)
			}
			if got := res.Coalitions[0].Weight[i]; math.Abs(got-want) > 1e-9 {
				t.Fatalf("trial %d coalition %v node %d: fast %v brute %v", trial, coal, i, got, want)
			}
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
					if math.Abs(got[a]-ref[a]) > 1e-9*ref[a] || math.Abs(cl[a]-ref[a]) > 1e-12*ref[a] {
						t.Fatalf("n=%d order %v: planned %v closed %v Theorem4 %v", n, Orders[a], got[a], cl[a], ref[a])
					}
				}
			}
		}
		s1, s2 := plan.Pairs.Summarize(1e-5), closed.Pairs.Summarize(1e-5)
		if math.Abs(s1.Worst.Epsilon-s2.Worst.Epsilon) > 1e-6*s2.Worst.Epsilon {
			t.Fatalf("n=%d: worst %v vs closed %v", n, s1.Worst.Epsilon, s2.Worst.Epsilon)
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
	b, err := json.Marshal(s)
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
