package sim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"unsafe"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/consensus/graph"
	"github.com/dpadmm/dpadmm/node/drive"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/walk"
)

// SimConfig configures one simulated walk run over pre-split shards.
type SimConfig struct {
	Shards     []*consensus.Dataset // one per node
	Problem    consensus.Problem
	Gamma      float64
	Lambda     float64
	Clip       float64
	Sigma      float64
	Step       walk.StepParams // the local step (zero value: prox)
	Unit       privacy.Unit    // what the figures protect ("" is record)
	RowBound   float64         // the public bound on row norms (walk.Config.RowBound)
	Graph      string          // graph spec, "" = complete
	MaxUpdates int
	Seed       uint64
	Run        string
	// Budget, when non-nil, caps each node's noisy updates by a privacy budget.
	Budget *BudgetSpec
	// LedgerDir, when set, receives one append-only ledger file per node,
	// <LedgerDir>/node-<i>.ledger (see FileLedger); the directory must not hold a
	// ledger already. Call Sim.Close at the end of the run.
	LedgerDir string
	// Ledger, when set, receives the ledger entries instead (e.g. a MemLedger). At most
	// one of Ledger and LedgerDir may be set.
	Ledger LedgerSink
}

// Mix derives a per-purpose, per-node seed from the run seed: drive.SeedMix, the one
// derivation every driver shares (the purposes are listed in node/drive/seed.go).
func Mix(seed uint64, i int, purpose uint64) uint64 { return drive.SeedMix(seed, i, purpose) }

// NodeRand returns node i's next-hop source for a run seed (drive.SeededRand).
func NodeRand(seed uint64, i int) *rand.Rand { return drive.SeededRand(seed, i) }

// NodeNoise returns node i's seeded noise source for a run seed (drive.SeededNoise).
func NodeNoise(seed uint64, i int) privacy.Noise { return drive.SeededNoise(seed, i) }

// Store is the simulator's in-memory durable store: per-node counters of ledger entries
// and a fingerprint of the trace (hop, node, noisy).
type Store struct {
	Entries []int // ledger entries per node
	Noisy   []int // gaussian entries per node
	LastHop []uint64
	Trace   uint64 // running fingerprint of (hop, node, noisy), see traceMix
	// LastNoisy is the hop (1 = the first) of the latest noisy update; 0 before any.
	LastNoisy uint64
	KeepTrace bool
	Path      []TraceStep // kept only when KeepTrace
}

// TraceStep is one hop of the walk: the node that held the token and whether it made a
// noisy update. A step with View set is not a hop: Node received the bytes of the
// release that produced the token of hop Hop but did not step it (the sender redirected
// the hand-off after a withheld or lost ack). It makes no update and, in the realised
// accountant's input, is a step that adds no noise, so Node is charged for that state.
// The simulator has no lost acks and its paths have no views; paths rebuilt from real
// nodes' ledgers do (LedgerPath).
type TraceStep struct {
	Hop   uint64 `json:"hop"`
	Node  int    `json:"node"`
	Noisy bool   `json:"noisy"`
	View  bool   `json:"view,omitempty"`
}

// Sim drives N walk machines in one goroutine.
type Sim struct {
	cfg      SimConfig
	N, Dim   int
	Machines []*walk.Machine
	Store    *Store
	msg      walk.Message // the token in transit, as delivered to its holder (From -1)
	holder   int
	hops     uint64
	// caps[i] is node i's effective cap on noisy updates (min of MaxUpdates and the
	// budget's cap; math.MaxInt when neither applies), checked on every step.
	caps []int
	plan *walk.BudgetPlan // nil without a budget
	// step holds the local step's fields of the run's privacy.WalkRun (StepRun), with Clip and Sigma.
	step   privacy.WalkRun
	atCap  int        // nodes whose noisy updates reached their cap (budget runs)
	done   bool       // budget run with every node at its cap: no more hops
	ledger LedgerSink // nil without a ledger
	closed bool
}

// NewSim builds the machines. Node i's local loss is weighted by n*rows_i/N so that
// sum_i f_i = n * mean loss and the walk solves the reported problem.
func NewSim(cfg SimConfig) (*Sim, error) {
	n := len(cfg.Shards)
	if n < 1 {
		return nil, errors.New("testnet: no shards")
	}
	if err := cfg.Problem.Validate(); err != nil {
		return nil, err
	}
	total, dim := 0, cfg.Shards[0].ModelDim()
	for i, s := range cfg.Shards {
		if s.Rows < 1 {
			return nil, fmt.Errorf("testnet: node %d has no rows", i)
		}
		if s.ModelDim() != dim {
			return nil, fmt.Errorf("testnet: node %d has a model of dimension %d, want %d", i, s.ModelDim(), dim)
		}
		total += s.Rows
	}
	var g *graph.Graph
	if cfg.Graph != "" && cfg.Graph != "complete" {
		var err error
		if g, err = graph.Parse(cfg.Graph, n, cfg.Seed); err != nil {
			return nil, err
		}
		if !g.Connected() {
			return nil, fmt.Errorf("testnet: graph %q is not connected", cfg.Graph)
		}
	}
	if cfg.Run == "" {
		cfg.Run = "sim"
	}
	if cfg.MaxUpdates < 0 {
		return nil, fmt.Errorf("testnet: max updates must be >= 0, got %d", cfg.MaxUpdates)
	}
	if cfg.Ledger != nil && cfg.LedgerDir != "" {
		return nil, errors.New("testnet: set at most one of Ledger and LedgerDir")
	}
	step, err := StepRun(walk.Config{Gamma: cfg.Gamma, Clip: cfg.Clip, Sigma: cfg.Sigma, Step: cfg.Step, Unit: cfg.Unit, RowBound: cfg.RowBound},
		cfg.Problem, cfg.Shards)
	if err != nil {
		return nil, fmt.Errorf("testnet: %w", err)
	}
	step.Clip, step.Sigma = cfg.Clip, cfg.Sigma
	plan, err := budgetCaps(&cfg, n, g, step)
	if err != nil {
		return nil, err
	}
	caps := make([]int, n)
	for i := range caps {
		caps[i] = math.MaxInt
		if cfg.MaxUpdates > 0 {
			caps[i] = cfg.MaxUpdates
		}
		if plan != nil {
			caps[i] = min(caps[i], plan.Caps[i])
		}
	}
	s := &Sim{cfg: cfg, N: n, Dim: dim, Machines: make([]*walk.Machine, n), caps: caps, plan: plan, step: step}
	if err := s.newMachines(g, total); err != nil {
		return nil, err
	}
	s.done = plan != nil && s.atCap == n
	s.Store = &Store{Entries: make([]int, n), Noisy: make([]int, n), LastHop: make([]uint64, n), Trace: 0x6a09e667f3bcc908}
	s.msg = walk.Message{From: -1, Token: walk.NewToken(cfg.Run, 0, dim, cfg.Problem.Reg, cfg.Gamma)}
	s.holder = drive.SeededHolder(cfg.Seed, n)
	switch {
	case cfg.Ledger != nil:
		s.ledger = cfg.Ledger
	case cfg.LedgerDir != "":
		fl, err := NewFileLedger(cfg.LedgerDir, n)
		if err != nil {
			return nil, err
		}
		s.ledger = fl
	}
	return s, nil
}

// newMachines builds the walk machine of every node over the graph g (nil: complete),
// each node's loss weighted n*rows_i/total.
func (s *Sim) newMachines(g *graph.Graph, total int) error {
	cfg, n, dim, plan, caps := s.cfg, s.N, s.Dim, s.plan, s.caps
	names := make([]string, n)
	for i := range names {
		names[i] = strconv.Itoa(i)
	}
	scratch := walk.NewScratch(dim) // one goroutine drives all machines
	for i, sh := range cfg.Shards {
		ll, err := consensus.NewLocalLoss(sh, cfg.Problem.Loss, walk.LossWeight(n, sh.Rows, total))
		if err != nil {
			return fmt.Errorf("testnet: node %d: %w", i, err)
		}
		wc := walk.Config{
			Node: i, Nodes: n, Gamma: cfg.Gamma, Lambda: cfg.Lambda, Clip: cfg.Clip, Sigma: cfg.Sigma,
			Reg: cfg.Problem.Reg, Graph: g, Rand: drive.SeededRand(cfg.Seed, i), MaxUpdates: cfg.MaxUpdates,
			Run: cfg.Run, Names: names, Scratch: scratch, Step: cfg.Step, Unit: cfg.Unit, RowBound: cfg.RowBound,
		}
		if plan != nil {
			wc.Budgeted, wc.BudgetCap = true, plan.Caps[i]
		}
		if cfg.Sigma > 0 {
			wc.Noise = drive.SeededNoise(cfg.Seed, i)
		}
		m, err := walk.New(wc, ll, dim)
		if err != nil {
			return err
		}
		s.Machines[i] = m
		if plan != nil && caps[i] == 0 {
			s.atCap++
		}
	}
	return nil
}

// Z returns the current released model (aliases the token; copy to keep).
func (s *Sim) Z() []float64 { return s.msg.Token.Z }

// Hops returns the number of hops made.
func (s *Sim) Hops() uint64 { return s.hops }

// TraceHash returns the fingerprint of the trace so far.
func (s *Sim) TraceHash() uint64 { return s.Store.Trace }

// TraceMix folds one trace step into the fingerprint (two rounds of a
// multiply-xorshift mixer; order-sensitive, deterministic across platforms).
func TraceMix(h, hop, nodeNoisy uint64) uint64 {
	h = (h ^ hop) * 0xff51afd7ed558ccd
	h ^= h >> 33
	h = (h ^ nodeNoisy) * 0xc4ceb9fe1a85ec53
	return h ^ h>>29
}

// Step delivers the token to its holder, applies the Ready in order (ledger, state,
// send) and checks the invariants: ledger written before send, one entry per hop,
// vectors of dimension p, a finite u_i (the token is checked by its next holder and at the
// end of RunHops), noisy updates within the node's cap (MaxUpdates and
// privacy budget) and equal to the count in the ledger. Once every node has exhausted
// its budget it makes no hop and returns ErrExhausted.
func (s *Sim) Step() error {
	if s.done {
		return ErrExhausted
	}
	i := s.holder
	m := s.Machines[i]
	if err := m.Step(s.msg); err != nil {
		return fmt.Errorf("testnet: hop %d node %d: %w", s.hops, i, err)
	}
	rd := m.Ready()
	st := s.Store
	// Ledger first (durable before any send).
	if len(rd.Ledger) != 1 || len(rd.Outbox) != 1 {
		return fmt.Errorf("testnet: invariant: hop %d node %d: %d ledger entries for %d envelopes", s.hops, i, len(rd.Ledger), len(rd.Outbox))
	}
	e := &rd.Ledger[0]
	noisy := e.Noisy()
	st.Entries[i]++
	if noisy {
		st.Noisy[i]++
		st.LastNoisy = e.Hop
		if st.Noisy[i] == s.caps[i] && s.plan != nil {
			s.atCap++
			s.done = s.atCap == s.N
		}
	}
	if s.ledger != nil {
		if s.closed {
			return fmt.Errorf("testnet: hop %d node %d: ledger already closed", s.hops, i)
		}
		if err := s.ledger.Append(i, e); err != nil {
			return fmt.Errorf("testnet: hop %d node %d: %w", s.hops, i, err)
		}
	}
	st.LastHop[i] = e.Hop
	var nb uint64
	if noisy {
		nb = 1
	}
	st.Trace = TraceMix(st.Trace, e.Hop, uint64(i)<<1|nb)
	if st.KeepTrace {
		st.Path = append(st.Path, TraceStep{Hop: e.Hop - 1, Node: i, Noisy: noisy})
	}
	// Send: only what the ledger covers.
	env := &rd.Outbox[0]
	if env.Token.Hop != e.Hop || st.LastHop[i] != env.Token.Hop {
		return fmt.Errorf("testnet: invariant: hop %d node %d: envelope hop %d not covered by ledger hop %d", s.hops, i, env.Token.Hop, e.Hop)
	}
	if env.To < 0 || env.To >= s.N {
		return fmt.Errorf("testnet: invariant: hop %d node %d: recipient %d out of range", s.hops, i, env.To)
	}
	if rd.State == nil || len(rd.State.U) != s.Dim || len(env.Token.Z) != s.Dim || len(env.Token.Zhat) != s.Dim {
		return fmt.Errorf("testnet: invariant: hop %d node %d: dimension", s.hops, i)
	}
	// u_i must stay finite. The token needs no check here: its next holder refuses a
	// non-finite one before using it, and RunHops checks the last one.
	if !walk.AllFinite(rd.State.U) {
		return fmt.Errorf("testnet: invariant: hop %d node %d: non-finite u", s.hops, i)
	}
	// I4: the holder's noisy updates never exceed its cap, and the machine's count is
	// the ledger's.
	if u := rd.State.Updates; u > s.caps[i] || u != st.Noisy[i] {
		return fmt.Errorf("testnet: invariant: hop %d node %d: %d noisy updates (ledger %d), cap %d", s.hops, i, u, st.Noisy[i], s.caps[i])
	}
	takeToken(&s.msg.Token, &env.Token)
	s.holder = env.To
	m.Advance(rd)
	s.hops++
	return nil
}

// takeToken sets dst to src, writing only the words that differ (normally just the hop):
// rewriting the others would make the next Step's copy of the message wait for those stores
// to reach the cache, at a cost comparable to the rest of the hop's bookkeeping.
func takeToken(dst, src *walk.Token) {
	dst.Hop = src.Hop
	if unsafe.StringData(dst.Run) != unsafe.StringData(src.Run) || len(dst.Run) != len(src.Run) {
		dst.Run = src.Run
	}
	if dst.Walk != src.Walk {
		dst.Walk = src.Walk
	}
	if dst.Epoch != src.Epoch {
		dst.Epoch = src.Epoch
	}
	if unsafe.SliceData(dst.Z) != unsafe.SliceData(src.Z) || len(dst.Z) != len(src.Z) || cap(dst.Z) != cap(src.Z) {
		dst.Z = src.Z
	}
	if unsafe.SliceData(dst.Zhat) != unsafe.SliceData(src.Zhat) || len(dst.Zhat) != len(src.Zhat) || cap(dst.Zhat) != cap(src.Zhat) {
		dst.Zhat = src.Zhat
	}
}

// RunHops makes k hops, calling every(h) after each block of `each` hops when each > 0.
// It returns early, with nil, once every node has exhausted its budget (Exhausted). It
// checks that the token it ends with is finite.
func (s *Sim) RunHops(k uint64, each uint64, every func(h uint64) error) error {
	for h := uint64(0); h < k; h++ {
		if err := s.Step(); err != nil {
			if err == ErrExhausted {
				break
			}
			return err
		}
		if each > 0 && every != nil && s.hops%each == 0 {
			if err := every(s.hops); err != nil {
				return err
			}
		}
	}
	if !walk.AllFinite(s.msg.Token.Z) || !walk.AllFinite(s.msg.Token.Zhat) {
		return fmt.Errorf("testnet: invariant: hop %d: non-finite token", s.hops)
	}
	return nil
}

// Updates returns the number of noisy updates per node.
func (s *Sim) Updates() []int { return append([]int(nil), s.Store.Noisy...) }
