package node

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/privacy"
)

// ledgerStore opens a store in a new directory with k noisy ledger entries and a
// checkpoint counting them, and closes it.
func ledgerStore(t *testing.T, k int) string {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for h := 1; h <= k; h++ {
		e := privacy.Entry{Node: "0", Run: "r", Hop: uint64(h), Mechanism: privacy.MechGaussian, Sensitivity: 1, Sigma: 1, Clip: 1, Lambda: 0.5, Recipient: "1"}
		if err := st.AppendLedger([]privacy.Entry{e}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SaveCheckpoint(&store.Checkpoint{Run: "r", Updates: k, U: []float64{0.25}, Hop: uint64(k)}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	return dir
}

// openCheckpoint opens dir and loads its checkpoint, returning the first error.
func openCheckpoint(dir string) (*store.Checkpoint, error) {
	st, err := store.Open(dir)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	return st.LoadCheckpoint()
}

// TestLedgerIsTheTruth: the ledger cannot silently shrink or change, and the update count
// cannot silently go back: a ledger whose tail was cut, a line removed or rewritten in the
// middle (with a valid checksum), a checkpoint deleted while the ledger holds noisy updates,
// a checkpoint counting more updates than the ledger holds, and a corrupt checkpoint record
// are all refused with ErrLedger or a corruption error; the intact directory opens.
func TestLedgerIsTheTruth(t *testing.T) {
	lines := func(dir string) [][]byte {
		b, err := os.ReadFile(filepath.Join(dir, store.LedgerFile))
		if err != nil {
			t.Fatal(err)
		}
		return bytes.SplitAfter(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
	}
	write := func(dir string, ls [][]byte) {
		if err := os.WriteFile(filepath.Join(dir, store.LedgerFile), bytes.Join(ls, nil), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	intact := ledgerStore(t, 6)
	if c, err := openCheckpoint(intact); err != nil || c.Updates != 6 || c.LedgerSeq != 6 {
		t.Fatalf("intact: %+v %v", c, err)
	}
	cases := map[string]func(dir string){
		"tail cut": func(dir string) { write(dir, lines(dir)[:4]) },
		"middle line removed": func(dir string) {
			ls := lines(dir)
			write(dir, append(ls[:2:2], ls[3:]...))
		},
		"middle line rewritten": func(dir string) {
			ls := lines(dir)
			es, err := privacy.ParseLedger(bytes.NewReader(ls[2]))
			if err != nil {
				t.Fatal(err)
			}
			e := es[0]
			e.Mechanism, e.Sensitivity, e.Sigma = privacy.MechForward, 0, 0 // a noisy update made to look free
			ls[2] = e.MarshalLine()
			write(dir, ls)
		},
		"checkpoint deleted": func(dir string) {
			if err := os.Remove(filepath.Join(dir, store.CheckpointLog)); err != nil {
				t.Fatal(err)
			}
		},
		"checkpoint record corrupt": func(dir string) {
			p := filepath.Join(dir, store.CheckpointLog)
			b, _ := os.ReadFile(p)
			b[len(b)/2] ^= 0x10
			os.WriteFile(p, b, 0o600)
		},
	}
	for name, damage := range cases {
		dir := ledgerStore(t, 6)
		damage(dir)
		if c, err := openCheckpoint(dir); err == nil {
			t.Errorf("%s: opened with checkpoint %+v", name, c)
		} else if name != "checkpoint record corrupt" && !errors.Is(err, store.ErrLedger) {
			t.Errorf("%s: %v, want store.ErrLedger", name, err)
		}
	}
	// A checkpoint that counts more noisy updates than the ledger holds.
	dir := ledgerStore(t, 3)
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SaveCheckpoint(&store.Checkpoint{Run: "r", Updates: 5, U: []float64{0.25}}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if _, err := openCheckpoint(dir); !errors.Is(err, store.ErrLedger) || !strings.Contains(err.Error(), "counts 5 noisy updates, the ledger 3") {
		t.Errorf("checkpoint ahead of the ledger: %v", err)
	}
}

// TestIdentityKeyPartsMustMatch: an identity key whose private half was damaged (it still
// names the old peer ID) is refused at load instead of failing every handshake.
func TestIdentityKeyPartsMustMatch(t *testing.T) {
	dir := t.TempDir()
	if _, err := store.DataDirPeerID(dir); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, store.IdentityFile)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-40] ^= 0x01 // inside the 32-byte seed of the 64-byte Ed25519 key
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Identity(); err == nil || !strings.Contains(err.Error(), "do not match") {
		t.Fatalf("damaged identity key: %v", err)
	}
}

// TestFinishedRunExits: a node restarted on the data directory of a run that is over
// returns its model.json at once (no membership, no token re-sent); a directory holding
// another run's model is refused.
func TestFinishedRunExits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sh := shards(t, 2)
	dirs := []string{t.TempDir(), t.TempDir()}
	nodes := staticCluster(t, ctx, "over", sh, 10, 0, dirs)
	models := runAll(t, ctx, nodes)
	for _, nd := range nodes {
		nd.Close()
	}
	c := nodes[0].cfg
	again, err := New(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	defer rcancel()
	m, err := again.Run(rctx)
	if err != nil || !sameBits(m.Model, models[0].Model) {
		t.Fatalf("restart after the end: %v", err)
	}
	if again.Store().Entries() != nodes[0].Store().Entries() {
		t.Error("the restarted node wrote ledger entries")
	}
	other := c
	other.Run = "another"
	o, err := New(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if _, err := o.Run(rctx); !errors.Is(err, ErrRunOver) {
		t.Fatalf("another run on a finished directory: %v", err)
	}
}

// TestReleaserFinishesAlone: the member that took the token of hop K keeps it durably
// before its ack (the inbox); stopped before it wrote model.json and restarted after
// every other member has gone, it finishes from that token alone: the same final model,
// no new ledger entry.
func TestReleaserFinishesAlone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sh := shards(t, 3)
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	nodes := staticCluster(t, ctx, "alone", sh, 12, 0, dirs)
	models := runAll(t, ctx, nodes)
	for _, nd := range nodes {
		nd.Close()
	}
	r := slices.IndexFunc(nodes, func(nd *Node) bool { return nd.ID().String() == models[0].ReleasedBy })
	if r < 0 {
		t.Fatalf("no member released the final model (released_by %s)", models[0].ReleasedBy)
	}
	// The releaser stopped before it wrote model.json (the rest of its directory as it was).
	if err := os.Remove(filepath.Join(dirs[r], store.ModelFile)); err != nil {
		t.Fatal(err)
	}
	entries := nodes[r].Store().Entries()
	c := nodes[r].cfg
	c.FinalWait = 200 * time.Millisecond
	again, err := New(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
	defer rcancel()
	m, err := again.Run(rctx)
	if err != nil {
		t.Fatalf("the releaser restarted alone: %v", err)
	}
	if !sameBits(m.Model, models[0].Model) || m.Hops != models[0].Hops || m.ReleasedBy != models[0].ReleasedBy {
		t.Fatalf("the releaser restarted alone released another model (hop %d by %s, want %d by %s)", m.Hops, m.ReleasedBy, models[0].Hops, models[0].ReleasedBy)
	}
	if again.Store().Entries() != entries {
		t.Errorf("ledger entries %d -> %d", entries, again.Store().Entries())
	}
	if _, err := os.Stat(filepath.Join(dirs[r], store.ModelFile)); err != nil {
		t.Errorf("model.json not written again: %v", err)
	}
}

// TestRestoredDataDirRefused: the members remember how many hand-offs they took from each
// other. A member stopped during the run and restarted from its data directory runs on;
// restarted from an older copy of its directory (ledger and checkpoint consistent, but
// behind), or from an emptied one that kept only its key, it refuses to run with
// ErrLedgerBehind before any update, because the others took more hand-offs from it than
// its ledger records.
func TestRestoredDataDirRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sh := shards(t, 3)
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	nodes := staticClusterWith(t, ctx, "restored", sh, 1_000_000, 0, dirs, func(i int, c *Config) {
		c.MaxUpdates = 0
		c.AckTimeout, c.FallbackTimeout = 500*time.Millisecond, 2*time.Second
	})
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer rcancel()
	for _, nd := range nodes[:2] {
		wg.Add(1)
		go func() { defer wg.Done(); nd.Run(rctx) }()
	}
	const v = 2
	start := func(c Config) (*Node, chan error) {
		t.Helper()
		nd, err := New(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		connectAll(t, ctx, []*Node{nodes[0], nodes[1], nd})
		done := make(chan error, 1)
		go func() { _, err := nd.Run(rctx); done <- err }()
		return nd, done
	}
	waitEntries := func(nd *Node, k int) {
		t.Helper()
		for i := 0; nd.Store().Entries() < k; i++ {
			if i > 3000 {
				t.Fatalf("node %d reached only %d ledger entries", v, nd.Store().Entries())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	stop := func(nd *Node, done chan error) {
		t.Helper()
		nd.Close()
		<-done
	}
	c := nodes[v].cfg
	done := make(chan error, 1)
	go func() { _, err := nodes[v].Run(rctx); done <- err }()
	waitEntries(nodes[v], 5)
	stop(nodes[v], done)
	backup := t.TempDir()
	if err := os.CopyFS(backup, os.DirFS(dirs[v])); err != nil {
		t.Fatal(err)
	}
	// A plain restart runs on.
	again, done := start(c)
	waitEntries(again, nodes[v].Store().Entries()+5)
	stop(again, done)
	// The older copy: refused.
	for _, restore := range []string{"older backup", "emptied"} {
		if err := os.RemoveAll(dirs[v]); err != nil {
			t.Fatal(err)
		}
		if restore == "older backup" {
			if err := os.CopyFS(dirs[v], os.DirFS(backup)); err != nil {
				t.Fatal(err)
			}
		} else {
			os.MkdirAll(dirs[v], 0o700)
			b, err := os.ReadFile(filepath.Join(backup, store.IdentityFile))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dirs[v], store.IdentityFile), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		nd, done := start(c)
		select {
		case err := <-done:
			if !errors.Is(err, ErrLedgerBehind) || !strings.Contains(err.Error(), "Restore the latest data directory") {
				t.Fatalf("%s: %v", restore, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: the node did not refuse to run", restore)
		}
		if ck, _ := nd.Store().LoadCheckpoint(); restore == "emptied" && (nd.Store().Entries() != 0 || ck != nil) {
			t.Fatalf("%s: the refused node wrote state: %d entries", restore, nd.Store().Entries())
		}
		nd.Close()
	}
}
