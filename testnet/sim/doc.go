// Package sim is the deterministic single-goroutine simulator of dpadmm: the random walk
// (Run, NewSim) and the neighbour exchange (RunGossip, NewGossipSim) drive the same
// machines as a node (walk.Custody through node/drive, gossip.Exchange), with seeded
// randomness and noise, so that a seed gives the same model on every run and on real
// hosts (the launchers of package testnet build their reports through Prepare and
// Prepared.NetReport, the rules of this package).
//
// It also holds what every report shares: the options and the report types (Report,
// Privacy, the pairwise and budget sections, NetworkReport), the accounting of a run
// (Account, the planned and realised pairwise matrices, their CSV and PNG), budgets, the
// warnings about a run's settings, and the per-node ledger files. That is why it has more than
// 60 exported names: the report's JSON types are its API (docs/report-schema.md lists
// their keys). It depends on no libp2p, no data directory and no network.
package sim
