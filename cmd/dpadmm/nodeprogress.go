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
// wait (no mDNS interface, the join window missed); during the run, hops seen, own
// noisy updates and the epsilon spent (the iteration for a neighbour exchange).
func nodeProgress(ctx context.Context, nd *node.Node, run string, p *progress) (stop func()) {
	if p == nil {
		return func() {}
	}
	stopTick := ticker(ctx, nodeProgressEvery, func() { p.Printf("%s", nodeProgressLine(nd.Status(), run)) })
	return func() { stopTick(); p.Done() }
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
