package privacy

import (
	"fmt"
	"math"
	"strings"
)

// Objective-perturbation accounting for R-ADMM and MR-ADMM (X. Zhang, M. M. Khalili, M. Liu,
// "Recycled ADMM: Improving the Privacy and Accuracy of Distributed Algorithms", IEEE TIFS 15,
// 2020), and for the conventional-ADMM baselines with dual or primal variable perturbation
// (T. Zhang, Q. Zhu, "Dynamic differential privacy for ADMM-based distributed classification
// learning", IEEE TIFS 12, 2017).
//
// Parameters are in the paper's form: node i's local objective is
//
//	O(f, D_i) = (C_i/B_i) sum_{n in D_i} L(y_n f.x_n) + (rho/N) R(f),  R(f) = ||f||^2/2,
//
// so only the ratio C_i/B_i (RowWeight) and rho/N (RegOverN) enter the bounds.

// ObjPertTheorem names the result ObjPertBound rests on.
const ObjPertTheorem = "Zhang, Khalili, Liu 2020 (Recycled ADMM), Theorem V.1, eq. (32): pure DP per odd iteration " +
	"(2C/B_i)(1.4 c1/(rho/N + 2 eta_i(2k-1) V_i) + alpha_i(k)), 0 per even iteration (Lemma V.1), summed over " +
	"odd iterations; network figure = max over nodes"

// ObjPertConditions lists the hypotheses of Theorem V.1.
const ObjPertConditions = "loss with |L'| <= 1 and 0 < L'' <= c1 (logistic: c1 = 1/4), R 1-strongly convex; " +
	"||x|| <= 1 for every row and labels in {-1,+1}; C_i <= B_i; eta_i(2k-1) > 0 and non-decreasing; " +
	"2 c1 < (B_i/C)(rho/N + 2 eta_i(1) V_i); odd subproblems solved exactly; f(0) data-independent; " +
	"fixed iteration count and schedules fixed before training; static graph (a neighbour value reused after a " +
	"missed barrier is an earlier release of that neighbour: the proof holds for any fixed neighbour inputs, so " +
	"the per-release charge is unchanged; such uses are recorded, and the choice depends on timing only)"

// ConvTheoremDVP names the bound used for conventional ADMM with dual variable perturbation.
const ConvTheoremDVP = "baseline: conventional decentralized ADMM with dual variable perturbation (Zhang & Zhu 2017); " +
	"bounded with the objective-perturbation argument of Zhang-Khalili-Liu 2020 Theorem V.1 applied to every " +
	"iteration (each iteration is a perturbed exact solve, none is recycled)"

// ConvTheoremPVP names the bound used for conventional ADMM with primal variable perturbation.
const ConvTheoremPVP = "baseline: conventional decentralized ADMM with primal variable perturbation (Zhang & Zhu 2017); " +
	"output perturbation per iteration: alpha * sensitivity of the argmin, sensitivity <= (2C/B_i)/(rho/N + 2 eta V_i) " +
	"by strong convexity (Chaudhuri et al. 2011), composed over all iterations"

// ObjPertOddEpsilon is the (32) summand for one odd iteration, in the paper's constants:
// (2C/B)(1.4 c1/(rho/N + 2 eta V) + alpha). It does not check the preconditions.
func ObjPertOddEpsilon(alpha, c1, C float64, B int, rho float64, N int, eta float64, V int) float64 {
	return ObjPertTerm(C/float64(B), rho/float64(N), c1, alpha, eta, V)
}

// ObjPertOddEpsilonExact is the tighter un-relaxed summand from (54) and (56):
// 2 C alpha/B - 2 ln(1 - x), x = c1 C/(B (rho/N + 2 eta V)). It is +Inf when x >= 1.
func ObjPertOddEpsilonExact(alpha, c1, C float64, B int, rho float64, N int, eta float64, V int) float64 {
	return ObjPertTermExact(C/float64(B), rho/float64(N), c1, alpha, eta, V)
}

// ObjPertTerm is the (32) summand in terms of w = C_i/B_i and r = rho/N:
// 2w (1.4 c1/(r + 2 eta V) + alpha).
func ObjPertTerm(w, r, c1, alpha, eta float64, V int) float64 {
	return 2 * w * (1.4*c1/(r+2*eta*float64(V)) + alpha)
}

// ObjPertTermExact is 2 w alpha - 2 ln(1 - x), x = c1 w/(r + 2 eta V); +Inf when x >= 1.
func ObjPertTermExact(w, r, c1, alpha, eta float64, V int) float64 {
	x := c1 * w / (r + 2*eta*float64(V))
	if !(x < 1) {
		return math.Inf(1)
	}
	return 2*w*alpha - 2*math.Log1p(-x)
}

// PVPTerm is the per-iteration pure-DP loss of primal variable perturbation: noise with
// density proportional to exp(-alpha ||eps||) added to an exact argmin of an objective that
// is (r + 2 eta V)-strongly convex and whose gradient changes by at most 2w in norm when one
// row changes: alpha * 2w/(r + 2 eta V).
func PVPTerm(w, r, alpha, eta float64, V int) float64 {
	return alpha * 2 * w / (r + 2*eta*float64(V))
}

// ObjPertScheme selects how iterations are charged.
type ObjPertScheme int

// Schemes.
const (
	// SchemeRecycled charges odd iterations by (32) and even ones 0 (R-ADMM, MR-ADMM).
	SchemeRecycled ObjPertScheme = iota
	// SchemeDVP charges every iteration by (32) (conventional ADMM, dual perturbation).
	SchemeDVP
	// SchemePVP charges every iteration by PVPTerm (conventional ADMM, primal perturbation).
	SchemePVP
)

// ObjPertNode describes one node's run for the accountant. Schedules are indexed by the
// perturbed iteration k = 1..K (Alphas[k-1], Etas[k-1]); for SchemeRecycled K is the number
// of odd iterations ceil(T/2), otherwise K = T.
type ObjPertNode struct {
	Scheme    ObjPertScheme
	RowWeight float64   // C_i/B_i
	RegOverN  float64   // rho/N (weight of the 1-strongly convex regularizer at this node)
	C1        float64   // bound on L'' (1/4 for logistic)
	Degree    int       // V_i
	Rows      int       // B_i
	C         float64   // C_i (only for the C_i <= B_i check)
	Alphas    []float64 // alpha_i(k); +Inf means no noise
	Etas      []float64 // eta_i(2k-1) (or eta_i(t) for the conventional schemes)

	// Checked preconditions, filled by the caller from the data and the run.
	MaxRowNorm  float64 // max ||x|| over the node's rows
	LabelsPM1   bool    // every label is -1 or +1
	LossOK      bool    // the loss satisfies |L'| <= 1 and L'' <= C1 (logistic)
	ExactSolves bool    // every perturbed subproblem reached the solver tolerance
	FixedIters  bool    // the iteration count was fixed before training

	// Blocks is the number of independent releases per iteration: K for a one-vs-rest
	// model of K classes (each block a binary problem on relabelled rows, with its own
	// noise draw), 0 or 1 otherwise. One record enters every block, so the figure is the
	// sum over blocks (basic composition of pure DP): Blocks times the binary figure.
	Blocks int
}

// ObjPertFigure is one node's pure-DP figure.
type ObjPertFigure struct {
	Epsilon        float64   // formula value (sum of per-iteration terms); see ConditionsHold
	Exact          float64   // tighter un-relaxed sum (SchemeRecycled and SchemeDVP only)
	NoisePart      float64   // sum of 2 w alpha (or the PVP total)
	JacobianPart   float64   // sum of 2.8 c1 w/(r + 2 eta V)
	PerIteration   []float64 // cost of each perturbed iteration k = 1..K
	Theorem        string
	Conditions     string
	ConditionsHold bool
	Reason         string // why ConditionsHold is false; empty otherwise
}

// Guarantee returns the epsilon that may be reported: Epsilon when the conditions hold,
// +Inf otherwise.
func (f ObjPertFigure) Guarantee() float64 {
	if !f.ConditionsHold {
		return math.Inf(1)
	}
	return f.Epsilon
}

// ObjPertBound computes one node's figure and checks the preconditions. A failed condition
// gives ConditionsHold = false with every reason listed; the formula value is still returned
// in Epsilon for diagnostics, but Guarantee() is +Inf.
func ObjPertBound(n ObjPertNode) ObjPertFigure {
	f := ObjPertFigure{Conditions: ObjPertConditions}
	switch n.Scheme {
	case SchemeDVP:
		f.Theorem = ConvTheoremDVP
	case SchemePVP:
		f.Theorem = ConvTheoremPVP
	default:
		f.Theorem = ObjPertTheorem
	}
	var why []string
	bad := func(format string, a ...any) { why = append(why, fmt.Sprintf(format, a...)) }
	w, r, c1 := n.RowWeight, n.RegOverN, n.C1
	if !(w > 0) || math.IsInf(w, 0) {
		bad("C/B = %v must be finite and > 0", w)
	}
	if !(r > 0) || math.IsInf(r, 0) {
		bad("rho/N = %v must be finite and > 0 (R must be strongly convex)", r)
	}
	if !(c1 > 0) || math.IsInf(c1, 0) {
		bad("c1 = %v must be finite and > 0", c1)
	}
	if n.Degree < 1 {
		bad("degree V_i = %d must be >= 1", n.Degree)
	}
	if len(n.Alphas) != len(n.Etas) {
		bad("%d alphas for %d penalties", len(n.Alphas), len(n.Etas))
	}
	if n.Rows < 1 {
		bad("B_i = %d must be >= 1", n.Rows)
	} else if n.C > float64(n.Rows) {
		bad("C_i = %.6g exceeds B_i = %d", n.C, n.Rows)
	}
	if !(n.MaxRowNorm <= 1+1e-12) {
		bad("rows not normalised: max ||x|| = %.6g > 1", n.MaxRowNorm)
	}
	if !n.LabelsPM1 {
		bad("labels are not all in {-1,+1}")
	}
	if !n.LossOK {
		bad("loss does not satisfy |L'| <= 1 and L'' <= c1 (only the logistic loss does)")
	}
	if !n.ExactSolves {
		bad("a perturbed subproblem was not solved to tolerance (the theorem needs exact solves)")
	}
	if !n.FixedIters {
		bad("iteration count not fixed before training")
	}
	noNoise := false
	for k, e := range n.Etas {
		if !(e > 0) || math.IsInf(e, 0) {
			bad("eta(k=%d) = %v must be finite and > 0", k+1, e)
			break
		}
		if k > 0 && e < n.Etas[k-1] {
			bad("penalty schedule decreases at k=%d (%v < %v)", k+1, e, n.Etas[k-1])
			break
		}
	}
	for k, a := range n.Alphas {
		if math.IsInf(a, 1) {
			noNoise = true
		} else if !(a > 0) {
			bad("alpha(k=%d) = %v must be > 0", k+1, a)
			break
		}
	}
	if noNoise {
		bad("alpha = +Inf: no noise, no privacy")
	}
	if n.Scheme != SchemePVP && len(n.Etas) > 0 && n.Degree >= 1 && r+2*n.Etas[0]*float64(n.Degree) > 0 {
		x1 := c1 * w / (r + 2*n.Etas[0]*float64(n.Degree))
		if !(x1 < 0.5) {
			bad("precondition 2 c1 < (B_i/C)(rho/N + 2 eta_i(1) V_i) fails: x_1 = c1 C/(B_i(rho/N + 2 eta_i(1) V_i)) = %.6g >= 1/2", x1)
		}
	}
	K := min(len(n.Alphas), len(n.Etas))
	f.PerIteration = make([]float64, K)
	for k := 0; k < K; k++ {
		a, e := n.Alphas[k], n.Etas[k]
		var t float64
		if n.Scheme == SchemePVP {
			t = PVPTerm(w, r, a, e, n.Degree)
			f.NoisePart += t
		} else {
			t = ObjPertTerm(w, r, c1, a, e, n.Degree)
			f.NoisePart += 2 * w * a
			f.JacobianPart += 2.8 * c1 * w / (r + 2*e*float64(n.Degree))
			f.Exact += ObjPertTermExact(w, r, c1, a, e, n.Degree)
		}
		f.PerIteration[k] = t
		f.Epsilon += t
	}
	if b := float64(max(1, n.Blocks)); b > 1 {
		f.Epsilon, f.Exact, f.NoisePart, f.JacobianPart = b*f.Epsilon, b*f.Exact, b*f.NoisePart, b*f.JacobianPart
		for k := range f.PerIteration {
			f.PerIteration[k] *= b
		}
		f.Theorem += fmt.Sprintf("; one-vs-rest over %d classes: %d releases per iteration, pure DP composed (the sum)", n.Blocks, n.Blocks)
	}
	if n.Scheme == SchemePVP {
		f.Exact = f.Epsilon
	}
	if math.IsNaN(f.Epsilon) {
		bad("figure is NaN")
	}
	f.ConditionsHold = len(why) == 0
	f.Reason = strings.Join(why, "; ")
	return f
}

// ObjPertNetworkFigure is the network figure: the maximum over nodes (Definition V.1's
// adversary sees every message of every node).
type ObjPertNetworkFigure struct {
	Epsilon        float64 // max over nodes of the formula value
	Node           int     // argmax
	PerNode        []ObjPertFigure
	Theorem        string
	Conditions     string
	ConditionsHold bool   // every node's conditions hold
	Reason         string // the first failing node's reason
}

// Guarantee returns Epsilon when every node's conditions hold, +Inf otherwise.
func (f ObjPertNetworkFigure) Guarantee() float64 {
	if !f.ConditionsHold {
		return math.Inf(1)
	}
	return f.Epsilon
}

// ObjPertNetwork computes every node's figure and the network maximum.
func ObjPertNetwork(nodes []ObjPertNode) ObjPertNetworkFigure {
	out := ObjPertNetworkFigure{Conditions: ObjPertConditions, ConditionsHold: len(nodes) > 0, Node: -1}
	if len(nodes) == 0 {
		out.Reason = "no nodes"
		out.Theorem = ObjPertTheorem
		return out
	}
	for i, n := range nodes {
		f := ObjPertBound(n)
		out.PerNode = append(out.PerNode, f)
		if i == 0 {
			out.Theorem = f.Theorem
		}
		if out.Node < 0 || f.Epsilon > out.Epsilon {
			out.Epsilon, out.Node = f.Epsilon, i
		}
		if !f.ConditionsHold && out.ConditionsHold {
			out.ConditionsHold = false
			out.Reason = fmt.Sprintf("node %d: %s", i, f.Reason)
		}
	}
	return out
}

// PrivacyAt returns P(t), the running bound after t iterations (max over nodes of the
// charged terms so far): for SchemeRecycled the odd iterations k = 1..ceil(t/2), otherwise
// iterations 1..t.
func (f ObjPertNetworkFigure) PrivacyAt(scheme ObjPertScheme, t int) float64 {
	k := t
	if scheme == SchemeRecycled {
		k = (t + 1) / 2
	}
	best := 0.0
	for _, n := range f.PerNode {
		s := 0.0
		for j := 0; j < k && j < len(n.PerIteration); j++ {
			s += n.PerIteration[j]
		}
		best = math.Max(best, s)
	}
	return best
}

// ObjPertEntryEpsilon returns the epsilon to write in a ledger entry for one perturbed
// iteration: the per-iteration term, or math.MaxFloat64 when the release carries no
// guarantee (no noise or failed preconditions), which keeps the entry valid and makes any
// composition containing it vacuous.
func ObjPertEntryEpsilon(term float64, ok bool) float64 {
	if !ok || math.IsNaN(term) || math.IsInf(term, 0) || term < 0 {
		return math.MaxFloat64
	}
	return term
}

// MemberFigure is one member's own Theorem V.1 figure as its model.json reports it, the
// input of DefinitionV1.
type MemberFigure struct {
	Index          int
	Epsilon        Epsilon // its guarantee (unbounded when it has none)
	Formula        Epsilon // the formula value whatever the conditions
	ConditionsHold bool
	Reason         string
	SecureNoise    bool
}

// NetworkV1 is the network figure of Definition V.1 over reported member figures.
type NetworkV1 struct {
	// Epsilon is max_i epsilon_i when every member is present and has a guarantee, else
	// unbounded.
	Epsilon Epsilon `json:"epsilon"`
	// Formula is the maximum of the formula values regardless of the conditions.
	Formula Epsilon `json:"formula_epsilon"`
	// WorstNode is the member of GivenMax (-1: none, or when the figure does not hold) and
	// GivenMax the maximum over the members given that have a guarantee (unbounded: none);
	// it equals Epsilon when the figure holds and is only a lower bound otherwise.
	WorstNode      int     `json:"worst_node"`
	GivenMax       Epsilon `json:"given_max_epsilon"`
	ConditionsHold bool    `json:"conditions_hold"` // on every member, and none missing
	Reason         string  `json:"reason,omitempty"`
	FailingNodes   []int   `json:"failing_nodes"` // members without a guarantee
	SecureNoise    bool    `json:"secure_noise"`  // every member drew secure noise
}

// DefinitionV1Scope states what DefinitionV1 computes.
const DefinitionV1Scope = "Definition V.1: the maximum over the members of each node's pure epsilon of its own releases (Theorem V.1); pure DP, delta = 0"

// DefinitionV1 is the network figure of Definition V.1 (Zhang, Khalili, Liu): the maximum
// over the members of each member's own Theorem V.1 guarantee. It holds only when every
// member is present (missing lists the indices of the absent ones) and has a guarantee;
// otherwise Epsilon is unbounded and Reason names every failing or missing member. It is
// the one rule for the figure computed from the members' reports ('dpadmm account models');
// ObjPertNetwork computes the same maximum from the members' inputs.
func DefinitionV1(members []MemberFigure, missing []int) NetworkV1 {
	p := NetworkV1{Epsilon: Unbounded, GivenMax: Unbounded, WorstNode: -1, FailingNodes: []int{}, SecureNoise: true}
	var reasons []string
	for _, m := range members {
		if !m.SecureNoise {
			p.SecureNoise = false
		}
		p.Formula = max(p.Formula, m.Formula)
		if m.Epsilon.Bounded() && m.ConditionsHold {
			if p.WorstNode < 0 || m.Epsilon > p.GivenMax {
				p.GivenMax, p.WorstNode = m.Epsilon, m.Index
			}
			continue
		}
		p.FailingNodes = append(p.FailingNodes, m.Index)
		why := m.Reason
		if why == "" {
			why = "its model.json reports no guarantee (epsilon null)"
			if m.Epsilon.Bounded() {
				why = "its conditions do not hold"
			}
		}
		reasons = append(reasons, fmt.Sprintf("member %d: %s", m.Index, why))
	}
	if len(missing) > 0 {
		s := make([]string, len(missing))
		for k, v := range missing {
			s[k] = fmt.Sprint(v)
		}
		reasons = append(reasons, fmt.Sprintf("members %s missing: the network figure is the maximum over every member", strings.Join(s, ",")))
	}
	if len(members) == 0 && len(missing) == 0 {
		reasons = append(reasons, "no members")
	}
	if len(reasons) == 0 {
		p.Epsilon, p.ConditionsHold = p.GivenMax, true
	} else {
		p.Reason = strings.Join(reasons, "; ")
		p.WorstNode = -1
	}
	return p
}
