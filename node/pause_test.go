package node

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/rs/zerolog"

	"github.com/dpadmm/dpadmm/consensus"
)

func testSources(seed uint64) func(int) (*rand.PCG, *rand.PCG) {
	return func(i int) (*rand.PCG, *rand.PCG) {
		return rand.NewPCG(seed, uint64(i)+1), rand.NewPCG(seed+1, uint64(i)+100)
	}
}

// pausedCluster is a static 3-node cluster whose random sources come from Config.Sources.
func pausedCluster(t *testing.T, ctx context.Context, run string, sh []*consensus.Dataset, hops, pause uint64, afterStep bool, dirs []string) []*Node {
	t.Helper()
	n := len(sh)
	ids := make([]peer.ID, n)
	for i := range ids {
		var err error
		if ids[i], err = DataDirPeerID(dirs[i]); err != nil {
			t.Fatal(err)
		}
	}
	nodes := make([]*Node, n)
	for i := range nodes {
		nodes[i] = newPaused(t, ctx, run, sh, i, ids, hops, pause, afterStep, dirs[i], nil)
	}
	connectAll(t, ctx, nodes)
	return nodes
}

func newPaused(t *testing.T, ctx context.Context, run string, sh []*consensus.Dataset, i int, ids []peer.ID, hops, pause uint64, afterStep bool, dir string, peers []string) *Node {
	t.Helper()
	total := 0
	for _, s := range sh {
		total += s.Rows
	}
	c := baseConfig(run, sh[i], hops)
	c.DataDir, c.Members, c.Holder = dir, ids, 1
	c.Weight = float64(len(sh)) * float64(sh[i].Rows) / float64(total)
	c.Rand, c.Noise, c.Sources = nil, nil, testSources(21)
	c.PauseAtHop, c.PauseAfterStep, c.DebugStatus = pause, afterStep, pause > 0
	c.Logger = failureLog(t, run, i)
	if peers != nil {
		c.Peers, c.WaitMembers = peers, 20*time.Second
	}
	nd, err := New(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nd.Close() })
	return nd
}

// TestPauseRestartContinuesSources: a node that pauses at a hop (in either phase) is
// closed as if it crashed and restarted on the same data directory, on a new port,
// dialling the members itself (WaitMembers). The run completes with every hop logged
// once and, since the checkpoint carries the generators' state, with the model of an
// uninterrupted run bit for bit.
func TestPauseRestartContinuesSources(t *testing.T) {
	const hops, pause = 40, 17
	sh := shards(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	refNodes := pausedCluster(t, ctx, "pref", sh, hops, 0, false, []string{t.TempDir(), t.TempDir(), t.TempDir()})
	ref := runAll(t, ctx, refNodes)
	for i, nd := range refNodes {
		// Without DebugStatus /status says nothing of where the token is or was.
		if st := nd.Status(); st.Hop != 0 || st.Holding || st.Paused || nd.lastHop.Load() == 0 && i == 1 {
			t.Fatalf("node %d status reports the token: %+v", i, st)
		}
	}
	for _, afterStep := range []bool{false, true} {
		run := "prx"
		if afterStep {
			run = "pcx"
		}
		dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
		nodes := pausedCluster(t, ctx, run, sh, hops, pause, afterStep, dirs)
		rctx, rcancel := context.WithCancel(ctx)
		type result struct {
			i   int
			m   *Model
			err error
		}
		done := make(chan result, 4)
		for i, nd := range nodes {
			go func() { m, err := nd.Run(rctx); done <- result{i, m, err} }()
		}
		// Wait for the pause: exactly one node reports it, at the pause hop, holding.
		paused := -1
		for paused < 0 {
			select {
			case r := <-done:
				t.Fatalf("node %d ended before the pause: %v", r.i, r.err)
			case <-ctx.Done():
				t.Fatal("no node paused")
			case <-time.After(10 * time.Millisecond):
			}
			for i, nd := range nodes {
				if st := nd.Status(); st.Paused {
					if st.Hop != pause || !st.Holding {
						t.Fatalf("node %d paused with hop %d holding %v", i, st.Hop, st.Holding)
					}
					paused = i
				}
			}
		}
		// The crash comes once the sender has the holder's ack: closing the holder with
		// the ack still unread by the sender would reset the connection, lose the ack and
		// make the sender redirect a duplicate of the token (correct fault tolerance, but
		// no longer the uninterrupted run this test compares with).
		waitAcked(t, ctx, nodes, paused)
		nodes[paused].Close() // the crash: nothing more is written
		var peers []string
		for i, nd := range nodes {
			if i != paused {
				for _, a := range nd.Host.Addrs() {
					peers = append(peers, a.String()+"/p2p/"+nd.ID().String())
				}
			}
		}
		ids := make([]peer.ID, len(nodes))
		for i, nd := range nodes {
			ids[i] = nd.ID()
		}
		again := newPaused(t, ctx, run, sh, paused, ids, hops, 0, false, dirs[paused], peers)
		if again.ID() != ids[paused] {
			t.Fatal("identity changed")
		}
		go func() { m, err := again.Run(rctx); done <- result{paused, m, err} }()
		models := make([]*Model, len(nodes))
		closed := false
		for k := 0; k < len(nodes)+1; k++ {
			r := <-done
			if r.err != nil {
				if r.i == paused && !closed {
					closed = true // the closed instance's Run; its restart reports the model
					continue
				}
				t.Fatalf("after-step %v: node %d: %v", afterStep, r.i, r.err)
			}
			models[r.i] = r.m
		}
		rcancel()
		for i, m := range models {
			if m == nil || !sameBits(m.Model, ref[0].Model) {
				t.Fatalf("after-step %v: node %d's model differs from the uninterrupted run", afterStep, i)
			}
		}
		hopsSeen := map[uint64]int{}
		for i, nd := range nodes {
			st := nd.Store()
			if i == paused {
				st = again.Store()
			}
			es, err := st.Ledger()
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range es {
				hopsSeen[e.Hop]++
			}
		}
		for h := uint64(1); h <= hops; h++ {
			if hopsSeen[h] != 1 {
				t.Fatalf("after-step %v: hop %d logged %d times", afterStep, h, hopsSeen[h])
			}
		}
		if _, err := os.Stat(filepath.Join(dirs[paused], ModelFile)); err != nil {
			t.Fatal(err)
		}
	}
}

// failureLog returns a debug logger for node i of a run whose output is printed only if
// the test fails, so that a failure under load leaves the nodes' own account of it.
func failureLog(t *testing.T, run string, i int) zerolog.Logger {
	t.Helper()
	buf := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log of node %d, run %s:\n%s", i, run, buf.String())
		}
	})
	return zerolog.New(buf).Level(zerolog.DebugLevel).With().Timestamp().Int("node", i).Logger()
}

// waitAcked waits until no node but the paused holder holds the token (received, or sent
// and not yet acked), that is until the sender has read the holder's ack. A crash of the
// holder with its ack still unread resets the connection, loses the ack and makes the
// sender redirect a duplicate of the token (correct fault tolerance, but not the fault a
// test means to inject). Holding is reported by nodes started with PauseAtHop.
func waitAcked(t *testing.T, ctx context.Context, nodes []*Node, paused int) {
	t.Helper()
	for {
		holding := -1
		for i, nd := range nodes {
			if i != paused && nd.Status().Holding {
				holding = i
			}
		}
		if holding < 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("node %d never saw the paused holder's ack", holding)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// runResult is what a node's Run returned.
type runResult struct {
	m   *Model
	err error
}

// runUntilPaused runs every node and waits until one reports that it paused
// (Config.PauseAtHop); it returns the channels of the nodes' results and the paused index.
func runUntilPaused(t *testing.T, ctx context.Context, nodes []*Node) ([]chan runResult, int) {
	t.Helper()
	res := make([]chan runResult, len(nodes))
	for i, nd := range nodes {
		res[i] = make(chan runResult, 1)
		go func() { m, err := nd.Run(ctx); res[i] <- runResult{m, err} }()
	}
	for {
		for i, nd := range nodes {
			if nd.Status().Paused {
				return res, i
			}
		}
		select {
		case <-ctx.Done():
			t.Fatal("no node paused at the hop of the crash")
		case <-time.After(10 * time.Millisecond):
		}
	}
}
