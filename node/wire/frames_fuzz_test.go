package wire

import (
	"bytes"
	"math"
	"testing"
)

// sampleExchangeFrame returns a valid frame of run r1, iteration 7, from member 1.
func sampleExchangeFrame(dim int) ExchangeFrame {
	f := ExchangeFrame{Run: "r1", Iter: 7, From: 1, Vec: make([]float64, dim)}
	for k := range f.Vec {
		f.Vec[k] = float64(k)*0.25 - 1
	}
	return f
}

func FuzzDecodeRelease(f *testing.F) {
	f.Add(EncodeRelease(Release{Epoch: 1, Hop: 2, Dist: 3}))
	f.Add(EncodeRelease(Release{Epoch: 1, Hop: 2, Retire: true}))
	f.Add([]byte{})
	f.Add([]byte{2})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRelease(b)
		if err != nil {
			return
		}
		if r.Retire && r.Dist != 0 || !r.Retire && (r.Dist < 2 || r.Dist > MaxDepth) {
			t.Fatalf("decoded an invalid release %+v", r)
		}
		if !bytes.Equal(EncodeRelease(r), b) {
			t.Fatal("re-encoding differs")
		}
	})
}

func FuzzDecodeHeartbeat(f *testing.F) {
	f.Add(EncodeHeartbeat(1))
	f.Add([]byte{})
	f.Add([]byte{1, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		seq, err := DecodeHeartbeat(b)
		if err != nil {
			return
		}
		if !bytes.Equal(EncodeHeartbeat(seq), b) {
			t.Fatal("re-encoding differs")
		}
	})
}

func FuzzDecodeExchangeFrame(f *testing.F) {
	good, _ := EncodeExchangeFrame(nil, sampleExchangeFrame(3))
	f.Add(good)
	f.Add([]byte{})
	f.Add(good[:ExchangeHeader])
	v := ExchangeValidator{Run: "r1", Dim: 3, Iters: 10, Neighbors: []bool{false, true}}
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := DecodeExchangeFrame(b)
		if err != nil {
			return
		}
		vd, reason := v.Check(g, int(g.From%3)-1)
		if vd == Accept {
			for _, x := range g.Vec {
				if math.IsNaN(x) || math.IsInf(x, 0) {
					t.Fatalf("accepted a non-finite vector (%s)", reason)
				}
			}
		}
		re, err := EncodeExchangeFrame(nil, g)
		if err != nil {
			t.Fatalf("decoded frame does not re-encode: %v", err)
		}
		if !bytes.Equal(re, b) {
			t.Fatalf("re-encoding differs")
		}
	})
}
