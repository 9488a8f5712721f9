package walk

import (
	"fmt"
	"math"

	"github.com/dpadmm/dpadmm/privacy"
)

// The noisy update on the lattice.
//
// What a peer sees of node i's noisy update is the token it produces: zhat' = zhat + du/n and
// z' = prox_{gamma r}(zhat'). If du were the floating-point sum of the data part v = 2 lambda
// Clip(x - z, C) and a noise sample lying on the lattice hZ (the secure sampler's output), then
// (zhat' - zhat) n mod h would be v mod h: the low-order bits of the data part, in the clear,
// whatever sigma is. An observer who knows the token i received tells two neighbouring
// datasets apart with certainty from one update.
//
// With noise (Sigma > 0) the update is therefore computed on the lattice of the noise:
//
//	h    = privacy.Granularity(lambda sigma)      the secure sampler's step at std lambda sigma
//	R_k  = round(v_k / h)                         the data part rounded onto hZ (ties to even)
//	Y_k  = round(lambda eta_k / h)                the noise in lattice units (exact for the
//	                                              secure sampler, whose output is h times an
//	                                              integer; a rounding of the seeded one)
//	du_k = h (R_k + Y_k)
//
// and u_i += du, zhat += du/n, z = prox_{gamma r}(zhat) as before. h is a power of two, so
// v_k/h and h (R_k + Y_k) are exact; the rounding of the integer sum R_k + Y_k (only for sums
// beyond 2^53) depends on the sum alone. The released token (zhat', z') is thus a
// deterministic function of the previous token (public state) and of the integer vector
// N = R + Y: nothing of v reaches the wire except through N.
//
// N is the discrete Gaussian mechanism (Canonne, Kamath, Steinke 2020, Theorem 14: integer
// vector query, independent discrete Gaussians of parameter lambda sigma / h per coordinate,
// (Delta^2 / (2 s^2))-zCDP, i.e. the Renyi curve of the continuous Gaussian) applied to the
// integer query R. Its l2 sensitivity, in units of h, is at most
//
//	||R - R'|| <= ||v - v'|| / h + ||e - e'|| <= 4 lambda C' / h + sqrt(p),
//
// where e, e' are the rounding errors (each coordinate in [-1/2, 1/2]) and C' is the clip the
// machine applies. LatticeClip chooses C' = C - h sqrt(p) / (4 lambda) (less a relative margin
// for the floating-point error of the clipping itself), so that the sensitivity in u units is
// at most 4 lambda C: the accountant's figures, the ledger's sensitivity 4 lambda C and every
// formula in terms of the configured C stay exact upper bounds. The reduction is about
// 2^-41 sigma sqrt(p), far below any useful C.
//
// Without noise (Sigma = 0) there is no privacy to protect and the update is the plain
// floating-point one (and its assembly kernels).

// LatticeClip returns the noise lattice step h = privacy.Granularity(lambda*sigma) of a noisy
// walk update of dimension dim, and the clip C' <= clip that the update applies so that the
// data part rounded onto hZ has l2 sensitivity at most 4 lambda clip (see the comment above).
// It fails when sigma is too small for the lattice (h underflows) or clip is too small to
// absorb the rounding (C' <= 0).
func LatticeClip(clip, lambda, sigma float64, dim int) (h, clipEff float64, err error) {
	if !(sigma > 0) || !(lambda > 0) || dim < 1 || !(clip > 0) {
		return 0, 0, fmt.Errorf("walk: lattice: need sigma > 0, lambda > 0, clip > 0 and dim >= 1, got %v, %v, %v, %d", sigma, lambda, clip, dim)
	}
	h = privacy.Granularity(lambda * sigma)
	if !(h > 0) || math.IsInf(1/h, 0) {
		return 0, 0, fmt.Errorf("walk: lattice: noise std lambda*sigma = %v is too small for the secure sampler's lattice", lambda*sigma)
	}
	// sqrt(p) rounded up, and the slack h sqrt(p) / (4 lambda) rounded up.
	root := math.Nextafter(math.Sqrt(float64(dim)), math.Inf(1))
	slack := h * root / (4 * lambda) * (1 + 0x1p-50)
	// The clip decision compares a computed norm (relative error below (dim+4) 2^-53) and
	// the data part is a rounded product: a relative margin of (dim+64) 2^-52 covers both.
	clipEff = (clip - slack) * (1 - float64(dim+64)*0x1p-52)
	if !(clipEff > 0) {
		return 0, 0, fmt.Errorf("walk: lattice: clip %v is too small for the noise lattice (needs more than %v at sigma %v, dimension %d)", clip, slack, sigma, dim)
	}
	// Below 2^-400 the squares of a difference that needs clipping could underflow, and a
	// computed norm of 0 would skip the clip; with C' >= 2^-400 any vector whose squares
	// underflow is far inside the clip.
	if clipEff < 0x1p-400 {
		return 0, 0, fmt.Errorf("walk: lattice: clip %v is too small (below 2^-400 after the lattice margin)", clip)
	}
	return h, clipEff, nil
}

// applyLattice is apply for a noisy update: with d = g when g != nil, else
// d_k = (z_k - u_k) + s a_k, and lambda eta in eta,
//
//	q_k  = round(sc d_k / h) + round(eta_k / h)
//	du_k = h q_k;  u += du;  zhat += du/n;  z = prox_{gamma r}(zhat).
//
// The integers q are computed first (into eta) and checked: a non-finite q (a token whose
// finite coordinates overflow the update, an unclipped NaN norm) would release the signs of
// the data part whatever the noise, so the token is refused with ErrNotFinite before
// anything is written. The explicit float64 conversions keep products from being fused
// into multiply-adds, so that every architecture computes the same bits.
func (m *Machine) applyLattice(g, a []float64, s, sc float64, z, zhat, eta []float64) error {
	n := len(z)
	u, zhat, q := m.u[:n], zhat[:n], eta[:n]
	h, hinv, inv, t, sh := m.h, m.hinv, m.inv, m.t, m.sh
	var chk float64
	if g != nil {
		g = g[:n]
		for k := range q {
			q[k] = math.RoundToEven(float64(float64(sc*g[k])*hinv)) + math.RoundToEven(float64(q[k]*hinv))
			chk += q[k] * 0
		}
	} else {
		a = a[:n]
		for k := range q {
			d := float64(sc * ((z[k] - u[k]) + float64(s*a[k])))
			q[k] = math.RoundToEven(float64(d*hinv)) + math.RoundToEven(float64(q[k]*hinv))
			chk += q[k] * 0
		}
	}
	for k := range q { // the new u and zhat too, before anything is written
		du := float64(q[k] * h)
		chk += (u[k]+du)*0 + (zhat[k]+float64(du*inv))*0
	}
	if chk != 0 { // x*0 is 0 for finite x, NaN otherwise
		return ErrNotFinite
	}
	for k := range z {
		du := float64(q[k] * h)
		u[k] += du
		zh := zhat[k] + float64(du*inv)
		zhat[k] = zh
		z[k] = soft(zh, t, sh)
	}
	return nil
}
