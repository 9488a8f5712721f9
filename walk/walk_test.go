package walk

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
)

// fixedNoise returns a known, repeating sequence scaled by sigma; allocation-free.
type fixedNoise struct{ i int }

func (f *fixedNoise) Normal(dst []float64, sigma float64) {
	for k := range dst {
		f.i++
		dst[k] = sigma * (float64(f.i%7) - 3) / 2
	}
}
func (f *fixedNoise) Uniform() float64 { return 0.5 }
func (f *fixedNoise) Secure() bool     { return false }

func oneRow(a []float64, y float64) *consensus.Dataset {
	return &consensus.Dataset{Name: "t", Rows: 1, Cols: len(a), X: append([]float64(nil), a...), Y: []float64{y}}
}

func newMachine(t testing.TB, cfg Config, d *consensus.Dataset, w float64) *Machine {
	t.Helper()
	ll, err := consensus.NewLocalLoss(d, consensus.Squared, w)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(cfg, ll, d.Cols)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestOneUpdateAgainstNaive checks one noisy update of Algorithm 4 (eq. 6-7 with
// clipping, DR-consistent zhat) against an independent transcription.
func TestOneUpdateAgainstNaive(t *testing.T) {
	a := []float64{0.3, -1.2, 0.5}
	y := 0.7
	const n, gamma, lambda, clip, sigma, weight = 5, 1.5, 0.7, 0.4, 0.9, 2.0
	reg := consensus.Regularizer{L1: 0.05, L2: 0.1}
	cfg := Config{Node: 2, Nodes: n, Gamma: gamma, Lambda: lambda, Clip: clip, Sigma: sigma, Reg: reg,
		Rand: rand.New(rand.NewPCG(1, 2)), Noise: &fixedNoise{}, Run: "r", Walk: 3}
	m := newMachine(t, cfg, oneRow(a, y), weight)
	u0 := []float64{0.2, -0.1, 0.05}
	if err := m.Restore(Checkpoint{Node: 2, Updates: 0, U: u0}); err != nil {
		t.Fatal(err)
	}
	zhat := []float64{1, 2, -0.5}
	z := make([]float64, 3)
	reg.Prox(z, zhat, gamma)
	tok := Token{Run: "r", Walk: 3, Epoch: 1, Hop: 9, Z: append([]float64(nil), z...), Zhat: append([]float64(nil), zhat...)}

	// Naive: x = argmin w/2 (a.x - y)^2 + ||x - v||^2/(2 gamma), by the closed form.
	v := make([]float64, 3)
	for k := range v {
		v[k] = 2*z[k] - u0[k]
	}
	av, aa := 0.0, 0.0
	for k := range a {
		av += a[k] * v[k]
		aa += a[k] * a[k]
	}
	x := make([]float64, 3)
	for k := range x {
		x[k] = v[k] + gamma*weight*(y-av)/(1+gamma*weight*aa)*a[k]
	}
	d := make([]float64, 3)
	nd := 0.0
	for k := range d {
		d[k] = x[k] - z[k]
		nd += d[k] * d[k]
	}
	nd = math.Sqrt(nd)
	eta := make([]float64, 3)
	(&fixedNoise{}).Normal(eta, sigma)
	wantU, wantZhat, wantZ := make([]float64, 3), make([]float64, 3), make([]float64, 3)
	for k := range d {
		g := d[k] * math.Min(1, clip/nd)
		du := 2 * lambda * (g + 0.5*eta[k])
		wantU[k] = u0[k] + du
		wantZhat[k] = zhat[k] + du/n
	}
	for k := range wantZ { // soft-threshold then shrink, written out
		s := math.Max(math.Abs(wantZhat[k])-gamma*reg.L1, 0)
		wantZ[k] = math.Copysign(s, wantZhat[k]) / (1 + gamma*reg.L2)
	}
	if nd <= clip {
		t.Fatalf("test vector should exercise clipping, ||x-z||=%v", nd)
	}

	if err := m.Step(Message{From: 0, Token: tok}); err != nil {
		t.Fatal(err)
	}
	rd := m.Ready()
	if len(rd.Ledger) != 1 || len(rd.Outbox) != 1 || rd.State == nil {
		t.Fatalf("ready = %+v", rd)
	}
	out := rd.Outbox[0].Token
	for k := 0; k < 3; k++ {
		if math.Abs(out.Zhat[k]-wantZhat[k]) > 1e-12 || math.Abs(out.Z[k]-wantZ[k]) > 1e-12 || math.Abs(rd.State.U[k]-wantU[k]) > 1e-12 {
			t.Errorf("coord %d: zhat %v want %v, z %v want %v, u %v want %v", k, out.Zhat[k], wantZhat[k], out.Z[k], wantZ[k], rd.State.U[k], wantU[k])
		}
	}
	if out.Hop != 10 || out.Epoch != 1 || out.Walk != 3 || out.Run != "r" {
		t.Errorf("token header %+v", out)
	}
	e := rd.Ledger[0]
	if e.Mechanism != MechGaussian || math.Abs(e.Sensitivity-4*lambda*clip) > 1e-15 || math.Abs(e.Sigma-lambda*sigma) > 1e-15 ||
		e.Node != "2" || e.Hop != 10 || e.Seq != 1 || e.Clip != clip || e.Lambda != lambda {
		t.Errorf("ledger entry %+v", e)
	}
	if e.Recipient == "" || rd.Outbox[0].To < 0 || rd.Outbox[0].To >= n {
		t.Errorf("recipient %q to %d", e.Recipient, rd.Outbox[0].To)
	}
	if rd.State.Updates != 1 || m.Updates() != 1 {
		t.Errorf("updates %d", rd.State.Updates)
	}
	m.Advance(rd)
	if m.HasReady() {
		t.Error("ready after advance")
	}
}

// network runs a walk over one-row squared-loss nodes, returning the machines.
func network(t testing.TB, n, p int, reg consensus.Regularizer, sigma float64, hops int, seed uint64,
	check func(ms []*Machine, tok Token)) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 99))
	ms := make([]*Machine, n)
	for i := range ms {
		a := make([]float64, p)
		for k := range a {
			a[k] = r.NormFloat64() / math.Sqrt(float64(p))
		}
		y := a[0] - 2*a[1] + 0.1*r.NormFloat64()
		cfg := Config{Node: i, Nodes: n, Gamma: 1, Lambda: 0.5, Clip: math.Inf(1), Sigma: sigma, Reg: reg,
			Rand: rand.New(rand.NewPCG(seed, uint64(i))), Noise: privacy.NewSeededNoise(seed + uint64(i)), Run: "run"}
		ms[i] = newMachine(t, cfg, oneRow(a, y), 1)
	}
	tok := NewToken("run", 0, p, reg, 1)
	at := 0
	for h := 0; h < hops; h++ {
		if err := ms[at].Step(Message{Token: tok}); err != nil {
			t.Fatal(err)
		}
		rd := ms[at].Ready()
		ms[at].Advance(rd)
		tok, at = rd.Outbox[0].Token, rd.Outbox[0].To
		if check != nil {
			check(ms, tok)
		}
	}
}

// TestZhatIsMeanU checks the DR-consistent recursion of digest 2.9: zhat_k = mean_i u_{k,i}
// and z_k = prox_{gamma r}(zhat_k) at every hop, for r = 0, L1 and elastic net, with noise.
// With r = 0 this is exactly DR-ADMM (z = zhat = mean u).
func TestZhatIsMeanU(t *testing.T) {
	for _, reg := range []consensus.Regularizer{{}, {L1: 0.05}, {L1: 0.02, L2: 0.1}} {
		for _, sigma := range []float64{0, 0.3} {
			const n, p = 6, 4
			mean := make([]float64, p)
			want := make([]float64, p)
			network(t, n, p, reg, sigma, 300, 7, func(ms []*Machine, tok Token) {
				for k := range mean {
					mean[k] = 0
				}
				for _, m := range ms {
					for k, v := range m.u {
						mean[k] += v / n
					}
				}
				reg.Prox(want, mean, 1)
				for k := range mean {
					if math.Abs(tok.Zhat[k]-mean[k]) > 1e-10 || math.Abs(tok.Z[k]-want[k]) > 1e-10 {
						t.Fatalf("reg %+v sigma %v: zhat %v mean u %v; z %v prox %v", reg, sigma, tok.Zhat, mean, tok.Z, want)
					}
					if reg == (consensus.Regularizer{}) && tok.Z[k] != tok.Zhat[k] {
						t.Fatalf("r=0: z %v != zhat %v", tok.Z, tok.Zhat)
					}
				}
			})
		}
	}
}

// TestL1DoesNotCollapse: with a modest L1 weight the walk keeps the two true features.
// Re-proxing z at every hop (the printed form) would shrink it to zero.
func TestL1DoesNotCollapse(t *testing.T) {
	var last Token
	network(t, 40, 5, consensus.Regularizer{L1: 0.01}, 0, 20000, 3, func(_ []*Machine, tok Token) { last = tok })
	if math.Abs(last.Z[0]) < 0.3 || math.Abs(last.Z[1]) < 0.6 {
		t.Fatalf("L1 model collapsed: z = %v", last.Z)
	}
}

func TestMaxUpdatesForwards(t *testing.T) {
	cfg := Config{Node: 0, Nodes: 3, Gamma: 1, Lambda: 0.5, Clip: 1, Sigma: 1, Rand: rand.New(rand.NewPCG(1, 1)),
		Noise: &fixedNoise{}, MaxUpdates: 1, Run: "r"}
	m := newMachine(t, cfg, oneRow([]float64{1, 1}, 1), 1)
	tok := NewToken("r", 0, 2, consensus.Regularizer{}, 1)
	if err := m.Step(Message{Token: tok}); err != nil {
		t.Fatal(err)
	}
	rd := m.Ready()
	tok = rd.Outbox[0].Token
	m.Advance(rd)
	before := append([]float64(nil), tok.Z...)
	u := m.U()
	if err := m.Step(Message{Token: tok}); err != nil {
		t.Fatal(err)
	}
	rd = m.Ready()
	e := rd.Ledger[0]
	if e.Mechanism != MechForward || e.Sensitivity != 0 || e.Sigma != 0 || rd.State.Updates != 1 {
		t.Fatalf("at cap: %+v updates %d", e, rd.State.Updates)
	}
	for k := range before {
		if rd.Outbox[0].Token.Z[k] != before[k] || m.u[k] != u[k] {
			t.Fatal("forward changed the model or u")
		}
	}
	if rd.Outbox[0].Token.Hop != 2 || rd.Events[0].Kind != EventForward {
		t.Fatalf("hop %d event %+v", rd.Outbox[0].Token.Hop, rd.Events[0])
	}
}

func TestStepRejects(t *testing.T) {
	cfg := Config{Node: 0, Nodes: 2, Gamma: 1, Lambda: 0.5, Clip: 1, Rand: rand.New(rand.NewPCG(1, 1)), Run: "r", Walk: 1}
	m := newMachine(t, cfg, oneRow([]float64{1, 1}, 1), 1)
	good := func() Token { return Token{Run: "r", Walk: 1, Z: []float64{0, 0}, Zhat: []float64{0, 0}} }
	bad := []struct {
		name string
		tok  Token
		err  error
	}{
		{"dim", Token{Run: "r", Walk: 1, Z: []float64{0}, Zhat: []float64{0}}, ErrDim},
		{"zhat dim", Token{Run: "r", Walk: 1, Z: []float64{0, 0}, Zhat: nil}, ErrDim},
		{"nan", Token{Run: "r", Walk: 1, Z: []float64{math.NaN(), 0}, Zhat: []float64{0, 0}}, ErrNotFinite},
		{"inf", Token{Run: "r", Walk: 1, Z: []float64{0, 0}, Zhat: []float64{0, math.Inf(-1)}}, ErrNotFinite},
		{"run", Token{Run: "x", Walk: 1, Z: []float64{0, 0}, Zhat: []float64{0, 0}}, ErrForeign},
		{"walk", Token{Run: "r", Walk: 2, Z: []float64{0, 0}, Zhat: []float64{0, 0}}, ErrForeign},
	}
	for _, b := range bad {
		if err := m.Step(Message{Token: b.tok}); err != b.err {
			t.Errorf("%s: err %v want %v", b.name, err, b.err)
		}
		if m.HasReady() || m.Updates() != 0 {
			t.Fatalf("%s: rejected token changed state", b.name)
		}
	}
	if err := m.Step(Message{Token: good()}); err != nil {
		t.Fatal(err)
	}
	if err := m.Step(Message{Token: good()}); err != ErrBusy {
		t.Fatalf("second step before advance: %v", err)
	}
}

// TestWalkEndsAtHops: with Config.Hops = K the walk of two machines hands the token on at
// hops 1..K, each hand-off covered by its ledger entry, and the node receiving hop K ends
// it: Ready.Final holds the token as received, one EventFinal, no ledger entry, no state,
// no envelope, u_i and K_i untouched. A token beyond K is refused with ErrHop, as is one at
// the largest hop value without K (the counter cannot advance); a non-finite token at hop K
// is refused too.
func TestWalkEndsAtHops(t *testing.T) {
	const K = 5
	ms := make([]*Machine, 2)
	for i := range ms {
		cfg := Config{Node: i, Nodes: 2, Gamma: 1, Lambda: 0.5, Clip: 1, Sigma: 1, Rand: rand.New(rand.NewPCG(1, uint64(i))),
			Noise: &fixedNoise{}, Run: "r", Hops: K}
		ms[i] = newMachine(t, cfg, oneRow([]float64{1, -1}, 0.5), 1)
	}
	tok, at := NewToken("r", 0, 2, consensus.Regularizer{}, 1), 0
	for hop := uint64(1); hop <= K; hop++ {
		if err := ms[at].Step(Message{Token: tok}); err != nil {
			t.Fatalf("hop %d: %v", hop, err)
		}
		rd := ms[at].Ready()
		if rd.Final != nil || len(rd.Outbox) != 1 || len(rd.Ledger) != 1 || rd.Outbox[0].Token.Hop != hop || rd.Ledger[0].Hop != hop ||
			rd.Ledger[0].Recipient != strconv.Itoa(rd.Outbox[0].To) {
			t.Fatalf("hop %d: Ready %+v", hop, rd)
		}
		ms[at].Advance(rd)
		tok, at = rd.Outbox[0].Token, rd.Outbox[0].To
	}
	m := ms[at]
	u, k := m.U(), m.Updates()
	z := append([]float64(nil), tok.Z...)
	nan := Token{Run: "r", Hop: K, Z: []float64{math.NaN(), 0}, Zhat: []float64{0, 0}}
	if err := m.Step(Message{Token: nan}); err != ErrNotFinite {
		t.Fatalf("non-finite token at hop K: %v", err)
	}
	beyond := Token{Run: "r", Hop: K + 1, Z: []float64{0, 0}, Zhat: []float64{0, 0}}
	if err := m.Step(Message{Token: beyond}); err != ErrHop || m.HasReady() {
		t.Fatalf("token beyond K: %v", err)
	}
	if err := m.Step(Message{Token: tok}); err != nil {
		t.Fatal(err)
	}
	rd := m.Ready()
	if rd.Final == nil || rd.Final.Hop != K || rd.Final.Z[0] != z[0] || rd.Final.Z[1] != z[1] {
		t.Fatalf("final %+v, want the token received at hop %d", rd.Final, K)
	}
	if rd.Ledger != nil || rd.State != nil || rd.Outbox != nil || len(rd.Events) != 1 || rd.Events[0] != (Event{Kind: EventFinal, Hop: K, To: at}) {
		t.Fatalf("final Ready %+v", rd)
	}
	if m.Updates() != k || m.U()[0] != u[0] || m.U()[1] != u[1] {
		t.Fatal("the final step changed u or K_i")
	}
	if err := m.Step(Message{Token: tok}); err != ErrBusy {
		t.Fatalf("step with a pending final Ready: %v", err)
	}
	m.Advance(rd)
	if m.HasReady() || m.Ready().Final != nil {
		t.Fatal("final Ready still pending after Advance")
	}

	// Without K the hop counter's last value cannot be handed on; the one before can.
	cfg := Config{Node: 0, Nodes: 1, Gamma: 1, Lambda: 0.5, Clip: 1, Rand: rand.New(rand.NewPCG(1, 1)), Run: "r"}
	m = newMachine(t, cfg, oneRow([]float64{1, -1}, 0.5), 1)
	last := Token{Run: "r", Hop: math.MaxUint64, Z: []float64{0, 0}, Zhat: []float64{0, 0}}
	if err := m.Step(Message{Token: last}); err != ErrHop {
		t.Fatalf("hop 2^64-1 without K: %v", err)
	}
	last.Hop--
	if err := m.Step(Message{Token: last}); err != nil || m.Ready().Outbox[0].Token.Hop != math.MaxUint64 {
		t.Fatalf("hop 2^64-2 without K: %v", err)
	}
}

func TestValidate(t *testing.T) {
	base := DefaultConfig()
	base.Nodes, base.Rand = 4, rand.New(rand.NewPCG(1, 1))
	if err := base.Validate(); err != nil {
		t.Fatal(err)
	}
	cases := map[string]func(c *Config){
		"walk: gamma must be > 0":   func(c *Config) { c.Gamma = 0 },
		"walk: gamma must be > 0 ":  func(c *Config) { c.Gamma = math.NaN() },
		"walk: lambda must be":      func(c *Config) { c.Lambda = 1.5 },
		"walk: lambda must be ":     func(c *Config) { c.Lambda = 0 },
		"walk: clip must be > 0":    func(c *Config) { c.Clip = -1 },
		"walk: sigma must be":       func(c *Config) { c.Sigma = math.Inf(1) },
		"walk: a noise source":      func(c *Config) { c.Sigma = 1 },
		"walk: node 4 out of range": func(c *Config) { c.Node = 4 },
		"walk: nodes must be":       func(c *Config) { c.Nodes = 0 },
		"walk: a random source":     func(c *Config) { c.Rand = nil },
		"walk: regularizer":         func(c *Config) { c.Reg.L1 = -1 },
		"walk: max updates must be": func(c *Config) { c.MaxUpdates = -1 },
		"walk: 2 names for 4 nodes": func(c *Config) { c.Names = []string{"a", "b"} },
	}
	for want, f := range cases {
		c := base
		f(&c)
		err := c.Validate()
		if err == nil || len(err.Error()) < len(want)-1 || err.Error()[:len(trim(want))] != trim(want) {
			t.Errorf("%q: got %v", want, err)
		}
	}
}

func trim(s string) string {
	for len(s) > 0 && s[len(s)-1] == ' ' {
		s = s[:len(s)-1]
	}
	return s
}

func hopRing(b testing.TB, sigma float64, n, p int) func() {
	r := rand.New(rand.NewPCG(5, 5))
	ms := make([]*Machine, n)
	for i := range ms {
		a := make([]float64, p)
		for k := range a {
			a[k] = r.NormFloat64() / math.Sqrt(float64(p))
		}
		cfg := Config{Node: i, Nodes: n, Gamma: 1, Lambda: 0.5, Clip: 1, Sigma: sigma, Reg: consensus.Regularizer{L1: 1e-3},
			Rand: rand.New(rand.NewPCG(1, uint64(i))), Noise: &fixedNoise{}, Run: "r", Names: make([]string, n)}
		ms[i] = newMachine(b, cfg, oneRow(a, r.NormFloat64()), 1)
	}
	tok := NewToken("r", 0, p, consensus.Regularizer{L1: 1e-3}, 1)
	at := 0
	return func() {
		m := ms[at]
		if err := m.Step(Message{Token: tok}); err != nil {
			b.Fatal(err)
		}
		rd := m.Ready()
		tok, at = rd.Outbox[0].Token, rd.Outbox[0].To
		m.Advance(rd)
	}
}

// TestHopAllocationFree: a hop (Step, Ready, Advance) allocates nothing, with and without noise.
func TestHopAllocationFree(t *testing.T) {
	for _, sigma := range []float64{0, 1} {
		hop := hopRing(t, sigma, 50, 64)
		for i := 0; i < 200; i++ { // warm the prox caches
			hop()
		}
		if a := testing.AllocsPerRun(1000, hop); a != 0 {
			t.Errorf("sigma=%v: %v allocs per hop", sigma, a)
		}
	}
}

func BenchmarkHop800(b *testing.B) {
	for _, c := range []struct {
		name  string
		sigma float64
	}{{"sigma=0", 0}, {"sigma>0", 1}} {
		b.Run(c.name, func(b *testing.B) {
			hop := hopRing(b, c.sigma, 800, 64)
			for i := 0; i < 1000; i++ {
				hop()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				hop()
			}
		})
	}
}
