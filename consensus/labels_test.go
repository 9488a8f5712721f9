package consensus

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

// TestBinaryLabelRule: any two distinct labels map to -1/+1, the larger (numerically, else
// in byte order) or the --positive one being +1; expectations written out by hand.
func TestBinaryLabelRule(t *testing.T) {
	cases := []struct {
		name     string
		labels   []string
		positive string
		classes  *Classes
		want     []float64
		neg, pos string
	}{
		{"zero-one", []string{"0", "1", "1", "0"}, "", nil, []float64{-1, 1, 1, -1}, "0", "1"},
		{"one-two", []string{"2", "1"}, "", nil, []float64{1, -1}, "1", "2"},
		{"minus-plus", []string{"-1", "+1", "1"}, "", nil, []float64{-1, 1, 1}, "-1", "+1"},
		{"same-number", []string{"1.0", "0", "1", " 1 "}, "", nil, []float64{1, -1, 1, 1}, "0", "1.0"},
		{"text", []string{"yes", "no", "no"}, "", nil, []float64{1, -1, -1}, "no", "yes"},
		{"text-byte-order", []string{"b", "a"}, "", nil, []float64{1, -1}, "a", "b"},
		{"numeric-not-text-order", []string{"10", "9"}, "", nil, []float64{1, -1}, "9", "10"},
		{"positive-smaller", []string{"0", "1"}, "0", nil, []float64{1, -1}, "1", "0"},
		{"adult-trailing-dot", []string{"<=50K", ">50K.", ">50K"}, ">50K", nil, []float64{-1, 1, 1}, "<=50K", ">50K"},
		{"one-class-positive", []string{"1", "1"}, "1", nil, []float64{1, 1}, "", "1"},
		{"one-class-negative", []string{"0", "0"}, "1", nil, []float64{-1, -1}, "0", "1"},
		{"given-classes", []string{"1", "1"}, "", &Classes{Negative: "1", Positive: "2"}, []float64{-1, -1}, "1", "2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lines := make([]int, len(c.labels))
			for i := range lines {
				lines[i] = i + 2
			}
			y, cl, err := mapBinary("f.csv", "label", c.labels, lines, LoadOptions{Binary: true, Positive: c.positive, Classes: c.classes})
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(y) != fmt.Sprint(c.want) {
				t.Fatalf("labels %q -> %v, want %v", c.labels, y, c.want)
			}
			if cl.Negative != c.neg || cl.Positive != c.pos {
				t.Fatalf("classes %+v, want negative %q positive %q", cl, c.neg, c.pos)
			}
		})
	}
	bad := []struct {
		name     string
		labels   []string
		positive string
		classes  *Classes
		kind     error
		want     string
	}{
		{"three", []string{"0", "1", "1", "2"}, "", nil, ErrNotBinary, `f.csv:5: label: a third label "2" after "0" (line 2) and "1" (line 3)`},
		{"one-class", []string{"1", "1"}, "", nil, ErrOneClass, `every row has the label "1"`},
		{"positive-absent", []string{"0", "1"}, "2", nil, ErrPositive, `positive label "2" is neither`},
		{"outside-classes", []string{"0", "3"}, "", &Classes{Negative: "0", Positive: "1"}, ErrNotBinary, `f.csv:3: label: label "3" is neither of the training data's classes "0" and "1"`},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			lines := make([]int, len(c.labels))
			for i := range lines {
				lines[i] = i + 2
			}
			_, _, err := mapBinary("f.csv", "label", c.labels, lines, LoadOptions{Binary: true, Positive: c.positive, Classes: c.classes})
			if !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want kind %v and %q", err, c.kind, c.want)
			}
		})
	}
}

// TestParseBinaryFiles: CSV and LIBSVM files with 0/1 and text labels load with the
// labels mapped, and a test file takes its training file's classes.
func TestParseBinaryFiles(t *testing.T) {
	d, err := ParseCSV("f.csv", strings.NewReader("y,a\n0,1\n1,2\n0,3\n"), LoadOptions{Binary: true})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(d.Y) != "[-1 1 -1]" || d.Classes == nil || d.Classes.Positive != "1" {
		t.Fatalf("Y %v classes %+v", d.Y, d.Classes)
	}
	// Only the positive class in the test file: mapped with the training file's classes.
	te, err := ParseCSV("t.csv", strings.NewReader("y,a\n1,1\n1,2\n"), LoadOptions{Binary: true, Classes: d.Classes})
	if err != nil || fmt.Sprint(te.Y) != "[1 1]" {
		t.Fatalf("test file: %v %v", err, te)
	}
	l, err := ParseLIBSVM("f.svm", strings.NewReader("2 1:1\n1 2:1\n"), LoadOptions{Binary: true})
	if err != nil || fmt.Sprint(l.Y) != "[1 -1]" {
		t.Fatalf("libsvm {1,2}: %v %v", err, l)
	}
	txt, err := ParseCSV("f.csv", strings.NewReader("a,y\n1,no\n2,yes\n"), LoadOptions{Binary: true, Label: "y"})
	if err != nil || fmt.Sprint(txt.Y) != "[-1 1]" || fmt.Sprint(txt.X) != "[1 2]" {
		t.Fatalf("text labels: %v %v", err, txt)
	}
	// Subsets keep the mapping.
	if s := d.Subset([]int{1}); s.Classes != d.Classes {
		t.Fatal("Subset dropped the classes")
	}
}

// TestParseErrorsNameLines: every data error names the file line (1-based, header
// counted), with a kind callers can test to add advice.
func TestParseErrorsNameLines(t *testing.T) {
	var quote strings.Builder
	quote.WriteString("y,a,b\n")
	for i := 2; i <= 30; i++ {
		if i == 11 {
			quote.WriteString("1,\"2,3\n") // the quote opened here is never closed
			continue
		}
		fmt.Fprintf(&quote, "%d,%d,%d\n", i%2, i, i+1)
	}
	cases := []struct {
		name, in string
		opt      LoadOptions
		kind     error // nil: any
		want     []string
		not      string
	}{
		{"not-binary", "y,a\n0,1\n1,2\n2,3\n", LoadOptions{Binary: true}, ErrNotBinary, []string{"f.csv:4:", `a third label "2"`, "(line 2)", "(line 3)"}, ""},
		{"not-binary-after-blank-lines", "y,a\n\n0,1\n\n1,2\n7,3\n", LoadOptions{Binary: true}, ErrNotBinary, []string{"f.csv:6:"}, ""},
		{"unterminated-quote", quote.String(), LoadOptions{}, nil, []string{"f.csv:11:", "malformed CSV", "starting on line 11"}, "f.csv:30:"},
		{"empty-cell", "y,a,b\n1,2,3\n0,,4\n", LoadOptions{}, ErrEmptyCell, []string{"f.csv:3:", "column 1 (a)", "empty"}, ""},
		{"empty-cell-categorical", "y,a,b\n1,x,3\n0,  ,4\n", LoadOptions{Categorical: "auto"}, ErrEmptyCell, []string{"f.csv:3:", "column 1 (a)"}, ""},
		{"empty-label", "y,a\n1,2\n,3\n", LoadOptions{Binary: true}, nil, []string{"f.csv:3:", "column 0 (y), the label", "empty", "no fill rule applies to labels"}, ""},
		{"semicolon", "y;a;b\n1;2;3\n", LoadOptions{}, ErrDelimiter, []string{"f.csv:1:", `delimited by ';'`}, ""},
		{"tab", "y\ta\n1\t2\n", LoadOptions{}, ErrDelimiter, []string{"f.csv:1:", `'\t'`}, ""},
		{"one-column", "y\n1\n2\n", LoadOptions{}, nil, []string{"f.csv:1:", "one column"}, ""},
		{"decimal-comma", "y;a\n1;2,5\n", LoadOptions{Delimiter: ';'}, ErrNotNumeric, []string{"f.csv:2:", "decimal comma"}, ""},
		{"text-feature", "y,a\n1,x\n", LoadOptions{}, ErrNotNumeric, []string{"f.csv:2:", "column 1 (a)", "not a number"}, ""},
		{"text-label-numeric", "y,a\n1,2\nyes,3\n", LoadOptions{}, ErrLabelNotNumeric, []string{"f.csv:3:", "label"}, ""},
		{"nan-label-binary", "y,a\n1,2\nnan,3\n", LoadOptions{Binary: true}, nil, []string{"f.csv:3:", "not finite"}, ""},
		{"too-many-csv", "y,a,b\n1,2,3\n", LoadOptions{MaxCols: 1}, ErrTooManyFeatures, []string{"2 features"}, ""},
		{"duplicate-names", "y,a,a\n1,2,3\n", LoadOptions{}, nil, []string{"f.csv:1:", `columns 1 and 2 are both named "a"`}, ""},
		{"nan-label", "y,a\n1,2\nNaN,3\n", LoadOptions{}, nil, []string{"f.csv:3:", "the label", "drop the row"}, "fill"},
		{"na-marker", "y,a\n1,2\n0,NA\n", LoadOptions{}, ErrEmptyCell, []string{"f.csv:3:", "column 1 (a)", `"NA" marks a missing value`}, ""},
		{"nan-feature", "y,a\n1,2\n0,NaN\n", LoadOptions{}, ErrEmptyCell, []string{"f.csv:3:", "column 1 (a)", "missing value"}, ""},
		{"numeric-classes", numericLabels(MaxNumericClasses + 1), LoadOptions{Binary: true, Multiclass: true}, ErrTooManyClasses,
			[]string{fmt.Sprintf("%d distinct numbers", MaxNumericClasses+1), "regression target"}, ""},
		{"text-classes", textLabels(MaxInferredClasses + 1), LoadOptions{Binary: true, Multiclass: true}, ErrTooManyClasses,
			[]string{fmt.Sprintf("%d distinct labels", MaxInferredClasses+1), "class list explicitly"}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseCSV("f.csv", strings.NewReader(c.in), c.opt)
			if err == nil {
				t.Fatal("no error")
			}
			if c.kind != nil && !errors.Is(err, c.kind) {
				t.Errorf("error %q is not %v", err, c.kind)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if c.not != "" && strings.Contains(err.Error(), c.not) {
				t.Errorf("error %q names %q", err, c.not)
			}
			if !strings.HasPrefix(err.Error(), "consensus: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
		})
	}
	var de *DelimiterError
	if _, err := ParseCSV("f.csv", strings.NewReader("y;a\n1;2\n"), LoadOptions{}); !errors.As(err, &de) || de.Delimiter != ';' {
		t.Fatalf("semicolon: %v", err)
	}
	d, err := ParseCSV("f.csv", strings.NewReader("y;a;b\n1;2.5;3\n0;4;5\n"), LoadOptions{Delimiter: ';'})
	if err != nil || d.Cols != 2 || fmt.Sprint(d.X) != "[2.5 3 4 5]" {
		t.Fatalf("--delimiter ';': %v %+v", err, d)
	}
	if _, err := ParseCSV("f.csv", strings.NewReader("y,a\n1,2\n"), LoadOptions{Delimiter: '"'}); err == nil {
		t.Fatal("a quote accepted as delimiter")
	}
}

// TestLIBSVMTestDimensions: a file with fewer features than MinCols is padded with zero
// columns; a feature index above MaxCols is an error naming its line.
func TestLIBSVMTestDimensions(t *testing.T) {
	d, err := ParseLIBSVM("t.svm", strings.NewReader("1 1:2 3:4\n0 2:1\n"), LoadOptions{MinCols: 5, MaxCols: 5})
	if err != nil {
		t.Fatal(err)
	}
	if d.Cols != 5 || fmt.Sprint(d.X) != "[2 0 4 0 0 0 1 0 0 0]" {
		t.Fatalf("padded %dx%d %v", d.Rows, d.Cols, d.X)
	}
	_, err = ParseLIBSVM("t.svm", strings.NewReader("1 1:2\n\n0 7:1\n"), LoadOptions{MinCols: 5, MaxCols: 5})
	if !errors.Is(err, ErrTooManyFeatures) || !strings.Contains(err.Error(), "t.svm:3:") || !strings.Contains(err.Error(), "index 7") {
		t.Fatalf("more features: %v", err)
	}
}

// TestUnitBall: unitball divides each row by max(1, ||x||), independently of the other
// rows; standardize+unitball standardises first.
func TestUnitBall(t *testing.T) {
	d := &Dataset{Name: "u", Rows: 3, Cols: 2, X: []float64{3, 4, 0.3, 0.4, 0, 0}, Y: []float64{1, -1, 1}}
	sc, err := FitScaler(d, ScaleUnitBall)
	if err != nil {
		t.Fatal(err)
	}
	z := sc.Apply(d)
	want := []float64{0.6, 0.8, 0.3, 0.4, 0, 0}
	for i := range want {
		if math.Abs(z.X[i]-want[i]) > 1e-15 {
			t.Fatalf("unitball %v, want %v", z.X, want)
		}
	}
	// The same scaler on any other rows: no parameter depends on d.
	if sc.Fingerprint() != "unitball" || sc.Mean != nil || sc.Kind.DataDependent() {
		t.Fatalf("unitball scaler %+v fingerprint %q", sc, sc.Fingerprint())
	}
	s := &Scaler{Kind: ScaleStandardizeUnitBall, Mean: []float64{1, 1}, Std: []float64{2, 0.5}}
	if err := s.Validate(2); err != nil {
		t.Fatal(err)
	}
	z = s.Apply(&Dataset{Rows: 2, Cols: 2, X: []float64{7, 3, 1.2, 1.1}, Y: []float64{1, 1}})
	// Row 1: ((7-1)/2, (3-1)/0.5) = (3, 4), norm 5 -> (0.6, 0.8). Row 2: (0.1, 0.2), kept.
	want = []float64{0.6, 0.8, 0.1, 0.2}
	for i := range want {
		if math.Abs(z.X[i]-want[i]) > 1e-12 {
			t.Fatalf("standardize+unitball %v, want %v", z.X, want)
		}
	}
}

// TestScalerFile: the JSON form round-trips, the fingerprint follows the parameters, and
// bad files are refused.
func TestScalerFile(t *testing.T) {
	d := &Dataset{Name: "s", Rows: 3, Cols: 2, X: []float64{1, 10, 2, 20, 3, 60}, Y: []float64{1, -1, 1}}
	fit, err := FitScaler(d, ScaleStandardizeNorm)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(fit)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseScaler(b, 2)
	if err != nil {
		t.Fatal(err)
	}
	if back.Fingerprint() != fit.Fingerprint() || !strings.HasPrefix(fit.Fingerprint(), "standardize+rownorm:") {
		t.Fatalf("fingerprints %q and %q", back.Fingerprint(), fit.Fingerprint())
	}
	if fmt.Sprint(back.Apply(d).X) != fmt.Sprint(fit.Apply(d).X) {
		t.Fatal("the decoded scaler transforms differently")
	}
	other := *back
	other.Mean = []float64{back.Mean[0] + 1e-9, back.Mean[1]}
	if other.Fingerprint() == back.Fingerprint() {
		t.Fatal("different means, same fingerprint")
	}
	if (&Scaler{Kind: ScaleNone}).Fingerprint() != "" || (*Scaler)(nil).Fingerprint() != "" {
		t.Fatal("none has a fingerprint")
	}
	for _, c := range []struct{ name, in, want string }{
		{"kind", `{"kind":"zscore"}`, "unknown scaling"},
		{"missing-std", `{"kind":"standardize","mean":[1,2]}`, "mean and std"},
		{"zero-std", `{"kind":"standardize","mean":[1,2],"std":[1,0]}`, "std > 0"},
		{"dims", `{"kind":"standardize","mean":[1],"std":[1]}`, "the data has 2 features"},
		{"row-div", `{"kind":"rownorm"}`, "row_div"},
		{"params-for-unitball", `{"kind":"unitball","mean":[0,0],"std":[1,1]}`, "takes no mean"},
		{"unknown-field", `{"kind":"unitball","scale":2}`, "unknown field"},
	} {
		if _, err := ParseScaler([]byte(c.in), 2); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
	for k, dep := range map[Scaling]bool{ScaleNone: false, ScaleUnitBall: false, ScaleStandardize: true,
		ScaleStandardizeUnitBall: true, ScaleRowNorm: true, ScaleStandardizeNorm: true} {
		if k.DataDependent() != dep {
			t.Errorf("%s: data-dependent %v", k, !dep)
		}
		if p, err := ParseScaling(string(k)); err != nil || p != k {
			t.Errorf("ParseScaling(%q) = %q, %v", k, p, err)
		}
	}
}

// TestRegressionMetrics: RMSE and R^2 against a hand computation.
func TestRegressionMetrics(t *testing.T) {
	// x.w with w = (1): predictions 1, 2, 4 for targets 1, 2, 3: SS_res = 1, mean 2,
	// SS_tot = 2, RMSE sqrt(1/3), R^2 = 1 - 1/2.
	d := &Dataset{Rows: 3, Cols: 1, X: []float64{1, 2, 4}, Y: []float64{1, 2, 3}}
	rmse, r2, ok := Regression(d, []float64{1})
	if !ok || math.Abs(rmse-math.Sqrt(1.0/3)) > 1e-15 || math.Abs(r2-0.5) > 1e-15 {
		t.Fatalf("rmse %v r2 %v ok %v", rmse, r2, ok)
	}
	c := &Dataset{Rows: 2, Cols: 1, X: []float64{1, 2}, Y: []float64{3, 3}}
	if rmse, _, ok := Regression(c, []float64{0}); ok || rmse != 3 {
		t.Fatalf("constant targets: rmse %v ok %v", rmse, ok)
	}
}

// numericLabels is a CSV of k rows whose labels are k distinct numbers.
func numericLabels(k int) string { return labelsCSV(k, "%d.5") }

// textLabels is a CSV of k rows whose labels are k distinct texts.
func textLabels(k int) string { return labelsCSV(k, "c%d") }

// labelsCSV is a CSV of k rows whose label in row i is label formatted with i.
func labelsCSV(k int, label string) string {
	var b strings.Builder
	b.WriteString("y,a\n")
	for i := range k {
		fmt.Fprintf(&b, label+",%d\n", i, i)
	}
	return b.String()
}

// TestDuplicateNamesIgnored: two columns of one name are read when one of them is
// ignored, and predict reads a file whose duplicate names are in columns it does not use.
func TestDuplicateNamesIgnored(t *testing.T) {
	d, err := ParseCSV("f.csv", strings.NewReader("y,a,a,b\n1,2,3,4\n0,5,6,7\n"), LoadOptions{Ignore: []string{"2"}})
	if err != nil || strings.Join(d.Features, ",") != "a,b" {
		t.Fatalf("duplicate name in an ignored column: %v %v", err, d)
	}
	m := &ModelSpec{Format: ModelFormat, Task: TaskRegression, Loss: "squared", Features: []string{"a"}, Scaling: &Scaler{Kind: ScaleNone}, Weights: [][]float64{{2}}}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	r, err := m.ReadRows("r.csv", strings.NewReader("note,a,note,,\nx,1,y,,\n"), ',')
	if err != nil || len(r.X) != 1 || r.X[0][0] != 1 {
		t.Fatalf("duplicate names in columns the model does not read: %v %v", err, r)
	}
}

// TestClassLimitsOnlyInferred: a class list given may be longer than the limits of an
// inferred one, and the limits themselves are allowed.
func TestClassLimitsOnlyInferred(t *testing.T) {
	if d, err := ParseCSV("f.csv", strings.NewReader(numericLabels(MaxNumericClasses)), LoadOptions{Binary: true, Multiclass: true}); err != nil || d.NumClasses() != MaxNumericClasses {
		t.Fatalf("%d numeric classes: %v", MaxNumericClasses, err)
	}
	if d, err := ParseCSV("f.csv", strings.NewReader(textLabels(MaxInferredClasses)), LoadOptions{Binary: true, Multiclass: true}); err != nil || d.NumClasses() != MaxInferredClasses {
		t.Fatalf("%d text classes: %v", MaxInferredClasses, err)
	}
	cl := &Classes{}
	for i := range 2 * MaxNumericClasses {
		cl.List = append(cl.List, fmt.Sprintf("%d.5", i))
	}
	d, err := ParseCSV("f.csv", strings.NewReader(numericLabels(2*MaxNumericClasses)), LoadOptions{Binary: true, Multiclass: true, Classes: cl})
	if err != nil || d.NumClasses() != 2*MaxNumericClasses {
		t.Fatalf("a given list of %d numeric classes: %v", 2*MaxNumericClasses, err)
	}
}
