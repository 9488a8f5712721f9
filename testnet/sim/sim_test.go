package sim

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/consensus/graph"
	"github.com/dpadmm/dpadmm/privacy"
)

func lassoSim(tb testing.TB, sigma float64, seed uint64) (*Sim, *consensus.Dataset, consensus.Problem) {
	tb.Helper()
	d, _ := consensus.SyntheticLasso(800, 64, 8, 0.1, 42)
	prob := consensus.Problem{Loss: consensus.Squared, Reg: consensus.Regularizer{L1: 0.01}}
	shards, err := consensus.Split(d, 800, "iid", seed)
	if err != nil {
		tb.Fatal(err)
	}
	s, err := NewSim(SimConfig{Shards: shards, Problem: prob, Gamma: lassoGamma, Lambda: 0.5, Clip: 1e3, Sigma: sigma, Seed: seed})
	if err != nil {
		tb.Fatal(err)
	}
	return s, d, prob
}

// lassoGamma and lassoHops are the settings of the 800-node lasso acceptance run.
const (
	lassoGamma = 1.0
	lassoHops  = 200000
)

// TestLasso800Acceptance: sigma = 0, 800 one-row nodes, p = 64, 8 active features:
// the walk reaches a relative gap <= 1% of the centralized optimum.
func TestLasso800Acceptance(t *testing.T) {
	s, d, prob := lassoSim(t, 0, 1)
	_, ref, err := consensus.Solve(d, prob, consensus.SolveOptions{Tol: 1e-12, MaxIter: 100000})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RunHops(lassoHops, 0, nil); err != nil {
		t.Fatal(err)
	}
	obj := prob.Objective(d, s.Z())
	gap := (obj - ref) / math.Abs(ref)
	t.Logf("lasso 800 nodes: %d hops, objective %.6g reference %.6g gap %.3g", lassoHops, obj, ref, gap)
	if !(gap <= 0.01) || gap < -1e-9 {
		t.Fatalf("gap %v", gap)
	}
}

// TestLogistic8Acceptance: logistic + L2 over 8 nodes on the embedded data, gap <= 0.5%.
func TestLogistic8Acceptance(t *testing.T) {
	full, err := consensus.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	sc, err := consensus.FitScaler(full, "standardize+rownorm")
	if err != nil {
		t.Fatal(err)
	}
	train := sc.Apply(full)
	rep, err := Run(Options{Train: train, Nodes: 8, Problem: consensus.Problem{Loss: consensus.Logistic, Reg: consensus.Regularizer{L2: 1e-3}},
		Gamma: 20, Lambda: 0.5, Clip: 1e3, Sigma: 0, Hops: 2000, Seed: 1, Delta: 1e-5})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("logistic 8 nodes: %d hops, objective %.6g reference %.6g gap %.3g, train accuracy %.4f",
		rep.Hops, rep.Objective, rep.ReferenceObjective, rep.Gap, *rep.TrainAccuracy)
	if !(rep.Gap <= 0.005) || rep.Gap < -1e-9 {
		t.Fatalf("gap %v", rep.Gap)
	}
}

// TestSameSeedSameTrace: the simulator is deterministic bit for bit, and the seed matters.
func TestSameSeedSameTrace(t *testing.T) {
	run := func(seed uint64) (uint64, []float64, []int) {
		s, _, _ := lassoSim(t, 0.5, seed)
		if err := s.RunHops(5000, 0, nil); err != nil {
			t.Fatal(err)
		}
		return s.TraceHash(), append([]float64(nil), s.Z()...), s.Updates()
	}
	h1, z1, u1 := run(7)
	h2, z2, u2 := run(7)
	h3, z3, _ := run(8)
	if h1 != h2 {
		t.Fatalf("trace hash %x != %x", h1, h2)
	}
	for k := range z1 {
		if math.Float64bits(z1[k]) != math.Float64bits(z2[k]) {
			t.Fatalf("model differs at %d: %v vs %v", k, z1[k], z2[k])
		}
	}
	for i := range u1 {
		if u1[i] != u2[i] {
			t.Fatal("update counts differ")
		}
	}
	same := true
	for k := range z1 {
		same = same && z1[k] == z3[k]
	}
	if h1 == h3 || same {
		t.Fatal("different seeds gave the same run")
	}
}

// TestMaxUpdatesCap: no node exceeds the cap; capped hops are forwards.
func TestMaxUpdatesCap(t *testing.T) {
	d, _ := consensus.SyntheticLasso(20, 4, 2, 0.1, 1)
	shards, _ := consensus.Split(d, 10, "iid", 1)
	s, err := NewSim(SimConfig{Shards: shards, Problem: consensus.Problem{Loss: consensus.Squared}, Gamma: 1, Lambda: 0.5,
		Clip: 1, Sigma: 1, MaxUpdates: 3, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RunHops(500, 0, nil); err != nil {
		t.Fatal(err)
	}
	total := 0
	for i, u := range s.Updates() {
		if u != 3 {
			t.Errorf("node %d: %d updates, want exactly the cap 3 after 500 hops", i, u)
		}
		total += s.Store.Entries[i]
	}
	if total != 500 {
		t.Errorf("%d ledger entries for 500 hops", total)
	}
}

// TestAccountingFigures checks the report's privacy section against the closed forms
// (local: K * 8 alpha C^2/sigma^2; Theorem 4 conservative: K (1+c) e1 ln n/(n-1)).
func TestAccountingFigures(t *testing.T) {
	updates := []int{10, 12, 7, 9}
	in := AccountInput{Updates: updates, Clip: 0.1, Sigma: 1, Delta: 1e-5, Cap: 12, Hops: 38}
	p, _, err := Account(in)
	if err != nil {
		t.Fatal(err)
	}
	// Local, node 1 (K=12): rho = 12*8*0.01 = 0.96 per unit alpha; eps = min_a rho a + ln(1e5)/(a-1),
	// closed form rho + 2 sqrt(rho ln(1/delta)) at the unconstrained optimum.
	rho := 12 * 8 * 0.01
	closed := rho + 2*math.Sqrt(rho*math.Log(1e5))
	// The simple conversion eps + ln(1/delta)/(alpha-1) on the order grid is an upper bound
	// for any valid conversion; the closed form is its unconstrained minimum.
	simple := math.Inf(1)
	for _, a := range privacy.Orders {
		if a > 1 {
			simple = math.Min(simple, rho*a+math.Log(1e5)/(a-1))
		}
	}
	if simple < closed-1e-9 || simple > closed*1.05 {
		t.Fatalf("order grid too coarse: %v vs closed form %v", simple, closed)
	}
	if float64(p.Local.Epsilon) > simple+1e-9 || float64(p.Local.Epsilon) < 0.8*closed {
		t.Errorf("local epsilon %v, simple conversion %v, closed form %v", p.Local.Epsilon, simple, closed)
	}
	if p.PairwisePlanned.Worst.I == p.PairwisePlanned.Worst.J || !p.PairwisePlanned.ConditionsHold {
		t.Errorf("pairwise %+v", p.PairwisePlanned)
	}
	// With 4 nodes the final release costs about as much as the averaging saves: the
	// planned figure is Theorem 4 at the cap plus the final-release term, whatever its
	// relation to the local one.
	if want, _ := privacy.ToDP(privacy.Theorem4FinalCurve(4, 12, 38, 0.1, 1), 1e-5); math.Abs(float64(p.PairwisePlanned.Worst.Epsilon)-want) > 1e-9*want {
		t.Errorf("planned figure %v, Theorem 4 with the final release %v", p.PairwisePlanned.Worst.Epsilon, want)
	}
	if len(p.Local.PerNodeEpsilon) != 4 || !(p.Local.PerNodeEpsilon[2] < p.Local.PerNodeEpsilon[0]) {
		t.Errorf("per node %v", p.Local.PerNodeEpsilon)
	}
	g, err := graph.Parse("ring", 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	rin := in
	rin.Graph = g
	ring, _, err := Account(rin)
	if err != nil {
		t.Fatal(err)
	}
	if ring.PairwisePlanned.Theorem == privacy.Theorem4FinalName || ring.PairwisePlanned.Theorem == privacy.Theorem4Name {
		t.Error("Theorem 4 claimed on a ring")
	}
	nin := in
	nin.Sigma = 0
	none, _, err := Account(nin)
	if err != nil {
		t.Fatal(err)
	}
	if none.PairwisePlanned.ConditionsHold || none.Local.Epsilon < 1e300 {
		t.Errorf("sigma 0 must give no privacy: %+v", none)
	}
	if _, err := json.Marshal(none); err != nil {
		t.Fatal(err)
	}
}

// TestRunReportAndCurve: a small run writes a valid report and curve.
func TestRunReportAndCurve(t *testing.T) {
	full, err := consensus.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	train, test := consensus.TrainTest(full, 0.2, 1)
	sc, _ := consensus.FitScaler(train, "standardize+rownorm")
	var curve bytes.Buffer
	rep, err := Run(Options{Train: sc.Apply(train), Test: sc.Apply(test), Nodes: 10,
		Problem: consensus.Problem{Loss: consensus.Logistic, Reg: consensus.Regularizer{L2: 1e-2}},
		Gamma:   30, Lambda: 0.5, Clip: 0.1, Sigma: 1, Hops: 1000, Seed: 3, Delta: 1e-5, MaxUpdates: 100,
		Curve: &curve, CurveEvery: 250, KeepTrace: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"objective", "reference_objective", "gap", "test_objective", "accuracy", "hops", "nodes", "dims",
		"wall_seconds", "us_per_hop", "seed", "loss", "l1", "l2", "gamma", "lambda", "clip", "sigma", "scale", "split", "graph", "data", "privacy"} {
		if _, ok := m[k]; !ok {
			t.Errorf("report lacks %q", k)
		}
	}
	if lines := bytes.Count(curve.Bytes(), []byte("\n")); lines != 6 {
		t.Errorf("curve has %d lines, want header + 5:\n%s", lines, curve.String())
	}
	if len(rep.Trace) != 1000 || rep.Hops != 1000 {
		t.Errorf("trace %d hops %d", len(rep.Trace), rep.Hops)
	}
	n := 0
	for _, u := range rep.Privacy.Updates {
		n += u
	}
	noisy := 0
	for _, s := range rep.Trace {
		if s.Noisy {
			noisy++
		}
	}
	if n != noisy || n > 1000 {
		t.Errorf("updates %d, noisy trace steps %d", n, noisy)
	}
}

func BenchmarkSimHop800Lasso(b *testing.B) {
	for _, c := range []struct {
		name  string
		sigma float64
	}{{"sigma=0", 0}, {"sigma>0", 0.5}} {
		b.Run(c.name, func(b *testing.B) {
			s, _, _ := lassoSim(b, c.sigma, 1)
			if err := s.RunHops(10000, 0, nil); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			if err := s.RunHops(uint64(b.N), 0, nil); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(b.N), "us/hop")
		})
	}
}
