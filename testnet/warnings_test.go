package testnet

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/testnet/sim"
)

// warnData is a small synthetic classification set split into train and test rows.
func warnData(t *testing.T) (train, test *consensus.Dataset) {
	t.Helper()
	d, _ := consensus.SyntheticLogistic(240, 5, 3, 11)
	sc, err := consensus.FitScaler(d, consensus.ScaleRowNorm)
	if err != nil {
		t.Fatal(err)
	}
	d = sc.Apply(d)
	part := func(lo, hi int) *consensus.Dataset {
		return &consensus.Dataset{Name: d.Name, Rows: hi - lo, Cols: d.Cols, X: d.X[lo*d.Cols : hi*d.Cols], Y: d.Y[lo:hi]}
	}
	return part(0, 180), part(180, 240)
}

func warnOptions(t *testing.T) sim.Options {
	train, test := warnData(t)
	return sim.Options{Train: train, Test: test, Nodes: 4, Problem: consensus.Problem{Loss: consensus.Logistic, Reg: consensus.Regularizer{L2: 0.01}},
		Gamma: 10, Lambda: 0.5, Clip: 0.5, Sigma: 1, Seed: 3, Delta: 1e-5}
}

// runWarn runs o collecting the warnings given to Options.Warn before the walk.
func runWarn(t *testing.T, o sim.Options) (*sim.Report, []string) {
	t.Helper()
	var before []string
	o.Warn = func(m string) { before = append(before, m) }
	rep, err := sim.Run(o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Warnings == nil || !slices.Equal(rep.Warnings[:min(len(before), len(rep.Warnings))], before) {
		t.Fatalf("report warnings %q do not start with the plan's %q", rep.Warnings, before)
	}
	return rep, before
}

func withText(ws []string, s string) []string {
	var out []string
	for _, w := range ws {
		if strings.Contains(w, s) {
			out = append(out, w)
		}
	}
	return out
}

// TestWarnHopsBeyondCaps: 4 nodes with at most 5 noisy updates each make at most 20; a
// run of 300 hops is warned before it starts, and after it the hop of the last noisy
// update, found here from the kept path, is reported with the forwards after it.
func TestWarnHopsBeyondCaps(t *testing.T) {
	o := warnOptions(t)
	o.MaxUpdates, o.Hops, o.KeepTrace = 5, 300, true
	rep, before := runWarn(t, o)
	if got := withText(before, "hops beyond about 20 only forward the token: the model stops changing"); len(got) != 1 {
		t.Errorf("plan warnings %q: want the hops warning with 4 x 5 = 20", before)
	}
	last := -1
	for k, st := range rep.Trace {
		if st.Noisy {
			last = k
		}
	}
	if last < 0 || len(rep.Trace) != 300 {
		t.Fatalf("path of %d steps, last noisy step %d", len(rep.Trace), last)
	}
	want := fmt.Sprintf("the last noisy update was at hop %d of 300: the %d hops after it only forwarded the token", last+1, 300-(last+1))
	if got := withText(rep.Warnings, want); len(got) != 1 {
		t.Errorf("warnings %q: want %q", rep.Warnings, want)
	}
	if slices.Contains(before, want) {
		t.Error("the last noisy hop was warned before the run")
	}
	// Within the caps: no hops warning and no trailing forwards worth a warning.
	o.Hops = 12
	rep, _ = runWarn(t, o)
	if len(withText(rep.Warnings, "hops beyond")) != 0 || len(withText(rep.Warnings, "last noisy update")) != 0 {
		t.Errorf("12 hops within 20 updates warned: %q", rep.Warnings)
	}
	// trailingWarning's threshold: 10% of the hops and at least one per node.
	for _, c := range []struct {
		hops, last uint64
		warn       bool
	}{{1000, 900, true}, {1000, 901, false}, {20, 16, false}, {20, 15, true}, {20, 0, true}, {0, 0, false}} {
		if got := sim.TrailingWarning(c.hops, c.last, 5) != ""; got != c.warn {
			t.Errorf("trailingWarning(%d, %d, 5) = %v, want %v", c.hops, c.last, got, c.warn)
		}
	}
}

// TestWarnPlannedPrivacy: a plan whose planned pairwise figure cannot hold (no hard cap)
// or is at risk (the expected visits per node come within three standard deviations of
// the cap) is warned before the run; a plan without either is not.
func TestWarnPlannedPrivacy(t *testing.T) {
	o := warnOptions(t)
	o.MaxUpdates, o.Hops = 0, 40
	_, before := runWarn(t, o)
	if got := withText(before, "the planned pairwise privacy figure will not hold for this run: no hard cap K_i"); len(got) != 1 {
		t.Errorf("no cap: plan warnings %q", before)
	}
	// 4 nodes, 18 hops: 4.5 expected visits per node, sd sqrt(4.5 x 3/4) = 1.84, so
	// 4.5 + 3 sd = 10 > 5 = the cap, while 18 hops stay below 4 x 5.
	o.MaxUpdates, o.Hops = 5, 18
	_, before = runWarn(t, o)
	if len(withText(before, "the planned pairwise privacy figure is at risk: some node is likely to reach its cap K_i = 5")) != 1 ||
		len(withText(before, "will not hold")) != 0 || len(withText(before, "hops beyond")) != 0 {
		t.Errorf("cap 5 for 18 hops: plan warnings %q", before)
	}
	// 40 hops with a cap of 100: 10 + 3 x 2.74 < 100, nothing to warn.
	o.MaxUpdates, o.Hops = 100, 40
	_, before = runWarn(t, o)
	if len(before) != 0 {
		t.Errorf("cap 100 for 40 hops: plan warnings %q", before)
	}
	// A budget run: the budget's caps (with --max-updates) bound the useful hops.
	o.MaxUpdates, o.Hops, o.Budget = 100, 5000, &sim.BudgetSpec{Kind: "local", Epsilon: 3, Delta: 1e-5}
	rep, before := runWarn(t, o)
	total := 0
	for _, c := range rep.Budget.Caps {
		total += c
	}
	if want := fmt.Sprintf("hops beyond about %d only forward the token", total); total >= 5000 || len(withText(before, want)) != 1 {
		t.Errorf("budget caps %v (sum %d): plan warnings %q", rep.Budget.Caps, total, before)
	}
}

// majorityOf counts the classes of d directly.
func majorityOf(d *consensus.Dataset) float64 {
	pos, neg := 0, 0
	for _, y := range d.Y {
		switch y {
		case 1:
			pos++
		case -1:
			neg++
		}
	}
	return float64(max(pos, neg)) / float64(pos+neg)
}

// TestWarnUtility: the utility warnings on small runs and on hand-made models. A walk of
// no hop keeps the model 0, which predicts +1 for every row, so its accuracy is the share
// of the positives, never above the majority share: warned. With the squared loss the
// model 0 has R^2 = 1 - sum y^2 / sum (y - ybar)^2 <= 0: warned. A trained model is not.
func TestWarnUtility(t *testing.T) {
	o := warnOptions(t)
	o.MaxUpdates, o.Hops = 100, 0
	rep, _ := runWarn(t, o)
	maj := majorityOf(o.Test)
	want := fmt.Sprintf("test accuracy %.4f is no better than predicting the majority class of the test data (%.4f)", *rep.Accuracy, maj)
	if len(withText(rep.Warnings, want)) != 1 || len(withText(rep.Warnings, "--sigma")) != 1 {
		t.Errorf("model 0: warnings %q, want %q", rep.Warnings, want)
	}
	o.Hops = 400
	rep, _ = runWarn(t, o)
	if acc := *rep.Accuracy; (acc <= maj) != (len(withText(rep.Warnings, "majority class")) == 1) {
		t.Errorf("accuracy %.4f, majority %.4f: warnings %q", acc, maj, rep.Warnings)
	} else if acc <= maj {
		t.Errorf("400 hops did not learn (accuracy %.4f, majority %.4f)", acc, maj)
	}

	sq := warnOptions(t)
	sq.Problem.Loss, sq.MaxUpdates, sq.Hops = consensus.Squared, 100, 0
	rep, _ = runWarn(t, sq)
	if rep.R2 == nil || !(*rep.R2 <= 0) || len(withText(rep.Warnings, "test R^2 = ")) != 1 {
		t.Errorf("squared, model 0: R^2 %v, warnings %q", rep.R2, rep.Warnings)
	}

	// Hand-made: 3 positives and 1 negative on the line x, labels sign(x). w = -1 predicts
	// every row wrong (accuracy 0 against a majority share of 3/4), w = +1 every row right.
	d := &consensus.Dataset{Rows: 4, Cols: 1, X: []float64{1, 2, 3, -1}, Y: []float64{1, 1, 1, -1}}
	p := consensus.Problem{Loss: consensus.Logistic}
	if ws := sim.UtilityWarnings(p, d, nil, []float64{-1}, "hint"); len(ws) != 1 || !strings.Contains(ws[0], "training accuracy 0.0000") ||
		!strings.Contains(ws[0], "(0.7500)") || !strings.HasSuffix(ws[0], "hint") {
		t.Errorf("w = -1 (accuracy 0, majority 3/4): %q", ws)
	}
	if ws := sim.UtilityWarnings(p, d, nil, []float64{1}, "hint"); len(ws) != 0 {
		t.Errorf("w = +1 (accuracy 1): %q", ws)
	}
	// Squared: targets 1, 2, 3, -1 (mean 1.25, total sum of squares 8.75). w = 1 fits
	// exactly (R^2 = 1); w = -1 leaves residuals 2, 4, 6, -2: 60 > 8.75, R^2 < 0.
	d.Y = []float64{1, 2, 3, -1}
	p.Loss = consensus.Squared
	if ws := sim.UtilityWarnings(p, d, nil, []float64{1}, "h"); len(ws) != 0 {
		t.Errorf("exact fit warned: %q", ws)
	}
	r2 := 1 - 60/8.75
	if ws := sim.UtilityWarnings(p, d, nil, []float64{-1}, "h"); len(ws) != 1 || !strings.Contains(ws[0], fmt.Sprintf("R^2 = %.4g <= 0", r2)) {
		t.Errorf("R^2 %.4g: %q", r2, ws)
	}
}

// TestWarnUtilityGossip: an R-ADMM run whose noise swamps the model is warned when, and
// only when, its test accuracy is at most the majority share; a low-noise run is not.
func TestWarnUtilityGossip(t *testing.T) {
	train, test := warnData(t)
	maj := majorityOf(test)
	for _, c := range []struct {
		alpha float64
		bad   bool
	}{{1e-3, true}, {math.Inf(1), false}} {
		o := sim.GossipOptions{Train: train, Test: test, Nodes: 3, Algo: "radmm", Graph: "ring", Iters: 4, Alpha: c.alpha,
			Eta: 1, Gamma: 0.5, C: 5, Seed: 2, Problem: consensus.Problem{Loss: consensus.Logistic, Reg: consensus.Regularizer{L2: 0.01}}}
		rep, err := sim.RunGossip(o)
		if err != nil {
			t.Fatal(err)
		}
		acc := *rep.Accuracy
		warned := len(withText(rep.Warnings, "majority class")) == 1
		if warned != (acc <= maj) || warned != c.bad || (warned && len(withText(rep.Warnings, "--alpha")) != 1) {
			t.Errorf("alpha %g: accuracy %.4f, majority %.4f, warnings %q", c.alpha, acc, maj, rep.Warnings)
		}
	}
}

// TestWarnMemMatchesSim: over real hosts (--mem) the warnings are the simulator's, the
// hop of the last noisy update read from the nodes' ledgers.
func TestWarnMemMatchesSim(t *testing.T) {
	o := netOptions(t, 3, 90, 4)
	o.MaxUpdates = 4
	gs, simBefore := runWarn(t, o)
	var memBefore []string
	o.Warn = func(m string) { memBefore = append(memBefore, m) }
	mem, err := RunNet(context.Background(), o, NetOptions{Mode: "mem"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(mem.Warnings, gs.Warnings) || !slices.Equal(memBefore, simBefore) {
		t.Errorf("mem warnings %q (before %q), simulator %q (before %q)", mem.Warnings, memBefore, gs.Warnings, simBefore)
	}
	if len(withText(gs.Warnings, "the last noisy update was at hop")) != 1 || len(withText(simBefore, "hops beyond about 12 ")) != 1 {
		t.Errorf("3 nodes x 4 updates, 90 hops: warnings %q", gs.Warnings)
	}
}
