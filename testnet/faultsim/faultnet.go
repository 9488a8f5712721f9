package faultsim

import (
	"container/heap"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/dpadmm/dpadmm/testnet/sim"
)

// This file is the one virtual-clock network of the fault studies (the walk's crash study,
// faults.go, and the R-ADMM fault study, gossipfaults.go). Each node is the node's own
// adapter (drive.Walk, drive.RADMM) around its machine, driven through an in-memory
// drive.Effects: the studies apply every Ready with the code the libp2p node uses, and only
// the durable store, the transport and the clock are simulated. The network adds the
// fault schedule: delay, loss, duplication, partitions, and crashes with restarts from
// what the Effects made durable.

// FaultSchedule is the network and fault model of a fault network.
type FaultSchedule struct {
	// MaxLatency: a message takes 1..MaxLatency ticks (uniform) once it departs; default 3.
	MaxLatency int
	// Loss is the probability that a transmission fails: a datagram is lost; on a stream
	// the attempt fails and the sender tries again Retry ticks later.
	Loss float64
	// Dup is the probability that a delivered message arrives twice: a duplicated
	// datagram (its copy with a latency of its own), or on a stream a lost
	// acknowledgement (the sender delivers the frame again Retry ticks later).
	Dup float64
	// Retry is the ticks a stream sender waits before it tries a frame again; default 4.
	Retry int
	// Partitions cut groups of nodes off from the others for a while.
	Partitions []FaultPartition
	// Crashes stop nodes and optionally restart them.
	Crashes []FaultCrash
	// Heartbeat (H) and Missed (M): with H > 0 a node learns of its peers' liveness from
	// heartbeats, as node.Node does: every node beats to every peer every H ticks at
	// phase (its index mod H), each pair with its own latency in 1..MaxLatency; a peer is
	// reported down M*H ticks after the last beat that reached the observer and up at
	// the first beat after that. With H = 0 liveness is the connection state, as
	// the production R-ADMM node observes it: a node is told at once when a link to a neighbour goes
	// down or comes back.
	Heartbeat, Missed int
}

// FaultPartition separates Nodes from every other node during ticks [From, Until): the
// links across the cut are down (a datagram crossing it is lost, stream frames wait).
type FaultPartition struct {
	Nodes       []int
	From, Until int64
}

// FaultCrash crashes Node at tick At and restarts it Down ticks later (0: never). With
// AtRelease the crash happens at the node's first release at or after At, once the
// release is durable and before any message of it is sent (the worst case for a
// restart). A node that no longer takes part at At (finished or stopped) does not crash.
type FaultCrash struct {
	Node      int
	At        int64
	Down      int64
	AtRelease bool
}

func (s *FaultSchedule) defaults(n int) error {
	if s.MaxLatency == 0 {
		s.MaxLatency = 3
	}
	if s.Retry == 0 {
		s.Retry = 4
	}
	switch {
	case s.MaxLatency < 1 || s.Retry < 1 || s.Heartbeat < 0 || s.Missed < 0 || s.Heartbeat > 0 && s.Missed < 1:
		return errors.New("testnet: faults: latency, retry and missed beats must be >= 1, heartbeat >= 0")
	case !(s.Loss >= 0 && s.Loss < 1) || !(s.Dup >= 0 && s.Dup < 1):
		return fmt.Errorf("testnet: faults: loss and duplication must be in [0,1), got %v and %v", s.Loss, s.Dup)
	}
	for _, p := range s.Partitions {
		for _, i := range p.Nodes {
			if i < 0 || i >= n {
				return fmt.Errorf("testnet: faults: partition node %d out of range [0,%d)", i, n)
			}
		}
	}
	for _, c := range s.Crashes {
		if c.Node < 0 || c.Node >= n || c.At < 1 || c.Down < 0 {
			return fmt.Errorf("testnet: faults: crash %+v (node in [0,%d), tick >= 1, down >= 0)", c, n)
		}
	}
	return nil
}

// errCrashNow is returned by a node's effects to crash it where it stands (FaultCrash
// with AtRelease: its release is durable, nothing of it was sent).
var errCrashNow = errors.New("testnet: crash at a release")

// netNode is one node of a fault network: its driver, which maps the network's events to
// inputs of the node's adapter, applies the Readies through an in-memory Effects and
// keeps the durable state a restart starts from. Every method applies the Readies that
// follow its input; errCrashNow crashes the node, any other error ends the run.
type netNode[M any] interface {
	// deliver hands the node message m from node from.
	deliver(from int, m M) error
	// tick advances the node to the network's tick now.
	tick(now int64) error
	// liveness reports that the node observes peer j down (up false) or up again.
	liveness(j int, up bool) error
	// peers returns the nodes whose liveness the node observes.
	peers() []int
	// running reports whether the node takes part in the run (a scheduled crash applies).
	running() bool
	// crash loses everything the node holds but its durable state; crashAt asks for a
	// crash at its next release (errCrashNow from its effects).
	crash()
	crashAt()
	// restart rebuilds the node from its durable state at tick now.
	restart(now int64) error
}

type netPhase uint8

const (
	netUp      netPhase = iota // reachable
	netCrashed                 // down; restarts at restartAt (0: never)
	netGone                    // left the run: unreachable for good
)

// NetStats counts what the network did.
type NetStats struct {
	// Delivered: messages handed to their recipient (duplicates included).
	Delivered int
	// Lost: datagrams lost (Loss, a partition, a crashed recipient, a sender that crashed
	// before they departed).
	Lost int
	// FailedAttempts: stream attempts that failed (Loss) and were retried.
	FailedAttempts int
	// Duplicated: messages delivered twice (Dup).
	Duplicated int
}

// datagram is a message of a datagram link, sent at tick sent, leaving at dep, arriving
// at at.
type datagram[M any] struct {
	at, dep  int64
	sent     int64
	seq      uint64
	lost     bool
	from, to int
	m        M
}

type datagramQueue[M any] []*datagram[M]

func (q datagramQueue[M]) Len() int { return len(q) }
func (q datagramQueue[M]) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q datagramQueue[M]) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *datagramQueue[M]) Push(x any)   { *q = append(*q, x.(*datagram[M])) }
func (q *datagramQueue[M]) Pop() any {
	o := *q
	x := o[len(o)-1]
	*q = o[:len(o)-1]
	return x
}

// frame is a message of a stream link.
type frame[M any] struct {
	m     M
	ready int64
	twice bool // a lost acknowledgement: delivered once, to be delivered again
}

// faultNet is the virtual-clock network. Each tick, in order: the scheduled crashes and
// restarts, liveness (what each node observes of its peers), the deliveries due, then a
// tick of every reachable node in index order.
//
// Two transports model the node's: datagram links (Stream false; the walk's custody
// messages: each message on its own, lost when the recipient is down or cut off, no
// order between messages) and stream links (Stream true; the R-ADMM node's long-lived
// stream per neighbour: FIFO, the sender retries a frame until it is acknowledged, so
// frames wait out partitions and crashed receivers; a crashed sender's queue is lost).
type faultNet[M any] struct {
	sched  FaultSchedule
	stream bool
	rng    *rand.Rand
	seed   uint64 // of the heartbeat latencies
	now    int64
	nodes  []netNode[M]
	phase  []netPhase
	down   []int64 // ticks down of the node's pending or last crash
	restAt []int64 // tick of a crashed node's restart (0: none)
	stats  NetStats

	q      datagramQueue[M]
	seq    uint64
	frames [][][]frame[M] // [from][to]

	live liveState
}

// newFaultNet builds a network of the given nodes (their links all up); sched must have
// passed defaults. rng draws latencies, losses and duplications; seed the heartbeat
// latencies.
func newFaultNet[M any](sched FaultSchedule, stream bool, rng *rand.Rand, seed uint64, nodes []netNode[M]) *faultNet[M] {
	n := len(nodes)
	w := &faultNet[M]{sched: sched, stream: stream, rng: rng, seed: seed, nodes: nodes,
		phase: make([]netPhase, n), down: make([]int64, n), restAt: make([]int64, n)}
	if stream {
		w.frames = make([][][]frame[M], n)
		for i := range w.frames {
			w.frames[i] = make([][]frame[M], n)
		}
	}
	w.liveInit()
	return w
}

// up reports whether node i is reachable.
func (w *faultNet[M]) up(i int) bool { return w.phase[i] == netUp }

// cut reports whether a partition separates i and j at the current tick.
func (w *faultNet[M]) cut(i, j int) bool {
	for _, p := range w.sched.Partitions {
		if w.now >= p.From && w.now < p.Until && slices.Contains(p.Nodes, i) != slices.Contains(p.Nodes, j) {
			return true
		}
	}
	return false
}

// linked reports whether the link i-j is up at the current tick.
func (w *faultNet[M]) linked(i, j int) bool { return w.up(i) && w.up(j) && !w.cut(i, j) }

// run runs ticks 1..end; before is called at the start of every tick, stop after it (true:
// the run is over).
func (w *faultNet[M]) run(end int64, before func() error, stop func() bool) error {
	for w.now = 1; w.now <= end; w.now++ {
		if before != nil {
			if err := before(); err != nil {
				return err
			}
		}
		if err := w.faults(); err != nil {
			return err
		}
		if err := w.liveStep(); err != nil {
			return err
		}
		if err := w.deliver(); err != nil {
			return err
		}
		for i, nd := range w.nodes {
			if w.up(i) {
				if err := w.check(i, nd.tick(w.now)); err != nil {
					return err
				}
			}
		}
		if stop != nil && stop() {
			break
		}
	}
	return nil
}

// check handles the outcome of an input to node i: errCrashNow crashes it.
func (w *faultNet[M]) check(i int, err error) error {
	if errors.Is(err, errCrashNow) {
		w.crash(i)
		return nil
	}
	return err
}

// faults applies the crashes and restarts scheduled for this tick.
func (w *faultNet[M]) faults() error {
	for _, c := range w.sched.Crashes {
		if c.At == w.now && w.up(c.Node) && w.nodes[c.Node].running() {
			w.down[c.Node] = c.Down
			if c.AtRelease {
				w.nodes[c.Node].crashAt()
			} else {
				w.crash(c.Node)
			}
		}
	}
	for i := range w.nodes {
		if w.phase[i] == netCrashed && w.restAt[i] == w.now {
			if err := w.restart(i); err != nil {
				return err
			}
		}
	}
	return nil
}

// crash kills node i (now, or with the down time of its crash at a release): its
// volatile state, its stream queues and the datagrams that had not left it are lost (a
// datagram leaves at its departure tick, except one the node sent during the tick of its
// crash before it crashed, which has left).
func (w *faultNet[M]) crash(i int) {
	w.phase[i] = netCrashed
	w.restAt[i] = 0
	if w.down[i] > 0 {
		w.restAt[i] = w.now + w.down[i]
	}
	w.nodes[i].crash()
	w.dropQueues(i)
	for _, d := range w.q {
		if d.from == i && !d.lost && (d.dep > w.now || d.dep == w.now && d.sent < w.now) {
			d.lost = true
			w.stats.Lost++
		}
	}
	w.live.dirty = true
}

func (w *faultNet[M]) restart(i int) error {
	w.phase[i] = netUp
	w.live.dirty = true
	if err := w.check(i, w.nodes[i].restart(w.now)); err != nil {
		return err
	}
	if w.up(i) {
		return w.liveRestarted(i)
	}
	return nil
}

// leave removes node i from the run for good (it stopped): unreachable, queues dropped.
func (w *faultNet[M]) leave(i int) {
	w.phase[i] = netGone
	w.dropQueues(i)
	w.live.dirty = true
}

// dropQueues drops the frames node i's stream senders still hold.
func (w *faultNet[M]) dropQueues(i int) {
	if w.stream {
		for j := range w.frames[i] {
			w.frames[i][j] = nil
		}
	}
}

// send puts m from node i to node j on the wire, departing hold ticks from now.
func (w *faultNet[M]) send(i, j int, m M, hold int64) {
	dep := w.now + hold
	at := dep + 1 + int64(w.rng.IntN(w.sched.MaxLatency))
	if w.stream {
		w.frames[i][j] = append(w.frames[i][j], frame[M]{m: m, ready: at})
		return
	}
	w.seq++
	d := &datagram[M]{at: at, dep: dep, sent: w.now, seq: w.seq, from: i, to: j, m: m}
	d.lost = w.sched.Loss > 0 && w.rng.Float64() < w.sched.Loss
	if d.lost {
		w.stats.Lost++
	}
	heap.Push(&w.q, d)
	if !d.lost && w.sched.Dup > 0 && w.rng.Float64() < w.sched.Dup {
		w.seq++
		w.stats.Duplicated++
		heap.Push(&w.q, &datagram[M]{at: dep + 1 + int64(w.rng.IntN(w.sched.MaxLatency)), dep: dep, sent: w.now, seq: w.seq, from: i, to: j, m: m})
	}
}

// deliver hands every message whose time has come to its recipient.
func (w *faultNet[M]) deliver() error {
	if w.stream {
		return w.deliverFrames()
	}
	for len(w.q) > 0 && w.q[0].at <= w.now {
		d := heap.Pop(&w.q).(*datagram[M])
		if d.lost {
			continue
		}
		if !w.up(d.to) || w.cut(d.from, d.to) {
			w.stats.Lost++
			continue
		}
		w.stats.Delivered++
		if err := w.check(d.to, w.nodes[d.to].deliver(d.from, d.m)); err != nil {
			return err
		}
	}
	return nil
}

// deliverFrames delivers the stream frames due, link by link in order.
func (w *faultNet[M]) deliverFrames() error {
	n := len(w.nodes)
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			for len(w.frames[i][j]) > 0 && w.frames[i][j][0].ready <= w.now && w.linked(i, j) {
				f := &w.frames[i][j][0]
				if w.sched.Loss > 0 && w.rng.Float64() < w.sched.Loss {
					w.stats.FailedAttempts++
					f.ready = w.now + int64(w.sched.Retry)
					break
				}
				m := f.m
				if !f.twice && w.sched.Dup > 0 && w.rng.Float64() < w.sched.Dup {
					f.twice, f.ready = true, w.now+int64(w.sched.Retry)
					w.stats.Duplicated++
				} else {
					w.frames[i][j] = w.frames[i][j][1:]
				}
				w.stats.Delivered++
				if err := w.check(j, w.nodes[j].deliver(i, m)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// pending reports whether node i's stream to j still holds a frame for which keep is true.
func (w *faultNet[M]) pending(i, j int, keep func(M) bool) bool {
	for _, f := range w.frames[i][j] {
		if keep(f.m) {
			return true
		}
	}
	return false
}

// liveState is what the nodes observe of their peers' liveness (FaultSchedule.Heartbeat).
// Links change only at crashes, restarts, departures and partition boundaries; at those
// ticks every reachable node's links are compared with their last state.
type liveState struct {
	dirty  bool
	link   [][]bool  // [i][j]: the link's state at the last comparison
	said   [][]bool  // [i][j]: what i was last told of j (true: up)
	heard  [][]int64 // [i][j]: tick at which the last beat of j before a cut reached i
	since  [][]int64 // [i][j]: tick since which the link is up
	downAt [][]int64 // [i][j]: tick of the pending down report (0: none)
	gen    [][]uint32
	q      liveQueue
}

type liveEvent struct {
	at       int64
	obs, per int
	up       bool
	gen      uint32
}

// liveQueue orders reports by tick, then observer, then peer.
type liveQueue []liveEvent

func (q liveQueue) Len() int { return len(q) }
func (q liveQueue) Less(a, b int) bool {
	x, y := q[a], q[b]
	if x.at != y.at {
		return x.at < y.at
	}
	if x.obs != y.obs {
		return x.obs < y.obs
	}
	return x.per < y.per
}
func (q liveQueue) Swap(a, b int) { q[a], q[b] = q[b], q[a] }
func (q *liveQueue) Push(x any)   { *q = append(*q, x.(liveEvent)) }
func (q *liveQueue) Pop() any {
	o := *q
	x := o[len(o)-1]
	*q = o[:len(o)-1]
	return x
}

func grid[T any](n int, v T) [][]T {
	g := make([][]T, n)
	for i := range g {
		g[i] = make([]T, n)
		for j := range g[i] {
			g[i][j] = v
		}
	}
	return g
}

func (w *faultNet[M]) liveInit() {
	n := len(w.nodes)
	l := &w.live
	l.link, l.said = grid(n, true), grid(n, true)
	l.heard, l.since, l.downAt = grid(n, int64(0)), grid(n, int64(0)), grid(n, int64(0))
	l.gen = grid(n, uint32(0))
}

// boundary reports whether a partition starts or ends at the current tick.
func (w *faultNet[M]) boundary() bool {
	for _, p := range w.sched.Partitions {
		if p.From == w.now || p.Until == w.now {
			return true
		}
	}
	return false
}

// liveStep compares the links with their last state when they may have changed, then
// makes the liveness reports due.
func (w *faultNet[M]) liveStep() error {
	l := &w.live
	if l.dirty || w.boundary() {
		l.dirty = false
		for i, nd := range w.nodes {
			for _, j := range nd.peers() {
				if !w.up(i) {
					break
				}
				if up := w.linked(i, j); up != l.link[i][j] {
					l.link[i][j] = up
					if err := w.linkChanged(i, j, up); err != nil {
						return err
					}
				}
			}
		}
	}
	for len(l.q) > 0 && l.q[0].at <= w.now {
		e := heap.Pop(&l.q).(liveEvent)
		if e.gen != l.gen[e.obs][e.per] || !w.up(e.obs) || l.said[e.obs][e.per] == e.up {
			continue
		}
		if !e.up {
			l.downAt[e.obs][e.per] = 0
		}
		if err := w.tell(e.obs, e.per, e.up); err != nil {
			return err
		}
	}
	return nil
}

func (w *faultNet[M]) tell(i, j int, up bool) error {
	w.live.said[i][j] = up
	return w.check(i, w.nodes[i].liveness(j, up))
}

// beatLatency is the latency of j's heartbeats to i.
func (w *faultNet[M]) beatLatency(i, j int) int64 {
	return 1 + int64(sim.Mix(w.seed, i*len(w.nodes)+j, 9)%uint64(w.sched.MaxLatency))
}

// linkChanged handles node i's link to j going down (up false) or coming back at the
// current tick: reported at once (connections), or as i's heartbeat detector sees it.
func (w *faultNet[M]) linkChanged(i, j int, up bool) error {
	if w.sched.Heartbeat == 0 {
		return w.tell(i, j, up)
	}
	l, now, H := &w.live, w.now, int64(w.sched.Heartbeat)
	phase, lat := int64(j)%H, w.beatLatency(i, j)
	l.gen[i][j]++ // the reports pending for this pair are void
	if !up {
		if last := now - 1 - ((now-1-phase)%H+H)%H; last >= l.since[i][j] {
			l.heard[i][j] = last + lat // the last beat sent before the cut
		}
		if l.said[i][j] {
			l.downAt[i][j] = l.heard[i][j] + int64(w.sched.Missed)*H
			heap.Push(&l.q, liveEvent{at: l.downAt[i][j], obs: i, per: j, gen: l.gen[i][j]})
		}
		return nil
	}
	l.since[i][j] = now
	arrive := now + ((phase-now)%H+H)%H + lat // the first beat after the cut
	if l.said[i][j] {
		if l.downAt[i][j] == 0 || arrive < l.downAt[i][j] {
			l.downAt[i][j] = 0 // heard again in time: never reported down
			return nil
		}
		heap.Push(&l.q, liveEvent{at: l.downAt[i][j], obs: i, per: j, gen: l.gen[i][j]})
	}
	heap.Push(&l.q, liveEvent{at: arrive, obs: i, per: j, up: true, gen: l.gen[i][j]})
	return nil
}

// liveRestarted starts node i's observation afresh at its restart: it has heard nothing
// yet, so a peer that is unreachable is reported down at once (connections) or after
// Missed beats.
func (w *faultNet[M]) liveRestarted(i int) error {
	l := &w.live
	for _, j := range w.nodes[i].peers() {
		l.gen[i][j]++
		l.said[i][j], l.downAt[i][j], l.since[i][j] = true, 0, w.now
		l.link[i][j] = w.linked(i, j)
		if l.link[i][j] {
			continue
		}
		if w.sched.Heartbeat == 0 {
			if err := w.tell(i, j, false); err != nil {
				return err
			}
			continue
		}
		l.heard[i][j] = w.now
		l.downAt[i][j] = w.now + int64(w.sched.Missed*w.sched.Heartbeat)
		heap.Push(&l.q, liveEvent{at: l.downAt[i][j], obs: i, per: j, gen: l.gen[i][j]})
	}
	return nil
}
