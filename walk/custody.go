package walk

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
)

// Custody wraps one node's walk Machine with token fault tolerance (docs/fault-tolerance.md).
// It is the one implementation of these rules: the fault network of testnet and the
// libp2p node drive it through one adapter (node/drive.Walk), and only map time, liveness and
// messages to its inputs.
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
//   - epoch bounds: a token whose epoch exceeds MaxEpoch or lies more than
//     EpochWindow(n) above the highest epoch seen here is refused (RefuseEpoch), and the
//     EpochStrikes-th such refusal of one sender evicts it: nothing of it is accepted for
//     the rest of the run (RefuseEvicted, event CustodyEvicted);
//   - no rewinds: a token that opens a new lineage more than Depth + RewindSlack hops
//     behind the highest token seen here, while the walk is active here, is refused
//     (RefuseRewind, a strike): a member cannot send the walk back to an old hop under a
//     new epoch (docs/fault-tolerance.md: the bound);
//   - one update per evidence: a token whose sender shows (CustodyMsg.Shown) a hand-off
//     on which this node already took another token is refused with a stale ack
//     (RefuseEvidence, EvidenceUse), after the epoch bounds and the fence; after a
//     restart, an evidence used before it buys one more token, of a later epoch (a
//     regeneration made while the node was down keeps the evidence: EvidenceUse);
//   - every re-send goes to the same peer once (identical bytes, after an ack timeout),
//     then to another live peer;
//   - a slow fallback: a node that has released a token, holds nothing (no token waiting
//     to be stepped, no unacked release) and has seen no token, ack or release for the
//     fallback timeout re-sends its last release with a new epoch. Successive fallbacks
//     without activity wait twice as long as the one before (up to 8 timeouts), and
//     after MaxFallbacks the node gives up. The timeout is CustodyConfig.FallbackTimeout,
//     or derived from the observed hop time (see CustodyConfig.FallbackFloor);
//   - termination: with CustodyConfig.Hops = K, the node that receives a token of hop K
//     (from a peer or from itself) does not step it: it emits it as Ready.Final and the
//     machine is done. StepFinal tells the machine of a final model released elsewhere.
//
// Liveness input (PeerDown/PeerUp) comes from the driver, which derives it from heartbeats
// that every node sends on a fixed schedule whatever it holds, so liveness traffic says
// nothing about the path. Only direct hand-offs carry token data; acks and releases carry
// an (epoch, hop) pair and a distance.
//
// A token accepted from a peer is held first: the Ready that acks it carries it in Held,
// which the driver makes durable before the ack goes out, and the machine steps it at
// Advance. A driver may instead hold back the ack until the Ready of that step is
// durable (node/drive's coalescing): the step's snapshot then covers the token (its mark
// among the recent ones, its evidence use), and Held need not be written. Every token message in the Outbox is covered by a ledger entry made before it
// (the machine's own entry for a fresh hand-off, a "forward" entry naming the new
// recipient for every re-send, regeneration and fallback; a retransmission of the same
// bytes to the same peer is covered by the entry of its first send), except the
// unstepped initial token of Handover, which carries no data. Custody is single-threaded,
// does no I/O and counts time in Tick calls.
type Custody struct {
	cfg     CustodyConfig
	wc      Config
	m       *Machine
	dim     int
	now     int64
	down    []bool
	strikes []int
	// maxHop is the highest hop of any token accepted or released here, in any epoch: the
	// reference of the rewind rule, which chained lineages cannot move back. raises counts
	// each member's accepted epoch raises (new lineages), downs the members reported down
	// (RewindRule: a member's raises beyond LineageAllowance + downs are unjustified).
	maxHop uint64
	raises []int
	downs  int
	// raisedAt is the tick of each member's last new lineage taken here (not part of the
	// snapshot: a restart starts the pacing again).
	raisedAt []int64
	// taken is the tick at which this node last took a token from another member (the
	// walk is active here while other members hand it tokens; its own hand-offs to itself,
	// acks and refused hand-offs do not count: a node stuck with an undeliverable token
	// and handing it to itself must still take a recovering member's lineage).
	taken   int64
	seen    tokenMark   // highest token accepted or released here (the fence)
	epoch   uint64      // highest epoch accepted or created here (regeneration, fallback)
	recent  []tokenMark // tokens accepted lately (oldest first), to ack retransmissions
	backups []*backup
	last    *release // last token this node released (its own release), for the fallback
	held    *held    // accepted and not yet stepped
	evUsed  EvidenceUse
	fb      fallbackState
	paused  bool
	// stopping: the driver is stopping (Stop); not part of the snapshot.
	stopping bool
	done     bool
	seq      uint64
	names    []string

	ledger  []privacy.Entry
	state   *Checkpoint
	heldOut bool // Ready.Held: a token was accepted into held since the last Advance
	persist bool // Ready.Snapshot: the custody state must be durable before the Outbox
	outbox  []CustodyMsg
	events  []CustodyEvent
	final   *CustodyFinal
	doneOut bool
}

// Custody constants.
const (
	// MaxEpoch is the largest epoch a token or a final model may carry; regeneration and
	// the fallback stop there instead of wrapping (an epoch of 2^64-1 would otherwise
	// fence every honest token and make the next regeneration wrap to 0).
	MaxEpoch uint64 = 1 << 48
	// EpochStrikes is how many refused epoch jumps evict a member.
	EpochStrikes = 3
	// MaxFallbacks is how many fallback re-sends a node makes without any token, ack or
	// release in between before it gives up (a run whose other members are gone).
	MaxFallbacks = 8
	// FallbackHops is the number of mean return times (about n hops each) of the derived
	// fallback timeout: a node the live walk did not visit for 20*n hop times is a
	// spurious fallback, with probability about e^-20 per node and period.
	FallbackHops = 20
	// maxTicks bounds derived timeouts so that shifts and sums of ticks cannot overflow.
	maxTicks int64 = 1 << 40
)

// EpochWindow is how far above the highest epoch seen a token may be: 64, or 4 per member
// if more (every member may regenerate a few times between two of a node's visits, and a
// partition that heals may bring as many). A lineage regenerated more often than that
// while a node was cut off is refused there and recovered by the fallback.
func EpochWindow(nodes int) uint64 { return max(64, 4*uint64(max(nodes, 0))) }

// MaxBackups is the most backups a node keeps with depth D: 4D+4. Backups whose release
// wave never comes (a dead node on the path, lost releases) are bounded: the oldest go
// first (event CustodyExpired). In a run without message loss a node holds at most about
// D of them.
func MaxBackups(depth int) int { return 4*depth + 4 }

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
	// FallbackTimeout, when > 0, is the fixed number of ticks without any token, ack or
	// release after which an idle node re-sends its last released token with a new epoch.
	// It must be long compared with the walk's return time to a node (about n hops), or
	// spurious fallbacks roll the walk back: 20*n hop times gives a spurious rate near
	// n*e^-20. Acked backups that saw no progress for this long are dropped as well.
	FallbackTimeout int
	// FallbackFloor, when FallbackTimeout is 0 and FallbackFloor > 0, selects the derived
	// timeout: the larger of FallbackFloor and FallbackHops*n*h ticks, h the slowest
	// per-hop time observed here between two visits of one lineage. The floor should be
	// twice the time a regeneration needs (the down declaration plus an ack timeout), so
	// that the fallback never pre-empts the faster recovery by the backup chain. With
	// both 0 there is no fallback.
	FallbackFloor int
	// Hops is K: a node that receives a token of hop >= K releases it as the final model
	// (Ready.Final) instead of stepping it. 0 = the walk never ends.
	Hops uint64
	// PauseAtHop is fault injection for harnesses: the node that receives the token of
	// epoch 0 and this hop acks it and then stops (event CustodyPaused) before stepping
	// it; with PauseAfterStep it steps it, persists the release and stops before sending
	// it. A paused machine does nothing more (Tick is a no-op, tokens are refused busy).
	PauseAtHop     uint64
	PauseAfterStep bool
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
	case c.FallbackFloor < 0:
		return fmt.Errorf("walk: fallback floor must be >= 0, got %d", c.FallbackFloor)
	}
	return nil
}

// CustodyKind is the type of a custody message.
type CustodyKind uint8

// Custody message kinds.
const (
	// CustodyToken hands the token over; the only kind that carries token data.
	CustodyToken CustodyKind = iota + 1
	// CustodyAck: the receiver holds (Epoch, Hop) durably (or refused it, Stale or Refused).
	CustodyAck
	// CustodyRelease: the token is Dist acked hand-offs beyond the receiver's backup
	// (Epoch, Hop). Retire asks the receiver to drop that backup and pass the request back
	// (the token of that lineage was fenced).
	CustodyRelease
)

// CustodyRefusal says why a token was not taken (CustodyAck). The machine emits Busy,
// Epoch and Evicted; a driver also reports its transport's outcomes with it: Invalid for
// a frame its receiver refused before the machine (malformed, bad signature, not a
// member) and Failed for a hand-off that got no answer (connection lost, stream error).
type CustodyRefusal uint8

// Refusals.
const (
	RefuseNone CustodyRefusal = iota
	// RefuseBusy: the receiver takes no token now (paused, finished, or a token waiting
	// to be stepped); the sender tries the same peer again shortly, until its ack timeout.
	RefuseBusy
	// RefuseEpoch: the token's epoch exceeds MaxEpoch or the receiver's epoch window.
	RefuseEpoch
	// RefuseEvicted: the sender was evicted for implausible epochs.
	RefuseEvicted
	// RefuseInvalid: refused by the receiver's driver before the machine (driver input).
	RefuseInvalid
	// RefuseFailed: the hand-off got no answer (driver input).
	RefuseFailed
	// RefuseEvidence: the sender showed a hand-off it received on which this node already
	// took another token (walk.EvidenceUse): a second token of one lineage position, as
	// a member re-sending under new epochs to burn the node's updates would make. The ack
	// is Stale: the sender drops its backup.
	RefuseEvidence
	// RefuseRewind: the token opens a new lineage (an epoch above every epoch seen here)
	// far behind the walk (more than Depth + RewindSlack hops below the highest token this
	// node accepted or released) while the walk is active here: not a regeneration (a
	// backup is at most Depth acked hand-offs behind) nor the slow fallback (which fires
	// only after the walk fell silent). It counts as a strike, as an epoch jump does. The
	// ack is Stale.
	RefuseRewind
)

// RewindSlack is the margin, beyond Depth, by which a new lineage may start behind the
// highest token a node has seen (hand-offs in flight when a regeneration starts).
const RewindSlack = 4

// LineageAllowance is how many new lineages (epoch raises) a member may open at a node
// while the walk is active there, beyond one per member reported down.
const LineageAllowance = 2

// RaiseCap is how far above the highest epoch seen here a new lineage's epoch may be while
// the walk is active here or has been quiet for less than the whole fallback timeout. An
// honest new lineage is one above the epoch its creator saw, so it is far above this
// node's only when this node missed that many lineages, which takes a partition or a
// crash (the node is then quiet for the fallback timeout). Without the cap a member could
// raise a quiet node's epoch by up to the epoch window with each lineage and leave a node
// that stays quiet more than the window behind the others, where it refuses their tokens.
const RaiseCap = 8

var refusalNames = [...]string{RefuseNone: "none", RefuseBusy: "busy", RefuseEpoch: "epoch", RefuseEvicted: "evicted",
	RefuseInvalid: "invalid", RefuseFailed: "failed", RefuseEvidence: "evidence", RefuseRewind: "rewind"}

func (r CustodyRefusal) String() string {
	if int(r) < len(refusalNames) {
		return refusalNames[r]
	}
	return fmt.Sprintf("refusal%d", r)
}

// CustodyMsg is one custody message between two nodes.
type CustodyMsg struct {
	Kind     CustodyKind
	From, To int
	// Epoch and Hop identify the token: the token sent (CustodyToken), the token acked
	// (CustodyAck), or the receiver's backup (CustodyRelease).
	Epoch, Hop uint64
	// Token is set on CustodyToken only. Its vectors are owned by the message.
	Token Token
	// Evidence (CustodyToken only) is opaque to the machine: what a driver attaches to a
	// token it delivers (the proof that its sender held it), handed back on every send of
	// the release made from that token (through hand-offs to itself, re-sends,
	// regenerations and the fallback), and in Ready.Final. The machine copies what it is
	// given and shares what it sends: neither side modifies the bytes.
	Evidence []byte
	// Shown (CustodyToken only, optional) is the evidence the sender showed, as the driver
	// verified it: a token taken here is recorded with it (EvidenceUse), and a later
	// token showing the same evidence is refused (RefuseEvidence). nil: not checked.
	Shown *Evidence
	// Stale (CustodyAck): the receiver refused the token because it had accepted a higher
	// one; the sender drops its backup.
	Stale bool
	// Duplicate (CustodyAck): a retransmission of a token the receiver had accepted.
	Duplicate bool
	// Refused (CustodyAck): the token was not taken, for this reason.
	Refused CustodyRefusal
	// Dist (CustodyRelease): acked hand-offs between the receiver's backup and the token.
	Dist int
	// Retire (CustodyRelease): the lineage was fenced; drop the backup and pass it back.
	Retire bool
}

// CustodyEventKind names a custody event.
type CustodyEventKind uint8

// Custody event kinds.
const (
	CustodyAccepted      CustodyEventKind = iota + 1 // token accepted (Peer: sender, -1 for Start)
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
	CustodyRefused                                   // a token was refused (Refusal; Peer: sender)
	CustodyEvicted                                   // Peer was evicted (EpochStrikes epoch refusals)
	CustodyExpired                                   // a backup was dropped without its release wave
	CustodyGaveUp                                    // MaxFallbacks without activity: no more fallbacks
	CustodyPaused                                    // PauseAtHop reached (Hop)
	CustodyFinished                                  // the token reached hop K here (Ready.Final)
	CustodyStepFailed                                // the walk machine refused a held token (Err)
	CustodyHandedOver                                // the initial token was handed over (Handover)
)

// CustodyEvent reports what the custody layer did, for logs, metrics and tests.
type CustodyEvent struct {
	Kind    CustodyEventKind
	Walk    EventKind // CustodyWalk only
	Epoch   uint64
	Hop     uint64
	Peer    int
	Refusal CustodyRefusal // CustodyRefused only
	Err     error          // CustodyStepFailed only
}

// CustodyHeld is a token accepted and not yet stepped, with the evidence it came with and
// its sender's (epoch, hop) for the release chain (Pred -1: none).
type CustodyHeld struct {
	Token              Token
	Evidence           []byte
	Pred               int
	PredEpoch, PredHop uint64
	// Shown is the evidence the token was taken on (CustodyMsg.Shown; nil: none
	// checked): Restore records its use again, so that a restart between an ack sent
	// before the step and the snapshot of the step does not forget it.
	Shown *Evidence
}

// CustodyFinal is the token of hop K that reached this node: Token.Z is the final model.
// From is the node it came from (this node for a hand-off to itself); Evidence is what
// came with it.
type CustodyFinal struct {
	Token    Token
	Evidence []byte
	From     int
}

// CustodyReady is what the driver must do now, in this order, before calling Advance.
type CustodyReady struct {
	// Ledger: privacy ledger entries. MUST be durable BEFORE any Outbox message is sent.
	// Every CustodyToken in Outbox is covered by an entry (same epoch, hop, recipient),
	// in this Ready or, for a retransmission of the same bytes, an earlier one.
	Ledger []privacy.Entry
	// Held: a token accepted here, to be stepped at Advance. Durable BEFORE the Outbox
	// (its ack) is sent: a restart steps it (Restore with Snapshot.Held); or, when the
	// step that Advance makes is durable before the ack, not at all. nil: none new. Its
	// vectors are the machine's, valid until Advance (the step updates them).
	Held *CustodyHeld
	// State: the walk machine's checkpoint (u_i, K_i); durable before sending. nil when
	// unchanged.
	State *Checkpoint
	// Persist: the custody state changed in a way that must be durable before the Outbox
	// is sent (a new or re-sent release, a new epoch, a dropped backup): the driver
	// persists Snapshot(). Changes that need no fsync of their own (acks, release waves)
	// ride with the next one; a restart from an older snapshot keeps a backup longer or
	// resends a token its recipient answers as a duplicate.
	Persist bool
	// Outbox: messages to send after Ledger, Held, State and the snapshot are durable.
	Outbox []CustodyMsg
	// Events: informational.
	Events []CustodyEvent
	// Final: the token reached hop K here; its z is the final model (a release charged in
	// the ledger of its sender). Set once.
	Final *CustodyFinal
	// Done: the walk is over for this node (Final, or StepFinal): it takes no token and
	// sends nothing more. Set once.
	Done bool
}

// BackupInfo describes one backup held by a node (for tests and status pages).
type BackupInfo struct {
	Epoch, Hop uint64
	Digest     uint64
	To         int
	Acked      bool
	Pending    bool
	Dist       int
}

// recentMarks is how many accepted tokens a node remembers to recognise a retransmission.
const recentMarks = 16

type backup struct {
	tok      Token  // the release as sent (epoch updated on regeneration)
	ev       []byte // evidence sent with it (immutable, shared)
	to       int    // current recipient (-1 before the first send of a fallback)
	acked    bool
	retried  bool  // the current recipient got one retransmission
	pending  bool  // no live peer was available; retried at deadline or PeerUp
	deadline int64 // ack timeout (pending: next retry)
	busyAt   int64 // next retry after a busy answer (0: none)
	busyWait int64 // ticks between busy retries (doubling)
	dist     int   // acked hand-offs known beyond this backup
	progress int64 // last tick of ack or release for this backup
	pred     int   // node this token came from (-1: start, fallback)
	predE    uint64
	predH    uint64
}

type release struct {
	tok Token
	ev  []byte
}

type held struct {
	tok          Token
	ev           []byte
	pred         int
	predE, predH uint64
	shown        *Evidence
}

type fallbackState struct {
	active   int64   // last tick with token, ack or release activity
	sent     int     // fallbacks since the last activity
	gaveUp   bool    // CustodyGaveUp emitted
	hop      float64 // slowest ticks per hop observed between two visits of one lineage
	observed bool    // lastAt, lastE, lastH are set
	lastAt   int64
	lastE    uint64
	lastH    uint64
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

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
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
	c := &Custody{cfg: cc, wc: wc, m: m, dim: dim, down: make([]bool, wc.Nodes), strikes: make([]int, wc.Nodes), names: wc.Names,
		raises: make([]int, wc.Nodes), raisedAt: make([]int64, wc.Nodes)}
	return c, nil
}

// Machine returns the wrapped walk machine (read-only use: Updates, U).
func (c *Custody) Machine() *Machine { return c.m }

// Now returns the number of Tick calls so far.
func (c *Custody) Now() int64 { return c.now }

// Epoch returns the highest epoch this node accepted or created.
func (c *Custody) Epoch() uint64 { return c.epoch }

// Done reports whether the walk is over for this node (see CustodyReady.Done).
func (c *Custody) Done() bool { return c.done }

// Stop tells the machine that its driver is stopping (its process ends; it restarts
// from the last Snapshot). From then on the machine takes no new token: one it would
// accept is refused RefuseBusy, and the sender keeps it in custody and tries again. A
// token it already took (a re-send whose ack was lost, or that crossed the stop) is
// still answered as a duplicate and one below its fence as stale, by the same rules as
// before the stop: custody of it passed with the first ack (the token is durable here and
// stepped at the restart), so the sender must not redirect it. A stopping machine steps
// nothing, sends no token (no re-send, no retransmission) and its Tick does nothing; acks
// and releases still update its backups. Stop is not part of the snapshot: a restored
// machine runs.
func (c *Custody) Stop() { c.stopping = true }

// Stopping reports whether Stop was called (and no Restore since).
func (c *Custody) Stopping() bool { return c.stopping }

// quiet reports whether the machine does nothing of its own: the walk ended here, it is
// paused (CustodyConfig.PauseAtHop) or its driver is stopping (Stop).
func (c *Custody) quiet() bool { return c.done || c.paused || c.stopping }

// Paused reports whether CustodyConfig.PauseAtHop was reached.
func (c *Custody) Paused() bool { return c.paused }

// Evicted reports whether peer j was evicted for implausible epochs. A driver may use it
// to refuse j's frames before decoding them.
func (c *Custody) Evicted(j int) bool {
	return j >= 0 && j < len(c.strikes) && c.strikes[j] >= EpochStrikes
}

// Strikes returns the refused epoch jumps and rewinds of member j here (EpochStrikes of
// them evict it).
func (c *Custody) Strikes(j int) int {
	if j < 0 || j >= len(c.strikes) {
		return 0
	}
	return c.strikes[j]
}

// Holding reports whether the token is here: held (accepted, not yet stepped) or sent
// and not yet acked.
func (c *Custody) Holding() bool {
	return !c.done && !c.idle()
}

// HopTicks returns the slowest number of ticks per hop observed here between two visits
// of one lineage (0 before any).
func (c *Custody) HopTicks() float64 { return c.fb.hop }

// FallbackTimeout returns the current fallback timeout in ticks (0: no fallback): the
// fixed CustodyConfig.FallbackTimeout, or the derived one.
func (c *Custody) FallbackTimeout() int64 {
	switch {
	case c.cfg.FallbackTimeout > 0:
		return min(int64(c.cfg.FallbackTimeout), maxTicks)
	case c.cfg.FallbackFloor > 0:
		d := math.Ceil(FallbackHops * float64(c.wc.Nodes) * c.fb.hop)
		if !(d < float64(maxTicks)) {
			return maxTicks
		}
		return min(max(int64(c.cfg.FallbackFloor), int64(d)), maxTicks)
	}
	return 0
}

// Accepts reports whether a token (epoch, hop, TokenDigest) would be accepted now: its
// epoch is not below Epoch and it is above every token this node accepted or released,
// in the order (epoch, hop, digest). Including its own releases means a node never
// releases two different tokens under one (epoch, hop). A driver may use it to answer a
// stale hand-off before decoding the vectors.
func (c *Custody) Accepts(epoch, hop, digest uint64) bool {
	return c.accepts(tokenMark{epoch: epoch, hop: hop, digest: digest, set: true})
}

func (c *Custody) accepts(m tokenMark) bool { return m.epoch >= c.epoch && m.cmp(c.seen) > 0 }

// rewinds reports whether t, from member `from`, opens a new lineage (an epoch above every
// epoch seen here) that the walk's own recovery cannot explain while the walk is active
// here (a token taken within half the fallback timeout; without a fallback, always): its hop is more than Depth + RewindSlack below the highest hop
// accepted or released here in any epoch (a regeneration re-releases a backup at most
// Depth acked hand-offs behind), or the sender already opened LineageAllowance lineages
// here plus one per member reported down (a regeneration follows a crash). After half the
// fallback timeout without taking a token every lineage passes (the slow fallback's is
// legitimate), except that a member beyond its allowance opens at most one lineage per
// half fallback timeout here, the pace of a fallback: otherwise a member could raise the
// epochs of quiet nodes without end and leave a node that stays quiet more than the epoch
// window behind, where it refuses every honest token.
func (c *Custody) rewinds(t *Token, from int) bool {
	if t.Epoch <= c.epoch || c.quiet() {
		return false // not a new lineage, or this node takes no token anyway (busy)
	}
	unjustified := from >= 0 && from < len(c.raises) && c.raises[from] >= LineageAllowance+c.downs
	big := t.Epoch > c.epoch+RaiseCap
	if fb := c.FallbackTimeout(); fb > 0 && c.now-c.taken >= fb/2 {
		return big && c.now-c.taken < fb || unjustified && c.now-c.raisedAt[from] < fb/2
	}
	far := t.Hop+uint64(c.cfg.Depth)+RewindSlack < c.maxHop
	return far || unjustified || big
}

// epochRefused reports whether epoch e is out of bounds here.
func (c *Custody) epochRefused(e uint64) bool {
	return e > MaxEpoch || e > c.epoch+EpochWindow(c.wc.Nodes)
}

func (c *Custody) raise(m tokenMark) {
	if m.cmp(c.seen) > 0 {
		c.seen = m
	}
	c.maxHop = max(c.maxHop, m.hop)
}

func (c *Custody) addRecent(m tokenMark) {
	if slices.Contains(c.recent, m) {
		return
	}
	c.recent = append(c.recent, m)
	if len(c.recent) > recentMarks {
		c.recent = append(c.recent[:0], c.recent[len(c.recent)-recentMarks:]...)
	}
}

// nextEpoch is the epoch of a regeneration or fallback of a token of epoch e: above
// every epoch seen here, at most MaxEpoch.
func (c *Custody) nextEpoch(e uint64) uint64 { return min(max(c.epoch, e), MaxEpoch-1) + 1 }

// Backups describes the backups the node holds, oldest first.
func (c *Custody) Backups() []BackupInfo {
	out := make([]BackupInfo, 0, len(c.backups))
	for _, b := range c.backups {
		out = append(out, BackupInfo{Epoch: b.tok.Epoch, Hop: b.tok.Hop, Digest: TokenDigest(b.tok), To: b.to, Acked: b.acked, Pending: b.pending, Dist: b.dist})
	}
	return out
}

// HasReady reports whether a Ready is pending: outputs, or a held token to step at
// Advance.
func (c *Custody) HasReady() bool {
	return len(c.ledger) > 0 || len(c.outbox) > 0 || len(c.events) > 0 || c.state != nil || c.heldOut ||
		c.persist || c.final != nil || c.doneOut || c.stepDue()
}

func (c *Custody) stepDue() bool { return c.held != nil && !c.quiet() }

// Ready returns the pending work; the slices are reused after Advance.
func (c *Custody) Ready() CustodyReady {
	rd := CustodyReady{Ledger: c.ledger, State: c.state, Persist: c.persist, Outbox: c.outbox, Events: c.events, Final: c.final, Done: c.doneOut}
	if c.heldOut && c.held != nil {
		h := c.held
		rd.Held = &CustodyHeld{Token: h.tok, Evidence: h.ev, Pred: h.pred, PredEpoch: h.predE, PredHop: h.predH, Shown: h.shown}
	}
	return rd
}

// Advance tells the custody layer that the driver applied the Ready. A held token is then
// stepped; its outputs form the next Ready.
func (c *Custody) Advance(CustodyReady) {
	c.ledger = c.ledger[:0]
	c.outbox = c.outbox[:0]
	c.events = c.events[:0]
	c.state, c.heldOut, c.persist, c.final, c.doneOut = nil, false, false, nil, false
	if c.stepDue() {
		c.stepHeld()
	}
}

// Start injects the initial token at this node (the origin): it is accepted as if
// received, with no predecessor to ack, and stepped at Advance.
func (c *Custody) Start(t Token) error { return c.onToken(-1, t, nil, nil) }

// Handover hands the initial token t, unstepped, to node to (an origin that is not the
// walk's first holder). It carries no data (z0 = prox(0), zhat0 = 0), so its first send
// has no ledger entry; a re-send to another peer is charged as any other. The node keeps
// it as a backup until acked and released like its own releases.
func (c *Custody) Handover(to int, t Token) error {
	if to == c.wc.Node {
		return c.Start(t)
	}
	if to < 0 || to >= c.wc.Nodes {
		return ErrCustodyPeer
	}
	if err := c.check(&t); err != nil {
		return err
	}
	if c.quiet() {
		return nil
	}
	t = cloneToken(t)
	c.raise(markOf(&t))
	c.epoch = max(c.epoch, min(t.Epoch, MaxEpoch))
	b := &backup{tok: t, to: to, pred: -1, progress: c.now}
	c.keep(b)
	c.event(CustodyHandedOver, t.Epoch, t.Hop, to)
	if c.down[to] {
		c.resend(b, CustodyResent)
		return nil
	}
	b.deadline = c.now + int64(c.cfg.AckTimeout)
	c.send(CustodyMsg{Kind: CustodyToken, To: to, Epoch: t.Epoch, Hop: t.Hop, Token: cloneToken(t)})
	return nil
}

// Errors of Step.
var (
	// ErrCustodyKind is returned for a message of unknown kind.
	ErrCustodyKind = errors.New("walk: unknown custody message kind")
	// ErrCustodyPeer is returned for a message from or to a node out of range, from this
	// node itself, or not to us.
	ErrCustodyPeer = errors.New("walk: custody message from an unknown peer or not addressed to this node")
	// ErrCustodyPayload is returned for an ack or release that carries token data.
	ErrCustodyPayload = errors.New("walk: custody ack or release carries token data")
	// ErrCustodySnapshot is returned by Restore for a snapshot that does not fit the node.
	ErrCustodySnapshot = errors.New("walk: custody snapshot does not fit this node")
)

// Step processes an inbound custody message. A malformed token is refused with the walk
// machine's error (ErrForeign, ErrDim, ErrNotFinite) and not acked.
func (c *Custody) Step(msg CustodyMsg) error {
	if msg.From < 0 || msg.From >= c.wc.Nodes || msg.To != c.wc.Node || msg.From == c.wc.Node {
		return ErrCustodyPeer
	}
	switch msg.Kind {
	case CustodyToken:
		return c.onToken(msg.From, msg.Token, msg.Evidence, msg.Shown)
	case CustodyAck, CustodyRelease:
		if msg.Token.Z != nil || msg.Token.Zhat != nil || msg.Evidence != nil || msg.Shown != nil {
			return ErrCustodyPayload
		}
		if c.done {
			return nil
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

// StepFinal tells the machine that a final model of (epoch, hop) released by member from
// is known (the driver checked its evidence). It applies the epoch bounds and evictions
// of tokens to it and returns why it is refused (RefuseNone: accepted). An accepted
// final ends the walk here (Ready.Done); the choice between several finals is the
// driver's.
func (c *Custody) StepFinal(from int, epoch, hop uint64) CustodyRefusal {
	switch {
	case from < 0 || from >= c.wc.Nodes || c.cfg.Hops > 0 && hop < c.cfg.Hops:
		return RefuseInvalid
	case c.Evicted(from):
		return RefuseEvicted
	case c.epochRefused(epoch):
		c.strike(from)
		return RefuseEpoch
	}
	if !c.done {
		c.done, c.doneOut = true, true
	}
	return RefuseNone
}

func (c *Custody) event(k CustodyEventKind, epoch, hop uint64, peer int) {
	c.events = append(c.events, CustodyEvent{Kind: k, Epoch: epoch, Hop: hop, Peer: peer})
}

func (c *Custody) send(m CustodyMsg) {
	m.From = c.wc.Node
	c.outbox = append(c.outbox, m)
}

func (c *Custody) check(t *Token) error {
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
	return nil
}

// refuse answers a token that is not taken.
func (c *Custody) refuse(from int, t *Token, why CustodyRefusal) {
	c.events = append(c.events, CustodyEvent{Kind: CustodyRefused, Epoch: t.Epoch, Hop: t.Hop, Peer: from, Refusal: why})
	if from >= 0 {
		c.send(CustodyMsg{Kind: CustodyAck, To: from, Epoch: t.Epoch, Hop: t.Hop, Refused: why})
	}
}

// strike records a refused epoch jump of j; the EpochStrikes-th evicts j.
func (c *Custody) strike(j int) {
	if j < 0 || j >= len(c.strikes) || c.strikes[j] >= EpochStrikes {
		return
	}
	c.strikes[j]++
	if c.strikes[j] == EpochStrikes {
		c.event(CustodyEvicted, 0, 0, j)
	}
}

// touch records token, ack or release activity: the fallback's silence starts again.
func (c *Custody) touch() { c.fb.active, c.fb.sent, c.fb.gaveUp = c.now, 0, false }

// observe records the arrival of token (epoch, hop) from a peer: the ticks per hop since
// the previous visit of the same lineage raise the observed hop time.
func (c *Custody) observe(epoch, hop uint64) {
	f := &c.fb
	if f.observed && epoch == f.lastE && hop > f.lastH {
		if r := float64(c.now-f.lastAt) / float64(hop-f.lastH); r > f.hop {
			f.hop = r
		}
	}
	f.observed, f.lastAt, f.lastE, f.lastH = true, c.now, epoch, hop
}

func (c *Custody) onToken(from int, t Token, ev []byte, shown *Evidence) error {
	if err := c.check(&t); err != nil {
		return err
	}
	in := markOf(&t)
	if from >= 0 {
		if c.Evicted(from) {
			c.refuse(from, &t, RefuseEvicted)
			return nil
		}
		if c.epochRefused(t.Epoch) {
			c.strike(from)
			c.refuse(from, &t, RefuseEpoch)
			return nil
		}
		if c.rewinds(&t, from) {
			c.strike(from)
			c.events = append(c.events, CustodyEvent{Kind: CustodyRefused, Epoch: t.Epoch, Hop: t.Hop, Peer: from, Refusal: RefuseRewind})
			c.send(CustodyMsg{Kind: CustodyAck, To: from, Epoch: t.Epoch, Hop: t.Hop, Stale: true, Refused: RefuseRewind})
			return nil
		}
	}
	if slices.Contains(c.recent, in) {
		// A retransmission of a token this node already accepted (its ack was lost).
		c.event(CustodyDuplicate, t.Epoch, t.Hop, from)
		if from >= 0 {
			c.send(CustodyMsg{Kind: CustodyAck, To: from, Epoch: t.Epoch, Hop: t.Hop, Duplicate: true})
		}
		return nil
	}
	if !c.accepts(in) {
		c.event(CustodyFenced, t.Epoch, t.Hop, from)
		if from >= 0 {
			c.send(CustodyMsg{Kind: CustodyAck, To: from, Epoch: t.Epoch, Hop: t.Hop, Stale: true})
		}
		return nil
	}
	id := TokenID{Epoch: in.epoch, Hop: in.hop, Digest: in.digest}
	if shown != nil && c.evUsed.Reused(*shown, id) {
		c.events = append(c.events, CustodyEvent{Kind: CustodyRefused, Epoch: t.Epoch, Hop: t.Hop, Peer: from, Refusal: RefuseEvidence})
		if from >= 0 {
			c.send(CustodyMsg{Kind: CustodyAck, To: from, Epoch: t.Epoch, Hop: t.Hop, Stale: true, Refused: RefuseEvidence})
		}
		return nil
	}
	if c.quiet() || c.held != nil || (from < 0 && c.epochRefused(t.Epoch)) {
		c.refuse(from, &t, RefuseBusy)
		return nil
	}
	c.touch()
	if from >= 0 {
		c.taken = c.now
		c.observe(t.Epoch, t.Hop)
	}
	if shown != nil {
		c.evUsed.Use(*shown, id)
	}
	if t.Epoch > c.epoch {
		c.epoch = t.Epoch
		c.dropBelow(t.Epoch)
		if from >= 0 && from < len(c.raises) {
			c.raises[from]++
			c.raisedAt[from] = c.now
		}
	}
	c.raise(in)
	c.addRecent(in)
	c.event(CustodyAccepted, t.Epoch, t.Hop, from)
	if from >= 0 {
		c.send(CustodyMsg{Kind: CustodyAck, To: from, Epoch: t.Epoch, Hop: t.Hop})
	}
	// Own the vectors: the walk machine updates them in place.
	t = cloneToken(t)
	ev = cloneBytes(ev)
	if c.cfg.Hops > 0 && t.Hop >= c.cfg.Hops {
		c.finish(t, ev, from)
		return nil
	}
	c.held = &held{tok: t, ev: ev, pred: from, predE: t.Epoch, predH: t.Hop}
	if shown != nil {
		sh := *shown
		c.held.shown = &sh
	}
	c.heldOut = true
	return nil
}

// finish ends the walk here: token t of hop >= K reached this node.
func (c *Custody) finish(t Token, ev []byte, from int) {
	c.done, c.doneOut = true, true
	c.held = nil
	c.final = &CustodyFinal{Token: t, Evidence: ev, From: from}
	c.event(CustodyFinished, t.Epoch, t.Hop, from)
}

// stepHeld steps the held token with the walk machine and hands the result on (or holds
// it again for a hand-off to itself).
func (c *Custody) stepHeld() {
	h := c.held
	in := h.tok
	if p := c.cfg.PauseAtHop; p > 0 && in.Hop == p && in.Epoch == 0 && !c.cfg.PauseAfterStep {
		c.paused = true
		c.event(CustodyPaused, in.Epoch, in.Hop, h.pred)
		return
	}
	c.persist = true
	if err := c.m.Step(Message{From: h.pred, Token: h.tok}); err != nil {
		// The token was acked and cannot be stepped: it is dropped here (the fallback
		// recovers it) and reported.
		c.held = nil
		c.events = append(c.events, CustodyEvent{Kind: CustodyStepFailed, Epoch: in.Epoch, Hop: in.Hop, Peer: h.pred, Err: err})
		return
	}
	rd := c.m.Ready()
	for _, e := range rd.Ledger {
		c.seq++
		e.Seq = c.seq
		c.ledger = append(c.ledger, e)
	}
	c.state = rd.State
	for _, e := range rd.Events {
		c.events = append(c.events, CustodyEvent{Kind: CustodyWalk, Walk: e.Kind, Epoch: in.Epoch, Hop: e.Hop, Peer: e.To})
	}
	env := rd.Outbox[0]
	c.m.Advance(rd)
	c.held = nil
	t := env.Token
	c.raise(markOf(&t))
	pause := c.cfg.PauseAfterStep && c.cfg.PauseAtHop > 0 && in.Hop == c.cfg.PauseAtHop && in.Epoch == 0
	if env.To == c.wc.Node {
		// A hand-off to itself: held again (durable), stepped at the next Advance.
		if c.cfg.Hops > 0 && t.Hop >= c.cfg.Hops {
			c.finish(t, h.ev, c.wc.Node)
			return
		}
		c.held = &held{tok: t, ev: h.ev, pred: h.pred, predE: h.predE, predH: h.predH}
		c.heldOut = true
	} else {
		c.release(env.To, t, h, !pause)
	}
	if pause {
		c.paused = true
		c.event(CustodyPaused, in.Epoch, in.Hop, h.pred)
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
			c.persist = true
			continue
		}
		c.backups[k] = b
		k++
	}
	clear(c.backups[k:])
	c.backups = c.backups[:k]
}

// keep adds backup b, dropping the oldest beyond MaxBackups, and makes it the last
// release.
func (c *Custody) keep(b *backup) {
	c.backups = append(c.backups, b)
	if lim := MaxBackups(c.cfg.Depth); len(c.backups) > lim {
		for _, o := range c.backups[:len(c.backups)-lim] {
			c.event(CustodyExpired, o.tok.Epoch, o.tok.Hop, o.to)
		}
		c.backups = append(c.backups[:0], c.backups[len(c.backups)-lim:]...)
	}
	c.last = &release{tok: b.tok, ev: b.ev} // vectors shared: a release is never modified
	c.persist = true
}

// release hands a freshly stepped token to its recipient (covered by the machine's ledger
// entry) and keeps a backup. Unless send, the token is kept but not sent (PauseAfterStep:
// a restart sends it at its first Tick).
func (c *Custody) release(to int, t Token, h *held, send bool) {
	// t's vectors are the stepped held token's, which nothing else refers to any more.
	b := &backup{tok: t, ev: h.ev, to: to, pred: h.pred, predE: h.predE, predH: h.predH, progress: c.now}
	c.keep(b)
	b.deadline = c.now
	if !send {
		return
	}
	if c.down[to] || c.Evicted(to) {
		// The machine chose a peer known to be down, or a member evicted here (it would
		// hold the token without handing it on where it is refused, and it has no claim to
		// more releases): re-send at once to another (the machine's entry stays, an
		// over-count on the safe side; the re-send voids the planned figure, which the
		// eviction already did).
		c.resend(b, CustodyResent)
		return
	}
	b.deadline = c.now + int64(c.cfg.AckTimeout)
	c.send(CustodyMsg{Kind: CustodyToken, To: to, Epoch: t.Epoch, Hop: t.Hop, Token: cloneToken(t), Evidence: b.ev})
}

func (c *Custody) name(i int) string {
	if c.names != nil {
		return c.names[i]
	}
	return fmt.Sprint(i)
}

// pickPeer returns a live neighbour other than self and not evicted here, preferring one
// other than avoid; -1 when there is none.
func (c *Custody) pickPeer(avoid int) int {
	var cand []int
	if c.wc.Graph == nil || c.wc.Graph.Complete {
		cand = make([]int, 0, c.wc.Nodes)
		for j := 0; j < c.wc.Nodes; j++ {
			if j != c.wc.Node && !c.down[j] && !c.Evicted(j) && j != avoid {
				cand = append(cand, j)
			}
		}
	} else {
		for _, j := range c.wc.Graph.Neighbors(c.wc.Node) {
			if j != c.wc.Node && !c.down[j] && !c.Evicted(j) && j != avoid {
				cand = append(cand, j)
			}
		}
	}
	if len(cand) == 0 {
		if avoid >= 0 && avoid != c.wc.Node && !c.down[avoid] && !c.Evicted(avoid) {
			return avoid
		}
		return -1
	}
	return cand[c.cfg.Rand.IntN(len(cand))]
}

// resend sends backup b's token (same release; epoch already set by the caller) to a new
// live peer, charging a forward entry that names it.
func (c *Custody) resend(b *backup, why CustodyEventKind) {
	c.persist = true
	to := -1
	if !c.stopping { // a stopping node sends nothing: the release waits, pending, for the restart
		to = c.pickPeer(b.to)
	}
	if to < 0 {
		b.pending = true
		b.deadline = c.now + int64(c.cfg.AckTimeout)
		c.event(CustodyNoPeer, b.tok.Epoch, b.tok.Hop, b.to)
		return
	}
	b.pending, b.acked, b.retried, b.dist, b.to = false, false, false, 0, to
	b.busyAt, b.busyWait = 0, 0
	b.deadline = c.now + int64(c.cfg.AckTimeout)
	b.progress = c.now
	c.seq++
	c.ledger = append(c.ledger, privacy.Entry{
		Seq: c.seq, Node: c.name(c.wc.Node), Run: c.wc.Run, Walk: b.tok.Walk, Epoch: b.tok.Epoch, Hop: b.tok.Hop,
		Mechanism: MechForward, Clip: c.wc.Clip, Lambda: c.wc.Lambda, Recipient: c.name(to),
	})
	c.event(why, b.tok.Epoch, b.tok.Hop, to)
	c.send(CustodyMsg{Kind: CustodyToken, To: to, Epoch: b.tok.Epoch, Hop: b.tok.Hop, Token: cloneToken(b.tok), Evidence: b.ev})
}

// retransmit sends backup b's token again to its current recipient, after an ack timeout
// (once) or a busy answer. The bytes are identical and the recipient already had them in
// its view (or never got them), so no ledger entry is added: the first one covers it. A
// recipient that accepted it answers with a duplicate ack.
func (c *Custody) retransmit(b *backup, timeout bool) {
	if timeout {
		b.retried = true
		b.deadline = c.now + int64(c.cfg.AckTimeout)
		b.busyAt, b.busyWait = 0, 0
	}
	if c.stopping {
		return // sent again at the restart (unacked backups go again at the first tick)
	}
	c.event(CustodyRetransmitted, b.tok.Epoch, b.tok.Hop, b.to)
	c.send(CustodyMsg{Kind: CustodyToken, To: b.to, Epoch: b.tok.Epoch, Hop: b.tok.Hop, Token: cloneToken(b.tok), Evidence: b.ev})
}

// expire handles an unacked backup whose recipient did not ack in time (or refused it):
// one retransmission to the same live peer, then a re-send to another (at once when the
// recipient was evicted meanwhile).
func (c *Custody) expire(b *backup) {
	if !b.retried && !c.down[b.to] && !c.Evicted(b.to) {
		c.retransmit(b, true)
	} else {
		c.resend(b, CustodyResent)
	}
}

// regenerate re-releases backup b under a new epoch above everything this node has seen.
func (c *Custody) regenerate(b *backup, why CustodyEventKind) {
	b.tok.Epoch = c.nextEpoch(b.tok.Epoch)
	c.epoch = b.tok.Epoch
	c.raise(markOf(&b.tok))
	c.dropBelow(b.tok.Epoch)
	c.last = &release{tok: b.tok, ev: b.ev}
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
	c.backups = slices.Delete(c.backups, i, i+1)
	c.persist = true
}

func (c *Custody) onAck(msg CustodyMsg) {
	i, b := c.find(msg.Epoch, msg.Hop)
	if b == nil {
		return
	}
	switch {
	case msg.Stale:
		if msg.From != b.to {
			return // an earlier recipient refused an older send; the current one decides
		}
		c.remove(i)
		c.event(CustodyRetired, b.tok.Epoch, b.tok.Hop, b.to)
		if b.pred >= 0 {
			c.send(CustodyMsg{Kind: CustodyRelease, To: b.pred, Epoch: b.predE, Hop: b.predH, Retire: true})
		}
		return
	case msg.Refused != RefuseNone:
		if b.acked || b.pending || msg.From != b.to {
			return // about an earlier send, or already settled
		}
		if msg.Refused == RefuseBusy {
			// The peer is there but takes no token now: ask again shortly, doubling the
			// wait, until the ack timeout decides.
			b.busyWait = min(max(2*b.busyWait, 1), max(int64(c.cfg.AckTimeout)/4, 1))
			if at := c.now + b.busyWait; at < b.deadline {
				b.busyAt = at
			}
			return
		}
		c.expire(b) // refused or failed: as at the ack timeout, at once
		return
	}
	c.touch()
	if b.to != msg.From {
		c.persist = true
	}
	b.acked, b.to, b.pending = true, msg.From, false
	b.busyAt, b.busyWait = 0, 0
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
	c.touch()
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
		// No fsync of its own: nothing is sent on the strength of it. A restart before the
		// next snapshot brings the backup back: one more copy kept, as after a lost wave.
		c.backups = slices.Delete(c.backups, i, i+1)
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
// are re-sent elsewhere; the newest backup acked by j and not yet released is
// regenerated (j may have died holding the token; older ones are of lower epochs or
// hops, which the regenerated lineage fences).
func (c *Custody) PeerDown(j int) {
	if j < 0 || j >= c.wc.Nodes || j == c.wc.Node || c.down[j] {
		return
	}
	c.down[j] = true
	c.downs++
	if c.quiet() {
		return
	}
	for _, b := range slices.Clone(c.backups) { // resend does not change the slice
		if b.to == j && !b.pending && !b.acked {
			c.resend(b, CustodyResent)
		}
	}
	for k := len(c.backups) - 1; k >= 0; k-- {
		if b := c.backups[k]; b.to == j && !b.pending && b.acked && b.dist < c.cfg.Depth {
			c.regenerate(b, CustodyRegenerated)
			return
		}
	}
}

// PeerUp tells the node that peer j is sending heartbeats again. Re-sends that found no
// live peer go out at once.
func (c *Custody) PeerUp(j int) {
	if j < 0 || j >= c.wc.Nodes || j == c.wc.Node || !c.down[j] {
		return
	}
	c.down[j] = false
	if c.quiet() {
		return
	}
	for _, b := range c.backups { // resend does not change the slice
		if b.pending {
			c.resend(b, CustodyResent)
		}
	}
}

// idle reports whether the node holds nothing: no token to step, no unacked release.
func (c *Custody) idle() bool {
	if c.held != nil {
		return false
	}
	for _, b := range c.backups {
		if !b.acked {
			return false
		}
	}
	return true
}

// fallbackAt returns the tick at which the fallback fires if nothing happens before
// (math.MaxInt64: never), and whether the give-up is due instead.
func (c *Custody) fallbackAt(fb int64) (int64, bool) {
	if fb <= 0 || c.last == nil {
		return math.MaxInt64, false
	}
	if c.fb.sent >= MaxFallbacks {
		if c.fb.gaveUp {
			return math.MaxInt64, false
		}
		return c.now + 1, true
	}
	if !c.idle() {
		return math.MaxInt64, false
	}
	return c.fb.active + fb<<min(c.fb.sent, 3), false
}

// Tick advances time by one tick: ack timeouts and busy retries, pending re-sends, backup
// expiry and the fallback.
func (c *Custody) Tick() {
	c.now++
	if c.quiet() {
		return
	}
	fb := c.FallbackTimeout()
	k := 0
	for _, b := range c.backups { // resend does not change the slice; compacted in place
		switch {
		case b.pending:
			if c.now >= b.deadline {
				c.resend(b, CustodyResent)
			}
		case !b.acked && c.now >= b.deadline:
			c.expire(b)
		case !b.acked && b.busyAt > 0 && c.now >= b.busyAt:
			b.busyAt = 0
			c.retransmit(b, false)
		case fb > 0 && b.acked && c.now-b.progress >= fb:
			c.event(CustodyExpired, b.tok.Epoch, b.tok.Hop, b.to)
			c.persist = true
			continue
		}
		c.backups[k] = b
		k++
	}
	clear(c.backups[k:])
	c.backups = c.backups[:k]
	at, giveUp := c.fallbackAt(fb)
	switch {
	case giveUp:
		c.fb.gaveUp = true
		c.event(CustodyGaveUp, c.last.tok.Epoch, c.last.tok.Hop, -1)
	case c.now >= at:
		c.fallback()
	}
}

// fallback re-sends the last release under a new epoch, above every epoch seen here: the
// same noised bytes of z and zhat (no new noise, no new use of the data), charged as a
// forward entry naming its recipient. Every older backup is dropped: the fallback lineage
// replaces them, and it starts no release wave (no predecessor).
func (c *Custody) fallback() {
	c.fb.active = c.now
	c.fb.sent++
	t := cloneToken(c.last.tok)
	t.Epoch = c.nextEpoch(t.Epoch)
	c.epoch = t.Epoch
	c.dropBelow(t.Epoch)
	c.backups = c.backups[:0]
	b := &backup{tok: t, ev: c.last.ev, to: -1, pred: -1, progress: c.now}
	c.keep(b)
	c.raise(markOf(&b.tok))
	c.resend(b, CustodyFallback)
}

// NextDeadline returns the earliest tick after Now at which Tick does anything
// (math.MaxInt64: none). Until then Tick only advances Now, so a driver may sleep and
// catch up with TickTo. It is valid until the next input.
func (c *Custody) NextDeadline() int64 {
	next := c.due()
	if next <= c.now {
		next = c.now + 1
	}
	return next
}

// due returns the earliest tick at which a timer of the machine falls due, which may be
// Now or earlier when the clock has not caught up (math.MaxInt64: none).
func (c *Custody) due() int64 {
	if c.quiet() {
		return math.MaxInt64
	}
	fb := c.FallbackTimeout()
	next := int64(math.MaxInt64)
	for _, b := range c.backups {
		switch {
		case b.pending || !b.acked:
			next = min(next, b.deadline)
			if !b.pending && b.busyAt > 0 {
				next = min(next, b.busyAt)
			}
		case fb > 0:
			next = min(next, b.progress+fb)
		}
	}
	at, _ := c.fallbackAt(fb)
	return min(next, at)
}

// TickTo advances time to tick t (no-op if t <= Now). It is equivalent to calling Tick
// t-Now times, skipping the ticks before NextDeadline, at which Tick does nothing.
func (c *Custody) TickTo(t int64) {
	for c.now < t {
		if nd := c.NextDeadline(); nd > t {
			c.now = t
			return
		} else if nd-1 > c.now {
			c.now = nd - 1
		}
		c.Tick()
	}
}

// CatchUp advances time to tick t as a driver's clock does: it is TickTo(t) unless the
// next deadline is more than one ack timeout overdue at t. Then the driver was away (its
// process stopped, suspended, or blocked on a slow disk or a long solve) and the ticks in
// between are not replayed one by one: the machine moves to t-1 and ticks once, so every
// timer due by t fires once, at t, and the deadlines it sets run from t. Replayed tick by
// tick, a timer would fire again each time it came due in the gap: an unacked hand-off
// would be redirected once per elapsed ack timeout, a burst of re-sends of one release,
// each with its forward ledger entry and charged as a view to its recipient. A gap of at
// most one ack timeout past the deadline is replayed exactly (TickTo), so a driver that
// wakes a little late behaves as one woken on time.
func (c *Custody) CatchUp(t int64) {
	if t <= c.now {
		return
	}
	if nd := c.NextDeadline(); nd < t-int64(c.cfg.AckTimeout) {
		c.now = t - 1
		c.Tick()
		return
	}
	c.TickTo(t)
}

// CustodyMark identifies a token for fencing: (Epoch, Hop, Digest), Digest being
// TokenDigest.
type CustodyMark struct {
	Epoch, Hop, Digest uint64
}

// CustodyBackup is one backup in a CustodySnapshot (see the backup chain in Custody).
type CustodyBackup struct {
	Token    Token // the release as sent (epoch updated on regeneration)
	Evidence []byte
	To       int // current recipient (-1 before the first send of a fallback)
	Acked    bool
	Retried  bool  // the current recipient got one retransmission
	Pending  bool  // no live peer was available
	Deadline int64 // tick of the ack timeout (pending: of the next retry)
	BusyAt   int64 // tick of the next retry after a busy answer (0: none)
	BusyWait int64
	Dist     int   // acked hand-offs known beyond it
	Progress int64 // last tick of an ack or release for it
	// Pred, PredEpoch and PredHop: the node the token came from and the (epoch, hop) it
	// sent, where release waves go (Pred -1: none).
	Pred               int
	PredEpoch, PredHop uint64
}

// CustodyFallbackState is the fallback's state in a CustodySnapshot.
type CustodyFallbackState struct {
	Active   int64   // last tick of token, ack or release activity
	Sent     int     // fallbacks since then
	GaveUp   bool    // MaxFallbacks reached and reported
	HopTicks float64 // slowest observed ticks per hop
	// Observed, LastAt, LastEpoch and LastHop: the last token accepted from a peer.
	Observed           bool
	LastAt             int64
	LastEpoch, LastHop uint64
}

// CustodySnapshot is the whole custody state of one node: what a driver persists to
// restart from (Restore). The walk machine's state (u_i, K_i) and the random sources are
// not part of it. Tick values are those of the machine that took it; a driver that
// restarts with a new clock may set Now, the backups' Deadline and Progress and
// Fallback.Active to 0 (a restart then retransmits its unacked releases at the first
// Tick and waits a full fallback timeout).
type CustodySnapshot struct {
	Now     int64
	Fence   *CustodyMark // highest token accepted or released (nil: none)
	Epoch   uint64       // highest epoch accepted or created
	Recent  []CustodyMark
	Backups []CustodyBackup
	// Last is the last token this node released (the fallback re-sends it).
	Last         *Token
	LastEvidence []byte
	Held         *CustodyHeld
	Fallback     CustodyFallbackState
	Strikes      []int  // refused epoch jumps per member (nil: none)
	Down         []bool // members reported down (nil: none)
	// The rewind rule's memory: the highest hop accepted or released in any epoch, each
	// member's new lineages taken here (nil: none) and the members reported down so far.
	MaxHop uint64
	Raises []int
	Downs  int
	// Used is the record of evidences used (EvidenceUse.Records, oldest first), shared
	// with the machine: a restarted node takes no second token on an evidence it used.
	Used         []EvidenceRecord
	Seq          uint64 // ledger sequence numbers used
	Paused, Done bool
}

func (m tokenMark) export() CustodyMark {
	return CustodyMark{Epoch: m.epoch, Hop: m.hop, Digest: m.digest}
}

func (m CustodyMark) mark() tokenMark {
	return tokenMark{epoch: m.Epoch, hop: m.Hop, digest: m.Digest, set: true}
}

func (h *held) export() CustodyHeld {
	var sh *Evidence
	if h.shown != nil {
		e := *h.shown
		sh = &e
	}
	return CustodyHeld{Token: cloneToken(h.tok), Evidence: cloneBytes(h.ev), Pred: h.pred, PredEpoch: h.predE, PredHop: h.predH, Shown: sh}
}

// Snapshot returns the whole custody state. The vectors of the backups' and the last
// release's tokens, and evidence bytes, are shared with the machine, which never modifies
// them (a release is immutable; a regeneration changes only the epoch, which the
// snapshot holds by value); the caller must not modify them either. The held token is
// copied.
func (c *Custody) Snapshot() CustodySnapshot {
	s := CustodySnapshot{Now: c.now, Epoch: c.epoch, Seq: c.seq, Paused: c.paused, Done: c.done,
		Fallback: CustodyFallbackState{Active: c.fb.active, Sent: c.fb.sent, GaveUp: c.fb.gaveUp, HopTicks: c.fb.hop,
			Observed: c.fb.observed, LastAt: c.fb.lastAt, LastEpoch: c.fb.lastE, LastHop: c.fb.lastH}}
	if c.seen.set {
		f := c.seen.export()
		s.Fence = &f
	}
	if len(c.recent) > 0 {
		s.Recent = make([]CustodyMark, 0, len(c.recent))
	}
	for _, m := range c.recent {
		s.Recent = append(s.Recent, m.export())
	}
	if len(c.backups) > 0 {
		s.Backups = make([]CustodyBackup, 0, len(c.backups))
	}
	for _, b := range c.backups {
		s.Backups = append(s.Backups, CustodyBackup{Token: b.tok, Evidence: b.ev, To: b.to,
			Acked: b.acked, Retried: b.retried, Pending: b.pending, Deadline: b.deadline, BusyAt: b.busyAt,
			BusyWait: b.busyWait, Dist: b.dist, Progress: b.progress, Pred: b.pred, PredEpoch: b.predE, PredHop: b.predH})
	}
	if c.last != nil {
		t := c.last.tok
		s.Last, s.LastEvidence = &t, c.last.ev
	}
	if c.held != nil {
		h := c.held.export()
		s.Held = &h
	}
	if slices.ContainsFunc(c.strikes, func(k int) bool { return k > 0 }) {
		s.Strikes = slices.Clone(c.strikes)
	}
	if slices.Contains(c.down, true) {
		s.Down = slices.Clone(c.down)
	}
	s.MaxHop, s.Downs, s.Used = c.maxHop, c.downs, c.evUsed.Records()
	if slices.ContainsFunc(c.raises, func(k int) bool { return k > 0 }) {
		s.Raises = slices.Clone(c.raises)
	}
	return s
}

// Restore replaces the custody state with s (from Snapshot, possibly of an earlier
// process) and, when ck is not nil, the walk machine's u_i and K_i with ck. Pending Ready
// output is discarded. A held token (s.Held) is stepped at the next Advance (HasReady
// reports it). It fails without changing anything on a snapshot that does not fit the
// node (dimensions, peers out of range, non-finite vectors, an epoch above MaxEpoch).
func (c *Custody) Restore(ck *Checkpoint, s CustodySnapshot) error {
	if err := c.checkSnapshot(&s); err != nil {
		return err
	}
	if ck != nil {
		if err := c.m.Restore(*ck); err != nil {
			return err
		}
	}
	c.now, c.epoch, c.seq, c.paused, c.done = s.Now, s.Epoch, s.Seq, s.Paused, s.Done
	c.stopping = false // a restored machine runs (Stop)
	c.seen = tokenMark{}
	if s.Fence != nil {
		c.seen = s.Fence.mark()
	}
	c.recent = c.recent[:0]
	for _, m := range s.Recent {
		c.addRecent(m.mark())
	}
	c.evUsed.Load(s.Used)
	c.maxHop, c.downs = s.MaxHop, s.Downs
	if c.seen.set {
		c.maxHop = max(c.maxHop, c.seen.hop)
	}
	clear(c.raises)
	copy(c.raises, s.Raises)
	c.backups = nil
	for _, b := range s.Backups {
		c.backups = append(c.backups, &backup{tok: cloneToken(b.Token), ev: cloneBytes(b.Evidence), to: b.To, acked: b.Acked,
			retried: b.Retried, pending: b.Pending, deadline: b.Deadline, busyAt: b.BusyAt, busyWait: b.BusyWait,
			dist: b.Dist, progress: b.Progress, pred: b.Pred, predE: b.PredEpoch, predH: b.PredHop})
	}
	c.last = nil
	if s.Last != nil {
		c.last = &release{tok: cloneToken(*s.Last), ev: cloneBytes(s.LastEvidence)}
	}
	c.held = nil
	if h := s.Held; h != nil {
		c.held = &held{tok: cloneToken(h.Token), ev: cloneBytes(h.Evidence), pred: h.Pred, predE: h.PredEpoch, predH: h.PredHop}
		mk := markOf(&c.held.tok)
		if h.Shown != nil {
			sh := *h.Shown
			c.held.shown = &sh
			c.evUsed.Use(sh, TokenID{Epoch: mk.epoch, Hop: mk.hop, Digest: mk.digest})
		}
		if mk.cmp(c.seen) > 0 {
			// The held token is above the snapshot's fence: it was accepted after the rest
			// of the snapshot was written (a driver that stores held tokens apart). The
			// walk went on past this node's releases in it: an unacked one counts as acked
			// (no retransmission; its backup is released by a wave or expires).
			for _, b := range c.backups {
				if !b.acked && !b.pending && markOf(&b.tok).cmp(mk) < 0 {
					b.acked, b.dist = true, max(b.dist, 1)
				}
			}
		}
		// A held token is accepted: the fence and the epoch cover it, and the recent
		// tokens a token received from a peer, so that its sender's retransmission is
		// acked as a duplicate (a driver that stores it apart from the rest may not have
		// saved them). A token handed to itself is not received again.
		c.raise(mk)
		if h.Pred >= 0 && h.Token.Epoch == h.PredEpoch && h.Token.Hop == h.PredHop {
			c.addRecent(mk)
		}
		c.epoch = max(c.epoch, mk.epoch)
	}
	// Every use loaded, the held token's included, is of the node's previous life: each
	// of a token within Depth + RewindSlack hops of the highest hop seen may buy one
	// token of a later epoch (EvidenceUse: a regeneration made while this node was down
	// keeps the evidence it used, and re-releases a backup at most Depth hand-offs back).
	c.evUsed.Restarted(func(id TokenID) bool { return id.Hop+uint64(c.cfg.Depth)+RewindSlack >= c.maxHop })
	f := s.Fallback
	c.fb = fallbackState{active: f.Active, sent: f.Sent, gaveUp: f.GaveUp, hop: f.HopTicks, observed: f.Observed,
		lastAt: f.LastAt, lastE: f.LastEpoch, lastH: f.LastHop}
	clear(c.strikes)
	copy(c.strikes, s.Strikes)
	clear(c.down)
	copy(c.down, s.Down)
	c.ledger, c.outbox, c.events = c.ledger[:0], c.outbox[:0], c.events[:0]
	c.state, c.heldOut, c.persist, c.final, c.doneOut = nil, false, false, nil, false
	if h := c.held; h != nil && !c.done && c.cfg.Hops > 0 && h.tok.Hop >= c.cfg.Hops {
		// A token of hop K held durably (acked, and the node stopped before it released
		// the final model): the walk is over here. It finishes from its own state, also
		// when every other member has gone.
		c.finish(h.tok, h.ev, h.pred)
	}
	return nil
}

func (c *Custody) checkSnapshot(s *CustodySnapshot) error {
	bad := func(what string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrCustodySnapshot, fmt.Sprintf(what, a...))
	}
	n := c.wc.Nodes
	tok := func(what string, t *Token) error {
		if err := c.check(t); err != nil {
			return bad("%s: %v", what, err)
		}
		if t.Epoch > MaxEpoch {
			return bad("%s: epoch %d above %d", what, t.Epoch, MaxEpoch)
		}
		return nil
	}
	switch {
	case s.Epoch > MaxEpoch:
		return bad("epoch %d above %d", s.Epoch, MaxEpoch)
	case s.Strikes != nil && len(s.Strikes) != n, s.Down != nil && len(s.Down) != n:
		return bad("strikes or liveness for %d/%d nodes, want %d", len(s.Strikes), len(s.Down), n)
	case s.Raises != nil && len(s.Raises) != n:
		return bad("lineage counts for %d nodes, want %d", len(s.Raises), n)
	case s.Downs < 0 || slices.ContainsFunc(s.Raises, func(k int) bool { return k < 0 }):
		return bad("negative rewind counters")
	case !(s.Fallback.HopTicks >= 0) || math.IsInf(s.Fallback.HopTicks, 0):
		return bad("hop time %v", s.Fallback.HopTicks)
	case s.Fallback.Sent < 0:
		return bad("fallback count %d", s.Fallback.Sent)
	}
	if s.Down != nil && s.Down[c.wc.Node] {
		return bad("this node is down")
	}
	for i, b := range s.Backups {
		if err := tok(fmt.Sprintf("backup %d", i), &b.Token); err != nil {
			return err
		}
		if b.To < -1 || b.To >= n || b.To == c.wc.Node || b.Pred < -1 || b.Pred >= n || b.Pred == c.wc.Node || b.Dist < 0 {
			return bad("backup %d: recipient %d, predecessor %d, distance %d", i, b.To, b.Pred, b.Dist)
		}
		if b.To < 0 && !b.Pending {
			return bad("backup %d has no recipient and is not pending", i)
		}
	}
	if len(s.Backups) > MaxBackups(c.cfg.Depth) {
		return bad("%d backups, at most %d", len(s.Backups), MaxBackups(c.cfg.Depth))
	}
	if s.Last != nil {
		if err := tok("last release", s.Last); err != nil {
			return err
		}
	}
	if h := s.Held; h != nil {
		if err := tok("held token", &h.Token); err != nil {
			return err
		}
		if h.Pred < -1 || h.Pred >= n {
			return bad("held token from %d", h.Pred)
		}
	}
	return nil
}
