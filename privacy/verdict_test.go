package privacy

import (
	"math"
	"strings"
	"testing"
)

// TestWalkDecide checks each condition of the planned figure, alone.
func TestWalkDecide(t *testing.T) {
	base := WalkRun{Nodes: 10, Complete: true, Clip: 0.1, Sigma: 1, Cap: 100, Hops: 400, Updates: 55}
	if v := WalkDecide(base); !v.PlannedHolds || v.K != 100 || len(v.Reasons) != 0 {
		t.Fatalf("base run: %+v", v)
	}
	cases := []struct {
		name string
		mod  func(r *WalkRun)
		want string
	}{
		{"no noise", func(r *WalkRun) { r.Sigma = 0 }, "no noise"},
		{"no clip", func(r *WalkRun) { r.Clip = math.Inf(1) }, "unbounded sensitivity"},
		{"one node", func(r *WalkRun) { r.Nodes = 1 }, "no pairwise figure"},
		{"order condition", func(r *WalkRun) { r.Sigma = 0.01 }, "order condition"},
		{"no cap", func(r *WalkRun) { r.Cap = 0 }, "no hard cap"},
		{"forwards", func(r *WalkRun) { r.Forwards = 3 }, "3 hops forwarded"},
		{"re-sends", func(r *WalkRun) { r.Resends = 2 }, "2 releases were re-sent"},
		{"plan beyond caps", func(r *WalkRun) { r.Planning, r.Hops = true, 1001 }, "forwards certain"},
	}
	for _, c := range cases {
		r := base
		c.mod(&r)
		v := WalkDecide(r)
		if v.PlannedHolds || !strings.Contains(strings.Join(v.Reasons, "|"), c.want) {
			t.Errorf("%s: %+v, want a reason containing %q", c.name, v, c.want)
		}
	}
	// A plan whose busiest node is likely (not certain) to hit the cap: warned, still holds.
	r := base
	r.Planning, r.Hops = true, 900 // mean 90, sd ~9: mean + 3 sd > 100
	if v := WalkDecide(r); !v.PlannedHolds || len(v.Warnings) == 0 {
		t.Errorf("near the cap: %+v", v)
	}
	// A plan without a cap uses ceil(hops/n).
	r.Cap = 0
	if v := WalkDecide(r); v.K != 90 || v.PlannedHolds {
		t.Errorf("plan without cap: %+v", v)
	}
	// A node's own report is voided too by a plan that makes forwards certain.
	if v := WalkDecide(WalkRun{Nodes: 3, Complete: true, Clip: 0.1, Sigma: 1, Cap: 1, Hops: 10, Updates: 1, Own: true}); v.PlannedHolds {
		t.Errorf("own report of a plan beyond n x K_i: %+v", v)
	}
	// A node's own report uses its own count and needs no cap.
	own := WalkRun{Nodes: 3, Complete: true, Clip: 0.1, Sigma: 1, Hops: 300, Updates: 7, Own: true}
	if v := WalkDecide(own); !v.PlannedHolds || v.K != 7 {
		t.Errorf("own: %+v", v)
	}
}

// TestFinalReleaseWeight compares the bound with the sum it bounds, written out for the
// complete graph: sum_{r=1..K} P(X_{K-r} = i)/r with P = 1/n after the first hop and the
// start node i itself at r = K.
func TestFinalReleaseWeight(t *testing.T) {
	for _, c := range []struct {
		n    int
		hops uint64
	}{{2, 1}, {3, 2}, {10, 400}, {50, 10000}} {
		want := 1 / float64(c.hops)
		for r := uint64(1); r < c.hops; r++ {
			want += 1 / (float64(c.n) * float64(r))
		}
		got := FinalReleaseWeight(1/float64(c.n), c.hops, 1<<30)
		if math.Abs(got-want) > 1e-12*want {
			t.Errorf("n=%d hops=%d: %v want %v", c.n, c.hops, got, want)
		}
	}
	// Beyond the direct sum the integral bound is used: an upper bound, and tight.
	hops := uint64(1<<20) + 50000
	exact := 0.0
	for r := hops - 1; r >= 1; r-- {
		exact += 1 / float64(r)
	}
	exact = exact/7 + 1/float64(hops)
	got := FinalReleaseWeight(1.0/7, hops, 1<<30)
	if got < exact || got > exact*(1+1e-6) {
		t.Errorf("long run: %v, exact %v", got, exact)
	}
	if FinalReleaseWeight(0.1, 100, 0) != 0 || FinalReleaseWeight(0.5, 100, 1) != 1 || !math.IsInf(FinalReleaseWeight(0.1, 0, 3), 1) {
		t.Error("edge cases: no update costs 0, the cap is the update count, an unbounded run is +Inf")
	}
}

// TestWalkPlannedBound: zero own updates give epsilon 0; a forward gives the local figure.
func TestWalkPlannedBound(t *testing.T) {
	r := WalkRun{Nodes: 3, Complete: true, Clip: 0.1, Sigma: 1, Hops: 300, Own: true}
	if b := WalkPlannedBound(r, 1e-5); b.Epsilon != 0 || !b.ConditionsHold {
		t.Errorf("no update: %+v", b)
	}
	r.Updates = 100
	held := WalkPlannedBound(r, 1e-5)
	want, _ := ToDP(Theorem4FinalCurve(3, 100, 300, 0.1, 1), 1e-5)
	if !held.ConditionsHold || held.Epsilon != want {
		t.Errorf("held: %+v, want %v", held, want)
	}
	r.Forwards = 240
	loc := LocalBound(0.1, 1, 100, 1e-5)
	if b := WalkPlannedBound(r, 1e-5); b.ConditionsHold || b.Epsilon != loc.Epsilon || !strings.Contains(b.Note, "240 hops forwarded") {
		t.Errorf("forwards: %+v, want the local %v", b, loc.Epsilon)
	}
}

// TestAnomaliesVoidPlanned: custody anomalies (a rewind, a regeneration elsewhere, refused
// replays or epoch jumps) void the planned figure of every step in the one verdict
// function; the local bound is reported with the reason.
func TestAnomaliesVoidPlanned(t *testing.T) {
	for _, r := range []WalkRun{
		{Nodes: 10, Complete: true, Clip: 0.1, Sigma: 1, Cap: 400, Hops: 400, Own: true, Updates: 40},
		{Step: StepSGD, Nodes: 50, Complete: true, Clip: 1, Sigma: 6, Rate: 1, Cap: 40, Hops: 1500, SGDNonExpansive: true},
	} {
		before := WalkPlannedBound(r, 1e-5)
		r.Anomalies = 3
		v := WalkDecide(r)
		b := WalkPlannedBound(r, 1e-5)
		if v.PlannedHolds || b.ConditionsHold || !strings.Contains(b.Note, "3 custody anomalies") {
			t.Errorf("%q: verdict %+v, bound %+v", r.Step, v, b)
		}
		if r.Step == "" && !before.ConditionsHold {
			t.Errorf("the prox run's planned figure should hold without anomalies: %+v", before)
		}
	}
}

// TestOwnReportOthersForwards: a node's own report cannot see the other members' forwards,
// so with a cap below the run's hops (a member may reach it) it does not claim the planned
// figure, even with no forward of its own; with a cap no member can reach (>= hops) it
// does, and a whole-run report (not Own) with no forwards does too.
func TestOwnReportOthersForwards(t *testing.T) {
	r := WalkRun{Nodes: 10, Complete: true, Clip: 0.1, Sigma: 1, Cap: 100, Hops: 400, Own: true, Updates: 40}
	if v := WalkDecide(r); v.PlannedHolds || !strings.Contains(strings.Join(v.Reasons, ";"), "cannot see the other members' forwards") {
		t.Errorf("own report, cap 100 < 400 hops: %+v", v)
	}
	r.Cap = 400
	if v := WalkDecide(r); !v.PlannedHolds {
		t.Errorf("own report, cap 400 = hops: %+v", v)
	}
	r.Cap, r.Own, r.Updates = 100, false, 40
	if v := WalkDecide(r); !v.PlannedHolds {
		t.Errorf("whole-run report without forwards: %+v", v)
	}
}
