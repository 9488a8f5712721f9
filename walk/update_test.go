package walk

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
)

// updatePair returns two machines for the same one-row squared loss (a, y) with weight 1:
// one over the row itself (rank-one path) and one over the row written twice (the general
// path through LocalLoss.Prox and its Cholesky factor), with the same u.
func updatePair(t *testing.T, cfg Config, a []float64, y float64, u []float64) (one, two *Machine) {
	t.Helper()
	one = newMachine(t, cfg, oneRow(a, y), 1)
	d2 := &consensus.Dataset{Name: "two", Rows: 2, Cols: len(a), X: append(append([]float64(nil), a...), a...), Y: []float64{y, y}}
	two = newMachine(t, cfg, d2, 1)
	for _, m := range []*Machine{one, two} {
		if err := m.Restore(Checkpoint{Node: cfg.Node, U: u}); err != nil {
			t.Fatal(err)
		}
	}
	return one, two
}

// TestRankOneUpdateMatchesGeneral: the fused rank-one update agrees with the general path
// (prox by Cholesky, then clip, then the z-step) with and without clipping, and with noise.
func TestRankOneUpdateMatchesGeneral(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 200; trial++ {
		p := 1 + r.IntN(70)
		a, u, zhat := make([]float64, p), make([]float64, p), make([]float64, p)
		for k := range a {
			a[k] = r.NormFloat64()
			u[k] = r.NormFloat64()
			zhat[k] = r.NormFloat64()
		}
		sigma := 0.0
		if trial%3 == 0 {
			sigma = 0.7
		}
		clip := math.Inf(1)
		switch trial % 4 {
		case 1:
			clip = 0.1 // clipping active
		case 2:
			clip = 1e3
		}
		reg := consensus.Regularizer{L1: 0.3 * r.Float64(), L2: 0.2 * r.Float64()}
		cfg := Config{Node: 0, Nodes: 7, Gamma: 0.5 + r.Float64(), Lambda: 0.5, Clip: clip, Sigma: sigma, Reg: reg,
			Rand: rand.New(rand.NewPCG(1, 1)), Run: "r"}
		if sigma > 0 {
			cfg.Noise = &fixedNoise{}
		}
		one, two := updatePair(t, cfg, a, r.NormFloat64(), u)
		if sigma > 0 {
			two.cfg.Noise = &fixedNoise{}
		}
		z1, h1 := make([]float64, p), append([]float64(nil), zhat...)
		reg.Prox(z1, h1, cfg.Gamma)
		z2, h2 := append([]float64(nil), z1...), append([]float64(nil), h1...)
		if err := one.update(z1, h1); err != nil {
			t.Fatal(err)
		}
		if err := two.update(z2, h2); err != nil {
			t.Fatal(err)
		}
		for k := 0; k < p; k++ {
			if !near(z1[k], z2[k]) || !near(h1[k], h2[k]) || !near(one.u[k], two.u[k]) {
				t.Fatalf("trial %d (p=%d clip=%v sigma=%v) coord %d: z %v/%v zhat %v/%v u %v/%v",
					trial, p, clip, sigma, k, z1[k], z2[k], h1[k], h2[k], one.u[k], two.u[k])
			}
		}
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-10*(1+math.Abs(a)+math.Abs(b)) }

// TestRankOneClipDecision: near the clipping threshold the fused one-sweep path and the
// exact path agree bit for bit when no clipping is due, and a clipped step is scaled to norm
// C. The state is built so that x - z is a small difference of large terms (u = z + s0 a + delta
// with the label chosen so that s = s0 + O(delta)): the a-priori bound is then loose, so clip
// levels slightly above ||x - z|| take the exact path.
func TestRankOneClipDecision(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	const p, gamma, s0 = 64, 1.0, 10.0
	reg := consensus.Regularizer{L1: 0.1}
	a, zhat := make([]float64, p), make([]float64, p)
	for k := range a {
		a[k] = r.NormFloat64()
		zhat[k] = r.NormFloat64()
	}
	z0 := make([]float64, p)
	reg.Prox(z0, zhat, gamma)
	u := make([]float64, p)
	az := 0.0
	for k := range u {
		u[k] = z0[k] + s0*a[k] + 1e-3*r.NormFloat64()
		az += a[k] * z0[k]
	}
	y := az + s0/gamma // weight c = 1: y - a.z = s0 (1/K - ||a||^2) = s0/(gamma c)
	cfg := Config{Node: 0, Nodes: 5, Gamma: gamma, Lambda: 0.5, Reg: reg, Rand: rand.New(rand.NewPCG(1, 1)), Run: "r"}
	run := func(clip float64) (z, h, du []float64) {
		cfg.Clip = clip
		m := newMachine(t, cfg, oneRow(a, y), 1)
		if err := m.Restore(Checkpoint{U: u}); err != nil {
			t.Fatal(err)
		}
		z, h = append([]float64(nil), z0...), append([]float64(nil), zhat...)
		if err := m.update(z, h); err != nil {
			t.Fatal(err)
		}
		du = make([]float64, p)
		for k := range du {
			du[k] = m.u[k] - u[k]
		}
		return z, h, du
	}
	zInf, hInf, duInf := run(math.Inf(1)) // fused sweep
	var nn float64
	for _, v := range duInf {
		nn += v * v
	}
	norm := math.Sqrt(nn) // 2 lambda ||x - z|| = ||x - z|| for lambda = 1/2
	if !(norm > 1e-3 && norm < 0.1) {
		t.Fatalf("test state: ||x - z|| = %v, want a small difference of large terms", norm)
	}
	for _, f := range []float64{1 + 1e-9, 1 + 1e-7, 2} {
		z, h, _ := run(norm * f)
		for k := range z {
			if math.Float64bits(z[k]) != math.Float64bits(zInf[k]) || math.Float64bits(h[k]) != math.Float64bits(hInf[k]) {
				t.Fatalf("clip %v ||x-z||: coord %d differs from the unclipped sweep: %v vs %v", f, k, z[k], zInf[k])
			}
		}
	}
	for _, f := range []float64{0.5, 1 - 1e-6} {
		_, _, du := run(norm * f)
		var s float64
		for k, v := range du {
			s += v * v
			if math.Abs(v-duInf[k]*f) > 1e-9*norm {
				t.Fatalf("clip %v ||x-z||: du[%d] = %v, want %v", f, k, v, duInf[k]*f)
			}
		}
		if got := math.Sqrt(s); math.Abs(got-norm*f) > 1e-9*norm {
			t.Fatalf("clip %v ||x-z||: clipped step norm %v, want %v", f, got, norm*f)
		}
	}
}

// BenchmarkUpdateRankOne times update alone on 800 one-row nodes (p = 64), round robin.
func BenchmarkUpdateRankOne(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 5))
	const n, p = 800, 64
	ms := make([]*Machine, n)
	sc := NewScratch(p)
	for i := range ms {
		a := make([]float64, p)
		for k := range a {
			a[k] = r.NormFloat64()
		}
		cfg := Config{Node: i, Nodes: n, Gamma: 1, Lambda: 0.5, Clip: 1e3, Reg: consensus.Regularizer{L1: 0.01},
			Rand: rand.New(rand.NewPCG(1, uint64(i))), Run: "r", Scratch: sc}
		ms[i] = newMachine(b, cfg, oneRow(a, r.NormFloat64()), 1)
	}
	tok := NewToken("r", 0, p, consensus.Regularizer{L1: 0.01}, 1)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := ms[(i*7)%n].update(tok.Z, tok.Zhat); err != nil {
			b.Fatal(err)
		}
	}
}

// TestHugeFiniteTokenRefused: a token whose coordinates are finite but so large that the
// update overflows is refused with ErrNotFinite before anything is written (u_i, K_i and
// the token unchanged, no Ready), in the noiseless paths (prox general and rank-one,
// linearized) and in ls-sgd, which does not clip its step, with and without noise; a
// noisy prox update refuses it too (applyLattice). Whatever the path, a node never makes
// u_i or a released model non-finite from a finite token.
func TestHugeFiniteTokenRefused(t *testing.T) {
	d := smallLogistic()
	for _, c := range []struct {
		name   string
		data   *consensus.Dataset
		loss   consensus.Loss
		sigma  float64
		lambda float64
		step   StepParams
		z      float64
	}{
		{"prox general", d, consensus.Squared, 0, 0.5, StepParams{}, -math.MaxFloat64},
		{"prox rank-one", oneRow([]float64{1, 0.5, -0.5, 0}, 0.3), consensus.Squared, 0, 0.5, StepParams{}, -math.MaxFloat64},
		{"prox rank-one noisy", oneRow([]float64{1, 0.5, -0.5, 0}, 0.3), consensus.Squared, 0.5, 0.5, StepParams{}, -math.MaxFloat64},
		{"linearized", d, consensus.Squared, 0, 0.5, StepParams{Kind: StepLinearized, Eta: 1}, -math.MaxFloat64},
		{"ls-sgd", d, consensus.Logistic, 0, 1, StepParams{Kind: StepLSSGD, Eta: 1e9, Rate: 1}, math.MaxFloat64},
		{"ls-sgd noisy", d, consensus.Logistic, 0.5, 1, StepParams{Kind: StepLSSGD, Eta: 1e9, Nu: 0.1, Rate: 1}, math.MaxFloat64},
	} {
		ll, err := consensus.NewLocalLoss(c.data, c.loss, 1)
		if err != nil {
			t.Fatal(err)
		}
		cfg := Config{Node: 0, Nodes: 3, Gamma: 1, Lambda: c.lambda, Clip: 1, Sigma: c.sigma, Rand: rand.New(rand.NewPCG(1, 2)),
			Noise: privacy.NewSeededNoise(3), Run: "r", Step: c.step}
		m, err := New(cfg, ll, 4)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		u0 := []float64{1, -2, 0.5, 0}
		if err := m.Restore(Checkpoint{Updates: 2, U: u0}); err != nil {
			t.Fatal(err)
		}
		z := []float64{c.z, 0.25, -0.5, 1}
		zhat := []float64{0, 0.25, -0.5, 1}
		tok := Token{Run: "r", Z: append([]float64(nil), z...), Zhat: append([]float64(nil), zhat...)}
		err = m.Step(Message{Token: tok})
		if !errors.Is(err, ErrNotFinite) {
			if err == nil {
				rd := m.Ready()
				t.Errorf("%s: accepted: u %v, released z %v zhat %v", c.name, rd.State.U, rd.Outbox[0].Token.Z, rd.Outbox[0].Token.Zhat)
			} else {
				t.Errorf("%s: %v, want ErrNotFinite", c.name, err)
			}
			continue
		}
		if m.HasReady() || m.Updates() != 2 || !sameBits(m.U(), u0) || !sameBits(tok.Z, z) || !sameBits(tok.Zhat, zhat) {
			t.Errorf("%s: a refused token changed the machine or the token: u %v, K_i %d", c.name, m.U(), m.Updates())
		}
	}
}
