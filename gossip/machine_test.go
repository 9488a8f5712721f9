package gossip

import (
	"errors"
	"math"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/consensus/graph"
	"github.com/dpadmm/dpadmm/privacy"
)

// buildNet splits a synthetic logistic problem over n nodes of graph spec with the mapping
// rowWeight = C N/M, rho/N = C L2 (C = 1), so that sum_i O = N * Objective.
func buildNet(t *testing.T, algo Algo, spec string, n, iters int, sched Schedule, gamma, alpha float64, seed uint64) (*net, *consensus.Dataset, consensus.Problem) {
	t.Helper()
	d, _ := consensus.SyntheticLogistic(240, 6, 4, 3)
	prob := consensus.Problem{Loss: consensus.Logistic, Reg: consensus.Regularizer{L2: 0.05}}
	shards, err := consensus.Split(d, n, "iid", 1)
	if err != nil {
		t.Fatal(err)
	}
	g, err := graph.Parse(spec, n, seed)
	if err != nil {
		t.Fatal(err)
	}
	var ms []*Machine
	for i := 0; i < n; i++ {
		obj, err := NewObjective(shards[i], prob.Loss, float64(n)/float64(d.Rows), prob.Reg.L2)
		if err != nil {
			t.Fatal(err)
		}
		cfg := DefaultConfig()
		cfg.Node, cfg.Nodes, cfg.Neighbors, cfg.Algo, cfg.Iters = i, n, g.Neighbors(i), algo, iters
		cfg.Penalty, cfg.Gamma, cfg.Alpha = sched, gamma, alpha
		if !math.IsInf(alpha, 1) {
			cfg.Noise = privacy.NewSeededNoise(seed*100 + uint64(i))
		}
		m, err := New(cfg, obj)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	return newNet(ms), d, prob
}

func average(ms []*Machine) []float64 {
	avg := make([]float64, len(ms[0].f))
	for _, m := range ms {
		for j, v := range m.f {
			avg[j] += v / float64(len(ms))
		}
	}
	return avg
}

// TestConvergenceNoNoise: with alpha = +Inf, conventional ADMM, R-ADMM and MR-ADMM reach the
// centralized optimum of consensus.Solve on the full data (same minimizer by the mapping).
func TestConvergenceNoNoise(t *testing.T) {
	cases := []struct {
		algo  Algo
		spec  string
		sched Schedule
		iters int
	}{
		{ADMM, "ring", Constant(0.1), 300},
		{RADMM, "ring", Constant(0.1), 400},
		{RADMM, "er:0.5", Constant(0.1), 400},
		{MRADMM, "er:0.5", Schedule{Eta: 0.1, Q: 1.01, Max: 0.2}, 600},
	}
	for _, c := range cases {
		n, d, prob := buildNet(t, c.algo, c.spec, 7, c.iters, c.sched, 0.5, math.Inf(1), 5)
		n.run(t)
		_, ref, err := consensus.Solve(d, prob, consensus.SolveOptions{Tol: 1e-12})
		if err != nil {
			t.Fatal(err)
		}
		avg := average(n.ms)
		gap := (prob.Objective(d, avg) - ref) / math.Abs(ref)
		dev := 0.0
		for _, m := range n.ms {
			s := 0.0
			for j, v := range m.f {
				s += (v - avg[j]) * (v - avg[j])
			}
			dev = math.Max(dev, math.Sqrt(s))
		}
		t.Logf("%s on %s: gap %.3g, max deviation %.3g", c.algo, c.spec, gap, dev)
		if !(gap < 1e-9) || gap < -1e-9 || !(dev < 1e-6) {
			t.Errorf("%s on %s: relative gap %.3g (want < 1e-9), deviation %.3g (want < 1e-6)", c.algo, c.spec, gap, dev)
		}
	}
}

// TestEvenStepClosedForm: on a noisy MR-ADMM run, every even iterate equals (a) the formula
// (19) with the recovered noisy gradient computed independently as eps + grad O(f(2k-1))
// and an independently tracked dual, and (b) the closed form from exchanged vectors only
// (digest 2.5).
func TestEvenStepClosedForm(t *testing.T) {
	const iters = 10
	sched := Schedule{Eta: 0.2, Q: 1.05}
	gamma := 0.7
	n, _, _ := buildNet(t, MRADMM, "er:0.6", 6, iters, sched, gamma, 3, 9)
	n.run(t)
	dim := len(n.ms[0].f)
	lam := make([][]float64, len(n.ms))
	for i := range lam {
		lam[i] = make([]float64, dim)
	}
	checked := 0
	for k := 1; 2*k <= iters; k++ {
		for i, m := range n.ms {
			eta := sched.At(k)
			V := float64(m.V)
			fo, fp, fe := n.hist[2*k-1][i], n.hist[2*k-2][i], n.hist[2*k][i]
			eps := n.noise[2*k-1][i]
			if math.Sqrt(dot(eps, eps)) == 0 {
				t.Fatal("noise was not drawn")
			}
			grad := make([]float64, dim)
			m.obj.Grad(grad, fo)
			S := make([]float64, dim)
			U := make([]float64, dim)
			for _, j := range m.cfg.Neighbors {
				for c := 0; c < dim; c++ {
					S[c] += fo[c] - n.hist[2*k-1][j][c]
					U[c] += fp[c] + n.hist[2*k-2][j][c] - 2*n.hist[2*k-1][j][c]
				}
			}
			den := 2*eta*V + gamma
			viaGrad := make([]float64, dim)
			closed := make([]float64, dim)
			for c := 0; c < dim; c++ {
				lam[i][c] += eta / 2 * S[c] // (15)
				viaGrad[c] = fo[c] - (2*lam[i][c]+eps[c]+grad[c]+eta*S[c])/den
				closed[c] = fo[c] - eta/den*U[c]
			}
			vecNear(t, "even step vs (19) with eps + grad O", fe, viaGrad, 1e-9)
			vecNear(t, "even step vs closed form 2.5", fe, closed, 1e-9)
			checked++
		}
	}
	if checked != 5*6 {
		t.Fatalf("checked %d even steps", checked)
	}
	for i, m := range n.ms {
		vecNear(t, "final dual", m.Dual(), lam[i], 1e-9)
	}
}

// TestPVPAndDVPRun: the private baselines run, charge every iteration in the ledger, and
// PVP releases vectors that differ from an exact solve by the recorded noise.
func TestPVPAndDVPRun(t *testing.T) {
	for _, algo := range []Algo{ADMMDVP, ADMMPVP, RADMM} {
		n, _, _ := buildNet(t, algo, "ring", 5, 6, Constant(0.5), 0.5, 2, 3)
		n.run(t)
		for i, l := range n.ledgers {
			pure := 0
			for _, e := range l {
				if e.Mechanism == privacy.MechPure {
					pure++
					if !(e.Epsilon > 0 && e.Epsilon < math.MaxFloat64) || e.Sigma != 0.5 {
						t.Errorf("%s node %d: entry %+v", algo, i, e)
					}
				}
			}
			if want := algo.PerturbedCount(6); pure != want {
				t.Errorf("%s node %d: %d charged entries, want %d", algo, i, pure, want)
			}
		}
	}
}

func oneMachine(t *testing.T, mod func(c *Config)) (*Machine, error) {
	t.Helper()
	obj, err := NewObjective(ds("x", [][]float64{{0.5, 0.1}, {-0.2, 0.3}}, []float64{1, -1}), consensus.Logistic, 0.5, 0.1)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Node, cfg.Nodes, cfg.Neighbors, cfg.Iters = 0, 3, []int{1, 2}, 4
	mod(&cfg)
	return New(cfg, obj)
}

// TestConfigErrors: bad input gives a clear error.
func TestConfigErrors(t *testing.T) {
	cases := []struct {
		name string
		mod  func(c *Config)
	}{
		{"alpha 0", func(c *Config) { c.Alpha = 0 }},
		{"alpha neg", func(c *Config) { c.Alpha = -1; c.Noise = privacy.NewSeededNoise(1) }},
		{"alpha nan", func(c *Config) { c.Alpha = math.NaN() }},
		{"no noise source", func(c *Config) { c.Alpha = 1 }},
		{"admm private", func(c *Config) { c.Algo = ADMM; c.Alpha = 1; c.Noise = privacy.NewSeededNoise(1) }},
		{"mradmm decreasing list", func(c *Config) { c.Algo = MRADMM; c.Penalty = Schedule{List: []float64{1, 0.5}} }},
		{"mradmm q<1", func(c *Config) { c.Algo = MRADMM; c.Penalty = Geometric(1, 0.9) }},
		{"radmm schedule", func(c *Config) { c.Penalty = Geometric(1, 1.1) }},
		{"short list", func(c *Config) { c.Algo = MRADMM; c.Penalty = Schedule{List: []float64{1}} }},
		{"eta 0", func(c *Config) { c.Penalty = Constant(0) }},
		{"no neighbours", func(c *Config) { c.Neighbors = nil }},
		{"self neighbour", func(c *Config) { c.Neighbors = []int{0, 1} }},
		{"unknown neighbour", func(c *Config) { c.Neighbors = []int{1, 7} }},
		{"gamma neg", func(c *Config) { c.Gamma = -1 }},
		{"init dim", func(c *Config) { c.Init = []float64{1} }},
	}
	for _, c := range cases {
		if _, err := oneMachine(t, c.mod); err == nil {
			t.Errorf("%s: no error", c.name)
		} else {
			t.Logf("%s: %v", c.name, err)
		}
	}
	if _, err := ParseAlgo("walk"); err == nil {
		t.Error("unknown algorithm accepted")
	}
	for _, a := range []Algo{ADMM, RADMM, MRADMM, ADMMDVP, ADMMPVP} {
		if b, err := ParseAlgo(a.String()); err != nil || b != a {
			t.Errorf("round trip %v: %v %v", a, b, err)
		}
	}
}

// TestStepValidation: malformed, foreign, stale, duplicate and early messages are refused
// with the right error, and the barrier waits for every neighbour.
func TestStepValidation(t *testing.T) {
	m, err := oneMachine(t, func(*Config) {})
	if err != nil {
		t.Fatal(err)
	}
	rd := m.Ready()
	if len(rd.Outbox) != 2 || rd.Outbox[0].Msg.Iter != 0 || len(rd.Ledger) != 1 {
		t.Fatalf("initial ready: %+v", rd)
	}
	m.Advance(rd)
	v := []float64{0.1, 0.2}
	check := func(msg Message, want error) {
		t.Helper()
		if err := m.Step(msg); !errors.Is(err, want) {
			t.Errorf("Step(%+v) = %v, want %v", msg, err, want)
		}
	}
	check(Message{From: 5, Iter: 0, Vec: v}, ErrNotNeighbor)
	check(Message{From: 1, Iter: 0, Vec: []float64{1}}, ErrDim)
	check(Message{From: 1, Iter: 0, Vec: []float64{math.NaN(), 0}}, ErrNotFinite)
	check(Message{From: 1, Iter: 0, Vec: []float64{math.Inf(1), 0}}, ErrNotFinite)
	check(Message{From: 1, Iter: 0, Vec: []float64{0, -1e101}}, ErrNotFinite) // finite, but beyond MaxCoord
	check(Message{From: 1, Iter: 0, Vec: []float64{0, math.MaxFloat64}}, ErrNotFinite)
	check(Message{From: 1, Iter: 2, Vec: v}, ErrFuture)
	check(Message{From: 1, Iter: 0, Vec: v}, nil)
	check(Message{From: 1, Iter: 0, Vec: v}, ErrDuplicate)
	check(Message{From: 1, Iter: 1, Vec: v}, nil) // one ahead: buffered
	if m.HasReady() {
		t.Fatal("computed before the barrier was complete")
	}
	if miss, _ := m.Missing(); len(miss) != 1 || miss[0] != 2 {
		t.Errorf("missing = %v, want [2]", miss)
	}
	m.Tick()
	m.Tick()
	if _, ticks := m.Missing(); ticks != 2 {
		t.Errorf("ticks = %d", ticks)
	}
	check(Message{From: 2, Iter: 0, Vec: v}, nil)
	if !m.HasReady() || m.Iter() != 1 {
		t.Fatalf("barrier complete but no iteration: ready=%v iter=%d", m.HasReady(), m.Iter())
	}
	check(Message{From: 2, Iter: 0, Vec: v}, ErrStale)
	rd = m.Ready()
	if rd.Ledger[0].Mechanism != privacy.MechPure || rd.Ledger[0].Epsilon != math.MaxFloat64 {
		t.Errorf("non-private release must carry no guarantee: %+v", rd.Ledger[0])
	}
	m.Advance(rd)
	if m.HasReady() {
		t.Fatal("iteration 2 computed with one neighbour's vector missing")
	}
}

// TestHeterogeneousPenaltyBias documents a property of MR-ADMM with node-specific penalties:
// the dual sum sum_i lambda_i is no longer conserved at 0 (digest 2.8), the iterates still
// reach consensus, and the consensus point f satisfies the fixed-point relation
// sum_i grad O_i(f) = -2 sum_i lambda_i, so it is the optimum only if the dual sum returns
// to 0. With a common schedule the dual sum stays 0 and the limit is the optimum.
func TestHeterogeneousPenaltyBias(t *testing.T) {
	n, d, prob := buildNet(t, MRADMM, "er:0.6", 5, 1000, Constant(1), 0.5, math.Inf(1), 2)
	base := []float64{0.05, 0.0515, 0.051, 0.04, 0.0505}
	q := []float64{1.01, 1.005, 1.003, 1.015, 1.01}
	for i, m := range n.ms {
		m.cfg.Penalty = Schedule{Eta: base[i], Q: q[i], Max: 0.1}
	}
	n.run(t)
	avg := average(n.ms)
	dim := len(avg)
	gsum, lsum, g := make([]float64, dim), make([]float64, dim), make([]float64, dim)
	for _, m := range n.ms {
		m.obj.Grad(g, avg)
		for j := range g {
			gsum[j] += g[j]
			lsum[j] -= 2 * m.lam[j]
		}
	}
	vecNear(t, "sum grad O_i(f) vs -2 sum lambda_i", gsum, lsum, 1e-8)
	_, ref, _ := consensus.Solve(d, prob, consensus.SolveOptions{Tol: 1e-12})
	gap := (prob.Objective(d, avg) - ref) / ref
	t.Logf("heterogeneous MR-ADMM: |sum lambda| = %.3g, relative gap %.3g", math.Sqrt(dot(lsum, lsum))/2, gap)
	if math.Sqrt(dot(lsum, lsum)) < 1e-6 || gap < 1e-8 {
		t.Errorf("expected a non-zero dual sum and a biased limit with heterogeneous penalties (gap %.3g)", gap)
	}
}

// FuzzStep: arbitrary message sequences never panic and never leave a non-finite state,
// and the machine behaves as a reference model of the barrier computed independently:
// every Step verdict (not a neighbour, dimension, non-finite, stale, more than one ahead,
// duplicate, accepted) is the model's; an iteration is computed exactly when the model's
// barrier is complete and no Ready is pending; every Ready releases the next iteration
// (never a decrease or a skip) with one ledger entry of that iteration (forward at epsilon
// 0 for iteration 0 and even iterations, pure for odd ones) naming both neighbours, and
// one message to each neighbour carrying that iteration.
func FuzzStep(f *testing.F) {
	f.Add(1, 0, 0.5, -0.25, []byte{})
	f.Add(2, 1, math.NaN(), 0.0, []byte{0, 1, 3, 2, 0, 1, 3, 2, 9})
	f.Add(-1, -5, math.Inf(1), 1e308, []byte{7, 7, 7, 1, 2, 3})
	f.Add(1, 1<<40, 1e-300, -1e300, []byte{5, 0, 0, 5, 1, 0, 9, 5, 2, 1, 5, 1, 1})
	f.Fuzz(func(t *testing.T, from, iter int, a, b float64, ops []byte) {
		m, err := oneMachine(t, func(*Config) {})
		if err != nil {
			t.Fatal(err)
		}
		const iters = 4 // oneMachine's T
		nb := []int{1, 2}
		cur := 0                  // the model's iteration: last computed
		pending := true           // a Ready is pending (the initial release)
		have := map[[2]int]bool{} // (from, iteration) held for iterations cur and cur+1
		released := -1
		apply := func() {
			t.Helper()
			if m.HasReady() != pending {
				t.Fatalf("HasReady %v, model %v", m.HasReady(), pending)
			}
			if !pending {
				return
			}
			rd := m.Ready()
			if len(rd.Ledger) != 1 || rd.State == nil || len(rd.Outbox) != len(nb) {
				t.Fatalf("release with %d entries, %d messages", len(rd.Ledger), len(rd.Outbox))
			}
			e := rd.Ledger[0]
			if int(e.Hop) != released+1 || int(e.Hop) != cur || rd.State.Iter != cur {
				t.Fatalf("release of iteration %d (state %d) after %d, model at %d", e.Hop, rd.State.Iter, released, cur)
			}
			released = cur
			if wantPure := cur%2 == 1; (e.Mechanism == privacy.MechPure) != wantPure || (!wantPure && e.Epsilon != 0) {
				t.Fatalf("iteration %d: entry %s eps %v", cur, e.Mechanism, e.Epsilon)
			}
			if e.Recipient != "1,2" {
				t.Fatalf("entry names %q", e.Recipient)
			}
			for k, env := range rd.Outbox {
				if env.To != nb[k] || env.Msg.Iter != cur || env.Msg.From != 0 {
					t.Fatalf("message %+v of release %d", env, cur)
				}
			}
			m.Advance(rd)
			pending = false
			if cur < iters && have[[2]int{1, cur}] && have[[2]int{2, cur}] {
				delete(have, [2]int{1, cur})
				delete(have, [2]int{2, cur})
				cur++
				pending = true
			}
		}
		step := func(msg Message) {
			t.Helper()
			var want error
			finite := true
			for _, v := range msg.Vec {
				finite = finite && !math.IsNaN(v) && !math.IsInf(v, 0) && math.Abs(v) <= MaxCoord
			}
			switch {
			case msg.From != 1 && msg.From != 2:
				want = ErrNotNeighbor
			case len(msg.Vec) != 2:
				want = ErrDim
			case !finite:
				want = ErrNotFinite
			case msg.Iter < cur:
				want = ErrStale
			case msg.Iter > cur+1:
				want = ErrFuture
			case have[[2]int{msg.From, msg.Iter}]:
				want = ErrDuplicate
			}
			if err := m.Step(msg); err != want {
				t.Fatalf("Step(%+v) at iteration %d = %v, want %v", msg, cur, err, want)
			}
			if want != nil {
				return
			}
			have[[2]int{msg.From, msg.Iter}] = true
			if !pending && cur < iters && have[[2]int{1, cur}] && have[[2]int{2, cur}] {
				delete(have, [2]int{1, cur})
				delete(have, [2]int{2, cur})
				cur++
				pending = true
			}
		}
		apply()
		step(Message{From: from, Iter: iter, Vec: []float64{a, b}})
		step(Message{From: 2, Iter: 0, Vec: []float64{0.1, 0.1}})
		step(Message{From: from, Iter: iter, Vec: []float64{a}})
		vals := []float64{a, b, 0.25, -1.5, math.NaN(), math.Inf(-1)}
		for k := 0; k+2 < len(ops); k += 3 {
			op, x, y := ops[k], ops[k+1], ops[k+2]
			if op%4 == 0 {
				apply()
				continue
			}
			froms := []int{1, 2, 0, 3, -1}
			msg := Message{From: froms[int(x)%len(froms)], Iter: cur + int(y%5) - 1, Vec: []float64{vals[int(x/5)%len(vals)], vals[int(y/5)%len(vals)]}}
			if op%4 == 3 {
				msg.Vec = msg.Vec[:int(op/4)%3]
			}
			step(msg)
			if m.Iter() != cur {
				t.Fatalf("machine at %d, model at %d", m.Iter(), cur)
			}
		}
		for pending {
			apply()
		}
		for _, v := range append(m.Model(), m.Dual()...) {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("non-finite state after %d %d %v %v", from, iter, a, b)
			}
		}
	})
}
