// Package gossip implements neighbour-exchange decentralized ADMM machines: conventional
// decentralized ADMM, R-ADMM, MR-ADMM and private MR-ADMM (Zhang, Khalili, Liu), and the
// perturbation baselines. The machines are pure and deterministic.
package gossip
