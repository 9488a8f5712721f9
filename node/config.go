package node

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/rs/zerolog"
	"go.yaml.in/yaml/v3"

	"github.com/BurntSushi/toml"
	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/gossip"
	"github.com/dpadmm/dpadmm/node/wire"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/walk"
)

// Config configures one node. Its fields are grouped by concern in the embedded
// structs below (Training, Admission, Seeding, Network, Reliability, Harness), whose
// fields are promoted: cfg.Gamma is cfg.Training.Gamma.
type Config struct {
	// Run names the run; it selects the protocol /dpadmm/<run>/walk/1 and the control
	// topic dpadmm/<run>/control.
	Run string
	// DataDir holds identity, ledger, checkpoints and model.json.
	DataDir string
	// Data is this node's private shard, already scaled with Scaling.
	Data *consensus.Dataset
	// Schema is the hash of the run's public schema (consensus.Schema.Hash; "" for none);
	// it enters the configuration hash.
	Schema string
	// Scaling is the public feature scaling applied to Data (nil: none, or unknown). Its
	// fingerprint enters the config hash, so every member of a run scales its features
	// with the same parameters; it is written to model.json, where evaluations of the
	// model read it.
	Scaling *consensus.Scaler

	Training
	Admission
	Seeding
	Network
	Reliability
	Harness

	// Logger receives the node's log; the zero value logs nothing.
	Logger zerolog.Logger

	// RADMM, when set, makes this node a member of a neighbour-exchange run (R-ADMM,
	// MR-ADMM, M-ADMM, conventional ADMM and its DVP/PVP baselines) instead of a random
	// walk: the walk fields (Gamma as the walk's prox parameter, Lambda, Clip, Sigma,
	// MaxUpdates, Hops) are then ignored and the run is driven by RunRADMM. Rand(i), when
	// set, is node i's source of the initial vector f_i(0) and Noise(i) its objective
	// noise (both default to crypto/rand-seeded sources). With static Members (in index
	// order) the announce/join phase is skipped and RADMM.TotalRows gives M.
	RADMM *RADMMParams
}

// Training is what the run trains and what it may spend: the objective, the walk's
// hyperparameters (see walk.Config) and this node's privacy budget.
type Training struct {
	// Problem, Gamma, Lambda, Clip, Sigma, MaxUpdates: the walk's hyperparameters (see walk.Config).
	Problem    consensus.Problem
	Gamma      float64
	Lambda     float64
	Clip       float64
	Sigma      float64
	MaxUpdates int
	// Step is the walk's local step and its parameters (zero value: the exact prox of
	// Algorithm 4). It enters the config hash.
	Step walk.StepParams
	// Unit is what the walk's figures protect ("" is privacy.UnitRecord) and RowBound the
	// public bound on row norms (consensus.Scaler.RowBound); both enter the config hash
	// (walk.Config).
	Unit     privacy.Unit
	RowBound float64
	// Hops is K, the total number of hops of the walk; the node receiving hop K releases
	// the final model.
	Hops uint64
	// Delta is the delta of the (epsilon, delta) figures in model.json. Default 1e-5.
	Delta float64
	// BudgetEpsilon, when > 0, is this node's privacy budget at Delta: before a noisy
	// update that would take its epsilon (BudgetKind: "local", the default, or "network",
	// the planned worst pair on the complete graph, never above the local figure) above
	// it, the node forwards the token unchanged instead. The cap is computed once the
	// membership is known (walk.BudgetCaps). It is this node's own choice and does not
	// enter the config hash.
	BudgetEpsilon float64
	BudgetKind    string
	// MaxEpsilon is this node's ceiling on its local epsilon over its cap (at Delta, for
	// its unit): once the membership is known, a node whose figure would exceed it refuses
	// to run before any update (0: no ceiling). Its own choice: not in the config hash.
	MaxEpsilon float64
}

// Admission is how the members of a run are found and who may be one: the starter's
// announce/join phase, or a static membership, and the closed-run settings.
type Admission struct {
	// Start makes this node the starter: it announces the run, collects joins and creates
	// the token. Ignored with static Members.
	Start bool
	// MinPeers is the number of nodes (starter included) the starter waits for.
	MinPeers int
	// JoinWindow is how long the starter keeps collecting joins once MinPeers is reached.
	JoinWindow time.Duration
	// MismatchWait is how long a joiner that has only seen announcements of its run with
	// a configuration different from its own keeps waiting for a matching one before it
	// stops with ErrConfigMismatch naming the keys that differ (0: 30 s; negative: forever).
	MismatchWait time.Duration
	// Members fixes the membership (peer IDs in node-index order, this node included),
	// skipping the announce/join phase (testnets). Weight and Holder must then be set.
	Members []peer.ID
	// Weight is this node's local-loss weight n*rows_i/N in static mode.
	Weight float64
	// Holder is the index of the initial token holder in static mode; that node creates
	// the token.
	Holder int
	// WaitMembers, with static Members, makes the node wait up to this long until it is
	// connected to every member (dialling the addresses given in Peers) before the walk
	// starts, so that no first hand-off is redirected because a member was still starting
	// (a redirection changes the path). 0 = no wait. Used by the multi-process testnet.
	WaitMembers time.Duration
	// SwarmKey, when set, makes the host join the libp2p private network of that
	// pre-shared key (ParseSwarmKey): peers without it cannot connect. QUIC does not
	// support private networks, so only TCP addresses are listened on and dialled.
	SwarmKey []byte
	// Allow, when set, closes the run to the peers it lists, with their row bounds; its
	// owner is the only peer whose announcement and start message are accepted, and the
	// starter (Start) must be the owner.
	Allow *AllowList
	// Starter, when set, pins the starter: announcements and start messages of any other
	// peer are ignored.
	Starter peer.ID
	// MaxRows, when > 0, bounds the rows any member may claim (it sets the weights
	// n*rows_i/N); it enters the config hash.
	MaxRows int
	// MinRows, when > 0, is the fewest rows a member may hold: a join claiming fewer is
	// refused, a start whose total is below MinRows per member is refused, and a node with
	// fewer rows does not start. It bounds the weight of one row, n/M <= 1/MinRows, so the
	// record-level figure can be planned before the membership is known
	// (walk.PlanRecordClip); it enters the config hash.
	MinRows int
}

// Seeding selects the node's sources of randomness: crypto/rand-seeded and secure by
// default; seeded sources only for test harnesses.
type Seeding struct {
	// Rand returns node i's next-hop source once the node's index i is known; nil means
	// a source seeded from crypto/rand. Index -1 is asked for the initial holder.
	Rand func(i int) *rand.Rand
	// Noise returns node i's DP noise source; nil means privacy.NewSecureNoise(). A
	// non-secure source is refused unless AllowSeededNoise is set.
	Noise            func(i int) privacy.Noise
	AllowSeededNoise bool
	// Sources, for testnets, returns node i's seeded next-hop and noise generators. The
	// node then saves their state in every checkpoint and restores it on restart, so a
	// node killed and restarted continues the same random sequences and the run stays
	// reproducible. It overrides Rand and Noise and needs AllowSeededNoise.
	Sources func(i int) (hop, noise *rand.PCG)
}

// Network is the node's libp2p host, its discovery and its HTTP endpoint.
type Network struct {
	// Listen are libp2p listen multiaddrs; default /ip4/0.0.0.0/tcp/0 and QUIC.
	Listen []string
	// NewHost, when set, builds the libp2p host from the node's identity key instead of
	// libp2p.New on Listen (testnets: an in-process mock network, or hosts sharing one
	// lighter configuration). Listen is then ignored; the node closes the host.
	NewHost func(key crypto.PrivKey) (host.Host, error)
	// Peers are multiaddrs (with /p2p/ID) dialled at start.
	Peers []string
	// Bootstrap are multiaddrs of an existing libp2p/DHT network; the node then advertises
	// and looks up the run name on the Kademlia DHT.
	Bootstrap []string
	// RendezvousSecret, when set, derives the DHT rendezvous key from the run name and
	// this secret (RendezvousKey), so that the run name is not published on the DHT.
	RendezvousSecret string
	// NAT turns on the host's NAT traversal: UPnP/NAT-PMP port mapping, the AutoNAT
	// service for others and hole punching (the internet profile).
	NAT bool
	// Relays are circuit-relay v2 relays (multiaddrs ending in /p2p/<peer ID>). A node that
	// AutoNAT finds unreachable reserves a slot on them and publishes the relayed address
	// (AutoRelay with static relays); the connection gater admits them after the
	// membership is fixed. Without Relays, a node with NAT and Bootstrap takes relay
	// candidates from its DHT routing table.
	Relays []string
	// RelayService makes the node a circuit-relay v2 relay for others once AutoNAT finds
	// it publicly reachable (go-libp2p's default limits: relayed connections are limited
	// to 2 minutes and 128 KiB, at most 128 reservations, 8 per IP, and 16 circuits each).
	RelayService bool
	// MDNS enables LAN discovery.
	MDNS bool
	// NoControlTopic runs the node without the GossipSub control topic (no router, no
	// subscription): for a static membership (Admission.Members) of a walk, whose control
	// messages are then only the final model, pushed to each member over
	// wire.FinalProtocol at once instead of after three publications. In-process networks
	// of hundreds of hosts use it: a router per host, and its streams and hello on every
	// new connection, cost more than the walk.
	NoControlTopic bool
	// HTTP is the address of the /status and /metrics endpoint; "" disables it.
	HTTP string
	// DebugStatus serves the per-hop counters on /status (hops_seen, ledger_entries,
	// model_age_seconds, hop, holding, paused, the live counts) and /metrics (hops,
	// hand-offs, custody events, Go and process collectors). Polled on several nodes they
	// reconstruct the secret path of the token, which the network figures assume secret;
	// without it /status is a snapshot refreshed every StatusPeriod with those keys
	// removed, and /metrics carries only the rejection counters.
	DebugStatus bool
	// StatusPeriod is the refresh period of the public /status snapshot; 0 means
	// DefaultStatusPeriod.
	StatusPeriod time.Duration
}

// Reliability holds the timeouts and depths of the acked hand-off, the custody of
// releases, the heartbeats and the end of the run, and the durability of writes.
type Reliability struct {
	// AckTimeout bounds the wait for a hand-off ack before the sender retries (first the
	// same peer, then another). Default 10 s.
	AckTimeout time.Duration
	// FinalWait bounds how long the node that releases the final model keeps
	// republishing it while waiting for every member's confirmation. Default 30 s.
	FinalWait time.Duration
	// FinalLinger is how long the node that releases the final model keeps it available
	// to members declared down that have not confirmed it: a member restarted with its
	// data directory meanwhile asks the members for it (wire.FinalProtocol) and confirms it.
	// 0: down members are not waited for.
	FinalLinger time.Duration
	// Heartbeat is the interval at which the node sends a heartbeat to every member on
	// /dpadmm/<run>/alive/1, whatever it holds (the beats carry no token information).
	// Default 1 s; negative disables heartbeats and with them the regeneration of a token
	// lost with a crashed holder.
	Heartbeat time.Duration
	// HeartbeatMisses is M: a member silent for M heartbeat intervals is declared down
	// (backups it acked and that were not yet released are regenerated with a new
	// epoch); it is declared up again when its beats resume. Default 15, generous so
	// that a busy machine or a restart within M intervals does not regenerate.
	HeartbeatMisses int
	// Depth is D: a node keeps each of its releases until the token is D acked hand-offs
	// further on. Default 8.
	Depth int
	// FallbackTimeout is the slow global fallback: a node that released a token and then
	// sees no token, ack or release for this long, and holds nothing in flight, re-sends
	// its last release under a new epoch (charged as a forward entry) and drops acked
	// backups that made no progress for this long. It recovers a token lost with the
	// holder and every backup holder within Depth hand-offs. 0 = derived: the larger of
	// 2*(HeartbeatMisses*Heartbeat + AckTimeout) (the fallback never pre-empts a
	// regeneration) and 20*n*h, with n the members and h the slowest hop time this node
	// observed between two of its visits (a spurious fallback, which rolls the walk back,
	// then has probability about e^-20 per node). Negative disables it.
	FallbackTimeout time.Duration
	// NoSync skips fsync (testnets on tmpfs); the write order is unchanged.
	NoSync bool
}

// Harness holds the fault injection and markings of test harnesses; the zero value is
// a production node.
type Harness struct {
	// Insecure marks a test-harness node (dpadmm node --insecure-testnet: seeded noise,
	// fixed membership or fault injection, loopback only): model.json then carries
	// InsecureGuarantee.
	Insecure bool
	// PauseAtHop is fault injection for test harnesses: the node that receives the token
	// of this hop (PauseAtHop hops done) stores and acks it as usual, then stops
	// processing and reports "paused" on /status until it is killed. On restart without
	// it, the node processes the stored token. 0 = off.
	PauseAtHop uint64
	// PauseAfterStep moves the pause of PauseAtHop to after the step of that token: the
	// ledger entry and the checkpoint (with the outgoing token in custody) are durable,
	// nothing is sent. On restart the node resends the token from its custody.
	PauseAfterStep bool
	// WithholdAcks is fault injection for test harnesses: the node reads every token
	// hand-off it is sent and never answers it (no ack, the token is dropped), as a peer
	// that keeps the bytes and withholds its ack would. The sender then redirects the
	// same release to another member, so the release has been seen by two peers. The
	// node otherwise takes part in the run (heartbeats, releases, the final model).
	WithholdAcks bool
	// FreshDataDir: the harness created this data directory for this run, so no member
	// can have taken a hand-off from it, and the node skips the position check at the start
	// of its walk (position.go), which asks every other member: n(n-1) requests across a
	// network of n in-process hosts (a million at 1,000 hosts).
	FreshDataDir bool
	// SigCache, shared by the in-process nodes of a testnet, remembers the hand-off
	// signatures that verified and those the nodes made, so that a recipient's check of
	// its sender's signature, and the next recipient's check of the same signature as
	// evidence, are lookups (see SigCache). nil: every signature is verified.
	SigCache *SigCache
	// Predictor describes the model for model.json when a harness prepared Data itself
	// (scaled, the intercept's column added, classes as indices): the raw features, the
	// scaling, ranges and classes of the run's own data, as the testnet's report has them.
	// Config.Predictor then takes it with the node's weights. nil: the predictor is built
	// from Data and Scaling, as a node that read its data does.
	Predictor *consensus.ModelSpec
}

// RADMMParams are the neighbour-exchange parameters of a run. Everything here except
// the barrier settings is announced and enters the config hash.
type RADMMParams struct {
	// Algo is radmm, mradmm, madmm, admm, admm-dvp or admm-pvp (gossip.ParseAlgo).
	Algo string
	// Graph is the graph spec (consensus/graph.Parse: ring, complete, regular:d, er:p,
	// grid); "" = ring. GraphSeed seeds random graphs. Every member builds the same
	// graph from (Graph, number of members, GraphSeed) and the membership order.
	Graph     string
	GraphSeed uint64
	// Iters is T, the fixed number of iterations.
	Iters int
	// Alpha: objective noise of density proportional to exp(-Alpha ||eps||); +Inf = none.
	Alpha float64
	// TargetEpsilon, when > 0, replaces Alpha: the node calibrates its alpha, once the
	// members (total rows) and the graph (its degree) are known, so that its Theorem V.1
	// figure is this epsilon (gossip.Setup.AlphaFor; every member alike, so the network
	// figure is this epsilon too).
	TargetEpsilon float64
	// Eta, EtaGrowth, EtaMax: the penalty schedule eta(k) = Eta * EtaGrowth^k capped at
	// EtaMax (EtaGrowth 0 or 1 = constant; EtaMax 0 = no cap).
	Eta, EtaGrowth, EtaMax float64
	// EtaTable, when set, replaces Eta, EtaGrowth and EtaMax with an explicit penalty
	// table, the rows of a penalty file ('dpadmm node|testnet --eta-file'): row k-1 holds
	// eta(k) for every member (one value per row) or eta_i(k) for the member with index i
	// (one value per member, MR-ADMM's per-node schedules). It needs at least K rows (the
	// number of perturbed iterations) and every column must be > 0, finite and
	// non-decreasing (constant for radmm and the conventional algorithms). It is announced
	// and enters the config hash, so every member uses the same table.
	EtaTable [][]float64
	// Gamma is the even-step proximal weight of the recycled algorithms (paper: 0.5).
	Gamma float64
	// PaperC is the paper's C: node i's objective is (C n/M) sum_{D_i} L + C l2 ||f||^2/2
	// with n members and M total rows (C_i/B_i = C n/M, rho/N = C l2), as in the simulator.
	PaperC float64
	// Barrier is the iteration barrier's timeout (0 = 30 s), MaxWait how long a neighbour
	// that is still connected is waited for (0 = 10 * Barrier) and OnMissing the policy for
	// a neighbour declared missing (default stop); see docs/radmm-network.md.
	Barrier, MaxWait time.Duration
	OnMissing        MissingPolicy
	// TotalRows is M, the total number of training rows of the run, with a static
	// membership (Config.Members, StaticFile.TotalRows); announce/join learns it from the
	// start message instead. Like the membership, it is not part of the config hash.
	TotalRows int
	// PauseAt is fault injection for harnesses: stop right after the release of this
	// iteration is durable (journal and ledger), before any frame of it is sent, until the
	// context ends. 0 = off; not announced.
	PauseAt int
	// HaltAfter is fault injection for harnesses: RunRADMM returns ErrHalted once the
	// neighbours acknowledged the release of this iteration. 0 = off; not announced.
	HaltAfter int
}

// validateRADMM checks the neighbour-exchange part of c, including the normalised rows
// that Theorem V.1 needs (a node refuses to take part with rows of norm > 1).
func (c *Config) validateRADMM() error {
	p := c.RADMM
	algo, err := gossip.ParseAlgo(p.Algo)
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	switch {
	case c.Members != nil && len(c.Members) < 2:
		return fmt.Errorf("node: a neighbour-exchange run needs at least 2 members, the static membership has %d", len(c.Members))
	case c.Members != nil && p.TotalRows < len(c.Members):
		return fmt.Errorf("node: a static neighbour-exchange membership needs the run's total rows (>= %d members), got %d", len(c.Members), p.TotalRows)
	case c.Members != nil && p.TotalRows < c.Data.Rows:
		return fmt.Errorf("node: total rows %d below this node's %d rows", p.TotalRows, c.Data.Rows)
	case p.Iters < 1:
		return fmt.Errorf("node: iterations must be >= 1, got %d", p.Iters)
	case !(p.TargetEpsilon >= 0) || math.IsInf(p.TargetEpsilon, 0):
		return fmt.Errorf("node: the target epsilon must be finite and >= 0 (0: none), got %v", p.TargetEpsilon)
	case p.TargetEpsilon == 0 && (math.IsNaN(p.Alpha) || !(p.Alpha > 0)):
		return fmt.Errorf("node: alpha must be > 0 (+Inf = no noise), got %v", p.Alpha)
	case p.EtaTable == nil && (!(p.Eta > 0) || math.IsInf(p.Eta, 0)):
		return fmt.Errorf("node: eta must be > 0 and finite, got %v", p.Eta)
	case p.EtaTable == nil && (!(p.EtaGrowth >= 0) || math.IsInf(p.EtaGrowth, 0) || !(p.EtaMax >= 0) || math.IsInf(p.EtaMax, 0)):
		return fmt.Errorf("node: eta growth and eta max must be >= 0 and finite, got %v and %v", p.EtaGrowth, p.EtaMax)
	case !(p.Gamma >= 0) || math.IsInf(p.Gamma, 0):
		return fmt.Errorf("node: gamma must be >= 0 and finite, got %v", p.Gamma)
	case !(p.PaperC > 0) || math.IsInf(p.PaperC, 0):
		return fmt.Errorf("node: the paper's C must be > 0 and finite, got %v", p.PaperC)
	case c.Problem.Loss == consensus.Multinomial:
		return fmt.Errorf("node: a neighbour-exchange run has no figure for the multinomial loss (Theorem V.1 is proven for the logistic loss): a label of 3 or more classes is fitted one-vs-rest (loss logistic-ovr)")
	case c.Problem.Reg.L1 != 0:
		return fmt.Errorf("node: a neighbour-exchange run needs a smooth regularizer: l1 must be 0, got %v", c.Problem.Reg.L1)
	case !(c.Problem.Reg.L2 > 0):
		return errors.New("node: a neighbour-exchange run needs l2 > 0 (the paper's rho > 0: R must be strongly convex)")
	case p.Barrier < 0 || p.MaxWait < 0 || p.OnMissing > MissingStale:
		return errors.New("node: bad barrier timeout, max wait or missing-neighbour policy")
	}
	width, err := p.etaWidth()
	if err != nil {
		return err
	}
	switch {
	case width > 1 && c.Members != nil && len(c.Members) != width:
		return fmt.Errorf("node: the penalty table has %d per-member columns, the static membership %d members", width, len(c.Members))
	case width > 1 && c.Start && c.MinPeers > width:
		return fmt.Errorf("node: the penalty table has %d per-member columns, fewer than --min-peers %d", width, c.MinPeers)
	}
	// The machine's own checks (schedule, algorithm and noise compatibility) on a
	// two-node stand-in, for every column of a penalty table; the placeholder noise
	// source is never drawn from.
	for col := 0; col < max(width, 1); col++ {
		sched := p.schedule()
		if width > 0 {
			sched = p.column(col)
		}
		alpha := p.Alpha
		if p.TargetEpsilon > 0 {
			alpha = 1 // calibrated at the start; a finite alpha stands in for it
		}
		probe := gossip.Config{Node: 0, Nodes: 2, Neighbors: []int{1}, Algo: algo, Iters: p.Iters, Penalty: sched,
			Gamma: p.Gamma, Alpha: alpha, C1: 0.25}
		if !math.IsInf(alpha, 1) {
			probe.Noise = privacy.NewSeededNoise(0)
		}
		if err := probe.Validate(); err != nil {
			if width > 1 {
				return fmt.Errorf("node: penalty table column %d (member %d): %w", col+1, col, err)
			}
			return fmt.Errorf("node: %w", err)
		}
	}
	if r, norm := maxRowNorm(c.Data); norm > 1+1e-12 {
		return fmt.Errorf("node: row %d of the local data has norm %.6g > 1: Theorem V.1 needs every row normalised to ||x|| <= 1 "+
			"(scale the data with --scale unitball, the default, or a --scale-file of kind standardize+unitball); refusing to take part", r, norm)
	}
	return c.Problem.Validate()
}

func (p *RADMMParams) schedule() gossip.Schedule {
	return gossip.Schedule{Eta: p.Eta, Q: p.EtaGrowth, Max: p.EtaMax}
}

// etaWidth checks EtaTable's shape and values and returns its number of columns (0 when
// there is no table).
func (p *RADMMParams) etaWidth() (int, error) {
	if p.EtaTable == nil {
		return 0, nil
	}
	if len(p.EtaTable) == 0 || len(p.EtaTable[0]) == 0 {
		return 0, errors.New("node: the penalty table is empty")
	}
	w := len(p.EtaTable[0])
	for k, row := range p.EtaTable {
		if len(row) != w {
			return 0, fmt.Errorf("node: penalty table row %d has %d values, row 1 has %d", k+1, len(row), w)
		}
		for c, v := range row {
			if !(v > 0) || math.IsInf(v, 0) {
				return 0, fmt.Errorf("node: penalty table row %d value %d: want a finite penalty > 0, got %v", k+1, c+1, v)
			}
		}
	}
	return w, nil
}

// column returns column c of EtaTable as an explicit schedule.
func (p *RADMMParams) column(c int) gossip.Schedule {
	l := make([]float64, len(p.EtaTable))
	for k, row := range p.EtaTable {
		l[k] = row[c]
	}
	return gossip.Schedule{List: l}
}

// scheduleFor returns the penalty schedule of the member with index i of n members.
func (p *RADMMParams) scheduleFor(i, n int) (gossip.Schedule, error) {
	w, err := p.etaWidth()
	switch {
	case err != nil:
		return gossip.Schedule{}, err
	case w == 0:
		return p.schedule(), nil
	case w == 1:
		return p.column(0), nil
	case w == n:
		return p.column(i), nil
	}
	return gossip.Schedule{}, fmt.Errorf("node: the penalty table has %d per-member columns but the run has %d members", w, n)
}

// maxRowNorm returns the index and Euclidean norm of the longest row of d.
func maxRowNorm(d *consensus.Dataset) (int, float64) {
	at, best := 0, 0.0
	for r := 0; r < d.Rows; r++ {
		s := 0.0
		for _, v := range d.Row(r) {
			s += v * v
		}
		if s = math.Sqrt(s); s > best {
			at, best = r, s
		}
	}
	return at, best
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	if c.MaxRows < 0 {
		return fmt.Errorf("node: max rows must be >= 0, got %d", c.MaxRows)
	}
	if c.MinRows < 0 || c.MaxRows > 0 && c.MinRows > c.MaxRows {
		return fmt.Errorf("node: min rows must be in [0, max rows], got %d", c.MinRows)
	}
	if c.MinRows > 0 && c.Data != nil && c.Data.Rows < c.MinRows {
		return fmt.Errorf("node: this node has %d rows, fewer than the run's min rows %d", c.Data.Rows, c.MinRows)
	}
	if c.MaxRows > 0 && c.Data != nil && c.Data.Rows > c.MaxRows {
		return fmt.Errorf("node: this node has %d rows, more than the run's max rows %d", c.Data.Rows, c.MaxRows)
	}
	if _, err := privacy.ParseUnit(string(c.Unit)); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if c.Allow != nil && c.Allow.Run != c.Run {
		return fmt.Errorf("node: the allow-list is for run %q, not %q", c.Allow.Run, c.Run)
	}
	switch {
	case c.Run == "" || len(c.Run) > wire.MaxRunName:
		return fmt.Errorf("node: run name must have 1..%d bytes", wire.MaxRunName)
	case c.DataDir == "":
		return errors.New("node: a data directory is required")
	case c.Data == nil || c.Data.Rows < 1 || c.Data.Cols < 1:
		return errors.New("node: a non-empty local dataset is required")
	case c.RADMM != nil:
		return c.validateRADMM()
	case c.Hops < 1:
		return errors.New("node: hops must be >= 1")
	case !(c.Gamma > 0) || math.IsInf(c.Gamma, 0):
		return fmt.Errorf("node: gamma must be > 0, got %v", c.Gamma)
	case !(c.Lambda > 0 && c.Lambda <= 1):
		return fmt.Errorf("node: lambda must be in (0,1], got %v", c.Lambda)
	case !(c.Clip > 0):
		return fmt.Errorf("node: clip must be > 0, got %v", c.Clip)
	case c.RowBound < 0 || math.IsNaN(c.RowBound) || math.IsInf(c.RowBound, 0):
		return fmt.Errorf("node: row bound must be finite and >= 0, got %v", c.RowBound)
	case !(c.Sigma >= 0) || math.IsInf(c.Sigma, 0):
		return fmt.Errorf("node: sigma must be >= 0 and finite, got %v", c.Sigma)
	case c.Members != nil && !(c.Weight > 0):
		return errors.New("node: static membership needs a weight > 0")
	case c.NoControlTopic && c.Members == nil:
		return errors.New("node: a node without the control topic needs a static membership")
	case c.Members != nil && (c.Holder < 0 || c.Holder >= len(c.Members)):
		return fmt.Errorf("node: holder %d out of range", c.Holder)
	case c.WaitMembers < 0:
		return errors.New("node: wait-members must be >= 0")
	case c.HeartbeatMisses < 0:
		return errors.New("node: heartbeat misses must be >= 0")
	case c.Depth < 0 || c.Depth > wire.MaxDepth:
		return fmt.Errorf("node: custody depth must be in 1..%d", wire.MaxDepth)
	case c.FallbackTimeout > 0 && c.FallbackTimeout <= c.AckTimeout:
		return fmt.Errorf("node: fallback timeout %v must exceed the ack timeout %v (0 = derived, negative = off)", c.FallbackTimeout, c.AckTimeout)
	case c.Delta < 0 || c.Delta >= 1:
		return fmt.Errorf("node: delta must be in (0,1), got %v", c.Delta)
	case math.IsNaN(c.BudgetEpsilon) || c.BudgetEpsilon < 0 || math.IsInf(c.BudgetEpsilon, 0):
		return fmt.Errorf("node: budget epsilon must be finite and >= 0, got %v", c.BudgetEpsilon)
	case c.BudgetKind != "" && c.BudgetKind != walk.BudgetLocal && c.BudgetKind != walk.BudgetNetwork:
		return fmt.Errorf("node: budget kind must be %s or %s, got %q", walk.BudgetLocal, walk.BudgetNetwork, c.BudgetKind)
	}
	return c.Problem.Validate()
}

// unit is Unit, "" read as record.
func (c *Training) unit() privacy.Unit {
	if c.Unit == "" {
		return privacy.UnitRecord
	}
	return c.Unit
}

// RunConfig is what the starter announces and every member must agree on; its hash is
// the config hash.
type RunConfig struct {
	Run        string  `json:"run"`
	Algorithm  string  `json:"algo"`
	Dims       int     `json:"dims"`
	Loss       string  `json:"loss"`
	L1         float64 `json:"l1"`
	L2         float64 `json:"l2"`
	Gamma      float64 `json:"gamma"`
	Lambda     float64 `json:"lambda"`
	Clip       float64 `json:"clip"`
	Sigma      float64 `json:"sigma"`
	MaxUpdates int     `json:"max_updates"`
	Hops       uint64  `json:"hops"`
	Noise      string  `json:"noise"` // "gaussian"; neighbour exchange: "objective-perturbation"

	// The walk's local step other than the exact prox (all empty for the prox step, so
	// those hashes are unchanged): its name and parameters (walk.StepParams).
	Step     string  `json:"step,omitempty"`
	StepSize float64 `json:"step_size,omitempty"`
	Beta     float64 `json:"beta,omitempty"`
	Nu       float64 `json:"nu,omitempty"`
	Rate     float64 `json:"sample_rate,omitempty"`
	Strong   bool    `json:"strongly_convex,omitempty"`

	// Classes is the ordered class list of a classification run (binary: negative,
	// positive; multinomial: every class), as the label column writes them.
	Classes []string `json:"classes,omitempty"`

	// Features is a digest of the names of the model's input columns in order
	// (FeaturesDigest: the data's header, one-hot features "column=value", the intercept's
	// column last): members must read the same columns in the same order, or their
	// coordinates would mean different things. A digest, not the names: the announcement
	// reaches peers before they are members, and one-hot names hold values of the data.
	// Empty for data without a header (headerless CSV, LIBSVM: columns by position).
	Features string `json:"features,omitempty"`

	// Schema is the hash of the public schema (Config.Schema); empty for none.
	Schema string `json:"schema,omitempty"`

	// Fill is the public rule for missing cells (consensus.FillRule) as canonical JSON;
	// empty for none.
	Fill string `json:"fill,omitempty"`

	// Unpenalised is the number of trailing coordinates the regularizer leaves alone
	// (consensus.Regularizer.Free: the intercept; 0 is omitted, so older hashes hold).
	Unpenalised int `json:"unpenalised,omitempty"`

	// Unit is the walk's privacy unit and RowBound its public row bound (the walk only).
	Unit     string  `json:"unit,omitempty"`
	RowBound float64 `json:"row_bound,omitempty"`

	// MaxRows bounds the rows a member may claim (Config.MaxRows; 0: none).
	MaxRows int `json:"max_rows,omitempty"`
	// MinRows is the fewest rows a member may hold (Config.MinRows; 0: none).
	MinRows int `json:"min_rows,omitempty"`

	// Neighbour-exchange runs only (empty for the walk, so walk hashes are unchanged).
	Graph     string `json:"graph,omitempty"`
	GraphSeed uint64 `json:"graph_seed,omitempty"`
	Iters     int    `json:"iters,omitempty"`
	Alpha     string `json:"alpha,omitempty"` // strconv 'g' form; "+Inf" = no noise; "" with a target
	// TargetEpsilon replaces Alpha when > 0 (RADMMParams.TargetEpsilon).
	TargetEpsilon float64 `json:"target_epsilon,omitempty"`
	Eta           float64 `json:"eta,omitempty"`
	EtaGrowth     float64 `json:"eta_growth,omitempty"`
	EtaMax        float64 `json:"eta_max,omitempty"`
	PaperC        float64 `json:"paper_c,omitempty"`
	// EtaTable is RADMMParams.EtaTable (the penalty file's rows), when one is used.
	EtaTable [][]float64 `json:"eta_table,omitempty"`

	// Scaling is the fingerprint of the feature scaling (consensus.Scaler.Fingerprint;
	// empty for none, so hashes of unscaled runs are unchanged).
	Scaling string `json:"scaling,omitempty"`
}

// Predictor returns the model w of this run in its self-describing form
// (consensus.ModelSpec; nil when it cannot be built from the data).
func (c *Config) Predictor(w []float64) *consensus.ModelSpec {
	if t := c.Harness.Predictor; t != nil {
		m, err := t.WithWeights(w)
		if err != nil {
			return nil
		}
		return m
	}
	sc := c.Scaling
	if sc == nil {
		sc = &consensus.Scaler{Kind: consensus.ScaleNone}
	}
	m, err := consensus.NewModelSpec(c.Data, sc, c.Problem.Loss, w)
	if err != nil {
		return nil
	}
	return m
}

// RunConfig returns the run configuration implied by c.
func (c *Config) RunConfig() RunConfig {
	rc := c.runConfig()
	rc.Scaling = c.Scaling.Fingerprint()
	rc.MaxRows = c.MaxRows
	rc.MinRows = c.MinRows
	rc.Schema = c.Schema
	if c.Data != nil && c.Data.Label != "" {
		rc.Features = FeaturesDigest(c.Data.Features)
	}
	if c.Data != nil && c.Data.Fill != nil {
		b, _ := json.Marshal(c.Data.Fill)
		rc.Fill = string(b)
	}
	if c.Data != nil && c.Problem.Loss != consensus.Squared {
		if rc.Classes = c.Data.Classes.Names(); rc.Classes == nil {
			rc.Classes = []string{"-1", "1"} // labels without names are -1/+1 as they are
		}
	}
	return rc
}

// FeaturesDigest is RunConfig.Features of the column names: "sha256:" and the first 16
// hex digits of the SHA-256 of the names, each followed by a 0 byte, then the count.
func FeaturesDigest(names []string) string {
	h := sha256.New()
	for _, n := range names {
		h.Write([]byte(n))
		h.Write([]byte{0})
	}
	return fmt.Sprintf("sha256:%x (%d columns)", h.Sum(nil)[:8], len(names))
}

// alphaKey is the run configuration's alpha: "" when a target epsilon replaces it.
func (p *RADMMParams) alphaKey() string {
	if p.TargetEpsilon > 0 {
		return ""
	}
	return strconv.FormatFloat(p.Alpha, 'g', -1, 64)
}

func (c *Config) runConfig() RunConfig {
	if p := c.RADMM; p != nil {
		spec := p.Graph
		if spec == "" {
			spec = "ring"
		}
		algo := p.Algo
		if a, err := gossip.ParseAlgo(p.Algo); err == nil {
			algo = a.String()
		}
		if p.EtaTable != nil {
			// The table replaces the geometric schedule: only what is used is announced.
			return RunConfig{
				Run: c.Run, Algorithm: algo, Dims: c.Data.ModelDim(), Loss: fmt.Sprint(c.Problem.Loss),
				L1: c.Problem.Reg.L1, L2: c.Problem.Reg.L2, Gamma: p.Gamma, Noise: "objective-perturbation",
				Graph: spec, GraphSeed: p.GraphSeed, Iters: p.Iters, Alpha: p.alphaKey(), TargetEpsilon: p.TargetEpsilon,
				PaperC: p.PaperC, EtaTable: p.EtaTable,
			}
		}
		return RunConfig{
			Run: c.Run, Algorithm: algo, Dims: c.Data.ModelDim(), Loss: fmt.Sprint(c.Problem.Loss),
			L1: c.Problem.Reg.L1, L2: c.Problem.Reg.L2, Gamma: p.Gamma, Noise: "objective-perturbation",
			Graph: spec, GraphSeed: p.GraphSeed, Iters: p.Iters, Alpha: p.alphaKey(), TargetEpsilon: p.TargetEpsilon,
			Eta: p.Eta, EtaGrowth: p.EtaGrowth, EtaMax: p.EtaMax, PaperC: p.PaperC,
		}
	}
	rc := RunConfig{
		Run: c.Run, Algorithm: "walk", Dims: c.Data.ModelDim(), Loss: fmt.Sprint(c.Problem.Loss),
		L1: c.Problem.Reg.L1, L2: c.Problem.Reg.L2, Gamma: c.Gamma, Lambda: c.Lambda, Clip: c.Clip,
		Sigma: c.Sigma, MaxUpdates: c.MaxUpdates, Hops: c.Hops, Noise: "gaussian", Unpenalised: c.Problem.Reg.Free,
		RowBound: c.RowBound,
	}
	if c.unit() != privacy.UnitRecord {
		rc.Unit = string(c.unit()) // the default (record) is omitted, so run files without the key agree
	}
	if s := c.Step; s.Kind != walk.StepProx {
		rc.Step, rc.StepSize, rc.Beta, rc.Nu, rc.Rate, rc.Strong = s.Kind.String(), s.Eta, s.Beta, s.Nu, s.Rate, s.Strong
	}
	return rc
}

// Hash returns the hex SHA-256 of the canonical JSON encoding.
func (r RunConfig) Hash() string {
	b, _ := json.Marshal(r)
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// StaticFile is a fixed membership written by a testnet launcher (see dpadmm node
// --static): the members in node-index order with their addresses, the total number of
// training rows (for the weights n*rows_i/N, or M of a neighbour-exchange run) and the
// initial holder (walk only). ConfigHash, when set, is the config hash every member's
// configuration must have (a static run has no announcement to compare against).
type StaticFile struct {
	Run        string         `json:"run"`
	Members    []StaticMember `json:"members"`
	TotalRows  int            `json:"total_rows"`
	Holder     int            `json:"holder"`
	ConfigHash string         `json:"config_hash,omitempty"`
}

// StaticMember is one member of a StaticFile.
type StaticMember struct {
	ID    string   `json:"id"`
	Addrs []string `json:"addrs"` // multiaddrs without /p2p
}

// ParseStatic decodes and checks a StaticFile.
func ParseStatic(b []byte) (*StaticFile, error) {
	var f StaticFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("node: static membership: %w", err)
	}
	switch {
	case len(f.Members) < 1:
		return nil, errors.New("node: static membership: no members")
	case f.TotalRows < len(f.Members):
		return nil, fmt.Errorf("node: static membership: total_rows %d below the %d members", f.TotalRows, len(f.Members))
	case f.Holder < 0 || f.Holder >= len(f.Members):
		return nil, fmt.Errorf("node: static membership: holder %d out of range", f.Holder)
	}
	seen := map[peer.ID]bool{}
	for i, m := range f.Members {
		p, err := peer.Decode(m.ID)
		if err != nil {
			return nil, fmt.Errorf("node: static membership: member %d: bad peer ID %q", i, m.ID)
		}
		if seen[p] {
			return nil, fmt.Errorf("node: static membership: member %d listed twice", i)
		}
		seen[p] = true
	}
	return &f, nil
}

// IDs returns the members' peer IDs in index order (ParseStatic has checked them).
func (f *StaticFile) IDs() []peer.ID {
	out := make([]peer.ID, len(f.Members))
	for i, m := range f.Members {
		out[i], _ = peer.Decode(m.ID)
	}
	return out
}

// PeerAddrs returns every member's addresses as /p2p multiaddrs, for Config.Peers.
func (f *StaticFile) PeerAddrs() []string {
	var out []string
	for _, m := range f.Members {
		for _, a := range m.Addrs {
			out = append(out, a+"/p2p/"+m.ID)
		}
	}
	return out
}

// ReadRunConfig reads a run configuration file: the JSON of a RunConfig, as
// WriteRunConfig writes it (and as the starter announces it), or the same keys in YAML (a
// file whose first non-blank character is not '{'; parsed with go.yaml.in/yaml/v3), or in TOML
// (a file named *.toml; parsed with github.com/BurntSushi/toml). Unknown
// keys are refused, so that a misspelt key is not silently ignored.
func ReadRunConfig(path string) (RunConfig, error) {
	var rc RunConfig
	b, err := os.ReadFile(path)
	if err != nil {
		return rc, fmt.Errorf("node: run config: %w", err)
	}
	if strings.EqualFold(filepath.Ext(path), ".toml") {
		// TOML: read into generic values, then decode them as JSON with the same checks.
		var v map[string]any
		if _, err := toml.Decode(string(b), &v); err != nil {
			return rc, fmt.Errorf("node: run config %s (TOML): %w", path, err)
		}
		if b, err = json.Marshal(v); err != nil {
			return rc, fmt.Errorf("node: run config %s (TOML): %w", path, err)
		}
	} else if t := bytes.TrimSpace(b); len(t) > 0 && t[0] != '{' {
		// YAML: read into generic values, then decode them as JSON with the same checks.
		var v map[string]any
		if err := yaml.Unmarshal(b, &v); err != nil {
			return rc, fmt.Errorf("node: run config %s (YAML): %w", path, err)
		}
		if b, err = json.Marshal(v); err != nil {
			return rc, fmt.Errorf("node: run config %s (YAML): %w", path, err)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rc); err != nil {
		return rc, fmt.Errorf("node: run config %s: %w", path, err)
	}
	if dec.More() {
		return rc, fmt.Errorf("node: run config %s: trailing data after the configuration", path)
	}
	if rc.Run == "" {
		return rc, fmt.Errorf("node: run config %s: no run name (key run)", path)
	}
	return rc, nil
}

// WriteRunConfig writes rc to path as indented JSON (the file ReadRunConfig reads).
func WriteRunConfig(path string, rc RunConfig) error {
	b, err := json.MarshalIndent(rc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Diff lists the keys whose values differ between r (this node's) and other (the run's),
// sorted, each as "key: yours X, the run's Y" (a key absent on one side shows as "-").
func (r RunConfig) Diff(other RunConfig) []string { return r.DiffNamed(other, "yours", "the run's") }

// DiffNamed is Diff with the two sides named mine and theirs ("key: mine X, theirs Y").
func (r RunConfig) DiffNamed(other RunConfig, mine, theirs string) []string {
	m := func(x RunConfig) map[string]json.RawMessage {
		b, _ := json.Marshal(x)
		out := map[string]json.RawMessage{}
		_ = json.Unmarshal(b, &out)
		return out
	}
	a, b := m(r), m(other)
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	var names []string
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	var out []string
	for _, k := range names {
		x, y := string(a[k]), string(b[k])
		if x == y {
			continue
		}
		if x == "" {
			x = "-"
		}
		if y == "" {
			y = "-"
		}
		out = append(out, fmt.Sprintf("%s: %s %s, %s %s", runConfigFlag(k), mine, x, theirs, y))
	}
	return out
}

// runConfigFlag names a RunConfig key as a user sets it: the 'dpadmm node' flag (clip ->
// --clip, max_updates -> --max-updates), or what the data decides.
func runConfigFlag(key string) string {
	switch key {
	case "dims", "noise", "scaling":
		return key // decided by the data, the algorithm, the scaling flags
	case "step":
		return "--local-step/--algo"
	case "eta_table":
		return "--eta-file"
	case "unpenalised":
		return "--intercept"
	case "fill":
		return "--fill/--fill-file"
	case "schema":
		return "--schema"
	}
	return "--" + strings.ReplaceAll(key, "_", "-")
}
