package node

import (
	"context"
	"errors"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/dpadmm/dpadmm/node/wire"
)

// startHeartbeats starts one sender per member: a heartbeat every Config.Heartbeat on a
// long-lived /dpadmm/<run>/alive/1 stream, whatever the node holds.
func (n *Node) startHeartbeats(ctx context.Context) {
	if n.cfg.Heartbeat < 0 {
		return
	}
	n.mu.Lock()
	ms := append([]peer.ID(nil), n.members...)
	n.liveSince = time.Now()
	n.mu.Unlock()
	for _, p := range ms {
		if p == n.ID() {
			continue
		}
		n.bg.Add(1)
		go func() { defer n.bg.Done(); n.beat(ctx, p) }()
	}
}

func (n *Node) beat(ctx context.Context, p peer.ID) {
	every := n.cfg.Heartbeat
	t := time.NewTicker(every)
	defer t.Stop()
	var s network.Stream
	defer func() {
		if s != nil {
			s.Reset()
		}
	}()
	var seq uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if s == nil {
			sctx, cancel := context.WithTimeout(ctx, 2*every)
			ns, err := n.Host.NewStream(sctx, p, wire.AliveProtocol(n.cfg.Run))
			cancel()
			if err != nil {
				continue
			}
			s = ns
		}
		seq++
		s.SetWriteDeadline(time.Now().Add(2 * every))
		if err := wire.WriteFrame(s, wire.EncodeHeartbeat(seq)); err != nil {
			s.Reset()
			s = nil
		}
	}
}

// handleAlive reads the heartbeats of one member and notes when each arrived.
func (n *Node) handleAlive(s network.Stream) {
	from := s.Conn().RemotePeer()
	n.mu.Lock()
	ready := n.walk.cust != nil
	n.mu.Unlock()
	if !ready {
		s.Reset() // membership not fixed yet: the sender reopens on its next beat
		return
	}
	lg := n.log.With().Str("from", shortID(from)).Logger()
	if !n.isMember(from) {
		n.reject(lg, "non-member", "heartbeat from a peer outside the membership")
		s.Reset()
		return
	}
	quiet := n.downAfter() + 10*time.Second
	for {
		s.SetReadDeadline(time.Now().Add(quiet))
		b, err := wire.ReadFrame(s, wire.HeartbeatSize)
		if err == nil {
			_, err = wire.DecodeHeartbeat(b)
		}
		if err != nil {
			if errors.Is(err, wire.ErrTooLarge) || errors.Is(err, wire.ErrMalformed) || errors.Is(err, wire.ErrVersion) {
				n.reject(lg, "heartbeat", err.Error())
			}
			s.Reset()
			return
		}
		n.mu.Lock()
		n.alive[from] = time.Now()
		n.mu.Unlock()
	}
}

// downAfter is the silence after which a member is declared down.
func (n *Node) downAfter() time.Duration {
	return time.Duration(n.cfg.HeartbeatMisses) * n.cfg.Heartbeat
}

// checkLiveness runs in the loop: members silent for longer than downAfter are declared
// down, members heard from again are declared up, and the custody machine is told.
//
// A check that comes more than downAfter (and two heartbeat periods, so that the
// ordinary jitter of the checks never counts) after the previous one finds the node itself
// was not running (its process stopped or suspended, or its loop blocked): the silence
// it sees is its own, and the heartbeats that arrived meanwhile may not have been read
// yet. The silence clock restarts then (liveSince), so that no member is declared down
// until it has missed its beats for downAfter after the node resumed; otherwise every
// member would be declared down at once, their unacked releases redirected and their
// acked backups regenerated under new epochs. A member already down comes back up only
// on a heartbeat actually heard. Only the first of consecutive late checks restarts the
// clock: a loop that blocks before every check (long steps with short heartbeats) still
// declares a silent member down one late check later, and its heartbeats, read by their
// own stream handlers while the loop is blocked, keep live members up.
func (n *Node) checkLiveness(ctx context.Context) {
	if n.cfg.Heartbeat < 0 {
		return
	}
	limit, now := n.downAfter(), time.Now()
	var downs, ups []peer.ID
	n.mu.Lock()
	stalled := time.Duration(0)
	late := !n.liveCheck.IsZero() && now.Sub(n.liveCheck) > max(limit, 2*n.cfg.Heartbeat)
	if late && !n.liveReset {
		stalled = now.Sub(n.liveCheck)
		n.liveSince = now
	}
	n.liveCheck, n.liveReset = now, late
	for _, p := range n.members {
		if p == n.ID() {
			continue
		}
		heard := n.alive[p]
		last := heard
		if last.Before(n.liveSince) {
			last = n.liveSince
		}
		silent := now.Sub(last) > limit
		switch {
		case silent && !n.down[p]:
			n.down[p] = true
			downs = append(downs, p)
		case !silent && n.down[p] && now.Sub(heard) <= limit:
			delete(n.down, p)
			ups = append(ups, p)
		}
	}
	n.mu.Unlock()
	if stalled > 0 {
		n.log.Warn().Dur("stalled_for", stalled).Msg("the node did not run for longer than a member's down time: liveness is judged afresh from now")
	}
	for _, p := range downs {
		n.metrics.custody.WithLabelValues("peer_down").Inc()
		n.log.Warn().Str("peer", shortID(p)).Dur("silent_for", limit).Msg("member declared down (no heartbeat)")
		n.input(ctx, CustodyInput{Kind: "down", Peer: n.memberIndex(p)})
	}
	for _, p := range ups {
		n.metrics.custody.WithLabelValues("peer_up").Inc()
		n.log.Info().Str("peer", shortID(p)).Msg("member declared up (heartbeats resumed)")
		n.input(ctx, CustodyInput{Kind: "up", Peer: n.memberIndex(p)})
	}
}

// isDown reports whether p is currently declared down.
func (n *Node) isDown(p peer.ID) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.down[p]
}
