package privacy

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// TestEpsilonJSON: finite epsilons are written exactly as encoding/json writes the float64
// and read back bit for bit; every marker of "no finite guarantee" is written as null and
// read back as +Inf; the legacy encodings -1 and the largest float64 read as +Inf; other
// negative numbers and non-numbers are refused.
func TestEpsilonJSON(t *testing.T) {
	for _, x := range []float64{0, 1.5, 7.123456789012345, 1e-300, 5e-324, 1e300, 123456789, math.Nextafter(math.MaxFloat64, 0)} {
		b, err := json.Marshal(Epsilon(x))
		want, _ := json.Marshal(x)
		if err != nil || string(b) != string(want) {
			t.Errorf("%v: %s, %v; want %s", x, b, err, want)
		}
		var e Epsilon
		if err := json.Unmarshal(b, &e); err != nil || math.Float64bits(float64(e)) != math.Float64bits(x) || !e.Bounded() {
			t.Errorf("%v: read back %v, %v", x, e, err)
		}
	}
	for _, x := range []float64{math.Inf(1), math.Inf(-1), math.NaN(), math.MaxFloat64, -1, -0.5} {
		b, err := json.Marshal(Epsilon(x))
		if err != nil || string(b) != "null" {
			t.Errorf("%v: %s, %v; want null", x, b, err)
		}
		if e := Eps(x); !math.IsInf(float64(e), 1) || e.Bounded() || e.String() != "unbounded" {
			t.Errorf("Eps(%v) = %v", x, e)
		}
	}
	for _, in := range []string{"null", "-1", "1.7976931348623157e+308", "1.7976931348623157e308", " null "} {
		var e Epsilon = 3
		if err := json.Unmarshal([]byte(in), &e); err != nil || !math.IsInf(float64(e), 1) {
			t.Errorf("%q: %v, %v; want +Inf", in, e, err)
		}
	}
	for _, in := range []string{"-2", "-0.5", `"1"`, "true", "{}"} {
		var e Epsilon
		if err := json.Unmarshal([]byte(in), &e); err == nil || !strings.Contains(err.Error(), "privacy: epsilon") {
			t.Errorf("%q: %v, %v; want an error", in, e, err)
		}
	}
	// In a struct and a slice, as the reports hold them; a round trip keeps every value.
	type rep struct {
		Eps     Epsilon   `json:"epsilon"`
		PerNode []Epsilon `json:"per_node_epsilon"`
	}
	r := rep{Eps: Unbounded, PerNode: Epsilons([]float64{2.5, math.MaxFloat64, -1, 0})}
	b, err := json.Marshal(r)
	if err != nil || string(b) != `{"epsilon":null,"per_node_epsilon":[2.5,null,null,0]}` {
		t.Fatalf("%s, %v", b, err)
	}
	var back rep
	if err := json.Unmarshal(b, &back); err != nil || back.Eps.Bounded() || back.PerNode[0] != 2.5 || back.PerNode[1].Bounded() ||
		back.PerNode[2].Bounded() || back.PerNode[3] != 0 || !back.PerNode[3].Bounded() {
		t.Fatalf("%+v, %v", back, err)
	}
	if Epsilon(2.5).String() != "2.5" || Eps(1.25).Float() != 1.25 || !math.IsInf(Epsilon(-1).Float(), 1) {
		t.Error("String or Float")
	}
}
