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
	h, chol   []float64
	g, d, y   []float64
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
	p := shard.Cols
	return &Objective{
		shard: shard, loss: loss, RowWeight: rowWeight, RegOverN: regOverN,
		h: make([]float64, p*p), chol: make([]float64, p*p),
		g: make([]float64, p), d: make([]float64, p), y: make([]float64, p),
	}, nil
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

// lossTerms returns L, dL/dm and d2L/dm2 at margin m for target y.
func (o *Objective) lossTerms(m, y float64) (v, d1, d2 float64) {
	if o.loss == consensus.Logistic {
		s := consensus.Sigmoid(-y * m)
		return consensus.Softplus(-y * m), -y * s, s * (1 - s)
	}
	r := m - y
	return 0.5 * r * r, r, 1
}

// Value returns O(f, D_i).
func (o *Objective) Value(f []float64) float64 {
	s := 0.0
	for r := 0; r < o.shard.Rows; r++ {
		v, _, _ := o.lossTerms(dot(o.shard.Row(r), f), o.shard.Y[r])
		s += v
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
		_, d1, _ := o.lossTerms(dot(a, f), o.shard.Y[r])
		c := o.RowWeight * d1
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
// backtracking, starting from start, to a gradient norm of 1e-11 * (1 + ||b|| + C_i). The
// objective is (rho/N + q)-strongly convex. dst may alias start but not b.
func (o *Objective) Solve(dst, b, start []float64, q float64) SolveResult {
	p := o.shard.Cols
	x, g, d, y := dst, o.g, o.d, o.y
	copy(x, start)
	res := SolveResult{Tolerance: 1e-11 * (1 + math.Sqrt(dot(b, b)) + o.RowWeight*float64(o.shard.Rows))}
	total := func(f []float64) float64 { return o.Value(f) + dot(b, f) + 0.5*q*dot(f, f) }
	fx := total(x)
	mu := o.RegOverN + q
	for it := 0; it < 100; it++ {
		for j := range g {
			g[j] = mu*x[j] + b[j]
		}
		clear(o.h)
		for r := 0; r < o.shard.Rows; r++ {
			a := o.shard.Row(r)
			_, d1, d2 := o.lossTerms(dot(a, x), o.shard.Y[r])
			c, hw := o.RowWeight*d1, o.RowWeight*d2
			for i, ai := range a {
				g[i] += c * ai
				if hw != 0 && ai != 0 {
					t := hw * ai
					for j := 0; j <= i; j++ {
						o.h[i*p+j] += t * a[j]
					}
				}
			}
		}
		res.Residual = math.Sqrt(dot(g, g))
		if res.Residual <= res.Tolerance {
			res.Converged = true
			return res
		}
		for i := 0; i < p; i++ {
			o.h[i*p+i] += mu
		}
		if !consensus.Cholesky(o.chol, o.h, p) {
			return res
		}
		consensus.CholSolve(d, o.chol, g, p)
		slope := dot(g, d)
		res.Newton++
		if slope <= 1e-10*(1+math.Abs(fx)) {
			// The predicted decrease is at the objective's rounding level, where a line
			// search cannot tell better from worse: take the full Newton step, which is
			// quadratically convergent this close to the minimiser.
			for i := range x {
				x[i] -= d[i]
			}
			fx = total(x)
			continue
		}
		t := 1.0
		moved := false
		for ls := 0; ls < 60; ls++ {
			for i := range y {
				y[i] = x[i] - t*d[i]
			}
			fn := total(y)
			if fn <= fx-1e-4*t*slope {
				copy(x, y)
				fx = fn
				moved = true
				break
			}
			t *= 0.5
		}
		if !moved {
			// At machine precision the objective no longer decreases: take the full
			// Newton step, which is locally quadratically convergent.
			for i := range x {
				x[i] -= d[i]
			}
			fx = total(x)
		}
	}
	for j := range g {
		g[j] = mu*x[j] + b[j]
	}
	for r := 0; r < o.shard.Rows; r++ {
		a := o.shard.Row(r)
		_, d1, _ := o.lossTerms(dot(a, x), o.shard.Y[r])
		c := o.RowWeight * d1
		for i, ai := range a {
			g[i] += c * ai
		}
	}
	res.Residual = math.Sqrt(dot(g, g))
	res.Converged = res.Residual <= res.Tolerance
	return res
}
