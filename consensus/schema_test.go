package consensus

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSchemaApplyAndScale: a schema selects and orders the features, fixes the one-hot
// vocabulary (a category the data lack is a zero column, one the schema lacks an error),
// clips numbers into their ranges, and gives the scaling from its ranges alone: the same
// scaler for any data, mapping each range onto [-1, 1].
func TestSchemaApplyAndScale(t *testing.T) {
	lo, hi := 0.0, 10.0
	s := &Schema{Label: "y", Classes: []string{"no", "yes"}, Features: []SchemaFeature{
		{Name: "colour", Categories: []string{"red", "green", "blue"}}, {Name: "x", Min: &lo, Max: &hi}}}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	csv := "x,note,y,colour\n2,a,no,red\n12,b,yes,blue\n5,c,yes,red\n"
	d, err := ParseCSV("d.csv", strings.NewReader(csv), LoadOptions{Label: "y", Binary: true, Categorical: "auto", Classes: s.ClassListOrNil()})
	if err != nil {
		t.Fatal(err)
	}
	a, clipped, err := s.Apply(d)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(a.Features, ",") != "colour=red,colour=green,colour=blue,x" || clipped != 1 {
		t.Fatalf("features %v, clipped %d", a.Features, clipped)
	}
	want := [][]float64{{1, 0, 0, 2}, {0, 0, 1, 10}, {1, 0, 0, 5}}
	for i, w := range want {
		for j, v := range w {
			if a.Row(i)[j] != v {
				t.Fatalf("row %d: %v, want %v", i, a.Row(i), w)
			}
		}
	}
	sc, err := s.Scaler(ScaleStandardize)
	if err != nil {
		t.Fatal(err)
	}
	if r := sc.ScaleRow([]float64{0, 0, 0, 0}); r[3] != -1 {
		t.Fatalf("x = min scales to %v, want -1", r[3])
	}
	if r := sc.ScaleRow([]float64{0, 0, 0, 10}); r[3] != 1 {
		t.Fatalf("x = max scales to %v, want 1", r[3])
	}
	// A category the schema lacks is refused; a feature the data lack is named.
	d2, _ := ParseCSV("e.csv", strings.NewReader("x,y,colour\n2,no,purple\n3,yes,red\n"), LoadOptions{Label: "y", Binary: true, Categorical: "auto"})
	if _, _, err := s.Apply(d2); err == nil || !strings.Contains(err.Error(), `"purple"`) {
		t.Fatalf("unknown category: %v", err)
	}
	d3, _ := ParseCSV("f.csv", strings.NewReader("y,colour\nno,red\nyes,red\n"), LoadOptions{Label: "y", Binary: true, Categorical: "auto"})
	if _, _, err := s.Apply(d3); err == nil || !strings.Contains(err.Error(), `"x"`) {
		t.Fatalf("missing feature: %v", err)
	}
	for _, bad := range []string{`{"features":[]}`, `{"features":[{"name":"x"}]}`, `{"features":[{"name":"x","min":2,"max":1}]}`,
		`{"features":[{"name":"x","min":0,"max":1},{"name":"x","min":0,"max":1}]}`, `{"features":[{"name":"c","categories":["a","a"]}]}`,
		`{"features":[{"name":"x","min":0,"max":1}],"target_min":3}`, `{"features":[{"name":"x","min":0,"max":1}],"extra":1}`,
		`{"features":[{"name":"x","min":0,"max":1,"center":0.5}]}`, `{"features":[{"name":"x","min":0,"max":1,"center":0.5,"scale":0}]}`,
		`{"features":[{"name":"c","categories":["a"],"center":0,"scale":1}]}`,
		`{"features":[{"name":"x","min":0,"max":1e10,"center":0,"scale":1e-300}]}`} {
		p := filepath.Join(t.TempDir(), "s.json")
		if err := os.WriteFile(p, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadSchema(p); err == nil {
			t.Errorf("schema %s accepted", bad)
		}
	}
}

// TestDraftSchemaRoundTrip: a drafted schema describes the data it was drawn from (its
// ranges contain every value, its categories every text), so applying it changes nothing.
func TestDraftSchemaRoundTrip(t *testing.T) {
	d, err := ParseCSV("d.csv", strings.NewReader("y,x,c\n1,0.5,a\n2,-3,b\n3,7,a\n"), LoadOptions{Categorical: "auto"})
	if err != nil {
		t.Fatal(err)
	}
	s := DraftSchema(d)
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if *s.TargetMin != 1 || *s.TargetMax != 3 || s.Label != "y" {
		t.Fatalf("draft %+v", s)
	}
	a, clipped, err := s.Apply(d)
	if err != nil || clipped != 0 {
		t.Fatalf("apply: %v, %d clipped", err, clipped)
	}
	for i := range d.X {
		if math.Float64bits(a.X[i]) != math.Float64bits(d.X[i]) {
			t.Fatalf("value %d changed: %v -> %v", i, d.X[i], a.X[i])
		}
	}
}

// TestSchemaCenterScale: a feature's center and scale replace the range's midpoint and
// half-width in the standardization; the range still clips; a drafted schema carries
// the data's mean and standard deviation to 3 significant digits.
func TestSchemaCenterScale(t *testing.T) {
	lo, hi, c, sd := 0.0, 100.0, 10.0, 4.0
	s := &Schema{Features: []SchemaFeature{{Name: "x", Min: &lo, Max: &hi, Center: &c, Scale: &sd}}}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	sc, err := s.Scaler(ScaleStandardize)
	if err != nil {
		t.Fatal(err)
	}
	if r := sc.ScaleRow([]float64{18}); r[0] != 2 {
		t.Fatalf("x = 18 scales to %v, want (18 - 10) / 4 = 2", r[0])
	}
	d, err := ParseCSV("d.csv", strings.NewReader("y,x\n1,1000\n0,-5\n"), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, clipped, err := s.Apply(d)
	if err != nil || clipped != 2 || a.Row(0)[0] != 100 || a.Row(1)[0] != 0 {
		t.Fatalf("apply: %v, %d clipped, rows %v", err, clipped, a.X)
	}
	d2, err := ParseCSV("d.csv", strings.NewReader("y,x\n1,1.23456\n0,2.5\n1,9.8765\n"), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f := DraftSchema(d2).Features[0]
	mean := (1.23456 + 2.5 + 9.8765) / 3
	var ss float64
	for _, v := range []float64{1.23456, 2.5, 9.8765} {
		ss += (v - mean) * (v - mean)
	}
	if f.Center == nil || *f.Center != 4.54 || f.Scale == nil || math.Abs(*f.Scale-math.Sqrt(ss/2)) > 0.005 {
		t.Fatalf("drafted center %v scale %v, want 4.54 and %.3g", f.Center, f.Scale, math.Sqrt(ss/2))
	}
	// Large values with a small spread: the center keeps the scale's precision; huge and
	// subnormal columns draft a valid schema (no center and scale where they overflow).
	d3, err := ParseCSV("d.csv", strings.NewReader("y,t,h,s\n1,1703000000,1e200,5e-320\n0,1706000000,-1e200,1e-321\n1,1700000000,3e200,0\n"), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ds := DraftSchema(d3)
	if err := ds.Validate(); err != nil {
		t.Fatalf("drafted schema invalid: %v", err)
	}
	if _, err := json.Marshal(ds); err != nil {
		t.Fatalf("drafted schema not JSON: %v", err)
	}
	tf := ds.Features[0]
	if tf.Center == nil || math.Abs(*tf.Center-1703000000) > 0.01**tf.Scale {
		t.Fatalf("timestamp column: center %v scale %v, want within 1%% of a scale of 1703000000", tf.Center, tf.Scale)
	}
	if ds.Features[1].Center != nil {
		t.Fatalf("huge column: center %v scale %v, want none (its variance overflows)", *ds.Features[1].Center, *ds.Features[1].Scale)
	}
}

// TestAutoScaler: the default scaling takes the schema's ranges first, then public data,
// and is unitball without either.
func TestAutoScaler(t *testing.T) {
	lo, hi := 0.0, 10.0
	s := &Schema{Label: "y", Features: []SchemaFeature{{Name: "x", Min: &lo, Max: &hi}}}
	sc, how, err := AutoScaler(s, nil)
	if err != nil || sc.Kind != ScaleStandardizeUnitBall || !strings.Contains(how, "schema") {
		t.Fatalf("schema: %+v %q %v", sc, how, err)
	}
	pub := &Dataset{Rows: 2, Cols: 1, X: []float64{1, 3}, Y: []float64{0, 1}}
	if sc, how, err = AutoScaler(nil, pub); err != nil || sc.Kind != ScaleStandardizeUnitBall || !strings.Contains(how, "public") {
		t.Fatalf("public: %+v %q %v", sc, how, err)
	}
	if sc, _, err = AutoScaler(nil, nil); err != nil || sc.Kind != ScaleUnitBall {
		t.Fatalf("none: %+v %v", sc, err)
	}
}

// TestSchemaDropsIDWarning: the reader's warning about an ID-like column stays when the
// schema reads the column and goes when the schema leaves it out of the model.
func TestSchemaDropsIDWarning(t *testing.T) {
	var b strings.Builder
	b.WriteString("id,y,a\n")
	for i := 0; i < 30; i++ {
		fmt.Fprintf(&b, "%d,%d,%g\n", 100+i, 2*(i%2)-1, float64(i%7))
	}
	d, err := ParseCSV("d.csv", strings.NewReader(b.String()), LoadOptions{Label: "y", Binary: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0], "(id)") {
		t.Fatalf("reader warnings %q, want the ID column's", d.Warnings)
	}
	for _, c := range []struct {
		schema string
		warn   int
	}{
		{`{"label":"y","features":[{"name":"a","min":0,"max":7}]}`, 0},
		{`{"label":"y","features":[{"name":"id","min":0,"max":200},{"name":"a","min":0,"max":7}]}`, 1},
	} {
		s, err := ParseSchema([]byte(c.schema))
		if err != nil {
			t.Fatal(err)
		}
		out, _, err := s.Apply(d)
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Warnings) != c.warn {
			t.Errorf("%s: warnings %q, want %d", c.schema, out.Warnings, c.warn)
		}
	}
}
