package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	golog "github.com/ipfs/go-log/v2"
	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/rs/zerolog"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/node/wire"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/walk"
)

var loopback = []string{"/ip4/127.0.0.1/tcp/0"}

func testRand(seed uint64) func(int) *rand.Rand {
	return func(i int) *rand.Rand { return rand.New(rand.NewPCG(seed, uint64(i+7))) }
}

func testNoise(seed uint64) func(int) privacy.Noise {
	return func(i int) privacy.Noise { return privacy.NewSeededNoise(seed*1000 + uint64(i)) }
}

func shards(t *testing.T, n int) []*consensus.Dataset {
	t.Helper()
	d, _ := consensus.SyntheticLogistic(120, 4, 3, 5)
	sh, err := consensus.Split(d, n, "iid", 5)
	if err != nil {
		t.Fatal(err)
	}
	return sh
}

func baseConfig(run string, d *consensus.Dataset, hops uint64) Config {
	return Config{
		Run: run, Data: d,
		Training:    Training{Problem: consensus.Problem{Loss: consensus.Logistic, Reg: consensus.Regularizer{L2: 0.01}}, Gamma: 1, Lambda: 0.5, Clip: 1, Sigma: 0.5, Hops: hops},
		Seeding:     Seeding{AllowSeededNoise: true, Rand: testRand(11), Noise: testNoise(11)},
		Network:     Network{Listen: loopback},
		Reliability: Reliability{NoSync: true, AckTimeout: 5 * time.Second, FinalWait: 10 * time.Second},
	}
}

// staticCluster builds n nodes with a fixed membership, all connected to each other.
func staticCluster(t *testing.T, ctx context.Context, run string, sh []*consensus.Dataset, hops uint64, holder int, dirs []string) []*Node {
	t.Helper()
	return staticClusterWith(t, ctx, run, sh, hops, holder, dirs, nil)
}

// staticClusterWith is staticCluster with a hook that adjusts each node's configuration.
func staticClusterWith(t *testing.T, ctx context.Context, run string, sh []*consensus.Dataset, hops uint64, holder int, dirs []string, mut func(i int, c *Config)) []*Node {
	t.Helper()
	n := len(sh)
	ids := make([]peer.ID, n)
	total := 0
	for i := range sh {
		if dirs[i] == "" {
			dirs[i] = t.TempDir()
		}
		id, err := store.DataDirPeerID(dirs[i])
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
		total += sh[i].Rows
	}
	nodes := make([]*Node, n)
	for i := range sh {
		c := baseConfig(run, sh[i], hops)
		c.DataDir, c.Members, c.Holder = dirs[i], ids, holder
		c.Weight = float64(n) * float64(sh[i].Rows) / float64(total)
		if mut != nil {
			mut(i, &c)
		}
		nd, err := New(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		nodes[i] = nd
	}
	connectAll(t, ctx, nodes)
	return nodes
}

func connectAll(t *testing.T, ctx context.Context, nodes []*Node) {
	t.Helper()
	for i, a := range nodes {
		for _, b := range nodes[i+1:] {
			if err := a.Host.Connect(ctx, peer.AddrInfo{ID: b.ID(), Addrs: b.Host.Addrs()}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func runAll(t *testing.T, ctx context.Context, nodes []*Node) []*Model {
	t.Helper()
	models := make([]*Model, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, nd := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); models[i], errs[i] = nd.Run(ctx) }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
	}
	return models
}

// reference runs the same machines sequentially in one goroutine (no network).
func reference(t *testing.T, sh []*consensus.Dataset, hops uint64, holder int) []float64 {
	t.Helper()
	n, total := len(sh), 0
	for _, s := range sh {
		total += s.Rows
	}
	ms := make([]*walk.Machine, n)
	for i, s := range sh {
		c := baseConfig("x", s, hops)
		ll, err := consensus.NewLocalLoss(s, c.Problem.Loss, float64(n)*float64(s.Rows)/float64(total))
		if err != nil {
			t.Fatal(err)
		}
		ms[i], err = walk.New(walk.Config{Node: i, Nodes: n, Gamma: c.Gamma, Lambda: c.Lambda, Clip: c.Clip, Sigma: c.Sigma,
			Reg: c.Problem.Reg, Rand: c.Rand(i), Noise: c.Noise(i), Run: "ref"}, ll, s.Cols)
		if err != nil {
			t.Fatal(err)
		}
	}
	tok := walk.NewToken("ref", 0, sh[0].Cols, baseConfig("x", sh[0], 1).Problem.Reg, 1)
	h := holder
	for k := uint64(0); k < hops; k++ {
		if err := ms[h].Step(walk.Message{From: -1, Token: tok}); err != nil {
			t.Fatal(err)
		}
		rd := ms[h].Ready()
		tok, h = rd.Outbox[0].Token, rd.Outbox[0].To
		ms[h].Advance(rd) // harmless for a machine with nothing pending
		for _, m := range ms {
			if m.HasReady() {
				m.Advance(m.Ready())
			}
		}
	}
	return tok.Z
}

func sameBits(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if math.Float64bits(a[k]) != math.Float64bits(b[k]) {
			return false
		}
	}
	return true
}

func TestStaticRunLoopback(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n, hops, holder = 4, 60, 2
	sh := shards(t, n)
	nodes := staticCluster(t, ctx, "static", sh, hops, holder, make([]string, n))
	start := time.Now()
	models := runAll(t, ctx, nodes)
	t.Logf("%d hops over %d libp2p hosts in %v", hops, n, time.Since(start))
	want := reference(t, sh, hops, holder)
	entries := 0
	for i, m := range models {
		if !sameBits(m.Model, want) {
			t.Fatalf("node %d model %v, reference %v", i, m.Model, want)
		}
		entries += nodes[i].Store().Entries()
		b, err := os.ReadFile(filepath.Join(nodes[i].Store().Dir, store.ModelFile))
		if err != nil {
			t.Fatal(err)
		}
		var onDisk Model
		if err := json.Unmarshal(b, &onDisk); err != nil || !sameBits(onDisk.Model, want) {
			t.Fatalf("node %d model.json: %v", i, err)
		}
		if onDisk.Privacy.Local.Theorem == "" || onDisk.Privacy.Updates != nodes[i].walk.ckpt.Updates {
			t.Fatalf("node %d privacy report %+v", i, onDisk.Privacy)
		}
		es, err := nodes[i].Store().Ledger()
		if err != nil {
			t.Fatal(err)
		}
		for k, e := range es {
			if e.Seq != uint64(k+1) || e.Node != nodes[i].ID().String() {
				t.Fatalf("node %d ledger entry %d: %+v", i, k, e)
			}
		}
	}
	if entries != hops {
		t.Fatalf("ledger entries %d, want %d (one per hop)", entries, hops)
	}
}

// attacker is a member host that speaks the walk protocol by hand.
func TestRejectsHostileInput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sh := shards(t, 2)
	var logBuf syncBuffer
	dir := t.TempDir()
	vid, err := store.DataDirPeerID(dir)
	if err != nil {
		t.Fatal(err)
	}
	atk, err := libp2p.New(libp2p.ListenAddrStrings(loopback...))
	if err != nil {
		t.Fatal(err)
	}
	defer atk.Close()
	outsider, err := libp2p.New(libp2p.ListenAddrStrings(loopback...))
	if err != nil {
		t.Fatal(err)
	}
	defer outsider.Close()
	const hops = 5
	c := baseConfig("hostile", sh[0], hops)
	c.DataDir, c.Members, c.Holder, c.Weight = dir, []peer.ID{vid, atk.ID()}, 1, 1
	c.Logger = zerolog.New(&logBuf)
	v, err := New(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	for _, h := range []host.Host{atk, outsider} {
		if err := h.Connect(ctx, peer.AddrInfo{ID: v.ID(), Addrs: v.Host.Addrs()}); err != nil {
			t.Fatal(err)
		}
	}
	type result struct {
		m   *Model
		err error
	}
	done := make(chan result, 1)
	go func() { m, err := v.Run(ctx); done <- result{m, err} }()

	dim := sh[0].Cols
	enc := func(mod func(*walk.Token)) []byte {
		tok := walk.NewToken("hostile", 0, dim, consensus.Regularizer{}, 1)
		tok.Hop = 1
		mod(&tok)
		b, err := wire.EncodeToken(nil, tok)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	send := func(h host.Host, frame []byte, raw bool) (byte, error) {
		s, err := h.NewStream(ctx, v.ID(), wire.WalkProtocol("hostile"))
		if err != nil {
			return 0, err
		}
		defer s.Close()
		s.SetDeadline(time.Now().Add(10 * time.Second))
		if raw {
			s.Write(frame)
		} else {
			wire.WriteFrame(s, frame)
		}
		var ack [1]byte
		for {
			if _, err := s.Read(ack[:]); err != nil {
				return 0, err
			}
			if ack[0] != wire.AckBusy {
				return ack[0], nil
			}
			time.Sleep(20 * time.Millisecond) // membership not fixed yet: resend
			wire.WriteFrame(s, frame)
		}
	}
	versioned := enc(func(*walk.Token) {})
	versioned[0] = 7
	oversized := []byte{0xff, 0xff, 0xff, 0x7f}
	cases := []struct {
		name   string
		h      host.Host
		frame  []byte
		raw    bool
		reason string
	}{
		{"oversized frame", atk, oversized, true, "oversized"},
		{"garbage", atk, []byte{wire.WireVersion, 2, 3}, false, "malformed"},
		{"unknown version", atk, versioned, false, "version"},
		{"wrong run", atk, enc(func(t *walk.Token) { t.Run = "other" }), false, "invalid"},
		{"wrong dimension", atk, enc(func(t *walk.Token) { t.Z, t.Zhat = t.Z[:1], t.Zhat[:1] }), false, "invalid"},
		{"NaN vector", atk, enc(func(t *walk.Token) { t.Z[0] = math.NaN() }), false, "invalid"},
		{"non-member", outsider, enc(func(*walk.Token) {}), false, "non-member"},
	}
	for _, tc := range cases {
		code, err := send(tc.h, tc.frame, tc.raw)
		if tc.name == "non-member" {
			// The membership is fixed: the connection gater refuses the outsider at the
			// handshake (its open connection was closed), before any stream is read.
			if err == nil {
				t.Fatalf("non-member: stream accepted with ack %d", code)
			}
		} else if err != nil && tc.name != "oversized frame" {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if err == nil && code != wire.AckReject {
			t.Fatalf("%s: ack %d, want reject", tc.name, code)
		}
		if got := v.Rejected(tc.reason); got < 1 {
			t.Fatalf("%s: rejected{%s} = %v", tc.name, tc.reason, got)
		}
	}
	// The node is still alive: a valid final token from a member is accepted, and a stale
	// one afterwards is fenced.
	ftok := walk.NewToken("hostile", 0, dim, consensus.Regularizer{}, 1)
	ftok.Hop, ftok.Z[0] = hops, 0.25
	// Signed by the attacker, the origin (holder 1): hop K without evidence is within
	// the origin's bound for two members.
	final := signedFrame(t, atk, v.ID(), ftok, nil)
	if code, err := send(atk, final, false); err != nil || code != wire.AckOK {
		t.Fatalf("valid token: ack %d, %v", code, err)
	}
	s, err := atk.NewStream(ctx, v.ID(), wire.DoneProtocol("hostile"))
	if err != nil {
		t.Fatal(err)
	}
	s.Write([]byte{1})
	s.Close()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.m.Model[0] != 0.25 || r.m.Hops != hops {
		t.Fatalf("model %+v", r.m)
	}
	for _, want := range []string{"hand-off rejected", "non-finite coordinate", "unknown wire version", "exceeds the size limit", "not a member"} {
		if !strings.Contains(logBuf.String(), want) {
			t.Errorf("log lacks %q", want)
		}
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRestartKeepsIdentityAndLedger(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sh := shards(t, 2)
	dirs := []string{t.TempDir(), t.TempDir()}
	nodes := staticCluster(t, ctx, "restart", sh, 12, 0, dirs)
	runAll(t, ctx, nodes)
	id0, n0 := nodes[0].ID(), nodes[0].Store().Entries()
	led0, _ := os.ReadFile(filepath.Join(dirs[0], store.LedgerFile))
	for _, nd := range nodes {
		nd.Close()
	}
	c := baseConfig("restart", sh[0], 12)
	c.DataDir = dirs[0]
	again, err := New(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if again.ID() != id0 {
		t.Fatalf("peer ID changed: %s -> %s", id0, again.ID())
	}
	if again.Store().Entries() != n0 || n0 == 0 {
		t.Fatalf("ledger entries %d after restart, %d before", again.Store().Entries(), n0)
	}
	ck, err := again.Store().LoadCheckpoint()
	if err != nil || ck == nil || ck.Updates != nodes[0].walk.ckpt.Updates {
		t.Fatalf("checkpoint after restart: %+v, %v", ck, err)
	}
	again.Close()

	// A corrupt or missing ledger next to a checkpoint makes the node refuse.
	bad := append([]byte(nil), led0...)
	bad[len(bad)/2] ^= 0x20
	os.WriteFile(filepath.Join(dirs[0], store.LedgerFile), bad, 0o600)
	if _, err := New(ctx, c); !errors.Is(err, store.ErrLedger) {
		t.Fatalf("corrupt ledger: %v, want store.ErrLedger", err)
	}
	// A ledger that lost its last bytes (a crash before its pages reached the disk) is
	// restored from the checkpoint journal, whose records carry the releases' lines.
	os.WriteFile(filepath.Join(dirs[0], store.LedgerFile), led0[:len(led0)-3], 0o600)
	if nd, err := New(ctx, c); err != nil {
		t.Fatalf("truncated ledger: %v, want it restored", err)
	} else {
		got, _ := os.ReadFile(filepath.Join(dirs[0], store.LedgerFile))
		if nd.Store().Entries() != n0 || !bytes.Equal(got, led0) {
			t.Fatalf("truncated ledger restored to %d entries, %d bytes; want %d, %d", nd.Store().Entries(), len(got), n0, len(led0))
		}
		nd.Close()
	}
	// Its last bytes changed rather than lost: refused.
	changed := append(led0[:len(led0)-3:len(led0)-3], "x}\n"...)
	os.WriteFile(filepath.Join(dirs[0], store.LedgerFile), changed, 0o600)
	if _, err := New(ctx, c); !errors.Is(err, store.ErrLedger) {
		t.Fatalf("ledger with a changed tail: %v, want store.ErrLedger", err)
	}
	os.Remove(filepath.Join(dirs[0], store.LedgerFile))
	if _, err := New(ctx, c); !errors.Is(err, store.ErrLedger) || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("missing ledger: %v, want store.ErrLedger", err)
	}
}

func TestControlPlaneJoin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sh := shards(t, 4)
	const hops = 30
	var logs [4]syncBuffer
	nodes := make([]*Node, 4)
	for i := range nodes {
		c := baseConfig("ctl", sh[i], hops)
		c.DataDir = t.TempDir()
		c.Logger = zerolog.New(&logs[i])
		if i == 0 {
			// A join window long enough for several announcements (every 250 ms), so
			// that the odd node hears one even when its pubsub mesh forms late.
			c.Start, c.MinPeers, c.JoinWindow = true, 3, 1500*time.Millisecond
		}
		if i == 3 {
			c.Gamma = 2 // a different configuration: must be refused
		}
		nd, err := New(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		nodes[i] = nd
	}
	if nodes[3].ConfigHash() == nodes[0].ConfigHash() {
		t.Fatal("config hashes should differ")
	}
	connectAll(t, ctx, nodes)
	// The odd node runs until the others finish; it must never join.
	octx, ocancel := context.WithCancel(ctx)
	odd := make(chan error, 1)
	go func() { _, err := nodes[3].Run(octx); odd <- err }()
	models := runAll(t, ctx, nodes[:3])
	for i := 0; i < 500 && !strings.Contains(logs[3].String(), "configuration differs from the run"); i++ {
		time.Sleep(10 * time.Millisecond) // the refusal may still be in the odd node's queue
	}
	ocancel()
	if err := <-odd; !errors.Is(err, context.Canceled) {
		t.Fatalf("mismatched node: %v, want it still waiting", err)
	}
	entries := 0
	for i, m := range models {
		if !sameBits(m.Model, models[0].Model) || m.Nodes != 3 || m.Hops != hops {
			t.Fatalf("node %d: %+v", i, m)
		}
		entries += nodes[i].Store().Entries()
	}
	if entries != hops {
		t.Fatalf("ledger entries %d, want %d", entries, hops)
	}
	if nodes[3].Store().Entries() != 0 {
		t.Fatal("refused node wrote ledger entries")
	}
	if !strings.Contains(logs[3].String(), "refusing run announcement: this node's configuration differs from the run's") ||
		!strings.Contains(logs[3].String(), "gamma: yours 2, the run's 1") {
		t.Errorf("mismatched node did not log the refusal with the key that differs:\n%s", logs[3].String())
	}
	// The starter heard why: the joiner's mismatch message, logged with the key.
	if !strings.Contains(logs[0].String(), "a joiner refused this run's announcement: its configuration differs") ||
		!strings.Contains(logs[0].String(), "gamma: theirs 2, ours 1") {
		t.Errorf("the starter did not log the refused joiner with the reason:\n%s", logs[0].String())
	}
}

// TestJoinerMismatchExits: a joiner that sees only announcements of its run with another
// configuration stops after MismatchWait with ErrConfigMismatch naming the differing keys,
// instead of waiting forever.
func TestJoinerMismatchExits(t *testing.T) {
	nodes, logs, err := runMismatchedJoiner(t, "mis", nil, func(c *Config) { c.Clip = 0.2 })
	if !errors.Is(err, ErrConfigMismatch) || !strings.Contains(err.Error(), "clip: yours 0.2, the run's 1") {
		t.Fatalf("joiner: %v, want ErrConfigMismatch naming clip", err)
	}
	if st, _ := nodes[1].Readiness(); st != RunFailed {
		t.Errorf("joiner readiness %s after the mismatch", st)
	}
	for i := 0; i < 1000 && !strings.Contains(logs[0].String(), "clip: theirs 0.2, ours 1"); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if js := nodes[0].Status().Join; js == nil || len(js.Refused) != 1 || !strings.Contains(js.Refused[0], "clip: theirs 0.2, ours 1") {
		t.Errorf("starter's join status %+v, want the refused joiner with the key", js)
	}
}

// runMismatchedJoiner starts a starter (node 0) and a joiner (node 1) of run on two shards
// (the joiner's shard replaced by joinerData when not nil, its configuration changed by
// joiner), and returns the nodes, their logs and the joiner's Run error.
func runMismatchedJoiner(t *testing.T, run string, joinerData *consensus.Dataset, joiner func(*Config)) ([]*Node, *[2]syncBuffer, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	sh := shards(t, 2)
	if joinerData != nil {
		sh[1] = joinerData
		if joinerData.Label != "" {
			// Data read with a header: the starter's too, its columns named as usual.
			sh[0] = sh[0].Clone()
			sh[0].Label = joinerData.Label
		}
	}
	logs := new([2]syncBuffer)
	nodes := make([]*Node, 2)
	for i := range nodes {
		c := baseConfig(run, sh[i], 10)
		c.DataDir = t.TempDir()
		c.Logger = zerolog.New(&logs[i])
		if i == 0 {
			c.Start, c.MinPeers = true, 2
		} else {
			c.MismatchWait = 2 * time.Second
			joiner(&c)
		}
		nd, err := New(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		nodes[i] = nd
	}
	connectAll(t, ctx, nodes)
	sctx, scancel := context.WithCancel(ctx)
	t.Cleanup(scancel)
	go nodes[0].Run(sctx)
	_, err := nodes[1].Run(ctx)
	return nodes, logs, err
}

func TestHTTPStatusAndMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sh := shards(t, 1)
	c := baseConfig("http", sh[0], 8)
	c.DataDir, c.HTTP, c.DebugStatus = t.TempDir(), "127.0.0.1:0", true // the per-hop counters
	id, _ := store.DataDirPeerID(c.DataDir)
	c.Members, c.Weight = []peer.ID{id}, 1
	nd, err := New(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer nd.Close()
	status := func() Status {
		t.Helper()
		resp, err := http.Get("http://" + nd.HTTPAddr + "/status")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st Status
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	// Before the run the node has used its data zero times: epsilon is exactly 0 (not
	// the conversion's grid term, about 0.0035 at delta 1e-5).
	if st := status(); st.Updates != 0 || st.Ledger != 0 || st.Epsilon != 0 {
		t.Fatalf("status before the run %+v", st)
	}
	m, err := nd.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st := status()
	if !st.Done || st.Ledger != 8 || st.Updates != m.Privacy.Updates || st.Updates != 8 || st.Run != "http" || st.UpdatesLeft != -1 || st.ModelAgeSec < 0 {
		t.Fatalf("status %+v", st)
	}
	r := privacy.WalkRun{Clip: nd.cfg.Clip, Sigma: nd.cfg.Sigma, Unit: privacy.UnitNode}
	if want := privacy.StepLocalBound(r, 8, nd.cfg.Delta).Epsilon; !(st.Epsilon > 0) || float64(st.Epsilon) != want ||
		want > privacy.LocalBound(nd.cfg.Clip, nd.cfg.Sigma, 8, nd.cfg.Delta).Epsilon {
		t.Fatalf("status epsilon %v after 8 updates, want %v", st.Epsilon, want)
	}
	resp, err := http.Get("http://" + nd.HTTPAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	resp.Body.Close()
	if !strings.Contains(b.String(), "dpadmm_noisy_updates_total 8") {
		t.Fatalf("metrics lack the update counter:\n%.500s", b.String())
	}
}

// TestCustodyRedirect: one member is down. Hand-offs to it fail, the sender keeps the
// token and redirects it to another member, charging a forward entry; the run completes.
func TestCustodyRedirect(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const hops = 40
	sh := shards(t, 3)
	dirs := make([]string, 3)
	for i := range dirs {
		dirs[i] = t.TempDir()
	}
	ids := make([]peer.ID, 3)
	for i := range ids {
		ids[i], _ = store.DataDirPeerID(dirs[i])
	}
	nodes := make([]*Node, 3)
	for i := range nodes {
		c := baseConfig("custody", sh[i], hops)
		c.DataDir, c.Members, c.Holder, c.Weight = dirs[i], ids, 0, 1
		c.AckTimeout, c.FinalWait = 2*time.Second, 3*time.Second
		c.Logger = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel).With().Int("i", i).Logger()
		nd, err := New(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		nodes[i] = nd
	}
	connectAll(t, ctx, nodes)
	for _, nd := range nodes[:2] {
		nd.Host.Peerstore().AddAddrs(nodes[2].ID(), nodes[2].Host.Addrs(), time.Hour)
	}
	nodes[2].Close() // member 2 crashes before the run
	models := runAll(t, ctx, nodes[:2])
	if !sameBits(models[0].Model, models[1].Model) {
		t.Fatal("models differ")
	}
	entries, redirects := 0, 0
	for _, nd := range nodes[:2] {
		es, err := nd.Store().Ledger()
		if err != nil {
			t.Fatal(err)
		}
		seen := map[uint64]bool{}
		for _, e := range es {
			if seen[e.Hop] {
				redirects++
				if e.Mechanism != privacy.MechForward || e.Recipient == ids[2].String() {
					t.Fatalf("redirect entry %+v", e)
				}
			}
			seen[e.Hop] = true
		}
		entries += len(es)
	}
	if redirects == 0 {
		t.Fatal("no hand-off was redirected away from the dead member")
	}
	if entries != hops+redirects {
		t.Fatalf("%d ledger entries, want %d hops + %d redirects", entries, hops, redirects)
	}
}

func TestSlogHandler(t *testing.T) {
	var b bytes.Buffer
	l, err := NewLogger(&b, "json", "info")
	if err != nil {
		t.Fatal(err)
	}
	h := NewSlogHandler(l)
	lg := slog.New(h).With("sys", "swarm").WithGroup("g")
	lg.Debug("hidden")
	lg.Warn("dial failed", "peer", "abc")
	var rec map[string]any
	if err := json.Unmarshal(b.Bytes(), &rec); err != nil {
		t.Fatalf("%v: %q", err, b.String())
	}
	if rec["level"] != "warn" || rec["message"] != "dial failed" || rec["sys"] != "swarm" || rec["g.peer"] != "abc" {
		t.Fatalf("record %v", rec)
	}
}

// TestRestartResendsCustody: a node restarted with a token in custody (checkpoint.Out)
// resends exactly those bytes; it does not step again and its ledger is unchanged.
func TestRestartResendsCustody(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const hops = 6
	sh := shards(t, 2)
	dirs := []string{t.TempDir(), t.TempDir()}
	ids := make([]peer.ID, 2)
	for i := range ids {
		ids[i], _ = store.DataDirPeerID(dirs[i])
	}
	// Node 0's state as if it crashed right after persisting hop 4 -> 5 for node 1.
	tok := walk.NewToken("custody2", 0, sh[0].Cols, consensus.Regularizer{L2: 0.01}, 1)
	tok.Hop = 5
	tok.Z[0], tok.Zhat[0] = 0.125, 0.5
	raw, _ := wire.EncodeToken(nil, tok)
	st, err := store.Open(dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	e := privacy.Entry{Node: ids[0].String(), Run: "custody2", Hop: 5, Mechanism: privacy.MechGaussian, Sensitivity: 2, Sigma: 0.25, Clip: 1, Lambda: 0.5, Recipient: ids[1].String()}
	if err := st.AppendLedger([]privacy.Entry{e}); err != nil {
		t.Fatal(err)
	}
	u := make([]float64, sh[0].Cols)
	u[1] = 0.75
	if err := st.SaveCheckpoint(&store.Checkpoint{Run: "custody2", Node: 0, Updates: 1, U: u, Hop: 4, Out: raw, OutTo: ids[1].String()}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	nodes := make([]*Node, 2)
	for i := range nodes {
		c := baseConfig("custody2", sh[i], hops)
		// Node 0 is the static holder but has a checkpoint: it resends, never re-creates.
		c.DataDir, c.Members, c.Holder, c.Weight = dirs[i], ids, 0, 1
		c.Rand = func(int) *rand.Rand { return rand.New(rand.NewPCG(1, 2)) }
		nd, err := New(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		nodes[i] = nd
	}
	var mu sync.Mutex
	var resent [][]byte
	nodes[0].sendHook = func(_ peer.ID, b []byte) {
		mu.Lock()
		resent = append(resent, slices.Clone(b))
		mu.Unlock()
	}
	connectAll(t, ctx, nodes)
	models := runAll(t, ctx, nodes)
	mu.Lock()
	if len(resent) == 0 || !bytes.HasPrefix(resent[0], raw) { // with the evidence of its hand-off
		t.Fatalf("node 0 sent %d tokens, the first not the one in custody", len(resent))
	}
	mu.Unlock()
	es1, err := nodes[1].Store().Ledger()
	if err != nil || len(es1) != 1 || es1[0].Hop != hops {
		t.Fatalf("node 1 ledger %+v, %v: want one entry for hop %d", es1, err, hops)
	}
	total := nodes[0].Store().Entries() + nodes[1].Store().Entries()
	if total != 2 { // the hop made before the crash + hop 5 -> 6
		t.Fatalf("%d ledger entries, want 2", total)
	}
	if !sameBits(models[0].Model, models[1].Model) {
		t.Fatal("models differ")
	}
	ck, _ := nodes[0].Store().LoadCheckpoint()
	if ck.Updates < 1 || ck.U[1] == 0 {
		t.Fatalf("node 0 lost its restored state: %+v", ck)
	}
}

// TestRestartProcessesStoredInbox: a node that acked a token (inbox.token, the first
// format) and stopped before stepping it processes it after a restart, instead of
// resending its older custody copy.
func TestRestartProcessesStoredInbox(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const hops = 6
	sh := shards(t, 2)
	dirs := []string{t.TempDir(), t.TempDir()}
	ids := make([]peer.ID, 2)
	for i := range ids {
		ids[i], _ = store.DataDirPeerID(dirs[i])
	}
	old := walk.NewToken("inbox", 0, sh[0].Cols, consensus.Regularizer{L2: 0.01}, 1)
	old.Hop = 3
	oldRaw, _ := wire.EncodeToken(nil, old)
	in := walk.NewToken("inbox", 0, sh[0].Cols, consensus.Regularizer{L2: 0.01}, 1)
	in.Hop = 5
	inRaw, _ := wire.EncodeToken(nil, in)
	st, err := store.Open(dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	e := privacy.Entry{Node: ids[0].String(), Run: "inbox", Hop: 3, Mechanism: privacy.MechGaussian, Sensitivity: 2, Sigma: 0.25, Clip: 1, Lambda: 0.5, Recipient: ids[1].String()}
	st.AppendLedger([]privacy.Entry{e})
	// The custody copy's backup is saved unacked, as a node leaves it when it stops
	// before the checkpoint after the ack; the stored newer token shows the hand-off was
	// finished, so the restart marks it acked.
	st.SaveCheckpoint(&store.Checkpoint{Run: "inbox", Node: 0, Updates: 1, U: make([]float64, sh[0].Cols), Hop: 2, Out: oldRaw, OutTo: ids[1].String(),
		Backups: []store.Backup{{Token: oldRaw, To: ids[1].String()}}})
	st.WriteAtomic(store.InboxFile, inRaw)
	st.Close()
	nodes := make([]*Node, 2)
	for i := range nodes {
		c := baseConfig("inbox", sh[i], hops)
		c.DataDir, c.Members, c.Holder, c.Weight = dirs[i], ids, 0, 1
		nd, err := New(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		nodes[i] = nd
	}
	connectAll(t, ctx, nodes)
	runAll(t, ctx, nodes)
	es, err := nodes[0].Store().Ledger()
	if err != nil || len(es) != 2 || es[1].Hop != hops || es[1].Seq != 2 {
		t.Fatalf("node 0 ledger %+v, %v: want the old entry and one for hop %d", es, err, hops)
	}
	if nodes[1].Store().Entries() != 0 {
		t.Fatalf("node 1 made %d entries; the stale custody copy must not be processed", nodes[1].Store().Entries())
	}
	ck, err := nodes[0].Store().LoadCheckpoint()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, b := range ck.Backups {
		if bytes.Equal(b.Token, oldRaw) {
			found = true
			if !b.Acked || b.Dist < 1 || b.To != ids[1].String() {
				t.Fatalf("backup of the custody copy after the restart: acked %v, distance %d, to %s", b.Acked, b.Dist, b.To)
			}
		}
	}
	if !found {
		t.Fatalf("backup of the custody copy missing from %d backups", len(ck.Backups))
	}
}

// TestGoLogRouted: go-log (zap) lines, as the DHT writes them, reach the zerolog stream
// with their logger name and fields, at zerolog's level filter.
func TestGoLogRouted(t *testing.T) {
	var b syncBuffer
	l, err := NewLogger(&b, "json", "warn")
	if err != nil {
		t.Fatal(err)
	}
	RouteLibp2pLogs(l)
	defer RouteLibp2pLogs(zerolog.Nop())
	lg := golog.Logger("dht-routing-test")
	lg.Infow("hidden", "k", 1)
	lg.Warnw("bootstrap failed", "peer", "abc", "tries", 3)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("want exactly the warning, got %q", b.String())
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatalf("%v: %q", err, lines[0])
	}
	if rec["level"] != "warn" || rec["message"] != "bootstrap failed" || rec["logger"] != "dht-routing-test" ||
		rec["peer"] != "abc" || rec["tries"] != 3.0 || rec["src"] != "golog" {
		t.Fatalf("record %v", rec)
	}
}

// TestStopKeepsCustody: the members of a walk are stopped one after the other (member
// 1 first, the others 100 ms later, as after signals that reach processes at different
// times; each closes its host as soon as its Run returns). A member still running hands
// the token to the stopped one meanwhile: it must see a busy peer and keep custody, not
// redirect the release to another member (one ledger entry per hop and node), and the
// stopped member must stay up until the others stopped, well within its ack timeout.
// Without the stopped member's wait, its host closes at once and the next hand-off to
// it fails and is redirected.
func TestStopKeepsCustody(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sh := shards(t, 3)
	dirs := make([]string, 3)
	var logs syncBuffer
	nodes := staticClusterWith(t, ctx, "stop", sh, 1<<40, 0, dirs, func(i int, c *Config) {
		c.AckTimeout = 5 * time.Second
		c.Logger = zerolog.New(&logs).Level(zerolog.InfoLevel).With().Int("i", i).Logger()
	})
	ctxs := make([]context.Context, 3)
	stops := make([]context.CancelFunc, 3)
	for i := range nodes {
		ctxs[i], stops[i] = context.WithCancel(ctx)
	}
	type result struct {
		i    int
		err  error
		took time.Duration
	}
	done := make(chan result, 3)
	var stopAt time.Time
	var mu sync.Mutex
	for i, nd := range nodes {
		go func() {
			_, err := nd.Run(ctxs[i])
			nd.Close() // as the node command does on return
			mu.Lock()
			took := time.Since(stopAt)
			mu.Unlock()
			done <- result{i, err, took}
		}()
	}
	// Let the walk run past its first hops on every member.
	for deadline := time.Now().Add(30 * time.Second); ; {
		k := 0
		for _, nd := range nodes {
			if nd.Store().Entries() > 20 {
				k++
			}
		}
		if k == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the walk made no progress")
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	stopAt = time.Now()
	mu.Unlock()
	stops[1]()
	time.Sleep(100 * time.Millisecond)
	stops[0]()
	stops[2]()
	for range nodes {
		r := <-done
		if !errors.Is(r.err, context.Canceled) {
			t.Errorf("node %d: Run returned %v, want context.Canceled", r.i, r.err)
		}
		t.Logf("node %d stopped %v after the first stop", r.i, r.took)
		if r.took > 3*time.Second {
			t.Errorf("node %d stopped %v after the first stop", r.i, r.took)
		}
	}
	for i, nd := range nodes {
		es, err := nd.Store().Ledger()
		if err != nil {
			t.Fatal(err)
		}
		seen := map[uint64]bool{}
		for _, e := range es {
			if seen[e.Hop] {
				t.Errorf("node %d: a second entry for hop %d (redirected): %+v", i, e.Hop, e)
			}
			seen[e.Hop] = true
		}
	}
	if s := logs.String(); strings.Contains(s, "redirecting") || strings.Contains(s, "hand-off failed") {
		t.Errorf("a hand-off failed while the members stopped:\n%s", s)
	}
}

// TestJoinerClassMismatchExits: a joiner whose labels map the other way round (its
// positive class is the run's negative one, as with a different --positive) is refused
// with a message naming the class lists, instead of training the opposite model.
func TestJoinerClassMismatchExits(t *testing.T) {
	swapped := shards(t, 2)[1].Clone()
	swapped.Classes = &consensus.Classes{Negative: "1", Positive: "-1"}
	for i := range swapped.Y {
		swapped.Y[i] = -swapped.Y[i]
	}
	_, _, err := runMismatchedJoiner(t, "cls", swapped, func(*Config) {})
	if !errors.Is(err, ErrConfigMismatch) || !strings.Contains(err.Error(), `--classes: yours ["1","-1"], the run's ["-1","1"]`) {
		t.Fatalf("joiner: %v, want ErrConfigMismatch naming the classes", err)
	}
}

// TestJoinerColumnOrderMismatch: a joiner whose data hold the run's columns in another
// order (its coordinates would mean other features) is refused, the features' digest named.
func TestJoinerColumnOrderMismatch(t *testing.T) {
	sh := shards(t, 2)
	rev := sh[1].Clone()
	rev.Label = "y" // read from a file with a header (the starter's data too)
	slices.Reverse(rev.Features)
	for i := 0; i < rev.Rows; i++ {
		slices.Reverse(rev.Row(i))
	}
	_, _, err := runMismatchedJoiner(t, "cols", rev, func(*Config) {})
	if !errors.Is(err, ErrConfigMismatch) || !strings.Contains(err.Error(), "features: yours \""+FeaturesDigest(rev.Features)+"\"") {
		t.Fatalf("joiner: %v, want ErrConfigMismatch naming the features", err)
	}
}
