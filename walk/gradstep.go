package walk

import (
	"fmt"
	"math"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
)

// The gradient-based local steps (StepLinearized, StepLSSGD, StepSGD).
//
// All three evaluate a gradient of f_i at the received z, which is public (it is the token):
// the point costs no privacy and the steps keep no private state beyond u_i. With
// f_i(w) = w_i (1/m_i) sum_r loss(a_r.w, y_r) (consensus.LocalLoss, m_i rows, weight w_i),
// the gradient estimate is
//
//	G = c_q sum_{r in B} clip(d_r a_r, C),   d_r = loss'(a_r.z, y_r),   c_q = w_i / (q m_i),
//
// over a Poisson sample B (each row independently with probability q = StepParams.Rate,
// drawn with Config.Noise.Uniform(), which is crypto-backed in production); q = 1 takes
// every row and draws nothing, and c_1 = w_i/m_i is LocalLoss's own factor, so that the
// unclipped full batch is the exact gradient of f_i. StepLinearized uses that exact
// gradient (q = 1, no per-example clip, no gradient noise): its privacy comes from
// Algorithm 4's clip of x - z and the noise on u_i. StepLSSGD and StepSGD clip every
// example's gradient d_r a_r (the gradient of the unweighted loss of row r) at C =
// Config.Clip and add Gaussian noise of std sigma = Config.Sigma to the clipped SUM, the
// DP-SGD mechanism with noise multiplier sigma/C. Its figures are for replace-one of a row of
// node i (privacy.SubsampledReplaceCurve): the node's row count is public, and the release
// encodes the total row count exactly (c_q), so adding or removing a row is visible.
//
// The noise on the lattice. With sigma > 0 the noisy sum is computed exactly on the lattice
// hZ of the secure sampler at std sigma, h = privacy.Granularity(sigma) (a power of two,
// about 2^-40 sigma):
//
//	R_k = sum_{r in B} round(clip(d_r a_r, C')_k / h)   (int64, exact)
//	Y_k = round(eta_k / h),  eta ~ N(0, sigma^2 I)     (the integer discrete Gaussian of the
//	                                                    secure sampler; a rounding of the
//	                                                    seeded one)
//	G_k = c_q (h float64(R_k + Y_k))
//
// Every row is rounded on its own and the integers add exactly, so adding or removing one
// row r changes R by exactly round(g_r / h), whose norm is at most ||g_r||/h + sqrt(p)/2.
// GradLatticeClip picks C' so that h (C'/h (1 + rounding margin) + sqrt(p)/2) <= C: the
// integer query has l2 sensitivity at most C/h per added or removed row (2C/h for a
// replaced one, the adjacency the figures use), and the discrete Gaussian of parameter
// sigma/h on it has the Renyi curve of the continuous Gaussian mechanism with noise
// multiplier sigma/C (Canonne, Kamath, Steinke 2020, Theorem 14). Everything the step
// computes afterwards (the bracket, LS_nu, the new u_i, the token) is a deterministic
// function of N = R + Y, the public token and u_i, and u_i is itself such a function of the
// node's earlier N's and tokens: nothing of the data reaches the wire except through N.
// The ledger's sensitivity C and sigma are therefore exact upper bounds for the integer
// mechanism. [Doubtful] the subsampled curve (privacy.SubsampledGaussianCurve) is proved
// by Mironov, Talwar and Zhang 2019 for the continuous Gaussian; it is applied to the
// discrete Gaussian on a lattice of step 2^-40 sigma without a separate proof.
//
// Without noise (sigma = 0) the sum is the plain floating-point one, rows in order.

// gradState is the state of a gradient-based step, built once by newGradStep.
type gradState struct {
	loss  consensus.Loss
	rows  int
	q     float64 // sampling rate (1 for the linearized step)
	cq    float64 // w_i / (q m_i)
	clip  float64 // per-example clip applied: +Inf (linearized), C (no noise), C' (lattice)
	h     float64 // lattice step of the gradient noise; 0 without noise
	hinv  float64
	anorm []float64 // ||a_r||
	grad  []float64 // the gradient estimate G
	acc   []int64   // the integer sum R + Y
	ls    *LSOperator
	noisy bool // sigma > 0 and the step noises the gradient (ls-sgd, sgd)
}

// gradBound is the largest integer the lattice accumulator may reach: 2^62.
const gradBound = 0x1p62

// GradLatticeClip returns the lattice step h = privacy.Granularity(sigma) of the gradient
// noise and the per-example clip C' <= clip applied on the lattice, so that adding or
// removing one example changes the integer sum by at most clip/h in l2 norm (see the
// comment above): C' = (clip - h sqrt(p)/2) (1 - (p+64) 2^-52), the relative margin
// covering the floating-point error of the clipping and of the product before rounding.
// It fails when sigma is too small for the lattice or clip too small to absorb the
// rounding.
func GradLatticeClip(clip, sigma float64, dim int) (h, clipEff float64, err error) {
	if !(sigma > 0) || !(clip > 0) || dim < 1 || math.IsInf(clip, 0) {
		return 0, 0, fmt.Errorf("walk: gradient lattice: need sigma > 0, finite clip > 0 and dim >= 1, got %v, %v, %d", sigma, clip, dim)
	}
	h = privacy.Granularity(sigma)
	if !(h > 0) || math.IsInf(1/h, 0) {
		return 0, 0, fmt.Errorf("walk: gradient lattice: sigma = %v is too small for the secure sampler's lattice", sigma)
	}
	root := math.Nextafter(math.Sqrt(float64(dim)), math.Inf(1))
	slack := h * root / 2 * (1 + 0x1p-50)
	clipEff = (clip - slack) * (1 - float64(dim+64)*0x1p-52)
	if !(clipEff > 0) || clipEff < 0x1p-400 {
		return 0, 0, fmt.Errorf("walk: gradient lattice: clip %v is too small for the noise lattice (needs more than %v at sigma %v, dimension %d)", clip, slack, sigma, dim)
	}
	return h, clipEff, nil
}

// StepSize returns the step eta_k = eta / sqrt(k) of a node's k-th noisy update (k >= 1,
// the node's own update counter), the schedule of StepLinearized, StepLSSGD and StepSGD
// (Liu et al. 2022, Alg. 2 line 8, GC case, with eta_1 = eta).
func StepSize(eta float64, k int) float64 {
	return eta / math.Sqrt(float64(k))
}

// newGradStep builds the state of a gradient-based step; see StepParams for the checks.
func (m *Machine) newGradStep() error {
	c := &m.cfg
	s := c.Step
	rows := m.loss.Rows()
	st := &gradState{loss: m.loss.Loss(), rows: rows, q: 1, clip: math.Inf(1),
		anorm: make([]float64, rows), grad: make([]float64, m.dim)}
	if s.Kind != StepLinearized {
		st.q = s.Rate
		if b := st.q * float64(rows); b < 1 {
			return fmt.Errorf("walk: %s: the expected batch rate x rows = %v x %d = %v is below one example", s.Kind, st.q, rows, b)
		}
		if st.q < 1 && c.Noise == nil {
			return fmt.Errorf("walk: %s: rate %v < 1 needs a noise source for the Poisson sampling", s.Kind, st.q)
		}
		st.clip = c.Clip
		if c.Sigma > 0 {
			if math.IsInf(c.Clip, 0) {
				return fmt.Errorf("walk: %s: a finite clip is required with noise (sigma %v)", s.Kind, c.Sigma)
			}
			var err error
			if st.h, st.clip, err = GradLatticeClip(c.Clip, c.Sigma, m.dim); err != nil {
				return err
			}
			st.hinv = 1 / st.h
			st.noisy = true
			// Every |R_k + Y_k| stays below 2^62: rows (C'/h + 1) for R, and Y is a
			// discrete Gaussian of parameter at most 2^41 (beyond 2^60 with probability 0).
			if float64(rows)*(st.clip*st.hinv+1) > gradBound/2 {
				return fmt.Errorf("walk: %s: clip/sigma x rows = %v x %d is too large for the integer lattice", s.Kind, c.Clip/c.Sigma, rows)
			}
			st.acc = make([]int64, m.dim)
		}
	}
	st.cq = m.loss.Weight() / (st.q * float64(rows))
	for r := range st.anorm {
		a, _ := m.loss.Example(r)
		st.anorm[r] = math.Sqrt(dotSeq(a, a))
	}
	if s.Kind == StepLSSGD {
		var err error
		if st.ls, err = NewLSOperator(m.dim, s.Nu); err != nil {
			return err
		}
	}
	m.st = st
	return nil
}

// dotSeq is the sequential dot product (the order of consensus.LocalLoss).
func dotSeq(a, b []float64) float64 {
	s := 0.0
	for i, v := range a {
		s += float64(v * b[i])
	}
	return s
}

// gradient sets st.grad to the gradient estimate G at w (see the comment above): the
// exact gradient of f_i (linearized), or the clipped, Poisson-sampled, lattice-noised one.
// It fails only on a noise sample that is not a finite lattice point (an invalid noise
// source), before anything is written outside the scratch buffers.
func (m *Machine) gradient(w []float64) error {
	if m.loss.Classes() > 0 {
		return m.gradientMulti(w)
	}
	st := m.st
	g := st.grad[:len(w)]
	clear(g)
	sample := st.q < 1
	if st.noisy {
		acc := st.acc[:len(w)]
		clear(acc)
		hi := st.hinv
		for r := 0; r < st.rows; r++ {
			if sample && !(m.cfg.Noise.Uniform() < st.q) {
				continue
			}
			a, y := m.loss.Example(r)
			a = a[:len(w)]
			e := st.clipped(st.loss.Deriv(dotSeq(a, w), y), r)
			for k, v := range a {
				acc[k] += int64(math.RoundToEven(float64(float64(e*v) * hi)))
			}
		}
		eta := m.eta[:len(w)]
		m.cfg.Noise.Normal(eta, m.cfg.Sigma)
		for k, v := range eta {
			y := math.RoundToEven(float64(v * hi))
			if !(math.Abs(y) < 0x1p60) {
				return fmt.Errorf("%w: gradient noise sample %v is not a finite lattice point", ErrNotFinite, v)
			}
			acc[k] += int64(y)
		}
		h, cq := st.h, st.cq
		for k := range g {
			g[k] = float64(cq * float64(float64(acc[k])*h))
		}
		return nil
	}
	for r := 0; r < st.rows; r++ {
		if sample && !(m.cfg.Noise.Uniform() < st.q) {
			continue
		}
		a, y := m.loss.Example(r)
		a = a[:len(w)]
		d := st.loss.Deriv(dotSeq(a, w), y)
		coef := st.cq * d
		if e := st.clipped(d, r); e != d {
			coef = st.cq * e
		}
		for k, v := range a {
			g[k] += float64(coef * v)
		}
	}
	return nil
}

// clipped returns e such that e a_r = clip(d a_r, st.clip): d itself when |d| ||a_r|| <=
// clip, else sign(d) clip/||a_r|| (which also bounds an infinite or NaN derivative). A row
// with ||a_r|| = 0, or so small that clip/||a_r|| overflows, contributes 0 (a vector of norm
// at most clip, so the sensitivity bound is kept).
func (st *gradState) clipped(d float64, r int) float64 {
	an := st.anorm[r]
	if math.Abs(d)*an <= st.clip {
		return d
	}
	if an == 0 {
		return 0
	}
	e := math.Copysign(st.clip/an, d)
	if math.IsInf(e, 0) {
		return 0
	}
	return e
}

// MechSubsampled is the ledger mechanism of one StepLSSGD or StepSGD update: the
// Poisson-subsampled Gaussian mechanism on the clipped gradient sum (privacy.MechSubsampled).
const MechSubsampled = privacy.MechSubsampled

// validateGradStep checks the parameters of the gradient-based steps: eta > 0, and for
// ls-sgd and sgd a rate q in (0,1]. The batch (rate x rows) is checked by New, which knows
// the rows.
func (c Config) validateGradStep() error {
	s := c.Step
	if !(s.Eta > 0) {
		return fmt.Errorf("walk: %s: step size eta must be > 0, got %v", s.Kind, s.Eta)
	}
	if s.Kind == StepLinearized {
		return nil
	}
	if !(s.Rate > 0 && s.Rate <= 1) {
		return fmt.Errorf("walk: %s: sampling rate must be in (0,1], got %v", s.Kind, s.Rate)
	}
	if s.Kind == StepSGD && s.Nu != 0 {
		return fmt.Errorf("walk: sgd: nu = %v: Laplacian smoothing belongs to ls-sgd", s.Nu)
	}
	return nil
}

// gradEntry writes the mechanism fields of an ls-sgd or sgd update: the Poisson-subsampled
// Gaussian mechanism on the clipped gradient sum, sensitivity C (one row added or
// removed), noise std sigma, rate q. Lambda is kept for ls-sgd (its u-update uses it) and
// is 0 for sgd.
func (m *Machine) gradEntry(e *privacy.Entry) {
	c := &m.cfg
	e.Mechanism, e.Sensitivity, e.Sigma, e.Rate = MechSubsampled, c.Clip, c.Sigma, m.st.q
	if c.Step.Kind == StepSGD {
		e.Lambda = 0
	}
}

// gradientMulti is gradient for the multinomial loss: row r contributes the K x p outer
// product d_r (x) a_r, d_r = softmax(scores) - e_y, and its clip scales d_r as a whole so
// that ||d_r|| ||a_r|| <= clip (the per-example gradient's norm, as for one score). The
// lattice rounding, noise and sampling are those of gradient, over the K p coordinates.
func (m *Machine) gradientMulti(w []float64) error {
	st := m.st
	k := m.loss.Classes()
	g := st.grad[:len(w)]
	clear(g)
	p := len(w) / k
	sc, d := make([]float64, k), make([]float64, k)
	sample := st.q < 1
	var acc []int64
	if st.noisy {
		acc = st.acc[:len(w)]
		clear(acc)
	}
	for r := 0; r < st.rows; r++ {
		if sample && !(m.cfg.Noise.Uniform() < st.q) {
			continue
		}
		a, y := m.loss.Example(r)
		for c := range sc {
			sc[c] = dotSeq(a, w[c*p:(c+1)*p])
		}
		consensus.Softmax(d, sc)
		d[int(y)]--
		f := 1.0
		if n := math.Sqrt(dotSeq(d, d)) * st.anorm[r]; n > st.clip {
			f = st.clip / n
		}
		for c, dc := range d {
			e := float64(dc * f)
			if !(e == e) || math.IsInf(e, 0) {
				e = 0 // a non-finite score: the row contributes nothing (norm 0 <= clip)
			}
			if st.noisy {
				row := acc[c*p : (c+1)*p]
				for j, v := range a {
					row[j] += int64(math.RoundToEven(float64(float64(e*v) * st.hinv)))
				}
				continue
			}
			row := g[c*p : (c+1)*p]
			for j, v := range a {
				row[j] += float64(st.cq * float64(e*v))
			}
		}
	}
	if !st.noisy {
		return nil
	}
	eta := m.eta[:len(w)]
	m.cfg.Noise.Normal(eta, m.cfg.Sigma)
	for j, v := range eta {
		yv := math.RoundToEven(float64(v * st.hinv))
		if !(math.Abs(yv) < 0x1p60) {
			return fmt.Errorf("%w: gradient noise sample %v is not a finite lattice point", ErrNotFinite, v)
		}
		acc[j] += int64(yv)
	}
	for j := range g {
		g[j] = float64(st.cq * float64(float64(acc[j])*st.h))
	}
	return nil
}
