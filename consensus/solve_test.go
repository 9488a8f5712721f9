package consensus

import (
	"errors"
	"math"
	"testing"

	"gonum.org/v1/gonum/mat"
)

func TestSolveRidgeClosedForm(t *testing.T) {
	d, _ := SyntheticLasso(50, 6, 3, 0.5, 1)
	lam := 0.3
	w, obj, err := Solve(d, Problem{Loss: Squared, Reg: Regularizer{L2: lam}}, SolveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// (X^T X / n + lam I) w = X^T y / n
	X := mat.NewDense(d.Rows, d.Cols, d.X)
	var A mat.Dense
	A.Mul(X.T(), X)
	A.Scale(1/float64(d.Rows), &A)
	for j := 0; j < d.Cols; j++ {
		A.Set(j, j, A.At(j, j)+lam)
	}
	var b mat.VecDense
	b.MulVec(X.T(), mat.NewVecDense(d.Rows, d.Y))
	b.ScaleVec(1/float64(d.Rows), &b)
	var want mat.VecDense
	if err := want.SolveVec(&A, &b); err != nil {
		t.Fatal(err)
	}
	for j := range w {
		if math.Abs(w[j]-want.AtVec(j)) > 1e-9 {
			t.Fatalf("w[%d] = %v, want %v", j, w[j], want.AtVec(j))
		}
	}
	p := Problem{Loss: Squared, Reg: Regularizer{L2: lam}}
	if math.Abs(obj-p.Objective(d, want.RawVector().Data)) > 1e-12 {
		t.Errorf("objective %v vs %v", obj, p.Objective(d, want.RawVector().Data))
	}
}

func TestSolveLassoOrthonormal(t *testing.T) {
	// X = sqrt(n) * I-like design: rows are scaled unit vectors, so X^T X / n = I and the
	// lasso solution is the soft-threshold of X^T y / n.
	p := 4
	n := 8
	d := &Dataset{Name: "orth", Rows: n, Cols: p, X: make([]float64, n*p), Y: make([]float64, n)}
	s := math.Sqrt(float64(n) / 2)
	ys := []float64{3, -1, 0.2, -0.05, 1, 2, -0.4, 0.7}
	for i := 0; i < n; i++ {
		d.X[i*p+i%p] = s
		d.Y[i] = ys[i]
	}
	kappa := 0.5
	w, _, err := Solve(d, Problem{Loss: Squared, Reg: Regularizer{L1: kappa}}, SolveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for j := 0; j < p; j++ {
		c := 0.0
		for i := 0; i < n; i++ {
			c += d.X[i*p+j] * d.Y[i]
		}
		c /= float64(n)
		want := math.Copysign(math.Max(math.Abs(c)-kappa, 0), c)
		if math.Abs(w[j]-want) > 1e-10 {
			t.Errorf("w[%d] = %v, want %v", j, w[j], want)
		}
	}
}

func TestSolveLogisticStationary(t *testing.T) {
	d, _ := SyntheticLogistic(200, 5, 3, 4)
	prob := Problem{Loss: Logistic, Reg: Regularizer{L2: 0.01}}
	w, _, err := Solve(d, prob, SolveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g := make([]float64, d.Cols)
	prob.meanGrad(g, d, w)
	for j := range g {
		g[j] += 0.01 * w[j]
	}
	if norm2(g) > 1e-10 {
		t.Errorf("gradient norm at solution %v", norm2(g))
	}
}

func TestSolveEmbeddedElasticNet(t *testing.T) {
	d, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	sc, err := FitScaler(d, ScaleStandardizeNorm)
	if err != nil {
		t.Fatal(err)
	}
	d = sc.Apply(d)
	for _, prob := range []Problem{
		{Loss: Logistic, Reg: Regularizer{L1: 1e-3, L2: 1e-3}},
		{Loss: Squared, Reg: Regularizer{L1: 1e-3}},
	} {
		w, obj, err := Solve(d, prob, SolveOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// optimality: for every coordinate, -grad_j in L1 * subdifferential of |w_j| (+ L2 w_j)
		g := make([]float64, d.Cols)
		prob.meanGrad(g, d, w)
		for j := range g {
			gj := g[j] + prob.Reg.L2*w[j]
			if w[j] != 0 {
				gj += prob.Reg.L1 * math.Copysign(1, w[j])
				if math.Abs(gj) > 1e-8 {
					t.Errorf("%v: coordinate %d stationarity %v", prob.Loss, j, gj)
				}
			} else if math.Abs(gj) > prob.Reg.L1+1e-8 {
				t.Errorf("%v: zero coordinate %d gradient %v exceeds L1", prob.Loss, j, gj)
			}
		}
		if prob.Loss == Logistic {
			if acc := prob.Accuracy(d, w); acc < 0.9 {
				t.Errorf("training accuracy %v", acc)
			}
		}
		zero := make([]float64, d.Cols)
		if obj >= prob.Objective(d, zero) {
			t.Errorf("objective %v not below value at zero", obj)
		}
	}
}

func TestSolveErrors(t *testing.T) {
	d := &Dataset{Name: "x", Rows: 1, Cols: 1, X: []float64{1}, Y: []float64{3}}
	if _, _, err := Solve(d, Problem{Loss: Logistic}, SolveOptions{}); err == nil {
		t.Error("logistic with label 3 accepted")
	}
	if _, _, err := Solve(d, Problem{Reg: Regularizer{L1: -1}}, SolveOptions{}); err == nil {
		t.Error("negative L1 accepted")
	}
	d2, _ := SyntheticLasso(30, 5, 2, 0.1, 2)
	if _, _, err := Solve(d2, Problem{}, SolveOptions{MaxIter: 2}); err == nil {
		t.Error("no error after 2 iterations")
	}
}

// TestSolveCanceled: a closed Done stops the solver at once with ErrSolveCanceled and the
// last iterate; an open one changes nothing.
func TestSolveCanceled(t *testing.T) {
	d, _ := SyntheticLogistic(200, 10, 4, 7)
	p := Problem{Loss: Logistic, Reg: Regularizer{L2: 0.01}}
	done := make(chan struct{})
	w0, obj0, err := Solve(d, p, SolveOptions{Done: done})
	if err != nil {
		t.Fatal(err)
	}
	w1, obj1, _ := Solve(d, p, SolveOptions{})
	if obj0 != obj1 || len(w0) != len(w1) {
		t.Fatalf("an open Done changed the result: %v vs %v", obj0, obj1)
	}
	close(done)
	w, _, err := Solve(d, p, SolveOptions{Done: done})
	if !errors.Is(err, ErrSolveCanceled) || len(w) != len(w1) {
		t.Fatalf("closed Done: err %v, %d weights", err, len(w))
	}
}
