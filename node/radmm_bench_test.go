package node

import (
	"fmt"
	"testing"

	"github.com/dpadmm/dpadmm/node/wire"
)

// BenchmarkExchangeCodec: encode, then decode and validate, one frame of dimension p.
func BenchmarkExchangeCodec(b *testing.B) {
	for _, p := range []int{64, 1000} {
		b.Run(fmt.Sprintf("p=%d", p), func(b *testing.B) {
			f := sampleFrame(p)
			v := wire.ExchangeValidator{Run: f.Run, Dim: p, Iters: 100, Neighbors: []bool{false, true}}
			buf := make([]byte, 0, wire.ExchangeFrameSize(f.Run, p))
			b.SetBytes(int64(wire.ExchangeFrameSize(f.Run, p)))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				raw, err := wire.EncodeExchangeFrame(buf[:0], f)
				if err != nil {
					b.Fatal(err)
				}
				g, err := wire.DecodeExchangeFrame(raw)
				if err != nil {
					b.Fatal(err)
				}
				if vd, reason := v.Check(g, 1); vd != wire.Accept {
					b.Fatal(reason)
				}
			}
		})
	}
}
