package sim

import (
	"fmt"
	"math"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
)

// Warnings: runs that will disappoint. Before a walk starts, its plan is checked for hops
// that cannot change the model and for a planned privacy figure the run will lose; after
// any run, the model is compared with the trivial predictor. The warnings do not change
// the run; they are passed to Options.Warn (the plan's, before the first hop) and listed
// in Report.Warnings.

// Suggestions of the utility warnings.
const (
	walkUtilityHint   = "try a smaller --sigma (less noise), another --gamma, more or fewer --hops, or another --scale"
	gossipUtilityHint = "try a larger --alpha (less noise), another --even-gamma or --eta, more --iters, another --paper-c, or another --scale"
	// gossipTargetHint: at a fixed epsilon every perturbed iteration shares the budget, so
	// fewer iterations leave each one less noise.
	gossipTargetHint = "at a fixed --target-epsilon, try fewer --iters (2 to 4), a larger --eta or --l2, or another --scale"
)

// Trailing forwards are reported when at least this fraction of the hops (and at least
// one hop per node) came after the last noisy update.
const trailingForwardFrac = 0.1

// updateCapacity is the largest number of noisy updates the whole run can make: the sum
// of the nodes' caps (math.MaxInt: no cap). ok is false when some node has no cap.
func updateCapacity(caps []int) (total uint64, ok bool) {
	for _, c := range caps {
		if c == math.MaxInt || c < 0 {
			return 0, false
		}
		total += uint64(c)
	}
	return total, len(caps) > 0
}

// planCaps returns each node's cap on noisy updates for o: MaxUpdates (0: none) or, with
// budgetCaps, the smaller of the two; math.MaxInt for no cap. It is the simulator's rule.
func planCaps(o Options, budgetCaps []int) []int {
	caps := make([]int, o.Nodes)
	for i := range caps {
		caps[i] = math.MaxInt
		if o.MaxUpdates > 0 {
			caps[i] = o.MaxUpdates
		}
		if budgetCaps != nil {
			caps[i] = min(caps[i], budgetCaps[i])
		}
	}
	return caps
}

// planWarnings checks the plan of a walk before it starts. caps are the nodes' caps on
// noisy updates (planCaps), budget whether some come from a privacy budget (whose caps
// are then budgetCaps), complete whether the graph is complete.
//
//   - With every node capped, at most sum_i K_i noisy updates can happen (n K_i with
//     --max-updates alone); the hops beyond it can only forward the token, which does
//     not change the model.
//   - privacy.WalkDecide with Planning: every reason it gives voids the planned pairwise
//     figure for this run, every warning puts it at risk.
func planWarnings(o Options, complete bool, caps, budgetCaps []int, step privacy.WalkRun) []string {
	var out []string
	if total, ok := updateCapacity(caps); ok && o.Hops > total {
		src := fmt.Sprintf("%d nodes x at most %d noisy updates (--max-updates)", o.Nodes, o.MaxUpdates)
		fix := "lower --hops or raise --max-updates"
		if budgetCaps != nil {
			src = fmt.Sprintf("the %d nodes' caps (--max-updates and the privacy budget) allow at most %d noisy updates; "+
				"the run ends early once every node has exhausted its budget", o.Nodes, total)
			fix = "raise --budget-epsilon (or --max-updates) for a longer useful run"
		}
		out = append(out, fmt.Sprintf("hops beyond about %d only forward the token: the model stops changing "+
			"(%s; --hops %d); %s", total, src, o.Hops, fix))
	}
	hard := max(o.MaxUpdates, 0)
	if budgetCaps != nil {
		kb := 0
		for _, c := range budgetCaps {
			kb = max(kb, c)
		}
		if hard == 0 || kb < hard {
			hard = kb
		}
	}
	r := step
	r.Nodes, r.Complete, r.Clip, r.Sigma, r.Cap, r.Hops, r.Planning = o.Nodes, complete, o.Clip, o.Sigma, hard, o.Hops, true
	v := privacy.WalkDecide(r)
	for _, r := range v.Reasons {
		out = append(out, "the planned pairwise privacy figure will not hold for this run: "+r)
	}
	for _, w := range v.Warnings {
		out = append(out, "the planned pairwise privacy figure is at risk: "+w)
	}
	return out
}

// TrailingWarning reports a run whose last hops only forwarded the token: lastNoisy is the
// hop (1 = the first) of the last noisy update, 0 when there was none, of hops made by n
// nodes. It returns "" unless at least trailingForwardFrac of the hops, and at least n,
// came after it.
func TrailingWarning(hops, lastNoisy uint64, n int) string {
	if hops == 0 || lastNoisy > hops {
		return ""
	}
	after := hops - lastNoisy
	if after < uint64(max(n, 1)) || float64(after) < trailingForwardFrac*float64(hops) {
		return ""
	}
	if lastNoisy == 0 {
		return fmt.Sprintf("no noisy update happened in %d hops: every hop only forwarded the token and the model never changed", hops)
	}
	return fmt.Sprintf("the last noisy update was at hop %d of %d: the %d hops after it only forwarded the token "+
		"(nodes at their cap) and did not change the model; a run of %d hops ends with the same model",
		lastNoisy, hops, after, lastNoisy)
}

// MajorityShare is the fraction of d's rows in its most frequent class
// (consensus.Dataset.MajorityShare).
func MajorityShare(d *consensus.Dataset) float64 { return d.MajorityShare() }

// UtilityWarnings compares the model w of a run with the trivial predictor, on the test
// data (on the training data without test rows): for the logistic loss when its accuracy
// is no better than always predicting the majority class, for the squared loss when its
// R^2 is <= 0 (no better than predicting the mean target). hint says what to try.
func UtilityWarnings(p consensus.Problem, train, test *consensus.Dataset, w []float64, hint string) []string {
	d, which := test, "test"
	if d == nil || d.Rows == 0 {
		d, which = train, "training"
	}
	if d == nil || d.Rows == 0 || len(w) != d.ModelDim() {
		return nil
	}
	switch p.Loss {
	case consensus.Logistic, consensus.Multinomial:
		acc, base := p.Accuracy(d, w), MajorityShare(d)
		if acc <= base {
			return []string{fmt.Sprintf("%s accuracy %.4f is no better than predicting the majority class of the %s data (%.4f): "+
				"the model has learnt nothing useful; %s", which, acc, which, base, hint)}
		}
	case consensus.Squared:
		if _, r2, ok := consensus.Regression(d, w); ok && r2 <= 0 {
			return []string{fmt.Sprintf("%s R^2 = %.4g <= 0: the model predicts the %s targets no better than their mean; %s",
				which, r2, which, hint)}
		}
	}
	return nil
}
