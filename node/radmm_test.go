package node

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/gossip"
	"github.com/dpadmm/dpadmm/node/wire"
)

func sampleFrame(dim int) wire.ExchangeFrame {
	f := wire.ExchangeFrame{Run: "r1", Iter: 7, From: 1, Vec: make([]float64, dim)}
	for k := range f.Vec {
		f.Vec[k] = float64(k)*0.25 - 1
	}
	return f
}

func TestExchangeFrameRoundTrip(t *testing.T) {
	f := sampleFrame(4)
	f.Vec[2] = math.Copysign(0, -1) // bit-exactness includes the sign of zero
	b, err := wire.EncodeExchangeFrame(nil, f)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != wire.ExchangeFrameSize("r1", 4) {
		t.Fatalf("size %d, want %d", len(b), wire.ExchangeFrameSize("r1", 4))
	}
	// Layout: version, iter, from, dim, runlen, run, vector (little-endian).
	if b[0] != wire.ExchangeWireVersion || binary.LittleEndian.Uint64(b[1:]) != 7 || binary.LittleEndian.Uint32(b[9:]) != 1 ||
		binary.LittleEndian.Uint32(b[13:]) != 4 || b[17] != 2 || string(b[18:20]) != "r1" ||
		binary.LittleEndian.Uint64(b[20+16:]) != math.Float64bits(math.Copysign(0, -1)) {
		t.Fatalf("unexpected layout % x", b)
	}
	got, err := wire.DecodeExchangeFrame(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Run != f.Run || got.Iter != f.Iter || got.From != f.From || len(got.Vec) != 4 {
		t.Fatalf("decoded %+v, want %+v", got, f)
	}
	for k := range f.Vec {
		if math.Float64bits(got.Vec[k]) != math.Float64bits(f.Vec[k]) {
			t.Fatalf("coordinate %d differs", k)
		}
	}
}

func TestExchangeFrameDecodeErrors(t *testing.T) {
	good, _ := wire.EncodeExchangeFrame(nil, sampleFrame(3))
	huge := append([]byte(nil), good...)
	binary.LittleEndian.PutUint32(huge[13:], wire.MaxDim+1)
	longRun := append([]byte(nil), good...)
	longRun[17] = wire.MaxRunName + 1
	for _, c := range []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, wire.ErrMalformed},
		{"version", append([]byte{9}, good[1:]...), wire.ErrVersion},
		{"short header", good[:wire.ExchangeHeader-1], wire.ErrMalformed},
		{"truncated", good[:len(good)-1], wire.ErrMalformed},
		{"trailing", append(append([]byte(nil), good...), 0), wire.ErrMalformed},
		{"huge dim", huge, wire.ErrMalformed},
		{"long run", longRun, wire.ErrMalformed},
	} {
		if _, err := wire.DecodeExchangeFrame(c.b); !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
		}
	}
	if _, err := wire.EncodeExchangeFrame(nil, wire.ExchangeFrame{Run: strings.Repeat("x", wire.MaxRunName+1)}); err == nil {
		t.Error("over-long run name encoded")
	}
}

func TestExchangeValidator(t *testing.T) {
	v := wire.ExchangeValidator{Run: "r1", Dim: 3, Iters: 10, Neighbors: []bool{false, true, false, true}}
	ok := sampleFrame(3)
	mod := func(f func(*wire.ExchangeFrame)) wire.ExchangeFrame {
		g := ok
		g.Vec = append([]float64(nil), ok.Vec...)
		f(&g)
		return g
	}
	for _, c := range []struct {
		name   string
		f      wire.ExchangeFrame
		sender int
		want   wire.Verdict
		reason string
	}{
		{"ok", ok, 1, wire.Accept, ""},
		{"non-member", ok, -1, wire.Reject, "not a member"},
		{"forged sender", mod(func(g *wire.ExchangeFrame) { g.From = 3 }), 1, wire.Reject, "claims sender 3"},
		{"not a neighbour", mod(func(g *wire.ExchangeFrame) { g.From = 2 }), 2, wire.Reject, "not a graph neighbour"},
		{"out of range", mod(func(g *wire.ExchangeFrame) { g.From = 9 }), 9, wire.Reject, "not a graph neighbour"},
		{"run", mod(func(g *wire.ExchangeFrame) { g.Run = "r2" }), 1, wire.Reject, "run"},
		{"dim", mod(func(g *wire.ExchangeFrame) { g.Vec = g.Vec[:2] }), 1, wire.Reject, "dimension 2"},
		{"beyond T", mod(func(g *wire.ExchangeFrame) { g.Iter = 11 }), 1, wire.Reject, "beyond"},
		{"nan", mod(func(g *wire.ExchangeFrame) { g.Vec[1] = math.NaN() }), 1, wire.Reject, "non-finite coordinate 1"},
		{"inf", mod(func(g *wire.ExchangeFrame) { g.Vec[2] = math.Inf(-1) }), 1, wire.Reject, "non-finite coordinate 2"},
		{"huge", mod(func(g *wire.ExchangeFrame) { g.Vec[0] = 1e300 }), 1, wire.Reject, "coordinate 0 beyond"},
	} {
		got, reason := v.Check(c.f, c.sender)
		if got != c.want || !strings.Contains(reason, c.reason) {
			t.Errorf("%s: %v (%q), want %v (%q)", c.name, got, reason, c.want, c.reason)
		}
	}
}

func TestParseMissingPolicy(t *testing.T) {
	for s, want := range map[string]MissingPolicy{"": MissingStop, "stop": MissingStop, " Wait ": MissingWait, "stale": MissingStale} {
		got, err := ParseMissingPolicy(s)
		if err != nil || got != want {
			t.Errorf("%q: %v %v, want %v", s, got, err, want)
		}
		if s != "" && !strings.EqualFold(strings.TrimSpace(s), got.String()) {
			t.Errorf("%q: String %q", s, got.String())
		}
	}
	if _, err := ParseMissingPolicy("ignore"); err == nil || !strings.Contains(err.Error(), "stop, wait or stale") {
		t.Errorf("bad policy: %v", err)
	}
}

// testMachines builds fresh R-ADMM machines (noise off) over a small logistic data set on
// the given adjacency.
func testMachines(t *testing.T, nbrs [][]int, iters int) []*gossip.Machine {
	t.Helper()
	n := len(nbrs)
	d, _ := consensus.SyntheticLogistic(20*n, 3, 2, 7)
	shards, err := consensus.Split(d, n, "contiguous", 1)
	if err != nil {
		t.Fatal(err)
	}
	ms := make([]*gossip.Machine, n)
	for i := range ms {
		obj, err := gossip.NewObjective(shards[i], consensus.Logistic, float64(n)/float64(d.Rows), 0.05)
		if err != nil {
			t.Fatal(err)
		}
		c := gossip.DefaultConfig()
		c.Node, c.Nodes, c.Neighbors, c.Iters, c.Run = i, n, nbrs[i], iters, "r"
		c.Init = []float64{0.1 * float64(i), -0.2, 0.05}
		if ms[i], err = gossip.New(c, obj); err != nil {
			t.Fatal(err)
		}
	}
	return ms
}

// pureRun drives machines to the end in one goroutine (the reference).
func pureRun(t *testing.T, ms []*gossip.Machine) {
	t.Helper()
	for {
		moved := false
		var q []gossip.Envelope
		for _, m := range ms {
			if m.HasReady() {
				rd := m.Ready()
				q = append(q, rd.Outbox...)
				m.Advance(rd)
				moved = true
			}
		}
		for _, e := range q {
			if err := ms[e.To].Step(e.Msg); err != nil {
				t.Fatal(err)
			}
		}
		if !moved && len(q) == 0 {
			return
		}
	}
}

// exchangeNode starts a Node of run on loopback with data directory dir: a static R-ADMM
// configuration that the tests never run (they build its exchange with newRADMMExchange
// and drive it themselves). The Node is closed at the end of the test.
func exchangeNode(t *testing.T, run, dir string) *Node {
	t.Helper()
	c := radmmTestConfig(run, radmmData(t), RADMMParams{Algo: "radmm", Iters: 1, Alpha: math.Inf(1), Eta: 1, PaperC: 1})
	c.DataDir = dir
	nd, err := New(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nd.Close() })
	return nd
}

// newExchange builds nd's exchange for cfg; a built exchange is stopped at the end of
// the test (before its Node is closed).
func newExchange(t *testing.T, nd *Node, cfg radmmConfig) (*radmmExchange, error) {
	t.Helper()
	x, err := nd.newRADMMExchange(cfg)
	if err == nil {
		t.Cleanup(x.stop)
	}
	return x, err
}

// closeExchange stops x and closes its Node (host and store), as the end of RunRADMM and
// Node.Close do.
func closeExchange(x *radmmExchange) {
	x.stop()
	x.n.Close()
}

// exchangeNet creates one Node per machine on loopback, builds its R-ADMM exchange and
// fills the peerstores. Each mod may change node i's exchange configuration before the
// exchange is built.
func exchangeNet(t *testing.T, ms []*gossip.Machine, nbrs [][]int, iters int, barrier time.Duration, pol MissingPolicy, mods ...func(i int, c *radmmConfig)) []*radmmExchange {
	t.Helper()
	n := len(ms)
	nds := make([]*Node, n)
	ids := make([]peer.ID, n)
	for i := range nds {
		nds[i] = exchangeNode(t, "r", t.TempDir())
		ids[i] = nds[i].ID()
	}
	xs := make([]*radmmExchange, n)
	for i := range xs {
		c := radmmConfig{Members: ids, Self: i, Neighbors: nbrs[i], Machine: ms[i], Iters: iters, Barrier: barrier, OnMissing: pol}
		for _, mod := range mods {
			mod(i, &c)
		}
		x, err := newExchange(t, nds[i], c)
		if err != nil {
			t.Fatal(err)
		}
		xs[i] = x
	}
	for _, a := range nds {
		for _, b := range nds {
			if a != b {
				a.Host.Peerstore().AddAddrs(b.ID(), b.Host.Addrs(), time.Hour)
			}
		}
	}
	return xs
}

// TestExchangeRun: three nodes on a path 0-1-2 over real streams end with the models of
// the same machines driven in one goroutine, bit for bit, and one ledger entry per
// iteration 0..T on disk.
func TestExchangeRun(t *testing.T) {
	nbrs := [][]int{{1}, {0, 2}, {1}}
	const T = 6
	ref := testMachines(t, nbrs, T)
	pureRun(t, ref)
	nodes := exchangeNet(t, testMachines(t, nbrs, T), nbrs, T, 20*time.Second, MissingStop)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type out struct {
		r   *exchangeResult
		err error
	}
	ch := make([]chan out, len(nodes))
	for i, g := range nodes {
		ch[i] = make(chan out, 1)
		go func() { r, err := g.run(ctx); ch[i] <- out{r, err} }()
	}
	for i := range nodes {
		o := <-ch[i]
		if o.err != nil {
			t.Fatalf("node %d: %v", i, o.err)
		}
		if o.r.Iter != T || len(o.r.Ledger) != T+1 || o.r.Rejected != 0 {
			t.Fatalf("node %d: iter %d, %d ledger entries, %d rejected", i, o.r.Iter, len(o.r.Ledger), o.r.Rejected)
		}
		for k := range o.r.Model {
			if math.Float64bits(o.r.Model[k]) != math.Float64bits(ref[i].ModelView()[k]) {
				t.Fatalf("node %d: model %v, reference %v", i, o.r.Model, ref[i].ModelView())
			}
		}
		es, err := nodes[i].n.Store().Ledger()
		if err != nil || len(es) != T+1 {
			t.Fatalf("node %d: %d entries on disk (%v)", i, len(es), err)
		}
		for k, e := range es {
			if e.Hop != uint64(k) || e.Run != "r" {
				t.Fatalf("node %d: entry %d: %+v", i, k, e)
			}
		}
	}
}

// TestExchangeRejects: node 0 of a path 0-1-2 refuses, with wire.AckReject, frames from a
// non-member, from the member that is not its neighbour, and malformed, foreign, forged,
// non-finite or oversized frames from its neighbour; it accepts a valid frame.
func TestExchangeRejects(t *testing.T) {
	nbrs := [][]int{{1}, {0, 2}, {1}}
	nodes := exchangeNet(t, testMachines(t, nbrs, 4), nbrs, 4, 20*time.Second, MissingStop)
	met := nodes[0].n.metrics
	met.enableRADMM()
	rogue, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	defer rogue.Close()
	rogue.Peerstore().AddAddrs(nodes[0].n.ID(), nodes[0].n.Host.Addrs(), time.Hour)
	ctx := context.Background()
	send := func(s network.Stream, raw []byte) byte {
		t.Helper()
		s.SetDeadline(time.Now().Add(10 * time.Second))
		if err := wire.WriteFrame(s, raw); err != nil {
			t.Fatal(err)
		}
		var ack [1]byte
		if _, err := s.Read(ack[:]); err != nil {
			t.Fatal(err)
		}
		return ack[0]
	}
	enc := func(f wire.ExchangeFrame) []byte { b, _ := wire.EncodeExchangeFrame(nil, f); return b }
	good := wire.ExchangeFrame{Run: "r", Iter: 0, From: 1, Vec: []float64{1, 2, 3}}

	s, err := rogue.NewStream(ctx, nodes[0].n.ID(), wire.RADMMProtocol("r"))
	if err != nil {
		t.Fatal(err)
	}
	if c := send(s, enc(good)); c != wire.AckReject {
		t.Errorf("non-member: ack %d", c)
	}
	s.Close()
	s, err = nodes[2].n.Host.NewStream(ctx, nodes[0].n.ID(), wire.RADMMProtocol("r"))
	if err != nil {
		t.Fatal(err)
	}
	bad := good
	bad.From = 2
	if c := send(s, enc(bad)); c != wire.AckReject {
		t.Errorf("non-neighbour: ack %d", c)
	}
	s.Close()

	s, err = nodes[1].n.Host.NewStream(ctx, nodes[0].n.ID(), wire.RADMMProtocol("r"))
	if err != nil {
		t.Fatal(err)
	}
	for name, raw := range map[string][]byte{
		"malformed": {wire.ExchangeWireVersion, 1, 2},
		"version":   append([]byte{2}, enc(good)[1:]...),
		"run":       enc(wire.ExchangeFrame{Run: "x", Iter: 0, From: 1, Vec: good.Vec}),
		"forged":    enc(wire.ExchangeFrame{Run: "r", Iter: 0, From: 0, Vec: good.Vec}),
		"dim":       enc(wire.ExchangeFrame{Run: "r", Iter: 0, From: 1, Vec: []float64{1, 2}}),
		"nan":       enc(wire.ExchangeFrame{Run: "r", Iter: 0, From: 1, Vec: []float64{1, math.NaN(), 3}}),
		"beyond T":  enc(wire.ExchangeFrame{Run: "r", Iter: 5, From: 1, Vec: good.Vec}),
	} {
		if c := send(s, raw); c != wire.AckReject {
			t.Errorf("%s: ack %d", name, c)
		}
	}
	if c := send(s, enc(good)); c != wire.AckOK {
		t.Errorf("valid frame: ack %d", c)
	}
	if got := nodes[0].rejected.Load(); got != 9 {
		t.Errorf("%d rejections counted, want 9", got)
	}
	// An oversized frame is refused from its length prefix and the stream is reset.
	s.SetDeadline(time.Now().Add(10 * time.Second))
	var hdr [4]byte
	binary.LittleEndian.PutUint32(hdr[:], uint32(wire.ExchangeFrameSize("r", 3)+1))
	s.Write(hdr[:])
	var ack [1]byte
	if _, err := s.Read(ack[:]); err != nil || ack[0] != wire.AckReject {
		t.Errorf("oversized: ack %v (%v)", ack[0], err)
	}
	if _, err := s.Read(ack[:]); err == nil {
		t.Error("stream still open after an oversized frame")
	}
	for label, want := range map[string]float64{"non-member": 1, "not-neighbor": 1, "malformed": 1, "version": 1, "run": 1,
		"forged": 1, "dimension": 1, "non-finite": 1, "iteration": 1, "oversized": 1} {
		if got := met.labelled("dpadmm_gossip_messages_rejected_total", "reason", label); got != want {
			t.Errorf("dpadmm_gossip_messages_rejected_total{reason=%q} = %v, want %v", label, got, want)
		}
	}
}

func TestExchangeConfigErrors(t *testing.T) {
	nbrs := [][]int{{1}, {0}}
	ms := testMachines(t, nbrs, 2)
	dir := t.TempDir()
	nd := exchangeNode(t, "r", dir)
	id := nd.ID()
	// The run name, data directory and host are the Node's: a Node refuses an empty run.
	c := radmmTestConfig("", radmmData(t), RADMMParams{Algo: "radmm", Iters: 1, Alpha: math.Inf(1), Eta: 1, PaperC: 1})
	c.DataDir = t.TempDir()
	if bad, err := New(context.Background(), c); err == nil {
		bad.Close()
		t.Error("no run: accepted")
	}
	base := radmmConfig{Members: []peer.ID{id, "x"}, Self: 0, Neighbors: []int{1}, Machine: ms[0], Iters: 2}
	for name, c := range map[string]func(*radmmConfig){
		"no machine":   func(c *radmmConfig) { c.Machine = nil },
		"self":         func(c *radmmConfig) { c.Self = 2 },
		"degree":       func(c *radmmConfig) { c.Neighbors = nil },
		"self nbr":     func(c *radmmConfig) { c.Neighbors = []int{0} },
		"barrier":      func(c *radmmConfig) { c.Barrier = -time.Second },
		"max wait":     func(c *radmmConfig) { c.Barrier, c.MaxWait = time.Second, time.Millisecond },
		"policy":       func(c *radmmConfig) { c.OnMissing = 7 },
		"dup member":   func(c *radmmConfig) { c.Members = []peer.ID{id, id} },
		"wrong member": func(c *radmmConfig) { c.Members = []peer.ID{"x", id} },
	} {
		c2 := base
		c(&c2)
		x, err := nd.newRADMMExchange(c2)
		if err == nil {
			x.stop()
			t.Errorf("%s: accepted", name)
		}
	}
	x, err := nd.newRADMMExchange(base)
	if err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	x.stop()
	// A data directory whose ledger holds entries of the run cannot join it again.
	if err := nd.Store().AppendLedger(ms[0].Ready().Ledger); err != nil {
		t.Fatal(err)
	}
	if _, err := nd.newRADMMExchange(base); !errors.Is(err, ErrRejoin) {
		t.Fatalf("rejoin: %v", err)
	}
	// The same data directory takes part in another run.
	nd.Close()
	nd2 := exchangeNode(t, "r2", dir)
	x, err = nd2.newRADMMExchange(base)
	if err != nil {
		t.Fatalf("another run refused: %v", err)
	}
	x.stop()
}
