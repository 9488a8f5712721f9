// Package testnet holds the deterministic simulator, invariant checkers, the fault
// scheduler, launchers for in-process and multi-process networks, and experiment runners.
package testnet
