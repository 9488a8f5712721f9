package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/dpadmm/dpadmm/privacy"
)

// groupCommitDir writes, with fsync on, a first checkpoint (a new journal) and then one
// checkpoint with one ledger entry per hop through SaveCheckpointLedger, checking that
// each such save costs one fsync. It returns the directory, the ledger's final bytes and
// the ledger's length after each save (the offsets of the sections).
func groupCommitDir(t *testing.T, hops int) (string, []byte, []int64) {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	es := ledgerEntries(hops + 1)
	c := &Checkpoint{Run: "r", U: []float64{1, 2}}
	if err := s.SaveCheckpointLedger(c, es[:1]); err != nil {
		t.Fatal(err)
	}
	var ends []int64
	for k := 1; k <= hops; k++ {
		before := s.Syncs()
		c.Hop = uint64(k)
		if err := s.SaveCheckpointLedger(c, es[k:k+1]); err != nil {
			t.Fatal(err)
		}
		if d := s.Syncs() - before; d != 1 {
			t.Fatalf("save %d: %d fsyncs, want 1 (the checkpoint record carrying the ledger line)", k, d)
		}
		ends = append(ends, s.size)
	}
	b, err := os.ReadFile(filepath.Join(dir, LedgerFile))
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(b)) != ends[len(ends)-1] {
		t.Fatalf("ledger of %d bytes, store counted %d", len(b), ends[len(ends)-1])
	}
	return dir, b, ends
}

// TestGroupCommit: a release's ledger line and its checkpoint are durable with one fsync;
// the ledger file then reads as if every line had been fsynced, and a ledger that lost
// its unsynced tail (whole lines, a torn line, zeros) is restored from the journal at
// the next Open, byte for byte, with its checkpoint loading.
func TestGroupCommit(t *testing.T) {
	const hops = 6
	dir, want, ends := groupCommitDir(t, hops)
	lp := filepath.Join(dir, LedgerFile)
	reopen := func(t *testing.T) *Store {
		t.Helper()
		s, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		c, err := s.LoadCheckpoint()
		if err != nil {
			t.Fatal(err)
		}
		if c.Hop != hops || s.Entries() != hops+1 {
			t.Fatalf("checkpoint of hop %d and %d ledger entries, want %d and %d", c.Hop, s.Entries(), hops, hops+1)
		}
		got, err := os.ReadFile(lp)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("ledger after Open:\n%s\nwant:\n%s", got, want)
		}
		return s
	}
	reopen(t)
	for _, c := range []struct {
		name string
		cut  []byte
	}{
		{"last line lost", want[:ends[hops-2]]},
		{"three lines lost", want[:ends[hops-4]]},
		{"torn line", want[:ends[hops-2]+7]},
		{"zeros", append(bytes.Clone(want[:ends[hops-2]+5]), make([]byte, 20)...)},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := os.WriteFile(lp, c.cut, 0o600); err != nil {
				t.Fatal(err)
			}
			reopen(t)
		})
	}
}

// TestGroupCommitRefusesTampering: a ledger whose lines differ from those its checkpoint
// journal holds, or that lost lines no record holds, is refused (ErrLedger), not
// repaired.
func TestGroupCommitRefusesTampering(t *testing.T) {
	const hops = 4
	dir, want, ends := groupCommitDir(t, hops)
	lp := filepath.Join(dir, LedgerFile)
	changed := bytes.Clone(want)
	changed[ends[1]+3] ^= 1 // inside the third hop's line
	torn := bytes.Clone(want[:ends[hops-1]-4])
	torn[len(torn)-2] = 'x' // a short ledger whose tail is not the journal's
	for _, c := range []struct {
		name string
		b    []byte
	}{
		{"a line changed", changed},
		{"a changed tail", torn},
		{"lines removed before the sections", want[:bytes.IndexByte(want, '\n')-10]},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := os.WriteFile(lp, c.b, 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := Open(dir)
			if err == nil {
				s.Close()
			}
			if !errors.Is(err, ErrLedger) {
				t.Fatalf("Open: %v, want ErrLedger", err)
			}
		})
	}
}

// TestGroupCommitNewJournal: the first save of a process rewrites the journal, dropping
// the records that carried ledger lines: the ledger file is fsynced first and that record
// carries none, so the lines survive without them.
func TestGroupCommitNewJournal(t *testing.T) {
	const hops = 3
	dir, want, _ := groupCommitDir(t, hops)
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.LoadCheckpoint()
	if err != nil {
		t.Fatal(err)
	}
	before := s.Syncs()
	if err := s.SaveCheckpointLedger(c, ledgerEntries(hops + 2)[hops+1:]); err != nil {
		t.Fatal(err)
	}
	// ledger, the new journal's file, its directory
	if d := s.Syncs() - before; d != 3 {
		t.Errorf("a new journal: %d fsyncs, want 3 (ledger, journal, directory)", d)
	}
	s.Close()
	n := 0
	err = s.records(CheckpointLog, func(r []byte) error {
		if _, _, ok, _ := cutLedgerSection(r); ok {
			t.Error("the new journal's record carries ledger lines")
		}
		n++
		return nil
	})
	if err != nil || n != 1 {
		t.Fatalf("new journal: %d records, %v", n, err)
	}
	got, _ := os.ReadFile(filepath.Join(dir, LedgerFile))
	if !bytes.HasPrefix(got, want) || len(got) == len(want) {
		t.Fatalf("ledger after the new journal: %d bytes, want the %d before and one line", len(got), len(want))
	}
	var es []privacy.Entry
	if es, err = privacy.ParseLedger(bytes.NewReader(got)); err != nil || len(es) != hops+2 {
		t.Fatalf("ledger: %d entries, %v", len(es), err)
	}
}

// powerLoss keeps the first durable bytes of the ledger and, when size is larger, zeros
// up to size (a file whose length reached the disk before its data).
func powerLoss(t *testing.T, dir string, durable, size int) {
	t.Helper()
	lp := filepath.Join(dir, LedgerFile)
	b, err := os.ReadFile(lp)
	if err != nil {
		t.Fatal(err)
	}
	nb := bytes.Clone(b[:durable])
	if size > durable {
		nb = append(nb, make([]byte, size-durable)...)
	}
	if err := os.WriteFile(lp, nb, 0o600); err != nil {
		t.Fatal(err)
	}
}

// reopenLoad opens dir and loads its checkpoint, which must succeed with want entries.
func reopenLoad(t *testing.T, dir string, want int) {
	t.Helper()
	s, err := Open(dir)
	if err != nil {
		t.Fatalf("Open after a crash: %v", err)
	}
	defer s.Close()
	if _, err := s.LoadCheckpoint(); err != nil {
		t.Fatalf("LoadCheckpoint after a crash: %v", err)
	}
	if s.Entries() != want {
		t.Fatalf("ledger holds %d entries, want %d", s.Entries(), want)
	}
}

// TestGroupCommitZeroTail: a ledger whose length reached the disk but whose last lines
// read as zeros is restored from the journal, whether one section or all of them are
// zeroed.
func TestGroupCommitZeroTail(t *testing.T) {
	const hops = 3
	for _, all := range []bool{false, true} {
		t.Run(fmt.Sprintf("all=%v", all), func(t *testing.T) {
			dir, want, ends := groupCommitDir(t, hops)
			durable := int(ends[hops-2])
			if all {
				durable = bytes.IndexByte(want, '\n') + 1
			}
			powerLoss(t, dir, durable, len(want))
			reopenLoad(t, dir, hops+1)
			if got, _ := os.ReadFile(filepath.Join(dir, LedgerFile)); !bytes.Equal(got, want) {
				t.Fatal("the restored ledger is not the one written")
			}
		})
	}
}

// oneCarriedLine opens a store in a new directory and saves a first checkpoint (a new
// journal), then one whose record carries a ledger line.
func oneCarriedLine(t *testing.T) (string, *Store, *Checkpoint) {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := &Checkpoint{Run: "r", U: []float64{1, 2}}
	if err := s.SaveCheckpoint(c); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveCheckpointLedger(c, ledgerEntries(1)); err != nil {
		t.Fatal(err)
	}
	return dir, s, c
}

// TestGroupCommitPlainNewJournal: a new journal started by a save without ledger entries
// (compaction, or the first save of a process) drops records that carried lines: the
// ledger is fsynced first when it holds lines written since its last fsync.
func TestGroupCommitPlainNewJournal(t *testing.T) {
	for _, how := range []string{"compaction", "restart"} {
		t.Run(how, func(t *testing.T) {
			dir, s, c := oneCarriedLine(t)
			var err error
			if how == "compaction" {
				s.ck.mu.Lock()
				s.ck.size = journalCompact
				s.ck.mu.Unlock()
			} else {
				s.Close()
				// A restart before the lines reached the disk: the new process's ledger
				// holds them in the page cache, unsynced, and its first save starts a
				// new journal.
				if s, err = Open(dir); err != nil {
					t.Fatal(err)
				}
			}
			before := s.Syncs()
			if err := s.SaveCheckpoint(c); err != nil {
				t.Fatal(err)
			}
			// the ledger, the new journal's file, its directory
			if d := s.Syncs() - before; d != 3 || s.unsynced {
				t.Fatalf("a new journal after unsynced lines: %d fsyncs (want 3: ledger, journal, directory), unsynced %v", d, s.unsynced)
			}
			s.Close()
		})
	}
}

// TestGroupCommitCorruptJournal: a journal that does not check after its records that
// carry lines (a torn append whose header never reached the disk) still gives those
// lines back: a release sent is never left out of the ledger because the checkpoint is
// corrupt, which LoadCheckpoint then reports.
func TestGroupCommitCorruptJournal(t *testing.T) {
	dir, s, _ := oneCarriedLine(t)
	s.Close()
	powerLoss(t, dir, 0, 0)
	f, err := os.OpenFile(filepath.Join(dir, CheckpointLog), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(append(make([]byte, 40), bytes.Repeat([]byte{0xab}, 40)...))
	f.Close()
	s, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Entries() != 1 {
		t.Fatalf("%d ledger entries after Open, want the 1 the journal holds", s.Entries())
	}
	if _, err := s.LoadCheckpoint(); err == nil {
		t.Fatal("a corrupt journal loaded")
	}
}

// TestGroupCommitOpenBesideNode: an Open beside a running node (a tool reading the data
// directory) reads the journal before the ledger, so it never finds lines to restore
// while the node appends: it would otherwise replace the node's ledger file.
func TestGroupCommitOpenBesideNode(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	es := ledgerEntries(3)
	c := &Checkpoint{Run: "r", U: []float64{1, 2}}
	if err := s.SaveCheckpointLedger(c, es[:1]); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveCheckpointLedger(c, es[1:2]); err != nil {
		t.Fatal(err)
	}
	tool := &Store{Dir: dir}
	secs := tool.ledgerSections() // Open's first read
	if err := s.SaveCheckpointLedger(c, es[2:3]); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, LedgerFile)) // Open's second read
	if err != nil {
		t.Fatal(err)
	}
	if len(secs) == 0 {
		t.Fatal("the journal holds no section")
	}
	if _, repaired, err := repairLedger(b, secs); err != nil || repaired {
		t.Fatalf("an Open beside the node: repaired %v, %v", repaired, err)
	}
	// The same reads in the other order would find a line to restore.
	if _, repaired, err := repairLedger(b[:len(b)-10], tool.ledgerSections()); err != nil || !repaired {
		t.Fatalf("a ledger read before the journal: repaired %v, %v", repaired, err)
	}
}
