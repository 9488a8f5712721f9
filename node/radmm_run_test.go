package node

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/consensus/graph"
	"github.com/dpadmm/dpadmm/gossip"
	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/privacy"
)

// radmmData returns the row-normalised synthetic data set (120 rows, 4 columns).
func radmmData(t *testing.T) *consensus.Dataset {
	t.Helper()
	d, _ := consensus.SyntheticLogistic(120, 4, 3, 5)
	sc, err := consensus.FitScaler(d, consensus.ScaleRowNorm)
	if err != nil {
		t.Fatal(err)
	}
	return sc.Apply(d)
}

var radmmProblem = consensus.Problem{Loss: consensus.Logistic, Reg: consensus.Regularizer{L2: 0.01}}

func radmmTestConfig(run string, d *consensus.Dataset, p RADMMParams) Config {
	q := p
	return Config{
		Run: run, Data: d, RADMM: &q,
		Training:    Training{Problem: radmmProblem},
		Seeding:     Seeding{AllowSeededNoise: true, Rand: testRand(21), Noise: testNoise(21)},
		Network:     Network{Listen: loopback},
		Reliability: Reliability{NoSync: true},
	}
}

// radmmCluster starts n nodes (node 0 the starter waiting for n members) plus the
// extra configurations, all connected, and returns them with their log buffers.
func radmmCluster(t *testing.T, ctx context.Context, run string, sh []*consensus.Dataset, p RADMMParams, extra ...Config) ([]*Node, []*syncBuffer, []string) {
	t.Helper()
	return radmmClusterWith(t, ctx, run, sh, p, nil, extra...)
}

// radmmClusterWith is radmmCluster with mod(i, &config) applied to the configuration
// of node i (i < len(sh)) before it is created.
func radmmClusterWith(t *testing.T, ctx context.Context, run string, sh []*consensus.Dataset, p RADMMParams,
	mod func(int, *Config), extra ...Config) ([]*Node, []*syncBuffer, []string) {
	t.Helper()
	var cfgs []Config
	for i := range sh {
		c := radmmTestConfig(run, sh[i], p)
		if i == 0 {
			c.Start, c.MinPeers, c.JoinWindow = true, len(sh), 300*time.Millisecond
		}
		if mod != nil {
			mod(i, &c)
		}
		cfgs = append(cfgs, c)
	}
	cfgs = append(cfgs, extra...)
	nodes := make([]*Node, len(cfgs))
	logs := make([]*syncBuffer, len(cfgs))
	dirs := make([]string, len(cfgs))
	for i, c := range cfgs {
		logs[i] = &syncBuffer{}
		dirs[i] = t.TempDir()
		c.DataDir, c.Logger = dirs[i], zerolog.New(logs[i]).Level(zerolog.InfoLevel)
		nd, err := New(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		nodes[i] = nd
	}
	connectAll(t, ctx, nodes)
	return nodes, logs, dirs
}

func runRADMMAll(t *testing.T, ctx context.Context, nodes []*Node, logs []*syncBuffer) []*RADMMModel {
	t.Helper()
	models := make([]*RADMMModel, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, nd := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); models[i], errs[i] = nd.RunRADMM(ctx) }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: %v\nlog:\n%s", i, err, logs[i].String())
		}
	}
	return models
}

// radmmReference runs the machines of the same run in one goroutine, built from the
// same seeded sources: shards[i] is the shard of the member with index i.
func radmmReference(t *testing.T, shards []*consensus.Dataset, p RADMMParams, total int) [][]float64 {
	t.Helper()
	N := len(shards)
	g, err := graph.Parse(p.Graph, N, p.GraphSeed)
	if err != nil {
		t.Fatal(err)
	}
	algo, err := gossip.ParseAlgo(p.Algo)
	if err != nil {
		t.Fatal(err)
	}
	ms := make([]*gossip.Machine, N)
	for i := range ms {
		obj, err := gossip.NewObjective(shards[i], radmmProblem.Loss, p.PaperC*float64(N)/float64(total), p.PaperC*radmmProblem.Reg.L2)
		if err != nil {
			t.Fatal(err)
		}
		r := testRand(21)(i)
		init := make([]float64, shards[i].Cols)
		for j := range init {
			init[j] = 0.1 * r.NormFloat64()
		}
		sched := gossip.Schedule{Eta: p.Eta, Q: p.EtaGrowth, Max: p.EtaMax}
		if p.EtaTable != nil {
			sched = gossip.Schedule{}
			for _, row := range p.EtaTable {
				sched.List = append(sched.List, row[min(i, len(row)-1)])
			}
		}
		cfg := gossip.Config{Node: i, Nodes: N, Neighbors: g.Neighbors(i), Algo: algo, Iters: p.Iters,
			Penalty: sched, Gamma: p.Gamma, Alpha: p.Alpha,
			C1: 0.25, Init: init, Run: "ref"}
		if !math.IsInf(p.Alpha, 1) {
			cfg.Noise = testNoise(21)(i)
		}
		if ms[i], err = gossip.New(cfg, obj); err != nil {
			t.Fatal(err)
		}
	}
	for round := 0; ; round++ {
		var q []gossip.Envelope
		for _, m := range ms {
			if m.HasReady() {
				rd := m.Ready()
				q = append(q, rd.Outbox...)
				m.Advance(rd)
			}
		}
		if len(q) == 0 {
			break
		}
		for _, e := range q {
			if err := ms[e.To].Step(e.Msg); err != nil {
				t.Fatal(err)
			}
		}
	}
	out := make([][]float64, N)
	for i, m := range ms {
		if !m.Done() {
			t.Fatalf("reference machine %d stopped at iteration %d", i, m.Iter())
		}
		out[i] = m.Model()
	}
	return out
}

// byIndex returns the shards ordered by the members' indices in the run.
func byIndex(t *testing.T, models []*RADMMModel, sh []*consensus.Dataset) []*consensus.Dataset {
	t.Helper()
	out := make([]*consensus.Dataset, len(models))
	for k, m := range models {
		if m.Index < 0 || m.Index >= len(out) || out[m.Index] != nil {
			t.Fatalf("node %d has index %d (duplicate or out of range)", k, m.Index)
		}
		out[m.Index] = sh[k]
	}
	return out
}

// TestRADMMRunJoin: four nodes go through announce/join/start on loopback and run
// private R-ADMM on a ring; every node's model.json equals an in-process run of the same
// machines from the same seeds, and its privacy figure equals the Theorem V.1 sum computed
// here. A fifth node with a different graph is refused.
func TestRADMMRunJoin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	d := radmmData(t)
	sh, err := consensus.Split(d, 4, "iid", 5)
	if err != nil {
		t.Fatal(err)
	}
	p := RADMMParams{Algo: "radmm", Graph: "ring", Iters: 10, Alpha: 2, Eta: 1, Gamma: 0.5, PaperC: 5, Barrier: 15 * time.Second}
	odd := radmmTestConfig("gjoin", sh[3], p)
	odd.RADMM.Graph = "complete"
	nodes, logs, dirs := radmmCluster(t, ctx, "gjoin", sh, p, odd)
	if nodes[4].ConfigHash() == nodes[0].ConfigHash() {
		t.Fatal("a different graph must give a different config hash")
	}
	octx, ocancel := context.WithCancel(ctx)
	oddDone := make(chan error, 1)
	go func() { _, err := nodes[4].RunRADMM(octx); oddDone <- err }()
	models := runRADMMAll(t, ctx, nodes[:4], logs)
	for i := 0; i < 500 && !strings.Contains(logs[4].String(), "configuration differs from the run"); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	ocancel()
	if err := <-oddDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("mismatched node: %v, want it still waiting", err)
	}
	if !strings.Contains(logs[4].String(), "refusing run announcement: this node's configuration differs from the run's") {
		t.Errorf("mismatched node did not log the refusal:\n%s", logs[4].String())
	}
	if _, err := os.Stat(filepath.Join(dirs[4], store.LedgerFile)); err == nil {
		if b, _ := os.ReadFile(filepath.Join(dirs[4], store.LedgerFile)); len(b) > 0 {
			t.Fatal("refused node wrote ledger entries")
		}
	}

	// A figure above LargeEpsilon without a target is warned about at the start, and only then.
	for i, m := range models {
		large := float64(m.Privacy.Formula) > LargeEpsilon
		if warned := strings.Contains(logs[i].String(), "figure for the run will be large"); warned != large {
			t.Errorf("node %d: figure %v, warned %v", i, m.Privacy.Formula, warned)
		}
	}
	ref := radmmReference(t, byIndex(t, models, sh), p, d.Rows)
	N, V, K := 4.0, 2, 5 // ring: degree 2; R-ADMM charges the ceil(10/2) odd iterations
	w, r := p.PaperC*N/float64(d.Rows), p.PaperC*radmmProblem.Reg.L2
	want := 0.0
	for k := 0; k < K; k++ {
		want += 2 * w * (1.4*0.25/(r+2*p.Eta*float64(V)) + p.Alpha)
	}
	for k, m := range models {
		var disk RADMMModel
		b, err := os.ReadFile(filepath.Join(dirs[k], store.ModelFile))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &disk); err != nil {
			t.Fatal(err)
		}
		if m.Nodes != 4 || disk.Nodes != 4 || disk.Iters != 10 || disk.TotalRows != d.Rows || len(disk.Model) != 4 ||
			disk.Members[0] != nodes[0].ID().String() || disk.ConfigHash != nodes[0].ConfigHash() {
			t.Fatalf("node %d: model.json %+v", k, disk)
		}
		for j, v := range disk.Model {
			if math.Abs(v-ref[m.Index][j]) > 1e-9 {
				t.Fatalf("node %d (index %d): coordinate %d is %v, reference %v", k, m.Index, j, v, ref[m.Index][j])
			}
		}
		pr := disk.Privacy
		if !pr.ConditionsHold || math.Abs(float64(pr.Epsilon)-want) > 1e-9*want || math.Abs(float64(pr.Ledger)-want) > 1e-9*want ||
			pr.SecureNoise || pr.Theorem != privacy.ObjPertTheorem {
			t.Fatalf("node %d: privacy %+v, want epsilon %v", k, pr, want)
		}
		if led, err := nodes[k].Store().Ledger(); err != nil || len(led) != 11 {
			t.Fatalf("node %d: %d ledger entries (%v), want 11 (f(0) and 10 iterations)", k, len(led), err)
		}
	}
}

// TestRADMMRunConverges: without noise, after 100 iterations the four nodes agree and
// their average reaches the centralized optimum of consensus.Solve.
func TestRADMMRunConverges(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	d := radmmData(t)
	sh, err := consensus.Split(d, 4, "iid", 7)
	if err != nil {
		t.Fatal(err)
	}
	p := RADMMParams{Algo: "radmm", Graph: "ring", Iters: 100, Alpha: math.Inf(1), Eta: 1, Gamma: 0.5, PaperC: 20, Barrier: 15 * time.Second}
	nodes, logs, _ := radmmCluster(t, ctx, "gconv", sh, p)
	models := runRADMMAll(t, ctx, nodes, logs)
	avg := make([]float64, d.Cols)
	for _, m := range models {
		for j, v := range m.Model {
			avg[j] += v / float64(len(models))
		}
		if m.Privacy.Epsilon.Bounded() || m.Privacy.ConditionsHold {
			t.Fatalf("no noise must give no guarantee, got %+v", m.Privacy)
		}
	}
	for k, m := range models {
		dev := 0.0
		for j, v := range m.Model {
			dev += (v - avg[j]) * (v - avg[j])
		}
		if math.Sqrt(dev) > 1e-3 {
			t.Fatalf("node %d is %v away from the average: no consensus", k, math.Sqrt(dev))
		}
	}
	_, opt, err := consensus.Solve(d, radmmProblem, consensus.SolveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := radmmProblem.Objective(d, avg)
	if gap := (got - opt) / math.Abs(opt); gap > 1e-5 || gap < -1e-9 {
		t.Fatalf("objective of the average %v, optimum %v (relative gap %v)", got, opt, gap)
	}
}

// TestRADMMRunRefuses: rows of norm > 1 are refused at New with a clear message, and a
// neighbour-exchange configuration cannot be driven by the walk's Run.
func TestRADMMRunRefuses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	raw, _ := consensus.SyntheticLogistic(40, 4, 3, 5)
	if _, norm := maxRowNorm(raw); !(norm > 1) {
		t.Fatalf("test data should have a row of norm > 1, max %v", norm)
	}
	p := RADMMParams{Algo: "radmm", Iters: 4, Alpha: 2, Eta: 1, Gamma: 0.5, PaperC: 1}
	c := radmmTestConfig("gbad", raw, p)
	c.DataDir = t.TempDir()
	_, err := New(ctx, c)
	if err == nil || !strings.Contains(err.Error(), "Theorem V.1 needs every row normalised") {
		t.Fatalf("unnormalised rows: %v, want a refusal", err)
	}
	for _, bad := range []func(*RADMMParams){
		func(q *RADMMParams) { q.Algo = "walk" },
		func(q *RADMMParams) { q.Iters = 0 },
		func(q *RADMMParams) { q.Alpha = 0 },
		func(q *RADMMParams) { q.Eta = 0 },
		func(q *RADMMParams) { q.PaperC = math.Inf(1) },
		func(q *RADMMParams) { q.Algo, q.EtaGrowth = "radmm", 1.5 }, // R-ADMM needs a constant schedule
	} {
		c := radmmTestConfig("gbad", radmmData(t), p)
		c.DataDir = t.TempDir()
		bad(c.RADMM)
		if _, err := New(ctx, c); err == nil {
			t.Errorf("parameters %+v accepted", *c.RADMM)
		}
	}
	c = radmmTestConfig("gbad", radmmData(t), p)
	c.DataDir, c.Start, c.MinPeers, c.JoinWindow = t.TempDir(), true, 1, 10*time.Millisecond
	nd, err := New(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer nd.Close()
	if _, err := nd.Run(ctx); err == nil || !strings.Contains(err.Error(), "RunRADMM") {
		t.Fatalf("Run of a gossip configuration: %v, want a refusal", err)
	}
}

// TestRADMMConfigHash: every announced neighbour-exchange parameter changes the config
// hash; the barrier settings (local) do not; a walk configuration's JSON carries none of
// the neighbour-exchange keys.
func TestRADMMConfigHash(t *testing.T) {
	d := radmmData(t)
	p := RADMMParams{Algo: "mradmm", Graph: "ring", GraphSeed: 1, Iters: 10, Alpha: 2, Eta: 1, EtaGrowth: 1.1, EtaMax: 5, Gamma: 0.5, PaperC: 5}
	base := radmmTestConfig("h", d, p)
	h0 := base.RunConfig().Hash()
	for name, mod := range map[string]func(c *Config){
		"algo":       func(c *Config) { c.RADMM.Algo = "madmm" },
		"graph":      func(c *Config) { c.RADMM.Graph = "complete" },
		"graph seed": func(c *Config) { c.RADMM.GraphSeed = 2 },
		"iters":      func(c *Config) { c.RADMM.Iters = 12 },
		"alpha":      func(c *Config) { c.RADMM.Alpha = math.Inf(1) },
		"eta":        func(c *Config) { c.RADMM.Eta = 2 },
		"eta growth": func(c *Config) { c.RADMM.EtaGrowth = 1.2 },
		"eta max":    func(c *Config) { c.RADMM.EtaMax = 6 },
		"gamma":      func(c *Config) { c.RADMM.Gamma = 0.4 },
		"paper C":    func(c *Config) { c.RADMM.PaperC = 6 },
		"l2":         func(c *Config) { c.Problem.Reg.L2 = 0.02 },
		"loss":       func(c *Config) { c.Problem.Loss = consensus.Squared },
		"run":        func(c *Config) { c.Run = "h2" },
	} {
		c := radmmTestConfig("h", d, p)
		mod(&c)
		if c.RunConfig().Hash() == h0 {
			t.Errorf("changing the %s keeps the config hash", name)
		}
	}
	c := radmmTestConfig("h", d, p)
	c.RADMM.Barrier, c.RADMM.MaxWait, c.RADMM.OnMissing = time.Second, time.Minute, MissingStale
	if c.RunConfig().Hash() != h0 {
		t.Error("local barrier settings changed the config hash")
	}
	walkJSON := string(marshal((&Config{
		Run: "w", Data: d,
		Training: Training{Problem: radmmProblem, Gamma: 1, Lambda: 0.5, Clip: 1, Hops: 3},
	}).RunConfig()))
	for _, k := range []string{"graph", "iters", "alpha", "eta", "paper_c"} {
		if strings.Contains(walkJSON, `"`+k+`"`) {
			t.Errorf("walk config JSON has %q: %s", k, walkJSON)
		}
	}
}

// TestRADMMLargeFigureWarns: a run whose figure passes LargeEpsilon without a target warns
// at its start (the same run as TestRADMMRunJoin's, with 40 iterations: about 14).
func TestRADMMLargeFigureWarns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	sh, err := consensus.Split(radmmData(t), 4, "iid", 5)
	if err != nil {
		t.Fatal(err)
	}
	p := RADMMParams{Algo: "radmm", Graph: "ring", Iters: 40, Alpha: 2, Eta: 1, Gamma: 0.5, PaperC: 5, Barrier: 15 * time.Second}
	nodes, logs, _ := radmmCluster(t, ctx, "glarge", sh, p)
	for i, m := range runRADMMAll(t, ctx, nodes, logs) {
		if f := float64(m.Privacy.Formula); f <= LargeEpsilon || !strings.Contains(logs[i].String(), "figure for the run will be large") {
			t.Errorf("node %d: figure %v, log:\n%s", i, f, logs[i].String())
		}
	}
}
