package consensus

import (
	"math"
	"testing"
)

// TestRankOne: the closed form reported by RankOne is the prox (checked against the
// optimality condition and against the general Cholesky path on the row written twice), it
// follows gamma changes, and it is refused for other losses and shards.
func TestRankOne(t *testing.T) {
	d, _ := SyntheticLasso(3, 7, 2, 0.1, 5)
	one := d.Subset([]int{1})
	two := d.Subset([]int{1, 1})
	l, err := NewLocalLoss(one, Squared, 1.3)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := NewLocalLoss(two, Squared, 1.3)
	if err != nil {
		t.Fatal(err)
	}
	v := []float64{0.5, -1, 2, 0.25, -0.75, 1.5, 3}
	for _, gamma := range []float64{0.2, 5, 0.2} {
		r, ok := l.RankOne(gamma)
		if !ok {
			t.Fatal("one-row squared loss: RankOne not available")
		}
		an := dot(one.Row(0), one.Row(0))
		if wantK := gamma * 1.3 / (1 + gamma*1.3*an); math.Abs(r.K-wantK) > 1e-15*wantK || r.Y != one.Y[0] || r.Norm2 != an {
			t.Fatalf("gamma %v: K %v (want %v) Y %v Norm2 %v", gamma, r.K, wantK, r.Y, r.Norm2)
		}
		x := make([]float64, len(v))
		s := r.K * (r.Y - dot(r.A, v))
		for j := range x {
			x[j] = v[j] + s*r.A[j]
		}
		if res := proxResidual(l, x, v, gamma); res > 1e-12 {
			t.Fatalf("gamma %v: closed form is not the prox, residual %v", gamma, res)
		}
		px, px2 := make([]float64, len(v)), make([]float64, len(v))
		if err := l.Prox(px, v, gamma); err != nil {
			t.Fatal(err)
		}
		if err := l2.Prox(px2, v, gamma); err != nil {
			t.Fatal(err)
		}
		for j := range x {
			if math.Abs(px[j]-x[j]) > 1e-13 || math.Abs(px2[j]-x[j]) > 1e-10 {
				t.Fatalf("gamma %v: Prox %v, Cholesky %v, closed form %v", gamma, px, px2, x)
			}
		}
	}
	if _, ok := l2.RankOne(1); ok {
		t.Error("two-row shard: RankOne must be refused")
	}
	for _, g := range []float64{0, -1, math.Inf(1), math.NaN()} {
		if _, ok := l.RankOne(g); ok {
			t.Errorf("gamma %v: RankOne must be refused", g)
		}
	}
	lg, err := NewLocalLoss(&Dataset{Name: "lg", Rows: 1, Cols: 2, X: []float64{1, 2}, Y: []float64{1}}, Logistic, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := lg.RankOne(1); ok {
		t.Error("logistic loss: RankOne must be refused")
	}
	if a := testing.AllocsPerRun(100, func() { _, _ = l.RankOne(0.7) }); a != 0 {
		t.Errorf("RankOne allocates %v", a)
	}
}

// BenchmarkProxOneRow: the Sherman-Morrison prox of a one-row squared loss at p = 64.
func BenchmarkProxOneRow(b *testing.B) {
	d, _ := SyntheticLasso(1, 64, 8, 0.1, 1)
	l, err := NewLocalLoss(d, Squared, 1)
	if err != nil {
		b.Fatal(err)
	}
	v, x := make([]float64, 64), make([]float64, 64)
	for j := range v {
		v[j] = float64(j%7) - 3
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := l.Prox(x, v, 1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkProxCholesky: the cached-Cholesky prox of a 20-row squared loss at p = 64.
func BenchmarkProxCholesky(b *testing.B) {
	d, _ := SyntheticLasso(20, 64, 8, 0.1, 1)
	l, err := NewLocalLoss(d, Squared, 1)
	if err != nil {
		b.Fatal(err)
	}
	v, x := make([]float64, 64), make([]float64, 64)
	for j := range v {
		v[j] = float64(j%7) - 3
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := l.Prox(x, v, 1); err != nil {
			b.Fatal(err)
		}
	}
}
