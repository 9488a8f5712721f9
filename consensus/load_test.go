package consensus

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseCSV(t *testing.T) {
	cases := []struct {
		name     string
		in       string
		opt      LoadOptions
		rows     int
		cols     int
		x        []float64
		y        []float64
		features []string
	}{
		{"header", "y,a,b\n1,2,3\n-1,4,5\n", LoadOptions{}, 2, 2, []float64{2, 3, 4, 5}, []float64{1, -1}, []string{"a", "b"}},
		{"noheader", "1,2,3\n-1,4,5\n", LoadOptions{}, 2, 2, []float64{2, 3, 4, 5}, []float64{1, -1}, []string{"c1", "c2"}},
		{"label-name", "a,y,b\n2,1,3\n4,-1,5\n", LoadOptions{Label: "y"}, 2, 2, []float64{2, 3, 4, 5}, []float64{1, -1}, []string{"a", "b"}},
		{"label-index", "2,3,1\n4,5,-1\n", LoadOptions{Label: "2"}, 2, 2, []float64{2, 3, 4, 5}, []float64{1, -1}, nil},
		{"spaces-blank-lines", "y, a\n\n1, 2.5\n0, -1e2\n", LoadOptions{}, 2, 1, []float64{2.5, -100}, []float64{1, 0}, []string{"a"}},
		{"onehot", "y,color,z\n1,red,1\n0,blue,2\n1,red,3\n", LoadOptions{Categorical: "auto"}, 3, 3,
			[]float64{0, 1, 1, 1, 0, 2, 0, 1, 3}, []float64{1, 0, 1}, []string{"color=blue", "color=red", "z"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := ParseCSV("t.csv", strings.NewReader(c.in), c.opt)
			if err != nil {
				t.Fatal(err)
			}
			if d.Rows != c.rows || d.Cols != c.cols || len(d.X) != c.rows*c.cols {
				t.Fatalf("got %dx%d", d.Rows, d.Cols)
			}
			for i := range c.x {
				if d.X[i] != c.x[i] {
					t.Fatalf("X = %v, want %v", d.X, c.x)
				}
			}
			for i := range c.y {
				if d.Y[i] != c.y[i] {
					t.Fatalf("Y = %v, want %v", d.Y, c.y)
				}
			}
			if c.features != nil && strings.Join(d.Features, "|") != strings.Join(c.features, "|") {
				t.Fatalf("Features = %v, want %v", d.Features, c.features)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name, in string
		opt      LoadOptions
		want     []string // substrings of the error
	}{
		{"empty", "", LoadOptions{}, []string{"f.csv", "empty"}},
		{"header-only", "y,a\n", LoadOptions{}, []string{"f.csv", "no data"}},
		{"width", "y,a\n1,2\n1,2,3\n", LoadOptions{}, []string{"f.csv:3", "fields"}},
		{"nan", "y,a\n1,2\n1,NaN\n", LoadOptions{}, []string{"f.csv:3", "column 1 (a)", "a missing value"}},
		{"inf-label", "y,a\n1,2\ninf,1\n", LoadOptions{}, []string{"f.csv:3", "not finite"}},
		{"categorical-none", "y,a,b\n1,2,x\n1,2,3\n", LoadOptions{}, []string{"f.csv:2", "column 2", "not a number"}},
		{"missing-label", "y,a\n1,2\n", LoadOptions{Label: "target"}, []string{"f.csv:1", "target", "not found"}},
		{"label-text", "y,a\nyes,2\n", LoadOptions{Label: "y"}, []string{"f.csv:2", "label"}},
		{"bad-quote", "y,a\n1,\"2\n", LoadOptions{}, []string{"f.csv:", "malformed"}},
		{"bad-mode", "y,a\n1,2\n", LoadOptions{Categorical: "maybe"}, []string{"categorical"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseCSV("f.csv", strings.NewReader(c.in), c.opt)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if !strings.HasPrefix(err.Error(), "consensus: ") {
				t.Errorf("error %q lacks package prefix", err)
			}
		})
	}
	lcases := []struct{ name, in, want string }{
		{"empty", "# only a comment\n\n", "empty"},
		{"token", "1 3:1\n-1 2\n", "f.svm:2"},
		{"index0", "1 0:1\n", "f.svm:1"},
		{"value", "1 1:x\n", "f.svm:1"},
		{"nan", "1 1:1\n-1 2:nan\n", "f.svm:2"},
		{"label", "a 1:1\n", "f.svm:1"},
	}
	for _, c := range lcases {
		t.Run("libsvm-"+c.name, func(t *testing.T) {
			_, err := ParseLIBSVM("f.svm", strings.NewReader(c.in), LoadOptions{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want mention of %q", err, c.want)
			}
		})
	}
}

func TestParseLIBSVM(t *testing.T) {
	in := "# comment\n+1 qid:3 1:0.5 3:-2 # trailing\n\n-1 2:1\n"
	d, err := ParseLIBSVM("x.svm", strings.NewReader(in), LoadOptions{MinCols: 4})
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{0.5, 0, -2, 0, 0, 1, 0, 0}
	if d.Rows != 2 || d.Cols != 4 {
		t.Fatalf("%dx%d", d.Rows, d.Cols)
	}
	for i := range want {
		if d.X[i] != want[i] {
			t.Fatalf("X = %v, want %v", d.X, want)
		}
	}
	if d.Y[0] != 1 || d.Y[1] != -1 {
		t.Fatalf("Y = %v", d.Y)
	}
}

func TestEmbeddedMatchesLIBSVM(t *testing.T) {
	e, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	if e.Rows != 569 || e.Cols != 30 || e.Name != "embedded:breast_cancer" {
		t.Fatalf("embedded %s %dx%d", e.Name, e.Rows, e.Cols)
	}
	pos := 0
	for _, y := range e.Y {
		if y != 1 && y != -1 {
			t.Fatalf("label %v", y)
		}
		if y == 1 {
			pos++
		}
	}
	if pos != 357 {
		t.Errorf("%d benign rows, want 357", pos)
	}
	l, err := Load(filepath.Join("testdata", "breast_cancer.libsvm"), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Rows != e.Rows || l.Cols != e.Cols {
		t.Fatalf("libsvm %dx%d", l.Rows, l.Cols)
	}
	for i := range e.X {
		if math.Abs(e.X[i]-l.X[i]) > 1e-9*math.Max(1, math.Abs(e.X[i])) {
			t.Fatalf("X[%d]: csv %v libsvm %v", i, e.X[i], l.X[i])
		}
	}
	for i := range e.Y {
		if e.Y[i] != l.Y[i] {
			t.Fatalf("Y[%d]: csv %v libsvm %v", i, e.Y[i], l.Y[i])
		}
	}
}

func TestLoadFormatsAndMissingFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "data.txt")
	if err := os.WriteFile(p, []byte("1 1:2 2:3\n-1 1:4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := Load(p, LoadOptions{})
	if err != nil || d.Cols != 2 || d.Rows != 2 {
		t.Fatalf("sniffed libsvm: %v %+v", err, d)
	}
	q := filepath.Join(dir, "data.dat")
	if err := os.WriteFile(q, []byte("y,a\n1,2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if d, err := Load(q, LoadOptions{}); err != nil || d.Cols != 1 {
		t.Fatalf("sniffed csv: %v", err)
	}
	if _, err := Load(filepath.Join(dir, "nope.csv"), LoadOptions{}); err == nil || !strings.Contains(err.Error(), "nope.csv") {
		t.Fatalf("missing file error %v", err)
	}
}

func TestBinaryLabels(t *testing.T) {
	cases := []struct {
		in, want []float64
		ok       bool
	}{
		{[]float64{0, 1, 1}, []float64{-1, 1, 1}, true},
		{[]float64{1, 2}, []float64{-1, 1}, true},
		{[]float64{-1, 1}, []float64{-1, 1}, true},
		{[]float64{1, 1}, []float64{1, 1}, true},
		{[]float64{0, 2}, []float64{0, 2}, false},
		{[]float64{0, 1, 2}, []float64{0, 1, 2}, false},
	}
	for _, c := range cases {
		d := &Dataset{Name: "b", Rows: len(c.in), Y: append([]float64(nil), c.in...)}
		err := d.BinaryLabels()
		if (err == nil) != c.ok {
			t.Errorf("%v: err %v", c.in, err)
		}
		for i := range c.want {
			if d.Y[i] != c.want[i] {
				t.Errorf("%v -> %v, want %v", c.in, d.Y, c.want)
				break
			}
		}
	}
}

func FuzzLoadCSV(f *testing.F) {
	f.Add([]byte("y,a,b\n1,2,3\n0,4,5\n"), "", "auto")
	f.Add([]byte("1,2\n3\n"), "0", "none")
	f.Add([]byte("a,b\nx,1\ny,2\n"), "b", "auto")
	f.Fuzz(func(t *testing.T, data []byte, label, cat string) {
		if b, err := ParseCSV("fuzz.csv", strings.NewReader(string(data)), LoadOptions{Label: label, Categorical: cat, Binary: true}); err == nil {
			checkBinary(t, b)
		}
		d, err := ParseCSV("fuzz.csv", strings.NewReader(string(data)), LoadOptions{Label: label, Categorical: cat})
		if err != nil {
			return
		}
		if err := d.Check(); err != nil {
			t.Fatal(err)
		}
		if len(d.Features) != d.Cols || d.Rows == 0 {
			t.Fatalf("inconsistent dataset %dx%d, %d features", d.Rows, d.Cols, len(d.Features))
		}
	})
}

func FuzzLoadLIBSVM(f *testing.F) {
	f.Add([]byte("1 1:2 3:4\n-1 2:1 # c\n"), 0)
	f.Add([]byte("+1 qid:1 5:0.5\n"), 3)
	f.Fuzz(func(t *testing.T, data []byte, minCols int) {
		if minCols > 1000 {
			minCols = 1000
		}
		if minCols > 0 {
			if b, err := ParseLIBSVM("fuzz.svm", strings.NewReader(string(data)), LoadOptions{MinCols: minCols, MaxCols: minCols, Binary: true}); err == nil {
				checkBinary(t, b)
				if b.Cols != minCols {
					t.Fatalf("%d columns with MinCols = MaxCols = %d", b.Cols, minCols)
				}
			}
		}
		d, err := ParseLIBSVM("fuzz.svm", strings.NewReader(string(data)), LoadOptions{MinCols: minCols})
		if err != nil {
			return
		}
		if err := d.Check(); err != nil {
			t.Fatal(err)
		}
		if len(d.Features) != d.Cols || d.Rows == 0 {
			t.Fatalf("inconsistent dataset %dx%d", d.Rows, d.Cols)
		}
	})
}

// checkBinary checks a dataset read with binary labels: consistent, labels -1/+1, and
// the recorded classes.
func checkBinary(t *testing.T, d *Dataset) {
	t.Helper()
	if err := d.Check(); err != nil {
		t.Fatal(err)
	}
	if d.Classes == nil || d.Rows == 0 || len(d.Features) != d.Cols {
		t.Fatalf("binary dataset %dx%d, classes %v", d.Rows, d.Cols, d.Classes)
	}
	for _, y := range d.Y {
		if y != 1 && y != -1 {
			t.Fatalf("binary label %v", y)
		}
	}
}
