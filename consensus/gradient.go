package consensus

import "math"

// Gradient oracles for gradient-based local steps (gradient ADMM on the walk).
//
// Per-example clipping of a generalised linear loss is itself the gradient of a convex loss
// with the same smoothness. Row r contributes phi_r(a_r.w) with phi_r convex and
// continuously differentiable (phi_r' nondecreasing and s-Lipschitz, s = 1 for the squared
// loss, 1/4 for the logistic loss). Its per-example gradient phi_r'(a_r.w) a_r has norm
// |phi_r'(a_r.w)| ||a_r||, so clipping that norm at C gives psi_r'(a_r.w) a_r with
//
//	psi_r' = clamp(phi_r', -C/||a_r||, C/||a_r||).
//
// A clamp is nondecreasing and 1-Lipschitz, so psi_r' is nondecreasing (psi_r is convex) and
// s-Lipschitz (psi_r is s-smooth): the clipped gradient of f_i is exactly the gradient of
// the convex function c sum_r psi_r(a_r.w) (a Huber-type loss), whose smoothness constant is
// at most that of f_i. A gradient method that calls ClippedRowGrad is therefore a gradient method
// on a convex, Smoothness()-smooth function, which is what amplification by iteration needs
// of every later step.

// ClippedRowGrad sets dst to the per-example clipped gradient of f_i at w:
//
//	dst = c sum_r clamp(phi_r'(a_r.w), -clip/||a_r||, clip/||a_r||) a_r,   c = Weight/Rows,
//
// i.e. each row's gradient phi_r'(a_r.w) a_r is scaled to norm at most clip before the sum.
// Hence ||dst|| <= c Rows clip = Weight clip whatever the rows hold, and two shards of the
// same row count give gradients within 2 Weight clip of each other (1 + a relative error of
// at most (Cols + Rows + 8) 2^-53 from the floating-point arithmetic). clip = +Inf gives the
// plain gradient. dst must not alias w; clip must be > 0.
func (l *LocalLoss) ClippedRowGrad(dst, w []float64, clip float64) {
	clear(dst)
	if l.loss == Multinomial {
		multiGradRows(dst, w, l.shard, l.k, l.c, clip, l.mk, l.gk)
		return
	}
	for r := 0; r < l.shard.Rows; r++ {
		a := l.shard.Row(r)
		d := l.loss.deriv(dot(a, w), l.shard.Y[r])
		if nr := math.Sqrt(dot(a, a)); nr > 0 {
			if lim := clip / nr; math.Abs(d) > lim {
				d = math.Copysign(lim, d)
			}
		}
		c := l.c * d
		for j, v := range a {
			dst[j] += c * v
		}
	}
}

// Smoothness returns an upper bound nu on the smoothness constant of f_i (and of its
// per-example clipped form, see ClippedRowGrad): ||grad f_i(x) - grad f_i(x')|| <= nu ||x - x'||.
// The Hessian of f_i is c A^T diag(d2) A with d2 the second derivatives of the rows' losses, d2 <= s (s = 1 squared, 1/4 logistic), so
// nu = c s lambda_max(A^T A), c = Weight/Rows. lambda_max(A^T A) = ||A||_2^2 is bounded above
// by min(||A||_F^2, ||A||_1 ||A||_inf) (Frobenius, and Holder's ||A||_2^2 <= ||A||_1 ||A||_inf):
// both are exact upper bounds, where power iteration would give only a lower estimate. The
// Frobenius bound is exact for a one-row shard. The result is rounded up by a relative
// margin covering the floating-point sums.
func (l *LocalLoss) Smoothness() float64 {
	d := l.shard
	var fro, rowMax float64
	col := make([]float64, d.Cols)
	for r := 0; r < d.Rows; r++ {
		rs := 0.0
		for j, v := range d.Row(r) {
			fro += v * v
			rs += math.Abs(v)
			col[j] += math.Abs(v)
		}
		rowMax = math.Max(rowMax, rs)
	}
	colMax := 0.0
	for _, v := range col {
		colMax = math.Max(colMax, v)
	}
	b := math.Min(fro, colMax*rowMax)
	s := l.loss.Curvature()
	margin := 1 + float64(d.Rows+d.Cols+8)*0x1p-52
	return l.c * s * b * margin
}
