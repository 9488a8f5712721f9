package node

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/dpadmm/dpadmm/gossip"
	"github.com/dpadmm/dpadmm/privacy"
)

// RADMMJournalFile is the data-directory file that lets a neighbour-exchange node resume
// its run after a crash: one JSON line per release, made durable BEFORE the release's
// ledger entry and before any frame of it is sent. A line holds the released vector, the
// neighbour vectors the machine consumed at the barrier before it and every noise draw
// that went into it. A restarted node rebuilds a fresh machine, replays the journal
// (recorded inputs, recorded noise) and checks that every release it recomputes equals
// the journaled vector bit for bit; it then re-sends its last released vectors unchanged.
// An already-released iteration is therefore never re-noised. The file holds private
// state (the noise of past releases): it must stay on the node, like the data.
const RADMMJournalFile = "gossip-journal"

// journalRec is one line of RADMMJournalFile.
type journalRec struct {
	Run  string `json:"run"`
	Iter int    `json:"iter"`
	// Members and Total (first line only) are the run's membership in index order and M,
	// so that a restarted node of an announce/join run takes the same place.
	Members []string   `json:"members,omitempty"`
	Addrs   [][]string `json:"addrs,omitempty"` // members' known multiaddrs (no /p2p)
	Total   int        `json:"total_rows,omitempty"`
	Vec     []float64  `json:"vec"`
	// In are the neighbour vectors of iteration Iter-1 the machine consumed (a stale
	// substitution is recorded with the vector used).
	In    []journalIn `json:"in,omitempty"`
	Noise []noiseDraw `json:"noise,omitempty"`
}

type journalIn struct {
	From int       `json:"from"`
	Iter int       `json:"iter"`
	Vec  []float64 `json:"vec"`
	// Stale marks a stale substitution; Used is then the iteration the vector was released
	// for (journals written before these fields existed replay such an input as a vector
	// of iteration Iter).
	Stale bool `json:"stale,omitempty"`
	Used  int  `json:"used_iter,omitempty"`
}

// noiseDraw is one call of the noise source: Normal (Sigma and the values filled) or
// Uniform (Uniform true, one value).
type noiseDraw struct {
	Uniform bool      `json:"u,omitempty"`
	Sigma   float64   `json:"s,omitempty"`
	Vals    []float64 `json:"v"`
}

// JournalNoise wraps a machine's noise source so that its draws can be journaled with
// the release they went into and replayed after a restart. Build the machine with it as
// gossip.Config.Noise and pass the same value as the exchange's radmmConfig.Noise. During a replay the
// wrapped source is drawn too and its values discarded, so a seeded source continues
// where it stood at the crash (and must reproduce the recorded values).
type JournalNoise struct {
	src    privacy.Noise
	rec    []noiseDraw
	replay []noiseDraw
	pos    int
	err    error
}

// NewJournalNoise wraps src.
func NewJournalNoise(src privacy.Noise) *JournalNoise { return &JournalNoise{src: src} }

// Secure reports whether the wrapped source is backed by crypto/rand.
func (j *JournalNoise) Secure() bool { return j.src.Secure() }

// Normal fills dst from the replay when one is pending, else from the wrapped source.
func (j *JournalNoise) Normal(dst []float64, sigma float64) {
	j.src.Normal(dst, sigma)
	if j.pos < len(j.replay) {
		d := j.replay[j.pos]
		j.pos++
		if d.Uniform || len(d.Vals) != len(dst) || math.Float64bits(d.Sigma) != math.Float64bits(sigma) {
			j.fail(fmt.Errorf("replayed noise draw %d is not a normal draw of %d values at sigma %v", j.pos, len(dst), sigma))
			for i := range dst {
				dst[i] = math.NaN()
			}
			return
		}
		if !j.src.Secure() && !sameFloats(dst, d.Vals) {
			j.fail(fmt.Errorf("the seeded noise source does not reproduce journaled draw %d", j.pos))
		}
		copy(dst, d.Vals)
	}
	j.rec = append(j.rec, noiseDraw{Sigma: sigma, Vals: append([]float64(nil), dst...)})
}

// Uniform returns the replayed value when a replay is pending, else a fresh one.
func (j *JournalNoise) Uniform() float64 {
	u := j.src.Uniform()
	if j.pos < len(j.replay) {
		d := j.replay[j.pos]
		j.pos++
		if !d.Uniform || len(d.Vals) != 1 {
			j.fail(fmt.Errorf("replayed noise draw %d is not a uniform draw", j.pos))
			return math.NaN()
		}
		if !j.src.Secure() && math.Float64bits(u) != math.Float64bits(d.Vals[0]) {
			j.fail(fmt.Errorf("the seeded noise source does not reproduce journaled draw %d", j.pos))
		}
		u = d.Vals[0]
	}
	j.rec = append(j.rec, noiseDraw{Uniform: true, Vals: []float64{u}})
	return u
}

func (j *JournalNoise) fail(err error) {
	if j.err == nil {
		j.err = err
	}
}

// take returns and clears the draws recorded since the last take.
func (j *JournalNoise) take() []noiseDraw {
	r := j.rec
	j.rec = nil
	return r
}

func sameFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float64bits(a[i]) != math.Float64bits(b[i]) {
			return false
		}
	}
	return true
}

// RADMMJournal is what a data directory's journal says about a run: the membership, M
// and f_i(0) recorded with the first release, and how many releases are journaled.
type RADMMJournal struct {
	Members  []string
	Addrs    [][]string // the members' addresses known at the first release
	Total    int
	Init     []float64
	Releases int
	recs     []journalRec
}

// ReadRADMMJournal returns the journal of run in dir, or nil when there is none. A
// truncated last line (a crash while it was written, before it was durable and so before
// any send of its release) is ignored.
func ReadRADMMJournal(dir, run string) (*RADMMJournal, error) {
	recs, _, err := readJournal(filepath.Join(dir, RADMMJournalFile), run)
	if err != nil || len(recs) == 0 {
		return nil, err
	}
	return &RADMMJournal{Members: recs[0].Members, Addrs: recs[0].Addrs, Total: recs[0].Total, Init: recs[0].Vec, Releases: len(recs), recs: recs}, nil
}

// Last returns the last journaled release: its iteration and the vector f_i(iter) sent
// to the neighbours (a copy).
func (j *RADMMJournal) Last() (int, []float64) {
	r := j.recs[len(j.recs)-1]
	return r.Iter, append([]float64(nil), r.Vec...)
}

// readJournal returns the records of run and the length of the file's complete lines.
func readJournal(path, run string) ([]journalRec, int64, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("node: %s: %w", RADMMJournalFile, err)
	}
	good := int64(bytes.LastIndexByte(b, '\n') + 1)
	var out []journalRec
	sc := bufio.NewScanner(bytes.NewReader(b[:good]))
	sc.Buffer(make([]byte, 0, 1<<16), 1<<30)
	for line := 1; sc.Scan(); line++ {
		var r journalRec
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, 0, fmt.Errorf("node: %s line %d: %w", RADMMJournalFile, line, err)
		}
		if r.Run != run {
			continue
		}
		if r.Iter != len(out) {
			return nil, 0, fmt.Errorf("node: %s line %d: release %d follows %d releases of run %q", RADMMJournalFile, line, r.Iter, len(out), run)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		return nil, 0, fmt.Errorf("node: %s: %w", RADMMJournalFile, err)
	}
	return out, good, nil
}

// restore replays the journal recs into the fresh exchange (noise from the journal): every
// recomputed release must equal the journaled vector bit for bit and the ledger entries
// prior of the run must be those of the journaled releases (a release journaled but not
// yet in the ledger, from a crash between the two writes, gets its entry now, before
// anything is sent). Nothing is sent: run re-sends the last releases (Exchange.Resume).
func (x *radmmExchange) restore(recs []journalRec, prior []privacy.Entry) error {
	jn := x.cfg.Noise
	refuse := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrRejoin, x.n.cfg.DataDir, fmt.Sprintf(format, a...))
	}
	if len(prior) > len(recs) {
		return refuse("the ledger holds %d entries of run %q but the journal only %d releases", len(prior), x.n.cfg.Run, len(recs))
	}
	for _, r := range recs {
		jn.replay = append(jn.replay, r.Noise...)
	}
	for r, rec := range recs {
		rel := RADMMRelease{Vec: rec.Vec}
		for _, in := range rec.In {
			rel.Inputs = append(rel.Inputs, gossip.Input{Message: gossip.Message{From: in.From, Iter: in.Iter, Vec: in.Vec}, StandIn: in.Stale, UsedIter: in.Used})
		}
		e, err := x.ad.Replay(r, rel)
		if jn.err != nil {
			return refuse("%v", jn.err)
		}
		if err != nil {
			return refuse("%v", err)
		}
		e.Run = x.n.cfg.Run
		if r < len(prior) {
			p := prior[r]
			if p.Hop != e.Hop || p.Mechanism != e.Mechanism || math.Float64bits(p.Epsilon) != math.Float64bits(e.Epsilon) {
				return refuse("ledger entry %d (%s, iteration %d) does not match the replayed release %d", r, p.Mechanism, p.Hop, r)
			}
		} else if err := x.n.store.AppendLedger([]privacy.Entry{e}); err != nil {
			return fmt.Errorf("node: cannot make the ledger durable: %w", err)
		}
		x.progress([]privacy.Entry{e}, r)
	}
	if jn.pos != len(jn.replay) {
		return refuse("%d journaled noise draws were not used by the replay", len(jn.replay)-jn.pos)
	}
	jn.replay, jn.pos, jn.rec = nil, 0, nil
	return nil
}

// journal appends the record of the release st and fsyncs it (before the ledger entry).
func (x *radmmExchange) journal(st *gossip.ExchangeState) error {
	rec := journalRec{Run: x.n.cfg.Run, Iter: st.Iter, Vec: st.Vec}
	for _, in := range st.Inputs {
		rec.In = append(rec.In, journalIn{From: in.From, Iter: in.Iter, Vec: in.Vec, Stale: in.StandIn, Used: in.UsedIter})
	}
	if x.cfg.Noise != nil {
		rec.Noise = x.cfg.Noise.take()
	}
	if st.Iter == 0 {
		rec.Members = make([]string, len(x.cfg.Members))
		rec.Addrs = make([][]string, len(x.cfg.Members))
		for i, p := range x.cfg.Members {
			rec.Members[i] = p.String()
			addrs := x.n.Host.Peerstore().Addrs(p)
			if i == x.cfg.Self {
				addrs = x.n.Host.Addrs()
			}
			for _, a := range addrs {
				rec.Addrs[i] = append(rec.Addrs[i], a.String())
			}
		}
		rec.Total = x.cfg.TotalRows
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("node: %s: %w", RADMMJournalFile, err)
	}
	if _, err := x.jfile.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("node: %s: %w", RADMMJournalFile, err)
	}
	if !x.n.cfg.NoSync {
		if err := x.jfile.Sync(); err != nil {
			return fmt.Errorf("node: %s fsync: %w", RADMMJournalFile, err)
		}
	}
	return nil
}

// noNoise stands in for the noise source of a machine built without one (no noise): a
// draw from it makes the replay fail.
type noNoise struct{}

func (noNoise) Normal(dst []float64, _ float64) {
	for i := range dst {
		dst[i] = math.NaN()
	}
}
func (noNoise) Uniform() float64 { return math.NaN() }
func (noNoise) Secure() bool     { return true }

// watchReconnects reports, on x.reconn, every neighbour that connects again after all
// its connections had closed.
func (x *radmmExchange) watchReconnects() {
	var mu sync.Mutex
	down := map[peer.ID]bool{}
	x.notifee = &network.NotifyBundle{
		DisconnectedF: func(n network.Network, c network.Conn) {
			p := c.RemotePeer()
			if _, ok := x.index[p]; ok && n.Connectedness(p) != network.Connected {
				mu.Lock()
				down[p] = true
				mu.Unlock()
			}
		},
		ConnectedF: func(_ network.Network, c network.Conn) {
			p := c.RemotePeer()
			mu.Lock()
			was := down[p]
			delete(down, p)
			mu.Unlock()
			if i, ok := x.index[p]; ok && was {
				select {
				case x.reconn <- i:
				default:
				}
			}
		},
	}
	x.n.Host.Network().Notify(x.notifee)
}
