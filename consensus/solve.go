package consensus

import (
	"errors"
	"fmt"
	"math"
)

// ErrNoConvergence: Solve reached MaxIter; it still returns its last iterate. With an
// unpenalised intercept and a class absent from the data the infimum is not attained
// (that class's intercept goes to minus infinity), so this can happen on small data.
var ErrNoConvergence = errors.New("consensus: solve: no convergence")

// SolveOptions controls the centralized reference solver.
type SolveOptions struct {
	Tol     float64 // stop when the prox-gradient mapping norm <= Tol*max(1, ||grad MeanLoss(0)||); default 1e-12
	MaxIter int     // default 100000
	// Done, when not nil, is checked at every iteration: once it is closed (a context's
	// Done), Solve returns ErrSolveCanceled with the last iterate.
	Done <-chan struct{}
}

// ErrSolveCanceled is returned by Solve when SolveOptions.Done was closed.
var ErrSolveCanceled = errors.New("consensus: solve: canceled")

// lipschitz returns an estimate of the largest eigenvalue of X^T X / rows by power iteration.
func lipschitz(d *Dataset) float64 {
	p := d.Cols
	if d.Rows == 0 || p == 0 {
		return 0
	}
	v := make([]float64, p)
	for j := range v {
		v[j] = 1 + 0.01*float64(j%7)
	}
	u := make([]float64, p)
	lam := 0.0
	for it := 0; it < 200; it++ {
		nv := norm2(v)
		if nv == 0 {
			return 0
		}
		for j := range v {
			v[j] /= nv
		}
		clear(u)
		for i := 0; i < d.Rows; i++ {
			a := d.Row(i)
			m := dot(a, v)
			for j, x := range a {
				u[j] += m * x
			}
		}
		for j := range u {
			u[j] /= float64(d.Rows)
		}
		nl := dot(u, v)
		copy(v, u)
		if math.Abs(nl-lam) <= 1e-9*nl {
			lam = nl
			break
		}
		lam = nl
	}
	return lam
}

// Solve minimizes p.Objective over d with FISTA (backtracking step, adaptive restart) and
// returns the minimizer and the objective value. If the tolerance is not reached within
// MaxIter iterations it returns the last iterate together with a non-nil error.
func Solve(d *Dataset, p Problem, opt SolveOptions) (w []float64, obj float64, err error) {
	if err := p.Validate(); err != nil {
		return nil, 0, err
	}
	if err := d.Check(); err != nil {
		return nil, 0, err
	}
	if d.Rows == 0 {
		return nil, 0, fmt.Errorf("consensus: %s: cannot solve on an empty dataset", d.Name)
	}
	if p.Loss == Logistic {
		for i, y := range d.Y {
			if y != 1 && y != -1 {
				return nil, 0, fmt.Errorf("consensus: %s: example %d (0-based, in the order of this set, not a file line): logistic loss needs labels -1/+1, got %v (labels are mapped to -1/+1 when the file is read with binary labels)", d.Name, i, y)
			}
		}
	}
	tol := opt.Tol
	if !(tol > 0) {
		tol = 1e-12
	}
	maxIter := opt.MaxIter
	if maxIter <= 0 {
		maxIter = 100000
	}
	n := d.Cols
	if p.Loss.Blocks() {
		if d.NumClasses() == 0 {
			return nil, 0, fmt.Errorf("consensus: %s: the multinomial loss needs a class list", d.Name)
		}
		if err := checkMultiLabels(d, d.NumClasses()); err != nil {
			return nil, 0, err
		}
		n = d.ModelDim()
	}
	L := lipschitz(d) * p.Loss.Curvature()
	if !(L > 0) {
		L = 1
	}
	x := make([]float64, n)
	xPrev := make([]float64, n)
	y := make([]float64, n)
	g := make([]float64, n)
	xn := make([]float64, n)
	p.meanGrad(g, d, x)
	scale := math.Max(1, norm2(g))
	t := 1.0
	var gmap float64
	for it := 0; it < maxIter; it++ {
		select {
		case <-opt.Done:
			return x, p.Objective(d, x), fmt.Errorf("%w after %d iterations", ErrSolveCanceled, it)
		default:
		}
		p.meanGrad(g, d, y)
		fy := p.MeanLoss(d, y)
		for {
			for j := range xn {
				xn[j] = y[j] - g[j]/L
			}
			p.Reg.Prox(xn, xn, 1/L)
			fx := p.MeanLoss(d, xn)
			q := fy
			s := 0.0
			for j := range xn {
				dj := xn[j] - y[j]
				q += g[j] * dj
				s += dj * dj
			}
			q += 0.5 * L * s
			if fx <= q+1e-12*math.Abs(q) || L > 1e300 {
				gmap = L * math.Sqrt(s)
				break
			}
			L *= 2
		}
		copy(xPrev, x)
		copy(x, xn)
		if gmap <= tol*scale {
			return x, p.Objective(d, x), nil
		}
		// gradient-based adaptive restart
		rs := 0.0
		for j := range x {
			rs += (y[j] - x[j]) * (x[j] - xPrev[j])
		}
		if rs > 0 {
			t = 1
			copy(y, x)
			continue
		}
		tn := (1 + math.Sqrt(1+4*t*t)) / 2
		beta := (t - 1) / tn
		for j := range y {
			y[j] = x[j] + beta*(x[j]-xPrev[j])
		}
		t = tn
	}
	return x, p.Objective(d, x), fmt.Errorf("%w in %d iterations (prox-gradient norm %.3g, tolerance %.3g)", ErrNoConvergence, maxIter, gmap, tol*scale)
}
