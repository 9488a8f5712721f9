package node

import (
	"context"
	"errors"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/rs/zerolog"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/node/wire"
	"github.com/dpadmm/dpadmm/walk"
)

// TestEpochJumpsRefused: a member that sends tokens with implausible epochs (2^64-1, far
// above everything seen) over a real stream gets wire.AckReject, moves no fence (an honest token
// of epoch 0 is still taken afterwards) and, after three such tokens, is evicted: even a
// plausible token of it is then refused. Regeneration never wraps past MaxEpoch.
func TestEpochJumpsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sh := shards(t, 2)
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
	honest, err := libp2p.New(libp2p.ListenAddrStrings(loopback...))
	if err != nil {
		t.Fatal(err)
	}
	defer honest.Close()
	const hops = 5
	c := baseConfig("epochs", sh[0], hops)
	c.DataDir, c.Members, c.Holder, c.Weight = dir, []peer.ID{vid, atk.ID(), honest.ID()}, 1, 1
	c.Logger = zerolog.Nop()
	v, err := New(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	for _, h := range []host.Host{atk, honest} {
		if err := h.Connect(ctx, peer.AddrInfo{ID: v.ID(), Addrs: v.Host.Addrs()}); err != nil {
			t.Fatal(err)
		}
	}
	ran := make(chan struct{})
	go func() { defer close(ran); v.Run(ctx) }()
	defer func() { v.Close(); <-ran }() // the run returns before the data directory goes
	dim := sh[0].Cols
	// Tokens signed by their sender: the attacker is the origin (holder 1, no evidence
	// needed for its first hops); the honest member shows the attacker's hand-off of hop 0.
	frame := func(h host.Host, epoch, hop uint64) []byte {
		tok := walk.NewToken("epochs", 0, dim, consensus.Regularizer{}, 1)
		tok.Epoch, tok.Hop = epoch, hop
		var ev []byte
		if h == honest {
			prev := walk.NewToken("epochs", 0, dim, consensus.Regularizer{}, 1)
			ev = evidenceOf(t, atk, 1, prev, honest.ID())
		}
		return signedFrame(t, h, v.ID(), tok, ev)
	}
	send := func(h host.Host, b []byte) byte {
		t.Helper()
		s, err := h.NewStream(ctx, v.ID(), wire.WalkProtocol("epochs"))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		s.SetDeadline(time.Now().Add(10 * time.Second))
		for {
			wire.WriteFrame(s, b)
			var ack [1]byte
			if _, err := s.Read(ack[:]); err != nil {
				t.Fatal(err)
			}
			if ack[0] != wire.AckBusy {
				return ack[0]
			}
			time.Sleep(20 * time.Millisecond) // membership not fixed yet
		}
	}
	for k, e := range []uint64{math.MaxUint64, 1 << 62, 1000} {
		if code := send(atk, frame(atk, e, 1)); code != wire.AckReject {
			t.Fatalf("epoch %d: ack %d, want reject", e, code)
		}
		if got := rejectedReaches(v, "epoch", float64(k+1)); got != float64(k+1) {
			t.Fatalf("rejected{epoch} = %v after %d jumps", got, k+1)
		}
	}
	if got := rejectedReaches(v, "evicted", 1); got != 1 {
		t.Fatalf("rejected{evicted} = %v, want 1", got)
	}
	if code := send(atk, frame(atk, 0, 2)); code != wire.AckReject {
		t.Fatalf("evicted member's plausible token: ack %d, want reject", code)
	}
	// The honest member's token of epoch 0 is not fenced by the refused epochs.
	if code := send(honest, frame(honest, 0, 1)); code != wire.AckOK {
		t.Fatalf("honest token after the jumps: ack %d, want ok", code)
	}
}

// TestStreamLimitsAndTruncation: a member that opens more walk streams than the per-peer
// limit gets the extra ones refused by the resource manager, and a frame cut off inside
// its body is counted as truncated.
func TestStreamLimitsAndTruncation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sh := shards(t, 2)
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
	c := baseConfig("limits", sh[0], 5)
	c.DataDir, c.Members, c.Holder, c.Weight = dir, []peer.ID{vid, atk.ID()}, 1, 1
	c.Logger = zerolog.Nop()
	v, err := New(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if err := atk.Connect(ctx, peer.AddrInfo{ID: v.ID(), Addrs: v.Host.Addrs()}); err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{})
	go func() { defer close(ran); v.Run(ctx) }()
	defer func() { v.Close(); <-ran }() // the run returns before the data directory goes
	// A header announcing 100 bytes, then 10 bytes and the end of the stream.
	s, err := atk.NewStream(ctx, v.ID(), wire.WalkProtocol("limits"))
	if err != nil {
		t.Fatal(err)
	}
	s.Write([]byte{100, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
	s.CloseWrite()
	for i := 0; i < 200 && v.Rejected("truncated") == 0; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if v.Rejected("truncated") != 1 {
		t.Fatalf("rejected{truncated} = %v, want 1", v.Rejected("truncated"))
	}
	s.Close()
	// Streams held open beyond the per-peer limit: the extra ones are refused.
	refused := 0
	for i := 0; i < 3*streamsPerPeer; i++ {
		st, err := atk.NewStream(ctx, v.ID(), wire.WalkProtocol("limits"))
		if err != nil {
			refused++
			continue
		}
		defer st.Reset()
		// A stream is only accounted on the receiver once it is negotiated: write a
		// partial header and see whether the stream survives.
		st.Write([]byte{1})
		st.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		var b [1]byte
		var ne net.Error
		if _, err := st.Read(b[:]); err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
			refused++
			if refused == 1 {
				t.Logf("stream %d: %v", i, err)
			}
		}
	}
	if refused < streamsPerPeer || refused >= 3*streamsPerPeer {
		t.Fatalf("%d of %d streams refused, want the ones above the limit of %d", refused, 3*streamsPerPeer, streamsPerPeer)
	}
}

// TestRewindRefused: a member that hands the victim a token under a new epoch far behind
// the walk (a real signed hand-off, with evidence of a hop it was handed) is answered
// stale and named in the log while the walk is active at the victim; its third rewind
// evicts it, and a token of the live lineage is still taken.
func TestRewindRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sh := shards(t, 2)
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
	honest, err := libp2p.New(libp2p.ListenAddrStrings(loopback...))
	if err != nil {
		t.Fatal(err)
	}
	defer honest.Close()
	var logs syncBuffer
	c := baseConfig("rewind", sh[0], 1000)
	c.DataDir, c.Members, c.Holder, c.Weight = dir, []peer.ID{vid, atk.ID(), honest.ID()}, 1, 1
	c.Logger = zerolog.New(&logs)
	c.FallbackTimeout = time.Hour // the walk counts as active at the victim throughout
	v, err := New(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	for _, h := range []host.Host{atk, honest} {
		if err := h.Connect(ctx, peer.AddrInfo{ID: v.ID(), Addrs: v.Host.Addrs()}); err != nil {
			t.Fatal(err)
		}
	}
	ran := make(chan struct{})
	go func() { defer close(ran); v.Run(ctx) }()
	// The data directory is removed after the test: its run must have returned first.
	defer func() { v.Close(); <-ran }()
	dim := sh[0].Cols
	// sender h hands the victim (epoch, hop), showing the hand-off of hop-1 it received
	// from the other test host.
	frame := func(h, from host.Host, idx int, epoch, hop uint64) []byte {
		tok := walk.NewToken("rewind", 0, dim, consensus.Regularizer{}, 1)
		tok.Epoch, tok.Hop = epoch, hop
		prev := walk.NewToken("rewind", 0, dim, consensus.Regularizer{}, 1)
		prev.Epoch, prev.Hop = 0, hop-1
		return signedFrame(t, h, v.ID(), tok, evidenceOf(t, from, idx, prev, h.ID()))
	}
	send := func(h host.Host, b []byte) byte {
		t.Helper()
		s, err := h.NewStream(ctx, v.ID(), wire.WalkProtocol("rewind"))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		s.SetDeadline(time.Now().Add(10 * time.Second))
		for {
			wire.WriteFrame(s, b)
			var ack [1]byte
			if _, err := s.Read(ack[:]); err != nil {
				t.Fatal(err)
			}
			if ack[0] != wire.AckBusy {
				return ack[0]
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// The live lineage reaches the victim at hop 40.
	if code := send(honest, frame(honest, atk, 1, 0, 40)); code != wire.AckOK {
		t.Fatalf("honest token at hop 40: ack %d, want ok", code)
	}
	// The attacker sends the walk back to hops 5, 6, 7 under new epochs.
	for k := uint64(0); k < 3; k++ {
		if code := send(atk, frame(atk, honest, 2, 1+k, 5+k)); code != wire.AckStale {
			t.Fatalf("rewind %d: ack %d, want stale", k, code)
		}
	}
	if rejectedReaches(v, "rewind", 3) != 3 || rejectedReaches(v, "evicted", 1) != 1 {
		t.Fatalf("rejected{rewind} %v, rejected{evicted} %v", v.Rejected("rewind"), v.Rejected("evicted"))
	}
	if s := logs.String(); !strings.Contains(s, "would rewind the walk") || !strings.Contains(s, shortID(atk.ID())) {
		t.Errorf("the log does not name the rewinding member: %s", s)
	}
	// The live lineage goes on at the victim.
	if code := send(honest, frame(honest, atk, 1, 0, 60)); code != wire.AckOK {
		t.Fatalf("honest token at hop 60 after the rewinds: ack %d, want ok", code)
	}
}

// rejectedReaches returns v's rejected{kind} counter once it reaches want, or its value
// after 2 s: the machine's refusal is acked when its Ready is applied, and the counter
// moves when the Ready's events are handled, just after.
func rejectedReaches(v *Node, kind string, want float64) float64 {
	deadline := time.Now().Add(2 * time.Second)
	for v.Rejected(kind) < want && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	return v.Rejected(kind)
}
