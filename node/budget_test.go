package node

import (
	"context"
	"testing"
	"time"

	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/walk"
)

// TestNodeBudget: with --budget-epsilon each node stops its noisy updates at the cap its
// budget allows and forwards the token unchanged; the epsilon recomputed from every
// node's ledger on disk stays within the budget, the cap is tight (one more update would
// exceed it), the run still completes, and /status reports what is left.
func TestNodeBudget(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n, hops, holder = 3, 40, 1
	const budget, clip, sigma, delta = 2.0, 1.0, 20.0, 1e-5
	sh := shards(t, n)
	nodes := staticClusterWith(t, ctx, "budget", sh, hops, holder, make([]string, n), func(i int, c *Config) {
		c.Clip, c.Sigma, c.Delta = clip, sigma, delta
		c.BudgetEpsilon = budget
		if i == 2 {
			c.BudgetKind = walk.BudgetNetwork
		}
	})
	models := runAll(t, ctx, nodes)
	for i := range models {
		if !sameBits(models[i].Model, models[0].Model) {
			t.Fatalf("node %d ended with another model", i)
		}
	}
	entries, forwards := 0, 0
	for i, nd := range nodes {
		kind := walk.BudgetLocal
		if i == 2 {
			kind = walk.BudgetNetwork
		}
		plan, err := walk.BudgetCaps(walk.Budget{Kind: kind, Epsilon: budget, Delta: delta}, n, nil, clip, sigma)
		if err != nil {
			t.Fatal(err)
		}
		capI := plan.Caps[i]
		es, err := nd.Store().Ledger()
		if err != nil {
			t.Fatal(err)
		}
		entries += len(es)
		noisy := 0
		for _, e := range es {
			switch e.Mechanism {
			case privacy.MechGaussian:
				noisy++
			case privacy.MechForward:
				forwards++
			}
		}
		spent, _ := privacy.ToDP(privacy.LedgerCurve(es), delta)
		more, _ := privacy.ToDP(privacy.WalkLocalCurve(clip, sigma, noisy+1), delta)
		t.Logf("node %d (%s): cap %d, %d noisy updates of %d hops, local epsilon %.4f (budget %v)", i, kind, capI, noisy, len(es), spent, budget)
		if noisy > capI {
			t.Fatalf("node %d made %d noisy updates over its cap %d", i, noisy, capI)
		}
		if kind == walk.BudgetLocal {
			if spent > budget*(1+1e-12) {
				t.Fatalf("node %d spent %v over its budget %v", i, spent, budget)
			}
			if noisy == capI && more <= budget {
				t.Fatalf("node %d: cap %d is not tight (%d updates give %v <= %v)", i, capI, noisy+1, more, budget)
			}
		}
		st := nd.Status()
		if st.BudgetEpsilon != budget || st.UpdatesLeft != max(capI-noisy, 0) {
			t.Fatalf("node %d status: budget %v, updates left %d, want %d", i, st.BudgetEpsilon, st.UpdatesLeft, capI-noisy)
		}
		if kind == walk.BudgetLocal && (st.BudgetLeft < 0 || st.BudgetLeft > budget) {
			t.Fatalf("node %d status: budget left %v", i, st.BudgetLeft)
		}
	}
	if entries < hops {
		t.Fatalf("ledger entries %d < hops %d", entries, hops)
	}
	if forwards == 0 {
		t.Fatalf("no node reached its cap in %d hops: the test does not exercise the budget", hops)
	}
}
