package wire

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/walk"
)

func sampleToken(dim int) walk.Token {
	t := walk.Token{Run: "r1", Walk: 3, Epoch: 2, Hop: 17, Z: make([]float64, dim), Zhat: make([]float64, dim)}
	for k := range t.Z {
		t.Z[k] = float64(k) * 0.1
		t.Zhat[k] = -float64(k) / 3
	}
	return t
}

func TestTokenRoundTrip(t *testing.T) {
	tok := sampleToken(5)
	tok.Z[1] = math.Copysign(0, -1) // bit-exactness includes the sign of zero
	b, err := EncodeToken(nil, tok)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != TokenSize("r1", 5) {
		t.Fatalf("size %d, want %d", len(b), TokenSize("r1", 5))
	}
	got, err := DecodeToken(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Run != tok.Run || got.Walk != tok.Walk || got.Epoch != tok.Epoch || got.Hop != tok.Hop {
		t.Fatalf("header %+v, want %+v", got, tok)
	}
	for k := range tok.Z {
		if math.Float64bits(got.Z[k]) != math.Float64bits(tok.Z[k]) || math.Float64bits(got.Zhat[k]) != math.Float64bits(tok.Zhat[k]) {
			t.Fatalf("coordinate %d differs", k)
		}
	}
}

func TestDecodeTokenErrors(t *testing.T) {
	good, _ := EncodeToken(nil, sampleToken(3))
	bad := append([]byte(nil), good...)
	bad[0] = 9
	if _, err := DecodeToken(bad); !errors.Is(err, ErrVersion) {
		t.Fatalf("version 9: %v", err)
	}
	if _, err := DecodeToken(good[:len(good)-1]); !errors.Is(err, ErrMalformed) {
		t.Fatalf("truncated: %v", err)
	}
	if _, err := DecodeToken(append(good, 7)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("trailing byte: %v", err)
	}
	// A held token's evidence "none" (0), and a frame's signature after it, are trailers
	// DecodeToken accepts; a signature of the wrong length is not.
	if _, err := DecodeToken(append(good, EvNone)); err != nil {
		t.Fatalf("evidence none: %v", err)
	}
	if _, err := DecodeToken(append(good, EvNone, 2, 0, 9, 9)); err != nil {
		t.Fatalf("evidence none and a signature: %v", err)
	}
	if _, err := DecodeToken(append(good, EvNone, 3, 0, 9, 9)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("short signature: %v", err)
	}
	huge := append([]byte(nil), good[:TokenHeader]...)
	huge[25], huge[26], huge[27], huge[28] = 0xff, 0xff, 0xff, 0x7f
	if _, err := DecodeToken(huge); !errors.Is(err, ErrMalformed) {
		t.Fatalf("huge dim: %v", err)
	}
}

func TestReadFrameLimit(t *testing.T) {
	var buf bytes.Buffer
	WriteFrame(&buf, make([]byte, 100))
	if _, err := ReadFrame(bytes.NewReader(buf.Bytes()), 99); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v, want ErrTooLarge", err)
	}
	b, err := ReadFrame(bytes.NewReader(buf.Bytes()), 100)
	if err != nil || len(b) != 100 {
		t.Fatalf("got %d bytes, %v", len(b), err)
	}
}

func TestValidatorChain(t *testing.T) {
	v := Validator{Run: "r1", Walk: 3, Dim: 4, Hops: 100}
	cases := []struct {
		name string
		mod  func(*walk.Token)
		want Verdict
	}{
		{"ok", func(*walk.Token) {}, Accept},
		{"run", func(t *walk.Token) { t.Run = "other" }, Reject},
		{"walk", func(t *walk.Token) { t.Walk = 4 }, Reject},
		{"dim", func(t *walk.Token) { t.Z = t.Z[:3] }, Reject},
		{"nan", func(t *walk.Token) { t.Z[2] = math.NaN() }, Reject},
		{"inf", func(t *walk.Token) { t.Zhat[0] = math.Inf(-1) }, Reject},
		{"beyond hops", func(t *walk.Token) { t.Hop = 101 }, Reject},
		// Freshness is the custody fence's (walk.Custody), not the validator's.
		{"old hop", func(t *walk.Token) { t.Hop = 10 }, Accept},
		{"old epoch", func(t *walk.Token) { t.Epoch = 1; t.Hop = 50 }, Accept},
	}
	for _, c := range cases {
		tok := sampleToken(4)
		tok.Hop = 13
		c.mod(&tok)
		if got, reason := v.Check(tok); got != c.want {
			t.Errorf("%s: verdict %v (%s), want %v", c.name, got, reason, c.want)
		}
	}
}

func FuzzDecodeToken(f *testing.F) {
	good, _ := EncodeToken(nil, sampleToken(3))
	f.Add(good)
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add(good[:TokenHeader])
	f.Add(append([]byte{2}, good[1:]...))
	f.Add(append(append([]byte(nil), good...), EvNone))
	f.Add(append(append([]byte(nil), good...), EvNone, 2, 0, 9, 9))
	v := Validator{Run: "r1", Walk: 3, Dim: 3}
	f.Fuzz(func(t *testing.T, b []byte) {
		tok, err := DecodeToken(b)
		if err != nil {
			return
		}
		v.Check(tok)
		re, err := EncodeToken(nil, tok)
		if err != nil {
			t.Fatalf("decoded token does not re-encode: %v", err)
		}
		// The body re-encodes exactly; what follows it is well-formed evidence, alone (a
		// held token) or with a signature (a frame).
		if !bytes.Equal(re, b[:len(re)]) {
			t.Fatalf("re-encoding differs")
		}
		if tr := b[len(re):]; len(tr) > 0 {
			_, e1 := ParseCert(tr, false)
			_, e2 := ParseCert(tr, true)
			if e1 != nil && e2 != nil {
				t.Fatalf("accepted trailer that is neither evidence nor a signed frame: %v / %v", e1, e2)
			}
		}
	})
}

// TestTokenEncodes: the bytes of EncodeToken (with or without a trailer) encode the token,
// and a change of any field, one bit of either vector, or a cut does not.
func TestTokenEncodes(t *testing.T) {
	tok := walk.NewToken("encodes", 3, 5, consensus.Regularizer{}, 1)
	tok.Epoch, tok.Hop = 2, 9
	for j := range tok.Z {
		tok.Z[j], tok.Zhat[j] = float64(j)+0.5, -float64(j)
	}
	b, err := EncodeToken(nil, tok)
	if err != nil {
		t.Fatal(err)
	}
	if !TokenEncodes(b, tok) || !TokenEncodes(append(slices.Clone(b), EvNone), tok) {
		t.Fatal("the encoding of a token does not encode it")
	}
	if TokenEncodes(b[:len(b)-1], tok) {
		t.Fatal("a cut encoding encodes the token")
	}
	for i := range b {
		c := slices.Clone(b)
		c[i] ^= 1
		if TokenEncodes(c, tok) {
			t.Fatalf("byte %d changed: still encodes the token", i)
		}
	}
	other := tok
	other.Run = "encodez"
	if TokenEncodes(b, other) {
		t.Fatal("another run name encodes")
	}
	other = tok
	other.Z = append(slices.Clone(tok.Z), 1)
	other.Zhat = append(slices.Clone(tok.Zhat), 1)
	if TokenEncodes(b, other) {
		t.Fatal("another dimension encodes")
	}
}
