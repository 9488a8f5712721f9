package consensus

import (
	"math"
	"testing"
)

func TestSoftplusStable(t *testing.T) {
	for _, c := range []struct{ x, want float64 }{
		{0, math.Ln2},
		{1000, 1000},
		{-1000, 0},
		{-40, math.Exp(-40)},
		{2, math.Log(1 + math.Exp(2))},
	} {
		got := softplus(c.x)
		if math.Abs(got-c.want) > 1e-12*math.Max(1, math.Abs(c.want)) || math.IsInf(got, 0) {
			t.Errorf("softplus(%v) = %v, want %v", c.x, got, c.want)
		}
	}
}

func TestRegularizerProx(t *testing.T) {
	cases := []struct {
		name  string
		reg   Regularizer
		gamma float64
		v     []float64
		want  []float64
	}{
		{"none", Regularizer{}, 1, []float64{1, -2, 0}, []float64{1, -2, 0}},
		{"l1", Regularizer{L1: 0.5}, 2, []float64{3, -0.5, 1, -4}, []float64{2, 0, 0, -3}},
		{"l2", Regularizer{L2: 1}, 1, []float64{2, -4}, []float64{1, -2}},
		{"elastic", Regularizer{L1: 1, L2: 3}, 0.5, []float64{2, -0.2, -1}, []float64{0.6, 0, -0.2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dst := make([]float64, len(c.v))
			c.reg.Prox(dst, c.v, c.gamma)
			for i := range dst {
				if math.Abs(dst[i]-c.want[i]) > 1e-12 {
					t.Fatalf("Prox = %v, want %v", dst, c.want)
				}
			}
			// the prox minimizes r(x) + ||x-v||^2/(2 gamma): compare with perturbations
			obj := func(x []float64) float64 {
				s := 0.0
				for i := range x {
					s += (x[i] - c.v[i]) * (x[i] - c.v[i])
				}
				return c.reg.Value(x) + s/(2*c.gamma)
			}
			f0 := obj(dst)
			for i := range dst {
				for _, h := range []float64{1e-3, -1e-3} {
					y := append([]float64(nil), dst...)
					y[i] += h
					if obj(y) < f0-1e-15 {
						t.Fatalf("perturbation %d by %v lowers objective", i, h)
					}
				}
			}
			// aliasing
			v := append([]float64(nil), c.v...)
			c.reg.Prox(v, v, c.gamma)
			for i := range v {
				if v[i] != dst[i] {
					t.Fatalf("aliased prox differs: %v vs %v", v, dst)
				}
			}
		})
	}
}

func TestProblemValidate(t *testing.T) {
	good := []Problem{{Squared, Regularizer{}}, {Logistic, Regularizer{L1: 1, L2: 2}}}
	for _, p := range good {
		if err := p.Validate(); err != nil {
			t.Errorf("%+v: %v", p, err)
		}
	}
	bad := []Problem{{Squared, Regularizer{L1: -1}}, {Logistic, Regularizer{L2: math.NaN()}},
		{Loss(7), Regularizer{}}, {Squared, Regularizer{L1: math.Inf(1)}}}
	for _, p := range bad {
		if err := p.Validate(); err == nil {
			t.Errorf("%+v: accepted", p)
		}
	}
}

func TestParseLoss(t *testing.T) {
	for s, want := range map[string]Loss{"squared": Squared, "logistic": Logistic, "Lasso": Squared} {
		got, err := ParseLoss(s)
		if err != nil || got != want {
			t.Errorf("ParseLoss(%q) = %v, %v", s, got, err)
		}
		if got.String() != want.String() {
			t.Errorf("String mismatch")
		}
	}
	if _, err := ParseLoss("hinge"); err == nil {
		t.Error("hinge accepted")
	}
}

func TestMetrics(t *testing.T) {
	d := &Dataset{Name: "m", Rows: 3, Cols: 2, X: []float64{1, 0, 0, 1, 1, 1}, Y: []float64{1, -1, 1}}
	w := []float64{2, -1}
	// margins 2, -1, 1
	p := Problem{Loss: Squared, Reg: Regularizer{L1: 0.1, L2: 2}}
	wantLoss := (0.5*1 + 0 + 0) / 3
	if got := p.MeanLoss(d, w); math.Abs(got-wantLoss) > 1e-15 {
		t.Errorf("MeanLoss = %v, want %v", got, wantLoss)
	}
	wantObj := wantLoss + 0.1*3 + 0.5*2*5
	if got := p.Objective(d, w); math.Abs(got-wantObj) > 1e-14 {
		t.Errorf("Objective = %v, want %v", got, wantObj)
	}
	if got := p.Accuracy(d, w); got != 1 {
		t.Errorf("Accuracy = %v", got)
	}
	pl := Problem{Loss: Logistic}
	wantL := (math.Log1p(math.Exp(-2)) + math.Log1p(math.Exp(-1)) + math.Log1p(math.Exp(-1))) / 3
	if got := pl.MeanLoss(d, w); math.Abs(got-wantL) > 1e-15 {
		t.Errorf("logistic MeanLoss = %v, want %v", got, wantL)
	}
	if got := pl.Accuracy(d, []float64{0, -1}); math.Abs(got-2.0/3) > 1e-15 {
		t.Errorf("Accuracy = %v", got)
	}
}

// TestRegressionRMSE: RMSE and R^2 against values worked out by hand.
func TestRegressionRMSE(t *testing.T) {
	// Predictions x.w = 2, -1, 1, 4 for targets 1, -1, 1, 3: residuals 1, 0, 0, 1,
	// SS_res = 2, RMSE = sqrt(2/4); mean(y) = 1, SS_tot = 0 + 4 + 0 + 4 = 8, R^2 = 1 - 2/8.
	d := &Dataset{Name: "r", Rows: 4, Cols: 2, X: []float64{1, 0, 0, 1, 1, 1, 2, 0}, Y: []float64{1, -1, 1, 3}}
	rmse, r2, ok := Regression(d, []float64{2, -1})
	if !ok || math.Abs(rmse-math.Sqrt(0.5)) > 1e-15 || math.Abs(r2-0.75) > 1e-15 {
		t.Errorf("Regression = %v, %v; want %v, 0.75", rmse, r2, math.Sqrt(0.5))
	}
	// The zero model predicts 0: SS_res = 1+1+1+9 = 12 > SS_tot, R^2 = 1 - 12/8 < 0.
	if _, r2, _ := Regression(d, []float64{0, 0}); math.Abs(r2-(-0.5)) > 1e-15 {
		t.Errorf("R^2 of the zero model = %v, want -0.5", r2)
	}
	flat := &Dataset{Name: "f", Rows: 2, Cols: 1, X: []float64{1, 2}, Y: []float64{3, 3}}
	if rmse, _, ok := Regression(flat, []float64{1}); math.Abs(rmse-math.Sqrt(2.5)) > 1e-15 || ok {
		t.Errorf("constant targets: %v, R^2 defined %v; want %v, undefined", rmse, ok, math.Sqrt(2.5))
	}
	if rmse, r2, ok := Regression(&Dataset{Cols: 1}, []float64{1}); ok || rmse != 0 {
		t.Errorf("empty dataset: %v, %v", rmse, r2)
	}
}

// proxResidual returns ||grad f(x) + (x-v)/gamma||.
func proxResidual(l *LocalLoss, x, v []float64, gamma float64) float64 {
	g := make([]float64, len(x))
	l.Grad(g, x)
	for i := range g {
		g[i] += (x[i] - v[i]) / gamma
	}
	return norm2(g)
}

func TestLocalLossGradFiniteDiff(t *testing.T) {
	d, _ := SyntheticLogistic(7, 4, 2, 3)
	for _, loss := range []Loss{Squared, Logistic} {
		l, err := NewLocalLoss(d, loss, 2.5)
		if err != nil {
			t.Fatal(err)
		}
		w := []float64{0.3, -0.2, 0.5, 1}
		g := make([]float64, 4)
		l.Grad(g, w)
		for j := range w {
			h := 1e-6
			wp := append([]float64(nil), w...)
			wm := append([]float64(nil), w...)
			wp[j] += h
			wm[j] -= h
			fd := (l.Value(wp) - l.Value(wm)) / (2 * h)
			if math.Abs(fd-g[j]) > 1e-6 {
				t.Errorf("%v: grad[%d] = %v, finite difference %v", loss, j, g[j], fd)
			}
		}
		// Value is Weight * mean loss
		want := 2.5 * Problem{Loss: loss}.MeanLoss(d, w)
		if math.Abs(l.Value(w)-want) > 1e-12 {
			t.Errorf("%v: Value = %v, want %v", loss, l.Value(w), want)
		}
	}
}

func TestLocalLossProx(t *testing.T) {
	dl, _ := SyntheticLogistic(9, 5, 3, 11)
	one := dl.Subset([]int{4})
	for _, c := range []struct {
		name  string
		d     *Dataset
		loss  Loss
		gamma float64
	}{
		{"squared-many", dl, Squared, 0.7},
		{"squared-one", one, Squared, 3},
		{"logistic-many", dl, Logistic, 5},
		{"logistic-one", one, Logistic, 100},
		{"logistic-small-gamma", dl, Logistic, 1e-3},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := NewLocalLoss(c.d, c.loss, 1.7)
			if err != nil {
				t.Fatal(err)
			}
			v := []float64{1, -2, 0.5, 3, -1}
			x := make([]float64, 5)
			for _, gamma := range []float64{c.gamma, 2 * c.gamma, c.gamma} {
				if err := l.Prox(x, v, gamma); err != nil {
					t.Fatal(err)
				}
				if r := proxResidual(l, x, v, gamma); r > 1e-8 {
					t.Fatalf("gamma %v: optimality residual %v", gamma, r)
				}
			}
			// aliasing
			y := append([]float64(nil), v...)
			if err := l.Prox(y, y, c.gamma); err != nil {
				t.Fatal(err)
			}
			for i := range y {
				if math.Abs(y[i]-x[i]) > 1e-10 {
					t.Fatalf("aliased prox %v differs from %v", y, x)
				}
			}
		})
	}
}

func TestLocalLossProxOneRowClosedForm(t *testing.T) {
	d := &Dataset{Name: "one", Rows: 1, Cols: 3, X: []float64{1, 2, -1}, Y: []float64{0.5}}
	w, gamma := 2.0, 0.3
	l, err := NewLocalLoss(d, Squared, w)
	if err != nil {
		t.Fatal(err)
	}
	v := []float64{0.1, -0.4, 2}
	// Solve (w a a^T + I/gamma) x = w a b + v/gamma by the general (two identical half-weight rows) path.
	d2 := &Dataset{Name: "two", Rows: 2, Cols: 3, X: []float64{1, 2, -1, 1, 2, -1}, Y: []float64{0.5, 0.5}}
	l2, _ := NewLocalLoss(d2, Squared, w)
	x1, x2 := make([]float64, 3), make([]float64, 3)
	_ = l.Prox(x1, v, gamma)
	_ = l2.Prox(x2, v, gamma)
	for i := range x1 {
		if math.Abs(x1[i]-x2[i]) > 1e-12 {
			t.Fatalf("Sherman-Morrison %v vs Cholesky %v", x1, x2)
		}
	}
}

func TestLocalLossProxNoAlloc(t *testing.T) {
	dl, _ := SyntheticLogistic(20, 6, 3, 5)
	for _, c := range []struct {
		name string
		d    *Dataset
		loss Loss
	}{
		{"squared-one", dl.Subset([]int{0}), Squared},
		{"squared-many", dl, Squared},
		{"logistic", dl, Logistic},
	} {
		l, err := NewLocalLoss(c.d, c.loss, 1)
		if err != nil {
			t.Fatal(err)
		}
		v := []float64{1, 2, 3, -1, -2, 0}
		x := make([]float64, 6)
		_ = l.Prox(x, v, 0.5)
		allocs := testing.AllocsPerRun(20, func() { _ = l.Prox(x, v, 0.5) })
		if allocs != 0 {
			t.Errorf("%s: %v allocations per Prox", c.name, allocs)
		}
	}
}

func TestNewLocalLossErrors(t *testing.T) {
	d := &Dataset{Name: "x", Rows: 1, Cols: 1, X: []float64{1}, Y: []float64{0}}
	if _, err := NewLocalLoss(d, Logistic, 1); err == nil {
		t.Error("logistic with label 0 accepted")
	}
	if _, err := NewLocalLoss(d, Squared, 0); err == nil {
		t.Error("zero weight accepted")
	}
	if _, err := NewLocalLoss(&Dataset{Name: "e"}, Squared, 1); err == nil {
		t.Error("empty shard accepted")
	}
	l, _ := NewLocalLoss(d, Squared, 1)
	if err := l.Prox(make([]float64, 1), []float64{1}, -1); err == nil {
		t.Error("negative gamma accepted")
	}
	if err := l.Prox(make([]float64, 2), []float64{1}, 1); err == nil {
		t.Error("wrong length accepted")
	}
}

// TestLossValueDeriv: the exported per-example loss is (m-y)^2/2 or log(1+exp(-y m)) (the
// direct formula, exact enough at moderate margins), and Deriv is its derivative (central
// differences).
func TestLossValueDeriv(t *testing.T) {
	for _, c := range []struct{ m, y float64 }{{0.3, 1}, {-1.7, 1}, {2.2, -1}, {0, -1}, {-4, -1}} {
		if got, want := Logistic.Value(c.m, c.y), math.Log(1+math.Exp(-c.y*c.m)); math.Abs(got-want) > 1e-14*(1+want) {
			t.Errorf("logistic value(%v, %v) = %v, want %v", c.m, c.y, got, want)
		}
		if got, want := Squared.Value(c.m, c.y), (c.m-c.y)*(c.m-c.y)/2; got != want {
			t.Errorf("squared value(%v, %v) = %v, want %v", c.m, c.y, got, want)
		}
		for _, l := range []Loss{Logistic, Squared} {
			const h = 1e-6
			fd := (l.Value(c.m+h, c.y) - l.Value(c.m-h, c.y)) / (2 * h)
			if d := l.Deriv(c.m, c.y); math.Abs(d-fd) > 1e-8 {
				t.Errorf("%v deriv(%v, %v) = %v, finite difference %v", l, c.m, c.y, d, fd)
			}
		}
	}
}

// TestProblemFor: the walk leaves the intercept unpenalised and fits three classes with
// the multinomial loss per class block; the neighbour exchange penalises every coordinate
// and fits them one-vs-rest.
func TestProblemFor(t *testing.T) {
	d := &Dataset{Rows: 3, Cols: 2, X: []float64{1, 0, 0, 1, 1, 1}, Y: []float64{0, 1, 2}, Classes: &Classes{List: []string{"a", "b", "c"}}}
	base := Problem{Loss: Logistic, Reg: Regularizer{L2: 0.1, Free: 1, Block: 7}}
	w := base.For(d, true, true)
	if w.Loss != Multinomial || w.Reg.Free != 1 || w.Reg.Block != 2 {
		t.Errorf("walk: %+v", w)
	}
	g := base.For(d, true, false)
	if g.Loss != LogisticOvR || g.Reg.Free != 0 || g.Reg.Block != 0 {
		t.Errorf("exchange: %+v", g)
	}
	if p := (Problem{Loss: Squared}).For(d, false, true); p.Reg.Free != 0 {
		t.Errorf("no intercept: %+v", p)
	}
}
