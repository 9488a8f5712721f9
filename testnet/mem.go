package testnet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/rs/zerolog"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/node"
	"github.com/dpadmm/dpadmm/node/drive"
	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/testnet/sim"
	"github.com/dpadmm/dpadmm/walk"
)

// MemConfig configures an in-process network of libp2p hosts (loopback TCP, or
// go-libp2p's in-memory mock network), one node.Node per shard. Per-node randomness, shards, weights and the initial holder are
// those of NewSim for the same seed, so the final model is bit-identical to the
// simulator's after the same number of hops.
type MemConfig struct {
	Shards []*consensus.Dataset
	// Predictor describes the run's models in raw units (sim.PredictorTemplate): the
	// nodes' model.json files carry it with their weights (node.Harness.Predictor); nil:
	// the predictor describes the prepared shards.
	Predictor  *consensus.ModelSpec
	Problem    consensus.Problem
	Gamma      float64
	Lambda     float64
	Clip       float64
	Unit       privacy.Unit // what the figures protect (node.Training.Unit)
	RowBound   float64      // the public row bound (node.Training.RowBound)
	Sigma      float64
	Step       walk.StepParams // the local step (zero value: prox)
	MaxUpdates int
	Seed       uint64
	Run        string // "" = "mem"
	Hops       uint64
	Delta      float64 // for model.json; 0 = 1e-5
	// Dir is the parent of the per-node data directories (node-<i>); "" uses a temporary
	// directory that is removed afterwards, in memory (/dev/shm) where there is one: each
	// hop replaces checkpoint files by rename, which a disk file system such as ext4
	// flushes even without fsync (about 2 ms of system time per hop, several times the
	// rest of a hop).
	Dir string
	// Sync makes ledger and checkpoint writes fsync (off by default: testnets).
	Sync bool
	// Degree is how many ring successors each host connects to up front (the others are
	// dialled on demand); 0 = all (full mesh) up to 16 nodes, else 4.
	Degree int
	// AckTimeout is the nodes' hand-off ack timeout (node.Config.AckTimeout); 0 = the
	// node default.
	AckTimeout time.Duration
	// Withhold is fault injection: the nodes with these indices read every token hand-off
	// and never ack it (node.Config.WithholdAcks), so every release sent to them is
	// redirected and seen by two peers. None of them may be the initial holder.
	Withhold []int
	Logger   zerolog.Logger
	// Transport is TransportTCP ("" = tcp) or TransportMock.
	Transport string
	// Heartbeat is the nodes' heartbeat interval (node.Config.Heartbeat); 0 = the node
	// default up to 64 hosts, off (negative) above: every node beats to every member,
	// n(n-1) streams, and a run without faults does not need them.
	Heartbeat time.Duration
	// Progress, when set, is called about once a second with the ledger entries written
	// so far (hops, plus any redirections) and cfg.Hops.
	Progress func(entries, hops uint64)
	// atEnd, when set, is called when the walk has ended, before the hosts close (tests:
	// a heap profile of the running network).
	atEnd func([]*node.Node)
	// topicMax, when > 0, replaces memTopicMax (tests: a small network without the
	// control topic).
	topicMax int
	// mockIdle, when > 0, replaces how long a mock pair must be idle before its
	// connection may be closed (tests: exercise the limit in a short run).
	mockIdle time.Duration
}

// MemResult is the outcome of RunMem.
type MemResult struct {
	Model   []float64 // final model (identical on every node; checked)
	Peers   []string  // peer IDs by node index
	Ledger  []int     // ledger entries per node (sum = Hops + redirects)
	Updates []int     // noisy updates per node
	Models  []node.Model
	Wall    time.Duration
	// Path is the walk's path rebuilt from the nodes' ledgers (hop, holder, noisy), with
	// the views of redirected releases (LedgerPath).
	Path      []sim.TraceStep
	Redirects int // "forward" entries of custody redirections (see node)
	Views     int // view steps of Path: peers that got a release and did not step it
	// Hops is the number of hops made: cfg.Hops, or, when Interrupted is set (ctx was
	// canceled before the end), the highest hop in the ledgers; Path then covers hops
	// 1..Hops (the last release held by the last peer it was sent to), Model is the
	// latest release found in the nodes' inboxes and custody checkpoints (nil if none)
	// and Models is empty.
	Interrupted bool
	Hops        uint64
	// Transport is the transport used; PeakRSS is the process's peak resident set
	// (VmHWM, whole process; 0 where unavailable) and Heap the live Go heap after a
	// collection, both in bytes and read when the walk ended, with every host still up.
	Transport     string
	PeakRSS, Heap uint64
	// Trimmed is the number of connections closed by the mock hosts' connection limit.
	Trimmed int
}

// RunMem runs a walk of cfg.Hops hops over len(cfg.Shards) libp2p hosts in this
// process and returns when every node has the final model, or, when ctx is canceled
// first, the state reached (MemResult.Interrupted).
func RunMem(ctx context.Context, cfg MemConfig) (*MemResult, error) {
	n := len(cfg.Shards)
	if n < 1 {
		return nil, errors.New("testnet: mem: no shards")
	}
	if cfg.Hops < 1 {
		return nil, errors.New("testnet: mem: hops must be >= 1")
	}
	if cfg.Run == "" {
		cfg.Run = "mem"
	}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp(memTempRoot(), "dpadmm-mem-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	mm, err := cfg.members(dir)
	if err != nil {
		return nil, err
	}
	hosts, err := newMemHosts(cfg.Transport)
	if err != nil {
		return nil, err
	}
	if cfg.mockIdle > 0 {
		hosts.idle = cfg.mockIdle
	}
	hosts.noIdentify = hosts.transport == TransportMock && n > cmp.Or(cfg.topicMax, memTopicMax)
	hosts.direct = hosts.noIdentify
	defer hosts.Close() // after the nodes (deferred below, run first)
	nodes := make([]*node.Node, n)
	defer func() {
		for _, nd := range nodes {
			if nd != nil {
				nd.Close()
			}
		}
	}()
	if err := cfg.startNodes(ctx, hosts, mm, nodes); err != nil {
		return nil, err
	}
	res, models, errs := cfg.runNodes(ctx, hosts, nodes, mm)
	if ctx.Err() != nil && slices.ContainsFunc(errs, func(err error) bool { return err != nil }) {
		pw, err := readPartialWalk(mm.dirs, res.Peers)
		if err != nil {
			return nil, fmt.Errorf("testnet: mem: interrupted: %w", err)
		}
		res.Interrupted, res.Hops, res.Model, res.Ledger = true, pw.hops, pw.z, pw.entries
		res.Path, res.Redirects, res.Views, res.Updates = pw.path.Path, pw.path.Redirects, pw.path.Views, pw.path.Updates
		return res, nil
	}
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("testnet: mem: node %d: %w", i, err)
		}
	}
	if err := cfg.collect(res, nodes, models); err != nil {
		return nil, err
	}
	return res, nil
}

// memTopicMax is the most hosts of a RunMem network whose nodes join the GossipSub
// control topic; above, they run without it (node.Network.NoControlTopic: the final
// model is pushed to each member directly), as they run without heartbeats: a router per
// host, with its hello and streams on every new connection, cost more than the walk.
const memTopicMax = 64

// memMembers is the fixed membership of a run over in-process hosts.
type memMembers struct {
	ids      []peer.ID
	dirs     []string // data directories, by node
	holder   int      // the initial holder
	withhold []bool   // nodes that withhold their acks
	fresh    []bool   // data directories created by this run (node.Harness.FreshDataDir)
	total    int      // rows of all shards
}

// members derives the nodes' identities and data directories under dir.
func (cfg *MemConfig) members(dir string) (*memMembers, error) {
	n := len(cfg.Shards)
	m := &memMembers{ids: make([]peer.ID, n), dirs: make([]string, n), holder: drive.SeededHolder(cfg.Seed, n), withhold: make([]bool, n), fresh: make([]bool, n)}
	for i, s := range cfg.Shards {
		if s.Rows < 1 {
			return nil, fmt.Errorf("testnet: mem: node %d has no rows", i)
		}
		m.total += s.Rows
	}
	for i := range m.ids {
		m.dirs[i] = filepath.Join(dir, fmt.Sprintf("node-%d", i))
		_, err := os.Stat(m.dirs[i])
		m.fresh[i] = errors.Is(err, fs.ErrNotExist)
		id, err := store.DataDirPeerID(m.dirs[i])
		if err != nil {
			return nil, err
		}
		m.ids[i] = id
	}
	for _, w := range cfg.Withhold {
		switch {
		case w < 0 || w >= n:
			return nil, fmt.Errorf("testnet: mem: withholding node %d outside [0, %d)", w, n)
		case w == m.holder:
			return nil, fmt.Errorf("testnet: mem: node %d is the initial holder and cannot withhold acks", w)
		}
		m.withhold[w] = true
	}
	return m, nil
}

// startNodes creates the nodes (into nodes, closed by the caller) on hosts and connects
// each to its next Degree nodes.
func (cfg *MemConfig) startNodes(ctx context.Context, hosts *memHosts, m *memMembers, nodes []*node.Node) error {
	n := len(nodes)
	beat := cfg.Heartbeat
	if beat == 0 && n > 64 {
		beat = -1
	}
	sigs := node.NewSigCache() // one verification per hand-off signature in the process
	for i, sh := range cfg.Shards {
		c := node.Config{
			Run: cfg.Run, DataDir: m.dirs[i], Data: sh, Logger: cfg.Logger.With().Int("node", i).Logger(),
			Training:    node.Training{Problem: cfg.Problem, Gamma: cfg.Gamma, Lambda: cfg.Lambda, Clip: cfg.Clip, Sigma: cfg.Sigma, Step: cfg.Step, MaxUpdates: cfg.MaxUpdates, Hops: cfg.Hops, Delta: cfg.Delta, Unit: cfg.Unit, RowBound: cfg.RowBound},
			Admission:   node.Admission{Members: m.ids, Holder: m.holder, Weight: walk.LossWeight(n, sh.Rows, m.total)},
			Seeding:     node.Seeding{Sources: func(i int) (*rand.PCG, *rand.PCG) { return drive.SeededSources(cfg.Seed, i) }, AllowSeededNoise: true},
			Network:     node.Network{NewHost: hosts.newHost(i), NoControlTopic: n > cmp.Or(cfg.topicMax, memTopicMax)},
			Reliability: node.Reliability{NoSync: !cfg.Sync, AckTimeout: cfg.AckTimeout, Heartbeat: beat},
			Harness:     node.Harness{Insecure: true, WithholdAcks: m.withhold[i], FreshDataDir: m.fresh[i], SigCache: sigs, Predictor: cfg.Predictor},
		}
		nd, err := node.New(ctx, c)
		if err != nil {
			return fmt.Errorf("testnet: mem: node %d: %w", i, err)
		}
		nodes[i] = nd
	}
	deg := cfg.Degree
	if deg <= 0 {
		deg = 4
		if n <= 16 {
			deg = n
		}
	}
	for i, a := range nodes {
		for j, b := range nodes {
			if i != j && hosts.needsAddrs() {
				a.Host.Peerstore().AddAddrs(b.ID(), b.Host.Addrs(), time.Hour)
			}
		}
		for k := 1; k <= deg && k < n; k++ {
			b := nodes[(i+k)%n]
			if err := a.Host.Connect(ctx, peer.AddrInfo{ID: b.ID(), Addrs: b.Host.Addrs()}); err != nil {
				return fmt.Errorf("testnet: mem: connect %d->%d: %w", i, (i+k)%n, err)
			}
		}
	}
	return nil
}

// runNodes runs every node to its end and returns the result's measurements with each
// node's model and error.
func (cfg *MemConfig) runNodes(ctx context.Context, hosts *memHosts, nodes []*node.Node, m *memMembers) (*MemResult, []*node.Model, []error) {
	n := len(nodes)
	start := time.Now()
	models := make([]*node.Model, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, nd := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); models[i], errs[i] = nd.Run(ctx) }()
	}
	if cfg.Progress != nil {
		stop := pollEvery(ctx, time.Second, func() {
			total := 0
			for _, nd := range nodes {
				total += nd.Store().Entries()
			}
			cfg.Progress(uint64(total), cfg.Hops)
		})
		wg.Wait()
		stop()
	} else {
		wg.Wait()
	}
	res := &MemResult{Wall: time.Since(start), Peers: make([]string, n), Ledger: make([]int, n), Updates: make([]int, n), Hops: cfg.Hops,
		Transport: hosts.transport}
	res.PeakRSS, res.Heap = memStats()
	if cfg.atEnd != nil {
		cfg.atEnd(nodes)
	}
	res.Trimmed = int(hosts.nclosed.Load())
	for i := range m.ids {
		res.Peers[i] = m.ids[i].String()
	}
	return res, models, errs
}

// collect checks the nodes' models and ledgers and fills res with the path they give.
func (cfg *MemConfig) collect(res *MemResult, nodes []*node.Node, models []*node.Model) error {
	ledgers := make([][]privacy.Entry, len(nodes))
	for i, m := range models {
		res.Ledger[i] = nodes[i].Store().Entries()
		res.Updates[i] = m.Privacy.Updates
		res.Models = append(res.Models, *m)
		if !sim.SameBits(m.Model, models[0].Model) {
			return fmt.Errorf("testnet: mem: node %d ended with a different model", i)
		}
		es, err := nodes[i].Store().Ledger()
		if err != nil {
			return fmt.Errorf("testnet: mem: node %d: ledger: %w", i, err)
		}
		ledgers[i] = es
	}
	lp, err := LedgerPath(ledgers, res.Peers, cfg.Hops, models[0].ReleasedBy)
	if err != nil {
		return fmt.Errorf("testnet: mem: %w", err)
	}
	if lp.Repeats > 0 {
		return fmt.Errorf("testnet: mem: invariant: %d repeated ledger entries in a run without crashes", lp.Repeats)
	}
	for i, u := range lp.Updates {
		if u != res.Updates[i] {
			return fmt.Errorf("testnet: mem: node %d: %d noisy updates in its ledger, %d in its checkpoint", i, u, res.Updates[i])
		}
	}
	res.Path, res.Redirects, res.Views = lp.Path, lp.Redirects, lp.Views
	res.Model = models[0].Model
	return nil
}

// PathFromLedgers is the walk's path rebuilt from the nodes' ledgers, with the
// bookkeeping of the entries that are not one-per-hop.
type PathFromLedgers struct {
	// Path has one step per hop, in hop order; after the step whose release was also
	// sent to peers that did not step it, one view step per such peer (TraceStep.View).
	Path    []sim.TraceStep
	Updates []int // noisy updates per node, from the path
	Entries int   // all ledger entries
	// Redirects are "forward" entries naming a new recipient after failed hand-offs
	// (the same release seen by one more peer).
	Redirects int
	// Views are the view steps of Path: recipients named in a sender's entries for a
	// release (its own entry and its redirections) other than the peer that went on
	// with the token. Path has hops + Views steps.
	Views int
	// Repeats are further entries for a hop the node had already logged that are not
	// redirections: a node that crashed after its ledger write and before its
	// checkpoint steps the token again on restart (charged again: conservative).
	Repeats int
}

// LedgerPath rebuilds the walk's path from the ledgers of a real-stack run: node i's
// ledger is ledgers[i] and its entries name it names[i] (its peer ID). The first entry
// of a node for a hop is its step of that hop. A later "forward" entry of the node for
// that hop that names a recipient is a redirection of the same release: in the same
// epoch after a failed hand-off, or under a new epoch when the node regenerates the
// release or re-sends it in the slow fallback (the same z and zhat). Another later entry
// in the same epoch is a repeat; in another epoch, a rollback of the walk, which is not
// one path (an error). final names the node that received the token of the last hop
// (Model.ReleasedBy); "" if unknown.
//
// Every recipient named in a sender's entries for one release has received, or may have
// received, the bytes of that release (entries are durable before the send). The one
// that stepped the next hop (for the last hop: final) holds it in the path; every other
// one, a peer that withheld its ack or did not answer before the sender redirected, is
// inserted right after the release as a view: a step that adds no noise (Noisy false)
// and that it does not step. The realised accountant then charges it exactly as a peer
// holding the token at that point: it sees the state the release produced, and the
// next holder sees the same state. Charging a named recipient that never got the bytes
// (its stream failed before the frame arrived) over-counts, on the safe side.
//
// It fails when a hop in 1..hops is missing from every ledger or stepped by two nodes (a
// duplicate token, as after a lost ack whose sender redirected a release the first
// recipient had taken), a node stepped one hop in two epochs (a rollback), an entry is
// foreign, or a recipient is not a member: such ledgers are not one path, and charging
// one branch would leave the other's views out.
// Consistency: Entries = hops + Redirects + Repeats, len(Path) = hops + Views.
func LedgerPath(ledgers [][]privacy.Entry, names []string, hops uint64, final string) (*PathFromLedgers, error) {
	if len(ledgers) != len(names) {
		return nil, fmt.Errorf("ledger path: %d ledgers for %d nodes", len(ledgers), len(names))
	}
	index := make(map[string]int, len(names))
	for i, nm := range names {
		index[nm] = i
	}
	finalIdx := -1
	if final != "" {
		f, ok := index[final]
		if !ok {
			return nil, fmt.Errorf("ledger path: the final holder %q is not a member", final)
		}
		finalIdx = f
	}
	out := &PathFromLedgers{Updates: make([]int, len(names))}
	steps := make([]sim.TraceStep, hops)
	owner := make([]int, hops)
	for h := range owner {
		owner[h] = -1
	}
	// recips[h] lists the distinct recipients named by the owner of hop h (0-based) for
	// its release, the token of hop h+1, in ledger order.
	recips := make([][]int, hops)
	for i, es := range ledgers {
		first := map[uint64]uint64{} // hop -> epoch of this node's step of that hop
		for _, e := range es {
			out.Entries++
			if e.Node != names[i] {
				return nil, fmt.Errorf("ledger path: node %d's ledger has an entry of %q (seq %d)", i, e.Node, e.Seq)
			}
			to := -1
			if e.Recipient != "" {
				r, ok := index[e.Recipient]
				if !ok {
					return nil, fmt.Errorf("ledger path: node %d's entry seq %d names recipient %q, not a member", i, e.Seq, e.Recipient)
				}
				to = r
			}
			resend := e.Mechanism == privacy.MechForward && e.Recipient != ""
			h := e.Hop - 1
			if ep, seen := first[e.Hop]; seen {
				switch {
				case resend:
					// The same release sent to one more peer: a redirection, or under a
					// new epoch a regeneration or fallback re-send (same z and zhat).
					out.Redirects++
				case ep == e.Epoch:
					out.Repeats++
				default:
					return nil, fmt.Errorf("ledger path: node %d stepped hop %d in epochs %d and %d: the walk was rolled back and its ledgers do not form one path", i, e.Hop, ep, e.Epoch)
				}
			} else {
				if e.Hop < 1 || e.Hop > hops {
					return nil, fmt.Errorf("ledger path: node %d logged hop %d outside 1..%d", i, e.Hop, hops)
				}
				if owner[h] >= 0 {
					return nil, fmt.Errorf("ledger path: hop %d was stepped by nodes %d and %d (duplicate token)", e.Hop, owner[h], i)
				}
				first[e.Hop] = e.Epoch
				owner[h] = i
				noisy := e.Noisy()
				steps[h] = sim.TraceStep{Hop: h, Node: i, Noisy: noisy}
				if noisy {
					out.Updates[i]++
				}
			}
			if to >= 0 && !slices.Contains(recips[h], to) {
				recips[h] = append(recips[h], to)
			}
		}
	}
	for h, o := range owner {
		if o < 0 {
			return nil, fmt.Errorf("ledger path: hop %d is missing from every ledger", h+1)
		}
	}
	out.Path = make([]sim.TraceStep, 0, hops)
	for h := range steps {
		out.Path = append(out.Path, steps[h])
		next := finalIdx
		if h+1 < len(steps) {
			next = owner[h+1]
		}
		for _, r := range recips[h] {
			if r == owner[h] || r == next {
				continue
			}
			out.Path = append(out.Path, sim.TraceStep{Hop: uint64(h) + 1, Node: r, View: true})
			out.Views++
		}
	}
	return out, nil
}
