package node

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
)

// etaTable returns a K x n penalty table whose column i grows geometrically from a
// member-specific base.
func etaTable(K, n int) [][]float64 {
	out := make([][]float64, K)
	for k := range out {
		out[k] = make([]float64, n)
		for i := range out[k] {
			out[k][i] = (0.75 + 0.5*float64(i)) * math.Pow(1.2, float64(k))
		}
	}
	return out
}

// TestRADMMRunEtaTable: four MR-ADMM members share an announced per-member penalty
// table; every member uses the column of its index (its ledger records eta_i(2k-1) of that
// column at every odd iteration and its epsilon is the Theorem V.1 sum over that column,
// computed here), and every model equals, bit for bit, the same machines driven in one
// goroutine with those schedules. A fifth node whose table differs in one value has
// another config hash and is refused.
func TestRADMMRunEtaTable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	d := radmmData(t)
	sh, err := consensus.Split(d, 4, "iid", 9)
	if err != nil {
		t.Fatal(err)
	}
	const T, K = 10, 5
	table := etaTable(K, 4)
	p := RADMMParams{Algo: "mradmm", Graph: "ring", Iters: T, Alpha: 2, EtaTable: table, Gamma: 0.5, PaperC: 5, Barrier: 15 * time.Second}
	odd := radmmTestConfig("geta", sh[3], p)
	other := etaTable(K, 4)
	other[2][1] = math.Nextafter(other[2][1], 10)
	odd.RADMM.EtaTable = other
	nodes, logs, _ := radmmCluster(t, ctx, "geta", sh, p, odd)
	if nodes[4].ConfigHash() == nodes[0].ConfigHash() {
		t.Fatal("a different penalty table must give a different config hash")
	}
	octx, ocancel := context.WithCancel(ctx)
	oddDone := make(chan error, 1)
	go func() { _, err := nodes[4].RunRADMM(octx); oddDone <- err }()
	models := runRADMMAll(t, ctx, nodes[:4], logs)
	for i := 0; i < 500 && !strings.Contains(logs[4].String(), "configuration differs from the run"); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	ocancel()
	if err := <-oddDone; !errors.Is(err, context.Canceled) || !strings.Contains(logs[4].String(), "refusing run announcement: this node's configuration differs from the run's") {
		t.Fatalf("node with another table: %v, log:\n%s", err, logs[4].String())
	}

	ref := radmmReference(t, byIndex(t, models, sh), p, d.Rows)
	w, r := p.PaperC*4/float64(d.Rows), p.PaperC*radmmProblem.Reg.L2
	for k, m := range models {
		for j, v := range m.Model {
			if math.Float64bits(v) != math.Float64bits(ref[m.Index][j]) {
				t.Fatalf("node %d (index %d): coordinate %d is %v, reference %v", k, m.Index, j, v, ref[m.Index][j])
			}
		}
		want := 0.0
		for q := 0; q < K; q++ {
			want += 2 * w * (1.4*0.25/(r+2*table[q][m.Index]*2) + p.Alpha)
		}
		if pr := m.Privacy; !pr.ConditionsHold || math.Abs(float64(pr.Epsilon)-want) > 1e-9*want || math.Abs(float64(pr.Ledger)-want) > 1e-9*want {
			t.Fatalf("node %d (index %d): privacy %+v, want %v", k, m.Index, pr, want)
		}
		led, err := nodes[k].Store().Ledger()
		if err != nil || len(led) != T+1 {
			t.Fatalf("node %d: %d ledger entries (%v)", k, len(led), err)
		}
		for _, e := range led {
			if e.Mechanism == privacy.MechPure {
				if q := int(e.Hop-1) / 2; e.Lambda != table[q][m.Index] {
					t.Fatalf("node %d (index %d): iteration %d charged with eta %v, table has %v", k, m.Index, e.Hop, e.Lambda, table[q][m.Index])
				}
			}
		}
	}
}

// TestRADMMEtaTableChecks: a malformed or unsuitable table is refused before the run, a
// table of the wrong width is refused once the membership is known, and the table (not
// the unused --eta) enters the config hash.
func TestRADMMEtaTableChecks(t *testing.T) {
	d := radmmData(t)
	base := RADMMParams{Algo: "mradmm", Iters: 6, Alpha: 2, EtaTable: etaTable(3, 4), Gamma: 0.5, PaperC: 5}
	for name, c := range map[string]struct {
		mod  func(c *Config)
		want string
	}{
		"empty":      {func(c *Config) { c.RADMM.EtaTable = [][]float64{} }, "empty"},
		"ragged":     {func(c *Config) { c.RADMM.EtaTable[1] = []float64{1, 2} }, "row 2 has 2 values"},
		"zero":       {func(c *Config) { c.RADMM.EtaTable[0][2] = 0 }, "finite penalty > 0"},
		"nan":        {func(c *Config) { c.RADMM.EtaTable[0][2] = math.NaN() }, "finite penalty > 0"},
		"short":      {func(c *Config) { c.RADMM.EtaTable = c.RADMM.EtaTable[:2] }, "penalty list has 2 values, need 3"},
		"decreasing": {func(c *Config) { c.RADMM.EtaTable[2][3] = 0.1 }, "column 4 (member 3)"},
		"radmm":      {func(c *Config) { c.RADMM.Algo = "radmm" }, "constant penalty"},
		"min peers":  {func(c *Config) { c.Start, c.MinPeers = true, 5 }, "fewer than --min-peers 5"},
	} {
		cfg := radmmTestConfig("et", d, base)
		cfg.DataDir = t.TempDir()
		cfg.RADMM.EtaTable = etaTable(3, 4)
		c.mod(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, c.want)
		}
	}
	one := base
	one.EtaTable = [][]float64{{1}, {1.5}, {2}}
	if s, err := one.scheduleFor(2, 7); err != nil || s.At(3) != 2 || s.At(1) != 1 {
		t.Errorf("one-column table: %+v, %v", s, err)
	}
	if s, err := base.scheduleFor(2, 4); err != nil || s.At(2) != base.EtaTable[1][2] {
		t.Errorf("per-member table: %+v, %v", s, err)
	}
	if _, err := base.scheduleFor(0, 5); err == nil || !strings.Contains(err.Error(), "4 per-member columns but the run has 5 members") {
		t.Errorf("wrong width: %v", err)
	}
	h := radmmTestConfig("et", d, base)
	h2 := radmmTestConfig("et", d, base)
	h2.RADMM.Eta = 7 // unused with a table
	h3 := radmmTestConfig("et", d, base)
	h3.RADMM.EtaTable = etaTable(3, 4)
	h3.RADMM.EtaTable[0][0] *= 2
	if h.RunConfig().Hash() != h2.RunConfig().Hash() || h.RunConfig().Hash() == h3.RunConfig().Hash() {
		t.Error("the config hash must cover the penalty table and only it")
	}
}

// TestRADMMStaticChecks: a static neighbour-exchange membership needs at least two
// members and the run's total rows, and a per-member penalty table must have one column
// per static member.
func TestRADMMStaticChecks(t *testing.T) {
	d := radmmData(t)
	ids := []string{"12D3KooWJWoaqZhDaoEFshF7Rh1bpY9ohihFhzcW6d69Lr2NASuq", "12D3KooWRBhwfeP2Y4TCx1SM6s9rUoHhR5STiGwxBhgFRcw3AERX",
		"12D3KooWFfa5yKNn5xVtj3UoDNKgCdEPUkBfZAFnJvRZB3Gc3ZWr"}
	b, _ := json.Marshal(StaticFile{Run: "s", TotalRows: 300, Members: []StaticMember{{ID: ids[0]}, {ID: ids[1]}, {ID: ids[2]}}})
	sf, err := ParseStatic(b)
	if err != nil {
		t.Fatal(err)
	}
	p := RADMMParams{Algo: "mradmm", Iters: 6, Alpha: 2, Eta: 1, Gamma: 0.5, PaperC: 5, TotalRows: 300}
	for name, c := range map[string]struct {
		mod  func(c *Config)
		want string
	}{
		"ok":          {func(c *Config) {}, ""},
		"no total":    {func(c *Config) { c.RADMM.TotalRows = 0 }, "needs the run's total rows"},
		"below rows":  {func(c *Config) { c.RADMM.TotalRows = d.Rows - 1 }, "below this node's"},
		"one member":  {func(c *Config) { c.Members = c.Members[:1] }, "at least 2 members"},
		"table width": {func(c *Config) { c.RADMM.EtaTable = etaTable(3, 4) }, "4 per-member columns, the static membership 3"},
		"table ok":    {func(c *Config) { c.RADMM.EtaTable = etaTable(3, 3) }, ""},
	} {
		cfg := radmmTestConfig("s", d, p)
		cfg.DataDir, cfg.Members = t.TempDir(), sf.IDs()
		c.mod(&cfg)
		err := cfg.Validate()
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}
