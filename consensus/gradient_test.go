package consensus

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestClippedRowGradCocoercive checks what amplification by iteration needs of the clipped
// gradient oracle (Fact 6.4 of Chan, Xie, Zhao): with nu = Smoothness(), for random points
// <g(x) - g(x'), x - x'> >= ||g(x) - g(x')||^2 / nu (convex and nu-smooth, co-coercivity),
// and the clipped gradient's norm is at most Weight * clip. Smoothness is checked against
// lambda_max(A^T A) by power iteration (a lower estimate, so nu must lie above it).
func TestClippedRowGradCocoercive(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for it := 0; it < 200; it++ {
		rows, p := 1+r.IntN(6), 1+r.IntN(5)
		d := &Dataset{Name: "t", Rows: rows, Cols: p, X: make([]float64, rows*p), Y: make([]float64, rows)}
		for k := range d.X {
			d.X[k] = r.NormFloat64() * 2
		}
		loss := Loss(r.IntN(2))
		for k := range d.Y {
			d.Y[k] = r.NormFloat64()
			if loss == Logistic {
				d.Y[k] = float64(2*r.IntN(2) - 1)
			}
		}
		w := math.Exp(r.NormFloat64())
		l, err := NewLocalLoss(d, loss, w)
		if err != nil {
			t.Fatal(err)
		}
		nu := l.Smoothness()
		s := 1.0
		if loss == Logistic {
			s = 0.25
		}
		if lam := lipschitz(d) * float64(rows); nu < l.c*s*lam*(1-1e-9) {
			t.Fatalf("iteration %d: smoothness %v below c s lambda_max = %v", it, nu, l.c*s*lam)
		}
		clip := []float64{math.Inf(1), 0.1, 1, 10}[r.IntN(4)]
		x, y := make([]float64, p), make([]float64, p)
		gx, gy := make([]float64, p), make([]float64, p)
		for k := 0; k < 20; k++ {
			for j := range x {
				x[j] = r.NormFloat64() * 3
				y[j] = r.NormFloat64() * 3
			}
			l.ClippedRowGrad(gx, x, clip)
			l.ClippedRowGrad(gy, y, clip)
			ip, gg := 0.0, 0.0
			for j := range x {
				ip += (gx[j] - gy[j]) * (x[j] - y[j])
				gg += (gx[j] - gy[j]) * (gx[j] - gy[j])
			}
			if ip < gg/nu-1e-9*(1+gg/nu) {
				t.Fatalf("iteration %d: not co-coercive: <dg, dx> = %v < ||dg||^2/nu = %v", it, ip, gg/nu)
			}
			if n := math.Sqrt(dot(gx, gx)); n > w*clip*(1+1e-12) {
				t.Fatalf("iteration %d: ||clipped gradient|| = %v above weight*clip = %v", it, n, w*clip)
			}
		}
		if math.IsInf(clip, 1) { // unclipped: the plain gradient
			l.Grad(gy, x)
			for j := range gx {
				if math.Abs(gx[j]-gy[j]) > 1e-12*(1+math.Abs(gy[j])) {
					t.Fatalf("iteration %d: unclipped %v, Grad %v", it, gx, gy)
				}
			}
		}
	}
}
