package node

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/rs/zerolog"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/walk"
)

// TestEpochJumpsRefused: a member that sends tokens with implausible epochs (2^64-1, far
// above everything seen) over a real stream gets AckReject, moves no fence (an honest token
// of epoch 0 is still taken afterwards) and, after three such tokens, is evicted: even a
// plausible token of it is then refused. Regeneration never wraps past MaxEpoch.
func TestEpochJumpsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sh := shards(t, 2)
	dir := t.TempDir()
	vid, err := DataDirPeerID(dir)
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
	go v.Run(ctx)
	dim := sh[0].Cols
	frame := func(epoch, hop uint64) []byte {
		tok := walk.NewToken("epochs", 0, dim, consensus.Regularizer{}, 1)
		tok.Epoch, tok.Hop = epoch, hop
		b, err := EncodeToken(nil, tok)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	send := func(h host.Host, b []byte) byte {
		t.Helper()
		s, err := h.NewStream(ctx, v.ID(), WalkProtocol("epochs"))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		s.SetDeadline(time.Now().Add(10 * time.Second))
		for {
			WriteFrame(s, b)
			var ack [1]byte
			if _, err := s.Read(ack[:]); err != nil {
				t.Fatal(err)
			}
			if ack[0] != AckBusy {
				return ack[0]
			}
			time.Sleep(20 * time.Millisecond) // membership not fixed yet
		}
	}
	for k, e := range []uint64{math.MaxUint64, 1 << 62, 1000} {
		if code := send(atk, frame(e, 1)); code != AckReject {
			t.Fatalf("epoch %d: ack %d, want reject", e, code)
		}
		if got := v.Rejected("epoch"); got != float64(k+1) {
			t.Fatalf("rejected{epoch} = %v after %d jumps", got, k+1)
		}
	}
	if v.Rejected("evicted") != 1 {
		t.Fatalf("rejected{evicted} = %v, want 1", v.Rejected("evicted"))
	}
	if code := send(atk, frame(0, 2)); code != AckReject {
		t.Fatalf("evicted member's plausible token: ack %d, want reject", code)
	}
	// The honest member's token of epoch 0 is not fenced by the refused epochs.
	if code := send(honest, frame(0, 1)); code != AckOK {
		t.Fatalf("honest token after the jumps: ack %d, want ok", code)
	}
}
