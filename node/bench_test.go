package node

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/walk"
)

// serveFrames answers every frame with one ack byte after decoding and validating it.
func serveFrames(rw io.ReadWriter, limit, dim int) {
	v := Validator{Run: "bench", Dim: dim}
	for {
		b, err := ReadFrame(rw, limit)
		if err != nil {
			return
		}
		code := AckOK
		if tok, err := DecodeToken(b); err != nil {
			code = AckReject
		} else if vd, _ := v.Check(tok, 0, 0, false); vd != Accept {
			code = AckReject
		}
		if _, err := rw.Write([]byte{code}); err != nil {
			return
		}
	}
}

func benchRoundTrips(b *testing.B, rw io.ReadWriter, raw []byte) {
	var ack [1]byte
	b.SetBytes(int64(len(raw)))
	b.ResetTimer()
	for b.Loop() {
		if err := WriteFrame(rw, raw); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(rw, ack[:]); err != nil || ack[0] != AckOK {
			b.Fatalf("ack %d, %v", ack[0], err)
		}
	}
}

// BenchmarkHandoff measures one token hand-off (frame out, decode and validate, ack back)
// on a long-lived stream between two libp2p hosts on loopback TCP, against the same
// exchange on a raw loopback TCP connection:
//
//	go test -run XXX -bench Handoff -benchtime 2000x ./node/
func BenchmarkHandoff(b *testing.B) {
	for _, dim := range []int{64, 1000, 10000} {
		tok := walk.NewToken("bench", 0, dim, consensus.Regularizer{}, 1)
		raw, _ := EncodeToken(nil, tok)
		limit := TokenSize("bench", dim)
		b.Run(fmt.Sprintf("libp2p/p=%d", dim), func(b *testing.B) {
			ctx := context.Background()
			h1, err := libp2p.New(libp2p.ListenAddrStrings(loopback...))
			if err != nil {
				b.Fatal(err)
			}
			defer h1.Close()
			h2, err := libp2p.New(libp2p.ListenAddrStrings(loopback...))
			if err != nil {
				b.Fatal(err)
			}
			defer h2.Close()
			h2.SetStreamHandler("/dpadmm/bench/walk/1", func(s network.Stream) { serveFrames(s, limit, dim); s.Close() })
			if err := h1.Connect(ctx, peer.AddrInfo{ID: h2.ID(), Addrs: h2.Addrs()}); err != nil {
				b.Fatal(err)
			}
			s, err := h1.NewStream(ctx, h2.ID(), "/dpadmm/bench/walk/1")
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			benchRoundTrips(b, s, raw)
		})
		b.Run(fmt.Sprintf("tcp/p=%d", dim), func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				serveFrames(c, limit, dim)
				c.Close()
			}()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			benchRoundTrips(b, c, raw)
		})
	}
}

// BenchmarkDurableHop measures the per-hop store cost: one ledger line and one checkpoint
// (p = 1000), with fsync and with NoSync (the testnet/tmpfs option).
func BenchmarkDurableHop(b *testing.B) {
	for _, sync := range []bool{true, false} {
		b.Run(fmt.Sprintf("fsync=%v", sync), func(b *testing.B) {
			st, err := OpenStore(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			st.NoSync = !sync
			ck := &Checkpoint{Run: "bench", U: make([]float64, 1000), Out: make([]byte, TokenSize("bench", 1000)), OutTo: "x"}
			e := privacy.Entry{Node: "n", Run: "bench", Mechanism: privacy.MechGaussian, Sensitivity: 2, Sigma: 1, Clip: 1, Lambda: 0.5, Recipient: "m"}
			for b.Loop() {
				e.Hop++
				if err := st.AppendLedger([]privacy.Entry{e}); err != nil {
					b.Fatal(err)
				}
				ck.Hop = e.Hop
				if err := st.SaveCheckpoint(ck); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
