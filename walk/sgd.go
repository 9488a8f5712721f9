package walk

import (
	"math"

	"github.com/dpadmm/dpadmm/consensus"
)

// StepSGD: the private random-walk DP-SGD baseline (Cyffers and Bellet 2022, the
// random-walk DP-SGD that Cyffers, Bellet and Basu 2023 compare Algorithm 4's amplification
// with; their Prop. 1 writes DP-SGD as a noisy fixed-point iteration).
//
// The token is the model: theta = Token.Z. The holder takes one proximal stochastic
// gradient step on its data,
//
//	theta <- prox_{eta_k r}( theta - eta_k G ),   eta_k = StepSize(Eta, k),
//
// G the clipped, Poisson-sampled (rate q = StepParams.Rate; q = 1 is the full local batch),
// lattice-noised gradient estimate of f_i at theta (gradstep.go), k the node's own update
// counter, and sets Token.Zhat = Token.Z (the model; Zhat carries no separate state in this
// step). u_i is not used. Since the walk visits nodes uniformly on the complete graph and
// f_i = w_i (mean loss of node i) with sum_i w_i (mean loss_i) = n (mean loss), E_i f_i is the
// global mean loss: the walk is proximal SGD on mean loss + r.
//
// Privacy. Per update, the Gaussian mechanism on the clipped sum with noise multiplier
// sigma/C, Poisson-subsampled at rate q (record-level, one row of node i replaced: see
// privacy.SubsampledReplaceCurve): the
// ledger entry is "subsampled" (privacy.MechSubsampled). The pairwise (network) figure of
// privacy.SGDPlannedCurve uses amplification by iteration on theta, which needs every
// holder's map theta -> prox(theta - eta_k G(theta)) to be non-expansive: true when G is
// the gradient of a convex, beta-smooth function and eta_k <= 2/beta. For the losses here
// (generalized linear: loss(a.theta, y), convex in the margin) a clipped per-example
// gradient clip(loss'(a.theta) a, C) = psi(a.theta) a with psi the derivative clamped to
// +-C/||a||, still the derivative of a convex function with the same curvature bound, so
// G is the gradient of a convex function that is beta-smooth with
// beta <= c_q Curvature sum_r ||a_r||^2 (SGDSmoothness), whatever the sample. [Doubtful]
// the lattice rounding makes the map non-expansive only up to an additive c_q eta_k h
// sqrt(p) |B| (h about 2^-40 sigma), which the pairwise figure neglects.

// updateSGD performs one StepSGD update on the token in place.
func (m *Machine) updateSGD(z, zhat []float64) error {
	if !allFinite(z, zhat) {
		return ErrNotFinite
	}
	c := &m.cfg
	n := len(z)
	if err := m.gradient(z); err != nil {
		return err
	}
	eta := StepSize(c.Step.Eta, m.upd+1)
	t, sh := eta*c.Reg.L1, 1/(1+eta*c.Reg.L2)
	g := m.st.grad[:n]
	zhat = zhat[:n]
	// The new model, checked before anything is written.
	var chk float64
	for k := range g {
		chk += (z[k] - float64(eta*g[k])) * 0
	}
	if chk != 0 {
		return ErrNotFinite
	}
	for k, v := range g {
		w := z[k] - float64(eta*v)
		if !c.Reg.Unpenalised(k, n) { // the intercept (Reg.Free) is not penalised: no prox
			w = soft(w, t, sh)
		}
		z[k], zhat[k] = w, w
	}
	return nil
}

// SGDSmoothness returns beta = c_q Curvature sum_r ||a_r||^2 with c_q = w_i/(q m_i): a
// smoothness constant of every clipped sampled gradient estimate of StepSGD (and StepLSSGD)
// on loss l at rate q (see above). The step is non-expansive when Eta <= 2/beta.
func SGDSmoothness(l *consensus.LocalLoss, rate float64) float64 {
	s := 0.0
	for r := 0; r < l.Rows(); r++ {
		a, _ := l.Example(r)
		s += dotSeq(a, a)
	}
	return l.Weight() / (rate * float64(l.Rows())) * l.Loss().Curvature() * s
}

// SGDNonExpansive reports whether the configured StepSGD step Eta (the largest of the
// schedule) satisfies Eta <= 2/SGDSmoothness, the condition of the pairwise figure
// (privacy.WalkRun.SGDNonExpansive needs it on EVERY node). It is false for other steps.
func (m *Machine) SGDNonExpansive() bool {
	if m.cfg.Step.Kind != StepSGD || m.st == nil {
		return false
	}
	return SGDCertified(m.loss, m.cfg.Step.Eta, m.st.q)
}

// SGDCertified reports whether an sgd step of size eta at rate q on loss l is certified
// non-expansive: a generalized linear loss (one score per row; the clipped gradient is
// then the gradient of a convex, SGDSmoothness-smooth function, see above) and eta <=
// 2/SGDSmoothness. The multinomial loss is not certified: its per-example gradient is
// clipped as a K x p whole, and a vector field scaled down by a factor of its own norm is
// in general not the gradient of any function, so the convexity argument of the one-score
// case does not carry over; its runs get the local figure, which needs only the clip.
func SGDCertified(l *consensus.LocalLoss, eta, q float64) bool {
	if l.Classes() > 0 {
		return false
	}
	b := SGDSmoothness(l, q)
	return eta*b <= 2 && !math.IsNaN(b)
}
