package node

import (
	"fmt"
	"math"
	"sync"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/dpadmm/dpadmm/gossip"
	"github.com/dpadmm/dpadmm/node/drive"
	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/privacy"
)

// JournalNoise wraps a machine's noise source so that its draws can be journaled with
// the release they went into and replayed after a restart. Build the machine with it as
// gossip.Config.Noise and pass the same value as the exchange's radmmConfig.Noise. During a replay the
// wrapped source is drawn too and its values discarded, so a seeded source continues
// where it stood at the crash (and must reproduce the recorded values).
type JournalNoise struct {
	src    privacy.Noise
	rec    []store.NoiseDraw
	replay []store.NoiseDraw
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
	j.rec = append(j.rec, store.NoiseDraw{Sigma: sigma, Vals: append([]float64(nil), dst...)})
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
	j.rec = append(j.rec, store.NoiseDraw{Uniform: true, Vals: []float64{u}})
	return u
}

func (j *JournalNoise) fail(err error) {
	if j.err == nil {
		j.err = err
	}
}

// take returns and clears the draws recorded since the last take.
func (j *JournalNoise) take() []store.NoiseDraw {
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

// restore replays the journal recs into the fresh exchange (noise from the journal): every
// recomputed release must equal the journaled vector bit for bit and the ledger entries
// prior of the run must be those of the journaled releases (a release journaled but not
// yet in the ledger, from a crash between the two writes, gets its entry now, before
// anything is sent). Nothing is sent: run re-sends the last releases (Exchange.Resume).
func (x *radmmExchange) restore(recs []store.RADMMRecord, prior []privacy.Entry) error {
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
		rel := drive.RADMMRelease{Vec: rec.Vec}
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
	rec := store.RADMMRecord{Run: x.n.cfg.Run, Iter: st.Iter, Vec: st.Vec}
	for _, in := range st.Inputs {
		rec.In = append(rec.In, store.RADMMInput{From: in.From, Iter: in.Iter, Vec: in.Vec, Stale: in.StandIn, Used: in.UsedIter})
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
	return x.files.Append(&rec)
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
