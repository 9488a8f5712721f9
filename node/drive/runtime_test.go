package drive

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/gossip"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/walk"
)

// recorder is an Effects that records the order of the duties it is given and can fail
// one of them.
type recorder[R, M, E any] struct {
	log     []string
	recs    []R
	entries []privacy.Entry
	sent    []M
	fail    string // "ledger" or "persist": that duty fails
	finals  int
}

var errDisk = errors.New("disk full")

func (r *recorder[R, M, E]) AppendLedger(es []privacy.Entry) error {
	r.log = append(r.log, "ledger")
	if r.fail == "ledger" {
		return errDisk
	}
	r.entries = append(r.entries, es...)
	return nil
}

func (r *recorder[R, M, E]) Persist(rec R) error {
	r.log = append(r.log, "persist")
	r.recs = append(r.recs, rec)
	if r.fail == "persist" {
		return errDisk
	}
	return nil
}

func (r *recorder[R, M, E]) Send(m M) error {
	r.log = append(r.log, "send")
	r.sent = append(r.sent, m)
	return nil
}

func (r *recorder[R, M, E]) Note([]E) { r.log = append(r.log, "note") }

type walkRecorder struct {
	recorder[WalkRecord, walk.CustodyMsg, walk.CustodyEvent]
}

func (r *walkRecorder) Final(*walk.CustodyFinal) error {
	r.log = append(r.log, "final")
	r.finals++
	return nil
}

// testWalk returns node 0 of a 3-node walk in its adapter, holding the initial token
// (accepted, to be stepped at the next Advance).
func testWalk(t *testing.T, hops uint64) *Walk {
	t.Helper()
	return testWalkWith(t, hops, nil)
}

// testWalkWith is testWalk with the custody configuration changed by set (nil: none).
func testWalkWith(t *testing.T, hops uint64, set func(*walk.CustodyConfig)) *Walk {
	t.Helper()
	sh := shards(t, 3)
	ll, err := consensus.NewLocalLoss(sh[0], consensus.Squared, 1)
	if err != nil {
		t.Fatal(err)
	}
	wc := walk.DefaultConfig()
	wc.Node, wc.Nodes, wc.Run, wc.Rand = 0, 3, "v", rand.New(rand.NewPCG(1, 2))
	wc.Sigma, wc.Noise = 1, privacy.NewSeededNoise(3)
	cc := walk.DefaultCustodyConfig()
	cc.Rand, cc.Hops = rand.New(rand.NewPCG(4, 5)), hops
	if set != nil {
		set(&cc)
	}
	c, err := walk.NewCustody(wc, ll, sh[0].Cols, cc)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(walk.NewToken("v", 0, sh[0].Cols, wc.Reg, wc.Gamma)); err != nil {
		t.Fatal(err)
	}
	return NewWalk(c)
}

// TestWalkApplyOrder: Walk.Apply performs a Ready in the documented order (the durable
// record with the ledger entries, then the messages, then the events) and advances the
// machine only after all of it; the step's release is covered by a ledger entry naming
// its recipient, made durable with the checkpoint that holds the release.
func TestWalkApplyOrder(t *testing.T) {
	w := testWalk(t, 0)
	fx := &walkRecorder{}
	// The accepted token: held durably (no ledger entry, no message), stepped at Advance.
	if err := w.Apply(fx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(fx.log, []string{"persist", "note"}) || fx.recs[0].Held == nil || fx.recs[0].State != nil {
		t.Fatalf("start: %v %+v", fx.log, fx.recs)
	}
	// The step: its ledger entry, the state with the custody snapshot, then the token.
	fx.log = nil
	if err := w.Apply(fx); err != nil {
		t.Fatal(err)
	}
	rec := fx.recs[1]
	fx.entries = rec.Ledger
	if !slices.Equal(fx.log, []string{"persist", "send", "note"}) || len(fx.entries) != 1 || len(fx.sent) != 1 || fx.sent[0].Kind != walk.CustodyToken {
		t.Fatalf("step applied as %v: %d entries, %d messages", fx.log, len(fx.entries), len(fx.sent))
	}
	if rec.State == nil || rec.State.Updates != 1 || rec.Custody == nil || len(rec.Custody.Backups) != 1 || !rec.Stepped || rec.Hop != 0 {
		t.Fatalf("step record %+v", rec)
	}
	if to := fx.sent[0].To; rec.Custody.Backups[0].To != to || fx.entries[0].Recipient != fmt.Sprint(to) || fx.entries[0].Hop != fx.sent[0].Hop {
		t.Fatalf("release to %d at hop %d, backup to %d, ledger entry %+v", to, fx.sent[0].Hop, rec.Custody.Backups[0].To, fx.entries[0])
	}
	if w.HasReady() {
		t.Fatal("a Ready is left after the step")
	}
}

// TestWalkApplyStopsBeforeSending: a ledger entry and checkpoint that cannot be made
// durable end the Ready before anything is sent, and the machine is not advanced: the
// same Ready is pending again.
func TestWalkApplyStopsBeforeSending(t *testing.T) {
	for _, fail := range []string{"persist"} {
		w := testWalk(t, 0)
		if err := w.Apply(&walkRecorder{}); err != nil { // the held token
			t.Fatal(err)
		}
		before := w.Custody().Ready()
		entries, hop := len(before.Ledger), before.Outbox[0].Hop
		fx := &walkRecorder{recorder: recorder[WalkRecord, walk.CustodyMsg, walk.CustodyEvent]{fail: fail}}
		if err := w.Apply(fx); !errors.Is(err, errDisk) {
			t.Fatalf("%s failing: %v", fail, err)
		}
		if len(fx.sent) != 0 || slices.Contains(fx.log, "note") || len(fx.recs) != 1 || len(fx.recs[0].Ledger) != entries || entries == 0 {
			t.Fatalf("%s failing: %v, sent %d", fail, fx.log, len(fx.sent))
		}
		after := w.Custody().Ready()
		if !w.HasReady() || len(after.Ledger) != entries || len(after.Outbox) != 1 || after.Outbox[0].Hop != hop {
			t.Fatalf("%s failing: the Ready was not kept: %+v", fail, after)
		}
	}
}

// TestWalkApplyFinal: the token of hop K reaching the node is held durably (Persist, as
// any token taken) before the ack of its sender, then released through Final, and the
// machine reports Done.
func TestWalkApplyFinal(t *testing.T) {
	w := testWalk(t, 5)
	fx := &walkRecorder{}
	if err := Drain[WalkEffects](w, fx); err != nil {
		t.Fatal(err)
	}
	tok := walk.NewToken("v", 0, len(fx.recs[0].Held.Token.Z), consensus.Regularizer{}, 1)
	tok.Hop = 5
	if err := w.Custody().Step(walk.CustodyMsg{Kind: walk.CustodyToken, From: 1, To: 0, Hop: 5, Token: tok}); err != nil {
		t.Fatal(err)
	}
	fx.log, fx.sent = nil, nil
	if err := Drain[WalkEffects](w, fx); err != nil {
		t.Fatal(err)
	}
	if !w.Done() || fx.finals != 1 || !slices.Equal(fx.log, []string{"persist", "send", "note", "final"}) || fx.sent[0].Kind != walk.CustodyAck {
		t.Fatalf("hop K: done %v, %d finals, %v", w.Done(), fx.finals, fx.log)
	}
	if h := fx.recs[len(fx.recs)-1].Held; h == nil || h.Token.Hop != 5 || h.Pred != 1 {
		t.Fatalf("the token of hop K was not made durable before its ack: %+v", h)
	}
}

// testRADMM returns node 0 of a 2-node R-ADMM exchange in its adapter (f(0) pending).
func testRADMM(t *testing.T) (*RADMM, []*gossip.Machine) {
	t.Helper()
	ms, _ := noisyMachines(t, [][]int{{1}, {0}}, 4)
	x, err := gossip.NewExchange(ms[0], gossip.DefaultExchangeConfig())
	if err != nil {
		t.Fatal(err)
	}
	return NewRADMM(x), ms
}

type radmmRecorder = recorder[RADMMRecord, gossip.Envelope, gossip.Event]

// TestRADMMApplyOrder: RADMM.Apply journals a release before its ledger entry, both
// before its frames, and reports the release; a failing ledger or journal sends nothing
// and keeps the Ready.
func TestRADMMApplyOrder(t *testing.T) {
	g, _ := testRADMM(t)
	fx := &radmmRecorder{}
	if err := g.Apply(fx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(fx.log, []string{"persist", "ledger", "send", "note"}) {
		t.Fatalf("f(0) applied as %v", fx.log)
	}
	if r := fx.recs[0].Release; r == nil || r.Iter != 0 || g.Released() != 0 || fx.sent[0].To != 1 || !sameFloats(fx.sent[0].Msg.Vec, r.Vec) {
		t.Fatalf("release %+v, released %d, sent %+v", fx.recs[0], g.Released(), fx.sent)
	}
	for _, fail := range []string{"persist", "ledger"} {
		g, _ := testRADMM(t)
		fx := &radmmRecorder{fail: fail}
		if err := g.Apply(fx); !errors.Is(err, errDisk) {
			t.Fatalf("%s failing: %v", fail, err)
		}
		if len(fx.sent) != 0 || g.Released() != -1 || !g.HasReady() {
			t.Fatalf("%s failing: sent %d, released %d, pending %v", fail, len(fx.sent), g.Released(), g.HasReady())
		}
		if err := g.Apply(&radmmRecorder{}); err != nil || g.Released() != 0 {
			t.Fatalf("%s failing, then applied again: %v, released %d", fail, err, g.Released())
		}
	}
}

// journalRecorder is a gossip recorder that keeps a copy of every release it is given.
type journalRecorder struct {
	radmmRecorder
	rels []RADMMRelease
}

func (j *journalRecorder) Persist(r RADMMRecord) error {
	if r.Release != nil {
		rel := RADMMRelease{Vec: slices.Clone(r.Release.Vec)}
		for _, in := range r.Release.Inputs {
			in.Vec = slices.Clone(in.Vec)
			rel.Inputs = append(rel.Inputs, in)
		}
		j.rels = append(j.rels, rel)
	}
	return j.radmmRecorder.Persist(r)
}

// TestRADMMReplayAndDone: the adapter reports Done and the model after the last release;
// the node's journaled releases, replayed through a fresh adapter (RADMM.Replay), are
// recomputed bit for bit with the same ledger entries, and a journaled vector that
// differs is refused.
func TestRADMMReplayAndDone(t *testing.T) {
	const iters = 4
	g, ms := testRADMM(t)
	other, err := gossip.NewExchange(ms[1], gossip.DefaultExchangeConfig())
	if err != nil {
		t.Fatal(err)
	}
	peer := NewRADMM(other)
	fx, pfx := &journalRecorder{}, &journalRecorder{}
	for rounds := 0; !g.Done(); rounds++ {
		if rounds > 100 {
			t.Fatal("no progress")
		}
		if err := Drain[RADMMEffects](g, fx); err != nil {
			t.Fatal(err)
		}
		if err := Drain[RADMMEffects](peer, pfx); err != nil {
			t.Fatal(err)
		}
		for _, env := range pfx.sent {
			g.Exchange().Step(env.Msg)
		}
		for _, env := range fx.sent {
			peer.Exchange().Step(env.Msg)
		}
		fx.sent, pfx.sent = nil, nil
	}
	if len(fx.rels) != iters+1 || len(fx.entries) != iters+1 || !sameFloats(g.Model(), fx.rels[iters].Vec) {
		t.Fatalf("%d releases, %d entries, model %v", len(fx.rels), len(fx.entries), g.Model())
	}
	replay := func(rels []RADMMRelease) (*RADMM, error) {
		fresh, _ := testRADMM(t)
		for r, rel := range rels {
			e, err := fresh.Replay(r, rel)
			if err != nil {
				return fresh, err
			}
			if e != fx.entries[r] {
				t.Fatalf("release %d replayed with entry %+v, want %+v", r, e, fx.entries[r])
			}
		}
		return fresh, nil
	}
	fresh, err := replay(fx.rels)
	if err != nil || !fresh.Done() || !sameFloats(fresh.Model(), g.Model()) {
		t.Fatalf("replay: %v, done %v", err, fresh.Done())
	}
	bad := slices.Clone(fx.rels)
	bad[2].Vec = slices.Clone(bad[2].Vec)
	bad[2].Vec[0] += 1e-12
	if _, err := replay(bad); err == nil {
		t.Fatal("a journaled release that the machine does not recompute was accepted")
	}
}

// TestWaitClock: the R-ADMM clock counts whole ticks of the time spent waiting and
// carries the rest over; the sleep to a deadline deducts the carry.
func TestWaitClock(t *testing.T) {
	c := &WaitClock{Tick: 10 * time.Millisecond}
	if got := c.Passed(25 * time.Millisecond); got != 2 || c.carry != 5*time.Millisecond {
		t.Fatalf("25 ms: tick %d, carry %v; want 2 and 5ms", got, c.carry)
	}
	if d := c.Until(4); d != 15*time.Millisecond {
		t.Fatalf("sleep to tick 4 from tick 2 with 5 ms carried: %v, want 15ms", d)
	}
	if got := c.Passed(5 * time.Millisecond); got != 3 || c.carry != 0 {
		t.Fatalf("5 ms more: tick %d, carry %v; want 3 and 0", got, c.carry)
	}
	w := WallClock{T0: time.Now(), Tick: time.Millisecond}
	if d := w.Until(math.MaxInt64); d < MaxSleep {
		t.Fatalf("a deadline at the end of time sleeps %v", d)
	}
}

// fakeLoop is a Runtime over a counter of ticks with one deadline: it records what
// the loop did, in order.
type fakeLoop struct {
	log   []string
	now   int64
	due   int64
	in    chan int
	ended func(f *fakeLoop) bool
}

func (f *fakeLoop) Settle(context.Context) (bool, error) {
	f.log = append(f.log, "settle")
	return f.ended(f), nil
}

func (f *fakeLoop) Deadline() (int64, bool) { return f.due, f.due > f.now }

func (f *fakeLoop) Wait(ctx context.Context, timer <-chan time.Time) (func(), error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case v := <-f.in:
		return func() { f.log = append(f.log, fmt.Sprint("input ", v)) }, nil
	case <-timer:
		f.log = append(f.log, "timer")
	}
	return nil, nil
}

func (f *fakeLoop) TickTo(t int64) {
	if t > f.now {
		f.now = t
		f.log = append(f.log, fmt.Sprint("tick ", t))
	}
}

// TestRunLoop: the loop sleeps until the machine's deadline, advances its clock by the
// time waited before it hands an input over, settles after every wake and stops when
// settle says the run is over or the context ends.
func TestRunLoop(t *testing.T) {
	f := &fakeLoop{due: 3, in: make(chan int, 1), ended: func(f *fakeLoop) bool { return f.now >= 3 }}
	start := time.Now()
	if err := RunLoop(context.Background(), f, &WaitClock{Tick: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 3*time.Millisecond || f.now < 3 || f.log[0] != "settle" || f.log[len(f.log)-1] != "settle" || !slices.Contains(f.log, "timer") {
		t.Fatalf("after %v at tick %d: %v", el, f.now, f.log)
	}
	// An input is handed over after the clock caught up, then settled.
	f = &fakeLoop{due: 1 << 40, in: make(chan int, 1), ended: func(f *fakeLoop) bool { return slices.Contains(f.log, "input 7") }}
	f.in <- 7
	if err := RunLoop(context.Background(), f, &WaitClock{Tick: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.log, []string{"settle", "input 7", "settle"}) {
		t.Fatalf("input: %v", f.log)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f = &fakeLoop{in: make(chan int), ended: func(*fakeLoop) bool { return false }}
	if err := RunLoop(ctx, f, &WaitClock{Tick: time.Millisecond}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

func shards(t *testing.T, n int) []*consensus.Dataset {
	t.Helper()
	d, _ := consensus.SyntheticLogistic(120, 4, 3, 5)
	sh, err := consensus.Split(d, n, "iid", 5)
	if err != nil {
		t.Fatal(err)
	}
	return sh
}

// noisyMachines returns R-ADMM machines of a small logistic problem over the graph nbrs,
// each with its own seeded noise.
func noisyMachines(t *testing.T, nbrs [][]int, iters int) ([]*gossip.Machine, []privacy.Noise) {
	t.Helper()
	n := len(nbrs)
	d, _ := consensus.SyntheticLogistic(20*n, 3, 2, 7)
	sc, err := consensus.FitScaler(d, consensus.ScaleRowNorm)
	if err != nil {
		t.Fatal(err)
	}
	d = sc.Apply(d)
	shards, err := consensus.Split(d, n, "contiguous", 1)
	if err != nil {
		t.Fatal(err)
	}
	ms := make([]*gossip.Machine, n)
	ns := make([]privacy.Noise, n)
	for i := range ms {
		obj, err := gossip.NewObjective(shards[i], consensus.Logistic, float64(n)/float64(d.Rows), 0.05)
		if err != nil {
			t.Fatal(err)
		}
		ns[i] = privacy.NewSeededNoise(uint64(100 + i))
		c := gossip.DefaultConfig()
		c.Node, c.Nodes, c.Neighbors, c.Iters, c.Run, c.Alpha, c.Noise = i, n, nbrs[i], iters, "r", 2, ns[i]
		c.Init = []float64{0.1 * float64(i), -0.2, 0.05}
		if ms[i], err = gossip.New(c, obj); err != nil {
			t.Fatal(err)
		}
	}
	return ms, ns
}

// preparer is a walkRecorder that prepares messages (Preparer).
type preparer struct {
	walkRecorder
	prepared []walk.CustodyMsg
}

func (p *preparer) Prepare(msgs []walk.CustodyMsg) {
	p.log = append(p.log, "prepare")
	p.prepared = append(p.prepared, msgs...)
}

// TestWalkApplyPrepare: effects that prepare messages are given the Ready's outbox before
// its record is made durable, and the messages are sent only after it.
func TestWalkApplyPrepare(t *testing.T) {
	w := testWalk(t, 0)
	fx := &preparer{}
	if err := w.Apply(fx); err != nil { // the held token: nothing to send
		t.Fatal(err)
	}
	if slices.Contains(fx.log, "prepare") {
		t.Fatalf("a Ready without messages was prepared: %v", fx.log)
	}
	fx.log = nil
	if err := w.Apply(fx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(fx.log, []string{"prepare", "persist", "send", "note"}) || len(fx.prepared) != 1 || fx.prepared[0].Hop != fx.sent[0].Hop {
		t.Fatalf("step applied as %v, prepared %d", fx.log, len(fx.prepared))
	}
}

// takeToken drains w's pending Readies (the initial token's step) and gives it a token of
// hop 7 from node 1.
func takeToken(t *testing.T, w *Walk) walk.Token {
	t.Helper()
	if err := Drain[WalkEffects](w, &walkRecorder{}); err != nil {
		t.Fatal(err)
	}
	tok := walk.NewToken("v", 0, 4, consensus.Regularizer{}, 1)
	tok.Hop = 7
	for k := range tok.Z {
		tok.Z[k], tok.Zhat[k] = float64(k)+0.5, float64(k)-0.25
	}
	if err := w.Custody().Step(walk.CustodyMsg{Kind: walk.CustodyToken, From: 1, To: 0, Hop: 7, Token: tok}); err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestWalkApplyCoalesced: a token taken and stepped at once is applied as one Ready: the
// acceptance noted, one durable record (the step's state and snapshot, no held token),
// then the ack, then the step's token, then its events; the machine has nothing left.
func TestWalkApplyCoalesced(t *testing.T) {
	w := testWalk(t, 0)
	tok := takeToken(t, w)
	var seen []walk.CustodyReady
	w.Observe(func(rd walk.CustodyReady) { seen = append(seen, rd) })
	fx := &preparer{}
	if err := w.Apply(fx); err != nil {
		t.Fatal(err)
	}
	if want := []string{"prepare", "note", "persist", "send", "send", "note"}; !slices.Equal(fx.log, want) {
		t.Fatalf("applied as %v, want %v", fx.log, want)
	}
	if len(seen) != 2 || seen[0].Held == nil || seen[1].State == nil {
		t.Fatalf("observed %d Readies, want the taken token's and its step's", len(seen))
	}
	rec := fx.recs[0]
	if len(fx.recs) != 1 || rec.Held != nil || rec.State == nil || rec.Custody == nil || !rec.Stepped || rec.Hop != tok.Hop || len(rec.Ledger) != 1 {
		t.Fatalf("records %+v", fx.recs)
	}
	ack, next := fx.sent[0], fx.sent[1]
	if ack.Kind != walk.CustodyAck || ack.To != 1 || ack.Hop != tok.Hop || ack.Refused != walk.RefuseNone || ack.Stale {
		t.Fatalf("first message %+v, want the ack of hop %d to node 1", ack, tok.Hop)
	}
	if next.Kind != walk.CustodyToken || next.Hop != tok.Hop+1 || rec.Ledger[0].Hop != next.Hop {
		t.Fatalf("second message %+v, ledger %+v", next, rec.Ledger)
	}
	if w.HasReady() {
		t.Fatal("a Ready is left after the coalesced step")
	}
	// A re-send of the token after a crash that withheld the ack: answered a duplicate
	// from the snapshot the step wrote.
	if err := w.Custody().Step(walk.CustodyMsg{Kind: walk.CustodyToken, From: 1, To: 0, Hop: 7, Token: tok}); err != nil {
		t.Fatal(err)
	}
	if rd := w.Custody().Ready(); len(rd.Outbox) != 1 || !rd.Outbox[0].Duplicate || rd.Held != nil {
		t.Fatalf("re-sent token answered %+v", rd.Outbox)
	}
}

// TestWalkApplyCoalescedFails: when the step's record cannot be made durable nothing is
// sent, not even the ack: the sender keeps the token and sends it again or elsewhere.
func TestWalkApplyCoalescedFails(t *testing.T) {
	w := testWalk(t, 0)
	takeToken(t, w)
	fx := &walkRecorder{recorder: recorder[WalkRecord, walk.CustodyMsg, walk.CustodyEvent]{fail: "persist"}}
	if err := w.Apply(fx); !errors.Is(err, errDisk) {
		t.Fatalf("persist failing: %v", err)
	}
	if len(fx.sent) != 0 || len(fx.recs) != 1 || fx.recs[0].Held != nil {
		t.Fatalf("persist failing: %v, sent %+v", fx.log, fx.sent)
	}
}

// TestWalkApplySeparate: with coalescing turned off, a token taken is written as held
// and acked, and its step is the next Apply's.
func TestWalkApplySeparate(t *testing.T) {
	w := testWalk(t, 0)
	takeToken(t, w)
	w.SetCoalesce(false)
	fx := &walkRecorder{}
	if err := w.Apply(fx); err != nil {
		t.Fatal(err)
	}
	if want := []string{"persist", "send", "note"}; !slices.Equal(fx.log, want) || fx.recs[0].Held == nil || fx.sent[0].Kind != walk.CustodyAck {
		t.Fatalf("applied as %v, want %v with the held token and its ack", fx.log, want)
	}
	fx.log = nil
	if err := w.Apply(fx); err != nil {
		t.Fatal(err)
	}
	if want := []string{"persist", "send", "note"}; !slices.Equal(fx.log, want) || fx.recs[1].State == nil || fx.sent[1].Kind != walk.CustodyToken {
		t.Fatalf("the step applied as %v, want %v", fx.log, want)
	}
}

// TestWalkApplyNotCoalesced: a token taken that the machine does not step at once (the
// walk pauses at its hop) is written as held before its ack, a copy of the token as it
// was taken, and the next Ready is left to the next Apply.
func TestWalkApplyNotCoalesced(t *testing.T) {
	w := testWalkWith(t, 0, func(cc *walk.CustodyConfig) { cc.PauseAtHop = 7 })
	tok := takeToken(t, w)
	fx := &walkRecorder{}
	if err := w.Apply(fx); err != nil {
		t.Fatal(err)
	}
	if want := []string{"persist", "send", "note"}; !slices.Equal(fx.log, want) {
		t.Fatalf("applied as %v, want %v", fx.log, want)
	}
	h := fx.recs[0].Held
	if h == nil || h.Token.Hop != tok.Hop || !slices.Equal(h.Token.Z, tok.Z) || !slices.Equal(h.Token.Zhat, tok.Zhat) || h.Pred != 1 {
		t.Fatalf("held record %+v, want the token taken", h)
	}
	if fx.sent[0].Kind != walk.CustodyAck || fx.sent[0].Hop != tok.Hop {
		t.Fatalf("sent %+v, want the ack", fx.sent)
	}
	if !w.HasReady() {
		t.Fatal("the pause's Ready was not left pending")
	}
	fx.log = nil
	if err := w.Apply(fx); err != nil || !w.Custody().Paused() {
		t.Fatalf("the pause: %v, paused %v", err, w.Custody().Paused())
	}
}
