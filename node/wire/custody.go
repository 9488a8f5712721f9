package wire

import (
	"encoding/binary"
	"fmt"
)

// MaxDepth is the largest custody depth (Config.Depth) and release distance accepted.
const MaxDepth = 1024

// ReleaseSize is the encoded size of a Release: version u8 | flags u8 | epoch u64 |
// hop u64 | dist u32, little-endian.
const ReleaseSize = 1 + 1 + 8 + 8 + 4

// HeartbeatSize is the encoded size of a heartbeat: version u8 | seq u64. The sequence
// number counts the beats of one stream; a heartbeat says nothing else.
const HeartbeatSize = 1 + 8

const releaseRetire = 1

// Release is a custody release sent back along the path: the token is Dist acked
// hand-offs beyond the receiver's release (Epoch, Hop), or, with Retire, that release's
// lineage was fenced and the receiver drops it and passes the retirement back. It carries
// no token data.
type Release struct {
	Epoch, Hop uint64
	Dist       int
	Retire     bool
}

// EncodeRelease returns the wire form of r.
func EncodeRelease(r Release) []byte {
	b := make([]byte, 0, ReleaseSize)
	b = append(b, WireVersion)
	flags := byte(0)
	if r.Retire {
		flags |= releaseRetire
	}
	b = append(b, flags)
	b = binary.LittleEndian.AppendUint64(b, r.Epoch)
	b = binary.LittleEndian.AppendUint64(b, r.Hop)
	return binary.LittleEndian.AppendUint32(b, uint32(r.Dist))
}

// DecodeRelease decodes and validates a Release: version, exact length, known flags, and
// a distance in 2..MaxDepth (0 with Retire).
func DecodeRelease(b []byte) (Release, error) {
	var r Release
	if len(b) < 1 {
		return r, fmt.Errorf("%w: empty release", ErrMalformed)
	}
	if b[0] != WireVersion {
		return r, fmt.Errorf("%w %d (want %d)", ErrVersion, b[0], WireVersion)
	}
	if len(b) != ReleaseSize {
		return r, fmt.Errorf("%w: release of %d bytes, want %d", ErrMalformed, len(b), ReleaseSize)
	}
	if b[1]&^releaseRetire != 0 {
		return r, fmt.Errorf("%w: release flags %#x", ErrMalformed, b[1])
	}
	r.Retire = b[1]&releaseRetire != 0
	r.Epoch = binary.LittleEndian.Uint64(b[2:])
	r.Hop = binary.LittleEndian.Uint64(b[10:])
	d := binary.LittleEndian.Uint32(b[18:])
	switch {
	case r.Retire && d != 0:
		return r, fmt.Errorf("%w: retire with distance %d", ErrMalformed, d)
	case !r.Retire && (d < 2 || d > MaxDepth):
		return r, fmt.Errorf("%w: release distance %d outside 2..%d", ErrMalformed, d, MaxDepth)
	}
	r.Dist = int(d)
	return r, nil
}

// EncodeHeartbeat returns the wire form of the seq-th heartbeat of a stream.
func EncodeHeartbeat(seq uint64) []byte {
	return binary.LittleEndian.AppendUint64([]byte{WireVersion}, seq)
}

// DecodeHeartbeat decodes a heartbeat (version and exact length) and returns its sequence
// number.
func DecodeHeartbeat(b []byte) (uint64, error) {
	if len(b) < 1 {
		return 0, fmt.Errorf("%w: empty heartbeat", ErrMalformed)
	}
	if b[0] != WireVersion {
		return 0, fmt.Errorf("%w %d (want %d)", ErrVersion, b[0], WireVersion)
	}
	if len(b) != HeartbeatSize {
		return 0, fmt.Errorf("%w: heartbeat of %d bytes, want %d", ErrMalformed, len(b), HeartbeatSize)
	}
	return binary.LittleEndian.Uint64(b[1:]), nil
}
