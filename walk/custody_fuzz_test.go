package walk

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
)

// fuzzNet wires a few Custody machines together for FuzzCustodyStep. Every machine has a
// twin built from the same seeds that receives the same inputs, except that the twin
// catches up with time through CatchUp, as drivers do, where the machine calls Tick once
// per tick: their Readies must be equal. The twin is stopped at every tick where the
// machine has a Ready, so no deadline is ever overdue by an ack timeout and every
// catch-up must be an exact replay (TestCustodyCatchUpShortGaps and catchup.txt cover
// the long gaps). The harness keeps what it needs to check the invariants
// independently of the machines' state: each node's ledger, the token messages it sent,
// and which peers it was told are down.
type fuzzNet struct {
	t      *testing.T
	cc     CustodyConfig
	nodes  []*Custody
	twins  []*Custody
	wire   []CustodyMsg
	ledger [][]privacy.Entry
	sent   []map[sentKey]bool // token messages sent, by (epoch, hop, digest, recipient)
	down   [][]bool           // down[i][j]: node i was told that j is down
	fence  []CustodyMark      // highest fence seen per node
	epoch  []uint64
	done   []bool
	// stopped[i]: node i's driver is stopping (Custody.Stop), until a Restore.
	stopped []bool
}

type sentKey struct {
	epoch, hop, digest uint64
	to                 int
}

type entryKey struct {
	epoch, hop uint64
	to         string
}

func newFuzzNet(t *testing.T, n int, cc CustodyConfig) *fuzzNet {
	d, _ := consensus.SyntheticLasso(3*n, 2, 2, 0.1, 3)
	shards, err := consensus.Split(d, n, "iid", 3)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, n)
	for i := range names {
		names[i] = strconv.Itoa(i)
	}
	w := &fuzzNet{t: t, cc: cc, ledger: make([][]privacy.Entry, n), sent: make([]map[sentKey]bool, n),
		down: make([][]bool, n), fence: make([]CustodyMark, n), epoch: make([]uint64, n), done: make([]bool, n), stopped: make([]bool, n)}
	build := func(i int) *Custody {
		ll, err := consensus.NewLocalLoss(shards[i], consensus.Squared, 1)
		if err != nil {
			t.Fatal(err)
		}
		wc := DefaultConfig()
		wc.Node, wc.Nodes, wc.Names, wc.Sigma, wc.Run = i, n, names, 0.5, "run"
		wc.Rand = rand.New(rand.NewPCG(uint64(i), 11))
		wc.Noise = privacy.NewSeededNoise(uint64(i) + 7)
		c := cc
		c.Rand = rand.New(rand.NewPCG(uint64(i), 12))
		m, err := NewCustody(wc, ll, 2, c)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for i := 0; i < n; i++ {
		w.nodes = append(w.nodes, build(i))
		w.twins = append(w.twins, build(i))
		w.sent[i] = map[sentKey]bool{}
		w.down[i] = make([]bool, n)
	}
	return w
}

// input applies one input to node i and its twin, then drains and checks their Readies.
func (w *fuzzNet) input(i int, fn func(c *Custody, twin bool) error) error {
	err := fn(w.nodes[i], false)
	if terr := fn(w.twins[i], true); (err == nil) != (terr == nil) {
		w.t.Fatalf("node %d: the twin answered %v, the machine %v", i, terr, err)
	}
	w.drain(i)
	return err
}

func (w *fuzzNet) drain(i int) {
	c, tw := w.nodes[i], w.twins[i]
	for k := 0; c.HasReady() || tw.HasReady(); k++ {
		if c.HasReady() != tw.HasReady() {
			w.t.Fatalf("node %d: HasReady %v, twin %v", i, c.HasReady(), tw.HasReady())
		}
		if k > 10000 {
			w.t.Fatalf("node %d: Readies without end", i)
		}
		rd, trd := c.Ready(), tw.Ready()
		if !sameReady(rd, trd) {
			w.t.Fatalf("node %d: Tick and CatchUp disagree:\n%+v\n%+v", i, rd, trd)
		}
		w.check(i, rd)
		if w.stopped[i] && (hasToken(rd.Outbox) || rd.Held != nil || len(rd.Ledger) > 0) {
			w.t.Fatalf("node %d is stopping but took, stepped or sent a token: %+v", i, rd)
		}
		c.Advance(rd)
		tw.Advance(trd)
	}
	w.checkState(i)
}

// sameReady compares two Readies by content (token vectors by digest).
func sameReady(a, b CustodyReady) bool {
	if len(a.Ledger) != len(b.Ledger) || len(a.Outbox) != len(b.Outbox) || len(a.Events) != len(b.Events) ||
		a.Persist != b.Persist || a.Done != b.Done || (a.Held == nil) != (b.Held == nil) ||
		(a.Final == nil) != (b.Final == nil) || (a.State == nil) != (b.State == nil) {
		return false
	}
	for k := range a.Ledger {
		if a.Ledger[k] != b.Ledger[k] {
			return false
		}
	}
	for k := range a.Outbox {
		x, y := a.Outbox[k], b.Outbox[k]
		if x.Kind != y.Kind || x.From != y.From || x.To != y.To || x.Epoch != y.Epoch || x.Hop != y.Hop ||
			x.Stale != y.Stale || x.Duplicate != y.Duplicate || x.Refused != y.Refused || x.Dist != y.Dist ||
			x.Retire != y.Retire || TokenDigest(x.Token) != TokenDigest(y.Token) {
			return false
		}
	}
	for k := range a.Events {
		x, y := a.Events[k], b.Events[k]
		if x.Kind != y.Kind || x.Epoch != y.Epoch || x.Hop != y.Hop || x.Peer != y.Peer || x.Walk != y.Walk || x.Refusal != y.Refusal {
			return false
		}
	}
	return true
}

// check verifies one Ready of node i against the invariants.
func (w *fuzzNet) check(i int, rd CustodyReady) {
	t := w.t
	self := strconv.Itoa(i)
	for _, e := range rd.Ledger {
		if err := e.Validate(); err != nil {
			t.Fatalf("node %d: invalid entry %+v: %v", i, e, err)
		}
		if e.Node != self {
			t.Fatalf("node %d wrote an entry for %q", i, e.Node)
		}
	}
	if w.done[i] && (len(rd.Ledger) > 0 || hasToken(rd.Outbox)) {
		t.Fatalf("node %d: a ledger entry or a token after Done", i)
	}
	// Entries of this Ready not yet matched to a send.
	unmatched := map[entryKey]int{}
	for _, e := range rd.Ledger {
		unmatched[entryKey{e.Epoch, e.Hop, e.Recipient}]++
	}
	w.ledger[i] = append(w.ledger[i], rd.Ledger...)
	positive := false
	for _, m := range rd.Outbox {
		if m.From != i || m.To < 0 || m.To >= len(w.nodes) || m.To == i {
			t.Fatalf("node %d sent a message from %d to %d", i, m.From, m.To)
		}
		if m.Kind != CustodyToken {
			if m.Token.Z != nil || m.Token.Zhat != nil || m.Token.Run != "" || m.Evidence != nil || m.Shown != nil {
				t.Fatalf("node %d: a kind-%d message carries token data", i, m.Kind)
			}
			if m.Kind == CustodyRelease && !m.Retire && m.Dist < 2 {
				t.Fatalf("node %d: release of distance %d", i, m.Dist)
			}
			if m.Kind == CustodyAck && !m.Stale && !m.Duplicate && m.Refused == RefuseNone {
				positive = true
			}
			continue
		}
		tk := m.Token
		if tk.Epoch != m.Epoch || tk.Hop != m.Hop || len(tk.Z) != 2 || len(tk.Zhat) != 2 || !allFinite(tk.Z, tk.Zhat) {
			t.Fatalf("node %d: malformed token message %+v", i, m)
		}
		if tk.Epoch > MaxEpoch {
			t.Fatalf("node %d sent epoch %d", i, tk.Epoch)
		}
		// Covered: an entry of this Ready (a first send to this recipient) or, for the same
		// bytes sent again to the same recipient, the entry of an earlier send.
		sk := sentKey{tk.Epoch, tk.Hop, TokenDigest(tk), m.To}
		ek := entryKey{tk.Epoch, tk.Hop, strconv.Itoa(m.To)}
		switch {
		case unmatched[ek] > 0:
			unmatched[ek]--
		case w.sent[i][sk]:
		default:
			t.Fatalf("node %d sent (epoch %d, hop %d) to %d without a ledger entry", i, tk.Epoch, tk.Hop, m.To)
		}
		w.sent[i][sk] = true
	}
	// Every entry is a send, or names this node itself (a hand-off to itself or the final)
	// or a peer this node was told is down or evicted (the walk machine's pick, re-sent at
	// once with its own entry): no entry without a release.
	for k, left := range unmatched {
		if left == 0 || k.to == self {
			continue
		}
		j, _ := strconv.Atoi(k.to)
		if !w.down[i][j] && !w.nodes[i].Evicted(j) {
			t.Fatalf("node %d: %d entries for (epoch %d, hop %d) to %s without a send", i, left, k.epoch, k.hop, k.to)
		}
	}
	// A positive ack is sent only for a token held durably (Held) or taken as the final.
	if positive && rd.Held == nil && rd.Final == nil {
		t.Fatalf("node %d acked a token that is neither held nor final", i)
	}
	for _, e := range rd.Events {
		if e.Kind == CustodyStepFailed {
			t.Fatalf("node %d: a held token failed its step: %v", i, e.Err)
		}
	}
	if rd.Done {
		w.done[i] = true
	}
	w.wire = append(w.wire, rd.Outbox...)
}

func hasToken(ms []CustodyMsg) bool {
	for _, m := range ms {
		if m.Kind == CustodyToken {
			return true
		}
	}
	return false
}

// checkState verifies node i's state after its Readies were applied.
func (w *fuzzNet) checkState(i int) {
	t := w.t
	c := w.nodes[i]
	s := c.Snapshot()
	var f CustodyMark
	if s.Fence != nil {
		f = *s.Fence
	}
	if f.mark().cmp(w.fence[i].mark()) < 0 || s.Epoch < w.epoch[i] {
		t.Fatalf("node %d: the fence went down from %+v (epoch %d) to %+v (epoch %d)", i, w.fence[i], w.epoch[i], f, s.Epoch)
	}
	w.fence[i], w.epoch[i] = f, s.Epoch
	if s.Epoch > MaxEpoch {
		t.Fatalf("node %d: epoch %d", i, s.Epoch)
	}
	if len(s.Backups) > MaxBackups(w.cc.Depth) {
		t.Fatalf("node %d holds %d backups, more than %d", i, len(s.Backups), MaxBackups(w.cc.Depth))
	}
	noisy := 0
	for _, e := range w.ledger[i] {
		if e.Noisy() {
			noisy++
		}
	}
	if noisy != c.Machine().Updates() {
		t.Fatalf("node %d: %d noisy entries for %d updates", i, noisy, c.Machine().Updates())
	}
	if ts := w.twins[i].Snapshot(); !reflect.DeepEqual(ts, s) {
		t.Fatalf("node %d: the twin's state differs:\n%+v\n%+v", i, s, ts)
	}
}

// garbage returns a message made of fuzz bytes for node to.
func garbage(b []byte, n, to int) CustodyMsg {
	g := func(k int) int {
		if k < len(b) {
			return int(b[k])
		}
		return 0
	}
	m := CustodyMsg{Kind: CustodyKind(g(0) % 5), From: g(1)%(n+2) - 1, To: to, Epoch: uint64(g(2)) << (g(3) % 64),
		Hop: uint64(g(4) % 40), Stale: g(5)&1 == 1, Duplicate: g(5)&2 == 2, Refused: CustodyRefusal(g(5) >> 2 % 7),
		Dist: g(6) % 12, Retire: g(5)&128 == 128}
	if g(7)&1 == 1 {
		m.Token = NewToken("run", 0, 2, consensus.Regularizer{}, 1)
		m.Token.Epoch, m.Token.Hop = m.Epoch, m.Hop
		m.Token.Z[0] = float64(g(8)) - 100
		switch g(7) >> 1 % 8 {
		case 0:
			m.Token.Zhat[1] = math.NaN()
		case 1:
			m.Token.Z = m.Token.Z[:1]
		case 2:
			m.Token.Run = "other"
		case 3:
			m.Token.Zhat[0] = math.Inf(-1)
		}
	}
	if g(7)&16 == 16 {
		m.Evidence = []byte{byte(g(9))}
	}
	if g(7)&32 == 32 {
		m.Shown = &Evidence{Present: true, Signer: g(9) % n, Hop: uint64(g(9) % 3)}
	}
	return m
}

// FuzzCustodyStep drives 2 to 4 Custody machines (and their twins, see fuzzNet) with
// inputs chosen by the fuzz bytes: deliver, drop or duplicate a message in flight, tick one
// node or all, PeerDown and PeerUp, a garbage message, a start, a final model, and a
// round trip of the state through Snapshot and Restore. Invariants checked on every
// Ready (fuzzNet.check, checkState):
//
//   - no panic; a message a machine sent is always taken without error by its recipient;
//     an ack or release with token data or evidence is refused with ErrCustodyPayload;
//   - every token message is covered by a ledger entry of its sender (same epoch, hop,
//     recipient) in the same Ready, unless it is the same bytes sent again to the same
//     recipient (covered by the entry of the first send);
//   - every ledger entry is matched to one such first send in its Ready, or names the
//     node itself (a hand-off to itself, the final) or a peer the node was told is down:
//     the ledger counts exactly the (release, recipient) pairs, over-counting only the
//     walk machine's pick of a peer known to be down;
//   - no message to the sender itself; acks and releases carry no token data; a
//     positive ack goes only with a token held durably (Ready.Held) or taken as final;
//   - the fence (epoch, hop, digest) and the highest epoch never decrease, and never
//     exceed MaxEpoch;
//   - a node holds at most MaxBackups(D) = 4D+4 backups (without message loss about D
//     across the whole walk, TestCustodyReleaseChainDropsBackupsAtDepth);
//   - the machine's noisy updates equal the noisy entries of its ledger;
//   - after Done, no ledger entry and no token message;
//   - Tick k times and CatchUp(now+k), stopped wherever the machine has a Ready, give the
//     same Readies and the same state; after a catch-up over a gap of several ack
//     timeouts (both machines) nothing is due, and the Readies it gives keep every
//     invariant above; Snapshot/Restore is an identity.
func FuzzCustodyStep(f *testing.F) {
	f.Add([]byte{0, 0, 0, 8, 0, 0, 0, 1, 0, 3, 2, 0, 1, 0, 0, 0})
	f.Add([]byte{5, 1, 0, 8, 1, 0, 0, 0, 0, 7, 30, 4, 2, 0, 5, 7, 40, 0, 0, 3, 5, 10, 1})
	f.Add([]byte{9, 6, 1, 8, 2, 0, 0, 1, 0, 2, 0, 4, 1, 0, 0, 7, 200, 5, 1, 7, 200, 0, 0, 10, 1})
	f.Add([]byte{2, 9, 0, 8, 0, 0, 0, 6, 1, 2, 3, 4, 5, 6, 7, 8, 9, 6, 200, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0})
	f.Add([]byte{11, 3, 2, 8, 1, 0, 0, 0, 0, 9, 2, 0, 0, 7, 255, 7, 255, 7, 255, 11, 0})
	f.Add([]byte{6, 2, 0, 8, 0, 1, 0, 4, 250, 0, 0, 4, 230, 1, 0, 4, 255, 0, 1, 4, 240})
	f.Add([]byte{6, 2, 0, 8, 0, 2, 224, 2, 226, 0, 0, 2, 228, 0, 0, 11, 3, 2, 230, 0, 0})
	f.Fuzz(fuzzCustody)
}

func fuzzCustody(t *testing.T, b []byte) {
	{
		if len(b) < 3 || len(b) > 600 {
			return
		}
		n := 2 + int(b[0])%3
		cc := DefaultCustodyConfig()
		cc.Depth = 1 + int(b[0]/3)%4
		cc.AckTimeout = 1 + int(b[1])%4
		switch b[1] >> 2 % 3 {
		case 1:
			cc.FallbackTimeout = 6 + int(b[1]>>4)
		case 2:
			cc.FallbackFloor = 4 + int(b[1]>>4)
		}
		if b[2]&1 == 1 {
			cc.Hops = 12 + uint64(b[2]>>1)%40
		}
		w := newFuzzNet(t, n, cc)
		b = b[3:]
		for len(b) >= 2 {
			op, arg := b[0], int(b[1])
			b = b[2:]
			i := arg % n
			switch op % 13 {
			case 0: // deliver
				if len(w.wire) == 0 {
					break
				}
				k := arg % len(w.wire)
				m := w.wire[k]
				w.wire = append(w.wire[:k], w.wire[k+1:]...)
				if err := w.input(m.To, func(c *Custody, _ bool) error { return c.Step(m) }); err != nil {
					t.Fatalf("a machine's own message %+v was refused: %v", m, err)
				}
			case 1: // drop
				if len(w.wire) > 0 {
					k := arg % len(w.wire)
					w.wire = append(w.wire[:k], w.wire[k+1:]...)
				}
			case 2: // duplicate
				if len(w.wire) > 0 && arg >= 224 {
					// The recipient of a token in flight refuses it for its evidence (the
					// stale ack of RefuseEvidence): the sender drops its copy.
					k := arg % len(w.wire)
					if m := w.wire[k]; m.Kind == CustodyToken && m.From >= 0 && m.From != m.To {
						w.wire = append(w.wire[:k], w.wire[k+1:]...)
						ack := CustodyMsg{Kind: CustodyAck, From: m.To, To: m.From, Epoch: m.Epoch, Hop: m.Hop, Stale: true, Refused: RefuseEvidence}
						if err := w.input(m.From, func(c *Custody, _ bool) error { return c.Step(ack) }); err != nil {
							t.Fatalf("an evidence refusal %+v was refused: %v", ack, err)
						}
					}
					break
				}
				if len(w.wire) > 0 {
					w.wire = append(w.wire, w.wire[arg%len(w.wire)])
				}
			case 3, 4: // tick one node k times
				k := 1 + arg/n%8
				if op%12 == 4 {
					k = 1 + arg%64
				}
				if op%13 == 4 && arg >= 224 {
					// The driver was away: machine and twin catch up over a gap of several
					// ack timeouts at once. Afterwards nothing is due any more.
					to := w.nodes[i].Now() + int64(2+arg%32)*int64(cc.AckTimeout) + int64(arg%3)
					w.input(i, func(c *Custody, _ bool) error { c.CatchUp(to); return nil })
					for _, c := range []*Custody{w.nodes[i], w.twins[i]} {
						if c.Now() != to || c.due() <= to {
							t.Fatalf("node %d after a catch-up to %d: now %d, a timer due at %d", i, to, c.Now(), c.due())
						}
					}
					break
				}
				w.tick(i, k)
			case 5: // PeerDown
				j := arg / n % n
				w.input(i, func(c *Custody, _ bool) error { c.PeerDown(j); return nil })
				if j != i {
					w.down[i][j] = true
				}
			case 6: // PeerUp
				j := arg / n % n
				w.input(i, func(c *Custody, _ bool) error { c.PeerUp(j); return nil })
				w.down[i][j] = false
			case 7: // garbage
				m := garbage(b, n, i)
				if len(b) >= 10 {
					b = b[10:]
				} else {
					b = nil
				}
				err := w.input(i, func(c *Custody, _ bool) error { return c.Step(m) })
				if (m.Kind == CustodyAck || m.Kind == CustodyRelease) && m.From >= 0 && m.From < n && m.From != i &&
					(m.Token.Z != nil || m.Token.Zhat != nil || m.Evidence != nil || m.Shown != nil) && !errors.Is(err, ErrCustodyPayload) {
					t.Fatalf("an ack or release with token data was taken (%v)", err)
				}
			case 8: // start
				w.input(i, func(c *Custody, _ bool) error { return c.Start(NewToken("run", 0, 2, consensus.Regularizer{}, 1)) })
			case 9: // a final model
				from, e := arg/n%n, uint64(arg/(n*n))
				w.input(i, func(c *Custody, _ bool) error { c.StepFinal(from, e<<(arg%3*30), cc.Hops); return nil })
			case 10: // Snapshot and Restore (a restart: the machine runs again)
				s := w.nodes[i].Snapshot()
				w.input(i, func(c *Custody, _ bool) error { return c.Restore(nil, c.Snapshot()) })
				w.stopped[i] = false
				if got := w.nodes[i].Snapshot(); !reflect.DeepEqual(got, s) {
					t.Fatalf("node %d: Restore(Snapshot()) changed the state:\n%+v\n%+v", i, s, got)
				}
			case 12: // the driver stops (Ctrl-C); inputs may still arrive until a Restore
				w.input(i, func(c *Custody, _ bool) error { c.Stop(); return nil })
				w.stopped[i] = true
			case 11: // tick every node
				for k := 0; k < 1+arg%16; k++ {
					for j := range w.nodes {
						w.tick(j, 1)
					}
				}
			}
		}
	}
}

// tick advances node i by k ticks: k Tick calls on the machine, one TickTo on its twin.
func (w *fuzzNet) tick(i, k int) {
	c, tw := w.nodes[i], w.twins[i]
	to := c.Now() + int64(k)
	for c.Now() < to {
		c.Tick()
		if c.HasReady() {
			// The twin must stop at the same tick: it has something to do there too.
			tw.CatchUp(c.Now())
			w.drain(i)
		}
	}
	tw.CatchUp(to)
	w.drain(i)
	if c.Now() != tw.Now() {
		w.t.Fatalf("node %d: now %d, twin %d", i, c.Now(), tw.Now())
	}
}
