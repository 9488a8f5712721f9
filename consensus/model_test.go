package consensus

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// TestModelSpecWithWeights: the averaged predictor's raw-unit coefficients are those of
// the averaged weights (standardize: coef = f w / std,
// intercept = c w_b - sum coef*mean), the
// original is untouched, and SameInputs names the field that differs.
func TestModelSpecWithWeights(t *testing.T) {
	sc := &Scaler{Kind: ScaleStandardize, Mean: []float64{1, 10}, Std: []float64{2, 5}, Intercept: 0.5}
	m := &ModelSpec{Format: ModelFormat, Task: TaskBinary, Loss: "logistic", Classes: []string{"a", "b"},
		Features: []string{"x", "y"}, Scaling: sc, Weights: [][]float64{{1, 1, 1}}}
	m.Coef, m.Intercept = m.rawCoef()
	a, err := m.WithWeights([]float64{4, -10, 0.5})
	if err != nil {
		t.Fatal(err)
	}
	if m.Weights[0][0] != 1 || a.Weights[0][0] != 4 {
		t.Fatalf("original %v, copy %v", m.Weights, a.Weights)
	}
	f := math.Sqrt(0.75)
	wantCoef := []float64{f * 4.0 / 2, f * -10.0 / 5}
	wantB := 0.5*0.5 - (wantCoef[0]*1 + wantCoef[1]*10)
	if math.Abs(a.Coef[0][0]-wantCoef[0]) > 1e-15 || math.Abs(a.Coef[0][1]-wantCoef[1]) > 1e-15 || math.Abs(a.Intercept[0]-wantB) > 1e-12 {
		t.Fatalf("coef %v intercept %v, want %v %v", a.Coef, a.Intercept, wantCoef, wantB)
	}
	if s := a.Scores([]float64{3, 5})[0]; math.Abs(s-(wantCoef[0]*3+wantCoef[1]*5+wantB)) > 1e-12 {
		t.Fatalf("score %v", s)
	}
	if fl := a.Flat(); len(fl) != 3 || fl[1] != -10 {
		t.Fatalf("flat %v", fl)
	}
	if _, err := m.WithWeights([]float64{1, 2}); err == nil {
		t.Fatal("2 weights for 3 columns accepted")
	}
	if _, err := m.WithWeights([]float64{1, math.NaN(), 2}); err == nil {
		t.Fatal("a NaN weight accepted")
	}
	if err := m.SameInputs(a); err != nil {
		t.Fatal(err)
	}
	b := *a
	b.Classes = []string{"b", "a"}
	if err := m.SameInputs(&b); err == nil || !strings.Contains(err.Error(), "classes differ") {
		t.Fatalf("swapped classes: %v", err)
	}
	c := *a
	c.Ranges = [][2]float64{{0, 1}, {0, 20}}
	if err := m.SameInputs(&c); err == nil || !strings.Contains(err.Error(), "ranges differ") {
		t.Fatalf("ranges: %v", err)
	}
}

func TestMajorityShare(t *testing.T) {
	d := &Dataset{Rows: 5, Y: []float64{2, 0, 2, 1, 2}}
	if got := d.MajorityShare(); got != 0.6 {
		t.Fatalf("share %v, want 0.6", got)
	}
	if got := (&Dataset{}).MajorityShare(); got != 0 {
		t.Fatalf("empty: %v", got)
	}
}

func TestInOrderOf(t *testing.T) {
	d := &Dataset{Name: "t.csv", Rows: 2, Cols: 3, X: []float64{1, 2, 3, 4, 5, 6}, Y: []float64{1, -1},
		Features: []string{"c", "a", "b"}, Ranges: [][2]float64{{0, 3}, {0, 1}, {0, 2}}}
	same, err := d.InOrderOf([]string{"c", "a", "b"}, "train.csv")
	if err != nil || same != d {
		t.Fatalf("same order: %v %v", same, err)
	}
	o, err := d.InOrderOf([]string{"a", "b", "c"}, "train.csv")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(o.X) != "[2 3 1 5 6 4]" || fmt.Sprint(o.Features) != "[a b c]" || fmt.Sprint(o.Ranges) != "[[0 1] [0 2] [0 3]]" || fmt.Sprint(d.X) != "[1 2 3 4 5 6]" {
		t.Fatalf("reordered %v %v %v (original %v)", o.X, o.Features, o.Ranges, d.X)
	}
	if _, err := d.InOrderOf([]string{"a", "b", "z"}, "train.csv"); err == nil || !strings.Contains(err.Error(), `missing ["z"]`) || !strings.Contains(err.Error(), `["c"]`) {
		t.Fatalf("other names: %v", err)
	}
	if _, err := d.InOrderOf([]string{"a", "b"}, "train.csv"); err == nil {
		t.Fatal("fewer columns accepted")
	}
}
