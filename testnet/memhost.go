package testnet

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	"github.com/libp2p/go-libp2p/p2p/protocol/identify"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"
	msmux "github.com/multiformats/go-multistream"
)

// The transports of RunMem (MemConfig.Transport).
const (
	// TransportTCP: real libp2p hosts on loopback TCP (security, stream multiplexer,
	// kernel sockets), one lean configuration shared by every host: TCP only, no relay,
	// no metrics and no resource limits (the process is the limit).
	TransportTCP = "tcp"
	// TransportMock: libp2p hosts on go-libp2p's in-memory mock network (mocknet):
	// the same host, identify, streams and gossipsub, without sockets, encryption or
	// multiplexer. Above memTopicMax hosts there is neither gossipsub nor identify
	// (noIdentify), and this program's streams are direct pipes to the peer's handler
	// (direct, pipe.go). Links between hosts are made on the first dial of a pair, and a host
	// with more than mockMaxConns connections closes its least recently used idle ones
	// (a connection manager), so memory does not grow with the pairs the walk has used.
	TransportMock = "mock"
)

// mockMaxConns is how many connections a mock host keeps before it closes idle ones;
// mockIdle is how long a pair must have been without a stream of this program's
// protocols waiting for an answer, and without any use, before its connection may be
// closed. A closed connection only costs a new dial: a hand-off whose cached stream was
// reset retries the same peer on a new stream before it tries any other.
const (
	mockMaxConns = 8
	mockSlack    = 4
	mockIdle     = time.Second
	// mockStale: a stream that wrote and never read or closed for this long (a
	// protocol that only writes) no longer holds its pair busy.
	mockStale = 30 * time.Second
)

// memHosts builds the hosts of one RunMem network.
type memHosts struct {
	transport string
	mn        mocknet.Mocknet
	mu        sync.Mutex // serialises link creation; guards use
	use       map[[2]peer.ID]*pairUse
	streams   map[[2]peer.ID]map[*mockStream]struct{} // tracked streams not yet ended
	nclosed   atomic.Int64                            // connections closed by trim
	closing   map[[2]peer.ID]chan struct{}            // pairs whose connection trim is closing (closed when done)
	trims     sync.WaitGroup                          // background trims (Close waits)
	idle      time.Duration                           // mockIdle, shorter in tests
	// noIdentify: mock hosts answer no identify request (a network without the control
	// topic, whose GossipSub is the only user of identify here).
	noIdentify bool
	// direct: this program's streams are direct pipes to the peer's handler (pipe.go),
	// not mocknet streams; set with noIdentify. hosts (under mu) finds a peer's host,
	// pipes (under mu) the open pipes of each pair.
	direct bool
	hosts  map[peer.ID]*mockHost
	pipes  map[[2]peer.ID]map[*pipePair]struct{}
}

// pairUse is the activity of the streams between two mock hosts, whichever opened them.
type pairUse struct {
	last    time.Time                 // last write, read or close of a tracked stream
	pending map[*mockStream]time.Time // tracked streams that wrote and await an answer, since
}

func newMemHosts(transport string) (*memHosts, error) {
	switch transport {
	case "", TransportTCP:
		return &memHosts{transport: TransportTCP}, nil
	case TransportMock:
		return &memHosts{transport: TransportMock, mn: mocknet.New(), use: map[[2]peer.ID]*pairUse{}, idle: mockIdle,
			streams: map[[2]peer.ID]map[*mockStream]struct{}{}, closing: map[[2]peer.ID]chan struct{}{},
			hosts: map[peer.ID]*mockHost{}, pipes: map[[2]peer.ID]map[*pipePair]struct{}{}}, nil
	}
	return nil, fmt.Errorf("testnet: mem: unknown transport %q (tcp or mock)", transport)
}

// newHost returns node i's host constructor (node.Config.NewHost).
func (m *memHosts) newHost(i int) func(crypto.PrivKey) (host.Host, error) {
	if m.transport == TransportTCP {
		return func(key crypto.PrivKey) (host.Host, error) {
			return libp2p.New(libp2p.Identity(key), libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"),
				libp2p.Transport(tcp.NewTCPTransport), libp2p.DisableRelay(), libp2p.DisableMetrics(),
				libp2p.ResourceManager(&network.NullResourceManager{}))
		}
	}
	return func(key crypto.PrivKey) (host.Host, error) {
		// A distinct address per host (10.0.0.0/8); nothing listens on it.
		a, err := ma.NewMultiaddr(fmt.Sprintf("/ip4/10.%d.%d.%d/tcp/4001", (i>>16)&255, (i>>8)&255, i&255))
		if err != nil {
			return nil, err
		}
		h, err := m.mn.AddPeer(key, a)
		if err != nil {
			return nil, err
		}
		if m.noIdentify {
			// Nothing here needs identify: the membership is static, a member's key is
			// in its ID, and this program's streams propose their protocol (openStream).
			// A peer's identify request then fails at once, and a connection costs no
			// identify exchange (two streams, a protobuf message and an 8 KiB reader
			// each way; with a random walk over 1,000 hosts, one new connection per hop).
			h.RemoveStreamHandler(identify.ID)
			h.RemoveStreamHandler(identify.IDPush)
		}
		mh := &mockHost{Host: h, m: m, open: map[network.Conn]struct{}{}, dpeers: map[peer.ID]struct{}{}}
		m.mu.Lock()
		m.hosts[h.ID()] = mh
		m.mu.Unlock()
		h.Network().Notify(&network.NotifyBundle{
			ConnectedF: func(_ network.Network, c network.Conn) {
				mh.conns.Add(1)
				mh.cmu.Lock()
				mh.open[c] = struct{}{}
				mh.cmu.Unlock()
			},
			DisconnectedF: func(_ network.Network, c network.Conn) {
				mh.conns.Add(-1)
				mh.cmu.Lock()
				delete(mh.open, c)
				mh.cmu.Unlock()
			},
		})
		return mh, nil
	}
}

// needsAddrs reports whether hosts must know each other's addresses to dial.
func (m *memHosts) needsAddrs() bool { return m.transport == TransportTCP }

// link records a use of the pair k and makes sure a mock link joins it (a mocknet dial
// needs one), in one step: trim, which unlinks idle pairs, then sees the pair busy.
func (m *memHosts) link(k [2]peer.ID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.touchLocked(k, nil, false)
	if m.direct || len(m.mn.LinksBetweenPeers(k[0], k[1])) > 0 {
		return nil
	}
	_, err := m.mn.LinkPeers(k[0], k[1])
	return err
}

// closed ends the closing of pair k's connection (trim).
func (m *memHosts) closed(k [2]peer.ID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ch := m.closing[k]; ch != nil {
		close(ch)
		delete(m.closing, k)
	}
}

// waitClosed waits until no connection of pair k is being closed by trim.
func (m *memHosts) waitClosed(ctx context.Context, k [2]peer.ID) error {
	for {
		m.mu.Lock()
		ch := m.closing[k]
		m.mu.Unlock()
		if ch == nil {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close waits for the background trims and closes the mock network, if any.
func (m *memHosts) Close() {
	m.trims.Wait()
	if m.mn != nil {
		m.mn.Close()
	}
}

// mockHost is a mocknet host that links itself to a peer before dialling it.
type mockHost struct {
	host.Host
	m     *memHosts
	conns atomic.Int64 // open connections (notifications)
	// open is the set of open connections (notifications, under cmu): mocknet's own
	// listing walks an entry for every peer the host was ever connected to, which made
	// trim's listing cost grow with the run.
	cmu  sync.Mutex
	open map[network.Conn]struct{}
	// trimming: a trim of this host is under way (NewStream starts one in the
	// background; another would pick the same connections).
	trimming atomic.Bool
	// Direct streams (memHosts.direct): the handlers this host's node registered; the
	// peers it has open pipes with, and how many (under cmu); closed once Close ran.
	handlers directHandlers
	dpeers   map[peer.ID]struct{}
	closed   atomic.Bool
}

// openPeers returns the remote peer of each open connection (direct: each peer with an
// open pipe).
func (h *mockHost) openPeers() []peer.ID {
	h.cmu.Lock()
	defer h.cmu.Unlock()
	if h.m.direct {
		out := make([]peer.ID, 0, len(h.dpeers))
		for p := range h.dpeers {
			out = append(out, p)
		}
		return out
	}
	out := make([]peer.ID, 0, len(h.open))
	for c := range h.open {
		out = append(out, c.RemotePeer())
	}
	return out
}

// nconns is the number of open connections (direct: of peers with an open pipe).
func (h *mockHost) nconns() int64 {
	if h.m.direct {
		h.cmu.Lock()
		defer h.cmu.Unlock()
		return int64(len(h.dpeers))
	}
	return h.conns.Load()
}

func (h *mockHost) isClosed() bool { return h.closed.Load() }

// SetStreamHandler registers handler with the host and, for direct streams, with h.
func (h *mockHost) SetStreamHandler(pid protocol.ID, handler network.StreamHandler) {
	h.handlers.set(pid, handler)
	h.Host.SetStreamHandler(pid, handler)
}

// RemoveStreamHandler removes pid's handler from the host and from h.
func (h *mockHost) RemoveStreamHandler(pid protocol.ID) {
	h.handlers.remove(pid)
	h.Host.RemoveStreamHandler(pid)
}

// Close closes the host; its direct pipes are reset.
func (h *mockHost) Close() error {
	if h.closed.CompareAndSwap(false, true) && h.m.direct {
		for _, p := range h.openPeers() {
			h.m.killPipes(pairKey(h.ID(), p))
		}
	}
	return h.Host.Close()
}

// Connect links h and ai.ID, then connects them. With direct streams there is nothing to
// connect: a stream reaches any host of the network.
func (h *mockHost) Connect(ctx context.Context, ai peer.AddrInfo) error {
	if h.m.direct {
		if h.m.hostOf(ai.ID) == nil {
			return fmt.Errorf("failed to dial %s: no such host", ai.ID)
		}
		return nil
	}
	if err := h.m.link(pairKey(h.ID(), ai.ID)); err != nil {
		return err
	}
	return h.Host.Connect(ctx, ai)
}

// NewStream links h and p, then opens a stream; the streams of this program's
// protocols (/dpadmm/...) are tracked so that a connection with an exchange under way
// is never closed; then h closes idle connections beyond mockMaxConns.
func (h *mockHost) NewStream(ctx context.Context, p peer.ID, pids ...protocol.ID) (network.Stream, error) {
	if p == h.ID() {
		return h.Host.NewStream(ctx, p, pids...)
	}
	if !slices.ContainsFunc(pids, func(id protocol.ID) bool { return strings.HasPrefix(string(id), "/dpadmm/") }) {
		// Other protocols (GossipSub, identify) open their streams when a connection
		// comes up; they never dial: a pair that trim has just closed stays closed, where
		// a dial would make a new connection, whose notification opens more such streams,
		// and beyond mockMaxConns each new connection closes another (a storm that took
		// 18 GB and never ended at 1,000 hosts).
		return h.Host.NewStream(network.WithNoDial(ctx, "mock: only this program's protocols dial"), p, pids...)
	}
	k := pairKey(h.ID(), p)
	if err := h.m.link(k); err != nil {
		return nil, err
	}
	s, err := h.openStream(ctx, p, pids[0])
	if err != nil {
		h.m.mu.Lock()
		h.m.forgetLocked(k)
		h.m.mu.Unlock()
		return nil, err
	}
	ms := newMockStream(h, p, k, s)
	if h.nconns() > mockMaxConns+mockSlack {
		// Off the hand-off's path (the new pair is busy: linked just now); Close waits.
		h.m.trims.Add(1)
		go func() {
			defer h.m.trims.Done()
			h.trim()
		}()
	}
	return ms, nil
}

// openStream dials p if need be and opens a stream of protocol pid without waiting for
// identify: this program's streams name one protocol, which the first write proposes
// (multistream-select's lazy client, as a host does for a protocol it knows the peer
// speaks), and a peer without it fails the first read. The host's own NewStream waits
// for identify on every new connection, a round trip of its own and, with a random
// walk over 1,000 hosts, one per hop.
func (h *mockHost) openStream(ctx context.Context, p peer.ID, pid protocol.ID) (network.Stream, error) {
	if h.m.direct {
		return h.openDirect(ctx, p, pid)
	}
	if err := h.m.waitClosed(ctx, pairKey(h.ID(), p)); err != nil {
		return nil, err
	}
	if h.Network().Connectedness(p) != network.Connected {
		if _, err := h.Network().DialPeer(ctx, p); err != nil {
			return nil, fmt.Errorf("failed to dial: %w", err)
		}
	}
	s, err := h.Network().NewStream(network.WithNoDial(ctx, "dialled"), p)
	if err != nil {
		return nil, fmt.Errorf("failed to open stream: %w", err)
	}
	if err := s.SetProtocol(pid); err != nil {
		s.Reset()
		return nil, err
	}
	return &lazyStream{Stream: s, rw: msmux.NewMSSelect(s, pid)}, nil
}

// lazyStream is a stream whose protocol is proposed with its first write (the host's
// own wrapper of a lazily negotiated stream).
type lazyStream struct {
	network.Stream
	rw io.ReadWriteCloser
}

func (s *lazyStream) Read(b []byte) (int, error)  { return s.rw.Read(b) }
func (s *lazyStream) Write(b []byte) (int, error) { return s.rw.Write(b) }
func (s *lazyStream) Close() error                { return s.rw.Close() }

// CloseWrite flushes the proposal, if not yet written, before closing.
func (s *lazyStream) CloseWrite() error {
	if f, ok := s.rw.(interface{ Flush() error }); ok {
		_ = f.Flush()
	}
	return s.Stream.CloseWrite()
}

// trim closes h's least recently used idle connections down to mockMaxConns once it
// has more than mockMaxConns + mockSlack (openPeers; direct: resets the pipes of pairs), and forgets their pairs: link,
// activity, and what each end's peerstore learnt of the other (identify, protocols;
// learnt again on the next connection, and otherwise kept for every peer ever met). The
// decision is one step under the lock that link takes (trimDecide), so a pair that a
// stream is about to use is either busy or unlinked and marked closing before that
// stream dials, and the stream waits for the close (waitClosed). NewStream runs it in
// the background, one at a time per host.
func (h *mockHost) trim() {
	if !h.trimming.CompareAndSwap(false, true) {
		return
	}
	defer h.trimming.Store(false)
	for _, p := range h.trimDecide() {
		if h.m.direct {
			h.m.killPipes(pairKey(h.ID(), p))
			h.m.closed(pairKey(h.ID(), p))
			continue
		}
		// Closed outside the hosts' lock: closing a mock connection notifies both
		// ends' subscribers, and every stream read and write takes that lock. A
		// stream to the pair waits (openStream) until both ends' connections are
		// closed and their peerstores have forgotten each other.
		h.Peerstore().RemovePeer(p)
		h.Peerstore().ClearAddrs(p)
		h.Network().ClosePeer(p)
		// The remote end forgets h alike (otherwise every host's peerstore keeps every
		// peer that ever dialled it), and its end of the connection is closed here, not
		// in the background as mocknet closes it.
		if r := h.m.mn.Host(p); r != nil {
			r.Peerstore().RemovePeer(h.ID())
			r.Peerstore().ClearAddrs(h.ID())
			r.Network().ClosePeer(h.ID())
		}
		h.m.closed(pairKey(h.ID(), p))
	}
}

// trimDecide picks the idle pairs to close beyond mockMaxConns connections and, under
// the hosts' lock, unlinks them, lets go of their streams and marks them closing, so
// that a stream about to use such a pair either saw it busy or finds it closing (and
// waits, then links and dials anew). A pair's connections (two, when both ends dialled
// at once) close together.
func (h *mockHost) trimDecide() []peer.ID {
	conns := h.openPeers()
	if len(conns) <= mockMaxConns {
		return nil
	}
	now := time.Now()
	type cand struct {
		p    peer.ID
		last time.Time
	}
	var idle []cand
	seen := map[peer.ID]bool{}
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	for _, p := range conns {
		k := pairKey(h.ID(), p)
		if seen[p] || h.m.closing[k] != nil {
			continue // listed already, or the other end is closing it
		}
		seen[p] = true
		u := h.m.use[k]
		if u == nil {
			// A mocknet connection that no stream of this program used (GossipSub's) is
			// idle; a direct pair always has one: its activity was forgotten as it
			// reopened (forgetLocked between link and addPipe), and its first write
			// records it again. It is busy until then.
			if !h.m.direct {
				idle = append(idle, cand{p: p})
			}
			continue
		}
		busy := now.Sub(u.last) < h.m.idle
		for _, since := range u.pending {
			busy = busy || now.Sub(since) < mockStale
		}
		if !busy {
			idle = append(idle, cand{p: p, last: u.last})
		}
	}
	slices.SortFunc(idle, func(a, b cand) int { return a.last.Compare(b.last) })
	var out []peer.ID
	// seen omits pairs that another end's trim is closing: it may be below the limit.
	for _, c := range idle[:min(len(idle), max(0, len(seen)-mockMaxConns))] {
		h.m.nclosed.Add(1)
		k := pairKey(h.ID(), c.p)
		for _, l := range h.m.mn.LinksBetweenPeers(k[0], k[1]) {
			h.m.mn.Unlink(l)
		}
		delete(h.m.use, k)
		for ms := range h.m.streams[k] {
			ms.detach()
		}
		delete(h.m.streams, k)
		h.m.closing[k] = make(chan struct{})
		out = append(out, c.p)
	}
	return out
}

// pairKey is the unordered pair {a, b}.
func pairKey(a, b peer.ID) [2]peer.ID {
	if b < a {
		a, b = b, a
	}
	return [2]peer.ID{a, b}
}

// touch records a use of pair k: s (when not nil) starts (pending) or ends waiting.
func (m *memHosts) touch(k [2]peer.ID, s *mockStream, pending bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.touchLocked(k, s, pending)
}

func (m *memHosts) touchLocked(k [2]peer.ID, s *mockStream, pending bool) {
	u := m.use[k]
	if u == nil {
		u = &pairUse{pending: map[*mockStream]time.Time{}}
		m.use[k] = u
	}
	u.last = time.Now()
	switch {
	case s == nil:
	case pending:
		if _, ok := u.pending[s]; !ok {
			u.pending[s] = u.last
		}
	default:
		delete(u.pending, s)
	}
}

// mockStream is a stream of this program's protocols on a mock host: it is pending from
// a write until the next read returns or the stream ends. When trim closes its
// connection it lets go of the stream (detach): a node keeps its last stream to each
// peer it sent to, and a closed stream holds its connection and buffers. The next write
// on a detached stream opens a new stream to the same peer and protocol, as a
// connection manager's closed connection costs only a new dial; a read before that
// write, and any use after Close or Reset, fails with network.ErrReset.
type mockStream struct {
	h     *mockHost
	p     peer.ID
	key   [2]peer.ID
	id    string
	proto protocol.ID
	mu    sync.Mutex
	s     network.Stream // nil once detached
	ended bool
	dl    [2]time.Time // read and write deadlines, for a reopened stream
}

func newMockStream(h *mockHost, p peer.ID, k [2]peer.ID, s network.Stream) *mockStream {
	ms := &mockStream{h: h, p: p, key: k, id: s.ID(), proto: s.Protocol(), s: s}
	ms.register()
	return ms
}

func (s *mockStream) register() {
	m := s.h.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.streams[s.key] == nil {
		m.streams[s.key] = map[*mockStream]struct{}{}
	}
	m.streams[s.key][s] = struct{}{}
}

// inner returns the stream, or nil once detached.
func (s *mockStream) inner() network.Stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.s
}

// detach lets go of the stream (trim closed its connection).
func (s *mockStream) detach() {
	s.mu.Lock()
	s.s = nil
	s.mu.Unlock()
}

// end ends s: it no longer waits, is no longer to be detached nor reopened.
func (s *mockStream) end() network.Stream {
	m := s.h.m
	m.mu.Lock()
	m.touchLocked(s.key, s, false)
	delete(m.streams[s.key], s)
	m.forgetLocked(s.key)
	m.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
	return s.s
}

// writer returns the stream to write to, reopening a detached one. No lock of s is held
// while the pair is linked and dialled (trim holds the hosts' lock while it detaches).
func (s *mockStream) writer() (network.Stream, error) {
	s.mu.Lock()
	in, ended, dl := s.s, s.ended, s.dl
	s.mu.Unlock()
	switch {
	case in != nil:
		return in, nil
	case ended:
		return nil, network.ErrReset
	}
	if err := s.h.m.link(s.key); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ns, err := s.h.openStream(ctx, s.p, s.proto)
	if err != nil {
		return nil, err
	}
	ns.SetReadDeadline(dl[0])
	ns.SetWriteDeadline(dl[1])
	s.mu.Lock()
	if s.s != nil || s.ended {
		s.mu.Unlock()
		ns.Reset()
		return nil, network.ErrReset
	}
	s.s = ns
	s.mu.Unlock()
	s.register()
	return ns, nil
}

func (s *mockStream) Read(b []byte) (int, error) {
	in := s.inner()
	if in == nil {
		return 0, network.ErrReset
	}
	n, err := in.Read(b)
	s.h.m.touch(s.key, s, false)
	return n, err
}

// Write marks the pair busy first, so that trim either sees it busy or has detached s
// before writer looks.
func (s *mockStream) Write(b []byte) (int, error) {
	s.h.m.touch(s.key, s, true)
	in, err := s.writer()
	if err != nil {
		return 0, err
	}
	return in.Write(b)
}

func (s *mockStream) Close() error {
	if in := s.end(); in != nil {
		return in.Close()
	}
	return nil
}

func (s *mockStream) Reset() error {
	if in := s.end(); in != nil {
		return in.Reset()
	}
	return nil
}

func (s *mockStream) ResetWithError(code network.StreamErrorCode) error {
	if in := s.end(); in != nil {
		return in.ResetWithError(code)
	}
	return nil
}

func (s *mockStream) CloseWrite() error {
	if in := s.inner(); in != nil {
		return in.CloseWrite()
	}
	return network.ErrReset
}

func (s *mockStream) CloseRead() error {
	if in := s.inner(); in != nil {
		return in.CloseRead()
	}
	return network.ErrReset
}

// setDeadline records deadline k (0 read, 1 write) for a reopened stream and sets it.
func (s *mockStream) setDeadline(t time.Time, read, write bool) error {
	s.mu.Lock()
	if read {
		s.dl[0] = t
	}
	if write {
		s.dl[1] = t
	}
	in := s.s
	s.mu.Unlock()
	switch {
	case in == nil:
		return nil
	case read && write:
		return in.SetDeadline(t)
	case read:
		return in.SetReadDeadline(t)
	}
	return in.SetWriteDeadline(t)
}

func (s *mockStream) SetDeadline(t time.Time) error      { return s.setDeadline(t, true, true) }
func (s *mockStream) SetReadDeadline(t time.Time) error  { return s.setDeadline(t, true, false) }
func (s *mockStream) SetWriteDeadline(t time.Time) error { return s.setDeadline(t, false, true) }
func (s *mockStream) ID() string                         { return s.id }
func (s *mockStream) Protocol() protocol.ID              { return s.proto }

func (s *mockStream) SetProtocol(id protocol.ID) error {
	if in := s.inner(); in != nil {
		return in.SetProtocol(id)
	}
	return network.ErrReset
}

func (s *mockStream) Stat() network.Stats {
	if in := s.inner(); in != nil {
		return in.Stat()
	}
	return network.Stats{}
}

// Conn is the stream's connection; nil while detached (the connection is closed).
func (s *mockStream) Conn() network.Conn {
	if in := s.inner(); in != nil {
		return in.Conn()
	}
	return nil
}

func (s *mockStream) Scope() network.StreamScope {
	if in := s.inner(); in != nil {
		return in.Scope()
	}
	return &network.NullScope{}
}

// memStats returns the process's peak resident set (VmHWM of /proc/self/status; 0 where
// unavailable) and the live heap after a garbage collection, in bytes.
func memStats() (peakRSS, heap uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heap = ms.HeapAlloc
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, heap
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			fs := strings.Fields(v) // "123456 kB"
			if len(fs) == 2 && fs[1] == "kB" {
				if kb, err := strconv.ParseUint(fs[0], 10, 64); err == nil {
					peakRSS = kb << 10
				}
			}
		}
	}
	return peakRSS, heap
}

// memTempRoot is where RunMem puts its temporary data directories: /dev/shm when it is
// a writable directory (memory-backed on Linux), else the default temporary directory.
func memTempRoot() string {
	const shm = "/dev/shm"
	if st, err := os.Stat(shm); err == nil && st.IsDir() {
		if f, err := os.CreateTemp(shm, "dpadmm-probe-"); err == nil {
			f.Close()
			os.Remove(f.Name())
			return shm
		}
	}
	return ""
}

// hostOf returns the host of peer p in this network, or nil.
func (m *memHosts) hostOf(p peer.ID) *mockHost {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.hosts[p]
}

// addPipe records an open pipe of pair k: both hosts count the pair as connected
// (dpeers, set under mu with the pipe, so that a host lists every pair with a pipe).
func (m *memHosts) addPipe(k [2]peer.ID, p *pipePair) {
	m.mu.Lock()
	defer m.mu.Unlock()
	set := m.pipes[k]
	if set == nil {
		set = map[*pipePair]struct{}{}
		m.pipes[k] = set
	}
	set[p] = struct{}{}
	if len(set) == 1 {
		m.hosts[k[0]].setPeer(k[1], true)
		m.hosts[k[1]].setPeer(k[0], true)
	}
}

// dropPipe forgets an ended pipe of pair k, and the pair once nothing of it is left.
func (m *memHosts) dropPipe(k [2]peer.ID, p *pipePair) {
	m.mu.Lock()
	defer m.mu.Unlock()
	set := m.pipes[k]
	if _, had := set[p]; !had {
		return
	}
	delete(set, p)
	if len(set) == 0 {
		delete(m.pipes, k)
		m.hosts[k[0]].setPeer(k[1], false)
		m.hosts[k[1]].setPeer(k[0], false)
		m.forgetLocked(k)
	}
}

// forgetLocked forgets the activity of direct pair k once it has no pipe and no stream
// of this program (trim forgets the pairs it closes; a pair whose pipes ended by
// themselves would otherwise be kept, one entry per pair ever used).
func (m *memHosts) forgetLocked(k [2]peer.ID) {
	if !m.direct || len(m.pipes[k]) > 0 || len(m.streams[k]) > 0 {
		return
	}
	delete(m.streams, k)
	if u := m.use[k]; u != nil && len(u.pending) == 0 {
		delete(m.use, k)
	}
}

// killPipes resets every open pipe of pair k.
func (m *memHosts) killPipes(k [2]peer.ID) {
	m.mu.Lock()
	ps := make([]*pipePair, 0, len(m.pipes[k]))
	for p := range m.pipes[k] {
		ps = append(ps, p)
	}
	m.mu.Unlock()
	for _, p := range ps {
		p.kill()
	}
}

// setPeer records whether h has open pipes with p (called under memHosts.mu; the lock
// order is memHosts.mu, then cmu).
func (h *mockHost) setPeer(p peer.ID, open bool) {
	if h == nil {
		return
	}
	h.cmu.Lock()
	defer h.cmu.Unlock()
	if open {
		h.dpeers[p] = struct{}{}
	} else {
		delete(h.dpeers, p)
	}
}
