package consensus

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"
)

// oldProxLogistic is the logistic prox as it was before Newton (scalar Hessian loops, scalar
// Cholesky, objective recomputed at every trial, always starting at v): the reference of the
// known-answer tests.
func oldProxLogistic(l *LocalLoss, dst, v []float64, gamma float64) error {
	p := l.shard.Cols
	x, g, d := make([]float64, p), make([]float64, p), make([]float64, p)
	h, chol, rhs := make([]float64, p*p), make([]float64, p*p), make([]float64, p)
	copy(x, v)
	objective := func(x []float64) float64 {
		s := 0.0
		for j := range x {
			t := x[j] - v[j]
			s += t * t
		}
		return l.Value(x) + s/(2*gamma)
	}
	fx := objective(x)
	for iter := 0; iter < 200; iter++ {
		clear(g)
		clear(h)
		for r := 0; r < l.shard.Rows; r++ {
			a := l.shard.Row(r)
			m := dot(a, x)
			y := l.shard.Y[r]
			c := -y * sigmoid(-y*m) * l.c
			s := sigmoid(m)
			hw := s * (1 - s) * l.c
			for i, ai := range a {
				g[i] += c * ai
				if hw != 0 && ai != 0 {
					t := hw * ai
					for j := 0; j <= i; j++ {
						h[i*p+j] += t * a[j]
					}
				}
			}
		}
		for i := range g {
			g[i] += (x[i] - v[i]) / gamma
			h[i*p+i] += 1 / gamma
		}
		if norm2(g) <= 1e-10 {
			break
		}
		if !cholesky(chol, h, p) {
			return fmt.Errorf("consensus: prox: Hessian not positive definite")
		}
		cholSolve(d, chol, g, p)
		slope := dot(g, d)
		t := 1.0
		improved := false
		for ls := 0; ls < 60; ls++ {
			for i := range x {
				rhs[i] = x[i] - t*d[i]
			}
			fn := objective(rhs)
			if fn <= fx-1e-4*t*slope {
				copy(x, rhs)
				fx = fn
				improved = true
				break
			}
			t *= 0.5
		}
		if !improved {
			break
		}
	}
	copy(dst, x)
	return nil
}

// relDiff returns ||a-b|| / max(1, ||b||).
func relDiff(a, b []float64) float64 {
	s := 0.0
	for j := range a {
		s += (a[j] - b[j]) * (a[j] - b[j])
	}
	return math.Sqrt(s) / math.Max(1, norm2(b))
}

func randVec(r interface{ NormFloat64() float64 }, p int, scale float64) []float64 {
	v := make([]float64, p)
	for j := range v {
		v[j] = scale * r.NormFloat64()
	}
	return v
}

// TestNewtonProxMatchesOld: the logistic prox by Newton (dense, Woodbury and CG directions)
// equals the old solver's answer to the certified 2e-10 gamma on several shapes and
// gammas, from a cold start and warm-started from far previous solutions, and its gradient
// at the answer is below the tolerance.
func TestNewtonProxMatchesOld(t *testing.T) {
	shapes := []struct{ rows, p int }{{180, 64}, {40, 64}, {400, 8}, {60, 320}, {330, 310}, {1, 5}}
	for si, sh := range shapes {
		for _, cg := range []bool{false, true} {
			d, _ := SyntheticLogistic(sh.rows, sh.p, 4, uint64(10+si))
			l, err := NewLocalLoss(d, Logistic, 1.7)
			if err != nil {
				t.Fatal(err)
			}
			r := newRand(uint64(100 + si))
			for k, gamma := range []float64{1, 0.1, 10, 1} {
				scale := []float64{1, 50, 0.1, 20}[k]
				v := randVec(r, sh.p, scale)
				got, want := make([]float64, sh.p), make([]float64, sh.p)
				if err := l.Prox(got, v, gamma); err != nil {
					t.Fatal(err)
				}
				if cg && l.nt != nil {
					l.nt.forceCG = true
				}
				if err := oldProxLogistic(l, want, v, gamma); err != nil {
					t.Fatal(err)
				}
				// Each solver stops at a gradient norm of 1e-10 and the prox objective is
				// (1/gamma)-strongly convex: each answer is within 1e-10 gamma of the exact
				// prox, so they differ by at most twice that.
				if e := relDiff(got, want); e > 2e-10*math.Max(1, gamma) {
					t.Errorf("%dx%d gamma %v scale %v cg %v: new and old prox differ by %.3g", sh.rows, sh.p, gamma, scale, cg, e)
				}
				if res := proxResidual(l, got, v, gamma); res > 1e-10 {
					t.Errorf("%dx%d gamma %v: residual %.3g", sh.rows, sh.p, gamma, res)
				}
			}
		}
	}
}

// TestNewtonSquaredMatchesSolve: for the squared loss, Newton's answer is the solution of the
// normal equations (c X^T X + mu I) x = c X^T y - b, by the scalar Cholesky, on tall, wide and
// square shapes and with every direction method.
func TestNewtonSquaredMatchesSolve(t *testing.T) {
	for si, sh := range []struct{ rows, p int }{{100, 20}, {15, 40}, {30, 30}, {50, 350}} {
		for _, cg := range []bool{false, true} {
			d, _ := SyntheticLasso(sh.rows, sh.p, 4, 0.1, uint64(20+si))
			n := NewNewton(d, Squared)
			n.forceCG = cg
			r := newRand(uint64(200 + si))
			for _, cm := range [][2]float64{{0.3, 1}, {2, 0.05}, {0.3, 1}} {
				c, mu := cm[0], cm[1]
				b := randVec(r, sh.p, 3)
				p := sh.p
				h, chol, rhs, want := make([]float64, p*p), make([]float64, p*p), make([]float64, p), make([]float64, p)
				for row := 0; row < sh.rows; row++ {
					a := d.Row(row)
					for i := range a {
						rhs[i] += c * a[i] * d.Y[row]
						for j := 0; j <= i; j++ {
							h[i*p+j] += c * a[i] * a[j]
						}
					}
				}
				for i := range rhs {
					rhs[i] -= b[i]
					h[i*p+i] += mu
				}
				if !cholesky(chol, h, p) {
					t.Fatal("not positive definite")
				}
				cholSolve(want, chol, rhs, p)
				got := randVec(r, p, 100) // far start
				res := n.Solve(got, b, got, c, mu, NewtonOptions{Tol: 1e-11 * (1 + norm2(b) + c*float64(sh.rows)), MaxIter: 100, FullStep: true, Final: true})
				if !res.Converged {
					t.Errorf("%dx%d: not converged: %+v", sh.rows, sh.p, res)
				}
				if e := relDiff(got, want); e > 1e-10 {
					t.Errorf("%dx%d c %v mu %v cg %v: differs from the normal equations by %.3g", sh.rows, sh.p, c, mu, cg, e)
				}
			}
		}
	}
}

// TestNewtonProxAllocs: after the first call, the logistic prox does not allocate.
// It checks a wide shard (Woodbury) and a tall one (the chord steps of Precond).
func TestNewtonProxAllocs(t *testing.T) {
	for _, sh := range [][2]int{{50, 70}, {300, 20}} {
		d, _ := SyntheticLogistic(sh[0], sh[1], 4, 3)
		l, _ := NewLocalLoss(d, Logistic, 1)
		v, x := randVec(newRand(1), sh[1], 1), make([]float64, sh[1])
		_ = l.Prox(x, v, 1)
		if a := testing.AllocsPerRun(20, func() { v[0] += 0.01; _ = l.Prox(x, v, 1) }); a != 0 {
			t.Errorf("%dx%d: Prox allocates %v", sh[0], sh[1], a)
		}
	}
}

// proxBench runs the logistic prox of a rows x p shard at gamma 1 over a sequence of inputs
// v_k = v_0 + 0.3 xi_k (fresh Gaussian xi_k): a node's successive prox inputs, different at
// every call; the solver starts at v every call.
func proxBench(b *testing.B, rows, p int, old bool, cg ...bool) {
	d, _ := SyntheticLogistic(rows, p, 8, 1)
	proxBenchOn(b, d, old, cg...)
}

// proxBenchOn is proxBench on the dataset d.
func proxBenchOn(b *testing.B, d *Dataset, old bool, cg ...bool) {
	p := d.Cols
	l, err := NewLocalLoss(d, Logistic, 1)
	if err != nil {
		b.Fatal(err)
	}
	r := newRand(5)
	v0 := randVec(r, p, 1)
	const seq = 64
	vs := make([][]float64, seq)
	for k := range vs {
		vs[k] = randVec(r, p, 0.3)
		for j := range v0 {
			vs[k][j] += v0[j]
		}
	}
	x := make([]float64, p)
	if len(cg) > 0 {
		l.nt = NewNewton(d, Logistic)
		l.nt.forceCG = cg[0]
	}
	k := 0
	for b.Loop() {
		v := vs[k%seq]
		k++
		if old {
			err = oldProxLogistic(l, x, v, 1)
		} else {
			err = l.Prox(x, v, 1)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkProxLogistic180: one node's logistic prox, 180 rows, p = 64, gamma 1. Old is the
// reference copy of the previous solver.
func BenchmarkProxLogistic180Old(b *testing.B) { proxBench(b, 180, 64, true) }
func BenchmarkProxLogistic180(b *testing.B)    { proxBench(b, 180, 64, false) }

// BenchmarkProxLogisticBreastCancer: real rows, the shipped breast_cancer.csv (569 x 30,
// standardized and projected onto the unit ball) as one node.
func BenchmarkProxLogisticBreastCancer(b *testing.B) {
	d, err := shippedBreastCancer(b)
	if err != nil {
		b.Skipf("the shipped data (../shared/data beside the repository): %v", err)
	}
	proxBenchOn(b, d, false)
}

// BenchmarkProxLogistic10k: a node with 10,000 rows and p = 100.
func BenchmarkProxLogistic10k(b *testing.B) { proxBench(b, 10000, 100, false) }

// The same with Newton-CG forced (no dense Hessian).
func BenchmarkProxLogistic180CG(b *testing.B) { proxBench(b, 180, 64, false, true) }
func BenchmarkProxLogistic10kCG(b *testing.B) { proxBench(b, 10000, 100, false, true) }

// TestExpNeg: expNeg against math.Exp over [0, 750] (dense near 0, the logistic margins'
// range, and the underflow end), within 4 ulp, and NaN for NaN.
func TestExpNeg(t *testing.T) {
	r := newRand(3)
	worst := 0.0
	check := func(x float64) {
		want, got := math.Exp(-x), expNeg(x)
		if want == 0 && got == 0 {
			return
		}
		ulp := math.Abs(got-want) / (math.Nextafter(want, math.Inf(1)) - want)
		worst = math.Max(worst, ulp)
		if !(ulp <= 4) {
			t.Fatalf("expNeg(%v) = %v, math.Exp = %v: %.2g ulp", x, got, want, ulp)
		}
	}
	for i := 0; i < 2_000_000; i++ {
		check(r.Float64() * 40)
		check(r.Float64() * 750)
		check(r.Float64() * 1e-3)
	}
	for _, x := range []float64{0, 1e-300, math.SmallestNonzeroFloat64, math.Ln2 / 2, math.Ln2, 699.999, 700, 708.39, 745.1, 746, math.Inf(1)} {
		check(x)
	}
	if !math.IsNaN(expNeg(math.NaN())) {
		t.Fatal("expNeg(NaN) is not NaN")
	}
	t.Logf("worst error %.2f ulp", worst)
}

// TestNewtonPrecond: the chord steps of NewtonOptions.Precond. On the shipped
// breast-cancer rows (standardized, unit ball, one node) they reach the tolerance alone in
// at most 6 steps, forming no Hessian; on a shard whose far start puts the Hessian weights
// far from those at the answer they give up, and the damped Newton that follows meets the
// tolerance at the same point as Newton alone (within the solvers' certified distance);
// and a solver that served many calls gives the same bits as a fresh one (its tables
// depend on the data alone).
func TestNewtonPrecond(t *testing.T) {
	full, err := shippedBreastCancer(t)
	if err != nil {
		t.Fatalf("the shipped data (../shared/data beside the repository): %v", err)
	}
	syn, _ := SyntheticLogistic(400, 8, 4, 7)
	opt := NewtonOptions{Tol: 1e-10, MaxIter: 200, FullStep: true, Final: true, Chord: true, Precond: true}
	plain := opt
	plain.Precond = false
	fellBack := false
	for _, tc := range []struct {
		d         *Dataset
		c, mu     float64
		scale     float64
		alone     bool // the chord steps must converge without Newton
		name      string
		maxChords int
	}{
		{full, 1 / float64(full.Rows), 1, 1, true, "breast-cancer gamma 1", 6},
		{full, 1 / float64(full.Rows), 0.1, 1, true, "breast-cancer gamma 10", 12},
		{syn, 1, 0.01, 50, false, "synthetic 400x8 gamma 100 far", 0},
	} {
		p := tc.d.Cols
		long := NewNewton(tc.d, Logistic)
		r := newRand(9)
		for k := 0; k < 20; k++ {
			v := randVec(r, p, tc.scale)
			b := make([]float64, p)
			for j := range v {
				b[j] = -v[j] * tc.mu
			}
			got, fresh, want := make([]float64, p), make([]float64, p), make([]float64, p)
			res := long.Solve(got, b, v, tc.c, tc.mu, opt)
			if !res.Converged {
				t.Fatalf("%s: not converged: %+v", tc.name, res)
			}
			if tc.alone && (long.h != nil || res.Newton > tc.maxChords) {
				t.Fatalf("%s: %d steps, Hessian formed %v: the chord steps did not converge alone", tc.name, res.Newton, long.h != nil)
			}
			fellBack = fellBack || long.h != nil || long.r != nil
			NewNewton(tc.d, Logistic).Solve(fresh, b, v, tc.c, tc.mu, opt)
			if !slices.Equal(got, fresh) {
				t.Fatalf("%s: a long-lived solver and a fresh one differ", tc.name)
			}
			if wr := NewNewton(tc.d, Logistic).Solve(want, b, v, tc.c, tc.mu, plain); !wr.Converged {
				t.Fatalf("%s: Newton alone did not converge: %+v", tc.name, wr)
			}
			if e := relDiff(got, want); e > 2e-10/tc.mu {
				t.Fatalf("%s: chord and Newton answers differ by %.3g", tc.name, e)
			}
		}
	}
	if !fellBack {
		t.Fatal("no case fell back from the chord steps to Newton")
	}
}

// shippedBreastCancer loads the shipped breast_cancer.csv (../shared/data beside the
// repository), standardized and projected onto the unit ball as a node scales it; the
// error is the load's.
func shippedBreastCancer(tb testing.TB) (*Dataset, error) {
	tb.Helper()
	d, err := Load(filepath.Join("..", "..", "shared", "data", "breast_cancer.csv"), LoadOptions{Binary: true})
	if err != nil {
		return nil, err
	}
	sc, err := FitScaler(d, ScaleStandardizeUnitBall)
	if err != nil {
		tb.Fatal(err)
	}
	return sc.Apply(d), nil
}
