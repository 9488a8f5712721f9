package privacy

import (
	"bytes"
	"errors"
	"fmt"
)

// LedgerChain encodes the lines of one privacy ledger file: every ledger file of dpadmm,
// a node's data-directory ledger (node/store) as well as the simulator's per-node files
// (the simulator's FileLedger), is written through it, so they share one on-disk format and one
// tamper evidence. Each entry becomes one CRC-checked JSON line
// (Entry.MarshalLineChecked) with
//
//   - Seq renumbered 1, 2, 3, ... in file order (monotone across restarts of a node, which
//     continues the chain of the lines already on disk), and
//   - Prev, on every line but the first, the hex of LineHash of the line before it,
//     so that a line removed or rewritten in the middle breaks the chain; the hash of the
//     last line (Last), recorded elsewhere (a node's checkpoint), catches a shortened tail.
//
// The zero value is the state of an empty file. LedgerChain holds no file: the caller
// writes the bytes and decides when they are durable (a node fsyncs before any send).
type LedgerChain struct {
	seq   uint64 // sequence number of the last line
	last  uint64 // LineHash of the last line
	lines int    // lines in the file so far
}

// Seq returns the sequence number of the last line (0 for an empty file).
func (c *LedgerChain) Seq() uint64 { return c.seq }

// Last returns the chain hash (LineHash) of the last line (0 for an empty file).
func (c *LedgerChain) Last() uint64 { return c.last }

// Lines returns the number of lines in the file.
func (c *LedgerChain) Lines() int { return c.lines }

// Append appends the line of e, numbered and chained after the lines before it, to dst and
// advances the chain. e is taken by value: its Seq and Prev are replaced in the copy only.
// An invalid entry is an error and leaves the chain unchanged.
func (c *LedgerChain) Append(dst []byte, e Entry) ([]byte, error) {
	e.Seq = c.seq + 1
	e.Prev = ""
	if c.lines > 0 {
		e.Prev = fmt.Sprintf("%016x", c.last)
	}
	line, err := e.MarshalLineChecked()
	if err != nil {
		return dst, err
	}
	c.seq, c.last = e.Seq, LineHash(line)
	c.lines++
	return append(dst, line...), nil
}

// ReadLedgerChain parses the bytes of a ledger file (ParseLedger) and checks its
// chain: every line after the first must carry the hash of the line before it. A ledger of
// an earlier build (no links) may be continued by chained lines, never the other way
// round, and its last line must end with a newline. It returns the entries, the chain hash
// of each entry's line (aligned with the entries) and the chain state after the last line,
// from which writing continues.
func ReadLedgerChain(b []byte) ([]Entry, []uint64, LedgerChain, error) {
	var c LedgerChain
	es, err := ParseLedger(bytes.NewReader(b))
	if err != nil {
		return nil, nil, c, err
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		return nil, nil, c, errors.New("last line is truncated")
	}
	hashes := make([]uint64, len(es))
	chained := false
	rest := b
	for k, e := range es {
		var line []byte
		for len(line) == 0 && len(rest) > 0 {
			i := bytes.IndexByte(rest, '\n')
			line, rest = rest[:i+1], rest[i+1:]
			if len(bytes.TrimSpace(line)) == 0 {
				line = nil
			}
		}
		if e.Prev != "" {
			if want := fmt.Sprintf("%016x", c.last); k == 0 || e.Prev != want {
				return nil, nil, c, fmt.Errorf("the line of entry %d does not chain to the line before it: lines were removed or changed", e.Seq)
			}
		} else if chained {
			return nil, nil, c, fmt.Errorf("the line of entry %d has no chain link after chained lines", e.Seq)
		}
		chained = chained || e.Prev != ""
		c.last = LineHash(line)
		hashes[k] = c.last
		c.seq = max(c.seq, e.Seq)
		c.lines++
	}
	return es, hashes, c, nil
}
