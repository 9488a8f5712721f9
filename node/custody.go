package node

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/rs/zerolog"

	"github.com/dpadmm/dpadmm/node/drive"
	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/node/wire"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/walk"
)

// This file binds the node to walk.Custody, which holds every rule of the token's fault
// tolerance (docs/fault-tolerance.md): the fence, the backups and their release chain,
// regeneration, the epoch bounds and evictions, the slow fallback and the end of the
// walk at hop K. The node only maps: wall-clock time to ticks (fallback.go), heartbeats
// to PeerDown/PeerUp (heartbeat.go), hand-off frames, their one-byte acks and release
// frames to custody messages, and the machine's Ready to the ledger, the inbox and
// checkpoint journals, signed frames and release streams, in the order the Ready
// prescribes.

// MaxEpoch is the largest epoch any token or final model may carry (walk.MaxEpoch).
const MaxEpoch = walk.MaxEpoch

type relMsg struct {
	from peer.ID
	r    wire.Release
}

func markOf(t walk.Token) store.Mark {
	return store.Mark{Epoch: t.Epoch, Hop: t.Hop, Digest: walk.TokenDigest(t)}
}

// rawID returns the (epoch, hop) of an encoded token written by this node.
func rawID(raw []byte) (uint64, uint64) {
	if len(raw) < wire.TokenHeader {
		return 0, 0
	}
	return binary.LittleEndian.Uint64(raw[9:]), binary.LittleEndian.Uint64(raw[17:])
}

// pid returns p.String(), remembered: the peer IDs of a run are few and their base58
// form is written into every checkpoint.
func (n *Node) pid(p peer.ID) string {
	if v, ok := n.pidStr.Load(p); ok {
		return v.(string)
	}
	s := idString(p)
	n.pidStr.Store(p, s)
	return s
}

// memberPID returns n.pid(ms[i]) from a table of the membership ms (the read-only slice
// of the member table, fixed once), built at its first use: a checkpoint names the
// recipient and predecessor of each of its up to 4D+4 backups.
func (n *Node) memberPID(ms []peer.ID, i int) string {
	w := &n.walk
	if len(ms) != len(w.pidsOf) || len(ms) > 0 && &ms[0] != &w.pidsOf[0] {
		w.pidsOf, w.pids = ms, make([]string, len(ms))
		for j, p := range ms {
			w.pids[j] = n.pid(p)
		}
	}
	return w.pids[i]
}

// peerOf returns peer.Decode(s), remembered for the IDs this node wrote itself (pid).
func (n *Node) peerOf(s string) (peer.ID, error) {
	if v, ok := n.strPid.Load(s); ok {
		return v.(peer.ID), nil
	}
	p, err := peer.Decode(s)
	if err == nil {
		if _, known := n.pidStr.Load(p); known {
			n.strPid.Store(s, p)
		}
	}
	return p, err
}

// memberIndex returns p's index in the membership, -1 if it is not a member.
func (n *Node) memberIndex(p peer.ID) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if i, ok := n.memberAt.index(p); ok {
		return i
	}
	return -1
}

// idStrings remembers peer.ID.String (base58) for the IDs of this process's
// memberships: every node of an in-process network names every member once, a million
// encodings at 1,000 hosts.
var idStrings sync.Map

// idString is p.String(), remembered.
func idString(p peer.ID) string {
	if v, ok := idStrings.Load(p); ok {
		return v.(string)
	}
	s := p.String()
	idStrings.Store(p, s)
	return s
}

// indexOf is memberIndex for a peer ID as written in a checkpoint ("" or unknown: -1).
func (n *Node) indexOf(s string) int {
	if s == "" {
		return -1
	}
	p, err := n.peerOf(s)
	if err != nil {
		return -1
	}
	return n.memberIndex(p)
}

// custodyConfig returns the machine's configuration: the node's durations in ticks
// (fallback.go), its depth, K and fault injection, and a re-send source seeded with seed.
func (n *Node) custodyConfig(seed [2]uint64) walk.CustodyConfig {
	cc := walk.CustodyConfig{Rand: rand.New(rand.NewPCG(seed[0], seed[1])), AckTimeout: n.ticks(n.cfg.AckTimeout),
		Depth: n.cfg.Depth, Hops: n.cfg.Hops, PauseAtHop: n.cfg.PauseAtHop, PauseAfterStep: n.cfg.PauseAfterStep}
	switch {
	case n.cfg.FallbackTimeout > 0:
		cc.FallbackTimeout = n.ticks(n.cfg.FallbackTimeout)
	case n.cfg.FallbackTimeout == 0:
		cc.FallbackFloor = n.ticks(n.fallbackFloor())
	}
	return cc
}

// rawOf returns the held encoding of token t with evidence ev (body and evidence, as
// stored in the inbox and the checkpoint and signed at each send), from a cache of the
// encodings of the tokens of this node's recent snapshots: an encoded token is never
// modified once made. The cache keeps the bytes (a hit compares the token's fields with
// them, wire.TokenEncodes) and is pruned to the tokens of each checkpoint written
// (pruneRaws).
func (n *Node) rawOf(t walk.Token, ev []byte) []byte { return n.rawLookup(t, ev, false) }

// rawOfShared is rawOf for a token of a custody snapshot, whose vectors the machine
// shares and never modifies (walk.CustodySnapshot). Once such a token has been found to
// encode as an entry, the entry remembers its vectors, and a later snapshot of the same
// token (the same memory, the same scalar fields) is that entry without comparing its
// values again: a checkpoint holds up to 4D+4 tokens, and comparing each at every hop
// cost more than writing the checkpoint.
func (n *Node) rawOfShared(t walk.Token, ev []byte) []byte { return n.rawLookup(t, ev, true) }

func (n *Node) rawLookup(t walk.Token, ev []byte, shared bool) []byte {
	k := [2]uint64{t.Epoch, t.Hop}
	es := n.walk.raws[k]
	if shared {
		for _, c := range es {
			if c.z != nil && sameVec(c.z, t.Z) && sameVec(c.zhat, t.Zhat) && c.walk == t.Walk && c.run == t.Run && bytes.Equal(c.ev, ev) {
				return c.raw
			}
		}
	}
	for i := range es {
		c := &es[i]
		if bytes.Equal(c.ev, ev) && wire.TokenEncodes(c.raw, t) {
			if shared && len(t.Z) > 0 {
				c.z, c.zhat, c.walk, c.run = t.Z, t.Zhat, t.Walk, t.Run
			}
			return c.raw
		}
	}
	// Encoded with room for the evidence trailer, appended without a copy (hold).
	raw, err := wire.EncodeToken(make([]byte, 0, wire.TokenSize(t.Run, len(t.Z))+max(len(ev), 1)), t)
	if err != nil {
		return nil // cannot happen: the machine's tokens are of the run's shape
	}
	if len(ev) == 0 {
		raw = append(raw, wire.EvNone)
	} else {
		raw = append(raw, ev...)
	}
	n.keepRaw(t, ev, raw)
	if shared && len(t.Z) > 0 {
		es := n.walk.raws[k]
		c := &es[len(es)-1]
		c.z, c.zhat, c.walk, c.run = t.Z, t.Zhat, t.Walk, t.Run
	}
	return raw
}

// sameVec reports whether a and b are the same non-empty vector in memory.
func sameVec(a, b []float64) bool { return len(a) > 0 && len(a) == len(b) && &a[0] == &b[0] }

// keepRaw records raw as the held encoding of t with evidence ev: a token restored from
// a checkpoint is written back with the bytes it was read from (an encoding of an
// earlier build may differ, e.g. hold no evidence trailer).
func (n *Node) keepRaw(t walk.Token, ev, raw []byte) {
	if n.walk.raws == nil || len(n.walk.raws) > 4*walk.MaxBackups(n.cfg.Depth) {
		n.walk.raws = map[[2]uint64][]rawEntry{}
	}
	k := [2]uint64{t.Epoch, t.Hop}
	n.walk.raws[k] = append(n.walk.raws[k], rawEntry{ev: slices.Clone(ev), raw: raw})
}

// pruneRaws drops from the rawOf cache the encodings that the checkpoint c does not
// hold: a token that leaves custody (released, expired, superseded as the last) does not
// come back, so at 1,000 nodes in one process the cache holds about D tokens per node
// instead of up to 16D+16.
func (n *Node) pruneRaws(c *store.Checkpoint) {
	for k, es := range n.walk.raws {
		kept := es[:0]
		for _, e := range es {
			if same(e.raw, c.Out) || slices.ContainsFunc(c.Backups, func(b store.Backup) bool { return same(b.Token, e.raw) }) {
				kept = append(kept, e)
			}
		}
		clear(es[len(kept):])
		if len(kept) == 0 {
			delete(n.walk.raws, k)
		} else {
			n.walk.raws[k] = kept
		}
	}
}

// same reports whether a and b are the same bytes in memory (rawOf returns the cached
// slices themselves).
func same(a, b []byte) bool { return len(a) > 0 && len(a) == len(b) && &a[0] == &b[0] }

// rawEntry is a token's held encoding and the evidence it holds (rawOf), with, once a
// snapshot's token was found to encode as raw, that token's vectors and the scalar
// fields not in the cache's key (rawOfShared).
type rawEntry struct {
	ev      []byte
	raw     []byte
	z, zhat []float64
	walk    uint64
	run     string
}

// checkpointFrom writes the custody snapshot s into the checkpoint's custody fields.
func (n *Node) checkpointFrom(s walk.CustodySnapshot) {
	c := &n.walk.ckpt
	c.Fence = nil
	if s.Fence != nil {
		f := store.Mark(*s.Fence)
		c.Fence = &f
	}
	c.MaxEpoch = s.Epoch
	// The rules' memory: the record of uses is shared with the machine, which never
	// modifies what it returned; the counters are copied.
	c.Used, c.MaxHop, c.Downs = s.Used, s.MaxHop, s.Downs
	c.Raises = append(c.Raises[:0], s.Raises...)
	c.Strikes = append(c.Strikes[:0], s.Strikes...)
	// The store keeps copies of what it wrote, so the slices are reused.
	c.Recent = c.Recent[:0]
	for _, m := range s.Recent {
		c.Recent = append(c.Recent, store.Mark(m))
	}
	n.mu.Lock()
	ms := n.members
	n.mu.Unlock()
	c.Backups = c.Backups[:0]
	c.Out, c.OutTo = nil, ""
	if s.Last != nil {
		c.Out = n.rawOfShared(*s.Last, s.LastEvidence)
	}
	for _, b := range s.Backups {
		k := store.Backup{Token: n.rawOfShared(b.Token, b.Evidence), PredEpoch: b.PredEpoch, PredHop: b.PredHop, Acked: b.Acked, Dist: b.Dist}
		if b.To >= 0 && !b.Pending {
			k.To = n.memberPID(ms, b.To)
		}
		if b.Pred >= 0 {
			k.Pred = n.memberPID(ms, b.Pred)
		}
		if bytes.Equal(k.Token, c.Out) {
			c.OutTo = k.To
		}
		c.Backups = append(c.Backups, k)
	}
	n.pruneRaws(c)
}

// snapshotOf returns the custody snapshot of a checkpoint written by checkpointFrom (or
// by an earlier build), with a clock that starts again at 0: unacked releases go again
// to their recipient at the first tick, and the fallback waits a full timeout.
func (n *Node) snapshotOf(ck *store.Checkpoint) walk.CustodySnapshot {
	s := walk.CustodySnapshot{Epoch: min(ck.MaxEpoch, MaxEpoch)}
	switch {
	case ck.Fence != nil:
		f := walk.CustodyMark(*ck.Fence)
		s.Fence = &f
	default:
		// A checkpoint without a fence: fence conservatively at the last token processed
		// (any digest).
		s.Fence = &walk.CustodyMark{Epoch: ck.Epoch, Hop: ck.Hop, Digest: ^uint64(0)}
	}
	for _, m := range ck.Recent {
		s.Recent = append(s.Recent, walk.CustodyMark(m))
	}
	// The rules' memory (absent in checkpoints of earlier builds; counters of another
	// membership size are not used).
	s.Used, s.MaxHop, s.Downs = ck.Used, ck.MaxHop, max(ck.Downs, 0)
	if len(ck.Raises) == len(n.members) {
		s.Raises = slices.Clone(ck.Raises)
	}
	if len(ck.Strikes) == len(n.members) {
		s.Strikes = slices.Clone(ck.Strikes)
	}
	for _, b := range ck.Backups {
		tok, err := wire.DecodeToken(b.Token)
		if err != nil || tok.Epoch > MaxEpoch {
			continue
		}
		k := walk.CustodyBackup{Token: tok, Evidence: heldEvidence(b.Token), To: n.indexOf(b.To), Acked: b.Acked, Dist: b.Dist,
			Pred: n.indexOf(b.Pred), PredEpoch: b.PredEpoch, PredHop: b.PredHop}
		n.keepRaw(tok, k.Evidence, b.Token)
		if k.To < 0 || k.To == n.index {
			k.To, k.Pending, k.Acked = -1, true, false
		}
		if k.Pred == n.index {
			k.Pred = -1
		}
		s.Backups = append(s.Backups, k)
	}
	if lim := walk.MaxBackups(n.cfg.Depth); len(s.Backups) > lim {
		s.Backups = s.Backups[len(s.Backups)-lim:]
	}
	if tok, err := wire.DecodeToken(ck.Out); err == nil && tok.Epoch <= MaxEpoch {
		s.Last, s.LastEvidence = &tok, heldEvidence(ck.Out)
		n.keepRaw(tok, s.LastEvidence, ck.Out)
		// A checkpoint of the first format keeps its token in custody in Out alone, until
		// its recipient OutTo acks it: a backup (sent again at the first tick).
		if to := n.indexOf(ck.OutTo); to >= 0 && to != n.index && !slices.ContainsFunc(ck.Backups, func(b store.Backup) bool { return bytes.Equal(b.Token, ck.Out) }) {
			s.Backups = append(s.Backups, walk.CustodyBackup{Token: tok, Evidence: s.LastEvidence, To: to, Pred: -1})
		}
	}
	return s
}

// heldOf returns the token stored in the inbox as a held token: its predecessor on the
// release chain is the signer of the evidence it holds (the member this node received
// it from, or from which it received the token it handed to itself), none for the
// origin's token.
func (n *Node) heldOf(raw []byte) (*walk.CustodyHeld, error) {
	tok, err := wire.DecodeToken(raw)
	if err != nil {
		return nil, err
	}
	h := &walk.CustodyHeld{Token: tok, Evidence: heldEvidence(raw), Pred: -1}
	if c, err := wire.ParseCert(h.Evidence, false); err == nil && c.Ev.Present && c.Ev.Signer < len(n.members) {
		if c.Ev.Signer != n.index {
			h.Pred, h.PredEpoch, h.PredHop = c.Ev.Signer, c.Ev.Epoch, c.Ev.Hop
		}
		// The evidence the token was taken on: Restore records its use again (the
		// checkpoint of its step may not have been written).
		ev := c.Ev
		h.Shown = &ev
	}
	return h, nil
}

// CustodyInput is one input the loop gave the node's walk.Custody (Node.custodyTrace, a
// test hook: replayed into a fresh machine, the inputs must give the Readies the node
// applied).
type CustodyInput struct {
	Kind       string // start, handover, step, down, up, tick, stop, final, restore
	Msg        walk.CustodyMsg
	Token      walk.Token
	Peer       int
	Tick       int64
	Epoch, Hop uint64
	Snapshot   *walk.CustodySnapshot
	Walk       *walk.Checkpoint
	// Batched: more inputs follow before the Readies are applied (the releases read
	// together, onReleases); the machine gathers their outputs into one Ready.
	Batched bool
}

// refusal is the error of an input the machine refused (a final model).
type refusal walk.CustodyRefusal

func (r refusal) Error() string {
	return "refused by the custody rules: " + walk.CustodyRefusal(r).String()
}

// input gives the custody machine one input and applies the Readies that follow
// (drain). It returns the machine's error for the input; an error applying a Ready (the
// ledger or a journal cannot be written) is kept in n.walk.fatal and stops the loop before
// anything more is sent.
func (n *Node) input(ctx context.Context, in CustodyInput) error {
	var err error
	switch in.Kind {
	case "start":
		err = n.walk.cust.Start(in.Token)
	case "handover":
		err = n.walk.cust.Handover(in.Peer, in.Token)
	case "step":
		err = n.walk.cust.Step(in.Msg)
	case "down":
		n.walk.cust.PeerDown(in.Peer)
	case "up":
		n.walk.cust.PeerUp(in.Peer)
	case "tick":
		n.walk.wk.TickTo(in.Tick)
	case "stop":
		n.walk.cust.Stop()
	case "final":
		if r := n.walk.cust.StepFinal(in.Peer, in.Epoch, in.Hop); r != walk.RefuseNone {
			err = refusal(r)
		}
	case "restore":
		err = n.walk.cust.Restore(in.Walk, *in.Snapshot)
	default:
		return fmt.Errorf("node: unknown custody input %q", in.Kind)
	}
	if in.Batched {
		if n.custodyTrace != nil {
			n.custodyTrace(in, nil)
		}
		return err
	}
	n.drain(ctx, &in)
	return err
}

// drain applies the machine's Readies until it has none (a token it holds is stepped at
// Advance and makes the next one), through the Walk adapter and the node's effects.
func (n *Node) drain(ctx context.Context, in *CustodyInput) {
	var rds []walk.CustodyReady
	fx := walkFx{n: n, ctx: ctx, in: in}
	if n.custodyTrace != nil {
		n.walk.wk.Observe(func(rd walk.CustodyReady) { rds = append(rds, copyReady(rd)) })
		defer n.walk.wk.Observe(nil)
	}
	for n.walk.fatal == nil && n.walk.wk.HasReady() {
		if err := n.walk.wk.Apply(fx); err != nil {
			n.walk.fatal = err // nothing of this Ready was sent: the loop stops
			break
		}
	}
	n.holding.Store(n.walk.cust.Holding())
	if n.custodyTrace != nil && in != nil {
		n.custodyTrace(*in, rds)
	}
}

// copyReady returns a copy of rd that outlives Advance.
func copyReady(rd walk.CustodyReady) walk.CustodyReady {
	c := rd
	c.Ledger = append([]privacy.Entry(nil), rd.Ledger...)
	c.Events = append([]walk.CustodyEvent(nil), rd.Events...)
	c.Outbox = nil
	for _, m := range rd.Outbox {
		m.Token.Z, m.Token.Zhat = slices.Clone(m.Token.Z), slices.Clone(m.Token.Zhat)
		c.Outbox = append(c.Outbox, m)
	}
	if rd.State != nil {
		s := *rd.State
		s.U = slices.Clone(s.U)
		c.State = &s
	}
	if rd.Held != nil {
		h := *rd.Held
		h.Token.Z, h.Token.Zhat = slices.Clone(h.Token.Z), slices.Clone(h.Token.Zhat)
		c.Held = &h
	}
	return c
}

// walkFx is the node's WalkEffects: the ledger file, the inbox and checkpoint journals,
// the wire and the control plane. The Walk adapter calls them in the Ready's order:
// ledger (fsync), held token (inbox, before its ack), checkpoint (walk state and custody
// snapshot, with the Ready's ledger entries when it writes one: store.SaveCheckpointLedger,
// one fsync for both), then the messages; events become metrics and log lines.
type walkFx struct {
	n   *Node
	ctx context.Context
	in  *CustodyInput // the input being applied (nil: none)
}

func (f walkFx) AppendLedger(es []privacy.Entry) error {
	if err := f.n.store.AppendLedger(es); err != nil {
		return fmt.Errorf("node: cannot make the ledger durable, stopping before any send: %w", err)
	}
	return nil
}

// Persist makes the record durable. A held token goes to the inbox journal before the
// checkpoint, except one that the record's own step handed to this node (a hand-off to
// itself, or the token of hop K so reached): that one is written in the checkpoint
// record itself (store.Checkpoint.Held), with the step and its ledger entries, so that no
// crash separates them. With two writes, a crash after the inbox's restarted from the
// older checkpoint and stepped the held token, which carried the first step's noisy
// update without that update's ledger entry or its count in K_i; a crash after the
// checkpoint's lost the held token, which nobody else holds.
//
// A token taken with a snapshot but no step (an epoch raised, backups dropped) is written
// first: a crash after it restarts from the older snapshot with the token in the inbox,
// stepped then; the other order would restart with the token's mark among the recent
// ones but without the token, and answer its re-send as a duplicate.
func (f walkFx) Persist(r drive.WalkRecord) error {
	n := f.n
	ckpt := r.State != nil || r.Custody != nil
	if r.Held != nil && !(r.Stepped && ckpt) {
		if err := f.saveHeld(r.Held); err != nil {
			return err
		}
	}
	if r.Stepped {
		// The step processed the token held before (the checkpoint's or the inbox's).
		n.walk.ckpt.Held = nil
		if r.Held != nil && ckpt {
			n.walk.ckpt.Held = n.rawOf(r.Held.Token, r.Held.Evidence)
		}
	}
	return f.saveCheckpoint(r)
}

// saveHeld appends the token taken to the inbox journal.
func (f walkFx) saveHeld(h *walk.CustodyHeld) error {
	if err := f.n.store.SaveInbox(f.n.rawOf(h.Token, h.Evidence)); err != nil {
		return fmt.Errorf("node: cannot store the received token, stopping before its ack: %w", err)
	}
	return nil
}

// saveCheckpoint writes the record's walk state and custody snapshot, with its ledger
// entries, when it has either.
func (f walkFx) saveCheckpoint(r drive.WalkRecord) error {
	n := f.n
	if r.Stepped {
		n.walk.ckpt.Epoch, n.walk.ckpt.Hop = r.Epoch, r.Hop // the token processed
	}
	if st := r.State; st != nil {
		n.walk.ckpt.Updates, n.walk.ckpt.U = st.Updates, append(n.walk.ckpt.U[:0], st.U...)
		n.metrics.nupd.Store(int64(st.Updates))
		if n.walk.hopSrc != nil {
			n.walk.ckpt.HopSource, _ = n.walk.hopSrc.MarshalBinary()
			n.walk.ckpt.NoiseSource, _ = n.walk.noiseSrc.MarshalBinary()
		}
	}
	if r.Custody != nil {
		n.checkpointFrom(*r.Custody)
	}
	if r.State != nil || r.Custody != nil {
		// The release's ledger entries and the checkpoint that holds it: one fsync.
		if err := n.store.SaveCheckpointLedger(&n.walk.ckpt, r.Ledger); err != nil {
			return fmt.Errorf("node: cannot write the ledger and the checkpoint, stopping before any send: %w", err)
		}
	}
	return nil
}

func (f walkFx) Send(m walk.CustodyMsg) error {
	n := f.n
	switch m.Kind {
	case walk.CustodyAck:
		n.answer(m)
	case walk.CustodyToken:
		n.startSend(f.ctx, m)
	case walk.CustodyRelease:
		n.sendRelease(f.ctx, n.members[m.To], wire.Release{Epoch: m.Epoch, Hop: m.Hop, Dist: m.Dist, Retire: m.Retire})
	}
	return nil
}

func (f walkFx) Note(evs []walk.CustodyEvent) { f.n.noteEvents(evs, f.in) }

func (f walkFx) Final(fin *walk.CustodyFinal) error { return f.n.releaseFinal(f.ctx, fin) }

// answer maps the machine's ack of the hand-off being served to its one-byte code.
func (n *Node) answer(m walk.CustodyMsg) {
	c := n.walk.cur
	if c == nil || c.replied || c.idx != m.To || c.tok.Epoch != m.Epoch || c.tok.Hop != m.Hop {
		return
	}
	code := wire.AckOK
	switch {
	case m.Stale:
		code = wire.AckStale
	case m.Refused == walk.RefuseBusy:
		code = wire.AckBusy
	case m.Refused != walk.RefuseNone:
		code = wire.AckReject
	case m.Duplicate:
		code = wire.AckDuplicate
	}
	c.reply <- code
	c.replied = true
}

// releaseFinal publishes the final model of token f (hop K reached here).
func (n *Node) releaseFinal(ctx context.Context, f *walk.CustodyFinal) error {
	tok := f.Token
	n.log.Info().Uint64("hop", tok.Hop).Msg("walk complete: this node releases the final model")
	// The final model is the z of the token received at hop K: a release charged in the
	// ledger of its sender (recipient: this node); publishing it to every member is
	// post-processing, covered by the accountant's final release to all.
	fc, err := finalCert(f.Evidence, tok.Hop, tok.Zhat)
	if err != nil {
		return fmt.Errorf("node: the evidence held with hop %d: %w", tok.Hop, err)
	}
	if fc.Signer >= 0 && fc.Hop == tok.Hop {
		fc.Prev = n.prevLink(tok.Epoch, tok.Hop, fc.Signer)
	}
	m := n.newModel(tok.Z, tok.Epoch, tok.Hop, n.ID())
	m.Cert = fc
	n.noteLineage(m)
	n.keepFinal(m, finalMark(tok.Epoch, tok.Hop, tok.Z))
	n.fin.cert = fc
	if err := n.publish(ctx, ctlMsg{Type: "final", Run: n.cfg.Run, Hash: n.hash, Hop: tok.Hop, Epoch: tok.Epoch, Model: tok.Z, Cert: fc}); err != nil {
		n.log.Warn().Err(err).Msg("cannot publish the final model")
	}
	return nil
}

// noteEvents turns the machine's events into metrics and log lines.
func (n *Node) noteEvents(evs []walk.CustodyEvent, in *CustodyInput) {
	staleAck := in != nil && in.Kind == "step" && in.Msg.Kind == walk.CustodyAck && in.Msg.Stale
	peer := func(j int) string {
		if j < 0 || j >= len(n.members) {
			return "-"
		}
		return shortID(n.members[j])
	}
	for _, e := range evs {
		switch e.Kind {
		case walk.CustodyAccepted:
			if n.walk.seen && e.Epoch > n.acceptedEpoch.Load() {
				n.ownAnomalies.Add(1) // a new lineage: a rewind or a regeneration elsewhere
			}
			if e.Epoch > n.acceptedEpoch.Load() {
				n.acceptedEpoch.Store(e.Epoch)
			}
			n.walk.seen = true
			n.lastHop.Store(e.Hop)
			if e.Peer >= 0 {
				n.hopsIn.Add(1)
				if e.Peer != n.index && e.Hop > 0 {
					n.noteTaken(e.Peer) // the initial token (hop 0) is handed over without an entry
				}
			}
		case walk.CustodyWalk:
			n.lastTok.Store(time.Now().UnixNano())
			n.lastHop.Store(e.Hop - 1)
			if e.Walk == walk.EventUpdate {
				n.metrics.updates.Inc()
			} else {
				n.ownForwards.Add(1)
			}
			n.metrics.hops.Inc()
		case walk.CustodyFenced:
			n.metrics.ignored.Inc()
			n.metrics.custody.WithLabelValues("fenced").Inc()
			f := n.walk.ckpt.Fence
			if f == nil {
				f = &store.Mark{}
			}
			n.log.Info().Str("verdict", wire.Ignore.String()).Uint64("epoch", e.Epoch).Uint64("hop", e.Hop).
				Uint64("fence_epoch", f.Epoch).Uint64("fence_hop", f.Hop).Uint64("max_epoch", n.walk.cust.Epoch()).
				Msg("hand-off fenced: not above the highest token accepted or released here")
		case walk.CustodyDuplicate:
			n.log.Debug().Uint64("hop", e.Hop).Msg("duplicate hand-off (lost ack): acked again")
		case walk.CustodyRefused:
			if e.Refusal != walk.RefuseBusy {
				n.ownAnomalies.Add(1)
			}
			n.noteRefusal(e, peer(e.Peer))
		case walk.CustodyEvicted:
			n.ownAnomalies.Add(1)
			n.log.Warn().Str("member", peer(e.Peer)).Msg("member evicted: it sent implausible epochs or rewound the walk; nothing of it is accepted for the rest of the run")
			n.metrics.rejected.WithLabelValues("evicted").Inc()
		case walk.CustodyResent:
			n.ownResends.Add(1)
			n.limitedLog(zerolog.WarnLevel, "redirect").Str("to", peer(e.Peer)).Uint64("epoch", e.Epoch).Uint64("hop", e.Hop).
				Msg("redirecting the token to another peer after failures")
		case walk.CustodyRegenerated:
			n.ownResends.Add(1)
			n.metrics.custody.WithLabelValues("regenerated").Inc()
			n.log.Warn().Str("to", peer(e.Peer)).Uint64("epoch", e.Epoch).Uint64("hop", e.Hop).
				Msg("regenerating the token from this node's backup: its recipient is down")
		case walk.CustodyFallback:
			// The walk may have ended elsewhere with a final this node never received (or
			// refused from its releaser): ask the members for it, as a rejoining node does.
			n.startAskFinal()
			n.ownResends.Add(1)
			n.metrics.custody.WithLabelValues("fallback").Inc()
			n.log.Warn().Dur("silent_for", n.tickDur(n.walk.cust.FallbackTimeout())).Uint64("epoch", e.Epoch).Uint64("hop", e.Hop).
				Msg("slow fallback: no token, ack or release for the fallback timeout; re-sending this node's last release under a new epoch")
		case walk.CustodyDropped:
			n.metrics.custody.WithLabelValues("released").Inc()
		case walk.CustodyRetired:
			if staleAck {
				n.metrics.custody.WithLabelValues("fenced_out").Inc()
				n.log.Warn().Str("to", peer(e.Peer)).Msg("receiver has a newer token: this copy is fenced and dropped")
			} else {
				n.metrics.custody.WithLabelValues("retired").Inc()
			}
		case walk.CustodyExpired:
			n.metrics.custody.WithLabelValues("expired").Inc()
		case walk.CustodyNoPeer:
			n.metrics.custody.WithLabelValues("no_peer").Inc()
		case walk.CustodyRetransmitted:
			n.log.Debug().Str("to", peer(e.Peer)).Uint64("epoch", e.Epoch).Uint64("hop", e.Hop).Msg("hand-off sent again to the same peer")
		case walk.CustodyGaveUp:
			n.log.Error().Int("re_sends", walk.MaxFallbacks).Msg("slow fallback: no token, ack or release after the last re-sends; not re-sending again (the other members seem gone)")
		case walk.CustodyPaused:
			n.notePaused(e)
		case walk.CustodyStepFailed:
			n.reject(n.log, "step", e.Err.Error())
		}
	}
}

// noteRefusal logs and counts a hand-off the machine refused (CustodyRefused) from the
// member named from.
func (n *Node) noteRefusal(e walk.CustodyEvent, from string) {
	switch e.Refusal {
	case walk.RefuseEpoch:
		n.metrics.rejected.WithLabelValues("epoch").Inc()
		n.limitedLog(zerolog.WarnLevel, "epoch").Str("from", from).Uint64("epoch", e.Epoch).
			Msg(fmt.Sprintf("hand-off refused: its epoch exceeds %d or lies more than %d above the highest epoch seen here (%d)",
				MaxEpoch, walk.EpochWindow(len(n.members)), n.walk.cust.Epoch()))
	case walk.RefuseEvicted:
		n.reject(n.log.With().Str("from", from).Logger(), "evicted", "sender was evicted for implausible epochs")
	case walk.RefuseEvidence:
		// The sender showed a hand-off it received, which this node already took
		// another token on: a second token of the same lineage position (a member
		// re-sending under new epochs to burn this node's updates), refused as stale.
		n.metrics.rejected.WithLabelValues("evidence-reused").Inc()
		n.limitedLog(zerolog.WarnLevel, "evidence").Str("from", from).Uint64("epoch", e.Epoch).Uint64("hop", e.Hop).
			Msg("hand-off refused: its evidence was already used for another token here (no update is spent twice on one hand-off)")
	case walk.RefuseRewind:
		// A new lineage far behind the walk, or beyond the sender's allowance of new
		// lineages, while the walk is active here: refused as stale, a strike.
		n.metrics.rejected.WithLabelValues("rewind").Inc()
		n.limitedLog(zerolog.WarnLevel, "rewind").Str("from", from).Uint64("epoch", e.Epoch).Uint64("hop", e.Hop).
			Msg("hand-off refused: it would rewind the walk (a new epoch far behind the highest hop seen here, or too many new lineages from this member, while the walk is active); the third such hand-off evicts the member")
	case walk.RefuseBusy:
		// Not a fault of the sender: it keeps the token and tries again (debug level).
		n.limitedLog(zerolog.DebugLevel, "busy").Str("from", from).Uint64("epoch", e.Epoch).Uint64("hop", e.Hop).
			Bool("stopping", n.walk.cust.Stopping()).Bool("paused", n.walk.cust.Paused()).Msg("hand-off answered busy: this node takes no token now")
	}
}

// notePaused marks the node paused at a hop (fault injection, CustodyPaused).
func (n *Node) notePaused(e walk.CustodyEvent) {
	if c := n.walk.cur; c != nil && c.written != nil {
		// Report the pause only once the ack is on its way, so that a harness that
		// kills the node on seeing it does not make the sender redirect.
		select {
		case <-c.written:
		case <-time.After(n.cfg.AckTimeout):
		}
	}
	n.lastHop.Store(e.Hop) // paused: Status.Hop names the hop of the pause
	// Holding before Paused: a status read between the two (drain stores Holding only
	// after the whole Ready) must not show a paused node that does not hold its token.
	n.holding.Store(n.walk.cust.Holding())
	n.paused.Store(true)
	if n.cfg.PauseAfterStep {
		n.log.Warn().Uint64("hop", e.Hop).Msg("paused after the step of this hop (fault injection): ledger and custody are durable, nothing sent")
	} else {
		n.log.Warn().Uint64("hop", e.Hop).Msg("paused at this hop (fault injection): the token is stored and acked, not processed")
	}
}

// sendResult is the outcome of one hand-off attempt (startSend).
type sendResult struct {
	to         peer.ID
	idx        int
	epoch, hop uint64
	attempt    uint64
	code       byte
	err        error
}

// attemptOf returns the attempt counter of the release (epoch, hop): every send of it
// takes the next number, and a failure reported for an earlier one is stale (the machine
// already sent it again).
func (n *Node) attemptOf(epoch, hop uint64) *atomic.Uint64 {
	v, _ := n.attempts.LoadOrStore([2]uint64{epoch, hop}, new(atomic.Uint64))
	return v.(*atomic.Uint64)
}

// startSend hands the token of m to its recipient in the background: one signed frame
// and its ack byte (handoff). Hand-offs to one peer go one at a time; an attempt that a
// later send of the same release superseded before it left is dropped.
func (n *Node) startSend(ctx context.Context, m walk.CustodyMsg) {
	to := n.members[m.To]
	raw := n.rawOf(m.Token, m.Evidence)
	a := n.attemptOf(m.Epoch, m.Hop)
	id := a.Add(1)
	lk, _ := n.sendLocks.LoadOrStore(to, &sync.Mutex{})
	n.bg.Add(1)
	go func() {
		defer n.bg.Done()
		mu := lk.(*sync.Mutex)
		mu.Lock()
		if a.Load() != id || ctx.Err() != nil {
			mu.Unlock()
			n.dropPresigned(to, raw)
			return
		}
		code, err := n.handoff(ctx, to, raw)
		mu.Unlock()
		select {
		case n.sent <- sendResult{to: to, idx: m.To, epoch: m.Epoch, hop: m.Hop, attempt: id, code: code, err: err}:
		case <-ctx.Done():
		}
	}()
}

// onSent gives the machine the outcome of a hand-off: the receiver's ack, or a refusal
// (busy, reject) or failure of an attempt the machine has not superseded.
func (n *Node) onSent(ctx context.Context, r sendResult) {
	if r.err != nil && ctx.Err() != nil {
		return // stopping: the token stays in custody (durable), nothing failed
	}
	m := walk.CustodyMsg{Kind: walk.CustodyAck, From: r.idx, To: n.index, Epoch: r.epoch, Hop: r.hop}
	current := n.attemptOf(r.epoch, r.hop).Load() == r.attempt
	switch {
	case r.err != nil:
		if !current {
			return
		}
		n.limitedLog(zerolog.WarnLevel, "attempt:"+string(r.to)).Err(r.err).Str("to", shortID(r.to)).Msg("hand-off attempt failed")
		m.Refused = walk.RefuseFailed
	case r.code == wire.AckOK:
		n.metrics.sent.Inc()
	case r.code == wire.AckDuplicate:
		n.metrics.sent.Inc()
		m.Duplicate = true
	case r.code == wire.AckStale:
		m.Stale = true
	case !current:
		return
	case r.code == wire.AckBusy:
		m.Refused = walk.RefuseBusy
	default:
		n.limitedLog(zerolog.WarnLevel, "attempt:"+string(r.to)).Str("to", shortID(r.to)).Int("code", int(r.code)).Msg("hand-off refused by its receiver")
		m.Refused = walk.RefuseInvalid
	}
	n.input(ctx, CustodyInput{Kind: "step", Msg: m})
}

// onReleases gives the machine the releases read from members' streams since the loop
// last waited, applying the Readies once after the last: a release's outputs (the wave
// passed on, a backup dropped) are gathered with the others' into one Ready.
func (n *Node) onReleases(ctx context.Context, ms []relMsg) {
	ins := make([]CustodyInput, 0, len(ms))
	for _, m := range ms {
		j := n.memberIndex(m.from)
		if j < 0 || j == n.index {
			continue
		}
		ins = append(ins, CustodyInput{Kind: "step", Msg: walk.CustodyMsg{Kind: walk.CustodyRelease, From: j, To: n.index,
			Epoch: m.r.Epoch, Hop: m.r.Hop, Dist: m.r.Dist, Retire: m.r.Retire}})
	}
	for i, in := range ins {
		in.Batched = i < len(ins)-1
		n.input(ctx, in)
	}
}

// releaseBatch is how long releases to one peer are gathered before they go out in one
// write. A wave reaching a backup is superseded by the next one for the same backup
// (its distance is higher), so gathering sends each backup's latest wave once; the delay
// only keeps backups a little longer, far below the heartbeat time that decides a
// regeneration.
const releaseBatch = 2 * time.Millisecond

// relStream is the release stream to one predecessor with the releases waiting for it;
// mu guards pending and running. The one goroutine that runs (running) owns s.
type relStream struct {
	mu      sync.Mutex
	pending []wire.Release
	running bool
	s       network.Stream
}

// add queues r, merging it with a queued release of the same backup: a retirement
// replaces any release, a release is dropped after a retirement, and the higher
// distance is kept.
func (rs *relStream) add(r wire.Release) {
	for i := range rs.pending {
		q := &rs.pending[i]
		if q.Epoch != r.Epoch || q.Hop != r.Hop {
			continue
		}
		switch {
		case q.Retire:
		case r.Retire:
			*q = r
		case r.Dist > q.Dist:
			q.Dist = r.Dist
		}
		return
	}
	rs.pending = append(rs.pending, r)
}

// sendRelease sends r to the predecessor pred in the background (best effort: a lost
// release leaves a backup that a later wave, a retirement or the bound on backups drops).
// Releases to one peer are gathered for releaseBatch and go out on a long-lived stream,
// one frame and one ack byte each; a stream that fails (a peer restarted, or one that
// closes the stream after one frame) is replaced once. A release delivered twice is
// ignored by its receiver (its distance is not above the backup's).
func (n *Node) sendRelease(ctx context.Context, p peer.ID, r wire.Release) {
	if p == n.ID() || n.isDown(p) {
		return
	}
	v, _ := n.relStreams.LoadOrStore(p, &relStream{})
	rs := v.(*relStream)
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.add(r)
	if rs.running {
		return
	}
	rs.running = true
	n.bg.Add(1)
	go func() {
		defer n.bg.Done()
		for {
			select {
			case <-time.After(releaseBatch):
			case <-ctx.Done():
			}
			rs.mu.Lock()
			batch := rs.pending
			rs.pending = nil
			if len(batch) == 0 || ctx.Err() != nil {
				rs.running = false
				rs.mu.Unlock()
				return
			}
			rs.mu.Unlock()
			n.writeReleases(ctx, p, rs, batch)
		}
	}()
}

// writeReleases sends batch on rs's stream and reads one ack byte per frame. Frames
// acked before a failure are done; the others go again on a new stream, as long as each
// attempt gets at least one of them through (a receiver that closes the stream after one
// frame thus gets one per stream).
func (n *Node) writeReleases(ctx context.Context, p peer.ID, rs *relStream, batch []wire.Release) {
	buf := make([]byte, 0, len(batch)*(4+wire.ReleaseSize))
	acks := make([]byte, len(batch))
	for fails := 0; len(batch) > 0 && fails < 2; {
		if rs.s == nil {
			sctx, cancel := context.WithTimeout(ctx, n.cfg.AckTimeout)
			s, err := n.Host.NewStream(sctx, p, wire.ReleaseProtocol(n.cfg.Run))
			cancel()
			if err != nil {
				n.log.Debug().Err(err).Str("to", shortID(p)).Msg("release not sent")
				return
			}
			rs.s = s
		}
		buf = buf[:0]
		for _, r := range batch {
			buf = binary.LittleEndian.AppendUint32(buf, wire.ReleaseSize)
			buf = append(buf, wire.EncodeRelease(r)...)
		}
		rs.s.SetDeadline(time.Now().Add(n.cfg.AckTimeout))
		_, err := rs.s.Write(buf)
		k := 0
		if err == nil {
			k, err = io.ReadFull(rs.s, acks[:len(batch)])
		}
		batch = batch[k:]
		if err == nil {
			return
		}
		if k == 0 {
			fails++
		}
		rs.s.Reset()
		rs.s = nil
		if ctx.Err() != nil {
			return
		}
	}
}

// handleRelease reads releases from a member, one frame each, passes them to the loop
// and acks each with one byte.
func (n *Node) handleRelease(s network.Stream) {
	defer s.Close()
	from := s.Conn().RemotePeer()
	lg := n.log.With().Str("from", shortID(from)).Logger()
	n.mu.Lock()
	ready := n.walk.cust != nil
	n.mu.Unlock()
	if !ready {
		s.Reset()
		return
	}
	if !n.isMember(from) {
		n.reject(lg, "non-member", "release from a peer outside the membership")
		s.Reset()
		return
	}
	br := bufio.NewReaderSize(s, 16*(4+wire.ReleaseSize))
	unacked := 0
	for {
		b, err := wire.ReadFrame(br, wire.ReleaseSize)
		var r wire.Release
		if err == nil {
			r, err = wire.DecodeRelease(b)
		}
		if err != nil {
			if errors.Is(err, wire.ErrTooLarge) || errors.Is(err, wire.ErrMalformed) || errors.Is(err, wire.ErrVersion) {
				n.reject(lg, "release", err.Error())
				s.Reset()
			}
			return
		}
		select {
		case n.rel <- relMsg{from: from, r: r}:
		default:
			select {
			case n.rel <- relMsg{from: from, r: r}:
			case <-time.After(n.cfg.AckTimeout / 2):
				s.Reset()
				return
			}
		}
		// The acks of the frames of one write go back together.
		if unacked++; br.Buffered() > 0 {
			continue
		}
		s.SetWriteDeadline(time.Now().Add(n.cfg.AckTimeout))
		if _, err := s.Write(bytes.Repeat([]byte{1}, unacked)); err != nil {
			return
		}
		unacked = 0
	}
}
