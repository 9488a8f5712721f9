package walk

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
)

// residueSetup is the distinguishing experiment on one noisy update with the secure
// sampler: node i holds one row, a or a', whose clipped data parts differ in about the 12th
// significant digit; u_i starts at its public initial value 0 and the observer knows the
// token i received (z0, zhat0). It is the floating-point attack on lattice noise: the
// observer reads du from the released zhat and checks which candidate data part leaves a
// multiple of the lattice step.
type residueSetup struct {
	n                          int
	gamma, lambda, sigma, clip float64
	y                          float64
	a, a2, zhat0, z0           []float64
	h                          float64 // the lattice step of the noise at std lambda sigma
	vD, vD2                    []float64
}

func newResidueSetup(t *testing.T) *residueSetup {
	s := &residueSetup{n: 50, gamma: 1, lambda: 0.5, sigma: 1, clip: 0.1, y: 2}
	s.a = []float64{0.8, -0.3, 0.5}
	s.a2 = append([]float64(nil), s.a...)
	s.a2[0] *= 1 + 1e-11
	s.zhat0 = []float64{0.3, -0.2, 0.1}
	s.z0 = append([]float64(nil), s.zhat0...) // no regularizer: z = zhat
	h, clipEff, err := LatticeClip(s.clip, s.lambda, s.sigma, len(s.a))
	if err != nil {
		t.Fatal(err)
	}
	s.h = h
	// The data part 2 lambda Clip(x - z, C') of a one-row squared loss with u = 0, written
	// out: x = v + gamma (y - a.v)/(1 + gamma ||a||^2) a with v = 2z - u.
	dataPart := func(a []float64) []float64 {
		p := len(a)
		v := make([]float64, p)
		av, aa := 0.0, 0.0
		for k := range v {
			v[k] = 2 * s.z0[k]
			av += a[k] * v[k]
			aa += a[k] * a[k]
		}
		d := make([]float64, p)
		nd := 0.0
		for k := range d {
			d[k] = v[k] + s.gamma*(s.y-av)/(1+s.gamma*aa)*a[k] - s.z0[k]
			nd += d[k] * d[k]
		}
		sc := 2 * s.lambda * math.Min(1, clipEff/math.Sqrt(nd))
		for k := range d {
			d[k] *= sc
		}
		return d
	}
	s.vD, s.vD2 = dataPart(s.a), dataPart(s.a2)
	return s
}

// guessWorld returns 0 or 1: the candidate data part for which du - v is closer to the
// lattice hZ, summed over coordinates.
func (s *residueSetup) guessWorld(du []float64) int {
	score := func(v []float64) float64 {
		r := 0.0
		for k := range du {
			q := (du[k] - v[k]) / s.h
			r += math.Abs(q - math.RoundToEven(q))
		}
		return r
	}
	if score(s.vD2) < score(s.vD) {
		return 1
	}
	return 0
}

// du reads the update off the released zhat, as an observer who knows zhat0 can.
func (s *residueSetup) du(zhat []float64) []float64 {
	out := make([]float64, len(zhat))
	for k := range zhat {
		out[k] = (zhat[k] - s.zhat0[k]) * float64(s.n)
	}
	return out
}

// TestLatticeResidueAttack runs the floating-point distinguishing attack against the
// shipped secure noisy update: it must show no advantage beyond sampling error. The same
// attack against the floating-point arithmetic (data part plus lattice noise, added in
// floating point) separates the two datasets every time, so the test has the power to fail.
func TestLatticeResidueAttack(t *testing.T) {
	s := newResidueSetup(t)
	diff := 0.0
	for k := range s.vD {
		diff = math.Max(diff, math.Abs(s.vD[k]-s.vD2[k])/math.Abs(s.vD[k]))
	}
	if diff == 0 || diff > 1e-10 {
		t.Fatalf("the two data parts should differ in about the 12th digit, relative difference %g", diff)
	}
	const trials = 3000
	coin := rand.New(rand.NewPCG(7, 7))
	noise := privacy.NewSecureNoise()

	// The insecure arithmetic: du = v + lambda eta with eta on the lattice of sigma.
	floatCorrect := 0
	eta := make([]float64, len(s.a))
	for trial := 0; trial < trials; trial++ {
		w := coin.IntN(2)
		v := [2][]float64{s.vD, s.vD2}[w]
		noise.Normal(eta, s.sigma)
		zhat := make([]float64, len(v))
		inv := 1 / float64(s.n)
		for k := range v {
			zhat[k] = s.zhat0[k] + (v[k]+s.lambda*eta[k])*inv
		}
		if s.guessWorld(s.du(zhat)) == w {
			floatCorrect++
		}
	}
	if floatCorrect < trials*99/100 {
		t.Fatalf("the attack should separate the floating-point mechanism's worlds, got %d/%d", floatCorrect, trials)
	}

	// The shipped machine with the secure sampler.
	correct := 0
	for trial := 0; trial < trials; trial++ {
		w := coin.IntN(2)
		row := [2][]float64{s.a, s.a2}[w]
		cfg := Config{Node: 0, Nodes: s.n, Gamma: s.gamma, Lambda: s.lambda, Clip: s.clip, Sigma: s.sigma,
			Rand: rand.New(rand.NewPCG(1, 1)), Noise: noise, Run: "r"}
		m := newMachine(t, cfg, oneRow(row, s.y), 1)
		tok := Token{Run: "r", Z: append([]float64(nil), s.z0...), Zhat: append([]float64(nil), s.zhat0...)}
		if err := m.Step(Message{Token: tok}); err != nil {
			t.Fatal(err)
		}
		out := m.Ready().Outbox[0].Token
		// Every coordinate of the update is on the noise lattice: u started at 0, so u = du.
		for k, uk := range m.U() {
			if q := uk / s.h; q != math.Trunc(q) {
				t.Fatalf("trial %d: u[%d] = %v is not a multiple of the lattice step %v", trial, k, uk, s.h)
			}
		}
		if s.guessWorld(s.du(out.Zhat)) == w {
			correct++
		}
	}
	// No advantage: the accuracy is 1/2 up to 4.5 standard errors (false alarm below 1e-5).
	se := math.Sqrt(0.25 / trials)
	if acc := float64(correct) / trials; math.Abs(acc-0.5) > 4.5*se {
		t.Fatalf("the residue attack tells the datasets apart on the secure path: accuracy %.4f over %d trials (floating-point mechanism: %d/%d)",
			acc, trials, floatCorrect, trials)
	}
}

// TestLatticeClip checks the clip reduction: the rounded data part's sensitivity bound
// 4 lambda C' + h sqrt(p) stays within 4 lambda C, and absurd settings are refused.
func TestLatticeClip(t *testing.T) {
	for _, c := range []struct {
		clip, lambda, sigma float64
		dim                 int
	}{{0.1, 0.5, 1, 3}, {1, 1, 100, 1000}, {1e-6, 0.25, 3, 64}, {5, 0.01, 1e4, 1_000_000}} {
		h, ce, err := LatticeClip(c.clip, c.lambda, c.sigma, c.dim)
		if err != nil {
			t.Fatal(err)
		}
		if h != privacy.Granularity(c.lambda*c.sigma) {
			t.Errorf("%+v: step %v, want the sampler's %v", c, h, privacy.Granularity(c.lambda*c.sigma))
		}
		if !(ce < c.clip) || !(ce > 0) {
			t.Errorf("%+v: clip %v not in (0, %v)", c, ce, c.clip)
		}
		if sens := 4*c.lambda*ce + h*math.Sqrt(float64(c.dim)); sens > 4*c.lambda*c.clip {
			t.Errorf("%+v: rounded sensitivity %v exceeds 4 lambda C = %v", c, sens, 4*c.lambda*c.clip)
		}
		if c.clip-ce > 1e-9*c.clip+1e-9*c.sigma {
			t.Errorf("%+v: reduction %v is larger than the lattice needs", c, c.clip-ce)
		}
	}
	if _, _, err := LatticeClip(1e-16, 0.5, 1e6, 10); err == nil {
		t.Error("a clip below the lattice slack must be refused")
	}
	if _, _, err := LatticeClip(1, 0.5, 1e-320, 10); err == nil {
		t.Error("a sigma whose lattice underflows must be refused")
	}
	if _, _, err := LatticeClip(1, 0.5, 1e-300, 3); err == nil {
		t.Error("a subnormal lattice step (1/h = +Inf) must be refused")
	}
	// A clip so small that the squares of a difference needing clipping underflow would
	// skip the clip (computed norm 0): refused.
	if _, _, err := LatticeClip(1e-170, 0.5, 1e-160, 3); err == nil {
		t.Error("a clip below 2^-400 must be refused")
	}
}

// TestLatticeRefusesOverflowingToken: a finite token whose coordinates overflow the update
// (2z - u, a.v) would turn the data part into +-Inf or NaN by its signs, which no noise
// hides. The noisy update refuses it before writing anything, on the one-row and the
// multi-row path.
func TestLatticeRefusesOverflowingToken(t *testing.T) {
	for _, rows := range []int{1, 2} {
		x := []float64{0.8, 0, -0.5, 0.3, 1, 0.5, 0, 0.2}[:4*rows]
		d := &consensus.Dataset{Name: "t", Rows: rows, Cols: 4, X: x, Y: []float64{1, -1}[:rows]}
		cfg := Config{Node: 0, Nodes: 5, Gamma: 1, Lambda: 0.5, Clip: 0.1, Sigma: 5,
			Rand: rand.New(rand.NewPCG(1, 1)), Noise: privacy.NewSecureNoise(), Run: "r"}
		m := newMachine(t, cfg, d, 1)
		u0 := m.U()
		z := []float64{1.7e308, -1.7e308, 1.7e308, 1e308}
		tok := Token{Run: "r", Z: append([]float64(nil), z...), Zhat: append([]float64(nil), z...)}
		if err := m.Step(Message{Token: tok}); err != ErrNotFinite {
			t.Fatalf("rows %d: overflowing token: %v, want ErrNotFinite", rows, err)
		}
		if m.HasReady() || m.Updates() != 0 {
			t.Fatalf("rows %d: something was queued after a refused token", rows)
		}
		for k, v := range m.U() {
			if v != u0[k] {
				t.Fatalf("rows %d: u[%d] changed to %v", rows, k, v)
			}
		}
		for k := range z {
			if tok.Z[k] != z[k] || tok.Zhat[k] != z[k] {
				t.Fatalf("rows %d: the refused token was modified at %d", rows, k)
			}
		}
	}
}
