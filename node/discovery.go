package node

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/discovery/mdns"
	drouting "github.com/libp2p/go-libp2p/p2p/discovery/routing"
	"github.com/libp2p/go-libp2p/p2p/host/autorelay"
	"github.com/multiformats/go-multiaddr"
	madns "github.com/multiformats/go-multiaddr-dns"
	manet "github.com/multiformats/go-multiaddr/net"
	"github.com/rs/zerolog"
)

// addrInfo parses a multiaddr that ends in /p2p/<peer ID>.
func addrInfo(addr string) (*peer.AddrInfo, error) {
	ma, err := multiaddr.NewMultiaddr(addr)
	if err != nil {
		return nil, fmt.Errorf("node: bad multiaddr %q: %w", addr, err)
	}
	ai, err := peer.AddrInfoFromP2pAddr(ma)
	if err != nil {
		return nil, fmt.Errorf("node: multiaddr %q must end in /p2p/<peer ID>: %w", addr, err)
	}
	return ai, nil
}

// dial connects to a multiaddr that ends in /p2p/<peer ID>.
func (n *Node) dial(ctx context.Context, addr string) error {
	ai, err := addrInfo(addr)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := n.Host.Connect(cctx, *ai); err != nil {
		return fmt.Errorf("node: cannot reach %s: %w%s", addr, err, handshakeHint(err, n.cfg.SwarmKey != nil))
	}
	return nil
}

// handshakeHint explains a failed security handshake, which is how two hosts of different
// private networks (swarm keys) see each other: the bytes of one are noise to the other.
func handshakeHint(err error, private bool) string {
	if !strings.Contains(err.Error(), "negotiate security") {
		return ""
	}
	if private {
		return " (this node uses --swarm-key: a peer with another key, or none, fails this handshake; check that both hold the same key file)"
	}
	return " (a peer in a closed run fails this handshake with a node without its --swarm-key)"
}

type mdnsNotifee struct{ n *Node }

func (m mdnsNotifee) HandlePeerFound(ai peer.AddrInfo) {
	if ai.ID == m.n.ID() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.n.Host.Connect(ctx, ai); err != nil {
		m.n.log.Debug().Err(err).Str("peer", shortID(ai.ID)).Msg("mdns peer unreachable")
		return
	}
	m.n.log.Info().Str("peer", shortID(ai.ID)).Msg("mdns peer connected")
}

// mdnsRestart is how long a node with no connected peer waits before it restarts its
// mDNS service. The service binds its multicast sockets once, at start: when the
// interfaces were not ready then (a link coming up, a namespace being configured), its
// queries and answers never leave the host and it would stay alone forever.
const mdnsRestart = 10 * time.Second

// startMDNS advertises and discovers peers on the LAN under the service name
// dpadmm-<run>, and restarts the service while the node has no peer at all.
func (n *Node) startMDNS() error {
	type closer interface{ Close() error }
	start := func() (closer, error) {
		s := mdns.NewMdnsService(n.Host, "dpadmm-"+n.cfg.Run, mdnsNotifee{n})
		if err := s.Start(); err != nil {
			return nil, fmt.Errorf("node: mdns: %w", err)
		}
		return s, nil
	}
	s, err := start()
	if err != nil {
		// No usable multicast interface yet (a node started before its network is up):
		// the loop below keeps trying.
		n.log.Warn().Err(err).Dur("retry", mdnsRestart).Msg("mdns not started yet (no usable interface); retrying")
		n.join.setMDNS(fmt.Sprintf("no usable network interface for mDNS (retrying every %v): %v", mdnsRestart, err))
		s = nil
	}
	var mu sync.Mutex
	stop := make(chan struct{})
	n.closers = append(n.closers, func() error {
		close(stop)
		mu.Lock()
		defer mu.Unlock()
		if s == nil {
			return nil
		}
		return s.Close()
	})
	go func() {
		t := time.NewTicker(mdnsRestart)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			if len(n.Host.Network().Peers()) > 0 {
				continue
			}
			mu.Lock()
			select {
			case <-stop:
				mu.Unlock()
				return
			default:
			}
			if s != nil {
				s.Close()
				s = nil
			}
			if ns, err := start(); err != nil {
				n.log.Warn().Err(err).Msg("mdns restart failed; retrying later")
				n.join.setMDNS(fmt.Sprintf("no usable network interface for mDNS (retrying every %v): %v", mdnsRestart, err))
			} else {
				s = ns
				n.join.setMDNS("")
				n.log.Info().Msg("no peer yet: mdns service restarted")
			}
			mu.Unlock()
		}
	}()
	return nil
}

// startDHT connects to the bootstrap peers, starts a Kademlia DHT client/server and uses
// it as a rendezvous: the node advertises the key dpadmm/<run> and connects to every
// peer found under it, repeating every few seconds.
func (n *Node) startDHT(ctx context.Context) error {
	addrs, err := bootstrapAddrs(ctx, n.cfg.Bootstrap)
	if err != nil {
		return err
	}
	ok := 0
	for _, a := range addrs {
		if err := n.dial(ctx, a); err != nil {
			n.log.Warn().Err(err).Str("addr", a).Msg("bootstrap peer unreachable")
			continue
		}
		ok++
	}
	if ok == 0 {
		return fmt.Errorf("node: none of the %d bootstrap peers is reachable", len(addrs))
	}
	// ModeAuto: a DHT client until AutoNAT finds the node publicly reachable, so that a
	// node behind NAT never announces itself as a server it cannot be.
	kad, err := dht.New(ctx, n.Host, dht.Mode(dht.ModeAuto))
	if err != nil {
		return fmt.Errorf("node: dht: %w", err)
	}
	n.closers = append(n.closers, kad.Close)
	if n.relaySrc != nil {
		n.relaySrc.kad.Store(kad)
	}
	n.watchAddrs()
	if err := kad.Bootstrap(ctx); err != nil {
		return fmt.Errorf("node: dht bootstrap: %w", err)
	}
	rd := drouting.NewRoutingDiscovery(kad)
	ns := RendezvousKey(n.cfg.Run, n.cfg.RendezvousSecret)
	dctx, cancel := context.WithCancel(ctx)
	n.closers = append(n.closers, func() error { cancel(); return nil })
	n.bg.Add(2)
	go func() { defer n.bg.Done(); n.advertise(dctx, kad, rd, ns) }()
	go func() {
		defer n.bg.Done()
		for dctx.Err() == nil {
			peers, err := rd.FindPeers(dctx, ns)
			if err == nil {
				for ai := range peers {
					if c := n.Host.Network().Connectedness(ai.ID); ai.ID == n.ID() || c == network.Connected || c == network.Limited {
						continue // a relayed (limited) connection is upgraded by hole punching, if at all
					}
					cctx, c := context.WithTimeout(dctx, 5*time.Second)
					if len(ai.Addrs) == 0 {
						// Public DHT servers drop non-public addresses from provider
						// records: look the peer up instead of skipping it.
						if found, err := kad.FindPeer(cctx, ai.ID); err == nil {
							ai = found
						}
					}
					if len(ai.Addrs) > 0 {
						if err := n.Host.Connect(cctx, ai); err != nil {
							n.log.Debug().Err(err).Str("peer", shortID(ai.ID)).Msg("rendezvous peer unreachable")
						} else if cs := n.Host.Network().ConnsToPeer(ai.ID); len(cs) > 0 {
							n.log.Info().Str("peer", shortID(ai.ID)).Str("via", cs[0].RemoteMultiaddr().String()).Msg("rendezvous peer connected")
						}
					}
					c()
				}
			}
			select {
			case <-dctx.Done():
			case <-time.After(3 * time.Second):
			}
		}
	}()
	return nil
}

// checkPorts refuses fixed TCP/UDP listen ports that are already taken. go-libp2p binds
// with SO_REUSEPORT, so without this check a second node on the same port would silently
// share it with the first.
func checkPorts(listen []string) error {
	for _, s := range listen {
		ma, err := multiaddr.NewMultiaddr(s)
		if err != nil {
			return fmt.Errorf("node: bad listen multiaddr %q: %w", s, err)
		}
		network, addr, err := manet.DialArgs(ma)
		if err != nil {
			continue // not an IP address (e.g. a relay): libp2p reports it
		}
		if _, port, _ := net.SplitHostPort(addr); port == "0" {
			continue
		}
		switch {
		case strings.HasPrefix(network, "tcp"):
			l, err := net.Listen(network, addr)
			if err != nil {
				return fmt.Errorf("node: cannot listen on %s: %w (port already in use?)", s, err)
			}
			l.Close()
		case strings.HasPrefix(network, "udp"):
			l, err := net.ListenPacket(network, addr)
			if err != nil {
				return fmt.Errorf("node: cannot listen on %s: %w (port already in use?)", s, err)
			}
			l.Close()
		}
	}
	return nil
}

// advertise announces the node under the rendezvous key ns: once the routing table holds a
// peer (an advertisement into an empty table fails, and go-libp2p's helper then waits two
// minutes before trying again), then again before the record expires; a failure is retried
// after a few seconds, backing off to a minute.
func (n *Node) advertise(ctx context.Context, kad *dht.IpfsDHT, rd *drouting.RoutingDiscovery, ns string) {
	wait := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	backoff := 2 * time.Second
	filled := false
	for ctx.Err() == nil {
		if kad.RoutingTable().Size() == 0 {
			if !wait(500 * time.Millisecond) {
				return
			}
			continue
		}
		if !filled {
			filled = true
			n.log.Info().Int("peers", kad.RoutingTable().Size()).Msg("dht routing table filled")
		}
		ttl, err := rd.Advertise(ctx, ns)
		if err != nil {
			n.limitedLog(zerolog.DebugLevel, "advertise").Err(err).Msg("rendezvous advertisement failed; retrying")
			if !wait(backoff) {
				return
			}
			backoff = min(2*backoff, time.Minute)
			continue
		}
		backoff = 2 * time.Second
		next := ttl * 7 / 8
		if next <= 0 || next > 10*time.Minute {
			next = 10 * time.Minute
		}
		if !wait(next) {
			return
		}
	}
}

// DefaultBootstrap is the --bootstrap value that names the public libp2p network's
// default bootstrap peers (go-libp2p-kad-dht's DefaultBootstrapPeers).
const DefaultBootstrap = "default"

// bootstrapAddrs expands the --bootstrap values: DefaultBootstrap becomes the public
// network's bootstrap peers, and a /dnsaddr without /p2p is resolved to the peers it names.
func bootstrapAddrs(ctx context.Context, in []string) ([]string, error) {
	var out []string
	for _, a := range in {
		if a == DefaultBootstrap {
			for _, m := range dht.DefaultBootstrapPeers {
				out = append(out, m.String())
			}
			continue
		}
		m, err := multiaddr.NewMultiaddr(a)
		if err != nil {
			return nil, fmt.Errorf("node: bad bootstrap multiaddr %q: %w", a, err)
		}
		if _, err := m.ValueForProtocol(multiaddr.P_P2P); err == nil {
			out = append(out, a)
			continue
		}
		if _, err := m.ValueForProtocol(multiaddr.P_DNSADDR); err != nil {
			return nil, fmt.Errorf("node: bootstrap %q must end in /p2p/<peer ID> (or be a /dnsaddr name, or %q)", a, DefaultBootstrap)
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		res, err := madns.DefaultResolver.Resolve(rctx, m)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("node: cannot resolve bootstrap %s: %w", a, err)
		}
		for _, r := range res {
			if _, err := r.ValueForProtocol(multiaddr.P_P2P); err == nil {
				out = append(out, r.String())
			}
		}
	}
	return out, nil
}

// RendezvousKey is the DHT key under which the members of a run find each other:
// "dpadmm/<run>", or with a secret "dpadmm/" and the hex of HMAC-SHA256(secret, run) cut
// to 128 bits, so that the public DHT does not learn the run's name (only peers that know
// the secret can compute the key).
func RendezvousKey(run, secret string) string {
	if secret == "" {
		return "dpadmm/" + run
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(run))
	return "dpadmm/" + hex.EncodeToString(m.Sum(nil)[:16])
}

// dhtRelaySource feeds AutoRelay with relay candidates from the DHT routing table, as
// Kubo does: on the public network most DHT servers also run a circuit-relay v2 service,
// and AutoRelay keeps only the candidates that speak the relay protocol. It returns no
// candidate until the DHT is up.
type dhtRelaySource struct{ kad atomic.Pointer[dht.IpfsDHT] }

func (s *dhtRelaySource) peers(ctx context.Context, num int) <-chan peer.AddrInfo {
	var out []peer.AddrInfo
	if kad := s.kad.Load(); kad != nil {
		ps := kad.Host().Peerstore()
		for _, p := range kad.RoutingTable().ListPeers() {
			if len(out) >= num {
				break
			}
			if ai := ps.PeerInfo(p); len(ai.Addrs) > 0 {
				out = append(out, ai)
			}
		}
	}
	ch := make(chan peer.AddrInfo, len(out))
	for _, ai := range out {
		ch <- ai
	}
	close(ch)
	return ch
}

// relayOptions are the host's circuit-relay v2 options:
//   - with cfg.Relays: the relay client and AutoRelay on those static relays; the gater
//     admits them after the membership is fixed, so that a member behind NAT keeps the
//     relay its relayed address names;
//   - else with cfg.NAT and cfg.Bootstrap: the relay client and AutoRelay with candidates
//     from the DHT routing table (returned source; startDHT plugs the DHT into it);
//   - with cfg.RelayService: a circuit-relay v2 service with go-libp2p's default limits,
//     which go-libp2p runs only while AutoNAT finds the node publicly reachable.
//
// AutoRelay reserves slots only while AutoNAT finds the node unreachable (private or not
// yet known): a publicly reachable node publishes its direct addresses alone.
func relayOptions(cfg Config, gater *memberGater) ([]libp2p.Option, *dhtRelaySource, error) {
	var opts []libp2p.Option
	var src *dhtRelaySource
	switch {
	case len(cfg.Relays) > 0:
		static := make([]peer.AddrInfo, 0, len(cfg.Relays))
		keep := map[peer.ID]bool{}
		for _, a := range cfg.Relays {
			ai, err := addrInfo(a)
			if err != nil {
				return nil, nil, fmt.Errorf("node: relay: %w", err)
			}
			static = append(static, *ai)
			keep[ai.ID] = true
		}
		gater.relays = keep
		// The static relays are the run's own: a failed reservation (the relay not yet
		// publicly reachable, or restarting) is retried after a minute rather than after
		// go-libp2p's hour, which suits relays picked from a large public set; and a lost
		// one is renewed within seconds (asking the static list costs nothing, go-libp2p
		// waits 30 s between asks): when the run starts every member closes its
		// connections to non-members, a relay's included, and the gater then admits the
		// relay again.
		opts = append(opts, libp2p.EnableRelay(), libp2p.EnableAutoRelayWithStaticRelays(static,
			autorelay.WithBackoff(time.Minute), autorelay.WithMinInterval(2*time.Second)))
	case cfg.NAT && len(cfg.Bootstrap) > 0:
		src = &dhtRelaySource{}
		// go-libp2p's defaults wait for 4 candidates or 3 minutes before the first
		// reservation and ask the source every 30 s: a node that knows one or two relay
		// servers would publish no dialable address for minutes. One candidate is
		// enough; the source is asked every 2 s; a failed candidate is retried after a
		// minute (not an hour).
		opts = append(opts, libp2p.EnableRelay(), libp2p.EnableAutoRelayWithPeerSource(src.peers,
			autorelay.WithMinCandidates(1), autorelay.WithBootDelay(0), autorelay.WithMinInterval(2*time.Second),
			autorelay.WithBackoff(time.Minute)))
	}
	if cfg.RelayService {
		opts = append(opts, libp2p.EnableRelay(), libp2p.EnableRelayService())
	}
	return opts, src, nil
}

// watchAddrs logs the host's published addresses whenever they change (at info level): a
// node behind NAT shows there the /p2p-circuit address AutoRelay obtained for it.
func (n *Node) watchAddrs() {
	sub, err := n.Host.EventBus().Subscribe(new(event.EvtLocalAddressesUpdated))
	if err != nil {
		n.log.Debug().Err(err).Msg("cannot watch the host's addresses")
		return
	}
	n.closers = append(n.closers, sub.Close)
	go func() {
		for range sub.Out() {
			n.log.Info().Interface("addrs", n.Host.Addrs()).Msg("published addresses changed")
		}
	}()
}

// allowRelayed lets the run's streams use limited connections: a member behind NAT that
// no hole punch reaches is reachable only through a circuit relay, and go-libp2p opens no
// stream over such a connection unless the context allows it. A relay limits each
// relayed connection (go-libp2p's default: 2 minutes, 128 KiB); a stream cut by it fails
// like any lost stream, and the hand-off is retried on a new connection.
func allowRelayed(ctx context.Context) context.Context {
	return network.WithAllowLimitedConn(ctx, "dpadmm run: members reached through a circuit relay")
}
