package walk

import (
	"fmt"
	"testing"
)

// BenchmarkLSApply: one application of LS_nu (forward and inverse real FFT).
func BenchmarkLSApply(b *testing.B) {
	for _, p := range []int{64, 1000, 1024} {
		b.Run(fmt.Sprintf("p=%d", p), func(b *testing.B) {
			o, _ := NewLSOperator(p, 2)
			v := make([]float64, p)
			for k := range v {
				v[k] = float64(k % 7)
			}
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				o.Apply(v, v)
			}
		})
	}
}
