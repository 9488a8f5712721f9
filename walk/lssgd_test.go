package walk

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
)

// TestLSSGDOneStepNoisy checks one noisy ls-sgd update (rate 1, nu 1.5, one example clipped)
// against a transcription: per-example gradients by hand, the clip, the noise, a dense solve
// of Q_nu, du = 2 lambda rho x. The lattice moves G by at most rows h/2 + h/2 per coordinate
// (h = 2^-40 sigma), far inside the tolerance; the ledger entry is the subsampled mechanism.
func TestLSSGDOneStepNoisy(t *testing.T) {
	d := smallLogistic()
	const n, gamma, lambda, clip, sigma, eta, weight, nu = 3, 0.9, 0.5, 1.2, 0.7, 1.7, 2.0, 1.5
	cfg := Config{Node: 0, Nodes: n, Gamma: gamma, Lambda: lambda, Clip: clip, Sigma: sigma,
		Rand: rand.New(rand.NewPCG(1, 2)), Noise: &fixedNoise{}, Run: "r", Step: StepParams{Kind: StepLSSGD, Eta: eta, Nu: nu, Rate: 1}}
	u0 := []float64{0.3, -0.2, 0.1, 0.4}
	m := oneNode(t, d, weight, cfg, u0)
	z := []float64{0.5, -1, 0.25, 2}
	zhat := append([]float64(nil), z...)

	sum := make([]float64, 4)
	clipped := 0
	for r := 0; r < d.Rows; r++ {
		a := d.Row(r)
		mgn := 0.0
		for k := range a {
			mgn += a[k] * z[k]
		}
		dr := -d.Y[r] / (1 + math.Exp(d.Y[r]*mgn))
		nrm := math.Abs(dr) * math.Sqrt(dotSeq(a, a))
		s := 1.0
		if nrm > clip {
			s, clipped = clip/nrm, clipped+1
		}
		for k := range a {
			sum[k] += s * dr * a[k]
		}
	}
	if clipped == 0 || clipped == d.Rows {
		t.Fatalf("test vector should clip some but not all examples (clipped %d)", clipped)
	}
	noise := make([]float64, 4)
	(&fixedNoise{}).Normal(noise, sigma)
	b := make([]float64, 4)
	for k := range b {
		G := weight / float64(d.Rows) * (sum[k] + noise[k])
		b[k] = (z[k] - u0[k]) - gamma*G
	}
	x := solveDense(denseQ(4, nu), b)
	rho := eta / (gamma + eta)
	if err := m.Step(Message{Token: Token{Run: "r", Z: append([]float64(nil), z...), Zhat: zhat}}); err != nil {
		t.Fatal(err)
	}
	rd := m.Ready()
	for k := range x {
		du := 2 * lambda * rho * x[k]
		if got := rd.State.U[k]; math.Abs(got-(u0[k]+du)) > 1e-9 {
			t.Errorf("coord %d: u %v want %v", k, got, u0[k]+du)
		}
		if got := rd.Outbox[0].Token.Zhat[k]; math.Abs(got-(z[k]+du/n)) > 1e-9 {
			t.Errorf("coord %d: zhat %v want %v", k, got, z[k]+du/n)
		}
	}
	e := rd.Ledger[0]
	if e.Mechanism != MechSubsampled || e.Sensitivity != clip || e.Sigma != sigma || e.Rate != 1 || e.Lambda != lambda || e.Validate() != nil {
		t.Errorf("entry %+v", e)
	}
}

// TestLSSGDLatticeHidesLowBits: a change of one example far below the lattice step leaves
// the released token bit for bit unchanged with noise (the token depends on the data only
// through the integer noisy sum), while without noise it shows.
func TestLSSGDLatticeHidesLowBits(t *testing.T) {
	run := func(sigma, perturb float64) Token {
		d := smallLogistic()
		d.X[5] *= 1 + perturb
		cfg := Config{Node: 0, Nodes: 3, Gamma: 1, Lambda: 0.5, Clip: 1, Sigma: sigma, Rand: rand.New(rand.NewPCG(1, 2)),
			Noise: &fixedNoise{}, Run: "r", Step: StepParams{Kind: StepLSSGD, Eta: 1, Nu: 2, Rate: 1}}
		m := oneNode(t, d, 1, cfg, []float64{0.1, 0.2, -0.3, 0.05})
		tok := Token{Run: "r", Z: []float64{0.5, -1, 0.25, 2}, Zhat: []float64{0.5, -1, 0.25, 2}}
		if err := m.Step(Message{Token: tok}); err != nil {
			t.Fatal(err)
		}
		return m.Ready().Outbox[0].Token
	}
	same := func(a, b Token) bool {
		for k := range a.Z {
			if math.Float64bits(a.Z[k]) != math.Float64bits(b.Z[k]) || math.Float64bits(a.Zhat[k]) != math.Float64bits(b.Zhat[k]) {
				return false
			}
		}
		return true
	}
	if !same(run(1, 0), run(1, 0x1p-45)) {
		t.Error("with noise, a change below the lattice step shows in the token")
	}
	if same(run(0, 0), run(0, 0x1p-45)) {
		t.Error("without noise the change should show (the test would be vacuous)")
	}
}

// TestGradLatticeSensitivity: for random directions (clipped to the reduced clip C', then
// rounded onto hZ coordinate-wise), h ||round(g/h)|| <= C, and C' is within 2 h sqrt(p) of C.
func TestGradLatticeSensitivity(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	for _, p := range []int{1, 3, 64, 1000} {
		for _, sigma := range []float64{1e-6, 0.37, 5} {
			const clip = 1.0
			h, ce, err := GradLatticeClip(clip, sigma, p)
			if err != nil {
				t.Fatal(err)
			}
			if h != privacy.Granularity(sigma) || !(ce < clip) || clip-ce > 2*h*math.Sqrt(float64(p))+1e-12 {
				t.Fatalf("p %d sigma %v: h %v clip' %v", p, sigma, h, ce)
			}
			st := &gradState{clip: ce, anorm: []float64{0}}
			a := make([]float64, p)
			for it := 0; it < 200; it++ {
				for k := range a {
					a[k] = r.NormFloat64()
					if it%2 == 1 {
						a[k] = math.Copysign(float64(r.IntN(3)), a[k]) * h / 2 // ties and lattice points
					}
				}
				st.anorm[0] = math.Sqrt(dotSeq(a, a))
				e := st.clipped(1e9, 0)
				nn := 0.0
				for _, v := range a {
					q := math.RoundToEven(float64(e*v) / h)
					nn += q * q
				}
				if s := h * math.Sqrt(nn); s > clip {
					t.Fatalf("p %d sigma %v: rounded clipped example has norm %v > C", p, sigma, s)
				}
			}
		}
	}
	if _, _, err := GradLatticeClip(1e-30, 1, 1000); err == nil {
		t.Error("a clip below the lattice slack was accepted")
	}
	if _, _, err := GradLatticeClip(math.Inf(1), 1, 10); err == nil {
		t.Error("an infinite clip was accepted")
	}
}

// TestPoissonUnbiased: at rate q the gradient estimate's mean over many draws is the full
// gradient (c_q = w/(q m) undoes the sampling), within 5 standard errors.
func TestPoissonUnbiased(t *testing.T) {
	d, _ := consensus.SyntheticLogistic(40, 3, 2, 3)
	const q, draws = 0.3, 4000
	cfg := Config{Node: 0, Nodes: 2, Gamma: 1, Lambda: 0.5, Clip: math.Inf(1), Rand: rand.New(rand.NewPCG(1, 2)),
		Noise: privacy.NewSeededNoise(8), Run: "r", Step: StepParams{Kind: StepLSSGD, Eta: 1, Rate: q}}
	m := oneNode(t, d, 1.5, cfg, nil)
	w := []float64{0.2, -0.4, 0.1}
	full := make([]float64, 3)
	ll, _ := consensus.NewLocalLoss(d, consensus.Logistic, 1.5)
	ll.Grad(full, w)
	mean, sq := make([]float64, 3), make([]float64, 3)
	for i := 0; i < draws; i++ {
		if err := m.gradient(w); err != nil {
			t.Fatal(err)
		}
		for k, g := range m.st.grad {
			mean[k] += g / draws
			sq[k] += g * g / draws
		}
	}
	for k := range mean {
		se := math.Sqrt((sq[k] - mean[k]*mean[k]) / draws)
		if math.Abs(mean[k]-full[k]) > 5*se || se == 0 {
			t.Errorf("coord %d: mean %v full %v (se %v)", k, mean[k], full[k], se)
		}
	}
}

// TestLSSGDConverges: without noise (rate 1) the smoothed walk keeps Algorithm 4's fixed
// points (Q_nu^-1 is SPD): nu = 2 still reaches a relative gap <= 1e-3 (more slowly than
// nu = 0: the smoothing damps the high frequencies of the step).
func TestLSSGDConverges(t *testing.T) {
	reg := consensus.Regularizer{L2: 0.01}
	ms, d, prob, tok := logisticNet(t, 8, 400, 10, reg, StepParams{Kind: StepLSSGD, Eta: 10, Nu: 2, Rate: 1}, 0, 10, nil)
	tok = runNet(t, ms, tok, 8000)
	if gap := relGap(t, d, prob, tok.Z); !(gap <= 1e-3) {
		t.Fatalf("relative gap %v", gap)
	}
}

// TestLSSGDNoisyRuns: a private run (secure noise, rate 0.5) stays finite, writes one
// subsampled entry per update and makes progress from the initial model.
func TestLSSGDNoisyRuns(t *testing.T) {
	reg := consensus.Regularizer{L2: 0.01}
	ms, d, prob, tok := logisticNet(t, 8, 800, 10, reg, StepParams{Kind: StepLSSGD, Eta: 0.5, Nu: 1, Rate: 0.5}, 2, 1,
		func(int) privacy.Noise { return privacy.NewSeededNoise(3) })
	start := prob.Objective(d, tok.Z)
	tok = runNet(t, ms, tok, 3000)
	if end := prob.Objective(d, tok.Z); !(end < start-0.05) || !AllFinite(tok.Z) {
		t.Fatalf("objective %v -> %v", start, end)
	}
}

// TestGradStepValidate: bad parameters are refused with clear errors.
func TestGradStepValidate(t *testing.T) {
	d := smallLogistic()
	base := Config{Node: 0, Nodes: 2, Gamma: 1, Lambda: 0.5, Clip: 1, Rand: rand.New(rand.NewPCG(1, 1)), Noise: &fixedNoise{}, Run: "r"}
	cases := []struct {
		want string
		f    func(c *Config)
	}{
		{"step size eta must be > 0", func(c *Config) { c.Step = StepParams{Kind: StepLinearized} }},
		{"step size eta must be > 0", func(c *Config) { c.Step = StepParams{Kind: StepSGD, Rate: 1} }},
		{"sampling rate must be in (0,1]", func(c *Config) { c.Step = StepParams{Kind: StepLSSGD, Eta: 1} }},
		{"sampling rate must be in (0,1]", func(c *Config) { c.Step = StepParams{Kind: StepLSSGD, Eta: 1, Rate: 1.5} }},
		{"step parameter nu must be finite and >= 0", func(c *Config) { c.Step = StepParams{Kind: StepLSSGD, Eta: 1, Rate: 1, Nu: -1} }},
		{"sigma must be >= 0", func(c *Config) { c.Sigma = -1; c.Step = StepParams{Kind: StepLSSGD, Eta: 1, Rate: 1} }},
		{"below one example", func(c *Config) { c.Step = StepParams{Kind: StepLSSGD, Eta: 1, Rate: 0.2} }},
		{"belongs to ls-sgd", func(c *Config) { c.Step = StepParams{Kind: StepSGD, Eta: 1, Rate: 1, Nu: 1} }},
		{"a finite clip is required", func(c *Config) {
			c.Clip, c.Sigma = math.Inf(1), 1
			c.Step = StepParams{Kind: StepSGD, Eta: 1, Rate: 1}
		}},
		{"needs a noise source", func(c *Config) { c.Noise = nil; c.Step = StepParams{Kind: StepSGD, Eta: 1, Rate: 0.5} }},
	}
	for _, c := range cases {
		cfg := base
		c.f(&cfg)
		ll, _ := consensus.NewLocalLoss(d, consensus.Logistic, 1)
		_, err := New(cfg, ll, 4)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v", c.want, err)
		}
	}
}
