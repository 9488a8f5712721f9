package consensus

import (
	"fmt"
	"math"
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
