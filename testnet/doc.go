// Package testnet launches networks of real nodes on one machine: `--mem` (real libp2p
// hosts in one process, on TCP loopback or go-libp2p's mock network) and `--procs` (one
// `dpadmm node` process per shard), for the walk and for R-ADMM, with the defaults of the
// `dpadmm testnet` command. Its reports are the simulator's: a launcher measures the run
// (model, hops, the path rebuilt from the nodes' ledgers, wall time) and
// sim.Prepared.NetReport builds the report with the simulator's rules, so `--sim`, `--mem`
// and `--procs` agree bit for bit.
//
// The sub-packages, each depending only on those listed before it:
//
//   - testnet/sim: the deterministic simulators (walk and R-ADMM), their options, the
//     report and its privacy section, budgets, the planned and realised pairwise
//     matrices and their plots, the warnings, the simulator's ledger files. It imports
//     no libp2p (checked by TestDriveImportsNoLibp2p).
//   - testnet/faultsim: the virtual-clock fault network and the walk's crash study and
//     R-ADMM's fault study on it; no libp2p either.
//   - testnet/audit: the empirical privacy audit of the shipped mechanisms (dpadmm audit).
//   - testnet (this package): the launchers of real hosts and processes.
//   - testnet/experiment: the papers' experiments (Fig. 5, the walk variants, gradient
//     ADMM) and the utility scorecard, with their plots; it uses the testnet defaults.
//
// testnet/transcript renders the machines' transcripts; testnet/internal/fixture holds
// data the test suites share.
package testnet
