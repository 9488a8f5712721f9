package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestTestnetTraceFeedsAccountTrace runs a simulated walk with --trace and recomputes the
// realised pairwise figures from the file; the realised worst pair can never exceed the
// local figure of the busiest node (a view costs at most e1 times the updates of the node
// in its segment: charging each update fully is a feasible allocation).
func TestTestnetTraceFeedsAccountTrace(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "trace.jsonl")
	var out, errb bytes.Buffer
	if code := run([]string{"testnet", "--quiet", "--nodes", "10", "--hops", "2000", "--trace", tr}, &out, &errb); code != 0 {
		t.Fatalf("testnet exit %d: %s", code, errb.String())
	}
	out.Reset()
	if code := run([]string{"account", "trace", tr, "--json"}, &out, &errb); code != 0 {
		t.Fatalf("account trace exit %d: %s", code, errb.String())
	}
	var got map[string]any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("account trace --json output is not JSON: %v\n%s", err, out.String())
	}
	local := got["local"].(map[string]any)["epsilon"].(float64)
	pw, ok := got["pairwise_realised"].(map[string]any)
	if !ok {
		t.Fatalf("no pairwise_realised in %s", out.String())
	}
	worst := pw["worst"].(map[string]any)["epsilon"].(float64)
	if !(worst > 0 && worst <= local) {
		t.Fatalf("realised worst pair %g must be in (0, local %g]", worst, local)
	}
}

// TestOneVerdictForOneRun runs the same walk twice, once within its caps and once with more
// hops than n x K_i allows, and checks that the simulator's report, 'account plan' and
// 'account trace' give the same verdict on the planned figure for each (one decision,
// privacy.WalkDecide, behind all of them).
func TestOneVerdictForOneRun(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		hops string
		hold bool
	}{{"400", true}, {"3000", false}} {
		tr := filepath.Join(dir, "trace-"+c.hops+".jsonl")
		rep := filepath.Join(dir, "report-"+c.hops+".json")
		var out, errb bytes.Buffer
		args := []string{"testnet", "--quiet", "--nodes", "10", "--hops", c.hops, "--max-updates", "100", "--sigma", "1",
			"--trace", tr, "--report", rep}
		if code := run(args, &out, &errb); code != 0 {
			t.Fatalf("testnet exit %d: %s", code, errb.String())
		}
		var report struct {
			Privacy struct {
				Planned struct {
					Hold bool   `json:"conditions_hold"`
					Note string `json:"note"`
				} `json:"pairwise_planned"`
			} `json:"privacy"`
		}
		readJSONFile(t, rep, &report)
		out.Reset()
		if code := run([]string{"account", "trace", tr, "--max-updates", "100", "--json"}, &out, &errb); code != 0 {
			t.Fatalf("account trace exit %d: %s", code, errb.String())
		}
		var trace struct {
			Planned struct {
				Hold    bool     `json:"conditions_hold"`
				Reasons []string `json:"reasons"`
			} `json:"planned_verdict"`
		}
		if err := json.Unmarshal(out.Bytes(), &trace); err != nil {
			t.Fatal(err)
		}
		out.Reset()
		if code := run([]string{"account", "plan", "--nodes", "10", "--hops", c.hops, "--clip", "0.1", "--sigma", "1",
			"--max-updates", "100", "--json"}, &out, &errb); code != 0 {
			t.Fatalf("account plan exit %d: %s", code, errb.String())
		}
		var plan struct {
			Pairwise struct {
				Hold bool   `json:"conditions_hold"`
				Note string `json:"note"`
			} `json:"pairwise_planned"`
		}
		if err := json.Unmarshal(out.Bytes(), &plan); err != nil {
			t.Fatal(err)
		}
		if report.Privacy.Planned.Hold != c.hold || trace.Planned.Hold != c.hold || plan.Pairwise.Hold != c.hold {
			t.Errorf("%s hops: verdicts report %v (%s), trace %v (%v), plan %v (%s); want %v", c.hops,
				report.Privacy.Planned.Hold, report.Privacy.Planned.Note, trace.Planned.Hold, trace.Planned.Reasons,
				plan.Pairwise.Hold, plan.Pairwise.Note, c.hold)
		}
	}
}

func readJSONFile(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
