package testnet

import (
	"errors"
	"io"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/dpadmm/dpadmm/node"
)

// TestPipeStream: a direct stream's two ends carry bytes both ways in order, a closed
// write end reads as EOF after the bytes, a read deadline expires, a write after the
// other end closed its reading is refused, a reset fails both ends at once, and the
// pipe reports its end exactly once.
func TestPipeStream(t *testing.T) {
	ended := 0
	a, b := newPipe("opener", "handler", "/dpadmm/x/1", func() { ended++ })
	if a.Conn().RemotePeer() != "handler" || b.Conn().RemotePeer() != "opener" || a.Protocol() != "/dpadmm/x/1" {
		t.Fatal("ends do not name each other")
	}
	go func() {
		a.Write([]byte("hel"))
		a.Write([]byte("lo"))
		a.CloseWrite()
	}()
	got, err := io.ReadAll(b)
	if err != nil || string(got) != "hello" {
		t.Fatalf("read %q, %v", got, err)
	}
	// The other way, with a deadline that passes before anything is written.
	a.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := a.Read(make([]byte, 4)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: %v", err)
	}
	a.SetReadDeadline(time.Time{})
	if _, err := b.Write([]byte("ack")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	if n, err := a.Read(buf); err != nil || string(buf[:n]) != "ack" {
		t.Fatalf("ack: %q, %v", buf[:n], err)
	}
	a.CloseRead()
	if _, err := b.Write([]byte("more")); !errors.Is(err, network.ErrReset) {
		t.Fatalf("write to a closed reader: %v", err)
	}
	if ended != 0 {
		t.Fatal("ended before both sides closed")
	}
	b.Close()
	if ended != 1 {
		t.Fatalf("ended %d times after both sides closed, want 1", ended)
	}

	a, b = newPipe("opener", "handler", "/dpadmm/x/1", func() { ended++ })
	done := make(chan error, 1)
	go func() { _, err := b.Read(make([]byte, 4)); done <- err }()
	time.Sleep(5 * time.Millisecond)
	a.Reset()
	if err := <-done; !errors.Is(err, network.ErrReset) {
		t.Fatalf("a blocked read after a reset: %v", err)
	}
	if _, err := a.Write([]byte("x")); !errors.Is(err, network.ErrReset) {
		t.Fatalf("a write after a reset: %v", err)
	}
	b.Reset()
	if ended != 2 {
		t.Fatalf("ended %d times, want 2", ended)
	}
}

// TestDirectStreams: above the control topic's limit (lowered to 4) 40 mock hosts run the
// walk over direct streams: the simulator's model and path bit for bit, pairs closed by
// the hosts' limit on the way (pipes reset, streams reopened), no mocknet connection
// made for a hand-off, and no handler goroutine left once the network is closed.
func TestDirectStreams(t *testing.T) {
	before := runtime.NumGoroutine()
	var conns int
	res := lassoMemVsSim(t, 40, 10, 1000, TransportMock, 50*time.Millisecond, time.Minute, func(c *MemConfig) {
		c.topicMax = 4
		c.atEnd = func(nodes []*node.Node) {
			for _, nd := range nodes {
				conns += len(nd.Host.Network().Conns())
			}
		}
	})
	if res.Trimmed == 0 {
		t.Fatal("no pair was closed: the limit is not exercised")
	}
	if conns != 0 {
		t.Fatalf("%d mocknet connections open at the end, want none", conns)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before+5 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > before+5 {
		t.Fatalf("%d goroutines after the run, %d before", g, before)
	}
}

// TestDirectUnknown: a direct stream to a protocol the peer does not serve, or to a
// peer outside the network, fails at once.
func TestDirectUnknown(t *testing.T) {
	_, hs := directHosts(t, 2)
	served := make(chan peer.ID, 1)
	hs[1].SetStreamHandler("/dpadmm/a/1", func(s network.Stream) { served <- s.Conn().RemotePeer(); s.Close() })
	if _, err := hs[0].NewStream(t.Context(), hs[1].ID(), "/dpadmm/b/1"); err == nil {
		t.Fatal("a protocol the peer does not serve was opened")
	}
	if _, err := hs[0].NewStream(t.Context(), "nobody", "/dpadmm/a/1"); err == nil {
		t.Fatal("a peer outside the network was reached")
	}
	s, err := hs[0].NewStream(t.Context(), hs[1].ID(), "/dpadmm/a/1")
	if err != nil {
		t.Fatal(err)
	}
	if from := <-served; from != hs[0].ID() {
		t.Fatalf("the handler saw %s, want the opener", from)
	}
	s.Close()
	hs[1].RemoveStreamHandler("/dpadmm/a/1")
	if _, err := hs[0].NewStream(t.Context(), hs[1].ID(), "/dpadmm/a/1"); err == nil {
		t.Fatal("a removed handler was reached")
	}
}
