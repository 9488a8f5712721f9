package consensus

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
)

// Scaling names a feature preprocessing: "none", "unitball", "standardize",
// "standardize+unitball", "rownorm" or "standardize+rownorm".
//
// unitball is data-independent: every row x becomes x / max(1, ||x||), so every row has
// norm at most 1 (rows already inside the unit ball are unchanged). standardize maps
// column j to (x - Mean[j]) / Std[j]; rownorm divides every row by the largest row norm
// of the rows the scaler was fitted on. Standardisation and rownorm have parameters that
// depend on the data they are fitted on (see DataDependent).
type Scaling string

// The supported scalings.
const (
	ScaleNone                Scaling = "none"
	ScaleUnitBall            Scaling = "unitball"
	ScaleStandardize         Scaling = "standardize"
	ScaleStandardizeUnitBall Scaling = "standardize+unitball"
	ScaleRowNorm             Scaling = "rownorm"
	ScaleStandardizeNorm     Scaling = "standardize+rownorm"
)

// ParseScaling parses a scaling name; "" means "none".
func ParseScaling(s string) (Scaling, error) {
	switch k := Scaling(strings.ToLower(strings.TrimSpace(s))); k {
	case "", ScaleNone:
		return ScaleNone, nil
	case ScaleUnitBall, ScaleStandardize, ScaleStandardizeUnitBall, ScaleRowNorm, ScaleStandardizeNorm:
		return k, nil
	}
	return "", fmt.Errorf("consensus: unknown scaling %q (want none, unitball, standardize, standardize+unitball, rownorm or standardize+rownorm)", s)
}

func (k Scaling) standardize() bool {
	return k == ScaleStandardize || k == ScaleStandardizeNorm || k == ScaleStandardizeUnitBall
}
func (k Scaling) rownorm() bool  { return k == ScaleRowNorm || k == ScaleStandardizeNorm }
func (k Scaling) unitball() bool { return k == ScaleUnitBall || k == ScaleStandardizeUnitBall }

// DataDependent reports whether the scaling has parameters fitted on data (means and
// standard deviations, or the largest row norm). Such parameters must be the same on
// every node of a run and must not come from one node's private rows.
func (k Scaling) DataDependent() bool { return k.standardize() || k.rownorm() }

// Scaler is a preprocessing with its parameters. Standardization maps column j to
// (x - Mean[j]) / Std[j] (constant columns keep Std 1); rownorm then divides every row by
// RowDiv, the largest row norm of the (standardized) rows it was fitted on, and unitball
// divides each row by max(1, its norm). Its JSON form is the scale file of the command
// line: {"kind": ..., "mean": [...], "std": [...], "row_div": ...}.
type Scaler struct {
	Kind   Scaling   `json:"kind"`
	Mean   []float64 `json:"mean,omitempty"`
	Std    []float64 `json:"std,omitempty"`
	RowDiv float64   `json:"row_div,omitempty"`
}

// ParseScaler decodes and checks a scaler in its JSON form. dims, when > 0, is the
// number of features the standardisation must cover.
func ParseScaler(b []byte, dims int) (*Scaler, error) {
	var s Scaler
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("consensus: scale file: %v", err)
	}
	if err := s.Validate(dims); err != nil {
		return nil, err
	}
	return &s, nil
}

// Validate checks the parameters of s against its kind; dims, when > 0, is the number of
// features the standardisation must cover.
func (s *Scaler) Validate(dims int) error {
	if s == nil {
		return errors.New("consensus: nil scaler")
	}
	k, err := ParseScaling(string(s.Kind))
	if err != nil {
		return err
	}
	s.Kind = k
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	if k.standardize() {
		if len(s.Mean) == 0 || len(s.Mean) != len(s.Std) {
			return fmt.Errorf("consensus: scaling %s needs mean and std of equal length >= 1, got %d and %d values", k, len(s.Mean), len(s.Std))
		}
		if dims > 0 && len(s.Mean) != dims {
			return fmt.Errorf("consensus: scaling %s has %d means and stds, the data has %d features", k, len(s.Mean), dims)
		}
		for j := range s.Mean {
			if !finite(s.Mean[j]) || !finite(s.Std[j]) || !(s.Std[j] > 0) {
				return fmt.Errorf("consensus: scaling %s: feature %d: mean %v and std %v must be finite and std > 0", k, j, s.Mean[j], s.Std[j])
			}
		}
	} else if len(s.Mean) > 0 || len(s.Std) > 0 {
		return fmt.Errorf("consensus: scaling %s takes no mean or std", k)
	}
	switch {
	case k.rownorm() && (!finite(s.RowDiv) || !(s.RowDiv > 0)):
		return fmt.Errorf("consensus: scaling %s needs row_div > 0 and finite, got %v", k, s.RowDiv)
	case !k.rownorm() && s.RowDiv != 0 && s.RowDiv != 1:
		return fmt.Errorf("consensus: scaling %s takes no row_div (got %v)", k, s.RowDiv)
	}
	return nil
}

// Dims returns the number of features s is fitted for, 0 when it applies to any.
func (s *Scaler) Dims() int {
	if s == nil || !s.Kind.standardize() {
		return 0
	}
	return len(s.Mean)
}

// Fingerprint identifies the scaling and its parameters: "" for none (and a nil
// scaler), the kind for a scaling without parameters ("unitball"), else the kind and
// the SHA-256 of its canonical JSON ("standardize:3f2a..."). Two nodes with the same
// fingerprint transform their features identically.
func (s *Scaler) Fingerprint() string {
	if s == nil || s.Kind == ScaleNone || s.Kind == "" {
		return ""
	}
	if !s.Kind.DataDependent() {
		return string(s.Kind)
	}
	c := Scaler{Kind: s.Kind, Mean: s.Mean, Std: s.Std}
	if s.Kind.rownorm() {
		c.RowDiv = s.RowDiv
	}
	b, _ := json.Marshal(c)
	h := sha256.Sum256(b)
	return string(s.Kind) + ":" + hex.EncodeToString(h[:])
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
	if !kind.standardize() {
		s.Mean, s.Std = nil, nil
	}
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
	if !kind.rownorm() {
		s.RowDiv = 0
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

// Apply returns a new dataset with the preprocessing applied to d's features. A
// standardisation covers the first len(Mean) features.
func (s *Scaler) Apply(d *Dataset) *Dataset {
	out := d.Clone()
	for i := 0; i < out.Rows; i++ {
		row := out.Row(i)
		if s.Kind.standardize() {
			for j := range row {
				if j < len(s.Mean) {
					row[j] = (row[j] - s.Mean[j]) / s.Std[j]
				}
			}
		}
		switch {
		case s.Kind.rownorm():
			for j := range row {
				row[j] /= s.RowDiv
			}
		case s.Kind.unitball():
			if n := norm2(row); n > 1 {
				for j := range row {
					row[j] /= n
				}
			}
		}
	}
	return out
}
