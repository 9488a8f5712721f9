package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/rs/zerolog"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/node/drive"
	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/node/wire"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/walk"
)

func TestReleaseCodec(t *testing.T) {
	for _, r := range []wire.Release{{Epoch: 3, Hop: 17, Dist: 2}, {Epoch: 0, Hop: 1, Dist: wire.MaxDepth}, {Epoch: 9, Hop: 4, Retire: true}} {
		b := wire.EncodeRelease(r)
		if len(b) != wire.ReleaseSize {
			t.Fatalf("encoded %d bytes, want %d", len(b), wire.ReleaseSize)
		}
		got, err := wire.DecodeRelease(b)
		if err != nil || got != r {
			t.Fatalf("round trip of %+v: %+v, %v", r, got, err)
		}
	}
	good := wire.EncodeRelease(wire.Release{Epoch: 1, Hop: 2, Dist: 3})
	bad := map[string][]byte{
		"empty":          nil,
		"version":        append([]byte{2}, good[1:]...),
		"short":          good[:wire.ReleaseSize-1],
		"long":           append(append([]byte(nil), good...), 0),
		"flags":          func() []byte { b := append([]byte(nil), good...); b[1] = 2; return b }(),
		"dist 1":         wire.EncodeRelease(wire.Release{Dist: 1}),
		"dist too large": wire.EncodeRelease(wire.Release{Dist: wire.MaxDepth + 1}),
		"retire dist":    func() []byte { b := wire.EncodeRelease(wire.Release{Retire: true}); b[18] = 2; return b }(),
	}
	for name, b := range bad {
		if _, err := wire.DecodeRelease(b); err == nil {
			t.Errorf("%s: accepted", name)
		} else if name == "version" && !errors.Is(err, wire.ErrVersion) {
			t.Errorf("%s: error %v is not ErrVersion", name, err)
		}
	}
}

func TestHeartbeatCodec(t *testing.T) {
	b := wire.EncodeHeartbeat(42)
	if seq, err := wire.DecodeHeartbeat(b); err != nil || seq != 42 || len(b) != wire.HeartbeatSize {
		t.Fatalf("round trip: %d, %v (%d bytes)", seq, err, len(b))
	}
	for name, b := range map[string][]byte{"empty": nil, "version": append([]byte{0}, b[1:]...), "short": b[:4], "long": append(append([]byte(nil), b...), 1)} {
		if _, err := wire.DecodeHeartbeat(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestMarkOrder: the fence orders tokens by epoch, then hop, then digest. A node restored
// from a checkpoint with a fence and a highest epoch refuses anything not above the
// highest token it accepted or released, or below its highest epoch: the checkpoint's
// Fence and MaxEpoch reach walk.Custody as they were written.
func TestMarkOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sh := shards(t, 2)
	fence := store.Mark{Epoch: 1, Hop: 5, Digest: 10}
	cases := []struct {
		m    store.Mark
		want bool
	}{
		{store.Mark{Epoch: 1, Hop: 5, Digest: 10}, false}, // equal: not above
		{store.Mark{Epoch: 1, Hop: 5, Digest: 11}, true},  // same (epoch, hop), higher digest
		{store.Mark{Epoch: 1, Hop: 5, Digest: 9}, false},  // lower digest
		{store.Mark{Epoch: 1, Hop: 4, Digest: 99}, false}, // lower hop
		{store.Mark{Epoch: 1, Hop: 6, Digest: 0}, true},   // higher hop
		{store.Mark{Epoch: 0, Hop: 99, Digest: 0}, false}, // lower epoch, any hop
		{store.Mark{Epoch: 2, Hop: 0, Digest: 0}, true},   // higher epoch beats any hop
	}
	for _, maxEpoch := range []uint64{1, 3} {
		nodes := staticCluster(t, ctx, "mark", sh, 10, 0, []string{"", ""})
		n := nodes[0]
		if err := n.store.SaveCheckpoint(&store.Checkpoint{Run: "mark", Node: 0, U: make([]float64, sh[0].Cols), Fence: &fence, MaxEpoch: maxEpoch}); err != nil {
			t.Fatal(err)
		}
		fixMembers(t, n, n.cfg.Members)
		for _, c := range cases {
			want := c.want && c.m.Epoch >= maxEpoch
			if got := n.walk.cust.Accepts(c.m.Epoch, c.m.Hop, c.m.Digest); got != want {
				t.Errorf("max epoch %d: accepts(%+v) = %v, want %v", maxEpoch, c.m, got, want)
			}
			if c.m.Cmp(fence) > 0 != c.want {
				t.Errorf("%+v cmp %+v: above %v, want %v", c.m, fence, !c.want, c.want)
			}
		}
		// Created epoch 3 (a regeneration) without a token above in the fence.
		if maxEpoch == 3 && n.walk.cust.Accepts(2, 50, 0) {
			t.Error("accepted a token below the highest epoch created here")
		}
	}
}

type frameLog struct {
	mu     sync.Mutex
	frames map[int]int             // node -> token frames written
	keys   map[int]map[string]bool // node -> distinct (epoch, hop, recipient) written
	bad    []string
}

func entryKey(epoch, hop uint64, to string) string { return fmt.Sprintf("%d/%d/%s", epoch, hop, to) }

// TestHolderCrashRegenerates: five nodes on loopback; the node that receives the token of
// hop 8 stores and acks it, pauses, and is closed for good (no restart). Its predecessor's
// backup was acked and not yet released: when heartbeats declare the holder down, the
// predecessor regenerates the token with epoch 1 and the remaining four nodes finish the
// run. Every token frame written is checked, at the moment it is written, against the
// sender's durable ledger.
func TestHolderCrashRegenerates(t *testing.T) {
	// received: the holder crashes before stepping the token (no hop lost); stepped: it
	// crashes after stepping and charging hop pause+1 but before sending it, so that hop
	// is lost and redone by the regenerated lineage.
	for _, afterStep := range []bool{false, true} {
		t.Run(map[bool]string{false: "received", true: "stepped"}[afterStep], func(t *testing.T) { holderCrash(t, afterStep) })
	}
}

func holderCrash(t *testing.T, afterStep bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	const nn, hops, pause = 5, 30, 8
	sh := shards(t, nn)
	dirs := make([]string, nn)
	ids := make([]peer.ID, nn)
	for i := range dirs {
		dirs[i] = t.TempDir()
		ids[i], _ = store.DataDirPeerID(dirs[i])
	}
	fl := &frameLog{frames: map[int]int{}, keys: map[int]map[string]bool{}}
	nodes := make([]*Node, nn)
	for i := range nodes {
		c := baseConfig("crash", sh[i], hops)
		c.DataDir, c.Members, c.Holder, c.Weight = dirs[i], ids, 0, 1
		c.AckTimeout, c.FinalWait = 3*time.Second, 3*time.Second
		c.Heartbeat, c.HeartbeatMisses = 100*time.Millisecond, 20
		c.PauseAtHop, c.PauseAfterStep, c.DebugStatus = pause, afterStep, true
		c.Logger = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel).With().Int("i", i).Logger()
		nd, err := New(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		nodes[i] = nd
		st := nd.Store()
		nd.sendHook = func(to peer.ID, raw []byte) {
			e, h := rawID(raw)
			es, err := st.Ledger()
			found := false
			for _, x := range es {
				if x.Epoch == e && x.Hop == h && x.Recipient == to.String() {
					found = true
				}
			}
			fl.mu.Lock()
			defer fl.mu.Unlock()
			fl.frames[i]++
			if fl.keys[i] == nil {
				fl.keys[i] = map[string]bool{}
			}
			fl.keys[i][entryKey(e, h, to.String())] = true
			if err != nil || !found {
				fl.bad = append(fl.bad, fmt.Sprintf("node %d sent (epoch %d, hop %d) to %s without a durable ledger entry (%v)", i, e, h, shortID(to), err))
			}
		}
	}
	connectAll(t, ctx, nodes)
	res, killed := runUntilPaused(t, ctx, nodes)
	// The holder has stored and acked the token of hop `pause`; it crashes for good once
	// the sender has read the ack (an ack lost in the crash would make the sender redirect
	// the token to another node, which would pause at the same hop).
	waitAcked(t, ctx, nodes, killed)
	nodes[killed].Close()
	<-res[killed]
	var models []*Model
	for i := range nodes {
		if i == killed {
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
	if models[0].ReleasedBy == ids[killed].String() {
		t.Fatal("the final model names the crashed node")
	}
	regen := 0.0
	for i, nd := range nodes {
		if i != killed {
			regen += nd.CustodyEvents("regenerated")
		}
	}
	if regen < 1 {
		t.Fatal("no regeneration after the holder crashed")
	}
	fl.mu.Lock()
	defer fl.mu.Unlock()
	for _, b := range fl.bad {
		t.Error(b)
	}
	// Ledgers: every entry parses; every distinct frame (epoch, hop, recipient) is an entry
	// of its sender; every hop 1..K was released (lost hops redone under epoch >= 1).
	lost := 0 // hops charged by the crashed node and never sent
	if afterStep {
		lost = 1
	}
	hopSeen := map[uint64]bool{}
	maxEpoch := uint64(0)
	machine := 0
	for i := range nodes {
		es, err := nodes[i].Store().Ledger()
		if err != nil {
			t.Fatalf("node %d ledger: %v", i, err)
		}
		have := map[string]bool{}
		for _, e := range es {
			have[entryKey(e.Epoch, e.Hop, e.Recipient)] = true
			hopSeen[e.Hop] = true
			maxEpoch = max(maxEpoch, e.Epoch)
			if e.Mechanism != privacy.MechForward {
				machine++
			}
			if i == killed && e.Hop > pause+uint64(lost) {
				t.Errorf("the crashed node released hop %d after pausing at hop %d", e.Hop, pause)
			}
		}
		for k := range fl.keys[i] {
			if !have[k] {
				t.Errorf("node %d: frame %s has no ledger entry", i, k)
			}
		}
		if len(es) < len(fl.keys[i]) {
			t.Errorf("node %d: %d ledger entries for %d distinct frames", i, len(es), len(fl.keys[i]))
		}
	}
	for h := uint64(1); h <= hops; h++ {
		if !hopSeen[h] {
			t.Errorf("no node released hop %d", h)
		}
	}
	if maxEpoch < 1 {
		t.Error("no entry of a regenerated epoch in any ledger")
	}
	// Lost hops are redone: the machine steps of all ledgers are the K hops plus the lost
	// ones (more if a duplicate lineage made steps before it was fenced).
	if machine < hops+lost {
		t.Errorf("%d machine steps for %d hops and %d lost", machine, hops, lost)
	}
	t.Logf("crashed node %d at hop %d; %v regenerations; %d machine steps for %d hops; highest epoch %d", killed, pause, regen, machine, hops, maxEpoch)
}

// custodyNode returns the nodes of a static cluster that does not run. Node 0's
// membership is fixed after the checkpoint prepare returns (if not nil) was saved to its
// data directory, as a restart restores it; the test then drives node 0's loop functions
// itself. It also returns the model dimension.
func custodyNode(t *testing.T, ctx context.Context, run string, n int, mut func(i int, c *Config), prepare func(nodes []*Node, cols int) *store.Checkpoint) ([]*Node, int) {
	t.Helper()
	sh := shards(t, n)
	nodes := staticClusterWith(t, ctx, run, sh, 100, 0, make([]string, n), mut)
	if prepare != nil {
		ck := prepare(nodes, sh[0].Cols)
		ck.Run, ck.Node = run, 0
		if ck.U == nil {
			ck.U = make([]float64, sh[0].Cols)
		}
		if err := nodes[0].store.SaveCheckpoint(ck); err != nil {
			t.Fatal(err)
		}
	}
	fixMembers(t, nodes[0], nodes[0].cfg.Members)
	nodes[0].walk.t0 = time.Now()
	return nodes, sh[0].Cols
}

// savedCheckpoint returns the node's checkpoint as it is on disk.
func savedCheckpoint(t *testing.T, n *Node) *store.Checkpoint {
	t.Helper()
	ck, err := n.store.LoadCheckpoint()
	if err != nil || ck == nil {
		t.Fatalf("checkpoint: %v", err)
	}
	return ck
}

// TestRegenerateCharges drives the custody state of one node through its loop's inputs:
// an acked, unreleased backup to a peer declared down is re-released under epoch+1 to
// another member with a forward entry written before the send; an unacked one is re-sent
// to a live member, and with none live it waits (no regeneration, no entry).
func TestRegenerateCharges(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var tok walk.Token
	nodes, _ := custodyNode(t, ctx, "regen", 3, nil, func(nodes []*Node, cols int) *store.Checkpoint {
		tok = walk.NewToken("regen", 0, cols, consensus.Regularizer{L2: 0.01}, 1)
		tok.Hop, tok.Epoch = 4, 2
		body, _ := wire.EncodeToken(nil, tok)
		return &store.Checkpoint{Epoch: 2, Hop: 3, MaxEpoch: 5, Fence: &store.Mark{Epoch: 5},
			Backups: []store.Backup{{Token: hold(body, nil), To: nodes[1].ID().String(), Acked: true, Dist: 1}}}
	})
	n := nodes[0]
	var sent []string
	var mu sync.Mutex
	n.sendHook = func(to peer.ID, b []byte) {
		e, h := rawID(b)
		mu.Lock()
		sent = append(sent, entryKey(e, h, to.String()))
		mu.Unlock()
	}
	before := n.store.Entries()
	n.input(ctx, CustodyInput{Kind: "down", Peer: 1})
	ckp := savedCheckpoint(t, n)
	if len(ckp.Backups) != 1 {
		t.Fatalf("%d backups after regeneration", len(ckp.Backups))
	}
	b := ckp.Backups[0]
	e, h := rawID(b.Token)
	if e != 6 || h != 4 || b.Acked || b.To != nodes[2].ID().String() {
		t.Fatalf("regenerated backup: epoch %d hop %d acked %v to %s", e, h, b.Acked, b.To)
	}
	if got, _ := wire.DecodeToken(b.Token); !sameBits(got.Z, tok.Z) || !sameBits(got.Zhat, tok.Zhat) {
		t.Fatal("the regenerated token is not the backup's release")
	}
	es, _ := n.store.Ledger()
	if n.store.Entries() != before+1 || es[len(es)-1].Mechanism != privacy.MechForward || es[len(es)-1].Epoch != 6 || es[len(es)-1].Recipient != nodes[2].ID().String() {
		t.Fatalf("forward entry not charged: %+v", es)
	}
	if n.CustodyEvents("regenerated") != 1 {
		t.Fatalf("regenerated events %v", n.CustodyEvents("regenerated"))
	}
	// The fence now refuses the old lineage at any hop.
	if n.walk.cust.Accepts(5, 100, 0) || !n.walk.cust.Accepts(6, 5, 0) {
		t.Fatal("fence after regeneration")
	}
	// An unacked backup whose recipient goes down while no other member is live waits
	// for one: no regeneration, no entry.
	s := n.walk.cust.Snapshot()
	s.Backups = []walk.CustodyBackup{{Token: tok, To: 2, Pred: -1}}
	if err := n.input(ctx, CustodyInput{Kind: "restore", Snapshot: &s}); err != nil {
		t.Fatal(err)
	}
	n.input(ctx, CustodyInput{Kind: "down", Peer: 2})
	if bs := n.walk.cust.Backups(); len(bs) != 1 || bs[0].Epoch != 2 || !bs[0].Pending || n.store.Entries() != before+1 {
		t.Fatalf("unacked backup with no live member: %+v, %d new entries", bs, n.store.Entries()-before)
	}
	if ckp := savedCheckpoint(t, n); len(ckp.Backups) != 1 || ckp.Backups[0].To != "" {
		t.Fatalf("a backup waiting for a live member is saved with recipient %q", ckp.Backups[0].To)
	}
	// The regenerated token is written to node 2 in the background (node 2 does not run
	// and answers busy; the send stops when the test ends).
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		got := append([]string(nil), sent...)
		mu.Unlock()
		if len(got) > 0 {
			if got[0] != entryKey(6, 4, nodes[2].ID().String()) {
				t.Fatalf("frames sent: %v", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the regenerated token was not sent")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestAdmitFenceAndReleaseChain drives one node's loop with inbound hand-offs, hand-off
// results and releases, without a network, and checks the ack codes the machine's
// decisions map to: a token taken (ok), a retransmission of it (duplicate), a token
// not above the fence, of the node's own release included (stale), a higher epoch (ok,
// and backups of lower epochs dropped); then the release chain of depth 3 through the
// ack of its hand-off and releases from its recipient (only), and a stale ack dropping a
// backup.
func TestAdmitFenceAndReleaseChain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nodes, cols := custodyNode(t, ctx, "f", 3, func(i int, c *Config) { c.Depth = 3 }, nil)
	n := nodes[0]
	mk := func(epoch, hop uint64, z float64) inbound {
		tok := walk.NewToken("f", 0, cols, consensus.Regularizer{}, 1)
		tok.Epoch, tok.Hop = epoch, hop
		tok.Z[0], tok.Zhat[0] = z, z
		body, _ := wire.EncodeToken(nil, tok)
		return inbound{tok: tok, raw: hold(body, nil), from: nodes[1].ID(), reply: make(chan byte, 1)}
	}
	admit := func(in inbound) byte {
		t.Helper()
		n.onInbound(ctx, in)
		select {
		case c := <-in.reply:
			return c
		default:
			t.Fatal("no answer")
			return 0
		}
	}
	first := mk(0, 5, 1)
	if code := admit(first); code != wire.AckOK {
		t.Fatalf("first token: %d", code)
	}
	es, _ := n.store.Ledger()
	if len(es) == 0 || es[0].Epoch != 0 || es[0].Hop != 6 {
		t.Fatalf("the token taken was not stepped: ledger %+v", es)
	}
	cost := n.walk.stepCost
	if cost <= 0 {
		t.Fatal("the step of the first token was not measured")
	}
	if code := admit(first); code != wire.AckDuplicate {
		t.Fatalf("retransmission: %d, want duplicate", code)
	}
	if n.walk.stepCost != cost {
		t.Fatal("a duplicate answered at once was counted as a step's cost")
	}
	// Another copy of hop 5 (any digest) is below the node's own release of hop 6.
	if code := admit(mk(0, 5, 2)); code != wire.AckStale {
		t.Fatalf("copy below the own release: %d, want stale", code)
	}
	if code := admit(mk(0, 4, 9)); code != wire.AckStale {
		t.Fatalf("lower hop: %d, want stale", code)
	}
	if len(n.walk.cust.Backups()) == 0 {
		t.Fatal("no backup of the release")
	}
	// A higher epoch is taken and the backups of epoch 0 go.
	if code := admit(mk(1, 2, 5)); code != wire.AckOK {
		t.Fatalf("higher epoch: code %d", code)
	}
	for _, b := range savedCheckpoint(t, n).Backups {
		if e, _ := rawID(b.Token); e != 1 {
			t.Fatalf("a backup of epoch %d kept after epoch 1 was taken", e)
		}
	}
	if code := admit(mk(0, 99, 6)); code != wire.AckStale {
		t.Fatalf("old epoch at a high hop: %d, want stale", code)
	}
	// wire.Release chain with depth 3: ack -> distance 1; release 2 -> kept; release 3 ->
	// dropped. Releases from a member other than the recipient count for nothing.
	bs := n.walk.cust.Backups()
	b := bs[len(bs)-1]
	if b.Acked || b.Epoch != 1 {
		t.Fatalf("backup of the epoch-1 release: %+v", b)
	}
	to := nodes[b.To].ID()
	other := nodes[3-b.To].ID()
	n.onSent(ctx, sendResult{to: to, idx: b.To, epoch: b.Epoch, hop: b.Hop, attempt: n.attemptOf(b.Epoch, b.Hop).Load(), code: wire.AckOK})
	find := func() (walk.BackupInfo, bool) {
		for _, x := range n.walk.cust.Backups() {
			if x.Epoch == b.Epoch && x.Hop == b.Hop {
				return x, true
			}
		}
		return walk.BackupInfo{}, false
	}
	if x, _ := find(); !x.Acked || x.Dist != 1 {
		t.Fatalf("after the ack: %+v", x)
	}
	n.onReleases(ctx, []relMsg{{from: other, r: wire.Release{Epoch: b.Epoch, Hop: b.Hop, Dist: 2}}})
	if x, _ := find(); x.Dist != 1 {
		t.Fatal("a release from a member other than the recipient was applied")
	}
	n.onReleases(ctx, []relMsg{{from: to, r: wire.Release{Epoch: b.Epoch, Hop: b.Hop, Dist: 2}}})
	if x, ok := find(); !ok || x.Dist != 2 {
		t.Fatalf("after release 2: %+v", n.walk.cust.Backups())
	}
	// Releases read together, one from a member other than the recipient among them,
	// are given to the machine one by one before one drain: the same outcome.
	n.onReleases(ctx, []relMsg{{from: other, r: wire.Release{Epoch: b.Epoch, Hop: b.Hop, Dist: 9}},
		{from: to, r: wire.Release{Epoch: b.Epoch, Hop: b.Hop, Dist: 2}}, {from: to, r: wire.Release{Epoch: b.Epoch, Hop: b.Hop, Dist: 3}}})
	if _, ok := find(); ok {
		t.Fatalf("backup kept at depth 3: %+v", n.walk.cust.Backups())
	}
	if n.walk.wk.HasReady() {
		t.Fatal("a Ready left after a batch of releases")
	}
	// A stale ack drops the backup of the next release (the lineage is retired).
	if code := admit(mk(2, 10, 7)); code != wire.AckOK {
		t.Fatalf("epoch 2: %d", code)
	}
	bs = n.walk.cust.Backups()
	b = bs[len(bs)-1]
	n.onSent(ctx, sendResult{to: nodes[b.To].ID(), idx: b.To, epoch: b.Epoch, hop: b.Hop, attempt: n.attemptOf(b.Epoch, b.Hop).Load(), code: wire.AckStale})
	if _, ok := find(); ok || n.CustodyEvents("fenced_out") != 1 {
		t.Fatalf("fenced release kept: %+v", n.walk.cust.Backups())
	}
}

// TestWriteReleasesBatch: a batch of releases reaches a receiver that reads frames in a
// loop (one write) and one that closes its stream after each frame, as receivers of the
// first release protocol do (one stream per frame), each release exactly once and in order.
func TestWriteReleasesBatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h1, err := libp2p.New(libp2p.ListenAddrStrings(loopback...))
	if err != nil {
		t.Fatal(err)
	}
	defer h1.Close()
	h2, err := libp2p.New(libp2p.ListenAddrStrings(loopback...))
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close()
	if err := h1.Connect(ctx, peer.AddrInfo{ID: h2.ID(), Addrs: h2.Addrs()}); err != nil {
		t.Fatal(err)
	}
	batch := []wire.Release{{Epoch: 0, Hop: 3, Dist: 2}, {Epoch: 0, Hop: 5, Dist: 4}, {Epoch: 1, Hop: 7, Retire: true}}
	for _, perStream := range []bool{false, true} {
		run := fmt.Sprintf("batch%v", perStream)
		var mu sync.Mutex
		var got []wire.Release
		streams := 0
		h2.SetStreamHandler(wire.ReleaseProtocol(run), func(s network.Stream) {
			defer s.Close()
			mu.Lock()
			streams++
			mu.Unlock()
			for {
				b, err := wire.ReadFrame(s, wire.ReleaseSize)
				if err != nil {
					return
				}
				r, err := wire.DecodeRelease(b)
				if err != nil {
					t.Errorf("release frame: %v", err)
					return
				}
				mu.Lock()
				got = append(got, r)
				mu.Unlock()
				if _, err := s.Write([]byte{1}); err != nil || perStream {
					return
				}
			}
		})
		n := &Node{Host: h1, cfg: Config{
			Run:         run,
			Reliability: Reliability{AckTimeout: 5 * time.Second},
		}, log: zerolog.Nop()}
		rs := &relStream{}
		n.writeReleases(ctx, h2.ID(), rs, batch)
		n.writeReleases(ctx, h2.ID(), rs, batch[:1]) // the stream is reused (or replaced)
		mu.Lock()
		want := append(append([]wire.Release(nil), batch...), batch[0])
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("one stream per frame %v: received %+v, want %+v", perStream, got, want)
		}
		if wantStreams := map[bool]int{false: 1, true: 4}[perStream]; streams != wantStreams {
			t.Fatalf("one stream per frame %v: %d streams, want %d", perStream, streams, wantStreams)
		}
		mu.Unlock()
	}
}

// TestRawCachePruned: after a walk of 120 hops over 3 nodes (custody depth 2), each
// node's cache of held encodings (rawOf) holds the tokens of its last checkpoint and at
// most two encoded since (the inbox's), not the up to 4 MaxBackups(D) of a cache emptied
// only when full; every held token of that checkpoint encodes itself.
func TestRawCachePruned(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sh := shards(t, 3)
	nodes := staticClusterWith(t, ctx, "prune", sh, 120, 0, []string{"", "", ""}, func(_ int, c *Config) { c.Depth = 2 })
	runAll(t, ctx, nodes)
	for i, nd := range nodes {
		c := &nd.walk.ckpt
		held := len(c.Backups)
		if c.Out != nil {
			held++
		}
		entries, other := 0, 0
		for _, es := range nd.walk.raws {
			entries += len(es)
			for _, e := range es {
				if !same(e.raw, c.Out) && !slices.ContainsFunc(c.Backups, func(b store.Backup) bool { return same(b.Token, e.raw) }) {
					other++
				}
			}
		}
		if entries == 0 || other > 2 || entries-other > held {
			t.Fatalf("node %d: %d cached encodings (%d not held) for %d held tokens", i, entries, other, held)
		}
		for _, b := range c.Backups {
			tok, err := wire.DecodeToken(b.Token)
			if err != nil || !wire.TokenEncodes(b.Token, tok) {
				t.Fatalf("node %d: held token does not encode itself: %v", i, err)
			}
		}
	}
}

// TestRawOfShared: a snapshot's token found again by its shared vectors is the cached
// encoding; a token of the same position with other vectors, another walk or other
// evidence is encoded (or compared) again, and every answer encodes its token.
func TestRawOfShared(t *testing.T) {
	n := &Node{}
	tok := walk.NewToken("shared", 3, 4, consensus.Regularizer{}, 1)
	tok.Epoch, tok.Hop = 2, 9
	for k := range tok.Z {
		tok.Z[k], tok.Zhat[k] = float64(k)/3, -float64(k)/7
	}
	ev := []byte{wire.EvNone}
	first := n.rawOfShared(tok, ev)
	if !wire.TokenEncodes(first, tok) || !same(n.rawOfShared(tok, ev), first) || !same(n.rawOf(tok, ev), first) {
		t.Fatal("the same snapshot token was not found again")
	}
	other := tok
	other.Z = slices.Clone(tok.Z)
	other.Z[1] = 42
	if b := n.rawOfShared(other, ev); same(b, first) || !wire.TokenEncodes(b, other) {
		t.Fatal("a token of the same position with other values got the cached encoding")
	}
	walked := tok
	walked.Walk = 4
	if b := n.rawOfShared(walked, ev); same(b, first) || !wire.TokenEncodes(b, walked) {
		t.Fatal("a token of another walk with the same vectors got the cached encoding")
	}
	if b := n.rawOfShared(tok, []byte{wire.EvNone, 1}); same(b, first) {
		t.Fatal("other evidence got the cached encoding")
	}
	// The same values in other memory: compared, then found by their memory too.
	copied := tok
	copied.Z, copied.Zhat = slices.Clone(tok.Z), slices.Clone(tok.Zhat)
	if b := n.rawOfShared(copied, ev); !same(b, first) {
		t.Fatal("an equal token in other memory was not matched to the cached encoding")
	}
}

// TestPersistHeld: a step that hands the token to this node itself writes the held
// token in its checkpoint record (one write with the step and its ledger entry), which a
// restart holds again; a token taken without a step is durable before the checkpoint.
func TestPersistHeld(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sh := shards(t, 2)
	nodes := staticCluster(t, ctx, "order", sh, 20, 0, []string{"", ""})
	n := nodes[0]
	// The inbox journal cannot be created: every write of a held token there fails.
	if err := os.Mkdir(filepath.Join(n.cfg.DataDir, store.InboxLog), 0o700); err != nil {
		t.Fatal(err)
	}
	n.walk.ckpt.Run, n.walk.ckpt.Node = "order", 0 // as the loop's restore sets them
	tok := walk.NewToken("order", 0, sh[0].Cols, consensus.Regularizer{}, 1)
	tok.Hop = 6
	tok.Z[0] = 0.25
	held := &walk.CustodyHeld{Token: tok, Pred: 0}
	u := make([]float64, sh[0].Cols)
	u[0] = 0.5
	e := privacy.Entry{Node: n.ID().String(), Run: "order", Hop: 6, Mechanism: privacy.MechGaussian, Sensitivity: 2, Sigma: 0.5, Clip: 1, Lambda: 0.5, Recipient: n.ID().String()}
	stepped := drive.WalkRecord{Held: held, State: &walk.Checkpoint{Updates: 1, U: u}, Stepped: true, Epoch: 0, Hop: 5, Ledger: []privacy.Entry{e}}
	if err := (walkFx{n: n, ctx: ctx}).Persist(stepped); err != nil {
		t.Fatalf("a step with a held token wrote to the inbox: %v", err)
	}
	ck := savedCheckpoint(t, n)
	es, err := n.store.Ledger()
	if err != nil || ck.Hop != 5 || ck.Updates != 1 || len(es) != 1 || es[0].Hop != 6 || !wire.TokenEncodes(ck.Held, tok) {
		t.Fatalf("a step with a held token: checkpoint at hop %d, %d updates, %d ledger entries (%v), held %d bytes", ck.Hop, ck.Updates, len(es), err, len(ck.Held))
	}
	in, err := n.restoreInput(0)
	if err != nil || in == nil || in.Snapshot.Held == nil || in.Snapshot.Held.Token.Hop != 6 || in.Snapshot.Held.Token.Z[0] != 0.25 || in.Walk.Updates != 1 {
		t.Fatalf("restart: %+v, %v: want the held token of hop 6 and the step's state", in, err)
	}
	// The next step clears it.
	e7 := e
	e7.Hop = 7
	next := drive.WalkRecord{State: &walk.Checkpoint{Updates: 2, U: u}, Stepped: true, Epoch: 0, Hop: 6, Ledger: []privacy.Entry{e7}}
	if err := (walkFx{n: n, ctx: ctx}).Persist(next); err != nil {
		t.Fatal(err)
	}
	if ck := savedCheckpoint(t, n); ck.Held != nil || ck.Hop != 6 {
		t.Fatalf("after the held token's step: held %d bytes, hop %d", len(ck.Held), ck.Hop)
	}
	taken := drive.WalkRecord{Held: held, State: &walk.Checkpoint{Updates: 3, U: u}}
	if err := (walkFx{n: n, ctx: ctx}).Persist(taken); err == nil {
		t.Fatal("the held token was written to a blocked inbox")
	}
	if ck := savedCheckpoint(t, n); ck.Updates != 2 {
		t.Fatalf("a token taken without a step: the checkpoint (%d updates) was written before the token", ck.Updates)
	}
}

// TestCoalesceAcksRule: a node acks a token once its step is durable only after a first
// hand-off was measured and while its hand-offs take under a quarter of the ack timeout;
// one slow hand-off turns it off until the decaying maximum comes back under.
func TestCoalesceAcksRule(t *testing.T) {
	const ack = 2 * time.Second
	var w walkState
	if w.coalesceAcks(ack) {
		t.Fatal("coalescing before any hand-off was measured")
	}
	w.noteStepCost(300 * time.Microsecond)
	if !w.coalesceAcks(ack) {
		t.Fatal("a 300 us hand-off against a 2 s ack timeout: not coalesced")
	}
	w.noteStepCost(900 * time.Millisecond)
	if w.coalesceAcks(ack) {
		t.Fatal("a 900 ms hand-off against a 2 s ack timeout: still coalesced")
	}
	n := 0
	for ; !w.coalesceAcks(ack) && n < 100; n++ {
		w.noteStepCost(300 * time.Microsecond)
	}
	if n < 10 || n > 30 {
		t.Fatalf("coalescing came back after %d fast hand-offs, want the maximum to decay over 10-30", n)
	}
}
