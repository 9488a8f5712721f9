package consensus

import (
	"math"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/lapack"
	"gonum.org/v1/gonum/lapack/lapack64"
)

// Newton minimises the strongly convex
//
//	F(x) = C sum_{rows r} L(a_r.x, y_r) + (Mu/2) ||x||^2 + B.x
//
// over the rows of a shard, for the logistic or the squared loss L, by damped Newton with a
// backtracking (Armijo) line search. It is the one local solver of the algorithm packages: the
// walk's prox (Mu = 1/gamma, B = -v/gamma) and the R-ADMM subproblem of gossip/ both use it.
//
// The Newton direction is computed in one of three ways, all exact up to rounding except the
// last, which is accurate to a forcing tolerance that shrinks with the gradient:
//   - rows < p and Mu > 0: the Woodbury identity in row space,
//     (Mu I + c X^T D X)^{-1} = (I - c X^T S (Mu I + S G S)^{-1} S X) / Mu with S = D^{1/2}
//     and the cached G = c X X^T, so one rows x rows Cholesky per step;
//   - p <= newtonDenseMax (squared loss) or newtonDenseLogistic (logistic): the dense Hessian (BLAS Dsyrk on the weighted rows) and its
//     LAPACK Cholesky factor (cached across calls for the squared loss, whose Hessian is
//     constant);
//   - otherwise: conjugate gradients on Hessian-vector products X^T (D (X v)) + Mu v.
//
// The line search works on margins: with m = X x and dm = X d computed once per step, the
// trial margins are m - t dm, and the exp values of an accepted trial are kept, so the next
// gradient and Hessian weights need no further exp. A Newton must not be used concurrently.
type Newton struct {
	x          []float64 // rows*p, row-major, read only
	y          []float64
	rows, p    int
	loss       Loss
	m, dm, mt  []float64 // margins at x, X d, trial margins
	e, et      []float64 // exp(-|z|) at x and at the trial (logistic; z = -y m)
	lv, lt     []float64 // per-row losses at x and at the trial
	sw, u, zr  []float64 // rows scratch
	ws, h      []float64 // dense path: weighted rows, Hessian / factor
	gram, kmat []float64 // Woodbury path: X X^T (lazily), row-space matrix
	g, d, xt   []float64 // gradient, direction, trial point
	r, q, s    []float64 // CG scratch
	xt1        []float64 // rows*p, column-major copy of x (lazily; dense logistic path)
	pq, ps, pd []float64 // Precond: eigenvectors of X^T X, squares of X Q, Hessian diagonal
	sqC, sqMu  float64   // the (C, Mu) of the cached squared-loss factor in h (sqMu 0: none)
	// reuse: the next dense direction uses the factor in h of this solve (Chord);
	// denseUsed: a dense direction was computed (its factor is in h).
	reuse, denseUsed bool

	// forceCG selects the conjugate-gradient direction whatever the shape (tests).
	forceCG bool
}

// newtonDenseMax is the largest p for which the dense Hessian is formed when rows >= p; for
// the logistic loss, whose Hessian changes at every step, only up to newtonDenseLogistic
// (conjugate gradients were twice as fast as Dsyrk + Cholesky at 180 x 64 and 2.6 times at
// 10,000 x 100: gonum's Dsyrk is axpy-bound).
const (
	newtonDenseMax      = 300
	newtonDenseLogistic = 32
)

// precondMax is the largest rows x p for which NewtonOptions.Precond applies: its tables
// double the shard's memory, and at 10,000 x 100 the steps are bound by memory bandwidth
// and no faster than Newton-CG (BenchmarkProxLogistic10k).
const precondMax = 1 << 20

// NewtonOptions are the stopping rules of Newton.Solve.
type NewtonOptions struct {
	Tol     float64 // stop when ||grad F|| <= Tol
	MaxIter int     // at most MaxIter Newton steps
	// FullStep: when the predicted decrease d.g is at or below 1e-10 (1 + |F|), or the line
	// search finds no decrease in 60 halvings, take the full Newton step (locally
	// quadratically convergent) instead of stopping; when false, a failed line search ends
	// the solve and a small predicted decrease goes through the line search as usual.
	FullStep bool
	// Final: after MaxIter steps without convergence, recompute the gradient at the last
	// iterate and report it.
	Final bool
	// Chord: on the dense path, once a step has cut the gradient norm tenfold (the
	// quadratic region), the next direction reuses the Cholesky factor of the Hessian
	// already computed in this solve instead of forming and factoring a new one; a step
	// that cuts it less than tenfold makes the next direction a fresh Newton one. Forming
	// the Hessian (rows x p^2 / 2) dominates a tall node's solve. The factor is never
	// carried from one Solve to the next, so the result depends on the inputs alone.
	Chord bool
	// Precond: for the logistic loss on a tall shard whose Newton steps would form the
	// dense Hessian (rows >= p, p <= newtonDenseLogistic, rows x p <= precondMax, Mu > 0;
	// for larger p, Newton-CG was as fast at 180 x 64), first take chord steps x -= P^{-1} g, where P is the Hessian's diagonal in
	// the eigenbasis Q of X^T X: P = Q diag(Mu + C q_j^T X^T D X q_j) Q^T, with D the
	// Hessian weights of the first two iterates. Q and the squares of X Q are computed once
	// per solver from the data alone. A step costs two products with X, one with the
	// squares (in the first two steps) and one exp per row, and no Hessian, whose rows x
	// p^2 / 2 dominate a tall node's Newton step. On the shipped breast-cancer rows the
	// gradient norm falls about a hundredfold per step. A step that does not halve it (or a
	// non-finite one) is undone and the solve goes on by damped Newton from the last
	// accepted point: the answer meets the same tolerance and depends on the inputs alone.
	Precond bool
}

// NewtonResult reports a solve.
type NewtonResult struct {
	Residual  float64 // the last gradient norm computed
	Newton    int     // Newton directions computed
	Converged bool    // Residual <= Tol
	Failed    bool    // the Hessian was not positive definite or F was not finite
}

// newNewton builds the solver over a row-major rows x p design and its targets (aliased).
func newNewton(x, y []float64, rows, p int, loss Loss) *Newton {
	return &Newton{
		x: x, y: y, rows: rows, p: p, loss: loss,
		m: make([]float64, rows), dm: make([]float64, rows), mt: make([]float64, rows),
		e: make([]float64, rows), et: make([]float64, rows),
		lv: make([]float64, rows), lt: make([]float64, rows),
		sw: make([]float64, rows), u: make([]float64, rows), zr: make([]float64, rows),
		g: make([]float64, p), d: make([]float64, p), xt: make([]float64, p),
	}
}

// NewNewton builds the Newton solver over the rows of shard (aliased, read only) for loss.
func NewNewton(shard *Dataset, loss Loss) *Newton {
	return newNewton(shard.X, shard.Y, shard.Rows, shard.Cols, loss)
}

func (n *Newton) design() blas64.General {
	return blas64.General{Rows: n.rows, Cols: n.p, Data: n.x, Stride: n.p}
}

func vec(v []float64) blas64.Vector { return blas64.Vector{N: len(v), Data: v, Inc: 1} }

// margins sets dst = X v.
func (n *Newton) margins(dst, v []float64) {
	blas64.Gemv(blas.NoTrans, 1, n.design(), vec(v), 0, vec(dst))
}

// losses fills lv (and e for the logistic loss) at margins m, and returns sum lv.
func (n *Newton) losses(lv, e, m []float64) float64 {
	s := 0.0
	if n.loss == Logistic {
		for r, mr := range m {
			z := -n.y[r] * mr
			er := math.Exp(-math.Abs(z))
			e[r] = er
			l := math.Log1p(er)
			if z > 0 {
				l += z
			}
			lv[r] = l
			s += l
		}
		return s
	}
	for r, mr := range m {
		d := mr - n.y[r]
		lv[r] = 0.5 * d * d
		s += lv[r]
	}
	return s
}

// gradient sets n.g = Mu x + b + X^T (c L'(m)) from the stored margins and exp values, and
// the Hessian weights D = L”(m) into sw; it returns ||g||.
func (n *Newton) gradient(x, b []float64, c, mu float64) float64 {
	if n.loss == Logistic {
		for r := range n.m {
			er := n.e[r]
			inv := 1 / (1 + er)
			sg := inv // sigmoid(|z|)
			if -n.y[r]*n.m[r] < 0 {
				sg = er * inv
			}
			n.u[r] = -c * n.y[r] * sg
			n.sw[r] = er * inv * inv
		}
	} else {
		for r := range n.m {
			n.u[r] = c * (n.m[r] - n.y[r])
			n.sw[r] = 1
		}
	}
	for j := range n.g {
		n.g[j] = mu*x[j] + b[j]
	}
	blas64.Gemv(blas.Trans, 1, n.design(), vec(n.u), 1, vec(n.g))
	return math.Sqrt(dot(n.g, n.g))
}

// Value returns F(x) (it overwrites the solver's margin scratch).
func (n *Newton) Value(x, b []float64, c, mu float64) float64 {
	n.margins(n.m, x)
	return c*n.losses(n.lv, n.e, n.m) + 0.5*mu*dot(x, x) + dot(b, x)
}

// Solve sets dst to the minimiser of F with the given C (> 0), Mu (>= 0) and B, starting from
// start (dst may alias start, not b), under opt. F must be strongly convex (Mu > 0, or the
// rows span R^p for the squared loss).
func (n *Newton) Solve(dst, b, start []float64, c, mu float64, opt NewtonOptions) NewtonResult {
	x := dst
	copy(x, start)
	var res NewtonResult
	n.margins(n.m, x)
	prev, factored := math.Inf(1), false
	n.reuse, n.denseUsed = false, false
	defer func() { n.reuse = false }()
	if opt.Precond && n.loss == Logistic && n.rows >= n.p && n.p <= newtonDenseLogistic && n.rows*n.p <= precondMax && mu > 0 {
		n.expAt(n.e, n.m)
		if n.precond(x, b, c, mu, opt, &res) {
			return res
		}
	}
	fx := c*n.losses(n.lv, n.e, n.m) + 0.5*mu*dot(x, x) + dot(b, x)
	for it := 0; it < opt.MaxIter; it++ {
		res.Residual = n.gradient(x, b, c, mu)
		if res.Residual <= opt.Tol {
			res.Converged = true
			return res
		}
		n.reuse = opt.Chord && factored && n.loss != Squared && res.Residual <= 0.1*prev
		prev = res.Residual
		if !n.direction(c, mu) {
			res.Failed = true
			return res
		}
		factored = factored || n.denseUsed
		res.Newton++
		d := n.d
		slope := dot(n.g, d)
		n.margins(n.dm, d)
		xd, dd, bd := dot(x, d), dot(d, d), dot(b, d)
		if opt.FullStep && slope <= 1e-10*(1+math.Abs(fx)) {
			fx = n.take(x, b, c, mu)
			continue
		}
		t := 1.0
		moved := false
		for ls := 0; ls < 60; ls++ {
			for r := range n.mt {
				n.mt[r] = n.m[r] - t*n.dm[r]
			}
			n.losses(n.lt, n.et, n.mt)
			dl := 0.0
			for r := range n.lt {
				dl += n.lt[r] - n.lv[r]
			}
			df := c*dl - t*(mu*xd+bd) + 0.5*mu*t*t*dd
			if df <= -1e-4*t*slope {
				for j := range x {
					x[j] -= t * d[j]
				}
				n.m, n.mt = n.mt, n.m
				n.e, n.et = n.et, n.e
				n.lv, n.lt = n.lt, n.lv
				fx += df
				moved = true
				break
			}
			t *= 0.5
		}
		if !moved {
			if !opt.FullStep {
				return res
			}
			fx = n.take(x, b, c, mu)
		}
		if math.IsNaN(fx) || math.IsInf(fx, 0) {
			res.Failed = true
			return res
		}
	}
	if opt.Final {
		res.Residual = n.gradient(x, b, c, mu)
		res.Converged = res.Residual <= opt.Tol
	}
	return res
}

// take moves x to x - d (the full Newton step) and refreshes the margins, the per-row
// losses and F there.
func (n *Newton) take(x, b []float64, c, mu float64) float64 {
	for j := range x {
		x[j] -= n.d[j]
	}
	for r := range n.m {
		n.m[r] -= n.dm[r]
	}
	return c*n.losses(n.lv, n.e, n.m) + 0.5*mu*dot(x, x) + dot(b, x)
}

// direction sets n.d = H^{-1} g for the Hessian H = c X^T D X + Mu I (D in sw), and reports
// false when H is not positive definite (or the CG iteration breaks down).
func (n *Newton) direction(c, mu float64) bool {
	switch {
	case n.forceCG:
		return n.cg(c, mu)
	case n.rows < n.p && mu > 0:
		return n.woodbury(c, mu)
	case n.p <= newtonDenseMax && (n.loss == Squared || n.p <= newtonDenseLogistic):
		return n.dense(c, mu)
	default:
		return n.cg(c, mu)
	}
}

func (n *Newton) dense(c, mu float64) bool {
	p := n.p
	if n.h == nil {
		n.h = make([]float64, p*p)
	}
	n.denseUsed = true
	sym := blas64.Symmetric{Uplo: blas.Upper, N: p, Data: n.h, Stride: p}
	if !n.reuse && (n.loss != Squared || n.sqMu != mu || n.sqC != c || mu == 0) {
		n.sqMu = 0
		if n.loss == Squared {
			blas64.Syrk(blas.Trans, c, n.design(), 0, sym)
		} else {
			// The weighted rows are written column-major (p x rows) so that Syrk forms the
			// Hessian by dot products of length rows: 2.3 times faster than on the row-major
			// copy (axpys of length <= p) at 569 x 30.
			k := n.rows
			if n.ws == nil {
				n.ws = make([]float64, k*p)
			}
			xt := n.columns()
			s := n.zr
			for r := range s {
				s[r] = math.Sqrt(c * n.sw[r])
			}
			for j := 0; j < p; j++ {
				a, w := xt[j*k:(j+1)*k], n.ws[j*k:(j+1)*k]
				for r, v := range a {
					w[r] = s[r] * v
				}
			}
			blas64.Syrk(blas.NoTrans, 1, blas64.General{Rows: p, Cols: k, Data: n.ws, Stride: k}, 0, sym)
		}
		for i := 0; i < p; i++ {
			n.h[i*p+i] += mu
		}
		if _, ok := lapack64.Potrf(sym); !ok {
			return false
		}
		if n.loss == Squared {
			n.sqC, n.sqMu = c, mu
		}
	}
	copy(n.d, n.g)
	lapack64.Potrs(blas64.Triangular{Uplo: blas.Upper, Diag: blas.NonUnit, N: p, Data: n.h, Stride: p},
		blas64.General{Rows: p, Cols: 1, Data: n.d, Stride: 1})
	return true
}

func (n *Newton) woodbury(c, mu float64) bool {
	k := n.rows
	if n.gram == nil {
		n.gram = make([]float64, k*k)
		n.kmat = make([]float64, k*k)
		blas64.Syrk(blas.NoTrans, 1, n.design(), 0, blas64.Symmetric{Uplo: blas.Upper, N: k, Data: n.gram, Stride: k})
	}
	s := n.zr
	for r := range s {
		s[r] = math.Sqrt(n.sw[r])
	}
	for i := 0; i < k; i++ {
		for j := i; j < k; j++ {
			n.kmat[i*k+j] = c * s[i] * n.gram[i*k+j] * s[j]
		}
		n.kmat[i*k+i] += mu
	}
	sym := blas64.Symmetric{Uplo: blas.Upper, N: k, Data: n.kmat, Stride: k}
	if _, ok := lapack64.Potrf(sym); !ok {
		return false
	}
	n.margins(n.u, n.g)
	for r := range n.u {
		n.u[r] *= s[r]
	}
	lapack64.Potrs(blas64.Triangular{Uplo: blas.Upper, Diag: blas.NonUnit, N: k, Data: n.kmat, Stride: k},
		blas64.General{Rows: k, Cols: 1, Data: n.u, Stride: 1})
	for r := range n.u {
		n.u[r] *= -c * s[r]
	}
	copy(n.d, n.g)
	blas64.Gemv(blas.Trans, 1, n.design(), vec(n.u), 1, vec(n.d))
	for j := range n.d {
		n.d[j] /= mu
	}
	return true
}

// hv sets dst = (c X^T D X + Mu I) v, using zr as row scratch.
func (n *Newton) hv(dst, v []float64, c, mu float64) {
	n.margins(n.zr, v)
	for r := range n.zr {
		n.zr[r] *= c * n.sw[r]
	}
	for j := range dst {
		dst[j] = mu * v[j]
	}
	blas64.Gemv(blas.Trans, 1, n.design(), vec(n.zr), 1, vec(dst))
}

// cg solves H d = g by conjugate gradients to a relative residual min(0.5, sqrt(||g||)),
// the forcing term of an inexact Newton method with superlinear convergence.
func (n *Newton) cg(c, mu float64) bool {
	if n.r == nil {
		n.r, n.q, n.s = make([]float64, n.p), make([]float64, n.p), make([]float64, n.p)
	}
	d, r, q, s := n.d, n.r, n.q, n.s
	clear(d)
	copy(r, n.g)
	copy(s, r)
	rr := dot(r, r)
	gn := math.Sqrt(rr)
	tol := math.Min(0.5, math.Sqrt(gn)) * gn
	for it := 0; it < 2*n.p+10; it++ {
		n.hv(q, s, c, mu)
		sq := dot(s, q)
		if !(sq > 0) {
			return it > 0
		}
		a := rr / sq
		for j := range d {
			d[j] += a * s[j]
			r[j] -= a * q[j]
		}
		rn := dot(r, r)
		if math.Sqrt(rn) <= tol {
			return true
		}
		beta := rn / rr
		rr = rn
		for j := range s {
			s[j] = r[j] + beta*s[j]
		}
	}
	return true
}

// columns returns the design column-major (p x rows), built once.
func (n *Newton) columns() []float64 {
	if n.xt1 == nil {
		k, p := n.rows, n.p
		n.xt1 = make([]float64, k*p)
		for r := 0; r < k; r++ {
			for j := 0; j < p; j++ {
				n.xt1[j*k+r] = n.x[r*p+j]
			}
		}
	}
	return n.xt1
}

// expAt fills e with exp(-|z_r|), z_r = -y_r m_r, the only per-row transcendental the
// logistic gradient and Hessian weights need.
func (n *Newton) expAt(e, m []float64) {
	for r, mr := range m {
		e[r] = expNeg(math.Abs(n.y[r] * mr))
	}
}

// expNeg returns exp(-t) for t >= 0 (NaN for NaN) within 4 ulp (TestExpNeg): with
// K = round(64 t / ln 2) and r = t - K ln(2)/64 (|r| <= ln(2)/128), exp(-t) is
// 2^-(K/64) exp(-r), the first factor from a table of 2^(-j/64) and the second a degree-5
// Taylor polynomial (remainder below 4e-17). It is about twice as fast as math.Exp, which
// dominated the chord steps of a tall shard's prox (one exp per row per step).
func expNeg(t float64) float64 {
	if !(t < 700) {
		return math.Exp(-t)
	}
	const (
		ln2Hi = 6.93147180369123816490e-01 / 64
		ln2Lo = 1.90821492927058770002e-10 / 64
	)
	ki := int64(t*(64*math.Log2E) + 0.5) // t >= 0: truncation is the floor
	k := float64(ki)
	r := (t - k*ln2Hi) - k*ln2Lo
	r2 := r * r
	q := (1 - r) + r2*((0.5-r*(1.0/6))+r2*(1.0/24-r*(1.0/120)))
	return q * expNegTable[ki&63] * math.Float64frombits(uint64(1023-ki>>6)<<52)
}

// expNegTable holds 2^(-j/64), j = 0..63.
var expNegTable = func() (t [64]float64) {
	for j := range t {
		t[j] = math.Exp2(-float64(j) / 64)
	}
	return t
}()

// precondInit computes, once per solver, the eigenvectors Q of X^T X (in n.pq, column j the
// j-th) and the squares of the rows of X Q (in n.ps, rows x p).
func (n *Newton) precondInit() bool {
	p, k := n.p, n.rows
	g := make([]float64, p*p)
	blas64.Syrk(blas.NoTrans, 1, blas64.General{Rows: p, Cols: k, Data: n.columns(), Stride: k}, 0,
		blas64.Symmetric{Uplo: blas.Upper, N: p, Data: g, Stride: p})
	lam := make([]float64, p)
	work := make([]float64, 1)
	sym := blas64.Symmetric{Uplo: blas.Upper, N: p, Data: g, Stride: p}
	lapack64.Syev(lapack.EVCompute, sym, lam, work, -1)
	work = make([]float64, int(work[0]))
	if !lapack64.Syev(lapack.EVCompute, sym, lam, work, len(work)) {
		return false
	}
	n.pq, n.ps, n.pd = g, make([]float64, k*p), make([]float64, p)
	blas64.Gemm(blas.NoTrans, blas.NoTrans, 1, n.design(), blas64.General{Rows: p, Cols: p, Data: g, Stride: p},
		0, blas64.General{Rows: k, Cols: p, Data: n.ps, Stride: p})
	for i, z := range n.ps {
		n.ps[i] = z * z
	}
	return true
}

// precond runs the chord steps of NewtonOptions.Precond from x (margins and exp values in
// n.m and n.e). It reports true when the gradient norm reached opt.Tol (res is final);
// false leaves x at the last accepted point with n.m and n.e consistent with it.
func (n *Newton) precond(x, b []float64, c, mu float64, opt NewtonOptions, res *NewtonResult) bool {
	p := n.p
	if n.pq == nil && !n.precondInit() {
		return false
	}
	q := blas64.General{Rows: p, Cols: p, Data: n.pq, Stride: p}
	gn := n.gradient(x, b, c, mu)
	for it := 0; it < opt.MaxIter; it++ {
		res.Residual = gn
		if gn <= opt.Tol {
			res.Converged = true
			return true
		}
		// The diagonal of the Hessian in the eigenbasis of X^T X, from the weights of the
		// first two iterates (later ones move it by less than the gradient's rounding).
		if it < 2 {
			blas64.Gemv(blas.Trans, c, blas64.General{Rows: n.rows, Cols: p, Data: n.ps, Stride: p}, vec(n.sw), 0, vec(n.pd))
		}
		blas64.Gemv(blas.Trans, 1, q, vec(n.g), 0, vec(n.xt))
		for j := range n.xt {
			n.xt[j] /= n.pd[j] + mu
		}
		blas64.Gemv(blas.NoTrans, 1, q, vec(n.xt), 0, vec(n.d))
		res.Newton++
		for j := range x {
			n.xt[j] = x[j] - n.d[j]
		}
		n.margins(n.dm, n.d)
		for r := range n.mt {
			n.mt[r] = n.m[r] - n.dm[r]
		}
		n.expAt(n.et, n.mt)
		n.m, n.mt = n.mt, n.m
		n.e, n.et = n.et, n.e
		gt := n.gradient(n.xt, b, c, mu)
		if !(gt <= 0.5*gn) {
			n.m, n.mt = n.mt, n.m
			n.e, n.et = n.et, n.e
			return false
		}
		copy(x, n.xt)
		gn = gt
	}
	return false
}
