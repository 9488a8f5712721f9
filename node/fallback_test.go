package node

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/rs/zerolog"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/node/wire"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/walk"
)

type sentFrame struct {
	node       int
	epoch, hop uint64
	to         string
	digest     uint64 // walk.TokenDigest of the frame's z and zhat
	zdig       uint64 // digest of z alone (zDigest)
}

// TestFallbackRecoversLostToken: six nodes on loopback with custody depth 2. The node that
// receives the token of hop 8 stores and acks it and pauses; it is closed for good together
// with its predecessor, the only node still holding a backup of the token (the wave of
// the predecessor's ack dropped the backup two hand-offs back). No survivor can regenerate:
// the survivors finish the run through the slow fallback (1.5 s). Every token frame written
// is checked, at the moment it is written, against the sender's durable ledger, and every
// frame that is not a fresh step of its sender (fallback, redirection) must carry the
// exact z and zhat of one of that sender's own earlier steps at the same hop (no new noise).
func TestFallbackRecoversLostToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const nn, hops, pause = 6, 30, 8
	sh := shards(t, nn)
	dirs := make([]string, nn)
	ids := make([]peer.ID, nn)
	for i := range dirs {
		dirs[i] = t.TempDir()
		ids[i], _ = store.DataDirPeerID(dirs[i])
	}
	var mu sync.Mutex
	var frames []sentFrame
	var bad []string
	nodes := make([]*Node, nn)
	for i := range nodes {
		c := baseConfig("fallback", sh[i], hops)
		c.DataDir, c.Members, c.Holder, c.Weight = dirs[i], ids, 0, 1
		c.AckTimeout, c.FinalWait = time.Second, 3*time.Second
		c.Heartbeat, c.HeartbeatMisses = 100*time.Millisecond, 5
		c.Depth, c.FallbackTimeout = 2, 1500*time.Millisecond
		c.PauseAtHop, c.DebugStatus = pause, true
		c.Logger = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel).With().Int("i", i).Logger()
		nd, err := New(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		nodes[i] = nd
		st := nd.Store()
		nd.sendHook = func(to peer.ID, raw []byte) {
			tok, err := wire.DecodeToken(raw)
			es, lerr := st.Ledger()
			found := false
			for _, x := range es {
				if x.Epoch == tok.Epoch && x.Hop == tok.Hop && x.Recipient == to.String() {
					found = true
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil || lerr != nil || !found {
				bad = append(bad, fmt.Sprintf("node %d sent (epoch %d, hop %d) to %s without a durable ledger entry (%v, %v)", i, tok.Epoch, tok.Hop, shortID(to), err, lerr))
				return
			}
			frames = append(frames, sentFrame{node: i, epoch: tok.Epoch, hop: tok.Hop, to: to.String(), digest: walk.TokenDigest(tok), zdig: zDigest(tok.Z)})
		}
	}
	connectAll(t, ctx, nodes)
	res, holder := runUntilPaused(t, ctx, nodes)
	// Let the ack and the release wave of hop `pause` settle, then find the predecessor
	// (the sender of hop `pause`, from the frames) and close it with the holder.
	waitAcked(t, ctx, nodes, holder)
	time.Sleep(300 * time.Millisecond)
	pred := -1
	mu.Lock()
	for _, f := range frames {
		if f.epoch == 0 && f.hop == pause && f.to == ids[holder].String() {
			pred = f.node
		}
	}
	mu.Unlock()
	if pred < 0 {
		t.Fatal("no frame of the paused hop")
	}
	dead := map[int]bool{holder: true, pred: true}
	for i := range dead {
		nodes[i].Close()
		<-res[i]
	}
	var models []*Model
	for i := range nodes {
		if dead[i] {
			continue
		}
		r := <-res[i]
		if r.err != nil {
			t.Fatalf("node %d: %v", i, r.err)
		}
		models = append(models, r.m)
	}
	for _, m := range models {
		if m.Hops != hops || !sameBits(m.Model, models[0].Model) || m.ReleasedBy != models[0].ReleasedBy {
			t.Fatalf("survivors disagree on the final model: %+v vs %+v", m, models[0])
		}
	}
	var fallbacks, regen float64
	for i, nd := range nodes {
		if !dead[i] {
			fallbacks += nd.CustodyEvents("fallback")
			regen += nd.CustodyEvents("regenerated")
		}
	}
	if fallbacks < 1 {
		t.Fatal("the survivors finished without a fallback")
	}
	if regen != 0 {
		t.Fatalf("%v regenerations: a backup survived the crash, the fallback was not needed", regen)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, b := range bad {
		t.Error(b)
	}
	type eh struct{ e, h uint64 }
	ledgers := make([][]privacy.Entry, nn)
	steps := make([]map[eh]bool, nn) // (epoch, hop) of each node's machine steps
	hopSeen := map[uint64]bool{}
	forwards := 0
	for i := range nodes {
		es, err := nodes[i].Store().Ledger()
		if err != nil {
			t.Fatalf("node %d ledger: %v", i, err)
		}
		ledgers[i] = es
		steps[i] = map[eh]bool{}
		for _, e := range es {
			hopSeen[e.Hop] = true
			if e.Mechanism == privacy.MechGaussian {
				steps[i][eh{e.Epoch, e.Hop}] = true
			} else if e.Epoch > 0 {
				forwards++
			}
		}
	}
	// Every frame is in its sender's ledger (checked at write time above); a frame that is
	// not a step of its sender re-sends the bytes of one of its steps at the same hop.
	stepDigest := map[[3]uint64]bool{} // node, hop, digest of a step's frame
	for _, f := range frames {
		if steps[f.node][eh{f.epoch, f.hop}] {
			stepDigest[[3]uint64{uint64(f.node), f.hop, f.digest}] = true
		}
	}
	resent := 0
	for _, f := range frames {
		if steps[f.node][eh{f.epoch, f.hop}] {
			continue
		}
		resent++
		if !stepDigest[[3]uint64{uint64(f.node), f.hop, f.digest}] {
			t.Errorf("node %d re-sent (epoch %d, hop %d) with a z/zhat it never released at that hop", f.node, f.epoch, f.hop)
		}
	}
	if resent == 0 || forwards == 0 {
		t.Errorf("%d re-sent frames and %d forward entries of a new epoch: no fallback on the wire", resent, forwards)
	}
	for h := uint64(1); h <= hops; h++ {
		if !hopSeen[h] {
			t.Errorf("no node released hop %d", h)
		}
	}
	// The published final model is the z of a token of hop K that its sender charged to
	// the publisher (a frame is recorded only with its ledger entry), or that the
	// publisher stepped and handed to itself (its own entry names itself).
	charged := false
	for _, f := range frames {
		if f.hop == hops && f.epoch == models[0].Epoch && f.to == models[0].ReleasedBy && f.zdig == zDigest(models[0].Model) {
			charged = true
		}
	}
	for i := range nodes {
		if ids[i].String() != models[0].ReleasedBy {
			continue
		}
		for _, e := range ledgers[i] {
			if e.Hop == hops && e.Epoch == models[0].Epoch && e.Recipient == models[0].ReleasedBy && e.Mechanism == privacy.MechGaussian {
				charged = true
				t.Logf("hop %d was a self-hand-off of the publisher", hops)
			}
		}
	}
	if !charged {
		t.Errorf("the final model (epoch %d, by %s) is not the z of a charged frame of hop %d to its publisher", models[0].Epoch, models[0].ReleasedBy, hops)
	}
	if models[0].Epoch == 0 {
		t.Error("the final model comes from epoch 0: the lost lineage")
	}
	for i := range dead {
		for _, e := range ledgers[i] {
			if e.Hop > pause {
				t.Errorf("closed node %d released hop %d", i, e.Hop)
			}
		}
	}
	t.Logf("closed holder %d and predecessor %d at hop %d; %v fallbacks; %d frames, %d re-sent", holder, pred, pause, fallbacks, len(frames), resent)
}

// TestFallbackTimeoutDerived: the node's durations reach walk.Custody in ticks: a fixed
// fallback timeout as given, none for a negative one, and by default the floor of twice
// the regeneration time (down declaration plus ack timeout) with the derived timeout
// 20*n*h above it, h the slowest hop time observed between two visits of one lineage.
func TestFallbackTimeoutDerived(t *testing.T) {
	c := Config{
		Training:    Training{Hops: 100},
		Reliability: Reliability{AckTimeout: 10 * time.Second, Heartbeat: time.Second, HeartbeatMisses: 15, Depth: 8},
	}
	n := &Node{cfg: c, walk: walkState{tick: tickOf(c)}}
	if n.walk.tick != 100*time.Millisecond {
		t.Fatalf("tick %v, want 100ms (AckTimeout/100)", n.walk.tick)
	}
	cc := n.custodyConfig([2]uint64{1, 2})
	if cc.AckTimeout != 100 || cc.FallbackTimeout != 0 || cc.FallbackFloor != 500 || cc.Depth != 8 || cc.Hops != 100 {
		t.Fatalf("derived: %+v, want ack timeout 100 ticks and a floor of 2*(15 s + 10 s) = 500 ticks", cc)
	}
	// The derived timeout follows the observed hop time: 6 members, a lineage seen at hop
	// 10 and 2 s later at hop 14 (500 ms per hop): 20*6*0.5 s = 60 s.
	sh := shards(t, 6)
	ll, err := consensus.NewLocalLoss(sh[0], consensus.Squared, 1)
	if err != nil {
		t.Fatal(err)
	}
	wc := walk.DefaultConfig()
	wc.Node, wc.Nodes, wc.Run, wc.Rand = 0, 6, "v", rand.New(rand.NewPCG(1, 1))
	m, err := walk.NewCustody(wc, ll, sh[0].Cols, cc)
	if err != nil {
		t.Fatal(err)
	}
	n.walk.cust = m
	if got := n.tickDur(m.FallbackTimeout()); got != 50*time.Second {
		t.Fatalf("before any visit: %v, want the floor 50s", got)
	}
	visit := func(hop uint64) {
		tok := walk.NewToken("v", 0, sh[0].Cols, consensus.Regularizer{}, 1)
		tok.Hop = hop
		if err := m.Step(walk.CustodyMsg{Kind: walk.CustodyToken, From: 1, To: 0, Hop: hop, Token: tok}); err != nil {
			t.Fatal(err)
		}
		for m.HasReady() {
			m.Advance(m.Ready())
		}
	}
	visit(10)
	m.TickTo(m.Now() + int64(n.ticks(2*time.Second)))
	visit(14)
	if h := n.hopTime(); h != 500*time.Millisecond {
		t.Fatalf("observed hop time %v, want 500ms", h)
	}
	if got := n.tickDur(m.FallbackTimeout()); got != 60*time.Second {
		t.Fatalf("derived timeout %v, want 20*6*500ms = 60s", got)
	}
	n.cfg.FallbackTimeout = 7 * time.Second
	if cc := n.custodyConfig([2]uint64{1, 2}); cc.FallbackTimeout != 70 || cc.FallbackFloor != 0 {
		t.Fatalf("fixed timeout: %+v", cc)
	}
	n.cfg.FallbackTimeout = -1
	if cc := n.custodyConfig([2]uint64{1, 2}); cc.FallbackTimeout != 0 || cc.FallbackFloor != 0 {
		t.Fatalf("disabled fallback: %+v", cc)
	}
	v := baseConfig("v", shards(t, 1)[0], 3)
	v.DataDir, v.AckTimeout, v.FallbackTimeout = "x", 2*time.Second, time.Second
	if err := v.Validate(); err == nil {
		t.Fatal("a fallback timeout below the ack timeout was accepted")
	}
}

// TestFallbackCharges drives the fallback of one node through its loop's clock: after the
// timeout of silence it drops its acked backups whose release wave never came and
// re-sends the z and zhat of its last release under an epoch above every epoch it has
// seen, with a forward entry naming the recipient durable before the frame is written,
// and the checkpoint holding the new token as its only backup (no predecessor). The
// recipient answers stale: the next fallback waits twice as long. While its own
// hand-off is unacked the node does not fall back.
func TestFallbackCharges(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var last walk.Token
	var mu sync.Mutex
	var sent [][]byte
	nodes, _ := custodyNode(t, ctx, "fb", 3, func(i int, c *Config) { c.FallbackTimeout = 6 * time.Second },
		func(nodes []*Node, cols int) *store.Checkpoint {
			mk := func(epoch, hop uint64, z float64) (walk.Token, []byte) {
				tok := walk.NewToken("fb", 0, cols, consensus.Regularizer{L2: 0.01}, 1)
				tok.Epoch, tok.Hop = epoch, hop
				tok.Z[0], tok.Zhat[0] = z, -z
				raw, _ := wire.EncodeToken(nil, tok)
				return tok, hold(raw, nil)
			}
			_, older := mk(2, 6, 9)
			var raw []byte
			last, raw = mk(2, 7, 0.25) // the last release: (2, 7), also in custody
			f := markOf(last)
			return &store.Checkpoint{Epoch: 2, Hop: 6, MaxEpoch: 4, Fence: &f, Out: raw, OutTo: nodes[2].ID().String(),
				Backups: []store.Backup{{Token: older, To: nodes[1].ID().String(), Acked: true, Dist: 1}, {Token: raw, To: nodes[2].ID().String(), Acked: true, Dist: 1}}}
		})
	n := nodes[0]
	n.sendHook = func(to peer.ID, b []byte) {
		// The entry must be durable when the frame is written; it need not be the last one:
		// the test's next input (a redirect after the ack timeout) may append another
		// before this send goroutine runs.
		e, h := rawID(b)
		es, _ := n.store.Ledger()
		ok := false
		for _, x := range es {
			ok = ok || x.Epoch == e && x.Hop == h && x.Recipient == to.String() && x.Mechanism == privacy.MechForward
		}
		mu.Lock()
		defer mu.Unlock()
		if !ok {
			t.Errorf("frame (epoch %d, hop %d) to %s written without its forward entry", e, h, shortID(to))
		}
		sent = append(sent, append([]byte(nil), b...))
	}
	to := int64(n.ticks(6 * time.Second))
	before := n.store.Entries()
	n.input(ctx, CustodyInput{Kind: "tick", Tick: to - 1})
	if ck := savedCheckpoint(t, n); len(ck.Backups) != 2 || n.store.Entries() != before {
		t.Fatalf("before the timeout: %d backups, %d new entries", len(ck.Backups), n.store.Entries()-before)
	}
	n.input(ctx, CustodyInput{Kind: "tick", Tick: to})
	ck := savedCheckpoint(t, n)
	if len(ck.Backups) != 1 || n.store.Entries() != before+1 || n.CustodyEvents("fallback") != 1 || n.CustodyEvents("expired") != 2 {
		t.Fatalf("after the fallback: %d backups, %d new entries, %v fallbacks, %v expired", len(ck.Backups), n.store.Entries()-before,
			n.CustodyEvents("fallback"), n.CustodyEvents("expired"))
	}
	b := ck.Backups[0]
	got, err := wire.DecodeToken(b.Token)
	if err != nil {
		t.Fatal(err)
	}
	if got.Epoch != 5 || got.Hop != 7 || b.Acked || b.Pred != "" || !sameBits(got.Z, last.Z) || !sameBits(got.Zhat, last.Zhat) {
		t.Fatalf("fallback token: epoch %d hop %d acked %v pred %q, z %v zhat %v", got.Epoch, got.Hop, b.Acked, b.Pred, got.Z, got.Zhat)
	}
	es, _ := n.store.Ledger()
	e := es[len(es)-1]
	if e.Mechanism != privacy.MechForward || e.Epoch != 5 || e.Hop != 7 || e.Recipient != b.To ||
		(b.To != nodes[1].ID().String() && b.To != nodes[2].ID().String()) {
		t.Fatalf("forward entry %+v for a fallback to %s", e, b.To)
	}
	if ck.MaxEpoch != 5 || n.walk.cust.Accepts(4, 99, 0) {
		t.Fatal("the fence does not cover the fallback epoch")
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		k := len(sent)
		mu.Unlock()
		if k > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the fallback token was not sent")
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	if e, h := rawID(sent[0]); e != 5 || h != 7 {
		mu.Unlock()
		t.Fatalf("frame (epoch %d, hop %d)", e, h)
	}
	mu.Unlock()
	// The recipient has a newer token: stale. A stale ack is not activity, and the next
	// fallback waits twice the timeout.
	r := n.indexOf(b.To)
	n.onSent(ctx, sendResult{to: nodes[r].ID(), idx: r, epoch: 5, hop: 7, attempt: n.attemptOf(5, 7).Load(), code: wire.AckStale})
	entries := n.store.Entries()
	n.input(ctx, CustodyInput{Kind: "tick", Tick: 3*to - 1})
	if n.store.Entries() != entries || n.CustodyEvents("fallback") != 1 {
		t.Fatal("second fallback before two timeouts: no backoff")
	}
	n.input(ctx, CustodyInput{Kind: "tick", Tick: 3 * to})
	if n.store.Entries() != entries+1 || n.CustodyEvents("fallback") != 2 {
		t.Fatalf("second fallback after two timeouts: %d entries, %v fallbacks", n.store.Entries()-entries, n.CustodyEvents("fallback"))
	}
	// Its hand-off in flight (never acked): no fallback however long the silence. The
	// loop catches up with the silence at once (walk.Custody.CatchUp): the unacked
	// hand-off is retransmitted once, to the same peer with the same bytes and no new
	// entry, and nothing is overdue after it. Replayed tick by tick (TickTo), the same
	// silence redirects it 58 times, each with a forward entry.
	entries = n.store.Entries()
	resends := n.ownResends.Load()
	waitFrames := func(want int, what string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			mu.Lock()
			k := len(sent)
			mu.Unlock()
			if k >= want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d frames, want %d", what, k, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFrames(2, "the second fallback was not sent") // its send goroutine may still be running
	const frames = 2
	n.input(ctx, CustodyInput{Kind: "tick", Tick: 100 * to})
	if n.CustodyEvents("fallback") != 2 {
		t.Fatal("fell back with a hand-off in flight")
	}
	if d := n.ownResends.Load() - resends; d != 0 || n.store.Entries() != entries {
		t.Fatalf("after a silence of 100 fallback timeouts: %d redirects, %d new entries; want one retransmission", d, n.store.Entries()-entries)
	}
	if nd := n.walk.cust.NextDeadline(); nd <= 100*to || n.walk.cust.Now() != 100*to {
		t.Fatalf("after the catch-up to %d: now %d, next deadline %d", 100*to, n.walk.cust.Now(), nd)
	}
	waitFrames(frames+1, "the unacked hand-off was not retransmitted after the silence")
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(sent) != frames+1 || !bytes.Equal(sent[frames], sent[frames-1]) {
		t.Fatalf("%d frames after the silence, want 1, the same bytes as the last", len(sent)-frames)
	}
}
