package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
	"github.com/rs/zerolog"

	"github.com/dpadmm/dpadmm/gossip"
	"github.com/dpadmm/dpadmm/privacy"
)

// GossipProtocol returns the neighbour-exchange protocol ID of a run: the direct stream
// that carries R-ADMM/MR-ADMM/ADMM vectors between graph neighbours (never pubsub).
func GossipProtocol(run string) protocol.ID { return protocol.ID("/dpadmm/" + run + "/radmm/1") }

// StaleFile is the data-directory file recording every use of a stale neighbour vector
// (policy stale), one JSON line each, made durable before the release that depends on it
// is sent.
const StaleFile = "gossip-stale"

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
	// warn level and reporting it in GossipResult.Stale.
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

// Errors of the gossip runtime.
var (
	// ErrNeighborMissing ends a run under MissingStop (and under MissingStale when a
	// neighbour never sent anything that could stand in).
	ErrNeighborMissing = errors.New("node: neighbour missing at the iteration barrier")
	// ErrHalted is returned by Run when GossipConfig.HaltAfter stopped the node on purpose.
	ErrHalted = errors.New("node: halted after the configured iteration")
	// ErrRejoin is returned by NewGossipNode when the data directory's ledger already has
	// entries of the run and the journal (GossipJournalFile) cannot restore the machine
	// exactly: a restarted node would otherwise release fresh noisy vectors for
	// iterations it already released.
	ErrRejoin = errors.New("node: refusing to rejoin a gossip run")

	errPaused = errors.New("node: paused (fault injection)")
)

// GossipConfig configures one node of a neighbour-exchange run.
type GossipConfig struct {
	// Run names the run (protocol ID, frames, ledger entries). At most MaxRunName bytes.
	Run string
	// DataDir holds the identity key (when Host is nil), the ledger and StaleFile.
	DataDir string
	// NoSync skips fsync (testnets on tmpfs); the write order is unchanged.
	NoSync bool
	// Members lists every node's peer ID by gossip index; Members[Self] is this node.
	Members []peer.ID
	// Self is this node's gossip index.
	Self int
	// Neighbors lists the graph neighbours of Self: the same set the machine was built with.
	Neighbors []int
	// Machine is this node's gossip machine, freshly built (its initial Ready pending).
	// The runtime's loop goroutine is its only user during Run.
	Machine *gossip.Machine
	// Iters is T, the machine's iteration count (frames for later iterations are rejected).
	Iters int
	// Host, when set, is used instead of creating one (it is not closed by Close).
	Host host.Host
	// Listen are the listen multiaddrs of a created host (default loopback TCP, port 0).
	Listen []string
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
	// HaltAfter, when > 0, makes Run return ErrHalted once the release of iteration
	// HaltAfter has been acknowledged by the neighbours (fault injection for tests).
	HaltAfter int
	// PauseAt, when > 0, makes the node stop right after the release of iteration PauseAt
	// is durable (journal and ledger) and before any frame of it is sent, and wait until
	// the context ends: fault injection for harnesses that then kill the process (the
	// worst case for a restart: a release on disk that nobody received).
	PauseAt int
	Logger  zerolog.Logger

	// Noise, when set, is the JournalNoise the machine was built with: its draws are
	// journaled with every release, so that the node can resume after a crash (see
	// GossipJournalFile). A machine with noise built without it cannot resume (the replay
	// would not reproduce its releases and the node refuses).
	Noise *JournalNoise
	// TotalRows is M, recorded in the journal with the membership (informational for
	// drivers that rebuild the node's configuration from the journal).
	TotalRows int

	// metrics, when set (RunGossip), receives the node's Prometheus counters.
	metrics *metrics
}

// StaleUse records that iteration Iter+1 was computed with neighbour Neighbor's vector of
// iteration UsedIter in place of its (missing) vector of iteration Iter.
type StaleUse = gossip.StaleUse

// GossipResult is the outcome of a completed gossip run on one node.
type GossipResult struct {
	Model    []float64       // f_i(T)
	Iter     int             // T
	Ledger   []privacy.Entry // entries made durable by this run, in order
	Stale    []StaleUse      // stale substitutions (policy stale)
	Rejected int             // inbound frames rejected (malformed, foreign, invalid)
	Ignored  int             // inbound frames ignored (stale, duplicate, too far ahead)
	Wall     time.Duration
}

type gossipIn struct {
	f      GossipFrame
	sender int
}

type gossipPeer struct {
	idx    int
	id     peer.ID
	q      chan []byte
	queued int          // loop-owned: frames queued that the peer needs (iterations < T)
	acked  atomic.Int64 // frames answered by the peer, in queue order
	mu     sync.Mutex   // guards s
	s      network.Stream
}

// GossipNode runs one gossip machine over libp2p direct streams.
type GossipNode struct {
	cfg       GossipConfig
	log       zerolog.Logger
	Host      host.Host
	ownsHost  bool
	store     *Store
	stale     *os.File
	index     map[peer.ID]int
	validator GossipValidator
	limit     int
	dim       int
	in        chan gossipIn
	done      chan struct{}
	doneOnce  sync.Once
	peers     []*gossipPeer
	rejected  atomic.Int64
	ignored   atomic.Int64
	bg        sync.WaitGroup
	cancel    context.CancelFunc
	met       *metrics

	// Progress, written by the loop, read by Progress (status endpoint).
	progMu sync.Mutex
	prog   gossipProg

	// The barrier policy around the machine, and the length of its tick; loop-owned.
	ex   *gossip.Exchange
	tick time.Duration

	// Journal (GossipJournalFile) and resumption; loop-owned after NewGossipNode.
	jfile   *os.File
	resumed bool     // the exchange was restored from the journal
	reconn  chan int // neighbours that reconnected after a disconnection
	notifee *network.NotifyBundle
}

// gossipProg is the part of GossipProgress the loop maintains.
type gossipProg struct {
	iter    int     // last iteration released (-1 before f_i(0))
	entries int     // ledger entries made durable by this run
	eps     float64 // pure epsilon made durable (+Inf: a release without guarantee)
	stale   int     // stale substitutions
	done    bool    // the last iteration was computed
}

// NewGossipNode validates cfg, opens the data directory, creates (or adopts) the host and
// registers the stream handler of GossipProtocol(cfg.Run). Call Run next.
func NewGossipNode(ctx context.Context, cfg GossipConfig) (*GossipNode, error) {
	if cfg.Barrier == 0 {
		cfg.Barrier = 30 * time.Second
	}
	if cfg.Window == 0 {
		cfg.Window = 4
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = 10 * cfg.Barrier
	}
	switch {
	case cfg.Run == "" || len(cfg.Run) > MaxRunName:
		return nil, fmt.Errorf("node: run name must have 1..%d bytes", MaxRunName)
	case cfg.Machine == nil:
		return nil, errors.New("node: gossip machine is required")
	case cfg.Self < 0 || cfg.Self >= len(cfg.Members):
		return nil, fmt.Errorf("node: self index %d out of range [0,%d)", cfg.Self, len(cfg.Members))
	case len(cfg.Neighbors) != cfg.Machine.Degree():
		return nil, fmt.Errorf("node: %d neighbours given, the machine has %d", len(cfg.Neighbors), cfg.Machine.Degree())
	case cfg.Iters < 0:
		return nil, fmt.Errorf("node: iterations must be >= 0, got %d", cfg.Iters)
	case cfg.Barrier < 0 || cfg.MaxWait < cfg.Barrier:
		return nil, fmt.Errorf("node: barrier timeout must be > 0 and max wait >= it, got %v and %v", cfg.Barrier, cfg.MaxWait)
	case cfg.Window < 0:
		return nil, fmt.Errorf("node: window must be >= 0, got %d", cfg.Window)
	case cfg.OnMissing > MissingStale:
		return nil, fmt.Errorf("node: unknown missing-neighbour policy %d", cfg.OnMissing)
	}
	if !cfg.Machine.HasReady() || cfg.Machine.Iter() != 0 {
		return nil, errors.New("node: the gossip machine must be fresh (iteration 0 with its initial release pending)")
	}
	tick, xc := exchangeConfig(cfg)
	ex, err := gossip.NewExchange(cfg.Machine, xc)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	index := make(map[peer.ID]int, len(cfg.Members))
	for i, p := range cfg.Members {
		if _, dup := index[p]; dup {
			return nil, fmt.Errorf("node: peer %s appears twice in the membership", p)
		}
		index[p] = i
	}
	nb := make([]bool, len(cfg.Members))
	for _, j := range cfg.Neighbors {
		if j < 0 || j >= len(cfg.Members) || j == cfg.Self || nb[j] {
			return nil, fmt.Errorf("node: bad neighbour %d (out of range, self or duplicate)", j)
		}
		nb[j] = true
	}
	st, err := OpenStore(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	st.NoSync = cfg.NoSync
	prior, err := st.Ledger()
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		st.Close()
		return nil, fmt.Errorf("%w: %v", ErrLedger, err)
	}
	var priorRun []privacy.Entry
	for _, e := range prior {
		if e.Run == cfg.Run {
			priorRun = append(priorRun, e)
		}
	}
	jpath := filepath.Join(cfg.DataDir, GossipJournalFile)
	recs, good, err := readJournal(jpath, cfg.Run)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("%w: %v", ErrRejoin, err)
	}
	if len(priorRun) > 0 && len(recs) == 0 {
		st.Close()
		return nil, fmt.Errorf("%w: %s already holds ledger entries of run %q but no journal of it: the node cannot resume (its releases would be re-noised); use a new run name or a fresh data directory",
			ErrRejoin, cfg.DataDir, cfg.Run)
	}
	g := &GossipNode{cfg: cfg, store: st, index: index, in: make(chan gossipIn, 4*len(cfg.Neighbors)+4), done: make(chan struct{}),
		met: cfg.metrics, ex: ex, tick: tick, reconn: make(chan int, 4*len(cfg.Neighbors)+4)}
	g.prog.iter = -1
	fail := func(err error) (*GossipNode, error) { g.Close(); return nil, err }
	if g.jfile, err = os.OpenFile(jpath, os.O_CREATE|os.O_WRONLY, 0o600); err != nil {
		return fail(fmt.Errorf("node: %s: %w", GossipJournalFile, err))
	}
	// A torn last line was never durable, so its release was never sent: drop it.
	if err := g.jfile.Truncate(good); err != nil {
		return fail(fmt.Errorf("node: %s: %w", GossipJournalFile, err))
	}
	if _, err := g.jfile.Seek(good, 0); err != nil {
		return fail(fmt.Errorf("node: %s: %w", GossipJournalFile, err))
	}
	if len(recs) > 0 {
		if cfg.Noise == nil {
			cfg.Noise = NewJournalNoise(noNoise{})
			g.cfg.Noise = cfg.Noise
		}
		if err := g.restore(recs, priorRun); err != nil {
			return fail(err)
		}
		g.resumed = true
	}
	g.stale, err = os.OpenFile(filepath.Join(cfg.DataDir, StaleFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fail(fmt.Errorf("node: %s: %w", StaleFile, err))
	}
	if cfg.Host == nil {
		key, err := st.Identity()
		if err != nil {
			return fail(err)
		}
		listen := cfg.Listen
		if len(listen) == 0 {
			listen = []string{"/ip4/127.0.0.1/tcp/0"}
		}
		if err := checkPorts(listen); err != nil {
			return fail(err)
		}
		h, err := libp2p.New(libp2p.Identity(key), libp2p.ListenAddrStrings(listen...))
		if err != nil {
			return fail(fmt.Errorf("node: libp2p host (listen %v): %w", listen, err))
		}
		g.cfg.Host, g.ownsHost = h, true
	}
	g.Host = g.cfg.Host
	if cfg.Members[cfg.Self] != g.Host.ID() {
		return fail(fmt.Errorf("node: member %d is %s but this host is %s", cfg.Self, cfg.Members[cfg.Self], g.Host.ID()))
	}
	g.dim = len(cfg.Machine.ModelView())
	g.validator = GossipValidator{Run: cfg.Run, Dim: g.dim, Iters: uint64(cfg.Iters), Neighbors: nb}
	g.limit = GossipFrameSize(cfg.Run, g.dim)
	g.log = cfg.Logger.With().Str("run", cfg.Run).Int("node", cfg.Self).Logger()
	for _, j := range cfg.Neighbors {
		// Room for every release plus the re-sends after reconnections.
		g.peers = append(g.peers, &gossipPeer{idx: j, id: cfg.Members[j], q: make(chan []byte, cfg.Iters+34)})
	}
	g.watchReconnects()
	g.Host.SetStreamHandler(GossipProtocol(cfg.Run), g.handle)
	return g, nil
}

// ID returns the node's peer ID.
func (g *GossipNode) ID() peer.ID { return g.Host.ID() }

// Store returns the node's data directory store.
func (g *GossipNode) Store() *Store { return g.store }

// Close stops the senders, removes the stream handler, closes a host this node created and
// the store.
func (g *GossipNode) Close() error {
	if g.cancel != nil {
		g.cancel()
	}
	g.finish()
	if g.Host != nil {
		g.Host.RemoveStreamHandler(GossipProtocol(g.cfg.Run))
		if g.notifee != nil {
			g.Host.Network().StopNotify(g.notifee)
			g.notifee = nil
		}
	}
	var first error
	if g.ownsHost && g.Host != nil {
		first = g.Host.Close()
		g.ownsHost = false
	}
	g.bg.Wait()
	if g.stale != nil {
		g.stale.Close()
		g.stale = nil
	}
	if g.jfile != nil {
		g.jfile.Close()
		g.jfile = nil
	}
	if g.store != nil {
		if err := g.store.Close(); err != nil && first == nil {
			first = err
		}
		g.store = nil
	}
	return first
}

func (g *GossipNode) finish() { g.doneOnce.Do(func() { close(g.done) }) }

// handle serves one long-lived inbound stream: frames in, one ack byte out per frame
// (AckOK validated and passed to the loop, AckReject refused with a logged reason).
func (g *GossipNode) handle(s network.Stream) {
	defer s.Close()
	sender, ok := g.index[s.Conn().RemotePeer()]
	if !ok {
		sender = -1
	}
	lg := g.log.With().Int("from", sender).Logger()
	for {
		b, err := ReadFrame(s, g.limit)
		if err != nil {
			if errors.Is(err, ErrTooLarge) {
				g.reject(lg, "oversized", err.Error())
				// The stream is out of sync: answer, then close it (Close flushes the ack).
				s.Write([]byte{AckReject})
			}
			return
		}
		f, err := DecodeGossip(b)
		label := "malformed"
		if errors.Is(err, ErrVersion) {
			label = "version"
		}
		if err == nil {
			if vd, reason, l := g.validator.check(f, sender); vd != Accept {
				err, label = errors.New(reason), l
			}
		}
		if err != nil {
			g.reject(lg, label, err.Error())
			if _, err := s.Write([]byte{AckReject}); err != nil {
				return
			}
			continue
		}
		// Ack once validated, before the loop takes the vector: the frame that completes a
		// neighbour's last barrier must be acknowledged before that node ends and leaves.
		// Back-pressure is kept: the next frame is not read until the loop took this one.
		if _, err := s.Write([]byte{AckOK}); err != nil {
			return
		}
		select {
		case g.in <- gossipIn{f: f, sender: sender}:
		case <-g.done: // the run is over: nothing needs the vector any more
		}
	}
}

func (g *GossipNode) reject(lg zerolog.Logger, label, reason string) {
	g.rejected.Add(1)
	if g.met != nil {
		g.met.gRejected.WithLabelValues(label).Inc()
	}
	lg.Warn().Str("verdict", "reject").Msg("gossip frame rejected: " + reason)
}

// exchangeConfig maps cfg's durations onto the ticks of a gossip.Exchange. The check
// period is max(Barrier/4, 10 ms) and a tick is an eighth of it (a 32nd of the barrier
// timeout once it is at least 40 ms): the barrier timeout and the maximum wait are
// rounded up to whole ticks, so a neighbour is never declared missing early.
func exchangeConfig(cfg GossipConfig) (time.Duration, gossip.ExchangeConfig) {
	recheck := max(cfg.Barrier/4, 10*time.Millisecond)
	tick := recheck / 8
	ticks := func(d time.Duration) int { return int((d + tick - 1) / tick) }
	return tick, gossip.ExchangeConfig{Barrier: ticks(cfg.Barrier), MaxWait: ticks(cfg.MaxWait), Recheck: 8,
		Window: cfg.Window, OnMissing: cfg.OnMissing}
}

// Run drives the exchange until iteration T is computed (or the policy stops the run) and
// returns the node's result. The loop does I/O only: it applies every Ready in the
// contract's order (stale records, journal and ledger fsynced, then the frames queued to
// the neighbours, then Advance), hands validated frames to Step, reports reconnections,
// observes the neighbours' connections when a barrier check is due and turns the time it
// spent waiting for input into ticks (time spent computing is not waiting time). It sleeps
// until the exchange's next deadline or the next input.
func (g *GossipNode) Run(ctx context.Context) (*GossipResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	g.cancel = cancel
	defer cancel()
	defer g.finish()
	start := time.Now()
	x := g.ex
	res := &GossipResult{}
	for _, p := range g.peers {
		g.bg.Add(1)
		go func() { defer g.bg.Done(); g.sender(ctx, p) }()
	}
	if g.resumed {
		// The neighbours may not have received the last releases before the crash: send
		// them again, the same journaled vectors (duplicates are ignored).
		g.log.Warn().Int("iter", x.Iter()).Msg("resumed from the journal: re-sending the last released vectors unchanged")
		x.Resume()
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	rearm := func(d time.Duration) {
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(max(d, 0))
	}
	var carry time.Duration // waiting time not yet delivered as a tick
	for {
		for x.HasReady() {
			rd := x.Ready()
			iter, err := g.apply(rd, res)
			if errors.Is(err, errPaused) {
				g.log.Warn().Int("iter", iter).Msg("paused after the release became durable, before sending it (fault injection)")
				<-ctx.Done()
				return nil, ctx.Err()
			}
			if err != nil {
				return nil, err
			}
			x.Advance(rd)
			if rd.Stop != nil {
				return nil, g.stopError(rd.Stop)
			}
			if rd.State != nil && g.cfg.HaltAfter > 0 && iter >= g.cfg.HaltAfter {
				g.flush(ctx, nil)
				g.log.Warn().Int("iter", iter).Msg("halting on purpose (fault injection)")
				return nil, fmt.Errorf("%w %d", ErrHalted, iter)
			}
			if rd.Done && rd.State != nil {
				g.progMu.Lock()
				g.prog.done = true
				g.progMu.Unlock()
				g.flush(ctx, res)
				res.Model, res.Iter = rd.Model, x.Iter()
				res.Rejected, res.Ignored = int(g.rejected.Load()), int(g.ignored.Load())
				res.Wall = time.Since(start)
				return res, nil
			}
		}
		due, _ := x.Deadline()
		rearm(time.Duration(due-x.Now())*g.tick - carry)
		blocked := time.Now()
		var in *gossipIn
		reconn := -1
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case j := <-g.reconn:
			reconn = j
		case f := <-g.in:
			in = &f
		case <-timer.C:
		}
		carry += time.Since(blocked)
		if k := int64(carry / g.tick); k > 0 {
			carry -= time.Duration(k) * g.tick
			if x.Now()+k >= due {
				g.observeLiveness()
			}
			for ; k > 0; k-- {
				x.Tick()
			}
		}
		switch {
		case in != nil:
			g.step(gossip.Message{From: in.sender, Iter: int(in.f.Iter), Vec: in.f.Vec})
		case reconn >= 0:
			// A neighbour that comes back (a restart) may have lost vectors it acknowledged
			// before it crashed: the exchange sends it the last releases again.
			g.log.Info().Int("neighbor", reconn).Msg("neighbour reconnected: re-sending the last released vectors")
			x.Reconnected(reconn)
		}
	}
}

// step hands a validated frame to the exchange. Frames the exchange ignores are counted
// from its events (apply); the ones it refuses are counted and logged here.
func (g *GossipNode) step(msg gossip.Message) {
	err := g.ex.Step(msg)
	switch {
	case err == nil, errors.Is(err, gossip.ErrStale), errors.Is(err, gossip.ErrDuplicate),
		errors.Is(err, gossip.ErrTooFar), errors.Is(err, gossip.ErrEnded):
	default:
		g.rejected.Add(1)
		if g.met != nil {
			g.met.gRejected.WithLabelValues("machine").Inc()
		}
		g.log.Warn().Int("from", msg.From).Int("iter", msg.Iter).Msg("gossip frame rejected by the machine: " + err.Error())
	}
}

// observeLiveness tells the exchange which neighbours the host is connected to.
func (g *GossipNode) observeLiveness() {
	for _, j := range g.cfg.Neighbors {
		if g.Host.Network().Connectedness(g.cfg.Members[j]) == network.Connected {
			g.ex.PeerUp(j)
		} else {
			g.ex.PeerDown(j)
		}
	}
}

// waited converts ticks of the exchange to a duration.
func (g *GossipNode) waited(ticks int64) time.Duration {
	return (time.Duration(ticks) * g.tick).Round(time.Millisecond)
}

// stopError is the error users see when the policy stopped the run.
func (g *GossipNode) stopError(s *gossip.Stop) error {
	if s.Reason == gossip.StopNoStandIn {
		return fmt.Errorf("%w: node %d at iteration %d: neighbour %d never sent a vector that could stand in (policy stale)",
			ErrNeighborMissing, g.cfg.Self, s.Iter, s.Neighbors[0])
	}
	return fmt.Errorf("%w: node %d waited %v at iteration %d for neighbour(s) %v (policy stop; use --on-missing wait or stale to continue)",
		ErrNeighborMissing, g.cfg.Self, g.waited(s.Waited), s.Iter, s.Neighbors)
}

// apply carries out rd up to the sends: the stale uses are recorded and fsynced, then the
// release is journaled and its ledger entry appended and fsynced, and only then are the
// frames queued to the neighbours. Events become logs and counters. It returns the
// released iteration (-1 when rd releases nothing).
func (g *GossipNode) apply(rd gossip.ExchangeReady, res *GossipResult) (int, error) {
	if g.cfg.Noise != nil && g.cfg.Noise.err != nil {
		return 0, fmt.Errorf("node: noise source: %w", g.cfg.Noise.err)
	}
	g.logEvents(rd.Events)
	for _, u := range rd.StaleUses {
		if err := g.recordStale(u); err != nil {
			return 0, err
		}
		if res != nil {
			res.Stale = append(res.Stale, u)
		}
		g.progMu.Lock()
		g.prog.stale++
		g.progMu.Unlock()
		if g.met != nil {
			g.met.gStale.Inc()
		}
	}
	iter := -1
	if rd.State != nil {
		if len(rd.Ledger) != 1 || int(rd.Ledger[0].Hop) != rd.State.Iter {
			return 0, fmt.Errorf("node: invariant: the release of iteration %d carries %d ledger entries", rd.State.Iter, len(rd.Ledger))
		}
		e := rd.Ledger[0]
		e.Run = g.cfg.Run
		if err := e.Validate(); err != nil {
			return 0, fmt.Errorf("node: ledger entry: %w", err)
		}
		es := []privacy.Entry{e}
		// Journal first (release, inputs, noise), then the ledger, then the sends.
		if err := g.journal(rd.State); err != nil {
			return 0, fmt.Errorf("node: cannot make the journal durable, stopping before any send: %w", err)
		}
		if err := g.store.AppendLedger(es); err != nil {
			return 0, fmt.Errorf("node: cannot make the ledger durable, stopping before any send: %w", err)
		}
		if res != nil {
			res.Ledger = append(res.Ledger, es...)
		}
		iter = rd.State.Iter
		g.progress(es, iter)
		if g.cfg.PauseAt > 0 && iter == g.cfg.PauseAt {
			return iter, errPaused
		}
	} else if len(rd.Ledger) != 0 {
		return 0, fmt.Errorf("node: invariant: %d ledger entries without a release", len(rd.Ledger))
	}
	// One encoding per iteration: the envelopes of a release share its vector.
	enc := map[int][]byte{}
	for _, env := range rd.Outbox {
		msg := env.Msg
		if rd.State != nil && msg.Iter == rd.State.Iter && !sameFloats(msg.Vec, rd.State.Vec) {
			return 0, fmt.Errorf("node: invariant: vector of iteration %d differs from the journaled release", msg.Iter)
		}
		p := g.peerOf(env.To)
		if p == nil {
			return 0, fmt.Errorf("node: invariant: machine addressed node %d, not a neighbour", env.To)
		}
		raw, ok := enc[msg.Iter]
		if !ok {
			var err error
			if raw, err = EncodeGossip(nil, GossipFrame{Run: g.cfg.Run, Iter: uint64(msg.Iter), From: uint32(g.cfg.Self), Vec: msg.Vec}); err != nil {
				return 0, err
			}
			enc[msg.Iter] = raw
		}
		select {
		case p.q <- raw:
			// f_i(T) is consumed by nobody (every neighbour computes f_j(T) from the
			// vectors of iteration T-1): it is sent, but the end-of-run flush does not wait
			// for a neighbour that may already have finished and gone.
			if msg.Iter < g.cfg.Iters {
				p.queued++
			}
		default:
			g.log.Error().Int("to", p.idx).Int("iter", msg.Iter).Msg("send queue full: vector dropped")
		}
	}
	return iter, nil
}

// logEvents turns the exchange's events into log lines and counters.
func (g *GossipNode) logEvents(evs []gossip.Event) {
	for _, e := range evs {
		switch e.Kind {
		case gossip.EventDropped:
			g.ignore()
			g.log.Warn().Ints("from", e.Peers).Int("iter", e.Iter).Int("at", g.ex.Iter()).Msg("gossip frame too far ahead: dropped")
		case gossip.EventIgnored:
			g.ignore()
			g.log.Debug().Ints("from", e.Peers).Int("iter", e.Iter).Msg("gossip frame ignored: " + e.Err.Error())
		case gossip.EventWaiting:
			g.log.Debug().Int("iter", e.Iter).Ints("waiting_for", e.Peers).Dur("waited", g.waited(e.Waited)).Msg("barrier: neighbours connected, still waiting")
		case gossip.EventMissing:
			g.log.Warn().Int("iter", e.Iter).Ints("missing", e.Peers).Dur("waited", g.waited(e.Waited)).Msg("neighbour missing at the barrier: still waiting (policy wait)")
		case gossip.EventStale:
			g.log.Warn().Int("iter", e.Iter).Ints("neighbor", e.Peers).Int("used_iter", e.UsedIter).Msg("neighbour missing at the barrier: continuing with its last vector (policy stale)")
		case gossip.EventStopped:
			g.log.Error().Int("iter", e.Iter).Ints("missing", e.Peers).Dur("waited", g.waited(e.Waited)).Msg("neighbour missing at the barrier: stopping the run (policy " + g.cfg.OnMissing.String() + ")")
		}
	}
}

func (g *GossipNode) peerOf(j int) *gossipPeer {
	for _, p := range g.peers {
		if p.idx == j {
			return p
		}
	}
	return nil
}

// recordStale appends one line to StaleFile and fsyncs it.
func (g *GossipNode) recordStale(u StaleUse) error {
	b, _ := json.Marshal(u)
	if _, err := g.stale.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("node: %s: %w", StaleFile, err)
	}
	if !g.cfg.NoSync {
		if err := g.stale.Sync(); err != nil {
			return fmt.Errorf("node: %s fsync: %w", StaleFile, err)
		}
	}
	return nil
}

// flush waits until every neighbour answered every queued frame it needs, at most one
// barrier timeout. Neighbours that res records as stale at the last iteration are not waited for.
func (g *GossipNode) flush(ctx context.Context, res *GossipResult) {
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
	grace := min(g.cfg.Barrier/4, time.Second)
	away := map[int]time.Time{}
	deadline := time.Now().Add(g.cfg.Barrier)
	for {
		pending := 0
		for _, p := range g.peers {
			if gone[p.idx] || p.acked.Load() >= int64(p.queued) {
				continue
			}
			if g.Host.Network().Connectedness(p.id) != network.Connected {
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
			g.log.Warn().Int("peers", pending).Msg("some neighbours did not acknowledge the last vectors")
			return
		}
		select {
		case <-ctx.Done():
			return
		case j := <-g.reconn:
			// A neighbour that restarted meanwhile may need the last releases again.
			g.ex.Reconnected(j)
			for g.ex.HasReady() {
				rd := g.ex.Ready()
				if _, err := g.apply(rd, res); err != nil {
					g.log.Warn().Err(err).Msg("cannot re-send the last vectors")
				}
				g.ex.Advance(rd)
			}
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// sender delivers p's queue in order over one long-lived stream, reopening it and
// retrying a frame until it is answered or the run ends.
func (g *GossipNode) sender(ctx context.Context, p *gossipPeer) {
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
			code, err := g.sendOne(ctx, p, raw)
			if err == nil {
				if code == AckReject {
					g.log.Error().Int("to", p.idx).Msg("neighbour rejected our vector")
				}
				break
			}
			if ctx.Err() != nil {
				return
			}
			g.log.Debug().Err(err).Int("to", p.idx).Msg("gossip send failed; retrying")
			// A neighbour that restarts listens again soon: do not let the swarm's dial
			// backoff (seconds) outlast our own retry schedule.
			if sw, ok := g.Host.Network().(*swarm.Swarm); ok {
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

func (g *GossipNode) sendOne(ctx context.Context, p *gossipPeer, raw []byte) (byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.s == nil {
		sctx, cancel := context.WithTimeout(ctx, g.cfg.Barrier)
		s, err := g.Host.NewStream(sctx, p.id, GossipProtocol(g.cfg.Run))
		cancel()
		if err != nil {
			return 0, err
		}
		p.s = s
	}
	p.s.SetDeadline(time.Now().Add(g.cfg.Barrier))
	var ack [1]byte
	err := WriteFrame(p.s, raw)
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
