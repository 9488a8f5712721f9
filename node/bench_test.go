package node

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/node/wire"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/walk"
)

// serveFrames answers every frame with one ack byte after decoding and validating it.
func serveFrames(rw io.ReadWriter, limit, dim int) {
	v := wire.Validator{Run: "bench", Dim: dim}
	for {
		b, err := wire.ReadFrame(rw, limit)
		if err != nil {
			return
		}
		code := wire.AckOK
		if tok, err := wire.DecodeToken(b); err != nil {
			code = wire.AckReject
		} else if vd, _ := v.Check(tok); vd != wire.Accept {
			code = wire.AckReject
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
		if err := wire.WriteFrame(rw, raw); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(rw, ack[:]); err != nil || ack[0] != wire.AckOK {
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
		raw, _ := wire.EncodeToken(nil, tok)
		limit := wire.TokenSize("bench", dim)
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

// BenchmarkDurableHop measures the per-hop store cost of a noisy update: one ledger line
// and one checkpoint (p = 1000) whose u and outgoing token are new (both are written out;
// nothing of them is referred to), with fsync and with NoSync (the testnet/tmpfs option).
func BenchmarkDurableHop(b *testing.B) {
	for _, sync := range []bool{true, false} {
		b.Run(fmt.Sprintf("fsync=%v", sync), func(b *testing.B) {
			st, err := store.Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			st.NoSync = !sync
			ck := &store.Checkpoint{Run: "bench", U: make([]float64, 1000), Out: make([]byte, wire.TokenSize("bench", 1000)), OutTo: "x"}
			e := privacy.Entry{Node: "n", Run: "bench", Mechanism: privacy.MechGaussian, Sensitivity: 2, Sigma: 1, Clip: 1, Lambda: 0.5, Recipient: "m"}
			for b.Loop() {
				e.Hop++
				if err := st.AppendLedger([]privacy.Entry{e}); err != nil {
					b.Fatal(err)
				}
				ck.Hop = e.Hop
				ck.U[e.Hop%1000]++
				ck.Out = make([]byte, wire.TokenSize("bench", 1000)) // a token is never modified once made
				ck.Out[17] = byte(e.Hop)
				if err := st.SaveCheckpoint(ck); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// fixedSource is a rand.Source that always returns v: with two members, IntN(2) = v&1,
// so node i always hands the token to node v&1 (no self-hand-offs in the benchmark).
type fixedSource uint64

func (s fixedSource) Uint64() uint64 { return uint64(s) }

// rawHandoff returns the mean time of one raw libp2p hand-off (frame out, decode and
// validate, ack back) of tok over n round trips, as BenchmarkHandoff measures it.
func rawHandoff(b *testing.B, tok walk.Token, n int) time.Duration {
	raw, _ := wire.EncodeToken(nil, tok)
	dim := len(tok.Z)
	limit := wire.TokenSize(tok.Run, dim)
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
	var ack [1]byte
	for range 50 { // warm-up
		wire.WriteFrame(s, raw)
		io.ReadFull(s, ack[:])
	}
	start := time.Now()
	for range n {
		if err := wire.WriteFrame(s, raw); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(s, ack[:]); err != nil || ack[0] != wire.AckOK {
			b.Fatalf("ack %d, %v", ack[0], err)
		}
	}
	return time.Since(start) / time.Duration(n)
}

// BenchmarkRuntimeHop measures one walk hop through the full runtime between two
// libp2p hosts on loopback (checkpoint and ledger with NoSync, or with fsync: the
// sub-benchmark's name says which): inbox write, step, ledger entry, checkpoint,
// hand-off with its ack, custody bookkeeping and release waves. The local step is
// trivial (MaxUpdates 1: after its first update a node only forwards the token) and the
// token always goes to the other node. One iteration is one hop; the figures are
// us/hop over the hops after the first, and the ratio to the raw libp2p hand-off of
// the same token measured in the same run (BenchmarkHandoff's exchange):
//
//	go test -run XXX -bench RuntimeHop -benchtime 2000x ./node/
func BenchmarkRuntimeHop(b *testing.B) {
	const dim = 64
	for _, fsync := range []bool{false, true} {
		b.Run(fmt.Sprintf("p=%d/fsync=%v", dim, fsync), func(b *testing.B) {
			hops := uint64(max(b.N, 20)) + 1
			b.ResetTimer()
			pr := runHopPair(b, dim, hops, fsync)
			b.StopTimer()
			hop := pr.last.Sub(pr.first) / time.Duration(pr.lastHop-pr.firstHop)
			raw := rawHandoff(b, walk.NewToken("bench", 0, dim, consensus.Regularizer{}, 1), 2000)
			// The signature work of these hops: on two nodes the evidence a receiver is
			// shown is its own hand-off, which its memo answers, so a hop costs one
			// signature and one verification.
			sb := newSignatureBench(b, dim)
			sig := perOp(b, 500, sb.sign) + perOp(b, 500, sb.verifyOwn)
			b.ReportMetric(float64(pr.syncs)/float64(hops), "fsyncs/hop")
			b.ReportMetric(float64(hop.Nanoseconds())/1e3, "us/hop")
			b.ReportMetric(float64(raw.Nanoseconds())/1e3, "us/raw-handoff")
			b.ReportMetric(float64(sig.Nanoseconds())/1e3, "us/signatures")
			b.ReportMetric(float64(hop)/float64(raw), "hop/raw")
			// The goal: a hop at most 1.5 times the raw hand-off plus the signature work.
			b.ReportMetric(float64(hop)/float64(raw+sig), "hop/(raw+sig)")
		})
	}
}

// hopPair is what runHopPair measured: the times of the first frame of the first and
// last hops seen, and the fsyncs of both nodes' stores.
type hopPair struct {
	first, last       time.Time
	firstHop, lastHop uint64
	syncs             int64
}

// runHopPair runs a walk of hops hops between two nodes on loopback (the token always
// goes to the other node; MaxUpdates 1, so after its first update a node only forwards)
// with fsync on or off, and records the time of each hop's first frame.
func runHopPair(tb testing.TB, dim int, hops uint64, fsync bool) hopPair {
	tb.Helper()
	d, _ := consensus.SyntheticLogistic(40, dim, 3, 5)
	sh, err := consensus.Split(d, 2, "iid", 5)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ids := make([]peer.ID, 2)
	dirs := []string{tb.TempDir(), tb.TempDir()}
	for i := range ids {
		if ids[i], err = store.DataDirPeerID(dirs[i]); err != nil {
			tb.Fatal(err)
		}
	}
	var mu sync.Mutex
	var pr hopPair
	seen := false
	nodes := make([]*Node, 2)
	for i := range nodes {
		c := Config{
			Run: "bench", Data: sh[i], DataDir: dirs[i],
			Training:    Training{Problem: consensus.Problem{Loss: consensus.Logistic, Reg: consensus.Regularizer{L2: 0.01}}, Gamma: 1, Lambda: 0.5, Clip: 1, Sigma: 0.5, MaxUpdates: 1, Hops: hops},
			Admission:   Admission{Members: ids, Holder: 0, Weight: 1},
			Seeding:     Seeding{AllowSeededNoise: true, Rand: func(i int) *rand.Rand { return rand.New(fixedSource(1 - i)) }, Noise: func(i int) privacy.Noise { return privacy.NewSeededNoise(uint64(i)) }},
			Network:     Network{Listen: loopback},
			Reliability: Reliability{NoSync: !fsync, AckTimeout: 5 * time.Second, FinalWait: 10 * time.Second},
		}
		nd, err := New(ctx, c)
		if err != nil {
			tb.Fatal(err)
		}
		defer nd.Close()
		// The first frame of each hop (a frame answered busy is sent again).
		nd.sendHook = func(_ peer.ID, raw []byte) {
			t := time.Now()
			_, h := rawID(raw)
			mu.Lock()
			switch {
			case !seen:
				pr.first, pr.last, pr.firstHop, pr.lastHop, seen = t, t, h, h, true
			case h > pr.lastHop:
				pr.last, pr.lastHop = t, h
			}
			mu.Unlock()
		}
		nodes[i] = nd
	}
	if err := nodes[0].Host.Connect(ctx, peer.AddrInfo{ID: nodes[1].ID(), Addrs: nodes[1].Host.Addrs()}); err != nil {
		tb.Fatal(err)
	}
	errs := make(chan error, 2)
	for _, nd := range nodes {
		go func() { _, err := nd.Run(ctx); errs <- err }()
	}
	for range nodes {
		if err := <-errs; err != nil {
			tb.Fatal(err)
		}
	}
	if pr.firstHop != 1 || pr.lastHop != hops {
		tb.Fatalf("frames of hops %d..%d, want 1..%d", pr.firstHop, pr.lastHop, hops)
	}
	pr.syncs = nodes[0].store.Syncs() + nodes[1].store.Syncs()
	return pr
}

// TestHopFsyncs: with fsync on, a hop costs one fsync: the receiver steps the token it
// takes and acks it once the step's checkpoint record, carrying the release's ledger
// entry (store.SaveCheckpointLedger), is durable (drive.Walk's coalescing: the token
// taken is not written apart), plus a few fsyncs at the start and end of the run.
func TestHopFsyncs(t *testing.T) {
	const hops, fixed = 40, 16
	pr := runHopPair(t, 8, hops, true)
	if pr.syncs < hops || pr.syncs > hops+fixed {
		t.Fatalf("%d fsyncs for %d hops, want 1 per hop and at most %d more", pr.syncs, hops, fixed)
	}
	t.Logf("%d fsyncs for %d hops", pr.syncs, hops)
}
