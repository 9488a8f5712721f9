// Package gossip implements neighbour-exchange decentralized ADMM machines after X. Zhang,
// M. M. Khalili, M. Liu, "Recycled ADMM: Improving the Privacy and Accuracy of Distributed
// Algorithms", IEEE TIFS 15 (2020):
//
//   - ADMM: conventional decentralized ADMM in node-aggregated form, eqs. (8)-(9);
//   - RADMM: R-ADMM (Alg. 1): odd iterations solve the local subproblem (12) exactly, even
//     iterations take the recycled closed-form step (10) that touches no data;
//   - MRADMM: MR-ADMM (Alg. 2): R-ADMM with per-node non-decreasing penalties eta_i(2k-1);
//   - private R-ADMM/MR-ADMM (Alg. 3): the same with a finite Alpha, i.e. objective
//     perturbation eps^T f in every odd subproblem, eps of density proportional to
//     exp(-alpha ||eps||) (norm Gamma(d, 1/alpha), uniform direction), redrawn every odd
//     iteration;
//   - ADMMDVP and ADMMPVP: BASELINES from T. Zhang and Q. Zhu, "Dynamic differential privacy
//     for ADMM-based distributed classification learning", IEEE TIFS 12 (2017): dual and
//     primal variable perturbation of conventional ADMM.
//   - MADMM: a BASELINE in the style of private M-ADMM with penalty perturbation (X. Zhang,
//     M. M. Khalili, M. Liu, ICML 2018): conventional ADMM with a non-decreasing penalty
//     eta_i(t) and linear noise eta_i(t) eps^T f in every solve, nothing recycled.
//
// One Machine per node. It exchanges its primal vector f_i(t) with its graph neighbours every
// iteration (Message{From, Iter, Vec}); it moves to iteration t+1 once it holds every
// neighbour's f_j(t) (the barrier). An Exchange wraps the Machine with the barrier policy
// that every driver applies: early frames held within a window, the barrier timeout in
// ticks, the liveness of the neighbours as the driver observes it (PeerDown, PeerUp,
// Reconnected), the missing-neighbour policy (MissingStop, MissingWait, MissingStale with
// durable stale uses), re-sends of the last releases after a restart or a reconnection,
// and the end of the run (Ready.Done or Ready.Stop). Both follow the contract of package
// walk: Step/Tick/Ready/Advance, with the ledger entry of every release durable before its
// Outbox is sent. They are pure and deterministic: noise comes from an injected
// privacy.Noise, there is no I/O, clock or goroutine. node.Node.RunRADMM drives an
// Exchange over libp2p, testnet/faultsim.GossipFaultNet over a virtual clock with injected faults;
// the transcripts in testdata/barrier show the policy step by step.
//
// The even step is computed the paper's way, (19): from the KKT-recovered noisy gradient
// eps + grad O(f(2k-1)) = -2 lambda(2k-2) - eta sum_j (2 f_i(2k-1) - f_i(2k-2) - f_j(2k-2))
// and the dual-update quantity eta sum_j (f_i(2k-1) - f_j(2k-1)); it never reads the clean
// gradient, so even iterations are post-processing (Lemma V.1). Tests check it against the
// same formula with eps + grad O computed directly and against the closed form from
// exchanged vectors only (digest 2.5).
//
// Local objective (Objective): O(f, D_i) = (C_i/B_i) sum_n L(y_n f.x_n) + (rho/N)||f||^2/2.
// The simulator driver (testnet/sim.RunGossip) maps the paper's constants onto the reported
// problem (mean loss over all rows + (l2/2)||f||^2) with C_i = C N B_i/M and rho = C N l2,
// so sum_i O = C N * objective and the consensus minimiser is consensus.Solve's.
//
// Known property: with node-specific penalties the dual sum sum_i lambda_i is not conserved
// at 0, and a consensus limit f satisfies sum_i grad O_i(f) = -2 sum_i lambda_i; it is then
// slightly off the optimum (TestHeterogeneousPenaltyBias). A common schedule (R-ADMM, or
// MR-ADMM with the same eta(k) at every node, as in the paper's private experiments) keeps
// the dual sum at 0 and converges to the optimum.
//
// Privacy accounting is in privacy/objpert.go (Theorem V.1).
//
// Why it has more than 60 exported names: the R-ADMM family has several machines
// (ADMM, R-ADMM, MR-ADMM, DVP, PVP, the M-ADMM-style baseline), each with its options,
// events and Ready, plus the barrier policy (Exchange) and the set-up rule (Setup) the
// simulator, the fault study and the node share; they are one package so that every
// driver runs the same rules.
package gossip
