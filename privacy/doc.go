// Package privacy holds everything differential privacy in dpadmm: noise from an injected
// source (cryptographically secure in production), clipping, the Renyi-DP accountant,
// the network-DP (pairwise) accountant for random walks, budgets and the ledger format.
//
// The package is pure: it never reads clocks, files or global random sources.
//
// Why it has more than 60 exported names: every figure the tool prints comes from here,
// and each accountant is a family of functions (curves, bounds, conversions, their
// theorem names and conditions as constants): RDP and its conversions, exact Gaussian
// DP and the privacy-loss distribution, the local, planned and realised walk
// accountants, subsampling, Theorem V.1 and Definition V.1, budgets, calibration, the
// ledger format and its chain, traces, the audit statistics, the noise sources, and the
// JSON figure types. Keeping them in one pure package gives one function per rule for
// every output (see the rules test in testnet/rules_test.go).
package privacy
