package main

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/dpadmm/dpadmm/privacy"
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
		{"--q", "0.1", "--noise-multiplier", "1", "--target-epsilon", "1", "--steps", "10"}, // both: which one?
		{"--q", "0.1", "--steps", "10"},                                                     // neither
	} {
		var out, errb bytes.Buffer
		if code := run(append([]string{"account", "subsampled"}, args...), &out, &errb); code != 2 || errb.Len() == 0 {
			t.Fatalf("%v: exit %d, stderr %q", args, code, errb.String())
		}
	}
}

// TestAccountSubsampledJSONKeys: 'account subsampled --json' prints exactly the promised
// keys, with conditions_hold a JSON boolean.
func TestAccountSubsampledJSONKeys(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"account", "subsampled", "--q", "0.01", "--noise-multiplier", "1.1", "--steps", "100", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var m map[string]any
	if err := json.Unmarshal(out.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	num := []string{"q", "noise_multiplier", "steps", "delta", "epsilon", "order", "epsilon_classic", "order_classic"}
	str := []string{"conversion", "conversion_classic", "theorem", "note", "adjacency"}
	boolean := []string{"conditions_hold", "noise_multiplier_calibrated"}
	if len(m) != len(num)+len(str)+len(boolean) {
		t.Errorf("%d keys, want %d:\n%s", len(m), len(num)+len(str)+len(boolean), out.String())
	}
	for _, k := range num {
		if _, ok := m[k].(float64); !ok {
			t.Errorf("%s = %#v, want a number", k, m[k])
		}
	}
	for _, k := range str {
		if v, ok := m[k].(string); !ok || v == "" {
			t.Errorf("%s = %#v, want a non-empty string", k, m[k])
		}
	}
	for _, k := range boolean {
		if _, ok := m[k].(bool); !ok {
			t.Errorf("%s = %#v, want a boolean", k, m[k])
		}
	}
	if m["conditions_hold"] != true || m["noise_multiplier_calibrated"] != false {
		t.Errorf("conditions_hold %v, noise_multiplier_calibrated %v", m["conditions_hold"], m["noise_multiplier_calibrated"])
	}
	if _, ok := m["target_epsilon"]; ok {
		t.Error("target_epsilon present without --target-epsilon")
	}
	// The figures are those of the library.
	c := privacy.SubsampledGaussianCurve(0.01, 1.1, 100)
	eps, order := privacy.ToDP(c, 1e-5)
	if m["epsilon"] != eps || m["order"] != order {
		t.Errorf("epsilon %v at %v, library %v at %v", m["epsilon"], m["order"], eps, order)
	}
}

// TestAccountSubsampledTargetEpsilon: --target-epsilon calibrates the noise multiplier down
// to epsilon 1e-4 (at a delta where the conversion allows it): the reported multiplier
// meets the target, a multiplier smaller by the calibration tolerance does not, and the
// epsilon is within 1e-6 of the target, all recomputed from the library.
func TestAccountSubsampledTargetEpsilon(t *testing.T) {
	const q, steps, delta = 0.01, 1000, 1e-3
	for _, target := range []float64{2, 0.05, 1e-3, 1e-4} {
		var out, errb bytes.Buffer
		args := []string{"account", "subsampled", "--q", "0.01", "--steps", "1000", "--delta", "1e-3",
			"--target-epsilon", strconv.FormatFloat(target, 'g', -1, 64), "--json"}
		if code := run(args, &out, &errb); code != 0 {
			t.Fatalf("target %v: exit %d: %s", target, code, errb.String())
		}
		var r struct {
			Z          float64  `json:"noise_multiplier"`
			Calibrated bool     `json:"noise_multiplier_calibrated"`
			Target     *float64 `json:"target_epsilon"`
			Epsilon    float64  `json:"epsilon"`
		}
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		eps, _ := privacy.ToDP(privacy.SubsampledGaussianCurve(q, r.Z, steps), delta)
		epsLo, _ := privacy.ToDP(privacy.SubsampledGaussianCurve(q, r.Z/(1+privacy.CalibrateRelTol), steps), delta)
		if !r.Calibrated || r.Target == nil || *r.Target != target || r.Epsilon != eps ||
			eps > target || eps < target*(1-1e-6) || epsLo <= target {
			t.Errorf("target %v: report %+v; library epsilon %v at %v, %v just below", target, r, eps, r.Z, epsLo)
		}
	}
	// Text output names the calibration.
	var out, errb bytes.Buffer
	if code := run([]string{"account", "subsampled", "--q", "0.01", "--steps", "1000", "--delta", "1e-3", "--target-epsilon", "0.5"}, &out, &errb); code != 0 ||
		!strings.Contains(out.String(), "calibrated for epsilon 0.5") {
		t.Errorf("exit %d, output %q, stderr %q", code, out.String(), errb.String())
	}
}

// TestAccountTargetEpsilonUnreachable: a target below what the RDP conversion allows on
// the order grid (5.6e-6 at order 2^20 and delta 1e-9) is refused with that floor, by both
// commands that calibrate; bad targets are usage errors.
func TestAccountTargetEpsilonUnreachable(t *testing.T) {
	floor, _ := privacy.ConversionFloor(1e-9)
	want := strconv.FormatFloat(floor, 'g', 6, 64)
	sub := []string{"account", "subsampled", "--q", "0.01", "--steps", "1000", "--delta", "1e-9"}
	plan := []string{"account", "plan", "--nodes", "10", "--hops", "100", "--clip", "1", "--delta", "1e-9"}
	with := func(base []string, a ...string) []string { return append(append([]string(nil), base...), a...) }
	checkBadInputs(t, []badInput{
		{with(sub, "--target-epsilon", "1e-6"), 1, "unreachable at delta 1e-09"},
		{with(sub, "--target-epsilon", "1e-6"), 1, want},
		{with(plan, "--target-epsilon", "1e-6"), 1, "unreachable at delta 1e-09"},
		{with(plan, "--target-epsilon", "1e-6", "--budget-kind", "local"), 1, want},
		{with(sub, "--target-epsilon", "NaN"), 2, "--target-epsilon must be finite and > 0"},
		{with(sub, "--target-epsilon", "0"), 2, "--target-epsilon must be finite and > 0"},
		{with(sub, "--target-epsilon", "-1"), 2, "--target-epsilon must be finite and > 0"},
		{[]string{"account", "subsampled", "--q", "0", "--steps", "10", "--target-epsilon", "1"}, 2, "needs --q > 0"},
		{[]string{"account", "subsampled", "--q", "2", "--steps", "10", "--target-epsilon", "1"}, 2, "must be in [0,1]"},
	})
}

// TestAccountPlanTargetEpsilonSmall: 'account plan --target-epsilon 1e-4' reaches the
// target for both budget kinds at delta 1e-5, checked against the library's curves, and so
// does 'account subsampled'.
func TestAccountPlanTargetEpsilonSmall(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"account", "subsampled", "--q", "0.01", "--steps", "1000", "--target-epsilon", "1e-4", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("account subsampled --target-epsilon 1e-4: exit %d: %s", code, errb.String())
	}
	var sr struct {
		Z float64 `json:"noise_multiplier"`
	}
	if err := json.Unmarshal(out.Bytes(), &sr); err != nil {
		t.Fatal(err)
	}
	if e, _ := privacy.ToDP(privacy.SubsampledGaussianCurve(0.01, sr.Z, 1000), 1e-5); !(e <= 1e-4 && e > 1e-4*(1-1e-6)) {
		t.Errorf("account subsampled: noise %v gives epsilon %v, want 1e-4", sr.Z, e)
	}
	for _, kind := range []string{"pairwise", "local"} {
		out.Reset()
		args := []string{"account", "plan", "--nodes", "10", "--hops", "100", "--clip", "1", "--max-updates", "10",
			"--target-epsilon", "1e-4", "--delta", "1e-5", "--budget-kind", kind, "--json"}
		if code := run(args, &out, &errb); code != 0 {
			t.Fatalf("%s: exit %d: %s", kind, code, errb.String())
		}
		var r struct {
			Sigma      float64 `json:"sigma"`
			Calibrated bool    `json:"sigma_calibrated"`
			Local      struct {
				Epsilon float64 `json:"epsilon"`
			} `json:"local"`
			Pairwise struct {
				Worst struct {
					Epsilon float64 `json:"epsilon"`
				} `json:"worst"`
			} `json:"pairwise_planned"`
		}
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		curve := func(s float64) privacy.Curve { return privacy.Theorem4FinalCurve(10, 10, 100, 1, s) }
		got := r.Pairwise.Worst.Epsilon
		if kind == "local" {
			curve = func(s float64) privacy.Curve { return privacy.WalkLocalCurve(1, s, 10) }
			got = r.Local.Epsilon
		}
		eps, _ := privacy.ToDP(curve(r.Sigma), 1e-5)
		epsLo, _ := privacy.ToDP(curve(r.Sigma/(1+privacy.CalibrateRelTol)), 1e-5)
		if !r.Calibrated || math.Abs(got-eps) > 1e-12*eps || eps > 1e-4 || eps < 1e-4*(1-1e-6) || epsLo <= 1e-4 {
			t.Errorf("%s: sigma %v, reported %v, library %v (%v just below)", kind, r.Sigma, got, eps, epsLo)
		}
	}
}
