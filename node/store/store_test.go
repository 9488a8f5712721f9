package store

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/dpadmm/dpadmm/node/wire"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/walk"
)

// fullCheckpoint returns a checkpoint with every field set to a value that differs from
// its zero value, filled by reflection so that a field added to Checkpoint or Backup is
// covered without editing this test.
func fullCheckpoint() *Checkpoint {
	c := &Checkpoint{}
	seed := uint64(1)
	var fill func(v reflect.Value)
	fill = func(v reflect.Value) {
		seed++
		switch v.Kind() {
		case reflect.Struct:
			for i := 0; i < v.NumField(); i++ {
				fill(v.Field(i))
			}
		case reflect.Pointer:
			v.Set(reflect.New(v.Type().Elem()))
			fill(v.Elem())
		case reflect.Slice:
			v.Set(reflect.MakeSlice(v.Type(), 3, 3))
			for i := 0; i < 3; i++ {
				fill(v.Index(i))
			}
		case reflect.String:
			v.SetString(strings.Repeat("p", int(seed%7)+1))
		case reflect.Bool:
			v.SetBool(true)
		case reflect.Int:
			v.SetInt(int64(seed % wire.MaxDepth))
		case reflect.Uint64:
			v.SetUint(seed * 0x9e3779b97f4a7c15)
		case reflect.Uint8:
			v.SetUint(seed % 251)
		case reflect.Float64:
			v.SetFloat(float64(seed) / 3)
		default:
			panic("fullCheckpoint: field kind " + v.Kind().String())
		}
	}
	fill(reflect.ValueOf(c).Elem())
	return c
}

func TestCheckpointBinaryRoundTrip(t *testing.T) {
	c := fullCheckpoint()
	b, next := appendCheckpoint(nil, c, nil)
	got, err := decodeCheckpointBinary(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, c) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, c)
	}
	// Every truncation and a trailing byte are refused, never a panic.
	for i := 0; i < len(b); i++ {
		if _, err := decodeCheckpointBinary(b[:i], nil); err == nil {
			t.Fatalf("truncated to %d of %d bytes: no error", i, len(b))
		}
	}
	if _, err := decodeCheckpointBinary(append(b, 0), nil); err == nil {
		t.Fatal("trailing byte: no error")
	}
	// Records of earlier builds still decode: 0x03, without held (one byte when empty),
	// and 0x02, without the rules' memory either (13 bytes when empty).
	v3 := *c
	v3.Held = nil
	b3, _ := appendCheckpoint(nil, &v3, nil)
	b3 = append([]byte{ckBinaryV3}, b3[1:len(b3)-1]...)
	if got, err := decodeCheckpointBinary(b3, nil); err != nil || !reflect.DeepEqual(got, &v3) {
		t.Fatalf("record of an earlier build (0x03): %v\n got %+v\nwant %+v", err, got, &v3)
	}
	old := v3
	old.Used, old.MaxHop, old.Raises, old.Strikes, old.Downs = nil, 0, nil, nil, 0
	ob, _ := appendCheckpoint(nil, &old, nil)
	ob = append([]byte{ckBinaryV2}, ob[1:len(ob)-14]...)
	if got, err := decodeCheckpointBinary(ob, nil); err != nil || !reflect.DeepEqual(got, &old) {
		t.Fatalf("record of an earlier build (0x02): %v\n got %+v\nwant %+v", err, got, &old)
	}
	// The next record refers to the tokens and u of this one: the backups move on by one
	// (the oldest goes, a new one comes and becomes Out), u is unchanged except in one
	// case where it changes only in the sign of a zero (bits count, not ==).
	tab := (&ckTable{}).next(c)
	if !reflect.DeepEqual(next, tab) {
		t.Fatalf("table of the encoder %+v, of the decoder %+v", next, tab)
	}
	for _, negZero := range []bool{false, true} {
		d := fullCheckpoint()
		d.Hop++
		d.Backups = append(d.Backups[1:], Backup{Token: []byte("a new token"), To: "q", Dist: 1})
		d.Out = bytes.Clone(d.Backups[len(d.Backups)-1].Token)
		if negZero {
			d.U[0] = math.Copysign(0, -1)
			c.U[0] = 0
			tab = (&ckTable{}).next(c)
		}
		db, dnext := appendCheckpoint(nil, d, &tab)
		got, err := decodeCheckpointBinary(db, &tab)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, d) || math.Signbit(got.U[0]) != math.Signbit(d.U[0]) {
			t.Fatalf("record with references:\n got %+v\nwant %+v", got, d)
		}
		if want := tab.next(got); !reflect.DeepEqual(dnext, want) {
			t.Fatalf("table of the encoder %+v, of the decoder %+v", dnext, want)
		}
		// A backup kept unchanged is a reference (flag, index: two bytes, the varints being
		// of one byte here) instead of its literal (flag, token as flag, length and bytes,
		// to and pred as length and bytes, two u64, acked, dist); the recent marks,
		// unchanged, are the three kept (keep, n = 0) instead of three literal marks; the u
		// reference saves its count and floats. Out is the new backup's token: a reference
		// in both encodings.
		// The three uses of evidence, unchanged, are kept too (each present, signer of one
		// byte, five u64 in a literal).
		full, _ := appendCheckpoint(nil, d, nil)
		saved := 3*24 + 3*42
		for _, k := range d.Backups[:len(d.Backups)-1] {
			saved += 1 + (1 + 1 + len(k.Token)) + (1 + len(k.To)) + (1 + len(k.Pred)) + 16 + 1 + 1 - 2
		}
		if !negZero {
			saved += 1 + 8*len(d.U)
		}
		if len(full)-len(db) != saved {
			t.Fatalf("record with references of %d bytes, full %d: want %d bytes fewer", len(db), len(full), saved)
		}
		for i := 0; i < len(db); i++ {
			if _, err := decodeCheckpointBinary(db[:i], &tab); err == nil {
				t.Fatalf("record with references truncated to %d of %d bytes: no error", i, len(db))
			}
		}
		// Without the previous record the references do not resolve.
		if _, err := decodeCheckpointBinary(db, nil); err == nil {
			t.Fatal("references without a previous record: no error")
		}
	}
}

func TestCheckpointJournal(t *testing.T) {
	dir := t.TempDir()
	st, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// The ledger of the 3 noisy updates the checkpoint counts (a checkpoint counting more
	// than its ledger holds is refused).
	for h := uint64(1); h <= 3; h++ {
		if err := st.AppendLedger([]privacy.Entry{{Node: "2", Run: "r", Hop: h, Mechanism: privacy.MechGaussian, Sensitivity: 1, Sigma: 1, Clip: 1, Lambda: 0.5, Recipient: "1"}}); err != nil {
			t.Fatal(err)
		}
	}
	// The first format is still read, and replaced by the journal at the first save.
	old := []byte(`{"version":1,"run":"r","node":2,"updates":3,"u":[0.5],"epoch":0,"hop":7}`)
	if err := os.WriteFile(filepath.Join(dir, CheckpointFile), old, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := st.LoadCheckpoint()
	if err != nil || c.Run != "r" || c.Node != 2 || c.Updates != 3 || c.Hop != 7 || len(c.U) != 1 || c.U[0] != 0.5 {
		t.Fatalf("checkpoint.json: %+v, %v", c, err)
	}
	var sizes []int64
	for hop := uint64(8); hop < 12; hop++ {
		c.Hop = hop
		if err := st.SaveCheckpoint(c); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(filepath.Join(dir, CheckpointLog))
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, fi.Size())
	}
	if _, err := os.Stat(filepath.Join(dir, CheckpointFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("checkpoint.json still there after a save: %v", err)
	}
	// Appended: the first record is whole, the next ones refer to u (unchanged), so each
	// is 1+8*len(u) bytes shorter; all of them have the same size.
	first, delta := sizes[0], sizes[1]-sizes[0]
	if sizes[2]-sizes[1] != delta || sizes[3]-sizes[2] != delta || first-delta != int64(1+8*len(c.U)) {
		t.Fatalf("journal sizes %v: want a whole record then records %d bytes shorter", sizes, 1+8*len(c.U))
	}
	if c, err := st.LoadCheckpoint(); err != nil || c.Hop != 11 || len(c.U) != 1 || c.U[0] != 0.5 {
		t.Fatalf("last record: %+v, %v", c, err)
	}
	p := filepath.Join(dir, CheckpointLog)
	full, _ := os.ReadFile(p)
	// A torn last record (a crash during the append) leaves the previous checkpoint.
	for _, cut := range []int64{1, 3, RecordHeader, RecordHeader + 5, delta - 1} {
		os.WriteFile(p, full[:sizes[2]+cut], 0o600)
		if c, err := st.LoadCheckpoint(); err != nil || c.Hop != 10 || len(c.U) != 1 {
			t.Fatalf("torn last record (%d bytes): %+v, %v", cut, c, err)
		}
	}
	// Zeros where the file grew before the record's data reached the disk: skipped too;
	// zeros followed by a record are corruption.
	for _, z := range []int{1, RecordHeader, int(delta) + 7} {
		os.WriteFile(p, append(bytes.Clone(full[:sizes[2]]), make([]byte, z)...), 0o600)
		if c, err := st.LoadCheckpoint(); err != nil || c.Hop != 10 {
			t.Fatalf("zero tail of %d bytes: %+v, %v", z, c, err)
		}
	}
	os.WriteFile(p, append(append(bytes.Clone(full[:sizes[1]]), make([]byte, 20)...), full[sizes[1]:]...), 0o600)
	if _, err := st.LoadCheckpoint(); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("zeros between records: %v", err)
	}
	// A damaged record followed by others, a damaged only record, a record that refers
	// to a missing previous one, or another file: errors.
	bad := bytes.Clone(full)
	bad[first+RecordHeader+2] ^= 0xff
	os.WriteFile(p, bad, 0o600)
	if _, err := st.LoadCheckpoint(); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("damaged middle record: %v", err)
	}
	os.WriteFile(p, bad[first:first+delta], 0o600)
	if _, err := st.LoadCheckpoint(); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("damaged only record: %v", err)
	}
	os.WriteFile(p, full[first:first+delta], 0o600)
	if _, err := st.LoadCheckpoint(); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("record without its previous one: %v", err)
	}
	os.WriteFile(p, []byte(`{"version":1}`), 0o600)
	if _, err := st.LoadCheckpoint(); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("not a journal: %v", err)
	}
	bad = bytes.Clone(full[:first])
	bad[4] = journalVersion + 1
	os.WriteFile(p, bad, 0o600)
	if _, err := st.LoadCheckpoint(); err == nil || !strings.Contains(err.Error(), "version") {
		t.Fatalf("unknown record version: %v", err)
	}
	// A JSON record is read like checkpoint.json.
	js := append(make([]byte, RecordHeader), old...)
	frameRecord(js)
	os.WriteFile(p, js, 0o600)
	if c, err := st.LoadCheckpoint(); err != nil || c.Hop != 7 {
		t.Fatalf("JSON record: %+v, %v", c, err)
	}
	// A corrupt checkpoint.json still gives a clear error.
	os.Remove(p)
	os.WriteFile(filepath.Join(dir, CheckpointFile), []byte("{"), 0o600)
	if _, err := st.LoadCheckpoint(); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("corrupt checkpoint.json: %v", err)
	}
}

// TestCheckpointJournalCompacts: a journal past journalCompact is rewritten with its
// last record, and the store then goes on appending to the new file.
func TestCheckpointJournalCompacts(t *testing.T) {
	dir := t.TempDir()
	st, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c := &Checkpoint{Run: "r", U: make([]float64, 4000)} // records of about 32 KB (u changes)
	for hop := uint64(1); hop <= 100; hop++ {
		c.Hop, c.U[0] = hop, float64(hop)
		if err := st.SaveCheckpoint(c); err != nil {
			t.Fatal(err)
		}
	}
	fi, err := os.Stat(filepath.Join(dir, CheckpointLog))
	if err != nil || fi.Size() > journalCompact {
		t.Fatalf("journal of %v bytes after 100 saves of ~32 KB, want at most %d: %v", fi.Size(), journalCompact, err)
	}
	st.Close()
	again, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if got, err := again.LoadCheckpoint(); err != nil || got.Hop != 100 || len(got.U) != 4000 || got.U[0] != 100 {
		t.Fatalf("after compaction: hop %v, %v", got, err)
	}
}

func TestInboxJournal(t *testing.T) {
	dir := t.TempDir()
	st, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.LoadInbox(); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("empty store: %v", err)
	}
	// The first format (inbox.token alone) is read.
	os.WriteFile(filepath.Join(dir, InboxFile), []byte("first"), 0o600)
	if b, err := st.LoadInbox(); err != nil || string(b) != "first" {
		t.Fatalf("inbox.token: %q, %v", b, err)
	}
	for _, tok := range []string{"a longer token", "short"} {
		if err := st.SaveInbox([]byte(tok)); err != nil {
			t.Fatal(err)
		}
		if b, err := st.LoadInbox(); err != nil || string(b) != tok {
			t.Fatalf("inbox: %q, %v; want %q", b, err, tok)
		}
	}
	// The first save removed the file of the first format; one written again (a stale
	// copy) does not override the journal.
	if _, err := os.Stat(filepath.Join(dir, InboxFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("inbox.token still there after a save: %v", err)
	}
	os.WriteFile(filepath.Join(dir, InboxFile), []byte("stale"), 0o600)
	if b, err := st.LoadInbox(); err != nil || string(b) != "short" {
		t.Fatalf("inbox with a stale inbox.token: %q, %v", b, err)
	}
}

// TestOpenRefusesRunStateWithoutLedger: a data directory that holds any run state (a
// start message, a checkpoint, an inbox, a final model, an R-ADMM journal) but no ledger
// is refused with ErrLedger naming the files and saying how to recover: the releases the
// ledger recorded would otherwise no longer be counted. A fresh directory, or one with
// only its identity key, opens.
func TestOpenRefusesRunStateWithoutLedger(t *testing.T) {
	for _, f := range RunStateFiles {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, f), []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Open(dir)
		if !errors.Is(err, ErrLedger) || !strings.Contains(err.Error(), f) || !strings.Contains(err.Error(), "To recover") {
			t.Errorf("%s without a ledger: %v", f, err)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, IdentityFile), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir)
	if err != nil {
		t.Fatalf("identity key only: %v", err)
	}
	s.Close()
	s, err = Open(t.TempDir())
	if err != nil {
		t.Fatalf("fresh directory: %v", err)
	}
	s.Close()
}

// TestUsedKeepShared: the record of uses compares the same whether it shares the
// machine's memory with the previous checkpoint's record (the fast path) or is a copy
// (compared element by element), through drops at the front and appends that reallocate.
func TestUsedKeepShared(t *testing.T) {
	var u walk.EvidenceUse
	u.Max = 8
	rec := func(i int) (walk.Evidence, walk.TokenID) {
		return walk.Evidence{Present: true, Signer: i % 3, Epoch: 1, Hop: uint64(i)}, walk.TokenID{Epoch: 1, Hop: uint64(i) + 1, Digest: uint64(i) * 7}
	}
	prev := u.Records()
	for i := range 40 {
		for range i % 3 {
			u.Use(rec(i*3 + i%3))
		}
		cur := u.Records()
		shared := usedKeep(prev, cur)
		copied := usedKeep(slices.Clone(prev), slices.Clone(cur))
		if shared != copied {
			t.Fatalf("step %d: %d kept on shared memory, %d on copies", i, shared, copied)
		}
		if len(prev) > 0 && len(cur) > 0 && shared == 0 && slices.Contains(prev, cur[0]) {
			t.Fatalf("step %d: nothing kept though the record only grew", i)
		}
		prev = cur
	}
	// A record that is not the previous one's continuation keeps nothing.
	other := []walk.EvidenceRecord{{ID: walk.TokenID{Hop: 99}}}
	if k := usedKeep(prev, other); k != 0 {
		t.Fatalf("unrelated record: %d kept", k)
	}
}
