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
	// blocks, for the one-vs-rest loss, are the K binary objectives of class k against
	// the others, over blocks of the model (class-major); nil otherwise.
	blocks []*Objective
}

// NewObjective builds O(., D_i). The logistic loss needs labels in {-1, +1}.
func NewObjective(shard *consensus.Dataset, loss consensus.Loss, rowWeight, regOverN float64) (*Objective, error) {
	if err := shard.Check(); err != nil {
		return nil, err
	}
	if shard.Rows < 1 {
		return nil, fmt.Errorf("gossip: %s: local objective needs at least one row", shard.Name)
	}
	if loss == consensus.LogisticOvR {
		return newOvRObjective(shard, rowWeight, regOverN)
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

// newOvRObjective is the one-vs-rest objective: the sum of K binary logistic objectives,
// one per class, each on its own block of the model. Each block's solve, noise and figure
// are those of a binary run; the blocks only share the rows.
func newOvRObjective(shard *consensus.Dataset, rowWeight, regOverN float64) (*Objective, error) {
	k := shard.NumClasses()
	if k < 3 {
		return nil, fmt.Errorf("gossip: %s: one-vs-rest needs a class list of 3 or more classes", shard.Name)
	}
	o := &Objective{shard: shard, loss: consensus.LogisticOvR, RowWeight: rowWeight, RegOverN: regOverN}
	for c := 0; c < k; c++ {
		for i, y := range shard.Y {
			if !(y >= 0 && y < float64(k)) || y != math.Trunc(y) {
				return nil, fmt.Errorf("gossip: %s: row %d: one-vs-rest needs class indices 0..%d, got %v", shard.Name, i, k-1, y)
			}
		}
		b, err := NewObjective(consensus.OvRShard(shard, c), consensus.Logistic, rowWeight, regOverN)
		if err != nil {
			return nil, err
		}
		o.blocks = append(o.blocks, b)
	}
	return o, nil
}

// Blocks returns the number of independent blocks of the model: the classes of a
// one-vs-rest objective, else 1.
func (o *Objective) Blocks() int { return max(1, len(o.blocks)) }

// Dim returns the model dimension.
func (o *Objective) Dim() int { return o.shard.Cols * o.Blocks() }

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
	if o.blocks != nil {
		s, p := 0.0, o.shard.Cols
		for k, b := range o.blocks {
			s += b.Value(f[k*p : (k+1)*p])
		}
		return s
	}
	s := 0.0
	for r := 0; r < o.shard.Rows; r++ {
		s += o.loss.Value(dot(o.shard.Row(r), f), o.shard.Y[r])
	}
	return o.RowWeight*s + 0.5*o.RegOverN*dot(f, f)
}

// Grad sets dst to grad O(f, D_i). dst must not alias f.
func (o *Objective) Grad(dst, f []float64) {
	if o.blocks != nil {
		p := o.shard.Cols
		for k, b := range o.blocks {
			b.Grad(dst[k*p:(k+1)*p], f[k*p:(k+1)*p])
		}
		return
	}
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
	if o.blocks != nil {
		// The blocks are independent: each solved as a binary problem; the result is the
		// worst block's (the largest residual relative to its tolerance).
		p := o.shard.Cols
		var out SolveResult
		out.Converged = true
		for k, ob := range o.blocks {
			r := ob.Solve(dst[k*p:(k+1)*p], b[k*p:(k+1)*p], start[k*p:(k+1)*p], q)
			if k == 0 || r.Residual/r.Tolerance > out.Residual/out.Tolerance {
				out.Residual, out.Tolerance = r.Residual, r.Tolerance
			}
			out.Newton += r.Newton
			out.Converged = out.Converged && r.Converged
		}
		return out
	}
	if o.nt == nil {
		o.nt = consensus.NewNewton(o.shard, o.loss)
	}
	tol := 1e-11 * (1 + math.Sqrt(dot(b, b)) + o.RowWeight*float64(o.shard.Rows))
	r := o.nt.Solve(dst, b, start, o.RowWeight, o.RegOverN+q,
		consensus.NewtonOptions{Tol: tol, MaxIter: 100, FullStep: true, Final: true, Precond: true})
	return SolveResult{Residual: r.Residual, Tolerance: tol, Newton: r.Newton, Converged: r.Converged}
}
