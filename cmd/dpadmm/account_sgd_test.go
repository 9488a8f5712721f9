package main

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// TestAccountSubsampledAbadi: the DP-SGD example of Abadi et al. (q = 0.01, noise
// multiplier 4, 10,000 steps, delta 1e-5) gives epsilon 1.2586 with the classic RDP
// conversion (the laplacian-smoothing digest's figure) and no more with the tighter one.
func TestAccountSubsampledAbadi(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"account", "subsampled", "--q", "0.01", "--noise-multiplier", "4", "--steps", "10000", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var r struct {
		Epsilon        float64 `json:"epsilon"`
		EpsilonClassic float64 `json:"epsilon_classic"`
		Delta          float64 `json:"delta"`
		Theorem        string  `json:"theorem"`
	}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if math.Abs(r.EpsilonClassic-1.2586) > 5e-4 || !(r.Epsilon > 0 && r.Epsilon <= r.EpsilonClassic) || r.Delta != 1e-5 ||
		!strings.Contains(r.Theorem, "Mironov") {
		t.Fatalf("report %+v", r)
	}
}

func TestAccountSubsampledBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"--q", "1.5", "--noise-multiplier", "4", "--steps", "10"},
		{"--q", "NaN", "--noise-multiplier", "4", "--steps", "10"},
		{"--q", "0.1", "--noise-multiplier", "-1", "--steps", "10"},
		{"--q", "0.1", "--noise-multiplier", "1", "--steps", "0"},
		{"--q", "0.1", "--noise-multiplier", "1", "--steps", "10", "--delta", "1"},
	} {
		var out, errb bytes.Buffer
		if code := run(append([]string{"account", "subsampled"}, args...), &out, &errb); code != 2 || errb.Len() == 0 {
			t.Fatalf("%v: exit %d, stderr %q", args, code, errb.String())
		}
	}
}
