package walk

import (
	"errors"
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"

	"github.com/dpadmm/dpadmm/consensus"
)

// GADMMOperator is one noisy iteration of gradient ADMM (paper 002, digest section 2.2) for
// the general constraint A x + B y = c with A = [I_m | D] (m x n, m <= n; the form every
// full-row-rank A reduces to, Remark 3.4), B = -I_m and a public regularizer g on y:
//
//	minimize f(x) + g(y)  subject to  A x - y = c.
//
// The walk's StepGADMM is its consensus case (D empty, c = 0), written out in closed form
// in gadmm.go; this operator is the library form for other constraints (fused or
// graph-guided penalties, say). The x-step needs (I + eta beta A^T A)^{-1}: its Cholesky
// factor is computed once, in NewGADMMOperator, and every Step reuses it.
type GADMMOperator struct {
	m, n      int
	d         *mat.Dense // m x (n-m); nil when m = n
	c         []float64
	g         consensus.Regularizer
	eta, beta float64
	chol      mat.Cholesky
	normA2    float64
	// scratch
	ax, v, y, lam, rhs, aty []float64
}

// NewGADMMOperator returns the operator for A = [I_m | D] (d is m x (n-m), nil for A = I),
// offset c (len m; nil means 0), regularizer g on y, step eta > 0 and penalty beta > 0.
func NewGADMMOperator(n int, d *mat.Dense, c []float64, g consensus.Regularizer, eta, beta float64) (*GADMMOperator, error) {
	m := n
	if d != nil {
		r, k := d.Dims()
		if r < 1 || r+k != n {
			return nil, fmt.Errorf("walk: gadmm operator: D is %d x %d, want m x (n-m) with n = %d", r, k, n)
		}
		m = r
	}
	switch {
	case n < 1:
		return nil, errors.New("walk: gadmm operator: n must be >= 1")
	case !(eta > 0) || math.IsInf(eta, 0) || !(beta > 0) || math.IsInf(beta, 0):
		return nil, fmt.Errorf("walk: gadmm operator: eta and beta must be finite and > 0, got %v and %v", eta, beta)
	case c != nil && len(c) != m:
		return nil, fmt.Errorf("walk: gadmm operator: c has %d entries, want %d", len(c), m)
	}
	o := &GADMMOperator{m: m, n: n, d: d, c: make([]float64, m), g: g, eta: eta, beta: beta,
		ax: make([]float64, m), v: make([]float64, m), y: make([]float64, m), lam: make([]float64, m),
		rhs: make([]float64, n), aty: make([]float64, n)}
	if c != nil {
		copy(o.c, c)
	}
	// A^T A = [[I, D], [D^T, D^T D]].
	ata := mat.NewSymDense(n, nil)
	for i := 0; i < m; i++ {
		ata.SetSym(i, i, 1)
	}
	if d != nil {
		k := n - m
		for i := 0; i < m; i++ {
			for j := 0; j < k; j++ {
				ata.SetSym(i, m+j, d.At(i, j))
			}
		}
		var dtd mat.Dense
		dtd.Mul(d.T(), d)
		for i := 0; i < k; i++ {
			for j := i; j < k; j++ {
				ata.SetSym(m+i, m+j, dtd.At(i, j))
			}
		}
	}
	// ||A||^2 = lambda_max(A^T A).
	var es mat.EigenSym
	if !es.Factorize(ata, false) {
		return nil, errors.New("walk: gadmm operator: eigen decomposition of A^T A failed")
	}
	vals := es.Values(nil)
	o.normA2 = vals[len(vals)-1]
	h := mat.NewSymDense(n, nil)
	for i := 0; i < n; i++ {
		for j := i; j < n; j++ {
			v := eta * beta * ata.At(i, j)
			if i == j {
				v++
			}
			h.SetSym(i, j, v)
		}
	}
	if !o.chol.Factorize(h) {
		return nil, errors.New("walk: gadmm operator: I + eta beta A^T A is not positive definite")
	}
	return o, nil
}

// NormA2 returns ||A||^2, the spectral norm squared (privacy.GADMMParams.NormA2).
func (o *GADMMOperator) NormA2() float64 { return o.normA2 }

// mulA sets dst (len m) to A x.
func (o *GADMMOperator) mulA(dst, x []float64) {
	copy(dst, x[:o.m])
	if o.d != nil {
		r := mat.NewVecDense(o.m, nil)
		r.MulVec(o.d, mat.NewVecDense(o.n-o.m, append([]float64(nil), x[o.m:]...)))
		for i := range dst {
			dst[i] += r.AtVec(i)
		}
	}
}

// mulAT sets dst (len n) to A^T w.
func (o *GADMMOperator) mulAT(dst, w []float64) {
	copy(dst[:o.m], w)
	if o.d != nil {
		r := mat.NewVecDense(o.n-o.m, nil)
		r.MulVec(o.d.T(), mat.NewVecDense(o.m, append([]float64(nil), w...)))
		for j := 0; j < o.n-o.m; j++ {
			dst[o.m+j] = r.AtVec(j)
		}
	}
}

// Step makes one iteration from the state (xt = x~_t, lambda = lambda_t), in the order of
// digest 2.2, and writes x~_{t+1} = x_{t+1} + noise to xOut and lambda_{t+1} to lamOut
// (xOut and lamOut may alias xt and lambda). grad sets dst to the gradient of the holder's
// f at x (the only access to its data); noise (len n, may be nil for none) is the draw
// N(0, sigma^2 I) the caller made. It refuses non-finite results before writing.
//
//	v = lambda - beta A x~ ; y = G(v) = prox_{g/beta}(-c - v/beta) (B = -I)
//	lambda' = lambda - beta (A x~ - y - c)
//	x = (I + eta beta A^T A)^{-1} [x~ - eta (grad f(x~) + A^T(beta(-y - c) - lambda'))]
func (o *GADMMOperator) Step(xOut, lamOut, xt, lambda []float64, grad func(dst, x []float64), noise []float64) error {
	if len(xt) != o.n || len(xOut) != o.n || len(lambda) != o.m || len(lamOut) != o.m || (noise != nil && len(noise) != o.n) {
		return fmt.Errorf("walk: gadmm operator: want x of length %d and lambda of length %d", o.n, o.m)
	}
	if !allFinite(xt, lambda) {
		return ErrNotFinite
	}
	o.mulA(o.ax, xt)
	for i := range o.v {
		o.v[i] = lambda[i] - o.beta*o.ax[i]
		o.y[i] = -o.c[i] - o.v[i]/o.beta
	}
	o.g.Prox(o.y, o.y, 1/o.beta)
	for i := range o.lam {
		o.lam[i] = lambda[i] - o.beta*(o.ax[i]-o.y[i]-o.c[i])
		o.v[i] = o.beta*(-o.y[i]-o.c[i]) - o.lam[i] // reuse v: beta(By - c) - lambda'
	}
	q := make([]float64, o.n)
	grad(q, xt)
	o.mulAT(o.aty, o.v)
	for k := range o.rhs {
		o.rhs[k] = xt[k] - o.eta*(q[k]+o.aty[k])
	}
	var x mat.VecDense
	if err := o.chol.SolveVecTo(&x, mat.NewVecDense(o.n, o.rhs)); err != nil {
		return fmt.Errorf("walk: gadmm operator: %w", err)
	}
	out := make([]float64, o.n)
	for k := range out {
		out[k] = x.AtVec(k)
		if noise != nil {
			out[k] += noise[k]
		}
	}
	if !allFinite(out, o.lam) {
		return ErrNotFinite
	}
	copy(xOut, out)
	copy(lamOut, o.lam)
	return nil
}
