package walk

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
)

// Custody wraps one node's walk Machine with token fault tolerance (docs/fault-tolerance.md):
//
//   - custody: a sender keeps a backup of every token it releases and re-sends the same
//     release when the recipient does not ack within AckTimeout ticks, or to another live
//     peer at once when the recipient is reported down before acking;
//   - a backup chain of depth Depth: a backup is kept until the token is Depth acked
//     hand-offs further on. Each ack starts a Release that travels back along the path,
//     one predecessor at a time, carrying only a distance. A node whose successor goes
//     down before the backup is released regenerates the token from the backup with a new
//     epoch (higher than any it has seen);
//   - fencing: every node keeps the highest token it has accepted or released, ordered by
//     (epoch, hop, digest of z and zhat), and the highest epoch it has seen. A token not
//     above both is refused with a stale ack; a retransmission of a token it accepted
//     lately is acked as a duplicate without being processed. Two copies of one epoch
//     are thus merged deterministically: the higher hop goes on, then the higher digest;
//   - every re-send goes to the same peer once (identical bytes, after an ack timeout),
//     then to another live peer;
//   - a slow fallback: a node that has seen no token, ack or release for FallbackTimeout
//     ticks re-sends the last token it released, with a new epoch.
//
// Liveness input (PeerDown/PeerUp) comes from the driver, which derives it from heartbeats
// that every node sends on a fixed schedule whatever it holds, so liveness traffic says
// nothing about the path. Only direct hand-offs carry token data; acks and releases carry
// an (epoch, hop) pair and a distance.
//
// Every token message in the Outbox is covered by a ledger entry in the same Ready: the
// machine's own entry for a fresh hand-off, a "forward" entry naming the new recipient for
// every re-send, regeneration and fallback. Custody is single-threaded, does no I/O and
// counts time in Tick calls.
type Custody struct {
	cfg     CustodyConfig
	wc      Config
	m       *Machine
	dim     int
	now     int64
	down    []bool
	seen    tokenMark              // highest token accepted or released here (the fence)
	epoch   uint64                 // highest epoch accepted or created here (regeneration, fallback)
	recent  [recentMarks]tokenMark // tokens accepted lately, to ack retransmissions
	nrecent int
	rpos    int
	backups []*backup
	cold    *Token // last token this node released (its own release), for the fallback
	active  int64  // last tick with token, ack or release activity
	seq     uint64
	names   []string

	ledger []privacy.Entry
	state  *Checkpoint
	outbox []CustodyMsg
	events []CustodyEvent
}

// CustodyConfig configures the fault-tolerance layer of one node.
type CustodyConfig struct {
	// Rand chooses the peer of a re-send or regeneration (uniform over live neighbours,
	// never self). Required. It is separate from the walk's next-hop source so that a
	// fault-free run takes exactly the plain walk's path.
	Rand *rand.Rand
	// AckTimeout is the number of ticks a sender waits for an ack before re-sending the
	// same release to another peer. It must exceed the round trip (2x the largest message
	// latency); 20 assumes ticks of the order of a tenth of the round trip.
	AckTimeout int
	// Depth is D >= 1: a backup is dropped once the token is D acked hand-offs further on.
	// The token is lost (until the fallback) only if the holder and the D live backup
	// holders behind it all fail together; 8 makes that 0.25^8 ~ 1.5e-5 when a quarter of
	// the nodes crash at once.
	Depth int
	// FallbackTimeout is the number of ticks without any token, ack or release after which
	// a node re-sends its last released token with a new epoch; 0 disables it. It must be
	// long compared with the walk's return time to a node (about n hops), or spurious
	// fallbacks roll the walk back: 20*n hop times gives a spurious rate near n*e^-20.
	// Acked backups that saw no progress for this long are dropped as well.
	FallbackTimeout int
}

// DefaultCustodyConfig returns AckTimeout 20, Depth 8 and no fallback; Rand must be set.
func DefaultCustodyConfig() CustodyConfig {
	return CustodyConfig{AckTimeout: 20, Depth: 8}
}

// Validate checks the configuration.
func (c CustodyConfig) Validate() error {
	switch {
	case c.Rand == nil:
		return errors.New("walk: custody needs a random source for re-send targets")
	case c.AckTimeout < 1:
		return fmt.Errorf("walk: ack timeout must be >= 1 tick, got %d", c.AckTimeout)
	case c.Depth < 1:
		return fmt.Errorf("walk: custody depth must be >= 1, got %d", c.Depth)
	case c.FallbackTimeout < 0:
		return fmt.Errorf("walk: fallback timeout must be >= 0, got %d", c.FallbackTimeout)
	}
	return nil
}

// CustodyKind is the type of a custody message.
type CustodyKind uint8

// Custody message kinds.
const (
	// CustodyToken hands the token over; the only kind that carries token data.
	CustodyToken CustodyKind = iota + 1
	// CustodyAck: the receiver holds (Epoch, Hop) durably (or refused it, Stale).
	CustodyAck
	// CustodyRelease: the token is Dist acked hand-offs beyond the receiver's backup
	// (Epoch, Hop). Retire asks the receiver to drop that backup and pass the request back
	// (the token of that lineage was fenced).
	CustodyRelease
)

// CustodyMsg is one custody message between two nodes.
type CustodyMsg struct {
	Kind     CustodyKind
	From, To int
	// Epoch and Hop identify the token: the token sent (CustodyToken), the token acked
	// (CustodyAck), or the receiver's backup (CustodyRelease).
	Epoch, Hop uint64
	// Token is set on CustodyToken only. Its vectors are owned by the message.
	Token Token
	// Stale (CustodyAck): the receiver refused the token because it had accepted a higher
	// one; the sender drops its backup.
	Stale bool
	// Dist (CustodyRelease): acked hand-offs between the receiver's backup and the token.
	Dist int
	// Retire (CustodyRelease): the lineage was fenced; drop the backup and pass it back.
	Retire bool
}

// CustodyEventKind names a custody event.
type CustodyEventKind uint8

// Custody event kinds.
const (
	CustodyAccepted      CustodyEventKind = iota + 1 // token accepted and stepped (Peer: sender)
	CustodyWalk                                      // a walk step (Walk, Hop, Peer: next hop)
	CustodyFenced                                    // a stale token was refused (Peer: sender)
	CustodyDuplicate                                 // an equal token was acked without processing
	CustodyResent                                    // the same release was sent to another peer
	CustodyRegenerated                               // a backup was re-released with a new epoch
	CustodyFallback                                  // the last release was re-sent after silence
	CustodyDropped                                   // a backup was released (Depth reached)
	CustodyRetired                                   // a backup was dropped: its token was fenced
	CustodyNoPeer                                    // no live peer to re-send to; retried later
	CustodyRetransmitted                             // the same token was sent again to the same peer
)

// CustodyEvent reports what the custody layer did, for logs, metrics and tests.
type CustodyEvent struct {
	Kind  CustodyEventKind
	Walk  EventKind // CustodyWalk only
	Epoch uint64
	Hop   uint64
	Peer  int
}

// CustodyReady is what the driver must do now, in this order, before calling Advance.
type CustodyReady struct {
	// Ledger: privacy ledger entries. MUST be durable BEFORE any Outbox message is sent.
	// Every CustodyToken in Outbox is covered by one entry (same epoch, hop, recipient).
	Ledger []privacy.Entry
	// State: the walk machine's checkpoint (u_i, K_i); persist before sending. nil when
	// unchanged.
	State *Checkpoint
	// Outbox: messages to send after Ledger and State are durable.
	Outbox []CustodyMsg
	// Events: informational.
	Events []CustodyEvent
}

// BackupInfo describes one backup held by a node (for tests and status pages).
type BackupInfo struct {
	Epoch, Hop uint64
	Digest     uint64
	To         int
	Acked      bool
	Dist       int
}

// recentMarks is how many accepted tokens a node remembers to recognise a retransmission.
const recentMarks = 16

type backup struct {
	tok      Token // the release as sent (epoch updated on regeneration)
	to       int   // current recipient
	acked    bool
	retried  bool // the current recipient got one retransmission
	pending  bool // no live peer was available; retry on Tick or PeerUp
	deadline int64
	dist     int   // acked hand-offs known beyond this backup
	progress int64 // last tick of ack or release for this backup
	pred     int   // node this token came from (-1: start, fallback)
	predE    uint64
	predH    uint64
}

// tokenMark orders tokens: epoch, then hop, then digest.
type tokenMark struct {
	epoch, hop, digest uint64
	set                bool
}

func (a tokenMark) cmp(b tokenMark) int {
	switch {
	case a.set != b.set:
		if a.set {
			return 1
		}
		return -1
	case a.epoch != b.epoch:
		return cmpU(a.epoch, b.epoch)
	case a.hop != b.hop:
		return cmpU(a.hop, b.hop)
	}
	return cmpU(a.digest, b.digest)
}

func cmpU(a, b uint64) int {
	if a < b {
		return -1
	}
	if a > b {
		return 1
	}
	return 0
}

func markOf(t *Token) tokenMark {
	return tokenMark{epoch: t.Epoch, hop: t.Hop, digest: TokenDigest(*t), set: true}
}

// TokenDigest is the merge tie-break: FNV-1a over the IEEE-754 bits of z then zhat. Two
// copies of one release have the same digest; copies that were stepped differently almost
// surely do not.
func TokenDigest(t Token) uint64 {
	h := uint64(0xcbf29ce484222325)
	for _, v := range [2][]float64{t.Z, t.Zhat} {
		for _, x := range v {
			b := math.Float64bits(x)
			for k := 0; k < 8; k++ {
				h ^= b & 0xff
				h *= 0x100000001b3
				b >>= 8
			}
		}
	}
	return h
}

func cloneToken(t Token) Token {
	t.Z = append([]float64(nil), t.Z...)
	t.Zhat = append([]float64(nil), t.Zhat...)
	return t
}

// NewCustody builds node wc.Node's walk machine (see New) and its custody layer.
func NewCustody(wc Config, loss *consensus.LocalLoss, dim int, cc CustodyConfig) (*Custody, error) {
	if err := cc.Validate(); err != nil {
		return nil, err
	}
	m, err := New(wc, loss, dim)
	if err != nil {
		return nil, err
	}
	c := &Custody{cfg: cc, wc: wc, m: m, dim: dim, down: make([]bool, wc.Nodes), names: wc.Names}
	return c, nil
}

// Machine returns the wrapped walk machine (read-only use: Updates, U).
func (c *Custody) Machine() *Machine { return c.m }

// Now returns the number of Tick calls so far.
func (c *Custody) Now() int64 { return c.now }

// Epoch returns the highest epoch this node accepted or created.
func (c *Custody) Epoch() uint64 { return c.epoch }

// Accepts reports whether a token (epoch, hop, TokenDigest) would be accepted now: its
// epoch is not below Epoch and it is above every token this node accepted or released,
// in the order (epoch, hop, digest). Including its own releases means a node never
// releases two different tokens under one (epoch, hop). A driver may use it to answer a
// stale hand-off before decoding the vectors.
func (c *Custody) Accepts(epoch, hop, digest uint64) bool {
	return c.accepts(tokenMark{epoch: epoch, hop: hop, digest: digest, set: true})
}

func (c *Custody) accepts(m tokenMark) bool { return m.epoch >= c.epoch && m.cmp(c.seen) > 0 }

func (c *Custody) raise(m tokenMark) {
	if m.cmp(c.seen) > 0 {
		c.seen = m
	}
}

// Backups describes the backups the node holds, oldest first.
func (c *Custody) Backups() []BackupInfo {
	out := make([]BackupInfo, 0, len(c.backups))
	for _, b := range c.backups {
		out = append(out, BackupInfo{Epoch: b.tok.Epoch, Hop: b.tok.Hop, Digest: TokenDigest(b.tok), To: b.to, Acked: b.acked, Dist: b.dist})
	}
	return out
}

// HasReady reports whether a Ready is pending.
func (c *Custody) HasReady() bool {
	return len(c.ledger) > 0 || len(c.outbox) > 0 || len(c.events) > 0 || c.state != nil
}

// Ready returns the pending work; the slices are reused after Advance.
func (c *Custody) Ready() CustodyReady {
	return CustodyReady{Ledger: c.ledger, State: c.state, Outbox: c.outbox, Events: c.events}
}

// Advance tells the custody layer that the driver applied the Ready.
func (c *Custody) Advance(CustodyReady) {
	c.ledger = c.ledger[:0]
	c.outbox = c.outbox[:0]
	c.events = c.events[:0]
	c.state = nil
}

// Start injects the initial token at this node (the starter): it is stepped as if
// received, with no predecessor to ack.
func (c *Custody) Start(t Token) error { return c.onToken(-1, t) }

// Errors of Step.
var (
	// ErrCustodyKind is returned for a message of unknown kind.
	ErrCustodyKind = errors.New("walk: unknown custody message kind")
	// ErrCustodyPeer is returned for a message from or to a node out of range or not to us.
	ErrCustodyPeer = errors.New("walk: custody message from an unknown peer or not addressed to this node")
	// ErrCustodyPayload is returned for an ack or release that carries token data.
	ErrCustodyPayload = errors.New("walk: custody ack or release carries token data")
)

// Step processes an inbound custody message. A malformed token is refused with the walk
// machine's error (ErrForeign, ErrDim, ErrNotFinite) and not acked.
func (c *Custody) Step(msg CustodyMsg) error {
	if msg.From < 0 || msg.From >= c.wc.Nodes || msg.To != c.wc.Node {
		return ErrCustodyPeer
	}
	switch msg.Kind {
	case CustodyToken:
		return c.onToken(msg.From, msg.Token)
	case CustodyAck, CustodyRelease:
		if msg.Token.Z != nil || msg.Token.Zhat != nil {
			return ErrCustodyPayload
		}
		if msg.Kind == CustodyAck {
			c.onAck(msg)
		} else {
			c.onRelease(msg)
		}
		return nil
	}
	return ErrCustodyKind
}

func (c *Custody) event(k CustodyEventKind, epoch, hop uint64, peer int) {
	c.events = append(c.events, CustodyEvent{Kind: k, Epoch: epoch, Hop: hop, Peer: peer})
}

func (c *Custody) send(m CustodyMsg) {
	m.From = c.wc.Node
	c.outbox = append(c.outbox, m)
}

func (c *Custody) onToken(from int, t Token) error {
	if t.Run != c.wc.Run || t.Walk != c.wc.Walk {
		return ErrForeign
	}
	if len(t.Z) != c.dim || len(t.Zhat) != c.dim {
		return ErrDim
	}
	for k := range t.Z {
		if !finite(t.Z[k]) || !finite(t.Zhat[k]) {
			return ErrNotFinite
		}
	}
	in := markOf(&t)
	for k := 0; k < c.nrecent; k++ {
		if c.recent[k] == in {
			// A retransmission of a token this node already accepted (its ack was lost).
			c.event(CustodyDuplicate, t.Epoch, t.Hop, from)
			if from >= 0 {
				c.send(CustodyMsg{Kind: CustodyAck, To: from, Epoch: t.Epoch, Hop: t.Hop})
			}
			return nil
		}
	}
	if !c.accepts(in) {
		c.event(CustodyFenced, t.Epoch, t.Hop, from)
		if from >= 0 {
			c.send(CustodyMsg{Kind: CustodyAck, To: from, Epoch: t.Epoch, Hop: t.Hop, Stale: true})
		}
		return nil
	}
	// Own the vectors: the walk machine updates them in place.
	t = cloneToken(t)
	predE, predH := t.Epoch, t.Hop
	first := true
	for {
		if err := c.m.Step(Message{From: from, Token: t}); err != nil {
			if first {
				return err
			}
			// Cannot happen: the machine accepted this token's dimension and values on
			// the previous round. Keep custody of what was released so far.
			return fmt.Errorf("walk: custody self hand-off: %w", err)
		}
		rd := c.m.Ready()
		for _, e := range rd.Ledger {
			c.seq++
			e.Seq = c.seq
			c.ledger = append(c.ledger, e)
		}
		c.state = rd.State
		for _, e := range rd.Events {
			c.events = append(c.events, CustodyEvent{Kind: CustodyWalk, Walk: e.Kind, Epoch: t.Epoch, Hop: e.Hop, Peer: e.To})
		}
		env := rd.Outbox[0]
		c.m.Advance(rd)
		if first {
			first = false
			c.active = c.now
			if t.Epoch > c.epoch {
				c.epoch = t.Epoch
				c.dropBelow(t.Epoch)
			}
			c.raise(in)
			c.recent[c.rpos] = in
			c.rpos = (c.rpos + 1) % recentMarks
			c.nrecent = min(c.nrecent+1, recentMarks)
			c.event(CustodyAccepted, predE, predH, from)
			if from >= 0 {
				c.send(CustodyMsg{Kind: CustodyAck, To: from, Epoch: predE, Hop: predH})
			}
		}
		t = env.Token
		c.raise(markOf(&t))
		if env.To != c.wc.Node {
			c.release(env.To, t, from, predE, predH)
			return nil
		}
		// A self hand-off: step again at once; the ledger already names this node.
	}
}

// dropBelow drops local backups of epochs below e: a newer lineage exists and carries its
// own backups. No message is sent, so the older lineage's predecessors keep theirs until
// released, retired or expired.
func (c *Custody) dropBelow(e uint64) {
	k := 0
	for _, b := range c.backups {
		if b.tok.Epoch < e {
			c.event(CustodyRetired, b.tok.Epoch, b.tok.Hop, b.to)
			continue
		}
		c.backups[k] = b
		k++
	}
	c.backups = c.backups[:k]
}

// release hands a freshly stepped token to its recipient (covered by the machine's ledger
// entry) and keeps a backup.
func (c *Custody) release(to int, t Token, pred int, predE, predH uint64) {
	b := &backup{tok: cloneToken(t), to: to, pred: pred, predE: predE, predH: predH, progress: c.now}
	c.backups = append(c.backups, b)
	c.cold = &b.tok
	if c.down[to] {
		// The machine chose a peer known to be down: re-send at once (the machine's
		// entry stays, an over-count on the safe side).
		c.resend(b, CustodyResent)
		return
	}
	b.deadline = c.now + int64(c.cfg.AckTimeout)
	c.send(CustodyMsg{Kind: CustodyToken, To: to, Epoch: t.Epoch, Hop: t.Hop, Token: cloneToken(t)})
}

func (c *Custody) name(i int) string {
	if c.names != nil {
		return c.names[i]
	}
	return fmt.Sprint(i)
}

// pickPeer returns a live neighbour other than self, preferring one other than avoid; -1
// when none is live.
func (c *Custody) pickPeer(avoid int) int {
	var cand []int
	if c.wc.Graph == nil || c.wc.Graph.Complete {
		cand = make([]int, 0, c.wc.Nodes)
		for j := 0; j < c.wc.Nodes; j++ {
			if j != c.wc.Node && !c.down[j] && j != avoid {
				cand = append(cand, j)
			}
		}
	} else {
		for _, j := range c.wc.Graph.Neighbors(c.wc.Node) {
			if j != c.wc.Node && !c.down[j] && j != avoid {
				cand = append(cand, j)
			}
		}
	}
	if len(cand) == 0 {
		if avoid >= 0 && avoid != c.wc.Node && !c.down[avoid] {
			return avoid
		}
		return -1
	}
	return cand[c.cfg.Rand.IntN(len(cand))]
}

// resend sends backup b's token (same release; epoch already set by the caller) to a new
// live peer, charging a forward entry that names it.
func (c *Custody) resend(b *backup, why CustodyEventKind) {
	to := c.pickPeer(b.to)
	if to < 0 {
		b.pending = true
		c.event(CustodyNoPeer, b.tok.Epoch, b.tok.Hop, b.to)
		return
	}
	b.pending, b.acked, b.retried, b.dist, b.to = false, false, false, 0, to
	b.deadline = c.now + int64(c.cfg.AckTimeout)
	b.progress = c.now
	c.seq++
	c.ledger = append(c.ledger, privacy.Entry{
		Seq: c.seq, Node: c.name(c.wc.Node), Run: c.wc.Run, Walk: b.tok.Walk, Epoch: b.tok.Epoch, Hop: b.tok.Hop,
		Mechanism: MechForward, Clip: c.wc.Clip, Lambda: c.wc.Lambda, Recipient: c.name(to),
	})
	c.event(why, b.tok.Epoch, b.tok.Hop, to)
	c.send(CustodyMsg{Kind: CustodyToken, To: to, Epoch: b.tok.Epoch, Hop: b.tok.Hop, Token: cloneToken(b.tok)})
}

// retransmit sends backup b's token again to its current recipient once, after an ack
// timeout. The bytes are identical and the recipient already had them in its view (or
// never got them), so no ledger entry is added: the first one covers it. A recipient that
// accepted it answers with a duplicate ack.
func (c *Custody) retransmit(b *backup) {
	b.retried = true
	b.deadline = c.now + int64(c.cfg.AckTimeout)
	c.event(CustodyRetransmitted, b.tok.Epoch, b.tok.Hop, b.to)
	c.send(CustodyMsg{Kind: CustodyToken, To: b.to, Epoch: b.tok.Epoch, Hop: b.tok.Hop, Token: cloneToken(b.tok)})
}

// regenerate re-releases backup b under a new epoch above everything this node has seen.
func (c *Custody) regenerate(b *backup, why CustodyEventKind) {
	b.tok.Epoch = max(c.epoch, b.tok.Epoch) + 1
	c.epoch = b.tok.Epoch
	c.raise(markOf(&b.tok))
	c.dropBelow(b.tok.Epoch)
	c.resend(b, why)
}

func (c *Custody) find(epoch, hop uint64) (int, *backup) {
	for i, b := range c.backups {
		if b.tok.Epoch == epoch && b.tok.Hop == hop {
			return i, b
		}
	}
	return -1, nil
}

func (c *Custody) remove(i int) {
	c.backups = append(c.backups[:i], c.backups[i+1:]...)
}

func (c *Custody) onAck(msg CustodyMsg) {
	i, b := c.find(msg.Epoch, msg.Hop)
	if b == nil {
		return
	}
	if msg.Stale {
		if msg.From != b.to {
			return // an earlier recipient refused an older send; the current one decides
		}
		c.remove(i)
		c.event(CustodyRetired, b.tok.Epoch, b.tok.Hop, b.to)
		if b.pred >= 0 {
			c.send(CustodyMsg{Kind: CustodyRelease, To: b.pred, Epoch: b.predE, Hop: b.predH, Retire: true})
		}
		return
	}
	c.active = c.now
	b.acked, b.to, b.pending = true, msg.From, false
	b.progress = c.now
	if b.dist < 1 {
		b.dist = 1
	}
	if b.dist >= c.cfg.Depth {
		c.remove(i)
		c.event(CustodyDropped, b.tok.Epoch, b.tok.Hop, b.to)
	}
	if b.pred >= 0 && c.cfg.Depth >= 2 {
		c.send(CustodyMsg{Kind: CustodyRelease, To: b.pred, Epoch: b.predE, Hop: b.predH, Dist: 2})
	}
}

func (c *Custody) onRelease(msg CustodyMsg) {
	i, b := c.find(msg.Epoch, msg.Hop)
	if b == nil || msg.From != b.to {
		return // unknown, already dropped, or from a branch this node re-sent away from
	}
	c.active = c.now
	b.progress = c.now
	if msg.Retire {
		c.remove(i)
		c.event(CustodyRetired, b.tok.Epoch, b.tok.Hop, b.to)
		if b.pred >= 0 {
			c.send(CustodyMsg{Kind: CustodyRelease, To: b.pred, Epoch: b.predE, Hop: b.predH, Retire: true})
		}
		return
	}
	if msg.Dist <= b.dist {
		return // an older wave overtaken by a newer one
	}
	old := b.dist
	b.dist = msg.Dist
	if b.dist >= c.cfg.Depth {
		c.remove(i)
		c.event(CustodyDropped, b.tok.Epoch, b.tok.Hop, b.to)
	}
	// Pass the wave back unless the predecessor was already told it is Depth behind
	// (old = Depth-1). Releases may overtake each other, so dist can jump by more than
	// one; the predecessor must still get its final release.
	if b.pred >= 0 && old < c.cfg.Depth-1 {
		c.send(CustodyMsg{Kind: CustodyRelease, To: b.pred, Epoch: b.predE, Hop: b.predH, Dist: b.dist + 1})
	}
}

// PeerDown tells the node that peer j stopped sending heartbeats. Unacked tokens sent to j
// are re-sent elsewhere; backups acked by j but not yet released are regenerated.
func (c *Custody) PeerDown(j int) {
	if j < 0 || j >= c.wc.Nodes || j == c.wc.Node || c.down[j] {
		return
	}
	c.down[j] = true
	for _, b := range append([]*backup(nil), c.backups...) {
		if b.to != j || b.pending {
			continue
		}
		if !b.acked {
			c.resend(b, CustodyResent)
		} else {
			c.regenerate(b, CustodyRegenerated)
		}
	}
}

// PeerUp tells the node that peer j is sending heartbeats again.
func (c *Custody) PeerUp(j int) {
	if j < 0 || j >= c.wc.Nodes || j == c.wc.Node || !c.down[j] {
		return
	}
	c.down[j] = false
	c.retryPending()
}

func (c *Custody) retryPending() {
	for _, b := range c.backups { // resend does not change the slice
		if b.pending {
			c.resend(b, CustodyResent)
		}
	}
}

// Tick advances time by one tick: ack timeouts, pending re-sends, backup expiry and the
// fallback.
func (c *Custody) Tick() {
	c.now++
	c.retryPending()
	fb := int64(c.cfg.FallbackTimeout)
	k := 0
	for _, b := range c.backups { // resend does not change the slice; compacted in place
		switch {
		case !b.acked && !b.pending && c.now >= b.deadline:
			if !b.retried && !c.down[b.to] {
				c.retransmit(b)
			} else {
				c.resend(b, CustodyResent)
			}
		case fb > 0 && b.acked && c.now-b.progress >= fb:
			c.event(CustodyRetired, b.tok.Epoch, b.tok.Hop, b.to)
			continue
		}
		c.backups[k] = b
		k++
	}
	c.backups = c.backups[:k]
	if fb > 0 && c.cold != nil && c.now-c.active >= fb {
		c.active = c.now
		t := cloneToken(*c.cold)
		t.Epoch = max(c.epoch, t.Epoch) + 1
		c.epoch = t.Epoch
		c.backups = c.backups[:0]
		b := &backup{tok: t, to: -1, pred: -1, progress: c.now}
		c.backups = append(c.backups, b)
		c.cold = &b.tok
		c.raise(markOf(&b.tok))
		c.resend(b, CustodyFallback)
	}
}
