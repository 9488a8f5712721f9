package privacy

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// StepName names a local step of the walk: the one vocabulary of walk.StepKind (whose
// String and Name return these), WalkRun.Step, the trace header's local_step and every
// comparison in the accountants and drivers.
type StepName string

// The local steps of the walk.
const (
	// StepProx is Algorithm 4's exact prox ("" in a WalkRun means the same).
	StepProx StepName = "prox"
	// StepLinearized is one gradient step in place of the prox (the prox's figures).
	StepLinearized StepName = "linearized"
	// StepLSSGD is the Laplacian-smoothed subsampled DP-SGD step.
	StepLSSGD StepName = "ls-sgd"
	// StepSGD is the DP-SGD random walk.
	StepSGD StepName = "sgd"
	// StepGADMM is gradient ADMM with amplification by iteration.
	StepGADMM StepName = "gadmm"
)

// ProxFigures reports whether s is accounted with the walk's own figures (Algorithm 4's
// clipped u-update): the prox step ("" included) and the linearized step.
func (s StepName) ProxFigures() bool { return s == "" || s == StepProx || s == StepLinearized }

// The local figure of one node, for every walk step: which curve and bound apply is
// decided here and nowhere else (the simulator's report, budgets, a node's /status and
// model.json, 'dpadmm account' all call StepLocalCurve or StepLocalBound), as WalkDecide
// decides the pairwise verdict.

// gadmmParams returns r.GADMM with the noise std of the run (WalkRun.Sigma is the one
// used; GADMMParams.Sigma is ignored in a WalkRun).
func (r WalkRun) gadmmParams() GADMMParams {
	p := r.GADMM
	p.Sigma = r.Sigma
	return p
}

// StepLocalCurve is the local RDP curve of k noisy updates of one node with the step of
// r: GADMMLocalCurve for gradient ADMM, SGDLocalCurve for ls-sgd and sgd, WalkLocalCurve
// (Algorithm 4's clipped u-update) for the prox and linearized steps. k = 0 gives the zero
// curve.
func StepLocalCurve(r WalkRun, k int) Curve {
	r = r.figure()
	switch {
	case k == 0:
		return ZeroCurve()
	case r.Step == StepGADMM:
		return GADMMLocalCurve(r.gadmmParams(), k)
	case gradStep(r):
		return SGDLocalCurve(r.Rate, r.Clip, r.Sigma, k)
	}
	return WalkLocalCurve(r.Clip, r.Sigma, k)
}

// StepLocalBound is StepLocalCurve converted at delta, with its theorem and conditions.
// For the prox and linearized steps (k Gaussian mechanisms, no subsampling) Epsilon is the
// exact Gaussian-DP conversion when it is below the RDP one (StepLocalEpsilon), and the
// theorem says so.
func StepLocalBound(r WalkRun, k int, delta float64) Bound {
	binds := r.RecordBinds()
	r = r.figure()
	switch {
	case r.Step == StepGADMM:
		return GADMMLocalBound(r.gadmmParams(), k, delta)
	case gradStep(r):
		return SGDLocalBound(r.Rate, r.Clip, r.Sigma, k, delta)
	}
	b := LocalBound(r.Clip, r.Sigma, k, delta)
	b.Theorem = LocalName + "; epsilon by " + GDPName + " where below the RDP conversion"
	if eps, _, _, acct := StepLocalEpsilon(r, k, delta); acct == AccountantGDP {
		b.Epsilon = eps
	}
	if binds {
		b.Conditions = RecordClipConditions + "; user i performs at most K_i noisy updates (hard cap); holds against an observer of every message"
	}
	return b
}

// The accountants a local figure may come from.
const (
	AccountantRDP = "rdp" // the RDP curve converted at delta (ToDP)
	AccountantGDP = "gdp" // the exact Gaussian-DP curve (GDPEpsilon)
	AccountantPLD = "pld" // the privacy loss distribution (SubsampledGaussianEpsilon)
)

// StepLocalEpsilon is the local epsilon at delta of k noisy updates with r's step: eps is
// the smallest of the RDP conversion (rdp, at order) and, for the prox and linearized steps
// (a composition of Gaussian mechanisms without subsampling, mu = 4 C' sqrt(k)/sigma with
// C' = FigureClip), the exact Gaussian-DP one, or for the ls-sgd and sgd steps (k
// Poisson-subsampled Gaussians, replace-one: the substitute relation with noise
// multiplier sigma/C) the privacy-loss-distribution one; acct names the accountant that
// gave eps. The PLD costs a fraction of a second per call: StepLocalBound, which budgets
// and calibrations call many times, keeps the RDP figure for those steps.
func StepLocalEpsilon(r WalkRun, k int, delta float64) (eps, rdp, order float64, acct string) {
	r = r.figure()
	rdp, order = ToDP(StepLocalCurve(r, k), delta)
	eps, acct = rdp, AccountantRDP
	switch {
	case !StepNoisy(r) || k <= 0:
	case r.Step.ProxFigures():
		if g := GDPEpsilon(GaussianMu(4*r.Clip, r.Sigma, k), delta); g < eps {
			eps, acct = g, AccountantGDP
		}
	case gradStep(r):
		if p, err := SubsampledGaussianEpsilon(r.Rate, r.Sigma/r.Clip, k, RelationSubstitute, delta); err == nil && p < eps {
			eps, acct = p, AccountantPLD
		}
	}
	return eps, rdp, order, acct
}

// StepLocalName names the theorem of StepLocalBound for r's step, and
// StepLocalConditions its conditions.
func StepLocalName(r WalkRun) string { return StepLocalBound(r, 0, 1e-5).Theorem }

// StepLocalConditions returns the conditions of StepLocalBound for r's step.
func StepLocalConditions(r WalkRun) string { return StepLocalBound(r, 0, 1e-5).Conditions }

// StepNoisy reports whether r's updates carry a finite figure at all: noise, a finite
// clip (and for gradient ADMM a finite sensitivity, for ls-sgd and sgd a valid rate).
func StepNoisy(r WalkRun) bool {
	r = r.figure()
	ok := r.Sigma > 0 && !math.IsInf(r.Sigma, 0) && r.Clip > 0 && !math.IsInf(r.Clip, 0)
	switch {
	case r.Step == StepGADMM:
		s := r.GADMM.Sensitivity
		return ok && s > 0 && !math.IsInf(s, 0)
	case gradStep(r):
		return ok && r.Rate > 0 && r.Rate <= 1
	}
	return ok
}

// ErrNoNetworkFigure is returned by StepRealisedPairwise for a step that no network
// amplification theorem covers in this run; the local figure is then the pairwise one.
var ErrNoNetworkFigure = errors.New("privacy: no network figure")

// StepRealised names the realised figure StepRealisedPairwise computed.
type StepRealised struct {
	Theorem, Conditions, Gaps string
	// CapAtLocal: the local figure also bounds every pair (the DP-SGD walk), so each pair
	// may be reported as the smaller of the two.
	CapAtLocal bool
}

// StepRealisedPairwise is the realised pairwise accountant of r's step over the trace tr
// (tr's Clip, Sigma and Nodes must be r's): RealisedPairwise for the prox and linearized
// steps; GADMMRealisedPairwise for gradient ADMM; for the DP-SGD walk RealisedPairwise with
// each update charged as a walk update of clip SGDTraceClip(C) with its own step size
// (RealisedPairwiseScaled with SGDStepScales), when every node's step is non-expansive on
// the complete graph (r.SGDNonExpansive, r.Complete); ErrNoNetworkFigure
// (wrapped, with the reason) for ls-sgd and an uncertified sgd run.
func StepRealisedPairwise(tr *Trace, r WalkRun, coalitions ...[]int) (*Realised, StepRealised, error) {
	return StepRealisedPairwiseSpread(tr, r, nil, coalitions...)
}

// StepRealisedPairwiseSpread is StepRealisedPairwise with the observers' sweeps run
// through spread (a driver's workers), with the same result to the last bit.
func StepRealisedPairwiseSpread(tr *Trace, r WalkRun, spread Spread, coalitions ...[]int) (*Realised, StepRealised, error) {
	r = r.figure()
	info := StepRealised{Theorem: TheoremRealised, Conditions: RealisedConditions, Gaps: RealisedGaps}
	switch {
	case r.Step == StepGADMM && r.GADMM.Uncertified != "":
		return nil, info, fmt.Errorf("%w: gradient ADMM: %s", ErrNoNetworkFigure, r.GADMM.Uncertified)
	case r.Step == StepGADMM:
		p := r.GADMM
		p.Sigma = r.Sigma
		res, err := gadmmRealisedPairwise(tr, p, spread, coalitions...)
		info.Theorem, info.Conditions = GADMMRealisedName, GADMMRealisedConditions
		info.Gaps = "the strongly convex exponent and the composition over several contributions are conservative derivations, not the paper's statements"
		return res, info, err
	case r.Step == StepLSSGD:
		return nil, info, fmt.Errorf("%w: no network amplification theorem covers the ls-sgd step (its noise is on a subsampled gradient, not on a contraction the walk's proofs apply to)", ErrNoNetworkFigure)
	case r.Step == StepSGD:
		if !(r.SGDNonExpansive && r.Complete) {
			return nil, info, fmt.Errorf("%w: the sgd step's amplification needs the complete graph and every node's step non-expansive (eta <= 2/beta, a loss with one score per row: not the multinomial one); this run does not certify both", ErrNoNetworkFigure)
		}
		t := *tr
		t.Clip = SGDTraceClip(tr.Clip) // one sgd update charged as one walk update of clip C/2
		// Each hop with its own step: the k-th update of its holder adds noise of std
		// eta_k c_q sigma and shifts by at most eta_k c_q 2C, eta_k = eta/sqrt(k).
		res, err := realisedPairwiseScaled(&t, SGDStepScales(&t), spread, coalitions...)
		info.Theorem = TheoremRealised + ", for the DP-SGD walk (each update a walk update of clip C/2: sensitivity 2C under " +
			"replace-one; each hop charged with its own step size eta/sqrt(k), hence its own noise variance and shift, the minorant " +
			"taken in cumulative variance)"
		info.Conditions = SGDRealisedConditions
		info.Gaps = SGDRealisedGaps
		info.CapAtLocal = true
		return res, info, err
	}
	t := *tr
	t.Clip = min(tr.Clip, r.Clip) // the record radius when it binds (FigureClip)
	res, err := realisedPairwise(&t, spread, coalitions...)
	return res, info, err
}

// SGDRealisedConditions are the assumptions of the sgd realised figure.
const SGDRealisedConditions = "every node's sgd step non-expansive on theta (a convex generalized linear loss, clipped per " +
	"example, eta <= 2/beta: walk.SGDSmoothness); one update of i shifts theta by at most eta_k c_q 2C (one row replaced) " +
	"against fresh noise of std eta_k c_q sigma, eta_k = eta/sqrt(k) for the holder's k-th update; complete graph; the trace " +
	"is the run's true path and lists every node's updates in the order it made them (the bound holds even against an " +
	"observer who knows the path)"

// SGDRealisedGaps is what the sgd realised figure does not charge.
const SGDRealisedGaps = "not charged: each map is non-expansive only up to the lattice rounding of the sampled per-example " +
	"gradients, an additive eta_k c_q h sqrt(p) |B| per step (h about 2^-40 sigma), which the figure neglects; the " +
	"amplification of the continuous Gaussian is applied to the discrete Gaussian of the lattice"

// NoNetworkReason returns the reason carried by an ErrNoNetworkFigure error of
// StepRealisedPairwise (ok false for nil or any other error): where no network theorem
// covers the step, every output reports the local figure with this reason.
func NoNetworkReason(err error) (reason string, ok bool) {
	if !errors.Is(err, ErrNoNetworkFigure) {
		return "", false
	}
	return strings.TrimPrefix(err.Error(), ErrNoNetworkFigure.Error()+": "), true
}

// Cap returns a realised pairwise epsilon as every output reports it: the smaller of eps
// and the local epsilon loc when the step's local figure bounds every pair too
// (CapAtLocal, the DP-SGD walk), else eps; capped reports whether the local figure won.
func (info StepRealised) Cap(eps, loc float64) (float64, bool) {
	if info.CapAtLocal && loc < eps {
		return loc, true
	}
	return eps, false
}

// CalibrateLocal returns the smallest sigma whose local figure (StepLocalBound: the
// guarantee every output reports as the one that always holds) over k noisy updates of r's
// step is at most target at delta, with that figure: the one --target-epsilon calibration
// of the commands and the scorecard.
func CalibrateLocal(r WalkRun, k int, target, delta float64) (float64, Bound, error) {
	sigma, err := CalibrateFigure(target, func(s float64) float64 {
		q := r
		q.Sigma = s
		return StepLocalBound(q, k, delta).Epsilon
	})
	if err != nil {
		return 0, Bound{}, err
	}
	r.Sigma = sigma
	return sigma, StepLocalBound(r, k, delta), nil
}
