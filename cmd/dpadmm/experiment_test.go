package main

import (
	"bytes"
	"encoding/csv"
	"image/png"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/testnet/experiment"
)

// TestExperimentCLI: a short run writes the CSV (header and one row per series and
// iteration) and a decodable PNG, and prints the summary with the verdict per alpha.
func TestExperimentCLI(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := run([]string{"experiment", "radmm", "--seeds", "2", "--alphas", "2,0.5", "--iters", "5",
		"--out", dir, "--name", "f"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}
	if !strings.Contains(errb.String(), "run 18/18") {
		t.Errorf("no progress line: %q", errb.String())
	}
	f, err := os.Open(filepath.Join(dir, "f.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(recs[0], ",") != experiment.ExperimentCSVHeader || len(recs) != 1+9*6 {
		t.Fatalf("csv: header %v, %d lines", recs[0], len(recs))
	}
	b, err := os.ReadFile(filepath.Join(dir, "f.png"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"embedded:breast_cancer", "admm-dvp", "madmm", "mradmm", "Theorem V.1",
		"alpha 2: R-ADMM", "alpha 0.5: R-ADMM", "hold"} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
	// --quiet: no progress.
	errb.Reset()
	if code := run([]string{"experiment", "radmm", "--seeds", "1", "--alphas", "1", "--iters", "2", "--out", dir, "--quiet"}, &out, &errb); code != 0 || errb.Len() != 0 {
		t.Errorf("quiet: exit %d, stderr %q", code, errb.String())
	}
}

// TestExperimentPositiveLabel: text labels are mapped with --positive and categorical
// columns one-hot encoded, as for UCI Adult.
func TestExperimentPositiveLabel(t *testing.T) {
	dir := t.TempDir()
	var sb strings.Builder
	for i := 0; i < 60; i++ {
		lab, cat := "<=50K", "a"
		if i%3 == 0 {
			lab, cat = ">50K", "b"
		}
		if i%7 == 0 {
			cat = "?"
		}
		sb.WriteString(strings.Join([]string{strconv.Itoa(20 + i%40), cat, strconv.Itoa(i % 5), lab}, ", ") + "\n")
	}
	data := filepath.Join(dir, "adult-like.data")
	if err := os.WriteFile(data, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	ld, err := loadFlags(experimentData, loadRequest{loss: consensus.Logistic, seed: 1},
		"--data", data, "--label", "3", "--positive", ">50K", "--categorical", "auto", "--scale", "standardize+rownorm", "--test-frac", "0.2")
	if err != nil {
		t.Fatal(err)
	}
	// 2 numeric columns + 3 categories (?, a, b).
	if ld.train.Cols != 5 || ld.train.Rows+ld.test.Rows != 60 {
		t.Fatalf("cols %d rows %d+%d", ld.train.Cols, ld.train.Rows, ld.test.Rows)
	}
	pos := 0
	for _, d := range []*[]float64{&ld.train.Y, &ld.test.Y} {
		for _, y := range *d {
			if y == 1 {
				pos++
			} else if y != -1 {
				t.Fatalf("label %v", y)
			}
		}
	}
	if pos != 20 {
		t.Errorf("%d positive rows, want 20", pos)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"experiment", "radmm", "--data", data, "--label", "3", "--positive", ">50K", "--categorical", "auto",
		"--seeds", "1", "--alphas", "2", "--iters", "2", "--paper-c", "1", "--out", dir, "--quiet"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}
	// Every row positive, or none: a clear error.
	if _, err := loadFlags(experimentData, loadRequest{loss: consensus.Logistic},
		"--data", data, "--label", "3", "--positive", "nope", "--categorical", "auto", "--scale", "rownorm"); err == nil || !strings.Contains(err.Error(), "positive label") {
		t.Errorf("no positive rows: %v", err)
	}
}

// TestExperimentCLIErrors: bad input gives a usage error (exit 2) or a clear error (exit 1).
func TestExperimentCLIErrors(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"experiment"}, 2, "which experiment"},
		{[]string{"experiment", "walks"}, 2, "unknown experiment"},
		{[]string{"experiment", "radmm", "--alphas", "2,0"}, 2, "alpha must be"},
		{[]string{"experiment", "radmm", "--alphas", "-1"}, 2, "alpha must be"},
		{[]string{"experiment", "radmm", "--alphas", "x"}, 2, "alpha must be"},
		{[]string{"experiment", "radmm", "--seeds", "0"}, 2, "--seeds must be >= 1"},
		{[]string{"experiment", "radmm", "--iters", "0"}, 2, "--iters"},
		{[]string{"experiment", "radmm", "--graph", "star"}, 2, "--graph"},
		{[]string{"experiment", "radmm", "--eta-growth", "0.5"}, 2, "--eta-growth"},
		{[]string{"experiment", "radmm", "--name", "a/b"}, 2, "--name"},
		{[]string{"experiment", "radmm", "--workers", "-1"}, 2, "--workers"},
		{[]string{"experiment", "radmm", "--data", filepath.Join(dir, "missing.csv"), "--out", dir}, 1, "missing.csv"},
		{[]string{"experiment", "radmm", "--scale", "none", "--iters", "2", "--seeds", "1", "--out", dir}, 1, "rows not normalised"},
		{[]string{"experiment", "radmm", "--positive", "2", "--out", dir}, 1, "positive label \"2\" is neither"},
		{[]string{"experiment", "radmm", "--label", "x", "--out", dir}, 2, "--label applies to a --data file"},
		{[]string{"experiment", "radmm", "--test-frac", "1", "--out", dir}, 2, "--test-frac must be in [0,1)"},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		code := run(c.args, &out, &errb)
		if code != c.code || !strings.Contains(errb.String(), c.msg) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", c.args, code, errb.String(), c.code, c.msg)
		}
	}
}

// TestExperimentUtilityOneEpsilon: a single target (its log axis has one point) plots,
// and the table comes first on stdout.
func TestExperimentUtilityOneEpsilon(t *testing.T) {
	out := t.TempDir()
	code, so, e := runCmd("experiment", "utility", "--datasets", "breast_cancer", "--nodes", "3", "--splits", "iid", "--epsilons", "1",
		"--seeds", "1", "--algos", "walk", "--examples", "../../examples", "--out", out, "--quiet")
	if code != 0 || !strings.HasPrefix(so, "data ") {
		t.Fatalf("exit %d: %s %s", code, so, e)
	}
	b, err := os.ReadFile(filepath.Join(out, "utility.png"))
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("utility.png: %v (%d bytes)", err, len(b))
	}
}
