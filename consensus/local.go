package consensus

import (
	"errors"
	"fmt"
	"math"
)

// LocalLoss is node i's f_i(w) = Weight * (1/rows_i) * sum_{rows r of shard} loss(x_r.w, y_r).
// It owns scratch buffers, so a LocalLoss must not be used concurrently.
type LocalLoss struct {
	shard  *Dataset
	loss   Loss
	weight float64
	c      float64 // weight / rows

	// squared loss: cached Cholesky factor of (c A^T A + I/gamma)
	gamma float64
	chol  []float64 // p*p lower triangular, row-major
	atb   []float64 // c A^T b
	gram  []float64 // c A^T A
	anorm float64   // ||a||^2 for a one-row shard
	row   []float64 // the row a of a one-row squared-loss shard (nil otherwise)
	label float64   // its label
	k1    float64   // gamma c / (1 + gamma c ||a||^2) for that row, valid when g1 == gamma
	g1    float64   // the gamma of k1 (0: not yet computed)

	// logistic loss: the Newton solver
	nt *Newton

	// multinomial loss: the number of classes, the prox's scratch, per-row scratch
	k      int
	mw     *multiWork
	mk, gk []float64

	// scratch
	x, rhs, h []float64
}

// NewLocalLoss builds node i's local loss over shard with the given weight (> 0).
// Logistic loss requires labels in {-1, +1}.
func NewLocalLoss(shard *Dataset, loss Loss, weight float64) (*LocalLoss, error) {
	if err := shard.Check(); err != nil {
		return nil, err
	}
	if shard.Rows == 0 {
		return nil, fmt.Errorf("consensus: %s: local loss needs at least one row", shard.Name)
	}
	if loss != Squared && loss != Logistic && loss != Multinomial {
		return nil, fmt.Errorf("consensus: unknown loss %d", int(loss))
	}
	k := 0
	if loss == Multinomial {
		if k = shard.NumClasses(); k < 3 {
			return nil, fmt.Errorf("consensus: %s: the multinomial loss needs a class list of 3 or more classes", shard.Name)
		}
		if err := checkMultiLabels(shard, k); err != nil {
			return nil, err
		}
	}
	if !(weight > 0) || math.IsInf(weight, 0) {
		return nil, fmt.Errorf("consensus: local loss weight %v must be finite and > 0", weight)
	}
	if loss == Logistic {
		for i, y := range shard.Y {
			if y != 1 && y != -1 {
				return nil, fmt.Errorf("consensus: %s: example %d (0-based, in the order of this shard, not a file line): logistic loss needs labels -1/+1, got %v (labels are mapped to -1/+1 when the file is read with binary labels)", shard.Name, i, y)
			}
		}
	}
	p := shard.Cols
	l := &LocalLoss{
		shard: shard, loss: loss, weight: weight,
		c: weight / float64(shard.Rows),
		x: make([]float64, p), rhs: make([]float64, p),
		k: k, mk: make([]float64, k), gk: make([]float64, k),
	}
	if shard.Rows > 1 && loss == Squared {
		l.chol = make([]float64, p*p)
		l.h = make([]float64, p*p)
	}
	if loss == Squared {
		if shard.Rows == 1 {
			a := shard.Row(0)
			l.anorm = dot(a, a)
			l.row, l.label = a, shard.Y[0]
		} else {
			l.gram = make([]float64, p*p)
			l.atb = make([]float64, p)
			for r := 0; r < shard.Rows; r++ {
				a := shard.Row(r)
				for i, ai := range a {
					l.atb[i] += l.c * ai * shard.Y[r]
					for j := 0; j <= i; j++ {
						l.gram[i*p+j] += l.c * ai * a[j]
					}
				}
			}
		}
	}
	return l, nil
}

// Dim returns the dimension of the model f_i takes: the shard's columns, times the
// number of classes for the multinomial loss.
func (l *LocalLoss) Dim() int {
	if l.k > 0 {
		return l.k * l.shard.Cols
	}
	return l.shard.Cols
}

// Classes returns the number of classes of the multinomial loss (0 for the others).
func (l *LocalLoss) Classes() int { return l.k }

// Rows returns the number of rows of the shard.
func (l *LocalLoss) Rows() int { return l.shard.Rows }

// Weight returns the weight of the local loss.
func (l *LocalLoss) Weight() float64 { return l.weight }

// RowWeight returns the weight of one row in the local loss, Weight()/rows.
func (l *LocalLoss) RowWeight() float64 { return l.c }

// ProxTolerance is the gradient norm to which Prox solves the logistic and multinomial
// prox (the solvers stop at 1e-10; the margin covers the rounding of the residual's own
// evaluation). The computed point is within gamma*ProxTolerance of the exact prox.
const ProxTolerance = 1e-9

// ErrProxInexact is returned by Prox when the solver stopped above ProxTolerance: the
// update would not be covered by the record-level figure, so the walk refuses it.
var ErrProxInexact = errors.New("consensus: prox: solver stopped above the certified tolerance")

// Value returns f_i(w).
func (l *LocalLoss) Value(w []float64) float64 {
	s := 0.0
	if l.loss == Multinomial {
		for r := 0; r < l.shard.Rows; r++ {
			multiScores(l.mk, l.shard.Row(r), w)
			s += multiValue(l.mk, classOf(l.shard.Y[r]))
		}
		return l.c * s
	}
	for r := 0; r < l.shard.Rows; r++ {
		s += l.loss.value(dot(l.shard.Row(r), w), l.shard.Y[r])
	}
	return l.c * s
}

// Grad sets dst to the gradient of f_i at w. dst must not alias w.
func (l *LocalLoss) Grad(dst, w []float64) {
	clear(dst)
	if l.loss == Multinomial {
		multiGradRows(dst, w, l.shard, l.k, l.c, math.Inf(1), l.mk, l.gk)
		return
	}
	for r := 0; r < l.shard.Rows; r++ {
		a := l.shard.Row(r)
		c := l.c * l.loss.deriv(dot(a, w), l.shard.Y[r])
		for j, v := range a {
			dst[j] += c * v
		}
	}
}

// Prox sets dst = argmin_x f_i(x) + ||x-v||^2/(2 gamma). Squared: exact (cached Cholesky per
// gamma; closed-form Sherman-Morrison when the shard has one row). Logistic: damped Newton with
// backtracking line search until the gradient norm is below 1e-10. dst may alias v. It does
// not allocate.
//
// For the logistic and multinomial losses the result is certified: the gradient norm of
// the prox objective at dst is at most ProxTolerance, so dst is within gamma*ProxTolerance
// of the exact prox (the objective is (1/gamma)-strongly convex), which the record-level
// privacy figure of the walk relies on (privacy.RecordClip); otherwise Prox returns
// ErrProxInexact.
func (l *LocalLoss) Prox(dst, v []float64, gamma float64) error {
	p := l.Dim()
	if len(dst) != p || len(v) != p {
		return fmt.Errorf("consensus: prox: vector length %d/%d, want %d", len(dst), len(v), p)
	}
	if !(gamma > 0) || math.IsInf(gamma, 0) {
		return fmt.Errorf("consensus: prox: gamma %v must be finite and > 0", gamma)
	}
	if p == 0 {
		return nil
	}
	switch l.loss {
	case Squared:
		return l.proxSquared(dst, v, gamma)
	case Multinomial:
		return l.proxMulti(dst, v, gamma)
	}
	return l.proxLogistic(dst, v, gamma)
}

func (l *LocalLoss) proxSquared(dst, v []float64, gamma float64) error {
	p := l.shard.Cols
	if l.shard.Rows == 1 {
		r, _ := l.RankOne(gamma)
		a := r.A[:len(v)]
		dst = dst[:len(v)]
		s := r.K * (r.Y - dot4(a, v))
		for j, vj := range v {
			dst[j] = vj + s*a[j]
		}
		return nil
	}
	if l.gamma != gamma {
		copy(l.h, l.gram)
		for i := 0; i < p; i++ {
			l.h[i*p+i] += 1 / gamma
		}
		if !cholesky(l.chol, l.h, p) {
			l.gamma = 0
			return fmt.Errorf("consensus: prox: matrix not positive definite (gamma=%v)", gamma)
		}
		l.gamma = gamma
	}
	for j := range l.rhs {
		l.rhs[j] = l.atb[j] + v[j]/gamma
	}
	cholSolve(dst, l.chol, l.rhs, p)
	return nil
}

// RankOne is the closed form (Sherman-Morrison) of the prox of a squared loss over a single
// row a with label y and weight c, f(x) = (c/2) (a.x - y)^2:
//
//	prox_{gamma f}(v) = v + K (y - a.v) a,   K = gamma c / (1 + gamma c ||a||^2).
//
// It lets a caller fuse the prox with the passes around it without materialising v.
type RankOne struct {
	A     []float64 // the row a; aliases the shard, read only
	Y     float64   // the label y
	K     float64   // gamma c / (1 + gamma c ||a||^2)
	Norm2 float64   // ||a||^2
}

// RankOne returns the closed form of prox_{gamma f_i} when f_i is a squared loss over a
// one-row shard, and ok = false otherwise (other losses, several rows, or gamma not finite
// and > 0). K is cached per gamma; it does not allocate.
func (l *LocalLoss) RankOne(gamma float64) (r RankOne, ok bool) {
	if l.row == nil {
		return RankOne{}, false
	}
	if l.g1 != gamma {
		if !(gamma > 0) || math.IsInf(gamma, 0) {
			return RankOne{}, false
		}
		gc := gamma * l.c
		l.k1, l.g1 = gc/(1+gc*l.anorm), gamma
	}
	return RankOne{A: l.row, Y: l.label, K: l.k1, Norm2: l.anorm}, true
}

// dot4 is a dot product with four partial sums, which keeps the floating-point adders
// busy instead of waiting on one accumulator; the summation order is fixed.
func dot4(a, b []float64) float64 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float64
	k := 0
	for ; k+4 <= len(a); k += 4 {
		aa, bb := a[k:k+4:k+4], b[k:k+4:k+4]
		s0 += aa[0] * bb[0]
		s1 += aa[1] * bb[1]
		s2 += aa[2] * bb[2]
		s3 += aa[3] * bb[3]
	}
	for ; k < len(a); k++ {
		s0 += a[k] * b[k]
	}
	return (s0 + s1) + (s2 + s3)
}

// proxLogistic minimizes F(x) = f_i(x) + ||x-v||^2/(2 gamma) by Newton's method (Newton with
// Mu = 1/gamma and B = -v/gamma), to a gradient norm of 1e-10 in at most 200 steps; a line
// search that finds no decrease ends the solve. Every call starts at v: the prox is then a
// function of its inputs alone, so a node restarted from its checkpoint computes the same
// bits as one that never stopped (a warm start from the previous solution, which the
// checkpoint does not hold, measured slower on the walk's inputs anyway: they move about as
// far between visits as v is from the solution).
func (l *LocalLoss) proxLogistic(dst, v []float64, gamma float64) error {
	if l.nt == nil {
		l.nt = NewNewton(l.shard, Logistic)
	}
	b, x := l.rhs, l.x
	for j, vj := range v {
		b[j] = -vj / gamma
	}
	mu := 1 / gamma
	copy(x, v)
	res := l.nt.Solve(x, b, x, l.c, mu, NewtonOptions{Tol: 1e-10, MaxIter: 200, FullStep: true, Final: true, Chord: true, Precond: true})
	if res.Failed {
		return fmt.Errorf("consensus: prox: Hessian not positive definite or objective not finite")
	}
	if !(res.Residual <= ProxTolerance) {
		return fmt.Errorf("%w: gradient norm %.3g after %d Newton steps", ErrProxInexact, res.Residual, res.Newton)
	}
	copy(dst, x)
	return nil
}

// cholesky computes the lower factor L of the symmetric matrix whose lower triangle is in a
// (row-major p*p) into l. It reports false when a is not positive definite.
func cholesky(l, a []float64, p int) bool {
	for i := 0; i < p; i++ {
		for j := 0; j <= i; j++ {
			s := a[i*p+j]
			for k := 0; k < j; k++ {
				s -= l[i*p+k] * l[j*p+k]
			}
			if i == j {
				if !(s > 0) {
					return false
				}
				l[i*p+i] = math.Sqrt(s)
			} else {
				l[i*p+j] = s / l[j*p+j]
			}
		}
	}
	return true
}

// cholSolve solves L L^T x = b into x (x may alias b).
func cholSolve(x, l, b []float64, p int) {
	if p == 0 {
		return
	}
	if &x[0] != &b[0] {
		copy(x, b)
	}
	for i := 0; i < p; i++ {
		s := x[i]
		for k := 0; k < i; k++ {
			s -= l[i*p+k] * x[k]
		}
		x[i] = s / l[i*p+i]
	}
	for i := p - 1; i >= 0; i-- {
		s := x[i]
		for k := i + 1; k < p; k++ {
			s -= l[k*p+i] * x[k]
		}
		x[i] = s / l[i*p+i]
	}
}
