package node

import (
	"fmt"
	"math"
	"time"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/walk"
)

// Profiles of a node's network settings (ApplyProfile), after kubo's config profiles.
const (
	// ProfileTest: 127.0.0.1 TCP, no mDNS, short timeouts (test harnesses, one machine).
	ProfileTest = "test"
	// ProfileLAN: every interface, TCP and QUIC, mDNS discovery (the default).
	ProfileLAN = "lan"
	// ProfileInternet: every interface, TCP and QUIC, no mDNS, NAT traversal, long
	// timeouts; peers come from --bootstrap or --peer.
	ProfileInternet = "internet"
)

// Profiles lists the profile names in the order of the help text.
var Profiles = []string{ProfileTest, ProfileLAN, ProfileInternet}

// DefaultConfig returns the configuration of a random-walk node with the defaults of
// 'dpadmm node' and the lan profile. The caller sets what identifies the node and its
// run: Run, DataDir, Data (and Start, Members, ... as needed). The walk's
// RADMMDefaultL2 is the default l2 of a neighbour-exchange run: rho/N of Theorem V.1's
// strongly convex regulariser, which its figure's Jacobian term divides by.
const RADMMDefaultL2 = 1e-2

// hyperparameters are those of the simulator's demo ('dpadmm testnet'), so that a run
// over real nodes and a simulated one start from the same settings.
func DefaultConfig() Config {
	var c Config
	// The problem: L2-regularised logistic regression, l2 1e-3 for the walk (with the
	// unpenalised intercept, a stronger penalty shrinks the features' weights until the
	// intercept's class prior decides most rows: breast cancer at sigma 1 falls from 0.94
	// to 0.34 test accuracy at l2 1e-2); a neighbour-exchange run uses RADMMDefaultL2.
	c.Problem = consensus.Problem{Loss: consensus.Logistic, Reg: consensus.Regularizer{L2: 1e-3}}
	// Gamma (prox parameter, dimensionless) 0.03: the per-record radius of one update is
	// gamma (c L + tol), c = n/M the weight of one row (privacy.RecordClip), so the noise a
	// target epsilon needs shrinks with gamma as fast as the update's signal; a small gamma
	// with few updates is the measured optimum at epsilon 1-2 (README: the scorecard;
	// breast cancer, 3 and 50 nodes, gamma 0.01-1).
	c.Gamma = 0.03
	// Lambda 0.1: a strong relaxation averages the noise of successive updates in u and
	// z (at lambda 0.5 the 50-node demo at epsilon 2 loses 5-20 points).
	c.Lambda = 0.1
	// Clip 0.1 bounds ||x - z|| (feature units, rows scaled to norm <= 1); it is the
	// node-level sensitivity, and the record radius is far below it at the defaults.
	// Sigma 1 is used only with an explicit --sigma: by default the command calibrates
	// sigma to --target-epsilon (cmd/dpadmm: DefaultTargetEpsilon).
	c.Clip, c.Sigma = 0.1, 1
	// MaxUpdates 20: the hard cap K_i that every privacy bound needs. Few updates, each
	// with less noise, beat many noisier ones at a fixed epsilon; 20 rather than 10 for
	// the multinomial models, which need more steps (README: the scorecard; wine on 3
	// nodes at epsilon 2: 0.889 against 0.815 at 10, breast cancer unchanged).
	c.MaxUpdates = 20
	// Hops 60: K, the walk's length: n * MaxUpdates for the 3-node LAN of the README, so
	// that hops are noisy updates, not forwards.
	c.Hops = 60
	// Delta 1e-5: the delta of every (epsilon, delta) figure (below 1/rows of the
	// embedded data).
	c.Delta = privacy.DefaultDelta
	// BudgetKind local: a budget (if any) bounds the figure that holds against any
	// observer.
	c.BudgetKind = walk.BudgetLocal
	// MinPeers 2: the smallest run that is a network.
	c.MinPeers = 2
	// Heartbeat 1 s and HeartbeatMisses 15: a member is declared down after 15 s of
	// silence, generous enough that a busy machine or a quick restart does not trigger
	// a regeneration.
	c.Heartbeat, c.HeartbeatMisses = time.Second, 15
	// Depth 8: backups are kept until the token is 8 acked hand-offs further on; losing
	// the token then needs 9 simultaneous crashes along the path, about 0.25^8 = 1.5e-5
	// at 25% crashes (docs/fault-tolerance.md).
	c.Depth = 8
	// StatusPeriod: the public /status snapshot is refreshed this often.
	c.StatusPeriod = DefaultStatusPeriod
	if err := ApplyProfile(&c, ProfileLAN); err != nil {
		panic(err) // a known profile
	}
	return c
}

// DefaultRADMMParams returns the neighbour-exchange parameters of 'dpadmm node --algo
// radmm|...' and the simulator (Zhang, Khalili, Liu 2020, Sec. VI): the caller sets Algo
// (and Alpha for an algorithm other than the private ones, see DefaultAlpha).
func DefaultRADMMParams() RADMMParams {
	return RADMMParams{
		// A ring over the members in membership order: the paper's topology, connected
		// with the fewest links.
		Graph: "ring", GraphSeed: 1,
		// T = 100 iterations (50 perturbed).
		Iters: 100,
		// alpha 2: the paper's "low privacy requirement" noise.
		Alpha: 2,
		// eta 1, no growth, no cap: R-ADMM's constant penalty.
		Eta: 1, EtaGrowth: 1, EtaMax: 0,
		// gamma 0.5: the paper's even-step proximal weight.
		Gamma: 0.5,
		// C = 10: the weight of the data term against the penalties and the noise.
		PaperC: 10,
		// Barrier 30 s before a missing neighbour is checked; MaxWait 0 = 10 x Barrier;
		// a neighbour declared missing stops the run (no silent substitution).
		Barrier: 30 * time.Second, MaxWait: 0, OnMissing: MissingStop,
	}
}

// DefaultAlpha returns the default noise parameter of a neighbour-exchange algorithm:
// +Inf (no noise) for conventional ADMM, 2 (DefaultRADMMParams) for the others.
func DefaultAlpha(algo string) float64 {
	if algo == "admm" {
		return math.Inf(1)
	}
	return DefaultRADMMParams().Alpha
}

// ApplyProfile sets the network settings of profile name (ProfileTest, ProfileLAN,
// ProfileInternet) on c: listen addresses, mDNS, NAT traversal, the ack timeout, the join
// window and how long a released final model is kept for members that are down.
func ApplyProfile(c *Config, name string) error {
	switch name {
	case ProfileTest:
		c.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
		c.MDNS, c.NAT = false, false
		// One machine: hand-offs take milliseconds; 2 s tolerates a loaded test host.
		c.AckTimeout, c.JoinWindow = 2*time.Second, time.Second
		c.FinalLinger = 0
	case ProfileLAN:
		c.Listen = []string{"/ip4/0.0.0.0/tcp/0", "/ip4/0.0.0.0/udp/0/quic-v1"}
		c.MDNS, c.NAT = true, false
		// A LAN: 10 s covers a slow machine's solve and a retransmission.
		c.AckTimeout, c.JoinWindow = 10*time.Second, 5*time.Second
		c.FinalLinger = time.Minute
	case ProfileInternet:
		c.Listen = []string{"/ip4/0.0.0.0/tcp/0", "/ip4/0.0.0.0/udp/0/quic-v1"}
		c.MDNS, c.NAT = false, true
		// Relayed or hole-punched connections take seconds to set up.
		c.AckTimeout, c.JoinWindow = 30*time.Second, 30*time.Second
		c.FinalLinger = 2 * time.Minute
	default:
		return fmt.Errorf("node: profile must be test, lan or internet, got %q", name)
	}
	return nil
}
