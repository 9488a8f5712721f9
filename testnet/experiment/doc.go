// Package experiment reproduces the papers' experiments behind 'dpadmm experiment' (the
// Fig. 5 comparison of R-ADMM with its baselines, the walk variants of papers 000-002
// against epsilon, gradient ADMM) and the utility scorecard (accuracy or R^2 against
// epsilon per dataset, against the non-private model of the same objective), with their
// CSV files and PNG plots. Each run goes through testnet/sim.
package experiment
