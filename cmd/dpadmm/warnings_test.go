package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// testnetWarnings runs dpadmm with args (which must include --json) and returns the
// report's "warnings" and the stderr lines.
func testnetWarnings(t *testing.T, args ...string) (warnings []string, lines []string) {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, errb.String())
	}
	var rep struct {
		Warnings *[]string `json:"warnings"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	if rep.Warnings == nil {
		t.Fatalf("%v: the report has no warnings list", args)
	}
	return *rep.Warnings, strings.Split(errb.String(), "\n")
}

// lineIndex is the index of the first line equal to s, -1 if none.
func lineIndex(lines []string, s string) int {
	for k, l := range lines {
		if l == s {
			return k
		}
	}
	return -1
}

// TestTestnetWarnings: the report's warnings are printed on stderr, one "warning: " line
// each; the plan's (hops beyond 4 x 5 = 20 noisy updates, the planned figure lost) come
// before the run's summary, the one about the last noisy update after it. --quiet keeps
// them.
func TestTestnetWarnings(t *testing.T) {
	ws, lines := testnetWarnings(t, "testnet", "--nodes", "4", "--hops", "300", "--max-updates", "5", "--json")
	summary := -1
	for k, l := range lines {
		if strings.HasPrefix(l, "walk on ") {
			summary = k
		}
	}
	var hopsAt, planAt, lastAt = -1, -1, -1
	for _, w := range ws {
		k := lineIndex(lines, "warning: "+w)
		if k < 0 {
			t.Errorf("warning %q not on stderr", w)
		}
		switch {
		case strings.HasPrefix(w, "hops beyond about 20 only forward the token: the model stops changing"):
			hopsAt = k
		case strings.HasPrefix(w, "the planned pairwise privacy figure will not hold for this run: the plan makes forwards certain"):
			planAt = k
		case strings.HasPrefix(w, "the last noisy update was at hop "):
			lastAt = k
		}
	}
	if summary < 0 || hopsAt < 0 || planAt < 0 || lastAt < 0 || !(hopsAt < summary && planAt < summary && lastAt > summary) {
		t.Errorf("summary at line %d, hops warning %d, planned-figure warning %d, last-update warning %d; stderr:\n%s",
			summary, hopsAt, planAt, lastAt, strings.Join(lines, "\n"))
	}
	n := 0
	for _, l := range lines {
		if strings.HasPrefix(l, "warning: ") {
			n++
		}
	}
	if n != len(ws) {
		t.Errorf("%d warning lines for %d warnings", n, len(ws))
	}

	// --quiet: no summary, the warnings still.
	qs, qlines := testnetWarnings(t, "testnet", "--nodes", "4", "--hops", "300", "--max-updates", "5", "--json", "--quiet")
	if len(qs) != len(ws) || lineIndex(qlines, "warning: "+qs[0]) < 0 {
		t.Errorf("--quiet: warnings %q, stderr %q", qs, qlines)
	}

	// A run with nothing to warn about has an empty list and no warning line.
	ws, lines = testnetWarnings(t, "testnet", "--nodes", "10", "--hops", "30", "--json")
	if len(ws) != 0 || strings.Contains(strings.Join(lines, "\n"), "warning:") {
		t.Errorf("default-like run: warnings %q", ws)
	}
}

// TestTestnetWarnUtility: a walk whose 400 updates per node each get a 400th of the
// epsilon (seed 1: accuracy 0.12, R^2 -31 for the squared loss), and an R-ADMM run
// drowned in noise (alpha 0.001): each is warned, with the numbers and what to try.
func TestTestnetWarnUtility(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"testnet", "--nodes", "40", "--hops", "8000", "--max-updates", "400", "--json"}, []string{"is no better than predicting the majority class of the test data", "--sigma"}},
		{[]string{"testnet", "--nodes", "40", "--hops", "8000", "--max-updates", "400", "--loss", "squared", "--json"}, []string{"test R^2 = ", "<= 0", "--sigma"}},
		{[]string{"testnet", "--algo", "radmm", "--iters", "4", "--alpha", "0.001", "--json"}, []string{"is no better than predicting the majority class", "--alpha"}},
	} {
		ws, lines := testnetWarnings(t, c.args...)
		found := false
		for _, w := range ws {
			ok := true
			for _, s := range c.want {
				ok = ok && strings.Contains(w, s)
			}
			if ok && lineIndex(lines, "warning: "+w) >= 0 {
				found = true
			}
		}
		if !found {
			t.Errorf("%v: warnings %q, want one with %q on stderr", c.args, ws, c.want)
		}
	}
}
