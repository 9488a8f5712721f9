package wire

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/dpadmm/dpadmm/walk"
)

// The layout of what follows a token body: a held token carries its evidence, a frame
// its evidence and the sender's signature (node/handoffsig.go signs and verifies).
const (
	EvNone    = 0x00
	EvPresent = 0x01
	// MaxSig bounds a signature's length (Ed25519: 64 bytes; RSA-4096: 512).
	MaxSig = 1024
	// EvFixed is the size of present evidence before its signature.
	EvFixed = 1 + 4 + 8 + 8 + 32 + 2
	// MaxCert is the most bytes a frame carries after the token body.
	MaxCert = EvFixed + MaxSig + 2 + MaxSig
)

// Cert is the decoded trailer of a held token or a frame.
type Cert struct {
	Ev     walk.Evidence
	EvDig  [32]byte // digest of the evidence token
	EvSig  []byte
	Sig    []byte // the sender's signature (frames only)
	EvLen  int    // bytes of the evidence encoding
	Signed bool
}

// BodyLen returns the length of the token body at the start of b (b is at least a
// header; DecodeToken checked it).
func BodyLen(b []byte) int {
	return TokenHeader + int(b[29]) + 16*int(binary.LittleEndian.Uint32(b[25:]))
}

// ParseCert decodes the bytes after a token body: evidence, then (frame) a signature.
// An empty trailer is a held token of the first format: no evidence.
func ParseCert(tr []byte, frame bool) (Cert, error) {
	var c Cert
	bad := func(what string) (Cert, error) { return c, fmt.Errorf("%w: %s", ErrMalformed, what) }
	if len(tr) == 0 {
		if frame {
			return bad("hand-off without a signature")
		}
		return c, nil
	}
	switch tr[0] {
	case EvNone:
		c.EvLen = 1
	case EvPresent:
		if len(tr) < EvFixed {
			return bad("short evidence")
		}
		c.Ev = walk.Evidence{Present: true, Signer: int(binary.LittleEndian.Uint32(tr[1:])),
			Epoch: binary.LittleEndian.Uint64(tr[5:]), Hop: binary.LittleEndian.Uint64(tr[13:])}
		if c.Ev.Signer < 0 || uint64(binary.LittleEndian.Uint32(tr[1:])) > math.MaxInt32 {
			return bad("evidence signer out of range")
		}
		copy(c.EvDig[:], tr[21:53])
		n := int(binary.LittleEndian.Uint16(tr[53:]))
		if n == 0 || n > MaxSig || len(tr) < EvFixed+n {
			return bad("evidence signature length")
		}
		c.EvSig = tr[EvFixed : EvFixed+n]
		c.EvLen = EvFixed + n
	default:
		return bad(fmt.Sprintf("evidence tag %d", tr[0]))
	}
	rest := tr[c.EvLen:]
	if !frame {
		if len(rest) != 0 {
			return bad("bytes after the evidence")
		}
		return c, nil
	}
	if len(rest) < 2 {
		return bad("hand-off without a signature")
	}
	n := int(binary.LittleEndian.Uint16(rest))
	if n == 0 || n > MaxSig || len(rest) != 2+n {
		return bad("signature length")
	}
	c.Sig, c.Signed = rest[2:], true
	return c, nil
}
