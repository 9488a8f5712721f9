package consensus

// Numerical kernels exported for the reference solvers in the tests of other packages
// (gossip/ solves its perturbed local problems with Newton, like the walk's prox; its
// known-answer test compares against a scalar Cholesky solver).

// Cholesky computes the lower factor L of the symmetric p x p matrix whose lower
// triangle is in a (row-major) into l, and reports false when a is not positive definite.
func Cholesky(l, a []float64, p int) bool { return cholesky(l, a, p) }

// CholSolve solves L L^T x = b into x for a factor from Cholesky (x may alias b).
func CholSolve(x, l, b []float64, p int) { cholSolve(x, l, b, p) }

// Sigmoid returns 1/(1+exp(-t)) without overflow.
func Sigmoid(t float64) float64 { return sigmoid(t) }
