package drive

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/dpadmm/dpadmm/gossip"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/walk"
)

// This file is the contract between the runtime and the protocol machines it drives. A
// machine (walk.Custody, gossip.Exchange) holds every protocol rule; its adapter here
// (Walk, RADMM) applies each of its Readies strictly in the order the Ready prescribes,
// through an Effects that does the I/O: the node's (disk, streams, control plane) or the
// fault network's of testnet (memory, a virtual clock). Both drivers thus apply Readies
// with the same code, and the fault studies check exactly the ordering that runs on the
// network.

// Effects carries out the duties of one Ready. An adapter's Apply calls them in the order
// it documents: the durable duties first (AppendLedger, Persist), then Send for every
// message, then Note.
//
//   - AppendLedger makes privacy ledger entries durable: when it returns nil they survive
//     a crash. Every message of the Ready is covered by them (or by earlier entries).
//   - Persist makes the Ready's state record R durable likewise.
//   - Send hands one message to the transport; it may queue and return at once. It is
//     called only after every durable duty of its Ready succeeded.
//   - Note receives the Ready's events (logs, metrics, checkers); they are never read
//     back into the machine.
//
// An error from AppendLedger or Persist ends the Ready before anything is sent, and one
// from Send before the rest is sent: Apply returns it without advancing the machine,
// whose state is then ahead of what is durable, and the driver stops (or crashes, in a
// fault study) instead of going on.
type Effects[R, M, E any] interface {
	AppendLedger(es []privacy.Entry) error
	Persist(r R) error
	Send(m M) error
	Note(evs []E)
}

// Machine is what the runtime drives: a protocol machine behind its adapter. Time comes
// in only through TickTo; input through the adapter's machine (Step, PeerDown, ...);
// output through Apply, which performs one Ready through fx and advances the machine.
type Machine[F any] interface {
	// TickTo advances the machine's clock to tick t (no-op if t is not ahead of it).
	TickTo(t int64)
	// NextDeadline returns the earliest tick at which TickTo can act; ok is false when no
	// tick is needed (until the next input). A driver may sleep until then.
	NextDeadline() (tick int64, ok bool)
	// HasReady reports whether a Ready is pending.
	HasReady() bool
	// Apply performs one pending Ready through fx, in order, then advances the machine.
	Apply(fx F) error
	// Done reports whether the machine decided that its run is over here.
	Done() bool
}

// Drain applies m's Readies through fx until it has none (a machine may produce the next
// one at Advance, e.g. by stepping a token it took). It stops at the first error.
func Drain[F any](m Machine[F], fx F) error {
	for m.HasReady() {
		if err := m.Apply(fx); err != nil {
			return err
		}
	}
	return nil
}

// WalkRecord is the state a walk.Custody Ready makes durable before its messages go out.
type WalkRecord struct {
	// Held is a token accepted here, to be stepped at Advance: durable BEFORE its ack
	// (a restart steps it). Its vectors are the machine's until Advance. nil: none new.
	Held *walk.CustodyHeld
	// State is the walk machine's u_i and K_i; nil when unchanged.
	State *walk.Checkpoint
	// Custody is the custody snapshot (walk.Custody.Snapshot, sharing the machine's
	// immutable release vectors); nil when it need not be written.
	Custody *walk.CustodySnapshot
	// Stepped says that this Ready stepped a token; Epoch and Hop are the token's (the
	// position a restart resumes from: a stored held token of that position or below was
	// processed).
	Stepped    bool
	Epoch, Hop uint64
	// Ledger are the Ready's ledger entries when its checkpoint (State or Custody) is
	// written: Persist makes both durable together, before any message (one fsync: see
	// store.SaveCheckpointLedger). A Ready that writes no checkpoint gives its entries to
	// AppendLedger.
	Ledger []privacy.Entry
}

// WalkEffects are the effects of a walk.Custody Ready. Final is called last, after the
// Ready's messages, when the token reached hop K here (CustodyReady.Final): the driver
// releases the final model.
type WalkEffects interface {
	Effects[WalkRecord, walk.CustodyMsg, walk.CustodyEvent]
	Final(f *walk.CustodyFinal) error
}

// Preparer is implemented by WalkEffects that prepare a Ready's messages while its
// records are made durable (the node signs its hand-off frames then): Prepare is given
// the Outbox before Persist and must send nothing.
type Preparer interface {
	Prepare(msgs []walk.CustodyMsg)
}

// Walk adapts a walk.Custody to the runtime. Apply performs a CustodyReady in this order:
//
//  1. AppendLedger(Ready.Ledger), for a Ready that writes no checkpoint: every token
//     message of the Ready is covered before it leaves;
//  2. Persist: the held token (before its ack; the token of hop K too), the walk state and
//     the custody snapshot, with the Ready's ledger entries (WalkRecord.Ledger) when it
//     writes either: the entries and the checkpoint are durable together, so a restart
//     never finds a step in its checkpoint without its entry;
//  3. Send, every Outbox message in order (acks, tokens, releases);
//  4. Note(Ready.Events);
//  5. Final(Ready.Final), when set;
//  6. Advance (the machine then steps a held token, which makes the next Ready).
//
// A token taken and stepped at once is acked after its step is durable (coalescing,
// unless the driver turned it off: SetCoalesce):
// when a Ready holds nothing but a newly taken token and its ack (no ledger entry, state,
// snapshot or final), Apply advances the machine, which steps the token, and, if that
// makes a Ready that stepped it and writes a checkpoint, performs the two as one: the
// first Ready's events (the acceptance), the second Ready's durable duties, the first's
// ack, then the second's messages and events (every effect in the order of the two
// Readies, less the held token's write). A crash after the step is durable and before
// the ack leaves costs the sender one re-send, answered as a duplicate (the step's
// snapshot holds the token's mark among the recent ones). The checkpoint of the step covers the token: it holds the walk
// state and the custody snapshot that took it (its mark among the recent ones, so a
// re-send after a crash is answered as a duplicate), and a restart does not need it
// again. The held token is then never written: one durable write per hop instead of
// two (one fsync instead of two when the store syncs). Otherwise (the machine does not
// step it now: paused, busy, the token of hop K) the first Ready is performed as above:
// the held token (a copy made before Advance, since the step updates its vectors in
// place), then the ack and the events, and the next Ready is left pending.
type Walk struct {
	c *walk.Custody
	// separate: the driver does not want acks coalesced with steps (SetCoalesce).
	separate bool
	// observe, when set (tests), is called with every Ready before it is performed,
	// including the second Ready of a coalesced step.
	observe func(walk.CustodyReady)
}

// SetCoalesce says whether Apply may ack a token taken once its step is durable (on, the
// default) or must ack it once the token alone is (off). A driver whose steps may take
// longer than its peers wait for an ack turns it off: the ack then does not wait for the
// step.
func (w *Walk) SetCoalesce(on bool) { w.separate = !on }

// Observe sets f to be called with every Ready before Apply performs it (nil: none). The
// Ready's slices are the machine's: f must copy what it keeps.
func (w *Walk) Observe(f func(walk.CustodyReady)) { w.observe = f }

// NewWalk wraps c.
func NewWalk(c *walk.Custody) *Walk { return &Walk{c: c} }

// Custody returns the wrapped machine (for its inputs and read-only use).
func (w *Walk) Custody() *walk.Custody { return w.c }

// TickTo advances the custody clock to tick t as a driver's clock does
// (walk.Custody.CatchUp: a deadline more than one ack timeout overdue fires once, at t).
func (w *Walk) TickTo(t int64) { w.c.CatchUp(t) }

// NextDeadline returns walk.Custody.NextDeadline (ok false when it has none).
func (w *Walk) NextDeadline() (int64, bool) {
	nd := w.c.NextDeadline()
	return nd, nd != math.MaxInt64
}

// HasReady reports whether the custody machine has a Ready pending.
func (w *Walk) HasReady() bool { return w.c.HasReady() }

// Done reports whether the walk is over for this node (CustodyReady.Done).
func (w *Walk) Done() bool { return w.c.Done() }

// Apply performs the pending Ready through fx (see Walk for the order).
func (w *Walk) Apply(fx WalkEffects) error {
	rd := w.c.Ready()
	if w.observe != nil {
		w.observe(rd)
	}
	if !w.separate && onlyTaken(rd) {
		return w.applyTaken(fx, rd)
	}
	return w.apply(fx, rd, nil)
}

// onlyTaken reports whether rd holds a newly taken token with its ack and nothing else
// but events: the first Ready of a hand-off that may be coalesced with its step.
func onlyTaken(rd walk.CustodyReady) bool {
	return rd.Held != nil && len(rd.Outbox) == 1 && rd.Outbox[0].Kind == walk.CustodyAck &&
		rd.Outbox[0].Epoch == rd.Held.Token.Epoch && rd.Outbox[0].Hop == rd.Held.Token.Hop &&
		len(rd.Ledger) == 0 && rd.State == nil && !rd.Persist && rd.Final == nil && !rd.Done
}

// applyTaken performs rd (onlyTaken) coalesced with the step of its token when the
// machine steps it at Advance, else alone (see Walk).
func (w *Walk) applyTaken(fx WalkEffects, rd walk.CustodyReady) error {
	h := *rd.Held
	h.Token.Z, h.Token.Zhat = slices.Clone(h.Token.Z), slices.Clone(h.Token.Zhat)
	ack := rd.Outbox[0]
	evs := slices.Clone(rd.Events)
	w.c.Advance(rd)
	if w.c.HasReady() {
		next := w.c.Ready()
		if stepsWithCheckpoint(next) {
			if w.observe != nil {
				w.observe(next)
			}
			return w.apply(fx, next, &taken{ack: ack, events: evs})
		}
	}
	// Not stepped now: the held token is made durable before its ack, as for any Ready.
	if err := fx.Persist(WalkRecord{Held: &h}); err != nil {
		return err
	}
	if err := fx.Send(ack); err != nil {
		return err
	}
	fx.Note(evs)
	return nil
}

// stepsWithCheckpoint reports whether rd stepped a token and writes a checkpoint (the
// walk state or the custody snapshot), with no other token taken and no final.
func stepsWithCheckpoint(rd walk.CustodyReady) bool {
	if rd.Held != nil || rd.Final != nil || rd.Done || (rd.State == nil && !rd.Persist) {
		return false
	}
	return slices.ContainsFunc(rd.Events, func(e walk.CustodyEvent) bool { return e.Kind == walk.CustodyWalk })
}

// taken is the first Ready of a coalesced step: the ack of the token stepped and its
// events.
type taken struct {
	ack    walk.CustodyMsg
	events []walk.CustodyEvent
}

// apply performs rd; tk, when set, is the coalesced first Ready, whose events are noted
// before rd's durable duties and whose ack goes after them, before rd's messages.
func (w *Walk) apply(fx WalkEffects, rd walk.CustodyReady, tk *taken) error {
	rec := WalkRecord{Held: rd.Held, State: rd.State}
	if f := rd.Final; f != nil && rec.Held == nil {
		// The token of hop K is held durably before its ack too: a node stopped before it
		// released the final model finishes from it on restart (walk.Custody.Restore).
		rec.Held = &walk.CustodyHeld{Token: f.Token, Evidence: f.Evidence, Pred: f.From}
	}
	if rd.Persist {
		s := w.c.Snapshot()
		rec.Custody = &s
	}
	if p, ok := fx.(Preparer); ok && len(rd.Outbox) > 0 {
		p.Prepare(rd.Outbox)
	}
	if tk != nil {
		// The acceptance, as when the held token was written: it is noted before the
		// step's durable duties, so that a crash during them (which loses the second
		// Ready's events) does not hide that the token was taken.
		fx.Note(tk.events)
	}
	if len(rd.Ledger) > 0 {
		if rec.State != nil || rec.Custody != nil {
			rec.Ledger = rd.Ledger
		} else if err := fx.AppendLedger(rd.Ledger); err != nil {
			return err
		}
	}
	for _, e := range rd.Events {
		if e.Kind == walk.CustodyWalk {
			rec.Stepped, rec.Epoch, rec.Hop = true, e.Epoch, e.Hop-1 // the event names the hop sent
		}
	}
	if rec.Held != nil || rec.State != nil || rec.Custody != nil {
		if err := fx.Persist(rec); err != nil {
			return err
		}
	}
	if tk != nil {
		if err := fx.Send(tk.ack); err != nil {
			return err
		}
	}
	for _, m := range rd.Outbox {
		if err := fx.Send(m); err != nil {
			return err
		}
	}
	fx.Note(rd.Events)
	if rd.Final != nil {
		if err := fx.Final(rd.Final); err != nil {
			return err
		}
	}
	w.c.Advance(rd)
	return nil
}

// RADMMRecord is the state a gossip.Exchange Ready makes durable before its frames go
// out.
type RADMMRecord struct {
	// Stale are the stale substitutions made since the last Ready, oldest first (the
	// release that uses one may be in this very Ready).
	Stale []gossip.StaleUse
	// Release is the release to journal (vector, consumed inputs, checkpoint); nil: this
	// Ready releases nothing.
	Release *gossip.ExchangeState
}

// RADMMEffects are the effects of a gossip.Exchange Ready.
type RADMMEffects = Effects[RADMMRecord, gossip.Envelope, gossip.Event]

// RADMM adapts a gossip.Exchange to the runtime. Apply checks the Ready's invariants (a
// release carries exactly one ledger entry, of its iteration, and is sent as released;
// nothing else carries an entry) and performs it in this order:
//
//  1. Persist: the stale uses, then the release (the journal). The journal goes before
//     the ledger entry: a restart that finds a journaled release without its entry
//     appends the entry before it sends anything, whereas an entry without its release
//     could not be replayed;
//  2. AppendLedger(Ready.Ledger);
//  3. Send, every Outbox envelope in order (re-sends first, then the release);
//  4. Note(Ready.Events);
//  5. Advance; the end decided by the machine is then reported by Done (the last
//     iteration is released; Model) or Stopped (the missing-neighbour policy).
type RADMM struct {
	x        *gossip.Exchange
	done     bool
	model    []float64
	stop     *gossip.Stop
	released int
}

// NewRADMM wraps x.
func NewRADMM(x *gossip.Exchange) *RADMM { return &RADMM{x: x, released: -1} }

// Exchange returns the wrapped machine (for its inputs and read-only use).
func (g *RADMM) Exchange() *gossip.Exchange { return g.x }

// TickTo delivers the ticks up to t one by one (the exchange counts each).
func (g *RADMM) TickTo(t int64) {
	for g.x.Now() < t {
		g.x.Tick()
	}
}

// NextDeadline returns gossip.Exchange.Deadline.
func (g *RADMM) NextDeadline() (int64, bool) { return g.x.Deadline() }

// HasReady reports whether the exchange has a Ready pending.
func (g *RADMM) HasReady() bool { return g.x.HasReady() }

// Done reports whether the last iteration was computed and its release applied.
func (g *RADMM) Done() bool { return g.done }

// Model returns f_i(T) once Done.
func (g *RADMM) Model() []float64 { return g.model }

// Stopped returns the policy stop once the Ready carrying it was applied, else nil.
func (g *RADMM) Stopped() *gossip.Stop { return g.stop }

// Released returns the iteration released by the last Apply (-1: none).
func (g *RADMM) Released() int { return g.released }

// ErrRADMMInvariant is returned by RADMM.Apply for a Ready that breaks the exchange's
// contract (a bug): nothing of it is sent.
var ErrRADMMInvariant = errors.New("node: invariant of the exchange's Ready broken")

func checkRADMMReady(rd *gossip.ExchangeReady) error {
	if rd.State == nil {
		if len(rd.Ledger) != 0 {
			return fmt.Errorf("%w: %d ledger entries without a release", ErrRADMMInvariant, len(rd.Ledger))
		}
		return nil
	}
	if len(rd.Ledger) != 1 || int(rd.Ledger[0].Hop) != rd.State.Iter {
		return fmt.Errorf("%w: the release of iteration %d carries %d ledger entries", ErrRADMMInvariant, rd.State.Iter, len(rd.Ledger))
	}
	for _, env := range rd.Outbox {
		if env.Msg.Iter == rd.State.Iter && !sameFloats(env.Msg.Vec, rd.State.Vec) {
			return fmt.Errorf("%w: vector of iteration %d differs from the journaled release", ErrRADMMInvariant, env.Msg.Iter)
		}
	}
	return nil
}

// Apply performs the pending Ready through fx (see RADMM for the order).
func (g *RADMM) Apply(fx RADMMEffects) error {
	rd := g.x.Ready()
	g.released = -1
	if err := checkRADMMReady(&rd); err != nil {
		return err
	}
	if len(rd.StaleUses) > 0 || rd.State != nil {
		if err := fx.Persist(RADMMRecord{Stale: rd.StaleUses, Release: rd.State}); err != nil {
			return err
		}
	}
	if len(rd.Ledger) > 0 {
		if err := fx.AppendLedger(rd.Ledger); err != nil {
			return err
		}
	}
	for _, env := range rd.Outbox {
		if err := fx.Send(env); err != nil {
			return err
		}
	}
	fx.Note(rd.Events)
	g.x.Advance(rd)
	if rd.State != nil {
		g.released = rd.State.Iter
	}
	if rd.Stop != nil {
		g.stop = rd.Stop
	}
	if rd.Done && rd.State != nil {
		g.done, g.model = true, rd.Model
	}
	return nil
}

// RADMMRelease is one journaled release: the vector sent and the neighbour vectors the
// machine consumed to compute it.
type RADMMRelease struct {
	Vec    []float64
	Inputs []gossip.Input
}

// Replay gives a fresh exchange (restarted node) the journaled release r: its inputs
// (gossip.Exchange.Replay), then the machine's release, which must be of iteration r and
// equal rec.Vec bit for bit, applied without sending anything. It returns the release's
// ledger entry, which the driver checks against its ledger or appends (before anything is
// sent). After the last release the driver calls the exchange's Resume.
func (g *RADMM) Replay(r int, rec RADMMRelease) (privacy.Entry, error) {
	for _, in := range rec.Inputs {
		if in.Iter != r-1 {
			return privacy.Entry{}, fmt.Errorf("release %d lists an input of iteration %d", r, in.Iter)
		}
		if err := g.x.Replay(in); err != nil {
			return privacy.Entry{}, fmt.Errorf("replaying the input of neighbour %d at iteration %d: %v", in.From, in.Iter, err)
		}
	}
	if !g.x.HasReady() {
		return privacy.Entry{}, fmt.Errorf("the journaled inputs do not complete the barrier before release %d", r)
	}
	rd := g.x.Ready()
	if rd.State == nil || rd.State.Iter != r || !sameFloats(rd.State.Vec, rec.Vec) || len(rd.Ledger) != 1 {
		return privacy.Entry{}, fmt.Errorf("the machine does not reproduce release %d bit for bit (refusing to release it again differently)", r)
	}
	e := rd.Ledger[0]
	g.x.Advance(rd)
	if rd.Done {
		g.done, g.model = true, rd.Model
	}
	return e, nil
}

// The runtime loop. One goroutine owns a machine and runs RunLoop until the run ends: it
// applies the machine's Readies, sleeps until the machine's next deadline, an input or the
// end of the context, advances the machine's clock by the time that passed (as its clock
// counts it) and hands the input over. The algorithm-specific parts are small: which
// channels carry inputs and how each maps onto the machine's inputs (Runtime.Wait),
// and how the machine's end is recognised (Runtime.Settle).

// Runtime is an algorithm's part of the runtime loop.
type Runtime interface {
	// Settle applies the machine's pending Readies and reports whether the run is over
	// (with the error that ended it, if any).
	Settle(ctx context.Context) (end bool, err error)
	// Deadline returns the machine's next deadline in ticks (ok false: none).
	Deadline() (tick int64, ok bool)
	// Wait blocks until an input arrives, timer fires or ctx ends (err: the loop stops).
	// It returns the input's mapping onto the machine, run once the machine's clock has
	// caught up (nil: none).
	Wait(ctx context.Context, timer <-chan time.Time) (input func(), err error)
	// TickTo advances the machine's clock to tick t and applies what it produced.
	TickTo(t int64)
}

// Clock maps wall-clock time onto a machine's ticks.
type Clock interface {
	// Until returns how long the loop may sleep before tick due.
	Until(due int64) time.Duration
	// Passed records that the loop was blocked for d and returns the current tick.
	Passed(d time.Duration) int64
}

// WallClock counts ticks of wall-clock time since T0, Tick each: every timeout of the
// walk's custody is real time, whether the node was waiting or computing.
type WallClock struct {
	T0   time.Time
	Tick time.Duration
}

// Until returns how long to sleep before tick due.
func (c WallClock) Until(due int64) time.Duration {
	if due > int64(MaxSleep/c.Tick) {
		return MaxSleep
	}
	return time.Until(c.T0.Add(time.Duration(due) * c.Tick))
}

// Passed returns the current tick.
func (c WallClock) Passed(time.Duration) int64 { return int64(time.Since(c.T0) / c.Tick) }

// WaitClock counts ticks (Tick each, from Now) of the time spent waiting for input only:
// the R-ADMM barrier waits for neighbours, and the time a node spends computing its own
// release is not time its neighbours kept it waiting. carry is waiting time not yet a
// whole tick.
type WaitClock struct {
	Now   int64
	carry time.Duration
	Tick  time.Duration
}

// Until returns how long to sleep before tick due.
func (c *WaitClock) Until(due int64) time.Duration {
	if due-c.Now > int64(MaxSleep/c.Tick) {
		return MaxSleep
	}
	return time.Duration(due-c.Now)*c.Tick - c.carry
}

// Passed records d more waiting and returns the current tick.
func (c *WaitClock) Passed(d time.Duration) int64 {
	c.carry += d
	k := int64(c.carry / c.Tick)
	c.carry -= time.Duration(k) * c.Tick
	c.Now += k
	return c.Now
}

// MaxSleep bounds a sleep towards a deadline: one further away is no deadline.
const MaxSleep = 100 * 365 * 24 * time.Hour

// RunLoop runs rt until its run is over or the context ends (rt.Wait's error).
func RunLoop(ctx context.Context, rt Runtime, clock Clock) error {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if end, err := rt.Settle(ctx); end || err != nil {
			return err
		}
		timer.Stop()
		if due, ok := rt.Deadline(); ok {
			if d := clock.Until(due); d < MaxSleep {
				timer.Reset(max(d, 0))
			}
		}
		blocked := time.Now()
		input, err := rt.Wait(ctx, timer.C)
		if err != nil {
			return err
		}
		rt.TickTo(clock.Passed(time.Since(blocked)))
		if input != nil {
			input()
		}
	}
}

// sameFloats reports whether a and b hold the same float64 bit patterns.
func sameFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float64bits(a[i]) != math.Float64bits(b[i]) {
			return false
		}
	}
	return true
}
