package testnet

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/dpadmm/dpadmm/gossip"
	"github.com/dpadmm/dpadmm/privacy"
)

// GossipFaultConfig configures one run of the R-ADMM fault network (RunGossipFaults): the
// machines NewGossipSim builds for Options, each wrapped in the gossip.Exchange that
// the production node drives (node.Node.RunRADMM), on a deterministic virtual-clock
// network with a fault schedule.
//
// The network models the production node's transport: one FIFO stream per directed link
// whose sender retries a frame until it is acknowledged, so frames wait out a partition or
// a crashed receiver and arrive afterwards; a failed attempt (Loss) is retried after Retry
// ticks; a lost acknowledgement (Dup) makes the sender deliver the same frame once more.
// A crashed node loses everything but its durable state (journal of releases, ledger,
// stale uses) and its send queues; restarted, it replays its journal through a fresh
// exchange, as the node does, and resumes. A node that stops (policy) leaves; a node that
// finishes flushes its frames (at most one barrier timeout, re-sending on reconnection)
// and then stays reachable without taking part, as a finished --mem host does.
type GossipFaultConfig struct {
	Options GossipOptions
	// Exchange is the barrier policy in ticks; Barrier 0 means
	// gossip.DefaultExchangeConfig() with Exchange.OnMissing kept.
	Exchange gossip.ExchangeConfig
	// Seed seeds the network's randomness (latency, loss, duplication); the run's data,
	// graph and noise come from Options.Seed.
	Seed uint64
	// MaxLatency: a frame takes 1..MaxLatency ticks (uniform); default 3.
	MaxLatency int
	// Loss is the probability that a transmission attempt fails; Dup the probability that
	// a delivered frame's acknowledgement is lost (the frame arrives twice). Retry is the
	// sender's wait before it tries again (default 4 ticks).
	Loss, Dup float64
	Retry     int
	// Partitions cut groups of nodes off from the others for a while.
	Partitions []GossipPartition
	// Crashes stop nodes and optionally restart them.
	Crashes []GossipCrash
	// MaxTicks ends a run that does not finish (its unfinished nodes are reported stuck);
	// default 200,000.
	MaxTicks int64
}

// GossipPartition separates Nodes from every other node during ticks [From, Until): the
// links across the cut are down (frames wait in their queues).
type GossipPartition struct {
	Nodes       []int
	From, Until int64
}

// GossipCrash crashes Node at tick At and restarts it Down ticks later (0: never). With
// AtRelease the crash happens at the node's first release at or after At, once the
// release is durable and before any frame of it is sent (the worst case for a restart).
// A node that is not running at At (finished or stopped) does not crash.
type GossipCrash struct {
	Node      int
	At        int64
	Down      int64
	AtRelease bool
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

type gfRelease struct {
	vec    []float64
	inputs []gossip.Input
}

type gfNode struct {
	x       *gossip.Exchange
	phase   gfPhase
	doneAt  int64
	journal []gfRelease
	sent    map[int][]float64      // iteration -> vector sent
	recv    map[[2]int][][]float64 // (from, iteration) -> vectors delivered
	linked  map[int]bool           // neighbour -> connected, as last reported to x
	crashAt int64                  // pending AtRelease crash (-1: none)
	down    int64                  // ticks down of the pending crash (0: no restart)
	restart int64                  // tick of the restart of a crashed node (0: none)
}

type gfFrame struct {
	msg   gossip.Message
	ready int64
	twice bool // a lost ack: delivered once, to be delivered again
}

// GossipFaultNet is a built R-ADMM fault network (see GossipFaultConfig).
type GossipFaultNet struct {
	cfg   GossipFaultConfig
	sim   *GossipSim
	rng   *rand.Rand
	now   int64
	nodes []*gfNode
	queue [][][]gfFrame // [from][to]
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
	if cfg.MaxLatency == 0 {
		cfg.MaxLatency = 3
	}
	if cfg.Retry == 0 {
		cfg.Retry = 4
	}
	if cfg.MaxTicks == 0 {
		cfg.MaxTicks = 200000
	}
	switch {
	case cfg.MaxLatency < 1 || cfg.Retry < 1 || cfg.MaxTicks < 1:
		return nil, errors.New("testnet: gossip faults: latency, retry and max ticks must be >= 1")
	case !(cfg.Loss >= 0 && cfg.Loss < 1) || !(cfg.Dup >= 0 && cfg.Dup < 1):
		return nil, fmt.Errorf("testnet: gossip faults: loss and duplication must be in [0,1), got %v and %v", cfg.Loss, cfg.Dup)
	}
	if err := cfg.Exchange.Validate(); err != nil {
		return nil, err
	}
	sim, err := NewGossipSim(&cfg.Options)
	if err != nil {
		return nil, err
	}
	n := len(sim.Machines)
	for _, p := range cfg.Partitions {
		for _, i := range p.Nodes {
			if i < 0 || i >= n {
				return nil, fmt.Errorf("testnet: gossip faults: partition node %d out of range [0,%d)", i, n)
			}
		}
	}
	for _, c := range cfg.Crashes {
		if c.Node < 0 || c.Node >= n || c.At < 1 || c.Down < 0 {
			return nil, fmt.Errorf("testnet: gossip faults: crash %+v (node in [0,%d), tick >= 1, down >= 0)", c, n)
		}
	}
	w := &GossipFaultNet{cfg: cfg, sim: sim, rng: rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15)), queue: make([][][]gfFrame, n),
		rep: &GossipFaultReport{Ended: make([]string, n), Models: make([][]float64, n), Stops: make([]*gossip.Stop, n),
			Stale: make([][]gossip.StaleUse, n), Ledgers: make([][]privacy.Entry, n)}}
	for i := range w.queue {
		w.queue[i] = make([][]gfFrame, n)
	}
	w.names = sim.Configs[0].Names
	for i, m := range sim.Machines {
		x, err := gossip.NewExchange(m, cfg.Exchange)
		if err != nil {
			return nil, err
		}
		nd := &gfNode{x: x, sent: map[int][]float64{}, recv: map[[2]int][][]float64{}, linked: map[int]bool{}, crashAt: -1}
		for _, j := range sim.Graph.Neighbors(i) {
			nd.linked[j] = true
		}
		w.nodes = append(w.nodes, nd)
	}
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
func (w *GossipFaultNet) Sim() *GossipSim { return w.sim }

// reachable reports whether node i's host answers: not crashed and not gone after a stop.
func (w *GossipFaultNet) reachable(i int) bool {
	p := w.nodes[i].phase
	return p != gfCrashed && p != gfStopped
}

// linked reports whether the link i-j is up at the current tick.
func (w *GossipFaultNet) linked(i, j int) bool {
	if !w.reachable(i) || !w.reachable(j) {
		return false
	}
	for _, p := range w.cfg.Partitions {
		if w.now >= p.From && w.now < p.Until && slices.Contains(p.Nodes, i) != slices.Contains(p.Nodes, j) {
			return false
		}
	}
	return true
}

// Run runs the network until every node has ended (or MaxTicks) and returns the report.
func (w *GossipFaultNet) Run() (*GossipFaultReport, error) {
	for i := range w.nodes {
		w.collect(i)
	}
	for w.now = 1; w.now <= w.cfg.MaxTicks; w.now++ {
		w.faults()
		w.observe()
		w.deliver()
		for i, nd := range w.nodes {
			switch nd.phase {
			case gfRunning:
				nd.x.Tick()
				w.collect(i)
			case gfFlushing:
				w.flushed(i)
			}
		}
		if w.over() {
			break
		}
	}
	w.rep.Ticks = min(w.now, w.cfg.MaxTicks)
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
	for i, nd := range w.nodes {
		switch {
		case nd.phase == gfRunning || nd.phase == gfFlushing:
			return false
		case nd.phase == gfCrashed && nd.restart > w.now:
			return false
		}
		for _, c := range w.cfg.Crashes {
			if c.Node == i && c.At > w.now {
				return false
			}
		}
	}
	return true
}

// faults applies the crashes and restarts scheduled for this tick.
func (w *GossipFaultNet) faults() {
	for _, c := range w.cfg.Crashes {
		nd := w.nodes[c.Node]
		if c.At == w.now && nd.phase == gfRunning {
			nd.down = c.Down
			if c.AtRelease {
				nd.crashAt = w.now
			} else {
				w.crash(c.Node)
			}
		}
	}
	for i, nd := range w.nodes {
		if nd.phase == gfCrashed && nd.restart == w.now {
			w.restart(i)
		}
	}
}

// observe reports link changes to the running and flushing nodes: a link that went down
// as PeerDown, one that came back as Reconnected (the node re-sends its last releases).
func (w *GossipFaultNet) observe() {
	for i, nd := range w.nodes {
		if nd.phase != gfRunning && nd.phase != gfFlushing {
			continue
		}
		for _, j := range w.sim.Graph.Neighbors(i) {
			up := w.linked(i, j)
			if up == nd.linked[j] {
				continue
			}
			nd.linked[j] = up
			if up {
				nd.x.Reconnected(j)
			} else {
				nd.x.PeerDown(j)
			}
			w.collect(i)
		}
	}
}

// deliver hands every frame whose time has come to its recipient, link by link in order.
func (w *GossipFaultNet) deliver() {
	n := len(w.nodes)
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			for len(w.queue[i][j]) > 0 && w.queue[i][j][0].ready <= w.now && w.linked(i, j) {
				f := &w.queue[i][j][0]
				if w.cfg.Loss > 0 && w.rng.Float64() < w.cfg.Loss {
					w.rep.FailedAttempts++
					f.ready = w.now + int64(w.cfg.Retry)
					break
				}
				msg := f.msg
				if !f.twice && w.cfg.Dup > 0 && w.rng.Float64() < w.cfg.Dup {
					f.twice, f.ready = true, w.now+int64(w.cfg.Retry)
					w.rep.Duplicated++
				} else {
					w.queue[i][j] = w.queue[i][j][1:]
				}
				w.handTo(j, msg)
			}
		}
	}
}

// handTo delivers msg to node j (a finished node acknowledges and discards it).
func (w *GossipFaultNet) handTo(j int, msg gossip.Message) {
	w.rep.Delivered++
	if !w.covered(msg.From, j, msg.Iter) {
		w.rep.UnderCount++
	}
	nd := w.nodes[j]
	if nd.phase != gfRunning {
		return
	}
	key := [2]int{msg.From, msg.Iter}
	nd.recv[key] = append(nd.recv[key], msg.Vec)
	nd.x.Step(msg)
	w.collect(j)
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

// collect applies node i's Readies: stale uses, journal and ledger durable first, then
// the frames queued on the links, then Advance.
func (w *GossipFaultNet) collect(i int) {
	nd := w.nodes[i]
	for nd.x != nil && nd.x.HasReady() {
		rd := nd.x.Ready()
		w.rep.Stale[i] = append(w.rep.Stale[i], rd.StaleUses...)
		release := -1
		if s := rd.State; s != nil {
			release = s.Iter
			for _, e := range rd.Ledger {
				for _, old := range w.rep.Ledgers[i] {
					if old.Hop == e.Hop {
						w.rep.DoubleCharge++
					}
				}
			}
			w.rep.Ledgers[i] = append(w.rep.Ledgers[i], rd.Ledger...)
			rec := gfRelease{vec: append([]float64(nil), s.Vec...)}
			for _, in := range s.Inputs {
				c := in
				c.Vec = append([]float64(nil), in.Vec...)
				rec.inputs = append(rec.inputs, c)
				if in.StandIn && !w.standInOK(i, in) {
					w.rep.BadStandIns++
				}
			}
			nd.journal = append(nd.journal, rec)
			if nd.crashAt >= 0 && w.now >= nd.crashAt {
				// Durable, not sent: the process dies here.
				w.crash(i)
				return
			}
		}
		for _, e := range rd.Events {
			switch e.Kind {
			case gossip.EventIgnored:
				w.rep.Ignored++
			case gossip.EventDropped:
				w.rep.Dropped++
			}
		}
		for _, env := range rd.Outbox {
			it := env.Msg.Iter
			if v, ok := nd.sent[it]; ok && !sameBits(v, env.Msg.Vec) {
				w.rep.ReleaseConflicts++
			} else if !ok {
				nd.sent[it] = append([]float64(nil), env.Msg.Vec...)
			}
			if it != release {
				w.rep.Resent++
			}
			if !w.covered(i, env.To, it) {
				w.rep.UnderCount++ // leaving without a durable entry
			}
			lat := 1 + int64(w.rng.IntN(w.cfg.MaxLatency))
			w.queue[i][env.To] = append(w.queue[i][env.To], gfFrame{msg: gossip.Message{From: i, Iter: it, Vec: nd.sent[it]}, ready: w.now + lat})
		}
		nd.x.Advance(rd)
		if rd.Stop != nil {
			w.rep.Stops[i] = rd.Stop
			nd.phase, nd.x = gfStopped, nil
			w.dropQueues(i)
			return
		}
		if rd.Done && rd.State != nil && nd.phase == gfRunning {
			w.rep.Models[i] = rd.Model
			nd.phase, nd.doneAt = gfFlushing, w.now
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
		if sameBits(v, in.Vec) {
			return true
		}
	}
	return false
}

// flushed ends the flush of a finished node once every frame of an iteration < T it
// queued to a connected neighbour has been delivered, or after one barrier timeout.
func (w *GossipFaultNet) flushed(i int) {
	pending := false
	for _, j := range w.sim.Graph.Neighbors(i) {
		for _, f := range w.queue[i][j] {
			pending = pending || (f.msg.Iter < w.cfg.Options.Iters && w.linked(i, j))
		}
	}
	if !pending || w.now-w.nodes[i].doneAt >= int64(w.cfg.Exchange.Barrier) {
		w.nodes[i].phase, w.nodes[i].x = gfQuiet, nil
		w.dropQueues(i)
	}
}

func (w *GossipFaultNet) dropQueues(i int) {
	for j := range w.queue[i] {
		w.queue[i][j] = nil
	}
}

// crash kills node i: its exchange and send queues are lost; its durable state stays (and
// the record of what it was handed, against which stand-ins are checked).
func (w *GossipFaultNet) crash(i int) {
	nd := w.nodes[i]
	nd.phase, nd.x, nd.crashAt = gfCrashed, nil, -1
	nd.restart = 0
	if nd.down > 0 {
		nd.restart = w.now + nd.down
	}
	w.dropQueues(i)
}

// restart rebuilds node i as a restarted production node does: a fresh machine (same configuration,
// the noise source seeded again so that the replay reproduces the draws), the journal
// replayed through a fresh exchange without sending anything, then Resume.
func (w *GossipFaultNet) restart(i int) {
	w.rep.Restarts++
	c := w.sim.Configs[i]
	if !math.IsInf(c.Alpha, 1) {
		c.Noise = NodeNoise(w.cfg.Options.Seed, i)
	}
	obj, err := gossip.NewObjective(w.sim.Shards[i], w.sim.Loss, w.sim.RowWeight, w.sim.RegOverN)
	if err != nil {
		w.rep.ReplayMismatch++
		return
	}
	m, err := gossip.New(c, obj)
	if err != nil {
		w.rep.ReplayMismatch++
		return
	}
	x, err := gossip.NewExchange(m, w.cfg.Exchange)
	if err != nil {
		w.rep.ReplayMismatch++
		return
	}
	nd := w.nodes[i]
	for r, rec := range nd.journal {
		for _, in := range rec.inputs {
			if err := x.Replay(in); err != nil {
				w.rep.ReplayMismatch++
			}
		}
		found := false
		for x.HasReady() && !found {
			rd := x.Ready()
			if rd.State != nil {
				found = true
				if rd.State.Iter != r || !sameBits(rd.State.Vec, rec.vec) {
					w.rep.ReplayMismatch++
				}
			}
			x.Advance(rd)
		}
		if !found {
			w.rep.ReplayMismatch++
		}
	}
	for x.HasReady() {
		x.Advance(x.Ready())
	}
	nd.x, nd.phase = x, gfRunning
	for _, j := range w.sim.Graph.Neighbors(i) {
		nd.linked[j] = w.linked(i, j)
		if !nd.linked[j] {
			x.PeerDown(j)
		}
	}
	x.Resume()
	w.collect(i)
}

// String summarises the report in one line.
func (r *GossipFaultReport) String() string {
	var b strings.Builder
	b.WriteString("ticks " + strconv.FormatInt(r.Ticks, 10))
	fmt.Fprintf(&b, ", done %d, stopped %d, stale uses %d, restarts %d, delivered %d, failed attempts %d, duplicated %d, resent %d, ignored %d, dropped %d",
		r.Finished(), r.Stopped(), r.StaleUses(), r.Restarts, r.Delivered, r.FailedAttempts, r.Duplicated, r.Resent, r.Ignored, r.Dropped)
	return b.String()
}
