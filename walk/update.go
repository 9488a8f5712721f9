package walk

import (
	"fmt"
	"math"
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
func (m *Machine) update(z, zhat []float64) error {
	c := &m.cfg
	x, g, u := m.x, m.g[:len(m.x)], m.u[:len(m.x)]
	z = z[:len(x)]
	for k := range x {
		x[k] = 2*z[k] - u[k]
	}
	if err := m.loss.Prox(x, x, c.Gamma); err != nil {
		return fmt.Errorf("walk: local prox: %w", err)
	}
	var nn float64
	for k := range x {
		d := x[k] - z[k]
		g[k] = d
		nn += d * d
	}
	s := 2 * c.Lambda
	if norm := math.Sqrt(nn); norm > c.Clip {
		s *= c.Clip / norm
	}
	inv := 1 / float64(c.Nodes)
	zhat = zhat[:len(x)]
	// The z-step prox_{gamma r} of r = L1 ||.||_1 + (L2/2) ||.||^2 (soft-threshold at
	// gamma L1, then shrink by 1/(1 + gamma L2)) is fused into the zhat loop; it is
	// applied to zhat, never to the previous z (digest 2.9).
	t, sh := c.Gamma*c.Reg.L1, 1/(1+c.Gamma*c.Reg.L2)
	var eta []float64
	l := c.Lambda
	if c.Sigma > 0 {
		eta = m.eta[:len(x)]
		c.Noise.Normal(eta, c.Sigma)
	} else {
		l = 0
		eta = g // multiplied by l = 0: no noise
	}
	for k := range g {
		du := s*g[k] + l*eta[k]
		u[k] += du
		h := zhat[k] + du*inv
		zhat[k] = h
		switch {
		case h > t:
			z[k] = (h - t) * sh
		case h < -t:
			z[k] = (h + t) * sh
		default:
			z[k] = 0
		}
	}
	return nil
}
