package sim

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/walk"
)

// smallSim builds an n-node simulator on a synthetic lasso problem of dimension p.
func smallSim(tb testing.TB, n, p int, seed uint64, mod func(c *SimConfig)) *Sim {
	tb.Helper()
	d, _ := consensus.SyntheticLasso(2*n, p, 1, 0.1, seed)
	shards, err := consensus.Split(d, n, "iid", seed)
	if err != nil {
		tb.Fatal(err)
	}
	cfg := SimConfig{Shards: shards, Problem: consensus.Problem{Loss: consensus.Squared, Reg: consensus.Regularizer{L1: 0.01}},
		Gamma: 1, Lambda: 0.5, Clip: 1, Sigma: 2, Seed: seed}
	if mod != nil {
		mod(&cfg)
	}
	s, err := NewSim(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// checkPath asserts that the union of the ledgers orders into the walk's path: hops
// 1..H each appear once, the recipient of hop h is the node of hop h+1, and each node's
// sequence numbers run 1, 2, ... in hop order.
func checkPath(t *testing.T, ledgers [][]privacy.Entry, hops uint64, path []TraceStep) {
	t.Helper()
	type rec struct {
		node int
		e    privacy.Entry
	}
	var all []rec
	for i, es := range ledgers {
		for k, e := range es {
			if e.Node != strconv.Itoa(i) {
				t.Fatalf("node %d's ledger holds an entry of node %q", i, e.Node)
			}
			if e.Seq != uint64(k+1) || (k > 0 && e.Hop <= es[k-1].Hop) {
				t.Fatalf("node %d entry %d: seq %d hop %d out of order", i, k, e.Seq, e.Hop)
			}
			all = append(all, rec{i, e})
		}
	}
	if uint64(len(all)) != hops {
		t.Fatalf("%d ledger entries for %d hops", len(all), hops)
	}
	sort.Slice(all, func(a, b int) bool { return all[a].e.Hop < all[b].e.Hop })
	for h, r := range all {
		if r.e.Hop != uint64(h+1) {
			t.Fatalf("position %d holds hop %d", h, r.e.Hop)
		}
		if h+1 < len(all) && r.e.Recipient != strconv.Itoa(all[h+1].node) {
			t.Fatalf("hop %d: node %d sent to %s but node %d handled hop %d", r.e.Hop, r.node, r.e.Recipient, all[h+1].node, r.e.Hop+1)
		}
		if path != nil && (path[h].Node != r.node || path[h].Noisy != (r.e.Mechanism == privacy.MechGaussian)) {
			t.Fatalf("hop %d: trace %+v, ledger node %d mech %s", h, path[h], r.node, r.e.Mechanism)
		}
	}
}

// TestLedgerRecomputedEqualsLive: the files written by the simulator, parsed back,
// give each node the same epsilon as the live figure computed from its update count.
func TestLedgerRecomputedEqualsLive(t *testing.T) {
	const n, clip, sigma, delta = 9, 0.7, 3.0, 1e-5
	dir := filepath.Join(t.TempDir(), "ledger")
	s := smallSim(t, n, 3, 5, func(c *SimConfig) {
		c.LedgerDir, c.Clip, c.Sigma, c.MaxUpdates = dir, clip, sigma, 40
		c.Budget = &BudgetSpec{Kind: walk.BudgetLocal, Epsilon: 30, Delta: delta}
	})
	s.ledger.(*FileLedger).SetBufferLimit(700) // many write batches
	s.Store.KeepTrace = true
	if err := s.RunHops(2000, 0, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	ledgers, err := ReadLedgerDir(dir, n)
	if err != nil {
		t.Fatal(err)
	}
	checkPath(t, ledgers, s.Hops(), s.Store.Path)
	rep := s.Budget()
	forwards := 0
	for i, es := range ledgers {
		k := s.Store.Noisy[i]
		if len(es) != s.Store.Entries[i] {
			t.Errorf("node %d: %d ledger lines, handled %d hops", i, len(es), s.Store.Entries[i])
		}
		noisy := 0
		for _, e := range es {
			if e.Mechanism == privacy.MechGaussian {
				noisy++
			} else {
				forwards++
			}
		}
		if noisy != k || k != s.Machines[i].Updates() {
			t.Errorf("node %d: ledger %d noisy entries, store %d, machine %d", i, noisy, k, s.Machines[i].Updates())
		}
		recomputed, _ := privacy.ToDP(privacy.LedgerCurve(es), delta)
		live, _ := privacy.ToDP(privacy.WalkLocalCurve(clip, sigma, k), delta)
		if math.Abs(recomputed-live) > 1e-12*live || math.IsInf(live, 0) {
			t.Errorf("node %d (K=%d): recomputed epsilon %v, live %v", i, k, recomputed, live)
		}
		if k > 0 && math.Abs(float64(rep.Spent[i])-live) > 1e-12*live {
			t.Errorf("node %d: report spent %v, live %v", i, rep.Spent[i], live)
		}
		if live > 30 {
			t.Errorf("node %d: epsilon %v over the budget 30", i, live)
		}
	}
	if forwards == 0 || s.Hops() == 0 {
		t.Fatalf("run should contain forwards: %d forwards in %d hops", forwards, s.Hops())
	}
	t.Logf("%d hops, %d forwards, caps %v, updates %v", s.Hops(), forwards, rep.Caps, s.Updates())
}

// TestLedgerWrittenBeforeSend: each entry reaches the sink while the node still holds
// the token (before the hand-off), and a failing sink stops the hop.
func TestLedgerWrittenBeforeSend(t *testing.T) {
	sink := &orderSink{}
	s := smallSim(t, 5, 2, 1, func(c *SimConfig) { c.Ledger = sink })
	sink.s = s
	if err := s.RunHops(300, 0, nil); err != nil {
		t.Fatal(err)
	}
	if sink.n != 300 || sink.bad != "" {
		t.Fatalf("%d appends, order violation: %s", sink.n, sink.bad)
	}
	sink.fail = true
	h, holder := s.Hops(), s.holder
	if err := s.Step(); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("failing ledger: %v", err)
	}
	if s.Hops() != h || s.holder != holder {
		t.Fatal("the token moved although its ledger entry was not written")
	}
}

type orderSink struct {
	s    *Sim
	n    int
	bad  string
	fail bool
}

func (o *orderSink) Append(i int, e *privacy.Entry) error {
	if o.fail {
		return errors.New("disk full")
	}
	o.n++
	if o.s.holder != i || o.s.hops+1 != e.Hop {
		o.bad = "entry of hop " + strconv.FormatUint(e.Hop, 10) + " appended after the hand-off"
	}
	return nil
}
func (o *orderSink) Close() error { return nil }

// TestLedger10000Nodes: 10,000 ledger files, bounded open descriptors, every entry
// on disk after Close.
func TestLedger10000Nodes(t *testing.T) {
	const n, hops = 10000, 2000
	fds := func() int {
		es, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			return -1
		}
		return len(es)
	}
	before := fds()
	dir := t.TempDir()
	s := smallSim(t, n, 2, 3, func(c *SimConfig) { c.LedgerDir = dir })
	s.ledger.(*FileLedger).SetBufferLimit(64 << 10)
	if err := s.RunHops(hops, 0, nil); err != nil {
		t.Fatal(err)
	}
	if before >= 0 && fds() > before {
		t.Fatalf("%d descriptors open during the run, %d before", fds(), before)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ledgers, err := ReadLedgerDir(dir, n)
	if err != nil {
		t.Fatal(err)
	}
	checkPath(t, ledgers, hops, nil)
	for i, es := range ledgers {
		if len(es) != s.Store.Entries[i] {
			t.Fatalf("node %d: %d lines for %d hops", i, len(es), s.Store.Entries[i])
		}
	}
}

func TestLedgerErrors(t *testing.T) {
	dir := t.TempDir()
	l, err := NewFileLedger(dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	e := privacy.Entry{Seq: 1, Node: "1", Run: "r", Hop: 1, Mechanism: privacy.MechForward, Recipient: "2"}
	if err := l.Append(1, &e); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(3, &e); err == nil || !strings.Contains(err.Error(), "node 3 outside") {
		t.Fatalf("bad node: %v", err)
	}
	bad := e
	bad.Sigma = math.NaN()
	if err := l.Append(1, &bad); err == nil || !strings.Contains(err.Error(), "sigma") {
		t.Fatalf("invalid entry: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(1, &e); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("append after close: %v", err)
	}
	// A second run must not append to (or truncate) an existing ledger.
	if _, err := NewFileLedger(dir, 3); err == nil || !strings.Contains(err.Error(), "already holds node-1.ledger") {
		t.Fatalf("reused directory: %v", err)
	}
	if _, err := NewFileLedger("", 3); err == nil {
		t.Fatal("empty directory name accepted")
	}
	// A corrupted line is reported with the file and line.
	p := filepath.Join(dir, LedgerFileName(1))
	b, _ := os.ReadFile(p)
	b[10] ^= 1
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadLedgerDir(dir, 3); err == nil || !strings.Contains(err.Error(), "node-1.ledger") || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("corrupt ledger: %v", err)
	}
	if es, err := ReadLedgerDir(t.TempDir(), 2); err != nil || len(es) != 2 || es[0] != nil || es[1] != nil {
		t.Fatalf("no files: %v %v", es, err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub", LedgerFileName(0)), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadLedgerDir(filepath.Join(dir, "sub"), 1); err == nil || !strings.Contains(err.Error(), "node-0.ledger") {
		t.Fatalf("unreadable ledger: %v", err)
	}
	// Both ledger options at once are refused; so is a reused directory through NewSim.
	d, _ := consensus.SyntheticLasso(6, 2, 1, 0.1, 1)
	shards, _ := consensus.Split(d, 3, "iid", 1)
	cfg := SimConfig{Shards: shards, Problem: consensus.Problem{Loss: consensus.Squared}, Gamma: 1, Lambda: 0.5, Clip: 1,
		LedgerDir: t.TempDir(), Ledger: NewMemLedger(3)}
	if _, err := NewSim(cfg); err == nil || !strings.Contains(err.Error(), "at most one of Ledger and LedgerDir") {
		t.Fatalf("two ledgers: %v", err)
	}
	cfg.Ledger, cfg.LedgerDir = nil, dir
	if _, err := NewSim(cfg); err == nil || !strings.Contains(err.Error(), "already holds") {
		t.Fatalf("reused directory: %v", err)
	}
	// Stepping after Close fails instead of dropping entries.
	cfg.LedgerDir = t.TempDir()
	s, err := NewSim(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Step(); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("step after close: %v", err)
	}
}

// TestLedgerFilesAreNodeLedgers: the simulator's ledger files are byte for byte the
// ledger a node's Store writes for the same entries (one writer, one format, one chain),
// and a file with a line removed is refused by ReadLedgerDir as a node refuses it.
func TestLedgerFilesAreNodeLedgers(t *testing.T) {
	const n = 4
	dir := filepath.Join(t.TempDir(), "ledger")
	mem := NewMemLedger(n)
	for _, c := range []func(c *SimConfig){
		func(c *SimConfig) { c.LedgerDir, c.MaxUpdates = dir, 5 },
		func(c *SimConfig) { c.Ledger, c.MaxUpdates = mem, 5 },
	} {
		s := smallSim(t, n, 2, 9, c)
		if err := s.RunHops(60, 0, nil); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		st, err := store.Open(filepath.Join(t.TempDir(), "node"))
		if err != nil {
			t.Fatal(err)
		}
		st.NoSync = true
		if err := st.AppendLedger(mem.Entries[i]); err != nil {
			t.Fatal(err)
		}
		st.Close()
		want, err := os.ReadFile(filepath.Join(st.Dir, store.LedgerFile))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dir, LedgerFileName(i)))
		if err != nil {
			t.Fatal(err)
		}
		if len(mem.Entries[i]) < 3 || !bytes.Equal(got, want) {
			t.Fatalf("node %d (%d entries): simulator file differs from the node store's ledger:\n%s\nstore:\n%s", i, len(mem.Entries[i]), got, want)
		}
		if i == 1 {
			lines := bytes.SplitAfter(got, []byte("\n"))
			cut := bytes.Join(append(lines[:1:1], lines[2:]...), nil)
			if err := os.WriteFile(filepath.Join(dir, LedgerFileName(i)), cut, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := ReadLedgerDir(dir, n); err == nil || !strings.Contains(err.Error(), "node-1.ledger") || !strings.Contains(err.Error(), "does not chain") {
		t.Fatalf("ledger file with a line removed: %v", err)
	}
}

// BenchmarkSimHopFileLedger: the 800-node lasso hop with a budget and every entry
// written to its node's ledger file (batched; Close fsyncs).
func BenchmarkSimHopFileLedger(b *testing.B) {
	d, _ := consensus.SyntheticLasso(800, 64, 8, 0.1, 42)
	shards, err := consensus.Split(d, 800, "iid", 1)
	if err != nil {
		b.Fatal(err)
	}
	s, err := NewSim(SimConfig{Shards: shards, Problem: consensus.Problem{Loss: consensus.Squared, Reg: consensus.Regularizer{L1: 0.01}},
		Gamma: 1, Lambda: 0.5, Clip: 1, Sigma: 1e4, Seed: 1, LedgerDir: b.TempDir(),
		Budget: &BudgetSpec{Kind: walk.BudgetNetwork, Epsilon: 1e3, Delta: 1e-5}})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	if err := s.RunHops(uint64(b.N), 0, nil); err != nil {
		b.Fatal(err)
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	if s.Exhausted() {
		b.Fatal("budget exhausted during the benchmark")
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(b.N), "us/hop")
}
