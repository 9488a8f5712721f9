package walk

import (
	"errors"
	"fmt"
	"math"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
)

// Gradient (linearized) ADMM with privacy amplification by iteration (Chan, Xie, Zhao 2023,
// Algorithm 1 with noise on x, digest gradient-admm-amplification.md 2.2-2.3) as the local
// step of the walk.
//
// Consensus form: minimize (1/n) sum_i f_i(x) + g(y) subject to x - y = 0 (A = I, B = -I,
// c = 0), g the run's public regularizer Reg (L1 ||y||_1 + (L2/2) ||y||^2). The token carries
// Z = x~ (the released model) and Zhat = lambda; a node keeps no private state. The holder of
// the token (x~, lambda) makes, in this order (digest 2.2):
//
//	1-2. y       = G(lambda - beta x~) = prox_{g/beta}(x~ - lambda/beta)
//	                (elastic net: S_{L1}(beta x~ - lambda)/(beta + L2), coordinate-wise)
//	3.   lambda' = lambda - beta (x~ - y)                           (no data, no noise)
//	4.   q       = grad F_i(x~)                                     (the one private access)
//	5.   x       = (x~ - eta (q - beta y - lambda')) / (1 + eta beta)
//	6-7. x~'     = x + N,  N ~ N(0, sigma^2 I) on all of x
//
// and hands (x~', lambda') on. With g = 0 and lambda = 0 this is noisy gradient descent with
// step eta/(1 + eta beta) (digest 2.3). NewToken gives the public initial state x~0 = 0,
// lambda0 = 0 (prox_{gamma r}(0) = 0); a node's u_i stays 0 and its checkpoint carries only
// K_i.
//
// The gradient oracle. F_i is f_i with every row's gradient clipped to norm Clip
// (consensus.LocalLoss.ClippedRowGrad). For these generalised linear losses the clipped
// gradient is the exact gradient of a convex Huber-type loss with the same smoothness bound
// nu = LocalLoss.Smoothness() (see consensus/gradient.go), so the paper's requirement on
// every later step (f convex and 1/eta-smooth, Lemma 6.5) holds with eta <= 1/nu. Clipping,
// rather than normalising the rows, keeps the objective's small-gradient region exact.
//
// Sensitivity. Neighbouring is node-level, as for the prox step: any change of node i's rows
// (same row count). With c = Weight/Rows each clipped row gradient has norm <= Clip, so
// ||q|| <= c Rows Clip = Weight Clip and ||q - q'|| <= Delta = 2 Weight Clip (covering one
// changed row, 2 c Clip, a fortiori). The x-step moves by (eta/(1 + eta beta)) (q - q'), so
// the pre-noise x moves by at most eta Delta (the paper's Cor. 6.2 bound, dropping the
// factor 1/(1 + eta beta) <= 1): the ledger entry is a Gaussian mechanism with sensitivity
// eta Delta and noise std sigma.
//
// The strongly convex mode (StepParams.Strong). Clipped losses have linear tails and are
// never strongly convex, so the strong convexity comes from the public regularizer: half of
// the L2 term moves into the local function, F~_i(x) = F_i(x) + (mu/2) ||x||^2 with
// mu = L2/2, and g~(y) = L1 ||y||_1 + (L2/4) ||y||^2 is mu_g = L2/2 strongly convex. At
// x = y the objective is unchanged; the moved term is data-free, so Delta is unchanged. The
// step needs Reg.L2 > 0 and eta inside interval (23) for nu = Smoothness() + mu.
//
// The release on the lattice (as lattice.go for the prox step). With noise, everything
// released is a deterministic function of the public state and of an integer vector:
//
//	h    = privacy.Granularity(sigma)
//	P_k  = round(b_k / h),  b_k = (x~_k - eta (mu x~_k - beta y_k - lambda'_k)) / (1 + eta beta)   public
//	R_k  = round(-e q_k / h),  e = eta / (1 + eta beta)                                  the data part
//	Y_k  = round(N_k / h)                              exact for the secure sampler
//	x~'_k = h (P_k + (R_k + Y_k))
//
// lambda' and y are computed from the received (public) token alone. R + Y is the discrete
// Gaussian mechanism on the integer query R (Canonne, Kamath, Steinke 2020, Thm 14); its l2
// sensitivity in units of h is at most ||e (q - q')||/h + sqrt(p) (rounding errors in
// [-1/2, 1/2] per coordinate). The step applies the reduced clip
// C' = (C - h sqrt(p)/(2 Weight eta)) (1 - (p + Rows + 64) 2^-52) (the relative margin covers
// the floating-point error of the clipped sum and of e q), so that h times that sensitivity is
// at most eta 2 Weight C = eta Delta with the configured C: the ledger's sensitivity stays an
// exact upper bound. Without noise the step is the plain floating-point one.

// MechGADMM is the ledger mechanism of one noisy gradient-ADMM iteration.
const MechGADMM = privacy.MechGADMM

// GADMMSetting is what a node's gradient-ADMM step derives from its configuration and local
// loss (GADMMCheck).
type GADMMSetting struct {
	// Nu bounds the smoothness of the node's local function (F_i, plus mu in the strongly
	// convex mode).
	Nu float64
	// Mu and MuG are the strong convexity of the local function and of g~ (0 in the convex
	// mode).
	Mu, MuG float64
	// G is the regularizer of the y-step: Reg, or Reg with half its L2 weight in the
	// strongly convex mode.
	G consensus.Regularizer
	// Delta = 2 Weight Clip bounds sup_x ||q - q'||; Sensitivity = Eta Delta.
	Delta, Sensitivity float64
	// H is the noise lattice step and ClipEff the reduced per-example clip C' (0 and Clip
	// without noise).
	H, ClipEff float64
	// Strong holds the constants of the strongly convex mode (zero in the convex mode).
	Strong privacy.GADMMStrongConstants
	// Uncertified says why amplification by iteration does not apply ("" when it may):
	// privacy.GADMMParams.Uncertified.
	Uncertified string
}

// ErrGADMMParams wraps every refusal of gradient-ADMM parameters.
var ErrGADMMParams = errors.New("walk: gadmm")

// validateGADMM checks the gradient-ADMM parameters that do not need the data.
func (c Config) validateGADMM() error {
	s := c.Step
	switch {
	case !(s.Eta > 0) || math.IsInf(s.Eta, 0):
		return fmt.Errorf("%w: eta must be > 0 and finite, got %v", ErrGADMMParams, s.Eta)
	case !(s.Beta > 0) || math.IsInf(s.Beta, 0):
		return fmt.Errorf("%w: beta must be > 0 and finite, got %v", ErrGADMMParams, s.Beta)
	case !(c.Sigma >= 0):
		return fmt.Errorf("%w: sigma must be >= 0, got %v", ErrGADMMParams, c.Sigma)
	case s.Strong && !(c.Reg.L2 > 0):
		return fmt.Errorf("%w: the strongly convex mode needs an L2 regularizer > 0 (clipped losses are not strongly "+
			"convex; half of the public L2 term makes both the local function and g strongly convex), got l2 = %v",
			ErrGADMMParams, c.Reg.L2)
	}
	return nil
}

// GADMMCheck validates the gradient-ADMM step of cfg for a node with local loss f_i and
// returns its derived setting: the data-free checks of Config.Validate, then, in the convex
// mode, eta <= 1/nu with nu = loss.Smoothness(); in the strongly convex mode, eta inside
// interval (23) for nu = Smoothness() + mu, mu = mu_g = L2/2 (privacy.StrongConstants, whose
// error names the failing condition); with noise, the lattice step and reduced clip. New
// calls it for a StepGADMM machine; a driver may call it first to print the reason of a
// refusal. Every error wraps ErrGADMMParams.
func GADMMCheck(cfg Config, loss *consensus.LocalLoss, dim int) (GADMMSetting, error) {
	var st GADMMSetting
	if err := cfg.validateGADMM(); err != nil {
		return st, err
	}
	if loss == nil || dim < 1 {
		return st, fmt.Errorf("%w: a local loss and dimension >= 1 are required", ErrGADMMParams)
	}
	if loss.Classes() > 0 {
		// The local figure needs only the clip (Delta bounds the clipped sum for any loss);
		// the amplification of the realised figure needs the steps to be gradient steps on
		// a convex smooth function, which the whole-vector clip of the multinomial loss
		// does not give (see SGDCertified).
		st.Uncertified = fmt.Sprintf("the multinomial loss (%d classes) clips each example's K x p gradient as a whole, "+
			"which is not the gradient of a convex function: no amplification by iteration is claimed", loss.Classes())
	}
	s := cfg.Step
	st.G = cfg.Reg
	// Gradient ADMM penalises every coordinate, the intercept too: its figure
	// (amplification by iteration, digest 002) needs g strongly convex in each coordinate
	// when Strong, and one rule for both forms keeps the y-step simple.
	st.G.Free = 0
	st.Nu = loss.Smoothness()
	if s.Strong {
		st.Mu = cfg.Reg.L2 / 2
		st.MuG = cfg.Reg.L2 / 2
		st.G.L2 = cfg.Reg.L2 / 2
		st.Nu += st.Mu
		k, err := privacy.StrongConstants(st.Nu, st.Mu, st.MuG, s.Beta, s.Eta, 1, 1)
		if err != nil {
			return st, fmt.Errorf("%w: %v", ErrGADMMParams, err)
		}
		st.Strong = k
	} else if s.Eta*st.Nu > 1 {
		return st, fmt.Errorf("%w: eta = %v exceeds 1/nu = %v, nu = %v the smoothness bound of this node's local loss "+
			"(amplification by iteration needs every local function 1/eta-smooth)", ErrGADMMParams, s.Eta, 1/st.Nu, st.Nu)
	}
	// The weight of what a neighbour may change: under the record unit one row (its weight
	// c = w_i/m_i; every example's gradient is clipped at C, so one replaced row moves
	// grad f_i by at most 2 c C), under the node unit the whole shard (2 w_i C).
	wt := loss.Weight()
	if cfg.Unit != privacy.UnitNode {
		wt = loss.RowWeight()
	}
	st.Delta = GADMMDelta(wt, cfg.Clip)
	st.Sensitivity = s.Eta * st.Delta
	st.ClipEff = cfg.Clip
	if cfg.Sigma > 0 {
		st.H = privacy.Granularity(cfg.Sigma)
		if !(st.H > 0) || math.IsInf(1/st.H, 0) {
			return st, fmt.Errorf("%w: sigma = %v is too small for the secure sampler's lattice", ErrGADMMParams, cfg.Sigma)
		}
		root := math.Nextafter(math.Sqrt(float64(dim)), math.Inf(1))
		slack := st.H * root / (2 * wt * s.Eta) * (1 + 0x1p-50)
		st.ClipEff = (cfg.Clip - slack) * (1 - float64(dim+loss.Rows()+64)*0x1p-52)
		if !(st.ClipEff > 0) {
			return st, fmt.Errorf("%w: clip %v is too small for the noise lattice (needs more than %v at sigma %v, "+
				"dimension %d)", ErrGADMMParams, cfg.Clip, slack, cfg.Sigma, dim)
		}
	}
	return st, nil
}

// GADMMRunParams returns the accountant's parameters of a gradient-ADMM run whose nodes have
// the local losses `losses` (all nodes, same configuration apart from Node): the largest
// smoothness bound and sensitivity over the nodes (every later step is then covered), eta,
// beta, sigma, and in the strongly convex mode mu = mu_g = L2/2. It fails when some node's
// GADMMCheck fails or when the run-wide parameters fail privacy.GADMMParams.Validate (in the
// strongly convex mode interval (23) is that of the largest nu).
func GADMMRunParams(cfg Config, losses []*consensus.LocalLoss, dim int) (privacy.GADMMParams, error) {
	p := privacy.GADMMParams{Eta: cfg.Step.Eta, Beta: cfg.Step.Beta, Sigma: cfg.Sigma, Strong: cfg.Step.Strong, Dim: dim}
	if len(losses) == 0 {
		return p, fmt.Errorf("%w: no local losses", ErrGADMMParams)
	}
	for i, l := range losses {
		st, err := GADMMCheck(cfg, l, dim)
		if err != nil {
			return p, fmt.Errorf("%w (node %d)", err, i)
		}
		p.Nu = math.Max(p.Nu, st.Nu)
		p.Sensitivity = math.Max(p.Sensitivity, st.Sensitivity)
		if st.Uncertified != "" {
			p.Uncertified = st.Uncertified
		}
		p.Mu, p.MuG = st.Mu, st.MuG
	}
	if err := p.Validate(); err != nil {
		return p, fmt.Errorf("%w: %v", ErrGADMMParams, err)
	}
	return p, nil
}

// GADMMY sets dst to y = G(lambda - beta x~) = prox_{g/beta}(x~ - lambda/beta) for the token
// (z = x~, zhat = lambda): the y the next holder will compute, sparse under an L1 g. g is
// Reg in the convex mode and Reg with half its L2 weight when strong. dst may alias neither z
// nor zhat.
func GADMMY(dst, z, zhat []float64, reg consensus.Regularizer, beta float64, strong bool) {
	if strong {
		reg.L2 /= 2
	}
	t, sh := reg.L1/beta, 1/(1+reg.L2/beta)
	for k := range dst {
		dst[k] = soft(z[k]-zhat[k]/beta, t, sh)
	}
}

// updateGADMM is the gradient-ADMM step on the token (z = x~, zhat = lambda), in place. A
// token with a non-finite coordinate, or a step whose result would not be finite, is
// refused with ErrNotFinite before anything is written.
func (m *Machine) updateGADMM(z, zhat []float64) error {
	if m.gd == nil {
		return fmt.Errorf("%w: machine not set up for the gadmm step", ErrGADMMParams)
	}
	if !allFinite(z, zhat) {
		return ErrNotFinite
	}
	c := &m.cfg
	st := m.gd
	n := m.dim
	eta, beta := c.Step.Eta, c.Step.Beta
	t, sh := st.G.L1/beta, 1/(1+st.G.L2/beta)
	lam := m.x[:n] // lambda'
	for k := range lam {
		y := soft(z[k]-zhat[k]/beta, t, sh)
		lam[k] = zhat[k] - beta*(z[k]-y)
	}
	q := m.g[:n]
	m.loss.ClippedRowGrad(q, z, st.ClipEff)
	s := 1 / (1 + eta*beta)
	e := eta * s
	out := m.eta[:n]
	var chk float64
	if c.Sigma > 0 {
		c.Noise.Normal(out, c.Sigma)
		h, hinv := st.H, 1/st.H
		for k := range out {
			y := soft(z[k]-zhat[k]/beta, t, sh)
			b := float64(z[k]-eta*float64(float64(st.Mu*z[k])-float64(beta*y)-lam[k])) * s
			// P + (R + Y): the integer N = R + Y is formed first (exact below 2^53), so
			// that the one rounding of a sum beyond 2^53 depends on P and N alone.
			r := math.RoundToEven(float64(b*hinv)) + (math.RoundToEven(float64(float64(-e*q[k])*hinv)) + math.RoundToEven(float64(out[k]*hinv)))
			out[k] = float64(r * h)
			chk += out[k]*0 + lam[k]*0
		}
	} else {
		for k := range out {
			y := soft(z[k]-zhat[k]/beta, t, sh)
			b := float64(z[k]-eta*float64(float64(st.Mu*z[k])-float64(beta*y)-lam[k])) * s
			out[k] = b - float64(e*q[k])
			chk += out[k]*0 + lam[k]*0
		}
	}
	if chk != 0 { // x*0 is 0 for finite x, NaN otherwise
		return ErrNotFinite
	}
	copy(z, out)
	copy(zhat, lam)
	return nil
}

// gadmmEntry writes the mechanism fields of the ledger entry of one gradient-ADMM update:
// a Gaussian mechanism on x with sensitivity eta Delta and noise std sigma (Clip is the
// per-example gradient clip; Lambda keeps the configured value, which the step does not use).
func (m *Machine) gadmmEntry(e *privacy.Entry) {
	e.Mechanism = MechGADMM
	e.Sensitivity, e.Sigma = 0, m.cfg.Sigma
	if m.gd != nil {
		e.Sensitivity = m.gd.Sensitivity
	}
}

// GADMMBudgetCap returns the most noisy gradient-ADMM updates a node may make under budget
// b: the largest K with the planned figure privacy.GADMMPlannedBound, i.e. the local curve
// K alpha eta^2 Delta^2/(2 sigma^2) converted at b.Delta, at most b.Epsilon (capped at
// MaxCap). Both budget kinds give this cap: a plan cannot promise amplification (see
// privacy.GADMMPlannedBound), so the network figure a plan can state is the local one.
// p is the run's privacy.GADMMParams (GADMMRunParams). Without noise the cap is 0.
func GADMMBudgetCap(b Budget, p privacy.GADMMParams) (int, error) {
	if err := b.Validate(); err != nil {
		return 0, err
	}
	if !(p.Sigma > 0) || !(p.Sensitivity > 0) || math.IsInf(p.Sensitivity, 0) {
		return 0, nil
	}
	unit := p.Unit()
	return capOf(func(k int) float64 {
		e, _ := privacy.ToDP(unit.Scale(float64(k)), b.Delta)
		return e
	}, b.Epsilon), nil
}

// GADMMDelta is the gradient step's sensitivity before its step size: 2 w C for the weight
// w of what a neighbour may change (one row's c = w_i/m_i, or the node's w_i) and the clip
// C of every example's gradient. The step releases eta GADMMDelta; the node, the simulator
// and 'account plan' compute it here.
func GADMMDelta(weight, clip float64) float64 { return 2 * weight * clip }
