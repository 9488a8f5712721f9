package gossip

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/dpadmm/dpadmm/privacy"
)

// MissingPolicy is what a node does with a neighbour whose vector for the current
// iteration is declared missing at the barrier (see ExchangeConfig for when that happens).
type MissingPolicy uint8

// Missing-neighbour policies.
const (
	// MissingStop ends the exchange with a Stop naming the neighbour(s) and the iteration
	// (the default: a result is never silently computed from old values).
	MissingStop MissingPolicy = iota
	// MissingWait keeps waiting (an EventMissing at every check) until the vector arrives.
	MissingWait
	// MissingStale continues with the neighbour's last received vector in place of the
	// missing one. The substitution is reported in Ready.StaleUses, which the driver must
	// make durable before any Outbox message of that Ready is sent. A neighbour that never
	// sent anything cannot be stood in for: the exchange stops.
	MissingStale
)

var missingNames = []string{"stop", "wait", "stale"}

// String returns the CLI name of the policy.
func (p MissingPolicy) String() string {
	if int(p) < len(missingNames) {
		return missingNames[p]
	}
	return "MissingPolicy(" + strconv.Itoa(int(p)) + ")"
}

// ParseMissingPolicy parses stop, wait or stale ("" = stop), ignoring case and spaces.
func ParseMissingPolicy(s string) (MissingPolicy, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "" {
		return MissingStop, nil
	}
	for i, n := range missingNames {
		if s == n {
			return MissingPolicy(i), nil
		}
	}
	return 0, fmt.Errorf("gossip: unknown missing-neighbour policy %q (want stop, wait or stale)", s)
}

// Errors returned by Exchange.Step besides those of Machine.Step. ErrTooFar and ErrEnded
// are Ignore verdicts, like ErrStale and ErrDuplicate.
var (
	ErrTooFar = errors.New("gossip: message beyond the early-frame window")
	ErrEnded  = errors.New("gossip: the exchange has ended")
)

// ExchangeConfig is the barrier policy of one node, in ticks. The driver chooses the
// length of a tick; the defaults assume a tick of 1/32 of the barrier timeout, which is
// how the production node (node.Node.RunRADMM) maps its durations (30 s barrier: a tick
// of 0.94 s).
type ExchangeConfig struct {
	// Barrier is how many ticks the node waits at an iteration before it looks at the
	// neighbours whose vector is still missing. A missing neighbour that is not connected
	// (PeerDown) is then declared missing. Default 32 (one barrier timeout).
	Barrier int
	// MaxWait is how many ticks a missing neighbour that is still connected is waited for
	// before it is declared missing too. A connected neighbour is usually alive and waiting
	// on its own barrier (a missing vector delays the neighbourhood one hop per iteration),
	// so it gets longer. It must be >= Barrier. Default 320 (ten barrier timeouts).
	MaxWait int
	// Recheck is how many ticks pass between two checks after the first one. Default 8
	// (a quarter of the barrier timeout).
	Recheck int
	// Window is how many iterations beyond the next one a neighbour's early frame is held
	// for; frames further ahead are dropped (EventDropped). Default 4: a neighbour can be
	// at most one iteration ahead of a node that holds its barrier, so 4 leaves room for
	// re-sends and reordering without holding unbounded memory.
	Window int
	// OnMissing is the policy for a neighbour declared missing. Default MissingStop.
	OnMissing MissingPolicy
}

// DefaultExchangeConfig returns Barrier 32, MaxWait 320, Recheck 8, Window 4, MissingStop.
func DefaultExchangeConfig() ExchangeConfig {
	return ExchangeConfig{Barrier: 32, MaxWait: 320, Recheck: 8, Window: 4, OnMissing: MissingStop}
}

// Validate checks the configuration.
func (c ExchangeConfig) Validate() error {
	switch {
	case c.Barrier < 1:
		return fmt.Errorf("gossip: barrier timeout must be >= 1 tick, got %d", c.Barrier)
	case c.MaxWait < c.Barrier:
		return fmt.Errorf("gossip: max wait (%d ticks) must be >= the barrier timeout (%d ticks)", c.MaxWait, c.Barrier)
	case c.Recheck < 1:
		return fmt.Errorf("gossip: recheck period must be >= 1 tick, got %d", c.Recheck)
	case c.Window < 0:
		return fmt.Errorf("gossip: window must be >= 0, got %d", c.Window)
	case c.OnMissing > MissingStale:
		return fmt.Errorf("gossip: unknown missing-neighbour policy %d", c.OnMissing)
	}
	return nil
}

// StaleUse records that iteration Iter+1 was computed with neighbour Neighbor's vector of
// iteration UsedIter in place of its (missing) vector of iteration Iter.
type StaleUse struct {
	Iter     int `json:"iter"`
	Neighbor int `json:"neighbor"`
	UsedIter int `json:"used_iter"`
}

// StopReason says why an exchange stopped.
type StopReason uint8

// Stop reasons.
const (
	// StopMissing: policy stop and a neighbour declared missing.
	StopMissing StopReason = iota + 1
	// StopNoStandIn: policy stale and a missing neighbour never sent any vector.
	StopNoStandIn
)

// Stop is the end of an exchange decided by the missing-neighbour policy.
type Stop struct {
	Reason    StopReason
	Iter      int   // the iteration whose barrier could not be completed
	Neighbors []int // the neighbours declared missing (StopNoStandIn: the one without a vector)
	Waited    int64 // ticks spent at the barrier
}

// Error describes the stop.
func (s *Stop) Error() string {
	if s.Reason == StopNoStandIn {
		return fmt.Sprintf("gossip: at iteration %d neighbour %v never sent a vector that could stand in (policy stale)", s.Iter, s.Neighbors)
	}
	return fmt.Sprintf("gossip: neighbour(s) %v missing at iteration %d after %d ticks (policy stop)", s.Neighbors, s.Iter, s.Waited)
}

// ExchangeState is the part of a release the driver must make durable before sending it:
// the machine's checkpoint, the released vector and the neighbour vectors the machine
// consumed to compute it. A restarted node replays Inputs through a fresh Exchange (Step,
// Ready, Advance without sending) and must obtain Vec again bit for bit.
type ExchangeState struct {
	*Checkpoint
	// Vec is f_i(Iter) as released (shared with the Outbox envelopes of this release).
	Vec []float64
	// Inputs are the neighbour vectors of iteration Iter-1 consumed by this release, in the
	// order they reached the machine, stale substitutions included.
	Inputs []Input
}

// Input is a neighbour vector consumed at a barrier: Message.Iter is the barrier's
// iteration. For a stale substitution StandIn is set and UsedIter is the iteration the
// vector was released for.
type Input struct {
	Message
	StandIn  bool
	UsedIter int
}

// ExchangeReady is what the driver must do now, in this order, before calling Advance.
type ExchangeReady struct {
	// Ledger: privacy ledger entries (at most one: the release of State.Iter). MUST be
	// durable BEFORE any Outbox message is sent.
	Ledger []privacy.Entry
	// StaleUses: stale substitutions made since the last Ready, oldest first. Like Ledger,
	// they MUST be durable before any Outbox message is sent (the release that uses the
	// stale vector may be in this very Outbox).
	StaleUses []StaleUse
	// State: the release to persist (journal) before sending; nil when this Ready releases
	// nothing.
	State *ExchangeState
	// Outbox: messages to send only after Ledger, StaleUses and State are durable:
	// re-sends of earlier releases first (each covered by the ledger entry of its
	// iteration, which names every neighbour), then the release of State.
	Outbox []Envelope
	// Events: informational; the exchange's own events, then the machine's.
	Events []Event
	// Done: the last iteration is computed (from the Ready that releases f_i(T) on); Model
	// is then f_i(T) (a copy).
	Done  bool
	Model []float64
	// Stop: the policy ended the exchange; nothing more is released. The driver reports
	// it (node.ErrNeighborMissing).
	Stop *Stop
}

type standIn struct {
	ok   bool
	iter int
	vec  []float64
}

type sentVec struct {
	iter int
	vec  []float64
}

// Exchange wraps one node's Machine with the barrier policy of the neighbour exchange:
//
//   - early frames: a vector for an iteration beyond the next one is held (up to Window
//     iterations further) and given to the machine when it gets there; further ahead it
//     is dropped; stale and duplicate frames are ignored. Each case emits an event;
//   - the barrier timeout: after Barrier ticks at an iteration, every Recheck ticks, a
//     neighbour whose vector is still missing is declared missing if it is down
//     (PeerDown, as the driver observes the connection) or has been waited for MaxWait
//     ticks; OnMissing then applies: stop (Ready.Stop), wait (EventMissing) or stale (the
//     neighbour's last received vector stands in, reported in Ready.StaleUses);
//   - re-sends: Resume (after a restart) and Reconnected(j) queue the last two releases
//     again, unchanged: already-released vectors are never recomputed or re-noised.
//
// Every Outbox message is covered by a ledger entry of its iteration naming its
// recipient, emitted in the same or an earlier Ready. Exchange is single-threaded, does
// no I/O and counts time in Tick calls; Deadline tells a lazy driver when the next Tick
// matters.
type Exchange struct {
	cfg ExchangeConfig
	m   *Machine

	now       int64
	iter      int   // the machine iteration the current wait is for
	waitFrom  int64 // tick at which the machine reached iter
	nextCheck int64
	down      []bool    // per neighbour slot
	last      []standIn // per neighbour slot: the newest vector the machine accepted
	early     []Message // held frames, by arrival
	inputs    map[int][]Input
	sent      []sentVec // the last (at most two) releases applied, oldest first
	stop      *Stop
	stopSent  bool // the Ready carrying stop was advanced

	stale  []StaleUse
	resend []Envelope
	events []Event
	state  ExchangeState
}

// NewExchange wraps m, which must be fresh (iteration 0, its initial release pending).
func NewExchange(m *Machine, cfg ExchangeConfig) (*Exchange, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if m == nil || m.Iter() != 0 || !m.HasReady() {
		return nil, errors.New("gossip: the exchange needs a fresh machine (iteration 0 with its initial release pending)")
	}
	x := &Exchange{cfg: cfg, m: m, down: make([]bool, m.V), last: make([]standIn, m.V), inputs: map[int][]Input{}}
	x.nextCheck = int64(cfg.Barrier)
	return x, nil
}

// Machine returns the wrapped machine (read-only use: Model, MaxResidual, Degree).
func (x *Exchange) Machine() *Machine { return x.m }

// Config returns the barrier policy.
func (x *Exchange) Config() ExchangeConfig { return x.cfg }

// Iter returns the machine's iteration (the last one computed).
func (x *Exchange) Iter() int { return x.m.Iter() }

// Done reports whether the last iteration is computed.
func (x *Exchange) Done() bool { return x.m.Done() }

// Stopped returns the policy stop, or nil.
func (x *Exchange) Stopped() *Stop { return x.stop }

// Now returns the number of Tick calls so far.
func (x *Exchange) Now() int64 { return x.now }

// Deadline returns the tick (in Now's count) at which the next Tick can act: the next
// barrier check. ok is false when no Tick is needed (done or stopped). A driver may sleep
// until then and deliver the ticks that elapsed at once.
func (x *Exchange) Deadline() (tick int64, ok bool) {
	if x.ended() {
		return 0, false
	}
	return max(x.nextCheck, x.now+1), true
}

// Missing returns the neighbours whose vector for the current iteration has not arrived
// and the ticks waited at this iteration.
func (x *Exchange) Missing() ([]int, int64) {
	nodes, _ := x.m.Missing()
	return nodes, x.now - x.waitFrom
}

func (x *Exchange) ended() bool { return x.stop != nil || x.m.Done() }

// PeerDown reports that the driver sees no connection to neighbour j.
func (x *Exchange) PeerDown(j int) {
	if k, ok := x.m.slot[j]; ok {
		x.down[k] = true
	}
}

// PeerUp reports that the driver sees a connection to neighbour j again.
func (x *Exchange) PeerUp(j int) {
	if k, ok := x.m.slot[j]; ok {
		x.down[k] = false
	}
}

// Reconnected reports that neighbour j connected again after all its connections had
// closed (it may have restarted and lost vectors it had acknowledged): j is up and the
// last two releases are queued to it again, unchanged. It also works once the exchange
// is done, for a driver that stays reachable after the end.
func (x *Exchange) Reconnected(j int) {
	if _, ok := x.m.slot[j]; !ok || x.stop != nil {
		return
	}
	x.PeerUp(j)
	x.queueResend([]int{j})
}

// Resume queues the last two releases to every neighbour again, unchanged: the driver
// calls it after replaying its journal, since the neighbours may not have received them
// before the crash.
func (x *Exchange) Resume() {
	if x.stop != nil {
		return
	}
	x.queueResend(x.m.cfg.Neighbors)
}

func (x *Exchange) queueResend(to []int) {
	if len(x.sent) == 0 {
		return
	}
	for _, s := range x.sent {
		for _, j := range to {
			x.resend = append(x.resend, Envelope{To: j, Msg: Message{From: x.m.cfg.Node, Iter: s.iter, Vec: s.vec}})
		}
	}
	x.events = append(x.events, Event{Kind: EventResent, Iter: x.sent[len(x.sent)-1].iter, Peers: append([]int(nil), to...)})
}

// Step handles a neighbour's vector. Malformed or foreign messages are refused with
// ErrNotNeighbor, ErrDim or ErrNotFinite (Reject). A stale or duplicate vector (ErrStale,
// ErrDuplicate), one beyond the window (ErrTooFar) or any vector after the end
// (ErrEnded) is ignored with an event (Ignore). A vector for the current or next
// iteration goes to the machine; one further ahead within the window is held. The
// exchange keeps its own copy of msg.Vec.
func (x *Exchange) Step(msg Message) error {
	if _, ok := x.m.slot[msg.From]; !ok {
		return ErrNotNeighbor
	}
	if len(msg.Vec) != x.m.dim {
		return ErrDim
	}
	if err := checkVec(msg.Vec); err != nil {
		return err
	}
	if x.ended() {
		x.ignored(msg, ErrEnded)
		return ErrEnded
	}
	t := x.m.Iter()
	switch {
	case msg.Iter < t:
		x.ignored(msg, ErrStale)
		return ErrStale
	case msg.Iter-t-1 > x.cfg.Window:
		x.events = append(x.events, Event{Kind: EventDropped, Iter: msg.Iter, Peers: []int{msg.From}})
		return ErrTooFar
	case msg.Iter > t+1:
		for _, e := range x.early {
			if e.From == msg.From && e.Iter == msg.Iter {
				x.ignored(msg, ErrDuplicate)
				return ErrDuplicate
			}
		}
		x.early = append(x.early, Message{From: msg.From, Iter: msg.Iter, Vec: append([]float64(nil), msg.Vec...)})
		x.events = append(x.events, Event{Kind: EventBuffered, Iter: msg.Iter, Peers: []int{msg.From}})
		return nil
	}
	err := x.step(Message{From: msg.From, Iter: msg.Iter, Vec: append([]float64(nil), msg.Vec...)})
	x.sync()
	return err
}

// Replay gives the machine an input journaled with an earlier release (ExchangeState.
// Inputs), when a restarted node rebuilds its state: a fresh Exchange, then for every
// journaled release its inputs (Replay), Ready (the release, which must equal the
// journaled one) and Advance, without sending anything; then Resume. A stand-in is
// remembered with the iteration it was released for, so later stale uses report it
// right. The input must be for the machine's current iteration.
func (x *Exchange) Replay(in Input) error {
	if _, ok := x.m.slot[in.From]; !ok {
		return ErrNotNeighbor
	}
	if x.ended() {
		return ErrEnded
	}
	if in.Iter != x.m.Iter() {
		return fmt.Errorf("gossip: replayed input of iteration %d at iteration %d", in.Iter, x.m.Iter())
	}
	msg := Message{From: in.From, Iter: in.Iter, Vec: append([]float64(nil), in.Vec...)}
	if !in.StandIn {
		err := x.step(msg)
		x.sync()
		return err
	}
	if err := x.m.Step(msg); err != nil {
		return err
	}
	k := x.m.slot[in.From]
	if l := x.last[k]; !l.ok || in.UsedIter > l.iter {
		x.last[k] = standIn{ok: true, iter: in.UsedIter, vec: msg.Vec}
	}
	x.inputs[in.Iter] = append(x.inputs[in.Iter], Input{Message: msg, StandIn: true, UsedIter: in.UsedIter})
	x.sync()
	return nil
}

func (x *Exchange) ignored(msg Message, err error) {
	x.events = append(x.events, Event{Kind: EventIgnored, Iter: msg.Iter, Peers: []int{msg.From}, Err: err})
}

// step gives msg (whose Vec the exchange owns) to the machine and records it as an input
// and as the sender's newest vector.
func (x *Exchange) step(msg Message) error {
	err := x.m.Step(msg)
	switch {
	case err == nil:
		k := x.m.slot[msg.From]
		if l := x.last[k]; !l.ok || msg.Iter > l.iter {
			x.last[k] = standIn{ok: true, iter: msg.Iter, vec: msg.Vec}
		}
		x.inputs[msg.Iter] = append(x.inputs[msg.Iter], Input{Message: msg})
	case errors.Is(err, ErrStale) || errors.Is(err, ErrDuplicate):
		x.ignored(msg, err)
	}
	return err
}

// sync restarts the barrier clock when the machine has moved to a new iteration.
func (x *Exchange) sync() {
	if t := x.m.Iter(); t != x.iter {
		x.iter, x.waitFrom, x.nextCheck = t, x.now, x.now+int64(x.cfg.Barrier)
	}
}

// Tick advances time by one tick and applies the barrier policy when a check is due. A
// check due while a release is pending waits for the next Tick after Advance.
func (x *Exchange) Tick() {
	x.now++
	if x.ended() {
		return
	}
	x.m.Tick()
	if x.m.HasReady() || x.now < x.nextCheck {
		return
	}
	x.check()
}

func (x *Exchange) check() {
	t := x.m.Iter()
	missing, _ := x.m.Missing()
	waited := x.now - x.waitFrom
	x.nextCheck = x.now + int64(x.cfg.Recheck)
	var gone []int
	for _, j := range missing {
		if waited >= int64(x.cfg.MaxWait) || x.down[x.m.slot[j]] {
			gone = append(gone, j)
		}
	}
	if len(gone) == 0 {
		x.events = append(x.events, Event{Kind: EventWaiting, Iter: t, Peers: missing, Waited: waited})
		return
	}
	switch x.cfg.OnMissing {
	case MissingStop:
		x.stop = &Stop{Reason: StopMissing, Iter: t, Neighbors: gone, Waited: waited}
		x.events = append(x.events, Event{Kind: EventStopped, Iter: t, Peers: gone, Waited: waited})
	case MissingWait:
		x.events = append(x.events, Event{Kind: EventMissing, Iter: t, Peers: gone, Waited: waited})
	case MissingStale:
		for _, j := range gone {
			if !x.last[x.m.slot[j]].ok {
				x.stop = &Stop{Reason: StopNoStandIn, Iter: t, Neighbors: []int{j}, Waited: waited}
				x.events = append(x.events, Event{Kind: EventStopped, Iter: t, Peers: []int{j}, Waited: waited})
				return
			}
		}
		for _, j := range gone {
			l := x.last[x.m.slot[j]]
			x.stale = append(x.stale, StaleUse{Iter: t, Neighbor: j, UsedIter: l.iter})
			x.events = append(x.events, Event{Kind: EventStale, Iter: t, Peers: []int{j}, UsedIter: l.iter, Waited: waited})
			// The machine accepts it: j's slot of iteration t is empty and the vector is
			// finite with the right dimension (it was accepted before).
			msg := Message{From: j, Iter: t, Vec: l.vec}
			if err := x.m.Step(msg); err == nil {
				x.inputs[t] = append(x.inputs[t], Input{Message: msg, StandIn: true, UsedIter: l.iter})
			}
		}
		x.sync()
	}
}

// HasReady reports whether a Ready is pending.
func (x *Exchange) HasReady() bool {
	return x.m.HasReady() || len(x.stale) > 0 || len(x.resend) > 0 || len(x.events) > 0 || (x.stop != nil && !x.stopSent)
}

// Ready returns the pending work. The slices are reused after Advance.
func (x *Exchange) Ready() ExchangeReady {
	rd := ExchangeReady{StaleUses: x.stale, Outbox: x.resend, Events: x.events}
	if !x.stopSent {
		rd.Stop = x.stop
	}
	if x.m.HasReady() {
		ir := x.m.Ready()
		rd.Ledger = ir.Ledger
		x.state = ExchangeState{Checkpoint: ir.State, Inputs: x.inputs[ir.State.Iter-1]}
		if len(ir.Outbox) > 0 {
			x.state.Vec = ir.Outbox[0].Msg.Vec
		}
		rd.State = &x.state
		rd.Outbox = append(rd.Outbox, ir.Outbox...)
		rd.Events = append(rd.Events, ir.Events...)
	}
	if x.m.Done() {
		rd.Done, rd.Model = true, x.m.Model()
	}
	return rd
}

// Advance tells the exchange that the driver applied rd. Held frames that are now
// within reach go to the machine, which may compute the next iteration at once.
func (x *Exchange) Advance(rd ExchangeReady) {
	if rd.State != nil && x.m.HasReady() {
		r := rd.State.Iter
		x.sent = append(x.sent, sentVec{iter: r, vec: rd.State.Vec})
		if len(x.sent) > 2 {
			x.sent = x.sent[1:]
		}
		delete(x.inputs, r-1)
		x.m.Advance(Ready{})
	}
	x.stale = x.stale[:0]
	x.resend = x.resend[:0]
	x.events = x.events[:0]
	x.stopSent = x.stop != nil
	if x.stop == nil && len(x.early) > 0 {
		t := x.m.Iter()
		keep := x.early[:0]
		var due []Message
		for _, e := range x.early {
			if e.Iter <= t+1 {
				due = append(due, e)
			} else {
				keep = append(keep, e)
			}
		}
		x.early = keep
		for _, e := range due {
			x.step(e) // the machine ignores (ErrStale) a frame whose iteration has passed
		}
	}
	x.sync()
}
