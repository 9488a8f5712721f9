package node

import (
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"sync"

	"github.com/libp2p/go-libp2p/core/peer"
)

// memberTable is an immutable index of a membership: the members in order and each
// one's first position. Nodes of one process with the same membership (a testnet's
// in-process hosts) share one (memberTableOf): a table per node costs n^2 entries, a
// third of the heap at 1,000 hosts. Nothing writes to a table after it is built.
type memberTable struct {
	ids []peer.ID
	at  map[peer.ID]int
}

func (t *memberTable) index(p peer.ID) (int, bool) {
	if t == nil {
		return 0, false
	}
	i, ok := t.at[p]
	return i, ok
}

// memberTables holds the tables built lately, by the hash of their member list (a few:
// a process runs one or a few memberships at a time).
var memberTables = struct {
	sync.Mutex
	m map[[32]byte]*memberTable
}{m: map[[32]byte]*memberTable{}}

const memberTablesMax = 8

// memberTableOf returns the table of ms (shared with any node of the process that has
// the same members in the same order).
func memberTableOf(ms []peer.ID) *memberTable {
	h := sha256.New()
	for _, p := range ms {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	var k [32]byte
	h.Sum(k[:0])
	memberTables.Lock()
	defer memberTables.Unlock()
	if t := memberTables.m[k]; t != nil && slices.Equal(t.ids, ms) {
		return t
	}
	t := &memberTable{ids: append([]peer.ID(nil), ms...), at: make(map[peer.ID]int, len(ms))}
	for i, p := range ms {
		if _, dup := t.at[p]; !dup {
			t.at[p] = i // the first index, as a scan finds it
		}
	}
	if len(memberTables.m) >= memberTablesMax {
		clear(memberTables.m)
	}
	memberTables.m[k] = t
	return t
}
