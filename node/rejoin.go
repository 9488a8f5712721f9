package node

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/node/wire"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// StartFile is the start message of the run a data directory took part in: the
// membership in index order, the members' addresses at the start, the total row count,
// the initial holder, the configuration hash and the starter. It is written (atomically,
// with a checksum) when the node accepts the membership, before the walk begins, and it
// lets a node stopped during the run take its place again: started with the same
// --datadir and configuration it skips announce/join and resumes with that membership.
const StartFile = store.StartFile

// ErrStartFile is returned by Run and RunRADMM when the data directory's start.json is
// corrupt or belongs to another run or configuration.
var ErrStartFile = errors.New("node: the data directory's start.json cannot be used")

// startRecord is the content of StartFile.
type startRecord struct {
	Version    int        `json:"version"`
	Run        string     `json:"run"`
	ConfigHash string     `json:"config_hash"`
	Starter    string     `json:"starter"`
	Members    []string   `json:"members"`
	Addrs      [][]string `json:"addrs,omitempty"`
	Total      int        `json:"total_rows"`
	Holder     int        `json:"holder"`
	// Rows is this node's row count when it accepted the membership (its weight is
	// members*Rows/Total): a restart with other data is refused.
	Rows int `json:"rows"`
	// Checksum is the hex SHA-256 of the record's JSON encoding with Checksum empty.
	Checksum string `json:"checksum"`
}

func (r startRecord) sum() string {
	r.Checksum = ""
	h := sha256.Sum256(marshal(r))
	return hex.EncodeToString(h[:])
}

// saveStart writes StartFile from the start message n.startMsg, started by starter.
func (n *Node) saveStart(starter peer.ID) error {
	m := n.startMsg
	r := startRecord{Version: 1, Run: n.cfg.Run, ConfigHash: n.hash, Starter: starter.String(),
		Members: m.Members, Addrs: m.Addrs, Total: m.Total, Holder: m.Holder, Rows: n.cfg.Data.Rows}
	r.Checksum = r.sum()
	b, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return fmt.Errorf("node: %s: %w", StartFile, err)
	}
	return n.store.WriteAtomic(StartFile, append(b, '\n'))
}

// loadStart reads StartFile: nil, nil when there is none; ErrStartFile when it is
// corrupt, for another run or configuration, or does not name this node.
func (n *Node) loadStart() (*startRecord, []peer.ID, error) {
	p := filepath.Join(n.store.Dir, StartFile)
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrStartFile, err)
	}
	var r startRecord
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, nil, fmt.Errorf("%w: %s is corrupt: %v (it fixes the membership of the run this directory took part in; use a fresh --datadir)", ErrStartFile, p, err)
	}
	if r.Checksum != r.sum() {
		return nil, nil, fmt.Errorf("%w: %s is corrupt: its checksum does not match its content (use a fresh --datadir)", ErrStartFile, p)
	}
	if r.Version != 1 {
		return nil, nil, fmt.Errorf("%w: %s version %d not supported (this build reads version 1)", ErrStartFile, p, r.Version)
	}
	if r.Run != n.cfg.Run || r.ConfigHash != n.hash {
		return nil, nil, fmt.Errorf("%w: %s is for run %q with config %.12s, this node runs %q with config %.12s: "+
			"restart it with the flags of the run it took part in, or use a fresh --datadir for another run",
			ErrStartFile, p, r.Run, r.ConfigHash, n.cfg.Run, n.hash)
	}
	ms := make([]peer.ID, len(r.Members))
	in := false
	for i, s := range r.Members {
		id, err := peer.Decode(s)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %s: member %d: %v", ErrStartFile, p, i, err)
		}
		ms[i] = id
		in = in || id == n.ID()
	}
	switch {
	case !in:
		return nil, nil, fmt.Errorf("%w: %s does not name this node (%s) as a member", ErrStartFile, p, n.ID())
	case r.Total < len(ms) || len(ms) < 1 || r.Holder < 0 || r.Holder >= len(ms):
		return nil, nil, fmt.Errorf("%w: %s records %d members, %d total rows and holder %d", ErrStartFile, p, len(ms), r.Total, r.Holder)
	}
	if r.Rows != n.cfg.Data.Rows {
		return nil, nil, fmt.Errorf("%w: %s was written for %d rows of data, this node has %d: restart it with the data it took part with",
			ErrStartFile, p, r.Rows, n.cfg.Data.Rows)
	}
	starter, err := peer.Decode(r.Starter)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: starter: %v", ErrStartFile, p, err)
	}
	if why := n.refuseStart(starter, ms, r.Total); why != "" {
		return nil, nil, fmt.Errorf("%w: %s: %s", ErrStartFile, p, why)
	}
	return &r, ms, nil
}

// resumeMembership fixes the membership from StartFile when the data directory has one
// (a node restarted during its run): no announce, no join, no start message. It reports
// whether it did. The starter re-sends the initial token only when nothing of the run
// happened here (no ledger entry, no checkpoint, nothing in custody); a walk node asks
// the members for the final model in case the run ended while it was down.
func (n *Node) resumeMembership(ctx context.Context) (bool, error) {
	r, ms, err := n.loadStart()
	if err != nil || r == nil {
		return false, err
	}
	n.startMsg = ctlMsg{Type: "start", Run: r.Run, Hash: r.ConfigHash, Members: r.Members, Addrs: r.Addrs, Total: r.Total, Holder: r.Holder}
	if len(r.Addrs) == len(ms) {
		for i, p := range ms {
			if p != n.ID() {
				n.addAddrs(p, r.Addrs[i])
			}
		}
	}
	if err := n.fixMembers(ctx, ms, r.Total); err != nil {
		return true, err
	}
	n.log.Warn().Int("members", len(ms)).Int("updates", n.walk.ckpt.Updates).Int("ledger", n.store.Entries()).
		Msg("rejoining the run this data directory took part in (membership from " + StartFile + ")")
	if n.cfg.RADMM != nil {
		return true, nil
	}
	if r.Starter == n.ID().String() && !n.walk.seen && len(n.walk.ckpt.Out) == 0 && n.store.Entries() == 0 {
		// Stopped between the start message and the first hop: the initial token may not
		// have left. A holder that has it answers duplicate or stale.
		n.initialTo = ms[r.Holder]
	}
	n.startAskFinal()
	return true, nil
}

// startAskFinal starts askFinal once (a rejoining node, or a node whose slow fallback
// fired), until the node has written model.json or it closes.
func (n *Node) startAskFinal() {
	if !n.fin.asking.CompareAndSwap(false, true) {
		return
	}
	n.mu.Lock()
	ms := slices.Clone(n.members)
	n.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	n.closers = append(n.closers, func() error { cancel(); return nil })
	n.bg.Add(1)
	go func() { defer n.bg.Done(); n.askFinal(ctx, ms) }()
}

// FinalRequest is the type of the message a rejoining member sends over wire.FinalProtocol to
// ask a member for the final model; a member that has written model.json answers with
// its final-model message (the same as a publication: run, config hash, hop, epoch,
// model), which the asking node checks as any other (acceptFinal).
const FinalRequest = "final-request"

// askFinal asks every other member for the final model, again every few seconds, until
// the node has written model.json or ctx ends. The answers go to the loop like pushed
// final models. The schedule is fixed (it does not stop when a token arrives), so that
// the requests, like the heartbeats, say nothing about where the token is.
func (n *Node) askFinal(ctx context.Context, ms []peer.ID) {
	req := marshal(ctlMsg{Type: FinalRequest, Run: n.cfg.Run, Hash: n.hash})
	every := 500 * time.Millisecond
	for ctx.Err() == nil && !n.metrics.done.Load() {
		for _, p := range ms {
			if p == n.ID() || ctx.Err() != nil {
				continue
			}
			if f, ok := n.requestFinal(ctx, p, req); ok {
				select {
				case n.fin.in <- f:
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		every = min(2*every, 5*time.Second)
	}
}

// requestFinal asks p for the final model once.
func (n *Node) requestFinal(ctx context.Context, p peer.ID, req []byte) (finalMsg, bool) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	m, answered, ok := n.askControl(cctx, p, req)
	if !answered {
		return finalMsg{}, false
	}
	if !ok || m.Type != "final" {
		n.log.Warn().Str("from", shortID(p)).Msg("malformed answer to a final-model request: ignored")
		return finalMsg{}, false
	}
	n.log.Info().Str("from", shortID(p)).Uint64("epoch", m.Epoch).Msg("final model obtained from a member on rejoining")
	return finalMsg{from: p, m: m}, true
}

// askControl sends req to p over wire.FinalProtocol and returns its answer within ctx's
// deadline: answered is false when p cannot be reached or answers nothing, ok false also
// when the answer is not a control message of this run.
func (n *Node) askControl(ctx context.Context, p peer.ID, req []byte) (m ctlMsg, answered, ok bool) {
	s, err := n.Host.NewStream(ctx, p, wire.FinalProtocol(n.cfg.Run))
	if err != nil {
		return ctlMsg{}, false, false
	}
	defer s.Close()
	if d, ok := ctx.Deadline(); ok {
		s.SetDeadline(d)
	}
	if _, err := s.Write(req); err != nil {
		s.Reset()
		return ctlMsg{}, false, false
	}
	s.CloseWrite()
	raw, err := io.ReadAll(io.LimitReader(s, maxControl+1))
	if err != nil || len(raw) == 0 || len(raw) > maxControl {
		return ctlMsg{}, false, false
	}
	if err := json.Unmarshal(raw, &m); err != nil || m.Run != n.cfg.Run {
		return ctlMsg{}, true, false
	}
	return m, true, true
}

// answerFinal answers a final-model request on s from member `from` with this node's
// final model as written to model.json (nothing when it has none yet).
func (n *Node) answerFinal(s network.Stream, from peer.ID) {
	if !n.isMember(from) {
		return
	}
	b, err := osReadFile(n.store.Dir, store.ModelFile)
	if err != nil {
		return
	}
	var m Model
	if err := json.Unmarshal(b, &m); err != nil || m.Run != n.cfg.Run || m.ConfigHash != n.hash {
		return
	}
	// With its certificate and releaser, the answer is checked like the releaser's own
	// publication (acceptFinal): a member cannot pass off a model of its own.
	s.Write(marshal(ctlMsg{Type: "final", Run: n.cfg.Run, Hash: n.hash, Hop: m.Hops, Epoch: m.Epoch, Model: m.Model, Cert: m.Cert, By: m.ReleasedBy}))
	n.log.Info().Str("to", shortID(from)).Msg("final model sent to a member that asked for it")
}
