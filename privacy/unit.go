package privacy

import (
	"fmt"
	"math"
)

// Unit is what a figure protects: one record (one row of a node's data replaced by another
// row) or one node (the node's whole data set replaced). It is printed with every figure
// and enters the run's configuration hash.
type Unit string

// The privacy units.
const (
	// UnitRecord: neighbouring data sets differ in one row of one node (replace-one). The
	// default: it is what a data subject is protected as, and what R-ADMM and the gradient
	// steps have always been analysed for.
	UnitRecord Unit = "record"
	// UnitNode: neighbouring data sets differ in one node's whole shard (user-level, the
	// setting of Cyffers et al.'s Theorems 3 and 4). Only the prox and linearized steps of
	// the walk have it (their update is clipped as a whole).
	UnitNode Unit = "node"
)

// ParseUnit parses a --privacy-unit value ("" is UnitRecord).
func ParseUnit(s string) (Unit, error) {
	switch Unit(s) {
	case "", UnitRecord:
		return UnitRecord, nil
	case UnitNode:
		return UnitNode, nil
	}
	return "", fmt.Errorf("privacy: unknown privacy unit %q (want record or node)", s)
}

// RecordClip is the record-level sensitivity radius of one prox or linearized walk update:
// the C' such that replacing one row moves the released u-update by at most 4*lambda*C',
// the same role as the clip C in every walk figure.
//
// Derivation (Cyffers et al. 2023, App. C.2, with the row weight of this implementation):
// node i's local loss is f_i(x) = c * sum_r l(x; d_r) with c = w_i/m_i the weight of one
// row (walk.LossWeight: c = n/M). The prox x = argmin f_i(x) + ||x - v||^2/(2 gamma) is
// the minimiser of a (1/gamma)-strongly convex function; replacing row r by r' changes its
// gradient by c (grad l(x; d_r') - grad l(x; d_r)), of norm at most 2 c L for an
// L-Lipschitz l, so the minimiser moves by at most 2 gamma c L. A solution to gradient norm
// tol is within gamma*tol of the exact one, so the two computed points are at most
// 2 gamma (c L + tol) apart. The update is 2 lambda Clip(x - z, C) plus noise, Clip is
// non-expansive, so the update moves by at most 4 lambda gamma (c L + tol) (and by at most
// 4 lambda C, whichever is smaller). The linearized step x - z = rho_k ((z - u) - gamma G),
// G = grad f_i(z), rho_k < 1, moves by at most 2 gamma c L: the same bound with tol = 0.
//
// lipschitz is L, the bound on ||grad l(x; d)|| over every x and every admissible row: for
// the logistic loss the bound R on row norms, for the multinomial one sqrt(2) R; a squared
// loss is not Lipschitz (+Inf), and then so is the result (the node-level clip bounds the
// record too). Non-finite or non-positive inputs give +Inf.
func RecordClip(gamma, rowWeight, lipschitz, tol float64) float64 {
	if !(gamma > 0) || !(rowWeight > 0) || !(lipschitz > 0) || tol < 0 ||
		math.IsInf(gamma, 0) || math.IsInf(rowWeight, 0) || math.IsInf(lipschitz, 0) || math.IsNaN(tol) {
		return math.Inf(1)
	}
	return gamma * (rowWeight*lipschitz + tol)
}

// RecordClipConditions are the conditions of the record-level walk figure.
const RecordClipConditions = "record-level (one row replaced): the loss is L-Lipschitz in the model for every admissible row " +
	"(logistic L = R, multinomial L = sqrt(2) R, R the public bound on row norms: every row is projected onto the unit ball " +
	"by the public scaling rule, so R = 1); one row has weight c = w_i/m_i in f_i; the prox is solved to gradient norm " +
	"1e-9 or the update is refused; sensitivity radius C' = min(C, gamma (c L + 1e-9)) (Cyffers et al. 2023, App. C.2)"

// FigureClip is the clip every walk figure of r uses: for the prox and linearized steps
// under UnitRecord, the smaller of Clip and RecordClip (the record-level radius; a
// replaced row moves the update by at most 4 lambda min(C, C')); otherwise Clip. Applying
// it twice gives the same value.
func (r WalkRun) FigureClip() float64 {
	if r.UnitOf() == UnitRecord && r.Step.ProxFigures() && r.RecordClip > 0 && r.RecordClip < r.Clip {
		return r.RecordClip
	}
	return r.Clip
}

// figure returns r with Clip replaced by FigureClip: every function of this package that
// takes a WalkRun calls it first, so a driver passes the node's clip and the unit, never a
// clip it computed itself.
func (r WalkRun) figure() WalkRun {
	r.Clip = r.FigureClip()
	return r
}

// UnitOf returns the unit the figures of r hold for ("" counts as record).
func (r WalkRun) UnitOf() Unit {
	if r.Unit == "" {
		return UnitRecord
	}
	return r.Unit
}

// RecordBinds reports whether the record-level radius is what bounds r's figures (it is
// smaller than the clip); false when the node-level clip binds (a squared loss, rows not
// projected, a clip below the radius) or the unit is node.
func (r WalkRun) RecordBinds() bool {
	return r.UnitOf() == UnitRecord && r.Step.ProxFigures() && r.FigureClip() < r.Clip
}

// UnitNote says, for a report, what the figures of r protect and which radius binds.
func (r WalkRun) UnitNote() string {
	switch {
	case r.UnitOf() == UnitNode:
		return "per node: one node's whole data set replaced (its update clipped at C)"
	case !r.Step.ProxFigures():
		return "per record: one row replaced (the step clips every example's gradient)"
	case r.RecordBinds():
		return fmt.Sprintf("per record: one row replaced; the record radius gamma (c L + tol) = %.4g binds (below the clip %g)", r.FigureClip(), r.Clip)
	case r.WeightUnknown && (math.IsInf(r.RecordClip, 1) || r.RecordClip == 0):
		return "per record, by the node-level clip C: the weight of one row is unknown before the members are, so no smaller record radius holds yet"
	case math.IsInf(r.RecordClip, 1) || r.RecordClip == 0:
		return "per record, by the node-level clip C: the loss is not Lipschitz or rows are not projected onto the unit ball, so no smaller record radius holds"
	}
	return fmt.Sprintf("per record, by the node-level clip C = %g (at most the record radius %.4g)", r.Clip, r.RecordClip)
}
