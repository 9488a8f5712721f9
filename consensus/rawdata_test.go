package consensus

import (
	"fmt"
	"strings"
	"testing"
)

// TestDataAsItComes: a UTF-8 byte order mark is skipped (Excel's CSV), ignored columns are
// not read, an ID-like column (distinct consecutive integers, or a distinct text per row)
// is flagged, missing cells are filled by the public rule (a text column's become a
// category), and without a rule an empty cell is still refused.
func TestDataAsItComes(t *testing.T) {
	var b strings.Builder
	b.WriteString("\ufeffid,label,x,colour,note\n")
	for i := 0; i < 30; i++ {
		x, col := fmt.Sprint(float64(i)/10), []string{"red", "blue"}[i%2]
		if i == 3 {
			x = "NA"
		}
		if i == 4 {
			col = ""
		}
		fmt.Fprintf(&b, "%d,%d,%s,%s,note %d\n", 100+i, i%2, x, col, i)
	}
	csv := b.String()
	zero := 0.0
	opt := LoadOptions{Label: "label", Binary: true, Categorical: "auto", Ignore: []string{"note"},
		Fill: &FillRule{Default: &zero, Columns: map[string]float64{"x": -1}}}
	d, err := ParseCSV("t.csv", strings.NewReader(csv), opt)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(d.Features, ",") != "id,x,colour=(missing),colour=blue,colour=red" {
		t.Fatalf("features %v", d.Features)
	}
	if d.Row(3)[1] != -1 || d.Row(4)[2] != 1 || d.Row(5)[2] != 0 {
		t.Fatalf("rows 3-5: %v %v %v", d.Row(3), d.Row(4), d.Row(5))
	}
	if len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0], "column 0 (id)") || !strings.Contains(d.Warnings[0], "--ignore-columns \"id\"") {
		t.Fatalf("warnings %q", d.Warnings)
	}
	// The note column one-hot encoded: one feature per row, flagged.
	opt.Ignore = []string{"0"}
	d2, err := ParseCSV("t.csv", strings.NewReader(csv), opt)
	if err != nil {
		t.Fatal(err)
	}
	if len(d2.Warnings) != 1 || !strings.Contains(d2.Warnings[0], "(note)") || !strings.Contains(d2.Warnings[0], "different text in every one") {
		t.Fatalf("warnings %q", d2.Warnings)
	}
	// Categorical none: the ID-like text column's error says to ignore it.
	_, err = ParseCSV("t.csv", strings.NewReader(csv), LoadOptions{Label: "label", Binary: true, Ignore: []string{"colour"}, Fill: opt.Fill})
	if err == nil || !strings.Contains(err.Error(), "an ID?") {
		t.Fatalf("note column: %v", err)
	}
	// Without a fill rule an empty cell is refused; the label cannot be ignored; an
	// unknown column to ignore is named.
	if _, err := ParseCSV("t.csv", strings.NewReader(csv), LoadOptions{Label: "label", Binary: true, Categorical: "auto"}); err == nil || !strings.Contains(err.Error(), "is empty") {
		t.Fatalf("no fill rule: %v", err)
	}
	if _, err := ParseCSV("t.csv", strings.NewReader(csv), LoadOptions{Label: "label", Binary: true, Ignore: []string{"label"}}); err == nil || !strings.Contains(err.Error(), "is the label") {
		t.Fatalf("ignore label: %v", err)
	}
	if _, err := ParseCSV("t.csv", strings.NewReader(csv), LoadOptions{Label: "label", Binary: true, Ignore: []string{"nope"}}); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("ignore unknown: %v", err)
	}
	// Parse (the file path) strips the byte order mark before the format is sniffed.
	d3, err := Parse("t.csv", strings.NewReader(csv), opt)
	if err != nil || d3.Label != "label" {
		t.Fatalf("Parse with a BOM: %v %v", d3, err)
	}
}

// TestReadRowsFill: a model spec applies its fill rule and vocabulary to raw rows, in any
// column order, as the training data were read.
func TestReadRowsFill(t *testing.T) {
	zero := 0.0
	m := &ModelSpec{Format: ModelFormat, Task: TaskBinary, Loss: "logistic", Label: "y", Classes: []string{"0", "1"},
		Features: []string{"x", "c=a", "c=(missing)"}, Categorical: []Categorical{{Column: "c", Values: []string{"(missing)", "a"}}},
		Fill: &FillRule{Default: &zero, Columns: map[string]float64{"x": 7}}, Scaling: &Scaler{Kind: ScaleNone}, Weights: [][]float64{{1, 2, 3}}}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	r, err := m.ReadRows("r.csv", strings.NewReader("\ufeffc,y,x\na,1,NA\n,0,2\nzzz,1,3\n"), ',')
	if err != nil {
		t.Fatal(err)
	}
	want := [][]float64{{7, 1, 0}, {2, 0, 1}, {3, 0, 0}}
	if fmt.Sprint(r.X) != fmt.Sprint(want) || strings.Join(r.Labels, ",") != "1,0,1" || r.Unseen != 1 {
		t.Fatalf("rows %v labels %v unseen %d", r.X, r.Labels, r.Unseen)
	}
	// Two columns of one name: which holds the input is ambiguous.
	if _, err := m.ReadRows("r.csv", strings.NewReader("c,y,x, x\na,1,2,3\n"), ','); err == nil || !strings.Contains(err.Error(), `columns 2 and 3 are both named "x"`) {
		t.Fatalf("duplicate column names: %v", err)
	}
	// A row of another width than the header (or, without one, the first row) is refused:
	// its fields are shifted.
	for _, c := range []struct{ in, want string }{
		{"c,y,x\na,1,2\na,1,2,9\n", "r.csv:3: 4 fields, the header has 3"},
		{"c,y,x\na,1\n", "r.csv:2: 2 fields, the header has 3"},
	} {
		if _, err := m.ReadRows("r.csv", strings.NewReader(c.in), ','); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.in, err, c.want)
		}
	}
}
