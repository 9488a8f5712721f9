package gossip

import (
	"fmt"
	"math"

	"github.com/dpadmm/dpadmm/consensus"
)

// Objective is node i's local objective in the paper's form (Zhang-Khalili-Liu 2020, Sec. V):
//
//	O(f, D_i) = RowWeight * sum_{rows n} L(x_n.f, y_n) + (RegOverN/2) ||f||^2
//
// with RowWeight = C_i/B_i and RegOverN = rho/N. It owns scratch buffers and is not safe for
// concurrent use.
type Objective struct {
	shard     *consensus.Dataset
	loss      consensus.Loss
	RowWeight float64
	RegOverN  float64
	nt        *consensus.Newton
}

// NewObjective builds O(., D_i). The logistic loss needs labels in {-1, +1}.
func NewObjective(shard *consensus.Dataset, loss consensus.Loss, rowWeight, regOverN float64) (*Objective, error) {
	if err := shard.Check(); err != nil {
		return nil, err
	}
	if shard.Rows < 1 {
		return nil, fmt.Errorf("gossip: %s: local objective needs at least one row", shard.Name)
	}
	if loss != consensus.Squared && loss != consensus.Logistic {
		return nil, fmt.Errorf("gossip: unknown loss %d", int(loss))
	}
	if !(rowWeight > 0) || math.IsInf(rowWeight, 0) {
		return nil, fmt.Errorf("gossip: row weight C/B = %v must be finite and > 0", rowWeight)
	}
	if !(regOverN >= 0) || math.IsInf(regOverN, 0) {
		return nil, fmt.Errorf("gossip: rho/N = %v must be finite and >= 0", regOverN)
	}
	if loss == consensus.Logistic {
		for i, y := range shard.Y {
			if y != 1 && y != -1 {
				return nil, fmt.Errorf("gossip: %s: row %d: logistic loss needs labels -1/+1, got %v", shard.Name, i, y)
			}
		}
	}
	return &Objective{shard: shard, loss: loss, RowWeight: rowWeight, RegOverN: regOverN}, nil
}

// Dim returns the model dimension.
func (o *Objective) Dim() int { return o.shard.Cols }

// Rows returns B_i.
func (o *Objective) Rows() int { return o.shard.Rows }

func dot(a, b []float64) float64 {
	s := 0.0
	for i, v := range a {
		s += v * b[i]
	}
	return s
}

// Value returns O(f, D_i).
func (o *Objective) Value(f []float64) float64 {
	s := 0.0
	for r := 0; r < o.shard.Rows; r++ {
		s += o.loss.Value(dot(o.shard.Row(r), f), o.shard.Y[r])
	}
	return o.RowWeight*s + 0.5*o.RegOverN*dot(f, f)
}

// Grad sets dst to grad O(f, D_i). dst must not alias f.
func (o *Objective) Grad(dst, f []float64) {
	for j := range dst {
		dst[j] = o.RegOverN * f[j]
	}
	for r := 0; r < o.shard.Rows; r++ {
		a := o.shard.Row(r)
		c := o.RowWeight * o.loss.Deriv(dot(a, f), o.shard.Y[r])
		for j, v := range a {
			dst[j] += c * v
		}
	}
}

// SolveResult reports the accuracy of a subproblem solve.
type SolveResult struct {
	Residual  float64 // final gradient norm of the subproblem
	Tolerance float64 // target gradient norm
	Newton    int     // Newton steps taken
	Converged bool    // Residual <= Tolerance
}

// Solve sets dst to argmin_f O(f, D_i) + b.f + (q/2)||f||^2 (q >= 0) by damped Newton with
// backtracking (consensus.Newton), starting from start, to a gradient norm of
// 1e-11 * (1 + ||b|| + C_i) in at most 100 steps. The objective is (rho/N + q)-strongly
// convex. dst may alias start but not b. Callers warm-start from the node's previous solution.
func (o *Objective) Solve(dst, b, start []float64, q float64) SolveResult {
	if o.nt == nil {
		o.nt = consensus.NewNewton(o.shard, o.loss)
	}
	tol := 1e-11 * (1 + math.Sqrt(dot(b, b)) + o.RowWeight*float64(o.shard.Rows))
	r := o.nt.Solve(dst, b, start, o.RowWeight, o.RegOverN+q,
		consensus.NewtonOptions{Tol: tol, MaxIter: 100, FullStep: true, Final: true})
	return SolveResult{Residual: r.Residual, Tolerance: tol, Newton: r.Newton, Converged: r.Converged}
}
