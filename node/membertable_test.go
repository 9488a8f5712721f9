package node

import (
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
)

// TestMemberTable: nodes with the same membership share one read-only table; another
// order or another member is another table; a member listed twice has its first index.
func TestMemberTable(t *testing.T) {
	a, b, c := peer.ID("a"), peer.ID("b"), peer.ID("c")
	ms := []peer.ID{a, b, c, a}
	t1 := memberTableOf(ms)
	ms[1] = c // the caller's slice is not the table's
	t2 := memberTableOf([]peer.ID{a, b, c, a})
	if t1 != t2 || t1.ids[1] != b {
		t.Fatal("one membership, two tables (or the table shares the caller's slice)")
	}
	if t3 := memberTableOf([]peer.ID{b, a, c, a}); t3 == t1 {
		t.Fatal("another order shares the table")
	}
	if i, ok := t1.index(a); !ok || i != 0 {
		t.Fatalf("a at %d, %v; want its first index 0", i, ok)
	}
	if _, ok := t1.index("d"); ok {
		t.Fatal("a non-member found")
	}
	var none *memberTable
	if _, ok := none.index(a); ok {
		t.Fatal("a member of no membership")
	}
}
