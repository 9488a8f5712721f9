package consensus

import (
	"fmt"
	"math"
	"slices"
	"sort"
)

// Dataset is a dense, row-major design matrix with one target per row.
type Dataset struct {
	Name     string    // file path or "embedded:breast_cancer"
	Rows     int       // number of examples
	Cols     int       // number of features p
	X        []float64 // Rows*Cols, row-major
	Y        []float64 // len Rows; classification labels are -1/+1
	Features []string  // len Cols
	// Classes, for binary labels read from a file, records which label became -1 and
	// which +1 (nil otherwise).
	Classes *Classes
	// Warnings are what the reader found suspicious but accepted (an ID-like column).
	Warnings []string
	// Fill is the public rule that filled missing cells (LoadOptions.Fill), nil for none.
	Fill *FillRule
	// Label is the name of the label column (CSV with a header; "" otherwise).
	Label string
	// Categories is the one-hot vocabulary of the text columns, in feature order.
	Categories []Categorical
	// TargetScale, when > 0, says the targets were divided by it (Scaler.TargetScale):
	// Regression reports the RMSE in the original units.
	TargetScale float64
	// Ranges, when not nil, are the public ranges the raw features were clipped to
	// (Schema.Apply), one [min, max] per raw feature in Features order ([0, 1] for a
	// one-hot one); a model trained on d clips its inputs to them (ModelSpec.Ranges).
	Ranges [][2]float64
}

// HasIntercept reports whether d's last column is the intercept (named InterceptFeature:
// added by Scaler.Apply, or read back from a file a simulator wrote).
func (d *Dataset) HasIntercept() bool {
	return d != nil && len(d.Features) > 0 && d.Features[len(d.Features)-1] == InterceptFeature
}

// Row returns row i of the design matrix as a view into X (no copy).
func (d *Dataset) Row(i int) []float64 {
	return d.X[i*d.Cols : (i+1)*d.Cols : (i+1)*d.Cols]
}

// Subset returns a new dataset holding copies of the rows listed in idx, in that order.
func (d *Dataset) Subset(idx []int) *Dataset {
	out := &Dataset{
		Name:     d.Name,
		Rows:     len(idx),
		Cols:     d.Cols,
		X:        make([]float64, 0, len(idx)*d.Cols),
		Y:        make([]float64, 0, len(idx)),
		Features: append([]string(nil), d.Features...),
		Classes:  d.Classes,

		TargetScale: d.TargetScale, Label: d.Label, Categories: d.Categories, Fill: d.Fill, Ranges: d.Ranges,
	}
	for _, i := range idx {
		out.X = append(out.X, d.Row(i)...)
		out.Y = append(out.Y, d.Y[i])
	}
	return out
}

// InOrderOf returns d with its feature columns in the order of features (the names of
// another file's columns, e.g. the training data's): d itself when they already are, a
// copy with the columns moved when d has the same names in another order, and an error
// naming the columns that differ otherwise. A test file read by the names of its header
// must hold the training file's columns: matched by position, a file with the same
// columns in another order would be scored on the wrong features.
func (d *Dataset) InOrderOf(features []string, what string) (*Dataset, error) {
	if slices.Equal(d.Features, features) {
		return d, nil
	}
	at := make(map[string]int, len(d.Features))
	for j, f := range d.Features {
		at[f] = j
	}
	var missing, extra []string
	src := make([]int, len(features))
	for k, f := range features {
		j, ok := at[f]
		if !ok {
			missing = append(missing, f)
			continue
		}
		src[k] = j
		delete(at, f)
	}
	for _, f := range d.Features {
		if _, ok := at[f]; ok {
			extra = append(extra, f)
		}
	}
	if len(missing) > 0 || len(extra) > 0 || len(d.Features) != len(features) {
		return nil, fmt.Errorf("consensus: %s: its columns are not %s's: missing %q, not in %s %q (columns are matched by name)",
			d.Name, what, missing, what, extra)
	}
	out := d.Clone()
	for i := 0; i < d.Rows; i++ {
		row, dst := d.Row(i), out.Row(i)
		for k, j := range src {
			dst[k] = row[j]
		}
	}
	out.Features = append([]string(nil), features...)
	if d.Ranges != nil {
		out.Ranges = make([][2]float64, len(features))
		for k, j := range src {
			out.Ranges[k] = d.Ranges[j]
		}
	}
	return out, nil
}

// Clone returns a deep copy of d.
func (d *Dataset) Clone() *Dataset {
	return &Dataset{
		Name:     d.Name,
		Rows:     d.Rows,
		Cols:     d.Cols,
		X:        append([]float64(nil), d.X...),
		Y:        append([]float64(nil), d.Y...),
		Features: append([]string(nil), d.Features...),
		Classes:  d.Classes,

		TargetScale: d.TargetScale, Label: d.Label, Categories: d.Categories, Fill: d.Fill, Ranges: d.Ranges,
	}
}

// Check verifies the internal consistency of d: sizes match and every value is finite.
func (d *Dataset) Check() error {
	if d == nil {
		return fmt.Errorf("consensus: nil dataset")
	}
	if d.Rows < 0 || d.Cols < 0 || len(d.X) != d.Rows*d.Cols || len(d.Y) != d.Rows {
		return fmt.Errorf("consensus: %s: inconsistent dataset sizes (rows=%d cols=%d len(X)=%d len(Y)=%d)",
			d.Name, d.Rows, d.Cols, len(d.X), len(d.Y))
	}
	for i, v := range d.X {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("consensus: %s: row %d column %d: non-finite value", d.Name, i/max(d.Cols, 1), i%max(d.Cols, 1))
		}
	}
	for i, v := range d.Y {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("consensus: %s: row %d: non-finite label", d.Name, i)
		}
	}
	return nil
}

// BinaryLabels maps the labels of d to -1/+1 in place. Accepted label sets are subsets of
// {-1, +1} (unchanged), {0, 1} (0 becomes -1) and {1, 2} (1 becomes -1, 2 becomes +1).
// Any other set of labels is an error and leaves d unchanged.
func (d *Dataset) BinaryLabels() error {
	seen := map[float64]bool{}
	for _, y := range d.Y {
		seen[y] = true
	}
	vals := make([]float64, 0, len(seen))
	for v := range seen {
		vals = append(vals, v)
	}
	sort.Float64s(vals)
	subset := func(a, b float64) bool {
		for _, v := range vals {
			if v != a && v != b {
				return false
			}
		}
		return true
	}
	var lo float64
	switch {
	case subset(-1, 1):
		return nil
	case subset(0, 1):
		lo = 0
	case subset(1, 2):
		lo = 1
	default:
		if len(vals) > 4 {
			vals = vals[:4]
		}
		return fmt.Errorf("consensus: %s: labels are not binary (found %v); want {-1,1}, {0,1} or {1,2}", d.Name, vals)
	}
	for i, y := range d.Y {
		if y == lo {
			d.Y[i] = -1
		} else {
			d.Y[i] = 1
		}
	}
	return nil
}

func dot(a, b []float64) float64 {
	s := 0.0
	for i, v := range a {
		s += v * b[i]
	}
	return s
}

func norm2(a []float64) float64 { return math.Sqrt(dot(a, a)) }
