package node

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
	"github.com/rs/zerolog"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/consensus/graph"
	"github.com/dpadmm/dpadmm/gossip"
	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/node/wire"
	"github.com/dpadmm/dpadmm/privacy"
)

// radmmRunKey marks the context of RunRADMM, so that the walk's Run refuses a
// neighbour-exchange configuration instead of running a walk without a machine.
type radmmRunKey struct{}

// RADMMModelNote explains what model.json of a neighbour-exchange run holds.
const RADMMModelNote = "model is this node's own f_i(T); the network average is not known to a single node " +
	"(average the members' model.json files to get it). The privacy figure is this node's: the pure epsilon of " +
	"its own releases (Theorem V.1); the network figure of Definition V.1 is the maximum over the members."

// RADMMModel is model.json of a neighbour-exchange run (RunRADMM).
type RADMMModel struct {
	// Guarantee is InsecureGuarantee for a test-harness node (Config.Insecure).
	Guarantee string `json:"guarantee,omitempty"`
	// Membership says how the run was closed to outsiders (Config.Membership).
	Membership string    `json:"membership"`
	Run        string    `json:"run"`
	ConfigHash string    `json:"config_hash"`
	Peer       string    `json:"peer"`
	Algo       string    `json:"algo"`
	Loss       string    `json:"loss"` // the run's loss (logistic or squared), part of the config hash
	Index      int       `json:"index"`
	Nodes      int       `json:"nodes"`
	Members    []string  `json:"members"`
	Graph      string    `json:"graph"`
	GraphSeed  uint64    `json:"graph_seed"`
	Neighbors  []int     `json:"neighbors"`
	Iters      int       `json:"iters"`
	Rows       int       `json:"rows"`
	TotalRows  int       `json:"total_rows"`
	Dims       int       `json:"dims"`
	Model      []float64 `json:"model"`
	// Scaling is the run's feature scaling (Config.Scaling), which 'dpadmm account
	// models --data' applies to an evaluation set; absent for none or unknown.
	Scaling *consensus.Scaler `json:"scaling,omitempty"`
	// Predictor is this node's model in the self-describing form of dpadmm predict,
	// eval and export (Config.Predictor); Config the run's configuration (hyperparameters).
	Predictor *consensus.ModelSpec `json:"predictor,omitempty"`
	Config    *RunConfig           `json:"config,omitempty"`
	Note      string               `json:"note"`
	// Inexact counts local solves that missed the tolerance (each voids that release's
	// guarantee). The solver's residuals themselves are functions of the private data that
	// no figure covers, so they are not written (see docs/threat-model.md).
	Inexact  int        `json:"inexact_solves"`
	Stale    []StaleUse `json:"stale"`
	Rejected int        `json:"rejected_frames"`
	Ignored  int        `json:"ignored_frames"`
	WallSecs float64    `json:"wall_seconds"`
	Privacy  RADMMPriv  `json:"privacy"`
}

// RADMMPriv is this node's Theorem V.1 figure (an unbounded epsilon, JSON null: the
// conditions fail or there is no noise).
type RADMMPriv struct {
	// Epsilon is the guarantee: the formula value when the conditions hold, else
	// unbounded; Formula the sum of the per-iteration terms regardless of the conditions.
	privacy.PureFigure
	// Ledger is the sum of the pure-DP entries this run made durable in the ledger.
	Ledger        privacy.Epsilon `json:"ledger_epsilon"`
	LedgerEntries int             `json:"ledger_entries"`
	Delta         float64         `json:"delta"` // 0: pure DP
	SecureNoise   bool            `json:"secure_noise"`
	Scope         string          `json:"scope"`
}

// NetworkFigure is the R-ADMM network figure (Definition V.1: the maximum over the
// members of each one's Theorem V.1 figure), with the theorem and conditions the members
// name: the gossip_privacy section of 'dpadmm account models'.
type NetworkFigure struct {
	privacy.NetworkV1
	Theorem    string `json:"theorem"`
	Conditions string `json:"conditions"`
	Scope      string `json:"scope"`
}

// NetworkFigureOf computes the network figure over the members' model.json contents;
// missing lists the members without one (the figure then does not hold).
func NetworkFigureOf(ms []RADMMModel, missing []int) NetworkFigure {
	figs := make([]privacy.MemberFigure, len(ms))
	for k, m := range ms {
		pr := m.Privacy
		figs[k] = privacy.MemberFigure{Index: m.Index, Epsilon: pr.Epsilon, Formula: pr.Formula,
			ConditionsHold: pr.ConditionsHold, Reason: pr.Reason, SecureNoise: pr.SecureNoise}
	}
	f := NetworkFigure{NetworkV1: privacy.DefinitionV1(figs, missing), Scope: privacy.DefinitionV1Scope}
	// Every member of one run (same algo) names the same theorem and conditions.
	if len(ms) > 0 {
		f.Theorem, f.Conditions = ms[0].Privacy.Theorem, ms[0].Privacy.Conditions
	}
	return f
}

func (n *Node) setRADMMMembers(ms []peer.ID) error {
	idx := -1
	for i, p := range ms {
		if p == n.ID() {
			idx = i
		}
	}
	if idx < 0 {
		return errors.New("node: this node is not in the membership")
	}
	n.mu.Lock()
	n.setMemberList(ms, idx)
	n.mu.Unlock()
	n.log.Info().Int("index", idx).Int("nodes", len(ms)).Msg("membership fixed")
	return nil
}

// RunRADMM takes part in a neighbour-exchange run (Config.RADMM): announce/join/start
// on the control topic (or a static Config.Members with RADMM.TotalRows, or the journal
// of a restarted node) fixes the ordered membership and the total row count; the node
// then builds the graph from (spec, members, seed), its machine (objective weights
// C_i/B_i = C n/M and rho/N = C l2, penalty schedule, f_i(0) from Config.Rand or a
// crypto/rand source, noise from Config.Noise or privacy.NewSecureNoise), dials its
// neighbours and runs its R-ADMM exchange on its own host and store (journal and ledger
// fsynced before every send, barrier, missing-neighbour policy). At the end it writes
// model.json (RADMMModel: its own model and its own Theorem V.1 figure) and returns it.
// Close ends a run in progress.
func (n *Node) RunRADMM(ctx context.Context) (_ *RADMMModel, err error) {
	parent := ctx // the caller's context: its end is a stop, not a failure
	defer func() {
		if err != nil && parent.Err() == nil {
			n.failed.Store(true) // /readyz and dpadmm_run_state say so
		}
	}()
	p := n.cfg.RADMM
	if p == nil {
		return nil, errors.New("node: RunRADMM needs Config.RADMM")
	}
	ctx, cancel := context.WithCancel(allowRelayed(ctx))
	defer cancel()
	n.mu.Lock()
	n.cancel = cancel
	n.mu.Unlock()
	view := &radmmView{algo: n.rc.Algorithm, iters: p.Iters}
	n.metrics.radmm.Store(view)
	n.metrics.enableRADMM()
	// The walk's protocols are not served in a neighbour-exchange run.
	for _, proto := range []protocol.ID{wire.WalkProtocol(n.cfg.Run), wire.ReleaseProtocol(n.cfg.Run), wire.AliveProtocol(n.cfg.Run), wire.FinalProtocol(n.cfg.Run)} {
		n.Host.RemoveStreamHandler(proto)
	}
	r, err := n.radmmMembers(ctx)
	if err != nil {
		return nil, err
	}
	if err := n.radmmMachine(r); err != nil {
		return nil, err
	}
	x, err := n.newRADMMExchange(radmmConfig{
		Members: r.members, Self: r.self, Neighbors: r.nbrs, Machine: r.m, Iters: p.Iters, Barrier: p.Barrier, MaxWait: p.MaxWait,
		OnMissing: p.OnMissing, Noise: r.noise, TotalRows: r.total, PauseAt: p.PauseAt, HaltAfter: p.HaltAfter,
	})
	if err != nil {
		return nil, err
	}
	defer x.stop()
	plan := privacy.ObjPertBound(r.acc)
	n.metrics.radmm.Store(&radmmView{algo: view.algo, iters: view.iters, plan: &plan, ex: x})
	wait := p.Barrier
	if wait == 0 {
		wait = 30 * time.Second
	}
	if err := n.connectNeighbors(ctx, r.members, r.nbrs, wait); err != nil {
		return nil, err
	}
	n.log.Info().Int("index", r.self).Ints("neighbors", r.nbrs).Str("graph", r.spec).Msg("R-ADMM run started")
	res, err := x.run(ctx)
	if err != nil {
		return nil, err
	}
	out, err := n.radmmModel(r, res)
	if err != nil {
		return nil, err
	}
	if err := n.store.WriteAtomic(store.ModelFile, append(marshal(out), '\n')); err != nil {
		return nil, err
	}
	n.metrics.done.Store(true)
	n.log.Info().Str("file", filepath.Join(n.store.Dir, store.ModelFile)).Msg("own model written")
	return out, nil
}

// radmmRun is what RunRADMM learns before it starts the exchange: the membership and M
// (radmmMembers), then the graph, this node's machine and its accountant inputs
// (radmmMachine).
type radmmRun struct {
	journal *store.RADMMJournal // the run's journal when the node restarts, else nil
	members []peer.ID
	self    int
	total   int // M
	spec    string
	nbrs    []int
	m       *gossip.Machine
	noise   *JournalNoise
	acc     privacy.ObjPertNode
	secure  bool
}

// radmmMembers fixes the ordered membership and M of the run: from the journal when the
// node restarts, from the static Config.Members (with RADMM.TotalRows), or through
// announce/join/start on the control topic. A starter keeps re-publishing its
// announcement and the start message while the run lasts.
func (n *Node) radmmMembers(ctx context.Context) (*radmmRun, error) {
	static := n.cfg.Members != nil
	journal, err := store.ReadRADMMJournal(n.cfg.DataDir, n.cfg.Run)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRejoin, err)
	}
	r := &radmmRun{journal: journal}
	switch {
	case journal != nil:
		// A restart: the journal fixes the membership, M and f_i(0) of the run this node
		// already took part in (newRADMMExchange replays it and checks every release).
		if err := n.resumeMembers(journal); err != nil {
			return nil, err
		}
		r.total = journal.Total
	case static:
		// A fixed membership (StaticFile): no announce/join; M comes with it.
		n.closeToMembers(n.cfg.Members)
		if err := n.setRADMMMembers(n.cfg.Members); err != nil {
			return nil, err
		}
		r.total = n.cfg.RADMM.TotalRows
	default:
		n.bg.Add(1)
		go func() { defer n.bg.Done(); n.readControl(ctx) }()
		if err := n.membership(context.WithValue(ctx, radmmRunKey{}, true)); err != nil {
			return nil, err
		}
		r.total = n.startMsg.Total
	}
	n.mu.Lock()
	r.members, r.self = append([]peer.ID(nil), n.members...), n.index
	n.mu.Unlock()
	if n.cfg.Start && !static && journal == nil {
		n.repeatStart(ctx)
	}
	return r, nil
}

// resumeMembers takes the membership and the members' addresses from the journal of a
// restarted node.
func (n *Node) resumeMembers(journal *store.RADMMJournal) error {
	ms, err := journalMembers(journal, n.cfg.Members)
	if err != nil {
		return err
	}
	n.closeToMembers(ms)
	if err := n.setRADMMMembers(ms); err != nil {
		return err
	}
	if len(journal.Addrs) == len(ms) {
		for i, p := range ms {
			if p != n.ID() {
				n.addAddrs(p, journal.Addrs[i])
			}
		}
	}
	n.log.Warn().Int("releases", journal.Releases).Msg("resuming the neighbour-exchange run from the journal")
	return nil
}

// repeatStart re-publishes the starter's announcement and start message every second
// until ctx ends: a member that missed the start message gets it again; a node that
// arrives late learns from the announcement that the run exists (and from the start that
// it missed it) and a node with another configuration logs the mismatch.
func (n *Node) repeatStart(ctx context.Context) {
	rc := n.rc
	announce := ctlMsg{Type: "announce", Run: n.cfg.Run, Hash: n.hash, Config: &rc}
	n.bg.Add(1)
	go func() {
		defer n.bg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				n.publish(ctx, announce)
				n.publish(ctx, n.startMsg)
			}
		}
	}()
}

// radmmMachine checks r's membership and M, builds the graph from (spec, members, seed),
// finds this node's neighbours and builds its machine (f_i(0) from the journal on a
// restart).
func (n *Node) radmmMachine(r *radmmRun) error {
	p := n.cfg.RADMM
	N := len(r.members)
	r.spec = p.Graph
	if r.spec == "" {
		r.spec = "ring"
	}
	if N < 2 {
		return errors.New("node: a neighbour-exchange run needs at least 2 members")
	}
	if r.total < N {
		return fmt.Errorf("node: start message with %d total rows for %d members", r.total, N)
	}
	g, err := graph.Parse(r.spec, N, p.GraphSeed)
	if err != nil {
		return fmt.Errorf("node: graph %q with %d members: %w", r.spec, N, err)
	}
	if !g.Connected() {
		return fmt.Errorf("node: graph %q with %d members is not connected", r.spec, N)
	}
	if r.nbrs = g.Neighbors(r.self); len(r.nbrs) == 0 {
		return fmt.Errorf("node: graph %q gives node %d no neighbours", r.spec, r.self)
	}
	var init []float64
	if r.journal != nil {
		init = r.journal.Init
	}
	r.m, r.noise, r.acc, r.secure, err = n.buildMachine(r.self, N, r.nbrs, r.total, init)
	return err
}

// radmmModel is model.json of the completed run res: this node's model and its Theorem
// V.1 figure, charged over every entry of the run in the ledger (after a restart they
// include the releases made before it).
func (n *Node) radmmModel(r *radmmRun, res *exchangeResult) (*RADMMModel, error) {
	p := n.cfg.RADMM
	_, inexact := r.m.MaxResidual()
	acc := r.acc
	acc.ExactSolves = inexact == 0
	fig := privacy.ObjPertBound(acc)
	all, err := n.store.Ledger()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", store.ErrLedger, err)
	}
	res.Ledger = res.Ledger[:0]
	for _, e := range all {
		if e.Run == n.cfg.Run {
			res.Ledger = append(res.Ledger, e)
		}
	}
	ledger := 0.0
	for _, e := range res.Ledger {
		if e.Mechanism == privacy.MechPure {
			ledger += e.Epsilon
		}
	}
	names := make([]string, len(r.members))
	for i, q := range r.members {
		names[i] = q.String()
	}
	out := &RADMMModel{
		Run: n.cfg.Run, ConfigHash: n.hash, Peer: n.ID().String(), Algo: n.rc.Algorithm, Loss: n.cfg.Problem.Loss.String(), Index: r.self,
		Nodes: len(r.members), Members: names, Graph: r.spec, GraphSeed: p.GraphSeed, Neighbors: r.nbrs, Iters: res.Iter,
		Rows: n.cfg.Data.Rows, TotalRows: r.total, Dims: len(res.Model), Model: res.Model, Scaling: n.cfg.Scaling, Note: RADMMModelNote,
		Predictor: n.cfg.Predictor(res.Model), Config: &n.rc,
		Inexact: inexact, Stale: res.Stale, Rejected: res.Rejected, Ignored: res.Ignored,
		WallSecs: res.Wall.Seconds(),
		Privacy: RADMMPriv{
			PureFigure: fig.Pure(), Ledger: finiteOr(ledger), LedgerEntries: len(res.Ledger), SecureNoise: r.secure,
			Scope: "this node's releases only; the run's figure is the maximum over the members' model.json",
		},
	}
	if out.Stale == nil {
		out.Stale = []StaleUse{}
	}
	if n.cfg.Insecure {
		out.Guarantee = InsecureGuarantee
	}
	out.Membership = n.cfg.Membership()
	return out, nil
}

// finiteOr returns v as an epsilon: unbounded (JSON null) when v is not finite or is the
// ledger's MaxFloat64 marker of a release without guarantee.
func finiteOr(v float64) privacy.Epsilon { return privacy.Eps(v) }

// buildMachine builds node self's machine exactly as the simulator (testnet/sim.NewGossipSim)
// does for that node, and the accountant's inputs for its Theorem V.1 figure.
func (n *Node) buildMachine(self, N int, nbrs []int, total int, journaled []float64) (*gossip.Machine, *JournalNoise, privacy.ObjPertNode, bool, error) {
	p, d := n.cfg.RADMM, n.cfg.Data
	var acc privacy.ObjPertNode
	var jn *JournalNoise
	algo, err := gossip.ParseAlgo(p.Algo)
	if err != nil {
		return nil, nil, acc, false, err
	}
	setup := gossip.NewSetup(n.cfg.Problem.Loss, p.PaperC, n.cfg.Problem.Reg.L2, N, total).WithClasses(d)
	obj, err := setup.Objective(d)
	if err != nil {
		return nil, nil, acc, false, err
	}
	// f_i(0): random and data-independent (Theorem V.1 (f)).
	r := cryptoRand()
	if n.cfg.Rand != nil {
		r = n.cfg.Rand(self)
	}
	init := make([]float64, obj.Dim())
	for j := range init {
		init[j] = 0.1 * r.NormFloat64()
	}
	if journaled != nil {
		// A restart: the f_i(0) this node already released.
		if len(journaled) != obj.Dim() {
			return nil, nil, acc, false, fmt.Errorf("%w: the journal's f_i(0) has dimension %d, the data %d", ErrRejoin, len(journaled), obj.Dim())
		}
		init = append([]float64(nil), journaled...)
	}
	names := make([]string, N)
	n.mu.Lock()
	for i, q := range n.members {
		names[i] = q.String()
	}
	n.mu.Unlock()
	sched, err := p.scheduleFor(self, N)
	if err != nil {
		return nil, nil, acc, false, err
	}
	etas := sched.Values(algo.PerturbedCount(p.Iters))
	alpha := p.Alpha
	if p.TargetEpsilon > 0 {
		// Public inputs only (the run's rows and weights, this node's degree and schedule):
		// the simulator calibrates each of its nodes with the same function.
		if alpha, err = setup.AlphaFor(algo, len(nbrs), d.Rows, etas, p.TargetEpsilon); err != nil {
			return nil, nil, acc, false, fmt.Errorf("node: --target-epsilon: %w", err)
		}
		n.log.Info().Float64("alpha", alpha).Float64("target_epsilon", p.TargetEpsilon).Int("degree", len(nbrs)).
			Msg("noise calibrated to the target epsilon")
	}
	cfg := gossip.Config{
		Node: self, Nodes: N, Neighbors: nbrs, Algo: algo, Iters: p.Iters, Penalty: sched,
		Gamma: p.Gamma, Alpha: alpha, C1: setup.C1, Init: init, Run: n.cfg.Run, Names: names,
	}
	secure := true
	if !math.IsInf(alpha, 1) {
		if n.cfg.Noise != nil {
			cfg.Noise = n.cfg.Noise(self)
		} else {
			cfg.Noise = privacy.NewSecureNoise()
		}
		secure = cfg.Noise.Secure()
		if err := privacy.CheckNoise(cfg.Noise, n.cfg.AllowSeededNoise); err != nil {
			return nil, nil, acc, false, fmt.Errorf("node: %w", err)
		}
		jn = NewJournalNoise(cfg.Noise)
		cfg.Noise = jn
	}
	m, err := gossip.New(cfg, obj)
	if err != nil {
		return nil, nil, acc, false, err
	}
	maxNorm, pm1 := gossip.RowChecks(d)
	acc = setup.Account(algo, len(nbrs), d.Rows, maxNorm, pm1, alpha, etas)
	if f := privacy.ObjPertBound(acc); p.TargetEpsilon == 0 && !math.IsInf(alpha, 1) && f.Epsilon > LargeEpsilon {
		n.log.Warn().Float64("epsilon", f.Epsilon).Int("iters", p.Iters).
			Msg("this node's Theorem V.1 figure for the run will be large: --target-epsilon E calibrates alpha to E, and few --iters (2 to 4) learn best at a fixed epsilon")
	}
	return m, jn, acc, secure, nil
}

// LargeEpsilon is the figure above which a neighbour-exchange node without a target
// warns at its start (the walk's default ceiling, --max-epsilon, is the same number).
const LargeEpsilon = 10

// journalMembers returns the membership recorded in a journal, checked against a static
// membership when one is configured.
func journalMembers(j *store.RADMMJournal, static []peer.ID) ([]peer.ID, error) {
	ms := make([]peer.ID, len(j.Members))
	for i, s := range j.Members {
		id, err := peer.Decode(s)
		if err != nil {
			return nil, fmt.Errorf("%w: journal member %d: %v", ErrRejoin, i, err)
		}
		ms[i] = id
	}
	if static != nil {
		if len(static) != len(ms) {
			return nil, fmt.Errorf("%w: the journal has %d members, the static membership %d", ErrRejoin, len(ms), len(static))
		}
		for i := range ms {
			if ms[i] != static[i] {
				return nil, fmt.Errorf("%w: member %d differs between the journal and the static membership", ErrRejoin, i)
			}
		}
	}
	if len(ms) < 2 || j.Total < len(ms) {
		return nil, fmt.Errorf("%w: the journal records %d members and %d total rows", ErrRejoin, len(ms), j.Total)
	}
	return ms, nil
}

// connectNeighbors dials every neighbour (addresses from the join and start messages)
// until connected or timeout passes; the barrier policy takes over after that.
func (n *Node) connectNeighbors(ctx context.Context, members []peer.ID, nbrs []int, timeout time.Duration) error {
	return ConnectNeighbors(ctx, n.Host, members, nbrs, timeout, n.log)
}

// ConnectNeighbors dials members[j] for every j in nbrs (addresses from h's peerstore)
// until all are connected or timeout passes, and then returns nil anyway with a warning:
// the iteration barrier's missing-neighbour policy takes over. Peers of a run often start
// at about the same time, so a neighbour may not listen yet: the swarm's dial backoff is
// cleared between attempts.
func ConnectNeighbors(ctx context.Context, h host.Host, members []peer.ID, nbrs []int, timeout time.Duration, log zerolog.Logger) error {
	deadline := time.Now().Add(timeout)
	wait := 10 * time.Millisecond
	for {
		var missing []int
		for _, j := range nbrs {
			if h.Network().Connectedness(members[j]) != network.Connected {
				missing = append(missing, j)
			}
		}
		if len(missing) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			log.Warn().Ints("missing", missing).Msg("not connected to every neighbour; starting anyway (the barrier policy applies)")
			return nil
		}
		for _, j := range missing {
			if sw, ok := h.Network().(*swarm.Swarm); ok {
				sw.Backoff().Clear(members[j])
			}
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			h.Connect(cctx, peer.AddrInfo{ID: members[j], Addrs: h.Peerstore().Addrs(members[j])})
			cancel()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}
