package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dpadmm/dpadmm/privacy"
)

// badInput is one command line that must fail with a clear message and a given exit code.
type badInput struct {
	args []string
	code int
	msg  string // substring of stderr
}

func checkBadInputs(t *testing.T, cases []badInput) {
	t.Helper()
	for _, c := range cases {
		var out, errb bytes.Buffer
		code := run(c.args, &out, &errb)
		if code != c.code {
			t.Errorf("%v: exit %d, want %d; stderr %q", c.args, code, c.code, errb.String())
			continue
		}
		if !strings.Contains(errb.String(), c.msg) {
			t.Errorf("%v: stderr %q lacks %q", c.args, errb.String(), c.msg)
		}
	}
}

func TestTestnetBadInput(t *testing.T) {
	q := []string{"testnet", "--quiet", "--hops", "10"}
	with := func(a ...string) []string { return append(append([]string(nil), q...), a...) }
	checkBadInputs(t, []badInput{
		{with("--sigma", "NaN"), 2, "--sigma must be finite and >= 0, got NaN"},
		{with("--sigma", "-1"), 2, "--sigma must be finite and >= 0, got -1"},
		{with("--sigma", "+Inf"), 2, "--sigma must be finite"},
		{with("--sigma", "x"), 2, "invalid value"},
		{with("--delta", "0"), 2, "--delta must be in (0,1), got 0"},
		{with("--delta", "1"), 2, "--delta must be in (0,1), got 1"},
		{with("--delta", "NaN"), 2, "--delta must be in (0,1)"},
		{with("--clip", "0"), 2, "--clip must be > 0"},
		{with("--clip", "NaN"), 2, "--clip must be > 0"},
		{with("--nodes", "0"), 2, "--nodes must be >= 1"},
		{with("--max-updates", "-1"), 2, "--max-updates must be >= 0"},
		{with("--graph", "torus"), 2, `unknown graph "torus"`},
		{with("--graph", "er:2"), 2, "--graph"},
		{with("--graph", "file:/nonexistent/edges.txt"), 2, "--graph"},
		{with("--coalition", "1,x"), 2, `--coalition: "x" is not a node index`},
		{with("--coalition", "1,50"), 2, "--coalition: node 50 outside [0, 50)"},
		{with("--coalition", "-1"), 2, "--coalition: node -1 outside"},
		{with("--coalition", "3,3"), 2, "--coalition: node 3 listed twice"},
		{with("--coalition", ","), 2, "--coalition"},
		{with("--budget-epsilon", "-1"), 2, "--budget-epsilon must be finite and >= 0"},
		{with("--budget-epsilon", "NaN"), 2, "--budget-epsilon must be finite and >= 0"},
		{with("--budget-epsilon", "1", "--budget-kind", "pairwise"), 2, "--budget-kind must be local or network"},
		{with("--plot-kind", "3d"), 2, "--plot-kind must be both, planned or realised"},
		{with("--nodes", "1", "--pairs", filepath.Join(t.TempDir(), "p.csv")), 2, "need at least 2 nodes"},
		{with("extra"), 2, `unexpected argument "extra"`},
		{with("--data", "/nonexistent.csv"), 1, "nonexistent.csv"},
		{with("--pairs", "/nonexistent/dir/p.csv"), 1, "nonexistent"},
	})
}

func TestAccountBadInput(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.jsonl")
	tr := &privacy.Trace{Nodes: 4, Clip: 0.1, Sigma: 1, Steps: []privacy.TraceStep{{Node: 0, Noisy: true}, {Node: 1, Noisy: true}, {Node: 2}, {Node: 3, Noisy: true}}}
	f, _ := os.Create(good)
	if err := privacy.WriteTrace(f, tr); err != nil {
		t.Fatal(err)
	}
	f.Close()
	corrupt := filepath.Join(dir, "corrupt.jsonl")
	os.WriteFile(corrupt, []byte(`{"format":"dpadmm-trace/1","nodes":4,"clip":0.1,"sigma":1,"steps":2}`+"\n[0,1]\n[7,1]\n"), 0o644)
	truncated := filepath.Join(dir, "truncated.jsonl")
	os.WriteFile(truncated, []byte(`{"format":"dpadmm-trace/1","nodes":4,"clip":0.1,"sigma":1,"steps":3}`+"\n[0,1]\n"), 0o644)
	badSigma := filepath.Join(dir, "sigma.jsonl")
	os.WriteFile(badSigma, []byte(`{"format":"dpadmm-trace/1","nodes":4,"clip":0.1,"sigma":-1,"steps":0}`+"\n"), 0o644)
	empty := filepath.Join(dir, "empty.jsonl")
	os.WriteFile(empty, nil, 0o644)
	garbage := filepath.Join(dir, "garbage.bin")
	os.WriteFile(garbage, []byte{0x89, 'P', 'N', 'G', 0, 1, 2, 3}, 0o644)
	plan := []string{"account", "plan", "--nodes", "10", "--hops", "100", "--clip", "0.1"}
	with := func(a ...string) []string { return append(append([]string(nil), plan...), a...) }
	checkBadInputs(t, []badInput{
		{with("--sigma", "NaN"), 2, "--sigma must be finite and > 0, got NaN"},
		{with("--sigma", "-1"), 2, "--sigma must be finite and > 0, got -1"},
		{with("--sigma", "1", "--delta", "0"), 2, "--delta must be in (0,1), got 0"},
		{with("--sigma", "1", "--delta", "1.5"), 2, "--delta must be in (0,1), got 1.5"},
		{with("--sigma", "1", "--graph", "torus"), 2, `unknown graph "torus"`},
		{with("--sigma", "1", "--nodes", "1"), 2, "--nodes must be >= 2"},
		{with("--target-epsilon", "NaN", "--sigma", "1"), 2, "--target-epsilon must be finite and > 0"},
		{[]string{"account", "trace", filepath.Join(dir, "missing.jsonl")}, 1, "no such file"},
		{[]string{"account", "trace", corrupt}, 1, "line 3: step: node 7 outside [0, 4)"},
		{[]string{"account", "trace", truncated}, 1, "header announces 3 steps, found 1"},
		{[]string{"account", "trace", badSigma}, 1, "sigma must be finite and > 0"},
		{[]string{"account", "trace", empty}, 1, "missing header"},
		{[]string{"account", "trace", garbage}, 1, "header"},
		{[]string{"account", "trace", good, "--delta", "2"}, 2, "--delta must be in (0,1), got 2"},
		{[]string{"account", "trace", good, "--coalition", "1,x"}, 2, `--coalition: "x" is not a node index`},
		{[]string{"account", "trace", good, "--coalition", "4"}, 2, "--coalition: node 4 outside [0, 4) (the trace has 4 nodes)"},
		{[]string{"account", "trace", good, "--coalition", "1,1"}, 2, "listed twice"},
		{[]string{"account", "trace"}, 2, "want exactly one trace file, got 0"},
		{[]string{"account", "bill"}, 2, `unknown subcommand "bill"`},
	})
	var out, errb bytes.Buffer
	if code := run([]string{"account", "trace", good, "--coalition", "0,2", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("good trace: exit %d: %s", code, errb.String())
	}
}

// TestAccountPlanJSONKeys decodes exactly the keys that 'account plan --json' promises
// and checks them against the closed forms.
func TestAccountPlanJSONKeys(t *testing.T) {
	const n, hops, clip, sigma, delta, cap = 40, 4000, 0.1, 1.0, 1e-6, 120
	var out, errb bytes.Buffer
	args := []string{"account", "plan", "--nodes", strconv.Itoa(n), "--hops", strconv.Itoa(hops), "--graph", "complete",
		"--clip", "0.1", "--sigma", "1", "--max-updates", strconv.Itoa(cap), "--delta", "1e-6", "--json"}
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var got struct {
		Delta      *float64 `json:"delta"`
		Conversion *string  `json:"conversion"`
		Local      *struct {
			Epsilon *float64 `json:"epsilon"`
			Order   *float64 `json:"order"`
			Updates *int     `json:"updates"`
		} `json:"local"`
		PairwisePlanned *struct {
			Worst *struct {
				Epsilon *float64 `json:"epsilon"`
				I       *int     `json:"i"`
				J       *int     `json:"j"`
			} `json:"worst"`
			Theorem        *string `json:"theorem"`
			ConditionsHold *bool   `json:"conditions_hold"`
		} `json:"pairwise_planned"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if got.Delta == nil || got.Conversion == nil || got.Local == nil || got.Local.Epsilon == nil || got.Local.Order == nil ||
		got.Local.Updates == nil || got.PairwisePlanned == nil || got.PairwisePlanned.Worst == nil ||
		got.PairwisePlanned.Worst.Epsilon == nil || got.PairwisePlanned.Worst.I == nil || got.PairwisePlanned.Worst.J == nil ||
		got.PairwisePlanned.Theorem == nil || got.PairwisePlanned.ConditionsHold == nil {
		t.Fatalf("missing keys in\n%s", out.String())
	}
	loc := privacy.LocalBound(clip, sigma, cap, delta)
	var thm4 privacy.Bound // Theorem 4 at the cap with the final release of a 4000-hop run
	thm4.Epsilon, thm4.Order = privacy.ToDP(privacy.Theorem4FinalCurve(n, cap, hops, clip, sigma), delta)
	pw := got.PairwisePlanned
	switch {
	case *got.Delta != delta || *got.Conversion != privacy.Conversion:
		t.Errorf("delta %v conversion %q", *got.Delta, *got.Conversion)
	case *got.Local.Updates != cap || math.Abs(*got.Local.Epsilon-loc.Epsilon) > 1e-12*loc.Epsilon || *got.Local.Order != loc.Order:
		t.Errorf("local %v (order %v, %d updates), want %v (order %v, %d)", *got.Local.Epsilon, *got.Local.Order, *got.Local.Updates, loc.Epsilon, loc.Order, cap)
	case math.Abs(*pw.Worst.Epsilon-thm4.Epsilon) > 1e-12*thm4.Epsilon || *pw.Worst.I == *pw.Worst.J ||
		*pw.Worst.I < 0 || *pw.Worst.J >= n || *pw.Theorem != privacy.Theorem4FinalName || !*pw.ConditionsHold:
		t.Errorf("pairwise_planned %v %d->%d %q hold=%v, Theorem 4: %v", *pw.Worst.Epsilon, *pw.Worst.I, *pw.Worst.J, *pw.Theorem, *pw.ConditionsHold, thm4.Epsilon)
	}
}

func decodePNG(t *testing.T, path string) (w, h, colours int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	b := img.Bounds()
	set := map[uint32]bool{}
	for y := b.Min.Y; y < b.Max.Y; y += 3 {
		for x := b.Min.X; x < b.Max.X; x += 3 {
			r, g, bl, _ := img.At(x, y).RGBA()
			set[r>>8<<16|g>>8<<8|bl>>8] = true
		}
	}
	return b.Dx(), b.Dy(), len(set)
}

// TestTestnetPairsPlotCoalition: a ring run writes the pairs CSV, the heat map and a
// report whose realised figures equal those 'account trace' recomputes from --trace.
func TestTestnetPairsPlotCoalition(t *testing.T) {
	dir := t.TempDir()
	p := func(s string) string { return filepath.Join(dir, s) }
	var out, errb bytes.Buffer
	args := []string{"testnet", "--quiet", "--nodes", "12", "--graph", "ring", "--hops", "1500", "--max-updates", "400",
		"--loss", "squared", "--gamma", "10", "--coalition", "3,7", "--pairs", p("pairs.csv"), "--plot", p("pairs.png"),
		"--report", p("r.json"), "--trace", p("trace.jsonl")}
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	b, _ := os.ReadFile(p("r.json"))
	var rep struct {
		Ended   string `json:"ended"`
		Privacy struct {
			Updates          []int `json:"updates"`
			PairwisePlanned  map[string]any
			PairwiseRealised struct {
				Worst struct {
					Epsilon float64 `json:"epsilon"`
					I, J    int
				} `json:"worst"`
				P90       float64 `json:"p90"`
				Coalition *struct {
					Members []int   `json:"members"`
					Epsilon float64 `json:"epsilon"`
					I       int     `json:"i"`
				} `json:"coalition"`
			} `json:"pairwise_realised"`
		} `json:"privacy"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	re := rep.Privacy.PairwiseRealised
	if rep.Ended != "hops" || re.Coalition == nil || len(re.Coalition.Members) != 2 || re.Worst.Epsilon <= 0 {
		t.Fatalf("report: %s", b)
	}
	// The CSV's realised column has the report's worst pair as its maximum.
	f, _ := os.Open(p("pairs.csv"))
	rows, err := csv.NewReader(f).ReadAll()
	f.Close()
	if err != nil || len(rows) != 1+12*11 {
		t.Fatalf("pairs.csv: %v, %d rows", err, len(rows))
	}
	maxR, at := 0.0, ""
	for _, row := range rows[1:] {
		v, err := strconv.ParseFloat(row[3], 64)
		if err != nil {
			t.Fatalf("row %v: %v", row, err)
		}
		if v > maxR {
			maxR, at = v, row[0]+"->"+row[1]
		}
	}
	if math.Abs(maxR-re.Worst.Epsilon) > 1e-8*maxR || at != strconv.Itoa(re.Worst.I)+"->"+strconv.Itoa(re.Worst.J) {
		t.Errorf("CSV max %v at %s, report worst %v at %d->%d", maxR, at, re.Worst.Epsilon, re.Worst.I, re.Worst.J)
	}
	if w, h, c := decodePNG(t, p("pairs.png")); w != 960 || h != 600 || c < 30 {
		t.Errorf("testnet --plot: %dx%d, %d colours", w, h, c)
	}
	// account trace recomputes the same realised figures from the trace file.
	out.Reset()
	if code := run([]string{"account", "trace", p("trace.jsonl"), "--json", "--coalition", "3,7", "--plot", p("trace.png"), "--pairs", p("trace.csv")}, &out, &errb); code != 0 {
		t.Fatalf("account trace: exit %d: %s", code, errb.String())
	}
	var tr struct {
		Pairwise struct {
			Worst struct {
				Epsilon float64 `json:"epsilon"`
			} `json:"worst"`
			P90 float64 `json:"p90"`
		} `json:"pairwise_realised"`
		Coalition struct {
			Epsilon float64 `json:"epsilon"`
			I       int     `json:"i"`
		} `json:"coalition"`
	}
	if err := json.Unmarshal(out.Bytes(), &tr); err != nil {
		t.Fatal(err)
	}
	if tr.Pairwise.Worst.Epsilon != re.Worst.Epsilon || tr.Pairwise.P90 != re.P90 ||
		math.Abs(tr.Coalition.Epsilon-re.Coalition.Epsilon) > 1e-12*re.Coalition.Epsilon || tr.Coalition.I != re.Coalition.I {
		t.Errorf("account trace %+v, report %+v", tr, re)
	}
	if w, h, c := decodePNG(t, p("trace.png")); w != 480 || h != 600 || c < 30 {
		t.Errorf("account trace --plot: %dx%d, %d colours", w, h, c)
	}
	tc, _ := os.ReadFile(p("trace.csv"))
	if lines := strings.Count(string(tc), "\n"); lines != 1+12*11 || !strings.HasPrefix(string(tc), "i,j,planned_epsilon,realised_epsilon\n0,1,,") {
		t.Errorf("account trace --pairs: %d lines, starts %q", lines, string(tc[:min(60, len(tc))]))
	}
}

// TestTestnetBudgetFlags: --budget-epsilon with --budget-kind network ends the walk when
// every node is out of budget; the report says so and carries the budget section.
func TestTestnetBudgetFlags(t *testing.T) {
	dir := t.TempDir()
	rp := filepath.Join(dir, "r.json")
	var out, errb bytes.Buffer
	args := []string{"testnet", "--nodes", "10", "--hops", "100000", "--loss", "squared", "--gamma", "10", "--max-updates", "0",
		"--budget-epsilon", "3", "--budget-kind", "network", "--ledger-dir", filepath.Join(dir, "ledger"), "--report", rp}
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	b, _ := os.ReadFile(rp)
	var rep struct {
		Ended  string `json:"ended"`
		Hops   int    `json:"hops"`
		Budget *struct {
			Kind     string  `json:"kind"`
			Epsilon  float64 `json:"epsilon"`
			Overruns int     `json:"overruns"`
			Caps     []int   `json:"caps"`
		} `json:"budget"`
		Privacy struct {
			Updates []int `json:"updates"`
		} `json:"privacy"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Ended != "budget exhausted" || rep.Hops >= 100000 || rep.Budget == nil || rep.Budget.Kind != "network" ||
		rep.Budget.Epsilon != 3 || rep.Budget.Overruns != 0 || len(rep.Budget.Caps) != 10 {
		t.Fatalf("report: %s", b)
	}
	for i, u := range rep.Privacy.Updates {
		if u != rep.Budget.Caps[i] {
			t.Errorf("node %d: %d updates, budget cap %d (the walk ends only when all are exhausted)", i, u, rep.Budget.Caps[i])
		}
	}
	if !strings.Contains(out.String(), "budget exhausted") || !strings.Contains(out.String(), "0 overruns") {
		t.Errorf("summary:\n%s", out.String())
	}
}

// FuzzParseCoalition: any input gives either an error or distinct members in range.
func FuzzParseCoalition(f *testing.F) {
	for _, s := range []string{"1,2", "0", "", ",", "1,1", "-3", "9999999999999999999999", " 4 , 5 ", "a,b"} {
		f.Add(s, 10)
	}
	f.Fuzz(func(t *testing.T, s string, n int) {
		members, err := parseCoalition(s, n)
		if err != nil {
			return
		}
		if len(members) == 0 {
			t.Fatalf("%q: no members and no error", s)
		}
		seen := map[int]bool{}
		for _, v := range members {
			if v < 0 || v >= n || seen[v] {
				t.Fatalf("%q (n=%d): bad member %d in %v", s, n, v, members)
			}
			seen[v] = true
		}
	})
}

// TestAccountPlanCappedAtLocal: on 3 nodes the amplified pairwise form is above the local
// figure, which bounds every observer: the plan reports the local figure for the worst
// pair (with a note), and --target-epsilon calibrates on the capped figure, so the local
// figure itself is the target (no more noise than it needs).
func TestAccountPlanCappedAtLocal(t *testing.T) {
	args := []string{"account", "plan", "--nodes", "3", "--hops", "60", "--clip", "0.1", "--max-updates", "20", "--json"}
	r := runJSON(t, append(args, "--sigma", "1")...).(map[string]any)
	loc := r["local"].(map[string]any)["epsilon"].(float64)
	pw := r["pairwise_planned"].(map[string]any)
	if w := pw["worst"].(map[string]any)["epsilon"].(float64); w != loc || !strings.Contains(pw["note"].(string), "capped at the local figure") {
		t.Fatalf("worst pair %v, local %v, note %q", w, loc, pw["note"])
	}
	c := runJSON(t, append(args, "--target-epsilon", "2")...).(map[string]any)
	if e := c["local"].(map[string]any)["epsilon"].(float64); e > 2 || e < 2*(1-1e-6) {
		t.Fatalf("calibrated local epsilon %v, want the target 2", e)
	}
}
