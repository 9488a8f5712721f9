package consensus

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// irisLike returns a small 3-class dataset: three clouds around e_0, e_1, e_2 in 4
// dimensions.
func irisLike(t *testing.T, rows int) *Dataset {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	b.WriteString("label,a,b,c,d\n")
	names := []string{"setosa", "versicolor", "virginica"}
	for i := 0; i < rows; i++ {
		k := i % 3
		b.WriteString(names[k])
		for j := 0; j < 4; j++ {
			v := 0.2 * rng.NormFloat64()
			if j == k {
				v++
			}
			b.WriteString("," + strconvF(v))
		}
		b.WriteString("\n")
	}
	d, err := ParseCSV("iris-like", strings.NewReader(b.String()), LoadOptions{Binary: true, Multiclass: true})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func strconvF(v float64) string { return strings.TrimRight(strings.TrimRight(fmtG(v), "0"), ".") }

func fmtG(v float64) string { return strconv.FormatFloat(v, 'f', 6, 64) }

// TestMulticlassLabels: more than two labels become class indices in sorted order, with
// the class list recorded; a fixed list maps another file the same way and refuses a label
// outside it; without Multiclass a third label is still an error.
func TestMulticlassLabels(t *testing.T) {
	csv := "y,x\nb,1\na,2\nc,3\nb,4\n"
	d, err := ParseCSV("t", strings.NewReader(csv), LoadOptions{Binary: true, Multiclass: true})
	if err != nil {
		t.Fatal(err)
	}
	if d.NumClasses() != 3 || strings.Join(d.Classes.List, ",") != "a,b,c" || d.Y[0] != 1 || d.Y[1] != 0 || d.Y[2] != 2 || d.ModelDim() != 3 {
		t.Fatalf("classes %+v labels %v dim %d", d.Classes, d.Y, d.ModelDim())
	}
	e, err := ParseCSV("u", strings.NewReader("y,x\nc,1\na,2\n"), LoadOptions{Binary: true, Classes: d.Classes})
	if err != nil || e.Y[0] != 2 || e.Y[1] != 0 || e.NumClasses() != 3 {
		t.Fatalf("fixed list: %v %v", e, err)
	}
	if _, err := ParseCSV("v", strings.NewReader("y,x\nd,1\na,2\n"), LoadOptions{Binary: true, Classes: d.Classes}); err == nil || !strings.Contains(err.Error(), `"d" is not one of the run's classes`) {
		t.Fatalf("label outside the list: %v", err)
	}
	if _, err := ParseCSV("w", strings.NewReader(csv), LoadOptions{Binary: true}); err == nil {
		t.Fatal("a third label without Multiclass was accepted")
	}
	n, err := ParseCSV("n", strings.NewReader("y,x\n3,1\n10,2\n2,3\n"), LoadOptions{Binary: true, Multiclass: true})
	if err != nil || strings.Join(n.Classes.List, ",") != "2,3,10" {
		t.Fatalf("numeric classes sort as numbers: %+v %v", n.Classes, err)
	}
}

// TestMultinomialGradientAndProx: the gradient matches finite differences of the value, the
// prox satisfies its optimality condition, the clipped gradient is within Weight*clip, and
// the smoothness bound is above a power-iteration estimate of the Hessian's norm.
func TestMultinomialGradientAndProx(t *testing.T) {
	d := irisLike(t, 60)
	l, err := NewLocalLoss(d, Multinomial, 1.7)
	if err != nil {
		t.Fatal(err)
	}
	n := l.Dim()
	if n != 12 {
		t.Fatalf("dim %d, want 3 x 4", n)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	w := make([]float64, n)
	for j := range w {
		w[j] = rng.NormFloat64()
	}
	g := make([]float64, n)
	l.Grad(g, w)
	for j := range w {
		h := 1e-6
		wp, wm := append([]float64(nil), w...), append([]float64(nil), w...)
		wp[j] += h
		wm[j] -= h
		fd := (l.Value(wp) - l.Value(wm)) / (2 * h)
		if math.Abs(fd-g[j]) > 1e-6 {
			t.Fatalf("coordinate %d: gradient %v, finite difference %v", j, g[j], fd)
		}
	}
	// The prox: grad f(x) + (x - v)/gamma = 0.
	for _, gamma := range []float64{0.01, 1, 100} {
		x := make([]float64, n)
		if err := l.Prox(x, w, gamma); err != nil {
			t.Fatal(err)
		}
		l.Grad(g, x)
		res := 0.0
		for j := range g {
			r := g[j] + (x[j]-w[j])/gamma
			res += r * r
		}
		if math.Sqrt(res) > 1e-9 {
			t.Fatalf("gamma %v: prox optimality residual %v", gamma, math.Sqrt(res))
		}
	}
	// Clipping bounds the whole per-example gradient: ||sum|| <= Weight * clip.
	l.ClippedRowGrad(g, w, 0.05)
	if nn := math.Sqrt(dot(g, g)); nn > 1.7*0.05*(1+1e-12) {
		t.Fatalf("clipped gradient norm %v > weight*clip %v", nn, 1.7*0.05)
	}
	// Smoothness: ||grad(w) - grad(w')|| <= nu ||w - w'|| on random pairs.
	nu := l.Smoothness()
	g2 := make([]float64, n)
	for trial := 0; trial < 200; trial++ {
		w2 := make([]float64, n)
		for j := range w2 {
			w2[j] = w[j] + 0.3*rng.NormFloat64()
		}
		l.Grad(g, w)
		l.Grad(g2, w2)
		num, den := 0.0, 0.0
		for j := range g {
			num += (g[j] - g2[j]) * (g[j] - g2[j])
			den += (w[j] - w2[j]) * (w[j] - w2[j])
		}
		if math.Sqrt(num) > nu*math.Sqrt(den) {
			t.Fatalf("gradient Lipschitz ratio %v above the bound %v", math.Sqrt(num/den), nu)
		}
	}
}

// TestMultinomialSolve: the centralised solver reaches a point where the gradient of the
// objective vanishes, and predicts the separable clouds well.
func TestMultinomialSolve(t *testing.T) {
	d := irisLike(t, 90)
	pb := Problem{Loss: Multinomial, Reg: Regularizer{L2: 1e-3}}
	w, _, err := Solve(d, pb, SolveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(w) != 12 {
		t.Fatalf("model of %d values", len(w))
	}
	if acc := pb.Accuracy(d, w); acc < 0.9 {
		t.Fatalf("training accuracy %v", acc)
	}
	g := make([]float64, len(w))
	pb.meanGrad(g, d, w)
	for j := range g {
		g[j] += pb.Reg.L2 * w[j]
	}
	if nn := math.Sqrt(dot(g, g)); nn > 1e-8 {
		t.Fatalf("objective gradient %v at the solution", nn)
	}
}
