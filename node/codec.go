package node

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"

	"github.com/dpadmm/dpadmm/walk"
)

// WireVersion is the version byte of the token wire format.
const WireVersion = 1

// MaxRunName is the longest run name accepted on the wire, in bytes.
const MaxRunName = 128

// MaxDim is the largest model dimension accepted on the wire.
const MaxDim = 1 << 20

// tokenHeader is the fixed part of an encoded token: version(1) walk(8) epoch(8) hop(8)
// dim(4) runlen(1).
const tokenHeader = 1 + 8 + 8 + 8 + 4 + 1

// Wire errors. Reject verdicts wrap them.
var (
	ErrTooLarge  = errors.New("node: frame exceeds the size limit")
	ErrVersion   = errors.New("node: unknown wire version")
	ErrMalformed = errors.New("node: malformed token")
)

// TokenSize returns the encoded size of a token with the given run name and dimension.
func TokenSize(run string, dim int) int { return tokenHeader + len(run) + 16*dim }

// EncodeToken appends the binary encoding of t to dst:
//
//	version u8 | walk u64 | epoch u64 | hop u64 | dim u32 | runlen u8 | run | z[dim] f64 | zhat[dim] f64
//
// all integers and float64 bit patterns little-endian, so the vectors travel bit-exactly.
func EncodeToken(dst []byte, t walk.Token) ([]byte, error) {
	if len(t.Run) > MaxRunName {
		return dst, fmt.Errorf("node: run name longer than %d bytes", MaxRunName)
	}
	if len(t.Z) != len(t.Zhat) || len(t.Z) > MaxDim {
		return dst, fmt.Errorf("node: token vectors have lengths %d and %d", len(t.Z), len(t.Zhat))
	}
	dst = slices.Grow(dst, TokenSize(t.Run, len(t.Z)))
	dst = append(dst, WireVersion)
	dst = binary.LittleEndian.AppendUint64(dst, t.Walk)
	dst = binary.LittleEndian.AppendUint64(dst, t.Epoch)
	dst = binary.LittleEndian.AppendUint64(dst, t.Hop)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(t.Z)))
	dst = append(dst, byte(len(t.Run)))
	dst = append(dst, t.Run...)
	for _, v := range t.Z {
		dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(v))
	}
	for _, v := range t.Zhat {
		dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(v))
	}
	return dst, nil
}

// DecodeToken decodes a token. It checks the version and that the length matches the
// declared dimension before allocating, followed by nothing, or by well-formed evidence
// and signature (handoffsig.go, which checks them); it does not judge run, dimension or
// finiteness (see Validator).
func DecodeToken(b []byte) (walk.Token, error) {
	var t walk.Token
	if len(b) < 1 {
		return t, fmt.Errorf("%w: empty", ErrMalformed)
	}
	if b[0] != WireVersion {
		return t, fmt.Errorf("%w %d (want %d)", ErrVersion, b[0], WireVersion)
	}
	if len(b) < tokenHeader {
		return t, fmt.Errorf("%w: %d bytes, header needs %d", ErrMalformed, len(b), tokenHeader)
	}
	t.Walk = binary.LittleEndian.Uint64(b[1:])
	t.Epoch = binary.LittleEndian.Uint64(b[9:])
	t.Hop = binary.LittleEndian.Uint64(b[17:])
	dim := binary.LittleEndian.Uint32(b[25:])
	rl := int(b[29])
	if dim > MaxDim {
		return t, fmt.Errorf("%w: dimension %d over the limit %d", ErrMalformed, dim, MaxDim)
	}
	if rl > MaxRunName {
		return t, fmt.Errorf("%w: run name of %d bytes", ErrMalformed, rl)
	}
	want := tokenHeader + rl + 16*int(dim)
	if len(b) < want {
		return t, fmt.Errorf("%w: %d bytes, dimension %d needs %d", ErrMalformed, len(b), dim, want)
	}
	if len(b) > want {
		// A held token's evidence or a frame's evidence and signature (handoffsig.go).
		if _, err := parseCert(b[want:], false); err != nil {
			if _, err2 := parseCert(b[want:], true); err2 != nil {
				return t, fmt.Errorf("%w after a token of %d bytes: %w", ErrMalformed, want, err2)
			}
		}
	}
	p := tokenHeader
	t.Run = string(b[p : p+rl])
	p += rl
	vec := make([]float64, 2*int(dim))
	for k := range vec {
		vec[k] = math.Float64frombits(binary.LittleEndian.Uint64(b[p:]))
		p += 8
	}
	t.Z, t.Zhat = vec[:dim:dim], vec[dim:]
	return t, nil
}

// frameBufs holds the buffers of WriteFrame (a Writer does not retain what it is given).
var frameBufs = sync.Pool{New: func() any { return new([]byte) }}

// WriteFrame writes a 4-byte little-endian length followed by payload, in one Write.
func WriteFrame(w io.Writer, payload []byte) error {
	bp := frameBufs.Get().(*[]byte)
	buf := binary.LittleEndian.AppendUint32((*bp)[:0], uint32(len(payload)))
	buf = append(buf, payload...)
	_, err := w.Write(buf)
	if cap(buf) <= 1<<20 { // a pool of large buffers would keep their memory
		*bp = buf
		frameBufs.Put(bp)
	}
	return err
}

// ReadFrame reads one frame written by WriteFrame, refusing (before allocating) any frame
// longer than limit bytes. After ErrTooLarge the stream is out of sync and must be closed.
func ReadFrame(r io.Reader, limit int) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint32(hdr[:])
	if uint64(n) > uint64(limit) {
		return nil, fmt.Errorf("%w: %d bytes > %d", ErrTooLarge, n, limit)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // a header without its body is a truncated frame
		}
		return nil, fmt.Errorf("%w: %w", errPartialFrame, err)
	}
	return b, nil
}

// Verdict is the outcome of validating an inbound message (as go-libp2p-pubsub's
// ValidationAccept/Reject/Ignore).
type Verdict uint8

// Verdicts.
const (
	Accept Verdict = iota // process it
	Reject                // malformed, forged or foreign: refuse and log
	Ignore                // well formed but stale or duplicated: drop quietly (logged at debug)
)

func (v Verdict) String() string {
	switch v {
	case Accept:
		return "accept"
	case Reject:
		return "reject"
	case Ignore:
		return "ignore"
	}
	return "unknown"
}

// Validator holds what an inbound token is checked against.
type Validator struct {
	Run  string
	Walk uint64
	Dim  int
	Hops uint64 // a token beyond the final hop is rejected; 0 = no limit
}

// Check runs the validation chain on a decoded token: run and walk, dimension,
// finiteness, then freshness against the last (epoch, hop) this node accepted. It returns
// the verdict and, unless Accept, the reason.
func (v Validator) Check(t walk.Token, seenEpoch, seenHop uint64, seen bool) (Verdict, string) {
	switch {
	case t.Run != v.Run:
		return Reject, fmt.Sprintf("run %q, want %q", t.Run, v.Run)
	case t.Walk != v.Walk:
		return Reject, fmt.Sprintf("walk %d, want %d", t.Walk, v.Walk)
	case len(t.Z) != v.Dim || len(t.Zhat) != v.Dim:
		return Reject, fmt.Sprintf("dimension %d, want %d", len(t.Z), v.Dim)
	case v.Hops > 0 && t.Hop > v.Hops:
		return Reject, fmt.Sprintf("hop %d beyond the run's %d hops", t.Hop, v.Hops)
	}
	for k := range t.Z {
		if math.IsNaN(t.Z[k]) || math.IsInf(t.Z[k], 0) || math.IsNaN(t.Zhat[k]) || math.IsInf(t.Zhat[k], 0) {
			return Reject, fmt.Sprintf("non-finite coordinate %d", k)
		}
	}
	if seen && (t.Epoch < seenEpoch || t.Epoch == seenEpoch && t.Hop <= seenHop) {
		return Ignore, fmt.Sprintf("stale token (epoch %d, hop %d) <= seen (epoch %d, hop %d)", t.Epoch, t.Hop, seenEpoch, seenHop)
	}
	return Accept, ""
}

// ckBinary starts a checkpoint record in the binary encoding (a JSON record starts with
// '{'). The encoding, little-endian, with uvarint lengths and counts:
//
//	0x02 | version uvarint | run str | node uvarint | updates uvarint |
//	u: 0, n, n float64 | or 1 (the u of the previous record) |
//	epoch u64 | hop u64 | hop_source bytes | noise_source bytes |
//	fence: 0, or 1 and epoch u64 hop u64 digest u64 | max_epoch u64 |
//	recent: keep, n, n marks |
//	backups: n, each 0 and tok | to str | pred str | pred_epoch u64 | pred_hop u64 |
//	  acked u8 | dist uvarint, or 1 and k (the k-th backup of the previous record) |
//	out tok | out_to str | ledger_seq u64 | ledger_hash u64
//
// where str and bytes are a uvarint length and the bytes. tok is 0 and bytes (a literal
// token) or 1 and k: the k-th token of the table made of the previous record's tokens
// (its out, then its backups' tokens, as decoded) followed by the tokens of this record
// decoded so far (a backup given by reference adds its token). recent is the last keep
// marks of the previous record's recent followed by n marks. A backup or a token is thus
// written once and referred to while it stays in custody unchanged, and a record's size
// does not grow with the number of backups held; the first record of a journal has no
// previous record (nor references).
const ckBinary = 0x02

// ckTable holds what a checkpoint record may refer to in the previous one: its tokens
// (out, then the backups'), u, backups and recent marks.
type ckTable struct {
	tok     [][]byte
	u       []float64
	backups []Backup
	recent  []Mark
	ok      bool     // a previous record exists
	scratch [][]byte // appendCheckpoint's token table, kept for its storage
}

// next returns the table for the record after c (the decoder's side; the encoder builds
// it as it goes). Its tokens are private copies, shared with t where equal.
func (t *ckTable) next(c *Checkpoint) ckTable {
	nt := ckTable{ok: true, u: slices.Clone(c.U), recent: slices.Clone(c.Recent)}
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

// equalBits reports whether a and b hold the same float64 bit patterns.
func equalBits(a, b []float64) bool {
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
	return binary.LittleEndian.AppendUint64(b, c.LedgerHash)
}

// appendCheckpointU appends u_i: a 1 when it equals the previous record's (bit for bit),
// else a 0, its length and its values.
func appendCheckpointU(b []byte, u []float64, prev, next *ckTable) []byte {
	if prev.ok && equalBits(prev.u, u) {
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
		r.err = fmt.Errorf("%w: checkpoint %s", ErrMalformed, what)
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

// decodeCheckpointBinary decodes the binary encoding (appendCheckpoint) of a checkpoint
// whose previous record has the table prev (nil or empty for the first record).
func decodeCheckpointBinary(b []byte, prev *ckTable) (*Checkpoint, error) {
	if len(b) == 0 || b[0] != ckBinary {
		return nil, fmt.Errorf("%w: not a binary checkpoint", ErrMalformed)
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
			k.Dist = int(r.uvarint("backup dist", MaxDepth))
		}
	}
	c.Out = tok("out")
	c.OutTo = string(r.bytes("out_to"))
	c.LedgerSeq, c.LedgerHash = r.u64("ledger seq"), r.u64("ledger hash")
	if r.err != nil {
		return nil, r.err
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("%w: checkpoint has %d trailing bytes", ErrMalformed, len(r.b))
	}
	return c, nil
}
