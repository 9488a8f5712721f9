package walk

import (
	"fmt"
	"math"

	"github.com/dpadmm/dpadmm/consensus"
)

// update performs one noisy local step of Algorithm 4 on the received (z, zhat), in place:
//
//	x    = prox_{gamma f_i}(2z - u_i)
//	g    = Clip(x - z, C)
//	du   = 2 lambda g + lambda eta,  eta ~ N(0, sigma^2 I)     (eq. 7, noise std lambda sigma on u)
//	u_i += du
//	zhat += du / n
//	z    = prox_{gamma r}(zhat)
//
// The z-step proxes zhat, never the previous z: re-proxing an already-proxed z applies
// the soft-threshold cumulatively and collapses an L1 model (digest 2.9, DR-consistent form).
//
// When f_i is a squared loss over one row a (the one-row-per-node case), the prox is the
// rank-one map x = v + K (y - a.v) a, so x - z = (z - u) + s a with s = K (y - a.z - a.(z-u)):
// one pass computes a.z, a.(z-u) and ||z-u||^2, which give s and ||x - z|| without
// materialising v or x, and a second pass applies the whole update (see updateRankOne).
func (m *Machine) update(z, zhat []float64) error {
	c := &m.cfg
	n := len(m.x)
	z, zhat = z[:n], zhat[:n]
	if r, ok := m.loss.RankOne(c.Gamma); ok && len(r.A) == n {
		m.updateRankOne(r, z, zhat, m.noise(n))
		return nil
	}
	x, g, u := m.x, m.g[:n], m.u[:n]
	for k := range x {
		x[k] = 2*z[k] - u[k]
	}
	if err := m.loss.Prox(x, x, c.Gamma); err != nil {
		return fmt.Errorf("walk: local prox: %w", err)
	}
	var n0, n1 float64
	k := 0
	for ; k+2 <= n; k += 2 {
		xx, zz, gg := x[k:k+2:k+2], z[k:k+2:k+2], g[k:k+2:k+2]
		d0, d1 := xx[0]-zz[0], xx[1]-zz[1]
		gg[0], gg[1] = d0, d1
		n0 += d0 * d0
		n1 += d1 * d1
	}
	for ; k < n; k++ {
		d := x[k] - z[k]
		g[k] = d
		n0 += d * d
	}
	m.apply(g, nil, 0, m.scale(n0+n1), z, zhat, m.noise(n))
	return nil
}

// noise fills the noise scratch with eta ~ N(0, sigma^2 I) and returns it, or returns nil
// when sigma = 0.
func (m *Machine) noise(n int) []float64 {
	c := &m.cfg
	if !(c.Sigma > 0) {
		return nil
	}
	eta := m.eta[:n]
	c.Noise.Normal(eta, c.Sigma)
	return eta
}

// scale returns the factor 2 lambda min(1, C/||d||) that turns d = x - z with ||d||^2 = nn
// into 2 lambda Clip(d, C). A NaN norm leaves d unclipped (the non-finite result is then
// refused by the next holder).
func (m *Machine) scale(nn float64) float64 {
	c := &m.cfg
	s := 2 * c.Lambda
	if norm := math.Sqrt(nn); norm > c.Clip {
		s *= c.Clip / norm
	}
	return s
}

// Rounding margins of the a-priori clipping test in updateRankOne, with u = 2^-53 the unit
// roundoff and gamma_m = m u/(1 - m u) the bound on the relative error of an m-term sum.
const (
	sumMargin  = 0x1p-51     // (n+8) 4u >= 2 gamma_{n+4}: the expansion of ||d||^2, twice over
	termMargin = 0x1p-50     // 8u >= 4 x 2.01u: the elementwise rounding of d_k, twice over
	cmpMargin  = 1 + 0x1p-48 // the few roundings of the bound itself
)

// updateRankOne is update for a one-row squared loss. Pass 1 computes a.z, a.w and ||w||^2
// with w = z - u (four partial sums each). Then d = x - z = w + s a, and
//
//	||d||^2 = ||w||^2 + 2 s a.w + s^2 ||a||^2.
//
// That expansion can cancel, so it only decides the clipping when a rigorous rounding bound
// proves ||d|| <= C as d is computed in pass 2: then the clip factor is 1 and pass 2
// computes d, u, zhat and z in one sweep. Otherwise d and its norm are computed directly
// (the same d, bit for bit) and clipped exactly as in the general path. Either way the
// result is that of the plain sequence of passes, only the number of sweeps differs.
func (m *Machine) updateRankOne(r consensus.RankOne, z, zhat, eta []float64) {
	c := &m.cfg
	n := len(z)
	u, a := m.u[:n], r.A[:n]
	var az0, az1, az2, az3, aw0, aw1, aw2, aw3, ww0, ww1, ww2, ww3 float64
	k := 0
	for ; k+4 <= n; k += 4 {
		zz, uu, aa := z[k:k+4:k+4], u[k:k+4:k+4], a[k:k+4:k+4]
		w0, w1, w2, w3 := zz[0]-uu[0], zz[1]-uu[1], zz[2]-uu[2], zz[3]-uu[3]
		az0 += aa[0] * zz[0]
		az1 += aa[1] * zz[1]
		az2 += aa[2] * zz[2]
		az3 += aa[3] * zz[3]
		aw0 += aa[0] * w0
		aw1 += aa[1] * w1
		aw2 += aa[2] * w2
		aw3 += aa[3] * w3
		ww0 += w0 * w0
		ww1 += w1 * w1
		ww2 += w2 * w2
		ww3 += w3 * w3
	}
	for ; k < n; k++ {
		w := z[k] - u[k]
		az0 += a[k] * z[k]
		aw0 += a[k] * w
		ww0 += w * w
	}
	az := (az0 + az1) + (az2 + az3)
	aw := (aw0 + aw1) + (aw2 + aw3)
	ww := (ww0 + ww1) + (ww2 + ww3)
	s := r.K * (r.Y - (az + aw)) // a.v = a.(2z - u) = a.z + a.w

	// Upper bound on ||d|| for d_k = w_k + s a_k as computed below: the expansion is within
	// gamma_{n+4} B^2 of the exact ||w + s a||^2, B = ||w|| + |s| ||a||, and each d_k is
	// within 2.01u (|w_k| + |s a_k|) of w_k + s a_k.
	b := math.Sqrt(ww) + math.Abs(s)*math.Sqrt(r.Norm2)
	nn := ww + s*(2*aw+s*r.Norm2)
	bound := (math.Sqrt(max(nn, 0)+float64(n+8)*sumMargin*b*b) + termMargin*b) * cmpMargin
	if bound <= c.Clip {
		m.apply(nil, a, s, 2*c.Lambda, z, zhat, eta)
		return
	}
	g := m.g[:n]
	var n0, n1 float64
	k = 0
	for ; k+2 <= n; k += 2 {
		zz, uu, aa, gg := z[k:k+2:k+2], u[k:k+2:k+2], a[k:k+2:k+2], g[k:k+2:k+2]
		d0, d1 := (zz[0]-uu[0])+s*aa[0], (zz[1]-uu[1])+s*aa[1]
		gg[0], gg[1] = d0, d1
		n0 += d0 * d0
		n1 += d1 * d1
	}
	for ; k < n; k++ {
		d := (z[k] - u[k]) + s*a[k]
		g[k] = d
		n0 += d * d
	}
	m.apply(g, nil, 0, m.scale(n0+n1), z, zhat, eta)
}

// apply is the final sweep: with d = g when g != nil, else d_k = (z_k - u_k) + s a_k,
//
//	du = sc d + lambda eta (no noise when eta == nil);  u += du;  zhat += du/n;  z = prox_{gamma r}(zhat).
//
// prox_{gamma r} of r = L1 ||.||_1 + (L2/2) ||.||^2 is soft-thresholding at t = gamma L1 then
// shrinking by 1/(1 + gamma L2); it is applied to zhat, never to the previous z (digest 2.9).
func (m *Machine) apply(g, a []float64, s, sc float64, z, zhat, eta []float64) {
	c := &m.cfg
	n := len(z)
	u := m.u[:n]
	inv := 1 / float64(c.Nodes)
	t, sh := c.Gamma*c.Reg.L1, 1/(1+c.Gamma*c.Reg.L2)
	l := c.Lambda
	if eta == nil {
		l, eta = 0, z // only ever multiplied by l = 0 (z is finite): no noise
	}
	eta = eta[:n]
	zhat = zhat[:n]
	if g != nil {
		g = g[:n]
		for k := range z {
			du := sc*g[k] + l*eta[k]
			u[k] += du
			h := zhat[k] + du*inv
			zhat[k] = h
			z[k] = soft(h, t, sh)
		}
		return
	}
	a = a[:n]
	if l == 0 {
		for k := range z {
			du := sc * ((z[k] - u[k]) + s*a[k])
			u[k] += du
			h := zhat[k] + du*inv
			zhat[k] = h
			z[k] = soft(h, t, sh)
		}
		return
	}
	for k := range z {
		du := sc*((z[k]-u[k])+s*a[k]) + l*eta[k]
		u[k] += du
		h := zhat[k] + du*inv
		zhat[k] = h
		z[k] = soft(h, t, sh)
	}
}

// soft returns prox_{gamma r}(h) for one coordinate: soft-thresholding at t, then shrinking by
// sh. The branches are kept: on a sparse model they are well predicted, and branch-free forms
// (builtin min/max, or sign-bit masks) measured slower here.
func soft(h, t, sh float64) float64 {
	switch {
	case h > t:
		return (h - t) * sh
	case h < -t:
		return (h + t) * sh
	}
	return 0
}
