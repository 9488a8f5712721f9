package node

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/rs/zerolog"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/node/wire"
	"github.com/dpadmm/dpadmm/privacy"
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
		if ids[i], err = store.DataDirPeerID(dirs[i]); err != nil {
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
	ref := pauseReference(t, ctx, sh, hops)
	for _, afterStep := range []bool{false, true} {
		run := "prx"
		if afterStep {
			run = "pcx"
		}
		hopsSeen, _ := pauseCrashRestart(t, ctx, sh, run, hops, pause, afterStep, ref, nil)
		for h := uint64(1); h <= hops; h++ {
			if hopsSeen[h] != 1 {
				t.Fatalf("after-step %v: hop %d logged %d times", afterStep, h, hopsSeen[h])
			}
		}
	}
}

// TestJournalCrashRestart: crashes that damage the end of a journal, on a node killed
// between its journal appends and the send, or between receiving (inbox record durable,
// acked) and its step.
//
//   - torn checkpoint record: the crash comes during the append of the checkpoint that
//     holds the paused hop's release (its ledger entry is durable, nothing was sent). The
//     restart takes the previous record, steps the stored inbound token again with the
//     generators' state of that record, and releases the same bits: the model is the
//     uninterrupted run's, and that one hop is charged twice (a safe over-count, both
//     entries naming the same recipient), every other hop once. This needs the paused
//     hop's token held apart from the torn record: on this seed the node handed it to
//     itself, and the previous record holds it (checked). A token from another member
//     is acked only once its step's record is durable (drive.Walk's coalescing), so a
//     record torn by a crash was never acked and its sender sends the token again
//     (TestFaultCrashAtReleaseRestart).
//   - zero tail after the last checkpoint record (the file grew, its data never reached
//     the disk) and a torn inbox record after the stored token: skipped, the run goes on
//     as without the damage, every hop charged once.
func TestJournalCrashRestart(t *testing.T) {
	const hops, pause = 40, 17
	sh := shards(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ref := pauseReference(t, ctx, sh, hops)
	// offsets returns the start of each record of a journal (read here from the format,
	// not with the store's reader).
	offsets := func(b []byte) []int {
		var offs []int
		for off := 0; off+store.RecordHeader <= len(b) && string(b[off:off+4]) == store.RecordMagic; {
			offs = append(offs, off)
			off += store.RecordHeader + int(binary.LittleEndian.Uint32(b[off+5:]))
		}
		return offs
	}
	var lastEntry privacy.Entry
	cases := []struct {
		name      string
		afterStep bool
		damage    func(t *testing.T, dir string)
		twice     bool // the paused hop's entry is made again
	}{
		{"torn-checkpoint", true, func(t *testing.T, dir string) {
			p := filepath.Join(dir, store.CheckpointLog)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			offs := offsets(b)
			if len(offs) < 2 {
				t.Fatalf("checkpoint journal with %d records, want a previous one to fall back on", len(offs))
			}
			last := offs[len(offs)-1]
			if err := os.WriteFile(p, b[:last+store.RecordHeader+(len(b)-last-store.RecordHeader)/2], 0o600); err != nil {
				t.Fatal(err)
			}
			st, err := store.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			es, err := st.Ledger()
			if err != nil || len(es) == 0 {
				t.Fatalf("ledger of the paused node: %d entries, %v", len(es), err)
			}
			lastEntry = es[len(es)-1]
			// The paused hop's token is held apart from the torn record: in the previous
			// record (its step handed it to this node) or in the inbox (acked before its
			// step).
			held := func(raw []byte) bool {
				tok, err := wire.DecodeToken(raw)
				return err == nil && tok.Hop == pause
			}
			ck, err := st.LoadCheckpoint()
			in, _ := st.LoadInbox()
			if err != nil || ck == nil || !held(ck.Held) && !held(in) {
				t.Fatalf("the paused hop's token is held neither by the previous record nor in the inbox (%v): the case needs one", err)
			}
		}, true},
		{"zero-tail", true, func(t *testing.T, dir string) {
			f, err := os.OpenFile(filepath.Join(dir, store.CheckpointLog), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.Write(make([]byte, 700)); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"torn-inbox", false, func(t *testing.T, dir string) {
			p := filepath.Join(dir, store.InboxLog)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			offs := offsets(b)
			if len(offs) == 0 || offs[len(offs)-1]+store.RecordHeader >= len(b) {
				t.Fatalf("inbox journal of %d bytes, records at %v", len(b), offs)
			}
			rec := b[offs[len(offs)-1]:]
			if err := os.WriteFile(p, append(b, rec[:store.RecordHeader+20]...), 0o600); err != nil {
				t.Fatal(err)
			}
		}, false},
	}
	for k, c := range cases {
		run := fmt.Sprintf("jc%d", k)
		hopsSeen, paused := pauseCrashRestart(t, ctx, sh, run, hops, pause, c.afterStep, ref, c.damage)
		for h := uint64(1); h <= hops; h++ {
			want := 1
			if c.twice && h == lastEntry.Hop {
				want = 2
			}
			if hopsSeen[h] != want {
				t.Fatalf("%s: hop %d logged %d times, want %d", c.name, h, hopsSeen[h], want)
			}
		}
		if c.twice {
			es, err := paused.Ledger()
			if err != nil {
				t.Fatal(err)
			}
			var again []privacy.Entry
			for _, e := range es {
				if e.Hop == lastEntry.Hop && e.Epoch == lastEntry.Epoch {
					again = append(again, e)
				}
			}
			if len(again) != 2 || again[0].Recipient != again[1].Recipient || again[0].Sigma != again[1].Sigma || again[0].Mechanism != again[1].Mechanism {
				t.Fatalf("%s: entries of the re-made hop %d: %+v", c.name, lastEntry.Hop, again)
			}
		}
	}
}

// pauseReference runs the 3-node cluster of the pause tests without a pause and returns
// its model.
func pauseReference(t *testing.T, ctx context.Context, sh []*consensus.Dataset, hops uint64) *Model {
	t.Helper()
	refNodes := pausedCluster(t, ctx, "pref", sh, hops, 0, false, []string{t.TempDir(), t.TempDir(), t.TempDir()})
	ref := runAll(t, ctx, refNodes)
	for i, nd := range refNodes {
		// Without DebugStatus /status says nothing of where the token is or was.
		if st := nd.Status(); st.Hop != 0 || st.Holding || st.Paused || nd.lastHop.Load() == 0 && i == 1 {
			t.Fatalf("node %d status reports the token: %+v", i, st)
		}
	}
	return ref[0]
}

// pauseCrashRestart runs the cluster of run until one node pauses at hop pause (before or
// after its step), closes that node as if it crashed, applies damage (if not nil) to its
// data directory, restarts it and runs to the end. Every node's model must equal ref bit
// for bit. It returns how many ledger entries each hop has over all nodes, and the
// restarted node's store.
func pauseCrashRestart(t *testing.T, ctx context.Context, sh []*consensus.Dataset, run string, hops, pause uint64, afterStep bool, ref *Model, damage func(*testing.T, string)) (map[uint64]int, *store.Store) {
	t.Helper()
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	nodes := pausedCluster(t, ctx, run, sh, hops, pause, afterStep, dirs)
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
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
			t.Fatalf("%s: node %d ended before the pause: %v", run, r.i, r.err)
		case <-ctx.Done():
			t.Fatalf("%s: no node paused", run)
		case <-time.After(10 * time.Millisecond):
		}
		for i, nd := range nodes {
			if st := nd.Status(); st.Paused {
				if st.Hop != pause || !st.Holding {
					t.Fatalf("%s: node %d paused with hop %d holding %v", run, i, st.Hop, st.Holding)
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
	if damage != nil {
		damage(t, dirs[paused])
	}
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
			t.Fatalf("%s: node %d: %v", run, r.i, r.err)
		}
		models[r.i] = r.m
	}
	for i, m := range models {
		if m == nil || !sameBits(m.Model, ref.Model) {
			t.Fatalf("%s: node %d's model differs from the uninterrupted run", run, i)
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
	if _, err := os.Stat(filepath.Join(dirs[paused], store.ModelFile)); err != nil {
		t.Fatal(err)
	}
	return hopsSeen, again.Store()
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

// TestStoppingHolderAnswersResend: the holder of a paused token answers a byte-identical
// re-send of it with wire.AckDuplicate, whether it is running or its run is being stopped
// (its context ended, as on SIGINT or SIGTERM, and it drains the hand-off streams still
// open to it, Node.quiesce): custody passed to it with its first ack (the token is in
// its inbox, stepped at its restart), and a busy answer would make the sender redirect
// the token to another member at its ack timeout. A restarted member re-sends its
// unacked release at its first tick, possibly to a holder being stopped at that moment.
// The stopping node's answers are its custody machine's (walk.Custody.Stop; a new
// token refused busy is in walk/testdata/custody/stop.txt): the same release under a
// higher epoch, as a regeneration would send it, is refused by the evidence rule
// (wire.AckStale) before the stop and after it alike.
func TestStoppingHolderAnswersResend(t *testing.T) {
	const hops, pause = 40, 18
	sh := shards(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nodes := pausedCluster(t, ctx, "stopdup", sh, hops, pause, false, []string{t.TempDir(), t.TempDir(), t.TempDir()})
	type frame struct {
		from int
		to   peer.ID
		raw  []byte
	}
	var mu sync.Mutex
	var sent []frame
	for i, nd := range nodes {
		nd.sendHook = func(to peer.ID, raw []byte) {
			mu.Lock()
			sent = append(sent, frame{i, to, slices.Clone(raw)})
			mu.Unlock()
		}
	}
	stops := make([]context.CancelFunc, len(nodes))
	ended := make([]chan error, len(nodes))
	for i, nd := range nodes {
		rctx, stop := context.WithCancel(ctx)
		stops[i], ended[i] = stop, make(chan error, 1)
		go func() { _, err := nd.Run(rctx); ended[i] <- err }()
	}
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	p := -1
	for p < 0 {
		select {
		case <-ctx.Done():
			t.Fatal("no node paused")
		case <-time.After(10 * time.Millisecond):
		}
		for i, nd := range nodes {
			if nd.Status().Paused {
				p = i
			}
		}
	}
	waitAcked(t, ctx, nodes, p)
	holder := nodes[p].ID()
	var held frame
	mu.Lock()
	for _, f := range sent {
		if e, h := rawID(f.raw); f.to == holder && e == 0 && h == pause {
			held = f
		}
	}
	mu.Unlock()
	if held.raw == nil {
		t.Fatalf("no frame of hop %d to the paused node %d was sent", pause, p)
	}
	// resend has the sender write raw to the holder again, as its custody does (signed
	// for the holder, on its hand-off stream, one at a time per peer).
	resend := func(raw []byte) byte {
		t.Helper()
		s := nodes[held.from]
		lk, _ := s.sendLocks.LoadOrStore(holder, &sync.Mutex{})
		lk.(*sync.Mutex).Lock()
		defer lk.(*sync.Mutex).Unlock()
		code, err := s.handoff(ctx, holder, raw)
		if err != nil {
			t.Fatalf("re-send to the paused node: %v", err)
		}
		return code
	}
	if code := resend(held.raw); code != wire.AckDuplicate {
		t.Fatalf("paused holder answered a re-send of its token with %d, want wire.AckDuplicate (%d)", code, wire.AckDuplicate)
	}
	if code := resend(reEpoch(held.raw, 1)); code != wire.AckStale {
		t.Fatalf("paused holder answered the same release under epoch 1 with %d, want wire.AckStale (%d): its evidence was used", code, wire.AckStale)
	}
	stops[p]() // the holder's run is stopped; it drains the stream the sender keeps open
	if code := resend(held.raw); code != wire.AckDuplicate {
		t.Fatalf("stopping holder answered a re-send of its token with %d, want wire.AckDuplicate (%d)", code, wire.AckDuplicate)
	}
	if code := resend(reEpoch(held.raw, 1)); code != wire.AckStale {
		t.Fatalf("stopping holder answered the same release under epoch 1 with %d, want wire.AckStale (%d) as before the stop", code, wire.AckStale)
	}
	select {
	case err := <-ended[p]:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("stopped holder's run ended with %v, want context.Canceled", err)
		}
	case <-time.After(stopDrain + 5*time.Second):
		t.Fatal("stopped holder did not end its run")
	}
	if st := nodes[p].Status(); !st.Paused || !st.Holding || st.Hop != pause {
		t.Fatalf("stopped holder's status %+v: want paused at hop %d, holding", st, pause)
	}
}
