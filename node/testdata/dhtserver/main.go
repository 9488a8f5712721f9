// Command dhtserver runs a plain libp2p host as a Kademlia DHT server configured like a
// server of the public Amino network (Kubo's WAN DHT): protocol /ipfs/kad/1.0.0, server
// mode, the public query and routing-table filters, and only public addresses kept in its
// peerstore and provider records; it also serves AutoNAT dial-backs, as Kubo does. It
// knows nothing of dpadmm. With -relay-service it also serves circuit-relay v2 (Kubo's
// default) once AutoNAT finds it publicly reachable. The network-namespace tests of package node run it as a
// bootstrap peer:
//
//	dhtserver -listen /ip4/0.0.0.0/tcp/4001 [-peer MULTIADDR]... [-addr-file FILE] [-relay-service]
//
// It writes its dialable multiaddrs (with /p2p/<peer ID>), one per line, to -addr-file
// and to stdout, then serves until killed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/libp2p/go-libp2p"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(s string) error { *m = append(*m, s); return nil }

func main() {
	var listen, peers multi
	flag.Var(&listen, "listen", "listen multiaddr (repeatable)")
	flag.Var(&peers, "peer", "DHT server to connect to at start, multiaddr with /p2p/<peer ID> (repeatable)")
	addrFile := flag.String("addr-file", "", "write the dialable multiaddrs here once listening")
	relay := flag.Bool("relay-service", false, "serve circuit-relay v2 (go-libp2p's default limits)")
	flag.Parse()
	if err := run(listen, peers, *addrFile, *relay); err != nil {
		fmt.Fprintln(os.Stderr, "dhtserver:", err)
		os.Exit(1)
	}
}

func run(listen, peers []string, addrFile string, relay bool) error {
	if len(listen) == 0 {
		listen = []string{"/ip4/0.0.0.0/tcp/4001"}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := []libp2p.Option{libp2p.ListenAddrStrings(listen...), libp2p.EnableNATService()}
	if relay {
		opts = append(opts, libp2p.EnableRelayService())
	}
	h, err := libp2p.New(opts...)
	if err != nil {
		return err
	}
	defer h.Close()
	public := func(as []ma.Multiaddr) []ma.Multiaddr { return ma.FilterAddrs(as, manet.IsPublicAddr) }
	kad, err := dht.New(ctx, h,
		dht.Mode(dht.ModeServer),
		dht.ProtocolPrefix("/ipfs"), // /ipfs/kad/1.0.0, the Amino DHT protocol
		dht.QueryFilter(dht.PublicQueryFilter),
		dht.RoutingTableFilter(dht.PublicRoutingTableFilter),
		dht.AddressFilter(public),
	)
	if err != nil {
		return err
	}
	defer kad.Close()
	for _, a := range peers {
		ai, err := peer.AddrInfoFromString(a)
		if err != nil {
			return fmt.Errorf("bad -peer %q: %w", a, err)
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = h.Connect(cctx, *ai)
		cancel()
		if err != nil {
			return fmt.Errorf("cannot reach -peer %s: %w", a, err)
		}
	}
	if err := kad.Bootstrap(ctx); err != nil {
		return err
	}
	var lines []string
	for _, a := range public(h.Addrs()) {
		lines = append(lines, a.String()+"/p2p/"+h.ID().String())
	}
	if len(lines) == 0 {
		return fmt.Errorf("no public listen address among %v", h.Addrs())
	}
	out := strings.Join(lines, "\n") + "\n"
	fmt.Print(out)
	if addrFile != "" {
		if err := os.WriteFile(addrFile+".tmp", []byte(out), 0o644); err != nil {
			return err
		}
		if err := os.Rename(addrFile+".tmp", addrFile); err != nil {
			return err
		}
	}
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			fmt.Fprintf(os.Stderr, "%s routing table %d peers, %d connected\n",
				time.Now().UTC().Format("15:04:05.000"), kad.RoutingTable().Size(), len(h.Network().Peers()))
		}
	}
}
