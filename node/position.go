package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// A member's ledger position, as the others see it. Every hand-off a member takes from
// node j is a release that j's ledger recorded before sending it (a noisy update or a
// forward entry), so the hand-offs the members took from j are at most the entries of
// j's ledger. A node whose data directory was emptied or restored from an older backup
// (its ledger with it) holds fewer: before its walk starts it asks the members how many
// hand-offs they took from it, and refuses to run when they count more than its ledger
// holds, instead of spending its privacy budget a second time under a count that
// forgets the first.

// PositionRequest is the type of the message a walk node sends over wire.FinalProtocol to
// ask a member how many of its hand-offs that member took; the answer is a ctlMsg of type
// PositionAnswer whose Taken says it.
const (
	PositionRequest = "position-request"
	PositionAnswer  = "position"
)

// ErrLedgerBehind is returned by Run when a member took more hand-offs from this node than
// its ledger records as releases to that member.
var ErrLedgerBehind = errors.New("node: a member took more hand-offs from this node than its ledger records")

// positionWait bounds how long a starting node waits for the members' answers (those
// that do not answer in time, or are not up, count nothing).
const positionWait = 2 * time.Second

// noteTaken counts a hand-off taken from member j (walk.CustodyAccepted).
func (n *Node) noteTaken(j int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.taken == nil {
		n.taken = map[int]uint64{}
	}
	n.taken[j]++
}

// answerPosition answers a member's PositionRequest with the hand-offs taken from it.
func (n *Node) answerPosition(s network.Stream, from peer.ID) {
	j := n.memberIndex(from)
	if j < 0 {
		return
	}
	n.mu.Lock()
	k := n.taken[j]
	n.mu.Unlock()
	s.Write(marshal(ctlMsg{Type: PositionAnswer, Run: n.cfg.Run, Hash: n.hash, Taken: k}))
}

// checkPosition asks every other member how many hand-offs it took from this node and
// fails with ErrLedgerBehind when one took more than this node's ledger records as
// releases to it (each entry names its recipient).
func (n *Node) checkPosition(ctx context.Context) error {
	n.mu.Lock()
	ms := append([]peer.ID(nil), n.members...)
	n.mu.Unlock()
	es, err := n.store.Ledger()
	if err != nil {
		return err
	}
	sent := map[string]uint64{}
	for _, e := range es {
		sent[e.Recipient]++
	}
	ctx, cancel := context.WithTimeout(ctx, positionWait)
	defer cancel()
	req := marshal(ctlMsg{Type: PositionRequest, Run: n.cfg.Run, Hash: n.hash})
	var (
		mu     sync.Mutex
		behind []string
		wg     sync.WaitGroup
	)
	for _, p := range ms {
		if p == n.ID() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, ok := n.askPosition(ctx, p, req)
			n.log.Debug().Str("member", shortID(p)).Bool("answered", ok).Uint64("taken", k).Uint64("ledger", sent[p.String()]).
				Msg("ledger position checked with a member")
			if ok && k > sent[p.String()] {
				mu.Lock()
				behind = append(behind, fmt.Sprintf("%s took %d, the ledger records %d releases to it", shortID(p), k, sent[p.String()]))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(behind) > 0 {
		slices.Sort(behind)
		return fmt.Errorf("%w (%s). The data directory was emptied or restored from an older backup: the releases it no "+
			"longer records were made and cannot be charged again from here. Restore the latest data directory, or take part "+
			"in a new run (a new --run) with a new data directory", ErrLedgerBehind, strings.Join(behind, "; "))
	}
	return nil
}

// askPosition asks p once; ok is false when p does not answer in time or answers
// something else.
func (n *Node) askPosition(ctx context.Context, p peer.ID, req []byte) (uint64, bool) {
	m, _, ok := n.askControl(ctx, p, req)
	if !ok || m.Type != PositionAnswer || m.Hash != n.hash {
		return 0, false
	}
	return m.Taken, true
}
