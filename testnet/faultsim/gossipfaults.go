package faultsim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/dpadmm/dpadmm/gossip"
	"github.com/dpadmm/dpadmm/node/drive"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/testnet/sim"
)

// GossipFaultConfig configures one run of the R-ADMM fault study (RunGossipFaults): the
// machines NewGossipSim builds for Options, each wrapped in the gossip.Exchange and the
// drive.RADMM adapter that the production node drives (node.Node.RunRADMM), on the fault
// network (faultnet.go) with stream links and connection liveness.
//
// The stream links model the production node's transport: one FIFO stream per directed link
// whose sender retries a frame until it is acknowledged, so frames wait out a partition
// or a crashed receiver and arrive afterwards; a failed attempt (Loss) is retried after
// Retry ticks; a lost acknowledgement (Dup) makes the sender deliver the same frame once
// more. A crashed node loses everything but its durable state (journal of releases,
// ledger, stale uses) and its send queues; restarted, it replays its journal through a
// fresh exchange (drive.RADMM.Replay, as the node does) and resumes. A node that stops
// (policy) leaves; a node that finishes flushes its frames (at most one barrier timeout,
// re-sending on reconnection) and then stays reachable without taking part, as a
// finished --mem host does.
type GossipFaultConfig struct {
	Options sim.GossipOptions
	// Exchange is the barrier policy in ticks; Barrier 0 means
	// gossip.DefaultExchangeConfig() with Exchange.OnMissing kept.
	Exchange gossip.ExchangeConfig
	// Seed seeds the network's randomness (latency, loss, duplication); the run's data,
	// graph and noise come from Options.Seed.
	Seed uint64
	// Faults is the network and fault schedule (FaultSchedule; Heartbeat must be 0: the
	// node observes its connections).
	Faults FaultSchedule
	// MaxTicks ends a run that does not finish (its unfinished nodes are reported stuck);
	// default 200,000.
	MaxTicks int64
}

// GossipFaultReport is the outcome of one fault run.
type GossipFaultReport struct {
	// Ticks: the tick at which the last node ended (MaxTicks when some node is stuck).
	Ticks int64
	// Ended says how each node ended: "done", "stopped", "crashed" (not restarted) or
	// "stuck" (still waiting at MaxTicks).
	Ended  []string
	Models [][]float64    // f_i(T) of the nodes that finished, else nil
	Stops  []*gossip.Stop // the policy stops, else nil
	Stale  [][]gossip.StaleUse
	// Ledgers are the durable ledger entries of every node (across restarts).
	Ledgers [][]privacy.Entry
	// Network counters: frames delivered, failed attempts, frames delivered twice (lost
	// acks), frames re-sent by Resume or Reconnected, frames the exchanges ignored (stale,
	// duplicate, after the end) or dropped (beyond the window).
	Delivered, FailedAttempts, Duplicated, Resent, Ignored, Dropped int
	Restarts                                                        int
	// Invariants, all must be 0:
	// UnderCount: frames sent, or delivered, without a durable ledger entry of their sender
	// for their iteration naming the recipient.
	UnderCount int
	// DoubleCharge: a second ledger entry of one node for one iteration (a re-noised or
	// re-charged release).
	DoubleCharge int
	// ReleaseConflicts: a node sent two different vectors for one iteration.
	ReleaseConflicts int
	// ReplayMismatch: a restarted node did not recompute a journaled release bit for bit.
	ReplayMismatch int
	// BadStandIns: a stale input that is not a vector the node received from that
	// neighbour for the iteration its stale use names, or a stand-in without a stale use.
	BadStandIns int
}

// Finished returns how many nodes computed f_i(T).
func (r *GossipFaultReport) Finished() int { return r.count("done") }

// Stopped returns how many nodes the policy stopped.
func (r *GossipFaultReport) Stopped() int { return r.count("stopped") }

func (r *GossipFaultReport) count(s string) int {
	k := 0
	for _, e := range r.Ended {
		if e == s {
			k++
		}
	}
	return k
}

// StaleUses returns the number of stale substitutions of the run.
func (r *GossipFaultReport) StaleUses() int {
	k := 0
	for _, s := range r.Stale {
		k += len(s)
	}
	return k
}

type gfPhase uint8

const (
	gfRunning  gfPhase = iota
	gfFlushing         // finished, flushing its frames
	gfQuiet            // finished and flushed: reachable, takes no part
	gfStopped          // stopped by the policy: gone
	gfCrashed
)

// GossipFaultNet is a built R-ADMM fault network (see GossipFaultConfig).
type GossipFaultNet struct {
	cfg   GossipFaultConfig
	sim   *sim.GossipSim
	net   *faultNet[gossip.Message]
	nodes []*gossipNode
	rep   *GossipFaultReport
	names []string
}

// NewGossipFaultNet validates cfg and builds the network (the machines of
// NewGossipSim(&cfg.Options), each in a fresh exchange).
func NewGossipFaultNet(cfg GossipFaultConfig) (*GossipFaultNet, error) {
	if cfg.Exchange.Barrier == 0 {
		pol := cfg.Exchange.OnMissing
		cfg.Exchange = gossip.DefaultExchangeConfig()
		cfg.Exchange.OnMissing = pol
	}
	if cfg.MaxTicks == 0 {
		cfg.MaxTicks = 200000
	}
	switch {
	case cfg.MaxTicks < 1:
		return nil, errors.New("testnet: gossip faults: max ticks must be >= 1")
	case cfg.Faults.Heartbeat != 0:
		return nil, errors.New("testnet: gossip faults: liveness is the connection state (heartbeat 0)")
	}
	if err := cfg.Exchange.Validate(); err != nil {
		return nil, err
	}
	sim, err := sim.NewGossipSim(&cfg.Options)
	if err != nil {
		return nil, err
	}
	n := len(sim.Machines)
	if err := cfg.Faults.defaults(n); err != nil {
		return nil, err
	}
	w := &GossipFaultNet{cfg: cfg, sim: sim,
		rep: &GossipFaultReport{Ended: make([]string, n), Models: make([][]float64, n), Stops: make([]*gossip.Stop, n),
			Stale: make([][]gossip.StaleUse, n), Ledgers: make([][]privacy.Entry, n)}}
	w.names = sim.Configs[0].Names
	nodes := make([]netNode[gossip.Message], n)
	for i, m := range sim.Machines {
		x, err := gossip.NewExchange(m, cfg.Exchange)
		if err != nil {
			return nil, err
		}
		nd := &gossipNode{w: w, i: i, ad: drive.NewRADMM(x), nbrs: sim.Graph.Neighbors(i), sent: map[int][]float64{}, recv: map[[2]int][][]float64{}}
		nd.fx = gossipEffects{nd: nd, release: -1}
		w.nodes = append(w.nodes, nd)
		nodes[i] = nd
	}
	w.net = newFaultNet(cfg.Faults, true, rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15)), cfg.Seed, nodes)
	return w, nil
}

// RunGossipFaults builds the network for cfg and runs it to the end.
func RunGossipFaults(cfg GossipFaultConfig) (*GossipFaultReport, error) {
	w, err := NewGossipFaultNet(cfg)
	if err != nil {
		return nil, err
	}
	return w.Run()
}

// Sim returns the simulator setup the network was built from (its machines are the
// network's first incarnations).
func (w *GossipFaultNet) Sim() *sim.GossipSim { return w.sim }

// Run runs the network until every node has ended (or MaxTicks) and returns the report.
func (w *GossipFaultNet) Run() (*GossipFaultReport, error) {
	for i, nd := range w.nodes {
		if err := w.net.check(i, nd.drain()); err != nil {
			return nil, err
		}
	}
	if err := w.net.run(w.cfg.MaxTicks, nil, w.over); err != nil {
		return nil, err
	}
	w.rep.Ticks = min(w.net.now, w.cfg.MaxTicks)
	st := w.net.stats
	w.rep.Delivered, w.rep.FailedAttempts, w.rep.Duplicated = st.Delivered, st.FailedAttempts, st.Duplicated
	for i, nd := range w.nodes {
		switch nd.phase {
		case gfRunning:
			w.rep.Ended[i] = "stuck"
		case gfFlushing, gfQuiet:
			w.rep.Ended[i] = "done"
		case gfStopped:
			w.rep.Ended[i] = "stopped"
		case gfCrashed:
			w.rep.Ended[i] = "crashed"
		}
	}
	return w.rep, nil
}

// over reports whether nothing can happen any more: no node running or flushing, and no
// restart to come.
func (w *GossipFaultNet) over() bool {
	now := w.net.now
	for i, nd := range w.nodes {
		switch {
		case nd.phase == gfRunning || nd.phase == gfFlushing:
			return false
		case nd.phase == gfCrashed && w.net.restAt[i] > now:
			return false
		}
		for _, c := range w.cfg.Faults.Crashes {
			if c.Node == i && c.At > now {
				return false
			}
		}
	}
	return true
}

// covered reports whether node i's durable ledger has an entry for iteration it naming j.
func (w *GossipFaultNet) covered(i, j, it int) bool {
	for _, e := range w.rep.Ledgers[i] {
		if e.Hop == uint64(it) && slices.Contains(strings.Split(e.Recipient, ","), w.names[j]) {
			return true
		}
	}
	return false
}

// gossipNode drives one node's gossip.Exchange through drive.RADMM on the fault network:
// frames become Step, link changes PeerDown and Reconnected, ticks Tick; its effects keep
// in memory what the production node makes durable (the journal of releases, the ledger and
// the stale uses, in the report), from which a restart replays the node.
type gossipNode struct {
	w      *GossipFaultNet
	i      int
	ad     *drive.RADMM // nil while crashed and after the end
	fx     gossipEffects
	nbrs   []int
	phase  gfPhase
	doneAt int64
	start  int64 // the exchange's tick 0 (the tick before its restart): it counts ticks from there
	// Durable: the journal of releases.
	journal []drive.RADMMRelease
	// What the checkers record (not node state).
	sent      map[int][]float64      // iteration -> vector sent
	recv      map[[2]int][][]float64 // (from, iteration) -> vectors delivered
	crashNext bool                   // crash at the next release, once durable
}

func (nd *gossipNode) peers() []int  { return nd.nbrs }
func (nd *gossipNode) running() bool { return nd.phase == gfRunning }
func (nd *gossipNode) crashAt()      { nd.crashNext = true }

// crash loses the exchange (its send queues are the network's); the durable state stays,
// and the record of what it was handed, against which stand-ins are checked.
func (nd *gossipNode) crash() {
	nd.ad, nd.phase, nd.crashNext = nil, gfCrashed, false
	nd.fx.release = -1
}

// drain applies the node's Readies (stale uses, journal and ledger durable first, then
// the frames queued on the links, then Advance) and follows the end the exchange decided:
// a stop leaves the run, the last release starts the flush.
func (nd *gossipNode) drain() error {
	if nd.ad == nil {
		return nil
	}
	if err := drive.Drain[drive.RADMMEffects](nd.ad, &nd.fx); err != nil {
		return err
	}
	switch {
	case nd.ad.Stopped() != nil:
		nd.w.rep.Stops[nd.i] = nd.ad.Stopped()
		nd.ad, nd.phase = nil, gfStopped
		nd.w.net.leave(nd.i)
	case nd.ad.Done() && nd.phase == gfRunning:
		nd.w.rep.Models[nd.i] = nd.ad.Model()
		nd.phase, nd.doneAt = gfFlushing, nd.w.net.now
	}
	return nil
}

// deliver hands the node a frame (a finished node acknowledges and discards it).
func (nd *gossipNode) deliver(from int, msg gossip.Message) error {
	w := nd.w
	if !w.covered(from, nd.i, msg.Iter) {
		w.rep.UnderCount++
	}
	if nd.phase != gfRunning {
		return nil
	}
	key := [2]int{from, msg.Iter}
	nd.recv[key] = append(nd.recv[key], msg.Vec)
	nd.ad.Exchange().Step(msg)
	return nd.drain()
}

func (nd *gossipNode) tick(now int64) error {
	switch nd.phase {
	case gfRunning:
		nd.ad.TickTo(now - nd.start)
		return nd.drain()
	case gfFlushing:
		nd.flushed()
	}
	return nil
}

// liveness reports a link change to a running or flushing node: a link that went down as
// PeerDown, one that came back as Reconnected (the node re-sends its last releases).
func (nd *gossipNode) liveness(j int, up bool) error {
	if nd.phase != gfRunning && nd.phase != gfFlushing {
		return nil
	}
	if up {
		nd.ad.Exchange().Reconnected(j)
	} else {
		nd.ad.Exchange().PeerDown(j)
	}
	return nd.drain()
}

// flushed ends the flush of a finished node once every frame of an iteration < T it
// queued to a connected neighbour has been delivered, or after one barrier timeout.
func (nd *gossipNode) flushed() {
	w := nd.w
	T := w.cfg.Options.Iters
	pending := false
	for _, j := range nd.nbrs {
		pending = pending || w.net.linked(nd.i, j) && w.net.pending(nd.i, j, func(m gossip.Message) bool { return m.Iter < T })
	}
	if !pending || w.net.now-nd.doneAt >= int64(w.cfg.Exchange.Barrier) {
		nd.phase, nd.ad = gfQuiet, nil
		w.net.dropQueues(nd.i)
	}
}

// restart rebuilds the node as a restarted production node does: a fresh machine (same configuration,
// the noise source seeded again so that the replay reproduces the draws), the journal
// replayed through a fresh exchange without sending anything, then Resume.
func (nd *gossipNode) restart(now int64) error {
	w, i := nd.w, nd.i
	w.rep.Restarts++
	x, err := w.freshExchange(i)
	if err != nil {
		return err
	}
	ad := drive.NewRADMM(x)
	for r, rec := range nd.journal {
		if _, err := ad.Replay(r, rec); err != nil {
			// The node refuses to resume (node.ErrRejoin): it stays down for good.
			w.rep.ReplayMismatch++
			w.net.down[i] = 0
			return errCrashNow
		}
	}
	for x.HasReady() {
		x.Advance(x.Ready())
	}
	nd.ad, nd.phase, nd.start = ad, gfRunning, now-1 // the restart tick is its first
	x.Resume()
	return nd.drain()
}

// freshExchange builds node i's machine and exchange again (a restart).
func (w *GossipFaultNet) freshExchange(i int) (*gossip.Exchange, error) {
	c := w.sim.Configs[i]
	if !math.IsInf(c.Alpha, 1) {
		c.Noise = sim.NodeNoise(w.cfg.Options.Seed, i)
	}
	obj, err := gossip.NewObjective(w.sim.Shards[i], w.sim.Loss, w.sim.RowWeight, w.sim.RegOverN)
	if err != nil {
		return nil, err
	}
	m, err := gossip.New(c, obj)
	if err != nil {
		return nil, err
	}
	return gossip.NewExchange(m, w.cfg.Exchange)
}

// gossipEffects is a gossip node's drive.RADMMEffects: the in-memory durable store (the
// journal, and the report's ledgers and stale uses) and the network, with the study's
// checks of every Ready.
type gossipEffects struct {
	nd      *gossipNode
	release int // the iteration the Ready being applied releases (-1: none)
}

func (fx *gossipEffects) Persist(r drive.RADMMRecord) error {
	nd, w := fx.nd, fx.nd.w
	w.rep.Stale[nd.i] = append(w.rep.Stale[nd.i], r.Stale...)
	s := r.Release
	if s == nil {
		return nil
	}
	fx.release = s.Iter
	rec := drive.RADMMRelease{Vec: slices.Clone(s.Vec)}
	for _, in := range s.Inputs {
		c := in
		c.Vec = slices.Clone(in.Vec)
		rec.Inputs = append(rec.Inputs, c)
		if in.StandIn && !w.standInOK(nd.i, in) {
			w.rep.BadStandIns++
		}
	}
	nd.journal = append(nd.journal, rec)
	return nil
}

func (fx *gossipEffects) AppendLedger(es []privacy.Entry) error {
	nd, w := fx.nd, fx.nd.w
	for _, e := range es {
		for _, old := range w.rep.Ledgers[nd.i] {
			if old.Hop == e.Hop {
				w.rep.DoubleCharge++
			}
		}
	}
	w.rep.Ledgers[nd.i] = append(w.rep.Ledgers[nd.i], es...)
	if nd.crashNext {
		return errCrashNow // durable, not sent: the process dies here
	}
	return nil
}

func (fx *gossipEffects) Send(env gossip.Envelope) error {
	nd, w := fx.nd, fx.nd.w
	it := env.Msg.Iter
	if v, ok := nd.sent[it]; ok && !sim.SameBits(v, env.Msg.Vec) {
		w.rep.ReleaseConflicts++
	} else if !ok {
		nd.sent[it] = slices.Clone(env.Msg.Vec)
	}
	if it != fx.release {
		w.rep.Resent++
	}
	if !w.covered(nd.i, env.To, it) {
		w.rep.UnderCount++ // leaving without a durable entry
	}
	w.net.send(nd.i, env.To, gossip.Message{From: nd.i, Iter: it, Vec: nd.sent[it]}, 0)
	return nil
}

func (fx *gossipEffects) Note(evs []gossip.Event) {
	fx.release = -1
	for _, e := range evs {
		switch e.Kind {
		case gossip.EventIgnored:
			fx.nd.w.rep.Ignored++
		case gossip.EventDropped:
			fx.nd.w.rep.Dropped++
		}
	}
}

// standInOK reports whether a stale input of node i is a recorded stale use and a vector
// it received from that neighbour for the iteration the use names.
func (w *GossipFaultNet) standInOK(i int, in gossip.Input) bool {
	if !slices.Contains(w.rep.Stale[i], gossip.StaleUse{Iter: in.Iter, Neighbor: in.From, UsedIter: in.UsedIter}) {
		return false
	}
	for _, v := range w.nodes[i].recv[[2]int{in.From, in.UsedIter}] {
		if sim.SameBits(v, in.Vec) {
			return true
		}
	}
	return false
}

// String summarises the report in one line.
func (r *GossipFaultReport) String() string {
	var b strings.Builder
	b.WriteString("ticks " + strconv.FormatInt(r.Ticks, 10))
	fmt.Fprintf(&b, ", done %d, stopped %d, stale uses %d, restarts %d, delivered %d, failed attempts %d, duplicated %d, resent %d, ignored %d, dropped %d",
		r.Finished(), r.Stopped(), r.StaleUses(), r.Restarts, r.Delivered, r.FailedAttempts, r.Duplicated, r.Resent, r.Ignored, r.Dropped)
	return b.String()
}
