package walk

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/consensus/graph"
	"github.com/dpadmm/dpadmm/privacy"
)

// convRef is an independent transcription of the conversion named by
// privacy.Conversion: eps = min_a max(0, rdp(a) + ln((a-1)/a) - (ln delta + ln a)/(a-1)).
func convRef(rdp func(a float64) float64, delta float64) float64 {
	best := math.Inf(1)
	for _, a := range privacy.Orders {
		r := rdp(a)
		if !(a > 1) || math.IsInf(r, 1) {
			continue
		}
		e := math.Max(0, r+math.Log((a-1)/a)-(math.Log(delta)+math.Log(a))/(a-1))
		best = math.Min(best, e)
	}
	return best
}

// localRef: K updates of sensitivity 4C, noise sigma: K * 8 a C^2 / sigma^2.
func localRef(clip, sigma float64, k int, delta float64) float64 {
	if k == 0 {
		return 0
	}
	return convRef(func(a float64) float64 { return float64(k) * 8 * a * clip * clip / (sigma * sigma) }, delta)
}

// amplifiedRef is (1+c) e1 with e1 = 8 a C^2/sigma^2, c = (a-1) e1, +Inf when c > 1.
func amplifiedRef(a, clip, sigma float64) float64 {
	e1 := 8 * a * clip * clip / (sigma * sigma)
	c := (a - 1) * e1
	if c > 1 {
		return math.Inf(1)
	}
	return (1 + c) * e1
}

// thm4Ref: conservative Theorem 4 on the complete graph, min with local.
func thm4Ref(n int, clip, sigma float64, k int, delta float64) float64 {
	if k == 0 {
		return 0
	}
	// The joint per-segment planned weight without the final release (Hops 0):
	// (k+3) rho(n) + 2 ln(n)/(n-1), rho(n) the segment bound (privacy.JointSegmentRho).
	w := float64(k+3)*privacy.JointSegmentRho(n) + 2*math.Log(float64(n))/float64(n-1)
	net := convRef(func(a float64) float64 {
		return w * amplifiedRef(a, clip, sigma)
	}, delta)
	return math.Min(net, localRef(clip, sigma, k, delta))
}

// scanCap is the largest K with eps(K) <= budget, by linear scan.
func scanCap(t *testing.T, eps func(k int) float64, budget float64) int {
	t.Helper()
	for k := 1; k < 100000; k++ {
		if eps(k) > budget {
			return k - 1
		}
	}
	t.Fatal("linear scan did not terminate")
	return 0
}

// checkCap asserts cap is the largest K with eps(K) <= E, with eps(cap) and eps(cap+1)
// not so close to E that rounding could decide.
func checkCap(t *testing.T, name string, got int, eps func(k int) float64, budget float64) {
	t.Helper()
	want := scanCap(t, eps, budget)
	if got != want {
		t.Errorf("%s: cap %d, linear scan %d (eps(cap)=%v eps(cap+1)=%v budget %v)", name, got, want, eps(got), eps(got+1), budget)
	}
	if !(eps(got) <= budget) || !(eps(got+1) > budget) {
		t.Errorf("%s: cap %d not maximal: eps(cap)=%v eps(cap+1)=%v budget %v", name, got, eps(got), eps(got+1), budget)
	}
	if got < 1 {
		t.Errorf("%s: cap %d: test case should allow some updates", name, got)
	}
}

func TestBudgetCapsLocal(t *testing.T) {
	for _, c := range []struct{ clip, sigma, eps, delta float64 }{
		{1, 20, 2, 1e-5}, {0.5, 3, 8, 1e-6}, {1, 50, 1, 1e-5}, {0.1, 1, 3, 1e-3},
	} {
		p, err := BudgetCaps(Budget{Kind: BudgetLocal, Epsilon: c.eps, Delta: c.delta}, 7, nil, c.clip, c.sigma)
		if err != nil {
			t.Fatal(err)
		}
		ref := func(k int) float64 { return localRef(c.clip, c.sigma, k, c.delta) }
		for i, k := range p.Caps {
			checkCap(t, "local", k, ref, c.eps)
			if k != p.Caps[0] {
				t.Errorf("node %d cap %d differs from node 0's %d", i, k, p.Caps[0])
			}
		}
		for k := 0; k <= p.Caps[0]+1; k++ {
			if got, want := p.Epsilon(3, k), ref(k); math.Abs(got-want) > 1e-12*want {
				t.Errorf("Epsilon(3,%d) = %v, independent %v", k, got, want)
			}
		}
		if p.Theorem != privacy.LocalName || !p.ConditionsHold {
			t.Errorf("local plan: theorem %q hold %v", p.Theorem, p.ConditionsHold)
		}
		t.Logf("local C=%v sigma=%v E=%v delta=%v: cap %d", c.clip, c.sigma, c.eps, c.delta, p.Caps[0])
	}
}

func TestBudgetCapsNetworkComplete(t *testing.T) {
	for _, c := range []struct {
		n                       int
		clip, sigma, eps, delta float64
	}{
		{10, 1, 50, 2, 1e-5}, {100, 1, 100, 1, 1e-5}, {6, 0.5, 20, 4, 1e-6}, {1000, 1, 50, 0.5, 1e-5},
	} {
		for _, g := range []*graph.Graph{nil, {N: c.n, Complete: true}} {
			p, err := BudgetCaps(Budget{Kind: BudgetNetwork, Epsilon: c.eps, Delta: c.delta}, c.n, g, c.clip, c.sigma)
			if err != nil {
				t.Fatal(err)
			}
			ref := func(k int) float64 { return thm4Ref(c.n, c.clip, c.sigma, k, c.delta) }
			checkCap(t, "network complete", p.Caps[c.n-1], ref, c.eps)
			loc := scanCap(t, func(k int) float64 { return localRef(c.clip, c.sigma, k, c.delta) }, c.eps)
			if p.Caps[0] <= loc {
				t.Errorf("n=%d: network cap %d not above local cap %d", c.n, p.Caps[0], loc)
			}
			if !strings.Contains(p.Theorem, "Theorem 4") || !strings.Contains(p.Theorem, "joint") || !strings.Contains(p.Theorem, "min(") || !p.ConditionsHold {
				t.Errorf("theorem %q hold %v", p.Theorem, p.ConditionsHold)
			}
			t.Logf("network complete n=%d C=%v sigma=%v E=%v: cap %d (local cap %d)", c.n, c.clip, c.sigma, c.eps, p.Caps[0], loc)
		}
	}
}

// TestBudgetCapsNetworkGraph: on a 2x3 grid, a ring and a random graph no planned network
// figure holds (the first-passage form charges updates one by one, below their joint
// cost), so the network budget is the local one, with the reason.
func TestBudgetCapsNetworkGraph(t *testing.T) {
	for _, spec := range []string{"grid", "ring", "er:0.4"} {
		n := 6
		if spec != "grid" {
			n = 9
		}
		g, err := graph.Parse(spec, n, 3)
		if err != nil {
			t.Fatal(err)
		}
		const clip, sigma, eps, delta = 1.0, 50.0, 2.0, 1e-5
		p, err := BudgetCaps(Budget{Kind: BudgetNetwork, Epsilon: eps, Delta: delta}, n, g, clip, sigma)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			ref := func(k int) float64 { return localRef(clip, sigma, k, delta) }
			checkCap(t, spec, p.Caps[i], ref, eps)
			for _, k := range []int{1, p.Caps[i], p.Caps[i] + 1} {
				if got, want := p.Epsilon(i, k), ref(k); math.Abs(got-want) > 1e-9*want {
					t.Errorf("%s node %d: Epsilon(%d) = %v, local %v", spec, i, k, got, want)
				}
			}
		}
		if p.Theorem != privacy.LocalName || p.ConditionsHold || !strings.Contains(p.Note, "joint cost") {
			t.Errorf("theorem %q hold %v note %q", p.Theorem, p.ConditionsHold, p.Note)
		}
		t.Logf("network %s n=%d: caps %v", spec, n, p.Caps)
	}
}

func TestBudgetCapsEdges(t *testing.T) {
	// sigma = 0: any budget allows nothing.
	for _, kind := range []string{BudgetLocal, BudgetNetwork} {
		for _, spec := range []string{"complete", "ring"} {
			g, _ := graph.Parse(spec, 5, 1)
			p, err := BudgetCaps(Budget{Kind: kind, Epsilon: 1e6, Delta: 1e-5}, 5, g, 1, 0)
			if err != nil {
				t.Fatal(err)
			}
			for i, k := range p.Caps {
				if k != 0 {
					t.Errorf("%s/%s sigma=0: node %d cap %d", kind, spec, i, k)
				}
			}
			if !strings.Contains(p.Note, "infinite epsilon") {
				t.Errorf("note %q", p.Note)
			}
			if e := p.Epsilon(2, 3); !math.IsInf(e, 1) || p.Epsilon(2, 0) != 0 || !math.IsInf(p.Epsilon(5, 0), 1) {
				t.Errorf("%s/%s sigma=0: Epsilon(2,3) = %v, Epsilon(2,0) = %v, Epsilon(5,0) = %v", kind, spec, e, p.Epsilon(2, 0), p.Epsilon(5, 0))
			}
		}
	}
	// A budget below one update's epsilon allows none.
	one := localRef(1, 10, 1, 1e-5)
	p, err := BudgetCaps(Budget{Kind: BudgetLocal, Epsilon: one * 0.999, Delta: 1e-5}, 3, nil, 1, 10)
	if err != nil || p.Caps[0] != 0 {
		t.Fatalf("budget just below one update: caps %v err %v", p.Caps, err)
	}
	p, _ = BudgetCaps(Budget{Kind: BudgetLocal, Epsilon: one * 1.001, Delta: 1e-5}, 3, nil, 1, 10)
	if p.Caps[0] != 1 {
		t.Fatalf("budget just above one update: caps %v", p.Caps)
	}
	// Huge sigma: the cap saturates at MaxCap.
	p, _ = BudgetCaps(Budget{Kind: BudgetLocal, Epsilon: 10, Delta: 1e-5}, 2, nil, 1, 1e9)
	if p.Caps[0] != MaxCap {
		t.Fatalf("huge sigma: cap %d want MaxCap", p.Caps[0])
	}
	// n = 1, network kind: Theorem 4 needs n >= 2; the local figure is charged.
	p, err = BudgetCaps(Budget{Kind: BudgetNetwork, Epsilon: 2, Delta: 1e-5}, 1, nil, 1, 20)
	if err != nil {
		t.Fatal(err)
	}
	if want := scanCap(t, func(k int) float64 { return localRef(1, 20, k, 1e-5) }, 2); p.Caps[0] != want || p.ConditionsHold {
		t.Fatalf("n=1: cap %d want local %d, hold %v", p.Caps[0], want, p.ConditionsHold)
	}
	// Sigma too small for the order condition at any order: network falls back to local.
	// (sigma = 0.2 C: c = (a-1)*200a > 1 already at a = 1.01.)
	p, err = BudgetCaps(Budget{Kind: BudgetNetwork, Epsilon: 1000, Delta: 1e-5}, 10, nil, 1, 0.2)
	if err != nil {
		t.Fatal(err)
	}
	if want := scanCap(t, func(k int) float64 { return localRef(1, 0.2, k, 1e-5) }, 1000); want < 1 {
		t.Fatalf("small sigma case should allow some local updates, got %d", want)
	} else if p.Caps[0] != want || p.ConditionsHold || !strings.Contains(p.Note, "fails at every order") {
		t.Fatalf("small sigma: cap %d want local %d, hold %v note %q", p.Caps[0], want, p.ConditionsHold, p.Note)
	}
}

func TestBudgetCapsBadInput(t *testing.T) {
	ring5, _ := graph.Parse("ring", 5, 1)
	ok := Budget{Kind: BudgetLocal, Epsilon: 1, Delta: 1e-5}
	with := func(f func(b *Budget)) Budget { b := ok; f(&b); return b }
	cases := []struct {
		name        string
		b           Budget
		n           int
		g           *graph.Graph
		clip, sigma float64
		want        string
	}{
		{"nan eps", with(func(b *Budget) { b.Epsilon = math.NaN() }), 5, nil, 1, 1, "epsilon must be > 0"},
		{"neg eps", with(func(b *Budget) { b.Epsilon = -1 }), 5, nil, 1, 1, "epsilon must be > 0"},
		{"zero eps", with(func(b *Budget) { b.Epsilon = 0 }), 5, nil, 1, 1, "epsilon must be > 0"},
		{"inf eps", with(func(b *Budget) { b.Epsilon = math.Inf(1) }), 5, nil, 1, 1, "epsilon must be > 0 and finite"},
		{"delta 0", with(func(b *Budget) { b.Delta = 0 }), 5, nil, 1, 1, "delta must be in (0,1)"},
		{"delta 1", with(func(b *Budget) { b.Delta = 1 }), 5, nil, 1, 1, "delta must be in (0,1)"},
		{"delta nan", with(func(b *Budget) { b.Delta = math.NaN() }), 5, nil, 1, 1, "delta must be in (0,1)"},
		{"kind", with(func(b *Budget) { b.Kind = "central" }), 5, nil, 1, 1, `unknown kind "central"`},
		{"empty kind", with(func(b *Budget) { b.Kind = "" }), 5, nil, 1, 1, "unknown kind"},
		{"nodes", ok, 0, nil, 1, 1, "nodes must be >= 1"},
		{"clip", ok, 5, nil, 0, 1, "clip must be > 0"},
		{"clip nan", ok, 5, nil, math.NaN(), 1, "clip must be > 0"},
		{"sigma neg", ok, 5, nil, 1, -1, "sigma must be >= 0"},
		{"sigma nan", ok, 5, nil, 1, math.NaN(), "sigma must be >= 0"},
		{"sigma inf", ok, 5, nil, 1, math.Inf(1), "sigma must be >= 0 and finite"},
		{"graph size", ok, 6, ring5, 1, 1, "graph has 5 nodes, want 6"},
	}
	for _, c := range cases {
		p, err := BudgetCaps(c.b, c.n, c.g, c.clip, c.sigma)
		if err == nil || p != nil || !strings.HasPrefix(err.Error(), "walk: budget") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

// TestMachineBudgetCap: the machine makes BudgetCap noisy updates, then forwards with
// EventBudgetForward; MaxUpdates wins when smaller; a zero budget cap only forwards.
func TestMachineBudgetCap(t *testing.T) {
	for _, c := range []struct {
		maxUpd, budgetCap, want int
		kind                    EventKind
	}{{0, 2, 2, EventBudgetForward}, {5, 2, 2, EventBudgetForward}, {1, 3, 1, EventForward}, {0, 0, 0, EventBudgetForward}, {2, 2, 2, EventBudgetForward}} {
		cfg := Config{Node: 0, Nodes: 3, Gamma: 1, Lambda: 0.5, Clip: 1, Sigma: 1, Rand: rand.New(rand.NewPCG(1, 1)),
			Noise: &fixedNoise{}, MaxUpdates: c.maxUpd, Budgeted: true, BudgetCap: c.budgetCap, Run: "r"}
		m := newMachine(t, cfg, oneRow([]float64{1, 1}, 1), 1)
		if m.Cap() != c.want {
			t.Errorf("%+v: Cap() = %d", c, m.Cap())
		}
		tok := NewToken("r", 0, 2, consensus.Regularizer{}, 1)
		for h := 0; h < 6; h++ {
			if err := m.Step(Message{Token: tok}); err != nil {
				t.Fatal(err)
			}
			rd := m.Ready()
			e, ev := rd.Ledger[0], rd.Events[0]
			if h < c.want {
				if e.Mechanism != MechGaussian || ev.Kind != EventUpdate {
					t.Fatalf("%+v hop %d: %s %v, want an update", c, h, e.Mechanism, ev.Kind)
				}
			} else if e.Mechanism != MechForward || ev.Kind != c.kind || e.Sigma != 0 || e.Sensitivity != 0 {
				t.Fatalf("%+v hop %d: %s event %v, want a forward of kind %v", c, h, e.Mechanism, ev.Kind, c.kind)
			}
			tok = rd.Outbox[0].Token
			m.Advance(rd)
		}
		if m.Updates() != c.want {
			t.Errorf("%+v: %d updates", c, m.Updates())
		}
	}
	cfg := DefaultConfig()
	cfg.Nodes, cfg.Rand, cfg.Budgeted, cfg.BudgetCap = 2, rand.New(rand.NewPCG(1, 1)), true, -1
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "walk: budget cap must be >= 0") {
		t.Fatalf("negative budget cap: %v", err)
	}
	// Without Budgeted the cap field is ignored (0 is not "no updates").
	cfg.Budgeted, cfg.BudgetCap = false, 0
	m := newMachine(t, cfg, oneRow([]float64{1, 1}, 1), 1)
	if m.Cap() != math.MaxInt {
		t.Fatalf("no cap: Cap() = %d", m.Cap())
	}
}

// TestBudgetNetworkChargesFinalRelease: with the run's length, the network budget's figure
// includes the final model as a view of every node, as the planned figure the report
// prints does; so the caps are lower than without it.
func TestBudgetNetworkChargesFinalRelease(t *testing.T) {
	const n, clip, sigma, delta, eps = 10, 1.0, 20.0, 1e-5, 1.0
	without, err := BudgetCaps(Budget{Kind: BudgetNetwork, Epsilon: eps, Delta: delta}, n, nil, clip, sigma)
	if err != nil {
		t.Fatal(err)
	}
	with, err := BudgetCaps(Budget{Kind: BudgetNetwork, Epsilon: eps, Delta: delta, Hops: 200}, n, nil, clip, sigma)
	if err != nil {
		t.Fatal(err)
	}
	for k := 1; k <= 5; k++ {
		net, _ := privacy.ToDP(privacy.Theorem4FinalCurve(n, k, 200, clip, sigma), delta)
		loc, _ := privacy.ToDP(privacy.WalkLocalCurve(clip, sigma, k), delta)
		if got := with.Epsilon(0, k); got != math.Min(net, loc) {
			t.Errorf("k=%d: %v, want min(%v, %v)", k, got, net, loc)
		}
		if !(with.Epsilon(0, k) >= without.Epsilon(0, k)) {
			t.Errorf("k=%d: the final release lowered the figure: %v < %v", k, with.Epsilon(0, k), without.Epsilon(0, k))
		}
	}
	if with.Caps[0] > without.Caps[0] {
		t.Errorf("caps %d with the final release, %d without", with.Caps[0], without.Caps[0])
	}
	if e := with.Epsilon(0, with.Caps[0]); e > eps {
		t.Errorf("cap %d gives %v over the budget %v", with.Caps[0], e, eps)
	}
}
