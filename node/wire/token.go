package wire

import (
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

// TokenHeader is the fixed part of an encoded token: version(1) walk(8) epoch(8) hop(8)
// dim(4) runlen(1).
const TokenHeader = 1 + 8 + 8 + 8 + 4 + 1

// Wire errors. Reject verdicts wrap them.
var (
	ErrTooLarge  = errors.New("wire: frame exceeds the size limit")
	ErrVersion   = errors.New("wire: unknown wire version")
	ErrMalformed = errors.New("wire: malformed token")
	// ErrPartialFrame: a frame's header was read but its body was cut off.
	ErrPartialFrame = errors.New("wire: partial frame")
)

// TokenSize returns the encoded size of a token with the given run name and dimension.
func TokenSize(run string, dim int) int { return TokenHeader + len(run) + 16*dim }

// EncodeToken appends the binary encoding of t to dst:
//
//	version u8 | walk u64 | epoch u64 | hop u64 | dim u32 | runlen u8 | run | z[dim] f64 | zhat[dim] f64
//
// all integers and float64 bit patterns little-endian, so the vectors travel bit-exactly.
func EncodeToken(dst []byte, t walk.Token) ([]byte, error) {
	if len(t.Run) > MaxRunName {
		return dst, fmt.Errorf("wire: run name longer than %d bytes", MaxRunName)
	}
	if len(t.Z) != len(t.Zhat) || len(t.Z) > MaxDim {
		return dst, fmt.Errorf("wire: token vectors have lengths %d and %d", len(t.Z), len(t.Zhat))
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

// TokenEncodes reports whether b begins with the encoding of t (EncodeToken), compared
// field by field without encoding or decoding: a cache can check that held bytes are a
// token's without keeping a decoded copy.
func TokenEncodes(b []byte, t walk.Token) bool {
	dim := len(t.Z)
	if len(t.Zhat) != dim || len(t.Run) > MaxRunName || len(b) < TokenSize(t.Run, dim) || b[0] != WireVersion ||
		binary.LittleEndian.Uint64(b[1:]) != t.Walk || binary.LittleEndian.Uint64(b[9:]) != t.Epoch ||
		binary.LittleEndian.Uint64(b[17:]) != t.Hop || binary.LittleEndian.Uint32(b[25:]) != uint32(dim) ||
		int(b[29]) != len(t.Run) || string(b[TokenHeader:TokenHeader+len(t.Run)]) != t.Run {
		return false
	}
	z := b[TokenHeader+len(t.Run):]
	for j, v := range t.Z {
		if binary.LittleEndian.Uint64(z[8*j:]) != math.Float64bits(v) {
			return false
		}
	}
	z = z[8*dim:]
	for j, v := range t.Zhat {
		if binary.LittleEndian.Uint64(z[8*j:]) != math.Float64bits(v) {
			return false
		}
	}
	return true
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
	if len(b) < TokenHeader {
		return t, fmt.Errorf("%w: %d bytes, header needs %d", ErrMalformed, len(b), TokenHeader)
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
	want := TokenHeader + rl + 16*int(dim)
	if len(b) < want {
		return t, fmt.Errorf("%w: %d bytes, dimension %d needs %d", ErrMalformed, len(b), dim, want)
	}
	if len(b) > want {
		// A held token's evidence or a frame's evidence and signature (handoffsig.go).
		if _, err := ParseCert(b[want:], false); err != nil {
			if _, err2 := ParseCert(b[want:], true); err2 != nil {
				return t, fmt.Errorf("%w after a token of %d bytes: %w", ErrMalformed, want, err2)
			}
		}
	}
	p := TokenHeader
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
		return nil, fmt.Errorf("%w: %w", ErrPartialFrame, err)
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

// Check runs the validation chain on a decoded token: run and walk, dimension, the run's
// last hop, finiteness. It returns the verdict and, unless Accept, the reason. Freshness
// (stale or duplicated epochs and hops) is not the validator's: the custody machine's
// fence (walk.Custody) is the one rule, so that the simulator, the fault studies and the
// node decide it alike.
func (v Validator) Check(t walk.Token) (Verdict, string) {
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
	return Accept, ""
}
