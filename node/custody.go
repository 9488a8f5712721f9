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
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/walk"
)

// This file holds the node's token fault tolerance: the fence (which tokens a node
// accepts), the backups of its own releases, the release chain that drops them, and the
// regeneration of a backup whose recipient was declared down. The rules are those of
// walk.Custody (docs/fault-tolerance.md), driven by wall-clock heartbeats and the
// synchronous one-byte acks of the hand-off protocol.

// recentMarks is how many accepted tokens a node remembers to recognise a retransmission.
const recentMarks = 16

type relMsg struct {
	from peer.ID
	r    Release
}

func markOf(t walk.Token) Mark { return Mark{Epoch: t.Epoch, Hop: t.Hop, Digest: walk.TokenDigest(t)} }

func (a Mark) cmp(b Mark) int {
	switch {
	case a.Epoch != b.Epoch:
		return cmpU(a.Epoch, b.Epoch)
	case a.Hop != b.Hop:
		return cmpU(a.Hop, b.Hop)
	}
	return cmpU(a.Digest, b.Digest)
}

func cmpU(a, b uint64) int {
	if a < b {
		return -1
	}
	if a > b {
		return 1
	}
	return 0
}

// accepts reports whether a token of mark m may be taken: its epoch is not below the
// highest epoch seen or created here and it is above every token accepted or released
// here. Two copies of one epoch are thus merged deterministically: the higher hop goes
// on, then the higher digest; a higher epoch beats any hop.
func (n *Node) accepts(m Mark) bool {
	return m.Epoch >= n.ckpt.MaxEpoch && (n.ckpt.Fence == nil || m.cmp(*n.ckpt.Fence) > 0)
}

// Epoch bounds. Epochs grow by one per regeneration or fallback re-send, so a run's
// epochs stay small; a peer that sends a token or a final model whose epoch jumps far
// above everything this node has seen is refused (an epoch of 2^64-1 would otherwise fence
// every honest token and make the next regeneration wrap to 0), and after
// maxEpochStrikes such refusals it is evicted: nothing of it is accepted for the rest of
// the run.
const (
	// MaxEpoch is the largest epoch any token or final model may carry; regeneration
	// stops there instead of wrapping.
	MaxEpoch uint64 = 1 << 48
	// maxEpochStrikes is how many refused epoch jumps evict a member.
	maxEpochStrikes = 3
)

// epochWindow is how far above the highest epoch seen here a token may be: 64, or 4 per
// member if more (every member may regenerate a few times between two of this node's
// visits, and a partition that heals may bring as many). A lineage regenerated more often
// than that while this node was cut off is refused and recovered by the fallback.
func (n *Node) epochWindow() uint64 {
	n.mu.Lock()
	m := len(n.members)
	n.mu.Unlock()
	return max(64, 4*uint64(m))
}

// epochJump says why epoch e is refused ("" when it is within bounds).
func (n *Node) epochJump(e uint64) string {
	switch w := n.epochWindow(); {
	case e > MaxEpoch:
		return fmt.Sprintf("epoch %d exceeds the largest a run may reach (%d)", e, MaxEpoch)
	case e > n.ckpt.MaxEpoch+w:
		return fmt.Sprintf("epoch %d jumps more than %d above the highest epoch seen here (%d)", e, w, n.ckpt.MaxEpoch)
	}
	return ""
}

// strike records a refused epoch jump of p; the maxEpochStrikes-th evicts p.
func (n *Node) strike(p peer.ID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.strikes == nil {
		n.strikes = map[peer.ID]int{}
	}
	n.strikes[p]++
	if n.strikes[p] == maxEpochStrikes {
		n.log.Warn().Str("peer", shortID(p)).Msg("member evicted: it sent implausible epochs; nothing of it is accepted for the rest of the run")
		n.metrics.rejected.WithLabelValues("evicted").Inc()
	}
}

// evicted reports whether p was evicted for implausible epochs.
func (n *Node) evicted(p peer.ID) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.strikes[p] >= maxEpochStrikes
}

// raise lifts the fence to m (a token accepted or released here).
func (n *Node) raise(m Mark) {
	if n.ckpt.Fence == nil || m.cmp(*n.ckpt.Fence) > 0 {
		n.ckpt.Fence = &m
	}
}

// newEpoch records an epoch accepted or created here; the node's backups of older epochs
// are dropped (a newer lineage exists and carries its own backups).
func (n *Node) newEpoch(e uint64) {
	if e <= n.ckpt.MaxEpoch {
		return
	}
	n.ckpt.MaxEpoch = e
	k := 0
	for _, b := range n.ckpt.Backups {
		if ep, _ := rawID(b.Token); ep < e {
			n.metrics.custody.WithLabelValues("retired").Inc()
			continue
		}
		n.ckpt.Backups[k] = b
		k++
	}
	n.ckpt.Backups = n.ckpt.Backups[:k]
}

func (n *Node) isRecent(m Mark) bool {
	for _, r := range n.ckpt.Recent {
		if r == m {
			return true
		}
	}
	return false
}

func (n *Node) addRecent(m Mark) {
	if n.isRecent(m) {
		return
	}
	n.ckpt.Recent = append(n.ckpt.Recent, m)
	if len(n.ckpt.Recent) > recentMarks {
		n.ckpt.Recent = append(n.ckpt.Recent[:0], n.ckpt.Recent[len(n.ckpt.Recent)-recentMarks:]...)
	}
}

// rawID returns the (epoch, hop) of an encoded token written by this node.
func rawID(raw []byte) (uint64, uint64) {
	if len(raw) < tokenHeader {
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
	s := p.String()
	n.pidStr.Store(p, s)
	return s
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

// addBackup keeps a fresh release (before it is sent; the caller saves the checkpoint).
func (n *Node) addBackup(raw []byte, to peer.ID, q queued) {
	b := Backup{Token: raw, To: n.pid(to), PredEpoch: q.predE, PredHop: q.predH}
	if q.from != "" {
		b.Pred = n.pid(q.from)
	}
	n.ckpt.Backups = append(n.ckpt.Backups, b)
	n.progressed(rawID(raw))
	// Backups whose release wave never comes (a dead node on the path, a restart that lost
	// the predecessor) are bounded: the oldest go first.
	if lim := 4*n.cfg.Depth + 4; len(n.ckpt.Backups) > lim {
		n.ckpt.Backups = append(n.ckpt.Backups[:0], n.ckpt.Backups[len(n.ckpt.Backups)-lim:]...)
	}
}

func (n *Node) findRaw(raw []byte) int {
	for i := range n.ckpt.Backups {
		if bytes.Equal(n.ckpt.Backups[i].Token, raw) {
			return i
		}
	}
	return -1
}

func (n *Node) removeBackup(i int) {
	n.ckpt.Backups = append(n.ckpt.Backups[:i], n.ckpt.Backups[i+1:]...)
}

// saveCustody saves the checkpoint after a change of the custody state; an error is
// logged and returned (a caller about to send must not send without it).
func (n *Node) saveCustody() error {
	err := n.store.SaveCheckpoint(&n.ckpt)
	if err != nil {
		n.log.Error().Err(err).Msg("cannot write the checkpoint with the custody state")
	}
	return err
}

// onHandoff updates the backup of a finished hand-off: acked (the release wave starts
// back along the path) or refused as stale (the lineage is retired back along the path).
func (n *Node) onHandoff(ctx context.Context, r sendResult) {
	i := n.findRaw(r.raw)
	if i < 0 {
		return
	}
	b := &n.ckpt.Backups[i]
	pred, rel := b.Pred, Release{Epoch: b.PredEpoch, Hop: b.PredHop}
	switch r.code {
	case AckOK, AckDuplicate:
		n.touch()
		n.progressed(rawID(b.Token))
		to := n.pid(r.to)
		// The ack of the node's own hand-off to the recipient named in the checkpoint
		// changes only Acked and Dist, which the next save carries: a restart before it
		// resends the custody copy (Out) anyway, and the recipient answers duplicate or
		// stale. A redirected or re-sent backup, or one dropped here, is saved now.
		save := !r.main || b.To != to || !bytes.Equal(b.Token, n.ckpt.Out)
		b.Acked, b.To = true, to
		b.Dist = max(b.Dist, 1)
		if b.Dist >= n.cfg.Depth {
			n.removeBackup(i)
			n.metrics.custody.WithLabelValues("released").Inc()
			save = true
		}
		if save {
			n.saveCustody()
		}
		if n.cfg.Depth >= 2 {
			rel.Dist = 2
			n.sendRelease(ctx, pred, rel)
		}
	case AckStale:
		n.removeBackup(i)
		n.metrics.custody.WithLabelValues("fenced_out").Inc()
		n.saveCustody()
		rel.Retire = true
		n.sendRelease(ctx, pred, rel)
	}
}

// onRelease applies a release from the recipient of one of this node's backups.
func (n *Node) onRelease(ctx context.Context, m relMsg) {
	i, from := -1, n.pid(m.from)
	for k, b := range n.ckpt.Backups {
		if e, h := rawID(b.Token); e == m.r.Epoch && h == m.r.Hop && b.To == from {
			i = k
			break
		}
	}
	if i < 0 {
		return // unknown, already dropped, or from a branch this node re-sent away from
	}
	b := &n.ckpt.Backups[i]
	pred, rel := b.Pred, Release{Epoch: b.PredEpoch, Hop: b.PredHop}
	n.touch()
	n.progressed(m.r.Epoch, m.r.Hop)
	if m.r.Retire {
		n.removeBackup(i)
		n.metrics.custody.WithLabelValues("retired").Inc()
		n.saveCustody()
		rel.Retire = true
		n.sendRelease(ctx, pred, rel)
		return
	}
	if m.r.Dist <= b.Dist {
		return // an older wave overtaken by a newer one
	}
	old := b.Dist
	b.Dist = m.r.Dist
	if b.Dist >= n.cfg.Depth {
		// The drop is written with the next checkpoint, like the distances a wave brings
		// (no fsync of its own: nothing is sent on the strength of it). A crash before
		// then brings the backup back with its last saved distance: one more copy kept,
		// as after a lost wave.
		n.removeBackup(i)
		n.metrics.custody.WithLabelValues("released").Inc()
	}
	// Pass the wave back unless the predecessor was already told it is Depth behind.
	if old < n.cfg.Depth-1 {
		rel.Dist = m.r.Dist + 1
		n.sendRelease(ctx, pred, rel)
	}
}

// peerDown regenerates the newest release that p acked and that is not yet released: p
// may have died holding the token. The release goes on under a new epoch, above every
// epoch this node has seen; older backups (lower epochs) are dropped.
func (n *Node) peerDown(ctx context.Context, p peer.ID) {
	if n.model != nil {
		return
	}
	ps := p.String()
	for i := len(n.ckpt.Backups) - 1; i >= 0; i-- {
		b := &n.ckpt.Backups[i]
		if b.To != ps || !b.Acked || b.Dist >= n.cfg.Depth {
			continue
		}
		tok, err := DecodeToken(b.Token)
		if err != nil {
			n.removeBackup(i)
			continue
		}
		tok.Epoch = min(max(n.ckpt.MaxEpoch, tok.Epoch), MaxEpoch-1) + 1
		raw := reEpoch(b.Token, tok.Epoch) // the same release and evidence, a new epoch
		b.Token, b.Acked, b.Dist = raw, false, 0
		n.progressed(tok.Epoch, tok.Hop)
		n.raise(markOf(tok))
		n.newEpoch(tok.Epoch)
		n.metrics.custody.WithLabelValues("regenerated").Inc()
		n.log.Warn().Str("down", shortID(p)).Uint64("epoch", tok.Epoch).Uint64("hop", tok.Hop).
			Msg("regenerating the token from this node's backup: its recipient is down")
		n.resend(ctx, raw, p)
		return
	}
}

// retryPending re-sends backups that found no live peer earlier.
func (n *Node) retryPending(ctx context.Context) {
	if n.model != nil {
		return
	}
	for _, b := range n.ckpt.Backups {
		if b.To == "" {
			n.resend(ctx, b.Token, "")
		}
	}
}

// resend sends the backup raw (the same release, possibly under a new epoch) to a live
// member other than avoid, charging a forward entry (fsynced) that names it before the
// send.
func (n *Node) resend(ctx context.Context, raw []byte, avoid peer.ID) {
	i := n.findRaw(raw)
	if i < 0 {
		return
	}
	to := n.pickPeer(avoid)
	if to == "" {
		n.ckpt.Backups[i].To = ""
		n.saveCustody()
		n.metrics.custody.WithLabelValues("no_peer").Inc()
		return
	}
	tok, err := DecodeToken(raw)
	if err != nil {
		n.removeBackup(i)
		return
	}
	e := privacy.Entry{Node: n.ID().String(), Run: n.cfg.Run, Walk: tok.Walk, Epoch: tok.Epoch, Hop: tok.Hop,
		Mechanism: privacy.MechForward, Clip: n.cfg.Clip, Lambda: n.cfg.Lambda, Recipient: to.String()}
	if err := n.store.AppendLedger([]privacy.Entry{e}); err != nil {
		n.log.Error().Err(err).Msg("cannot make the forward entry durable; the backup is not re-sent")
		n.ckpt.Backups[i].To = ""
		return
	}
	n.ownResends.Add(1)
	n.ckpt.Backups[i].To = n.pid(to)
	if n.saveCustody() != nil {
		// Not sent without a durable checkpoint naming it: retryPending tries again (with
		// a new forward entry, a safe over-count).
		n.ckpt.Backups[i].To = ""
		return
	}
	n.startSend(ctx, to, raw, false, 0)
}

// pickPeer returns a uniformly chosen live member other than this node and avoid (avoid
// itself if it is the only live one); "" when none is live.
func (n *Node) pickPeer(avoid peer.ID) peer.ID {
	n.mu.Lock()
	defer n.mu.Unlock()
	var cand []peer.ID
	for _, p := range n.members {
		if p != n.ID() && p != avoid && !n.down[p] {
			cand = append(cand, p)
		}
	}
	if len(cand) == 0 {
		if avoid != "" && avoid != n.ID() && !n.down[avoid] {
			return avoid
		}
		return ""
	}
	return cand[rand.IntN(len(cand))]
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
	pending []Release
	running bool
	s       network.Stream
}

// add queues r, merging it with a queued release of the same backup: a retirement
// replaces any release, a release is dropped after a retirement, and the higher
// distance is kept.
func (rs *relStream) add(r Release) {
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
func (n *Node) sendRelease(ctx context.Context, pred string, r Release) {
	if pred == "" {
		return
	}
	p, err := n.peerOf(pred)
	if err != nil || p == n.ID() || n.isDown(p) {
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
func (n *Node) writeReleases(ctx context.Context, p peer.ID, rs *relStream, batch []Release) {
	buf := make([]byte, 0, len(batch)*(4+ReleaseSize))
	acks := make([]byte, len(batch))
	for fails := 0; len(batch) > 0 && fails < 2; {
		if rs.s == nil {
			sctx, cancel := context.WithTimeout(ctx, n.cfg.AckTimeout)
			s, err := n.Host.NewStream(sctx, p, ReleaseProtocol(n.cfg.Run))
			cancel()
			if err != nil {
				n.log.Debug().Err(err).Str("to", shortID(p)).Msg("release not sent")
				return
			}
			rs.s = s
		}
		buf = buf[:0]
		for _, r := range batch {
			buf = binary.LittleEndian.AppendUint32(buf, ReleaseSize)
			buf = append(buf, EncodeRelease(r)...)
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
	ready := n.m != nil
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
	br := bufio.NewReaderSize(s, 16*(4+ReleaseSize))
	unacked := 0
	for {
		b, err := ReadFrame(br, ReleaseSize)
		var r Release
		if err == nil {
			r, err = DecodeRelease(b)
		}
		if err != nil {
			if errors.Is(err, ErrTooLarge) || errors.Is(err, ErrMalformed) || errors.Is(err, ErrVersion) {
				n.reject(lg, "release", err.Error())
				s.Reset()
			}
			return
		}
		select {
		case n.rel <- relMsg{from: from, r: r}:
		case <-time.After(n.cfg.AckTimeout / 2):
			s.Reset()
			return
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
