package sim

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/gossip"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/testnet/internal/fixture"
)

// gossipData is the shared synthetic logistic problem (fixture.GossipData).
func gossipData(t *testing.T, rows int) (*consensus.Dataset, *consensus.Dataset) {
	return fixture.GossipData(t, rows)
}

func gossipOpts(train, test *consensus.Dataset, algo, graphSpec string, iters int, alpha float64) GossipOptions {
	return GossipOptions{
		Train: train, Test: test, Data: "synthetic", Nodes: 8, Problem: consensus.Problem{Loss: consensus.Logistic, Reg: consensus.Regularizer{L2: 0.02}},
		Algo: algo, Graph: graphSpec, Iters: iters, Alpha: alpha, Eta: 0.05, Gamma: 0.5, C: 1, Seed: 4,
	}
}

// TestGossipConvergence: non-private ADMM, R-ADMM and MR-ADMM reach the centralized optimum
// (the objective of the average model), and the report refuses a privacy guarantee.
func TestGossipConvergence(t *testing.T) {
	train, test := gossipData(t, 400)
	for _, c := range []struct {
		algo, graph string
		iters       int
	}{{"admm", "ring", 300}, {"radmm", "ring", 400}, {"admm", "regular:4", 200}, {"radmm", "regular:4", 300}, {"mradmm", "er:0.4", 300}} {
		// 16 nodes on a ring and a random 4-regular graph (issue acceptance: relative gap
		// <= 1e-4; measured far below).
		o := gossipOpts(train, test, c.algo, c.graph, c.iters, math.Inf(1))
		o.Nodes = 16
		if c.algo == "mradmm" {
			o.EtaGrowth, o.EtaMax = 1.01, 0.1
		}
		r, err := RunGossip(o)
		if err != nil {
			t.Fatalf("%s: %v", c.algo, err)
		}
		t.Logf("%s on %s: gap %.3g, deviation %.3g, accuracy %.3f, %.1f us/iter", c.algo, c.graph, r.Gap, r.MaxDeviation, *r.Accuracy, r.UsPerIter)
		if !(math.Abs(r.Gap) < 1e-8) || !(r.MaxDeviation < 1e-6) {
			t.Errorf("%s on %s: gap %.3g, deviation %.3g", c.algo, c.graph, r.Gap, r.MaxDeviation)
		}
		if r.Algo != c.algo || r.Iters != c.iters || r.Gossip.ConditionsHold || r.Gossip.Epsilon.Bounded() ||
			!strings.Contains(r.Gossip.Reason, "no noise") || r.Privacy.Local.ConditionsHold {
			t.Errorf("%s: non-private run must refuse a guarantee: %+v", c.algo, r.Gossip)
		}
	}
}

// TestGossipPrivateFigures: a private R-ADMM/MR-ADMM run reports Theorem V.1's figure,
// recomputed here independently, and the ledger sums to it.
func TestGossipPrivateFigures(t *testing.T) {
	train, test := gossipData(t, 400)
	for _, algo := range []string{"radmm", "mradmm", "admm-dvp", "admm-pvp"} {
		o := gossipOpts(train, test, algo, "er:0.4", 12, 1)
		if algo == "mradmm" {
			o.EtaGrowth = 1.04
		}
		var curve bytes.Buffer
		o.Curve = &curve
		r, err := RunGossip(o)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Gossip.ConditionsHold {
			t.Fatalf("%s: conditions should hold: %s", algo, r.Gossip.Reason)
		}
		w := 1 * 8 / float64(train.Rows) // C N / M
		rr := 1 * 0.02                   // C L2
		K := 6
		if !strings.HasPrefix(algo, "radmm") && algo != "mradmm" {
			K = 12
		}
		want := 0.0
		for i, V := range r.Degrees {
			s := 0.0
			for k := 1; k <= K; k++ {
				eta := 0.05
				if algo == "mradmm" {
					eta = 0.05 * math.Pow(1.04, float64(k))
				}
				if algo == "admm-pvp" {
					s += 1 * 2 * w / (rr + 2*eta*float64(V))
				} else {
					s += 2 * w * (1.4*0.25/(rr+2*eta*float64(V)) + 1)
				}
			}
			if math.Abs(float64(r.Gossip.PerNode[i])-s) > 1e-9*s || math.Abs(float64(r.Gossip.LedgerEpsilon[i])-s) > 1e-9*s {
				t.Errorf("%s node %d: epsilon %v ledger %v, want %v", algo, i, r.Gossip.PerNode[i], r.Gossip.LedgerEpsilon[i], s)
			}
			want = math.Max(want, s)
		}
		if math.Abs(float64(r.Gossip.Epsilon)-want) > 1e-9*want || r.Privacy.Local.Epsilon != r.Gossip.Epsilon {
			t.Errorf("%s: network epsilon %v, want %v", algo, r.Gossip.Epsilon, want)
		}
		lines := strings.Split(strings.TrimSpace(curve.String()), "\n")
		if len(lines) != 14 || lines[0] != "iter,avg_loss,objective,test_error,privacy_bound" {
			t.Fatalf("%s: curve has %d lines, header %q", algo, len(lines), lines[0])
		}
		last := strings.Split(lines[13], ",")
		if p, err := strconv.ParseFloat(last[4], 64); err != nil || math.Abs(p-want) > 1e-6*want {
			t.Errorf("%s: P(T) = %q, want %v", algo, last[4], want)
		}
		if algo == "radmm" {
			p1 := strings.Split(lines[2], ",")[4]
			p2 := strings.Split(lines[3], ",")[4]
			if p1 != p2 {
				t.Errorf("P(t) must not rise at even t: P(1)=%s P(2)=%s", p1, p2)
			}
		}
		b, err := json.Marshal(r)
		if err != nil || !bytes.Contains(b, []byte(`"gossip_privacy"`)) || !bytes.Contains(b, []byte(`"objective"`)) {
			t.Errorf("report JSON: %v %s", err, b[:min(len(b), 200)])
		}
	}
}

// TestGossipPreconditionsReported: unnormalised rows, a precondition violation or the
// squared loss give ConditionsHold = false with a reason and no printed guarantee.
func TestGossipPreconditionsReported(t *testing.T) {
	train, test := gossipData(t, 200)
	big := train.Clone()
	for j := range big.X {
		big.X[j] *= 3
	}
	cases := []struct {
		name string
		mod  func(o *GossipOptions)
		want string
	}{
		{"rows", func(o *GossipOptions) { o.Train = big }, "normalised"},
		{"x1", func(o *GossipOptions) { o.C = 20; o.Eta = 1e-4 }, "2 c1 <"},
		{"loss", func(o *GossipOptions) {
			o.Problem.Loss = consensus.Squared
			o.Train, o.Test = regressionCopy(train), nil
		}, "loss"},
	}
	for _, c := range cases {
		o := gossipOpts(train, test, "radmm", "ring", 4, 1)
		c.mod(&o)
		r, err := RunGossip(o)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if r.Gossip.ConditionsHold || r.Gossip.Epsilon.Bounded() || !strings.Contains(r.Gossip.Reason, c.want) ||
			r.Privacy.Local.ConditionsHold || r.Privacy.Local.Epsilon.Bounded() {
			t.Errorf("%s: hold=%v eps=%v reason=%q", c.name, r.Gossip.ConditionsHold, r.Gossip.Epsilon, r.Gossip.Reason)
		}
		if !(r.Gossip.Formula > 0) {
			t.Errorf("%s: formula value missing", c.name)
		}
	}
}

func regressionCopy(d *consensus.Dataset) *consensus.Dataset {
	c := d.Clone()
	for i := range c.Y {
		c.Y[i] *= 0.5
	}
	return c
}

// TestGossipBadInput: disconnected graphs, unknown nodes in an edge file, alpha <= 0, a
// decreasing MR-ADMM schedule, L1 and unknown algorithms are clear errors.
func TestGossipBadInput(t *testing.T) {
	train, test := gossipData(t, 200)
	dir := t.TempDir()
	disc := filepath.Join(dir, "disc.txt")
	if err := os.WriteFile(disc, []byte("0 1\n1 2\n2 3\n4 5\n5 6\n6 7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	unknown := filepath.Join(dir, "unknown.txt")
	if err := os.WriteFile(unknown, []byte("0 1\n1 9\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		mod  func(o *GossipOptions)
		want string
	}{
		{"disconnected file", func(o *GossipOptions) { o.Graph = "file:" + disc }, "not connected"},
		{"unknown node", func(o *GossipOptions) { o.Graph = "file:" + unknown }, "out of range"},
		{"er never connected", func(o *GossipOptions) { o.Graph = "er:0.0001" }, "connected"},
		{"alpha 0", func(o *GossipOptions) { o.Alpha = 0 }, "alpha"},
		{"alpha neg", func(o *GossipOptions) { o.Alpha = -1 }, "alpha"},
		{"decreasing", func(o *GossipOptions) { o.Algo = "mradmm"; o.EtaList = []float64{1, 0.5, 0.4} }, "decreases"},
		{"growth < 1", func(o *GossipOptions) { o.Algo = "mradmm"; o.EtaGrowth = 0.9 }, "growth"},
		{"l1", func(o *GossipOptions) { o.Problem.Reg.L1 = 0.1 }, "l1"},
		{"l2 0", func(o *GossipOptions) { o.Problem.Reg.L2 = 0 }, "l2"},
		{"algo", func(o *GossipOptions) { o.Algo = "walk" }, "unknown algorithm"},
		{"admm private", func(o *GossipOptions) { o.Algo = "admm" }, "non-private"},
		{"one node", func(o *GossipOptions) { o.Nodes = 1 }, "nodes"},
	}
	for _, c := range cases {
		o := gossipOpts(train, test, "radmm", "ring", 4, 1)
		c.mod(&o)
		_, err := RunGossip(o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want mention of %q", c.name, err, c.want)
		}
	}
}

// TestGossipDeterminism: the same seed gives a bit-identical model and trace; another seed
// gives another trace.
func TestGossipDeterminism(t *testing.T) {
	train, test := gossipData(t, 200)
	run := func(seed uint64) *GossipReport {
		o := gossipOpts(train, test, "mradmm", "er:0.5", 10, 2)
		o.EtaGrowth, o.Seed = 1.02, seed
		r, err := RunGossip(o)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a, b, c := run(7), run(7), run(8)
	if a.TraceHash != b.TraceHash || a.Objective != b.Objective || a.MaxDeviation != b.MaxDeviation {
		t.Errorf("same seed differs: %s/%s %v/%v", a.TraceHash, b.TraceHash, a.Objective, b.Objective)
	}
	for j := range a.Model {
		if math.Float64bits(a.Model[j]) != math.Float64bits(b.Model[j]) {
			t.Fatalf("model coordinate %d differs", j)
		}
	}
	if a.TraceHash == c.TraceHash {
		t.Error("different seeds gave the same trace")
	}
	if !a.Gossip.ConditionsHold || a.Privacy.Local.Theorem != privacy.ObjPertTheorem {
		t.Errorf("report: %+v", a.Gossip)
	}
}

// BenchmarkGossipIter64 measures one simulated iteration (all nodes) of private R-ADMM with
// 64 nodes on a random 4-regular graph, p = 64, 50 rows per node. Odd and even iterations
// alternate, so ns/op is the mean of a Newton solve and a closed-form step.
func BenchmarkGossipIter64(b *testing.B) {
	d, _ := consensus.SyntheticLogistic(64*50, 64, 8, 3)
	o := GossipOptions{
		Train: d, Nodes: 64, Problem: consensus.Problem{Loss: consensus.Logistic, Reg: consensus.Regularizer{L2: 0.01}},
		Algo: "radmm", Graph: "regular:4", Iters: b.N, Alpha: 1, Eta: 0.1, Gamma: 0.5, Seed: 1,
	}
	sim, err := NewGossipSim(&o)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for !sim.Done() {
		if _, err := sim.Step(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestGossipNodeSchedules: heterogeneous MR-ADMM schedules eta_i q_i^k (digest 5.4 Fig. 1(b)
// style) reach consensus without noise, and each node is charged with its own schedule.
func TestGossipNodeSchedules(t *testing.T) {
	train, test := gossipData(t, 300)
	base := []float64{0.05, 0.0515, 0.051, 0.04, 0.0505}
	q := []float64{1.01, 1.005, 1.003, 1.015, 1.01}
	scheds := make([]gossip.Schedule, 5)
	for i := range scheds {
		scheds[i] = gossip.Schedule{Eta: base[i], Q: q[i], Max: 0.1}
	}
	o := gossipOpts(train, test, "mradmm", "er:0.6", 1000, math.Inf(1))
	o.Nodes, o.NodeSchedules = 5, scheds
	r, err := RunGossip(o)
	if err != nil {
		t.Fatal(err)
	}
	// Heterogeneous penalties leave a non-zero dual sum, so the consensus limit is slightly
	// biased (gossip.TestHeterogeneousPenaltyBias): consensus is reached, the gap is small
	// but not zero.
	if !(r.MaxDeviation < 1e-6) || !(math.Abs(r.Gap) < 1e-3) {
		t.Errorf("heterogeneous MR-ADMM: gap %.3g (want < 1e-3), deviation %.3g (want < 1e-6)", r.Gap, r.MaxDeviation)
	}
	o.Alpha, o.Iters = 1, 8
	r, err = RunGossip(o)
	if err != nil {
		t.Fatal(err)
	}
	w, rr := 5/float64(train.Rows), 0.02
	for i, V := range r.Degrees {
		s := 0.0
		for k := 1; k <= 4; k++ {
			eta := math.Min(base[i]*math.Pow(q[i], float64(k)), 0.1)
			s += 2 * w * (1.4*0.25/(rr+2*eta*float64(V)) + 1)
		}
		if math.Abs(float64(r.Gossip.PerNode[i])-s) > 1e-12*s || math.Abs(float64(r.Gossip.LedgerEpsilon[i])-s) > 1e-12*s {
			t.Errorf("node %d: epsilon %v ledger %v, want %v", i, r.Gossip.PerNode[i], r.Gossip.LedgerEpsilon[i], s)
		}
	}
	o.NodeSchedules = scheds[:3]
	if _, err := RunGossip(o); err == nil {
		t.Error("wrong number of node schedules accepted")
	}
}

// TestGossipRDPFigure: the RDP view of a gossip ledger equals an independent composition
// of min(eps_k, alpha eps_k^2/2) over the node's pure releases, never exceeds the pure-DP
// sum, and is withheld when the theorem's conditions fail.
func TestGossipRDPFigure(t *testing.T) {
	train, test := gossipData(t, 400)
	o := gossipOpts(train, test, "radmm", "ring", 30, 2)
	o.Delta = 1e-6
	r, err := RunGossip(o)
	if err != nil {
		t.Fatal(err)
	}
	g := r.Gossip
	if !g.ConditionsHold || g.RDP.Delta != 1e-6 || len(g.RDP.PerNode) != o.Nodes {
		t.Fatalf("rdp section: %+v", g.RDP)
	}
	mx := 0.0
	for i, e := range g.RDP.PerNode {
		// Independent composition from the per-node pure figure: every odd iteration of
		// node i is charged the same eps (constant alpha and penalty), so the curve is
		// K * min(eps1, alpha eps1^2/2).
		k := float64(r.Privacy.Updates[i])
		eps1 := float64(g.PerNode[i]) / k
		best := math.Inf(1)
		for _, a := range privacy.Orders {
			rdp := k * math.Min(eps1, a*eps1*eps1/2)
			v := rdp + math.Log((a-1)/a) - (math.Log(1e-6)+math.Log(a))/(a-1)
			best = math.Min(best, v)
		}
		best = math.Min(best, float64(g.PerNode[i]))
		if math.Abs(float64(e)-best) > 1e-9*best {
			t.Fatalf("node %d: rdp epsilon %v, independent %v", i, e, best)
		}
		if e > g.PerNode[i]*(1+1e-12) {
			t.Fatalf("node %d: rdp epsilon %v above the pure sum %v", i, e, g.PerNode[i])
		}
		mx = math.Max(mx, float64(e))
	}
	if float64(g.RDP.Epsilon) != mx {
		t.Fatalf("network rdp epsilon %v, max %v", g.RDP.Epsilon, mx)
	}
	o.Alpha = math.Inf(1)
	o.Algo = "radmm"
	r, err = RunGossip(o)
	if err != nil {
		t.Fatal(err)
	}
	if r.Gossip.ConditionsHold || r.Gossip.RDP.Epsilon.Bounded() {
		t.Fatalf("no noise must give no rdp guarantee: %+v", r.Gossip.RDP)
	}
}

// BenchmarkGossipIter64P1000 is BenchmarkGossipIter64 (the simulator, 64 nodes, random
// 4-regular graph) with p = 1000. Expensive: run with -benchtime=2x.
func BenchmarkGossipIter64P1000(b *testing.B) {
	d, _ := consensus.SyntheticLogistic(64*50, 1000, 8, 3)
	o := GossipOptions{
		Train: d, Nodes: 64, Problem: consensus.Problem{Loss: consensus.Logistic, Reg: consensus.Regularizer{L2: 0.01}},
		Algo: "radmm", Graph: "regular:4", Iters: b.N, Alpha: 1, Eta: 0.1, Gamma: 0.5, Seed: 1,
	}
	sim, err := NewGossipSim(&o)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for !sim.Done() {
		if _, err := sim.Step(); err != nil {
			b.Fatal(err)
		}
	}
}
