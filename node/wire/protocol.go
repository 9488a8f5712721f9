package wire

import "github.com/libp2p/go-libp2p/core/protocol"

// The protocol IDs, the control topic and the ack codes of a run: every name a peer
// sees on the wire, in one place. A protocol's version suffix changes with its frame
// format.

// Ack codes written by the receiver of a hand-off, one byte per frame.
const (
	AckOK        byte = 0 // token durably stored; custody passes to the receiver
	AckDuplicate byte = 1 // this exact (epoch, hop) was already stored: custody passes too
	AckStale     byte = 2 // older than what the receiver has seen: the sender drops the token (fenced)
	AckReject    byte = 3 // malformed, foreign or from a non-member: the sender tries another peer
	AckBusy      byte = 4 // receiver not ready (membership not fixed, or still sending): retry later
)

// WalkProtocol returns the hand-off protocol ID of a run.
func WalkProtocol(run string) protocol.ID { return protocol.ID("/dpadmm/" + run + "/walk/1") }

// DoneProtocol returns the protocol on which members confirm receipt of the final model.
func DoneProtocol(run string) protocol.ID { return protocol.ID("/dpadmm/" + run + "/done/1") }

// FinalProtocol returns the protocol on which the releaser of the final model pushes it
// directly to members that have not confirmed it after a few control-plane
// publications (a member whose GossipSub mesh is not formed would otherwise wait forever).
// The final model is public: every member receives it anyway. Members also ask each other
// for the final model and for their position counts on it.
func FinalProtocol(run string) protocol.ID { return protocol.ID("/dpadmm/" + run + "/final/1") }

// ReleaseProtocol returns the protocol on which a node tells its predecessor on the
// walk's path how far the token got beyond the predecessor's release (release chain).
func ReleaseProtocol(run string) protocol.ID { return protocol.ID("/dpadmm/" + run + "/release/1") }

// AliveProtocol returns the heartbeat protocol of a run.
func AliveProtocol(run string) protocol.ID { return protocol.ID("/dpadmm/" + run + "/alive/1") }

// RADMMProtocol returns the neighbour-exchange protocol ID of a run: the direct stream
// that carries R-ADMM/MR-ADMM/ADMM vectors between graph neighbours (never pubsub).
func RADMMProtocol(run string) protocol.ID { return protocol.ID("/dpadmm/" + run + "/radmm/1") }

// ControlTopic returns the GossipSub control topic of a run.
func ControlTopic(run string) string { return "dpadmm/" + run + "/control" }
