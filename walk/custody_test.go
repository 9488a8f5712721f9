package walk

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
)

// custodyNet is a tiny in-test driver: n Custody machines and a FIFO wire. It applies each
// Ready like a real driver and checks, independently of the machine, that every token
// message is covered by a ledger entry of its sender made before it was sent.
type custodyNet struct {
	t       *testing.T
	nodes   []*Custody
	wire    []CustodyMsg
	ledgers [][]privacy.Entry
	events  [][]CustodyEvent
	out     *[]string // transcript tests: each Ready is rendered here
	// handover: the first send of the unstepped initial token (Custody.Handover) needs no
	// ledger entry.
	handover bool
	// final: the final model each node released (Ready.Final, its token copied).
	final map[int]*CustodyFinal
}

func newCustodyNet(t *testing.T, n int, cc CustodyConfig) *custodyNet {
	t.Helper()
	d, _ := consensus.SyntheticLasso(4*n, 3, 2, 0.1, 7)
	shards, err := consensus.Split(d, n, "iid", 7)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, n)
	for i := range names {
		names[i] = strconv.Itoa(i)
	}
	w := &custodyNet{t: t, ledgers: make([][]privacy.Entry, n), events: make([][]CustodyEvent, n)}
	for i := 0; i < n; i++ {
		ll, err := consensus.NewLocalLoss(shards[i], consensus.Squared, 1)
		if err != nil {
			t.Fatal(err)
		}
		wc := DefaultConfig()
		wc.Node, wc.Nodes, wc.Names, wc.Sigma = i, n, names, 0.5
		wc.Rand = rand.New(rand.NewPCG(uint64(i), 1))
		wc.Noise = privacy.NewSeededNoise(uint64(i) + 100)
		c := cc
		c.Rand = rand.New(rand.NewPCG(uint64(i), 2))
		m, err := NewCustody(wc, ll, 3, c)
		if err != nil {
			t.Fatal(err)
		}
		w.nodes = append(w.nodes, m)
	}
	return w
}

func (w *custodyNet) covered(i int, m CustodyMsg) bool {
	if w.handover && m.Epoch == 0 && m.Hop == 0 && len(w.ledgers[i]) == 0 {
		return true // the unstepped initial token of Handover carries no data
	}
	for _, e := range w.ledgers[i] {
		if e.Epoch == m.Epoch && e.Hop == m.Hop && e.Recipient == strconv.Itoa(m.To) {
			return true
		}
	}
	return false
}

// collect applies node i's Readies (a held token is stepped at Advance and makes the
// next one): ledger first, then the outbox goes on the wire.
func (w *custodyNet) collect(i int) {
	w.t.Helper()
	for c := w.nodes[i]; c.HasReady(); {
		w.apply(i, c.Ready())
	}
}

func (w *custodyNet) apply(i int, rd CustodyReady) {
	w.t.Helper()
	c := w.nodes[i]
	if w.out != nil {
		*w.out = append(*w.out, readyLines(i, rd, c.Snapshot())...)
	}
	for _, e := range rd.Ledger {
		if err := e.Validate(); err != nil {
			w.t.Fatal(err)
		}
		w.ledgers[i] = append(w.ledgers[i], e)
	}
	w.events[i] = append(w.events[i], rd.Events...)
	if f := rd.Final; f != nil {
		if w.final == nil {
			w.final = map[int]*CustodyFinal{}
		}
		w.final[i] = &CustodyFinal{Token: cloneToken(f.Token), From: f.From}
	}
	for _, m := range rd.Outbox {
		if m.From != i {
			w.t.Fatalf("node %d sent a message from %d", i, m.From)
		}
		if m.Kind == CustodyToken {
			if !w.covered(i, m) {
				w.t.Fatalf("node %d sent (epoch %d, hop %d) to %d without a ledger entry", i, m.Epoch, m.Hop, m.To)
			}
		} else if m.Token.Z != nil || m.Token.Zhat != nil || m.Token.Run != "" {
			w.t.Fatalf("node %d: a kind-%d message carries token data", i, m.Kind)
		}
		w.wire = append(w.wire, m)
	}
	c.Advance(rd)
}

func (w *custodyNet) start(i int) {
	w.t.Helper()
	if err := w.nodes[i].Start(NewToken("run", 0, 3, consensus.Regularizer{}, 1)); err != nil {
		w.t.Fatal(err)
	}
	w.collect(i)
}

// pop removes the first wire message matching keep (nil: any).
func (w *custodyNet) pop(keep func(CustodyMsg) bool) (CustodyMsg, bool) {
	for k, m := range w.wire {
		if keep == nil || keep(m) {
			w.wire = append(w.wire[:k], w.wire[k+1:]...)
			return m, true
		}
	}
	return CustodyMsg{}, false
}

func (w *custodyNet) deliver(m CustodyMsg) {
	w.t.Helper()
	if err := w.nodes[m.To].Step(m); err != nil {
		w.t.Fatalf("deliver %+v: %v", m.Kind, err)
	}
	w.collect(m.To)
}

func (w *custodyNet) tick(i int) {
	w.nodes[i].Tick()
	w.collect(i)
}

func isToken(m CustodyMsg) bool { return m.Kind == CustodyToken }

func (w *custodyNet) count(i int, k CustodyEventKind) int {
	n := 0
	for _, e := range w.events[i] {
		if e.Kind == k {
			n++
		}
	}
	return n
}

// runTo pumps the wire FIFO until the next token message has hop >= hop, then delivers
// every remaining ack and release, leaving that token on the wire.
func (w *custodyNet) runTo(hop uint64) CustodyMsg {
	w.t.Helper()
	for steps := 0; steps < 100000; steps++ {
		m, ok := w.pop(func(m CustodyMsg) bool { return !isToken(m) || m.Hop < hop })
		if !ok {
			tok, ok := w.pop(isToken)
			if !ok {
				w.t.Fatal("no token on the wire")
			}
			w.wire = append(w.wire, tok)
			return tok
		}
		w.deliver(m)
	}
	w.t.Fatal("runTo did not converge")
	return CustodyMsg{}
}

func testCustodyConfig() CustodyConfig {
	c := DefaultCustodyConfig()
	c.AckTimeout = 3
	return c
}

func TestCustodyAckTimeoutRetransmitsThenRetriesAnotherPeer(t *testing.T) {
	w := newCustodyNet(t, 5, testCustodyConfig())
	w.start(0)
	first, _ := w.pop(isToken)
	s := first.To
	upd := w.nodes[0].Machine().Updates()
	entries := len(w.ledgers[0])
	for k := 0; k < 3; k++ {
		w.tick(0)
	}
	re, ok := w.pop(isToken)
	if !ok || re.To != s || re.Epoch != first.Epoch || re.Hop != first.Hop || TokenDigest(re.Token) != TokenDigest(first.Token) {
		t.Fatalf("after the ack timeout: want an identical retransmission to %d, got %+v (ok %v)", s, re, ok)
	}
	if len(w.ledgers[0]) != entries {
		t.Fatalf("a retransmission to the same peer added ledger entries")
	}
	for k := 0; k < 3; k++ {
		w.tick(0)
	}
	other, ok := w.pop(isToken)
	if !ok || other.To == s || other.To == 0 {
		t.Fatalf("second timeout: want a re-send to another peer, got %+v (ok %v)", other, ok)
	}
	if TokenDigest(other.Token) != TokenDigest(first.Token) || other.Epoch != first.Epoch || other.Hop != first.Hop {
		t.Fatal("the re-send is not the same release")
	}
	last := w.ledgers[0][len(w.ledgers[0])-1]
	if len(w.ledgers[0]) != entries+1 || last.Mechanism != MechForward || last.Recipient != strconv.Itoa(other.To) || last.Sensitivity != 0 {
		t.Fatalf("want one forward entry naming %d, got %+v", other.To, w.ledgers[0][entries:])
	}
	if w.nodes[0].Machine().Updates() != upd {
		t.Fatal("a re-send made a new noisy update")
	}
	if w.count(0, CustodyRetransmitted) != 1 || w.count(0, CustodyResent) != 1 {
		t.Fatalf("events: %+v", w.events[0])
	}
}

func TestCustodyPeerDownBeforeAckResendsAtOnce(t *testing.T) {
	w := newCustodyNet(t, 5, testCustodyConfig())
	w.start(0)
	first, _ := w.pop(isToken)
	w.nodes[0].PeerDown(first.To)
	w.collect(0)
	re, ok := w.pop(isToken)
	if !ok || re.To == first.To || TokenDigest(re.Token) != TokenDigest(first.Token) || re.Epoch != first.Epoch {
		t.Fatalf("want the same release re-sent to a live peer, got %+v", re)
	}
	// The new recipient acks: the backup is acked, no further re-send on timeouts.
	w.deliver(re)
	ack, _ := w.pop(func(m CustodyMsg) bool { return m.Kind == CustodyAck })
	w.deliver(ack)
	for k := 0; k < 10; k++ {
		w.tick(0)
	}
	if _, ok := w.pop(func(m CustodyMsg) bool { return isToken(m) && m.From == 0 }); ok {
		t.Fatal("node 0 re-sent an acked token")
	}
	if b := w.nodes[0].Backups(); len(b) != 1 || !b[0].Acked || b[0].To != re.To {
		t.Fatalf("backups %+v", b)
	}
}

// runToShuffled is runTo with messages delivered in random order, so that release waves
// overtake each other.
func (w *custodyNet) runToShuffled(hop uint64, rng *rand.Rand) {
	w.t.Helper()
	for steps := 0; steps < 100000; steps++ {
		var idx []int
		for k, m := range w.wire {
			if !isToken(m) || m.Hop < hop {
				idx = append(idx, k)
			}
		}
		if len(idx) == 0 {
			return
		}
		k := idx[rng.IntN(len(idx))]
		m := w.wire[k]
		w.wire = append(w.wire[:k], w.wire[k+1:]...)
		w.deliver(m)
	}
	w.t.Fatal("runToShuffled did not converge")
}

func TestCustodyReleaseChainDropsBackupsAtDepth(t *testing.T) {
	for _, depth := range []int{1, 2, 3, 5, 8} {
		for _, shuffled := range []bool{false, true} {
			testReleaseChain(t, depth, shuffled)
		}
	}
}

func testReleaseChain(t *testing.T, depth int, shuffled bool) {
	{
		cc := testCustodyConfig()
		cc.Depth = depth
		w := newCustodyNet(t, 6, cc)
		w.start(0)
		if shuffled {
			w.runToShuffled(300, rand.New(rand.NewPCG(uint64(depth), 5)))
		} else {
			w.runTo(40)
		}
		var dists []int
		for _, c := range w.nodes {
			for _, b := range c.Backups() {
				dists = append(dists, b.Dist)
				if b.Dist >= depth {
					t.Fatalf("depth %d (shuffled %v): backup at distance %d survives", depth, shuffled, b.Dist)
				}
			}
		}
		// One backup per distance 0..depth-1: the token in flight and its depth-1
		// acked predecessors.
		if len(dists) != depth {
			t.Fatalf("depth %d (shuffled %v): %d backups, distances %v", depth, shuffled, len(dists), dists)
		}
		seen := map[int]bool{}
		for _, d := range dists {
			seen[d] = true
		}
		for d := 0; d < depth; d++ {
			if !seen[d] {
				t.Fatalf("depth %d: no backup at distance %d (%v)", depth, d, dists)
			}
		}
	}
}

// chainAt returns the node holding the backup at distance d (the one whose successor is
// d-1 hand-offs behind the token).
func chainAt(w *custodyNet, d int) (int, BackupInfo) {
	for i, c := range w.nodes {
		for _, b := range c.Backups() {
			if b.Dist == d {
				return i, b
			}
		}
	}
	return -1, BackupInfo{}
}

func TestCustodyRegeneratesWhenSuccessorDies(t *testing.T) {
	cc := testCustodyConfig()
	cc.Depth = 3
	w := newCustodyNet(t, 8, cc)
	w.start(0)
	// Walk until the distance-1 backup is at another node than the holder (a revisit
	// within one hop would put both at one node).
	var tok CustodyMsg
	var holder, x int
	var bx BackupInfo
	for h := uint64(30); ; h++ {
		tok = w.runTo(h)
		holder = tok.From // sent the in-flight token; it dies with it
		x, bx = chainAt(w, 1)
		if x != holder {
			break
		}
		if h > 200 {
			t.Fatal("no hop with distinct holder and predecessor")
		}
	}
	w.pop(isToken)
	if bx.To != holder {
		t.Fatalf("distance-1 backup at %d points to %d, want the holder %d", x, bx.To, holder)
	}
	entries := len(w.ledgers[x])
	upd := w.nodes[x].Machine().Updates()
	for i := range w.nodes {
		if i != holder {
			w.nodes[i].PeerDown(holder)
			w.collect(i)
		}
	}
	regen := 0
	for i := range w.nodes {
		regen += w.count(i, CustodyRegenerated)
	}
	if regen != 1 || w.count(x, CustodyRegenerated) != 1 {
		t.Fatalf("want exactly one regeneration, at %d; got %d", x, regen)
	}
	m, ok := w.pop(isToken)
	if !ok || m.From != x || m.To == holder || m.To == x {
		t.Fatalf("regenerated token: %+v", m)
	}
	if m.Epoch != bx.Epoch+1 || m.Hop != bx.Hop || TokenDigest(m.Token) != bx.Digest {
		t.Fatalf("regenerated token (epoch %d, hop %d) from backup (epoch %d, hop %d): want epoch+1, same hop and z", m.Epoch, m.Hop, bx.Epoch, bx.Hop)
	}
	if len(w.ledgers[x]) != entries+1 || w.ledgers[x][entries].Mechanism != MechForward || w.ledgers[x][entries].Epoch != m.Epoch {
		t.Fatalf("regeneration must be charged as a forward entry: %+v", w.ledgers[x][entries:])
	}
	if w.nodes[x].Machine().Updates() != upd {
		t.Fatal("regeneration made a noisy update")
	}
	// The walk goes on under the new epoch.
	w.wire = append(w.wire, m)
	next := w.runTo(m.Hop + 5)
	if next.Epoch != m.Epoch {
		t.Fatalf("walk continued at epoch %d, want %d", next.Epoch, m.Epoch)
	}
	// The old token, had it survived, is fenced everywhere the new epoch has been.
	fenced := tok
	fenced.From, fenced.To = holder, next.From
	w.deliver(fenced)
	if w.count(next.From, CustodyFenced) != 1 {
		t.Fatal("the old-epoch copy was not fenced")
	}
	ack, _ := w.pop(func(a CustodyMsg) bool { return a.Kind == CustodyAck && a.Stale })
	if ack.To != holder || ack.Epoch != tok.Epoch || ack.Hop != tok.Hop {
		t.Fatalf("want a stale ack for the fenced copy, got %+v", ack)
	}
}

func TestCustodyStaleAckDropsBackupAndRetiresChain(t *testing.T) {
	cc := testCustodyConfig()
	cc.Depth = 4
	w := newCustodyNet(t, 6, cc)
	w.start(0)
	tok := w.runTo(20)
	w.pop(isToken)
	s := tok.From
	pred := -1
	for i, c := range w.nodes {
		for _, b := range c.Backups() {
			if b.Dist == 1 && b.To == s {
				pred = i
			}
		}
	}
	before := len(w.nodes[s].Backups())
	w.deliver(CustodyMsg{Kind: CustodyAck, From: tok.To, To: s, Epoch: tok.Epoch, Hop: tok.Hop, Stale: true})
	if len(w.nodes[s].Backups()) != before-1 || w.count(s, CustodyRetired) != 1 {
		t.Fatal("a stale ack must drop the backup")
	}
	ret, ok := w.pop(func(m CustodyMsg) bool { return m.Kind == CustodyRelease && m.Retire })
	if !ok || ret.To != pred {
		t.Fatalf("want a retire release to the predecessor %d, got %+v", pred, ret)
	}
	w.deliver(ret)
	if w.count(pred, CustodyRetired) != 1 {
		t.Fatal("the predecessor kept the backup of a fenced lineage")
	}
}

// TestCustodyMergeIsDeterministic: copies of the walk are ordered by (epoch, hop, digest);
// whatever the delivery order, the highest copy is the last one a node accepts and goes
// on, and the others are refused as stale or stepped before it arrives.
func TestCustodyMergeIsDeterministic(t *testing.T) {
	mk := func(epoch, hop uint64, z float64) Token {
		tk := NewToken("run", 0, 3, consensus.Regularizer{}, 1)
		tk.Epoch, tk.Hop = epoch, hop
		for k := range tk.Z {
			tk.Z[k], tk.Zhat[k] = z, z
		}
		return tk
	}
	cases := [][]Token{
		{mk(2, 10, 0.1), mk(2, 40, 0.2)},               // higher hop wins
		{mk(1, 14, 0.1), mk(2, 10, 0.2)},               // higher epoch wins over a hop within Depth + RewindSlack
		{mk(3, 10, 0.1), mk(3, 40, 0.2), mk(3, 9, -1)}, // three copies
	}
	for ci, toks := range cases {
		best := 0
		for k, tk := range toks {
			if markOf(&tk).cmp(markOf(&toks[best])) > 0 {
				best = k
			}
		}
		for _, p := range [][]int{{0, 1, 2}, {2, 1, 0}, {1, 0, 2}, {1, 2, 0}, {0, 2, 1}, {2, 0, 1}} {
			w := newCustodyNet(t, 4, testCustodyConfig())
			accepted := -1
			for _, k := range p {
				if k >= len(toks) {
					continue
				}
				tk := toks[k]
				before := w.nodes[0].Machine().Updates()
				w.deliver(CustodyMsg{Kind: CustodyToken, From: 1 + k%3, To: 0, Epoch: tk.Epoch, Hop: tk.Hop, Token: cloneToken(tk)})
				if w.nodes[0].Machine().Updates() > before {
					accepted = k
				}
			}
			if accepted != best {
				t.Fatalf("case %d order %v: last accepted %d, want %d", ci, p, accepted, best)
			}
			if w.nodes[0].Epoch() != toks[best].Epoch {
				t.Fatalf("case %d: epoch %d, want %d", ci, w.nodes[0].Epoch(), toks[best].Epoch)
			}
			if f := w.count(0, CustodyFenced); f != len(toks)-countAccepted(w, 0) {
				t.Fatalf("case %d: %d fenced, %d accepted of %d", ci, f, countAccepted(w, 0), len(toks))
			}
		}
	}
	// Same epoch and hop: a copy meeting the node's own release of that (epoch, hop) goes
	// on only if its digest is higher, so no node ever releases two tokens under one
	// (epoch, hop).
	higher, lower := 0, 0
	for trial := 0; trial < 40; trial++ {
		w := newCustodyNet(t, 4, testCustodyConfig())
		w.deliver(CustodyMsg{Kind: CustodyToken, From: 1, To: 0, Epoch: 5, Hop: 20, Token: mk(5, 20, 0.5)})
		rel, _ := w.pop(isToken)
		other := mk(5, rel.Hop, float64(trial)/7-2)
		want := TokenDigest(other) > TokenDigest(rel.Token)
		before := w.nodes[0].Machine().Updates()
		w.deliver(CustodyMsg{Kind: CustodyToken, From: 2, To: 0, Epoch: 5, Hop: rel.Hop, Token: other})
		got := w.nodes[0].Machine().Updates() > before
		if got != want {
			t.Fatalf("trial %d: same (epoch, hop) as the own release: accepted %v, want %v (digest order)", trial, got, want)
		}
		if want {
			higher++
		} else {
			lower++
		}
	}
	if higher == 0 || lower == 0 {
		t.Fatalf("digest tie-break not exercised both ways: %d higher, %d lower", higher, lower)
	}
}

func countAccepted(w *custodyNet, i int) int { return w.count(i, CustodyAccepted) }

func TestCustodyRetransmissionGetsDuplicateAck(t *testing.T) {
	w := newCustodyNet(t, 4, testCustodyConfig())
	w.start(0)
	m, _ := w.pop(isToken)
	w.deliver(m)
	w.pop(func(a CustodyMsg) bool { return a.Kind == CustodyAck }) // the ack is lost
	upd := w.nodes[m.To].Machine().Updates()
	for k := 0; k < 3; k++ {
		w.tick(0)
	}
	re, ok := w.pop(func(x CustodyMsg) bool { return isToken(x) && x.From == 0 })
	if !ok || re.To != m.To {
		t.Fatalf("want a retransmission to %d, got %+v", m.To, re)
	}
	w.deliver(re)
	if w.nodes[m.To].Machine().Updates() != upd || w.count(m.To, CustodyDuplicate) != 1 {
		t.Fatal("a retransmission was processed again")
	}
	ack, ok := w.pop(func(a CustodyMsg) bool { return a.Kind == CustodyAck && a.To == 0 })
	if !ok || ack.Stale {
		t.Fatalf("want a plain ack for the duplicate, got %+v", ack)
	}
	w.deliver(ack)
	if b := w.nodes[0].Backups(); len(b) != 1 || !b[0].Acked {
		t.Fatalf("backups %+v", b)
	}
}

func TestCustodyFallbackAfterSilence(t *testing.T) {
	cc := testCustodyConfig()
	cc.Depth = 1
	cc.FallbackTimeout = 50
	w := newCustodyNet(t, 4, cc)
	w.start(0)
	m, _ := w.pop(isToken)
	w.deliver(m)
	ack, _ := w.pop(func(a CustodyMsg) bool { return a.Kind == CustodyAck })
	w.deliver(ack)
	// Depth 1: the backup is gone at the ack. The token is now lost with m.To.
	w.wire = nil
	if len(w.nodes[0].Backups()) != 0 {
		t.Fatal("depth 1 keeps no backup after the ack")
	}
	for k := 0; k < 49; k++ {
		w.tick(0)
	}
	if _, ok := w.pop(isToken); ok {
		t.Fatal("fallback fired early")
	}
	w.tick(0)
	fb, ok := w.pop(isToken)
	if !ok || w.count(0, CustodyFallback) != 1 {
		t.Fatal("no fallback after FallbackTimeout ticks of silence")
	}
	if fb.Epoch != m.Epoch+1 || fb.Hop != m.Hop || TokenDigest(fb.Token) != TokenDigest(m.Token) {
		t.Fatalf("fallback token (epoch %d hop %d), want the last release (hop %d) under epoch %d", fb.Epoch, fb.Hop, m.Hop, m.Epoch+1)
	}
}

func TestCustodyRejectsBadInput(t *testing.T) {
	if err := (CustodyConfig{AckTimeout: 1, Depth: 1}).Validate(); err == nil {
		t.Fatal("missing Rand accepted")
	}
	r := rand.New(rand.NewPCG(1, 1))
	for _, c := range []CustodyConfig{
		{Rand: r, AckTimeout: 0, Depth: 1},
		{Rand: r, AckTimeout: 1, Depth: 0},
		{Rand: r, AckTimeout: 1, Depth: 1, FallbackTimeout: -1},
	} {
		if c.Validate() == nil {
			t.Fatalf("%+v accepted", c)
		}
	}
	w := newCustodyNet(t, 3, testCustodyConfig())
	c := w.nodes[1]
	good := NewToken("run", 0, 3, consensus.Regularizer{}, 1)
	nan := cloneToken(good)
	nan.Z[1] = math.NaN()
	short := cloneToken(good)
	short.Z = short.Z[:2]
	foreign := cloneToken(good)
	foreign.Run = "other"
	for _, tc := range []struct {
		m    CustodyMsg
		want error
	}{
		{CustodyMsg{Kind: CustodyToken, From: 0, To: 1, Token: nan}, ErrNotFinite},
		{CustodyMsg{Kind: CustodyToken, From: 0, To: 1, Token: short}, ErrDim},
		{CustodyMsg{Kind: CustodyToken, From: 0, To: 1, Token: foreign}, ErrForeign},
		{CustodyMsg{Kind: CustodyToken, From: 7, To: 1, Token: good}, ErrCustodyPeer},
		{CustodyMsg{Kind: CustodyToken, From: 0, To: 2, Token: good}, ErrCustodyPeer},
		{CustodyMsg{Kind: 99, From: 0, To: 1}, ErrCustodyKind},
		{CustodyMsg{Kind: CustodyAck, From: 0, To: 1, Token: good}, ErrCustodyPayload},
		{CustodyMsg{Kind: CustodyRelease, From: 0, To: 1, Token: Token{Zhat: []float64{1}}}, ErrCustodyPayload},
	} {
		if err := c.Step(tc.m); !errors.Is(err, tc.want) {
			t.Fatalf("%+v: got %v, want %v", tc.m.Kind, err, tc.want)
		}
	}
	if c.HasReady() || c.Machine().Updates() != 0 {
		t.Fatal("refused input changed the node")
	}
	// Acks and releases for unknown tokens are ignored without effect.
	if err := c.Step(CustodyMsg{Kind: CustodyAck, From: 0, To: 1, Epoch: 4, Hop: 4}); err != nil || c.HasReady() {
		t.Fatal("unknown ack had an effect")
	}
	if err := c.Step(CustodyMsg{Kind: CustodyRelease, From: 0, To: 1, Epoch: 4, Hop: 4, Dist: 3}); err != nil || c.HasReady() {
		t.Fatal("unknown release had an effect")
	}
}

// TestCustodyOnlyHandOffsCarryTokenData pumps a walk with crashes and lost messages and
// checks every message: only CustodyToken carries z, and every CustodyToken is covered
// by its sender's ledger (both checked in collect).
func TestCustodyOnlyHandOffsCarryTokenData(t *testing.T) {
	cc := testCustodyConfig()
	cc.Depth = 3
	w := newCustodyNet(t, 6, cc)
	w.start(0)
	rng := rand.New(rand.NewPCG(9, 9))
	kinds := map[CustodyKind]int{}
	for step := 0; step < 3000 && len(w.wire) > 0; step++ {
		m, _ := w.pop(nil)
		kinds[m.Kind]++
		if rng.IntN(20) == 0 {
			continue // lost
		}
		w.deliver(m)
		if step%7 == 0 {
			for i := range w.nodes {
				w.tick(i)
			}
		}
		if len(w.wire) == 0 {
			for k := 0; k < 10 && len(w.wire) == 0; k++ {
				for i := range w.nodes {
					w.tick(i)
				}
			}
		}
	}
	if kinds[CustodyToken] < 100 || kinds[CustodyAck] < 100 || kinds[CustodyRelease] < 100 {
		t.Fatalf("too little traffic to judge: %v", kinds)
	}
}

func TestCustodyWaitsForALivePeer(t *testing.T) {
	w := newCustodyNet(t, 3, testCustodyConfig())
	w.start(0)
	first, _ := w.pop(isToken)
	other := 3 - first.To // the third node (0 is the sender)
	w.nodes[0].PeerDown(other)
	w.nodes[0].PeerDown(first.To)
	w.collect(0)
	if _, ok := w.pop(isToken); ok || w.count(0, CustodyNoPeer) != 1 {
		t.Fatal("with every peer down the token must stay in custody")
	}
	for k := 0; k < 10; k++ {
		w.tick(0)
	}
	if _, ok := w.pop(isToken); ok {
		t.Fatal("sent to a peer known to be down")
	}
	w.nodes[0].PeerUp(other)
	w.collect(0)
	m, ok := w.pop(isToken)
	if !ok || m.To != other || TokenDigest(m.Token) != TokenDigest(first.Token) {
		t.Fatalf("after PeerUp: want the release sent to %d, got %+v", other, m)
	}
	if !w.covered(0, m) {
		t.Fatal("not charged")
	}
}

// restartSnapshot is what a driver persists and restores after a restart with a new
// clock: the snapshot with its tick values set to 0.
func restartSnapshot(s CustodySnapshot) CustodySnapshot {
	s.Now, s.Fallback.Active, s.Fallback.LastAt, s.Paused, s.Down = 0, 0, 0, false, nil
	for k := range s.Backups {
		s.Backups[k].Deadline, s.Backups[k].Progress, s.Backups[k].BusyAt, s.Backups[k].BusyWait = 0, 0, 0, 0
	}
	return s
}

// TestCustodyRestartFromSnapshot: a node restarted from its snapshot (a fresh machine,
// Restore) retransmits its unacked release at its first tick, the same bytes to the same
// recipient without a new ledger entry, and steps a token it had acked but not stepped
// exactly as the node that crashed would have (same seeds: same ledger entry, same bits).
func TestCustodyRestartFromSnapshot(t *testing.T) {
	w := newCustodyNet(t, 4, testCustodyConfig())
	w.start(0)
	first, _ := w.pop(isToken)
	s := restartSnapshot(w.nodes[0].Snapshot())
	entries := len(w.ledgers[0])
	fresh := newCustodyNet(t, 4, testCustodyConfig())
	fresh.ledgers[0] = append(fresh.ledgers[0], w.ledgers[0]...) // the restarted node's durable ledger
	c := fresh.nodes[0]
	if err := c.Restore(&Checkpoint{Node: 0, Updates: w.nodes[0].Machine().Updates(), U: w.nodes[0].Machine().U()}, s); err != nil {
		t.Fatal(err)
	}
	if c.HasReady() || c.Machine().Updates() != w.nodes[0].Machine().Updates() {
		t.Fatal("restored machine: pending output or wrong update count")
	}
	if !reflect.DeepEqual(c.Snapshot(), s) {
		t.Fatalf("Snapshot after Restore differs:\n%+v\n%+v", c.Snapshot(), s)
	}
	fresh.tick(0)
	re, ok := fresh.pop(isToken)
	if !ok || re.To != first.To || re.Epoch != first.Epoch || re.Hop != first.Hop || TokenDigest(re.Token) != TokenDigest(first.Token) {
		t.Fatalf("after the restart: want the release of (epoch %d, hop %d) again to %d, got %+v (%v)", first.Epoch, first.Hop, first.To, re, ok)
	}
	if len(fresh.ledgers[0]) != entries {
		t.Fatalf("the retransmission after a restart added entries: %+v", fresh.ledgers[0][entries:])
	}

	// A token acked and held (durable) but not stepped when the node crashed.
	r := first.To
	if err := w.nodes[r].Step(first); err != nil {
		t.Fatal(err)
	}
	rd := w.nodes[r].Ready()
	if rd.Held == nil || len(rd.Ledger) != 0 {
		t.Fatalf("accepted token: Held %v, %d entries before its step", rd.Held, len(rd.Ledger))
	}
	held := restartSnapshot(w.nodes[r].Snapshot())
	fr := fresh.nodes[r]
	if err := fr.Restore(nil, held); err != nil {
		t.Fatal(err)
	}
	if !fr.HasReady() {
		t.Fatal("a restored held token is not pending")
	}
	fresh.collect(r)
	w.apply(r, rd)
	w.collect(r)
	if len(fresh.ledgers[r]) == 0 || len(fresh.ledgers[r]) != len(w.ledgers[r]) || !reflect.DeepEqual(fresh.ledgers[r], w.ledgers[r]) {
		t.Fatalf("restarted step: ledger %+v, the node's own %+v", fresh.ledgers[r], w.ledgers[r])
	}
	a, _ := fresh.pop(func(m CustodyMsg) bool { return isToken(m) && m.From == r })
	b, _ := w.pop(func(m CustodyMsg) bool { return isToken(m) && m.From == r })
	if a.To != b.To || a.Hop != b.Hop || TokenDigest(a.Token) != TokenDigest(b.Token) {
		t.Fatalf("restarted step sent %+v, the node itself %+v", a, b)
	}
	// The retransmission of the held token by its sender is acked as a duplicate.
	if err := fr.Step(first); err != nil {
		t.Fatal(err)
	}
	if rd := fr.Ready(); len(rd.Outbox) != 1 || !rd.Outbox[0].Duplicate {
		t.Fatalf("the sender's retransmission after the restart: %+v", rd.Outbox)
	}
}

func TestCustodyRestoreRefusesBadSnapshots(t *testing.T) {
	w := newCustodyNet(t, 3, testCustodyConfig())
	w.start(0)
	c := w.nodes[0]
	good := c.Snapshot()
	bad := map[string]func(s *CustodySnapshot){
		"epoch":       func(s *CustodySnapshot) { s.Epoch = MaxEpoch + 1 },
		"recipient":   func(s *CustodySnapshot) { s.Backups[0].To = 3 },
		"self":        func(s *CustodySnapshot) { s.Backups[0].To = 0 },
		"dimension":   func(s *CustodySnapshot) { s.Backups[0].Token.Z = s.Backups[0].Token.Z[:1] },
		"not finite":  func(s *CustodySnapshot) { s.Backups[0].Token.Zhat[0] = math.NaN() },
		"foreign":     func(s *CustodySnapshot) { s.Backups[0].Token.Run = "x" },
		"no peer":     func(s *CustodySnapshot) { s.Backups[0].To = -1 },
		"strikes":     func(s *CustodySnapshot) { s.Strikes = []int{1} },
		"hop time":    func(s *CustodySnapshot) { s.Fallback.HopTicks = math.Inf(1) },
		"held sender": func(s *CustodySnapshot) { s.Held = &CustodyHeld{Token: s.Backups[0].Token, Pred: 9} },
	}
	for name, mut := range bad {
		s := c.Snapshot()
		mut(&s)
		if err := c.Restore(nil, s); !errors.Is(err, ErrCustodySnapshot) {
			t.Errorf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(c.Snapshot(), good) {
			t.Fatalf("%s: a refused snapshot changed the state", name)
		}
	}
}

// TestCustodyHandover: an origin that is not the first holder hands the unstepped initial
// token over without a ledger entry (it carries no data) and keeps it in custody: a
// re-send to another peer is charged as any other.
func TestCustodyHandover(t *testing.T) {
	w := newCustodyNet(t, 4, testCustodyConfig())
	w.handover = true
	init := NewToken("run", 0, 3, consensus.Regularizer{}, 1)
	if err := w.nodes[0].Handover(2, init); err != nil {
		t.Fatal(err)
	}
	w.collect(0)
	m, ok := w.pop(isToken)
	if !ok || m.To != 2 || m.Hop != 0 || TokenDigest(m.Token) != TokenDigest(init) || len(w.ledgers[0]) != 0 {
		t.Fatalf("hand-over: %+v, entries %+v", m, w.ledgers[0])
	}
	if w.nodes[0].Machine().Updates() != 0 {
		t.Fatal("the hand-over stepped the token")
	}
	w.nodes[0].PeerDown(2)
	w.collect(0)
	re, ok := w.pop(isToken)
	if !ok || re.To == 2 || re.Hop != 0 || len(w.ledgers[0]) != 1 || w.ledgers[0][0].Mechanism != MechForward ||
		w.ledgers[0][0].Recipient != strconv.Itoa(re.To) {
		t.Fatalf("re-send of the initial token: %+v, entries %+v", re, w.ledgers[0])
	}
	w.deliver(re)
	if w.nodes[re.To].Machine().Updates() == 0 {
		t.Fatal("the new holder did not step the initial token")
	}
	ack, _ := w.pop(func(a CustodyMsg) bool { return a.Kind == CustodyAck && a.To == 0 })
	w.deliver(ack)
	if b := w.nodes[0].Backups(); len(b) != 1 || !b[0].Acked {
		t.Fatalf("origin's backup after the ack: %+v", b)
	}
}

// TestCustodyBusyAndRefusals: a busy answer makes the sender ask the same peer again after
// 1, 2, 4, ... ticks (at most AckTimeout/4) until the ack timeout; a refusal or a failed
// hand-off acts as an ack timeout at once (the same peer once more, then another, with a
// forward entry). Answers about an earlier send are ignored.
func TestCustodyBusyAndRefusals(t *testing.T) {
	cc := testCustodyConfig()
	cc.AckTimeout = 16
	w := newCustodyNet(t, 4, cc)
	w.start(0)
	first, _ := w.pop(isToken)
	s := first.To
	entries := len(w.ledgers[0])
	busy := CustodyMsg{Kind: CustodyAck, From: s, To: 0, Epoch: first.Epoch, Hop: first.Hop, Refused: RefuseBusy}
	var at []int64
	w.deliver(busy)
	for k := 0; k < 16; k++ {
		w.tick(0)
		if m, ok := w.pop(isToken); ok {
			if m.To != s || TokenDigest(m.Token) != TokenDigest(first.Token) {
				t.Fatalf("busy retry to %d, want %d", m.To, s)
			}
			at = append(at, w.nodes[0].Now())
			if w.nodes[0].Now() < 16 {
				w.deliver(busy)
			}
		}
	}
	// Retries 1, 2, 4, 4 (the cap AckTimeout/4) ticks after each busy answer: ticks 1, 3,
	// 7, 11, 15; then the ack timeout (tick 16) retransmits once more.
	if want := []int64{1, 3, 7, 11, 15, 16}; !reflect.DeepEqual(at, want) {
		t.Fatalf("sends at ticks %v, want %v", at, want)
	}
	if len(w.ledgers[0]) != entries {
		t.Fatalf("busy retries added entries: %d", len(w.ledgers[0])-entries)
	}
	// A failure report from the current recipient after the retransmission: re-send now.
	w.deliver(CustodyMsg{Kind: CustodyAck, From: s, To: 0, Epoch: first.Epoch, Hop: first.Hop, Refused: RefuseFailed})
	re, ok := w.pop(isToken)
	if !ok || re.To == s || len(w.ledgers[0]) != entries+1 || w.ledgers[0][entries].Recipient != strconv.Itoa(re.To) {
		t.Fatalf("after a failure: %+v, entries %d", re, len(w.ledgers[0]))
	}
	// A refusal from the earlier recipient no longer counts.
	w.deliver(CustodyMsg{Kind: CustodyAck, From: s, To: 0, Epoch: first.Epoch, Hop: first.Hop, Refused: RefuseInvalid})
	if _, ok := w.pop(isToken); ok {
		t.Fatal("a refusal about an earlier send moved the token")
	}
	w.deliver(CustodyMsg{Kind: CustodyAck, From: re.To, To: 0, Epoch: first.Epoch, Hop: first.Hop, Refused: RefuseEpoch})
	if m, ok := w.pop(isToken); !ok || m.To != re.To || len(w.ledgers[0]) != entries+1 {
		t.Fatalf("first refusal by the new recipient: want one retransmission to it, got %+v", m)
	}
}

// custodyOutputs splits a transcript's lines into ledger entries, messages sent and the
// rest (persist lines are left out: a catch-up in one call persists once for several
// ticks), each in order.
func custodyOutputs(lines []string) [3][]string {
	var out [3][]string
	for _, l := range lines {
		switch {
		case strings.Contains(l, " persist "):
		case strings.Contains(l, " ledger "):
			out[0] = append(out[0], l)
		case strings.Contains(l, " send "):
			out[1] = append(out[1], l)
		default:
			out[2] = append(out[2], l)
		}
	}
	return out
}

// TestCustodyCatchUpShortGaps: CatchUp over gaps that leave the next deadline at most one
// ack timeout overdue is Tick once per tick, through ack timeouts, re-sends, expiry and
// fallbacks; a gap of many ack timeouts acts once where the ticks act again and again.
func TestCustodyCatchUpShortGaps(t *testing.T) {
	acted := 0 // scenarios in which node 0 did anything during the 400 ticks
	for seed := uint64(0); seed < 30; seed++ {
		// A scenario per seed: network size, timeouts, depth, fallback, how far the walk
		// went, whether the acks in flight arrive, and a peer declared down.
		r := rand.New(rand.NewPCG(seed, 3))
		cc := testCustodyConfig()
		n := 3 + r.IntN(3)
		cc.AckTimeout, cc.Depth = []int{2, 3, 5}[r.IntN(3)], 1+r.IntN(3)
		cc.FallbackTimeout = []int{0, 20, 40}[r.IntN(3)]
		hop, acks, down := uint64(2+r.IntN(20)), r.IntN(2) == 0, r.IntN(n+1)
		a, b := newCustodyNet(t, n, cc), newCustodyNet(t, n, cc)
		for _, w := range []*custodyNet{a, b} {
			w.start(0)
			w.runTo(hop)
			if acks {
				for m, ok := w.pop(func(m CustodyMsg) bool { return !isToken(m) }); ok; m, ok = w.pop(func(m CustodyMsg) bool { return !isToken(m) }) {
					w.deliver(m)
				}
			}
			w.wire = nil // the rest in flight is lost
			if down > 0 && down < n {
				w.nodes[0].PeerDown(down)
				w.collect(0)
			}
		}
		var outA, outB []string
		a.out, b.out = &outA, &outB
		for k := 0; k < 400; k++ {
			a.tick(0)
		}
		for b.nodes[0].Now() < 400 {
			// The next deadline is after Now, so a gap of at most AckTimeout+1 leaves it
			// at most one ack timeout overdue.
			b.nodes[0].CatchUp(min(b.nodes[0].Now()+1+int64(r.IntN(cc.AckTimeout+1)), 400))
			b.collect(0)
		}
		if len(outA) > 0 {
			acted++
		}
		if !reflect.DeepEqual(custodyOutputs(outA), custodyOutputs(outB)) {
			t.Fatalf("seed %d: Tick x400:\n%v\nCatchUp:\n%v", seed, outA, outB)
		}
		if !reflect.DeepEqual(a.nodes[0].Snapshot(), b.nodes[0].Snapshot()) {
			t.Fatalf("seed %d: states differ", seed)
		}
	}
	if acted < 20 {
		t.Fatalf("node 0 acted in %d of 30 scenarios: too few to compare", acted)
	}
	// One gap of 100 ack timeouts: the unacked hand-off is retransmitted once; the ticks
	// retransmit and redirect it over and over, a forward entry per redirect.
	cc := testCustodyConfig()
	a, b := newCustodyNet(t, 3, cc), newCustodyNet(t, 3, cc)
	var outA, outB []string
	for _, w := range []*custodyNet{a, b} {
		w.start(0)
		w.wire = nil
	}
	a.out, b.out = &outA, &outB
	gap := 100 * int64(cc.AckTimeout)
	for a.nodes[0].Now() < gap {
		a.tick(0)
	}
	b.nodes[0].CatchUp(gap)
	b.collect(0)
	gotA, gotB := custodyOutputs(outA), custodyOutputs(outB)
	if len(gotB[1]) != 1 || len(gotB[0]) != 0 || len(gotA[0]) < 40 {
		t.Fatalf("gap of 100 ack timeouts: caught up %d sends, %d entries; ticked %d entries", len(gotB[1]), len(gotB[0]), len(gotA[0]))
	}
	if b.nodes[0].Now() != gap || b.nodes[0].NextDeadline() <= gap {
		t.Fatalf("after the catch-up: now %d, next deadline %d", b.nodes[0].Now(), b.nodes[0].NextDeadline())
	}
}

// TestCustodyTickToEqualsTicks: TickTo(t) leaves the machine as t-Now Tick calls do, with
// the same outputs, through ack timeouts, re-sends, expiry and fallbacks.
func TestCustodyTickToEqualsTicks(t *testing.T) {
	cc := testCustodyConfig()
	cc.Depth, cc.FallbackTimeout = 2, 40
	a, b := newCustodyNet(t, 3, cc), newCustodyNet(t, 3, cc)
	for _, w := range []*custodyNet{a, b} {
		w.start(0)
		w.runTo(12)
		w.wire = nil // everything in flight is lost
	}
	var outA, outB []string
	a.out, b.out = &outA, &outB
	for k := 0; k < 400; k++ {
		a.tick(0)
	}
	b.nodes[0].TickTo(400)
	b.collect(0)
	if a.nodes[0].Now() != 400 || b.nodes[0].Now() != 400 {
		t.Fatal("clocks differ")
	}
	// One Ready per tick against one for all: the same events, entries and messages in the
	// same order within each kind.
	if len(outA) == 0 || !reflect.DeepEqual(custodyOutputs(outA), custodyOutputs(outB)) {
		t.Fatalf("Tick x400:\n%v\nTickTo(400):\n%v", outA, outB)
	}
	if !reflect.DeepEqual(a.nodes[0].Snapshot(), b.nodes[0].Snapshot()) {
		t.Fatal("states differ")
	}
}

// TestCustodyRefusesRewinds: a token that opens a new lineage far behind the walk (more
// than Depth + RewindSlack hops below the highest token seen) is refused as a rewind with
// a stale ack while the walk is active here, and the EpochStrikes-th such token evicts
// its sender; a regeneration (a new epoch within the slack) goes on; once the walk has
// been silent for half the fallback timeout, a far-behind lineage (the slow fallback's)
// is accepted.
func TestCustodyRefusesRewinds(t *testing.T) {
	mk := tokenAt
	cc := testCustodyConfig()
	cc.FallbackTimeout = 100
	w := newCustodyNet(t, 4, cc)
	send := func(from int, tk Token) {
		w.deliver(CustodyMsg{Kind: CustodyToken, From: from, To: 0, Epoch: tk.Epoch, Hop: tk.Hop, Token: cloneToken(tk)})
		w.collect(0)
	}
	refusals := func() (n int) {
		for _, e := range w.events[0] {
			if e.Kind == CustodyRefused && e.Refusal == RefuseRewind {
				n++
			}
		}
		return n
	}
	taken := func(from int) (n int) {
		for _, e := range w.events[0] {
			if e.Kind == CustodyAccepted && e.Peer == from {
				n++
			}
		}
		return n
	}
	send(1, mk(0, 60))
	w.wire = nil // the node's own onward hand-offs are lost: it has released hops 61.. itself
	if taken(1) != 1 {
		t.Fatal("the first token was not taken")
	}
	// A member sends the walk back to hop 20 under a new epoch: refused, stale ack.
	send(2, mk(1, 20))
	if refusals() != 1 || w.nodes[0].Epoch() != 0 || taken(2) != 0 {
		t.Fatalf("rewind: %d refusals, epoch %d, taken %d", refusals(), w.nodes[0].Epoch(), taken(2))
	}
	var stale bool
	for _, m := range w.wire {
		stale = stale || (m.Kind == CustodyAck && m.To == 2 && m.Stale && m.Refused == RefuseRewind)
	}
	if !stale {
		t.Fatal("no stale rewind ack to the sender")
	}
	// Twice more: the sender is evicted; nothing of it is taken afterwards.
	send(2, mk(2, 21))
	send(2, mk(3, 22))
	if !w.nodes[0].Evicted(2) || w.count(0, CustodyEvicted) != 1 {
		t.Fatalf("not evicted after %d rewinds", refusals())
	}
	// A regeneration by another member, a new epoch within Depth + RewindSlack of the
	// highest token seen: taken.
	hi := w.nodes[0].seen.hop // the highest token accepted or released here
	send(3, mk(1, hi-uint64(cc.Depth)-RewindSlack))
	if w.nodes[0].Epoch() != 1 || taken(3) != 1 {
		t.Fatalf("regeneration: epoch %d, taken %d", w.nodes[0].Epoch(), taken(3))
	}
	// Chained lineages cannot walk the node back: the reference is the highest hop seen in
	// any epoch, so a second new lineage just inside the slack of the first is far behind
	// the walk.
	send(1, mk(2, hi-uint64(cc.Depth)-RewindSlack-3))
	if taken(1) != 1 || refusals() != 4 {
		t.Fatalf("chained rewind: taken %d, refusals %d", taken(1), refusals())
	}
	// A member may open LineageAllowance lineages here, plus one per member reported down:
	// member 3 opened one; its second passes, its third is refused until a member is
	// reported down.
	hi = w.nodes[0].maxHop
	near := func(e uint64) Token { return mk(e, hi-uint64(cc.Depth)-RewindSlack) }
	send(3, near(w.nodes[0].Epoch()+1))
	if taken(3) != 2 {
		t.Fatalf("second lineage of member 3: taken %d", taken(3))
	}
	w.wire = nil
	hi = w.nodes[0].maxHop
	send(3, near(w.nodes[0].Epoch()+1))
	if taken(3) != 2 || refusals() != 5 {
		t.Fatalf("third lineage of member 3: taken %d, refusals %d", taken(3), refusals())
	}
	w.nodes[0].PeerDown(1)
	w.collect(0)
	w.wire = nil
	hi = w.nodes[0].maxHop
	send(3, near(w.nodes[0].Epoch()+1))
	if taken(3) != 3 {
		t.Fatalf("after a member went down: taken %d", taken(3))
	}
	// After half the fallback timeout without taking a token, a lineage far behind (a fallback's) is
	// taken.
	for k := 0; k < int(cc.FallbackTimeout)/2+1; k++ {
		w.nodes[0].Tick()
	}
	w.collect(0)
	w.wire = nil
	send(1, mk(w.nodes[0].Epoch()+1, 5))
	if taken(1) != 2 {
		t.Fatalf("fallback lineage after silence: epoch %d, taken %d", w.nodes[0].Epoch(), taken(1))
	}
}

// TestCustodyRestoreKeepsAttackMemory: what the hostile-member rules remember survives a
// restart from the snapshot. A node that took a token on a hand-off it was shown takes,
// after Restore (also when the token was only held, acked before its step), no second
// token of the same epoch on that evidence and one token of a later epoch (the
// regeneration made while it was down: EvidenceUse), then none: one more update per
// evidence per restart. The rewind rule's highest hop and each member's new lineages
// survive too, so a restart does not reopen the rewind the node refused before.
func TestCustodyRestoreKeepsAttackMemory(t *testing.T) {
	mk := tokenAt
	cc := testCustodyConfig()
	cc.FallbackTimeout = 100
	ev := Evidence{Present: true, Signer: 2, Epoch: 0, Hop: 59}
	refused := func(w *custodyNet, why CustodyRefusal) (n int) {
		for _, e := range w.events[0] {
			if e.Kind == CustodyRefused && e.Refusal == why {
				n++
			}
		}
		return n
	}
	for _, heldOnly := range []bool{false, true} {
		w := newCustodyNet(t, 4, cc)
		sh := ev
		if err := w.nodes[0].Step(CustodyMsg{Kind: CustodyToken, From: 1, To: 0, Epoch: 0, Hop: 60, Token: mk(0, 60), Shown: &sh}); err != nil {
			t.Fatal(err)
		}
		if heldOnly {
			if rd := w.nodes[0].Ready(); rd.Held == nil || rd.Held.Shown == nil || *rd.Held.Shown != ev {
				t.Fatalf("held token without the evidence it was taken on: %+v", rd.Held)
			}
		} else {
			w.collect(0)
			w.wire = nil
		}
		// member 3 opens a lineage here (its first new epoch)
		if !heldOnly {
			w.deliver(CustodyMsg{Kind: CustodyToken, From: 3, To: 0, Epoch: 1, Hop: 58, Token: mk(1, 58)})
			w.collect(0)
			w.wire = nil
		}
		s := restartSnapshot(w.nodes[0].Snapshot())
		if !heldOnly && (len(s.Used) != 1 || s.MaxHop < 60 || s.Raises == nil || s.Raises[3] != 1) {
			t.Fatalf("snapshot without the rules' memory: used %v, max hop %d, raises %v", s.Used, s.MaxHop, s.Raises)
		}
		fresh := newCustodyNet(t, 4, cc)
		c := fresh.nodes[0]
		if err := c.Restore(&Checkpoint{Node: 0, Updates: w.nodes[0].Machine().Updates(), U: w.nodes[0].Machine().U()}, s); err != nil {
			t.Fatal(err)
		}
		fresh.collect(0)
		fresh.wire = nil
		fresh.events[0] = nil
		accepted := func(e uint64) bool {
			for _, x := range fresh.events[0] {
				if x.Kind == CustodyAccepted && x.Epoch == e {
					return true
				}
			}
			return false
		}
		sh2 := ev
		if heldOnly {
			// The same evidence in the same epoch (above the fence): refused as reused.
			c.Step(CustodyMsg{Kind: CustodyToken, From: 1, To: 0, Epoch: 0, Hop: 90, Token: mk(0, 90), Shown: &sh2})
			fresh.collect(0)
			if refused(fresh, RefuseEvidence) != 1 || accepted(0) {
				t.Fatalf("a second token of the same epoch on a used evidence was not refused after the restart: %+v", fresh.events[0])
			}
			fresh.events[0] = nil
		}
		// The same evidence under a later epoch (above the fence): taken once.
		c.Step(CustodyMsg{Kind: CustodyToken, From: 1, To: 0, Epoch: 5, Hop: 61, Token: mk(5, 61), Shown: &sh2})
		fresh.collect(0)
		if refused(fresh, RefuseEvidence) != 0 || !accepted(5) {
			t.Fatalf("held only %v: the first token of a later epoch on an evidence used before the restart was not taken: %+v", heldOnly, fresh.events[0])
		}
		fresh.wire = nil
		// Again, under a still later epoch: refused as reused.
		sh3 := ev
		c.Step(CustodyMsg{Kind: CustodyToken, From: 1, To: 0, Epoch: 6, Hop: 70, Token: mk(6, 70), Shown: &sh3})
		fresh.collect(0)
		if refused(fresh, RefuseEvidence) != 1 || accepted(6) {
			t.Fatalf("held only %v: a second renewal of a used evidence was not refused: %+v", heldOnly, fresh.events[0])
		}
		if used := c.Snapshot().Used; len(used) != 1 || used[0].ID.Epoch != 5 {
			t.Fatalf("held only %v: evidence uses after the renewal: %+v", heldOnly, used)
		}
		if heldOnly {
			continue
		}
		// A rewind far behind the highest hop seen before the restart: refused.
		c.Step(CustodyMsg{Kind: CustodyToken, From: 2, To: 0, Epoch: 7, Hop: 10, Token: mk(7, 10)})
		fresh.collect(0)
		if refused(fresh, RefuseRewind) != 1 {
			t.Fatalf("a rewind was taken after the restart: %+v", fresh.events[0])
		}
		// The counts before the restart, plus member 1's renewal (a new lineage here).
		want := append([]int(nil), s.Raises...)
		want[1]++
		if !reflect.DeepEqual(c.Snapshot().Raises, want) {
			t.Fatalf("lineage counts after the restart: %v, want %v", c.Snapshot().Raises, want)
		}
	}
}

// TestCustodyRestoreHeldFinal: a node restored with a held token of hop K (acked, stopped
// before it released the final model) finishes from it: Final and Done, no update, no
// ledger entry, no message.
func TestCustodyRestoreHeldFinal(t *testing.T) {
	cc := testCustodyConfig()
	cc.Hops = 30
	w := newCustodyNet(t, 3, cc)
	tok := NewToken("run", 0, 3, consensus.Regularizer{}, 1)
	tok.Hop = 30
	c := w.nodes[1]
	if err := c.Restore(nil, CustodySnapshot{Held: &CustodyHeld{Token: tok, Pred: 0, PredHop: 30}}); err != nil {
		t.Fatal(err)
	}
	rd := c.Ready()
	if rd.Final == nil || rd.Final.Token.Hop != 30 || !rd.Done || len(rd.Ledger) != 0 || len(rd.Outbox) != 0 || c.Machine().Updates() != 0 {
		t.Fatalf("restored with the token of hop K: %+v, %d updates", rd, c.Machine().Updates())
	}
	c.Advance(rd)
	if !c.Done() || c.HasReady() {
		t.Fatal("the walk is not over after the final")
	}
}

// tokenAt returns a token of the custody tests' run (dimension 3) at (epoch, hop).
func tokenAt(epoch, hop uint64) Token {
	tk := NewToken("run", 0, 3, consensus.Regularizer{}, 1)
	tk.Epoch, tk.Hop = epoch, hop
	return tk
}
