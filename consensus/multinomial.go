package consensus

import (
	"fmt"
	"math"
)

// The multinomial (softmax) loss of K classes over p columns. The model w is K weight
// vectors one after the other (class-major: w[k*p+j]); a row a with class y (its index in
// Dataset.Classes.List) has the scores m_k = a . w_k and the loss
//
//	L(w; a, y) = log sum_k exp(m_k) - m_y,
//
// whose gradient in w is (softmax(m) - e_y) (x) a, the outer product laid out class-major.
// Its Hessian in w is (diag(q) - q q^T) (x) a a^T with q = softmax(m): the K x K factor has
// eigenvalues in [0, 1/2] (its largest is at most max_k q_k (1 - q_k) + ... <= 1/2: for any
// unit u, u^T (diag(q) - q q^T) u = Var_q(u) <= (max u - min u)^2 / 4 <= 1/2), so the loss
// is convex and (1/2) ||a||^2-smooth in w (Curvature 1/2; the binary logistic loss, the
// case K = 2 with one score, has 1/4). The per-example gradient has norm
// ||softmax(m) - e_y|| ||a|| <= sqrt(2) ||a||, and clipping it at C scales the K-vector
// softmax(m) - e_y as a whole (ClippedRowGrad): the bound on a clipped update is C, as for
// the other losses, so every figure that rests on the clip (the walk's Gaussian update, the
// gradient steps' sensitivity 2C per replaced row) holds for the multinomial loss as it is.

// NumClasses returns the number of classes of a multinomial label (Classes.List), 0 for a
// binary or numeric label.
func (d *Dataset) NumClasses() int {
	if d == nil || d.Classes == nil || len(d.Classes.List) < 3 {
		return 0
	}
	return len(d.Classes.List)
}

// ModelDim returns the dimension of a linear model over d: Cols, times the number of
// classes for a multinomial label.
func (d *Dataset) ModelDim() int {
	if k := d.NumClasses(); k > 0 {
		return k * d.Cols
	}
	return d.Cols
}

// LossFor returns the loss a classification (logistic) or regression (squared) request
// gives on d: the multinomial loss when the label has more than two classes.
func LossFor(d *Dataset, l Loss) Loss {
	if l == Logistic && d.NumClasses() > 0 {
		return Multinomial
	}
	return l
}

// scores sets m[k] = a . w_k.
func multiScores(m, a, w []float64) {
	p := len(a)
	for k := range m {
		m[k] = dot(a, w[k*p:(k+1)*p])
	}
}

// multiValue returns log sum exp(m) - m[y], computed stably.
func multiValue(m []float64, y int) float64 {
	mx := math.Inf(-1)
	for _, v := range m {
		mx = math.Max(mx, v)
	}
	s := 0.0
	for _, v := range m {
		s += math.Exp(v - mx)
	}
	return mx + math.Log(s) - m[y]
}

// multiDeriv sets d = softmax(m) - e_y, the derivative of the loss in the scores.
func multiDeriv(d, m []float64, y int) {
	Softmax(d, m)
	d[y]--
}

// classOf returns the class index of a multinomial target.
func classOf(y float64) int { return int(y) }

// checkMultiLabels reports an error when a label of d is not a class index in [0, k).
func checkMultiLabels(d *Dataset, k int) error {
	for i, y := range d.Y {
		if !(y >= 0 && y < float64(k)) || y != math.Trunc(y) {
			return fmt.Errorf("consensus: %s: example %d: the multinomial loss needs class indices 0..%d, got %v", d.Name, i, k-1, y)
		}
	}
	return nil
}

// multiGradRows adds c_r (softmax(m_r) - e_y) (x) a_r over the rows to dst, with c_r =
// c times the clipping factor of row r (clip: the per-example gradient norm bound, +Inf
// for none).
func multiGradRows(dst, w []float64, d *Dataset, k int, c, clip float64, m, g []float64) {
	p := d.Cols
	for r := 0; r < d.Rows; r++ {
		a := d.Row(r)
		multiScores(m, a, w)
		multiDeriv(g, m, classOf(d.Y[r]))
		f := c
		if !math.IsInf(clip, 1) {
			if n := math.Sqrt(dot(g, g) * dot(a, a)); n > clip {
				f = c * clip / n
			}
		}
		for kk := 0; kk < k; kk++ {
			e := f * g[kk]
			row := dst[kk*p : (kk+1)*p]
			for j, v := range a {
				row[j] += e * v
			}
		}
	}
}

// proxMulti minimizes F(x) = f_i(x) + ||x - v||^2/(2 gamma) for the multinomial loss by
// Newton's method with conjugate-gradient directions (Hessian-vector products, never the
// (Kp)^2 Hessian) and a backtracking line search, to a gradient norm of 1e-10 in at most
// 100 Newton steps. F is (1/gamma)-strongly convex, so CG converges and the solution is
// unique; every call starts at v, so the result is a function of the inputs alone (as
// proxLogistic).
func (l *LocalLoss) proxMulti(dst, v []float64, gamma float64) error {
	d, k := l.shard, l.k
	n, p := len(v), d.Cols
	if l.mw == nil {
		l.mw = newMultiWork(d.Rows, k, n)
	}
	s := l.mw
	x := s.x
	copy(x, v)
	mu := 1 / gamma
	// rowLoss fills lv with every row's loss at x (the data term is c sum lv).
	rowLoss := func(lv, x []float64) {
		for r := 0; r < d.Rows; r++ {
			multiScores(s.m, d.Row(r), x)
			lv[r] = multiValue(s.m, classOf(d.Y[r]))
		}
	}
	rowLoss(s.lv, x)
	var gn float64 // the gradient norm at x, the point returned
	for it := 0; ; it++ {
		// Gradient and the softmax of every row (for the Hessian products).
		g := s.g
		clear(g)
		for r := 0; r < d.Rows; r++ {
			a := d.Row(r)
			q := s.q[r*k : (r+1)*k]
			multiScores(s.m, a, x)
			Softmax(q, s.m)
			y := classOf(d.Y[r])
			for kk := 0; kk < k; kk++ {
				e := q[kk]
				if kk == y {
					e--
				}
				e *= l.c
				row := g[kk*p : (kk+1)*p]
				for j, av := range a {
					row[j] += e * av
				}
			}
		}
		for j := range g {
			g[j] += mu * (x[j] - v[j])
		}
		gn = math.Sqrt(dot(g, g))
		if !(gn == gn) || math.IsInf(gn, 0) {
			return fmt.Errorf("consensus: prox: the multinomial objective is not finite")
		}
		if gn <= 1e-10 || it == 200 {
			break
		}
		l.multiCG(s.dir, g, mu, gn)
		// Backtracking line search on F along dir (a descent direction: H is positive
		// definite and CG's iterates decrease the model). The decrease is computed as a
		// sum of differences (row losses, and the quadratic's exact expansion), not as a
		// difference of two large sums: near the solution F(x) is dominated by
		// mu ||x - v||^2/2, whose rounding would otherwise hide every decrease and let a
		// step of negligible length pass the test.
		t, slope := 1.0, dot(g, s.dir)
		xv := 0.0
		for j := range x {
			xv += s.dir[j] * (x[j] - v[j])
		}
		dd := dot(s.dir, s.dir)
		improved := false
		// A predicted decrease below the rounding of the row losses cannot be measured:
		// then the full Newton step is taken (the quadratic region, where it converges
		// quadratically), as Newton.Solve's FullStep does.
		floor := 0.0
		for _, lr := range s.lv {
			floor += math.Abs(lr)
		}
		if -slope <= 1e-13*(1+l.c*floor) {
			slope = 0
		}
		for ls := 0; ls < 60 && slope < 0; ls++ {
			for j := range x {
				s.xt[j] = x[j] + t*s.dir[j]
			}
			rowLoss(s.lt, s.xt)
			dl := 0.0
			for r := range s.lt {
				dl += s.lt[r] - s.lv[r]
			}
			df := l.c*dl + mu*t*xv + 0.5*mu*t*t*dd
			if df <= 1e-4*t*slope {
				copy(x, s.xt)
				s.lv, s.lt = s.lt, s.lv
				improved = true
				break
			}
			t /= 2
		}
		if !improved {
			// No decrease measurable at any step length: the full (inexact) Newton step
			// (locally quadratically convergent on this strongly convex F); the next
			// pass measures its gradient, and the certification below decides.
			for j := range x {
				x[j] += s.dir[j]
			}
			rowLoss(s.lv, x)
		}
	}
	if !(gn <= ProxTolerance) {
		return fmt.Errorf("%w: gradient norm %.3g", ErrProxInexact, gn)
	}
	copy(dst, x)
	return nil
}

// multiCG sets dir to an approximate solution of H dir = -g by conjugate gradients, H the
// Hessian at the point whose softmaxes are in mw.q.
func (l *LocalLoss) multiCG(dir, g []float64, mu, gn float64) {
	s := l.mw
	r, pd, hp := s.r, s.pd, s.hp
	clear(dir)
	for j := range g {
		r[j] = -g[j]
	}
	copy(pd, r)
	rr := dot(r, r)
	tol := math.Min(0.1, math.Sqrt(gn)) * gn // inexact Newton: superlinear near the solution
	for it := 0; it < 4*len(g)+20 && math.Sqrt(rr) > tol; it++ {
		l.multiHv(hp, pd, mu)
		den := dot(pd, hp)
		if !(den > 0) {
			break
		}
		alpha := rr / den
		for j := range dir {
			dir[j] += alpha * pd[j]
			r[j] -= alpha * hp[j]
		}
		rn := dot(r, r)
		beta := rn / rr
		rr = rn
		for j := range pd {
			pd[j] = r[j] + beta*pd[j]
		}
	}
}

// multiHv sets dst = H u: c sum_r [(diag(q_r) - q_r q_r^T) (U a_r)] (x) a_r + mu u.
func (l *LocalLoss) multiHv(dst, u []float64, mu float64) {
	d, k, s := l.shard, l.k, l.mw
	p := d.Cols
	for j := range dst {
		dst[j] = mu * u[j]
	}
	for r := 0; r < d.Rows; r++ {
		a := d.Row(r)
		q := s.q[r*k : (r+1)*k]
		multiScores(s.m, a, u) // U a
		qs := 0.0
		for kk, qk := range q {
			qs += qk * s.m[kk]
		}
		for kk, qk := range q {
			e := l.c * qk * (s.m[kk] - qs)
			row := dst[kk*p : (kk+1)*p]
			for j, av := range a {
				row[j] += e * av
			}
		}
	}
}

// multiWork is the scratch of the multinomial prox.
type multiWork struct {
	x, xt, g, dir, r, pd, hp []float64
	lv, lt                   []float64 // per-row losses at x and at the trial point
	q                        []float64 // rows x K softmaxes
	m                        []float64 // K scores
}

func newMultiWork(rows, k, n int) *multiWork {
	f := func() []float64 { return make([]float64, n) }
	return &multiWork{x: f(), xt: f(), g: f(), dir: f(), r: f(), pd: f(), hp: f(), q: make([]float64, rows*k), m: make([]float64, k),
		lv: make([]float64, rows), lt: make([]float64, rows)}
}
