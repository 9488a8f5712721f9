package walk

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/consensus/graph"
	"github.com/dpadmm/dpadmm/privacy"
)

// Mechanism names written to the ledger.
const (
	// MechGaussian is one clipped, noised update of u_i (Gaussian mechanism with
	// sensitivity 4*lambda*C and noise std lambda*sigma).
	MechGaussian = "gaussian"
	// MechForward is a hand-off without any update: the node's data is not touched.
	MechForward = "forward"
)

// Errors returned by Step. The driver should Reject malformed tokens and Ignore foreign ones.
var (
	// ErrDim is returned for a token whose vectors do not have the model dimension.
	ErrDim = errors.New("walk: token dimension mismatch")
	// ErrNotFinite is returned for a token carrying NaN or Inf.
	ErrNotFinite = errors.New("walk: token has a non-finite coordinate")
	// ErrForeign is returned for a token of another run or walk.
	ErrForeign = errors.New("walk: token belongs to another run or walk")
	// ErrBusy is returned when Step is called while a Ready is still pending.
	ErrBusy = errors.New("walk: previous Ready not yet advanced")
	// ErrHop is returned for a token beyond the walk's last hop (Config.Hops), or whose hop
	// counter is at its largest value and cannot advance.
	ErrHop = errors.New("walk: token hop beyond the end of the walk")
)

// Config is the configuration of one node's walk machine.
type Config struct {
	// Node is this node's index in [0, Nodes).
	Node int
	// Nodes is n, the number of nodes; zhat moves by du/n per update (Algorithm 4).
	Nodes int
	// Gamma is the ADMM prox parameter gamma > 0 (x-step prox_{gamma f_i}, z-step prox_{gamma r}).
	Gamma float64
	// Lambda is the relaxation step lambda in (0,1]; 0.5 is classical ADMM.
	Lambda float64
	// Clip is C > 0, the bound on ||x - z|| before the u-update; +Inf disables clipping
	// (and with it any finite privacy guarantee).
	Clip float64
	// Sigma is the std of eta in eq. (7); the noise added to u_i has std Lambda*Sigma.
	Sigma float64
	// Reg is the regularizer r of the reported objective; the z-step is prox_{gamma r}.
	Reg consensus.Regularizer
	// Graph chooses the next hop; nil means the complete graph (uniform over all n nodes,
	// self included, the paper's setting).
	Graph *graph.Graph
	// Rand drives next-hop choices. Required.
	Rand *rand.Rand
	// Noise draws eta. Required when Sigma > 0.
	Noise privacy.Noise
	// MaxUpdates caps the number of noisy updates of this node (K_i); 0 means no cap.
	// At the cap the node forwards the token unchanged.
	MaxUpdates int
	// Budgeted says that BudgetCap applies. The simulator and node set it from
	// BudgetCaps, computed once per run.
	Budgeted bool
	// BudgetCap is the most noisy updates the node's privacy budget allows (0: the node
	// only forwards). It combines with MaxUpdates: the smaller cap wins. Forwards caused
	// by the budget are reported as EventBudgetForward.
	BudgetCap int
	// Run names the run; tokens of other runs are refused.
	Run string
	// Walk is the walk id; tokens of other walks are refused.
	Walk uint64
	// Hops is K, the number of hops of the walk: the node that receives the token at hop K
	// ends the walk (Ready.Final) instead of making a hop, so no hand-off goes beyond hop K,
	// and a token beyond hop K is refused with ErrHop. 0 means no limit (the driver ends
	// the walk).
	Hops uint64
	// Scratch optionally gives transient buffers shared by all machines driven from one
	// goroutine (the simulator), which keeps the per-node footprint to u_i alone and the
	// hot path in cache. nil means the machine allocates its own.
	Scratch *Scratch
	// Names optionally gives the ledger name of every node (len Nodes), shared between
	// machines so that the hot path does not format integers. nil means decimal indices.
	Names []string
	// Step selects the local step and its parameters; the zero value is StepProx
	// (Algorithm 4).
	Step StepParams
	// Unit is what the run's figures protect ("" is privacy.UnitRecord); UnitNode is
	// refused for the steps that clip per example.
	Unit privacy.Unit
	// RowBound is the public bound R on every row's norm (1 when the public scaling
	// projects rows onto the unit ball); 0 when none holds. The record-level radius of the
	// prox and linearized steps needs it (RecordClip); New refuses a node whose own rows
	// exceed it.
	RowBound float64
}

// Scratch holds the transient vectors of one update (x, clipped x - z, noise). It may be
// shared by machines that are never stepped concurrently.
type Scratch struct{ x, g, eta []float64 }

// NewScratch returns scratch buffers for dimension dim.
func NewScratch(dim int) *Scratch {
	b := make([]float64, 3*dim)
	return &Scratch{x: b[:dim:dim], g: b[dim : 2*dim : 2*dim], eta: b[2*dim:]}
}

// DefaultConfig returns a configuration with the defaults of the paper's experiments:
// gamma 1, lambda 0.5 (classical ADMM), clip 1, sigma 0; Node, Nodes, Rand and Noise
// must still be set.
func DefaultConfig() Config {
	return Config{Gamma: 1, Lambda: 0.5, Clip: 1, Sigma: 0, Run: "run", Walk: 0}
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// Validate checks the configuration.
func (c Config) Validate() error {
	switch {
	case c.Nodes < 1:
		return fmt.Errorf("walk: nodes must be >= 1, got %d", c.Nodes)
	case c.Node < 0 || c.Node >= c.Nodes:
		return fmt.Errorf("walk: node %d out of range [0,%d)", c.Node, c.Nodes)
	case !(c.Gamma > 0) || !finite(c.Gamma):
		return fmt.Errorf("walk: gamma must be > 0 and finite, got %v", c.Gamma)
	case !(c.Lambda > 0 && c.Lambda <= 1):
		return fmt.Errorf("walk: lambda must be in (0,1], got %v", c.Lambda)
	case !(c.Clip > 0):
		return fmt.Errorf("walk: clip must be > 0, got %v", c.Clip)
	case !(c.Sigma >= 0) || !finite(c.Sigma):
		return fmt.Errorf("walk: sigma must be >= 0 and finite, got %v", c.Sigma)
	case c.MaxUpdates < 0:
		return fmt.Errorf("walk: max updates must be >= 0, got %d", c.MaxUpdates)
	case c.Budgeted && c.BudgetCap < 0:
		return fmt.Errorf("walk: budget cap must be >= 0, got %d", c.BudgetCap)
	case c.Rand == nil:
		return errors.New("walk: a random source for next hops is required")
	case c.Sigma > 0 && c.Noise == nil:
		return errors.New("walk: a noise source is required when sigma > 0")
	case c.Names != nil && len(c.Names) != c.Nodes:
		return fmt.Errorf("walk: %d names for %d nodes", len(c.Names), c.Nodes)
	case !(c.Reg.L1 >= 0) || !(c.Reg.L2 >= 0) || !finite(c.Reg.L1) || !finite(c.Reg.L2):
		return fmt.Errorf("walk: regularizer weights must be >= 0 and finite, got l1=%v l2=%v", c.Reg.L1, c.Reg.L2)
	case c.Graph != nil && c.Graph.N != c.Nodes:
		return fmt.Errorf("walk: graph has %d nodes, want %d", c.Graph.N, c.Nodes)
	}
	return c.validateStep()
}

// Token is the walk's model token, the only thing that travels. It carries the
// released model z, its pre-prox value zhat (DR-consistent form, digest 2.9), the run,
// walk id, epoch and hop counter, and nothing else: u_i and x_i never leave a node.
type Token struct {
	Run   string
	Walk  uint64
	Epoch uint64
	Hop   uint64
	Z     []float64
	Zhat  []float64
}

// NewToken returns the initial token: zhat0 = mean(u0) = 0 and z0 = prox_{gamma r}(zhat0).
func NewToken(run string, walk uint64, dim int, reg consensus.Regularizer, gamma float64) Token {
	t := Token{Run: run, Walk: walk, Z: make([]float64, dim), Zhat: make([]float64, dim)}
	reg.Prox(t.Z, t.Zhat, gamma)
	return t
}

// Message is an inbound token delivered to the machine.
type Message struct {
	From  int
	Token Token
}

// Envelope is an outbound token addressed to node To.
type Envelope struct {
	To    int
	Token Token
}

// Checkpoint is the node's private state to persist. U aliases the machine's buffer and
// is valid until Advance.
type Checkpoint struct {
	Node    int
	Updates int // noisy updates made so far (K_i)
	U       []float64
}

// EventKind names an event.
type EventKind uint8

// Event kinds.
const (
	EventUpdate  EventKind = iota + 1 // a noisy update was made
	EventForward                      // the token was forwarded unchanged (MaxUpdates reached)
	// EventBudgetForward: the token was forwarded unchanged because the privacy budget
	// allows no further update (BudgetCap reached, and it is the binding cap).
	EventBudgetForward
	// EventFinal: the token reached hop Config.Hops here; the walk is over (Ready.Final).
	EventFinal
)

// Event reports what the machine did, for logs, metrics and tests. Never read back into state.
type Event struct {
	Kind EventKind
	Hop  uint64 // hop of the outgoing token (EventFinal: of the final token)
	To   int    // recipient (EventFinal: this node)
}

// Ready is what the driver must do now, in this order, before calling Advance.
type Ready struct {
	// Ledger: privacy ledger entries. MUST be durable BEFORE any Outbox message is sent.
	Ledger []privacy.Entry
	// State: private checkpoint (u_i, K_i). Persist before sending so that a restart
	// never re-noises or forgets an update. nil when unchanged.
	State *Checkpoint
	// Outbox: token hand-offs. Send only after Ledger (and State) are durable. The
	// token's vectors alias buffers the receiver may take over; the driver must copy or
	// serialize them before Advance if it reuses the machine.
	Outbox []Envelope
	// Events: informational; may be consumed at any time.
	Events []Event
	// Final: when not nil, the token reached the walk's last hop (Config.Hops) at this node
	// and the walk is over: Final.Z is the final model, for the driver to publish. A final
	// Ready has no Ledger entry, no State and no Outbox (the release of that token was
	// charged in its sender's ledger, naming this node; publishing it is post-processing)
	// and one EventFinal. Final aliases the machine's buffer and the token's vectors; it is
	// valid until the next Step.
	Final *Token
}

// Machine is one node's random-walk private ADMM state machine. It is single-threaded
// and does no I/O.
//
// The fields a Step touches come first and the Ready buffers are kept inline, so that the
// state of one hop spans few cache lines (a simulator steps hundreds of machines in turn).
type Machine struct {
	cfg Config
	u   []float64         // u_i, private, persists between visits
	r1  consensus.RankOne // closed form of the prox when rankOne
	// anorm = ||a|| = sqrt(r1.Norm2). The constants of the final sweep: inv = 1/n, and the
	// z-step prox_{gamma r} is soft-thresholding at t = gamma L1 then shrinking by
	// sh = 1/(1 + gamma L2).
	anorm, inv, t, sh float64
	// clip is the clipping bound applied to x - z: Config.Clip without noise, and the
	// lattice-reduced bound clipLattice(...) with noise (see lattice.go). h and hinv are the
	// noise lattice step privacy.Granularity(Lambda*Sigma) and its inverse (0 without noise).
	clip, h, hinv float64
	// sens is the sensitivity of one noisy prox or linearized update the ledger records:
	// 4 lambda times the figure's clip (privacy.WalkRun.FigureClip: under the record unit
	// the smaller of Clip and the record radius RecordClip(cfg, loss)).
	sens float64
	// kk holds the constants of the assembly sweep: s, sc, inv, t, -t, sh, l (see sweepAVX2).
	kk  [8]float64
	o   [36]float64 // the lane sums of the first sweep (see updateRankOne)
	p1  [16]float64 // the constants of rankOneKernel (see rankOneAVX2)
	dim int
	upd int
	cap int // effective cap: min(MaxUpdates, BudgetCap), math.MaxInt when none
	seq uint64
	fwd EventKind // event of a forward at the cap
	// rankOne: f_i is a squared loss over one row, whose prox has the closed form r1.
	rankOne bool
	dirty   bool
	done    bool // the pending Ready is the final one (fin)
	name    string
	ckpt    Checkpoint
	// rd is the Ready of a pending hop, one entry, one envelope and one event in the
	// buffers below; it is built once, so that handing it out copies settled memory.
	rd Ready
	// One hop queues one entry, one envelope and one event.
	ledgerBuf [1]privacy.Entry
	outboxBuf [1]Envelope
	eventBuf  [1]Event
	// gd is the setting of the gradient-ADMM step (nil for other steps).
	gd *GADMMSetting
	// fin is the token of a final Ready (see Ready.Final).
	fin Token
	// Not touched by a one-row update.
	loss *consensus.LocalLoss
	x    []float64 // scratch: x = prox_{gamma f_i}(2z - u)
	g    []float64 // scratch: clipped x - z, then du
	eta  []float64 // scratch: noise
	// st is the state of the gradient-based steps (linearized, ls-sgd, sgd); nil otherwise.
	st *gradState
}

// New returns a machine for node cfg.Node with local loss f_i and model dimension dim.
func New(cfg Config, loss *consensus.LocalLoss, dim int) (*Machine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if loss == nil {
		return nil, errors.New("walk: local loss is required")
	}
	if err := checkUnit(cfg, loss); err != nil {
		return nil, err
	}
	run := privacy.WalkRun{Clip: cfg.Clip, Unit: cfg.Unit, Step: privacy.StepName(cfg.Step.Kind.Name()), RecordClip: RecordClip(cfg, loss)}
	if dim < 1 {
		return nil, fmt.Errorf("walk: dimension must be >= 1, got %d", dim)
	}
	m := &Machine{cfg: cfg, loss: loss, dim: dim, sens: 4 * cfg.Lambda * run.FigureClip()}
	sc := cfg.Scratch
	if sc == nil || len(sc.x) != dim {
		sc = NewScratch(dim)
	}
	m.u, m.x, m.g, m.eta = make([]float64, dim), sc.x, sc.g, sc.eta
	m.name = m.nodeName(cfg.Node)
	m.r1, m.rankOne = loss.RankOne(cfg.Gamma)
	m.rankOne = m.rankOne && len(m.r1.A) == dim && cfg.Step.Kind == StepProx
	m.anorm = math.Sqrt(m.r1.Norm2)
	m.inv, m.t, m.sh = 1/float64(cfg.Nodes), cfg.Gamma*cfg.Reg.L1, 1/(1+cfg.Gamma*cfg.Reg.L2)
	m.clip = cfg.Clip
	if cfg.Step.Kind == StepGADMM {
		st, err := GADMMCheck(cfg, loss, dim)
		if err != nil {
			return nil, err
		}
		m.gd = &st
	}
	if cfg.Sigma > 0 && cfg.Step.Kind != StepGADMM {
		var err error
		if m.h, m.clip, err = LatticeClip(cfg.Clip, cfg.Lambda, cfg.Sigma, dim); err != nil {
			return nil, err
		}
		m.hinv = 1 / m.h
	}
	m.p1 = [16]float64{m.r1.K, m.r1.Y, m.r1.Norm2, m.anorm, m.clip, 2 * cfg.Lambda, m.inv, m.t, -m.t, m.sh,
		float64(dim+8) * sumMargin, termMargin, cmpMargin, math.Float64frombits(1<<63 - 1), 0, 0}
	if 2*cfg.Lambda == 1 && m.sh == 1 {
		m.p1[15] = math.Float64frombits(1) // flag read as an integer by the kernel
	}
	if cfg.Step.Kind != StepProx {
		if err := m.newStep(); err != nil {
			return nil, err
		}
	}
	m.rd = Ready{Ledger: m.ledgerBuf[:], State: &m.ckpt, Outbox: m.outboxBuf[:], Events: m.eventBuf[:]}
	m.ckpt = Checkpoint{Node: cfg.Node, U: m.u}
	m.cap, m.fwd = math.MaxInt, EventForward
	if cfg.MaxUpdates > 0 {
		m.cap = cfg.MaxUpdates
	}
	if cfg.Budgeted && cfg.BudgetCap <= m.cap {
		m.cap, m.fwd = cfg.BudgetCap, EventBudgetForward
	}
	return m, nil
}

func (m *Machine) nodeName(i int) string {
	if m.cfg.Names != nil {
		return m.cfg.Names[i]
	}
	return strconv.Itoa(i)
}

// Updates returns K_i, the number of noisy updates made so far.
func (m *Machine) Updates() int { return m.upd }

// Cap returns the effective cap on noisy updates: the smaller of MaxUpdates and, when
// Budgeted, BudgetCap; math.MaxInt when neither applies.
func (m *Machine) Cap() int { return m.cap }

// U returns a copy of u_i, for tests and checkpoint inspection.
func (m *Machine) U() []float64 { return append([]float64(nil), m.u...) }

// Restore sets u_i and K_i from a checkpoint.
func (m *Machine) Restore(c Checkpoint) error {
	if len(c.U) != m.dim {
		return ErrDim
	}
	for _, v := range c.U {
		if !finite(v) {
			return ErrNotFinite
		}
	}
	copy(m.u, c.U)
	m.upd = c.Updates
	return nil
}

// Tick advances abstract time. The walk without faults needs no timers; it exists for
// the driver contract (token-loss recovery hooks here).
func (m *Machine) Tick() {}

// HasReady reports whether a Ready is pending.
func (m *Machine) HasReady() bool { return m.dirty }

// Ready returns the pending work. The slices are reused after Advance.
func (m *Machine) Ready() Ready {
	if !m.dirty {
		return Ready{}
	}
	if m.done {
		return Ready{Events: m.eventBuf[:], Final: &m.fin}
	}
	return m.rd
}

// Advance tells the machine that the driver applied the Ready.
func (m *Machine) Advance(Ready) {
	m.dirty, m.done = false, false
}

// Step processes an inbound token. On success the machine takes ownership of the token's
// vectors, updates them in place and queues the hand-off in Ready; a token at the walk's
// last hop (Config.Hops) is queued as Ready.Final instead. A refused token (an error) changes
// nothing: no Ready, the same u_i and K_i, the token's vectors untouched.
func (m *Machine) Step(msg Message) error {
	if m.dirty {
		return ErrBusy
	}
	t := &msg.Token
	if t.Run != m.cfg.Run || t.Walk != m.cfg.Walk {
		return ErrForeign
	}
	if len(t.Z) != m.dim || len(t.Zhat) != m.dim {
		return ErrDim
	}
	c := &m.cfg
	if c.Hops > 0 && t.Hop >= c.Hops || t.Hop == math.MaxUint64 {
		return m.final(t)
	}
	mech := MechForward
	if m.upd < m.cap {
		// update refuses a non-finite token before writing anything.
		if err := m.update(t.Z, t.Zhat); err != nil {
			return err
		}
		mech = MechGaussian
		m.upd++
	} else if !allFinite(t.Z, t.Zhat) {
		return ErrNotFinite
	}
	hop := t.Hop + 1
	var next int
	if c.Graph == nil {
		next = c.Rand.IntN(c.Nodes)
	} else {
		next = c.Graph.RandomNext(c.Node, c.Rand)
	}
	m.seq++
	// Every field of the entry is written: the driver may have changed the previous one.
	e := &m.ledgerBuf[0]
	e.Seq, e.Node, e.Run, e.Walk, e.Epoch, e.Hop = m.seq, m.name, c.Run, t.Walk, t.Epoch, hop
	e.Mechanism, e.Clip, e.Lambda, e.Epsilon, e.Recipient = mech, c.Clip, c.Lambda, 0, m.nodeName(next)
	e.Sensitivity, e.Sigma, e.Rate = 0, 0, 0
	kind := m.fwd
	if mech == MechGaussian {
		e.Sensitivity = m.sens // 4 lambda C, or 4 lambda C' under the record unit
		e.Sigma = c.Lambda * c.Sigma
		kind = EventUpdate
		if c.Step.Kind != StepProx {
			m.stepEntry(e)
		}
	}
	m.ckpt.Updates = m.upd
	// The envelope and the event are written field by field (plain word stores and loads,
	// which the CPU forwards to the driver's reads without a stall).
	o := &m.outboxBuf[0]
	o.To = next
	ot := &o.Token
	ot.Run, ot.Walk, ot.Epoch, ot.Hop, ot.Z, ot.Zhat = t.Run, t.Walk, t.Epoch, hop, t.Z, t.Zhat
	v := &m.eventBuf[0]
	v.Kind, v.Hop, v.To = kind, hop, next
	m.dirty = true
	return nil
}

// final ends the walk with token t at hop Config.Hops, or refuses a token beyond it (and,
// without a limit, one whose hop counter cannot advance) with ErrHop.
func (m *Machine) final(t *Token) error {
	if t.Hop != m.cfg.Hops || m.cfg.Hops == 0 {
		return ErrHop
	}
	if !allFinite(t.Z, t.Zhat) {
		return ErrNotFinite
	}
	m.fin = *t
	v := &m.eventBuf[0]
	v.Kind, v.Hop, v.To = EventFinal, t.Hop, m.cfg.Node
	m.dirty, m.done = true, true
	return nil
}
