package main

import (
	"bytes"
	"encoding/json"
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
