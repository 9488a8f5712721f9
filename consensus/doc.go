// Package consensus defines the problem every dpadmm node works on: datasets and their
// formats (CSV, LIBSVM, synthetic, embedded demo data), preprocessing and splitting,
// losses and regularizers, proximal operators and local solvers, metrics, and the
// centralized reference solver used to measure suboptimality.
//
// The package is pure: no I/O other than reading dataset files handed to its loaders,
// no clocks, no global randomness, no goroutines.
package consensus
