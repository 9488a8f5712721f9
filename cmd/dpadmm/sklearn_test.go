//go:build sklearn

package main

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"testing"
)

// TestSklearnCompare (go test -tags sklearn -run SklearnCompare ./cmd/dpadmm; needs
// /usr/bin/python3 with scikit-learn, Debian's python3-sklearn): a noiseless 8-node walk
// is within 0.01 test accuracy of scikit-learn's LogisticRegression (the same split,
// features, L2 and an unpenalised intercept) on breast cancer, wine and iris, and within
// 0.02 R^2 of LinearRegression on diabetes, measured by examples/sklearn_compare.py in one
// run each.
func TestSklearnCompare(t *testing.T) {
	t.Setenv(asMainEnv, "1") // the script runs this test binary as dpadmm
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		data, label, loss, scale string
		tol                      float64
	}{
		{"../../../shared/data/breast_cancer.csv", "label", "logistic", "standardize+unitball", 0.01},
		{"../../examples/wine.csv", "class", "logistic", "standardize+unitball", 0.01},
		{"../../examples/iris.csv", "species", "logistic", "standardize+unitball", 0.01},
		{"../../examples/diabetes.csv", "target", "squared", "standardize", 0.02},
	} {
		out, err := exec.Command("/usr/bin/python3", "../../examples/sklearn_compare.py", "--dpadmm", bin, "--data", c.data,
			"--label", c.label, "--loss", c.loss, "--scale", c.scale, "--json").Output()
		if err != nil {
			t.Fatalf("%s: %v", c.data, err)
		}
		var r map[string]any
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("%s: %v: %s", c.data, err, out)
		}
		d := r["difference"].(float64)
		t.Logf("%s: %s dpadmm %v, scikit-learn %v", c.data, r["metric"], r["dpadmm"], r[map[bool]string{true: "sklearn_linear", false: "sklearn"}[c.loss == "squared"]])
		if math.Abs(d) > c.tol {
			t.Errorf("%s: difference %v beyond %v", c.data, d, c.tol)
		}
	}
}
