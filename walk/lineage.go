package walk

import (
	"fmt"
	"math"
)

// Evidence is what a hand-off carries to show that its sender holds the token
// legitimately: the hand-off the sender itself received last from another member (its
// signer, and the epoch and hop of that token), checked by signature in the driver. A
// hand-off without evidence is the origin's: the member that created the initial token
// (the run's first holder in a static membership, the starter otherwise).
type Evidence struct {
	Present bool
	Signer  int // member index of the signer (the sender of the hand-off the sender received)
	Epoch   uint64
	Hop     uint64
}

// SelfHopBound is the -log2 probability below which a run of consecutive self-hand-offs
// is treated as impossible: 2^-64 per hand-off, so a run of 2^40 hops meets a refused
// honest hand-off with probability at most 2^-24.
const SelfHopBound = 64

// MaxSelfHops returns the longest run of consecutive hops one member makes alone that a
// receiver accepts: the smallest j with (1/n)^j <= 2^-SelfHopBound, for the uniform walk
// on the complete graph of n members (which hands the token to its holder itself with
// probability 1/n). For n <= 1 every hop is a self-hop and the bound is unlimited.
func MaxSelfHops(n int) uint64 {
	if n <= 1 {
		return math.MaxUint64
	}
	return uint64(math.Ceil(SelfHopBound / math.Log2(float64(n))))
}

// CheckLineage is the contiguity rule for a hand-off of the token (epoch, hop) from member
// sender, whose signature and evidence signature the driver has verified. A sender that
// received hop h0 from another member and stepped j >= 1 times alone sends hop h0+j; the
// receiver accepts j-1 <= MaxSelfHops(nodes) hand-offs to itself in a row. Evidence must be signed by another member
// (a node's hand-offs to itself carry no signature) and at an epoch not above the token's
// (regenerations raise the epoch, never lower it). Without evidence the sender must be
// the origin, holding the initial token (hop 0) and sending hop j after j-1 <=
// MaxSelfHops(nodes) hand-offs to itself.
//
// What it stops: a single member jumping the hop counter (a token at hop K made the
// receiver release the attacker's model as the final). What it does not stop: two
// colluding members signing evidence for each other.
func CheckLineage(epoch, hop uint64, ev Evidence, sender, origin, nodes int) error {
	limit := MaxSelfHops(nodes)
	if !ev.Present {
		if sender != origin {
			return fmt.Errorf("walk: hand-off at hop %d without evidence from member %d, which did not create the initial token (member %d did)", hop, sender, origin)
		}
		if hop > limit+1 {
			return fmt.Errorf("walk: hand-off at hop %d without evidence: the origin hands the token to itself at most %d times in a row", hop, limit)
		}
		return nil
	}
	switch {
	case ev.Signer < 0 || ev.Signer >= nodes:
		return fmt.Errorf("walk: evidence signed by member %d of %d", ev.Signer, nodes)
	case ev.Signer == sender:
		return fmt.Errorf("walk: evidence signed by the sender itself (member %d)", sender)
	case ev.Hop >= hop:
		return fmt.Errorf("walk: hand-off at hop %d with evidence at hop %d: hops must increase", hop, ev.Hop)
	case hop-ev.Hop-1 > limit:
		return fmt.Errorf("walk: hand-off at hop %d with evidence at hop %d: %d hand-offs to itself in a row, at most %d", hop, ev.Hop, hop-ev.Hop-1, limit)
	case ev.Epoch > epoch:
		return fmt.Errorf("walk: hand-off at epoch %d with evidence at the later epoch %d", epoch, ev.Epoch)
	}
	return nil
}

// CheckFinalLineage is the rule for a final model at hop K and epoch published by member
// releaser: the releaser received hop K (evidence at hop K and the same epoch, whose
// digest the driver matched to the published model), or received an earlier hop h0 and
// handed hops h0+1..K to itself (at most MaxSelfHops), or is the origin and handed hops
// 1..K to itself.
func CheckFinalLineage(epoch, k uint64, ev Evidence, releaser, origin, nodes int) error {
	if ev.Present && ev.Hop == k {
		switch {
		case ev.Signer < 0 || ev.Signer >= nodes || ev.Signer == releaser:
			return fmt.Errorf("walk: final model with evidence signed by member %d (releaser %d)", ev.Signer, releaser)
		case ev.Epoch != epoch:
			return fmt.Errorf("walk: final model at epoch %d with evidence at epoch %d", epoch, ev.Epoch)
		}
		return nil
	}
	// Hop K reached alone: the releaser handed hops h0+1..K to itself (K-h0 self-hand-offs
	// after the hand-off of hop h0 it received), the count CheckLineage makes for a
	// hand-off of hop K+1.
	return CheckLineage(epoch, k+1, ev, releaser, origin, nodes)
}

// TokenID names one token by its epoch, hop and digest (TokenDigest or the driver's).
type TokenID struct{ Epoch, Hop, Digest uint64 }

// EvidenceUse records which token a node took on each evidence, so that a member cannot
// make it spend an update twice on one hand-off it received (re-sending the continuation
// under new epochs, each above the fence). It remembers the last Max evidences (0:
// MaxEvidenceKept), oldest forgotten first. Records and Load carry it across a restart
// (CustodySnapshot.Used): a restarted node does not take a second token on an evidence
// it used before it stopped, with one exception (Restarted): a token of a later epoch
// than the one taken before the restart, once per evidence.
//
// Why the exception. While a node is down, the member whose hand-off it had taken
// regenerates its release under a new epoch (walk.Custody: the successor went down
// before the backup was released). With no other member up, that member walks on alone,
// handing the token to itself, and every hand-off it makes keeps the evidence of that
// release: the evidence the restarted node used. Refusing it left two members that
// refuse each other for good (the restarted node's own continuation is stale at the
// other member, whose lineage is newer), so an ordinary restart could stall a run. From
// the restarted node's side an honest regeneration and a member re-sending under a new
// epoch to burn its updates look the same; the exception bounds what the second can
// gain: per restart of the node (which the member does not control), one update per
// evidence of a token taken within Depth + RewindSlack hops of the highest hop the node
// had seen (Custody.Restore), so at most that many updates, each needing an epoch above
// the one used and a token above the node's fence, and each charged in the node's
// ledger like every update. Within one life of the node an evidence buys one token,
// whatever its epoch.
type EvidenceUse struct {
	Max   int
	used  map[Evidence]TokenID
	order []EvidenceRecord
	// prior holds the evidences used before the last restart (Restarted) and not used
	// again since.
	prior map[Evidence]bool
}

// EvidenceRecord is one use: the token ID taken on the evidence Ev.
type EvidenceRecord struct {
	Ev Evidence `json:"ev"`
	ID TokenID  `json:"id"`
}

// MaxEvidenceKept is EvidenceUse's default memory: far more hand-offs than a node takes
// between two visits of one lineage position.
const MaxEvidenceKept = 4096

// Reused reports whether ev was already used for a token other than id (a re-delivery of
// the same token is not a reuse), except for the one token of a later epoch that an
// evidence used before the last restart may still buy.
func (u *EvidenceUse) Reused(ev Evidence, id TokenID) bool {
	prev, ok := u.used[ev]
	return ok && prev != id && !u.renewable(ev, prev, id)
}

// renewable: ev was used for prev before the last restart, not since, and id is of a
// later epoch.
func (u *EvidenceUse) renewable(ev Evidence, prev, id TokenID) bool {
	return u.prior[ev] && id.Epoch > prev.Epoch
}

// Use records that token id was taken on evidence ev. A use of an evidence already
// recorded keeps its first record (Reused refuses any other token on it), unless it is
// the renewal after a restart that Reused allows: then id replaces the record, now of
// this life.
func (u *EvidenceUse) Use(ev Evidence, id TokenID) {
	if u.used == nil {
		u.used = map[Evidence]TokenID{}
	}
	if prev, ok := u.used[ev]; ok {
		if prev == id || !u.renewable(ev, prev, id) {
			return
		}
		delete(u.prior, ev)
		// A new slice: Records' earlier results stay as they were.
		order := make([]EvidenceRecord, 0, len(u.order))
		for _, r := range u.order {
			if r.Ev != ev {
				order = append(order, r)
			}
		}
		u.order = append(order, EvidenceRecord{Ev: ev, ID: id})
		u.used[ev] = id
		return
	}
	limit := u.Max
	if limit <= 0 {
		limit = MaxEvidenceKept
	}
	u.order = append(u.order, EvidenceRecord{Ev: ev, ID: id})
	if len(u.order) > limit {
		delete(u.used, u.order[0].Ev)
		delete(u.prior, u.order[0].Ev)
		u.order = u.order[1:]
	}
	u.used[ev] = id
}

// Restarted marks the uses recorded so far for which recent(token taken) holds (every
// use when recent is nil) as made before a restart: each such evidence may buy one more
// token, of a later epoch than the one recorded (see EvidenceUse). Custody.Restore calls
// it once the uses of the snapshot and of the held token are loaded, with the uses of
// tokens within Depth + RewindSlack hops of the highest hop seen: a regeneration
// re-releases a backup at most Depth acked hand-offs behind the walk.
func (u *EvidenceUse) Restarted(recent func(TokenID) bool) {
	u.prior = make(map[Evidence]bool, len(u.used))
	for ev, id := range u.used {
		if recent == nil || recent(id) {
			u.prior[ev] = true
		}
	}
}

// Records returns the uses remembered, oldest first. The slice is shared with u, whose
// later uses never modify its elements (they append past its end or drop from its
// start); the caller must not modify it.
func (u *EvidenceUse) Records() []EvidenceRecord {
	return u.order[:len(u.order):len(u.order)]
}

// Load replaces the uses remembered with rs (oldest first; the last Max are kept), all of
// this life (Restarted marks them as made before a restart).
func (u *EvidenceUse) Load(rs []EvidenceRecord) {
	u.used, u.order, u.prior = nil, nil, nil
	for _, r := range rs {
		u.Use(r.Ev, r.ID)
	}
}
