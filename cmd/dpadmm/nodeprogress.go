package main

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/dpadmm/dpadmm/node"
)

// nodeProgressEvery is the interval of a node's progress lines.
const nodeProgressEvery = 2 * time.Second

// nodeProgress prints nd's state on p every nodeProgressEvery until the returned stop
// is called: while it waits for its run to start, how many peers it has and why it may
// wait (no mDNS interface, the join window missed); during the run, the hop of K with
// the rate and the time left, own noisy updates, the epsilon spent and what the node waits
// for (walkProgressLine; the iteration for a neighbour exchange). Every line starts with
// the wall-clock time.
func nodeProgress(ctx context.Context, nd *node.Node, run string, p *progress) (stop func()) {
	if p == nil {
		return func() {}
	}
	var rt hopRate
	stopTick := ticker(ctx, nodeProgressEvery, func() {
		now := time.Now()
		st := nd.Status()
		line := nodeProgressLine(st, run)
		if st.Join == nil && st.RADMM == nil {
			lp := nd.LocalProgress()
			line = walkProgressLine(lp, run, rt.add(now, lp.Hop))
		}
		p.Printf("%s %s", now.Format("15:04:05"), line)
	})
	return func() { stopTick(); p.Done() }
}

// hopRate estimates the walk's hop rate from the hops a node sees over time (an
// exponentially weighted mean over about 30 s, since the hops it sees are those of the
// token's visits and hand-offs, not every hop).
type hopRate struct {
	t0   time.Time
	hop0 uint64
	rate float64 // hops per second; 0 before two samples
}

func (r *hopRate) add(now time.Time, hop uint64) float64 {
	if r.t0.IsZero() || hop < r.hop0 {
		r.t0, r.hop0 = now, hop
		return r.rate
	}
	if dt := now.Sub(r.t0).Seconds(); dt >= 1 {
		inst := float64(hop-r.hop0) / dt
		w := math.Min(dt/30, 1)
		if r.rate == 0 {
			w = 1
		}
		r.rate = (1-w)*r.rate + w*inst
		r.t0, r.hop0 = now, hop
	}
	return r.rate
}

// walkProgressLine is a walk node's progress line: the last hop it saw of the run's K
// with the percentage, the hop rate and the time left at that rate, its own updates and
// epsilon; and, when the token has not come by for a while, what it waits for.
func walkProgressLine(p node.Progress, run string, rate float64) string {
	s := fmt.Sprintf("run %s: hop %d", run, p.Hop)
	if p.Hops > 0 {
		s += fmt.Sprintf(" of %d (%.1f%%)", p.Hops, 100*float64(min(p.Hop, p.Hops))/float64(p.Hops))
	}
	if rate > 0 {
		s += fmt.Sprintf(", %.1f hops/s", rate)
		if p.Hops > p.Hop {
			s += fmt.Sprintf(", about %s left", time.Duration(float64(p.Hops-p.Hop)/rate*float64(time.Second)).Round(time.Second))
		}
	}
	s += fmt.Sprintf("; own updates %d, epsilon spent %s (local)", p.Updates, p.Epsilon.String())
	switch {
	case p.Done:
		s += "; done"
	case p.Holding:
		s += "; this node holds the token"
	case p.SinceToken < 0:
		s += "; the token has not come here yet"
	case p.SinceToken >= 10*time.Second:
		s += fmt.Sprintf("; the token left this node %s ago (hop %d) and is with another member", p.SinceToken.Round(time.Second), p.Hop)
		switch {
		case p.Fallback > 0:
			s += fmt.Sprintf("; if nothing comes for %s, this node re-sends its last release", p.Fallback)
		case p.Fallback == 0:
			s += "; if nothing comes for the run's fallback timeout, this node re-sends its last release"
		}
	}
	return s
}

// nodeProgressLine is one progress line for a node's status.
func nodeProgressLine(st node.Status, run string) string {
	eps := st.Epsilon.String() // 4 significant digits, or "unbounded"
	if j := st.Join; j != nil {
		var s string
		switch {
		case j.Role == "starter":
			s = fmt.Sprintf("waiting for peers: %d of %d joined, run %s", j.Joined, j.Want, run)
			if j.Joined >= j.Want {
				s += fmt.Sprintf("; starting when the join window closes in %.0f s", math.Ceil(j.WindowLeft))
			}
		case j.Role == "static":
			s = fmt.Sprintf("waiting for peers: %d of %d members connected, run %s", j.Joined, j.Want, run)
		case j.Missed:
			s = fmt.Sprintf("run %s started without this node (it arrived after the join window closed); waiting for another start", run)
		case j.Announced:
			s = fmt.Sprintf("joined run %s; waiting for its starter to start it", run)
		default:
			s = fmt.Sprintf("waiting for run %s to be announced by its starter", run)
		}
		s += fmt.Sprintf(" (%d peers connected)", j.Connected)
		if j.MDNS != "" {
			s += "; " + j.MDNS + "; give peers with --peer"
		}
		return s
	}
	if g := st.RADMM; g != nil {
		return fmt.Sprintf("run %s: iteration %d/%d, %d of %d neighbours reachable, %d ledger entries, epsilon spent %s",
			run, max(g.Iter, 0), g.Iters, g.Reachable, len(g.Neighbors), g.LedgerEntries, eps)
	}
	return fmt.Sprintf("run %s: hops seen %d, own updates %d, ledger entries %d, epsilon spent %s (local)",
		run, st.HopsSeen, st.Updates, st.Ledger, eps)
}
