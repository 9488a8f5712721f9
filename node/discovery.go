package node

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/discovery/mdns"
	drouting "github.com/libp2p/go-libp2p/p2p/discovery/routing"
	dutil "github.com/libp2p/go-libp2p/p2p/discovery/util"
	"github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
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
		return fmt.Errorf("node: cannot reach %s: %w", addr, err)
	}
	return nil
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
	ok := 0
	for _, a := range n.cfg.Bootstrap {
		if err := n.dial(ctx, a); err != nil {
			n.log.Warn().Err(err).Str("addr", a).Msg("bootstrap peer unreachable")
			continue
		}
		ok++
	}
	if ok == 0 {
		return fmt.Errorf("node: none of the %d bootstrap peers is reachable", len(n.cfg.Bootstrap))
	}
	kad, err := dht.New(ctx, n.Host, dht.Mode(dht.ModeAutoServer))
	if err != nil {
		return fmt.Errorf("node: dht: %w", err)
	}
	n.closers = append(n.closers, kad.Close)
	if err := kad.Bootstrap(ctx); err != nil {
		return fmt.Errorf("node: dht bootstrap: %w", err)
	}
	rd := drouting.NewRoutingDiscovery(kad)
	ns := "dpadmm/" + n.cfg.Run
	dctx, cancel := context.WithCancel(ctx)
	n.closers = append(n.closers, func() error { cancel(); return nil })
	dutil.Advertise(dctx, rd, ns) // re-advertises in the background until dctx ends
	n.bg.Add(1)
	go func() {
		defer n.bg.Done()
		for dctx.Err() == nil {
			peers, err := rd.FindPeers(dctx, ns)
			if err == nil {
				for ai := range peers {
					if ai.ID == n.ID() || len(ai.Addrs) == 0 {
						continue
					}
					cctx, c := context.WithTimeout(dctx, 5*time.Second)
					n.Host.Connect(cctx, ai)
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
