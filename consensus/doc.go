// Package consensus defines the problem every dpadmm node works on: datasets and their
// formats (CSV, LIBSVM, synthetic, embedded demo data), preprocessing and splitting,
// losses and regularizers, proximal operators and local solvers, metrics, and the
// centralized reference solver used to measure suboptimality.
//
// The package is pure: no I/O other than reading dataset files handed to its loaders,
// no clocks, no global randomness, no goroutines.
//
// Why it has more than 60 exported names: it is the data layer every other package
// shares (datasets and their loaders, schemas, scalers, losses and regularisers, the
// Newton and FISTA solvers and their options, synthetic data, splits, metrics); one
// package keeps one definition of each, which the machines, the drivers and the command
// line all use.
package consensus
