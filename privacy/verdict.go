package privacy

import (
	"fmt"
	"math"
)

// One decision for every output. Which walk figure holds is decided here and nowhere else:
// the simulator's report, a node's /status and model.json, 'dpadmm account plan' and
// 'dpadmm account trace' all call WalkDecide (and WalkPlannedBound), so that one run gets
// one verdict wherever it is printed.

// WalkRun is what is known about a walk run, or planned for it, when deciding which figure
// holds.
type WalkRun struct {
	// Nodes is n, the number of members.
	Nodes int
	// Complete is true for the complete graph (uniform next hop over all n nodes, self
	// included), the setting of Theorem 4; false for any other graph (first-passage form).
	Complete bool
	// Clip is C and Sigma the noise parameter of every noisy update.
	Clip, Sigma float64
	// Cap is the hard cap K_i on every node's noisy updates (the smaller of --max-updates
	// and the budget's cap); 0 means no cap.
	Cap int
	// Hops is the number of hops of the run (for a plan: the planned length); 0 if unknown.
	Hops uint64
	// Updates is the realised number of noisy updates of the node the figure is for (the
	// busiest node for a whole-run figure); ignored when Planning.
	Updates int
	// Forwards counts hops known to have forwarded the token without a noisy update (the
	// whole run's in the simulator and in a trace; a node knows only its own).
	Forwards uint64
	// Resends counts releases known to have been sent to a second member (a hand-off
	// redirected after a missing ack, a regeneration, a fallback re-send).
	Resends uint64
	// Anomalies counts the custody events a node saw that a hostile member can cause and
	// that break the planned figure's picture of one uniform secret path: tokens accepted
	// under a new epoch (a rewind or a regeneration elsewhere), hand-offs refused as
	// replays of used evidence or as epoch jumps, and evictions. Any voids the planned
	// figure (the local figure, which counts every update, still holds).
	Anomalies uint64
	// Planning is true before the run: only the plan (Nodes, Hops, Cap) is known.
	Planning bool
	// Own is true for one node's own report after (or during) the run: K_i is then the
	// node's realised count Updates, which it knows exactly, and no cap is needed.
	Own bool
	// Step names the local step (walk.StepKind.String()): "" (or "prox") and "linearized"
	// keep the walk's figures (Clip and Sigma as above); "ls-sgd" and "sgd" use the figures
	// of lssgd.go, with Clip the per-example gradient clip C, Sigma the std of the noise on
	// the clipped gradient sum and Rate the sampling rate; StepGADMM ("gadmm") uses those
	// of gadmm.go.
	Step StepName
	// Rate is the Poisson sampling rate q in (0,1] of "ls-sgd" and "sgd".
	Rate float64
	// SGDNonExpansive is true for "sgd" when EVERY node's step is certified non-expansive
	// (walk.Machine.SGDNonExpansive: convex generalized linear loss, eta <= 2/beta); the
	// pairwise figure needs it.
	SGDNonExpansive bool
	// GADMM are the parameters of the gradient-ADMM step (Step == StepGADMM). Its Sigma
	// is ignored: Sigma above is the noise std on x; Clip above is the per-example
	// gradient clip (the sensitivity is GADMM.Sensitivity).
	GADMM GADMMParams
	// Unit is what the figures protect ("" is UnitRecord). For the prox and linearized
	// steps under UnitRecord the figures use FigureClip: the smaller of Clip and
	// RecordClip.
	Unit Unit
	// RecordClip is the record-level radius of one prox or linearized update (RecordClip;
	// walk.StepRun fills it); 0 or +Inf when none holds.
	RecordClip float64
	// WeightUnknown says the record radius is unknown for want of the weight of one row
	// (a node planning before the members are known, without a bound on their rows):
	// UnitNote then names that reason.
	WeightUnknown bool
}

// WalkVerdict says which walk figure holds for a WalkRun.
type WalkVerdict struct {
	// K is the K_i the figures are computed with: the node's realised count for its own
	// report (Own); otherwise the hard cap, or without one the realised count of the
	// busiest node (after the run) or ceil(Hops/Nodes) (a plan).
	K int
	// Noisy is false when no finite figure exists (sigma 0 or no clipping).
	Noisy bool
	// PlannedHolds is true when every checkable condition of the planned pairwise figure
	// holds; otherwise Reasons says which fail and the local figure at K is the guarantee.
	PlannedHolds bool
	Reasons      []string
	// Warnings are risks that do not void the figure by themselves.
	Warnings []string
}

// WalkDecide decides which walk figure holds. The planned pairwise figure (on the complete
// graph; Theorem4FinalCurve) needs: noise and clipping; the complete graph and n >= 3;
// the order condition c = (alpha-1) 8 alpha C^2/sigma^2 <= 1 at some order; a hard cap
// K_i; every hop of the run a noisy update (forwards void the first-passage law the
// figure averages over); and every release seen by one peer (no re-sends). A plan whose length exceeds n K_i makes forwards certain, so the
// plan itself fails; one where some node is likely to reach its cap gets a warning. The
// local figure holds whenever Noisy.
//
// For Step == StepGADMM the decision is gadmmDecide's.
func WalkDecide(r WalkRun) WalkVerdict {
	r = r.figure()
	if r.Step == StepGADMM {
		return gadmmDecide(r)
	}
	if gradStep(r) {
		return gradDecide(r)
	}
	v := WalkVerdict{Noisy: r.Sigma > 0 && r.Clip > 0 && !math.IsInf(r.Clip, 0) && !math.IsInf(r.Sigma, 0)}
	v.K = verdictK(r)
	if !v.Noisy {
		if r.Sigma == 0 {
			v.Reasons = append(v.Reasons, "sigma 0: no noise, no privacy")
		} else {
			v.Reasons = append(v.Reasons, "no clipping (clip +Inf) or invalid noise: unbounded sensitivity, no privacy")
		}
		return v
	}
	if r.Nodes < 2 {
		v.Reasons = append(v.Reasons, fmt.Sprintf("n = %d: no pairwise figure", r.Nodes))
	}
	if r.Nodes == 2 {
		v.Reasons = append(v.Reasons, "n = 2: the observer holds the token at every other visit and sees the whole path between them; "+
			"no amplification is claimed")
	}
	if !r.Complete && r.Nodes > 2 {
		v.Reasons = append(v.Reasons, "graph other than the complete one: the first-passage planned form charges i's updates one by "+
			"one, and several updates of i between two views of j cost more jointly; no bound of that joint cost is computed for "+
			"this graph, so no planned network figure is claimed (the realised figure after the run charges it)")
	}
	if !orderConditionMet(r.Clip, r.Sigma) {
		v.Reasons = append(v.Reasons, "the order condition c = (alpha-1)*8*alpha*C^2/sigma^2 <= 1 fails at every order (sigma too small for clip C)")
	}
	if r.Cap <= 0 && !r.Own {
		if r.Planning {
			v.Reasons = append(v.Reasons, fmt.Sprintf("no hard cap K_i: the plan uses the expected count ceil(hops/n) = %d, but the bound needs a hard cap", v.K))
		} else {
			v.Reasons = append(v.Reasons, fmt.Sprintf("no hard cap K_i (--max-updates 0 and no budget): K_i is set to the realised count %d", v.K))
		}
	}
	if r.Forwards > 0 {
		v.Reasons = append(v.Reasons, fmt.Sprintf("%d hops forwarded the token without a noisy update (nodes at their cap or budget), "+
			"but the planned form counts every hop as a noisy update", r.Forwards))
	}
	if r.Resends > 0 {
		v.Reasons = append(v.Reasons, fmt.Sprintf("%d releases were re-sent to a second member (missing ack, regeneration or fallback), "+
			"but the planned form assumes each release is seen by the one next peer of the random path", r.Resends))
	}
	v.Reasons = append(v.Reasons, anomalyReasons(r)...)
	if r.Cap > 0 && r.Nodes >= 2 && r.Hops > 0 {
		mean := float64(r.Hops) / float64(r.Nodes)
		sd := math.Sqrt(mean * (1 - 1/float64(r.Nodes)))
		switch {
		case r.Hops > uint64(r.Nodes)*uint64(r.Cap):
			// Whoever reports: the run cannot consist of noisy updates only.
			v.Reasons = append(v.Reasons, fmt.Sprintf("the plan makes forwards certain: %d hops exceed n x K_i = %d x %d noisy updates, "+
				"so nodes at their cap forward the token and the planned figure will not hold for the run (lower --hops or raise the cap)",
				r.Hops, r.Nodes, r.Cap))
		case r.Own && r.Hops > uint64(r.Cap):
			// One node's report: it knows its own forwards only. Any other member may have
			// reached its cap (it may hold the token up to Hops times) and forwarded.
			v.Reasons = append(v.Reasons, fmt.Sprintf("one node's report cannot see the other members' forwards: with a cap K_i = %d below "+
				"the run's %d hops a member may have reached it and forwarded the token, which the planned form does not allow; "+
				"the planned figure is not claimed here (a testnet's report, which reads every ledger, checks it)", r.Cap, r.Hops))
		case r.Planning && mean+3*sd > float64(r.Cap):
			v.Warnings = append(v.Warnings, fmt.Sprintf("some node is likely to reach its cap K_i = %d (expected visits per node %.1f, sd %.1f): "+
				"its later visits forward the token and the run will then report the local figure", r.Cap, mean, sd))
		}
	}
	v.PlannedHolds = len(v.Reasons) == 0
	return v
}

// orderConditionMet reports whether c = (alpha-1) e1 <= 1 at some order of the grid.
func orderConditionMet(clip, sigma float64) bool {
	for _, x := range amplifiedUnit(clip, sigma, 1) {
		if !math.IsInf(x, 1) {
			return true
		}
	}
	return false
}

// FinalReleaseWeight bounds, in units of one amplified update (1+c) e1, what the final
// model released to every node costs node i when the run has `hops` hops and every hop is a
// noisy update: a contribution of i made r hops before the end is seen in the final model
// after r noisy updates, so the final view costs sum_{r=1..hops} P(i holds the token r hops
// before the end) / r. Every hop after the first enters i with probability at most
// maxIn = max_j P(j -> i) (1/n on the complete graph); the first holder may be i for sure.
// Hence the bound maxIn H_{hops-1} + 1/hops (H the harmonic number), capped at `updates`
// (each contribution costs at most one full update). It is 0 when updates is 0 and +Inf
// when hops is 0 (an unbounded run has no final release to bound).
//
// The first-passage sums of the planned figures stop at the run's end (or at their
// horizon): contributions that no observer sees during the run are exactly those the final
// release sees, and this term charges them, so no probability mass is charged 0.
func FinalReleaseWeight(maxIn float64, hops uint64, updates int) float64 {
	if updates <= 0 {
		return 0
	}
	if hops == 0 {
		return math.Inf(1)
	}
	const direct = 1 << 20
	var h float64
	if hops-1 <= direct {
		h = harmonic(int(hops - 1))
	} else { // H_b <= H_a + ln(b/a) for b > a
		h = harmonic(direct) + math.Log(float64(hops-1)/direct)
	}
	return math.Min(maxIn*h+1/float64(hops), float64(updates))
}

// harmonic returns H_k = 1 + 1/2 + ... + 1/k, summed small terms first.
func harmonic(k int) float64 {
	h := 0.0
	for r := k; r >= 1; r-- {
		h += 1 / float64(r)
	}
	return h
}

// Theorem4FinalCurve is the planned figure of a run of `hops` hops whose final model is
// released to every node: (1+c) e1 PlannedCompleteWeight(n, K_i, hops), the weight an upper
// bound on the expected JOINT realised weight of every pair over the secret uniform path
// (planned_joint.go; the printed Theorem 4 charges updates one by one, K_i ln(n)/(n-1),
// which is below it). Orders with c > 1 are +Inf; K_i = 0 gives zeros; n < 3 or hops 0
// gives +Inf (n = 2: no amplification; an unbounded run has no final release to bound).
func Theorem4FinalCurve(n, updates int, hops uint64, clip, sigma float64) Curve {
	if hops == 0 {
		return InfCurve()
	}
	return PlannedCompleteCurve(n, updates, hops, clip, sigma)
}

// PlannedCompleteCurve is (1+c) e1 PlannedCompleteWeight(n, K_i, hops): the planned curve
// on the complete graph, with the final release charged when hops > 0 and not charged when
// hops is 0 (the run's length unknown). Orders with c > 1 are +Inf; K_i = 0 gives zeros;
// n < 3 gives +Inf.
func PlannedCompleteCurve(n, updates int, hops uint64, clip, sigma float64) Curve {
	if n < 3 || updates < 0 {
		return InfCurve()
	}
	if updates == 0 {
		return ZeroCurve()
	}
	return amplifiedUnit(clip, sigma, 1).Scale(PlannedCompleteWeight(n, updates, hops))
}

// Theorem4FinalName names the result WalkPlannedBound rests on.
const Theorem4FinalName = "planned pairwise bound on the complete graph: Cyffers et al. 2023, Theorem 4's amplification " +
	"(conservative corrected form, (1+c) weak-convexity factor) with the joint cost of all of i's updates between two views " +
	"of j (greatest convex minorant) in expectation over the secret uniform path, plus the final model as a view of every node"

// WalkPlannedBound is the planned network figure of one node on the complete graph with
// its verdict: Theorem4FinalCurve at K = WalkDecide(r).K when the conditions hold, else
// the local bound at K (which holds regardless) with the reasons in Note. A node with no
// noisy update has epsilon 0.
//
// For Step == StepGADMM it is GADMMPlannedBound.
func WalkPlannedBound(r WalkRun, delta float64) Bound {
	r = r.figure()
	if r.Step == StepGADMM {
		return GADMMPlannedBound(r, delta)
	}
	if gradStep(r) {
		return gradPlannedBound(r, delta)
	}
	v := WalkDecide(r)
	b := Bound{Theorem: Theorem4FinalName, Conditions: Theorem4Conditions + "; the final model is released to every node",
		ConditionsHold: v.PlannedHolds}
	if err := validateDelta(delta); err != nil {
		b.Epsilon, b.ConditionsHold, b.Note = math.Inf(1), false, err.Error()
		return b
	}
	if v.K == 0 && v.Noisy && r.Own {
		b.ConditionsHold, b.Note = true, "no noisy update: nothing of this node's data was released"
		return b
	}
	if !v.PlannedHolds {
		loc := LocalBound(r.Clip, r.Sigma, v.K, delta)
		b.Epsilon, b.Order = loc.Epsilon, loc.Order
		b.Note = "conditions fail: " + joinReasons(v.Reasons) +
			fmt.Sprintf(". Epsilon is the local bound at K_i = %d (%s), which holds regardless", v.K, LocalName)
		return b
	}
	b.Epsilon, b.Order = ToDP(Theorem4FinalCurve(r.Nodes, v.K, r.Hops, r.Clip, r.Sigma), delta)
	b.Note = "planning figure over the secret random path; the proof of Theorem 4 has known gaps (amplification by " +
		"iteration is applied to z, where the update map is not shown non-expansive; updates are charged one by one): " +
		"the local figure is the guarantee that holds unconditionally"
	if len(v.Warnings) > 0 {
		b.Note += "; " + joinReasons(v.Warnings)
	}
	return b
}

func joinReasons(rs []string) string {
	s := ""
	for i, r := range rs {
		if i > 0 {
			s += "; "
		}
		s += r
	}
	return s
}

// verdictK is the K_i a WalkVerdict's figures use: the node's realised count for its own
// report (Own); otherwise the hard cap (at least the realised count), or without one the
// realised count of the busiest node (after the run) or ceil(Hops/Nodes) (a plan).
func verdictK(r WalkRun) int {
	switch {
	case r.Own:
		return r.Updates
	case r.Cap > 0:
		return max(r.Cap, r.Updates)
	case r.Planning && r.Nodes > 0:
		return int((r.Hops + uint64(r.Nodes) - 1) / uint64(r.Nodes))
	}
	return r.Updates
}

// anomalyReasons is the verdict's reason for WalkRun.Anomalies (none when 0), shared by
// every step's decision.
func anomalyReasons(r WalkRun) []string {
	if r.Anomalies == 0 {
		return nil
	}
	return []string{fmt.Sprintf("%d custody anomalies (tokens accepted under a new epoch: a rewind or a regeneration; hand-offs refused "+
		"as replays or epoch jumps; evictions): the walk did not follow one uniform secret path, which the planned form assumes", r.Anomalies)}
}
