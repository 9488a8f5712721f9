// Package privacy holds everything differential privacy in dpadmm: noise from an injected
// source (cryptographically secure in production), clipping, the Renyi-DP accountant,
// the network-DP (pairwise) accountant for random walks, budgets and the ledger format.
//
// The package is pure: it never reads clocks, files or global random sources.
package privacy
