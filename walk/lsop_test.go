package walk

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// denseQ returns Q_nu = I - nu L (periodic 1-D Laplacian), built by adding entries (so that
// p = 1, 2 come out right).
func denseQ(p int, nu float64) [][]float64 {
	q := make([][]float64, p)
	for i := range q {
		q[i] = make([]float64, p)
	}
	for i := 0; i < p; i++ {
		q[i][i] += 1 + 2*nu
		q[i][(i+1)%p] -= nu
		q[i][(i+p-1)%p] -= nu
	}
	return q
}

// solveDense solves M x = b by Gaussian elimination with partial pivoting.
func solveDense(m [][]float64, b []float64) []float64 {
	p := len(b)
	a := make([][]float64, p)
	for i := range a {
		a[i] = append(append([]float64(nil), m[i]...), b[i])
	}
	for c := 0; c < p; c++ {
		piv := c
		for i := c + 1; i < p; i++ {
			if math.Abs(a[i][c]) > math.Abs(a[piv][c]) {
				piv = i
			}
		}
		a[c], a[piv] = a[piv], a[c]
		for i := c + 1; i < p; i++ {
			f := a[i][c] / a[c][c]
			for j := c; j <= p; j++ {
				a[i][j] -= f * a[c][j]
			}
		}
	}
	x := make([]float64, p)
	for i := p - 1; i >= 0; i-- {
		s := a[i][p]
		for j := i + 1; j < p; j++ {
			s -= a[i][j] * x[j]
		}
		x[i] = s / a[i][i]
	}
	return x
}

// TestLSOperatorDense: LS_nu matches a dense solve of Q_nu x = b to 1e-12 (relative to
// ||b||) for odd, even and tiny dimensions.
func TestLSOperatorDense(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	for _, p := range []int{1, 2, 3, 4, 7, 8, 17, 64, 100} {
		for _, nu := range []float64{0, 0.3, 1, 2, 7.5} {
			o, err := NewLSOperator(p, nu)
			if err != nil {
				t.Fatal(err)
			}
			b := make([]float64, p)
			nb := 0.0
			for k := range b {
				b[k] = r.NormFloat64()
				nb = math.Max(nb, math.Abs(b[k]))
			}
			want := solveDense(denseQ(p, nu), b)
			got := make([]float64, p)
			o.Apply(got, b)
			for k := range got {
				if math.Abs(got[k]-want[k]) > 1e-12*nb {
					t.Fatalf("p %d nu %v coord %d: %v want %v", p, nu, k, got[k], want[k])
				}
			}
			o.Apply(b, b) // in place
			for k := range b {
				if b[k] != got[k] {
					t.Fatalf("p %d nu %v: in-place result differs", p, nu)
				}
			}
		}
	}
}

// TestLSOperatorExact: the exact rational vectors of the digest's Example 2.
func TestLSOperatorExact(t *testing.T) {
	a := []float64{1, -2, 3, 0, 5, -1, 2, 4}
	for _, c := range []struct {
		nu  float64
		num []int64
		den int64
	}{
		{1, []int64{25, 5, 32, 28, 52, 23, 38, 49}, 21},
		{2, []int64{977, 526, 1103, 1084, 1607, 1021, 1328, 1534}, 765},
	} {
		o, _ := NewLSOperator(8, c.nu)
		got := make([]float64, 8)
		o.Apply(got, a)
		sum := 0.0
		for k := range got {
			want, _ := new(big.Rat).SetFrac64(c.num[k], c.den).Float64()
			if math.Abs(got[k]-want) > 1e-13 {
				t.Errorf("nu %v coord %d: %v want %d/%d", c.nu, k, got[k], c.num[k], c.den)
			}
			sum += got[k]
		}
		if math.Abs(sum-12) > 1e-12 {
			t.Errorf("nu %v: sum %v, want 12 (den_0 = 1 keeps the sum)", c.nu, sum)
		}
	}
	o, _ := NewLSOperator(2, 2)
	got := make([]float64, 2)
	o.Apply(got, []float64{1, -3})
	if math.Abs(got[0]+7.0/9) > 1e-14 || math.Abs(got[1]+11.0/9) > 1e-14 {
		t.Errorf("p = 2: %v, want [-7/9 -11/9]", got)
	}
	o, _ = NewLSOperator(1, 2)
	o.Apply(got[:1], []float64{-3})
	if got[0] != -3 {
		t.Errorf("p = 1: %v, want identity", got[0])
	}
	if o8, _ := NewLSOperator(8, 1); math.Abs(o8.Tau()-47.0/105) > 1e-14 {
		t.Errorf("tau(8, 1) = %v, want 47/105", o8.Tau())
	}
	for _, nu := range []float64{1, 2, 3} { // tau -> 1/sqrt(1+4 nu), already at p = 54
		if o, _ := NewLSOperator(300, nu); math.Abs(o.Tau()-1/math.Sqrt(1+4*nu)) > 1e-6 {
			t.Errorf("tau(300, %v) = %v", nu, o.Tau())
		}
	}
	if _, err := NewLSOperator(4, -1); err == nil {
		t.Error("nu < 0 accepted")
	}
	if _, err := NewLSOperator(0, 1); err == nil {
		t.Error("p = 0 accepted")
	}
}

// TestLSStepFusedLasso: one LS-DP-SADMM step (Liu et al. 2022, eq. (5)) on the digest's
// graph-guided fused-lasso instance (Example 3): A = [phi; I] (7x4, path graph), B = -I,
// c = 0, r = 0.05 ||y||_1, beta = 1, eta = 0.5, gamma = 1 + eta beta ||A^T A||, a batch of
// two logistic samples and a fixed noise vector, nu = 0 and 1.
func TestLSStepFusedLasso(t *testing.T) {
	A := [][]float64{{1, -1, 0, 0}, {0, 1, -1, 0}, {0, 0, 1, -1}, {1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}}
	type ex struct {
		a []float64
		y float64
	}
	batch := []ex{{[]float64{1, 0.5, -0.5, 0}, 1}, {[]float64{0, -1, 0.5, 1}, -1}}
	x := []float64{0.1, -0.2, 0.3, 0}
	lam := []float64{0.01, -0.02, 0, 0.03, 0, -0.01, 0.02}
	u := []float64{0.3, -0.1, 0.2, -0.4}
	const beta, eta, lam1 = 1.0, 0.5, 0.05
	gamma := 1 + eta*beta*(3+math.Sqrt2)
	g := make([]float64, 4)
	for _, b := range batch {
		s := 1 / (1 + math.Exp(b.y*dotSeq(b.a, x)))
		for j := range g {
			g[j] -= b.y * b.a[j] * s / 2
		}
	}
	Ax := make([]float64, 7)
	for i := range A {
		Ax[i] = dotSeq(A[i], x)
	}
	yNew := make([]float64, 7)
	for i := range yNew {
		v := Ax[i] + lam[i]
		yNew[i] = math.Copysign(math.Max(math.Abs(v)-lam1/beta, 0), v)
	}
	v := make([]float64, 4)
	for j := range v {
		v[j] = g[j] + u[j]
		for i := range A {
			v[j] += beta * A[i][j] * (Ax[i] - yNew[i] + lam[i])
		}
	}
	for _, c := range []struct {
		nu   float64
		want []float64
	}{
		{0, []float64{0.0795321631, -0.0943492847, 0.2016228802, 0.0213106734}},
		{1, []float64{0.1027236712, -0.1716239011, 0.2767539102, 0.0002627516}},
	} {
		o, _ := NewLSOperator(4, c.nu)
		sv := make([]float64, 4)
		o.Apply(sv, v)
		for j := range sv {
			if got := x[j] - eta/gamma*sv[j]; math.Abs(got-c.want[j]) > 1e-10 {
				t.Errorf("nu %v coord %d: x_{t+1} %.10f want %.10f", c.nu, j, got, c.want[j])
			}
		}
	}
}
