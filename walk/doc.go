// Package walk implements random-walk private ADMM (Cyffers, Bellet, Basu, Algorithm 4)
// as a deterministic state machine: a model token travels from node to node, each holder
// makes one clipped, noisy local ADMM update and hands the token to a random peer.
//
// The machine does no I/O. Time is ticks, randomness and noise are injected through the
// configuration, and every effect is returned in a Ready value that the driver must apply
// in order: persist the ledger, then send, then Advance.
//
// The local step is configurable (Config.Step): Algorithm 4's exact prox (the default), its
// linearized form (linear.go), the Laplacian-smoothed DP-SADMM step of Liu et al. 2022
// ("ls-sgd", linear.go, lsop.go) and the random-walk DP-SGD baseline ("sgd", sgd.go); the
// gradient steps share gradstep.go. The variance-reduced DP-VRADMM of Liu et al. 2022 is
// not provided: its snapshot gradient uses all of a node's data without noise and its
// strongly convex variant re-initialises the dual from it (the paper's accounting covers
// neither, and its Theorem 1 has unspecified constants); see the privacy package's
// lssgd.go.
//
// Why it has more than 60 exported names: the walk has two machines (Machine, the
// step; Custody, custody and the fallback) whose inputs, Readies, events and snapshots
// are exported for the drivers, the simulator and the transcript tests, plus the local
// steps and their parameters, the lattice update and the budget rules.
package walk
