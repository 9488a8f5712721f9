package node

import (
	"context"
	"encoding/json"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/rs/zerolog"
)

// The control topic is protected at the GossipSub level, before a message is relayed:
//
//   - a topic validator rejects what no honest dpadmm node sends (larger than
//     maxControl, not a control message of this run, an unknown type), so it is neither
//     delivered nor forwarded. A config-hash mismatch is NOT rejected there: a node with
//     another configuration is misconfigured, not hostile, and the application logs it;
//   - peer scoring charges every rejected message to the peer that delivered it (P4,
//     invalid message deliveries, squared), and the thresholds below stop gossip to it,
//     then publishing to it, then accepting anything from it (graylist). The count decays
//     by 1% per second: a peer that sent four is graylisted for about 12 s and its
//     score recovers fully in about ten minutes.
//
// Messages are signed by their publisher (pubsub's default StrictSign policy), so the
// "from" of a control message is authenticated.

// controlScoreParams returns the peer-score parameters for a run's control topic.
func controlScoreParams(topic string) (*pubsub.PeerScoreParams, *pubsub.PeerScoreThresholds) {
	params := &pubsub.PeerScoreParams{
		SkipAtomicValidation: true,
		Topics: map[string]*pubsub.TopicScoreParams{
			topic: {
				SkipAtomicValidation: true,
				TopicWeight:          1,
				// Unused (weight 0) but not zero: pubsub divides the time in mesh by it
				// whenever a peer is in the mesh, and a zero quantum panics.
				TimeInMeshQuantum:              time.Second,
				InvalidMessageDeliveriesWeight: -200,
				InvalidMessageDeliveriesDecay:  0.99,
			},
		},
		AppSpecificScore:          func(peer.ID) float64 { return 0 },
		BehaviourPenaltyWeight:    -10,
		BehaviourPenaltyThreshold: 5,
		BehaviourPenaltyDecay:     0.9,
		DecayInterval:             time.Second,
		DecayToZero:               0.01,
		RetainScore:               10 * time.Minute,
	}
	// The penalty is -200 x (invalid messages)^2, the count decaying by 1% per second:
	// one message gives -200 (no effect), two -800 (below the gossip threshold), three
	// -1800 (below the publish threshold) and four -3200 (graylisted: nothing from the
	// peer is accepted, for about 12 s after four, longer after more).
	th := &pubsub.PeerScoreThresholds{
		SkipAtomicValidation: true,
		GossipThreshold:      -500,
		PublishThreshold:     -1000,
		GraylistThreshold:    -2500,
	}
	return params, th
}

// controlVerdict classifies a control-topic payload: "" to accept, else the reason to
// reject it.
func controlVerdict(run string, data []byte) string {
	if len(data) > maxControl {
		return "oversized"
	}
	var m ctlMsg
	if err := json.Unmarshal(data, &m); err != nil {
		return "malformed"
	}
	if m.Run != run {
		return "foreign run"
	}
	switch m.Type {
	case "announce", "join", "start", "final", "mismatch":
		return ""
	}
	return "unknown type"
}

// validateControl is the control topic's GossipSub validator.
func (n *Node) validateControl(_ context.Context, from peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
	if why := controlVerdict(n.cfg.Run, msg.Data); why != "" {
		n.log.Warn().Str("from", shortID(msg.GetFrom())).Str("via", shortID(from)).Str("reason", why).Int("bytes", len(msg.Data)).
			Msg("control message rejected before relaying (the delivering peer's score is charged)")
		n.metrics.control.WithLabelValues(why).Inc()
		return pubsub.ValidationReject
	}
	if why := n.memberVerdict(msg.GetFrom(), msg.Data); why != "" {
		n.limitedLog(zerolog.WarnLevel, "control-member").Str("from", shortID(msg.GetFrom())).Str("via", shortID(from)).Str("reason", why).
			Msg("control message rejected before relaying (the delivering peer's score is charged)")
		n.metrics.control.WithLabelValues(why).Inc()
		return pubsub.ValidationReject
	}
	return pubsub.ValidationAccept
}

// memberVerdict rejects, once the membership is fixed, a final model published by a
// non-member, and at any time a start message or announcement published by a peer other
// than the pinned starter (Config.Starter or the allow-list's owner).
func (n *Node) memberVerdict(publisher peer.ID, data []byte) string {
	var m struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(data, &m) != nil {
		return ""
	}
	switch m.Type {
	case "final":
		if fixed, in := n.gater.member(publisher); fixed && !in {
			return "final from a non-member"
		}
	case "start", "announce":
		if p := n.pinnedStarter(); p != "" && publisher != p {
			return m.Type + " from a peer other than the pinned starter"
		}
	}
	return ""
}
