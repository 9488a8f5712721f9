package store

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpadmm/dpadmm/privacy"
)

func ledgerEntries(n int) []privacy.Entry {
	es := make([]privacy.Entry, n)
	for k := range es {
		es[k] = privacy.Entry{Seq: 99, Node: "a", Run: "r", Hop: uint64(k + 1), Mechanism: privacy.MechGaussian,
			Sensitivity: 0.4, Sigma: 0.5, Clip: 0.1, Lambda: 1, Recipient: "b", Prev: "junk"}
		if k%3 == 2 {
			es[k].Mechanism, es[k].Sensitivity, es[k].Sigma = privacy.MechForward, 0, 0
		}
	}
	return es
}

// TestStoreWritesLedgerChain: a Store's ledger file is byte for byte what privacy.LedgerChain
// writes for the same entries, across a reopen (restart) and in batches.
func TestStoreWritesLedgerChain(t *testing.T) {
	dir := t.TempDir()
	es := ledgerEntries(7)
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	s.NoSync = true
	if err := s.AppendLedger(es[:3]); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err = Open(dir); err != nil {
		t.Fatal(err)
	}
	s.NoSync = true
	for _, batch := range [][]privacy.Entry{es[3:4], es[4:]} {
		if err := s.AppendLedger(batch); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	got, err := os.ReadFile(filepath.Join(dir, LedgerFile))
	if err != nil {
		t.Fatal(err)
	}
	var c privacy.LedgerChain
	var want []byte
	for _, e := range es {
		want, _ = c.Append(want, e)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("store ledger:\n%s\nLedgerChain:\n%s", got, want)
	}
	// A store refuses a rewritten ledger with ErrLedger and the chain's reason.
	lines := bytes.SplitAfter(got, []byte("\n"))
	if err := os.WriteFile(filepath.Join(dir, LedgerFile), bytes.Join(append(lines[:2:2], lines[3:]...), nil), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "does not chain") {
		t.Errorf("ledger with a line removed: %v", err)
	}
}
