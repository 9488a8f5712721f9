package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/multiformats/go-multiaddr"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/node/wire"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/walk"
)

// maxControl is the largest control message accepted, in bytes.
const maxControl = 1 << 20

// ctlMsg is a control-plane message on the GossipSub topic. The walk token never travels
// here; only the announcement, membership and the final released model do.
type ctlMsg struct {
	Type    string     `json:"type"` // announce | join | start | final | mismatch
	Run     string     `json:"run"`
	Hash    string     `json:"config_hash"`
	Config  *RunConfig `json:"config,omitempty"`
	Rows    int        `json:"rows,omitempty"`
	Members []string   `json:"members,omitempty"`
	Addrs   [][]string `json:"addrs,omitempty"` // join: [own addrs]; start: one list per member
	Total   int        `json:"total_rows,omitempty"`
	Holder  int        `json:"holder,omitempty"`
	Hop     uint64     `json:"hop,omitempty"`
	Epoch   uint64     `json:"epoch,omitempty"` // final: the epoch of the token that reached hop K
	Model   []float64  `json:"model,omitempty"`
	// Cert is the evidence of a final model: the hand-off by which its releaser held hop
	// K (handoffsig.go). By names the releaser when it is not the publisher.
	Cert *FinalCert `json:"cert,omitempty"`
	By   string     `json:"by,omitempty"`
	// Taken (PositionAnswer) is how many hand-offs the answering member took from the
	// asking one.
	Taken uint64 `json:"taken,omitempty"`
	// RowCap (announce) is the most rows the starter admits per member when the run
	// has no row bound of its own (openRowCap); 0: the run's max_rows or none.
	RowCap int `json:"row_cap,omitempty"`
}

type (
	finalMsg struct {
		from peer.ID
		m    ctlMsg
	}
	startMsg = finalMsg
	joinMsg  = finalMsg
)

// publish publishes m on the control topic; without the topic (NoControlTopic) it does
// nothing.
func (n *Node) publish(ctx context.Context, m ctlMsg) error {
	if n.topic == nil {
		return nil
	}
	return n.topic.Publish(ctx, marshal(m))
}

// readControl dispatches control messages until ctx ends.
func (n *Node) readControl(ctx context.Context) {
	if n.sub == nil {
		return
	}
	for {
		msg, err := n.sub.Next(ctx)
		if err != nil {
			return
		}
		from := msg.GetFrom()
		n.log.Debug().Str("from", shortID(from)).Int("bytes", len(msg.Data)).Msg("control message")
		if from == n.ID() {
			continue
		}
		if len(msg.Data) > maxControl {
			n.log.Warn().Str("from", shortID(from)).Msg("control message too large: ignored")
			continue
		}
		var m ctlMsg
		if err := json.Unmarshal(msg.Data, &m); err != nil || m.Run != n.cfg.Run {
			n.log.Warn().Str("from", shortID(from)).Msg("malformed or foreign control message: ignored")
			continue
		}
		fm := finalMsg{from: from, m: m}
		var ch chan finalMsg
		switch m.Type {
		case "announce":
			ch = n.announces
		case "mismatch":
			ch = n.mismatches
		case "join":
			ch = n.joins
		case "start":
			ch = n.start
		case "final":
			ch = n.fin.in
		default:
			continue
		}
		select {
		case ch <- fm:
		default: // a slow consumer drops duplicates; announcements and starts repeat
		}
	}
}

// runStarter announces the run, collects joins with a matching config hash and fixes the
// membership (starter first, then joiners in order of arrival).
func (n *Node) runStarter(ctx context.Context) error {
	order := []peer.ID{n.ID()}
	rows := map[peer.ID]int{n.ID(): n.cfg.Data.Rows}
	rc := n.rc
	announce := ctlMsg{Type: "announce", Run: n.cfg.Run, Hash: n.hash, Config: &rc, RowCap: n.openRowCap()}
	if c := announce.RowCap; c > 0 {
		n.log.Warn().Int("row_cap", c).Msgf("no --max-rows and no allow-list: members may claim at most %d rows each (%d times this node's); "+
			"a larger claim is refused at join (set --max-rows to choose the bound)", c, OpenRowFactor)
	}
	n.publish(ctx, announce)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var reached time.Time
	for k := 0; ; k++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case mm := <-n.mismatches:
			n.logMismatch(mm, "a joiner refused this run's announcement")
		case j := <-n.joins:
			if j.m.Hash != n.hash {
				n.log.Warn().Str("from", shortID(j.from)).Str("theirs", j.m.Hash).Str("ours", n.hash).
					Msg("refusing join: config hash mismatch (different data dimensions or hyperparameters)")
				continue
			}
			if why := n.refuseJoin(j.from, j.m.Rows); why != "" {
				n.metrics.control.WithLabelValues("refused join").Inc()
				n.log.Warn().Str("from", shortID(j.from)).Int("rows", j.m.Rows).Msg("refusing join: " + why)
				continue
			}
			if _, ok := rows[j.from]; !ok && j.m.Rows > 0 {
				rows[j.from] = j.m.Rows
				if len(j.m.Addrs) == 1 {
					n.addAddrs(j.from, j.m.Addrs[0])
				}
				order = append(order, j.from)
				n.join.update(func(js *JoinStatus) { js.Joined = len(order) })
				n.log.Info().Str("peer", shortID(j.from)).Int("members", len(order)).Msg("peer joined")
			}
		case <-tick.C:
			if k%4 == 0 {
				n.publish(ctx, announce)
			}
		}
		if len(order) >= n.cfg.MinPeers {
			if reached.IsZero() {
				reached = time.Now()
				n.join.windowCloses(reached.Add(n.cfg.JoinWindow))
			}
			if time.Since(reached) >= n.cfg.JoinWindow {
				break
			}
		}
	}
	total := 0
	names := make([]string, len(order))
	addrs := make([][]string, len(order))
	for i, p := range order {
		total += rows[p]
		names[i] = p.String()
		for _, a := range n.Host.Peerstore().Addrs(p) {
			addrs[i] = append(addrs[i], a.String())
		}
		if p == n.ID() {
			addrs[i] = n.addrStrings()
		}
	}
	r := cryptoRand()
	if n.cfg.Rand != nil {
		r = n.cfg.Rand(-1)
	}
	holder := r.IntN(len(order))
	n.startMsg = ctlMsg{Type: "start", Run: n.cfg.Run, Hash: n.hash, Members: names, Addrs: addrs, Total: total, Holder: holder}
	if err := n.saveStart(n.ID()); err != nil {
		return err
	}
	if err := n.publish(ctx, n.startMsg); err != nil {
		return err
	}
	if err := n.fixMembers(ctx, order, total); err != nil {
		return err
	}
	n.initialTo = order[holder]
	n.log.Info().Int("nodes", len(order)).Int("holder", holder).Msg("run started")
	return nil
}

// fixMembers installs the membership fixed by the start message: the walk machine with
// the weight n*rows_i/N, or, for a neighbour-exchange run, only the member list (RunRADMM
// builds the machine from it and total).
func (n *Node) fixMembers(ctx context.Context, ms []peer.ID, total int) error {
	n.closeToMembers(ms)
	if n.cfg.RADMM != nil {
		if ctx.Value(radmmRunKey{}) == nil {
			return errors.New("node: a neighbour-exchange run (Config.RADMM) is driven by RunRADMM, not Run")
		}
		return n.setRADMMMembers(ms)
	}
	return n.setMembers(ms, walk.LossWeight(len(ms), n.cfg.Data.Rows, total))
}

// runJoiner waits for an announcement with a matching config hash, joins, and waits for
// the start message.
func (n *Node) runJoiner(ctx context.Context) error {
	var lastJoin time.Time
	// Only the peer whose announcement matched our configuration may start the run: a
	// start message from anyone else is ignored (a member list is not taken on trust).
	starters := map[peer.ID]bool{}
	mm := mismatchState{told: map[string]time.Time{}, wait: n.cfg.MismatchWait}
	if mm.wait == 0 {
		mm.wait = 30 * time.Second
	}
	every := time.Second
	if mm.wait > 0 && mm.wait/4 < every {
		every = mm.wait / 4 // a short wait is kept to within a quarter
	}
	check := time.NewTicker(every)
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-check.C:
			if err := mm.expired(n.cfg.Run, len(starters)); err != nil {
				return err
			}
		case a := <-n.announces:
			if a.m.Hash != n.hash {
				n.refuseAnnouncement(ctx, a, &mm)
				continue
			}
			if p := n.pinnedStarter(); p != "" && a.from != p {
				n.metrics.control.WithLabelValues("unpinned starter").Inc()
				n.log.Warn().Str("from", shortID(a.from)).Str("starter", shortID(p)).Msg("run announcement from a peer other than the pinned starter: ignored")
				continue
			}
			if c := a.m.RowCap; c > 0 && n.cfg.Data != nil && n.cfg.Data.Rows > c {
				return fmt.Errorf("%w: this node has %d rows and the run's starter admits at most %d per member "+
					"(a run without --max-rows or an allow-list admits %d times the starter's rows); "+
					"ask the starter to set --max-rows %d or more, or use a subset of the rows", ErrRowCap, n.cfg.Data.Rows, c, OpenRowFactor, n.cfg.Data.Rows)
			}
			starters[a.from] = true
			n.join.update(func(js *JoinStatus) { js.Announced = true })
			if time.Since(lastJoin) > 500*time.Millisecond {
				lastJoin = time.Now()
				n.publish(ctx, ctlMsg{Type: "join", Run: n.cfg.Run, Hash: n.hash, Rows: n.cfg.Data.Rows, Addrs: [][]string{n.addrStrings()}})
			}
		case s := <-n.start:
			if !starters[s.from] {
				n.log.Warn().Str("from", shortID(s.from)).Msg("start message from a peer that did not announce this run: ignored")
				continue
			}
			if s.m.Hash != n.hash || s.m.Total < 1 || len(s.m.Members) < 1 || s.m.Total < len(s.m.Members) {
				n.log.Warn().Str("from", shortID(s.from)).Msg("malformed start message: ignored")
				continue
			}
			ms := make([]peer.ID, len(s.m.Members))
			in, bad := false, false
			for i, str := range s.m.Members {
				p, err := peer.Decode(str)
				if err != nil {
					n.log.Warn().Str("from", shortID(s.from)).Str("member", str).Msg("start message with a malformed member id: ignored")
					bad = true
					break
				}
				ms[i] = p
				in = in || p == n.ID()
				if len(s.m.Addrs) == len(s.m.Members) && p != n.ID() {
					n.addAddrs(p, s.m.Addrs[i])
				}
			}
			if bad {
				continue
			}
			if why := n.refuseStart(s.from, ms, s.m.Total); why != "" {
				n.metrics.control.WithLabelValues("refused start").Inc()
				n.log.Warn().Str("from", shortID(s.from)).Msg("refusing start message: " + why)
				continue
			}
			if !in {
				n.join.update(func(js *JoinStatus) { js.Missed = true })
				n.log.Warn().Msg("the run started without this node (join window missed)")
				continue
			}
			n.startMsg = s.m
			if err := n.saveStart(s.from); err != nil {
				return err
			}
			return n.fixMembers(ctx, ms, s.m.Total)
		}
	}
}

// waitTopicPeers waits until every member this node is connected to has subscribed to
// the control topic (so that the final model reaches it), or the timeout passes.
func (n *Node) waitTopicPeers(ctx context.Context, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for n.topic != nil && time.Now().Before(deadline) && ctx.Err() == nil {
		subs := map[peer.ID]bool{}
		for _, p := range n.topic.ListPeers() {
			subs[p] = true
		}
		missing := 0
		n.mu.Lock()
		for _, p := range n.members {
			if p != n.ID() && n.Host.Network().Connectedness(p) == network.Connected && !subs[p] {
				missing++
			}
		}
		n.mu.Unlock()
		if missing == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// BoundJSON is a privacy bound as written to model.json and /status: the one JSON form of
// a figure (privacy.Figure).
type BoundJSON = privacy.Figure

// Model is the content of model.json.
type Model struct {
	// Guarantee is InsecureGuarantee for a test-harness node (Config.Insecure), absent
	// otherwise.
	Guarantee string `json:"guarantee,omitempty"`
	// Membership says how the run was closed to outsiders ("open", or a "+"-joined list
	// of swarm-key, allow-list, pinned-starter, static; Config.Membership).
	Membership string       `json:"membership"`
	Run        string       `json:"run"`
	ConfigHash string       `json:"config_hash"`
	Peer       string       `json:"peer"`
	Index      int          `json:"index"`
	Nodes      int          `json:"nodes"`
	Hops       uint64       `json:"hops"`
	Epoch      uint64       `json:"epoch"` // epoch of the token that reached hop K
	ReleasedBy string       `json:"released_by"`
	Dims       int          `json:"dims"`
	Model      []float64    `json:"model"`
	Privacy    ModelPrivacy `json:"privacy"`
	// Cert is the evidence that the releaser held hop K (FinalCert): with it any member
	// can hand the final model on to one that missed it.
	Cert *FinalCert `json:"final_cert,omitempty"`
	// Lineage is the chain of signed hand-offs that produced the final model, oldest
	// first, as far as its certificate shows it (Cert.Prev, then Cert): who handed whom
	// the token, ending at the releaser. LineageNote says when a member in it misbehaved
	// here (evicted, or refused for implausible epochs or rewinds).
	Lineage     []LineageLink `json:"lineage,omitempty"`
	LineageNote string        `json:"lineage_note,omitempty"`

	// Scaling is the run's feature scaling (Config.Scaling); absent for none or unknown.
	Scaling *consensus.Scaler `json:"scaling,omitempty"`
	// Predictor is the model in the self-describing form of dpadmm predict, eval and
	// export (Config.Predictor): task, classes, features, vocabulary, scaling, weights.
	Predictor *consensus.ModelSpec `json:"predictor,omitempty"`
	// Config is the run's configuration (its hash is ConfigHash): the hyperparameters.
	Config *RunConfig `json:"config,omitempty"`
}

// ModelPrivacy is this node's privacy report (an unbounded epsilon is JSON null).
type ModelPrivacy struct {
	// Unit is what the figures protect (privacy.Unit) and UnitNote which radius binds.
	Unit          privacy.Unit `json:"unit"`
	UnitNote      string       `json:"unit_note"`
	Delta         float64      `json:"delta"`
	Updates       int          `json:"own_updates"`
	LedgerEntries int          `json:"ledger_entries"`
	Local         BoundJSON    `json:"local"`
	Network       BoundJSON    `json:"network_planned"`
}

func (n *Node) newModel(z []float64, epoch, hop uint64, by peer.ID) *Model {
	n.mu.Lock()
	nodes, idx := len(n.members), n.index
	n.mu.Unlock()
	up := n.walk.ckpt.Updates
	g := ""
	if n.cfg.Insecure {
		g = InsecureGuarantee
	}
	return &Model{
		Guarantee: g, Membership: n.cfg.Membership(), Run: n.cfg.Run, ConfigHash: n.hash, Peer: n.ID().String(), Index: idx, Nodes: nodes, Hops: hop, Epoch: epoch,
		ReleasedBy: by.String(), Dims: len(z), Model: append([]float64(nil), z...), Scaling: n.cfg.Scaling,
		Predictor: n.cfg.Predictor(z), Config: &n.rc,
		Privacy: ModelPrivacy{
			Unit: n.stepRun().UnitOf(), UnitNote: n.stepRun().UnitNote(),
			Delta: n.cfg.Delta, Updates: up, LedgerEntries: n.store.Entries(),
			Local:   privacy.StepLocalBound(n.stepRun(), up, n.cfg.Delta).Figure(),
			Network: n.plannedBound(up).Figure(),
		},
	}
}

// plannedBound is the planned network figure of this node's own `up` noisy updates, with
// the verdict of privacy.WalkDecide: the complete graph, the run's hops (the final model
// counts as a view of every member), the node's cap, and its own forwards and re-sends
// (either voids the planned figure; the local figure is then reported instead).
func (n *Node) plannedBound(up int) privacy.Bound {
	n.mu.Lock()
	nodes := len(n.members)
	n.mu.Unlock()
	hardCap := n.cfg.MaxUpdates
	if bc := int(n.budgetCap.Load()); bc >= 0 && (hardCap == 0 || bc < hardCap) {
		hardCap = bc
	}
	r := n.stepRun()
	r.Nodes, r.Complete, r.Cap, r.Hops, r.Updates = nodes, true, hardCap, n.cfg.Hops, up
	r.Forwards, r.Resends, r.Own = n.ownForwards.Load(), n.ownResends.Load(), true
	r.Anomalies = n.ownAnomalies.Load()
	b := privacy.WalkPlannedBound(r, n.cfg.Delta)
	// The local figure bounds every observer, so it caps the pairwise one (with few
	// members the planned amplification can be weaker than the exact local conversion).
	if loc := privacy.StepLocalBound(r, up, n.cfg.Delta); loc.Epsilon < b.Epsilon {
		b.Epsilon = loc.Epsilon
		b.Note = strings.TrimPrefix(b.Note+"; ", "; ") + "capped at this node's local figure, which bounds every observer"
	}
	return b
}

// finalMark orders final models as the fence orders tokens: (epoch, hop, digest). The
// digest is FNV-1a over z alone, as published (zhat is never published), and every
// receiver computes it from the model itself, so a publisher cannot claim a digest its
// model does not have.
func finalMark(epoch, hop uint64, z []float64) store.Mark {
	return store.Mark{Epoch: epoch, Hop: hop, Digest: walk.TokenDigest(walk.Token{Z: z})}
}

// LineageLink is one hand-off of a final model's lineage (Model.Lineage).
type LineageLink struct {
	From  string `json:"from"`
	To    string `json:"to"`
	Epoch uint64 `json:"epoch"`
	Hop   uint64 `json:"hop"`
}

// noteLineage fills m.Lineage and m.LineageNote from m.Cert, and logs a warning when a
// member of the lineage misbehaved here.
func (n *Node) noteLineage(m *Model) {
	c := m.Cert
	n.mu.Lock()
	ms := n.members
	n.mu.Unlock()
	if c == nil || c.Signer < 0 || c.Signer >= len(ms) {
		return
	}
	m.Lineage = nil
	if p := c.Prev; p != nil && p.Signer >= 0 && p.Signer < len(ms) {
		m.Lineage = append(m.Lineage, LineageLink{From: ms[p.Signer].String(), To: ms[c.Signer].String(), Epoch: p.Epoch, Hop: p.Hop})
	}
	m.Lineage = append(m.Lineage, LineageLink{From: ms[c.Signer].String(), To: m.ReleasedBy, Epoch: c.Epoch, Hop: c.Hop})
	var bad []string
	seen := map[string]bool{}
	for _, l := range m.Lineage {
		for _, id := range []string{l.From, l.To} {
			p, err := peer.Decode(id)
			if err != nil || seen[id] {
				continue
			}
			seen[id] = true
			if i := n.memberIndex(p); i >= 0 && n.walk.cust != nil && n.walk.cust.Strikes(i) > 0 {
				what := fmt.Sprintf("%s (%d refused hand-offs here)", shortID(p), n.walk.cust.Strikes(i))
				if n.walk.cust.Evicted(i) {
					what = shortID(p) + " (evicted here)"
				}
				bad = append(bad, what)
			}
		}
	}
	m.LineageNote = ""
	if len(bad) > 0 {
		m.LineageNote = "the final model's last hand-offs include members that misbehaved here: " + strings.Join(bad, ", ") +
			"; with a colluder such a member can end the run with a model of its choice"
		n.log.Warn().Strs("members", bad).Msg("final model: " + m.LineageNote)
	}
}

// keepFinal makes m, of mark mk, the node's final model.
func (n *Node) keepFinal(m *Model, mk store.Mark) {
	n.fin.model, n.fin.mark = m, mk
}

// acceptFinal checks a final-model publication (from a member, same config, the model's
// dimension, hop K, finite) and keeps it if it is above the final model kept so far in
// the (epoch, hop, digest) order: two lineages that both reached hop K are resolved the
// same way on every node that sees both publications, whatever their order. It reports
// whether the publication became the kept model.
func (n *Node) acceptFinal(f finalMsg) (bool, error) {
	switch {
	case !n.isMember(f.from):
		return false, fmt.Errorf("node: final model from non-member %s", shortID(f.from))
	case f.m.Hash != n.hash:
		return false, fmt.Errorf("node: final model with config hash %s, ours %s", f.m.Hash, n.hash)
	case len(f.m.Model) != n.cfg.Data.ModelDim():
		return false, fmt.Errorf("node: final model of dimension %d, want %d", len(f.m.Model), n.cfg.Data.ModelDim())
	case f.m.Hop != n.cfg.Hops:
		return false, fmt.Errorf("node: final model at hop %d, want %d", f.m.Hop, n.cfg.Hops)
	case n.walk.cust == nil:
		return false, fmt.Errorf("node: final model before the membership is fixed")
	case n.walk.cust.Evicted(n.memberIndex(f.from)):
		return false, fmt.Errorf("node: final model from %s, evicted for implausible epochs", shortID(f.from))
	}
	by := f.from
	if f.m.By != "" {
		p, err := peer.Decode(f.m.By)
		if err != nil || !n.isMember(p) {
			return false, fmt.Errorf("node: final model released by %q, not a member", f.m.By)
		}
		by = p
	}
	n.mu.Lock()
	members, origin := n.members, n.origin
	n.mu.Unlock()
	if err := verifyFinal(n.cfg.Run, f.m.Hop, f.m.Epoch, f.m.Model, f.m.Cert, by, members, origin, n.keys()); err != nil {
		n.metrics.control.WithLabelValues("final without evidence").Inc()
		return false, fmt.Errorf("node: final model from %s refused: %w", shortID(f.from), err)
	}
	relayed := f.from != by
	f.from = by // the releaser, whoever relayed it
	for _, v := range f.m.Model {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return false, fmt.Errorf("node: final model has a non-finite coordinate")
		}
	}
	// The epoch bounds and evictions of tokens apply to final models too; an accepted one
	// ends the walk here (walk.Custody.StepFinal). A final released by a member evicted
	// here and relayed by another is judged by its certificate's signer: the model is
	// that member's signed release of hop K, which the releaser only received (refusing
	// it would leave this node waiting for a walk that ended elsewhere).
	who := n.memberIndex(by)
	if c := f.m.Cert; c != nil && relayed && n.walk.cust.Evicted(who) && c.Signer >= 0 && c.Signer < len(members) && !n.walk.cust.Evicted(c.Signer) {
		who = c.Signer
	}
	if err := n.input(context.Background(), CustodyInput{Kind: "final", Peer: who, Epoch: f.m.Epoch, Hop: f.m.Hop}); err != nil {
		return false, fmt.Errorf("node: final model of epoch %d from %s: %w", f.m.Epoch, shortID(by), err)
	}
	mk := finalMark(f.m.Epoch, f.m.Hop, f.m.Model)
	if n.fin.model != nil {
		c := mk.Cmp(n.fin.mark)
		if c == 0 {
			// The same token published by two nodes (it reached hop K twice): the
			// publisher with the higher peer ID is kept, so that every node names the same.
			c = strings.Compare(f.from.String(), n.fin.model.ReleasedBy)
		}
		if c == 0 {
			return false, nil // a republication of the kept model
		}
		// Two lineages reached hop K: both final models were released (each is the z of a
		// token charged in its sender's ledger to the publisher) and broadcast to every
		// member; the node keeps the higher one.
		if c <= 0 {
			n.metrics.custody.WithLabelValues("final_lower").Inc()
			n.log.Warn().Str("from", shortID(f.from)).Uint64("epoch", mk.Epoch).Uint64("digest", mk.Digest).
				Uint64("kept_epoch", n.fin.mark.Epoch).Uint64("kept_digest", n.fin.mark.Digest).Str("kept_from", tail(n.fin.model.ReleasedBy)).
				Msg("a second final model (a duplicate lineage reached hop K): kept the higher (epoch, hop, digest) one already held")
			return false, nil
		}
		n.metrics.custody.WithLabelValues("final_replaced").Inc()
		n.log.Warn().Str("from", shortID(f.from)).Uint64("epoch", mk.Epoch).Uint64("digest", mk.Digest).
			Uint64("old_epoch", n.fin.mark.Epoch).Uint64("old_digest", n.fin.mark.Digest).
			Msg("a second final model (a duplicate lineage reached hop K): replacing the kept one by this higher (epoch, hop, digest) one")
	}
	m := n.newModel(f.m.Model, f.m.Epoch, f.m.Hop, f.from)
	m.Cert = f.m.Cert
	n.noteLineage(m)
	n.keepFinal(m, mk)
	n.fin.cert = f.m.Cert
	return true, nil
}

func tail(id string) string { return id[max(len(id)-8, 0):] }

// takeFinal applies acceptFinal and logs a refusal.
func (n *Node) takeFinal(f finalMsg) bool {
	ok, err := n.acceptFinal(f)
	if err != nil {
		n.log.Warn().Err(err).Msg("final model refused")
	}
	return ok
}

// endWindow is how long a node that knows a final model keeps listening for a higher one
// before writing model.json: the larger of 500 ms (several control-plane publications,
// the publisher republishes after 100 and 200 ms) and two of the slowest hop times
// observed here (two lineages reach hop K within about one hop time and one
// control-plane delay of each other, or the first final stops the other at the next node
// it reaches), at most FinalWait.
func (n *Node) endWindow() time.Duration {
	return min(n.cfg.FinalWait, max(500*time.Millisecond, 2*n.hopTime()))
}

// settleFinal keeps the highest final model published during the end window.
func (n *Node) settleFinal(ctx context.Context) {
	t := time.NewTimer(n.endWindow())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			return
		case f := <-n.fin.in:
			n.takeFinal(f)
		}
	}
}

// finish settles the final model (end window) and writes model.json. The node that
// released the kept model republishes it until every member confirmed it over a direct
// stream (or FinalWait passed); the others confirm to that node and return. A releaser
// whose model is superseded by a higher final meanwhile writes that one and confirms it.
func (n *Node) finish(ctx context.Context) (*Model, error) {
	n.settleFinal(ctx)
	for {
		if err := n.store.WriteAtomic(store.ModelFile, append(marshal(n.fin.model), '\n')); err != nil {
			return nil, err
		}
		n.metrics.done.Store(true)
		n.log.Info().Str("file", filepath.Join(n.store.Dir, store.ModelFile)).Uint64("epoch", n.fin.model.Epoch).Msg("final model written")
		by, _ := peer.Decode(n.fin.model.ReleasedBy)
		if by != n.ID() {
			n.confirmFinal(ctx, by)
			return n.fin.model, nil
		}
		if !n.republishFinal(ctx) {
			return n.fin.model, nil
		}
	}
}

// confirmFinal tells the releaser of the kept model that this node has it.
func (n *Node) confirmFinal(ctx context.Context, by peer.ID) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if s, err := n.Host.NewStream(cctx, by, wire.DoneProtocol(n.cfg.Run)); err == nil {
		s.SetDeadline(time.Now().Add(5 * time.Second))
		s.Write([]byte{1})
		var b [1]byte
		s.Read(b[:])
		s.Close()
	}
}

// republishFinal republishes this node's final model until every live member confirmed
// it or FinalWait passed. It returns true when a higher final model arrived meanwhile
// (it is then the kept model).
func (n *Node) republishFinal(ctx context.Context) bool {
	final := ctlMsg{Type: "final", Run: n.cfg.Run, Hash: n.hash, Hop: n.fin.model.Hops, Epoch: n.fin.model.Epoch, Model: n.fin.model.Model, Cert: n.fin.cert, By: n.ID().String()}
	raw := marshal(final)
	deadline := time.Now().Add(max(n.cfg.FinalWait, n.cfg.FinalLinger))
	lingerEnd := time.Now().Add(n.cfg.FinalLinger) // down members are waited for until then
	last, every := time.Now(), 100*time.Millisecond
	if n.topic == nil {
		last = time.Time{} // no topic: push at once
	}
	var mu sync.Mutex // guards pushing against the push goroutines
	pushing := map[peer.ID]bool{}
	var pushes sync.WaitGroup
	defer pushes.Wait() // each push ends within its 3 s timeout
	for time.Now().Before(deadline) && ctx.Err() == nil {
		select {
		case f := <-n.fin.in:
			if n.takeFinal(f) {
				return true
			}
		default:
		}
		// Members declared down by the heartbeats are not waited for (a crashed member
		// would otherwise hold the run open for the whole FinalWait), except during
		// FinalLinger: a member that comes back meanwhile asks for the final model
		// (rejoin.go) and confirms it.
		lingering := time.Now().Before(lingerEnd)
		n.mu.Lock()
		got, want := 0, 0
		for _, m := range n.members {
			if m == n.ID() || n.down[m] && !lingering {
				continue
			}
			want++
			if n.fin.doneFrom[m] {
				got++
			}
		}
		n.mu.Unlock()
		if got >= want {
			break
		}
		if time.Since(last) > every {
			n.publish(ctx, final) // a publication can be missed by a peer whose mesh is not formed
			last, every = time.Now(), min(2*every, time.Second)
			if every >= 400*time.Millisecond || n.topic == nil {
				// After three publications, push the model directly to the members that
				// have not confirmed it.
				n.mu.Lock()
				var missing []peer.ID
				for _, m := range n.members {
					if m != n.ID() && !n.down[m] && !n.fin.doneFrom[m] {
						missing = append(missing, m)
					}
				}
				n.mu.Unlock()
				for _, m := range missing {
					mu.Lock()
					busy := pushing[m]
					pushing[m] = true
					mu.Unlock()
					if busy {
						continue
					}
					pushes.Add(1)
					go func() {
						defer pushes.Done()
						n.pushFinal(ctx, m, raw)
						mu.Lock()
						delete(pushing, m)
						mu.Unlock()
					}()
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// pushFinal sends the final-model message raw to member p over wire.FinalProtocol and waits
// for its one-byte receipt (the confirmation itself comes over wire.DoneProtocol).
func (n *Node) pushFinal(ctx context.Context, p peer.ID, raw []byte) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	s, err := n.Host.NewStream(cctx, p, wire.FinalProtocol(n.cfg.Run))
	if err != nil {
		n.log.Debug().Err(err).Str("to", shortID(p)).Msg("final model not pushed")
		return
	}
	defer s.Close()
	s.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := s.Write(raw); err != nil {
		s.Reset()
		return
	}
	s.CloseWrite()
	var b [1]byte
	s.Read(b[:])
	n.log.Debug().Str("to", shortID(p)).Msg("final model pushed directly")
}

// handleFinal receives a final model pushed over wire.FinalProtocol: at most maxControl bytes,
// then the same checks as a control-plane publication (acceptFinal, in the loop). The
// sender is the stream's authenticated peer.
func (n *Node) handleFinal(s network.Stream) {
	defer s.Close()
	s.SetDeadline(time.Now().Add(5 * time.Second))
	from := s.Conn().RemotePeer()
	raw, err := io.ReadAll(io.LimitReader(s, maxControl+1))
	if err != nil || len(raw) > maxControl {
		n.log.Warn().Str("from", shortID(from)).Int("bytes", len(raw)).Msg("pushed final model unreadable or too large: ignored")
		s.Reset()
		return
	}
	var m ctlMsg
	err = json.Unmarshal(raw, &m)
	if err == nil && m.Run == n.cfg.Run && m.Type == FinalRequest {
		n.answerFinal(s, from) // rejoin.go
		return
	}
	if err == nil && m.Run == n.cfg.Run && m.Type == PositionRequest {
		n.answerPosition(s, from) // position.go
		return
	}
	if err != nil || m.Run != n.cfg.Run || m.Type != "final" {
		n.log.Warn().Str("from", shortID(from)).Msg("malformed or foreign pushed final model: ignored")
		s.Reset()
		return
	}
	select {
	case n.fin.in <- finalMsg{from: from, m: m}:
	default: // the loop is busy with another final; the releaser republishes
	}
	s.Write([]byte{1})
}

func (n *Node) handleDone(s network.Stream) {
	defer s.Close()
	s.SetDeadline(time.Now().Add(5 * time.Second))
	var b [1]byte
	if _, err := s.Read(b[:]); err != nil {
		return
	}
	p := s.Conn().RemotePeer()
	if n.isMember(p) {
		n.mu.Lock()
		n.fin.doneFrom[p] = true
		n.mu.Unlock()
	}
	s.Write([]byte{1})
}

func osReadFile(dir, name string) ([]byte, error) { return os.ReadFile(filepath.Join(dir, name)) }

func (n *Node) addrStrings() []string {
	var out []string
	for _, a := range n.Host.Addrs() {
		out = append(out, a.String())
	}
	return out
}

// addAddrs records a member's announced addresses so that the hand-off can dial it.
func (n *Node) addAddrs(p peer.ID, addrs []string) {
	for _, s := range addrs {
		if a, err := multiaddr.NewMultiaddr(s); err == nil {
			n.Host.Peerstore().AddAddr(p, a, time.Hour)
		}
	}
}

// InsecureGuarantee is what model.json says of a node started with --insecure-testnet.
const InsecureGuarantee = "NO guarantee: test-harness node (--insecure-testnet: seeded noise, fixed membership or fault injection); the privacy figures describe the mechanism, not this run"

// pinnedStarter is the only peer whose announcement and start message a joiner accepts:
// Config.Starter, else the allow-list's owner; "" when the run is open.
func (n *Node) pinnedStarter() peer.ID {
	if n.cfg.Starter != "" {
		return n.cfg.Starter
	}
	if n.cfg.Allow != nil {
		p, _ := peer.Decode(n.cfg.Allow.Owner)
		return p
	}
	return ""
}

// rowBound is the most rows p may claim: the smaller of the allow-list's max_rows and
// Config.MaxRows (the open run's default, openRowCap, when neither bounds it; 0: no
// bound), or -1 when the allow-list does not list p.
func (n *Node) rowBound(p peer.ID) int {
	b := n.cfg.MaxRows
	if b == 0 {
		b = n.openRowCap()
	}
	if a := n.cfg.Allow; a != nil {
		ab := a.bound(p)
		if ab < 0 {
			return -1
		}
		if ab > 0 && (b == 0 || ab < b) {
			b = ab
		}
	}
	return b
}

// refuseJoin says why the starter refuses a join from p claiming rows ("" to admit it).
func (n *Node) refuseJoin(p peer.ID, rows int) string {
	switch b := n.rowBound(p); {
	case b < 0:
		return "the peer is not on the run's allow-list"
	case b > 0 && rows > b:
		return fmt.Sprintf("the peer claims %d rows, more than the %d it may (max_rows)", rows, b)
	case rows < n.cfg.MinRows:
		return fmt.Sprintf("the peer claims %d rows, fewer than the run's min_rows %d", rows, n.cfg.MinRows)
	}
	return ""
}

// refuseStart says why a joiner refuses a start message from `from` fixing members ms
// with total rows ("" to accept it): a start from anyone but the pinned starter, a member
// not on the allow-list, or a total larger than the members may claim together.
func (n *Node) refuseStart(from peer.ID, ms []peer.ID, total int) string {
	if p := n.pinnedStarter(); p != "" && from != p {
		return "it does not come from the pinned starter " + p.String()
	}
	if len(ms) == 0 || ms[0] != from {
		// The starter is member 0: it creates the initial token (the origin of the
		// hand-offs' evidence, walk.CheckLineage).
		return "its sender is not its first member"
	}
	most, bounded := 0, true
	for _, p := range ms {
		b := n.rowBound(p)
		if b < 0 {
			return "member " + p.String() + " is not on the run's allow-list"
		}
		bounded = bounded && b > 0
		most += b
	}
	if bounded && total > most {
		return fmt.Sprintf("its total of %d rows exceeds the %d its members may claim together", total, most)
	}
	if m := n.cfg.MinRows; m > 0 && total/m < len(ms) {
		return fmt.Sprintf("its total of %d rows is below the run's min_rows %d for each of its %d members", total, m, len(ms))
	}
	return ""
}

// closeToMembers makes the membership final at the transport: the gater refuses new
// connections from non-members, and open connections to non-members are closed.
func (n *Node) closeToMembers(ms []peer.ID) {
	if n.gater == nil {
		return
	}
	n.gater.fix(ms)
	in := map[peer.ID]bool{}
	for _, p := range ms {
		in[p] = true
	}
	for _, p := range n.Host.Network().Peers() {
		if !in[p] && !n.relayInUse(p) {
			n.Host.Network().ClosePeer(p)
		}
	}
}

// relayInUse reports whether p is a circuit relay that this node or a member publishes
// an address through (/p2p/<p>/p2p-circuit): relays taken from the DHT stay reachable
// once the membership is fixed, for the member behind them and for those dialing it.
// Admitting them at the transport gives them nothing more: every stream of the run is
// still refused to non-members.
func (n *Node) relayInUse(p peer.ID) bool {
	via := "/p2p/" + p.String() + "/p2p-circuit"
	for _, a := range n.Host.Addrs() {
		if strings.Contains(a.String(), via) {
			return true
		}
	}
	n.mu.Lock()
	ms := n.members
	n.mu.Unlock()
	ps := n.Host.Peerstore()
	for _, m := range ms {
		for _, a := range ps.Addrs(m) {
			if strings.Contains(a.String(), via) {
				return true
			}
		}
	}
	return false
}

// OpenRowFactor bounds the rows a member may claim in a run without a bound of its own
// (no --max-rows, no allow-list): the starter admits at most OpenRowFactor times its own
// row count per member, so that one joiner claiming a huge count cannot shrink the honest
// members' loss weights n*rows_i/N (and, per record, their noise) to nothing.
const OpenRowFactor = 10

// openRowCap is the per-member row bound of a starter whose run sets none (OpenRowFactor
// times its own rows), 0 otherwise (a joiner, Config.MaxRows set, an allow-list, or a
// static membership).
func (n *Node) openRowCap() int {
	c := &n.cfg
	if !c.Start || c.MaxRows > 0 || c.Allow != nil || c.Members != nil || c.Data == nil {
		return 0
	}
	return OpenRowFactor * c.Data.Rows
}

// ErrRowCap stops a joiner whose row count exceeds what the run's starter admits.
var ErrRowCap = errors.New("node: more rows than the run admits per member")

// ErrConfigMismatch stops a joiner that saw only announcements of its run with another
// configuration (Config.MismatchWait): the error names the keys that differ.
var ErrConfigMismatch = errors.New("node: configuration differs from the run's")

// logMismatch logs, once per peer and configuration, a "mismatch" control message: a node
// that refused this run's announcement, with the keys in which its configuration differs
// from this node's.
func (n *Node) logMismatch(m finalMsg, what string) {
	key := m.from.String() + m.m.Hash
	n.mu.Lock()
	if n.mismatchSeen == nil {
		n.mismatchSeen = map[string]bool{}
	}
	seen := n.mismatchSeen[key]
	n.mismatchSeen[key] = true
	n.mu.Unlock()
	if seen || m.m.By != n.hash {
		return
	}
	n.metrics.control.WithLabelValues("mismatched joiner").Inc()
	diff := "its message carries no configuration"
	if m.m.Config != nil {
		diff = strings.Join(m.m.Config.DiffNamed(n.rc, "theirs", "ours"), "; ")
	}
	n.join.update(func(js *JoinStatus) { js.Refused = append(js.Refused, shortID(m.from)+": "+diff) })
	n.log.Warn().Str("from", shortID(m.from)).Str("theirs", m.m.Hash).Str("differs", diff).Msg(what + ": its configuration differs")
}

// mismatchState is a joiner's record of announcements of its run with another
// configuration (runJoiner).
type mismatchState struct {
	told  map[string]time.Time // announcer+hash: when it was last told (logged the first time)
	first time.Time            // the first such announcement
	diff  string               // the keys that differ, from the last one
	wait  time.Duration        // Config.MismatchWait (30 s by default; negative: forever)
}

// expired returns ErrConfigMismatch, naming the keys, once every announcement of the run
// for the mismatch wait had another configuration and none matched (no starter known).
func (m *mismatchState) expired(run string, starters int) error {
	if m.wait <= 0 || m.first.IsZero() || starters > 0 || time.Since(m.first) < m.wait {
		return nil
	}
	return fmt.Errorf("%w: for %v every announcement of run %q had another configuration: %s", ErrConfigMismatch,
		m.wait.Round(time.Second), run, m.diff)
}

// refuseAnnouncement handles an announcement of the run whose configuration differs from
// this node's: it logs the keys that differ once per announcer and configuration, and
// tells the starter why (a mismatch message the starter logs), again every 2 s while its
// announcements come, since a message published before the topic's mesh reaches the
// starter would be lost.
func (n *Node) refuseAnnouncement(ctx context.Context, a finalMsg, m *mismatchState) {
	diff := "the announcement carries no configuration"
	if a.m.Config != nil {
		diff = strings.Join(n.rc.Diff(*a.m.Config), "; ")
	}
	if key := a.from.String() + a.m.Hash; time.Since(m.told[key]) >= 2*time.Second {
		if m.told[key].IsZero() {
			n.log.Warn().Str("from", shortID(a.from)).Str("theirs", a.m.Hash).Str("ours", n.hash).Str("differs", diff).
				Msg("refusing run announcement: this node's configuration differs from the run's")
		}
		m.told[key] = time.Now()
		rc := n.rc
		n.publish(ctx, ctlMsg{Type: "mismatch", Run: n.cfg.Run, Hash: n.hash, Config: &rc, By: a.m.Hash})
	}
	if m.first.IsZero() {
		m.first = time.Now()
	}
	m.diff = diff
}
