package store

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzCheckpointLog: any bytes in checkpoint.log give a checkpoint or an error from
// LoadCheckpoint, never a panic; a checkpoint it returns encodes and decodes to itself;
// the bytes of a record that did not check are never returned as part of one. Inputs
// starting with 0xFF are a record's payload, framed before the load.
func FuzzCheckpointLog(f *testing.F) {
	c := fullCheckpoint()
	c.Version, c.LedgerSeq, c.LedgerHash = 1, 0, 0
	first, tab := appendCheckpoint(make([]byte, RecordHeader), c, nil)
	frameRecord(first)
	d := *c
	d.Hop++
	second, _ := appendCheckpoint(make([]byte, RecordHeader), &d, &tab)
	frameRecord(second)
	f.Add(first)
	f.Add(append(append([]byte(nil), first...), second...))
	f.Add(append(append([]byte(nil), first...), second[:RecordHeader+3]...))
	f.Add([]byte(RecordMagic))
	f.Add([]byte{})
	// A payload framed as a valid record (CRC and all), so that the mutations reach the
	// checkpoint decoder and not only the framing: the first byte 0xFF says so.
	f.Add(append([]byte{0xFF}, first[RecordHeader:]...))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 0 && b[0] == 0xFF {
			rec := append(make([]byte, RecordHeader), b[1:]...)
			frameRecord(rec)
			b = rec
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, CheckpointLog), b, 0o600); err != nil {
			t.Fatal(err)
		}
		// Without a ledger file a checkpoint that counts no update is accepted; the
		// ledger checks are TestLedgerIsTheTruth's.
		s := &Store{Dir: dir, NoSync: true}
		got, err := s.LoadCheckpoint()
		if err != nil || got == nil {
			return
		}
		if got.Updates != 0 || got.LedgerSeq != 0 {
			t.Fatalf("checkpoint counting %d updates after ledger entry %d accepted with an empty ledger", got.Updates, got.LedgerSeq)
		}
		enc, _ := appendCheckpoint(nil, got, nil)
		back, err := decodeCheckpointBinary(enc, nil)
		if err != nil {
			t.Fatalf("a loaded checkpoint does not decode after encoding: %v", err)
		}
		if !reflect.DeepEqual(normal(back), normal(got)) {
			t.Fatalf("round trip:\n%+v\n%+v", back, got)
		}
		if len(b) > 0 && !bytes.HasPrefix(b, []byte(RecordMagic)) {
			t.Fatal("a file that does not start with a record was read")
		}
	})
}

// normal returns a copy of c with empty slices as nil, the one difference an encoding
// round trip may make.
func normal(c *Checkpoint) Checkpoint {
	n := *c
	if len(n.U) == 0 {
		n.U = nil
	}
	if len(n.Recent) == 0 {
		n.Recent = nil
	}
	if len(n.Backups) == 0 {
		n.Backups = nil
	}
	for _, p := range []*[]byte{&n.Out, &n.HopSource, &n.NoiseSource} {
		if len(*p) == 0 {
			*p = nil
		}
	}
	return n
}
