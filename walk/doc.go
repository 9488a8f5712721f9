// Package walk implements random-walk private ADMM (Cyffers, Bellet, Basu, Algorithm 4)
// as a deterministic state machine: a model token travels from node to node, each holder
// makes one clipped, noisy local ADMM update and hands the token to a random peer.
//
// The machine does no I/O. Time is ticks, randomness and noise are injected through the
// configuration, and every effect is returned in a Ready value that the driver must apply
// in order: persist the ledger, then send, then Advance.
package walk
