package testnet

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/walk"
)

// FaultConfig configures one run of the fault simulator: n walk.Custody machines over a
// deterministic discrete-tick network, with a crash of a fraction of the nodes that always
// includes the token's current holder (docs/fault-tolerance.md).
type FaultConfig struct {
	Nodes       int     // n; default 40
	Dim         int     // p, features of the synthetic lasso data; default 4
	RowsPerNode int     // rows per node; default 5
	Sigma       float64 // walk noise std (eq. 7); default 0.5
	Seed        uint64
	// MaxLatency: every message takes a uniform 1..MaxLatency ticks; default 3.
	MaxLatency int
	// Hold: ticks between a node's update and the departure of the token (compute and
	// fsync); a crash inside this window finds the token held, otherwise on the wire.
	// Default 2.
	Hold int
	// Heartbeat (H) and Missed (M): every node sends a heartbeat to every peer every H
	// ticks at a fixed phase, whatever it holds; a peer is reported down after M missed
	// beats. Defaults 5 and 3.
	Heartbeat, Missed int
	// Custody parameters (see walk.CustodyConfig). Defaults: AckTimeout 2*MaxLatency+Hold+2,
	// Depth 8, Fallback 0 (off).
	AckTimeout, Depth, Fallback int
	// KillFrac of the nodes crash at one tick drawn uniformly from [WarmTicks, 2*WarmTicks),
	// always including the current holder. Defaults 0.25 and 150. NoKill runs fault-free.
	KillFrac  float64
	WarmTicks int
	NoKill    bool
	// AfterTicks: ticks simulated after the kill; default 600.
	AfterTicks int
	// LossRate: probability that any custody message (token, ack, release) is lost.
	LossRate float64
	// SnapHop: report the first token released with hop >= SnapHop (0: none).
	SnapHop uint64
}

func (c *FaultConfig) defaults() error {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Nodes, 40)
	def(&c.Dim, 4)
	def(&c.RowsPerNode, 5)
	def(&c.MaxLatency, 3)
	def(&c.Hold, 2)
	def(&c.Heartbeat, 5)
	def(&c.Missed, 3)
	def(&c.AckTimeout, 2*c.MaxLatency+c.Hold+2)
	def(&c.Depth, 8)
	def(&c.WarmTicks, 150)
	def(&c.AfterTicks, 600)
	if c.Sigma == 0 {
		c.Sigma = 0.5
	}
	if c.KillFrac == 0 {
		c.KillFrac = 0.25
	}
	switch {
	case c.Nodes < 2 || c.Dim < 1 || c.RowsPerNode < 1:
		return fmt.Errorf("testnet: faults: need >= 2 nodes, dim >= 1 and rows >= 1, got %d, %d, %d", c.Nodes, c.Dim, c.RowsPerNode)
	case c.MaxLatency < 1 || c.Hold < 0 || c.Heartbeat < 1 || c.Missed < 1:
		return errors.New("testnet: faults: latency, heartbeat and missed beats must be >= 1, hold >= 0")
	case !(c.KillFrac > 0 && c.KillFrac < 1):
		return fmt.Errorf("testnet: faults: kill fraction must be in (0,1), got %v", c.KillFrac)
	case !(c.LossRate >= 0 && c.LossRate < 1):
		return fmt.Errorf("testnet: faults: loss rate must be in [0,1), got %v", c.LossRate)
	case !(c.Sigma >= 0) || math.IsInf(c.Sigma, 0):
		return fmt.Errorf("testnet: faults: sigma must be >= 0 and finite, got %v", c.Sigma)
	}
	return nil
}

// faultData returns the shards and problem of a fault run (synthetic lasso, iid split);
// a plain SimConfig over them takes the same path when nothing fails.
func faultData(c FaultConfig) ([]*consensus.Dataset, consensus.Problem, error) {
	d, _ := consensus.SyntheticLasso(c.Nodes*c.RowsPerNode, c.Dim, min(2, c.Dim), 0.1, c.Seed)
	shards, err := consensus.Split(d, c.Nodes, "iid", c.Seed)
	return shards, consensus.Problem{Loss: consensus.Squared, Reg: consensus.Regularizer{L1: 0.01}}, err
}

// Walk hyperparameters of fault runs.
const (
	faultGamma  = 1.0
	faultLambda = 0.5
	faultClip   = 10.0
	faultRun    = "faults"
)

// FaultReport is the outcome of one fault run.
type FaultReport struct {
	Seed     uint64
	KillTick int64
	Killed   []int // sorted
	Holder   int   // the holder killed (last node that accepted the token)
	Held     bool  // the token had not left the holder at the kill (else it was on the wire)
	// Recovered: a live token exists at the end and its path made an update after the kill.
	Recovered bool
	// RecoveryTicks: ticks from the kill to the first update after the kill on the path of
	// the token that survives at the end.
	RecoveryTicks int64
	// HopsLost: hops accepted before the kill that the surviving path does not contain
	// (the front hop before the kill minus the surviving path's last hop before it).
	HopsLost uint64
	// Wasted: accepted steps (after the kill too) that are not on the surviving path:
	// lost hops plus the work of duplicates until they were fenced.
	Wasted             int
	FrontHop, FinalHop uint64 // highest hop accepted before the kill; survivor's hop at the end
	Steps              int    // token acceptances
	Sent               int    // token messages put on the wire
	LedgerEntries      int
	// UnderCount: token messages on the wire without a ledger entry (same node, epoch, hop
	// and recipient) made durable before; must be 0.
	UnderCount int
	// BackupsAtKill: backups held in the whole network just before the crash. Without
	// message loss the release chain keeps it near Depth: one per hand-off within Depth
	// acked hand-offs, plus those whose release wave is still on the wire.
	BackupsAtKill int
	// Retransmits: token messages sent again to the same recipient (covered by the entry
	// of the first send; identical bytes).
	Retransmits int
	// ReleaseConflicts: a node sent two different tokens under one (epoch, hop); must be 0.
	ReleaseConflicts int
	// NoisyMismatch: nodes whose machine counts a different number of noisy updates than
	// their ledger's gaussian entries; must be 0.
	NoisyMismatch int
	// PayloadLeaks: acks or releases that carried token data; must be 0.
	PayloadLeaks                                 int
	Resent, Regenerated, Fallbacks, Fenced, Dups int
	LiveTokens, LiveEpochs                       int // at the end
	Finite                                       bool
	Z                                            []float64 // survivor's model
	Snap                                         *walk.Token
}

type wireMsg struct {
	at, dep int64
	seq     uint64
	lost    bool
	msg     walk.CustodyMsg
}

type wireQueue []*wireMsg

func (q wireQueue) Len() int { return len(q) }
func (q wireQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q wireQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *wireQueue) Push(x any)   { *q = append(*q, x.(*wireMsg)) }
func (q *wireQueue) Pop() any {
	o := *q
	x := o[len(o)-1]
	*q = o[:len(o)-1]
	return x
}

type tokKey struct{ hop, digest uint64 }

type relKey struct {
	node       int
	epoch, hop uint64
}

type ledKey struct {
	epoch, hop uint64
	to         int
}

type acceptRec struct {
	parent int // accept that produced the incoming token; -1 for the start
	tick   int64
	node   int
	hop    uint64 // incoming hop
	epoch  uint64
}

type downEvent struct {
	at        int64
	observer  int
	peer      int
	serialize int
}

type faultSim struct {
	cfg      FaultConfig
	n        int
	nodes    []*walk.Custody
	dead     []bool
	now      int64
	killTick int64
	q        wireQueue
	seq      uint64
	rng      *rand.Rand
	rep      *FaultReport
	ledger   []map[ledKey]int
	sent     []map[ledKey]int
	noisy    []int
	accepts  []acceptRec
	lastAcc  []int // each node's last acceptance (index in accepts, -1: none)
	producer map[tokKey]int
	release  map[relKey]uint64
	zs       map[tokKey][]float64 // z of every released token
	downs    []downEvent
}

// RunFaults runs one fault scenario and returns its report. It returns an error only for
// a bad configuration or a machine error (a bug); the report's fields say whether the
// walk recovered and whether the ledgers cover every release.
//
// A lost token or ack makes the sender redirect the release (walk.Custody), so one
// release reaches several peers. The fault simulator computes no realised pairwise
// figure: its runs fork (a lost ack can leave two copies of a hop until one is fenced)
// and roll back (regeneration, fallback), which one path cannot express. What the
// accountant needs from it is checked instead: every token message on the wire is
// covered by a ledger entry naming its recipient, made before the send (UnderCount), so
// every peer that received a release is named in its sender's ledger.
func RunFaults(cfg FaultConfig) (*FaultReport, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	shards, prob, err := faultData(cfg)
	if err != nil {
		return nil, err
	}
	n := cfg.Nodes
	total := 0
	for _, s := range shards {
		total += s.Rows
	}
	names := make([]string, n)
	for i := range names {
		names[i] = strconv.Itoa(i)
	}
	f := &faultSim{cfg: cfg, n: n, nodes: make([]*walk.Custody, n), dead: make([]bool, n),
		rng:    rand.New(rand.NewPCG(mix(cfg.Seed, -2, 7), mix(cfg.Seed, -2, 8))),
		rep:    &FaultReport{Seed: cfg.Seed, Holder: -1},
		ledger: make([]map[ledKey]int, n), sent: make([]map[ledKey]int, n), noisy: make([]int, n),
		producer: map[tokKey]int{}, release: map[relKey]uint64{}, zs: map[tokKey][]float64{}, lastAcc: make([]int, n),
	}
	for i := range f.lastAcc {
		f.lastAcc[i] = -1
	}
	scratch := walk.NewScratch(cfg.Dim)
	for i, sh := range shards {
		ll, err := consensus.NewLocalLoss(sh, prob.Loss, float64(n)*float64(sh.Rows)/float64(total))
		if err != nil {
			return nil, err
		}
		wc := walk.Config{Node: i, Nodes: n, Gamma: faultGamma, Lambda: faultLambda, Clip: faultClip, Sigma: cfg.Sigma,
			Reg: prob.Reg, Rand: NodeRand(cfg.Seed, i), Run: faultRun, Names: names, Scratch: scratch}
		if cfg.Sigma > 0 {
			wc.Noise = NodeNoise(cfg.Seed, i)
		}
		cc := walk.CustodyConfig{Rand: rand.New(rand.NewPCG(mix(cfg.Seed, i, 4), mix(cfg.Seed, i, 5))),
			AckTimeout: cfg.AckTimeout, Depth: cfg.Depth, FallbackTimeout: cfg.Fallback}
		if f.nodes[i], err = walk.NewCustody(wc, ll, cfg.Dim, cc); err != nil {
			return nil, err
		}
		f.ledger[i], f.sent[i] = map[ledKey]int{}, map[ledKey]int{}
	}
	f.killTick = -1
	if !cfg.NoKill {
		f.killTick = int64(cfg.WarmTicks + f.rng.IntN(cfg.WarmTicks))
	}
	f.rep.KillTick = f.killTick
	start := NodeRand(cfg.Seed, -1).IntN(n)
	tok := walk.NewToken(faultRun, 0, cfg.Dim, prob.Reg, faultGamma)
	k0 := tokKey{0, walk.TokenDigest(tok)}
	f.producer[k0] = -1
	if err := f.nodes[start].Start(tok); err != nil {
		return nil, err
	}
	if err := f.apply(start, &k0, 0); err != nil {
		return nil, err
	}
	end := int64(2*cfg.WarmTicks + cfg.AfterTicks)
	if f.killTick >= 0 {
		end = f.killTick + int64(cfg.AfterTicks)
	}
	for f.now = 1; f.now <= end; f.now++ {
		if f.now == f.killTick {
			f.kill()
		}
		if err := f.deliver(); err != nil {
			return nil, err
		}
		for len(f.downs) > 0 && f.downs[0].at <= f.now {
			d := f.downs[0]
			f.downs = f.downs[1:]
			if f.dead[d.observer] {
				continue
			}
			f.nodes[d.observer].PeerDown(d.peer)
			if err := f.apply(d.observer, nil, 0); err != nil {
				return nil, err
			}
		}
		for i, c := range f.nodes {
			if f.dead[i] {
				continue
			}
			c.Tick()
			if err := f.apply(i, nil, 0); err != nil {
				return nil, err
			}
		}
	}
	f.finish()
	return f.rep, nil
}

// kill crashes the holder and enough random others to make KillFrac of the nodes; every
// live node learns of each crash from the missed heartbeats of the dead node.
func (f *faultSim) kill() {
	holder := f.accepts[len(f.accepts)-1].node
	f.rep.Holder = holder
	f.rep.Held = false
	for _, w := range f.q {
		if w.msg.Kind == walk.CustodyToken && w.msg.From == holder && w.dep >= f.now {
			f.rep.Held = true
		}
	}
	for _, c := range f.nodes {
		f.rep.BackupsAtKill += len(c.Backups())
	}
	k := int(math.Ceil(f.cfg.KillFrac * float64(f.n)))
	f.dead[holder] = true
	killed := []int{holder}
	for _, j := range f.rng.Perm(f.n) {
		if len(killed) == k {
			break
		}
		if !f.dead[j] {
			f.dead[j] = true
			killed = append(killed, j)
		}
	}
	sort.Ints(killed)
	f.rep.Killed = killed
	H, M := int64(f.cfg.Heartbeat), int64(f.cfg.Missed)
	for _, d := range killed {
		phase := int64(d) % H
		last := f.now - 1 - ((f.now-1-phase)%H+H)%H // last beat sent before the crash
		for j := 0; j < f.n; j++ {
			if f.dead[j] {
				continue
			}
			lat := 1 + int64(mix(f.cfg.Seed, j*f.n+d, 9)%uint64(f.cfg.MaxLatency))
			f.downs = append(f.downs, downEvent{at: last + lat + M*H, observer: j, peer: d})
		}
	}
	sort.Slice(f.downs, func(a, b int) bool {
		if f.downs[a].at != f.downs[b].at {
			return f.downs[a].at < f.downs[b].at
		}
		if f.downs[a].observer != f.downs[b].observer {
			return f.downs[a].observer < f.downs[b].observer
		}
		return f.downs[a].peer < f.downs[b].peer
	})
}

func (f *faultSim) deliver() error {
	for len(f.q) > 0 && f.q[0].at <= f.now {
		w := heap.Pop(&f.q).(*wireMsg)
		m := w.msg
		if w.lost || f.dead[m.To] || (f.dead[m.From] && w.dep >= f.killTick) {
			continue // lost, or the recipient is down, or the sender crashed before sending
		}
		var in *tokKey
		if m.Kind == walk.CustodyToken {
			in = &tokKey{m.Hop, walk.TokenDigest(m.Token)}
		}
		if err := f.nodes[m.To].Step(m); err != nil {
			return fmt.Errorf("testnet: faults: tick %d node %d: %w", f.now, m.To, err)
		}
		if err := f.apply(m.To, in, m.Epoch); err != nil {
			return err
		}
	}
	return nil
}

// apply performs node i's Readies like a real driver (ledger, state, then send; a token
// the node accepted is stepped at Advance and makes the next Ready) and checks them
// independently: every token on the wire has a durable ledger entry, acks and releases
// carry no token data, vectors are finite.
func (f *faultSim) apply(i int, in *tokKey, inEpoch uint64) error {
	for c := f.nodes[i]; c.HasReady(); {
		if err := f.applyReady(i, c.Ready(), in, inEpoch); err != nil {
			return err
		}
	}
	return nil
}

func (f *faultSim) applyReady(i int, rd walk.CustodyReady, in *tokKey, inEpoch uint64) error {
	c := f.nodes[i]
	name := strconv.Itoa(i)
	for _, e := range rd.Ledger {
		if err := e.Validate(); err != nil {
			return err
		}
		if e.Node != name {
			return fmt.Errorf("testnet: faults: node %d wrote an entry for %q", i, e.Node)
		}
		to, err := strconv.Atoi(e.Recipient)
		if err != nil {
			return err
		}
		f.ledger[i][ledKey{e.Epoch, e.Hop, to}]++
		f.rep.LedgerEntries++
		if e.Noisy() {
			f.noisy[i]++
		}
	}
	for _, ev := range rd.Events {
		switch ev.Kind {
		case walk.CustodyAccepted:
			if in == nil {
				return fmt.Errorf("testnet: faults: node %d accepted a token outside a delivery", i)
			}
			p, ok := f.producer[*in]
			if !ok {
				return fmt.Errorf("testnet: faults: node %d accepted a token nobody released", i)
			}
			f.lastAcc[i] = len(f.accepts)
			f.accepts = append(f.accepts, acceptRec{parent: p, tick: f.now, node: i, hop: in.hop, epoch: inEpoch})
			f.rep.Steps++
		case walk.CustodyResent:
			f.rep.Resent++
		case walk.CustodyRegenerated:
			f.rep.Regenerated++
		case walk.CustodyFallback:
			f.rep.Fallbacks++
		case walk.CustodyFenced:
			f.rep.Fenced++
		case walk.CustodyDuplicate:
			f.rep.Dups++
		}
	}
	for _, m := range rd.Outbox {
		if m.From != i || m.To < 0 || m.To >= f.n || m.To == i {
			return fmt.Errorf("testnet: faults: node %d sent a message from %d to %d", i, m.From, m.To)
		}
		dep := f.now
		if m.Kind == walk.CustodyToken {
			t := m.Token
			if t.Epoch != m.Epoch || t.Hop != m.Hop || len(t.Z) != f.cfg.Dim || len(t.Zhat) != f.cfg.Dim {
				return fmt.Errorf("testnet: faults: node %d: malformed token message", i)
			}
			for k := range t.Z {
				if math.IsNaN(t.Z[k]+t.Zhat[k]) || math.IsInf(t.Z[k]+t.Zhat[k], 0) {
					return fmt.Errorf("testnet: faults: node %d released a non-finite token", i)
				}
			}
			// Covered: an entry for this release (epoch, hop) naming this recipient is
			// already durable. A retransmission to the same recipient is covered by it;
			// any other recipient needs its own entry.
			key := ledKey{t.Epoch, t.Hop, m.To}
			f.sent[i][key]++
			if f.ledger[i][key] == 0 {
				f.rep.UnderCount++
			}
			if f.sent[i][key] > f.ledger[i][key] {
				f.rep.Retransmits++
			}
			// One release per (node, epoch, hop): every copy is byte-identical (no re-noising).
			rk := relKey{i, t.Epoch, t.Hop}
			d := walk.TokenDigest(t)
			if d0, ok := f.release[rk]; ok && d0 != d {
				f.rep.ReleaseConflicts++
			}
			f.release[rk] = d
			f.rep.Sent++
			tk := tokKey{t.Hop, walk.TokenDigest(t)}
			if _, ok := f.producer[tk]; !ok {
				// Released after the node's last acceptance: the token it stepped.
				if f.lastAcc[i] < 0 {
					return fmt.Errorf("testnet: faults: node %d released a new token without accepting one", i)
				}
				f.producer[tk] = f.lastAcc[i]
				f.zs[tk] = append([]float64(nil), t.Z...)
			}
			if f.cfg.SnapHop > 0 && f.rep.Snap == nil && t.Hop >= f.cfg.SnapHop {
				s := t
				s.Z, s.Zhat = append([]float64(nil), t.Z...), append([]float64(nil), t.Zhat...)
				f.rep.Snap = &s
			}
			dep += int64(f.cfg.Hold)
		} else if m.Token.Z != nil || m.Token.Zhat != nil || m.Token.Run != "" {
			f.rep.PayloadLeaks++
		}
		f.seq++
		w := &wireMsg{at: dep + 1 + int64(f.rng.IntN(f.cfg.MaxLatency)), dep: dep, seq: f.seq, msg: m}
		w.lost = f.cfg.LossRate > 0 && f.rng.Float64() < f.cfg.LossRate
		heap.Push(&f.q, w)
	}
	c.Advance(rd)
	return nil
}

// finish finds the live tokens, the survivor and its path, and fills the report.
func (f *faultSim) finish() {
	r := f.rep
	for i, c := range f.nodes {
		if c.Machine().Updates() != f.noisy[i] {
			r.NoisyMismatch++
		}
	}
	// Live tokens: on the wire to a live node that would accept them, or in the unacked
	// backup of a live sender (lost, sent to a dead node, or waiting for a peer) that the
	// recipient has not accepted.
	type live struct{ epoch, hop, digest uint64 }
	set := map[live]bool{}
	accepts := func(to int, l live) bool {
		if to < 0 || f.dead[to] {
			return true // the sender will re-send it elsewhere
		}
		return f.nodes[to].Accepts(l.epoch, l.hop, l.digest)
	}
	for _, w := range f.q {
		m := &w.msg
		if m.Kind != walk.CustodyToken || w.lost || f.dead[m.From] && w.dep >= f.killTick {
			continue // not a token, lost, or never left a crashed sender
		}
		l := live{m.Epoch, m.Hop, walk.TokenDigest(m.Token)}
		if f.dead[m.To] && f.dead[m.From] || !accepts(m.To, l) {
			continue
		}
		set[l] = true
	}
	for i, c := range f.nodes {
		if f.dead[i] {
			continue
		}
		for _, b := range c.Backups() {
			l := live{b.Epoch, b.Hop, b.Digest}
			if !b.Acked && accepts(b.To, l) {
				set[l] = true
			}
		}
	}
	var best live
	epochs := map[uint64]bool{}
	for l := range set {
		epochs[l.epoch] = true
		if l.epoch > best.epoch || l.epoch == best.epoch && (l.hop > best.hop || l.hop == best.hop && l.digest > best.digest) {
			best = l
		}
	}
	r.LiveTokens, r.LiveEpochs = len(set), len(epochs)
	if len(set) == 0 {
		return
	}
	r.FinalHop = best.hop
	bk := tokKey{best.hop, best.digest}
	r.Z = append([]float64(nil), f.zs[bk]...)
	r.Finite = len(r.Z) == f.cfg.Dim
	for _, v := range r.Z {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			r.Finite = false
		}
	}
	onPath := make([]bool, len(f.accepts))
	a := f.producer[bk]
	firstAfter, lastBefore := -1, -1
	pathLen := 0
	for ; a >= 0; a = f.accepts[a].parent {
		onPath[a] = true
		pathLen++
		if f.killTick >= 0 && f.accepts[a].tick >= f.killTick {
			firstAfter = a
		} else if lastBefore < 0 {
			lastBefore = a
		}
	}
	r.Wasted = len(f.accepts) - pathLen
	if f.killTick < 0 {
		r.Recovered = true
		return
	}
	for _, ac := range f.accepts {
		if ac.tick < f.killTick && ac.hop > r.FrontHop {
			r.FrontHop = ac.hop
		}
	}
	if firstAfter >= 0 {
		r.Recovered = true
		r.RecoveryTicks = f.accepts[firstAfter].tick - f.killTick
	}
	if lastBefore >= 0 {
		r.HopsLost = r.FrontHop - f.accepts[lastBefore].hop
	} else {
		r.HopsLost = r.FrontHop
	}
}
