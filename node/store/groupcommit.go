package store

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/dpadmm/dpadmm/privacy"
)

// Group commit. A release's ledger entry must be durable before the release is sent,
// and so must the checkpoint that holds it in custody. Written as two files, that is two
// fsyncs per release. SaveCheckpointLedger makes both durable with one: it writes the
// entries' lines to the ledger file without an fsync, and carries the same bytes, with
// their offset in the ledger file, at the head of the checkpoint record it appends and
// fsyncs:
//
//	'L' | offset uvarint | length uvarint | the ledger lines | the checkpoint encoding
//
// The lines are thus durable in the checkpoint journal whatever became of the ledger
// file's unsynced tail, and Open restores that tail from the journal before it reads the
// ledger (repairLedger). The journal drops its older records when it is rewritten (its
// first record of a process, and compaction): the ledger file is fsynced first, and that
// record carries no section, so every line a dropped record carried is durable in the
// ledger file itself.

// ckLedgerTag starts a checkpoint record that carries ledger lines.
const ckLedgerTag = 'L'

// appendLedgerSection appends the ledger section of a record to b.
func appendLedgerSection(b []byte, off int64, lines []byte) []byte {
	b = append(b, ckLedgerTag)
	b = binary.AppendUvarint(b, uint64(off))
	b = binary.AppendUvarint(b, uint64(len(lines)))
	return append(b, lines...)
}

// ledgerSection is the ledger lines a checkpoint record carries.
type ledgerSection struct {
	off   int64
	lines []byte
}

// cutLedgerSection splits a record payload into its ledger section and the checkpoint
// encoding; ok is false for a record without one.
func cutLedgerSection(b []byte) (ledgerSection, []byte, bool, error) {
	if len(b) == 0 || b[0] != ckLedgerTag {
		return ledgerSection{}, b, false, nil
	}
	r := b[1:]
	off, k := binary.Uvarint(r)
	if k <= 0 || off > 1<<62 {
		return ledgerSection{}, nil, false, errors.New("ledger section: bad offset")
	}
	r = r[k:]
	n, k := binary.Uvarint(r)
	if k <= 0 || n > uint64(len(r)-k) {
		return ledgerSection{}, nil, false, errors.New("ledger section: bad length")
	}
	r = r[k:]
	return ledgerSection{off: int64(off), lines: r[:n]}, r[n:], true, nil
}

// SaveCheckpointLedger appends the ledger entries es and saves the checkpoint c with a
// single fsync (see Group commit above): when it returns, both are durable. With no
// entries it is SaveCheckpoint. After a failure the ledger file may hold the lines
// without their record: the store refuses every later ledger write, and the caller must
// stop (the next Open reads the file as it is: at worst an entry for a release never
// sent).
func (s *Store) SaveCheckpointLedger(c *Checkpoint, es []privacy.Entry) error {
	if len(es) == 0 {
		return s.SaveCheckpoint(c)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	lines, err := s.writeLedger(es)
	if err != nil {
		return err
	}
	if err := s.saveCheckpoint(c, &lines); err != nil {
		s.failed = err
		return err
	}
	s.unsynced = true
	s.commitLedger(lines)
	return nil
}

// ledgerSections returns the ledger sections of the checkpoint journal's complete
// records, in order: those before a record that does not check too (the journal's
// corruption is LoadCheckpoint's to report; the lines its good records hold are restored
// all the same).
func (s *Store) ledgerSections() []ledgerSection {
	var secs []ledgerSection
	s.records(CheckpointLog, func(r []byte) error {
		sec, _, ok, err := cutLedgerSection(r)
		if ok {
			secs = append(secs, sec)
		}
		return err
	})
	return secs
}

// repairLedger restores, from the checkpoint journal's ledger sections, the lines of the
// ledger b that never reached its disk (a crash after the record's fsync, before the
// file's pages were written) and reports whether it changed b. Where the ledger has a
// section's bytes they must be the section's or zero (a file whose length reached the
// disk before its data), byte for byte; a shorter ledger may end inside a section.
// Anything else means lines were removed or rewritten: ErrLedger. (A ledger line is JSON
// and never holds a zero byte.)
func repairLedger(b []byte, secs []ledgerSection) ([]byte, bool, error) {
	repaired := false
	for _, sec := range secs {
		have := int64(len(b))
		if sec.off > have {
			return nil, false, fmt.Errorf("%w: the ledger ends at byte %d but the checkpoint journal holds lines written from byte %d: ledger lines were removed",
				ErrLedger, have, sec.off)
		}
		end := sec.off + int64(len(sec.lines))
		over := b[sec.off:min(have, end)]
		for k, c := range over {
			if c != sec.lines[k] {
				if c != 0 {
					return nil, false, fmt.Errorf("%w: the ledger's bytes from %d differ from the lines the checkpoint journal holds for them: the ledger was rewritten",
						ErrLedger, sec.off)
				}
				over[k] = sec.lines[k]
				repaired = true
			}
		}
		if have < end {
			b = append(b, sec.lines[have-sec.off:]...)
			repaired = true
		}
	}
	return b, repaired, nil
}
