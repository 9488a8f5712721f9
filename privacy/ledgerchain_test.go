package privacy

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"testing"
)

func ledgerEntries(n int) []Entry {
	es := make([]Entry, n)
	for k := range es {
		es[k] = Entry{Seq: 99, Node: "a", Run: "r", Hop: uint64(k + 1), Mechanism: MechGaussian,
			Sensitivity: 0.4, Sigma: 0.5, Clip: 0.1, Lambda: 1, Recipient: "b", Prev: "junk"}
		if k%3 == 2 {
			es[k].Mechanism, es[k].Sensitivity, es[k].Sigma = MechForward, 0, 0
		}
	}
	return es
}

// TestLedgerChainLines: the lines are numbered 1, 2, ... whatever Seq the entries carry,
// the first has no link and each later one carries the first 8 bytes (big-endian hex) of
// the SHA-256 of the line before it, computed here from the bytes on disk.
func TestLedgerChainLines(t *testing.T) {
	var c LedgerChain
	var b []byte
	for _, e := range ledgerEntries(5) {
		var err error
		if b, err = c.Append(b, e); err != nil {
			t.Fatal(err)
		}
	}
	lines := bytes.SplitAfter(b, []byte("\n"))
	lines = lines[:len(lines)-1]
	if len(lines) != 5 || c.Lines() != 5 || c.Seq() != 5 {
		t.Fatalf("%d lines, chain at %d lines seq %d", len(lines), c.Lines(), c.Seq())
	}
	for k, line := range lines {
		var v struct {
			Seq  uint64 `json:"seq"`
			Prev string `json:"prev"`
		}
		if err := json.Unmarshal(line, &v); err != nil {
			t.Fatal(err)
		}
		want := ""
		if k > 0 {
			s := sha256.Sum256(lines[k-1])
			want = fmt.Sprintf("%016x", binary.BigEndian.Uint64(s[:8]))
		}
		if v.Seq != uint64(k+1) || v.Prev != want {
			t.Errorf("line %d: seq %d prev %q, want %d %q", k+1, v.Seq, v.Prev, k+1, want)
		}
	}
	s := sha256.Sum256(lines[4])
	if c.Last() != binary.BigEndian.Uint64(s[:8]) {
		t.Errorf("Last %x is not the hash of the last line", c.Last())
	}
	// An invalid entry is refused and leaves the chain as it was.
	bad := ledgerEntries(1)[0]
	bad.Sigma = -1
	if out, err := c.Append(b, bad); err == nil || len(out) != len(b) || c.Lines() != 5 || c.Seq() != 5 {
		t.Errorf("invalid entry: err %v, %d bytes (had %d), chain %d lines", err, len(out), len(b), c.Lines())
	}
}

// TestReadLedgerChain: what LedgerChain writes reads back (entries, per-line hashes,
// the state to continue from); removing, rewriting (with a valid checksum) or swapping
// lines, an unchained line after chained ones and a truncated last line are refused; an
// unchained ledger of an earlier build may be continued by chained lines.
func TestReadLedgerChain(t *testing.T) {
	var c LedgerChain
	var b []byte
	es := ledgerEntries(6)
	for _, e := range es {
		b, _ = c.Append(b, e)
	}
	got, hashes, rc, err := ReadLedgerChain(b)
	if err != nil || len(got) != 6 || rc != c {
		t.Fatalf("read back: %d entries, chain %+v (written %+v), %v", len(got), rc, c, err)
	}
	for k, line := range bytes.SplitAfter(b, []byte("\n"))[:6] {
		if hashes[k] != LineHash(line) || got[k].Hop != es[k].Hop || got[k].Seq != uint64(k+1) {
			t.Errorf("entry %d: hash %x, hop %d seq %d", k, hashes[k], got[k].Hop, got[k].Seq)
		}
	}
	// Continuing from the state read gives the bytes of an uninterrupted writer.
	more := ledgerEntries(2)
	b2, _ := rc.Append(append([]byte(nil), b...), more[0])
	b2, _ = rc.Append(b2, more[1])
	var c3 LedgerChain
	var b3 []byte
	for _, e := range append(es, more...) {
		b3, _ = c3.Append(b3, e)
	}
	if !bytes.Equal(b2, b3) {
		t.Error("a writer continued from ReadLedgerChain differs from one that never stopped")
	}

	lines := bytes.SplitAfter(b, []byte("\n"))[:6]
	join := func(ls ...[]byte) []byte { return bytes.Join(ls, nil) }
	rewritten := es[2]
	rewritten.Sigma = 5
	rewritten.Seq, rewritten.Prev = 3, fmt.Sprintf("%016x", LineHash(lines[1]))
	rl, _ := rewritten.MarshalLineChecked()
	unchained := es[5]
	unchained.Seq, unchained.Prev = 7, ""
	ul, _ := unchained.MarshalLineChecked()
	for name, bad := range map[string][]byte{
		"line removed":         join(lines[0], lines[1], lines[3], lines[4], lines[5]),
		"first line removed":   join(lines[1:]...),
		"lines swapped":        join(lines[0], lines[2], lines[1], lines[3], lines[4], lines[5]),
		"line rewritten":       join(lines[0], lines[1], rl, lines[3], lines[4], lines[5]),
		"unchained after":      join(join(lines...), ul),
		"truncated last line":  b[:len(b)-1],
		"checksum of a line":   bytes.Replace(b, []byte(`"sigma":0.5`), []byte(`"sigma":0.6`), 1),
		"half a line appended": append(append([]byte(nil), b...), lines[1][:20]...),
	} {
		if _, _, _, err := ReadLedgerChain(bad); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// Earlier builds wrote no links: such a ledger reads, and chained lines may follow.
	var old []byte
	for k, e := range es[:3] {
		e.Seq, e.Prev = uint64(k+1), ""
		l, _ := e.MarshalLineChecked()
		old = append(old, l...)
	}
	_, _, oc, err := ReadLedgerChain(old)
	if err != nil {
		t.Fatalf("unchained ledger: %v", err)
	}
	cont, _ := oc.Append(append([]byte(nil), old...), es[3])
	if _, _, _, err := ReadLedgerChain(cont); err != nil {
		t.Errorf("unchained ledger continued by a chained line: %v", err)
	}
}
