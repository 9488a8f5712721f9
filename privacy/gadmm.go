package privacy

import (
	"errors"
	"fmt"
	"math"
)

// The accountant of gradient (linearized) ADMM with privacy amplification by iteration
// (Chan, Xie, Zhao, "Privacy Amplification by Iteration for ADMM with (Strongly) Convex
// Objective Functions", arXiv 2312.08685), as a local step of the random walk.
//
// One noisy iteration by node i releases x~ = x + N, N ~ N(0, sigma^2 I), with x the
// closed-form x-step after one gradient call of f_i; lambda is not noised and does not
// depend on f_i. Changing i's data moves x by at most Sensitivity = eta Delta, Delta a bound
// on sup_x ||grad f_i(x) - grad f_i'(x)|| (Cor. 6.2), so the local zCDP term is
//
//	eps_loc = eta^2 Delta^2 / (2 sigma^2)        (D^z; RDP alpha eps_loc at every order).
//
// After t further noisy iterations by other nodes (pairs T = floor(t/2): one iteration leaves
// lambda exposed, amplification needs pairs), the state (x~, lambda) has
//
//	convex, eta <= 1/nu:   B(t) = min(eps_loc, C/T eps_loc),   C = max{2, 3/(beta eta)} (1 + beta eta ||A||^2)
//	                       (Thm 6.1 / Cor 6.2; the printed 3/(beta n) of Thm 6.1 is read 3/(beta eta))
//	strongly convex:       B(t) = min(eps_loc, C_sc L^(2T-1) (1-L^2)/(1-L^(2T)) eps_loc)
//	                       C_sc = max(2/R, 3/(eta beta)) (R + eta beta ||A||^2), L the contraction
//	                       factor of Lemma 7.6.
//
// The strongly convex default is the conservative exponent: Thm 7.2's proof sets Thm 5.2's
// (norm) Lipschitz factor to L^2, but Lemmas 7.6 and 7.8 give L per two-iteration operator;
// redoing Thm 5.2 with L and the optimal shift weights gives the form above, which is never
// below the printed C_sc L^(2T-1)/T eps_loc (GADMMParams.Printed selects the printed form).
// T = 0 (t = 0 or 1) gives eps_loc alone; the min with eps_loc is post-processing of x~ at
// i's own step (lambda at that step is the same in both runs).

// Theorem names and conditions of the gradient-ADMM figures.
const (
	// GADMMLocalName names the local figure.
	GADMMLocalName = "Chan, Xie, Zhao 2023, Cor. 6.2 (local term eta^2 Delta^2/(2 sigma^2) as zCDP), composed over K_i updates"
	// GADMMLocalConditions lists its assumptions.
	GADMMLocalConditions = "each update of node i moves the pre-noise x by at most eta*Delta (Delta bounds " +
		"sup_x ||grad f_i - grad f_i'||: per-example clipping at C, Delta = 2*weight*C); fresh N(0, sigma^2 I) noise " +
		"on all of x (discrete Gaussian on the lattice, rounding charged in Delta); no noise and no data in lambda; " +
		"node i makes at most K_i updates (hard cap); holds against an observer of every message"
	// GADMMRealisedName names the realised-path figure.
	GADMMRealisedName = "Chan, Xie, Zhao 2023, Thm 6.1/Cor 6.2 (convex) or Thm 7.2/Cor 7.3 with the conservative " +
		"exponent (strongly convex): amplification by iteration over pairs of noisy iterations, per contribution of " +
		"node i from observer j's first view after it, composed over i's contributions by the hybrid argument " +
		"(each segment ends at i's next contribution), the final model a view of every node"
	// GADMMRealisedConditions lists its assumptions.
	GADMMRealisedConditions = GADMMLocalConditions + "; every later step's gradient oracle is the gradient of a " +
		"convex, 1/eta-smooth function (convex mode: eta <= 1/nu) or, in the strongly convex mode, of a mu-strongly " +
		"convex, nu-smooth one with g mu_g-strongly convex and eta inside interval (23); consensus form A = I, B = -I, " +
		"c = 0; the other nodes draw their noise honestly and do not collude with the observer; the trace is the " +
		"run's true path; no averaging over the secret path (the token carries its hop counter, so the observer " +
		"knows how many iterations separate its views); each later step's rounding onto the noise lattice (at most " +
		"h sqrt(p) per step) charged as extra distance (needs the dimension in the run's parameters; a trace without it " +
		"leaves the drift uncharged)"
)

// GADMMParams are the public parameters of a gradient-ADMM walk that the accountant needs.
type GADMMParams struct {
	// Eta is the x-step size eta > 0, Beta the ADMM penalty beta > 0.
	Eta  float64 `json:"eta"`
	Beta float64 `json:"beta"`
	// Sigma is the std of the noise on x (>= 0; 0 gives no finite figure).
	Sigma float64 `json:"sigma"`
	// Sensitivity is eta*Delta, the bound on ||x - x'|| of one update of any node (the
	// largest over the nodes when their weights differ); the ledger's Sensitivity field.
	Sensitivity float64 `json:"sensitivity"`
	// NormA2 is ||A||^2 (spectral norm squared); 0 means 1, the consensus form.
	NormA2 float64 `json:"norm_a2,omitempty"`
	// NormAB is ||A^T B||; 0 means 1, the consensus form.
	NormAB float64 `json:"norm_ab,omitempty"`
	// Nu is the smoothness bound of every node's f (the largest over the nodes).
	Nu float64 `json:"nu"`
	// Strong selects the strongly convex mode; Mu is the strong convexity of every f
	// (the smallest over the nodes) and MuG that of g.
	Strong bool    `json:"strongly_convex,omitempty"`
	Mu     float64 `json:"mu,omitempty"`
	MuG    float64 `json:"mu_g,omitempty"`
	// Printed selects, in the strongly convex mode, the exponent as printed in Cor. 7.3
	// (C L^(2T-1)/T), which the paper's own lemmas do not support; the default is the
	// conservative form.
	Printed bool `json:"printed,omitempty"`
	// Dim is the model dimension p, for the lattice drift of the later steps (Drift); 0
	// (a trace recorded without it) leaves the drift uncharged, and the conditions say so.
	Dim int `json:"dim,omitempty"`
	// Uncertified, when not empty, says why the steps are not certified to be gradient
	// steps on a convex smooth function (the multinomial loss: its per-example gradient is
	// clipped as a whole, which is not a gradient field): amplification by iteration then
	// does not apply, and the realised figure is refused (the local figure holds).
	Uncertified string `json:"uncertified,omitempty"`
}

// Drift returns the additive drift of one later noisy step, h sqrt(p) with h the lattice
// step Granularity(sigma): every release is rounded onto the lattice, so a step's map is
// non-expansive only up to that additive term (||R(x) - R(y)|| <= ||x - y|| + h sqrt(p)).
// 0 when Dim or Sigma is unknown.
func (p GADMMParams) Drift() float64 {
	if p.Dim <= 0 || !(p.Sigma > 0) || math.IsInf(p.Sigma, 0) {
		return 0
	}
	return Granularity(p.Sigma) * math.Sqrt(float64(p.Dim))
}

func (p GADMMParams) normA2() float64 {
	if p.NormA2 == 0 {
		return 1
	}
	return p.NormA2
}

func (p GADMMParams) normAB() float64 {
	if p.NormAB == 0 {
		return 1
	}
	return p.NormAB
}

// GADMMStrongConstants are the constants of the strongly convex mode (Lemma 7.6, Thm 7.2)
// at one step size.
type GADMMStrongConstants struct {
	// Lower and Upper bound interval (23): eta must lie in (Lower, Upper).
	Lower, Upper float64
	// Kappa = 2/(nu+mu) - eta.
	Kappa float64
	// R, P, Q, S of Lemma 7.6.
	R, P, Q, S float64
	// Contraction is the factor L = max{R/P, S/Q} < 1 of Lemma 7.6.
	Contraction float64
	// M = max(2/R, 3/(eta beta)) and C = M (R + eta beta ||A||^2) (Thm 7.2).
	M, C float64
}

// GADMMInterval returns interval (23) of the strongly convex mode,
//
//	eta in ( max{ 4/(s + sqrt(s^2 + 8 nu mu)), 2/s - 2 mu_g/(beta^2 ||A^T B||^2) }, 2/s ),  s = nu + mu.
//
// It fails unless 0 < mu <= nu, mu_g > 0, beta > 0 and normAB > 0, all finite.
func GADMMInterval(nu, mu, muG, beta, normAB float64) (lo, hi float64, err error) {
	for _, f := range []struct {
		name string
		v    float64
	}{{"nu", nu}, {"mu", mu}, {"mu_g", muG}, {"beta", beta}, {"||A^T B||", normAB}} {
		if !(f.v > 0) || math.IsInf(f.v, 0) {
			return 0, 0, fmt.Errorf("privacy: gadmm strongly convex mode: %s must be finite and > 0, got %v", f.name, f.v)
		}
	}
	if mu > nu {
		return 0, 0, fmt.Errorf("privacy: gadmm strongly convex mode: mu = %v exceeds the smoothness nu = %v", mu, nu)
	}
	s := nu + mu
	hi = 2 / s
	lb1 := 4 / (s + math.Sqrt(s*s+8*nu*mu))
	lb2 := hi - 2*muG/(beta*beta*normAB*normAB)
	return math.Max(lb1, lb2), hi, nil
}

// GADMMMidpoint returns the midpoint of interval (23), the step size of the paper's
// experiments (Sec. 10).
func GADMMMidpoint(nu, mu, muG, beta, normAB float64) (float64, error) {
	lo, hi, err := GADMMInterval(nu, mu, muG, beta, normAB)
	if err != nil {
		return 0, err
	}
	return (lo + hi) / 2, nil
}

// StrongConstants computes R, P, Q, S, the contraction factor and C of the strongly convex
// mode (digest 3.7) and checks the conditions: eta strictly inside interval (23), P > R > 0,
// Q > S and L < 1. The error says which condition fails.
func StrongConstants(nu, mu, muG, beta, eta, normAB, normA2 float64) (GADMMStrongConstants, error) {
	var k GADMMStrongConstants
	lo, hi, err := GADMMInterval(nu, mu, muG, beta, normAB)
	if err != nil {
		return k, err
	}
	k.Lower, k.Upper = lo, hi
	if !(eta > lo && eta < hi) {
		return k, fmt.Errorf("privacy: gadmm strongly convex mode: eta = %v is outside interval (23) (%v, %v) "+
			"(nu %v, mu %v, mu_g %v, beta %v); its midpoint is %v", eta, lo, hi, nu, mu, muG, beta, (lo+hi)/2)
	}
	s := nu + mu
	k.Kappa = 2/s - eta
	k.R = (1 - 2*eta*nu*mu/s) + k.Kappa/eta
	k.P = 1 - k.Kappa/eta
	k.S = eta / beta
	k.Q = k.S + eta*k.Kappa/4
	if !(k.R > 0 && k.P > k.R && k.Q > k.S) {
		return k, fmt.Errorf("privacy: gadmm strongly convex mode: need P > R > 0 and Q > S, got R %v, P %v, Q %v, S %v", k.R, k.P, k.Q, k.S)
	}
	k.Contraction = math.Max(k.R/k.P, k.S/k.Q)
	if !(k.Contraction < 1) {
		return k, fmt.Errorf("privacy: gadmm strongly convex mode: contraction factor %v is not < 1", k.Contraction)
	}
	k.M = math.Max(2/k.R, 3/(eta*beta))
	k.C = k.M * (k.R + eta*beta*normA2)
	return k, nil
}

// GADMMConvexC is the constant of Thm 6.1, C = max{2, 3/(beta eta)} (1 + beta eta ||A||^2).
func GADMMConvexC(beta, eta, normA2 float64) float64 {
	return math.Max(2, 3/(beta*eta)) * (1 + beta*eta*normA2)
}

// Validate checks the parameters and the conditions of the amplified figures: eta > 0,
// beta > 0, sigma >= 0, sensitivity >= 0, all finite; convex mode: eta <= 1/nu; strongly
// convex mode: the conditions of StrongConstants.
func (p GADMMParams) Validate() error {
	for _, f := range []struct {
		name string
		v    float64
		pos  bool
	}{{"eta", p.Eta, true}, {"beta", p.Beta, true}, {"sigma", p.Sigma, false}, {"sensitivity", p.Sensitivity, false},
		{"nu", p.Nu, true}, {"||A||^2", p.normA2(), true}, {"||A^T B||", p.normAB(), true}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 || f.pos && f.v == 0 {
			rel := ">= 0"
			if f.pos {
				rel = "> 0"
			}
			return fmt.Errorf("privacy: gadmm: %s must be finite and %s, got %v", f.name, rel, f.v)
		}
	}
	if p.Strong {
		_, err := StrongConstants(p.Nu, p.Mu, p.MuG, p.Beta, p.Eta, p.normAB(), p.normA2())
		return err
	}
	if p.Eta*p.Nu > 1 {
		return fmt.Errorf("privacy: gadmm: eta = %v exceeds 1/nu = %v (nu = %v, the smoothness of the local losses): "+
			"amplification by iteration needs every f to be 1/eta-smooth", p.Eta, 1/p.Nu, p.Nu)
	}
	return nil
}

// LocalTerm returns eps_loc = Sensitivity^2/(2 sigma^2) (D^z of one update, Cor. 6.2): +Inf
// when sigma is 0 and the sensitivity is not.
func (p GADMMParams) LocalTerm() float64 {
	if p.Sensitivity == 0 {
		return 0
	}
	if !(p.Sigma > 0) {
		return math.Inf(1)
	}
	r := p.Sensitivity / p.Sigma
	return r * r / 2
}

// Factor returns B(t)/eps_loc in [0, 1]: the amplification of one contribution seen after t
// further noisy iterations by other nodes. It is 1 for t < 2 (T = floor(t/2) = 0) and for
// invalid parameters (see Validate), where only the local term holds.
//
// The lattice drift. The theorems assume exactly non-expansive maps between the noise
// injections; each later step rounds onto the lattice, which adds at most d = Drift() to
// the distance of the two coupled runs. In the shifted-divergence argument an additive d
// at a step is paid for by d more shift (D^(z+d)(psi(X) || psi(Y)) <= D^(z)(X || Y) when
// ||psi(x) - psi(y)|| <= ||x - y|| + d), so t steps cost as an initial distance
// Sensitivity + t d: the factor is multiplied by (1 + t d/Sensitivity)^2 (eps_loc is
// quadratic in the distance), still capped at 1 (the release of i's own step is exact).
func (p GADMMParams) Factor(t int) float64 {
	T := t / 2
	if T <= 0 || p.Validate() != nil {
		return 1
	}
	var f float64
	if !p.Strong {
		f = math.Min(1, GADMMConvexC(p.Beta, p.Eta, p.normA2())/float64(T))
	} else {
		k, err := StrongConstants(p.Nu, p.Mu, p.MuG, p.Beta, p.Eta, p.normAB(), p.normA2())
		if err != nil {
			return 1
		}
		f = math.Min(1, strongFactor(k.C, k.Contraction, T, p.Printed))
	}
	if d := p.Drift(); d > 0 && p.Sensitivity > 0 {
		g := 1 + float64(t)*d/p.Sensitivity
		f = math.Min(1, f*g*g)
	}
	return f
}

// strongFactor is C L^(2T-1)/T (printed) or C L^(2T-1) (1-L^2)/(1-L^(2T)) (conservative).
func strongFactor(c, l float64, T int, printed bool) float64 {
	lg := math.Log(l)
	pow := math.Exp(float64(2*T-1) * lg)
	if printed {
		return c * pow / float64(T)
	}
	// (1 - L^2)/(1 - L^(2T)) with expm1 for L near 1.
	return c * pow * math.Expm1(2*lg) / math.Expm1(float64(2*T)*lg)
}

// DZ returns B(t) = Factor(t) eps_loc, the zCDP bound of one contribution seen after t
// further noisy iterations.
func (p GADMMParams) DZ(t int) float64 {
	e := p.LocalTerm()
	if e == 0 {
		return 0
	}
	return p.Factor(t) * e
}

// Unit returns the RDP curve of weight 1, alpha eps_loc: GaussianCurve(Sensitivity, Sigma),
// the curve of one ledger entry of the step.
func (p GADMMParams) Unit() Curve { return GaussianCurve(p.Sensitivity, p.Sigma) }

// GADMMLocalCurve is the local curve of `updates` contributions: updates alpha eps_loc.
func GADMMLocalCurve(p GADMMParams, updates int) Curve {
	if updates < 0 {
		return InfCurve()
	}
	return p.Unit().Scale(float64(updates))
}

// GADMMPathWeight is the realised weight of node i's data as seen by observer j on one path
// (a reference for GADMMRealisedPairwise, written out directly): the sum over i's
// contributions of Factor(t), t the noisy iterations from the contribution to the state the
// contribution is charged at (digest 3.10 Steps 4-5):
//
// States are numbered by the step that produced them (steps[k] produces state k, which
// steps[k+1].Node receives; with final, the last state is also seen by every node). Let i
// contribute at its noisy steps k_1 < ... < k_R and k_{R+1} = infinity. Contribution r is
// charged at the first state s in [k_r, k_{r+1}-1] that j receives; when j receives none
// there but receives a later state, at state k_{r+1}-1 (the state i receives before its next
// contribution, handed to j by the hybrid argument); when j receives no state from k_r on,
// it costs 0. t counts the noisy steps in (k_r, s]. Forwards add no iteration. A weight 1
// is one full update (alpha eps_loc at order alpha). i == j gives 0.
//
// Why the first view: everything j receives later is a function of that view, of j's own
// data and noise and of the other nodes' later steps, none of which depends on i's data
// before i's next contribution; and the t iterations before the first view are all made by
// nodes other than j (j iterates only after receiving), whose noise j does not know.
func GADMMPathWeight(steps []TraceStep, i, j int, final bool, p GADMMParams) float64 {
	return gadmmSetWeight(steps, i, []int{j}, final, p)
}

// gadmmSetWeight is GADMMPathWeight against a coalition of observers pooled as one: a view
// is any state a member receives; a member's own data gets 0.
func gadmmSetWeight(steps []TraceStep, i int, obs []int, final bool, p GADMMParams) float64 {
	in := func(v int) bool {
		for _, o := range obs {
			if o == v {
				return true
			}
		}
		return false
	}
	if in(i) {
		return 0
	}
	K := len(steps)
	sees := func(s int) bool { // a member receives state s
		if s+1 < K {
			return in(steps[s+1].Node)
		}
		return s == K-1 && final
	}
	noisy := func(a, b int) int { // noisy steps in (a, b]
		c := 0
		for k := a + 1; k <= b; k++ {
			if steps[k].Noisy {
				c++
			}
		}
		return c
	}
	var contrib []int
	for k, s := range steps {
		if s.Node == i && s.Noisy {
			contrib = append(contrib, k)
		}
	}
	w := 0.0
	for r, k := range contrib {
		end := K - 1
		if r+1 < len(contrib) {
			end = contrib[r+1] - 1
		}
		first := -1
		for s := k; s <= end; s++ {
			if sees(s) {
				first = s
				break
			}
		}
		if first < 0 {
			later := false
			for s := end + 1; s < K; s++ {
				if sees(s) {
					later = true
					break
				}
			}
			if !later {
				continue
			}
			first = end
		}
		w += p.Factor(noisy(k, first))
	}
	return w
}

// GADMMRealisedPairwise is the realised-path pairwise accountant of a gradient-ADMM walk:
// for each ordered pair (i, j), Weight(i, j) is the realised weight of GADMMPathWeight on the
// trace's path (tr.FinalReleasedToAll makes the final model a view of every node) and the
// unit curve is p.Unit() (tr.Clip and tr.Sigma are not used: the step's sensitivity and noise
// are in p). It holds for the given path, hence also against an observer who knows the path,
// under GADMMRealisedConditions; when p fails Validate every Factor is 1 and the figure is
// the local one charged only for contributions that some view depends on. Local is the
// local curve of the node with most updates. Each coalition is a set of observers pooled
// as one (a view is any state a member receives; members get weight 0), reported in
// Coalitions. The cost is O(n K) time and O(n^2 + K) memory for K steps.
func GADMMRealisedPairwise(tr *Trace, p GADMMParams, coalitions ...[]int) (*Realised, error) {
	return gadmmRealisedPairwise(tr, p, nil, coalitions...)
}

func gadmmRealisedPairwise(tr *Trace, p GADMMParams, spread Spread, coalitions ...[]int) (*Realised, error) {
	if tr == nil {
		return nil, errors.New("privacy: gadmm realised pairwise: nil trace")
	}
	n := tr.Nodes
	if n < 2 {
		return nil, errors.New("privacy: gadmm realised pairwise: need at least 2 nodes")
	}
	if n > 1<<27 || int64(n)*int64(n) > 1<<27 {
		return nil, fmt.Errorf("privacy: gadmm realised pairwise: %d nodes need a %d x %d matrix, too large", n, n, n)
	}
	if int64(len(tr.Steps)) >= 1<<31 {
		return nil, fmt.Errorf("privacy: gadmm realised pairwise: %d steps, at most %d", len(tr.Steps), 1<<31-1)
	}
	for k, s := range tr.Steps {
		if s.Node < 0 || s.Node >= n {
			return nil, fmt.Errorf("privacy: gadmm realised pairwise: step %d: node %d outside [0, %d)", k, s.Node, n)
		}
	}
	for c, members := range coalitions {
		if len(members) == 0 {
			return nil, fmt.Errorf("privacy: gadmm realised pairwise: coalition %d is empty", c)
		}
		for _, v := range members {
			if v < 0 || v >= n {
				return nil, fmt.Errorf("privacy: gadmm realised pairwise: coalition %d: node %d outside [0, %d)", c, v, n)
			}
		}
	}
	K := len(tr.Steps)
	// cnt[k] = noisy steps in [0, k]; t between states a < b is cnt[b] - cnt[a].
	cnt := make([]int, K)
	upd := make([]int, n)
	c := 0
	for k, s := range tr.Steps {
		if s.Noisy {
			c++
			upd[s.Node]++
		}
		cnt[k] = c
	}
	factor := make([]float64, K+1) // Factor(t) for t <= K, computed once
	for t := range factor {
		factor[t] = p.Factor(t)
	}
	// sweep adds to out[i] the weight of every node i outside the observer set: one
	// backward pass keeps the first state at or after the current step that the observer
	// receives (view) and, per node i, the end of the segment of i's contribution at the
	// current step (the state before i's next contribution, or the last state).
	sweep := func(member []bool, out []float64, last []int) {
		view := -1
		for i := range last {
			last[i] = K - 1
		}
		for s := K - 1; s >= 0; s-- {
			if s+1 < K && member[tr.Steps[s+1].Node] || s == K-1 && tr.FinalReleasedToAll {
				view = s
			}
			st := tr.Steps[s]
			i := st.Node
			if !st.Noisy || member[i] {
				continue
			}
			end := last[i]
			last[i] = s - 1
			if view < 0 {
				continue // the observer receives nothing from here on
			}
			at := view
			if view > end {
				at = end // the first view lies beyond i's next contribution: charge the handed state
			}
			out[i] += factor[cnt[at]-cnt[s]]
		}
	}
	w := make([]float64, n*n)
	spread.run(n, func(lo, hi int) {
		col, member, last := make([]float64, n), make([]bool, n), make([]int, n)
		for j := lo; j < hi; j++ {
			member[j] = true
			clear(col)
			sweep(member, col, last)
			for i, v := range col {
				w[i*n+j] = v
			}
			member[j] = false
		}
	})
	member, last := make([]bool, n), make([]int, n)
	var coal []CoalitionWeights
	for _, members := range coalitions {
		for _, v := range members {
			member[v] = true
		}
		cw := CoalitionWeights{Members: append([]int(nil), members...), Weight: make([]float64, n)}
		sweep(member, cw.Weight, last)
		coal = append(coal, cw)
		clear(member)
	}
	mx := 0
	for _, u := range upd {
		mx = max(mx, u)
	}
	return &Realised{
		Pairs:      &PairwiseMatrix{N: n, W: w, Unit: p.Unit()},
		Coalitions: coal,
		Updates:    upd,
		Local:      GADMMLocalCurve(p, mx),
	}, nil
}

// GADMMLocalBound is the local (eps, delta) bound of `updates` gradient-ADMM updates: the
// curve updates alpha eta^2 Delta^2/(2 sigma^2) converted at delta (GADMMLocalName).
func GADMMLocalBound(p GADMMParams, updates int, delta float64) Bound {
	eps, order := ToDP(GADMMLocalCurve(p, updates), delta)
	b := Bound{Epsilon: eps, Order: order, Theorem: GADMMLocalName, Conditions: GADMMLocalConditions, ConditionsHold: true}
	if err := validateDelta(delta); err != nil {
		b.ConditionsHold, b.Note = false, err.Error()
	}
	return b
}

// gadmmDecide is WalkDecide for gradient ADMM. The planned figure is the local one at K
// (see GADMMPlannedBound); it needs noise, a finite sensitivity and a hard cap K_i (or the
// node's own count), and the step's parameters must meet the conditions of the realised
// amplified figure (GADMMParams.Validate: eta <= 1/nu, or eta inside interval (23) in the
// strongly convex mode), since a run violating them is not the algorithm the figures
// cover. Forwards and re-sends do not affect the local figure.
func gadmmDecide(r WalkRun) WalkVerdict {
	p := r.GADMM
	p.Sigma = r.Sigma
	v := WalkVerdict{Noisy: r.Sigma > 0 && !math.IsInf(r.Sigma, 0) && p.Sensitivity > 0 && !math.IsInf(p.Sensitivity, 0)}
	v.K = verdictK(r)
	if !v.Noisy {
		if r.Sigma == 0 {
			v.Reasons = append(v.Reasons, "sigma 0: no noise, no privacy")
		} else {
			v.Reasons = append(v.Reasons, "no clipping or invalid noise: unbounded gradient sensitivity, no privacy")
		}
		return v
	}
	if err := p.Validate(); err != nil {
		v.Reasons = append(v.Reasons, err.Error())
	}
	if r.Cap <= 0 && !r.Own {
		if r.Planning {
			v.Reasons = append(v.Reasons, fmt.Sprintf("no hard cap K_i: the plan uses the expected count ceil(hops/n) = %d, but the bound needs a hard cap", v.K))
		} else {
			v.Reasons = append(v.Reasons, fmt.Sprintf("no hard cap K_i (--max-updates 0 and no budget): K_i is set to the realised count %d", v.K))
		}
	}
	v.PlannedHolds = len(v.Reasons) == 0
	return v
}

// GADMMPlannedName names the result GADMMPlannedBound rests on.
const GADMMPlannedName = GADMMLocalName + ", the worst case over the paths the plan allows"

// GADMMPlannedBound is the planned figure of one node of a gradient-ADMM walk: the local
// curve at K = WalkDecide(r).K, K_i alpha eta^2 Delta^2/(2 sigma^2). Amplification by
// iteration needs iterations between i's update and the observer's view, and a plan cannot
// promise any: the path with j receiving the token right after each of i's updates is
// possible on every graph, and no averaging over the secret path is used (the token
// carries its hop counter, so the observer knows how many iterations separate its views;
// the digest's Step 6 averaging is invalid then). The amplified figure is the realised one,
// GADMMRealisedPairwise. When the conditions fail the figure is still the local one, which
// holds regardless of eta and beta, and Note gives the reasons.
func GADMMPlannedBound(r WalkRun, delta float64) Bound {
	v := WalkDecide(r)
	p := r.GADMM
	p.Sigma = r.Sigma
	b := Bound{Theorem: GADMMPlannedName, Conditions: GADMMLocalConditions, ConditionsHold: v.PlannedHolds}
	if err := validateDelta(delta); err != nil {
		b.Epsilon, b.ConditionsHold, b.Note = math.Inf(1), false, err.Error()
		return b
	}
	if v.K == 0 && v.Noisy && r.Own {
		b.ConditionsHold, b.Note = true, "no noisy update: nothing of this node's data was released"
		return b
	}
	b.Epsilon, b.Order = ToDP(GADMMLocalCurve(p, v.K), delta)
	b.Note = "a plan cannot promise amplification: without secret-path averaging (the token carries its hop " +
		"counter) the worst path has the observer receive the token right after each update; the realised " +
		"figure (" + GADMMRealisedName + ") gives the amplification of the actual path"
	if !v.PlannedHolds {
		b.Note = "conditions fail: " + joinReasons(v.Reasons) + ". " + b.Note
	}
	return b
}
