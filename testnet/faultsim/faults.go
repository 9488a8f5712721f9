package faultsim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/node/drive"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/testnet/sim"
	"github.com/dpadmm/dpadmm/walk"
)

// FaultConfig configures one run of the walk's crash study: n walk.Custody machines, each
// driven through drive.Walk, on the fault network (faultnet.go: datagram links, heartbeat
// liveness), with a crash of a fraction of the nodes that always includes the token's
// current holder (docs/fault-tolerance.md).
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
	// Restart: the crashed nodes restart this many ticks after the kill, from what their
	// effects made durable (0: they never come back).
	Restart int64
	// Partitions and Crashes are further faults of the schedule (FaultSchedule).
	Partitions []FaultPartition
	Crashes    []FaultCrash
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
	case c.Restart < 0:
		return fmt.Errorf("testnet: faults: restart must be >= 0 ticks, got %d", c.Restart)
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
	Restarts                                     int
	LiveTokens, LiveEpochs                       int // at the end
	Finite                                       bool
	Z                                            []float64 // survivor's model
	Snap                                         *walk.Token
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

// faultSim is the walk's crash study: n walk nodes on the fault network, and the checkers
// of every Ready they apply.
type faultSim struct {
	cfg      FaultConfig
	n        int
	net      *faultNet[walk.CustodyMsg]
	nodes    []*walkNode
	wcs      []walk.Config
	losses   []*consensus.LocalLoss
	killTick int64
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
	err      error                // the first inconsistency found in an event
}

// RunFaults runs one fault scenario and returns its report. It returns an error only for
// a bad configuration or a machine error (a bug); the report's fields say whether the
// walk recovered and whether the ledgers cover every release.
//
// Every node is a walk.Custody driven through drive.Walk, the adapter the libp2p node
// applies its Readies with, on the fault network (faultnet.go) with datagram links and
// heartbeat liveness. A lost token or ack makes the sender redirect the release
// (walk.Custody), so one release reaches several peers. The fault simulator computes no
// realised pairwise figure: its runs fork (a lost ack can leave two copies of a hop until
// one is fenced) and roll back (regeneration, fallback), which one path cannot express.
// What the accountant needs from it is checked instead: every token message on the wire
// is covered by a ledger entry naming its recipient, made before the send (UnderCount),
// so every peer that received a release is named in its sender's ledger.
func RunFaults(cfg FaultConfig) (*FaultReport, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	f, err := newFaultSim(cfg)
	if err != nil {
		return nil, err
	}
	if !cfg.NoKill {
		f.killTick = int64(cfg.WarmTicks + f.rng.IntN(cfg.WarmTicks))
	}
	f.rep.KillTick = f.killTick
	start := sim.NodeRand(cfg.Seed, -1).IntN(f.n)
	tok := walk.NewToken(faultRun, 0, cfg.Dim, f.wcs[0].Reg, faultGamma)
	k0 := tokKey{0, walk.TokenDigest(tok)}
	f.producer[k0] = -1
	nd := f.nodes[start]
	if err := nd.ad.Custody().Start(tok); err != nil {
		return nil, err
	}
	if err := nd.drain(&k0, 0); err != nil {
		return nil, err
	}
	end := int64(2*cfg.WarmTicks + cfg.AfterTicks)
	if f.killTick >= 0 {
		end = f.killTick + int64(cfg.AfterTicks)
	}
	before := func() error {
		if f.net.now == f.killTick {
			f.kill()
		}
		return nil
	}
	if err := f.net.run(end, before, nil); err != nil {
		return nil, err
	}
	if f.err != nil {
		return nil, f.err
	}
	f.finish()
	return f.rep, nil
}

// newFaultSim builds the nodes (each a fresh walk.Custody in its adapter) and the network.
func newFaultSim(cfg FaultConfig) (*faultSim, error) {
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
	f := &faultSim{cfg: cfg, n: n, killTick: -1,
		rng:    rand.New(rand.NewPCG(sim.Mix(cfg.Seed, -2, 7), sim.Mix(cfg.Seed, -2, 8))),
		rep:    &FaultReport{Seed: cfg.Seed, Holder: -1},
		ledger: make([]map[ledKey]int, n), sent: make([]map[ledKey]int, n), noisy: make([]int, n),
		producer: map[tokKey]int{}, release: map[relKey]uint64{}, zs: map[tokKey][]float64{}, lastAcc: make([]int, n),
	}
	scratch := walk.NewScratch(cfg.Dim)
	nodes := make([]netNode[walk.CustodyMsg], n)
	for i, sh := range shards {
		f.lastAcc[i] = -1
		ll, err := consensus.NewLocalLoss(sh, prob.Loss, walk.LossWeight(n, sh.Rows, total))
		if err != nil {
			return nil, err
		}
		f.losses = append(f.losses, ll)
		f.wcs = append(f.wcs, walk.Config{Node: i, Nodes: n, Gamma: faultGamma, Lambda: faultLambda, Clip: faultClip, Sigma: cfg.Sigma,
			Reg: prob.Reg, Run: faultRun, Names: names, Scratch: scratch})
		f.ledger[i], f.sent[i] = map[ledKey]int{}, map[ledKey]int{}
		nd := &walkNode{f: f, i: i}
		nd.fx.nd = nd
		for j := 0; j < n; j++ {
			if j != i {
				nd.others = append(nd.others, j)
			}
		}
		if nd.ad, err = f.newCustody(nd); err != nil {
			return nil, err
		}
		f.nodes = append(f.nodes, nd)
		nodes[i] = nd
	}
	sched := FaultSchedule{MaxLatency: cfg.MaxLatency, Loss: cfg.LossRate, Heartbeat: cfg.Heartbeat, Missed: cfg.Missed,
		Partitions: cfg.Partitions, Crashes: cfg.Crashes}
	if err := sched.defaults(n); err != nil {
		return nil, err
	}
	f.net = newFaultNet(sched, false, f.rng, cfg.Seed, nodes)
	return f, nil
}

// newCustody builds node nd's machine from its durable generators (its next-hop and noise
// sources as of its last checkpoint: drive.SeededSources for a fresh node, which draw as
// NodeRand and NodeNoise).
func (f *faultSim) newCustody(nd *walkNode) (*drive.Walk, error) {
	i, cfg := nd.i, f.cfg
	nd.hopSrc, nd.noiseSrc = drive.SeededSources(cfg.Seed, i)
	if nd.srcs[0] != nil {
		if err := nd.hopSrc.UnmarshalBinary(nd.srcs[0]); err != nil {
			return nil, err
		}
		if err := nd.noiseSrc.UnmarshalBinary(nd.srcs[1]); err != nil {
			return nil, err
		}
	}
	wc := f.wcs[i]
	wc.Rand = rand.New(nd.hopSrc)
	if cfg.Sigma > 0 {
		wc.Noise = privacy.NewNoiseFromRand(rand.New(nd.noiseSrc))
	}
	cc := walk.CustodyConfig{Rand: rand.New(rand.NewPCG(sim.Mix(cfg.Seed, i, 4)+uint64(nd.restarts), sim.Mix(cfg.Seed, i, 5))),
		AckTimeout: cfg.AckTimeout, Depth: cfg.Depth, FallbackTimeout: cfg.Fallback}
	c, err := walk.NewCustody(wc, f.losses[i], cfg.Dim, cc)
	if err != nil {
		return nil, err
	}
	return drive.NewWalk(c), nil
}

// kill crashes the holder and enough random others to make KillFrac of the nodes (they
// restart after cfg.Restart ticks, if set); every live node learns of each crash from the
// missed heartbeats of the dead node.
func (f *faultSim) kill() {
	holder := f.accepts[len(f.accepts)-1].node
	f.rep.Holder = holder
	f.rep.Held = false
	for _, d := range f.net.q {
		if d.m.Kind == walk.CustodyToken && d.from == holder && d.dep >= f.net.now {
			f.rep.Held = true
		}
	}
	for _, nd := range f.nodes {
		if nd.ad != nil {
			f.rep.BackupsAtKill += len(nd.ad.Custody().Backups())
		}
	}
	k := int(math.Ceil(f.cfg.KillFrac * float64(f.n)))
	killed := []int{holder}
	for _, j := range f.rng.Perm(f.n) {
		if len(killed) == k {
			break
		}
		if f.net.up(j) && !slices.Contains(killed, j) {
			killed = append(killed, j)
		}
	}
	sort.Ints(killed)
	f.rep.Killed = killed
	for _, d := range killed {
		f.net.down[d] = f.cfg.Restart
		f.net.crash(d)
	}
}

// walkNode drives one node's walk.Custody through drive.Walk on the fault network: the
// network's events become custody inputs (Step, TickTo, PeerDown/PeerUp), and its
// effects keep in memory what the node's make durable (ledger, inbox, checkpoint with
// the generators' state), from which a restart rebuilds the node as node.Node does.
type walkNode struct {
	f      *faultSim
	i      int
	others []int
	ad     *drive.Walk // nil while crashed
	fx     walkEffects
	// hopSrc and noiseSrc are the live machine's generators.
	hopSrc, noiseSrc *rand.PCG
	// Durable state.
	held       *walk.CustodyHeld     // the inbox: the last token taken
	ck         *walk.Checkpoint      // u_i and K_i
	srcs       [2][]byte             // the generators at the checkpoint
	snap       *walk.CustodySnapshot // the custody snapshot
	stepped    bool                  // (epoch, hop) of the last token processed
	epoch, hop uint64
	restarts   int
	crashNext  bool // crash at the next release, once durable
}

func (nd *walkNode) peers() []int  { return nd.others }
func (nd *walkNode) running() bool { return nd.ad != nil && !nd.ad.Done() }
func (nd *walkNode) crashAt()      { nd.crashNext = true }
func (nd *walkNode) crash()        { nd.ad, nd.crashNext, nd.fx.ledgered = nil, false, false }

// drain applies the node's Readies; in is the token being delivered (for the path
// bookkeeping of CustodyAccepted), nil for other inputs.
func (nd *walkNode) drain(in *tokKey, epoch uint64) error {
	nd.fx.in, nd.fx.inEpoch = in, epoch
	err := drive.Drain[drive.WalkEffects](nd.ad, &nd.fx)
	nd.fx.in = nil
	return err
}

func (nd *walkNode) deliver(_ int, m walk.CustodyMsg) error {
	var in *tokKey
	if m.Kind == walk.CustodyToken {
		in = &tokKey{m.Hop, walk.TokenDigest(m.Token)}
	}
	if err := nd.ad.Custody().Step(m); err != nil {
		return fmt.Errorf("testnet: faults: tick %d node %d: %w", nd.f.net.now, nd.i, err)
	}
	return nd.drain(in, m.Epoch)
}

func (nd *walkNode) tick(now int64) error {
	nd.ad.TickTo(now)
	return nd.drain(nil, 0)
}

func (nd *walkNode) liveness(j int, up bool) error {
	if up {
		nd.ad.Custody().PeerUp(j)
	} else {
		nd.ad.Custody().PeerDown(j)
	}
	return nd.drain(nil, 0)
}

// restart rebuilds the node from its durable state, as node.Node does: its generators,
// u_i and K_i from the checkpoint, the custody snapshot (liveness, timers and the
// fallback's observations start afresh at now), and the token of the inbox when it is
// newer than the last one processed (stepped now).
func (nd *walkNode) restart(now int64) error {
	nd.restarts++
	nd.f.rep.Restarts++
	ad, err := nd.f.newCustody(nd)
	if err != nil {
		return err
	}
	var snap walk.CustodySnapshot
	if nd.snap != nil {
		snap = *nd.snap
	}
	// The node's checkpoint keeps neither liveness, timers nor the fallback's observations
	// (node.snapshotOf): they start afresh at the restart, so an unacked release goes again
	// to its recipient at the first tick.
	snap.Held, snap.Down, snap.Now, snap.Fallback = nil, nil, now, walk.CustodyFallbackState{Active: now}
	snap.Backups = slices.Clone(snap.Backups)
	for k := range snap.Backups {
		b := &snap.Backups[k]
		b.Deadline, b.BusyAt, b.BusyWait, b.Retried, b.Progress = now, 0, 0, false, now
	}
	if h := nd.held; h != nil && (!nd.stepped || h.Token.Epoch > nd.epoch || h.Token.Epoch == nd.epoch && h.Token.Hop > nd.hop) {
		snap.Held = h
	}
	if err := ad.Custody().Restore(nd.ck, snap); err != nil {
		return fmt.Errorf("testnet: faults: restart of node %d: %w", nd.i, err)
	}
	nd.ad = ad
	return nd.drain(nil, 0)
}

// walkEffects is a walk node's drive.WalkEffects: the in-memory durable store and the
// network, with the study's checks of every Ready.
type walkEffects struct {
	nd       *walkNode
	in       *tokKey
	inEpoch  uint64
	ledgered bool // the Ready being applied has ledger entries (a release)
}

func (fx *walkEffects) AppendLedger(es []privacy.Entry) error {
	fx.ledgered = true
	return fx.nd.f.ledgerEntries(fx.nd.i, es)
}

func (fx *walkEffects) Persist(r drive.WalkRecord) error {
	nd := fx.nd
	if len(r.Ledger) > 0 {
		// Durable with the checkpoint (one write): the crash below comes after them, the
		// study's conservative case (the entries counted, the release never sent).
		if err := fx.AppendLedger(r.Ledger); err != nil {
			return err
		}
	}
	if h := r.Held; h != nil {
		c := *h
		c.Token.Z, c.Token.Zhat = slices.Clone(h.Token.Z), slices.Clone(h.Token.Zhat)
		nd.held = &c
	}
	if st := r.State; st != nil {
		nd.ck = &walk.Checkpoint{Node: st.Node, Updates: st.Updates, U: slices.Clone(st.U)}
		nd.srcs[0], _ = nd.hopSrc.MarshalBinary()
		nd.srcs[1], _ = nd.noiseSrc.MarshalBinary()
	}
	if r.Custody != nil {
		nd.snap = r.Custody // its vectors are immutable releases
	}
	if r.Stepped {
		nd.stepped, nd.epoch, nd.hop = true, r.Epoch, r.Hop
	}
	if nd.crashNext && fx.ledgered {
		return errCrashNow
	}
	return nil
}

func (fx *walkEffects) Send(m walk.CustodyMsg) error { return fx.nd.f.send(fx.nd.i, m) }

func (fx *walkEffects) Note(evs []walk.CustodyEvent) {
	fx.ledgered = false
	fx.nd.f.note(fx.nd.i, evs, fx.in, fx.inEpoch)
}

func (fx *walkEffects) Final(*walk.CustodyFinal) error { return nil }

// ledgerEntries records node i's durable entries.
func (f *faultSim) ledgerEntries(i int, es []privacy.Entry) error {
	name := strconv.Itoa(i)
	for _, e := range es {
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
	return nil
}

// note records node i's events: the acceptances (the path tree) and the recovery counts.
func (f *faultSim) note(i int, evs []walk.CustodyEvent, in *tokKey, inEpoch uint64) {
	for _, ev := range evs {
		switch ev.Kind {
		case walk.CustodyAccepted:
			p, ok := -2, in != nil
			if ok {
				p, ok = f.producer[*in]
			}
			if !ok {
				if f.err == nil {
					f.err = fmt.Errorf("testnet: faults: node %d accepted a token outside a delivery or one nobody released", i)
				}
				continue
			}
			f.lastAcc[i] = len(f.accepts)
			f.accepts = append(f.accepts, acceptRec{parent: p, tick: f.net.now, node: i, hop: in.hop, epoch: inEpoch})
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
}

// send checks a message node i sends (a token is well formed, finite and covered by a
// durable ledger entry naming its recipient; acks and releases carry no token data) and
// puts it on the wire; a token leaves Hold ticks later.
func (f *faultSim) send(i int, m walk.CustodyMsg) error {
	if m.From != i || m.To < 0 || m.To >= f.n || m.To == i {
		return fmt.Errorf("testnet: faults: node %d sent a message from %d to %d", i, m.From, m.To)
	}
	hold := int64(0)
	if m.Kind == walk.CustodyToken {
		if err := f.sendToken(i, m); err != nil {
			return err
		}
		hold = int64(f.cfg.Hold)
	} else if m.Token.Z != nil || m.Token.Zhat != nil || m.Token.Run != "" {
		f.rep.PayloadLeaks++
	}
	f.net.send(i, m.To, m, hold)
	return nil
}

func (f *faultSim) sendToken(i int, m walk.CustodyMsg) error {
	t := m.Token
	if t.Epoch != m.Epoch || t.Hop != m.Hop || len(t.Z) != f.cfg.Dim || len(t.Zhat) != f.cfg.Dim {
		return fmt.Errorf("testnet: faults: node %d: malformed token message", i)
	}
	for k := range t.Z {
		if math.IsNaN(t.Z[k]+t.Zhat[k]) || math.IsInf(t.Z[k]+t.Zhat[k], 0) {
			return fmt.Errorf("testnet: faults: node %d released a non-finite token", i)
		}
	}
	// Covered: an entry for this release (epoch, hop) naming this recipient is already
	// durable. A retransmission to the same recipient is covered by it; any other
	// recipient needs its own entry.
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
	tk := tokKey{t.Hop, d}
	if _, ok := f.producer[tk]; !ok {
		// Released after the node's last acceptance: the token it stepped.
		if f.lastAcc[i] < 0 {
			return fmt.Errorf("testnet: faults: node %d released a new token without accepting one", i)
		}
		f.producer[tk] = f.lastAcc[i]
		f.zs[tk] = slices.Clone(t.Z)
	}
	if f.cfg.SnapHop > 0 && f.rep.Snap == nil && t.Hop >= f.cfg.SnapHop {
		s := t
		s.Z, s.Zhat = slices.Clone(t.Z), slices.Clone(t.Zhat)
		f.rep.Snap = &s
	}
	return nil
}

// updates returns node i's noisy updates: its machine's, or its checkpoint's while it is
// down.
func (f *faultSim) updates(i int) int {
	nd := f.nodes[i]
	switch {
	case nd.ad != nil:
		return nd.ad.Custody().Machine().Updates()
	case nd.ck != nil:
		return nd.ck.Updates
	}
	return 0
}

// finish finds the live tokens, the survivor and its path, and fills the report.
func (f *faultSim) finish() {
	r := f.rep
	for i := range f.nodes {
		if f.updates(i) != f.noisy[i] {
			r.NoisyMismatch++
		}
	}
	// Live tokens: on the wire to a live node that would accept them, or in the unacked
	// backup of a live sender (lost, sent to a dead node, or waiting for a peer) that the
	// recipient has not accepted.
	type live struct{ epoch, hop, digest uint64 }
	set := map[live]bool{}
	dead := func(i int) bool { return !f.net.up(i) }
	accepts := func(to int, l live) bool {
		if to < 0 || dead(to) {
			return true // the sender will re-send it elsewhere
		}
		return f.nodes[to].ad.Custody().Accepts(l.epoch, l.hop, l.digest)
	}
	for _, d := range f.net.q {
		m := &d.m
		if m.Kind != walk.CustodyToken || d.lost {
			continue // not a token, or lost (on the way, or never left a crashed sender)
		}
		l := live{m.Epoch, m.Hop, walk.TokenDigest(m.Token)}
		if dead(m.To) && dead(m.From) || !accepts(m.To, l) {
			continue
		}
		set[l] = true
	}
	for i, nd := range f.nodes {
		if dead(i) {
			continue
		}
		for _, b := range nd.ad.Custody().Backups() {
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
