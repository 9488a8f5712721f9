// Package node is the runtime that owns one machine and binds it to go-libp2p: identity,
// direct-stream protocols for private payloads, the GossipSub control plane, discovery,
// the durable store, the HTTP status and metrics endpoint, and logging.
package node
