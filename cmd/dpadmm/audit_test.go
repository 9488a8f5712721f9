package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/testnet/audit"
)

// smallAudit keeps the walk audit of a CLI test to about a second per step.
var smallAudit = []string{"--nodes", "8", "--pair-hops", "1", "--final-hops", "3", "--seed", "3"}

// TestAuditJSONAndPNG: --json prints a JSON list with the documented keys, --out writes the
// same list and --png a PNG.
func TestAuditJSONAndPNG(t *testing.T) {
	dir := t.TempDir()
	png, out := filepath.Join(dir, "a.png"), filepath.Join(dir, "a.json")
	var stdout, stderr bytes.Buffer
	args := append([]string{"audit", "--algo", "walk", "--trials", "60", "--json", "--png", png, "--out", out}, smallAudit...)
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var list []map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &list); err != nil {
		t.Fatalf("stdout is not a JSON list: %v\n%s", err, stdout.String())
	}
	if len(list) != 6 {
		t.Fatalf("%d results, want 3 observers x 2 tests", len(list))
	}
	observers := map[string]bool{}
	for _, r := range list {
		for _, k := range []string{"observer", "lower_epsilon", "lower_epsilon_ci", "upper_epsilon", "theorem", "trials", "test", "violation",
			"secure_noise", "step", "row_confidence", "family_size", "sensitivity_of"} {
			if _, ok := r[k]; !ok {
				t.Errorf("result lacks %q: %v", k, r)
			}
		}
		if ci, ok := r["lower_epsilon_ci"].([]any); !ok || len(ci) != 2 {
			t.Errorf("lower_epsilon_ci is not [lo, hi]: %v", r["lower_epsilon_ci"])
		}
		if r["trials"].(float64) != 60 || r["secure_noise"] != false || r["theorem"] == "" {
			t.Errorf("trials %v, secure %v, theorem %q", r["trials"], r["secure_noise"], r["theorem"])
		}
		if r["step"] != "prox" || r["algo"] != "walk" || r["family_size"] != 6.0 || r["row_confidence"] != 1-0.05/6 {
			t.Errorf("algo %v step %v, family %v, row confidence %v", r["algo"], r["step"], r["family_size"], r["row_confidence"])
		}
		observers[r["observer"].(string)] = true
	}
	if !observers["local"] || !observers["pairwise"] || !observers["final"] {
		t.Errorf("observers %v", observers)
	}
	b, err := os.ReadFile(out)
	if err != nil || !bytes.Equal(b, stdout.Bytes()) {
		t.Errorf("--out differs from --json output (%v)", err)
	}
	p, err := os.ReadFile(png)
	if err != nil || !bytes.HasPrefix(p, []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("--png: %v, %d bytes", err, len(p))
	}
}

// TestAuditTable: without --json the table has one line per observer and test, a verdict,
// and the theorems; R-ADMM is audited at delta 0.
func TestAuditTable(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(append([]string{"audit", "--trials", "60"}, smallAudit...), &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	s := stdout.String()
	for _, want := range []string{"verdict", "local", "pairwise", "final", "lattice residue", "projection", "OK", "NOT secure", "Theorem 3",
		"realised-path", "row-count scale", "ls-sgd", "gadmm", "neighbour", "Bonferroni", "Chan, Xie, Zhao"} {
		if !strings.Contains(s, want) {
			t.Errorf("table lacks %q:\n%s", want, s)
		}
	}
	stdout.Reset()
	if code := run([]string{"audit", "--algo", "radmm", "--trials", "60", "--seed", "2"}, &stdout, &stderr); code != 0 {
		t.Fatalf("radmm: exit %d: %s", code, stderr.String())
	}
	if s := stdout.String(); !strings.Contains(s, "neighbour") || !strings.Contains(s, "Theorem V.1") || !strings.Contains(s, "noise recovery") {
		t.Errorf("radmm table:\n%s", s)
	}
}

// TestAuditTableViolation: a line whose lower bound exceeds its claim is printed as a
// VIOLATION and counted.
func TestAuditTableViolation(t *testing.T) {
	res := []audit.AuditResult{
		{Observer: "local", Test: "projection", LowerEpsilon: 3, LowerEpsilonCI: [2]privacy.Epsilon{2.5, privacy.Unbounded}, UpperEpsilon: 1.7, Theorem: "T", ConditionsHold: true, Violation: true, Confidence: 0.95},
		{Observer: "final", Test: "projection", LowerEpsilon: 0, UpperEpsilon: 0.3, Theorem: "T", ConditionsHold: true, Confidence: 0.95},
	}
	var b bytes.Buffer
	printAuditTable(&b, res)
	if !strings.Contains(b.String(), "VIOLATION") || !strings.Contains(b.String(), "inf]") || violations(res) != 1 {
		t.Errorf("violations %d, table:\n%s", violations(res), b.String())
	}
}

// TestAuditAllSteps: the default audit (--algo all) has rows for every local step of the
// walk and for R-ADMM, each naming its step and algorithm, all corrected together for
// multiple testing, none a violation on the shipped machines; the step flags select and
// parameterise one step.
func TestAuditAllSteps(t *testing.T) {
	list := auditJSON(t, append([]string{"audit", "--trials", "200", "--json"}, smallAudit...)...)
	steps := map[string]int{}
	algos := map[string]string{}
	for _, r := range list {
		step := r["step"].(string)
		steps[step]++
		algos[step] = r["algo"].(string)
		R := float64(len(list))
		if r["family_size"] != R || r["row_confidence"] != 1-0.05/R || r["confidence"] != 0.95 {
			t.Errorf("%s: family %v, row confidence %v, confidence %v; want %v rows", step, r["family_size"], r["row_confidence"], r["confidence"], R)
		}
		if r["violation"] != false {
			t.Errorf("%s/%s/%s: violation: lower %v, upper %v", step, r["observer"], r["test"], r["lower_epsilon"], r["upper_epsilon"])
		}
	}
	want := map[string]string{"prox": "walk", "linearized": "walk", "ls-sgd": "walk", "sgd": "walk-sgd", "gadmm": "walk-gadmm", "radmm": "radmm"}
	for step, algo := range want {
		if steps[step] == 0 || algos[step] != algo {
			t.Errorf("step %s: %d rows, algo %q (want %q)", step, steps[step], algos[step], algo)
		}
	}
	if len(steps) != len(want) {
		t.Errorf("steps %v", steps)
	}

	list = auditJSON(t, append([]string{"audit", "--algo", "walk-sgd", "--step-size", "0.25", "--sample-rate", "0.8", "--trials", "60", "--json"}, smallAudit...)...)
	scale := false
	for _, r := range list {
		note := r["note"].(string)
		if r["step"] != "sgd" || !strings.Contains(note, "step size 0.25, sample rate 0.8") {
			t.Errorf("step %v, note %q", r["step"], note)
		}
		scale = scale || r["test"] == audit.AuditRowCountScale
	}
	if !scale {
		t.Error("no row-count scale test for walk-sgd")
	}
	list = auditJSON(t, append([]string{"audit", "--algo", "walk", "--local-step", "ls-sgd", "--nu", "2", "--trials", "60", "--json"}, smallAudit...)...)
	if list[0]["step"] != "ls-sgd" || !strings.Contains(list[0]["note"].(string), "nu 2") {
		t.Errorf("--local-step ls-sgd --nu 2: %v", list[0])
	}
}

// auditJSON runs an audit that must succeed and returns its JSON list.
func auditJSON(t *testing.T, args ...string) []map[string]any {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, stderr.String())
	}
	var list []map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &list); err != nil {
		t.Fatalf("%v: stdout is not a JSON list: %v", args, err)
	}
	return list
}

func TestAuditUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"audit", "--algo", "gossip"},
		{"audit", "--trials", "5"},
		{"audit", "--confidence", "1"},
		{"audit", "--delta", "0"},
		{"audit", "--sigma", "-1"},
		{"audit", "--algo", "walk", "--alpha", "3"},
		{"audit", "--local-step", "linearized"},            // --algo all audits every step
		{"audit", "--algo", "walk", "--local-step", "sgd"}, // sgd is --algo walk-sgd
		{"audit", "--algo", "walk-sgd", "--nu", "2"},       // nu is ls-sgd's
		{"audit", "--algo", "walk", "--step-size", "1"},    // the prox step has no step size
		{"audit", "--algo", "walk-gadmm", "--step-size", "-1"},
		{"audit", "--sample-rate", "2"},
		{"audit", "--algo", "radmm", "--sigma", "2"},
		{"audit", "--pair-hops", "5", "--final-hops", "5"},
		{"audit", "extra"},
		{"audit", "--no-such-flag"},
	} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (usage)", args, code)
		} else if errb.Len() == 0 {
			t.Errorf("%v: no error message", args)
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"audit", "--help"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "Clopper-Pearson") {
		t.Errorf("help (on stdout): exit %d\n%s", code, out.String())
	}
}

// TestAuditMulticlass: the walk audit runs on a 3-class label (the multinomial loss): the
// canary row changes class, every claimed bound holds against the tests' lower bounds,
// and the sgd step, uncertified for this loss, claims its local figure at the pairwise
// observer.
func TestAuditMulticlass(t *testing.T) {
	iris := "../../../shared/data/iris.csv"
	for _, algo := range []string{"walk", "walk-sgd"} {
		var stdout, stderr bytes.Buffer
		if code := run([]string{"audit", "--algo", algo, "--data", iris, "--label", "species", "--trials", "60", "--json"}, &stdout, &stderr); code != 0 {
			t.Fatalf("%s: exit %d: %s", algo, code, stderr.String())
		}
		var results []audit.AuditResult
		if err := json.Unmarshal(stdout.Bytes(), &results); err != nil {
			t.Fatal(err)
		}
		if s := stdout.String(); !strings.Contains(s, `of class \"setosa\"`) || len(results) < 5 {
			t.Fatalf("%s: audit report:\n%s", algo, s)
		}
		local := map[string]float64{}
		for _, r := range results {
			if r.Violation || !r.ConditionsHold {
				t.Fatalf("%s: %s/%s: violation %v, conditions %v", algo, r.Observer, r.Test, r.Violation, r.ConditionsHold)
			}
			if r.Observer == "local" {
				local[r.Step] = float64(r.UpperEpsilon)
			}
			if algo == "walk-sgd" && r.Observer == "pairwise" && float64(r.UpperEpsilon) != local[r.Step] {
				t.Fatalf("sgd pairwise claim %v, local %v: the multinomial sgd step must not claim amplification", r.UpperEpsilon, local[r.Step])
			}
		}
	}
}
