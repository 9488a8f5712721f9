package walk

import (
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/dpadmm/dpadmm/consensus"
)

// quadGrad is the gradient of f(x) = 0.5 ||M x - b||^2.
func quadGrad(m *mat.Dense, b []float64) func(dst, x []float64) {
	return func(dst, x []float64) {
		r, _ := m.Dims()
		res := mat.NewVecDense(r, nil)
		res.MulVec(m, mat.NewVecDense(len(x), append([]float64(nil), x...)))
		for i := 0; i < r; i++ {
			res.SetVec(i, res.AtVec(i)-b[i])
		}
		g := mat.NewVecDense(len(x), nil)
		g.MulVec(m.T(), res)
		for k := range dst {
			dst[k] = g.AtVec(k)
		}
	}
}

func randVec(r *rand.Rand, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = r.NormFloat64()
	}
	return v
}

// TestGADMMOperatorConsensus: with A = I and c = 0 the operator is the closed form of the
// walk's step (digest 2.3), and with g = 0, lambda = 0 it is gradient descent with step
// eta/(1 + eta beta).
func TestGADMMOperatorConsensus(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const n = 6
	M := mat.NewDense(8, n, randVec(r, 8*n))
	b := randVec(r, 8)
	grad := quadGrad(M, b)
	g := consensus.Regularizer{L1: 0.3, L2: 0.2}
	eta, beta := 0.05, 1.5
	o, err := NewGADMMOperator(n, nil, nil, g, eta, beta)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(o.NormA2()-1) > 1e-12 {
		t.Fatalf("||I||^2 = %v", o.NormA2())
	}
	xt, lam := randVec(r, n), randVec(r, n)
	x, l := make([]float64, n), make([]float64, n)
	if err := o.Step(x, l, xt, lam, grad, nil); err != nil {
		t.Fatal(err)
	}
	y := make([]float64, n)
	for k := range y {
		y[k] = xt[k] - lam[k]/beta
	}
	g.Prox(y, y, 1/beta)
	q := make([]float64, n)
	grad(q, xt)
	for k := 0; k < n; k++ {
		wl := lam[k] - beta*(xt[k]-y[k])
		wx := (xt[k] - eta*(q[k]-beta*y[k]-wl)) / (1 + eta*beta)
		if math.Abs(l[k]-wl) > 1e-12*(1+math.Abs(wl)) || math.Abs(x[k]-wx) > 1e-12*(1+math.Abs(wx)) {
			t.Fatalf("coordinate %d: x %v lambda %v, closed form %v %v", k, x[k], l[k], wx, wl)
		}
	}
	o0, _ := NewGADMMOperator(n, nil, nil, consensus.Regularizer{}, eta, beta)
	if err := o0.Step(x, l, xt, make([]float64, n), grad, nil); err != nil {
		t.Fatal(err)
	}
	for k := 0; k < n; k++ {
		if want := xt[k] - eta/(1+eta*beta)*q[k]; math.Abs(x[k]-want) > 1e-12*(1+math.Abs(want)) || l[k] != 0 {
			t.Fatalf("g = 0: x[%d] = %v, gradient descent gives %v; lambda %v", k, x[k], want, l[k])
		}
	}
}

// TestGADMMOperatorGeneral: A = [I | D] with an offset c: the step satisfies the paper's
// first-order identity grad f(x~) = A^T(lambda' - beta(A x - y - c)) + (x~ - x)/eta (Lemma
// 3.2) to rounding, ||A||^2 is lambda_max(I + D D^T) computed separately, and the cached
// factor gives the same result on a second call; bad shapes are refused.
func TestGADMMOperatorGeneral(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const m, n = 3, 5
	D := mat.NewDense(m, n-m, randVec(r, m*(n-m)))
	c := randVec(r, m)
	M := mat.NewDense(7, n, randVec(r, 7*n))
	b := randVec(r, 7)
	grad := quadGrad(M, b)
	eta, beta := 0.02, 2.0
	o, err := NewGADMMOperator(n, D, c, consensus.Regularizer{L1: 0.1}, eta, beta)
	if err != nil {
		t.Fatal(err)
	}
	var dd mat.SymDense
	dd.SymOuterK(1, D)
	for i := 0; i < m; i++ {
		dd.SetSym(i, i, dd.At(i, i)+1)
	}
	var es mat.EigenSym
	es.Factorize(&dd, false)
	if v := es.Values(nil); math.Abs(o.NormA2()-v[m-1]) > 1e-10*v[m-1] {
		t.Fatalf("||A||^2 = %v, lambda_max(I + D D^T) = %v", o.NormA2(), v[m-1])
	}
	xt, lam := randVec(r, n), randVec(r, m)
	x, l := make([]float64, n), make([]float64, m)
	for rep := 0; rep < 2; rep++ {
		if err := o.Step(x, l, xt, lam, grad, nil); err != nil {
			t.Fatal(err)
		}
		// y from lambda' = lambda - beta(A x~ - y - c).
		ax, axn := make([]float64, m), make([]float64, m)
		o.mulA(ax, xt)
		o.mulA(axn, x)
		y := make([]float64, m)
		for i := range y {
			y[i] = (l[i]-lam[i])/beta + ax[i] - c[i]
		}
		w := make([]float64, m)
		for i := range w {
			w[i] = l[i] - beta*(axn[i]-y[i]-c[i])
		}
		atw := make([]float64, n)
		o.mulAT(atw, w)
		q := make([]float64, n)
		grad(q, xt)
		for k := 0; k < n; k++ {
			if rhs := atw[k] + (xt[k]-x[k])/eta; math.Abs(q[k]-rhs) > 1e-8*(1+math.Abs(q[k])) {
				t.Fatalf("rep %d coordinate %d: grad %v, identity gives %v", rep, k, q[k], rhs)
			}
		}
	}
	if _, err := NewGADMMOperator(4, D, c, consensus.Regularizer{}, eta, beta); err == nil {
		t.Error("D of the wrong width accepted")
	}
	if _, err := NewGADMMOperator(n, D, c, consensus.Regularizer{}, 0, beta); err == nil {
		t.Error("eta 0 accepted")
	}
	if err := o.Step(x, l, append(xt[:n-1:n-1], math.NaN()), lam, grad, nil); err == nil {
		t.Error("non-finite x~ accepted")
	}
}
