package node

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dpadmm/dpadmm/node/store"
	"github.com/libp2p/go-libp2p"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/rs/zerolog"
)

// TestBootstrapDHTRendezvous: a small network of plain libp2p hosts running only a
// Kademlia DHT (they know nothing of dpadmm); two dpadmm nodes given one of them as
// --bootstrap find each other through the rendezvous on the run name and complete a run.
func TestBootstrapDHTRendezvous(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var plain []host.Host
	for range 3 {
		h, err := libp2p.New(libp2p.ListenAddrStrings(loopback...))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		kad, err := dht.New(ctx, h, dht.Mode(dht.ModeServer))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { kad.Close() })
		for _, o := range plain {
			if err := h.Connect(ctx, peer.AddrInfo{ID: o.ID(), Addrs: o.Addrs()}); err != nil {
				t.Fatal(err)
			}
		}
		plain = append(plain, h)
	}
	boot := func(h host.Host) string { return h.Addrs()[0].String() + "/p2p/" + h.ID().String() }
	sh := shards(t, 2)
	const hops = 20
	nodes := make([]*Node, 2)
	for i := range nodes {
		c := baseConfig("dhtrun", sh[i], hops)
		c.DataDir = t.TempDir()
		c.Bootstrap = []string{boot(plain[i]), "/ip4/127.0.0.1/tcp/1/p2p/" + plain[2].ID().String()} // second one unreachable
		c.Logger = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
		if i == 0 {
			c.Start, c.MinPeers, c.JoinWindow = true, 2, 200*time.Millisecond
		}
		nd, err := New(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		nodes[i] = nd
	}
	models := runAll(t, ctx, nodes)
	if !sameBits(models[0].Model, models[1].Model) || models[0].Nodes != 2 {
		t.Fatalf("models %+v / %+v", models[0], models[1])
	}
	if nodes[0].Store().Entries()+nodes[1].Store().Entries() != hops {
		t.Fatal("ledger entries do not add up to the hops")
	}
}

func TestBootstrapUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sh := shards(t, 1)
	c := baseConfig("noboot", sh[0], 5)
	c.DataDir = t.TempDir()
	c.Bootstrap = []string{"/ip4/127.0.0.1/tcp/1/p2p/12D3KooWGDrzQ4N534RWuWDSTkxuY2RRBvKM9XxFa4cb5dKJD2Nq"}
	if _, err := New(ctx, c); err == nil || !strings.Contains(err.Error(), "bootstrap") {
		t.Fatalf("unreachable bootstrap: %v", err)
	}
	c.Bootstrap = []string{"not-a-multiaddr"}
	if _, err := New(ctx, c); err == nil {
		t.Fatal("bad bootstrap address accepted")
	}
}

func TestPortInUse(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sh := shards(t, 1)
	c := baseConfig("port", sh[0], 5)
	c.DataDir = t.TempDir()
	a, err := New(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	c.DataDir = t.TempDir()
	c.Listen = []string{a.Host.Addrs()[0].String()}
	if b, err := New(ctx, c); err == nil {
		b.Close()
		t.Fatal("second node bound the same port")
	} else if !strings.Contains(err.Error(), "listen") {
		t.Fatalf("unclear error: %v", err)
	}
}

// TestBootstrapAddrs: 'default' expands to the public network's bootstrap peers, a full
// /p2p address is kept, and an address that names no peer (and is not a /dnsaddr) is
// refused with a clear error.
func TestBootstrapAddrs(t *testing.T) {
	ctx := context.Background()
	out, err := bootstrapAddrs(ctx, []string{DefaultBootstrap})
	if err != nil || len(out) < 4 {
		t.Fatalf("default: %v %v", out, err)
	}
	for _, a := range out {
		if _, err := addrInfo(a); err != nil {
			t.Errorf("default peer %s: %v", a, err)
		}
	}
	full := "/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWGzxzKZYveHXtpG6AsrUJBcWxHBFS2HsEoGTxrMLvKXtf"
	if out, err := bootstrapAddrs(ctx, []string{full}); err != nil || len(out) != 1 || out[0] != full {
		t.Fatalf("full address: %v %v", out, err)
	}
	if _, err := bootstrapAddrs(ctx, []string{"/ip4/127.0.0.1/tcp/4001"}); err == nil || !strings.Contains(err.Error(), "/p2p/<peer ID>") {
		t.Fatalf("address without a peer: %v", err)
	}
}

// TestRendezvousKey: without a secret the key names the run; with one it is a keyed hash
// that hides the name, differs per secret and per run, and is the same for every member.
func TestRendezvousKey(t *testing.T) {
	if k := RendezvousKey("demo", ""); k != "dpadmm/demo" {
		t.Fatalf("open key %q", k)
	}
	a, b, c := RendezvousKey("demo", "s1"), RendezvousKey("demo", "s2"), RendezvousKey("demo2", "s1")
	if strings.Contains(a, "demo") || a == b || a == c || a != RendezvousKey("demo", "s1") || len(a) != len("dpadmm/")+32 {
		t.Fatalf("keys %q %q %q", a, b, c)
	}
}

// TestRelayOptions: --relay peers must be full /p2p addresses; the gater admits them (and
// no other non-member) once the membership is fixed; without them a node with NAT and
// bootstrap peers gets a DHT relay source, which offers nothing before the DHT is up;
// without NAT or bootstrap peers there is no relay client option at all.
func TestRelayOptions(t *testing.T) {
	const relayID = "12D3KooWGzxzKZYveHXtpG6AsrUJBcWxHBFS2HsEoGTxrMLvKXtf"
	const otherID = "12D3KooWGDrzQ4N534RWuWDSTkxuY2RRBvKM9XxFa4cb5dKJD2Nq"
	g := &memberGater{}
	if _, _, err := relayOptions(Config{
		Network: Network{Relays: []string{"/ip4/5.0.0.1/tcp/4001"}},
	}, g); err == nil {
		t.Fatal("relay without a peer ID accepted")
	}
	opts, src, err := relayOptions(Config{
		Network: Network{Relays: []string{"/ip4/5.0.0.1/tcp/4001/p2p/" + relayID}, NAT: true, Bootstrap: []string{"x"}},
	}, g)
	if err != nil || len(opts) != 2 || src != nil {
		t.Fatalf("static relays: %d options, source %v, %v", len(opts), src, err)
	}
	relay, _ := peer.Decode(relayID)
	other, _ := peer.Decode(otherID)
	g.fix(nil)
	if !g.allowed(relay) || g.allowed(other) {
		t.Fatalf("after fix: relay allowed %v, other allowed %v", g.allowed(relay), g.allowed(other))
	}
	g2 := &memberGater{}
	opts, src, err = relayOptions(Config{
		Network: Network{NAT: true, Bootstrap: []string{"x"}},
	}, g2)
	if err != nil || len(opts) != 2 || src == nil || g2.relays != nil {
		t.Fatalf("dht source: %d options, source %v, %v", len(opts), src, err)
	}
	n := 0
	for range src.peers(context.Background(), 4) {
		n++
	}
	if n != 0 {
		t.Fatalf("%d candidates before the DHT is up", n)
	}
	for _, c := range []Config{{
		Network: Network{NAT: true},
	}, {
		Network: Network{Bootstrap: []string{"x"}},
	}} {
		if opts, src, _ := relayOptions(c, &memberGater{}); len(opts) != 0 || src != nil {
			t.Fatalf("%+v: %d options", c, len(opts))
		}
	}
	if opts, _, _ := relayOptions(Config{
		Network: Network{RelayService: true},
	}, &memberGater{}); len(opts) != 2 {
		t.Fatalf("relay service: %d options", len(opts))
	}
}

// TestRelayInUseAdmitted: once the membership is fixed, a relay named in a member's
// published circuit address is admitted by the gater and kept by closeToMembers (a relay
// found through the DHT), while any other non-member is refused.
func TestRelayInUseAdmitted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sh := shards(t, 2)
	dir := t.TempDir()
	self, err := store.DataDirPeerID(dir)
	if err != nil {
		t.Fatal(err)
	}
	mk := func() peer.ID {
		k, _, err := crypto.GenerateEd25519Key(nil)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := peer.IDFromPrivateKey(k)
		return id
	}
	member, relay, other := mk(), mk(), mk()
	c := baseConfig("relayuse", sh[0], 5)
	c.DataDir, c.Members, c.Holder, c.Weight = dir, []peer.ID{self, member}, 0, 1
	c.Logger = zerolog.Nop()
	n, err := New(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	n.mu.Lock()
	n.setMemberList([]peer.ID{self, member}, 0)
	n.mu.Unlock()
	circ, err := ma.NewMultiaddr("/ip4/5.0.0.9/tcp/4001/p2p/" + relay.String() + "/p2p-circuit")
	if err != nil {
		t.Fatal(err)
	}
	n.Host.Peerstore().AddAddr(member, circ, time.Hour)
	n.gater.fix([]peer.ID{self, member})
	if !n.relayInUse(relay) || n.relayInUse(other) || n.relayInUse(member) {
		t.Fatalf("relayInUse: relay %v, other %v, member %v", n.relayInUse(relay), n.relayInUse(other), n.relayInUse(member))
	}
	if !n.gater.allowed(relay) || n.gater.allowed(other) || !n.gater.allowed(member) {
		t.Fatalf("gater: relay %v, other %v, member %v", n.gater.allowed(relay), n.gater.allowed(other), n.gater.allowed(member))
	}
}

func TestHandshakeHint(t *testing.T) {
	err := errors.New("failed to negotiate security protocol: context deadline exceeded")
	if h := handshakeHint(err, true); !strings.Contains(h, "--swarm-key") {
		t.Errorf("private: %q", h)
	}
	if h := handshakeHint(err, false); !strings.Contains(h, "closed run") {
		t.Errorf("open: %q", h)
	}
	if h := handshakeHint(errors.New("connection refused"), true); h != "" {
		t.Errorf("other error: %q", h)
	}
}
