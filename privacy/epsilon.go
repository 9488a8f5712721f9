package privacy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// Epsilon is an epsilon as written to every JSON output of dpadmm (testnet and account
// reports, model.json, /status, audits): a finite value >= 0, or no finite guarantee.
//
// JSON has no infinity, so "no finite guarantee" is written as JSON null. In memory it is
// +Inf (Eps normalises to it); MarshalJSON also writes null for every other value that is
// not a finite epsilon: NaN, values >= math.MaxFloat64 and negative values, which earlier
// builds used as markers. UnmarshalJSON reads null as +Inf, and accepts the markers that
// earlier builds wrote, so their files still read: -1 (model.json, 'account models') and
// the largest float64 1.7976931348623157e+308 (testnet reports, audits).
type Epsilon float64

// Unbounded is the Epsilon of a release without a finite guarantee.
var Unbounded = Epsilon(math.Inf(1))

// Eps returns x as an Epsilon: x itself when it is a finite epsilon (>= 0 and below
// math.MaxFloat64), +Inf (Unbounded) otherwise.
func Eps(x float64) Epsilon {
	if !(x >= 0 && x < math.MaxFloat64) {
		return Unbounded
	}
	return Epsilon(x)
}

// Epsilons returns Eps of each element of xs (nil for nil).
func Epsilons(xs []float64) []Epsilon {
	if xs == nil {
		return nil
	}
	out := make([]Epsilon, len(xs))
	for i, x := range xs {
		out[i] = Eps(x)
	}
	return out
}

// Bounded reports whether e is a finite guarantee (finite, >= 0, below math.MaxFloat64).
func (e Epsilon) Bounded() bool { return float64(e) >= 0 && float64(e) < math.MaxFloat64 }

// Float returns e as a float64, +Inf when it is not bounded.
func (e Epsilon) Float() float64 { return float64(Eps(float64(e))) }

// String returns e with 4 significant digits, or "unbounded".
func (e Epsilon) String() string {
	if !e.Bounded() {
		return "unbounded"
	}
	return strconv.FormatFloat(float64(e), 'g', 4, 64)
}

// MarshalJSON writes a bounded e as a JSON number (encoding/json's form of the float64)
// and anything else as null.
func (e Epsilon) MarshalJSON() ([]byte, error) {
	if !e.Bounded() {
		return []byte("null"), nil
	}
	return json.Marshal(float64(e))
}

// legacyMax is the largest float64, written for +Inf by earlier testnet reports.
const legacyMax = math.MaxFloat64

// UnmarshalJSON reads a number >= 0 as itself, and null, -1 or 1.7976931348623157e+308
// as +Inf. Other negative numbers and non-numbers are errors.
func (e *Epsilon) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		*e = Unbounded
		return nil
	}
	var x float64
	if err := json.Unmarshal(b, &x); err != nil {
		return fmt.Errorf("privacy: epsilon %s: want a number or null", b)
	}
	switch {
	case x == -1 || x >= legacyMax:
		*e = Unbounded
	case !(x >= 0):
		return fmt.Errorf("privacy: epsilon %v is negative (null or -1 stand for no guarantee)", x)
	default:
		*e = Epsilon(x)
	}
	return nil
}

// DefaultDelta is the delta of every (epsilon, delta) figure the tool prints unless told
// otherwise: 1e-5, below one over the row count of every shipped dataset and of the
// demo's shards (the usual rule delta << 1/records), and the value of the published
// accountants' examples the tests compare with. Every default in the drivers and the
// command is this constant.
const DefaultDelta = 1e-5
