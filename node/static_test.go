package node

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// FuzzParseStatic: any input gives a static membership or an error, never a panic. A
// parsed file has at least one member, distinct decodable peer IDs (IDs returns them in
// order), total rows at least the member count and a holder in range; PeerAddrs lists
// every address with its member's /p2p suffix; and the file re-encodes to one that parses
// to the same value.
func FuzzParseStatic(f *testing.F) {
	ids := []string{"12D3KooWJWoaqZhDaoEFshF7Rh1bpY9ohihFhzcW6d69Lr2NASuq", "12D3KooWRBhwfeP2Y4TCx1SM6s9rUoHhR5STiGwxBhgFRcw3AERX",
		"12D3KooWFfa5yKNn5xVtj3UoDNKgCdEPUkBfZAFnJvRZB3Gc3ZWr"}
	for _, sf := range []StaticFile{
		{Run: "procs", TotalRows: 300, Holder: 2, Members: []StaticMember{
			{ID: ids[0], Addrs: []string{"/ip4/127.0.0.1/tcp/4001"}}, {ID: ids[1], Addrs: []string{"/ip4/127.0.0.1/tcp/4002"}},
			{ID: ids[2], Addrs: []string{"/ip4/127.0.0.1/tcp/4003", "/ip6/::1/tcp/4003"}}}},
		{Run: "gprocs", TotalRows: 2, Members: []StaticMember{{ID: ids[0]}, {ID: ids[1]}}, ConfigHash: strings.Repeat("ab", 32)},
		{Run: "dup", TotalRows: 5, Members: []StaticMember{{ID: ids[0]}, {ID: ids[0]}}},
		{Run: "holder", TotalRows: 5, Holder: 1, Members: []StaticMember{{ID: ids[0]}}},
	} {
		b, _ := json.Marshal(sf)
		f.Add(b)
	}
	f.Add([]byte(`{"run":"r","members":[{"id":"x"}],"total_rows":1}`))
	f.Add([]byte(`{"run":"r","members":[],"total_rows":0,"extra":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		sf, err := ParseStatic(b)
		if err != nil {
			return
		}
		n := len(sf.Members)
		if n < 1 || sf.TotalRows < n || sf.Holder < 0 || sf.Holder >= n {
			t.Fatalf("accepted %d members, total rows %d, holder %d", n, sf.TotalRows, sf.Holder)
		}
		got := sf.IDs()
		seen := map[string]bool{}
		addrs := 0
		for i, p := range got {
			if err := p.Validate(); err != nil {
				t.Fatalf("member %d: ID %q: %v", i, sf.Members[i].ID, err)
			}
			if seen[p.String()] {
				t.Fatalf("member %d repeated", i)
			}
			seen[p.String()] = true
			addrs += len(sf.Members[i].Addrs)
		}
		pa := sf.PeerAddrs()
		if len(pa) != addrs {
			t.Fatalf("%d peer addresses for %d member addresses", len(pa), addrs)
		}
		k := 0
		for i, m := range sf.Members {
			for _, a := range m.Addrs {
				if pa[k] != a+"/p2p/"+sf.Members[i].ID {
					t.Fatalf("peer address %d: %q", k, pa[k])
				}
				k++
			}
		}
		again, _ := json.Marshal(sf)
		sf2, err := ParseStatic(again)
		if err != nil || !reflect.DeepEqual(sf, sf2) {
			t.Fatalf("re-encoded file: %v, %+v vs %+v", err, sf2, sf)
		}
	})
}
