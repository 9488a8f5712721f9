// Package faultsim runs the node's machines through the driver contract of node/drive on
// a deterministic virtual-clock network with injected faults (faultnet.go: delay, loss,
// duplication, partitions, crash and restart, heartbeat or connection liveness, datagram
// or stream links): the walk's crash study (RunFaults) and R-ADMM's fault study
// (RunGossipFaults). A restarted node restores from its durable state as a node does.
// It depends on testnet/sim and on no libp2p.
package faultsim
