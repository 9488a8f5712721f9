package sim

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/consensus/graph"
	"github.com/dpadmm/dpadmm/privacy"
)

// naiveWeight is the realised-path weight of pair (i, j) by the definition: cut the path
// into segments, the noisy steps between two consecutive steps held by an observer in obs
// (the observer's own steps excluded), plus, when final is true, the noisy steps after the
// last such step (the final model). A segment with S_k of i's updates among its first k
// steps costs min sum_k a_k^2 over allocations with prefix sums A_k <= S_k and A_m = S_m
// (amplification by iteration with several changed steps); the weight is the sum over
// segments. The minimum is taken over chains of active steps 0 = k_0 < ... < k_r = m
// (A = S there, linear in between, as at the optimum), each chord staying below S, by
// dynamic programming.
func naiveWeight(steps []privacy.TraceStep, i int, obs map[int]bool, final bool) float64 {
	segCost := func(seg []bool) float64 {
		m := len(seg)
		S := make([]int, m+1)
		for k, b := range seg {
			S[k+1] = S[k]
			if b {
				S[k+1]++
			}
		}
		best := make([]float64, m+1)
		for b := 1; b <= m; b++ {
			best[b] = math.Inf(1)
			for a := 0; a < b; a++ {
				ok := true
				for k := a + 1; k < b && ok; k++ {
					ok = (S[b]-S[a])*(k-a) <= (S[k]-S[a])*(b-a)
				}
				d := float64(S[b] - S[a])
				if c := best[a] + d*d/float64(b-a); ok && c < best[b] {
					best[b] = c
				}
			}
		}
		return best[m]
	}
	w := 0.0
	var seg []bool
	for _, s := range steps {
		if obs[s.Node] {
			w += segCost(seg)
			seg = seg[:0]
			continue
		}
		if s.Noisy {
			seg = append(seg, s.Node == i)
		}
	}
	if final {
		w += segCost(seg)
	}
	return w
}

func randomPath(r *rand.Rand, n, k int, pNoisy float64) ([]privacy.TraceStep, []int) {
	steps := make([]privacy.TraceStep, k)
	upd := make([]int, n)
	for t := range steps {
		v := r.IntN(n)
		noisy := r.Float64() < pNoisy
		steps[t] = privacy.TraceStep{Node: v, Noisy: noisy}
		if noisy {
			upd[v]++
		}
	}
	return steps, upd
}

// TestAccountRealisedMatchesDefinition: the realised matrix, its summary and the
// coalition figure equal the definition computed pair by pair, with and without the
// final release.
func TestAccountRealisedMatchesDefinition(t *testing.T) {
	const n, clip, sigma, delta = 7, 0.1, 1.0, 1e-5
	r := rand.New(rand.NewPCG(1, 2))
	steps, upd := randomPath(r, n, 400, 0.8)
	unit := privacy.WalkUpdateCurve(clip, sigma)
	for _, final := range []bool{false, true} {
		pr, pm, err := Account(AccountInput{Updates: upd, Clip: clip, Sigma: sigma, Delta: delta, Cap: 1000,
			Hops: uint64(len(steps)), Path: steps, FinalReleasedToAll: final, Coalition: []int{2, 5}})
		if err != nil {
			t.Fatal(err)
		}
		got := pm.RealisedEpsilons()
		worst, sum := -1.0, 0.0
		for i := 0; i < n; i++ {
			for j := 0; j < n; j++ {
				if i == j {
					if !math.IsNaN(got[i*n+j]) {
						t.Fatalf("diagonal %d: %v", i, got[i*n+j])
					}
					continue
				}
				want, _ := privacy.ToDP(unit.Scale(naiveWeight(steps, i, map[int]bool{j: true}, final)), delta)
				if math.Abs(got[i*n+j]-want) > 1e-9*(1+want) {
					t.Fatalf("final=%v pair (%d,%d): %v, definition %v", final, i, j, got[i*n+j], want)
				}
				worst = math.Max(worst, want)
				sum += want
			}
		}
		re := pr.PairwiseRealised
		if re == nil || !re.ConditionsHold || re.Theorem != privacy.TheoremRealised {
			t.Fatalf("realised section %+v", re)
		}
		if math.Abs(float64(re.Worst.Epsilon)-worst) > 1e-9*worst || math.Abs(float64(re.Mean)-sum/float64(n*(n-1))) > 1e-9*worst {
			t.Errorf("summary worst %v mean %v, definition %v %v", re.Worst.Epsilon, re.Mean, worst, sum/float64(n*(n-1)))
		}
		if !strings.Contains(re.Note, "knows the path") {
			t.Errorf("note must say the bound holds for an observer who knows the path: %q", re.Note)
		}
		c := re.Coalition
		if c == nil || len(c.PerNodeEpsilon) != n {
			t.Fatalf("coalition %+v", c)
		}
		cw := -1.0
		for i := 0; i < n; i++ {
			want := 0.0
			if i != 2 && i != 5 {
				want, _ = privacy.ToDP(unit.Scale(naiveWeight(steps, i, map[int]bool{2: true, 5: true}, final)), delta)
			}
			if math.Abs(float64(c.PerNodeEpsilon[i])-want) > 1e-9*(1+want) {
				t.Errorf("coalition node %d: %v, definition %v", i, c.PerNodeEpsilon[i], want)
			}
			cw = math.Max(cw, want)
		}
		if math.Abs(float64(c.Epsilon)-cw) > 1e-9*cw || c.PerNodeEpsilon[c.I] != c.Epsilon {
			t.Errorf("coalition worst %v at %d, definition %v", c.Epsilon, c.I, cw)
		}
		// The pooled view sees at least as much as either member alone.
		for i := 0; i < n; i++ {
			if i != 2 && i != 5 && float64(c.PerNodeEpsilon[i]) < got[i*n+2]-1e-9 {
				t.Errorf("node %d: coalition %v below member 2 alone %v", i, c.PerNodeEpsilon[i], got[i*n+2])
			}
		}
		// Local: per node, K_i updates composed.
		for i, k := range upd {
			want := exactLocal(clip, sigma, k, delta)
			if math.Abs(float64(pr.Local.PerNodeEpsilon[i])-want) > 1e-12*want {
				t.Errorf("local node %d: %v want %v", i, pr.Local.PerNodeEpsilon[i], want)
			}
		}
	}
}

// TestAccountPlanned checks the planned section on the complete graph (the joint
// per-segment form at the cap, written out), on a ring (no planned figure holds: the local
// bound, with the first-passage form only as "would give"), and that each checked
// condition, when it fails, replaces the figures by the local bound at K_i and says why.
func TestAccountPlanned(t *testing.T) {
	const n, clip, sigma, delta = 12, 0.1, 1.0, 1e-5
	r := rand.New(rand.NewPCG(3, 4))
	steps, upd := randomPath(r, n, 600, 1) // every hop noisy
	base := AccountInput{Updates: upd, Clip: clip, Sigma: sigma, Delta: delta, Cap: 80, Hops: uint64(len(steps)), Path: steps}

	pr, pm, err := Account(base)
	if err != nil {
		t.Fatal(err)
	}
	pl := pr.PairwisePlanned
	// The joint form at the cap K = 80 with the final release after H = 600 hops, written
	// out: (1+c) e1 ((K+3) rho(n) + 2 ln(n)/(n-1) + F(n, H)),
	// F = sum_{L=1..H} (1/n)(1-1/n)^(L-1) g(L) + g(H), g(L) = 1/L + 2(L-1)/((n-1)L).
	H := len(steps)
	gl := func(L float64) float64 { return 1/L + 2*(L-1)/((n-1)*L) }
	F := gl(float64(H))
	for L := 1; L <= H; L++ {
		F += math.Pow(1-1.0/n, float64(L-1)) / n * gl(float64(L))
	}
	wj := 83*privacy.JointSegmentRho(n) + 2*math.Log(n)/(n-1) + F
	want := make(privacy.Curve, len(privacy.Orders))
	for k, a := range privacy.Orders {
		e1 := 8 * a * clip * clip / (sigma * sigma)
		if c := (a - 1) * e1; c <= 1 {
			want[k] = (1 + c) * e1 * wj
		} else {
			want[k] = math.Inf(1)
		}
	}
	thm4 := privacy.Bound{}
	thm4.Epsilon, thm4.Order = privacy.ToDP(want, delta)
	if plain := privacy.Theorem4Bound(n, 80, clip, sigma, delta); !(thm4.Epsilon > plain.Epsilon) {
		t.Errorf("the final release should add to Theorem 4: %v vs %v", thm4.Epsilon, plain.Epsilon)
	}
	if !pl.ConditionsHold || pl.Theorem != privacy.Theorem4FinalName || math.Abs(float64(pl.Worst.Epsilon)-thm4.Epsilon) > 1e-9*thm4.Epsilon ||
		pl.Mean != pl.Worst.Epsilon || pl.P99 != pl.Worst.Epsilon {
		t.Errorf("complete: %+v, Theorem 4 at K=80: %v", pl, thm4.Epsilon)
	}
	if e := pm.PlannedEpsilons(); math.Abs(e[1]-thm4.Epsilon) > 1e-9*thm4.Epsilon || !math.IsNaN(e[0]) {
		t.Errorf("complete matrix: %v %v", e[0], e[1])
	}

	g, err := graph.Parse("ring", n, 1)
	if err != nil {
		t.Fatal(err)
	}
	ring := base
	ring.Graph = g
	pr, pm, err = Account(ring)
	if err != nil {
		t.Fatal(err)
	}
	pl = pr.PairwisePlanned
	plan, err := privacy.PlannedPairwise(n, g.Adj, false, privacy.PlanOptions{Clip: clip, Sigma: sigma, Updates: 80, Horizon: len(steps)})
	if err != nil {
		t.Fatal(err)
	}
	e01, _ := plan.Pairs.Epsilon(0, 1, delta)
	e06, _ := plan.Pairs.Epsilon(0, 6, delta)
	got := pm.PlannedEpsilons()
	loc80 := privacy.LocalBound(clip, sigma, 80, delta)
	loc80.Epsilon = exactLocal(clip, sigma, 80, delta)
	if pl.ConditionsHold || !strings.Contains(pl.Note, "other than the complete one") || !strings.Contains(pl.Note, "would give") ||
		math.Abs(got[1]-loc80.Epsilon) > 1e-9*loc80.Epsilon || got[6] != got[1] || !(e01 > e06) {
		t.Errorf("ring: %+v; (0,1) %v, (0,6) %v, want the local %v (first-passage form %v, %v)", pl, got[1], got[6], loc80.Epsilon, e01, e06)
	}

	fails := []struct {
		name, why string
		in        AccountInput
		k         int
	}{
		{"no cap", "no hard cap", func() AccountInput { a := ring; a.Cap = 0; return a }(), maxInt(upd)},
		{"forwarding", "forwarded the token", func() AccountInput {
			a := ring
			a.Hops += 5 // five hops without a noisy update
			a.Path = nil
			return a
		}(), 80},
		{"order condition", "order condition", func() AccountInput { a := base; a.Clip, a.Sigma = 1, 0.1; return a }(), 80},
	}
	for _, f := range fails {
		pr, pm, err := Account(f.in)
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		pl := pr.PairwisePlanned
		loc := privacy.LocalBound(f.in.Clip, f.in.Sigma, f.k, delta)
		loc.Epsilon = exactLocal(f.in.Clip, f.in.Sigma, f.k, delta)
		if pl.ConditionsHold || !strings.Contains(pl.Note, f.why) || !strings.Contains(pl.Note, "local bound") ||
			math.Abs(float64(pl.Worst.Epsilon)-loc.Epsilon) > 1e-12*loc.Epsilon || pl.P50 != pl.Worst.Epsilon {
			t.Errorf("%s: %+v; local bound at K=%d is %v", f.name, pl, f.k, loc.Epsilon)
		}
		if e := pm.PlannedEpsilons(); e[1] != float64(pl.Worst.Epsilon) {
			t.Errorf("%s: CSV/plot planned figure %v, report %v", f.name, e[1], pl.Worst.Epsilon)
		}
	}

	// A budget's caps are hard caps: the smaller of the two is K_i.
	bud := base
	bud.Caps = make([]int, n)
	for i := range bud.Caps {
		bud.Caps[i] = 70 + i%3
	}
	pr, _, err = Account(bud)
	if err != nil {
		t.Fatal(err)
	}
	plan72, _ := privacy.PlannedPairwise(n, nil, true, privacy.PlanOptions{Clip: clip, Sigma: sigma, Updates: 72, Horizon: len(steps)})
	if w := plan72.Pairs.Summarize(delta).Worst.Epsilon; math.Abs(float64(pr.PairwisePlanned.Worst.Epsilon)-w) > 1e-12*w {
		t.Errorf("budget caps: planned %v, want K=72 figure %v", pr.PairwisePlanned.Worst.Epsilon, w)
	}
}

func maxInt(v []int) int {
	m := 0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

// TestAccountNoPrivacyAndErrors: sigma 0 gives no guarantee anywhere; bad inputs are
// errors, not panics.
func TestAccountNoPrivacyAndErrors(t *testing.T) {
	upd := []int{3, 4, 5}
	pr, _, err := Account(AccountInput{Updates: upd, Clip: 0.1, Sigma: 0, Delta: 1e-5, Cap: 5, Hops: 12})
	if err != nil {
		t.Fatal(err)
	}
	if pr.PairwisePlanned.ConditionsHold || pr.PairwiseRealised.ConditionsHold || pr.Local.ConditionsHold ||
		pr.PairwisePlanned.Worst.Epsilon < 1e300 || pr.PairwiseRealised.Worst.Epsilon < 1e300 || pr.Local.Epsilon < 1e300 {
		t.Errorf("sigma 0: %+v", pr)
	}
	if _, err := json.Marshal(pr); err != nil {
		t.Fatal(err)
	}
	ok := AccountInput{Updates: upd, Clip: 0.1, Sigma: 1, Delta: 1e-5, Hops: 12}
	for name, in := range map[string]AccountInput{
		"no nodes":        {Clip: 0.1, Sigma: 1, Delta: 1e-5},
		"delta 0":         func() AccountInput { a := ok; a.Delta = 0; return a }(),
		"delta 1":         func() AccountInput { a := ok; a.Delta = 1; return a }(),
		"sigma NaN":       func() AccountInput { a := ok; a.Sigma = math.NaN(); return a }(),
		"sigma -1":        func() AccountInput { a := ok; a.Sigma = -1; return a }(),
		"clip 0":          func() AccountInput { a := ok; a.Clip = 0; return a }(),
		"coalition range": func() AccountInput { a := ok; a.Coalition = []int{3}; return a }(),
		"coalition twice": func() AccountInput { a := ok; a.Coalition = []int{1, 1}; return a }(),
		"path length":     func() AccountInput { a := ok; a.Path = make([]privacy.TraceStep, 3); return a }(),
	} {
		if _, _, err := Account(in); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestAccountRealisedFallback: without a path, or with a path that disagrees with the
// update counters, the realised figure is the busiest node's local bound, with the reason
// and the theorem and conditions of the realised bound.
func TestAccountRealisedFallback(t *testing.T) {
	const clip, sigma, delta = 0.1, 1.0, 1e-5
	upd := []int{3, 5, 4}
	local := exactLocal(clip, sigma, 5, delta)
	path := []privacy.TraceStep{{Node: 0, Noisy: true}, {Node: 1, Noisy: true}, {Node: 2, Noisy: true}}
	for _, c := range []struct {
		name, why string
		in        AccountInput
	}{
		{"no path", "too many hops", AccountInput{Updates: upd, Clip: clip, Sigma: sigma, Delta: delta, Cap: 5, Hops: 12, RealisedNote: "too many hops"}},
		{"no path, no reason", "no path kept", AccountInput{Updates: upd, Clip: clip, Sigma: sigma, Delta: delta, Cap: 5, Hops: 12}},
		{"counts differ", "the path has 1 noisy updates of node 0, the counters 3", AccountInput{Updates: upd, Clip: clip, Sigma: sigma, Delta: delta, Cap: 5, Hops: 3, Path: path}},
	} {
		pr, _, err := Account(c.in)
		if err != nil {
			t.Fatal(err)
		}
		re := pr.PairwiseRealised
		if re == nil || math.Abs(float64(re.Worst.Epsilon)-local) > 1e-12*local || re.Worst.I != 1 || re.Mean != re.Worst.Epsilon ||
			re.Theorem != privacy.TheoremRealised || re.Conditions != privacy.RealisedConditions ||
			!strings.HasPrefix(re.Note, "realised figure not computed: "+c.why) {
			t.Errorf("%s: %+v, want the local bound %v of node 1 and the reason %q", c.name, re, local, c.why)
		}
	}
}

func TestUnitEpsilonMatchesToDP(t *testing.T) {
	for _, unit := range []privacy.Curve{privacy.WalkUpdateCurve(0.1, 1), privacy.AmplifiedUpdateCurve(0.1, 2, 9), privacy.Theorem4Curve(50, 100, 0.1, 1),
		privacy.Theorem4Curve(50, 0, 0.1, 1), nil} {
		for _, delta := range []float64{1e-9, 1e-5, 0.3} {
			f := unitEpsilon(unit, delta)
			for _, w := range []float64{0, 1e-6, 0.01, 0.3, 1, 7, 300} {
				want, _ := privacy.ToDP(unit.Scale(w), delta)
				if got := f(w); math.Abs(got-want) > 1e-9*(1+want) {
					t.Fatalf("delta %v w %v: %v vs ToDP %v", delta, w, got, want)
				}
			}
		}
	}
}

// TestPairsCSVAndPNG: the CSV lists every ordered pair with the matrices' figures; the
// PNG decodes, has the expected size and is not blank.
func TestPairsCSVAndPNG(t *testing.T) {
	const n = 9
	r := rand.New(rand.NewPCG(7, 8))
	steps, upd := randomPath(r, n, 900, 1)
	g, _ := graph.Parse("ring", n, 1)
	_, pm, err := Account(AccountInput{Updates: upd, Clip: 0.1, Sigma: 1, Delta: 1e-5, Graph: g, Cap: 200,
		Hops: uint64(len(steps)), Path: steps, FinalReleasedToAll: true})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WritePairsCSV(&buf, pm); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1+n*(n-1) || strings.Join(rows[0], ",") != PairsHeader {
		t.Fatalf("%d rows, header %v", len(rows), rows[0])
	}
	planned, realised := pm.PlannedEpsilons(), pm.RealisedEpsilons()
	seen := map[[2]int]bool{}
	for _, row := range rows[1:] {
		i, _ := strconv.Atoi(row[0])
		j, _ := strconv.Atoi(row[1])
		p, err1 := strconv.ParseFloat(row[2], 64)
		q, err2 := strconv.ParseFloat(row[3], 64)
		if err1 != nil || err2 != nil || i == j || seen[[2]int{i, j}] {
			t.Fatalf("row %v", row)
		}
		seen[[2]int{i, j}] = true
		if math.Abs(p-planned[i*n+j]) > 1e-8*p || math.Abs(q-realised[i*n+j]) > 1e-8*q || !(p > 0 && q > 0) {
			t.Fatalf("row %v: matrices %v %v", row, planned[i*n+j], realised[i*n+j])
		}
	}
	for _, kind := range []string{PlotBoth, PlotRealised} {
		buf.Reset()
		if err := WritePairsPNG(&buf, pm, kind); err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(&buf)
		if err != nil {
			t.Fatal(err)
		}
		b := img.Bounds()
		wantW := 480 // points per panel at 96 dpi
		if kind == PlotBoth {
			wantW = 960
		}
		if b.Dx() != wantW || b.Dy() != 600 {
			t.Errorf("%s: size %v", kind, b)
		}
		colours := map[uint32]bool{}
		nonWhite := 0
		for y := b.Min.Y; y < b.Max.Y; y += 2 {
			for x := b.Min.X; x < b.Max.X; x += 2 {
				cr, cg, cb, _ := img.At(x, y).RGBA()
				colours[cr>>8<<16|cg>>8<<8|cb>>8] = true
				if cr < 0xf000 || cg < 0xf000 || cb < 0xf000 {
					nonWhite++
				}
			}
		}
		if frac := float64(nonWhite) / float64(b.Dx()*b.Dy()/4); len(colours) < 50 || frac < 0.3 {
			t.Errorf("%s: %d colours, %.2f non-white: blank plot?", kind, len(colours), frac)
		}
	}
	if err := WritePairsPNG(&buf, pm, "heat"); err == nil {
		t.Error("accepted plot kind heat")
	}
}

// TestRunReportPrivacy: a run's report carries every privacy key, ended = "hops", and
// its realised figure is the one recomputed from its own kept path.
func TestRunReportPrivacy(t *testing.T) {
	full, err := consensus.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	train, _ := consensus.TrainTest(full, 0.2, 1)
	sc, _ := consensus.FitScaler(train, "standardize+rownorm")
	rep, err := Run(Options{Train: sc.Apply(train), Nodes: 10,
		Problem: consensus.Problem{Loss: consensus.Logistic, Reg: consensus.Regularizer{L2: 1e-2}},
		Gamma:   30, Lambda: 0.5, Clip: 0.1, Sigma: 1, Hops: 800, Seed: 2, Delta: 1e-5, MaxUpdates: 150,
		Graph: "ring", KeepTrace: true, Coalition: []int{4}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Ended != "hops" || rep.Hops != 800 {
		t.Errorf("ended %q after %d hops", rep.Ended, rep.Hops)
	}
	b, _ := json.Marshal(rep)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	pr := m["privacy"].(map[string]any)
	for _, k := range []string{"delta", "conversion", "updates", "local", "pairwise_planned", "pairwise_realised"} {
		if _, ok := pr[k]; !ok {
			t.Errorf("privacy lacks %q", k)
		}
	}
	for _, sec := range []string{"pairwise_planned", "pairwise_realised"} {
		s := pr[sec].(map[string]any)
		for _, k := range []string{"worst", "mean", "p50", "p90", "p99", "theorem", "conditions", "conditions_hold", "note"} {
			if _, ok := s[k]; !ok {
				t.Errorf("%s lacks %q", sec, k)
			}
		}
	}
	loc := pr["local"].(map[string]any)
	for _, k := range []string{"epsilon", "order", "updates", "per_node_epsilon", "theorem", "conditions", "conditions_hold"} {
		if _, ok := loc[k]; !ok {
			t.Errorf("local lacks %q", k)
		}
	}
	if _, ok := m["ended"]; !ok {
		t.Error("report lacks ended")
	}
	steps := make([]privacy.TraceStep, len(rep.Trace))
	for k, s := range rep.Trace {
		steps[k] = privacy.TraceStep{Node: s.Node, Noisy: s.Noisy}
	}
	res, err := privacy.RealisedPairwise(&privacy.Trace{Nodes: 10, Clip: 0.1, Sigma: 1, Steps: steps, FinalReleasedToAll: true}, []int{4})
	if err != nil {
		t.Fatal(err)
	}
	want := res.Pairs.Summarize(1e-5)
	got := rep.Privacy.PairwiseRealised
	if float64(got.Worst.Epsilon) != want.Worst.Epsilon || got.Worst.I != want.Worst.I || got.Worst.J != want.Worst.J || float64(got.P90) != want.P90 {
		t.Errorf("realised %+v, recomputed %+v", got.Worst, want.Worst)
	}
	if got.Coalition == nil || got.Coalition.Members[0] != 4 || got.Coalition.PerNodeEpsilon[4] != 0 {
		t.Errorf("coalition %+v", got.Coalition)
	}
	if !(got.Worst.Epsilon <= rep.Privacy.Local.Epsilon) {
		t.Errorf("realised worst %v above local %v", got.Worst.Epsilon, rep.Privacy.Local.Epsilon)
	}
}

// BenchmarkAccountRealised1000x1e6 is the report's privacy section (local, Theorem 4 and
// the realised matrix with its summary) for n = 1000 nodes and a 10^6-hop path.
// go test -run XXX -bench AccountRealised ./testnet/sim/
func BenchmarkAccountRealised1000x1e6(b *testing.B) {
	const n, hops = 1000, 1_000_000
	r := rand.New(rand.NewPCG(5, 6))
	steps, upd := randomPath(r, n, hops, 0.9)
	b.ResetTimer()
	for b.Loop() {
		if _, _, err := Account(AccountInput{Updates: upd, Clip: 0.1, Sigma: 5, Delta: 1e-6, Cap: 2000,
			Hops: hops, Path: steps, FinalReleasedToAll: true}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPairsOutput1000 writes the pairs CSV and the two-panel PNG for n = 1000.
func BenchmarkPairsOutput1000(b *testing.B) {
	const n = 1000
	r := rand.New(rand.NewPCG(5, 6))
	steps, upd := randomPath(r, n, 100_000, 0.9)
	_, pm, err := Account(AccountInput{Updates: upd, Clip: 0.1, Sigma: 5, Delta: 1e-6, Cap: 2000,
		Hops: uint64(len(steps)), Path: steps, FinalReleasedToAll: true})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		var buf bytes.Buffer
		if err := WritePairsCSV(&buf, pm); err != nil {
			b.Fatal(err)
		}
		buf.Reset()
		if err := WritePairsPNG(&buf, pm, PlotBoth); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRunBudgetEndsWalk: with a local budget the walk ends before its hops when every
// node is out of budget; no node's local figure exceeds the budget; the realised figure
// still covers the whole path; the ledger files are written and closed.
func TestRunBudgetEndsWalk(t *testing.T) {
	full, err := consensus.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	sc, _ := consensus.FitScaler(full, "standardize+rownorm")
	dir := t.TempDir()
	const budget = 6.0
	rep, err := Run(Options{Train: sc.Apply(full), Nodes: 16,
		Problem: consensus.Problem{Loss: consensus.Squared, Reg: consensus.Regularizer{L2: 1e-2}},
		Gamma:   10, Lambda: 0.5, Clip: 0.1, Sigma: 1, Hops: 100000, Seed: 4, Delta: 1e-5,
		Budget: &BudgetSpec{Kind: "local", Epsilon: budget, Delta: 1e-5}, LedgerDir: dir, KeepTrace: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Ended != "budget exhausted" || rep.Hops >= 100000 || rep.Budget == nil || uint64(len(rep.Trace)) != rep.Hops {
		t.Fatalf("ended %q after %d hops (trace %d), budget %+v", rep.Ended, rep.Hops, len(rep.Trace), rep.Budget)
	}
	noisy := 0
	for _, s := range rep.Trace {
		if s.Noisy {
			noisy++
		}
	}
	total := 0
	for i, e := range rep.Privacy.Local.PerNodeEpsilon {
		if e > budget {
			t.Errorf("node %d: local epsilon %v over budget %v", i, e, budget)
		}
		total += rep.Privacy.Updates[i]
	}
	if total != noisy || rep.Budget.Overruns != 0 {
		t.Errorf("%d updates, %d noisy steps, %d overruns", total, noisy, rep.Budget.Overruns)
	}
	re := rep.Privacy.PairwiseRealised
	if !re.ConditionsHold || !(re.Worst.Epsilon <= rep.Privacy.Local.Epsilon) {
		t.Errorf("realised %+v, local %v", re, rep.Privacy.Local.Epsilon)
	}
	// Forwarding hops by exhausted nodes break the planned form: it must say so.
	if int(rep.Hops) > noisy && (rep.Privacy.PairwisePlanned.ConditionsHold || !strings.Contains(rep.Privacy.PairwisePlanned.Note, "forwarded")) {
		t.Errorf("planned with %d forwarding hops: %+v", int(rep.Hops)-noisy, rep.Privacy.PairwisePlanned)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil || len(files) != 16 {
		t.Fatalf("ledger files %v %v", files, err)
	}
	size := int64(0)
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		size += st.Size()
	}
	if size == 0 {
		t.Error("empty ledgers")
	}
}

// TestHeatPoolingLargeN: matrices above maxHeatCells per side are pooled by block
// maxima (the worst pair stays visible) and still draw.
func TestHeatPoolingLargeN(t *testing.T) {
	const n, b = 7, 3
	z := make([]float64, n*n)
	for k := range z {
		z[k] = float64((k * 37) % 11)
	}
	z[0], z[8] = math.NaN(), math.NaN()
	cells, m := poolMax(z, n, b)
	if m != 3 {
		t.Fatalf("m = %d", m)
	}
	for ci := 0; ci < m; ci++ {
		for cj := 0; cj < m; cj++ {
			want := math.NaN()
			for i := ci * b; i < min(n, (ci+1)*b); i++ {
				for j := cj * b; j < min(n, (cj+1)*b); j++ {
					if v := z[i*n+j]; !math.IsNaN(v) && !(v <= want) {
						want = v
					}
				}
			}
			if got := cells[ci*m+cj]; got != want && !(math.IsNaN(got) && math.IsNaN(want)) {
				t.Errorf("cell (%d,%d): %v want %v", ci, cj, got, want)
			}
		}
	}
	const big = maxHeatCells + 500
	eps := make([]float64, big*big)
	for i := 0; i < big; i++ {
		for j := 0; j < big; j++ {
			eps[i*big+j] = math.Abs(float64(i-j)) / big
		}
	}
	var buf bytes.Buffer
	if err := WriteHeatPNG(&buf, big, []HeatPanel{{Title: "pooled", Eps: eps}}); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil || img.Bounds().Dx() != 480 {
		t.Fatalf("%v %v", err, img.Bounds())
	}
}

// exactLocal is the walk's local figure written out independently: the smaller of the
// RDP conversion of k Gaussian mechanisms of sensitivity 4C (noise sigma) and the exact
// Gaussian-DP conversion at mu = 4 C sqrt(k)/sigma.
func exactLocal(clip, sigma float64, k int, delta float64) float64 {
	rdp, _ := privacy.ToDP(privacy.WalkLocalCurve(clip, sigma, k), delta)
	return math.Min(rdp, privacy.GDPEpsilon(4*clip*math.Sqrt(float64(k))/sigma, delta))
}
