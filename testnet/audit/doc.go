// Package audit is the empirical privacy audit behind 'dpadmm audit': it runs the shipped
// mechanisms (the walk's local steps through walk.StepRun, R-ADMM's objective perturbation
// through gossip's machines) on neighbouring datasets many times, scores each release
// with a distinguishing test, and turns the hit rates into a lower bound on epsilon with
// a confidence interval, to compare with the accountant's upper bound (an audit whose
// lower bound exceeds the claim reports a violation).
package audit
