package walk

// StepLinearized and StepLSSGD: Algorithm 4 with a linearized x-step.
//
// Algorithm 4's x-step is x = prox_{gamma f_i}(v), v = 2z - u_i. The linearized step
// replaces f_i by its linearization at z plus a proximal term towards z:
//
//	x = argmin_x <G, x> + ||x - z||^2/(2 eta_k) + ||x - v||^2/(2 gamma)
//	  = z - rho_k [ gamma G + (u_i - z) ],   rho_k = eta_k/(gamma + eta_k),
//
// (first-order condition G + (x - z)/eta + (x - v)/gamma = 0 and v - z = z - u_i), with
// G = grad f_i(z) and eta_k = StepSize(Eta, k), k the node's own update counter.
//
// Why z. z is the token, public: the point costs no privacy and needs no stored state. It
// is also the point of Davis and Yin's three-operator splitting (2017): with rho = 1
// (eta -> infinity) the step is x = 2z - u_i - gamma grad f_i(z), which is Davis-Yin
// with f_i as the smooth term, the consensus constraint and r as the two proximable ones;
// it converges for gamma < 2/L_i (L_i the smoothness constant of f_i). For any eta the fixed
// points are those of Algorithm 4: at a fixed point x = z, i.e. z - u_i = gamma grad f_i(z),
// which is the optimality condition of the exact prox step at x = z. A finite eta_k damps
// the step: x - z = rho_k (x_DY - z), so the u-update is the Davis-Yin one with relaxation
// lambda rho_k; the decaying rho_k (eta_k = Eta/sqrt(k)) is a Krasnosel'skii-Mann
// relaxation with sum rho_k (1 - rho_k) = infinity, and it damps the noise of StepLSSGD.
//
// StepLinearized then runs the unchanged rest of Algorithm 4: g = Clip(x - z, C), du =
// 2 lambda g + lambda eta on the lattice (apply/applyLattice), u_i += du, zhat += du/n,
// z = prox_{gamma r}(zhat). Since x - z is clipped at C, one update still has sensitivity
// 4 lambda C against noise std lambda sigma, whatever G is: the ledger entry stays
// "gaussian" and the walk's accountant (local and pairwise figures) applies unchanged.
//
// StepLSSGD is the DP-SADMM(nu) step of Liu et al. 2022 (Alg. 2, eq. (5)) mapped onto
// Algorithm 4. For node i, the consensus problem x_i = z is eq. (1) with A = I, B = -I,
// c = 0, and the DP-SADMM x-step
//
//	x_{t+1} = argmin G^T x + (1/(2 eta)) ||x - x_t||^2_{Q_nu G~} + (beta/2)||A x + B y - c + lambda||^2
//	        = x_t - (eta/gamma_ls) Q_nu^-1 [ G + beta A^T (A x_t + B y - c + lambda) ]   (eq. (5))
//
// with gamma_ls = 1 + eta beta ||A^T A|| = 1 + eta beta. In Algorithm 4's terms the
// linearization point x_t is z (the token, see above), the quadratic (beta/2)||x - y + lambda||^2
// is ||x - v||^2/(2 gamma): beta = 1/gamma and y - lambda = v = 2z - u_i. The bracket is
// then B = G + (z - v)/gamma = G + (u_i - z)/gamma, the step eta/gamma_ls = eta gamma/(gamma + eta)
// = gamma rho, and
//
//	x - z = -gamma rho_k Q_nu^-1 [ G + (u_i - z)/gamma ] = rho_k Q_nu^-1 [ (z - u_i) - gamma G ],
//
// which for nu = 0 is exactly the linearized step above (the metric Q_nu G~ = I). LS_nu =
// Q_nu^-1 acts on the WHOLE bracket (data term and consensus pull), as in the paper and
// unlike DP-LSSGD. G is the noisy, clipped, Poisson-sampled estimate (gradstep.go), and the
// privacy is all there: the rest (LS_nu, du = 2 lambda (x - z), u_i += du, zhat += du/n,
// z = prox_{gamma r}(zhat)) is post-processing of the noisy gradient and adds no noise
// and no clip. The dual update of DP-SADMM (lambda += x - y) is Algorithm 4's u_i update.
//
// With nu = 0, sigma = 0 and rate 1, StepLSSGD computes the same G (every row, same order,
// same factor w_i/m_i; the per-example clip is inactive when no example exceeds C), the
// same bracket and the same rho_k, and du = 2 lambda (x - z), which is StepLinearized's du
// whenever ||x - z|| <= C: the two steps give the same bits (TestLSSGDEqualsLinearized).

// updateLinear performs one StepLinearized or StepLSSGD update on (z, zhat) in place.
func (m *Machine) updateLinear(z, zhat []float64) error {
	if !allFinite(z, zhat) {
		return ErrNotFinite
	}
	c := &m.cfg
	n := len(z)
	st := m.st
	if err := m.gradient(z); err != nil {
		return err
	}
	eta := StepSize(c.Step.Eta, m.upd+1)
	rho := eta / (c.Gamma + eta)
	gamma := c.Gamma
	u, g, d := m.u[:n], st.grad[:n], m.g[:n]
	for k := range d {
		d[k] = (z[k] - u[k]) - float64(gamma*g[k])
	}
	if st.ls != nil {
		st.ls.Apply(d, d)
	}
	var nn float64
	for k, v := range d {
		v = float64(rho * v)
		d[k] = v
		nn += float64(v * v)
	}
	if c.Step.Kind == StepLSSGD {
		if !AllFinite(d) {
			return ErrNotFinite
		}
		return m.apply(d, nil, 0, 2*c.Lambda, z, zhat, nil)
	}
	return m.apply(d, nil, 0, m.scale(nn), z, zhat, m.noise(n))
}
