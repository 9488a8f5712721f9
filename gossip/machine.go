package gossip

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/dpadmm/dpadmm/privacy"
)

// Algo selects the update rule.
type Algo int

// Algorithms.
const (
	// ADMM is conventional decentralized ADMM, eqs. (8)-(9) of Zhang-Khalili-Liu 2020
	// (Forero et al. 2010 node-aggregated form): every iteration is an exact local solve.
	// Non-private.
	ADMM Algo = iota
	// RADMM is R-ADMM (Alg. 1; private with finite alpha, Alg. 3 with constant eta): odd
	// iterations solve (12)/(18), even iterations take the recycled closed-form step (10)/(19).
	RADMM
	// MRADMM is MR-ADMM (Alg. 2; private with finite alpha, Alg. 3): R-ADMM with per-node
	// non-decreasing penalties eta_i(2k-1).
	MRADMM
	// ADMMDVP is a BASELINE: conventional ADMM with dual variable perturbation (T. Zhang and
	// Q. Zhu, "Dynamic differential privacy for ADMM-based distributed classification
	// learning", IEEE TIFS 12(1), 2017): the dual entering the primal step (8) is perturbed,
	// lambda~ = lambda + eps/2, i.e. the linear term is 2 lambda + eps with eps of density
	// proportional to exp(-alpha ||eps||), fresh every iteration; the dual update (9) itself
	// is not perturbed. Zhang and Zhu let the noise parameter vary over time; this version
	// keeps alpha constant.
	ADMMDVP
	// ADMMPVP is a BASELINE: conventional ADMM with primal variable perturbation (Zhang and
	// Zhu 2017): the exact primal (8) is perturbed by eps of density proportional to
	// exp(-alpha ||eps||) before it is broadcast, and the node continues from the perturbed
	// value (dual update and next prox centre), so everything it later sends is a function
	// of its data and of released values only.
	ADMMPVP
	// MADMM is a BASELINE in the style of private M-ADMM with penalty perturbation (X. Zhang,
	// M. M. Khalili, M. Liu, "Improving the privacy and accuracy of ADMM-based distributed
	// algorithms", ICML 2018): conventional ADMM (every iteration an exact solve (8)) with a
	// non-decreasing penalty schedule eta_i(t) and a linear noise term correlated with the
	// penalty, eta_i(t) eps^T f, eps of density proportional to exp(-alpha ||eps||), fresh every
	// iteration; equivalently the linear noise has density proportional to
	// exp(-(alpha/eta_i(t)) ||.||) (NoiseAlpha). Nothing is recycled. Each iteration is charged
	// by the objective-perturbation bound with alpha/eta_i(t) in place of alpha.
	MADMM
)

var algoNames = []string{"admm", "radmm", "mradmm", "admm-dvp", "admm-pvp", "madmm"}

// String returns the CLI name of the algorithm.
func (a Algo) String() string {
	if a >= 0 && int(a) < len(algoNames) {
		return algoNames[a]
	}
	return "Algo(" + strconv.Itoa(int(a)) + ")"
}

// ParseAlgo parses admm, radmm, mradmm, admm-dvp, admm-pvp or madmm.
func ParseAlgo(s string) (Algo, error) {
	for i, n := range algoNames {
		if strings.EqualFold(strings.TrimSpace(s), n) {
			return Algo(i), nil
		}
	}
	return 0, fmt.Errorf("gossip: unknown algorithm %q (want %s)", s, strings.Join(algoNames, ", "))
}

// Recycled reports whether the algorithm alternates odd solves and recycled even steps.
func (a Algo) Recycled() bool { return a == RADMM || a == MRADMM }

// Perturbed reports whether iteration t >= 1 is a data-dependent (charged) release:
// odd t for R-ADMM/MR-ADMM, every t for the conventional algorithms.
func (a Algo) Perturbed(t int) bool {
	if t < 1 {
		return false
	}
	return !a.Recycled() || t%2 == 1
}

// PerturbedCount returns how many of iterations 1..T are charged: ceil(T/2) or T.
func (a Algo) PerturbedCount(T int) int {
	if a.Recycled() {
		return (T + 1) / 2
	}
	return T
}

// Scheduled reports whether the algorithm accepts a non-constant penalty schedule.
func (a Algo) Scheduled() bool { return a == MRADMM || a == MADMM }

// NoiseAlpha returns the inverse scale of the linear noise term actually added at a
// perturbed iteration with penalty eta: alpha/eta for MADMM (noise eta*eps), alpha
// otherwise. It is the alpha the objective-perturbation bound is charged with.
func (a Algo) NoiseAlpha(alpha, eta float64) float64 {
	if a == MADMM {
		return alpha / eta
	}
	return alpha
}

// Scheme returns the privacy accounting scheme of the algorithm.
func (a Algo) Scheme() privacy.ObjPertScheme {
	switch a {
	case ADMMDVP, ADMM, MADMM:
		return privacy.SchemeDVP
	case ADMMPVP:
		return privacy.SchemePVP
	}
	return privacy.SchemeRecycled
}

// Errors returned by Step. The driver should Reject ErrNotNeighbor, ErrDim, ErrNotFinite and
// ErrFuture, and Ignore ErrStale and ErrDuplicate.
var (
	ErrNotNeighbor = errors.New("gossip: message from a node that is not a neighbour")
	ErrDim         = errors.New("gossip: vector dimension mismatch")
	ErrNotFinite   = errors.New("gossip: vector has a non-finite coordinate or one beyond MaxCoord in magnitude")
	ErrStale       = errors.New("gossip: message for an iteration already completed")
	ErrDuplicate   = errors.New("gossip: duplicate message for this iteration")
	ErrFuture      = errors.New("gossip: message more than one iteration ahead")
)

// MaxCoord bounds the magnitude of every coordinate a machine accepts from a neighbour
// (ErrNotFinite beyond it). A finite vector of coordinates near math.MaxFloat64 would
// make the sum of the neighbours' vectors, the dual update or the local solve overflow
// and the node's state and releases non-finite. No honest run comes near the bound: rows
// have norm at most 1 and the models of the regularised losses are of the order of
// 1/lambda; below it the sums over the neighbours and the products with the penalty
// eta stay far from overflow for any eta below 1e100.
const MaxCoord = 1e100

// checkVec returns ErrNotFinite unless every coordinate of v is finite and at most
// MaxCoord in magnitude.
func checkVec(v []float64) error {
	for _, x := range v {
		if !(math.Abs(x) <= MaxCoord) { // false for NaN too
			return ErrNotFinite
		}
	}
	return nil
}

// Config is one node's configuration. Constants follow Zhang-Khalili-Liu 2020 (see Objective).
type Config struct {
	// Node is this node's index in [0, Nodes).
	Node int
	// Nodes is N, the number of nodes (global).
	Nodes int
	// Neighbors lists Nbr(i): distinct indices in [0, Nodes), not Node; V_i = len. Fixed for
	// the run (the privacy bound depends on V_i).
	Neighbors []int
	// Algo is the update rule.
	Algo Algo
	// Iters is T, the fixed number of iterations (R-ADMM: T = 2K for K outer steps).
	// A fixed count is a hypothesis of Theorem V.1.
	Iters int
	// Penalty is eta_i(2k-1) (recycled) or eta_i(t) (conventional). R-ADMM and the
	// conventional algorithms need a constant schedule; MR-ADMM and MADMM a non-decreasing one.
	Penalty Schedule
	// Gamma is the even-step proximal weight gamma >= 0 (recycled algorithms only). The
	// paper's experiments use 0.5.
	Gamma float64
	// Alpha is the inverse noise scale: noise density proportional to exp(-Alpha ||eps||).
	// +Inf turns the noise off. Larger Alpha is less private.
	Alpha float64
	// C1 is the bound on L'' used for the ledger's per-iteration epsilon (1/4 for the
	// logistic loss).
	C1 float64
	// Noise is the injected noise source. Required when Alpha is finite and the algorithm
	// perturbs.
	Noise privacy.Noise
	// Init is f_i(0); it must not depend on the data (Thm V.1 (f)). nil means zeros.
	Init []float64
	// Run names the run in ledger entries.
	Run string
	// Names optionally gives every node's ledger name (len Nodes); nil means decimal indices.
	Names []string
}

// DefaultConfig returns the paper's experimental settings: R-ADMM, eta = 1, gamma = 0.5,
// c1 = 1/4 (logistic), no noise. Node, Nodes, Neighbors and Iters must still be set.
func DefaultConfig() Config {
	return Config{Algo: RADMM, Penalty: Constant(1), Gamma: 0.5, Alpha: math.Inf(1), C1: 0.25, Run: "run"}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	switch {
	case c.Nodes < 1:
		return fmt.Errorf("gossip: nodes must be >= 1, got %d", c.Nodes)
	case c.Node < 0 || c.Node >= c.Nodes:
		return fmt.Errorf("gossip: node %d out of range [0,%d)", c.Node, c.Nodes)
	case c.Algo < ADMM || c.Algo > MADMM:
		return fmt.Errorf("gossip: unknown algorithm %d", int(c.Algo))
	case c.Iters < 0:
		return fmt.Errorf("gossip: iterations must be >= 0, got %d", c.Iters)
	case !(c.Gamma >= 0) || math.IsInf(c.Gamma, 0):
		return fmt.Errorf("gossip: gamma must be >= 0 and finite, got %v", c.Gamma)
	case math.IsNaN(c.Alpha) || !(c.Alpha > 0):
		return fmt.Errorf("gossip: alpha must be > 0 (or +Inf for no noise), got %v", c.Alpha)
	case !(c.C1 > 0) || math.IsInf(c.C1, 0):
		return fmt.Errorf("gossip: c1 must be > 0 and finite, got %v", c.C1)
	case c.Names != nil && len(c.Names) != c.Nodes:
		return fmt.Errorf("gossip: %d names for %d nodes", len(c.Names), c.Nodes)
	case c.Algo == ADMM && !math.IsInf(c.Alpha, 1):
		return errors.New("gossip: admm is the non-private baseline (alpha must be +Inf); use admm-dvp or admm-pvp for private conventional ADMM")
	case c.Noise == nil && !math.IsInf(c.Alpha, 1):
		return errors.New("gossip: a noise source is required when alpha is finite")
	}
	if len(c.Neighbors) == 0 && c.Nodes > 1 {
		return fmt.Errorf("gossip: node %d has no neighbours (the graph must be connected)", c.Node)
	}
	seen := map[int]bool{}
	for _, j := range c.Neighbors {
		if j < 0 || j >= c.Nodes || j == c.Node || seen[j] {
			return fmt.Errorf("gossip: node %d: bad neighbour %d (out of range, self or duplicate)", c.Node, j)
		}
		seen[j] = true
	}
	K := c.Algo.PerturbedCount(c.Iters)
	if err := c.Penalty.Validate(max(K, 1)); err != nil {
		return err
	}
	if !c.Algo.Scheduled() && !c.Penalty.IsConstant(K) {
		return fmt.Errorf("gossip: %s needs a constant penalty; use mradmm (or the madmm baseline) for a schedule", c.Algo)
	}
	return nil
}

// Message is a neighbour's primal vector f_j(Iter).
type Message struct {
	From int
	Iter int
	Vec  []float64
}

// Envelope is an outbound message addressed to node To. All envelopes of one iteration
// share one read-only Vec.
type Envelope struct {
	To  int
	Msg Message
}

// Checkpoint is the node's private state after iteration Iter. Slices alias the machine's
// buffers and are valid until Advance. SPrev is sum_j (f_i + f_j) at the previous barrier
// (needed by the recycled step's KKT recovery).
type Checkpoint struct {
	Node   int
	Iter   int
	F      []float64
	Lambda []float64
	SPrev  []float64
}

// EventKind names an event.
type EventKind uint8

// Event kinds.
const (
	EventInit  EventKind = iota + 1 // f_i(0) broadcast
	EventSolve                      // a (possibly perturbed) exact local solve
	EventEven                       // a recycled closed-form even step
	EventDone                       // the last iteration completed

	// Events of the Exchange (the barrier policy). Iter is the frame's iteration for the
	// frame events and the barrier's iteration otherwise; Peers the neighbours concerned.
	EventBuffered // a frame beyond the next iteration was held
	EventDropped  // a frame beyond the window was dropped
	EventIgnored  // a stale or duplicate frame, or one after the end, was ignored (Err says which)
	EventWaiting  // barrier check: the missing neighbours are connected; still waiting
	EventMissing  // barrier check: neighbours declared missing, policy wait: still waiting
	EventStale    // policy stale: a missing neighbour's vector of UsedIter stands in
	EventStopped  // the policy stopped the exchange
	EventResent   // the last releases (up to Iter) were queued again to Peers
)

var eventNames = []string{"", "init", "solve", "even", "done", "buffered", "dropped", "ignored", "waiting", "missing", "stale", "stopped", "resent"}

// String returns a short name of the event kind.
func (k EventKind) String() string {
	if int(k) < len(eventNames) && k > 0 {
		return eventNames[k]
	}
	return "EventKind(" + strconv.Itoa(int(k)) + ")"
}

// Event reports what the machine did, for logs, metrics and tests. Never read back into state.
type Event struct {
	Kind      EventKind
	Iter      int
	Eta       float64
	NoiseNorm float64     // ||eps|| of this iteration (0 without noise)
	Solve     SolveResult // EventSolve only
	Peers     []int       // Exchange events: the neighbours concerned
	UsedIter  int         // EventStale: the iteration of the vector that stands in
	Waited    int64       // barrier events: ticks waited at the iteration
	Err       error       // EventIgnored: ErrStale, ErrDuplicate or ErrEnded
}

// Ready is what the driver must do now, in this order, before calling Advance.
type Ready struct {
	// Ledger: privacy ledger entries. MUST be durable BEFORE any Outbox message is sent.
	// One entry per released iteration: MechPure with the per-iteration epsilon for a
	// charged release (math.MaxFloat64 when it carries no guarantee: no noise or an inexact
	// solve), MechForward with epsilon 0 for f_i(0) and recycled even steps
	// (post-processing, Lemma V.1). Sensitivity = 2C_i/B_i (gradient sensitivity),
	// Sigma = 1/alpha (noise norm scale, 0 without noise), Clip = 1 (row-norm bound),
	// Lambda = the penalty eta used, Hop = iteration t, Recipient = the neighbours.
	Ledger []privacy.Entry
	// State: private checkpoint. Persist before sending so that a restart never re-noises.
	State *Checkpoint
	// Outbox: f_i(t) to every neighbour. Send only after Ledger and State are durable.
	Outbox []Envelope
	// Events: informational.
	Events []Event
}

// Machine is one node's neighbour-exchange ADMM state machine: single-threaded, no I/O.
type Machine struct {
	cfg   Config
	obj   *Objective
	dim   int
	V     int
	slot  map[int]int
	t     int
	f     []float64 // f_i(t), as released
	lam   []float64 // lambda_i(t)
	lamO  []float64 // lambda_i before the last dual update
	sPrev []float64 // sum_j (f_i(t0) + f_j(t0)) at the barrier before the last solve
	eps   []float64 // last noise draw
	b     []float64 // scratch
	nsum  []float64 // scratch
	etaT  float64   // penalty used to produce f_i(t)

	recv  [2][][]float64
	have  [2][]bool
	count [2]int

	seq      uint64
	name     string
	to       string
	ticks    int
	maxResid float64
	inexact  int

	ledger []privacy.Entry
	outbox []Envelope
	events []Event
	ckpt   Checkpoint
	dirty  bool

	// noiseHook, when set (tests), replaces the sampled noise of perturbed iteration k.
	noiseHook func(k int, dst []float64)
}

// New returns node cfg.Node's machine over the local objective obj. The initial Ready holds
// the broadcast of f_i(0).
func New(cfg Config, obj *Objective) (*Machine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if obj == nil {
		return nil, errors.New("gossip: local objective is required")
	}
	dim := obj.Dim()
	if dim < 1 {
		return nil, fmt.Errorf("gossip: dimension must be >= 1, got %d", dim)
	}
	if cfg.Init != nil && len(cfg.Init) != dim {
		return nil, fmt.Errorf("gossip: initial vector has dimension %d, want %d", len(cfg.Init), dim)
	}
	nb := append([]int(nil), cfg.Neighbors...)
	sort.Ints(nb)
	cfg.Neighbors = nb
	m := &Machine{cfg: cfg, obj: obj, dim: dim, V: len(nb), slot: make(map[int]int, len(nb))}
	for k, j := range nb {
		m.slot[j] = k
	}
	buf := make([]float64, 7*dim)
	m.f, m.lam, m.lamO, m.sPrev = buf[:dim:dim], buf[dim:2*dim:2*dim], buf[2*dim:3*dim:3*dim], buf[3*dim:4*dim:4*dim]
	m.eps, m.b, m.nsum = buf[4*dim:5*dim:5*dim], buf[5*dim:6*dim:6*dim], buf[6*dim:]
	for p := 0; p < 2; p++ {
		m.recv[p] = make([][]float64, m.V)
		for k := range m.recv[p] {
			m.recv[p][k] = make([]float64, dim)
		}
		m.have[p] = make([]bool, m.V)
	}
	if cfg.Init != nil {
		copy(m.f, cfg.Init)
		for _, v := range m.f {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, ErrNotFinite
			}
		}
	}
	m.name = m.nodeName(cfg.Node)
	names := make([]string, len(nb))
	for k, j := range nb {
		names[k] = m.nodeName(j)
	}
	m.to = strings.Join(names, ",")
	m.ckpt = Checkpoint{Node: cfg.Node, F: m.f, Lambda: m.lam, SPrev: m.sPrev}
	m.release(privacy.MechForward, 0, 0, 0)
	m.events = append(m.events, Event{Kind: EventInit})
	return m, nil
}

func (m *Machine) nodeName(i int) string {
	if m.cfg.Names != nil {
		return m.cfg.Names[i]
	}
	return strconv.Itoa(i)
}

// Iter returns t, the last iteration computed and released.
func (m *Machine) Iter() int { return m.t }

// Done reports whether all T iterations are computed.
func (m *Machine) Done() bool { return m.t >= m.cfg.Iters }

// Model returns a copy of f_i(t).
func (m *Machine) Model() []float64 { return append([]float64(nil), m.f...) }

// ModelView returns f_i(t) without copying; valid until the next Step or Advance.
func (m *Machine) ModelView() []float64 { return m.f }

// Dual returns a copy of lambda_i(t).
func (m *Machine) Dual() []float64 { return append([]float64(nil), m.lam...) }

// Degree returns V_i.
func (m *Machine) Degree() int { return m.V }

// MaxResidual returns the largest final gradient norm over the local solves so far, and
// the number of solves that missed their tolerance.
func (m *Machine) MaxResidual() (float64, int) { return m.maxResid, m.inexact }

// Missing returns the neighbours whose vector for iteration t has not arrived, and the
// ticks spent waiting for them (the driver applies its barrier timeout policy).
func (m *Machine) Missing() (nodes []int, ticks int) {
	if m.Done() {
		return nil, 0
	}
	for k, j := range m.cfg.Neighbors {
		if !m.have[m.t%2][k] {
			nodes = append(nodes, j)
		}
	}
	return nodes, m.ticks
}

// Tick advances abstract time; it counts the ticks spent waiting at the current barrier.
func (m *Machine) Tick() {
	if !m.Done() && !m.dirty {
		m.ticks++
	}
}

// HasReady reports whether a Ready is pending.
func (m *Machine) HasReady() bool { return m.dirty }

// Ready returns the pending work. The slices are reused after Advance.
func (m *Machine) Ready() Ready {
	if !m.dirty {
		return Ready{}
	}
	return Ready{Ledger: m.ledger, State: &m.ckpt, Outbox: m.outbox, Events: m.events}
}

// Advance tells the machine that the driver applied the Ready. If the barrier of the
// current iteration is already complete (buffered messages), the next iteration is
// computed at once and a new Ready is pending.
func (m *Machine) Advance(Ready) {
	m.ledger = m.ledger[:0]
	m.outbox = m.outbox[:0]
	m.events = m.events[:0]
	m.dirty = false
	m.maybeNext()
}

// Step stores a neighbour's vector. Vectors for the current iteration t and for t+1 (a
// neighbour may be one iteration ahead) are accepted; the machine copies Vec. When the
// barrier of iteration t is complete and no Ready is pending, iteration t+1 is computed.
func (m *Machine) Step(msg Message) error {
	k, ok := m.slot[msg.From]
	if !ok {
		return ErrNotNeighbor
	}
	if len(msg.Vec) != m.dim {
		return ErrDim
	}
	if err := checkVec(msg.Vec); err != nil {
		return err
	}
	switch {
	case msg.Iter < m.t:
		return ErrStale
	case msg.Iter > m.t+1:
		return ErrFuture
	}
	p := msg.Iter % 2
	if m.have[p][k] {
		return ErrDuplicate
	}
	copy(m.recv[p][k], msg.Vec)
	m.have[p][k] = true
	m.count[p]++
	m.maybeNext()
	return nil
}

func (m *Machine) maybeNext() {
	if m.dirty || m.Done() || m.count[m.t%2] < m.V {
		return
	}
	m.next()
}

// next computes iteration t+1 from the complete barrier of iteration t.
func (m *Machine) next() {
	c := &m.cfg
	t := m.t
	p := t % 2
	clear(m.nsum)
	for k := range m.recv[p] {
		for j, v := range m.recv[p][k] {
			m.nsum[j] += v
		}
	}
	V := float64(m.V)
	if c.Algo.Perturbed(t) {
		// Dual update (9)/(13)/(15): lambda += (eta/2) sum_j (f_i(t) - f_j(t)).
		copy(m.lamO, m.lam)
		for j := range m.lam {
			m.lam[j] += 0.5 * m.etaT * (V*m.f[j] - m.nsum[j])
		}
	}
	// The received vectors of iteration t are consumed: free the slots for t+2.
	for k := range m.have[p] {
		m.have[p][k] = false
	}
	m.count[p] = 0
	m.ticks = 0
	if c.Algo.Recycled() && t%2 == 1 {
		m.evenStep()
	} else {
		m.solveStep()
	}
	m.t++
	if m.Done() {
		m.events = append(m.events, Event{Kind: EventDone, Iter: m.t})
	}
}

// evenStep is (19): f(2k) = f(2k-1) - (2 lambda(2k-1) + g + eta S)/(2 eta V + gamma), with
// g = eps + grad O(f(2k-1)) recovered from the KKT condition of (18):
// g = -2 lambda(2k-2) - eta sum_j (2 f_i(2k-1) - f_i(2k-2) - f_j(2k-2)),
// and S = sum_j (f_i(2k-1) - f_j(2k-1)) from the dual update.
func (m *Machine) evenStep() {
	eta, V := m.etaT, float64(m.V)
	den := 2*eta*V + m.cfg.Gamma
	for j := range m.f {
		g := -2*m.lamO[j] - eta*(2*V*m.f[j]-m.sPrev[j])
		s := V*m.f[j] - m.nsum[j]
		m.f[j] -= (2*m.lam[j] + g + eta*s) / den
	}
	m.release(privacy.MechForward, 0, eta, m.t+1)
	m.events = append(m.events, Event{Kind: EventEven, Iter: m.t + 1, Eta: eta})
}

// solveStep is the odd-type step (8)/(12)/(14)/(18):
// f = argmin O(f) + (2 lambda + eps)^T f + eta sum_j ||(f_i(t) + f_j(t))/2 - f||^2,
// i.e. b = 2 lambda + eps - eta sPrev and q = 2 eta V with sPrev = sum_j (f_i(t) + f_j(t)).
func (m *Machine) solveStep() {
	c := &m.cfg
	t := m.t
	k := t + 1
	if c.Algo.Recycled() {
		k = t/2 + 1
	}
	eta := c.Penalty.At(k)
	V := float64(m.V)
	for j := range m.sPrev {
		m.sPrev[j] = V*m.f[j] + m.nsum[j]
	}
	noisy := c.Algo != ADMM && !math.IsInf(c.Alpha, 1)
	clear(m.eps)
	if noisy {
		if m.noiseHook != nil {
			m.noiseHook(k, m.eps)
		} else {
			// One draw per block: each block of a one-vs-rest model is its own release,
			// with the noise density of Theorem V.1 in R^p.
			p := len(m.eps) / m.obj.Blocks()
			for b := 0; b < m.obj.Blocks(); b++ {
				SampleObjNoise(c.Noise, m.eps[b*p:(b+1)*p], c.Algo.NoiseAlpha(c.Alpha, eta))
			}
		}
	}
	objNoise := noisy && c.Algo != ADMMPVP
	for j := range m.b {
		m.b[j] = 2*m.lam[j] - eta*m.sPrev[j]
		if objNoise {
			m.b[j] += m.eps[j]
		}
	}
	res := m.obj.Solve(m.f, m.b, m.f, 2*eta*V)
	m.maxResid = math.Max(m.maxResid, res.Residual)
	if !res.Converged {
		m.inexact++
	}
	nn := 0.0
	if noisy {
		nn = math.Sqrt(dot(m.eps, m.eps))
		if c.Algo == ADMMPVP {
			for j := range m.f {
				m.f[j] += m.eps[j]
			}
		}
	}
	m.etaT = eta
	eps := math.MaxFloat64
	if noisy && res.Converged {
		w, r := m.obj.RowWeight, m.obj.RegOverN
		if c.Algo == ADMMPVP {
			eps = privacy.PVPTerm(w, r, c.Alpha, eta, m.V)
		} else {
			eps = privacy.ObjPertTerm(w, r, c.C1, c.Algo.NoiseAlpha(c.Alpha, eta), eta, m.V)
		}
		// K one-vs-rest blocks: K releases of one record's data, pure DP composed (sum).
		eps = privacy.ObjPertEntryEpsilon(eps*float64(m.obj.Blocks()), true)
	}
	m.release(privacy.MechPure, eps, eta, t+1)
	m.events = append(m.events, Event{Kind: EventSolve, Iter: t + 1, Eta: eta, NoiseNorm: nn, Solve: res})
}

// release queues the ledger entry, checkpoint and broadcast of f_i(iter).
func (m *Machine) release(mech string, eps, eta float64, iter int) {
	m.seq++
	e := privacy.Entry{
		Seq: m.seq, Node: m.name, Run: m.cfg.Run, Hop: uint64(iter), Mechanism: mech,
		Clip: 1, Lambda: eta, Epsilon: eps, Recipient: m.to,
	}
	if mech == privacy.MechPure {
		e.Sensitivity = 2 * m.obj.RowWeight
		if !math.IsInf(m.cfg.Alpha, 1) {
			e.Sigma = 1 / m.cfg.Algo.NoiseAlpha(m.cfg.Alpha, eta)
		}
	}
	m.ledger = append(m.ledger, e)
	vec := append([]float64(nil), m.f...)
	for _, j := range m.cfg.Neighbors {
		m.outbox = append(m.outbox, Envelope{To: j, Msg: Message{From: m.cfg.Node, Iter: iter, Vec: vec}})
	}
	m.ckpt.Iter = iter
	m.dirty = true
}
