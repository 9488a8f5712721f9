package wire

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/dpadmm/dpadmm/gossip"
)

// ExchangeWireVersion is the version byte of the neighbour-exchange frame.
const ExchangeWireVersion = 1

// ExchangeHeader is the fixed part of an encoded exchange frame: version(1) iter(8) from(4)
// dim(4) runlen(1).
const ExchangeHeader = 1 + 8 + 4 + 4 + 1

// ExchangeFrame is one node's primal vector f_From(Iter) sent to one neighbour.
type ExchangeFrame struct {
	Run  string
	Iter uint64
	From uint32 // sender's index in the run's membership
	Vec  []float64
}

// ExchangeFrameSize returns the encoded size of a frame with the given run name and
// dimension; receivers refuse any larger frame before reading it.
func ExchangeFrameSize(run string, dim int) int { return ExchangeHeader + len(run) + 8*dim }

// EncodeExchangeFrame appends the binary encoding of f to dst:
//
//	version u8 | iter u64 | from u32 | dim u32 | runlen u8 | run | vec[dim] f64
//
// all integers and float64 bit patterns little-endian, so vectors travel bit-exactly.
func EncodeExchangeFrame(dst []byte, f ExchangeFrame) ([]byte, error) {
	if len(f.Run) > MaxRunName {
		return dst, fmt.Errorf("wire: run name longer than %d bytes", MaxRunName)
	}
	if len(f.Vec) > MaxDim {
		return dst, fmt.Errorf("wire: R-ADMM vector of dimension %d over the limit %d", len(f.Vec), MaxDim)
	}
	dst = append(dst, ExchangeWireVersion)
	dst = binary.LittleEndian.AppendUint64(dst, f.Iter)
	dst = binary.LittleEndian.AppendUint32(dst, f.From)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(f.Vec)))
	dst = append(dst, byte(len(f.Run)))
	dst = append(dst, f.Run...)
	for _, v := range f.Vec {
		dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(v))
	}
	return dst, nil
}

// DecodeExchangeFrame decodes an exchange frame. It checks the version and that the
// length matches the declared dimension exactly before allocating; it does not judge run,
// sender, dimension or finiteness (see ExchangeValidator).
func DecodeExchangeFrame(b []byte) (ExchangeFrame, error) {
	var f ExchangeFrame
	if len(b) < 1 {
		return f, fmt.Errorf("%w: empty", ErrMalformed)
	}
	if b[0] != ExchangeWireVersion {
		return f, fmt.Errorf("%w %d (want %d)", ErrVersion, b[0], ExchangeWireVersion)
	}
	if len(b) < ExchangeHeader {
		return f, fmt.Errorf("%w: %d bytes, header needs %d", ErrMalformed, len(b), ExchangeHeader)
	}
	f.Iter = binary.LittleEndian.Uint64(b[1:])
	f.From = binary.LittleEndian.Uint32(b[9:])
	dim := binary.LittleEndian.Uint32(b[13:])
	rl := int(b[17])
	if dim > MaxDim {
		return f, fmt.Errorf("%w: dimension %d over the limit %d", ErrMalformed, dim, MaxDim)
	}
	if rl > MaxRunName {
		return f, fmt.Errorf("%w: run name of %d bytes", ErrMalformed, rl)
	}
	want := ExchangeHeader + rl + 8*int(dim)
	if len(b) != want {
		return f, fmt.Errorf("%w: %d bytes, dimension %d needs %d", ErrMalformed, len(b), dim, want)
	}
	p := ExchangeHeader
	f.Run = string(b[p : p+rl])
	p += rl
	f.Vec = make([]float64, dim)
	for k := range f.Vec {
		f.Vec[k] = math.Float64frombits(binary.LittleEndian.Uint64(b[p:]))
		p += 8
	}
	return f, nil
}

// ExchangeValidator holds what an inbound exchange frame is checked against before it
// reaches the loop. Freshness against the machine's iteration is judged in the loop.
type ExchangeValidator struct {
	Run string
	Dim int
	// Iters is T: a frame for an iteration beyond T is rejected.
	Iters uint64
	// Neighbors[k] reports whether member k is a graph neighbour of this node.
	Neighbors []bool
}

// Check runs the stateless validation chain on a decoded frame that arrived from the
// member with index sender (-1 when the remote peer is not a member): membership, claimed
// sender, neighbourhood, run, dimension, iteration range, finiteness. It returns the
// verdict and, unless Accept, the reason.
func (v ExchangeValidator) Check(f ExchangeFrame, sender int) (Verdict, string) {
	vd, reason, _ := v.CheckLabeled(f, sender)
	return vd, reason
}

// CheckLabeled is Check that also returns a short label of the failed check for the metrics
// (non-member, forged, not-neighbor, run, dimension, iteration, non-finite).
func (v ExchangeValidator) CheckLabeled(f ExchangeFrame, sender int) (Verdict, string, string) {
	switch {
	case sender < 0:
		return Reject, "sender is not a member of the run", "non-member"
	case int64(f.From) != int64(sender):
		return Reject, fmt.Sprintf("frame claims sender %d but came from member %d", f.From, sender), "forged"
	case sender >= len(v.Neighbors) || !v.Neighbors[sender]:
		return Reject, fmt.Sprintf("member %d is not a graph neighbour", sender), "not-neighbor"
	case f.Run != v.Run:
		return Reject, fmt.Sprintf("run %q, want %q", f.Run, v.Run), "run"
	case len(f.Vec) != v.Dim:
		return Reject, fmt.Sprintf("dimension %d, want %d", len(f.Vec), v.Dim), "dimension"
	case f.Iter > v.Iters:
		return Reject, fmt.Sprintf("iteration %d beyond the run's %d iterations", f.Iter, v.Iters), "iteration"
	}
	for k, x := range f.Vec {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return Reject, fmt.Sprintf("non-finite coordinate %d", k), "non-finite"
		}
		if math.Abs(x) > gossip.MaxCoord {
			return Reject, fmt.Sprintf("coordinate %d beyond %g in magnitude", k, gossip.MaxCoord), "non-finite"
		}
	}
	return Accept, "", ""
}
