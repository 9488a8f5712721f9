//go:build mdns

package node

import (
	"context"
	"testing"
	"time"
)

// TestMDNSDiscovery: two nodes with no addresses of each other find each other by mDNS
// and complete a run. Multicast must work between them: in one process on a host with a
// multicast-capable interface, or (for separate hosts) in network namespaces joined by a
// veth bridge. It is behind the mdns build tag because CI containers often have no
// multicast route:
//
//	go test -tags mdns -run MDNSDiscovery -v ./node/
func TestMDNSDiscovery(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sh := shards(t, 2)
	const hops = 10
	nodes := make([]*Node, 2)
	for i := range nodes {
		c := baseConfig("mdnsrun", sh[i], hops)
		c.DataDir, c.MDNS, c.Listen = t.TempDir(), true, []string{"/ip4/0.0.0.0/tcp/0"}
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
	if !sameBits(models[0].Model, models[1].Model) {
		t.Fatal("models differ")
	}
}
