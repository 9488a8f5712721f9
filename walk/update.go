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
//
// A token with a NaN or infinite coordinate is refused with ErrNotFinite before anything is
// written or any noise is drawn: u_i, z and zhat are then unchanged.
func (m *Machine) update(z, zhat []float64) error {
	n := m.dim
	z, zhat = z[:n], zhat[:n]
	var err error
	switch k := m.cfg.Step.Kind; {
	case k == StepSGD || k == StepGADMM:
		return m.updateStep(z, zhat) // their own prox (sgd.go, gadmm.go)
	case k != StepProx:
		err = m.updateStep(z, zhat)
	case m.rankOne:
		err = m.updateRankOne(m.r1, z, zhat)
	default:
		err = m.updateProx(z, zhat)
	}
	if err == nil {
		// The z-step is z = prox_{gamma r}(zhat); r leaves the intercept alone (Reg.Free), so
		// its coordinate is zhat's. The sweeps apply one prox to every coordinate; the free
		// ones are set back here, the same bits on every path.
		if r := m.cfg.Reg; r.Free > 0 {
			for k := range z {
				if r.Unpenalised(k, n) {
					z[k] = zhat[k]
				}
			}
		}
	}
	return err
}

// updateProx is the StepProx update of a general f_i (see update).
func (m *Machine) updateProx(z, zhat []float64) error {
	c := &m.cfg
	n := m.dim
	if !allFinite(z, zhat) {
		return ErrNotFinite
	}
	x, g, u := m.x, m.g[:n], m.u[:n]
	for k := range x {
		x[k] = float64(2*z[k]) - u[k]
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
		n0 += float64(d0 * d0)
		n1 += float64(d1 * d1)
	}
	for ; k < n; k++ {
		d := x[k] - z[k]
		g[k] = d
		n0 += float64(d * d)
	}
	return m.apply(g, nil, 0, m.scale(n0+n1), z, zhat, m.noise(n))
}

// sums8 is the pure-Go form of sumsKernel over the first n8 coordinates (n8 a multiple of 8):
// the same lane sums in the same order, four lanes at a time.
//
// In this file the explicit float64 conversions of products (float64(x*y) + z) keep the
// compiler from fusing them into a multiply-add (which it may do on arm64, or on amd64 with
// GOAMD64=v3): every product is rounded, as in the assembly kernels, so that all paths give
// the same bits on every architecture.
func sums8(z, zhat, u, a []float64, n8 int, o *[36]float64) {
	z, zhat, u, a = z[:n8], zhat[:n8], u[:n8], a[:n8]
	for j := 0; j < 8; j += 4 {
		var az0, az1, az2, az3, aw0, aw1, aw2, aw3, ww0, ww1, ww2, ww3, h0, h1, h2, h3 float64
		for k := j; k+4 <= n8; k += 8 {
			zz, hh, uu, aa := z[k:k+4:k+4], zhat[k:k+4:k+4], u[k:k+4:k+4], a[k:k+4:k+4]
			w0, w1, w2, w3 := zz[0]-uu[0], zz[1]-uu[1], zz[2]-uu[2], zz[3]-uu[3]
			az0 += float64(aa[0] * zz[0])
			az1 += float64(aa[1] * zz[1])
			az2 += float64(aa[2] * zz[2])
			az3 += float64(aa[3] * zz[3])
			aw0 += float64(aa[0] * w0)
			aw1 += float64(aa[1] * w1)
			aw2 += float64(aa[2] * w2)
			aw3 += float64(aa[3] * w3)
			ww0 += float64(w0 * w0)
			ww1 += float64(w1 * w1)
			ww2 += float64(w2 * w2)
			ww3 += float64(w3 * w3)
			h0 += hh[0]
			h1 += hh[1]
			h2 += hh[2]
			h3 += hh[3]
		}
		o[j], o[j+1], o[j+2], o[j+3] = az0, az1, az2, az3
		o[8+j], o[9+j], o[10+j], o[11+j] = aw0, aw1, aw2, aw3
		o[16+j], o[17+j], o[18+j], o[19+j] = ww0, ww1, ww2, ww3
		o[24+j], o[25+j], o[26+j], o[27+j] = h0, h1, h2, h3
	}
}

// allFinite reports whether every coordinate of z and zhat is finite.
func allFinite(z, zhat []float64) bool { return AllFinite(z) && AllFinite(zhat) }

// AllFinite reports whether every coordinate of v is finite (no NaN, no Inf). It uses the
// assembly kernels where available.
func AllFinite(v []float64) bool {
	// v*0 is 0 for finite v and NaN for NaN or Inf, so the sums are 0 exactly when all are
	// finite; four partial sums keep the adder pipelined.
	c0, k := zerosKernel(v)
	var c1, c2, c3 float64
	for ; k+4 <= len(v); k += 4 {
		vv := v[k : k+4 : k+4]
		c0 += vv[0] * 0
		c1 += vv[1] * 0
		c2 += vv[2] * 0
		c3 += vv[3] * 0
	}
	for ; k < len(v); k++ {
		c0 += v[k] * 0
	}
	return (c0+c1)+(c2+c3) == 0
}

// noise fills the noise scratch with lambda eta, eta ~ N(0, sigma^2 I), and returns it, or
// returns nil when sigma = 0. The draw is made at std lambda*sigma directly, so that the
// secure sampler's output lies on the lattice of step m.h = Granularity(lambda*sigma) (a
// product lambda*eta would leave it).
func (m *Machine) noise(n int) []float64 {
	c := &m.cfg
	if !(c.Sigma > 0) {
		return nil
	}
	eta := m.eta[:n]
	c.Noise.Normal(eta, c.Lambda*c.Sigma)
	return eta
}

// scale returns the factor 2 lambda min(1, C/||d||) that turns d = x - z with ||d||^2 = nn
// into 2 lambda Clip(d, C). A NaN norm leaves d unclipped (the non-finite result is then
// refused by the next holder).
func (m *Machine) scale(nn float64) float64 {
	c := &m.cfg
	s := 2 * c.Lambda
	if norm := math.Sqrt(nn); norm > m.clip {
		s *= m.clip / norm
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
// with w = z - u (eight partial sums each, lane j for the coordinates k = j mod 8). Then d = x - z = w + s a, and
//
//	||d||^2 = ||w||^2 + 2 s a.w + s^2 ||a||^2.
//
// That expansion can cancel, so it only decides the clipping when a rigorous rounding bound
// proves ||d|| <= C as d is computed in pass 2: then the clip factor is 1 and pass 2
// computes d, u, zhat and z in one sweep. Otherwise d and its norm are computed directly
// (the same d, bit for bit) and clipped exactly as in the general path. Either way the
// result is that of the plain sequence of passes, only the number of sweeps differs.
//
// Both sweeps run over the longest prefix of a multiple of 8 (pass 1) or 4 (pass 2)
// coordinates in the kernels of kern.go (AVX2 or SSE2 assembly on amd64), which do the
// operations of the Go loops (sums8, apply) in the same order and so give the same bits; the
// Go loops finish the rest. Without noise the AVX2 kernel may do the whole update, the
// clipping decision included, in one call (rankOneKernel); it hands back to this code,
// having written nothing, when the token needs the finiteness check or the step may need
// clipping.
func (m *Machine) updateRankOne(r consensus.RankOne, z, zhat []float64) error {
	c := &m.cfg
	n := len(z)
	zhat, u, a := zhat[:n], m.u[:n], r.A[:n]
	if !(c.Sigma > 0) && rankOneKernel(z, zhat, u, a, &m.p1) {
		return nil // the whole noiseless update in one kernel call, same bits as below
	}
	// Lane j of o sums the terms of the coordinates k = j mod 8 in increasing k: o[j] for
	// a.z, o[8+j] for a.w, o[16+j] for ||w||^2; o[24:32] are partial sums of zhat.
	o := &m.o
	n8, reduced := sumsKernel(z, zhat, u, a, o)
	if n8 == 0 {
		n8 = n &^ 7
		sums8(z, zhat, u, a, n8, o)
	}
	var az, aw, ww, zs float64
	if reduced && n8 == n {
		az, aw, ww, zs = o[32], o[33], o[34], o[35]
	} else {
		for k := n8; k < n; k++ {
			j := k & 7
			w := z[k] - u[k]
			o[j] += float64(a[k] * z[k])
			o[8+j] += float64(a[k] * w)
			o[16+j] += float64(w * w)
			o[24+j] += zhat[k]
		}
		az = ((o[0] + o[1]) + (o[2] + o[3])) + ((o[4] + o[5]) + (o[6] + o[7]))
		aw = ((o[8] + o[9]) + (o[10] + o[11])) + ((o[12] + o[13]) + (o[14] + o[15]))
		ww = ((o[16] + o[17]) + (o[18] + o[19])) + ((o[20] + o[21]) + (o[22] + o[23]))
		zs = ((o[24] + o[25]) + (o[26] + o[27])) + ((o[28] + o[29]) + (o[30] + o[31]))
	}
	// The token check: with u finite, a NaN or Inf in z makes ||w||^2 NaN or Inf, and one in
	// zhat makes its sum NaN or Inf. Only then (or when the sums merely overflow) are the
	// coordinates checked one by one, and a bad token is refused before anything is written.
	if f := ww + zs; f-f != 0 && !allFinite(z, zhat) {
		return ErrNotFinite
	}
	eta := m.noise(n)
	s := r.K * (r.Y - (az + aw)) // a.v = a.(2z - u) = a.z + a.w

	if m.clipBound(ww, aw, s, n) <= m.clip {
		return m.apply(nil, a, s, 2*c.Lambda, z, zhat, eta)
	}
	g := m.g[:n]
	var n0, n1 float64
	k := 0
	for ; k+2 <= n; k += 2 {
		zz, uu, aa, gg := z[k:k+2:k+2], u[k:k+2:k+2], a[k:k+2:k+2], g[k:k+2:k+2]
		d0, d1 := (zz[0]-uu[0])+float64(s*aa[0]), (zz[1]-uu[1])+float64(s*aa[1])
		gg[0], gg[1] = d0, d1
		n0 += float64(d0 * d0)
		n1 += float64(d1 * d1)
	}
	for ; k < n; k++ {
		d := (z[k] - u[k]) + float64(s*a[k])
		g[k] = d
		n0 += float64(d * d)
	}
	return m.apply(g, nil, 0, m.scale(n0+n1), z, zhat, eta)
}

// clipBound returns an upper bound on ||d|| for d_k = w_k + s a_k as computed in the
// sweeps, from ww = ||w||^2 and aw = a.w as computed in pass 1: the expansion
// ||w||^2 + 2 s a.w + s^2 ||a||^2 is within gamma_{n+4} B^2 of the exact ||w + s a||^2,
// B = ||w|| + |s| ||a|| (whatever the order of the partial sums), and each d_k is within
// 2.01u (|w_k| + |s a_k|) of w_k + s a_k. rankOneAVX2 computes the same bits.
func (m *Machine) clipBound(ww, aw, s float64, n int) float64 {
	b := math.Sqrt(ww) + float64(math.Abs(s)*m.anorm)
	nn := ww + float64(s*(float64(2*aw)+float64(s*m.r1.Norm2)))
	if nn < 0 {
		nn = 0
	}
	return (math.Sqrt(nn+float64(float64(n+8)*sumMargin*b*b)) + float64(termMargin*b)) * cmpMargin
}

// apply is the final sweep: with d = g when g != nil, else d_k = (z_k - u_k) + s a_k,
//
//	du = sc d (+ lambda eta, see applyLattice);  u += du;  zhat += du/n;  z = prox_{gamma r}(zhat).
//
// prox_{gamma r} of r = L1 ||.||_1 + (L2/2) ||.||^2 is soft-thresholding at t = gamma L1 then
// shrinking by 1/(1 + gamma L2); it is applied to zhat, never to the previous z (digest 2.9).
// A noisy update (eta != nil) goes through applyLattice, which may refuse the token. The
// sweep here is the noiseless one: with g it refuses (ErrNotFinite, nothing written) an
// update whose result would not be finite; with a it is only called with a clipped d of
// norm at most C (updateRankOne's bound), which cannot overflow, and never fails.
func (m *Machine) apply(g, a []float64, s, sc float64, z, zhat, eta []float64) error {
	if eta != nil {
		return m.applyLattice(g, a, s, sc, z, zhat, eta)
	}
	n := len(z)
	u := m.u[:n]
	inv, t, sh := m.inv, m.t, m.sh
	zhat = zhat[:n]
	if g != nil {
		g = g[:n]
		// A token with huge finite coordinates can make d non-finite (a NaN or infinite
		// norm leaves d unclipped), or u + du and zhat + du/n overflow (ls-sgd does not clip
		// d): such a token is refused before anything is written, as in applyLattice, so
		// that u_i stays finite and no non-finite model is released.
		var chk float64
		for k := range z {
			du := sc * g[k]
			chk += (u[k]+du)*0 + (zhat[k]+float64(du*inv))*0
		}
		if chk != 0 { // x*0 is 0 for finite x, NaN otherwise
			return ErrNotFinite
		}
		for k := range z {
			du := sc * g[k]
			u[k] += du
			h := zhat[k] + float64(du*inv)
			zhat[k] = h
			z[k] = soft(h, t, sh)
		}
		return nil
	}
	a = a[:n]
	kk := &m.kk
	kk[0], kk[1], kk[2], kk[3], kk[4], kk[5], kk[6] = s, sc, inv, t, -t, sh, 0
	for k := sweepKernel(z, zhat, u, a, nil, kk); k < n; k++ {
		du := sc * ((z[k] - u[k]) + float64(s*a[k]))
		u[k] += du
		h := zhat[k] + float64(du*inv)
		zhat[k] = h
		z[k] = soft(h, t, sh)
	}
	return nil
}

// soft returns prox_{gamma r}(h) for one coordinate: soft-thresholding at t, then shrinking by
// sh; a NaN h gives a NaN, as in the assembly sweeps (which compute (h - clamp(h, -t, t)) sh,
// the same bits). The branches are kept: on a sparse model they are well predicted, and
// branch-free forms (builtin min/max, or sign-bit masks) measured slower here.
func soft(h, t, sh float64) float64 {
	switch {
	case h > t:
		return (h - t) * sh
	case h < -t:
		return (h + t) * sh
	case h == h:
		return 0
	}
	return h * sh
}
