package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExperimentGADMM runs a small gadmm experiment end to end: exit 0, the CSV and PNG
// written, the summary with the recomputed Table 1 step sizes.
func TestExperimentGADMM(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := run([]string{"experiment", "gadmm", "--dim", "8", "--rows", "40", "--iters", "10", "--runs", "2",
		"--sigmas", "0.1,0.5", "--out", dir, "--name", "g", "--quiet"}, &out, &errb)
	if code != 0 || errb.Len() != 0 {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	for _, f := range []string{"g.csv", "g.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	for _, want := range []string{"1.7531 (1.95)", "4.8113 (4.81)", "0.947368 (0.95)", "wrote "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
}

// TestExperimentGADMMUsage: flag errors are usage errors (exit 2) naming the flag.
func TestExperimentGADMMUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"experiment", "gadmm", "--sigmas", "-1"}, "sigma must be"},
		{[]string{"experiment", "gadmm", "--runs", "0"}, "--runs"},
		{[]string{"experiment", "gadmm", "--c2", "0"}, "--c2"},
		{[]string{"experiment", "gadmm", "--rows", "1"}, "--rows"},
		{[]string{"experiment", "gadmm", "extra"}, "unexpected argument"},
	} {
		var out, errb bytes.Buffer
		if code := run(c.args, &out, &errb); code != 2 || !strings.Contains(errb.String(), c.msg) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, errb.String(), c.msg)
		}
	}
}
