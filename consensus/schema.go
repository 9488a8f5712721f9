package consensus

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Schema is the public description of a run's data that every member shares: the label
// column and its classes, the features in order with a public range for each numeric one
// and the categories of each text one, and the rule for missing cells. Its ranges give the
// run's scaling without any statistic of private rows: a numeric feature is mapped by
// (x - (min+max)/2) / ((max-min)/2) into [-1, 1] (values outside the range are clipped to
// it first), so the simulator and the nodes scale alike. The schema's hash enters the
// configuration hash.
//
// A numeric feature may also give a public center and scale: standardization then uses
// (x - center) / scale (after the clipping to the range) instead of the range's midpoint
// and half-width. A range is wide by nature (it must hold every value), and on skewed
// columns it squeezes most rows into a small part of [-1, 1]; a typical value and spread
// (a reference population's mean and standard deviation) keep them apart.
//
// Ranges should come from what is known of the domain (a laboratory value's reportable
// range, an age in [0, 120]); a range computed from private rows discloses their minimum and
// maximum, and a center and scale computed from them their mean and spread, so a drafted
// schema (dpadmm testnet --schema-out) is to be reviewed, rounded, before it is shared.
type Schema struct {
	Label    string          `json:"label,omitempty"`
	Classes  []string        `json:"classes,omitempty"`
	Features []SchemaFeature `json:"features"`
	Fill     *FillRule       `json:"fill,omitempty"`
	// TargetMin and TargetMax are a public range of a numeric target (the squared loss):
	// targets are mapped into [-1, 1] by it (Scaler.SetTargetRange).
	TargetMin *float64 `json:"target_min,omitempty"`
	TargetMax *float64 `json:"target_max,omitempty"`
}

// SchemaFeature is one column of a Schema: a numeric feature with its range, or a text
// column with its categories (one-hot encoded in that order).
type SchemaFeature struct {
	Name string   `json:"name"`
	Min  *float64 `json:"min,omitempty"`
	Max  *float64 `json:"max,omitempty"`
	// Center and Scale, both or neither, standardize a numeric feature as
	// (x - center) / scale; without them the range's midpoint and half-width do.
	Center     *float64 `json:"center,omitempty"`
	Scale      *float64 `json:"scale,omitempty"`
	Categories []string `json:"categories,omitempty"`
}

// ParseSchema decodes and checks a schema (unknown keys are an error).
func ParseSchema(b []byte) (*Schema, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var s Schema
	if err := dec.Decode(&s); err != nil {
		return nil, err
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// Validate checks that every feature is named once and is either numeric with a finite
// range min < max or categorical with distinct categories.
func (s *Schema) Validate() error {
	if len(s.Features) == 0 {
		return errors.New("no features")
	}
	seen := map[string]bool{s.Label: s.Label != ""}
	for _, f := range s.Features {
		switch {
		case f.Name == "" || seen[f.Name]:
			return fmt.Errorf("feature %q: every feature needs a name of its own (not the label's)", f.Name)
		case len(f.Categories) > 0 && (f.Min != nil || f.Max != nil):
			return fmt.Errorf("feature %q: a text column has categories, a numeric one a range, not both", f.Name)
		case len(f.Categories) == 0 && (f.Min == nil || f.Max == nil):
			return fmt.Errorf("feature %q: a numeric feature needs a public range (min and max)", f.Name)
		case len(f.Categories) == 0 && !(*f.Max > *f.Min && !math.IsInf(*f.Min, 0) && !math.IsInf(*f.Max, 0)):
			return fmt.Errorf("feature %q: range [%v, %v] must be finite with min < max", f.Name, *f.Min, *f.Max)
		case (f.Center == nil) != (f.Scale == nil):
			return fmt.Errorf("feature %q: center and scale go together (both or neither)", f.Name)
		case f.Center != nil && len(f.Categories) > 0:
			return fmt.Errorf("feature %q: a text column takes no center or scale", f.Name)
		case f.Center != nil && (math.IsNaN(*f.Center) || math.IsInf(*f.Center, 0) || !(*f.Scale > 0) || math.IsInf(*f.Scale, 0)):
			return fmt.Errorf("feature %q: center %v and scale %v must be finite, with scale > 0", f.Name, *f.Center, *f.Scale)
		case f.Center != nil && (math.IsInf((*f.Max-*f.Center) / *f.Scale, 0) || math.IsInf((*f.Min-*f.Center) / *f.Scale, 0)):
			return fmt.Errorf("feature %q: scale %v is too small for the range [%v, %v]: scaled values overflow", f.Name, *f.Scale, *f.Min, *f.Max)
		}
		seen[f.Name] = true
		cats := map[string]bool{}
		for _, c := range f.Categories {
			if cats[c] {
				return fmt.Errorf("feature %q: category %q repeated", f.Name, c)
			}
			cats[c] = true
		}
	}
	if len(s.Classes) == 1 {
		return errors.New("classes: a label needs two classes or more")
	}
	if (s.TargetMin == nil) != (s.TargetMax == nil) || s.TargetMin != nil && !(*s.TargetMax > *s.TargetMin) {
		return errors.New("target_min and target_max: both or neither, with target_min < target_max")
	}
	return nil
}

// Hash returns the hex SHA-256 of the schema's canonical JSON.
func (s *Schema) Hash() string {
	b, _ := json.Marshal(s)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// ClassListOrNil returns the schema's classes as a Classes value (binary: negative,
// positive), nil when it gives none or s is nil.
func (s *Schema) ClassListOrNil() *Classes {
	if s == nil {
		return nil
	}
	switch len(s.Classes) {
	case 0:
		return nil
	case 2:
		return &Classes{Negative: s.Classes[0], Positive: s.Classes[1]}
	}
	return &Classes{List: append([]string(nil), s.Classes...)}
}

// featureNames returns the dataset's feature names the schema defines, in order.
func (s *Schema) featureNames() []string {
	var out []string
	for _, f := range s.Features {
		if len(f.Categories) == 0 {
			out = append(out, f.Name)
			continue
		}
		for _, c := range f.Categories {
			out = append(out, f.Name+"="+c)
		}
	}
	return out
}

// Apply returns d with the schema's features in the schema's order: numeric features
// clipped to their ranges, text columns one-hot with the schema's categories (a category
// the data lack is a zero column). A feature the data lack, or a category of the data the
// schema lacks, is an error; columns the schema does not list are dropped. clipped counts
// the numeric cells moved into their range.
func (s *Schema) Apply(d *Dataset) (out *Dataset, clipped int, err error) {
	names := s.featureNames()
	idx := map[string]int{}
	for j, f := range d.Features {
		idx[f] = j
	}
	src := make([]int, len(names))
	for k, n := range names {
		j, ok := idx[n]
		if !ok {
			j = -1
			if c, _, cat := strings.Cut(n, "="); !cat || !s.hasCategorical(c) {
				return nil, 0, fmt.Errorf("%s: the schema's feature %q is not in the data (columns: %s)", d.Name, n, strings.Join(d.Features, ", "))
			}
		}
		src[k] = j
	}
	for _, f := range s.Features {
		if len(f.Categories) == 0 {
			continue
		}
		for _, dn := range d.Features {
			if c, v, ok := strings.Cut(dn, "="); ok && c == f.Name && !slices.Contains(f.Categories, v) {
				return nil, 0, fmt.Errorf("%s: column %q holds %q, which is not among the schema's categories %q", d.Name, f.Name, v, f.Categories)
			}
		}
	}
	lo, hi := make([]float64, len(names)), make([]float64, len(names))
	k := 0
	for _, f := range s.Features {
		if len(f.Categories) == 0 {
			lo[k], hi[k] = *f.Min, *f.Max
			k++
			continue
		}
		for range f.Categories {
			lo[k], hi[k] = math.Inf(-1), math.Inf(1)
			k++
		}
	}
	out = &Dataset{Name: d.Name, Rows: d.Rows, Cols: len(names), Y: append([]float64(nil), d.Y...), Features: names, Ranges: schemaRanges(lo, hi),
		Classes: d.Classes, Label: d.Label, Fill: d.Fill, TargetScale: d.TargetScale, Warnings: s.keepWarnings(d.Warnings),
		X: make([]float64, 0, d.Rows*len(names))}
	for _, f := range s.Features {
		if len(f.Categories) > 0 {
			out.Categories = append(out.Categories, Categorical{Column: f.Name, Values: append([]string(nil), f.Categories...)})
		}
	}
	for i := 0; i < d.Rows; i++ {
		row := d.Row(i)
		for k, j := range src {
			v := 0.0
			if j >= 0 {
				v = row[j]
			}
			if v < lo[k] || v > hi[k] {
				v = math.Max(lo[k], math.Min(hi[k], v))
				clipped++
			}
			out.X = append(out.X, v)
		}
	}
	return out, clipped, nil
}

// keepWarnings returns the reader's warnings about columns the schema reads: one about a
// column it leaves out (an ID column the user kept out of the model by not listing it)
// no longer applies. The reader names a column "column J (NAME)".
func (s *Schema) keepWarnings(ws []string) []string {
	var out []string
	for _, w := range ws {
		for _, f := range s.Features {
			if strings.Contains(w, "("+f.Name+")") {
				out = append(out, w)
				break
			}
		}
	}
	return out
}

// schemaRanges are the ranges of Dataset.Ranges from Apply's bounds: a one-hot feature
// (unbounded there) gets [0, 1], the values it takes.
func schemaRanges(lo, hi []float64) [][2]float64 {
	r := make([][2]float64, len(lo))
	for k := range lo {
		r[k] = [2]float64{lo[k], hi[k]}
		if math.IsInf(lo[k], 0) || math.IsInf(hi[k], 0) {
			r[k] = [2]float64{0, 1}
		}
	}
	return r
}

func (s *Schema) hasCategorical(name string) bool {
	for _, f := range s.Features {
		if f.Name == name && len(f.Categories) > 0 {
			return true
		}
	}
	return false
}

// Scaler returns the scaling of kind standardize or standardize+unitball whose parameters
// are the schema's ranges: Mean the middle of each range, Std its half-width (categories
// keep 0 and 1). Other kinds need no parameters and are returned as they are.
func (s *Schema) Scaler(kind Scaling) (*Scaler, error) {
	switch kind {
	case ScaleNone, ScaleUnitBall:
		return &Scaler{Kind: kind}, nil
	case ScaleStandardize, ScaleStandardizeUnitBall:
	default:
		return nil, fmt.Errorf("scaling %s is fitted on rows; with a schema use standardize or standardize+unitball (from its ranges), unitball or none", kind)
	}
	sc := &Scaler{Kind: kind}
	for _, f := range s.Features {
		if len(f.Categories) == 0 && f.Center != nil {
			sc.Mean = append(sc.Mean, *f.Center)
			sc.Std = append(sc.Std, *f.Scale)
			continue
		}
		if len(f.Categories) == 0 {
			sc.Mean = append(sc.Mean, (*f.Min+*f.Max)/2)
			sc.Std = append(sc.Std, (*f.Max-*f.Min)/2)
			continue
		}
		for range f.Categories {
			sc.Mean, sc.Std = append(sc.Mean, 0), append(sc.Std, 1)
		}
	}
	return sc, sc.Validate(0)
}

// DraftSchema returns a schema describing d: its features with their observed ranges,
// means and standard deviations (center and scale, to 3 significant digits) and
// categories, its label column and classes. It describes d's rows: review it, round the
// ranges outward and replace the statistics by public ones before sharing it (see
// Schema).
func DraftSchema(d *Dataset) *Schema {
	s := &Schema{Label: d.Label, Classes: d.Classes.Names(), Fill: d.Fill}
	if len(s.Classes) == 2 && s.Classes[0] == "" {
		s.Classes = nil
	}
	cat := map[string][]string{}
	for _, c := range d.Categories {
		cat[c.Column] = c.Values
	}
	if d.Classes == nil && d.Rows > 0 {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, y := range d.Y {
			lo, hi = math.Min(lo, y), math.Max(hi, y)
		}
		if hi > lo {
			s.TargetMin, s.TargetMax = &lo, &hi
		}
	}
	done := map[string]bool{}
	for j, n := range d.Features {
		if n == InterceptFeature {
			continue
		}
		if c, _, ok := strings.Cut(n, "="); ok && cat[c] != nil {
			if !done[c] {
				s.Features = append(s.Features, SchemaFeature{Name: c, Categories: cat[c]})
				done[c] = true
			}
			continue
		}
		lo, hi := math.Inf(1), math.Inf(-1)
		for i := 0; i < d.Rows; i++ {
			lo, hi = math.Min(lo, d.Row(i)[j]), math.Max(hi, d.Row(i)[j])
		}
		if !(hi > lo) {
			lo, hi = lo-1, hi+1
		}
		sf := SchemaFeature{Name: n, Min: &lo, Max: &hi}
		if d.Rows > 1 {
			mean, ss := 0.0, 0.0
			for i := 0; i < d.Rows; i++ {
				mean += d.Row(i)[j]
			}
			mean /= float64(d.Rows)
			for i := 0; i < d.Rows; i++ {
				ss += (d.Row(i)[j] - mean) * (d.Row(i)[j] - mean)
			}
			// The scale to 3 significant digits, the center to the scale's precision
			// (its third digit), not to its own size: a column of large values and a
			// small spread (a timestamp) keeps its center within a hundredth of a scale.
			// A column whose statistics overflow gets none.
			if sd := sigDigits(math.Sqrt(ss/float64(d.Rows-1)), 3); sd > 0 && !math.IsInf(sd, 0) {
				e := int(math.Floor(math.Log10(sd))) - 2
				q := math.Pow(10, float64(e))
				if c := math.Round(mean/q) * q; !math.IsInf(c, 0) && !math.IsNaN(c) {
					// The double nearest the decimal, so that the file shows it as written
					// (19.49, not 19.490000000000002).
					if e < 0 {
						c, _ = strconv.ParseFloat(strconv.FormatFloat(c, 'f', -e, 64), 64)
					}
					sf.Center, sf.Scale = &c, &sd
				}
			}
		}
		s.Features = append(s.Features, sf)
	}
	return s
}

// sigDigits rounds v to n significant digits (v itself where the rounding overflows,
// for subnormal or huge v).
func sigDigits(v float64, n int) float64 {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return v
	}
	r, err := strconv.ParseFloat(strconv.FormatFloat(v, 'g', n, 64), 64) // the decimal's nearest double
	if err != nil || math.IsNaN(r) || math.IsInf(r, 0) || r == 0 {
		return v
	}
	return r
}
