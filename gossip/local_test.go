package gossip

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
)

// lossTerms returns dL/dm and d2L/dm2 at margin m for target y (scalar reference).
func lossTerms(l consensus.Loss, m, y float64) (d1, d2 float64) {
	if l == consensus.Logistic {
		s := consensus.Sigmoid(-y * m)
		return -y * s, s * (1 - s)
	}
	return m - y, 1
}

// oldSolve is Objective.Solve as it was before consensus.Newton (scalar Hessian loops and
// Cholesky, objective recomputed at every trial): the reference of the known-answer test.
func oldSolve(o *Objective, dst, b, start []float64, q float64) SolveResult {
	p := o.shard.Cols
	h, chol := make([]float64, p*p), make([]float64, p*p)
	g, d, y := make([]float64, p), make([]float64, p), make([]float64, p)
	x := dst
	copy(x, start)
	res := SolveResult{Tolerance: 1e-11 * (1 + math.Sqrt(dot(b, b)) + o.RowWeight*float64(o.shard.Rows))}
	total := func(f []float64) float64 { return o.Value(f) + dot(b, f) + 0.5*q*dot(f, f) }
	fx := total(x)
	mu := o.RegOverN + q
	for it := 0; it < 100; it++ {
		for j := range g {
			g[j] = mu*x[j] + b[j]
		}
		clear(h)
		for r := 0; r < o.shard.Rows; r++ {
			a := o.shard.Row(r)
			d1, d2 := lossTerms(o.loss, dot(a, x), o.shard.Y[r])
			c, hw := o.RowWeight*d1, o.RowWeight*d2
			for i, ai := range a {
				g[i] += c * ai
				if hw != 0 && ai != 0 {
					t := hw * ai
					for j := 0; j <= i; j++ {
						h[i*p+j] += t * a[j]
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
			h[i*p+i] += mu
		}
		if !consensus.Cholesky(chol, h, p) {
			return res
		}
		consensus.CholSolve(d, chol, g, p)
		slope := dot(g, d)
		res.Newton++
		if slope <= 1e-10*(1+math.Abs(fx)) {
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
			for i := range x {
				x[i] -= d[i]
			}
			fx = total(x)
		}
	}
	o.Grad(g, x)
	for j := range g {
		g[j] += b[j] + q*x[j]
	}
	res.Residual = math.Sqrt(dot(g, g))
	res.Converged = res.Residual <= res.Tolerance
	return res
}

// TestSolveMatchesOld: Solve (consensus.Newton) equals the old dense solver's answer to 1e-10
// relative for the logistic and squared losses on tall, wide and large-p shapes, from the
// origin and from far starting points, and both report convergence.
func TestSolveMatchesOld(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	for si, sh := range []struct{ rows, p int }{{50, 20}, {50, 200}, {400, 64}, {30, 30}, {320, 310}} {
		for _, loss := range []consensus.Loss{consensus.Logistic, consensus.Squared} {
			var d *consensus.Dataset
			if loss == consensus.Logistic {
				d, _ = consensus.SyntheticLogistic(sh.rows, sh.p, 4, uint64(si+1))
			} else {
				d, _ = consensus.SyntheticLasso(sh.rows, sh.p, 4, 0.1, uint64(si+1))
			}
			o, err := NewObjective(d, loss, 0.8, 0.01)
			if err != nil {
				t.Fatal(err)
			}
			for k, q := range []float64{0.8, 0.05, 3} {
				b, start := make([]float64, sh.p), make([]float64, sh.p)
				for j := range b {
					b[j] = rng.NormFloat64()
					start[j] = float64(k) * 30 * rng.NormFloat64()
				}
				got, want := make([]float64, sh.p), make([]float64, sh.p)
				rg := o.Solve(got, b, start, q)
				rw := oldSolve(o, want, b, start, q)
				if !rg.Converged || !rw.Converged || rg.Tolerance != rw.Tolerance {
					t.Errorf("%dx%d loss %d q %v: new %+v old %+v", sh.rows, sh.p, loss, q, rg, rw)
				}
				s, n := 0.0, 0.0
				for j := range got {
					s += (got[j] - want[j]) * (got[j] - want[j])
					n += want[j] * want[j]
				}
				if e := math.Sqrt(s) / math.Max(1, math.Sqrt(n)); e > 1e-10 {
					t.Errorf("%dx%d loss %d q %v: new and old differ by %.3g", sh.rows, sh.p, loss, q, e)
				}
			}
		}
	}
}
