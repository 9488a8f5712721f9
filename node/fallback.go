package node

import (
	"context"
	"time"

	"github.com/dpadmm/dpadmm/walk"
)

// This file holds the slow global fallback of the token custody (the rule of
// walk.CustodyConfig.FallbackTimeout, on wall-clock time): a node that has released a
// token and then sees no token, ack or release for the fallback timeout re-sends its last
// release under a new epoch. It covers what the backup chain cannot: the holder and every
// backup holder within Depth hand-offs dying together, or a release wave cut by a crash.

// fallbackHops is the number of mean return times (about n hops each) a node waits before
// the fallback: a node the live walk did not visit for 20*n hop times is a spurious
// fallback, with probability about e^-20 per node and period.
const fallbackHops = 20

// fallback is the loop-owned state of the slow fallback.
type fallback struct {
	active   time.Time          // last token accepted, ack or release received here
	progress map[Mark]time.Time // last ack or release per backup (epoch, hop); digest unused
	lastAt   time.Time          // time, epoch and hop of the last token accepted here
	lastE    uint64
	lastH    uint64
	hop      time.Duration // slowest hop time observed between two visits of one lineage
	// sent counts the fallback re-sends since the last activity (touch resets it): each
	// waits twice as long as the one before (up to 8 timeouts), and after MaxFallbacks the
	// node stops re-sending.
	sent   int
	gaveUp bool
}

// MaxFallbacks is how many fallback re-sends a node makes without any token, ack or
// release in between before it stops (a run whose other members are gone).
const MaxFallbacks = 8

// fallbackFloor is the shortest derived fallback timeout: twice the time a regeneration
// needs (the down declaration plus an ack timeout), so that the fallback never pre-empts
// the faster recovery by the backup chain.
func (n *Node) fallbackFloor() time.Duration {
	d := n.cfg.AckTimeout
	if n.cfg.Heartbeat > 0 {
		d += n.downAfter()
	}
	return 2 * d
}

// fallbackTimeout returns the current fallback timeout, 0 when the fallback is disabled:
// Config.FallbackTimeout when > 0, else the larger of fallbackFloor and fallbackHops*n*h,
// with n the members and h the slowest hop time observed here.
func (n *Node) fallbackTimeout() time.Duration {
	switch {
	case n.cfg.FallbackTimeout < 0:
		return 0
	case n.cfg.FallbackTimeout > 0:
		return n.cfg.FallbackTimeout
	}
	n.mu.Lock()
	members := len(n.members)
	n.mu.Unlock()
	return max(n.fallbackFloor(), time.Duration(fallbackHops*members)*n.fb.hop)
}

// fallbackEvery is the period at which the loop checks the fallback; 0 = never.
func (n *Node) fallbackEvery() time.Duration {
	switch {
	case n.cfg.FallbackTimeout < 0:
		return 0
	case n.cfg.FallbackTimeout > 0:
		return min(max(n.cfg.FallbackTimeout/20, 10*time.Millisecond), time.Second)
	}
	return time.Second
}

// touch records token, ack or release activity.
func (n *Node) touch() { n.fb.active, n.fb.sent, n.fb.gaveUp = time.Now(), 0, false }

// observeHop records the arrival of token (epoch, hop) here: the time per hop since the
// previous visit of the same lineage raises the observed hop time.
func (n *Node) observeHop(epoch, hop uint64) {
	now := time.Now()
	if !n.fb.lastAt.IsZero() && epoch == n.fb.lastE && hop > n.fb.lastH {
		n.fb.hop = max(n.fb.hop, now.Sub(n.fb.lastAt)/time.Duration(hop-n.fb.lastH))
	}
	n.fb.lastAt, n.fb.lastE, n.fb.lastH = now, epoch, hop
	n.touch()
}

// progressed records an ack or release for the backup of release (epoch, hop).
func (n *Node) progressed(epoch, hop uint64) {
	if n.fb.progress == nil {
		n.fb.progress = map[Mark]time.Time{}
	}
	n.fb.progress[Mark{Epoch: epoch, Hop: hop}] = time.Now()
}

// lastRelease returns the encoded token of this node's last release: the highest by
// (epoch, hop, digest) among the token in custody and the backups. Every new release of a
// node is above all its earlier ones (fence), so this is the most recent; its z and zhat
// are exactly what was released (a regeneration only changed the epoch).
func (n *Node) lastRelease() (walk.Token, []byte, bool) {
	var best walk.Token
	var bestRaw []byte
	var bm Mark
	ok := false
	consider := func(raw []byte) {
		if len(raw) == 0 {
			return
		}
		t, err := DecodeToken(raw)
		if err != nil {
			return
		}
		if m := markOf(t); !ok || m.cmp(bm) > 0 {
			best, bestRaw, bm, ok = t, raw, m, true
		}
	}
	consider(n.ckpt.Out)
	for _, b := range n.ckpt.Backups {
		consider(b.Token)
	}
	return best, bestRaw, ok
}

// checkFallback runs in the loop. Acked backups without an ack or release for the timeout
// are dropped (their release wave will not come). When the node has had no token, ack or
// release for the timeout, holds nothing (no token queued or in flight, no unacked
// backup) and has released a token before, it re-sends its last release under a new
// epoch, above every epoch it has seen: the same noised bytes of z and zhat (no new noise,
// no new use of the data), charged as a forward entry that is durable before the send.
// idle reports that the loop holds no token.
func (n *Node) checkFallback(ctx context.Context, idle bool) {
	to := n.fallbackTimeout()
	if to <= 0 || n.model != nil || n.paused.Load() {
		return
	}
	now := time.Now()
	if n.fb.active.IsZero() {
		n.fb.active = now
	}
	k, dropped := 0, false
	for _, b := range n.ckpt.Backups {
		e, h := rawID(b.Token)
		key := Mark{Epoch: e, Hop: h}
		last, seen := n.fb.progress[key]
		if !seen {
			n.progressed(e, h) // restored after a restart: count from now
			last = now
		}
		if b.Acked && now.Sub(last) >= to {
			dropped = true
			delete(n.fb.progress, key)
			n.metrics.custody.WithLabelValues("expired").Inc()
			continue
		}
		n.ckpt.Backups[k] = b
		k++
	}
	n.ckpt.Backups = n.ckpt.Backups[:k]
	if dropped {
		n.saveCustody()
	}
	if len(n.fb.progress) > len(n.ckpt.Backups) { // forget backups dropped by waves or fences
		keep := make(map[Mark]time.Time, len(n.ckpt.Backups))
		for _, b := range n.ckpt.Backups {
			e, h := rawID(b.Token)
			keep[Mark{Epoch: e, Hop: h}] = n.fb.progress[Mark{Epoch: e, Hop: h}]
		}
		n.fb.progress = keep
	}
	if n.fb.sent >= MaxFallbacks {
		if !n.fb.gaveUp {
			n.fb.gaveUp = true
			n.log.Error().Int("re_sends", n.fb.sent).Msg("slow fallback: no token, ack or release after the last re-sends; not re-sending again (the other members seem gone)")
		}
		return
	}
	if !idle || now.Sub(n.fb.active) < to<<min(n.fb.sent, 3) {
		return
	}
	for _, b := range n.ckpt.Backups {
		if !b.Acked {
			return // a hand-off of this node is still in flight (or waits for a live peer)
		}
	}
	tok, last, ok := n.lastRelease()
	if !ok {
		return // never released: nothing to fall back on
	}
	n.fb.active = now
	n.fb.sent++
	tok.Epoch = min(max(n.ckpt.MaxEpoch, tok.Epoch), MaxEpoch-1) + 1
	raw := reEpoch(last, tok.Epoch) // the same release and evidence, a new epoch
	n.raise(markOf(tok))
	n.newEpoch(tok.Epoch) // drops every older backup: the fallback lineage replaces them
	n.ckpt.Backups = append(n.ckpt.Backups[:0], Backup{Token: raw})
	n.progressed(tok.Epoch, tok.Hop)
	n.saveCustody()
	n.metrics.custody.WithLabelValues("fallback").Inc()
	n.log.Warn().Dur("silent_for", to).Uint64("epoch", tok.Epoch).Uint64("hop", tok.Hop).
		Msg("slow fallback: no token, ack or release for the fallback timeout; re-sending this node's last release under a new epoch")
	n.resend(ctx, raw, "")
}
