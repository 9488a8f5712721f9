package consensus

import (
	"fmt"
	"math"
	"strings"
)

// Scaling names a feature preprocessing: "none", "standardize", "rownorm" or
// "standardize+rownorm".
type Scaling string

// The supported scalings.
const (
	ScaleNone            Scaling = "none"
	ScaleStandardize     Scaling = "standardize"
	ScaleRowNorm         Scaling = "rownorm"
	ScaleStandardizeNorm Scaling = "standardize+rownorm"
)

// ParseScaling parses a scaling name; "" means "none".
func ParseScaling(s string) (Scaling, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "none":
		return ScaleNone, nil
	case "standardize":
		return ScaleStandardize, nil
	case "rownorm":
		return ScaleRowNorm, nil
	case "standardize+rownorm":
		return ScaleStandardizeNorm, nil
	}
	return "", fmt.Errorf("consensus: unknown scaling %q (want none, standardize, rownorm or standardize+rownorm)", s)
}

func (k Scaling) standardize() bool { return k == ScaleStandardize || k == ScaleStandardizeNorm }
func (k Scaling) rownorm() bool     { return k == ScaleRowNorm || k == ScaleStandardizeNorm }

// Scaler is a preprocessing fitted on a training set. Standardization maps column j to
// (x - Mean[j]) / Std[j] (constant columns keep Std 1); row-norm scaling then divides every
// row by RowDiv, the largest row norm of the (standardized) training set, so that training
// rows have norm at most 1.
type Scaler struct {
	Kind      Scaling
	Mean, Std []float64
	RowDiv    float64
}

// FitScaler fits a scaler of the given kind on train.
func FitScaler(train *Dataset, kind Scaling) (*Scaler, error) {
	kind, err := ParseScaling(string(kind))
	if err != nil {
		return nil, err
	}
	if err := train.Check(); err != nil {
		return nil, err
	}
	p := train.Cols
	s := &Scaler{Kind: kind, Mean: make([]float64, p), Std: make([]float64, p), RowDiv: 1}
	for j := range s.Std {
		s.Std[j] = 1
	}
	if kind.standardize() && train.Rows > 0 {
		n := float64(train.Rows)
		for i := 0; i < train.Rows; i++ {
			for j, v := range train.Row(i) {
				s.Mean[j] += v
			}
		}
		for j := range s.Mean {
			s.Mean[j] /= n
		}
		vr := make([]float64, p)
		for i := 0; i < train.Rows; i++ {
			for j, v := range train.Row(i) {
				t := v - s.Mean[j]
				vr[j] += t * t
			}
		}
		for j := range vr {
			sd := math.Sqrt(vr[j] / n)
			if sd > 1e-12*math.Max(1, math.Abs(s.Mean[j])) {
				s.Std[j] = sd
			}
		}
	}
	if kind.rownorm() {
		tmp := &Scaler{Kind: ScaleStandardize, Mean: s.Mean, Std: s.Std, RowDiv: 1}
		if !kind.standardize() {
			tmp.Kind = ScaleNone
		}
		z := tmp.Apply(train)
		m := 0.0
		for i := 0; i < z.Rows; i++ {
			m = math.Max(m, norm2(z.Row(i)))
		}
		if m > 0 {
			s.RowDiv = m
		}
	}
	return s, nil
}

// Apply returns a new dataset with the fitted preprocessing applied to d's features.
func (s *Scaler) Apply(d *Dataset) *Dataset {
	out := d.Clone()
	for i := 0; i < out.Rows; i++ {
		row := out.Row(i)
		for j := range row {
			if s.Kind.standardize() && j < len(s.Mean) {
				row[j] = (row[j] - s.Mean[j]) / s.Std[j]
			}
			if s.Kind.rownorm() {
				row[j] /= s.RowDiv
			}
		}
	}
	return out
}
