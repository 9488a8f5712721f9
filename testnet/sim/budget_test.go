package sim

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/consensus/graph"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/walk"
)

// overrunTol is the relative slack allowed between an epsilon recomputed from a ledger
// (a sum of per-entry curves) and the budget: the cap is computed from the product
// K * curve, which can differ from the sum in the last bits.
const overrunTol = 1e-12

// ringWeights returns max_j W[i][j] of the planned pairwise matrix of a ring, per node.
func ringWeights(t *testing.T, n int, cache map[int][]float64) []float64 {
	if w, ok := cache[n]; ok {
		return w
	}
	g, err := graph.Parse("ring", n, 0)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := privacy.PlannedPairwise(n, g.Adj, false, privacy.PlanOptions{Clip: 1, Sigma: 1, Updates: 1})
	if err != nil {
		t.Fatal(err)
	}
	w := make([]float64, n)
	for i := range w {
		for j := 0; j < n; j++ {
			w[i] = math.Max(w[i], plan.Pairs.Weight(i, j))
		}
	}
	cache[n] = w
	return w
}

// ledgerEpsilon recomputes node i's epsilon of the given kind from its ledger alone:
// the local figure is the composition of the entries' curves; the network figure
// takes the number of noisy entries K as the cap of the planned bound (Theorem 4 on the
// complete graph, the first-passage bound on the ring) and keeps the smaller figure.
func ledgerEpsilon(es []privacy.Entry, kind, graphSpec string, n int, w float64, clip, sigma, delta float64) (eps float64, k int) {
	var gauss []privacy.Entry
	for _, e := range es {
		if e.Mechanism != privacy.MechForward {
			gauss = append(gauss, e)
		}
	}
	k = len(gauss)
	if k == 0 {
		return 0, 0
	}
	loc, _ := privacy.ToDP(privacy.LedgerCurve(gauss), delta)
	if kind == walk.BudgetLocal {
		return loc, k
	}
	if graphSpec != "complete" {
		return loc, k // no planned network figure holds on a ring: the network budget is the local one
	}
	// The joint per-segment planned form without the final release (the budget has no
	// planned length): (k+3) rho(n) + 2 ln(n)/(n-1) amplified updates.
	wj := float64(k+3)*privacy.JointSegmentRho(n) + 2*math.Log(float64(n))/float64(n-1)
	net, _ := privacy.ToDP(privacy.AmplifiedUpdateCurve(clip, sigma, 1).Scale(wj), delta)
	return math.Min(net, loc), k
}

// TestBudget1000Runs: 1,000 seeded runs with budgets (local and network kinds, complete
// graph and ring, 6-20 nodes, 1-3 dimensions, sometimes with MaxUpdates too) run until
// every node is exhausted or a hop limit. Every node's epsilon recomputed from its
// ledger stays within the budget (0 overruns), forwards cost nothing, and runs end
// early with Exhausted() true.
func TestBudget1000Runs(t *testing.T) {
	const runs = 1000
	r := rand.New(rand.NewPCG(2026, 3))
	weights := map[int][]float64{}
	overruns, exhausted, hopsTotal, maxRatio := 0, 0, uint64(0), 0.0
	zeroRuns, maxCap, capSum, capN, tight := 0, 0, 0, 0, 0
	kinds := map[string]int{}
	for run := 0; run < runs; run++ {
		n := 6 + r.IntN(15)
		p := 1 + r.IntN(3)
		kind := walk.BudgetLocal
		if r.IntN(2) == 0 {
			kind = walk.BudgetNetwork
		}
		spec := "complete"
		if r.IntN(2) == 0 {
			spec = "ring"
		}
		clip := 0.5 + r.Float64()
		sigma := clip * (12 + 12*r.Float64())
		budget := 1 + 2*r.Float64()
		delta := []float64{1e-5, 1e-6, 1e-3}[r.IntN(3)]
		maxUpd := 0
		if r.IntN(4) == 0 {
			maxUpd = 1 + r.IntN(8)
		}
		seed := uint64(run) + 1
		ml := NewMemLedger(n)
		s := smallSim(t, n, p, seed, func(c *SimConfig) {
			c.Graph, c.Clip, c.Sigma, c.MaxUpdates, c.Ledger = spec, clip, sigma, maxUpd, ml
			c.Budget = &BudgetSpec{Kind: kind, Epsilon: budget, Delta: delta}
		})
		kinds[kind+"/"+spec]++
		sum := 0
		for _, c := range s.caps {
			sum += c
			maxCap = max(maxCap, c)
		}
		capSum, capN = capSum+sum, capN+n
		if sum == 0 {
			zeroRuns++
		}
		limit := uint64(40*sum + 40*n*n)
		if err := s.RunHops(limit, 0, nil); err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		if s.Exhausted() {
			exhausted++
			if s.Hops() >= limit {
				t.Fatalf("run %d: exhausted but made all %d hops", run, limit)
			}
			if err := s.Step(); !errors.Is(err, ErrExhausted) {
				t.Fatalf("run %d: step after exhaustion: %v", run, err)
			}
		}
		hopsTotal += s.Hops()
		var w []float64
		if spec == "ring" {
			w = ringWeights(t, n, weights)
		}
		rep := s.Budget()
		// Once a network budget made nodes forward, its figure no longer holds and the
		// report measures spent and overruns on the local figure instead.
		localReport := kind == walk.BudgetNetwork && rep.Forwards > 0
		localOver := 0
		entries := 0
		for i, es := range ml.Entries {
			entries += len(es)
			wi := 0.0
			if w != nil {
				wi = w[i]
			}
			eps, k := ledgerEpsilon(es, kind, spec, n, wi, clip, sigma, delta)
			if k != s.Store.Noisy[i] || k > s.caps[i] || (maxUpd > 0 && k > maxUpd) {
				t.Fatalf("run %d node %d: %d noisy entries, store %d, cap %d, max %d", run, i, k, s.Store.Noisy[i], s.caps[i], maxUpd)
			}
			if eps > budget*(1+overrunTol) {
				overruns++
				t.Errorf("run %d (%s/%s n=%d) node %d: %d updates give epsilon %v over budget %v", run, kind, spec, n, i, k, eps, budget)
			}
			maxRatio = math.Max(maxRatio, eps/budget)
			if k == s.caps[i] && (maxUpd == 0 || k < maxUpd) {
				// At a budget cap, one more update must exceed the budget (the cap is
				// the largest allowed, not merely a safe one).
				next := append(append([]privacy.Entry(nil), es...), privacy.Entry{Mechanism: privacy.MechGaussian,
					Sensitivity: 4 * 0.5 * clip, Sigma: 0.5 * sigma})
				if e1, _ := ledgerEpsilon(next, kind, spec, n, wi, clip, sigma, delta); !(e1 > budget*(1-overrunTol)) {
					t.Fatalf("run %d node %d: cap %d not maximal: %d updates give %v <= budget %v", run, i, k, k+1, e1, budget)
				}
				tight++
			}
			want := eps
			if localReport {
				want, _ = ledgerEpsilon(es, walk.BudgetLocal, spec, n, wi, clip, sigma, delta)
				if !(want <= budget) {
					localOver++
				}
			}
			if math.Abs(float64(rep.Spent[i])-want) > 1e-9*want {
				t.Fatalf("run %d node %d: report %v, ledger %v", run, i, rep.Spent[i], want)
			}
			if s.Exhausted() && k != s.caps[i] {
				t.Fatalf("run %d node %d: exhausted with %d of %d updates", run, i, k, s.caps[i])
			}
		}
		if uint64(entries) != s.Hops() || rep.Overruns != localOver {
			t.Fatalf("run %d: %d entries for %d hops, %d report overruns, want %d", run, entries, s.Hops(), rep.Overruns, localOver)
		}
	}
	t.Logf("%d runs %v: %d hops, %d exhausted every node and ended early (%d with no update allowed), %d overruns, max epsilon/budget %.6f; caps mean %.1f max %d; %d nodes checked maximal",
		runs, kinds, hopsTotal, exhausted, zeroRuns, overruns, maxRatio, float64(capSum)/float64(capN), maxCap, tight)
	if zeroRuns > runs/10 {
		t.Fatalf("%d runs allowed no update at all: the mix is too weak", zeroRuns)
	}
	if overruns != 0 {
		t.Fatalf("%d overruns", overruns)
	}
	if exhausted < runs*9/10 {
		t.Fatalf("only %d of %d runs exhausted every node", exhausted, runs)
	}
}

// TestBudgetEndsCleanly: a budgeted run stops by itself once every node reached its
// cap; the report says so and marshals to JSON.
func TestBudgetEndsCleanly(t *testing.T) {
	const n, budget = 8, 2.0
	s := smallSim(t, n, 2, 9, func(c *SimConfig) {
		c.Clip, c.Sigma = 1, 30
		c.Budget = &BudgetSpec{Kind: walk.BudgetNetwork, Epsilon: budget, Delta: 1e-5}
	})
	if s.Exhausted() {
		t.Fatal("exhausted before the first hop")
	}
	if err := s.RunHops(3, 0, nil); err != nil {
		t.Fatal(err)
	}
	if rep := s.Budget(); !rep.ConditionsHold || rep.Forwards != 0 {
		t.Fatalf("before any forward: hold %v forwards %d", rep.ConditionsHold, rep.Forwards)
	}
	if err := s.RunHops(1_000_000, 0, nil); err != nil {
		t.Fatal(err)
	}
	if !s.Exhausted() || s.Hops() >= 1_000_000 {
		t.Fatalf("exhausted %v after %d hops", s.Exhausted(), s.Hops())
	}
	h := s.Hops()
	if err := s.RunHops(10, 0, nil); err != nil || s.Hops() != h {
		t.Fatalf("RunHops after exhaustion: %v, %d hops", err, s.Hops())
	}
	rep := s.Budget()
	// The caps kept the network figure within the budget, but the forwards void that
	// figure: the report measures the local one, which exceeds the budget here, and says
	// so (never "0 overruns" while the figure that holds is over budget).
	loc, _ := privacy.ToDP(privacy.WalkLocalCurve(1, 30, rep.Caps[0]), 1e-5)
	if rep.Exhausted != n || !rep.AllExhausted || rep.Overruns != n || float64(rep.MaxSpent) != loc || !(loc > budget) {
		t.Fatalf("report %+v, local figure %v", rep, loc)
	}
	// Exhausted nodes forwarded: the planned figure's every-hop-noisy condition fails
	// and the report says so.
	if !strings.Contains(rep.Theorem, "Theorem 4") || rep.ConditionsHold || rep.Conversion != privacy.Conversion ||
		rep.Forwards == 0 || !strings.Contains(rep.Note, "forwards without a noisy update") || rep.MaxLocal != rep.MaxSpent {
		t.Fatalf("report theorem %q hold %v conversion %q forwards %d max local %v note %q", rep.Theorem, rep.ConditionsHold,
			rep.Conversion, rep.Forwards, rep.MaxLocal, rep.Note)
	}
	for i, u := range s.Updates() {
		if u != rep.Caps[i] {
			t.Fatalf("node %d: %d updates, cap %d", i, u, rep.Caps[i])
		}
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"kind":"network"`, `"caps":[`, `"exhausted":8`, `"overruns":8`, `"conditions_hold":false`, `"spent":[`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("JSON lacks %s: %s", k, b)
		}
	}
	t.Logf("ended after %d hops, caps %v", h, rep.Caps)
}

// TestBudgetSigmaZero: without noise no update fits any budget; the run ends at once.
func TestBudgetSigmaZero(t *testing.T) {
	for _, kind := range []string{walk.BudgetLocal, walk.BudgetNetwork} {
		s := smallSim(t, 5, 2, 1, func(c *SimConfig) {
			c.Sigma = 0
			c.Budget = &BudgetSpec{Kind: kind, Epsilon: 1e9, Delta: 1e-5}
		})
		if !s.Exhausted() {
			t.Fatalf("%s: not exhausted", kind)
		}
		if err := s.RunHops(100, 0, nil); err != nil || s.Hops() != 0 {
			t.Fatalf("%s: %v after %d hops", kind, err, s.Hops())
		}
		rep := s.Budget()
		if rep.MaxSpent != 0 || rep.Exhausted != 5 || !strings.Contains(rep.Note, "infinite epsilon") {
			t.Fatalf("%s: report %+v", kind, rep)
		}
	}
}

// TestBudgetNone: without a budget nothing changes: never exhausted, no report.
func TestBudgetNone(t *testing.T) {
	s := smallSim(t, 4, 2, 1, func(c *SimConfig) { c.MaxUpdates = 1 })
	if err := s.RunHops(200, 0, nil); err != nil {
		t.Fatal(err)
	}
	if s.Exhausted() || s.Budget() != nil || s.Hops() != 200 || s.Close() != nil {
		t.Fatalf("exhausted %v budget %v hops %d", s.Exhausted(), s.Budget(), s.Hops())
	}
}

// TestBudgetInvariantChecked: a node over its cap is caught on its next step.
func TestBudgetInvariantChecked(t *testing.T) {
	s := smallSim(t, 4, 2, 1, func(c *SimConfig) {
		c.Sigma = 30
		c.Budget = &BudgetSpec{Kind: walk.BudgetLocal, Epsilon: 5, Delta: 1e-5}
	})
	if err := s.RunHops(40, 0, nil); err != nil {
		t.Fatal(err)
	}
	// Simulate a machine that ignores its cap: the simulator's cap drops below the
	// updates the machine already made.
	i := s.holder
	if s.Store.Noisy[i] == 0 {
		t.Fatal("holder made no update yet; pick another seed")
	}
	s.caps[i] = s.Store.Noisy[i] - 1
	err := s.Step()
	if err == nil || !strings.Contains(err.Error(), "invariant") || !strings.Contains(err.Error(), "cap") {
		t.Fatalf("over-cap step: %v", err)
	}
}

func TestBudgetBadInput(t *testing.T) {
	d, _ := consensus.SyntheticLasso(6, 2, 1, 0.1, 1)
	shards, _ := consensus.Split(d, 3, "iid", 1)
	for _, c := range []struct {
		b    BudgetSpec
		want string
	}{
		{BudgetSpec{Kind: "central", Epsilon: 1, Delta: 1e-5}, `unknown kind "central"`},
		{BudgetSpec{Kind: "local", Epsilon: math.NaN(), Delta: 1e-5}, "epsilon must be > 0"},
		{BudgetSpec{Kind: "local", Epsilon: -1, Delta: 1e-5}, "epsilon must be > 0"},
		{BudgetSpec{Kind: "network", Epsilon: 1, Delta: 1}, "delta must be in (0,1)"},
		{BudgetSpec{Kind: "network", Epsilon: 1, Delta: 0}, "delta must be in (0,1)"},
	} {
		b := c.b
		_, err := NewSim(SimConfig{Shards: shards, Problem: consensus.Problem{Loss: consensus.Squared}, Gamma: 1, Lambda: 0.5,
			Clip: 1, Sigma: 1, Budget: &b})
		if err == nil || !strings.HasPrefix(err.Error(), "testnet: walk: budget") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.b, err, c.want)
		}
	}
}
