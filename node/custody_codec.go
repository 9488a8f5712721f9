package node

import "github.com/libp2p/go-libp2p/core/protocol"

// ReleaseProtocol returns the protocol on which a node tells its predecessor on the
// walk's path how far the token got beyond the predecessor's release (release chain).
func ReleaseProtocol(run string) protocol.ID { return protocol.ID("/dpadmm/" + run + "/release/1") }

// AliveProtocol returns the heartbeat protocol of a run.
func AliveProtocol(run string) protocol.ID { return protocol.ID("/dpadmm/" + run + "/alive/1") }
