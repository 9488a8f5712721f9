package privacy

import (
	"fmt"
	"math"
)

// Accounting of the gradient-based walk steps "ls-sgd" (Laplacian-smoothed DP-SADMM step,
// Liu et al. 2022, TIFS) and "sgd" (the random-walk DP-SGD baseline), whose noise is on the
// clipped gradient sum of a Poisson sample of the node's rows instead of on u_i.
//
// One update is the Poisson-subsampled Gaussian mechanism: each row of node i included
// with probability q, every example's gradient clipped at C, Gaussian noise of std sigma on
// the clipped sum (noise multiplier sigma/C), record-level REPLACE-ONE adjacency of a row of
// node i (one row replaced, the node's row count unchanged; add/remove-one cannot be hidden,
// see subsampled_replace.go). Its RDP is SubsampledReplaceCurve(q, sigma/C, 1); a node's K_i
// updates compose to SubsampledReplaceCurve(q, sigma/C, K_i): the local figure, against an
// observer of every message (everything after the noise, the smoothing included, is
// post-processing). With one row per node the record is the user. At q = 1 the update is
// exactly a Gaussian mechanism of sensitivity 2C.
//
// Network figures. "ls-sgd": none. The amplification theorems of the walk (Cyffers et al.
// 2023, Theorem 4, amplification by iteration on the released z) need the maps between two
// noise injections to be non-expansive on the observed state; for ls-sgd the released z
// moves by 2 lambda rho Q_nu^-1 [(z - u_i) - gamma G]/n, driven by every holder's private u_i,
// and no such property is shown (the same gap E5 that the walk's Theorem 4 has, here without
// even the paper's claim). Its pairwise figure is the local figure, and the verdict says so.
// "sgd": the token is the model theta and each hop applies theta -> prox_{eta r}(theta -
// eta G(theta)) + noise, non-expansive when the (clipped) loss is convex and beta-smooth with
// eta <= 2/beta (walk.SGDSmoothness). This is the setting of the random-walk DP-SGD of
// Cyffers and Bellet 2022 ("Privacy Amplification by Decentralization", AISTATS), whose
// amplification factor is of the same O(ln n / n) order as Theorem 4 (Cyffers et al. 2023,
// sec. 5.4). SGDNetworkCurve writes it in the walk's conservative corrected form: per
// update, with e1 = alpha (C/sigma)^2/2 the unsampled Gaussian RDP of one update in theta
// units (sensitivity eta c_q 2C under replace-one against noise std eta c_q sigma; the
// subsampling is ignored, which only over-charges), here e1 = alpha (2C)^2/(2 sigma^2), c = (alpha-1) e1 <= 1 (Feldman et al. 2018 weak convexity, Prop.
// 3 of the walk paper) and the exact geometric law ln(n)/(n-1) of the first passage on the
// complete graph, plus the final model released to every node; and it is capped by the
// local curve at every order (both bound the same divergence). When a condition fails
// (non-expansiveness not certified, another graph, no cap, forwards, re-sends, the order
// condition) the pairwise figure falls back to the local figure and the verdict says why.
//
// Not implemented: DP-VRADMM (Liu et al. 2022, Alg. 1). Its variance-reduced gradient
// uses the snapshot gradient p~ = grad f(x~) of ALL the node's data without noise, and the
// strongly convex variant re-initialises the dual from grad f(x~) without noise (digest
// sec. 2.3, pitfall 5); the paper's Theorem 1 has unspecified constants c1, c2 and a
// condition eps <= c1 S m / n^2 that real settings cannot meet (digest sec. 3.1, 3.3). A
// sound version would need p~ privatized with its own noise and its own accounting (a
// deviation from the paper); it is left out.

// SubsampledEntryNote names the result a "subsampled" ledger entry rests on.
const SubsampledEntryNote = SubsampledReplaceNote

// validateSubsampledEntry checks a "subsampled" entry: q in (0,1].
func validateSubsampledEntry(e Entry) error {
	if !(e.Rate > 0 && e.Rate <= 1) {
		return fmt.Errorf("privacy: ledger entry %d: %s entry needs a sampling rate q in (0,1], got %v", e.Seq, MechSubsampled, e.Rate)
	}
	return nil
}

// subsampledEntryCurve is the RDP curve of one "subsampled" entry: zeros for sensitivity 0,
// +Inf for sigma 0, else SubsampledReplaceCurve(q, sigma/sensitivity, 1): the entry's
// sensitivity is the per-example clip C and the adjacency is replace-one (one row of the
// node replaced, its row count unchanged), the only one the walk can hide (see
// subsampled_replace.go). A ledger written before this rule is recomputed with it, which
// only raises its figure.
func subsampledEntryCurve(e Entry) Curve {
	switch {
	case e.Sensitivity == 0:
		return ZeroCurve()
	case e.Sigma == 0:
		return InfCurve()
	}
	return SubsampledReplaceCurve(e.Rate, e.Sigma/e.Sensitivity, 1)
}

// ValidateGradStep checks the privacy parameters of an "ls-sgd" or "sgd" run: rate q in
// (0,1], clip C > 0 and finite, sigma >= 0 and finite, nu >= 0 and finite, eta > 0 and
// finite; and, when rows > 0 (the node's row count), an expected batch q x rows of at least
// one example.
func ValidateGradStep(rate, clip, sigma, nu, eta float64, rows int) error {
	switch {
	case !(rate > 0 && rate <= 1):
		return fmt.Errorf("privacy: sampling rate q = %v must be in (0,1]", rate)
	case !(clip > 0) || math.IsInf(clip, 0):
		return fmt.Errorf("privacy: clip C = %v must be > 0 and finite", clip)
	case ValidateSigma(sigma) != nil:
		return fmt.Errorf("privacy: sigma = %v must be finite and >= 0", sigma)
	case !(nu >= 0) || math.IsInf(nu, 0):
		return fmt.Errorf("privacy: Laplacian smoothing nu = %v must be finite and >= 0", nu)
	case !(eta > 0) || math.IsInf(eta, 0):
		return fmt.Errorf("privacy: step size eta = %v must be > 0 and finite", eta)
	case rows < 0:
		return fmt.Errorf("privacy: rows = %d must be >= 0", rows)
	case rows > 0 && rate*float64(rows) < 1:
		return fmt.Errorf("privacy: expected batch q x rows = %v x %d = %v is below one example", rate, rows, rate*float64(rows))
	}
	return nil
}

// SGDLocalCurve is the local RDP curve of `updates` ls-sgd or sgd updates of one node:
// SubsampledReplaceCurve(rate, sigma/clip, updates) (replace-one adjacency). Invalid input (a rate outside (0,1]
// included) gives +Inf; sigma 0 (no noise) gives +Inf unless updates is 0.
func SGDLocalCurve(rate, clip, sigma float64, updates int) Curve {
	switch {
	case !(rate > 0 && rate <= 1):
		return InfCurve()
	case updates == 0:
		return ZeroCurve()
	case updates < 0 || !(clip > 0) || math.IsInf(clip, 0) || !(sigma > 0) || math.IsInf(sigma, 0):
		return InfCurve()
	}
	return SubsampledReplaceCurve(rate, sigma/clip, updates)
}

// SGDLocalName names the result SGDLocalBound rests on.
const SGDLocalName = "Poisson-subsampled Gaussian mechanism per update under replace-one adjacency (Mironov, Talwar, Zhang 2019 " +
	"with the weak triangle inequality, Mironov 2017 Prop. 11; exactly the Gaussian of sensitivity 2C at q = 1), composed over K_i updates"

// SGDLocalConditions lists the assumptions of SGDLocalBound.
const SGDLocalConditions = "every example's gradient clipped at C; Gaussian noise of std sigma on the clipped sum, on the lattice " +
	"of the discrete Gaussian; each row included independently with probability q (secret sample); record-level " +
	"replace-one adjacency of a row of node i (its row count is public: add/remove-one is not claimed); at most K_i " +
	"updates (hard cap); holds against an observer of every message"

// SGDLocalBound is the local (eps, delta) bound of `updates` ls-sgd or sgd updates.
func SGDLocalBound(rate, clip, sigma float64, updates int, delta float64) Bound {
	b := Bound{Theorem: SGDLocalName, Conditions: SGDLocalConditions, ConditionsHold: true}
	if err := validateDelta(delta); err != nil {
		b.Epsilon, b.ConditionsHold, b.Note = math.Inf(1), false, err.Error()
		return b
	}
	b.Epsilon, b.Order = ToDP(SGDLocalCurve(rate, clip, sigma, updates), delta)
	return b
}

// sgdUnit returns, per order, (1+c) e1 with e1 = alpha (2 clip/sigma)^2 / 2 (one update's
// shift 2C under replace-one against noise sigma, in gradient units) and c = (alpha-1) e1,
// or +Inf where c > 1.
func sgdUnit(clip, sigma float64) Curve {
	out := make(Curve, len(Orders))
	r := 2 * clip / sigma
	for k, a := range Orders {
		e1 := a * r * r / 2
		c := (a - 1) * e1
		if c > 1 || math.IsNaN(c) {
			out[k] = math.Inf(1)
			continue
		}
		out[k] = (1 + c) * e1
	}
	return out
}

// SGDNetworkCurve is the pairwise (network) RDP curve of one node of the random-walk
// DP-SGD ("sgd") on the complete graph with n nodes: at each order the smaller of the local
// curve SGDLocalCurve(rate, clip, sigma, K_i) and the amplified form
// (1+c) e1 PlannedCompleteWeight(n, K_i, hops) (the joint per-segment form), e1 = 2 alpha C^2/sigma^2,
// c = (alpha-1) e1 <= 1 (see the comment at the top of this file). Invalid input gives +Inf;
// K_i = 0 gives zeros.
func SGDNetworkCurve(n, updates int, hops uint64, rate, clip, sigma float64) Curve {
	switch {
	case updates == 0:
		return ZeroCurve()
	case n < 2 || updates < 0:
		return InfCurve()
	}
	local := SGDLocalCurve(rate, clip, sigma, updates)
	if n < 3 {
		return local
	}
	return sgdUnit(clip, sigma).Scale(PlannedCompleteWeight(n, updates, hops)).Min(local)
}

// SGDNetworkName names the result of the sgd pairwise figure.
const SGDNetworkName = "random-walk DP-SGD, amplification by iteration (Feldman et al. 2018; Cyffers and Bellet 2022) in the " +
	"conservative corrected form of Cyffers et al. 2023, Theorem 4 ((1+c) factor, ln(n)/(n-1)), plus the final model " +
	"as a view of every node, capped by the local figure"

// SGDNetworkConditions lists the assumptions of the sgd pairwise figure.
const SGDNetworkConditions = "every node's loss a convex generalized linear loss, clipped per example, and its step eta <= 2/beta " +
	"(walk.SGDSmoothness), so that every hop's map is non-expansive; complete graph with uniform next hop (self included); " +
	"secret path; c = (alpha-1)*2*alpha*C^2/sigma^2 <= 1; hard cap K_i; every hop a noisy update; each release seen " +
	"by one peer; only j's first observation after each update charged"

// LSSGDName names the result the ls-sgd figure rests on.
const LSSGDName = "ls-sgd: no network amplification theorem; the pairwise figure is the local figure (" + SGDLocalName + ")"

// gradStep reports whether r.Step is one of the gradient-noise steps accounted here.
func gradStep(r WalkRun) bool { return r.Step == StepLSSGD || r.Step == StepSGD }

// gradDecide is WalkDecide for "ls-sgd" and "sgd".
func gradDecide(r WalkRun) WalkVerdict {
	v := WalkVerdict{Noisy: r.Sigma > 0 && !math.IsInf(r.Sigma, 0) && r.Clip > 0 && !math.IsInf(r.Clip, 0) &&
		r.Rate > 0 && r.Rate <= 1}
	v.K = verdictK(r)
	if !v.Noisy {
		switch {
		case !(r.Rate > 0 && r.Rate <= 1):
			v.Reasons = append(v.Reasons, fmt.Sprintf("%s: sampling rate q = %v outside (0,1]: no figure", r.Step, r.Rate))
		case r.Sigma == 0:
			v.Reasons = append(v.Reasons, "sigma 0: no noise, no privacy")
		default:
			v.Reasons = append(v.Reasons, "no clipping (clip +Inf) or invalid noise: unbounded sensitivity, no privacy")
		}
		return v
	}
	if r.Step == StepLSSGD {
		v.Reasons = append(v.Reasons, "ls-sgd: no network amplification theorem covers this step (the released z also moves "+
			"with every holder's private u_i, and the smoothed update is not shown non-expansive on z): the pairwise figure "+
			"is the local figure (Poisson-subsampled Gaussian, composed over K_i)")
		return v
	}
	if r.Nodes < 2 {
		v.Reasons = append(v.Reasons, fmt.Sprintf("n = %d: no pairwise figure", r.Nodes))
	}
	if !r.Complete {
		v.Reasons = append(v.Reasons, "sgd: the pairwise figure is given for the complete graph only")
	}
	if !r.SGDNonExpansive {
		v.Reasons = append(v.Reasons, "sgd: the step is not certified non-expansive on every node (needs a convex generalized linear "+
			"loss with one score per row, not the multinomial one, and eta <= 2/beta, walk.SGDSmoothness): amplification by iteration does not apply")
	}
	// The step eta_k = eta/sqrt(k) (k the holder's own count) scales every hop's noise and
	// every update's shift differently; the planned form charges one scale for all, which
	// under-charges (a later holder's small noise cannot hide an early large update). The
	// realised figure charges each hop its own variance (RealisedPairwiseScaled).
	v.Reasons = append(v.Reasons, "sgd: the step size eta/sqrt(k) gives every hop its own noise scale and every update its own "+
		"shift, which the planned form (one noise scale) does not charge: a plan cannot promise the amplification; the "+
		"realised figure, which charges each hop its own variance, is the amplified one after the run")
	if allInf(sgdUnit(r.Clip, r.Sigma)) {
		v.Reasons = append(v.Reasons, "the order condition c = (alpha-1)*2*alpha*C^2/sigma^2 <= 1 fails at every order (sigma too small for clip C)")
	}
	if r.Cap <= 0 && !r.Own {
		v.Reasons = append(v.Reasons, fmt.Sprintf("no hard cap K_i: K_i is set to %d, but the bound needs a hard cap", v.K))
	}
	if r.Forwards > 0 {
		v.Reasons = append(v.Reasons, fmt.Sprintf("%d hops forwarded the token without a noisy update, but the pairwise form counts every hop as one", r.Forwards))
	}
	if r.Resends > 0 {
		v.Reasons = append(v.Reasons, fmt.Sprintf("%d releases were re-sent to a second member, but the pairwise form assumes each release is seen by one peer", r.Resends))
	}
	v.Reasons = append(v.Reasons, anomalyReasons(r)...)
	if r.Cap > 0 && r.Nodes >= 2 && r.Hops > uint64(r.Nodes)*uint64(r.Cap) {
		v.Reasons = append(v.Reasons, fmt.Sprintf("the plan makes forwards certain: %d hops exceed n x K_i = %d x %d noisy updates", r.Hops, r.Nodes, r.Cap))
	}
	v.PlannedHolds = len(v.Reasons) == 0
	return v
}

func allInf(c Curve) bool {
	for _, x := range c {
		if !math.IsInf(x, 1) {
			return false
		}
	}
	return true
}

// gradPlannedBound is WalkPlannedBound for "ls-sgd" and "sgd".
func gradPlannedBound(r WalkRun, delta float64) Bound {
	v := WalkDecide(r)
	b := Bound{Theorem: SGDNetworkName, Conditions: SGDNetworkConditions, ConditionsHold: v.PlannedHolds}
	if r.Step == StepLSSGD {
		b.Theorem, b.Conditions = LSSGDName, SGDLocalConditions
	}
	if err := validateDelta(delta); err != nil {
		b.Epsilon, b.ConditionsHold, b.Note = math.Inf(1), false, err.Error()
		return b
	}
	if !v.Noisy {
		b.Epsilon, b.ConditionsHold, b.Note = math.Inf(1), false, "no finite figure: "+joinReasons(v.Reasons)
		return b
	}
	if v.K == 0 && r.Own {
		b.ConditionsHold, b.Note = true, "no noisy update: nothing of this node's data was released"
		return b
	}
	if !v.PlannedHolds {
		loc := SGDLocalBound(r.Rate, r.Clip, r.Sigma, v.K, delta)
		b.Epsilon, b.Order = loc.Epsilon, loc.Order
		b.Note = "conditions fail: " + joinReasons(v.Reasons) +
			fmt.Sprintf(". Epsilon is the local bound at K_i = %d (%s), which holds regardless", v.K, SGDLocalName)
		return b
	}
	b.Epsilon, b.Order = ToDP(SGDNetworkCurve(r.Nodes, v.K, r.Hops, r.Rate, r.Clip, r.Sigma), delta)
	b.Note = "planning figure over the secret random path; the lattice rounding of the noisy gradient makes each map " +
		"non-expansive only up to an additive term of order 2^-40 sigma, which the figure neglects: the local figure is the " +
		"guarantee that holds unconditionally"
	return b
}

// SGDTraceClip returns the clip to record in a Trace (RealisedPairwise) or in PlanOptions
// (PlannedPairwise) of an "sgd" run: C/2. Those accountants charge one update the unit
// WalkUpdateCurve(clip, sigma) = 8 alpha clip^2/sigma^2 (sensitivity 4 lambda C against noise
// lambda sigma); one sgd update is 2 alpha C^2/sigma^2 (sensitivity eta c_q 2C under
// replace-one against noise eta c_q sigma), which is that unit at clip C/2. The realised and planned figures then hold
// under the sgd conditions of WalkDecide (non-expansive steps); for "ls-sgd" no pairwise
// accountant applies and the local figure is the pairwise one.
func SGDTraceClip(clip float64) float64 { return clip / 2 }
