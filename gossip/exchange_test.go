package gossip

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
)

// exchNet is an in-test driver of n Exchanges on a FIFO wire. It applies every Ready in the
// contract's order (ledger, stale uses and state durable, then the Outbox on the wire) and
// checks the invariants of the barrier policy on each one (check). A crashed node keeps
// only what it made durable (ledger, stale uses, journal of releases); a restarted one
// replays its journal through a fresh Exchange and resumes.
type exchNet struct {
	t       testing.TB
	nbrs    [][]int
	iters   int
	cfg     ExchangeConfig
	xs      []*Exchange
	crashed []bool
	wire    []Envelope
	ledgers [][]privacy.Entry
	journal [][]journalRec
	stale   [][]StaleUse
	stopped []*Stop
	// recv[i][j] lists every vector node i was handed by j (delivered, not necessarily
	// accepted), by iteration; released[i][r] is node i's release of iteration r.
	recv     []map[int]map[int][][]float64
	released []map[int][]float64
	out      *[]string
}

type journalRec struct {
	iter   int
	vec    []float64
	inputs []Input
}

// topology returns the adjacency lists of ring, path or complete on n nodes.
func topology(t testing.TB, kind string, n int) [][]int {
	nb := make([][]int, n)
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			switch {
			case i == j:
			case kind == "complete",
				kind == "ring" && (j == (i+1)%n || i == (j+1)%n),
				kind == "path" && (j == i+1 || i == j+1):
				nb[i] = append(nb[i], j)
			}
		}
		slices.Sort(nb[i])
		nb[i] = slices.Compact(nb[i])
	}
	if kind != "ring" && kind != "path" && kind != "complete" {
		t.Fatalf("unknown topology %q", kind)
	}
	return nb
}

// exchMachine builds node i's fresh R-ADMM machine on a tiny fixed problem (no noise, so
// releases are reproducible and every odd entry is a pure entry without guarantee).
func exchMachine(t testing.TB, nbrs [][]int, i, iters int) *Machine {
	rows := [][]float64{{0.5 + 0.1*float64(i), 0.1}, {-0.2, 0.3 - 0.05*float64(i)}}
	obj, err := NewObjective(ds("x", rows, []float64{1, -1}), consensus.Logistic, 0.5, 0.1)
	if err != nil {
		t.Fatal(err)
	}
	c := DefaultConfig()
	c.Node, c.Nodes, c.Neighbors, c.Iters = i, len(nbrs), nbrs[i], iters
	c.Init = []float64{0.01 * float64(i), -0.02}
	m, err := New(c, obj)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func newExchNet(t testing.TB, nbrs [][]int, iters int, cfg ExchangeConfig) *exchNet {
	n := len(nbrs)
	w := &exchNet{t: t, nbrs: nbrs, iters: iters, cfg: cfg, xs: make([]*Exchange, n), crashed: make([]bool, n),
		ledgers: make([][]privacy.Entry, n), journal: make([][]journalRec, n), stale: make([][]StaleUse, n),
		stopped: make([]*Stop, n), recv: make([]map[int]map[int][][]float64, n), released: make([]map[int][]float64, n)}
	for i := range w.xs {
		x, err := NewExchange(exchMachine(t, nbrs, i, iters), cfg)
		if err != nil {
			t.Fatal(err)
		}
		w.xs[i] = x
		w.recv[i] = map[int]map[int][][]float64{}
		w.released[i] = map[int][]float64{}
	}
	return w
}

// start applies the initial Readies (the releases of f_i(0)).
func (w *exchNet) start() {
	for i := range w.xs {
		w.collect(i)
	}
}

func (w *exchNet) printf(format string, a ...any) {
	if w.out != nil {
		*w.out = append(*w.out, fmt.Sprintf(format, a...))
	}
}

func sameVec(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if math.Float64bits(a[k]) != math.Float64bits(b[k]) {
			return false
		}
	}
	return true
}

// received reports whether node i was handed vec by j for iteration it.
func (w *exchNet) received(i, j, it int, vec []float64) bool {
	for _, v := range w.recv[i][j][it] {
		if sameVec(v, vec) {
			return true
		}
	}
	return false
}

// collect applies node i's pending Readies.
func (w *exchNet) collect(i int) {
	x := w.xs[i]
	for x.HasReady() {
		rd := x.Ready()
		w.check(i, rd)
		for _, e := range rd.Events {
			w.printf("  n%d %s", i, eventString(e))
		}
		w.ledgers[i] = append(w.ledgers[i], rd.Ledger...)
		for _, e := range rd.Ledger {
			w.printf("  n%d ledger %s h%d -> %s", i, e.Mechanism, e.Hop, e.Recipient)
		}
		w.stale[i] = append(w.stale[i], rd.StaleUses...)
		for _, u := range rd.StaleUses {
			w.printf("  n%d stale-use i%d neighbour %d vector of i%d", i, u.Iter, u.Neighbor, u.UsedIter)
		}
		if s := rd.State; s != nil {
			rec := journalRec{iter: s.Iter, vec: append([]float64(nil), s.Vec...)}
			var in []string
			for _, m := range s.Inputs {
				c := m
				c.Vec = append([]float64(nil), m.Vec...)
				rec.inputs = append(rec.inputs, c)
				s := fmt.Sprintf("%d@%d", m.From, m.Iter)
				if m.StandIn {
					s += fmt.Sprintf("(stale i%d)", m.UsedIter)
				}
				in = append(in, s)
			}
			w.journal[i] = append(w.journal[i], rec)
			w.released[i][s.Iter] = rec.vec
			w.printf("  n%d state i%d inputs [%s]", i, s.Iter, strings.Join(in, " "))
		}
		for _, e := range rd.Outbox {
			w.wire = append(w.wire, Envelope{To: e.To, Msg: Message{From: e.Msg.From, Iter: e.Msg.Iter, Vec: append([]float64(nil), e.Msg.Vec...)}})
			w.printf("  n%d send %d->%d i%d", i, e.Msg.From, e.To, e.Msg.Iter)
		}
		if rd.Stop != nil {
			w.stopped[i] = rd.Stop
			w.printf("  n%d stop: %v", i, rd.Stop)
		}
		if rd.Done && rd.State != nil {
			w.printf("  n%d done at i%d", i, x.Iter())
		}
		x.Advance(rd)
	}
}

// check asserts the invariants of one Ready of node i (before it is applied):
//   - every Outbox message is covered by a ledger entry of node i (this Ready's or an
//     earlier one) for its iteration naming its recipient, and carries the vector node i
//     released for that iteration (re-sends are identical);
//   - iteration 0 and even iterations are forward entries at epsilon 0, odd ones pure;
//   - releases are consecutive: the iteration never decreases or skips;
//   - a stale use stands in with a vector node i was really handed by that neighbour for
//     UsedIter; every input of a release is either the neighbour's own release of that
//     iteration as node i received it, or such a stale vector;
//   - under policy stop or wait there are no stale uses, and nothing is released after a
//     stop or past a barrier that misses a neighbour's vector.
func (w *exchNet) check(i int, rd ExchangeReady) {
	t := w.t
	t.Helper()
	if w.stopped[i] != nil && (rd.State != nil || len(rd.Outbox) > 0) {
		t.Fatalf("node %d released or sent after its stop: %+v", i, rd)
	}
	for _, e := range rd.Ledger {
		switch {
		case e.Hop == 0 || e.Hop%2 == 0:
			if e.Mechanism != privacy.MechForward || e.Epsilon != 0 {
				t.Fatalf("node %d: iteration %d entry %s eps %v, want forward at 0", i, e.Hop, e.Mechanism, e.Epsilon)
			}
		default:
			if e.Mechanism != privacy.MechPure || !(e.Epsilon > 0) {
				t.Fatalf("node %d: odd iteration %d entry %s eps %v, want a charged pure entry", i, e.Hop, e.Mechanism, e.Epsilon)
			}
		}
	}
	if s := rd.State; s != nil {
		if len(rd.Ledger) != 1 || rd.Ledger[0].Hop != uint64(s.Iter) {
			t.Fatalf("node %d: release %d with ledger %+v", i, s.Iter, rd.Ledger)
		}
		if s.Iter != len(w.journal[i]) {
			t.Fatalf("node %d: release %d after %d releases", i, s.Iter, len(w.journal[i]))
		}
		var uses []StaleUse
		for _, u := range append(append([]StaleUse(nil), w.stale[i]...), rd.StaleUses...) {
			if u.Iter == s.Iter-1 {
				uses = append(uses, u)
			}
		}
		from := map[int]bool{}
		for _, in := range s.Inputs {
			if in.Iter != s.Iter-1 || from[in.From] {
				t.Fatalf("node %d: release %d has input %d@%d (repeated or wrong iteration)", i, s.Iter, in.From, in.Iter)
			}
			from[in.From] = true
			if in.StandIn {
				// A stand-in: recorded as a stale use, under policy stale, and a vector
				// node i really received from that neighbour for UsedIter.
				if !slices.Contains(uses, StaleUse{Iter: in.Iter, Neighbor: in.From, UsedIter: in.UsedIter}) ||
					w.cfg.OnMissing != MissingStale || !w.received(i, in.From, in.UsedIter, in.Vec) {
					t.Fatalf("node %d: release %d used a stand-in for node %d (its vector of iteration %d) that is not a recorded stale use of a vector it received",
						i, s.Iter, in.From, in.UsedIter)
				}
				continue
			}
			// Otherwise the input is exactly the neighbour's release of that iteration,
			// as node i received it.
			if v, ok := w.released[in.From][in.Iter]; !ok || !sameVec(v, in.Vec) || !w.received(i, in.From, in.Iter, in.Vec) {
				t.Fatalf("node %d: release %d consumed something other than node %d's release of iteration %d",
					i, s.Iter, in.From, in.Iter)
			}
		}
		if s.Iter > 0 && len(from) != len(w.nbrs[i]) {
			t.Fatalf("node %d: release %d from %d inputs, %d neighbours", i, s.Iter, len(from), len(w.nbrs[i]))
		}
	}
	for _, u := range rd.StaleUses {
		if w.cfg.OnMissing != MissingStale {
			t.Fatalf("node %d: stale use %+v under policy %s", i, u, w.cfg.OnMissing)
		}
		if len(w.recv[i][u.Neighbor][u.UsedIter]) == 0 {
			t.Fatalf("node %d: stale use %+v of a vector never received", i, u)
		}
	}
	for _, e := range rd.Outbox {
		if e.Msg.From != i {
			t.Fatalf("node %d sends as %d", i, e.Msg.From)
		}
		covered := false
		for _, l := range append(append([]privacy.Entry(nil), w.ledgers[i]...), rd.Ledger...) {
			if l.Hop == uint64(e.Msg.Iter) && slices.Contains(strings.Split(l.Recipient, ","), strconv.Itoa(e.To)) {
				covered = true
			}
		}
		if !covered {
			t.Fatalf("node %d: message to %d of iteration %d without a ledger entry naming it", i, e.To, e.Msg.Iter)
		}
		want, ok := w.released[i][e.Msg.Iter]
		if rd.State != nil && rd.State.Iter == e.Msg.Iter {
			want, ok = rd.State.Vec, true
		}
		if !ok || !sameVec(want, e.Msg.Vec) {
			t.Fatalf("node %d: message of iteration %d differs from its release", i, e.Msg.Iter)
		}
	}
}

// deliver hands the k-th message on the wire to its recipient.
func (w *exchNet) deliver(k int) (Envelope, error) {
	e := w.wire[k]
	w.wire = append(w.wire[:k], w.wire[k+1:]...)
	if w.crashed[e.To] {
		return e, errLost
	}
	r := w.recv[e.To]
	if r[e.Msg.From] == nil {
		r[e.Msg.From] = map[int][][]float64{}
	}
	r[e.Msg.From][e.Msg.Iter] = append(r[e.Msg.From][e.Msg.Iter], e.Msg.Vec)
	err := w.xs[e.To].Step(e.Msg)
	if err != nil && !errors.Is(err, ErrStale) && !errors.Is(err, ErrDuplicate) && !errors.Is(err, ErrTooFar) && !errors.Is(err, ErrEnded) {
		w.t.Fatalf("deliver %d->%d i%d: %v", e.Msg.From, e.To, e.Msg.Iter, err)
	}
	w.collect(e.To)
	return e, err
}

var errLost = errors.New("lost")

func (w *exchNet) tick(i int) {
	if !w.crashed[i] {
		w.xs[i].Tick()
		w.collect(i)
	}
}

// crash stops node i: its messages on the wire are lost (its send queues die with it) and
// its neighbours see it go down.
func (w *exchNet) crash(i int) {
	w.crashed[i] = true
	keep := w.wire[:0]
	for _, e := range w.wire {
		if e.Msg.From == i {
			w.printf("lost %d->%d i%d", e.Msg.From, e.To, e.Msg.Iter)
			continue
		}
		keep = append(keep, e)
	}
	w.wire = keep
	for _, j := range w.nbrs[i] {
		if !w.crashed[j] {
			w.xs[j].PeerDown(i)
			w.collect(j)
		}
	}
}

// restart rebuilds node i from its journal (the same inputs give the same releases, which
// are not sent again), then resumes (re-sends its last releases); its neighbours see it
// reconnect and re-send theirs.
func (w *exchNet) restart(i int) {
	x, err := NewExchange(exchMachine(w.t, w.nbrs, i, w.iters), w.cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	for r, rec := range w.journal[i] {
		for _, in := range rec.inputs {
			if err := x.Replay(in); err != nil {
				w.t.Fatalf("node %d: replaying input %d@%d of release %d: %v", i, in.From, in.Iter, r, err)
			}
		}
		var rd ExchangeReady
		for {
			if !x.HasReady() {
				w.t.Fatalf("node %d: replay: release %d not recomputed", i, r)
			}
			rd = x.Ready()
			if rd.State != nil {
				break
			}
			x.Advance(rd)
		}
		if rd.State.Iter != r || !sameVec(rd.State.Vec, rec.vec) {
			w.t.Fatalf("node %d: replay does not reproduce release %d bit for bit", i, r)
		}
		x.Advance(rd)
	}
	for x.HasReady() {
		x.Advance(x.Ready())
	}
	w.printf("  n%d replayed %d releases, at i%d", i, len(w.journal[i]), x.Iter())
	w.xs[i], w.crashed[i], w.stopped[i] = x, false, nil
	for _, j := range w.nbrs[i] {
		if w.crashed[j] {
			x.PeerDown(j)
		}
	}
	x.Resume()
	w.collect(i)
	for _, j := range w.nbrs[i] {
		if !w.crashed[j] {
			w.xs[j].Reconnected(i)
			w.collect(j)
		}
	}
}

func eventString(e Event) string {
	s := fmt.Sprintf("%s i%d", e.Kind, e.Iter)
	if len(e.Peers) > 0 {
		s += fmt.Sprintf(" peers %v", e.Peers)
	}
	switch e.Kind {
	case EventIgnored:
		s += " (" + strings.TrimPrefix(e.Err.Error(), "gossip: ") + ")"
	case EventStale:
		s += fmt.Sprintf(" used i%d", e.UsedIter)
	}
	if e.Kind == EventWaiting || e.Kind == EventMissing || e.Kind == EventStale || e.Kind == EventStopped {
		s += fmt.Sprintf(" waited %d", e.Waited)
	}
	return s
}

// TestExchangeConfig: the defaults are valid and bad values are refused; the policy names
// round-trip.
func TestExchangeConfig(t *testing.T) {
	if err := DefaultExchangeConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*ExchangeConfig){
		"barrier 0":  func(c *ExchangeConfig) { c.Barrier = 0 },
		"max wait":   func(c *ExchangeConfig) { c.MaxWait = c.Barrier - 1 },
		"recheck 0":  func(c *ExchangeConfig) { c.Recheck = 0 },
		"window < 0": func(c *ExchangeConfig) { c.Window = -1 },
		"policy":     func(c *ExchangeConfig) { c.OnMissing = 3 },
	} {
		c := DefaultExchangeConfig()
		mod(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	for s, want := range map[string]MissingPolicy{"": MissingStop, "stop": MissingStop, " Wait ": MissingWait, "STALE": MissingStale} {
		if got, err := ParseMissingPolicy(s); err != nil || got != want {
			t.Errorf("ParseMissingPolicy(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := ParseMissingPolicy("ignore"); err == nil || !strings.Contains(err.Error(), "stop, wait or stale") {
		t.Errorf("unknown policy: %v", err)
	}
	for _, p := range []MissingPolicy{MissingStop, MissingWait, MissingStale} {
		if q, _ := ParseMissingPolicy(p.String()); q != p {
			t.Errorf("round trip %v", p)
		}
	}
	nb := topology(t, "ring", 3)
	m := exchMachine(t, nb, 0, 4)
	m.Advance(m.Ready())
	if _, err := NewExchange(m, DefaultExchangeConfig()); err == nil {
		t.Error("a machine that already released was wrapped")
	}
}

// TestExchangeFaultFree: without faults, exchanges on a ring end with the models of bare
// machines driven in lockstep, bit for bit, and no policy event.
func TestExchangeFaultFree(t *testing.T) {
	nb := topology(t, "ring", 4)
	const T = 7
	w := newExchNet(t, nb, T, DefaultExchangeConfig())
	w.start()
	for len(w.wire) > 0 {
		w.deliver(0)
	}
	ref := make([]*Machine, len(nb))
	for i := range ref {
		ref[i] = exchMachine(t, nb, i, T)
	}
	n := newNet(ref)
	n.run(t)
	for i, x := range w.xs {
		if !x.Done() || !sameVec(x.Machine().ModelView(), ref[i].ModelView()) {
			t.Fatalf("node %d: done %v, model %v, reference %v", i, x.Done(), x.Machine().ModelView(), ref[i].ModelView())
		}
		if len(w.ledgers[i]) != T+1 || len(w.stale[i]) != 0 {
			t.Fatalf("node %d: %d entries, %d stale uses", i, len(w.ledgers[i]), len(w.stale[i]))
		}
	}
	if _, ok := w.xs[0].Deadline(); ok {
		t.Error("a finished exchange asks for ticks")
	}
}

// TestExchangeDeadline: the deadline is the barrier timeout after the iteration started,
// then every recheck period; ticks before it change nothing.
func TestExchangeDeadline(t *testing.T) {
	nb := topology(t, "path", 2)
	cfg := ExchangeConfig{Barrier: 5, MaxWait: 12, Recheck: 3, Window: 1, OnMissing: MissingWait}
	w := newExchNet(t, nb, 4, cfg)
	w.start()
	var out []string
	w.out = &out
	x := w.xs[0]
	if d, ok := x.Deadline(); !ok || d != 5 {
		t.Fatalf("deadline %d %v, want 5", d, ok)
	}
	for k := 0; k < 4; k++ {
		w.tick(0)
	}
	if len(out) != 0 {
		t.Fatalf("ticks before the deadline emitted %v", out)
	}
	w.tick(0)
	if d, _ := x.Deadline(); d != 8 || len(out) != 1 || !strings.Contains(out[0], "waiting") {
		t.Fatalf("after the first check: deadline %d, output %v", d, out)
	}
	for x.Now() < 12 {
		w.tick(0)
	}
	// Checks at 5, 8, 11 (connected: waiting), 14 (MaxWait 12 passed: missing).
	w.tick(0)
	w.tick(0)
	if len(out) != 4 || !strings.Contains(out[3], "missing i0 peers [1] waited 14") {
		t.Fatalf("output %v", out)
	}
}

// FuzzExchange drives several exchanges wired together (a ring or a path of 3 or 4 nodes,
// one policy) with fuzz bytes choosing what happens next: deliver, drop or duplicate a
// message on the wire, tick a node or all of them, take a link down or reconnect it,
// crash a node or restart it from its journal. exchNet.check asserts the invariants on
// every Ready (ledger coverage of every message, odd iterations charged and even ones at
// epsilon 0, consecutive releases, stale uses only of vectors really received and only
// under policy stale, inputs equal to the neighbours' releases otherwise, nothing after a
// stop); a restart must replay its journal bit for bit. On top: the iteration of a node
// never decreases, and a node never gets past a barrier for which it did not hold every
// neighbour's vector or a recorded stand-in (implied by the input checks).
func FuzzExchange(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{1, 3, 2, 4, 5, 4, 5, 4, 5, 0, 0, 0, 0, 8, 9, 0, 0})
	f.Add([]byte{2, 6, 1, 5, 0, 5, 0, 5, 0, 5, 0, 7, 1, 0, 0, 0, 0})
	f.Add([]byte{6, 1, 0, 8, 2, 4, 4, 4, 4, 9, 2, 0, 0, 0, 0, 0, 0, 3, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) < 2 || len(ops) > 400 {
			return
		}
		kinds := []string{"ring", "path"}
		n := 3 + int(ops[0]/3)%2
		cfg := ExchangeConfig{Barrier: 3, MaxWait: 7, Recheck: 2, Window: 1 + int(ops[0]/6)%2, OnMissing: MissingPolicy(ops[0] % 3)}
		nb := topology(t, kinds[int(ops[1])%2], n)
		w := newExchNet(t, nb, 5, cfg)
		w.start()
		seen := make([]int, n)
		for k := 2; k+1 < len(ops); k += 2 {
			op, arg := ops[k]%10, int(ops[k+1])
			i := arg % n
			switch op {
			case 0, 1, 2: // deliver (the most frequent)
				if len(w.wire) > 0 {
					w.deliver(arg % len(w.wire))
				}
			case 3:
				if len(w.wire) > 0 {
					q := arg % len(w.wire)
					w.wire = append(w.wire[:q], w.wire[q+1:]...)
				}
			case 4:
				if len(w.wire) > 0 {
					w.wire = append(w.wire, w.wire[arg%len(w.wire)])
				}
			case 5:
				w.tick(i)
			case 6:
				for j := range w.xs {
					w.tick(j)
				}
			case 7:
				j := nb[i][(arg/n)%len(nb[i])]
				for _, p := range [][2]int{{i, j}, {j, i}} {
					if !w.crashed[p[0]] {
						if arg%2 == 0 {
							w.xs[p[0]].PeerDown(p[1])
						} else {
							w.xs[p[0]].Reconnected(p[1])
						}
						w.collect(p[0])
					}
				}
			case 8:
				if !w.crashed[i] {
					w.crash(i)
				}
			case 9:
				if w.crashed[i] {
					w.restart(i)
				}
			}
			for j, x := range w.xs {
				if x.Iter() < seen[j] {
					t.Fatalf("node %d went back from iteration %d to %d", j, seen[j], x.Iter())
				}
				seen[j] = x.Iter()
			}
		}
	})
}
