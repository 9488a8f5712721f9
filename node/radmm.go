package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
	"github.com/rs/zerolog"

	"github.com/dpadmm/dpadmm/gossip"
	"github.com/dpadmm/dpadmm/node/drive"
	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/node/wire"
	"github.com/dpadmm/dpadmm/privacy"
)

// MissingPolicy is what a node does when a neighbour's vector for the current iteration
// has not arrived within the barrier timeout (gossip.MissingPolicy; the policy itself is
// applied by gossip.Exchange). See docs/radmm-network.md.
type MissingPolicy = gossip.MissingPolicy

// Missing-neighbour policies.
const (
	// MissingStop ends the run with ErrNeighborMissing naming the neighbour(s) and the
	// iteration (the default: a result is never silently computed from old values).
	MissingStop = gossip.MissingStop
	// MissingWait keeps waiting (logging a warning at every timeout) until the vector
	// arrives or the context ends.
	MissingWait = gossip.MissingWait
	// MissingStale continues with the neighbour's last received vector in place of the
	// missing one, after recording the substitution durably (StaleFile), logging it at
	// warn level and reporting it in exchangeResult.Stale.
	MissingStale = gossip.MissingStale
)

// ParseMissingPolicy parses stop, wait or stale ("" = stop).
func ParseMissingPolicy(s string) (MissingPolicy, error) {
	p, err := gossip.ParseMissingPolicy(s)
	if err != nil {
		return 0, fmt.Errorf("node: unknown --on-missing policy %q (want stop, wait or stale)", strings.ToLower(strings.TrimSpace(s)))
	}
	return p, nil
}

// Errors of the R-ADMM exchange.
var (
	// ErrNeighborMissing ends a run under MissingStop (and under MissingStale when a
	// neighbour never sent anything that could stand in).
	ErrNeighborMissing = errors.New("node: neighbour missing at the iteration barrier")
	// ErrHalted is returned by RunRADMM when RADMMParams.HaltAfter stopped the node on
	// purpose.
	ErrHalted = errors.New("node: halted after the configured iteration")
	// ErrRejoin is returned by RunRADMM when the data directory's ledger already has
	// entries of the run and the journal (RADMMJournalFile) cannot restore the machine
	// exactly: a restarted node would otherwise release fresh noisy vectors for
	// iterations it already released.
	ErrRejoin = errors.New("node: refusing to rejoin an R-ADMM run")

	errPaused = errors.New("node: paused (fault injection)")
)

// radmmConfig configures the R-ADMM exchange of one run on a Node: the run's membership,
// this node's machine and the barrier policy. The run name, the data directory, the fsync
// setting, the host, the store, the logger and the metrics are the Node's.
type radmmConfig struct {
	// Members lists every node's peer ID by member index; Members[Self] is this node.
	Members []peer.ID
	// Self is this node's member index.
	Self int
	// Neighbors lists the graph neighbours of Self: the same set the machine was built with.
	Neighbors []int
	// Machine is this node's gossip.Machine, freshly built (its initial Ready pending).
	// The exchange's loop goroutine is its only user during run.
	Machine *gossip.Machine
	// Iters is T, the machine's iteration count (frames for later iterations are rejected).
	Iters int
	// Barrier is the barrier timeout: how long the node waits at an iteration for a
	// neighbour's vector before it checks the neighbour. Once it has passed, a neighbour that
	// is not connected is declared missing and OnMissing applies; the check is repeated
	// every max(Barrier/4, 10 ms). Default 30 s (a local solve of a large dimension on a
	// loaded machine can take seconds). The policy is gossip.Exchange's: the node maps the
	// durations onto ticks of an eighth of the check period, rounding up (exchangeConfig).
	Barrier time.Duration
	// MaxWait is how long a neighbour that is still connected (alive, but possibly waiting
	// on its own barrier or paused) is waited for before it is declared missing too.
	// Default 10 * Barrier.
	MaxWait time.Duration
	// OnMissing is the policy applied at a barrier timeout (default MissingStop).
	OnMissing MissingPolicy
	// Window is how many iterations beyond the next one a neighbour's early frame is held
	// for (it is dropped beyond that). Default 4.
	Window int
	// HaltAfter, when > 0, makes run return ErrHalted once the release of iteration
	// HaltAfter has been acknowledged by the neighbours (fault injection for tests).
	HaltAfter int
	// PauseAt, when > 0, makes the node stop right after the release of iteration PauseAt
	// is durable (journal and ledger) and before any frame of it is sent, and wait until
	// the context ends: fault injection for harnesses that then kill the process (the
	// worst case for a restart: a release on disk that nobody received).
	PauseAt int
	// Noise, when set, is the JournalNoise the machine was built with: its draws are
	// journaled with every release, so that the node can resume after a crash (see
	// RADMMJournalFile). A machine with noise built without it cannot resume (the replay
	// would not reproduce its releases and the node refuses).
	Noise *JournalNoise
	// TotalRows is M, recorded in the journal with the membership (informational for
	// drivers that rebuild the node's configuration from the journal).
	TotalRows int
}

// setDefaults fills the zero durations and window with their defaults.
func (c *radmmConfig) setDefaults() {
	if c.Barrier == 0 {
		c.Barrier = 30 * time.Second
	}
	if c.Window == 0 {
		c.Window = 4
	}
	if c.MaxWait == 0 {
		c.MaxWait = 10 * c.Barrier
	}
}

// validate checks c for the node with peer ID self and returns the membership index of
// every member and, by index, whether it is a graph neighbour of Self.
func (c *radmmConfig) validate(self peer.ID) (map[peer.ID]int, []bool, error) {
	switch {
	case c.Machine == nil:
		return nil, nil, errors.New("node: gossip machine is required")
	case c.Self < 0 || c.Self >= len(c.Members):
		return nil, nil, fmt.Errorf("node: self index %d out of range [0,%d)", c.Self, len(c.Members))
	case len(c.Neighbors) != c.Machine.Degree():
		return nil, nil, fmt.Errorf("node: %d neighbours given, the machine has %d", len(c.Neighbors), c.Machine.Degree())
	case c.Iters < 0:
		return nil, nil, fmt.Errorf("node: iterations must be >= 0, got %d", c.Iters)
	case c.Barrier < 0 || c.MaxWait < c.Barrier:
		return nil, nil, fmt.Errorf("node: barrier timeout must be > 0 and max wait >= it, got %v and %v", c.Barrier, c.MaxWait)
	case c.Window < 0:
		return nil, nil, fmt.Errorf("node: window must be >= 0, got %d", c.Window)
	case c.OnMissing > MissingStale:
		return nil, nil, fmt.Errorf("node: unknown missing-neighbour policy %d", c.OnMissing)
	}
	if !c.Machine.HasReady() || c.Machine.Iter() != 0 {
		return nil, nil, errors.New("node: the gossip machine must be fresh (iteration 0 with its initial release pending)")
	}
	index := make(map[peer.ID]int, len(c.Members))
	for i, p := range c.Members {
		if _, dup := index[p]; dup {
			return nil, nil, fmt.Errorf("node: peer %s appears twice in the membership", p)
		}
		index[p] = i
	}
	if c.Members[c.Self] != self {
		return nil, nil, fmt.Errorf("node: member %d is %s but this host is %s", c.Self, c.Members[c.Self], self)
	}
	nb := make([]bool, len(c.Members))
	for _, j := range c.Neighbors {
		if j < 0 || j >= len(c.Members) || j == c.Self || nb[j] {
			return nil, nil, fmt.Errorf("node: bad neighbour %d (out of range, self or duplicate)", j)
		}
		nb[j] = true
	}
	return index, nb, nil
}

// StaleUse records that iteration Iter+1 was computed with neighbour Neighbor's vector of
// iteration UsedIter in place of its (missing) vector of iteration Iter.
type StaleUse = gossip.StaleUse

// exchangeResult is the outcome of a completed R-ADMM run on one node.
type exchangeResult struct {
	Model    []float64       // f_i(T)
	Iter     int             // T
	Ledger   []privacy.Entry // entries made durable by this run, in order
	Stale    []StaleUse      // stale substitutions (policy stale)
	Rejected int             // inbound frames rejected (malformed, foreign, invalid)
	Ignored  int             // inbound frames ignored (stale, duplicate, too far ahead)
	Wall     time.Duration
}

type exchangeIn struct {
	f      wire.ExchangeFrame
	sender int
}

type exchangePeer struct {
	idx    int
	id     peer.ID
	q      chan []byte
	queued int          // loop-owned: frames queued that the peer needs (iterations < T)
	acked  atomic.Int64 // frames answered by the peer, in queue order
	mu     sync.Mutex   // guards s
	s      network.Stream
}

// radmmExchange is the R-ADMM neighbour exchange of a Node: it drives the node's
// gossip.Exchange over direct streams of wire.RADMMProtocol(run) on the Node's host, with the
// Node's store (ledger), data directory (journal and stale-use record), logger and
// metrics. It owns no host and no store: Node.Close ends the run (its context) and the
// host; stop releases what the exchange itself holds.
type radmmExchange struct {
	n         *Node
	cfg       radmmConfig
	log       zerolog.Logger
	index     map[peer.ID]int
	validator wire.ExchangeValidator
	limit     int
	dim       int
	in        chan exchangeIn
	done      chan struct{}
	doneOnce  sync.Once
	stopOnce  sync.Once
	peers     []*exchangePeer
	rejected  atomic.Int64
	ignored   atomic.Int64
	bg        sync.WaitGroup
	cancelMu  sync.Mutex // guards cancel
	cancel    context.CancelFunc

	// Progress, written by the loop, read by snapshot (status endpoint).
	progMu sync.Mutex
	prog   exchangeProg

	// The barrier policy around the machine, its adapter (applies its Readies through
	// exchangeFx) and the length of its tick; loop-owned.
	ex   *gossip.Exchange
	ad   *drive.RADMM
	tick time.Duration

	// Journal and stale-use record (store.RADMMJournalFile, store.StaleFile) and
	// resumption; loop-owned after newRADMMExchange.
	files   *store.RADMMLog
	resumed bool     // the exchange was restored from the journal
	reconn  chan int // neighbours that reconnected after a disconnection
	notifee *network.NotifyBundle
}

// exchangeProg is the part of exchangeProgress the loop maintains.
type exchangeProg struct {
	iter    int     // last iteration released (-1 before f_i(0))
	entries int     // ledger entries made durable by this run
	eps     float64 // pure epsilon made durable (+Inf: a release without guarantee)
	stale   int     // stale substitutions
	done    bool    // the last iteration was computed
}

// newRADMMExchange validates cfg and builds the exchange of the Node's run: it restores
// the machine from the run's journal when the data directory holds one (refusing with
// ErrRejoin when that is not exactly possible), opens the stale-use record, watches the
// neighbours' connections and registers the stream handler of wire.RADMMProtocol(run). Call
// run next, and stop when done.
func (n *Node) newRADMMExchange(cfg radmmConfig) (*radmmExchange, error) {
	cfg.setDefaults()
	index, nb, err := cfg.validate(n.Host.ID())
	if err != nil {
		return nil, err
	}
	tick, xc := exchangeConfig(cfg)
	ex, err := gossip.NewExchange(cfg.Machine, xc)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	x := &radmmExchange{n: n, cfg: cfg, index: index, in: make(chan exchangeIn, 4*len(cfg.Neighbors)+4), done: make(chan struct{}),
		ex: ex, ad: drive.NewRADMM(ex), tick: tick, reconn: make(chan int, 4*len(cfg.Neighbors)+4)}
	x.prog.iter = -1
	x.log = n.cfg.Logger.With().Str("run", n.cfg.Run).Int("node", cfg.Self).Logger()
	if err := x.openFiles(); err != nil {
		x.stop()
		return nil, err
	}
	x.dim = len(cfg.Machine.ModelView())
	x.validator = wire.ExchangeValidator{Run: n.cfg.Run, Dim: x.dim, Iters: uint64(cfg.Iters), Neighbors: nb}
	x.limit = wire.ExchangeFrameSize(n.cfg.Run, x.dim)
	for _, j := range cfg.Neighbors {
		// Room for every release plus the re-sends after reconnections.
		x.peers = append(x.peers, &exchangePeer{idx: j, id: cfg.Members[j], q: make(chan []byte, cfg.Iters+34)})
	}
	x.watchReconnects()
	n.Host.SetStreamHandler(wire.RADMMProtocol(n.cfg.Run), x.handle)
	return x, nil
}

// openFiles opens the journal (RADMMJournalFile) and replays it into the fresh exchange
// when it holds releases of the run, then opens the stale-use record (StaleFile). A data
// directory whose ledger holds entries of the run without a journal of it is refused.
func (x *radmmExchange) openFiles() error {
	dir, run := x.n.cfg.DataDir, x.n.cfg.Run
	prior, err := x.n.store.Ledger()
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %v", store.ErrLedger, err)
	}
	var priorRun []privacy.Entry
	for _, e := range prior {
		if e.Run == run {
			priorRun = append(priorRun, e)
		}
	}
	files, recs, err := x.n.store.OpenRADMM(run)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRejoin, err)
	}
	x.files = files
	if len(priorRun) > 0 && len(recs) == 0 {
		return fmt.Errorf("%w: %s already holds ledger entries of run %q but no journal of it: the node cannot resume (its releases would be re-noised); use a new run name or a fresh data directory",
			ErrRejoin, dir, run)
	}
	if len(recs) > 0 {
		if x.cfg.Noise == nil {
			x.cfg.Noise = NewJournalNoise(noNoise{})
		}
		if err := x.restore(recs, priorRun); err != nil {
			return err
		}
		x.resumed = true
	}
	return nil
}

// stop ends the exchange: the senders stop, the stream handler and the connection watcher
// are removed and the journal and stale-use files are closed. The host and the store are
// the Node's and stay open (Node.Close closes them). Safe to call more than once.
func (x *radmmExchange) stop() {
	x.stopOnce.Do(func() {
		x.cancelMu.Lock()
		if x.cancel != nil {
			x.cancel()
		}
		x.cancelMu.Unlock()
		x.finish()
		h := x.n.Host
		h.RemoveStreamHandler(wire.RADMMProtocol(x.n.cfg.Run))
		if x.notifee != nil {
			h.Network().StopNotify(x.notifee)
			x.notifee = nil
		}
		x.bg.Wait()
		if x.files != nil {
			x.files.Close()
		}
	})
}

func (x *radmmExchange) finish() { x.doneOnce.Do(func() { close(x.done) }) }

// handle serves one long-lived inbound stream: frames in, one ack byte out per frame
// (wire.AckOK validated and passed to the loop, wire.AckReject refused with a logged reason).
func (x *radmmExchange) handle(s network.Stream) {
	defer s.Close()
	sender, ok := x.index[s.Conn().RemotePeer()]
	if !ok {
		sender = -1
	}
	lg := x.log.With().Int("from", sender).Logger()
	for {
		b, err := wire.ReadFrame(s, x.limit)
		if err != nil {
			if errors.Is(err, wire.ErrTooLarge) {
				x.reject(lg, "oversized", err.Error())
				// The stream is out of sync: answer, then close it (Close flushes the ack).
				s.Write([]byte{wire.AckReject})
			}
			return
		}
		f, err := wire.DecodeExchangeFrame(b)
		label := "malformed"
		if errors.Is(err, wire.ErrVersion) {
			label = "version"
		}
		if err == nil {
			if vd, reason, l := x.validator.CheckLabeled(f, sender); vd != wire.Accept {
				err, label = errors.New(reason), l
			}
		}
		if err != nil {
			x.reject(lg, label, err.Error())
			if _, err := s.Write([]byte{wire.AckReject}); err != nil {
				return
			}
			continue
		}
		// Ack once validated, before the loop takes the vector: the frame that completes a
		// neighbour's last barrier must be acknowledged before that node ends and leaves.
		// Back-pressure is kept: the next frame is not read until the loop took this one.
		if _, err := s.Write([]byte{wire.AckOK}); err != nil {
			return
		}
		select {
		case x.in <- exchangeIn{f: f, sender: sender}:
		case <-x.done: // the run is over: nothing needs the vector any more
		}
	}
}

func (x *radmmExchange) reject(lg zerolog.Logger, label, reason string) {
	x.rejected.Add(1)
	x.n.metrics.radmmRejected.WithLabelValues(label).Inc()
	lg.Warn().Str("verdict", "reject").Msg("R-ADMM frame rejected: " + reason)
}

// exchangeConfig maps cfg's durations onto the ticks of a gossip.Exchange. The check
// period is max(Barrier/4, 10 ms) and a tick is an eighth of it (a 32nd of the barrier
// timeout once it is at least 40 ms): the barrier timeout and the maximum wait are
// rounded up to whole ticks, so a neighbour is never declared missing early.
func exchangeConfig(cfg radmmConfig) (time.Duration, gossip.ExchangeConfig) {
	recheck := max(cfg.Barrier/4, 10*time.Millisecond)
	tick := recheck / 8
	ticks := func(d time.Duration) int { return int((d + tick - 1) / tick) }
	return tick, gossip.ExchangeConfig{Barrier: ticks(cfg.Barrier), MaxWait: ticks(cfg.MaxWait), Recheck: 8,
		Window: cfg.Window, OnMissing: cfg.OnMissing}
}

// run drives the exchange until iteration T is computed (or the policy stops the run) and
// returns the node's result. The loop (runLoop with exchangeLoop) does I/O only: it applies
// every Ready through the adapter in the contract's order (stale records, journal and
// ledger fsynced, then the frames queued to the neighbours, then Advance), hands validated
// frames to Step, reports reconnections, observes the neighbours' connections when a
// barrier check is due and turns the time it spent waiting for input into ticks (time
// spent computing is not waiting time: waitClock). It sleeps until the exchange's next
// deadline or the next input.
func (x *radmmExchange) run(ctx context.Context) (*exchangeResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	x.cancelMu.Lock()
	x.cancel = cancel
	x.cancelMu.Unlock()
	defer cancel()
	defer x.finish()
	start := time.Now()
	res := &exchangeResult{}
	for _, p := range x.peers {
		x.bg.Add(1)
		go func() { defer x.bg.Done(); x.sender(ctx, p) }()
	}
	if x.resumed {
		// The neighbours may not have received the last releases before the crash: send
		// them again, the same journaled vectors (duplicates are ignored).
		x.log.Warn().Int("iter", x.ex.Iter()).Msg("resumed from the journal: re-sending the last released vectors unchanged")
		x.ex.Resume()
	}
	if err := drive.RunLoop(ctx, exchangeLoop{x: x, res: res}, &drive.WaitClock{Now: x.ex.Now(), Tick: x.tick}); err != nil {
		return nil, err
	}
	res.Wall = time.Since(start)
	return res, nil
}

// drain carries out every pending Ready of the exchange through its adapter (RADMM.Apply:
// the durable records, then the frames, then Advance) and reports whether the run ended:
// with res filled when the last iteration was computed, with an error when the policy
// stopped the run, the node halted or paused on purpose, or a write failed.
func (x *radmmExchange) drain(ctx context.Context, res *exchangeResult) (bool, error) {
	ad := x.ad
	for ad.HasReady() {
		err := ad.Apply(x.effects(res))
		if errors.Is(err, errPaused) {
			x.log.Warn().Int("iter", x.cfg.PauseAt).Msg("paused after the release became durable, before sending it (fault injection)")
			<-ctx.Done()
			return true, ctx.Err()
		}
		if err != nil {
			return true, err
		}
		if s := ad.Stopped(); s != nil {
			return true, x.stopError(s)
		}
		if iter := ad.Released(); iter >= 0 && x.cfg.HaltAfter > 0 && iter >= x.cfg.HaltAfter {
			x.flush(ctx, nil)
			x.log.Warn().Int("iter", iter).Msg("halting on purpose (fault injection)")
			return true, fmt.Errorf("%w %d", ErrHalted, iter)
		}
		if ad.Done() {
			x.progMu.Lock()
			x.prog.done = true
			x.progMu.Unlock()
			x.flush(ctx, res)
			res.Model, res.Iter = ad.Model(), x.ex.Iter()
			res.Rejected, res.Ignored = int(x.rejected.Load()), int(x.ignored.Load())
			return true, nil
		}
	}
	return false, nil
}

// exchangeLoop is the R-ADMM's part of the runtime loop (runLoop, on a waitClock): the
// inputs of its exchange are validated frames and the reconnections of neighbours, and
// the neighbours' connections, observed when a barrier check is due; the run is over when
// the adapter reports the last release, a stop, a halt, a pause or a failed write (drain).
type exchangeLoop struct {
	x   *radmmExchange
	res *exchangeResult
}

func (l exchangeLoop) Settle(ctx context.Context) (bool, error) { return l.x.drain(ctx, l.res) }

func (l exchangeLoop) Deadline() (int64, bool) { return l.x.ad.NextDeadline() }

// tickTo delivers the ticks waited, observing the neighbours' connections first when a
// barrier check is due.
func (l exchangeLoop) TickTo(t int64) {
	if due, ok := l.x.ex.Deadline(); ok && t >= due {
		l.x.observeLiveness()
	}
	l.x.ad.TickTo(t)
}

func (l exchangeLoop) Wait(ctx context.Context, timer <-chan time.Time) (func(), error) {
	x := l.x
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case j := <-x.reconn:
		// A neighbour that comes back (a restart) may have lost vectors it acknowledged
		// before it crashed: the exchange sends it the last releases again.
		return func() {
			x.log.Info().Int("neighbor", j).Msg("neighbour reconnected: re-sending the last released vectors")
			x.ex.Reconnected(j)
		}, nil
	case f := <-x.in:
		return func() { x.step(gossip.Message{From: f.sender, Iter: int(f.f.Iter), Vec: f.f.Vec}) }, nil
	case <-timer:
	}
	return nil, nil
}

// step hands a validated frame to the exchange. Frames the exchange ignores are counted
// from its events (apply); the ones it refuses are counted and logged here.
func (x *radmmExchange) step(msg gossip.Message) {
	err := x.ex.Step(msg)
	switch {
	case err == nil, errors.Is(err, gossip.ErrStale), errors.Is(err, gossip.ErrDuplicate),
		errors.Is(err, gossip.ErrTooFar), errors.Is(err, gossip.ErrEnded):
	default:
		x.rejected.Add(1)
		x.n.metrics.radmmRejected.WithLabelValues("machine").Inc()
		x.log.Warn().Int("from", msg.From).Int("iter", msg.Iter).Msg("R-ADMM frame rejected by the machine: " + err.Error())
	}
}

// observeLiveness tells the exchange which neighbours the host is connected to.
func (x *radmmExchange) observeLiveness() {
	for _, j := range x.cfg.Neighbors {
		if x.n.Host.Network().Connectedness(x.cfg.Members[j]) == network.Connected {
			x.ex.PeerUp(j)
		} else {
			x.ex.PeerDown(j)
		}
	}
}

// waited converts ticks of the exchange to a duration.
func (x *radmmExchange) waited(ticks int64) time.Duration {
	return (time.Duration(ticks) * x.tick).Round(time.Millisecond)
}

// stopError is the error users see when the policy stopped the run.
func (x *radmmExchange) stopError(s *gossip.Stop) error {
	if s.Reason == gossip.StopNoStandIn {
		return fmt.Errorf("%w: node %d at iteration %d: neighbour %d never sent a vector that could stand in (policy stale)",
			ErrNeighborMissing, x.cfg.Self, s.Iter, s.Neighbors[0])
	}
	return fmt.Errorf("%w: node %d waited %v at iteration %d for neighbour(s) %v (policy stop; use --on-missing wait or stale to continue)",
		ErrNeighborMissing, x.cfg.Self, x.waited(s.Waited), s.Iter, s.Neighbors)
}

// exchangeFx is the radmmExchange's drive.RADMMEffects for one Ready: the stale records, the
// journal and the ledger, fsynced in the adapter's order (RADMM), then the frames queued
// to the neighbours' senders; events become logs and counters. res, when set, collects
// the stale uses and ledger entries of the run.
type exchangeFx struct {
	x   *radmmExchange
	res *exchangeResult
	enc map[int][]byte // one encoding per iteration: the envelopes of a release share its vector
}

func (x *radmmExchange) effects(res *exchangeResult) *exchangeFx {
	return &exchangeFx{x: x, res: res, enc: map[int][]byte{}}
}

func (f *exchangeFx) Persist(r drive.RADMMRecord) error {
	x := f.x
	if x.cfg.Noise != nil && x.cfg.Noise.err != nil {
		return fmt.Errorf("node: noise source: %w", x.cfg.Noise.err)
	}
	for _, u := range r.Stale {
		if err := x.recordStale(u); err != nil {
			return err
		}
		if f.res != nil {
			f.res.Stale = append(f.res.Stale, u)
		}
		x.progMu.Lock()
		x.prog.stale++
		x.progMu.Unlock()
		x.n.metrics.radmmStale.Inc()
	}
	if r.Release != nil {
		// Journal first (release, inputs, noise), then the ledger, then the sends.
		if err := x.journal(r.Release); err != nil {
			return fmt.Errorf("node: cannot make the journal durable, stopping before any send: %w", err)
		}
	}
	return nil
}

func (f *exchangeFx) AppendLedger(es []privacy.Entry) error {
	x := f.x
	es = slices.Clone(es)
	for i := range es {
		es[i].Run = x.n.cfg.Run
		if err := es[i].Validate(); err != nil {
			return fmt.Errorf("node: ledger entry: %w", err)
		}
	}
	if err := x.n.store.AppendLedger(es); err != nil {
		return fmt.Errorf("node: cannot make the ledger durable, stopping before any send: %w", err)
	}
	if f.res != nil {
		f.res.Ledger = append(f.res.Ledger, es...)
	}
	iter := int(es[len(es)-1].Hop) // the release's iteration (one entry, checked by RADMM.Apply)
	x.progress(es, iter)
	if x.cfg.PauseAt > 0 && iter == x.cfg.PauseAt {
		return errPaused
	}
	return nil
}

func (f *exchangeFx) Send(env gossip.Envelope) error {
	x, msg := f.x, env.Msg
	p := x.peerOf(env.To)
	if p == nil {
		return fmt.Errorf("node: invariant: machine addressed node %d, not a neighbour", env.To)
	}
	raw, ok := f.enc[msg.Iter]
	if !ok {
		var err error
		if raw, err = wire.EncodeExchangeFrame(nil, wire.ExchangeFrame{Run: x.n.cfg.Run, Iter: uint64(msg.Iter), From: uint32(x.cfg.Self), Vec: msg.Vec}); err != nil {
			return err
		}
		f.enc[msg.Iter] = raw
	}
	select {
	case p.q <- raw:
		// f_i(T) is consumed by nobody (every neighbour computes f_j(T) from the vectors
		// of iteration T-1): it is sent, but the end-of-run flush does not wait for a
		// neighbour that may already have finished and gone.
		if msg.Iter < x.cfg.Iters {
			p.queued++
		}
	default:
		x.log.Error().Int("to", p.idx).Int("iter", msg.Iter).Msg("send queue full: vector dropped")
	}
	return nil
}

func (f *exchangeFx) Note(evs []gossip.Event) { f.x.logEvents(evs) }

// logEvents turns the exchange's events into log lines and counters.
func (x *radmmExchange) logEvents(evs []gossip.Event) {
	for _, e := range evs {
		switch e.Kind {
		case gossip.EventDropped:
			x.ignore()
			x.log.Warn().Ints("from", e.Peers).Int("iter", e.Iter).Int("at", x.ex.Iter()).Msg("R-ADMM frame too far ahead: dropped")
		case gossip.EventIgnored:
			x.ignore()
			x.log.Debug().Ints("from", e.Peers).Int("iter", e.Iter).Msg("R-ADMM frame ignored: " + e.Err.Error())
		case gossip.EventWaiting:
			x.log.Debug().Int("iter", e.Iter).Ints("waiting_for", e.Peers).Dur("waited", x.waited(e.Waited)).Msg("barrier: neighbours connected, still waiting")
		case gossip.EventMissing:
			x.log.Warn().Int("iter", e.Iter).Ints("missing", e.Peers).Dur("waited", x.waited(e.Waited)).Msg("neighbour missing at the barrier: still waiting (policy wait)")
		case gossip.EventStale:
			x.log.Warn().Int("iter", e.Iter).Ints("neighbor", e.Peers).Int("used_iter", e.UsedIter).Msg("neighbour missing at the barrier: continuing with its last vector (policy stale)")
		case gossip.EventStopped:
			x.log.Error().Int("iter", e.Iter).Ints("missing", e.Peers).Dur("waited", x.waited(e.Waited)).Msg("neighbour missing at the barrier: stopping the run (policy " + x.cfg.OnMissing.String() + ")")
		}
	}
}

func (x *radmmExchange) peerOf(j int) *exchangePeer {
	for _, p := range x.peers {
		if p.idx == j {
			return p
		}
	}
	return nil
}

// recordStale appends one line to StaleFile and fsyncs it.
func (x *radmmExchange) recordStale(u StaleUse) error { return x.files.AppendStale(u) }

// flush waits until every neighbour answered every queued frame it needs, at most one
// barrier timeout. Neighbours that res records as stale at the last iteration are not waited for.
func (x *radmmExchange) flush(ctx context.Context, res *exchangeResult) {
	gone := map[int]bool{}
	if res != nil && len(res.Stale) > 0 {
		lastT := res.Stale[len(res.Stale)-1].Iter
		for _, u := range res.Stale {
			if u.Iter == lastT {
				gone[u.Neighbor] = true
			}
		}
	}
	// A neighbour that stays disconnected for a grace period has finished (its last
	// barrier only needed our vector of iteration T-1, which it acknowledged unless it
	// left right after) or failed: it is not waited for.
	grace := min(x.cfg.Barrier/4, time.Second)
	away := map[int]time.Time{}
	deadline := time.Now().Add(x.cfg.Barrier)
	for {
		pending := 0
		for _, p := range x.peers {
			if gone[p.idx] || p.acked.Load() >= int64(p.queued) {
				continue
			}
			if x.n.Host.Network().Connectedness(p.id) != network.Connected {
				if t0, ok := away[p.idx]; !ok {
					away[p.idx] = time.Now()
				} else if time.Since(t0) > grace {
					continue
				}
			} else {
				delete(away, p.idx)
			}
			pending++
		}
		if pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			x.log.Warn().Int("peers", pending).Msg("some neighbours did not acknowledge the last vectors")
			return
		}
		select {
		case <-ctx.Done():
			return
		case j := <-x.reconn:
			// A neighbour that restarted meanwhile may need the last releases again.
			x.ex.Reconnected(j)
			if err := drive.Drain[drive.RADMMEffects](x.ad, x.effects(res)); err != nil {
				x.log.Warn().Err(err).Msg("cannot re-send the last vectors")
			}
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// sender delivers p's queue in order over one long-lived stream, reopening it and
// retrying a frame until it is answered or the run ends.
func (x *radmmExchange) sender(ctx context.Context, p *exchangePeer) {
	defer func() {
		p.mu.Lock()
		if p.s != nil {
			p.s.Close()
			p.s = nil
		}
		p.mu.Unlock()
	}()
	for {
		var raw []byte
		select {
		case raw = <-p.q:
		case <-ctx.Done():
			return
		}
		backoff := 5 * time.Millisecond
		for {
			code, err := x.sendOne(ctx, p, raw)
			if err == nil {
				if code == wire.AckReject {
					x.log.Error().Int("to", p.idx).Msg("neighbour rejected our vector")
				}
				break
			}
			if ctx.Err() != nil {
				return
			}
			x.log.Debug().Err(err).Int("to", p.idx).Msg("R-ADMM send failed; retrying")
			// A neighbour that restarts listens again soon: do not let the swarm's dial
			// backoff (seconds) outlast our own retry schedule.
			if sw, ok := x.n.Host.Network().(*swarm.Swarm); ok {
				sw.Backoff().Clear(p.id)
			}
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return
			}
			backoff = min(2*backoff, 500*time.Millisecond)
		}
		p.acked.Add(1)
	}
}

func (x *radmmExchange) sendOne(ctx context.Context, p *exchangePeer, raw []byte) (byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.s == nil {
		sctx, cancel := context.WithTimeout(ctx, x.cfg.Barrier)
		s, err := x.n.Host.NewStream(sctx, p.id, wire.RADMMProtocol(x.n.cfg.Run))
		cancel()
		if err != nil {
			return 0, err
		}
		p.s = s
	}
	p.s.SetDeadline(time.Now().Add(x.cfg.Barrier))
	var ack [1]byte
	err := wire.WriteFrame(p.s, raw)
	if err == nil {
		_, err = p.s.Read(ack[:])
	}
	if err != nil {
		p.s.Reset()
		p.s = nil
		return 0, err
	}
	return ack[0], nil
}
