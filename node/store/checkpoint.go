package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/dpadmm/dpadmm/node/wire"
	"github.com/dpadmm/dpadmm/walk"
)

// ckBinary starts a checkpoint record in the binary encoding (a JSON record starts with
// '{'; a record that carries ledger lines starts with them, see groupcommit.go). The
// encoding, little-endian, with uvarint lengths and counts:
//
//	0x04 | version uvarint | run str | node uvarint | updates uvarint |
//	u: 0, n, n float64 | or 1 (the u of the previous record) |
//	epoch u64 | hop u64 | hop_source bytes | noise_source bytes |
//	fence: 0, or 1 and epoch u64 hop u64 digest u64 | max_epoch u64 |
//	recent: keep, n, n marks |
//	backups: n, each 0 and tok | to str | pred str | pred_epoch u64 | pred_hop u64 |
//	  acked u8 | dist uvarint, or 1 and k (the k-th backup of the previous record) |
//	out tok | out_to str | ledger_seq u64 | ledger_hash u64 |
//	max_hop u64 | downs uvarint | raises ints | strikes ints |
//	used: keep uvarint, n uvarint, n uses | held bytes
//
// where str and bytes are a uvarint length and the bytes. tok is 0 and bytes (a literal
// token) or 1 and k: the k-th token of the table made of the previous record's tokens
// (its out, then its backups' tokens, as decoded) followed by the tokens of this record
// decoded so far (a backup given by reference adds its token). recent is the last keep
// marks of the previous record's recent followed by n marks. A backup or a token is thus
// written once and referred to while it stays in custody unchanged, and a record's size
// does not grow with the number of backups held; the first record of a journal has no
// previous record (nor references). Records of earlier builds start with 0x03 and end
// at used, or with 0x02 and end at ledger_hash, without the hostile-member rules' memory
// that follows it; ints is a uvarint count and that many
// uvarints; used is the first keep uses of the previous record's that remain (its last
// keep) followed by n uses, each present u8 | signer uvarint | epoch u64 | hop u64 |
// token epoch u64 | token hop u64 | token digest u64. held is the token the record's step
// handed to the node itself (empty: none).
const ckBinary = 0x04

// ckBinaryV3 and ckBinaryV2 start binary records of earlier builds: without held, and
// without the rules' memory either.
const (
	ckBinaryV3 = 0x03
	ckBinaryV2 = 0x02
)

// isBinaryCheckpoint reports whether b is a record of a binary encoding.
func isBinaryCheckpoint(b []byte) bool {
	return len(b) > 0 && (b[0] == ckBinary || b[0] == ckBinaryV3 || b[0] == ckBinaryV2)
}

// ckTable holds what a checkpoint record may refer to in the previous one: its tokens
// (out, then the backups'), u, backups and recent marks.
type ckTable struct {
	tok     [][]byte
	u       []float64
	backups []Backup
	recent  []Mark
	used    []walk.EvidenceRecord
	ok      bool     // a previous record exists
	scratch [][]byte // appendCheckpoint's token table, kept for its storage
}

// next returns the table for the record after c (the decoder's side; the encoder builds
// it as it goes). Its tokens are private copies, shared with t where equal.
func (t *ckTable) next(c *Checkpoint) ckTable {
	nt := ckTable{ok: true, u: slices.Clone(c.U), recent: slices.Clone(c.Recent), used: c.Used}
	add := func(b []byte) []byte {
		for _, tab := range [][][]byte{t.tok, nt.tok} {
			for _, o := range tab {
				if len(b) > 0 && bytes.Equal(o, b) {
					nt.tok = append(nt.tok, o)
					return o
				}
			}
		}
		nt.tok = append(nt.tok, bytes.Clone(b))
		return nt.tok[len(nt.tok)-1]
	}
	add(c.Out)
	for _, b := range c.Backups {
		b.Token = add(b.Token)
		nt.backups = append(nt.backups, b)
	}
	return nt
}

// EqualBits reports whether a and b hold the same float64 bit patterns.
func EqualBits(a, b []float64) bool {
	if len(a) != len(b) || (a == nil) != (b == nil) {
		return false
	}
	for i := range a {
		if math.Float64bits(a[i]) != math.Float64bits(b[i]) {
			return false
		}
	}
	return true
}

// sameBackup reports whether a and b are the same backup in the same state.
func sameBackup(a, b *Backup) bool {
	return a.PredHop == b.PredHop && a.PredEpoch == b.PredEpoch && a.Dist == b.Dist && a.Acked == b.Acked &&
		a.To == b.To && a.Pred == b.Pred && bytes.Equal(a.Token, b.Token) && (a.Token == nil) == (b.Token == nil)
}

// recentKeep returns the largest k such that the last k marks of prev are the first k
// of cur.
func recentKeep(prev, cur []Mark) int {
	for k := min(len(prev), len(cur)); k > 0; k-- {
		if slices.Equal(prev[len(prev)-k:], cur[:k]) {
			return k
		}
	}
	return 0
}

// usedKeep returns the largest k such that the last k uses of prev are the first k of
// cur (a record of uses only drops its oldest and appends).
//
// prev is the record the previous checkpoint held, kept as given: the machine's own
// record (walk.EvidenceUse.Records), whose elements it never modifies. When cur starts
// inside prev's memory (the usual case: a few uses dropped from the front, some
// appended), the common part is the same memory and compares equal without being read;
// comparing it element by element, up to walk.MaxEvidenceKept records of 64 bytes at
// every hop, cost more than the rest of the record. Otherwise (the record was copied or
// reallocated) it is compared.
func usedKeep(prev, cur []walk.EvidenceRecord) int {
	if len(cur) == 0 {
		return 0
	}
	for d := range prev {
		if &prev[d] == &cur[0] {
			if k := len(prev) - d; k <= len(cur) {
				return k
			}
			break
		}
	}
	x := slices.Index(prev, cur[0])
	if x < 0 {
		return 0
	}
	k := len(prev) - x
	if k > len(cur) || !slices.Equal(prev[x:], cur[:k]) {
		return 0
	}
	return k
}

// appendCheckpoint appends the binary encoding of c to b, with references to prev (the
// table of the previous record; nil or empty for the first record of a journal), and
// returns it with the table of this record (what prev.next(c) returns, without comparing
// again). The table refers to c's tokens: the caller must not modify their bytes.
func appendCheckpoint(b []byte, c *Checkpoint, prev *ckTable) ([]byte, ckTable) {
	var next ckTable
	b = appendCheckpointInto(b, c, prev, &next)
	next.scratch = nil
	return b, next
}

// appendCheckpointInto is appendCheckpoint writing the table of this record to next,
// whose storage it reuses (next must share none with prev: a store alternates two).
func appendCheckpointInto(b []byte, c *Checkpoint, prev, next *ckTable) []byte {
	if prev == nil || !prev.ok {
		prev = &ckTable{}
	}
	str := func(b []byte, s string) []byte { return append(binary.AppendUvarint(b, uint64(len(s))), s...) }
	byt := func(b, s []byte) []byte { return append(binary.AppendUvarint(b, uint64(len(s))), s...) }
	mark := func(b []byte, m Mark) []byte {
		b = binary.LittleEndian.AppendUint64(b, m.Epoch)
		b = binary.LittleEndian.AppendUint64(b, m.Hop)
		return binary.LittleEndian.AppendUint64(b, m.Digest)
	}
	// tab holds the previous record's tokens, then this one's. Encoded tokens are never
	// modified once made (background senders hold them too), so the table keeps the
	// caller's slices: a token still in custody is then the same slice as its entry, and
	// comparing them costs nothing.
	tab := append(next.scratch[:0], prev.tok...)
	tok := func(b, t []byte) []byte {
		if len(t) > 0 {
			for k, o := range tab {
				if bytes.Equal(o, t) {
					tab = append(tab, o)
					return binary.AppendUvarint(append(b, 1), uint64(k))
				}
			}
		}
		tab = append(tab, t)
		return byt(append(b, 0), t)
	}
	next.ok, next.u = true, nil
	next.recent = append(next.recent[:0], c.Recent...)
	next.backups = next.backups[:0]
	b = append(b, ckBinary)
	b = binary.AppendUvarint(b, uint64(c.Version))
	b = str(b, c.Run)
	b = binary.AppendUvarint(b, uint64(c.Node))
	b = binary.AppendUvarint(b, uint64(c.Updates))
	b = appendCheckpointU(b, c.U, prev, next)
	b = binary.LittleEndian.AppendUint64(b, c.Epoch)
	b = binary.LittleEndian.AppendUint64(b, c.Hop)
	b = byt(b, c.HopSource)
	b = byt(b, c.NoiseSource)
	if c.Fence == nil {
		b = append(b, 0)
	} else {
		b = mark(append(b, 1), *c.Fence)
	}
	b = binary.LittleEndian.AppendUint64(b, c.MaxEpoch)
	keep := recentKeep(prev.recent, c.Recent)
	b = binary.AppendUvarint(b, uint64(keep))
	b = binary.AppendUvarint(b, uint64(len(c.Recent)-keep))
	for _, m := range c.Recent[keep:] {
		b = mark(b, m)
	}
	b = binary.AppendUvarint(b, uint64(len(c.Backups)))
	j := 0 // the previous record's backups are searched from the last one referred to
	for i := range c.Backups {
		k := &c.Backups[i]
		ref := -1
		for x := j; x < len(prev.backups); x++ {
			if sameBackup(&prev.backups[x], k) {
				ref = x
				break
			}
		}
		if ref >= 0 {
			j = ref + 1
			b = binary.AppendUvarint(append(b, 1), uint64(ref))
			tab = append(tab, prev.backups[ref].Token)
			next.backups = append(next.backups, prev.backups[ref])
			continue
		}
		b = tok(append(b, 0), k.Token)
		nb := *k
		nb.Token = tab[len(tab)-1]
		next.backups = append(next.backups, nb)
		b = appendBackupFields(b, k)
	}
	b = tok(b, c.Out)
	// The table lists out first, then the backups' tokens: this record wrote them in the
	// other order.
	cur := tab[len(tab)-len(c.Backups)-1:]
	next.tok = append(append(next.tok[:0], cur[len(cur)-1]), cur[:len(cur)-1]...)
	next.scratch = tab
	b = str(b, c.OutTo)
	b = binary.LittleEndian.AppendUint64(b, c.LedgerSeq)
	b = binary.LittleEndian.AppendUint64(b, c.LedgerHash)
	b = appendRules(b, c, prev, next)
	return byt(b, c.Held)
}

// appendRules appends the section of the hostile-member rules' memory.
func appendRules(b []byte, c *Checkpoint, prev, next *ckTable) []byte {
	ints := func(b []byte, v []int) []byte {
		b = binary.AppendUvarint(b, uint64(len(v)))
		for _, x := range v {
			b = binary.AppendUvarint(b, uint64(max(x, 0)))
		}
		return b
	}
	b = binary.LittleEndian.AppendUint64(b, c.MaxHop)
	b = binary.AppendUvarint(b, uint64(max(c.Downs, 0)))
	b = ints(b, c.Raises)
	b = ints(b, c.Strikes)
	keep := usedKeep(prev.used, c.Used)
	b = binary.AppendUvarint(b, uint64(keep))
	b = binary.AppendUvarint(b, uint64(len(c.Used)-keep))
	for _, u := range c.Used[keep:] {
		present := byte(0)
		if u.Ev.Present {
			present = 1
		}
		b = binary.AppendUvarint(append(b, present), uint64(max(u.Ev.Signer, 0)))
		for _, v := range []uint64{u.Ev.Epoch, u.Ev.Hop, u.ID.Epoch, u.ID.Hop, u.ID.Digest} {
			b = binary.LittleEndian.AppendUint64(b, v)
		}
	}
	next.used = c.Used
	return b
}

// appendCheckpointU appends u_i: a 1 when it equals the previous record's (bit for bit),
// else a 0, its length and its values.
func appendCheckpointU(b []byte, u []float64, prev, next *ckTable) []byte {
	if prev.ok && EqualBits(prev.u, u) {
		next.u = prev.u
		return append(b, 1)
	}
	next.u = slices.Clone(u)
	b = binary.AppendUvarint(append(b, 0), uint64(len(u)))
	for _, v := range u {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	return b
}

// appendBackupFields appends the fields of a backup that follow its token.
func appendBackupFields(b []byte, k *Backup) []byte {
	str := func(b []byte, s string) []byte { return append(binary.AppendUvarint(b, uint64(len(s))), s...) }
	b = str(b, k.To)
	b = str(b, k.Pred)
	b = binary.LittleEndian.AppendUint64(b, k.PredEpoch)
	b = binary.LittleEndian.AppendUint64(b, k.PredHop)
	acked := byte(0)
	if k.Acked {
		acked = 1
	}
	b = append(b, acked)
	return binary.AppendUvarint(b, uint64(k.Dist))
}

// ckReader reads the binary checkpoint encoding; the first error sticks.
type ckReader struct {
	b   []byte
	err error
}

func (r *ckReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: checkpoint %s", wire.ErrMalformed, what)
	}
	r.b = nil
}

func (r *ckReader) uvarint(what string, max uint64) uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 || v > max {
		r.fail(what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *ckReader) u64(what string) uint64 {
	if len(r.b) < 8 {
		r.fail(what)
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (r *ckReader) bytes(what string) []byte {
	n := r.uvarint(what, uint64(len(r.b)))
	if n > uint64(len(r.b)) {
		r.fail(what)
	}
	if r.err != nil || n == 0 {
		return nil
	}
	v := append([]byte(nil), r.b[:n]...)
	r.b = r.b[n:]
	return v
}

func (r *ckReader) mark(what string) Mark {
	return Mark{Epoch: r.u64(what), Hop: r.u64(what), Digest: r.u64(what)}
}

// decodeRules reads the section of the hostile-member rules' memory (appendRules).
func decodeRules(r *ckReader, c *Checkpoint, prev *ckTable) {
	const maxInt = uint64(math.MaxInt32)
	ints := func(what string) []int {
		n := r.uvarint(what, uint64(len(r.b)))
		if n == 0 || r.err != nil {
			return nil
		}
		v := make([]int, n)
		for i := range v {
			v[i] = int(r.uvarint(what, maxInt))
		}
		return v
	}
	c.MaxHop = r.u64("max hop")
	c.Downs = int(r.uvarint("downs", maxInt))
	c.Raises = ints("raises")
	c.Strikes = ints("strikes")
	keep := r.uvarint("used", uint64(len(prev.used)))
	n := r.uvarint("used", uint64(len(r.b))/42)
	if keep+n == 0 || r.err != nil {
		return
	}
	c.Used = make([]walk.EvidenceRecord, 0, keep+n)
	c.Used = append(c.Used, prev.used[uint64(len(prev.used))-keep:]...)
	for range n {
		var u walk.EvidenceRecord
		u.Ev.Present = r.uvarint("used", 1) == 1
		u.Ev.Signer = int(r.uvarint("used signer", maxInt))
		u.Ev.Epoch, u.Ev.Hop = r.u64("used"), r.u64("used")
		u.ID = walk.TokenID{Epoch: r.u64("used"), Hop: r.u64("used"), Digest: r.u64("used")}
		c.Used = append(c.Used, u)
	}
}

// decodeCheckpointBinary decodes the binary encoding (appendCheckpoint) of a checkpoint
// whose previous record has the table prev (nil or empty for the first record).
func decodeCheckpointBinary(b []byte, prev *ckTable) (*Checkpoint, error) {
	if !isBinaryCheckpoint(b) {
		return nil, fmt.Errorf("%w: not a binary checkpoint", wire.ErrMalformed)
	}
	if prev == nil || !prev.ok {
		prev = &ckTable{}
	}
	tab := slices.Clone(prev.tok)
	r := &ckReader{b: b[1:]}
	tok := func(what string) []byte {
		var t []byte
		switch r.uvarint(what, 1) {
		case 0:
			t = r.bytes(what)
		case 1:
			k := r.uvarint(what, uint64(len(tab)))
			if k >= uint64(len(tab)) {
				r.fail(what + " (a reference to no token)")
				return nil
			}
			t = tab[k]
		}
		tab = append(tab, t)
		return t
	}
	const maxInt = uint64(math.MaxInt32)
	c := &Checkpoint{}
	c.Version = int(r.uvarint("version", maxInt))
	c.Run = string(r.bytes("run"))
	c.Node = int(r.uvarint("node", maxInt))
	c.Updates = int(r.uvarint("updates", maxInt))
	switch r.uvarint("u", 1) {
	case 0:
		if n := r.uvarint("u", uint64(len(r.b))/8); n > 0 {
			c.U = make([]float64, n)
			for i := range c.U {
				c.U[i] = math.Float64frombits(r.u64("u"))
			}
		}
	case 1:
		if !prev.ok {
			r.fail("u (a reference to no previous record)")
		} else {
			c.U = slices.Clone(prev.u)
		}
	}
	c.Epoch, c.Hop = r.u64("epoch"), r.u64("hop")
	c.HopSource, c.NoiseSource = r.bytes("hop_source"), r.bytes("noise_source")
	switch f := r.uvarint("fence", 1); {
	case r.err != nil:
	case f == 1:
		m := r.mark("fence")
		c.Fence = &m
	}
	c.MaxEpoch = r.u64("max_epoch")
	keep := r.uvarint("recent", uint64(len(prev.recent)))
	if n := r.uvarint("recent", uint64(len(r.b))/24); keep+n > 0 && r.err == nil {
		c.Recent = make([]Mark, 0, keep+n)
		c.Recent = append(c.Recent, prev.recent[uint64(len(prev.recent))-keep:]...)
		for range n {
			c.Recent = append(c.Recent, r.mark("recent"))
		}
	}
	if n := r.uvarint("backups", uint64(len(r.b))/2); n > 0 {
		c.Backups = make([]Backup, n)
		for i := range c.Backups {
			k := &c.Backups[i]
			if r.uvarint("backup", 1) == 1 {
				x := r.uvarint("backup reference", uint64(len(prev.backups)))
				if x >= uint64(len(prev.backups)) {
					r.fail("backup (a reference to no backup)")
					break
				}
				*k = prev.backups[x]
				tab = append(tab, k.Token)
				continue
			}
			k.Token = tok("backup token")
			k.To, k.Pred = string(r.bytes("backup to")), string(r.bytes("backup pred"))
			k.PredEpoch, k.PredHop = r.u64("backup pred_epoch"), r.u64("backup pred_hop")
			k.Acked = r.uvarint("backup acked", 1) == 1
			k.Dist = int(r.uvarint("backup dist", wire.MaxDepth))
		}
	}
	c.Out = tok("out")
	c.OutTo = string(r.bytes("out_to"))
	c.LedgerSeq, c.LedgerHash = r.u64("ledger seq"), r.u64("ledger hash")
	if b[0] != ckBinaryV2 && r.err == nil {
		decodeRules(r, c, prev)
	}
	if b[0] == ckBinary && r.err == nil {
		c.Held = r.bytes("held")
	}
	if r.err != nil {
		return nil, r.err
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("%w: checkpoint has %d trailing bytes", wire.ErrMalformed, len(r.b))
	}
	return c, nil
}
