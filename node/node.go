package node

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"

	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/node/drive"
	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/node/wire"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/walk"
)

// Node is one dpadmm node: a libp2p host, the control plane, the durable store and the
// runtime loop that owns the walk machine.
// walkState is the state the walk run's loop owns: only the goroutine of runLoop reads
// and writes it. cust holds every custody rule (custody.go); the loop maps its Ready to
// the journals and the wire, and wall-clock time to its ticks (fallback.go).
type walkState struct {
	cust     *walk.Custody
	wk       *drive.Walk // cust's adapter: applies its Readies through walkFx
	custSeed [2]uint64   // seed of cust's re-send source
	tick     time.Duration
	t0       time.Time                // tick 0 of the loop's clock
	raws     map[[2]uint64][]rawEntry // encodings of tokens (rawOf)
	cur      *inbound                 // the hand-off being served: its ack is the machine's
	fatal    error                    // a Ready could not be applied: the loop stops
	ckpt     store.Checkpoint
	seen     bool
	// seeded generators (Config.Sources), checkpointed after every step
	hopSrc, noiseSrc *rand.PCG
	// pids are the base58 IDs of the members pidsOf (memberPID).
	pids   []string
	pidsOf []peer.ID
	// stepCost is a decaying maximum of the time the loop spent on a hand-off it served
	// (the step, its signature and its durable record): 0 before the first.
	stepCost time.Duration
}

// coalesceAcks reports whether the node may ack a token once its step is durable
// (drive.Walk.SetCoalesce): when its hand-offs so far took under a quarter of the ack
// timeout its peers wait, so that a slow step (a large shard's solve, a slow disk) never
// makes the sender time out and send the token elsewhere. The first hand-off a process
// steps (with its solver's first factorisation) is acked before its step, and measured;
// only hand-offs that stepped a token are.
func (w *walkState) coalesceAcks(ackTimeout time.Duration) bool {
	return w.stepCost > 0 && w.stepCost < ackTimeout/4
}

// noteStepCost records the time d of a hand-off served: the maximum, decaying by 1/16
// at each hand-off.
func (w *walkState) noteStepCost(d time.Duration) {
	w.stepCost = max(d, w.stepCost-w.stepCost/16, 1)
}

// finalExchange is the state of the final-model exchange (control.go, fallback_final.go,
// rejoin.go): the final model this node holds and the evidence it publishes with it, the
// finals other members push or publish, the members that confirmed it, and the evidence
// of the hand-offs of hop K.
type finalExchange struct {
	in    chan finalMsg // finals pushed (FinalProtocol) or published, for the loop and the end window
	model *Model
	mark  store.Mark // (epoch, hop, digest of z) of model, to keep the highest final
	// cert is the evidence published with this node's final model.
	cert     *FinalCert
	doneFrom map[peer.ID]bool
	// prevLinks holds the evidence shown with hand-offs of hop K (n.mu).
	prevLinks map[[3]uint64]*FinalLink
	asking    atomic.Bool // askFinal is running (startAskFinal)
}

type Node struct {
	cfg   Config
	log   zerolog.Logger
	Host  host.Host
	store *store.Store
	ps    *pubsub.PubSub
	topic *pubsub.Topic
	sub   *pubsub.Subscription
	rc    RunConfig
	hash  string
	limit int // frame size limit
	key   crypto.PrivKey
	// origin is the member index of the node that creates the initial token (the static
	// holder, or the starter): its first hand-offs carry no evidence (walk.CheckLineage).
	origin int

	in        chan inbound
	start     chan startMsg
	joins     chan joinMsg
	sent      chan sendResult
	announces chan finalMsg
	// mismatches carries "mismatch" messages: joiners that refused this run (the starter logs them).
	mismatches   chan finalMsg
	mismatchSeen map[string]bool // peer+hash of the mismatches logged (under mu)
	startMsg     ctlMsg
	initialTo    peer.ID

	mu      sync.Mutex // guards members, index, streams, status fields, alive, down
	members []peer.ID
	// memberAt is the index of each member (members, set with it): a lookup per
	// message, where a scan of 1,000 members cost several microseconds.
	memberAt *memberTable // shared with nodes of the same membership (read-only)
	index    int
	streams  map[peer.ID]network.Stream
	// relStreams holds one *relStream per predecessor: the long-lived stream on which
	// releases go to it.
	relStreams sync.Map
	pidStr     sync.Map // peer.ID -> its String(), see pid
	strPid     sync.Map // the inverse of pidStr, see peerOf
	// liveness: last heartbeat received per member, members declared down, and the
	// start of the observation (a member never heard from counts from there)
	alive     map[peer.ID]time.Time
	down      map[peer.ID]bool
	liveSince time.Time
	// liveCheck is when checkLiveness last ran (zero: never); liveReset: that check was
	// late (it came after a stall).
	liveCheck time.Time
	liveReset bool
	rel       chan relMsg
	// sendHook, when set (tests), is called before every token frame is written.
	sendHook func(to peer.ID, raw []byte)
	// custodyTrace, when set (tests), is called in the loop after every input to the
	// custody machine with the Readies the node applied after it.
	custodyTrace func(in CustodyInput, rds []walk.CustodyReady)
	// sendLocks holds one *sync.Mutex per member: hand-offs to one peer go one at a time.
	sendLocks sync.Map
	presign   presigns // frames signed while their release is made durable (presign.go)
	own       ownSigs  // the hand-off signatures n made last (presign.go)
	keyOnce   sync.Once
	keyID     peer.ID // the peer ID of key (signerID)
	// attempts holds the attempt counter of each release (attemptOf).
	attempts sync.Map

	// walk is the walk run's loop-owned state (walkState); fin the final-model exchange
	// (finalExchange).
	walk walkState
	fin  finalExchange

	metrics   *metrics
	hopsIn    atomic.Uint64
	lastHop   atomic.Uint64  // hop of the last token stored or processed here
	holding   atomic.Bool    // a token is here: stored and not yet handed on and acked
	paused    atomic.Bool    // PauseAtHop reached (walk.CustodyPaused)
	taken     map[int]uint64 // hand-offs taken from each member (n.mu; position.go)
	lastTok   atomic.Int64   // unix nanoseconds of the last token processed here
	budgetCap atomic.Int64   // noisy updates the budget allows (-1 before the membership is fixed)
	// ownForwards counts this node's hops without a noisy update (at its cap or budget):
	// any such forward voids the planned figure's condition that every hop is noisy.
	ownForwards atomic.Uint64
	// ownResends counts releases this node re-sent to another member (redirect after a
	// missing ack, regeneration, fallback): each shows a release to a second peer, which
	// the planned figure's single random path does not model.
	ownResends atomic.Uint64
	// ownAnomalies counts custody anomalies seen here (privacy.WalkRun.Anomalies): tokens
	// accepted under a new epoch, hand-offs refused as replays or epoch jumps, evictions;
	// acceptedEpoch is the highest epoch of a token accepted here.
	waitingFor    []string // --peer addresses not reachable yet (redial), under mu
	ownAnomalies  atomic.Uint64
	acceptedEpoch atomic.Uint64
	started       time.Time
	join          joinState    // while the membership is being fixed (Status.Join)
	logLimit      *rateLimiter // repeated warnings: one line per key every logEvery
	httpSrv       *http.Server
	// step holds the local step's fields of this node's privacy.WalkRun (walk.StepRun
	// over its own loss), with Clip and Sigma; set with the membership, under mu.
	step privacy.WalkRun
	// gater refuses connections from non-members once the membership is fixed (hosts
	// built by New; a Config.NewHost host has none).
	gater *memberGater
	// relaySrc feeds AutoRelay from the DHT routing table (nil unless used).
	relaySrc *dhtRelaySource
	// pubSnap is the public /status snapshot taken at pubAt (PublicStatus).
	failed  runFailed // a run ended with an error (/readyz, dpadmm_run_state)
	pubMu   sync.Mutex
	pubSnap Status
	pubAt   time.Time
	// HTTPAddr is the bound address of the status endpoint ("" when disabled).
	HTTPAddr string
	closers  []func() error
	cancel   context.CancelFunc
	// loopEnd is closed once the loop reads no more hand-offs (n.in): the run is over, or
	// it was stopped and the hand-off streams open to it are drained (quiesce); receive
	// then answers wire.AckBusy at once. nil before Run.
	loopEnd  chan struct{}
	loopOnce sync.Once
	// inWalk counts the inbound hand-off streams being served (handleWalk).
	inWalk atomic.Int64
	bg     sync.WaitGroup
}

type inbound struct {
	tok   walk.Token
	raw   []byte         // the token held: body and the evidence for its next hand-off
	ev    *walk.Evidence // the evidence the sender showed (walk.CustodyMsg.Shown); nil: none checked
	from  peer.ID
	reply chan byte
	// written is closed by the stream handler once the ack byte has been written.
	written chan struct{}
	// loop-owned: the sender's member index, and whether reply was answered.
	idx     int
	replied bool
}

// New creates the host, opens the data directory and joins the control topic. It does
// not start the walk; call Run.
func New(ctx context.Context, cfg Config) (*Node, error) {
	cfg.fillDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	st, err := store.Open(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	st.NoSync = cfg.NoSync
	key, err := st.Identity()
	if err != nil {
		st.Close()
		return nil, err
	}
	gater := &memberGater{}
	met := newMetrics()
	h, relaySrc, err := newHost(cfg, key, gater, met.pub)
	if err != nil {
		st.Close()
		return nil, err
	}
	if kid, err := peer.IDFromPrivateKey(key); err != nil || h.ID() != kid {
		// The node signs as its host's peer: a host of another key (a Config.NewHost
		// that ignored the key it was given) would have it sign as someone else.
		h.Close()
		st.Close()
		return nil, fmt.Errorf("node: the host's peer ID %s is not the data directory key's", shortID(h.ID()))
	}
	if a := cfg.Allow; a != nil && !cfg.Start && cfg.Data != nil {
		// The joiner holds the list its starter applies: say now what the starter would
		// refuse (it answers a refused join with silence).
		switch b := a.bound(h.ID()); {
		case b < 0:
			h.Close()
			st.Close()
			return nil, fmt.Errorf("node: this node (peer ID %s) is not on the allow-list of run %q: its starter would refuse it; the owner adds it with 'dpadmm keys allow ... %s'", h.ID(), cfg.Run, h.ID())
		case b > 0 && cfg.Data.Rows > b:
			h.Close()
			st.Close()
			return nil, fmt.Errorf("node: this node holds %d rows, more than the %d the allow-list of run %q lets it claim: its starter would refuse it", cfg.Data.Rows, b, cfg.Run)
		}
	}
	n := &Node{
		cfg: cfg, log: cfg.Logger.With().Str("run", cfg.Run).Str("peer", shortID(h.ID())).Logger().Hook(newWarnLimit(logEvery, warnBurst)),
		Host: h, store: st, index: -1, streams: map[peer.ID]network.Stream{},
		in: make(chan inbound), start: make(chan startMsg, 4),
		joins: make(chan joinMsg, 64), sent: make(chan sendResult, 16), announces: make(chan finalMsg, 16), mismatches: make(chan finalMsg, 16),
		alive: map[peer.ID]time.Time{}, down: map[peer.ID]bool{},
		rel:     make(chan relMsg, 16),
		metrics: met, started: time.Now(), logLimit: newRateLimiter(logEvery), gater: gater,
		key: key, relaySrc: relaySrc,
		walk: walkState{tick: tickOf(cfg)},
		fin:  finalExchange{in: make(chan finalMsg, 4), doneFrom: map[peer.ID]bool{}},
	}
	n.metrics.registerNode(n)
	gater.inUse = n.relayInUse
	gater.onDeny = func(p peer.ID) {
		n.metrics.rejected.WithLabelValues("non-member").Inc()
		n.limitedLog(zerolog.WarnLevel, "gater").Str("from", shortID(p)).Msg("connection refused: the peer is not a member of the run")
	}
	n.budgetCap.Store(-1)
	if err := cfg.checkStarter(h.ID()); err != nil {
		h.Close()
		st.Close()
		return nil, err
	}
	n.rc = cfg.RunConfig()
	n.hash = n.rc.Hash()
	n.limit = wire.TokenSize(cfg.Run, cfg.Data.ModelDim()) + wire.MaxCert
	n.closers = append(n.closers, h.Close, st.Close)
	if err := n.startServices(ctx); err != nil {
		n.Close()
		return nil, err
	}
	n.log.Info().Str("id", h.ID().String()).Interface("addrs", h.Addrs()).Str("config_hash", n.hash).Str("membership", cfg.Membership()).Msg("node up")
	if cfg.Membership() == "open" {
		n.log.Warn().Msg("open run: any peer with this configuration that joins in the join window becomes a member (close it with --swarm-key, --allow, --starter, --max-rows; " +
			"without --max-rows the starter admits at most " + strconv.Itoa(OpenRowFactor) + " times its own rows per member)")
	}
	return n, nil
}

// fillDefaults sets the zero fields of c that have a default.
func (c *Config) fillDefaults() {
	if c.Delta == 0 {
		c.Delta = privacy.DefaultDelta
	}
	if c.AckTimeout == 0 {
		c.AckTimeout = 10 * time.Second
	}
	if c.FinalWait == 0 {
		c.FinalWait = 30 * time.Second
	}
	if c.JoinWindow == 0 {
		c.JoinWindow = 2 * time.Second
	}
	if c.MinPeers == 0 {
		c.MinPeers = 2
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = time.Second
	}
	if c.HeartbeatMisses == 0 {
		c.HeartbeatMisses = 15
	}
	if c.Depth == 0 {
		c.Depth = 8
	}
}

// checkStarter refuses a --start by a peer other than the allow-list's owner or the
// pinned starter.
func (c *Config) checkStarter(self peer.ID) error {
	if c.Start && c.Allow != nil && c.Allow.Owner != self.String() {
		return fmt.Errorf("node: only the allow-list's owner %s may start the run, this node is %s", c.Allow.Owner, self)
	}
	if c.Start && c.Starter != "" && c.Starter != self {
		return fmt.Errorf("node: --starter %s pins another peer as the starter, this node is %s", c.Starter, self)
	}
	return nil
}

// newHost builds the libp2p host of cfg (cfg.NewHost when set): listen addresses, the
// connection gater, the resource manager, a private network with a swarm key (TCP only),
// NAT services and relays.
func newHost(cfg Config, key crypto.PrivKey, gater *memberGater, reg prometheus.Registerer) (host.Host, *dhtRelaySource, error) {
	if cfg.NewHost != nil {
		h, err := cfg.NewHost(key)
		if err != nil {
			return nil, nil, fmt.Errorf("node: libp2p host: %w", err)
		}
		return h, nil, nil
	}
	listen := cfg.Listen
	if len(listen) == 0 {
		listen = []string{"/ip4/0.0.0.0/tcp/0", "/ip4/0.0.0.0/udp/0/quic-v1"}
	}
	if err := checkPorts(listen); err != nil {
		return nil, nil, err
	}
	rm, err := resourceManager(cfg.Run)
	if err != nil {
		return nil, nil, err
	}
	// go-libp2p's own metrics (swarm, resource manager, identify, relay, hole punching) on
	// the node's public registry, served on /metrics (docs/threat-model.md says what they show).
	opts := []libp2p.Option{libp2p.Identity(key), libp2p.ConnectionGater(gater), libp2p.ResourceManager(rm),
		libp2p.PrometheusRegisterer(reg)}
	if cfg.SwarmKey != nil {
		// go-libp2p refuses private networks with QUIC and WebTransport: TCP only.
		var tcpAddrs []string
		for _, a := range listen {
			if !strings.Contains(a, "/quic") && !strings.Contains(a, "/webtransport") && !strings.Contains(a, "/udp/") {
				tcpAddrs = append(tcpAddrs, a)
			}
		}
		if len(tcpAddrs) == 0 {
			return nil, nil, fmt.Errorf("node: a swarm key needs a TCP listen address (QUIC does not support private networks), got %v", listen)
		}
		listen = tcpAddrs
		opts = append(opts, libp2p.PrivateNetwork(cfg.SwarmKey), libp2p.Transport(tcp.NewTCPTransport))
	}
	opts = append(opts, libp2p.ListenAddrStrings(listen...))
	if cfg.NAT {
		opts = append(opts, libp2p.NATPortMap(), libp2p.EnableNATService(), libp2p.EnableHolePunching())
	}
	ropts, src, err := relayOptions(cfg, gater)
	if err != nil {
		return nil, nil, err
	}
	opts = append(opts, ropts...)
	h, err := libp2p.New(opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("node: libp2p host (listen %v): %w", listen, err)
	}
	return h, src, nil
}

// joinControl starts the GossipSub router and joins and subscribes to the control topic.
func (n *Node) joinControl(ctx context.Context) error {
	var err error
	params, th := controlScoreParams(wire.ControlTopic(n.cfg.Run))
	if n.ps, err = pubsub.NewGossipSub(ctx, n.Host, pubsub.WithPeerScore(params, th)); err != nil {
		return fmt.Errorf("node: gossipsub: %w", err)
	}
	if err := n.ps.RegisterTopicValidator(wire.ControlTopic(n.cfg.Run), n.validateControl); err != nil {
		return fmt.Errorf("node: gossipsub validator: %w", err)
	}
	if n.topic, err = n.ps.Join(wire.ControlTopic(n.cfg.Run)); err != nil {
		return err
	}
	n.sub, err = n.topic.Subscribe()
	return err
}

// startServices joins the control topic, sets the stream handlers and starts HTTP,
// mDNS, the direct dials and the DHT.
func (n *Node) startServices(ctx context.Context) error {
	cfg, h := n.cfg, n.Host
	if !cfg.NoControlTopic {
		if err := n.joinControl(ctx); err != nil {
			return err
		}
	}
	h.SetStreamHandler(wire.WalkProtocol(cfg.Run), n.handleWalk)
	h.SetStreamHandler(wire.DoneProtocol(cfg.Run), n.handleDone)
	h.SetStreamHandler(wire.FinalProtocol(cfg.Run), n.handleFinal)
	h.SetStreamHandler(wire.ReleaseProtocol(cfg.Run), n.handleRelease)
	h.SetStreamHandler(wire.AliveProtocol(cfg.Run), n.handleAlive)
	if cfg.HTTP != "" {
		if err := n.serveHTTP(cfg.HTTP); err != nil {
			return err
		}
	}
	if cfg.MDNS {
		if err := n.startMDNS(); err != nil {
			return err
		}
	}
	n.dialPeers(ctx)
	if len(cfg.Bootstrap) > 0 {
		return n.startDHT(ctx)
	}
	return nil
}

// dialPeers keeps the addresses of cfg.Peers and dials them (unless Run dials a static
// membership itself).
func (n *Node) dialPeers(ctx context.Context) {
	for _, a := range n.cfg.Peers {
		if ai, err := addrInfo(a); err == nil {
			if ai.ID == n.Host.ID() {
				continue // a launcher may list every member, this node included
			}
			// Keep the address for later hand-offs even if the peer is not up yet.
			n.Host.Peerstore().AddAddrs(ai.ID, ai.Addrs, peerstore.PermanentAddrTTL)
			if n.cfg.Members != nil && n.cfg.WaitMembers > 0 {
				continue // Run dials the members until all are connected
			}
		}
		if err := n.dial(ctx, a); err != nil {
			n.log.Warn().Err(err).Str("addr", a).Msg("cannot dial peer: retrying with back-off until it answers or the run starts")
			n.redial(a)
		}
	}
}

// redialMax bounds the back-off between two dials of a --peer that did not answer.
const redialMax = 30 * time.Second

// redial keeps dialling addr in the background, with a back-off from 1 s doubling up to
// redialMax, until it answers, the membership is fixed (the custody layer dials members
// from then on) or the node closes; the join status lists it meanwhile (waiting_for), so
// that a joiner started before its starter listens says what it waits for and connects
// once the starter is up.
func (n *Node) redial(addr string) {
	ctx, cancel := context.WithCancel(context.Background())
	n.closers = append(n.closers, func() error { cancel(); return nil })
	n.setWaitingFor(addr, true)
	n.bg.Add(1)
	go func() {
		defer n.bg.Done()
		defer n.setWaitingFor(addr, false)
		wait := time.Second
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			n.mu.Lock()
			fixed := len(n.members) > 0
			n.mu.Unlock()
			if fixed {
				return
			}
			if ai, err := addrInfo(addr); err == nil {
				// This loop's own back-off governs: the swarm's (5 s after a failure,
				// growing) would refuse the next dial of a starter that came up meanwhile.
				if sw, ok := n.Host.Network().(*swarm.Swarm); ok {
					sw.Backoff().Clear(ai.ID)
				}
			}
			if err := n.dial(ctx, addr); err == nil {
				n.log.Info().Str("addr", addr).Msg("connected to --peer")
				return
			}
			wait = min(2*wait, redialMax)
			n.limitedLog(zerolog.InfoLevel, "redial:"+addr).Str("addr", addr).Dur("retry_in", wait).
				Msg("waiting for --peer: not reachable yet")
		}
	}()
}

// setWaitingFor adds or removes addr from the peers this node waits to reach.
func (n *Node) setWaitingFor(addr string, on bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if on {
		n.waitingFor = append(n.waitingFor, addr)
		return
	}
	n.waitingFor = slices.DeleteFunc(n.waitingFor, func(s string) bool { return s == addr })
}

func shortID(p peer.ID) string {
	var s string
	if v, ok := idStrings.Load(p); ok {
		s = v.(string) // a member's, encoded once per process (idString)
	} else {
		s = p.String() // not remembered: any peer may open a stream
	}
	if len(s) > 8 {
		return s[len(s)-8:]
	}
	return s
}

// ID returns the node's peer ID.
func (n *Node) ID() peer.ID { return n.Host.ID() }

// ConfigHash returns the hash of the run configuration.
func (n *Node) ConfigHash() string { return n.hash }

// Store returns the node's data directory store.
func (n *Node) Store() *store.Store { return n.store }

// Close stops the host and closes the store.
func (n *Node) Close() error {
	n.mu.Lock()
	if n.cancel != nil {
		n.cancel()
	}
	n.mu.Unlock()
	if n.httpSrv != nil {
		n.httpSrv.Close()
	}
	var first error
	for i := len(n.closers) - 1; i >= 0; i-- {
		if err := n.closers[i](); err != nil && first == nil {
			first = err
		}
	}
	n.closers = nil
	n.bg.Wait()
	return first
}

// Run takes part in the run until the final model is known, writes model.json and
// returns it.
func (n *Node) Run(ctx context.Context) (_ *Model, err error) {
	parent := ctx // the caller's context: its end is a stop, not a failure
	defer func() {
		if err != nil && parent.Err() == nil {
			n.failed.Store(true) // /readyz and dpadmm_run_state say so
		}
	}()
	if m, err := n.finishedModel(); m != nil || err != nil {
		return m, err
	}
	ctx, cancel := context.WithCancel(allowRelayed(ctx))
	defer cancel()
	n.mu.Lock()
	n.cancel, n.loopEnd = cancel, make(chan struct{})
	n.mu.Unlock()
	defer n.endLoop()
	n.bg.Add(1)
	go func() { defer n.bg.Done(); n.readControl(ctx) }()
	if err := n.membership(ctx); err != nil {
		return nil, err
	}
	if n.cfg.RADMM == nil && n.walk.cust != nil && !n.cfg.Harness.FreshDataDir {
		if err := n.checkPosition(ctx); err != nil {
			return nil, err
		}
	}
	n.startHeartbeats(ctx)
	return n.loop(ctx)
}

// membership fixes the member list (static, from start.json on a restart, or via
// announce/join/start).
func (n *Node) membership(ctx context.Context) error {
	defer n.join.end()
	if n.cfg.Members == nil {
		if ok, err := n.resumeMembership(ctx); ok || err != nil {
			return err // rejoin.go: a restart during the run
		}
	}
	switch {
	case n.cfg.Members != nil:
		n.join.begin("static", len(n.cfg.Members))
	case n.cfg.Start:
		n.join.begin("starter", n.cfg.MinPeers)
	default:
		n.join.begin("joiner", 0)
	}
	if n.cfg.Members != nil {
		n.mu.Lock()
		n.origin = n.cfg.Holder // the static holder creates the initial token
		n.mu.Unlock()
		n.closeToMembers(n.cfg.Members)
		if err := n.setMembers(n.cfg.Members, n.cfg.Weight); err != nil {
			return err
		}
		if n.cfg.WaitMembers > 0 {
			return n.waitMembers(ctx, n.cfg.WaitMembers)
		}
		return nil
	}
	if n.cfg.Start {
		return n.runStarter(ctx)
	}
	return n.runJoiner(ctx)
}

func (n *Node) setMembers(ms []peer.ID, weight float64) error {
	idx := -1
	names := make([]string, len(ms))
	for i, p := range ms {
		names[i] = idString(p)
		if p == n.ID() {
			idx = i
		}
	}
	if idx < 0 {
		return errors.New("node: this node is not in the membership")
	}
	c := n.cfg
	wc, err := n.walkConfig(idx, names)
	if err != nil {
		return err
	}
	ll, err := consensus.NewLocalLoss(c.Data, c.Problem.Loss, weight)
	if err != nil {
		return err
	}
	// The step's figures from this node's own loss (walk.StepRun): its sensitivity and
	// smoothness; it cannot certify the others' sgd steps, so its network figure for sgd
	// is the local one.
	var step privacy.WalkRun
	if err := walk.StepRun(wc, []*consensus.LocalLoss{ll}, c.Data.ModelDim(), len(ms), &step); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	step.Clip, step.Sigma = c.Clip, c.Sigma
	n.mu.Lock()
	n.step = step
	n.mu.Unlock()
	if err := n.applyBudget(&wc, idx, len(ms), step); err != nil {
		return err
	}
	if err := n.checkFigure(wc, len(ms), step); err != nil {
		return err
	}
	var seed [16]byte
	crand.Read(seed[:])
	n.walk.custSeed = [2]uint64{binary.LittleEndian.Uint64(seed[:8]), binary.LittleEndian.Uint64(seed[8:])}
	n.mu.Lock()
	n.setMemberList(ms, idx)
	n.mu.Unlock()
	cust, err := walk.NewCustody(wc, ll, c.Data.ModelDim(), n.custodyConfig(n.walk.custSeed))
	if err != nil {
		return err
	}
	restore, err := n.restoreInput(idx)
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.walk.cust, n.walk.wk = cust, drive.NewWalk(cust)
	n.mu.Unlock()
	if restore != nil {
		if err := cust.Restore(restore.Walk, *restore.Snapshot); err != nil {
			return fmt.Errorf("node: checkpoint: %w", err)
		}
		for _, b := range cust.Backups() {
			if !b.Acked && !b.Pending && restore.Snapshot.Held == nil {
				// The machine sends it again, the same bytes to the same member, at its
				// first tick.
				n.log.Info().Str("to", shortID(ms[b.To])).Uint64("epoch", b.Epoch).Uint64("hop", b.Hop).Msg("resending the token held in custody")
			}
		}
		if n.custodyTrace != nil {
			n.custodyTrace(*restore, nil)
		}
	}
	n.log.Info().Int("index", idx).Int("nodes", len(ms)).Msg("membership fixed")
	return nil
}

// walkConfig returns the walk machine's configuration of member idx: its next-hop and
// noise sources (seeded in testnets, secure otherwise) and the hyperparameters.
func (n *Node) walkConfig(idx int, names []string) (walk.Config, error) {
	c := n.cfg
	r := (*rand.Rand)(nil)
	var noise privacy.Noise
	switch {
	case c.Sources != nil:
		n.walk.hopSrc, n.walk.noiseSrc = c.Sources(idx)
		if n.walk.hopSrc == nil || n.walk.noiseSrc == nil {
			return walk.Config{}, errors.New("node: Sources returned a nil generator")
		}
		r, noise = rand.New(n.walk.hopSrc), privacy.NewNoiseFromRand(rand.New(n.walk.noiseSrc))
	case c.Rand != nil:
		r = c.Rand(idx)
	default:
		r = cryptoRand()
	}
	wc := walk.Config{
		Node: idx, Nodes: len(names), Gamma: c.Gamma, Lambda: c.Lambda, Clip: c.Clip, Sigma: c.Sigma,
		Reg: c.Problem.Reg, Rand: r, MaxUpdates: c.MaxUpdates, Run: c.Run, Names: names, Step: c.Step,
		Unit: c.unit(), RowBound: c.RowBound,
	}
	if c.Sigma > 0 {
		if noise != nil {
			wc.Noise = noise
		} else if c.Noise != nil {
			wc.Noise = c.Noise(idx)
		} else {
			wc.Noise = privacy.NewSecureNoise()
		}
		if err := privacy.CheckNoise(wc.Noise, c.AllowSeededNoise); err != nil {
			return walk.Config{}, fmt.Errorf("node: %w", err)
		}
	}
	return wc, nil
}

// applyBudget sets the noisy-update cap of member idx of nodes from Config.BudgetEpsilon
// (walk.BudgetCapsStep); nothing without a budget.
// checkFigure runs once the membership is known, before any update: it logs the node's
// planned local figure over its cap (for its unit) and the verdict's reasons and warnings
// (hops that can only forward the token, a cap likely reached early, a planned figure that
// cannot hold: privacy.WalkDecide, as 'dpadmm testnet' warns), and refuses to run when the
// local figure at the cap exceeds MaxEpsilon (0: no ceiling) or when there is no cap and a
// ceiling is set.
func (n *Node) checkFigure(wc walk.Config, nodes int, step privacy.WalkRun) error {
	c := n.cfg
	delta := c.Delta
	if delta == 0 {
		delta = privacy.DefaultDelta
	}
	k := c.MaxUpdates
	if wc.Budgeted && (k == 0 || wc.BudgetCap < k) {
		k = wc.BudgetCap
	}
	r := step
	r.Nodes, r.Complete, r.Cap, r.Hops, r.Planning = nodes, wc.Graph == nil || wc.Graph.Complete, k, c.Hops, true
	v := privacy.WalkDecide(r)
	for _, reason := range v.Reasons {
		n.log.Warn().Msg("the planned pairwise privacy figure will not hold for this run: " + reason)
	}
	for _, w := range v.Warnings {
		n.log.Warn().Msg("the planned pairwise privacy figure is at risk: " + w)
	}
	if !v.Noisy {
		n.log.Warn().Msg("no noise or no clipping: this node's updates carry no privacy guarantee")
		if c.MaxEpsilon > 0 {
			return fmt.Errorf("node: no privacy guarantee (sigma %v, clip %v) and an epsilon ceiling of %g (--max-epsilon): refusing to run", c.Sigma, c.Clip, c.MaxEpsilon)
		}
		return nil
	}
	if k == 0 {
		if c.MaxEpsilon > 0 {
			return fmt.Errorf("node: no cap on noisy updates (--max-updates 0, no budget): the local epsilon is unbounded, above the ceiling %g (--max-epsilon; 0 disables it)", c.MaxEpsilon)
		}
		n.log.Warn().Msg("no cap on noisy updates: the local epsilon grows with every update")
		return nil
	}
	b := privacy.StepLocalBound(r, k, delta)
	n.log.Info().Float64("epsilon", b.Epsilon).Float64("delta", delta).Int("cap", k).Str("unit", r.UnitNote()).
		Str("theorem", b.Theorem).Msg("local privacy figure at the cap")
	if c.MaxEpsilon > 0 && b.Epsilon > c.MaxEpsilon {
		return fmt.Errorf("node: the local epsilon over this node's cap of %d noisy updates would be %.4g (%s, delta %g), above the ceiling %g: "+
			"lower --max-updates, raise --sigma or give --target-epsilon; --max-epsilon raises the ceiling (0 disables it)",
			k, b.Epsilon, r.UnitNote(), delta, c.MaxEpsilon)
	}
	return nil
}

func (n *Node) applyBudget(wc *walk.Config, idx, nodes int, step privacy.WalkRun) error {
	c := n.cfg
	if c.BudgetEpsilon <= 0 {
		return nil
	}
	kind := c.BudgetKind
	if kind == "" {
		kind = walk.BudgetLocal
	}
	delta := c.Delta
	if delta == 0 {
		delta = privacy.DefaultDelta
	}
	plan, err := walk.BudgetCapsStep(walk.Budget{Kind: kind, Epsilon: c.BudgetEpsilon, Delta: delta, Hops: c.Hops}, nodes, nil, step)
	if err != nil {
		return err
	}
	wc.Budgeted, wc.BudgetCap = true, plan.Caps[idx]
	n.budgetCap.Store(int64(plan.Caps[idx]))
	n.log.Info().Float64("budget_epsilon", c.BudgetEpsilon).Str("kind", kind).Int("cap", plan.Caps[idx]).
		Str("theorem", plan.Theorem).Bool("conditions_hold", plan.ConditionsHold).Msg("privacy budget: noisy updates allowed")
	return nil
}

// restoreInput reads the checkpoint and the inbox of member idx and returns the custody
// input that restores them (nil for a fresh start). It restores the seeded sources and
// the node's own copy of the checkpoint too.
func (n *Node) restoreInput(idx int) (*CustodyInput, error) {
	c := n.cfg
	ck, err := n.store.LoadCheckpoint()
	if err != nil {
		return nil, err
	}
	n.walk.ckpt = store.Checkpoint{Run: c.Run, Node: idx}
	var restore *CustodyInput
	if ck != nil {
		if ck.Run != c.Run || ck.Node != idx {
			return nil, fmt.Errorf("node: checkpoint in %s is for run %q node %d, not run %q node %d; use a fresh --datadir", n.store.Dir, ck.Run, ck.Node, c.Run, idx)
		}
		if n.walk.hopSrc != nil && len(ck.HopSource) > 0 {
			if err := n.walk.hopSrc.UnmarshalBinary(ck.HopSource); err != nil {
				return nil, fmt.Errorf("node: checkpoint: next-hop source: %w", err)
			}
			if err := n.walk.noiseSrc.UnmarshalBinary(ck.NoiseSource); err != nil {
				return nil, fmt.Errorf("node: checkpoint: noise source: %w", err)
			}
		}
		n.walk.ckpt = *ck
		snap := n.snapshotOf(ck)
		restore = &CustodyInput{Kind: "restore", Snapshot: &snap, Walk: &walk.Checkpoint{Node: idx, Updates: ck.Updates, U: ck.U}}
		n.metrics.nupd.Store(int64(ck.Updates))
		n.lastHop.Store(ck.Hop) // the progress line's hop survives the restart
		n.walk.seen = true
		n.log.Info().Int("updates", ck.Updates).Uint64("hop", ck.Hop).Int("ledger", n.store.Entries()).Msg("restored checkpoint")
	}
	// A held token newer than the last one processed is held again, and the machine steps
	// it when the loop starts: the one the checkpoint's step handed to the node itself,
	// else the inbox's (acked before its step, and the node stopped before the
	// checkpoint of that step).
	var h *walk.CustodyHeld
	if b, err := n.store.LoadInbox(); err == nil {
		h, _ = n.heldOf(b)
	}
	if ck != nil && len(ck.Held) > 0 {
		if c, err := n.heldOf(ck.Held); err == nil && (h == nil || above(c.Token, h.Token.Epoch, h.Token.Hop)) {
			h = c
		}
	}
	if h != nil {
		tok := h.Token
		if ck == nil || above(tok, ck.Epoch, ck.Hop) {
			if restore == nil {
				snap := walk.CustodySnapshot{}
				restore = &CustodyInput{Kind: "restore", Snapshot: &snap}
			}
			n.log.Info().Uint64("hop", tok.Hop).Msg("processing the stored inbound token")
			restore.Snapshot.Held = h
			n.walk.seen = true
		}
	}
	return restore, nil
}

// above reports whether token t is above position (epoch, hop).
func above(t walk.Token, epoch, hop uint64) bool {
	return t.Epoch > epoch || t.Epoch == epoch && t.Hop > hop
}

// waitMembers dials every member not yet connected, from the peerstore's addresses,
// until all are connected or the timeout passes (then the walk starts anyway and the
// hand-off's own retries take over).
func (n *Node) waitMembers(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	backoff := 20 * time.Millisecond
	for {
		var missing []peer.ID
		for _, p := range n.members {
			if p != n.ID() && n.Host.Network().Connectedness(p) != network.Connected {
				missing = append(missing, p)
			}
		}
		n.join.update(func(j *JoinStatus) { j.Joined = len(n.members) - len(missing) })
		if len(missing) == 0 {
			n.log.Info().Int("members", len(n.members)).Msg("connected to every member")
			return nil
		}
		if time.Now().After(deadline) {
			n.log.Warn().Int("missing", len(missing)).Dur("waited", timeout).Msg("not connected to every member; starting anyway")
			return nil
		}
		for _, p := range missing {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			err := n.Host.Connect(cctx, peer.AddrInfo{ID: p, Addrs: n.Host.Peerstore().Addrs(p)})
			cancel()
			if err != nil {
				n.log.Debug().Err(err).Str("peer", shortID(p)).Msg("member not reachable yet")
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

func cryptoRand() *rand.Rand {
	var b [16]byte
	crand.Read(b[:])
	return rand.New(rand.NewPCG(binary.LittleEndian.Uint64(b[:8]), binary.LittleEndian.Uint64(b[8:])))
}

func (n *Node) isMember(p peer.ID) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, ok := n.memberAt.index(p)
	return ok
}

// setMemberList fixes the membership ms with this node at index idx (n.mu held).
func (n *Node) setMemberList(ms []peer.ID, idx int) {
	t := memberTableOf(ms)
	n.members, n.index, n.memberAt = t.ids[:len(t.ids):len(t.ids)], idx, t
}

// handleWalk serves one long-lived inbound hand-off stream: frames in, one ack byte out
// per frame.
func (n *Node) handleWalk(s network.Stream) {
	n.inWalk.Add(1)
	defer n.inWalk.Add(-1)
	defer s.Close()
	from := s.Conn().RemotePeer()
	lg := n.log.With().Str("from", shortID(from)).Logger()
	for {
		// An idle stream is closed after StreamIdle (the sender opens a new one at its next
		// hand-off), and a frame must arrive whole within it: a peer cannot hold a stream
		// and its reader forever.
		s.SetReadDeadline(time.Now().Add(StreamIdle))
		b, err := wire.ReadFrame(s, n.limit)
		if err != nil {
			switch {
			case errors.Is(err, wire.ErrTooLarge):
				n.reject(lg, "oversized", err.Error())
				s.Write([]byte{wire.AckReject})
				s.Reset()
			case errors.Is(err, io.ErrUnexpectedEOF) || (errors.Is(err, os.ErrDeadlineExceeded) && errors.Is(err, wire.ErrPartialFrame)):
				n.reject(lg, "truncated", "the stream ended inside a frame")
			}
			return
		}
		if n.cfg.WithholdAcks {
			// Fault injection: the bytes were read; no ack ever goes back. The sender
			// times out and resets the stream, which ends this loop.
			lg.Warn().Int("bytes", len(b)).Msg("withholding the ack of a token hand-off (fault injection)")
			continue
		}
		code, written := n.receive(lg, from, b)
		_, err = s.Write([]byte{code})
		if written != nil {
			close(written)
		}
		if err != nil {
			return
		}
	}
}

func (n *Node) reject(lg zerolog.Logger, kind, reason string) {
	n.metrics.rejected.WithLabelValues(kind).Inc()
	lg.Warn().Str("verdict", "reject").Str("kind", kind).Msg("hand-off rejected: " + reason)
}

// receive decodes and validates one frame and, if it passes, hands it to the loop which
// stores it durably before the ack is returned.
func (n *Node) receive(lg zerolog.Logger, from peer.ID, b []byte) (byte, chan struct{}) {
	tok, err := wire.DecodeToken(b)
	if err != nil {
		kind := "malformed"
		if errors.Is(err, wire.ErrVersion) {
			kind = "version"
		}
		n.reject(lg, kind, err.Error())
		return wire.AckReject, nil
	}
	n.mu.Lock()
	ready, end := n.walk.cust != nil, n.loopEnd
	n.mu.Unlock()
	if !ready || isClosed(end) {
		return wire.AckBusy, nil // not started, or the loop has ended (see quiesce)
	}
	if !n.isMember(from) {
		n.reject(lg, "non-member", "sender is not a member of the run")
		return wire.AckReject, nil
	}
	v := wire.Validator{Run: n.cfg.Run, Dim: n.cfg.Data.ModelDim(), Hops: n.cfg.Hops}
	if vd, reason := v.Check(tok); vd != wire.Accept {
		n.reject(lg, "invalid", reason)
		return wire.AckReject, nil
	}
	held, ev, err := n.checkSigned(tok, b, from)
	if err != nil {
		n.reject(lg, "signature", err.Error())
		return wire.AckReject, nil
	}
	if n.cfg.Hops > 0 && tok.Hop >= n.cfg.Hops {
		n.keepPrevLink(tok.Epoch, tok.Hop, n.memberIndex(from), finalLinkOf(b))
	}
	reply, written := make(chan byte, 1), make(chan struct{})
	msg := inbound{tok: tok, raw: held, ev: &ev, from: from, reply: reply, written: written}
	select {
	case n.in <- msg:
	default:
		t := time.NewTimer(n.cfg.AckTimeout / 2)
		select {
		case n.in <- msg:
			t.Stop()
		case <-t.C:
			return wire.AckBusy, nil
		case <-end:
			t.Stop()
			return wire.AckBusy, nil // the loop has ended: the token was not taken
		}
	}
	return <-reply, written
}

// isClosed reports whether c is a closed channel (false for nil).
func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// onInbound gives the custody machine a hand-off that passed the stream's checks (decode,
// membership, run, shape, signature and evidence); the machine's ack (or refusal) is the
// byte written back, once the Ready that carries it is durable (Walk.Apply).
//
// Once the run is stopped (ctx ended) the machine was told so (quiesce: Custody.Stop) and
// answers by its rules: a new token is refused busy, a re-send of a token it took is a
// duplicate (custody passed with the first ack; the token is in the inbox, stepped at the
// restart), one not above its fence is stale.
func (n *Node) onInbound(ctx context.Context, msg inbound) {
	start, at := time.Now(), [2]uint64{n.walk.ckpt.Epoch, n.walk.ckpt.Hop}
	msg.idx = n.memberIndex(msg.from)
	n.walk.cur = &msg
	n.walk.wk.SetCoalesce(n.walk.coalesceAcks(n.cfg.AckTimeout))
	err := n.input(ctx, CustodyInput{Kind: "step", Msg: walk.CustodyMsg{Kind: walk.CustodyToken, From: msg.idx, To: n.index,
		Epoch: msg.tok.Epoch, Hop: msg.tok.Hop, Token: msg.tok, Evidence: heldEvidence(msg.raw), Shown: msg.ev}})
	n.walk.wk.SetCoalesce(false) // a token held at other inputs (a restart) is acked alone
	if at != [2]uint64{n.walk.ckpt.Epoch, n.walk.ckpt.Hop} {
		// Only a hand-off that stepped a token counts: a duplicate or a refusal answered
		// at once must not wear the maximum down.
		n.walk.noteStepCost(time.Since(start))
	}
	n.walk.cur = nil
	if !msg.replied {
		code := wire.AckBusy // the Ready could not be applied: not taken
		if err != nil {
			n.reject(n.log.With().Str("from", shortID(msg.from)).Logger(), "invalid", err.Error())
			code = wire.AckReject
		}
		msg.reply <- code
	}
}

// loop is the one goroutine that owns the custody machine: it steps a token held at a
// restart, starts the walk at its origin and then runs the runtime loop (runLoop) with
// the walk's inputs (walkLoop) on the wall clock.
func (n *Node) loop(ctx context.Context) (*Model, error) {
	n.walk.t0 = time.Now()
	n.drain(ctx, nil) // a token held at the restart is stepped now
	if n.initialTo != "" && !n.walk.seen && len(n.walk.ckpt.Out) == 0 {
		n.waitTopicPeers(ctx, 10*time.Second)
		if n.initialTo == n.ID() {
			n.input(ctx, CustodyInput{Kind: "start", Token: n.initialToken()})
		} else {
			// The origin's hand-off of the unstepped initial token: no evidence.
			n.input(ctx, CustodyInput{Kind: "handover", Peer: n.memberIndex(n.initialTo), Token: n.initialToken()})
		}
	}
	if n.cfg.Members != nil && n.index == n.cfg.Holder && !n.walk.seen && len(n.walk.ckpt.Out) == 0 {
		n.waitTopicPeers(ctx, 10*time.Second)
		n.input(ctx, CustodyInput{Kind: "start", Token: n.initialToken()})
	}
	var live <-chan time.Time
	if n.cfg.Heartbeat > 0 {
		t := time.NewTicker(n.cfg.Heartbeat)
		defer t.Stop()
		live = t.C
	}
	err := drive.RunLoop(ctx, walkLoop{n: n, ctx: ctx, live: live}, drive.WallClock{T0: n.walk.t0, Tick: n.walk.tick})
	n.endLoop()
	if err != nil {
		return nil, err
	}
	return n.finish(ctx)
}

// endLoop records that the loop reads no more hand-offs: receive answers wire.AckBusy at once.
func (n *Node) endLoop() {
	n.loopOnce.Do(func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.loopEnd != nil {
			close(n.loopEnd)
		}
	})
}

// walkLoop is the walk's part of the runtime loop (runLoop): the inputs of its custody
// machine are the hand-offs received, the outcomes of its own hand-offs, releases, the
// heartbeat checks (PeerDown/PeerUp) and final models from the control plane; the run is
// over when the machine could not apply a Ready (fatal) or a final model is kept.
type walkLoop struct {
	n    *Node
	ctx  context.Context
	live <-chan time.Time // heartbeat checks (nil: none)
}

func (w walkLoop) Settle(context.Context) (bool, error) {
	switch {
	case w.n.walk.fatal != nil:
		return true, w.n.walk.fatal
	case w.n.fin.model != nil:
		return true, nil
	}
	return false, nil
}

func (w walkLoop) Deadline() (int64, bool) { return w.n.walk.wk.NextDeadline() }

func (w walkLoop) TickTo(t int64) {
	if t > w.n.walk.cust.Now() {
		w.n.input(w.ctx, CustodyInput{Kind: "tick", Tick: t})
	}
}

func (w walkLoop) Wait(ctx context.Context, timer <-chan time.Time) (func(), error) {
	n := w.n
	select {
	case <-ctx.Done():
		n.quiesce(ctx)
		return nil, ctx.Err()
	case msg := <-n.in:
		return func() { n.onInbound(ctx, msg) }, nil
	case r := <-n.sent:
		return func() { n.onSent(ctx, r) }, nil
	case m := <-n.rel:
		ms := []relMsg{m}
		for more := true; more && len(ms) < cap(n.rel); {
			select {
			case m := <-n.rel:
				ms = append(ms, m)
			default:
				more = false
			}
		}
		return func() { n.onReleases(ctx, ms) }, nil
	case <-w.live:
		return func() { n.checkLiveness(ctx) }, nil
	case <-timer:
	case f := <-n.fin.in:
		return func() { n.takeFinal(f) }, nil
	case <-n.start: // membership already fixed
	case <-n.announces:
	case j := <-n.joins:
		if n.cfg.Start && j.m.Hash == n.hash && n.startMsg.Type == "start" {
			n.publish(ctx, n.startMsg) // a late joiner may have missed the start
		}
	}
	return nil, nil
}

// stopDrain bounds how long a stopping node keeps its host up for the members that
// still have a hand-off stream open to it (see quiesce).
const stopDrain = 2 * time.Second

// quiesce ends the node's part in the hand-offs when its run is stopped (the walk's
// context ended: SIGTERM, Ctrl-C, a canceled testnet), before the host is closed.
//
// Its own hand-off in flight ends without a redirection: it was started with the
// stopped context, so a failure is not charged to the peer, and the token stays in
// custody (durable, resent on restart). Its outbound hand-off streams are reset, which
// also tells the members that this node sends nothing more. It then keeps the host up
// while members still have a hand-off stream open to it, at most min(AckTimeout,
// stopDrain), and keeps answering their hand-offs (onInbound) through its custody
// machine, told first that the node stops (walk.Custody.Stop): from then on it takes no
// new token, answered wire.AckBusy (it would not process it), while a re-send of a token it
// already took is answered wire.AckDuplicate:
// custody passed to this node with its first ack (the token is in its inbox and stepped
// at its restart), so the sender must not redirect it. A member that restarts re-sends
// its unacked releases at its first tick and may meet their holder stopping just then.
// A member that is still running meanwhile sees a busy peer for a new token, not a
// failed one: it keeps custody and retries the same peer until AckTimeout, so a member
// stopped at the same time (every node of a testnet) ends with its token in custody
// instead of redirecting it. A redirection at that moment would name in the ledger a
// peer that is itself stopping, charged as a view of the release (a safe over-count, but
// a path that is not the walk's). Members that go on running redirect after AckTimeout,
// as from any peer that stays busy. Once it returns the loop reads no more hand-offs
// (endLoop): receive answers wire.AckBusy at once.
func (n *Node) quiesce(ctx context.Context) {
	n.input(ctx, CustodyInput{Kind: "stop"}) // the machine takes no new token and sends none
	n.mu.Lock()
	out := n.streams
	n.streams = map[peer.ID]network.Stream{}
	n.mu.Unlock()
	for _, s := range out {
		s.Reset()
	}
	deadline := time.NewTimer(min(n.cfg.AckTimeout, stopDrain))
	defer deadline.Stop()
	poll := time.NewTicker(5 * time.Millisecond)
	defer poll.Stop()
	for n.inWalk.Load() > 0 {
		select {
		case msg := <-n.in:
			n.onInbound(ctx, msg)
		case <-poll.C:
		case <-deadline.C:
			return
		}
	}
}

// limitedLog starts a log line of a warning that may repeat often: at level lvl at
// most once every logEvery per key, saying how many repeats were held back since the
// previous one (repeats_not_logged); the repeats in between go out at debug level.
func (n *Node) limitedLog(lvl zerolog.Level, key string) *zerolog.Event {
	ok, held := n.logLimit.Allow(key)
	if !ok {
		return n.log.Debug().Bool("rate_limited", true)
	}
	ev := n.log.WithLevel(lvl)
	if held > 0 {
		ev = ev.Int("repeats_not_logged", held)
	}
	return ev
}

func (n *Node) initialToken() walk.Token {
	return walk.NewToken(n.cfg.Run, 0, n.cfg.Data.ModelDim(), n.cfg.Problem.Reg, n.cfg.Gamma)
}

// handoff writes one frame, signed for p, on the cached stream to p and reads its ack
// byte, within AckTimeout. A busy answer is returned as such: the custody machine
// decides when to ask again.
func (n *Node) handoff(ctx context.Context, p peer.ID, raw []byte) (byte, error) {
	frame, err := n.frameFor(p, raw)
	if err != nil {
		return 0, err
	}
	s, err := n.stream(ctx, p)
	if err != nil {
		return 0, err
	}
	s.SetDeadline(time.Now().Add(n.cfg.AckTimeout))
	var ack [1]byte
	if n.sendHook != nil {
		n.sendHook(p, raw)
	}
	if err = wire.WriteFrame(s, frame); err == nil {
		_, err = s.Read(ack[:])
	}
	if err != nil {
		s.Reset()
		n.mu.Lock()
		if n.streams[p] == s {
			delete(n.streams, p)
		}
		n.mu.Unlock()
		return 0, err
	}
	return ack[0], nil
}

func (n *Node) stream(ctx context.Context, p peer.ID) (network.Stream, error) {
	n.mu.Lock()
	s := n.streams[p]
	n.mu.Unlock()
	if s != nil {
		return s, nil
	}
	sctx, cancel := context.WithTimeout(ctx, n.cfg.AckTimeout)
	defer cancel()
	s, err := n.Host.NewStream(sctx, p, wire.WalkProtocol(n.cfg.Run))
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	n.streams[p] = s
	n.mu.Unlock()
	return s, nil
}

// Status is the JSON served on /status.
type Status struct {
	Peer        string          `json:"peer"`
	Run         string          `json:"run"`
	ConfigHash  string          `json:"config_hash"`
	Peers       int             `json:"peers"`
	Members     int             `json:"members"`
	Index       int             `json:"index"`
	HopsSeen    uint64          `json:"hops_seen"`
	Updates     int             `json:"own_updates"`
	Ledger      int             `json:"ledger_entries"`
	Epsilon     privacy.Epsilon `json:"epsilon_spent"`
	EpsilonNote string          `json:"epsilon_theorem"`
	UpdatesLeft int             `json:"updates_left"` // cap (MaxUpdates or budget) - own updates; -1 = no cap
	// BudgetEpsilon is the node's budget (0 = none) and BudgetLeft what remains of it:
	// BudgetEpsilon - epsilon_spent (local figure), never below 0.
	BudgetEpsilon float64 `json:"budget_epsilon,omitempty"`
	BudgetLeft    float64 `json:"budget_left,omitempty"`
	ModelAgeSec   float64 `json:"model_age_seconds"` // since this node last held the token; -1 = never
	Done          bool    `json:"done"`
	UptimeSec     float64 `json:"uptime_seconds"`
	// Hop is the hop of the last token stored or processed here, Holding whether the
	// token is here now (received, or sent and not yet acked) and Paused whether
	// Config.PauseAtHop was reached (Hop is then PauseAtHop). They are reported only by
	// nodes started with DebugStatus (test harnesses use them to find the holder): on
	// other nodes they would tell whoever can read /status where the token is, and the
	// network-DP guarantee assumes the path is secret.
	Hop     uint64 `json:"hop,omitempty"`
	Holding bool   `json:"holding,omitempty"`
	Paused  bool   `json:"paused,omitempty"`
	// Network is the planned network figure of this node's updates so far with its
	// verdict (privacy.WalkPlannedBound, the same decision as model.json and the
	// simulator's report); nil for R-ADMM.
	Network *BoundJSON `json:"network_planned,omitempty"`
	// RADMM is the state of a neighbour-exchange run (RunRADMM); nil for the walk. Its
	// epsilon_spent is then also reported in Epsilon, with its theorem in EpsilonNote.
	RADMM *RADMMStatus `json:"gossip,omitempty"`
	// Join is the state of the wait for the run to start; nil once the membership is fixed.
	Join *JoinStatus `json:"join,omitempty"`
}

// Status returns the node's status.
func (n *Node) Status() Status {
	n.mu.Lock()
	members, idx := len(n.members), n.index
	n.mu.Unlock()
	up := n.metrics.updatesValue()
	b := privacy.StepLocalBound(n.stepRun(), up, n.cfg.Delta)
	left, age := -1, -1.0
	if n.cfg.MaxUpdates > 0 {
		left = max(n.cfg.MaxUpdates-up, 0)
	}
	if n.cfg.BudgetEpsilon > 0 {
		if bc := int(n.budgetCap.Load()); bc >= 0 && (left < 0 || bc-up < left) {
			left = max(bc-up, 0)
		}
	}
	if t := n.lastTok.Load(); t > 0 {
		age = time.Since(time.Unix(0, t)).Seconds()
	}
	net := n.plannedBound(up).Figure()
	st := Status{UpdatesLeft: left, ModelAgeSec: age, Network: &net,
		Peer: n.ID().String(), Run: n.cfg.Run, ConfigHash: n.hash, Peers: len(n.Host.Network().Peers()),
		Members: members, Index: idx, HopsSeen: n.hopsIn.Load(), Updates: up, Ledger: n.store.Entries(),
		Epsilon: privacy.Eps(b.Epsilon), EpsilonNote: b.Theorem, Done: n.metrics.done.Load(),
		UptimeSec: time.Since(n.started).Seconds(),
	}
	if n.cfg.BudgetEpsilon > 0 {
		st.BudgetEpsilon = n.cfg.BudgetEpsilon
		st.BudgetLeft = math.Max(n.cfg.BudgetEpsilon-b.Epsilon, 0)
	}
	if n.cfg.DebugStatus {
		st.Hop, st.Holding, st.Paused = n.lastHop.Load(), n.holding.Load(), n.paused.Load()
	}
	st.Join = n.join.snapshot(st.Peers)
	if st.Join != nil {
		n.mu.Lock()
		st.Join.WaitingFor = slices.Clone(n.waitingFor)
		n.mu.Unlock()
	}
	if gs := n.radmmStatus(); gs != nil {
		st.RADMM, st.Epsilon, st.EpsilonNote, st.UpdatesLeft, st.Network = gs, gs.EpsilonSpent, gs.Theorem, -1, nil
	}
	return st
}

func marshal(v any) []byte { b, _ := json.Marshal(v); return b }

// stepRun returns the step fields of this node's privacy.WalkRun (the prox step, with the
// run's clip and noise, before the membership is fixed).
func (n *Node) stepRun() privacy.WalkRun {
	n.mu.Lock()
	defer n.mu.Unlock()
	r := n.step
	r.Clip, r.Sigma = n.cfg.Clip, n.cfg.Sigma
	return r
}

// ErrRunOver is returned by Run when the data directory holds the final model of another
// run (or another configuration) than the node's: the directory belongs to that run.
var ErrRunOver = errors.New("node: the data directory holds the final model of another run")

// finishedModel returns the model.json of this run when the data directory already holds
// it: the run is over, and a node restarted after it (a service manager's restart, say)
// must not take part again nor re-send its custody token. It returns nil, nil when there
// is no model yet.
func (n *Node) finishedModel() (*Model, error) {
	b, err := os.ReadFile(filepath.Join(n.store.Dir, store.ModelFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("node: %s: %w", store.ModelFile, err)
	}
	var m Model
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("node: %s is corrupt: %v (move it away to take part in the run again)", store.ModelFile, err)
	}
	if m.Run != n.cfg.Run || m.ConfigHash != n.hash {
		return nil, fmt.Errorf("%w: %s is for run %q (config %.12s), this node runs %q (config %.12s); use another --datadir",
			ErrRunOver, store.ModelFile, m.Run, m.ConfigHash, n.cfg.Run, n.hash)
	}
	n.metrics.done.Store(true)
	n.log.Warn().Str("file", filepath.Join(n.store.Dir, store.ModelFile)).Msg("the run is over: this data directory already holds its final model; not taking part again")
	return &m, nil
}

// StreamIdle is how long an inbound walk stream may stay without a frame before the node
// closes it.
const StreamIdle = 10 * time.Minute

// wire.ErrPartialFrame marks a frame whose read stopped after its header.

// Per-peer limits of the resource manager on the run's protocols: a member keeps one
// long-lived stream per protocol and opens a few short ones (heartbeats, final pushes), so
// streamsPerPeer is ample for the protocol and blocks a peer that opens streams to exhaust
// the node.
const streamsPerPeer = 8

// resourceManager returns go-libp2p's resource manager with its default scaled limits and
// per-peer stream limits on the run's protocols.
func resourceManager(run string) (network.ResourceManager, error) {
	scaling := rcmgr.DefaultLimits
	libp2p.SetDefaultServiceLimits(&scaling)
	for _, p := range []protocol.ID{wire.WalkProtocol(run), wire.ReleaseProtocol(run), wire.AliveProtocol(run), wire.FinalProtocol(run),
		wire.DoneProtocol(run), wire.RADMMProtocol(run)} {
		scaling.AddProtocolPeerLimit(p, rcmgr.BaseLimit{Streams: 2 * streamsPerPeer, StreamsInbound: streamsPerPeer,
			StreamsOutbound: streamsPerPeer, Memory: 16 << 20}, rcmgr.BaseLimitIncrease{})
	}
	rm, err := rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(scaling.AutoScale()))
	if err != nil {
		return nil, fmt.Errorf("node: resource manager: %w", err)
	}
	return rm, nil
}
