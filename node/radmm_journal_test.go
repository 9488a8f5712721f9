package node

import (
	"context"
	"errors"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/gossip"
	"github.com/dpadmm/dpadmm/node/drive"
	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/privacy"
)

// noisyMachines builds fresh private R-ADMM machines on the adjacency nbrs, each with
// its own seeded noise source wrapped in a JournalNoise.
func noisyMachines(t *testing.T, nbrs [][]int, iters int) ([]*gossip.Machine, []*JournalNoise) {
	return noisyMachinesSecure(t, nbrs, iters, -1)
}

// noisyMachinesSecure is noisyMachines with a crypto/rand noise source for node secure.
func noisyMachinesSecure(t *testing.T, nbrs [][]int, iters, secure int) ([]*gossip.Machine, []*JournalNoise) {
	t.Helper()
	n := len(nbrs)
	d, _ := consensus.SyntheticLogistic(20*n, 3, 2, 7)
	sc, err := consensus.FitScaler(d, consensus.ScaleRowNorm)
	if err != nil {
		t.Fatal(err)
	}
	d = sc.Apply(d)
	shards, err := consensus.Split(d, n, "contiguous", 1)
	if err != nil {
		t.Fatal(err)
	}
	ms := make([]*gossip.Machine, n)
	jns := make([]*JournalNoise, n)
	for i := range ms {
		obj, err := gossip.NewObjective(shards[i], consensus.Logistic, float64(n)/float64(d.Rows), 0.05)
		if err != nil {
			t.Fatal(err)
		}
		jns[i] = NewJournalNoise(privacy.NewSeededNoise(uint64(100 + i)))
		if i == secure {
			jns[i] = NewJournalNoise(privacy.NewSecureNoise())
		}
		c := gossip.DefaultConfig()
		c.Node, c.Nodes, c.Neighbors, c.Iters, c.Run, c.Alpha, c.Noise = i, n, nbrs[i], iters, "r", 2, jns[i]
		c.Init = []float64{0.1 * float64(i), -0.2, 0.05}
		if ms[i], err = gossip.New(c, obj); err != nil {
			t.Fatal(err)
		}
	}
	return ms, jns
}

type runOut struct {
	r   *exchangeResult
	err error
}

// TestExchangeResume: the middle node of a path 0-1-2 stops right after its release of
// iteration 3 is durable and before it is sent (the state a SIGKILL leaves). Restarted on
// the same data directory with a fresh machine, it replays its journal, re-sends the same
// vectors and the run (neighbours on policy wait) completes with every model equal, bit
// for bit, to an uninterrupted run of the same seeded machines; its ledger holds each
// release exactly once. A tampered journal is refused.
func TestExchangeResume(t *testing.T) { testExchangeResume(t, false) }

// TestExchangeResumeSecure: as TestExchangeResume with crypto/rand noise on the
// restarted node (its noise cannot be drawn again): the neighbours consume, for every
// iteration it released before the crash, exactly the vector it journaled then, and the
// journal written before the crash is kept byte for byte.
func TestExchangeResumeSecure(t *testing.T) { testExchangeResume(t, true) }

func testExchangeResume(t *testing.T, secure bool) {
	nbrs := [][]int{{1}, {0, 2}, {1}}
	const T, pause = 9, 3
	sec := -1
	if secure {
		sec = 1
	}
	ref, _ := noisyMachines(t, nbrs, T)
	pureRun(t, ref)
	ms, jns := noisyMachinesSecure(t, nbrs, T, sec)
	nodes := exchangeNet(t, ms, nbrs, T, 100*time.Millisecond, MissingWait, func(i int, c *radmmConfig) {
		c.Noise, c.MaxWait = jns[i], time.Hour
	})
	nodes[1].cfg.PauseAt = pause
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ch := make([]chan runOut, 3)
	ctx1, stop1 := context.WithCancel(ctx)
	for i, g := range nodes {
		ch[i] = make(chan runOut, 1)
		c := ctx
		if i == 1 {
			c = ctx1
		}
		go func() { r, err := g.run(c); ch[i] <- runOut{r, err} }()
	}
	dir := nodes[1].n.cfg.DataDir
	for k := 0; ; k++ {
		if es, err := nodes[1].n.Store().Ledger(); err == nil && len(es) == pause+1 {
			break
		}
		if k > 2000 {
			t.Fatal("node 1 did not reach the pause")
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	stop1()
	if o := <-ch[1]; !errors.Is(o.err, context.Canceled) {
		t.Fatalf("paused node: %v", o.err)
	}
	closeExchange(nodes[1])
	recs, _, err := store.ReadRADMMRecords(filepath.Join(dir, store.RADMMJournalFile), "r")
	if err != nil || len(recs) != pause+1 {
		t.Fatalf("journal: %d records (%v)", len(recs), err)
	}

	// A restart is a new Node (host and store) on the same data directory.
	restart := func() (*radmmExchange, error) {
		fresh, fjn := noisyMachinesSecure(t, nbrs, T, sec)
		nd := exchangeNode(t, "r", dir)
		x, err := nd.newRADMMExchange(radmmConfig{Members: nodes[1].cfg.Members, Self: 1, Neighbors: nbrs[1], Machine: fresh[1],
			Iters: T, Barrier: 100 * time.Millisecond, MaxWait: time.Hour, OnMissing: MissingWait, Noise: fjn[1]})
		if err != nil {
			nd.Close()
		}
		return x, err
	}
	// A journal whose noise was altered does not reproduce the releases: refused, and
	// the ledger is left as it was.
	jpath := filepath.Join(dir, store.RADMMJournalFile)
	orig, err := os.ReadFile(jpath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(orig), "\n")
	tampered := strings.Replace(lines[1], `"v":[`, `"v":[1.5e-1,`, 1)
	want := "noise draw"
	if secure {
		// The recomputed release differs from the journaled one: refused.
		tampered = strings.Replace(lines[1], `"vec":[`, `"vec":[1.5e-1,`, 1)
		want = "bit for bit"
	}
	if tampered == lines[1] {
		t.Fatal("journal line 2 has no noise draw to alter")
	}
	os.WriteFile(jpath, []byte(lines[0]+tampered+strings.Join(lines[2:], "")), 0o600)
	if g, err := restart(); !errors.Is(err, ErrRejoin) || !strings.Contains(err.Error(), want) {
		if g != nil {
			closeExchange(g)
		}
		t.Fatalf("tampered journal: %v, want ErrRejoin", err)
	}
	// A torn last line (a crash while writing it, so never durable, never sent) is dropped.
	os.WriteFile(jpath, append(append([]byte(nil), orig...), `{"run":"r","iter":4,"vec":[0.1,`...), 0o600)

	g1, err := restart()
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	defer closeExchange(g1)
	if p := g1.snapshot(); p.Iter != pause || p.LedgerEntries != pause+1 {
		t.Fatalf("restored progress %+v", p)
	}
	for _, j := range []int{0, 2} {
		g1.n.Host.Peerstore().AddAddrs(nodes[j].n.ID(), nodes[j].n.Host.Addrs(), time.Hour)
		nodes[j].n.Host.Peerstore().AddAddrs(g1.n.ID(), g1.n.Host.Addrs(), time.Hour)
	}
	go func() { r, err := g1.run(ctx); ch[1] <- runOut{r, err} }()
	for i := range nodes {
		o := <-ch[i]
		if o.err != nil {
			t.Fatalf("node %d: %v", i, o.err)
		}
		if secure {
			if o.r.Iter != T {
				t.Fatalf("node %d: iteration %d", i, o.r.Iter)
			}
		} else if !sameFloats(o.r.Model, ref[i].ModelView()) {
			t.Fatalf("node %d: model %v, uninterrupted run %v", i, o.r.Model, ref[i].ModelView())
		}
		if o.r.Rejected != 0 {
			t.Errorf("node %d: %d frames rejected", i, o.r.Rejected)
		}
	}
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	es, err := st.Ledger()
	if err != nil || len(es) != T+1 {
		t.Fatalf("node 1: %d ledger entries (%v), want %d", len(es), err, T+1)
	}
	for k, e := range es {
		if e.Hop != uint64(k) {
			t.Fatalf("node 1: ledger entry %d is for iteration %d", k, e.Hop)
		}
	}
	after, err := os.ReadFile(jpath)
	if err != nil || !strings.HasPrefix(string(after), string(orig)) {
		t.Fatalf("the journal of the releases before the crash changed (%v)", err)
	}
	mine, _, err := store.ReadRADMMRecords(jpath, "r")
	if err != nil || len(mine) != T+1 {
		t.Fatalf("journal after the run: %d records (%v)", len(mine), err)
	}
	// What the neighbours consumed from node 1 is what node 1 journaled, for every
	// iteration: before the crash, at the paused release and after the restart.
	for _, j := range []int{0, 2} {
		theirs, _, err := store.ReadRADMMRecords(filepath.Join(nodes[j].n.cfg.DataDir, store.RADMMJournalFile), "r")
		if err != nil || len(theirs) != T+1 {
			t.Fatalf("node %d journal: %d records (%v)", j, len(theirs), err)
		}
		for r := 1; r <= T; r++ {
			found := false
			for _, in := range theirs[r].In {
				if in.From == 1 {
					found = true
					if in.Iter != r-1 || !sameFloats(in.Vec, mine[r-1].Vec) {
						t.Fatalf("node %d consumed at iteration %d a vector of node 1 that differs from its journaled release", j, r-1)
					}
				}
			}
			if !found {
				t.Fatalf("node %d: no input from node 1 at iteration %d", j, r-1)
			}
		}
	}
}

// TestExchangeResumeRefusals: a journal whose released vector differs from what the machine
// recomputes, or a ledger with more releases than the journal, is refused.
func TestExchangeResumeRefusals(t *testing.T) {
	nbrs := [][]int{{1}, {0}}
	ms, jns := noisyMachines(t, nbrs, 4)
	// Every exchange below is built on the same Node (data directory), one after the other.
	nd := exchangeNode(t, "r", t.TempDir())
	cfg := radmmConfig{Members: []peer.ID{nd.ID(), "x"}, Self: 0, Neighbors: []int{1}, Machine: ms[0], Iters: 4, Noise: jns[0]}
	g, err := nd.newRADMMExchange(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e0 := g.ex.Ready().Ledger[0]
	if err := g.ad.Apply(g.effects(nil)); err != nil { // release f(0): journal, then ledger
		t.Fatal(err)
	}
	g.stop()
	fresh := func() radmmConfig {
		m, jn := noisyMachines(t, nbrs, 4)
		c := cfg
		c.Machine, c.Noise = m[0], jn[0]
		return c
	}
	if g, err := nd.newRADMMExchange(fresh()); err != nil {
		t.Fatalf("valid journal refused: %v", err)
	} else {
		g.stop()
	}
	c := fresh()
	// Another f(0) than the one released.
	other := gossip.DefaultConfig()
	other.Node, other.Nodes, other.Neighbors, other.Iters, other.Run, other.Alpha, other.Noise = 0, 2, []int{1}, 4, "r", 2, c.Noise
	other.Init = []float64{9, 9, 9}
	d, _ := consensus.SyntheticLogistic(20, 3, 2, 7)
	obj, _ := gossip.NewObjective(d, consensus.Logistic, 0.1, 0.05)
	if c.Machine, err = gossip.New(other, obj); err != nil {
		t.Fatal(err)
	}
	if g, err := nd.newRADMMExchange(c); !errors.Is(err, ErrRejoin) || !strings.Contains(err.Error(), "bit for bit") {
		if g != nil {
			g.stop()
		}
		t.Fatalf("different f(0): %v", err)
	}
	// A ledger entry without its journal line.
	e := e0
	e.Run, e.Hop = "r", 1
	if err := nd.Store().AppendLedger([]privacy.Entry{e}); err != nil {
		t.Fatal(err)
	}
	if g, err := nd.newRADMMExchange(fresh()); !errors.Is(err, ErrRejoin) || !strings.Contains(err.Error(), "journal only 1") {
		if g != nil {
			g.stop()
		}
		t.Fatalf("ledger ahead of the journal: %v", err)
	}
}

// TestRADMMRunResume: a member of an announce/join R-ADMM run is stopped mid-run
// (context cancelled, host closed) and started again with the same configuration and
// data directory: RunRADMM takes the membership, M, f_i(0) and the neighbours' addresses
// from its journal (no join), resumes, and the run (neighbours on policy wait) ends with
// every model equal bit for bit to an uninterrupted run of the same machines; the
// restarted node's model.json charges all T iterations and /status reports them.
func TestRADMMRunResume(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	d := radmmData(t)
	sh, err := consensus.Split(d, 3, "iid", 5)
	if err != nil {
		t.Fatal(err)
	}
	const T = 30
	p := RADMMParams{Algo: "radmm", Graph: "ring", Iters: T, Alpha: 2, Eta: 1, Gamma: 0.5, PaperC: 5,
		Barrier: 100 * time.Millisecond, MaxWait: time.Hour, OnMissing: MissingWait}
	listen := []string{"/ip4/127.0.0.1/tcp/" + strconv.Itoa(freePort(t))}
	nodes, logs, dirs := radmmClusterWith(t, ctx, "gresume", sh, p, func(i int, c *Config) {
		if i == 2 {
			c.Listen = listen
		}
	})
	models := make([]*RADMMModel, 3)
	errs := make([]error, 3)
	done := make(chan int, 3)
	for i := 0; i < 2; i++ {
		go func() { models[i], errs[i] = nodes[i].RunRADMM(ctx); done <- i }()
	}
	ctx2, stop2 := context.WithCancel(ctx)
	first := make(chan error, 1)
	nodes[2].cfg.RADMM.PauseAt = 9
	go func() { _, err := nodes[2].RunRADMM(ctx2); first <- err }()
	for k := 0; ; k++ {
		if g := nodes[2].Status().RADMM; g != nil && g.Iter == 9 && g.LedgerEntries == 10 {
			break
		}
		if k > 4000 {
			t.Fatalf("node 2 did not progress:\n%s", logs[2].String())
		}
		time.Sleep(2 * time.Millisecond)
	}
	stop2()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("stopped node: %v", err)
	}
	nodes[2].Close()
	c := radmmTestConfig("gresume", sh[2], p)
	c.DataDir, c.Listen, c.HTTP = dirs[2], listen, "127.0.0.1:0"
	var again *Node
	for k := 0; ; k++ { // the port is released asynchronously after Close
		if again, err = New(ctx, c); err == nil {
			break
		}
		if k > 200 {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	defer again.Close()
	models[2], errs[2] = again.RunRADMM(ctx)
	for i := 0; i < 2; i++ {
		<-done
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: %v\n%s", i, err, logs[i].String())
		}
	}
	ref := radmmReference(t, byIndex(t, models, sh), p, d.Rows)
	for k, m := range models {
		if !sameFloats(m.Model, ref[m.Index]) {
			t.Fatalf("node %d (index %d): model %v, uninterrupted %v", k, m.Index, m.Model, ref[m.Index])
		}
	}
	N, V, K := 3.0, 2, (T+1)/2
	w, r := p.PaperC*N/float64(d.Rows), p.PaperC*radmmProblem.Reg.L2
	want := float64(K) * 2 * w * (1.4*0.25/(r+2*p.Eta*float64(V)) + p.Alpha)
	pr := models[2].Privacy
	if pr.LedgerEntries != T+1 || math.Abs(float64(pr.Ledger)-want) > 1e-9*want || !pr.ConditionsHold {
		t.Fatalf("restarted node privacy %+v, want ledger epsilon %v over %d entries", pr, want, T+1)
	}
	if g := again.Status().RADMM; g == nil || g.Iter != T || g.LedgerEntries != T+1 || math.Abs(float64(g.EpsilonSpent)-want) > 1e-9*want {
		t.Fatalf("restarted node status %+v", g)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// FuzzRADMMJournal: any journal file gives records or an error, never a panic, and
// replaying parsed records into a fresh exchange either restores it or refuses with
// ErrRejoin.
func FuzzRADMMJournal(f *testing.F) {
	f.Add([]byte(`{"run":"r","iter":0,"members":["a","b"],"total_rows":40,"vec":[0,-0.2,0.05]}` + "\n"))
	f.Add([]byte(`{"run":"r","iter":0,"vec":[0,-0.2,0.05]}` + "\n" + `{"run":"r","iter":1,"vec":[1,2,3],"in":[{"from":1,"iter":0,"vec":[1,1,1]}],"noise":[{"s":1,"v":[0.1,0.2,0.3]},{"u":true,"v":[0.5]}]}` + "\n"))
	f.Add([]byte(`{"run":"r","iter":0,"vec":[0,-0.2,0.05]}` + "\n" + `{"run":"r","iter":1,"vec":[1],"in":[{"from":5,"iter":7,"vec":[]}],"noise":[{"u":true,"v":[]}]}`))
	f.Add([]byte("{\n"))
	nbrs := [][]int{{1}, {0}}
	met := newMetrics()
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		// A journal goes with its ledger (store.Open refuses run state without one).
		if err := os.WriteFile(filepath.Join(dir, store.LedgerFile), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, store.RADMMJournalFile)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		recs, good, err := store.ReadRADMMRecords(path, "r")
		if err != nil {
			return
		}
		if good > int64(len(b)) {
			t.Fatalf("complete length %d beyond %d bytes", good, len(b))
		}
		if len(recs) == 0 || len(recs) > 8 {
			return
		}
		ms, jns := noisyMachines(t, nbrs, 4)
		st, err := store.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		st.NoSync = true
		ex, err := gossip.NewExchange(ms[0], gossip.DefaultExchangeConfig())
		if err != nil {
			t.Fatal(err)
		}
		// restore needs the Node's run, data directory, store and metrics only.
		nd := &Node{cfg: Config{
			Run: "r", DataDir: dir,
			Reliability: Reliability{NoSync: true},
		}, store: st, metrics: met}
		g := &radmmExchange{n: nd, cfg: radmmConfig{Machine: ms[0], Noise: jns[0], Iters: 4}, ex: ex, ad: drive.NewRADMM(ex)}
		if err := g.restore(recs, nil); err != nil && !errors.Is(err, ErrRejoin) && !errors.Is(err, store.ErrLedger) {
			t.Fatalf("restore: %v", err)
		}
	})
}
