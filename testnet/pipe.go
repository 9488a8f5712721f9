package testnet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	ic "github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	ma "github.com/multiformats/go-multiaddr"
)

// Direct streams. Above memTopicMax mock hosts (memHosts.direct) this program's streams
// do not go through mocknet: NewStream hands the stream's other end to the handler the
// peer's host registered for the protocol (mockHost.SetStreamHandler), in a goroutine
// as a host's stream handler runs, and the two ends are an in-memory pipe (pipePair).
// The hosts are still libp2p hosts (identity, peerstore, the handlers the node
// registers), and everything above the stream is the node's own code; what is left out
// is what such a network does not need: connections, stream multiplexing, protocol
// negotiation, and identify, whose only user here is GossipSub. A mocknet stream costs a
// goroutine and a timer per stream and two goroutine hand-overs per write, and a new
// connection (one per hop on a random walk over 1,000 hosts) an identify attempt; at
// 1,000 hosts that was most of a hop's time outside the node. Pairs of hosts with open
// pipes count as connections for the hosts' limit (mockMaxConns): trim resets the pipes
// of the least recently used idle pairs, as it closes mocknet connections.

// pipePair is a bidirectional in-memory stream between two hosts: side 0 opened it, side
// 1 is the handler's. mu guards the rest.
type pipePair struct {
	mu      sync.Mutex
	buf     [2][]byte        // buf[s]: written by side s, not yet read by the other
	wclosed [2]bool          // side s closed its write end
	rclosed [2]bool          // side s closed its read end
	reset   bool             // either side reset the pipe, or trim did
	dl      [2][2]time.Time  // dl[s]: side s's read and write deadlines
	wake    [2]chan struct{} // wake[s]: a reader of side s may proceed (capacity 1)
	ends    [2]*pipeEnd      // the two ends
	done    func()           // called once when the pair has ended (reset or closed)
	ended   bool             // done was called
	peers   [2]peer.ID       // peers[s]: side s's host
	proto   protocol.ID      // the stream's protocol
	conns   [2]*pipeConn     // conns[s]: side s's view of the pair
}

var pipeIDs atomic.Uint64

// newPipe returns the two ends of a new pipe from opener to handler for proto; done is
// called once when the pipe has ended.
func newPipe(opener, handler peer.ID, proto protocol.ID, done func()) (*pipeEnd, *pipeEnd) {
	p := &pipePair{peers: [2]peer.ID{opener, handler}, proto: proto, done: done}
	for s := range 2 {
		p.wake[s] = make(chan struct{}, 1)
		p.conns[s] = &pipeConn{local: p.peers[s], remote: p.peers[1-s], id: "pipe-" + strconv.FormatUint(pipeIDs.Add(1), 10)}
		p.ends[s] = &pipeEnd{p: p, side: s, id: strconv.FormatUint(pipeIDs.Add(1), 10)}
	}
	return p.ends[0], p.ends[1]
}

// signal wakes side s's reader, if any.
func (p *pipePair) signal(s int) {
	select {
	case p.wake[s] <- struct{}{}:
	default:
	}
}

// endIfDoneLocked calls done once the pair is reset or closed both ways on both sides;
// it returns the function to call after unlocking (nil if none).
func (p *pipePair) endIfDoneLocked() func() {
	if p.ended {
		return nil
	}
	if p.reset || (p.wclosed[0] && p.wclosed[1] && p.rclosed[0] && p.rclosed[1]) {
		p.ended = true
		p.buf = [2][]byte{}
		return p.done
	}
	return nil
}

// kill resets the pair (trim, or a host that closes).
func (p *pipePair) kill() {
	p.mu.Lock()
	p.reset = true
	f := p.endIfDoneLocked()
	p.mu.Unlock()
	p.signal(0)
	p.signal(1)
	if f != nil {
		f()
	}
}

// pipeEnd is one side of a pipePair, a network.Stream.
type pipeEnd struct {
	p    *pipePair
	side int
	id   string
}

var errPipeReadClosed = errors.New("testnet: pipe: read end closed")
var errPipeWriteClosed = errors.New("testnet: pipe: write end closed")

func (e *pipeEnd) Read(b []byte) (int, error) {
	p, s := e.p, e.side
	o := 1 - s
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		p.mu.Lock()
		switch {
		case p.reset:
			p.mu.Unlock()
			return 0, network.ErrReset
		case p.rclosed[s]:
			p.mu.Unlock()
			return 0, errPipeReadClosed
		case len(p.buf[o]) > 0:
			n := copy(b, p.buf[o])
			p.buf[o] = p.buf[o][n:]
			if len(p.buf[o]) == 0 {
				p.buf[o] = nil
			}
			p.mu.Unlock()
			return n, nil
		case p.wclosed[o]:
			p.mu.Unlock()
			return 0, io.EOF
		}
		dl := p.dl[s][0]
		p.mu.Unlock()
		if len(b) == 0 {
			return 0, nil
		}
		var expire <-chan time.Time
		if !dl.IsZero() {
			d := time.Until(dl)
			if d <= 0 {
				return 0, os.ErrDeadlineExceeded
			}
			if timer == nil {
				timer = time.NewTimer(d)
			} else {
				timer.Reset(d)
			}
			expire = timer.C
		}
		select {
		case <-p.wake[s]:
		case <-expire:
			return 0, os.ErrDeadlineExceeded
		}
	}
}

// Write appends a copy of b for the other side (a pipe's buffer is not bounded: the
// writers here are this program's nodes, whose frames are bounded and answered).
func (e *pipeEnd) Write(b []byte) (int, error) {
	p, s := e.p, e.side
	o := 1 - s
	p.mu.Lock()
	switch {
	case p.reset:
		p.mu.Unlock()
		return 0, network.ErrReset
	case p.wclosed[s]:
		p.mu.Unlock()
		return 0, errPipeWriteClosed
	case p.rclosed[o]:
		// The other side reads no more: as a multiplexer resets such a write.
		p.mu.Unlock()
		return 0, network.ErrReset
	case !p.dl[s][1].IsZero() && !time.Now().Before(p.dl[s][1]):
		p.mu.Unlock()
		return 0, os.ErrDeadlineExceeded
	}
	p.buf[s] = append(p.buf[s], b...)
	p.mu.Unlock()
	p.signal(o)
	return len(b), nil
}

// closeSide closes side s's write end, read end, or both.
func (e *pipeEnd) closeSide(write, read bool) error {
	p, s := e.p, e.side
	p.mu.Lock()
	if p.reset {
		p.mu.Unlock()
		return nil
	}
	if write {
		p.wclosed[s] = true
	}
	if read {
		p.rclosed[s] = true
		p.buf[1-s] = nil
	}
	f := p.endIfDoneLocked()
	p.mu.Unlock()
	p.signal(0)
	p.signal(1)
	if f != nil {
		f()
	}
	return nil
}

func (e *pipeEnd) Close() error      { return e.closeSide(true, true) }
func (e *pipeEnd) CloseWrite() error { return e.closeSide(true, false) }
func (e *pipeEnd) CloseRead() error  { return e.closeSide(false, true) }
func (e *pipeEnd) Reset() error      { e.p.kill(); return nil }

func (e *pipeEnd) ResetWithError(network.StreamErrorCode) error { return e.Reset() }

func (e *pipeEnd) setDeadline(t time.Time, read, write bool) error {
	p := e.p
	p.mu.Lock()
	if read {
		p.dl[e.side][0] = t
	}
	if write {
		p.dl[e.side][1] = t
	}
	p.mu.Unlock()
	p.signal(e.side) // a blocked read looks at its new deadline
	return nil
}

func (e *pipeEnd) SetDeadline(t time.Time) error      { return e.setDeadline(t, true, true) }
func (e *pipeEnd) SetReadDeadline(t time.Time) error  { return e.setDeadline(t, true, false) }
func (e *pipeEnd) SetWriteDeadline(t time.Time) error { return e.setDeadline(t, false, true) }
func (e *pipeEnd) ID() string                         { return e.id }
func (e *pipeEnd) Protocol() protocol.ID              { return e.p.proto }
func (e *pipeEnd) SetProtocol(protocol.ID) error      { return nil }
func (e *pipeEnd) Conn() network.Conn                 { return e.p.conns[e.side] }
func (e *pipeEnd) Scope() network.StreamScope         { return &network.NullScope{} }

func (e *pipeEnd) Stat() network.Stats {
	if e.side == 0 {
		return network.Stats{Direction: network.DirOutbound}
	}
	return network.Stats{Direction: network.DirInbound}
}

// pipeConn is one side's view of a pipe as a connection: who is at each end. A pipe is
// its own connection; it opens no other stream.
type pipeConn struct {
	local, remote peer.ID
	id            string
}

var errPipeConn = errors.New("testnet: a direct stream's connection carries no other stream")

func (c *pipeConn) Close() error                               { return nil }
func (c *pipeConn) CloseWithError(network.ConnErrorCode) error { return nil }
func (c *pipeConn) ID() string                                 { return c.id }
func (c *pipeConn) LocalPeer() peer.ID                         { return c.local }
func (c *pipeConn) RemotePeer() peer.ID                        { return c.remote }
func (c *pipeConn) IsClosed() bool                             { return false }
func (c *pipeConn) GetStreams() []network.Stream               { return nil }
func (c *pipeConn) As(any) bool                                { return false }
func (c *pipeConn) Scope() network.ConnScope                   { return &network.NullScope{} }
func (c *pipeConn) ConnState() network.ConnectionState         { return network.ConnectionState{} }
func (c *pipeConn) Stat() network.ConnStats                    { return network.ConnStats{} }
func (c *pipeConn) LocalMultiaddr() ma.Multiaddr               { return nil }
func (c *pipeConn) RemoteMultiaddr() ma.Multiaddr              { return nil }

func (c *pipeConn) NewStream(context.Context) (network.Stream, error) { return nil, errPipeConn }

// RemotePublicKey is the key inlined in the remote peer's ID (Ed25519 here).
func (c *pipeConn) RemotePublicKey() ic.PubKey {
	k, err := c.remote.ExtractPublicKey()
	if err != nil {
		return nil
	}
	return k
}

// directHandlers are the stream handlers a mock host's node registered, by protocol.
type directHandlers struct {
	mu sync.RWMutex
	m  map[protocol.ID]network.StreamHandler
}

func (d *directHandlers) set(pid protocol.ID, h network.StreamHandler) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = map[protocol.ID]network.StreamHandler{}
	}
	d.m[pid] = h
}

func (d *directHandlers) remove(pid protocol.ID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.m, pid)
}

func (d *directHandlers) get(pid protocol.ID) network.StreamHandler {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.m[pid]
}

// openDirect opens a direct stream from h to p for protocol pid: p's host must be in
// this network and have a handler for pid, which runs on the other end in a goroutine.
func (h *mockHost) openDirect(ctx context.Context, p peer.ID, pid protocol.ID) (network.Stream, error) {
	k := pairKey(h.ID(), p)
	if err := h.m.waitClosed(ctx, k); err != nil {
		return nil, err
	}
	if h.isClosed() {
		return nil, fmt.Errorf("failed to dial %s: the host is closed", p)
	}
	r := h.m.hostOf(p)
	if r == nil || r.isClosed() {
		return nil, fmt.Errorf("failed to dial %s: no such host", p)
	}
	handler := r.handlers.get(pid)
	if handler == nil {
		return nil, fmt.Errorf("failed to negotiate protocol: protocols not supported: [%s]", pid)
	}
	var a, b *pipeEnd
	a, b = newPipe(h.ID(), p, pid, func() { h.m.dropPipe(k, a.p) })
	h.m.addPipe(k, a.p)
	go handler(b)
	return a, nil
}
