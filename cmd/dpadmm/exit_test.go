package main

import (
	"bytes"
	"encoding/csv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestExitCodes: a bad flag value is a usage error (exit 2, with a pointer to --help)
// in every command; an error of the run itself (a file that cannot be read) exits 1.
func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.csv")
	model := filepath.Join(dir, "m.json")
	if err := os.WriteFile(model, []byte(`{"model":[0.5,-0.25],"dims":2}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tn := func(a ...string) []string { return append([]string{"testnet", "--quiet", "--hops", "10"}, a...) }
	tg := func(a ...string) []string { return append([]string{"testnet", "--quiet", "--algo", "radmm"}, a...) }
	nd := func(a ...string) []string {
		return append([]string{"node", "--run", "r", "--data", "embedded", "--datadir", filepath.Join(dir, "n")}, a...)
	}
	ex := func(a ...string) []string {
		return append([]string{"experiment", "radmm", "--out", dir, "--quiet"}, a...)
	}
	plan := func(a ...string) []string {
		return append([]string{"account", "plan", "--nodes", "10", "--hops", "100", "--clip", "0.1", "--sigma", "1"}, a...)
	}
	ev := func(a ...string) []string { return append(append([]string{"eval"}, a...), model) }
	cases := []struct {
		args []string
		code int
		msg  string
	}{
		// testnet
		{tn("--gamma", "0"), 2, "--gamma must be finite and > 0, got 0"},
		{tn("--gamma", "NaN"), 2, "--gamma"},
		{tn("--lambda", "2"), 2, "--lambda must be in (0,1], got 2"},
		{tn("--lambda", "0"), 2, "--lambda"},
		{tn("--loss", "hinge"), 2, `--loss must be logistic or squared, got "hinge"`},
		{tn("--test-frac", "1.5"), 2, "--test-frac must be in [0,1), got 1.5"},
		{tn("--test-frac", "-0.1"), 2, "--test-frac"},
		{tn("--sigma", "-1"), 2, "--sigma must be finite and >= 0"},
		{tn("--scale", "log"), 2, `unknown scaling "log"`},
		{tn("--split", "random"), 2, `--split must be iid, contiguous or label, got "random"`},
		{tn("--categorical", "yes"), 2, `--categorical must be none or auto, got "yes"`},
		{tn("--l2", "-1"), 2, "--l2 must be finite and >= 0, got -1"},
		{tn("--l1", "Inf"), 2, "--l1 must be finite and >= 0"},
		{tg("--gamma", "0.3"), 2, "--gamma applies to the random walk (--algo walk, walk-gadmm, walk-sgd), not to --algo radmm on the simulator; the even-step proximal weight of neighbour exchange is --even-gamma"},
		{tg("--even-gamma", "-1"), 2, "--even-gamma (the even-step proximal weight) must be finite and >= 0, got -1"},
		{tn("--even-gamma", "0.3"), 2, "--even-gamma applies to neighbour exchange"},
		{tg("--hops", "10"), 2, "--hops applies to the random walk"},
		{tg("--paper-c", "0"), 2, "--paper-c must be finite and > 0"},
		{tg("--eta-max", "-1"), 2, "--eta-max"},
		{tg("--loss", "hinge"), 2, "--loss"},
		{tn("--data", missing), 1, "missing.csv"},
		{tn("--hops", "0"), 2, "--hops must be >= 1"},
		{tn("--data", "../../examples/wine.csv"), 1, "126 distinct numbers"},
		{tn("--data", "../../examples/wine.csv"), 1, "without --label the label is the first column"},
		{tn("--data", "../../examples/diabetes.csv", "--label", "target"), 1, "--loss squared"},
		{tn("--intercept", "1"), 2, "--intercept must be in [0, 1)"},
		{tn("--fill", "abc"), 2, "--fill must be a finite number"},
		{tn("--report", filepath.Join(dir, "nodir", "r.json")), 1, "--report " + filepath.Join(dir, "nodir", "r.json") + ": its directory"},
		{[]string{"predict", "--bogus"}, 2, "unknown flag --bogus"},
		{[]string{"status"}, 2, "dpadmm status: --http is required"},
		{[]string{"status", "--http", "nonsense::::"}, 2, "is not a host:port or a URL"},
		// node: every flag value is checked before the node starts
		{nd("--gamma", "0"), 2, "--gamma must be finite and > 0"},
		{nd("--lambda", "2"), 2, "--lambda must be in (0,1]"},
		{nd("--loss", "hinge"), 2, "--loss must be logistic or squared"},
		{nd("--l2", "-1"), 2, "--l2 must be finite and >= 0"},
		{nd("--max-updates", "-1"), 2, "--max-updates must be >= 0"},
		{nd("--budget-epsilon", "-2"), 2, "--budget-epsilon"},
		{nd("--budget-kind", "pairwise"), 2, "--budget-kind must be local or network"},
		{nd("--heartbeat-misses", "-1"), 2, "--heartbeat-misses"},
		{nd("--custody-depth", "-1"), 2, "--custody-depth"},
		{nd("--scale", "log"), 2, "--scale"},
		{nd("--profile", "wan"), 2, "--profile must be test, lan or internet"},
		{nd("--algo", "radmm", "--gamma", "-1"), 2, "--gamma applies to the random walk"},
		{nd("--algo", "radmm", "--even-gamma", "-1"), 2, "--even-gamma (the even-step proximal weight) must be"},
		{nd("--even-gamma", "1"), 2, "--even-gamma applies to neighbour exchange"},
		{nd("--algo", "radmm", "--iters", "0"), 2, "--iters must be >= 1"},
		{nd("--algo", "radmm", "--eta", "0"), 2, "--eta must be finite and > 0"},
		{nd("--algo", "mradmm", "--eta-growth", "0.5"), 2, "--eta-growth"},
		{nd("--algo", "radmm", "--paper-c", "-1"), 2, "--paper-c"},
		{nd("--algo", "sgd"), 2, `unknown --algo "sgd"`},
		{nd("--profile", "test", "--fallback-timeout", "1s"), 2, "--fallback-timeout (1s) must exceed the ack timeout (2s)"},
		{[]string{"node", "--run", "r", "--data", missing, "--datadir", filepath.Join(dir, "n"), "--profile", "test"}, 1, "missing.csv"},
		// experiment
		{ex("--scale", "log"), 2, `unknown scaling "log"`},
		{ex("--split", "random"), 2, "--split must be"},
		{ex("--categorical", "yes"), 2, "--categorical must be"},
		{ex("--test-frac", "1"), 2, "--test-frac"},
		{ex("--positive", "x"), 1, `the positive label "x" is neither of its labels`},
		{ex("--data", missing), 1, "missing.csv"},
		// account
		{plan("--hops", "0"), 2, "--hops must be >= 1"},
		{plan("--delta", "2"), 2, "--delta must be in (0,1)"},
		{[]string{"keys"}, 2, "which subcommand? swarm-key, allow or id"},
		{[]string{"experiment", "utility", "--splits", "foo"}, 2, `--splits: unknown "foo"`},
		{[]string{"experiment", "utility", "--algos", "foo"}, 2, `--algos: unknown "foo"`},
		{[]string{"experiment", "utility", "--epsilons", "1,,2"}, 2, "--epsilons: want comma-separated targets"},
		{[]string{"experiment", "utility", "--seeds", "0"}, 2, "--seeds must be >= 1"},
		{[]string{"account", "plan", "--nodes", "4294967297", "--hops", "100", "--graph", "ring", "--clip", "0.1", "--sigma", "1"}, 2, "at most 11585 nodes on a graph other than the complete one"},
		{[]string{"account", "models", "--loss", "hinge", "d"}, 2, "--loss"},
		{[]string{"account", "models", "--scale", "log", "d"}, 2, "--scale"},
		{[]string{"account", "models", filepath.Join(dir, "nomodel")}, 1, "no such file"},
		{[]string{"account", "subsampled", "--q", "2", "--noise-multiplier", "1", "--steps", "1"}, 2, "subsampled"},
		{[]string{"account", "trace", missing}, 1, "no such file"},
		{[]string{"account"}, 2, "which subcommand"},
		// eval
		{ev("--data", "embedded", "--loss", "hinge"), 2, "--loss must be logistic or squared"},
		{ev("--data", "embedded", "--scale", "log"), 2, `unknown scaling "log"`},
		{ev("--data", "embedded", "--categorical", "x"), 2, "--categorical must be"},
		{ev(), 2, "--data is required"},
		{[]string{"eval", "--data", "embedded"}, 2, "want exactly one model file"},
		{ev("--data", missing), 1, "missing.csv"},
		{ev("--data", "embedded"), 1, "30 features, more than the 2 expected"},
		// version
		{[]string{"version", "extra"}, 2, `unexpected argument "extra"`},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		code := run(c.args, &out, &errb)
		msg := errb.String()
		if code != c.code || !strings.Contains(msg, c.msg) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", c.args, code, msg, c.code, c.msg)
			continue
		}
		if hint := "for usage\n"; (code == 2) != strings.HasSuffix(msg, hint) {
			t.Errorf("%v: exit %d, stderr %q: the pointer to --help must end usage errors only", c.args, code, msg)
		}
		if code == 2 && !strings.Contains(msg, "run 'dpadmm "+c.args[0]) {
			t.Errorf("%v: stderr %q does not point to the command's help", c.args, msg)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "n")); err == nil {
		t.Errorf("a node with a bad flag value created its data directory")
	}
}

// TestRunName: a run name that is not 1 to 64 characters from [A-Za-z0-9._-] is a usage
// error of 'dpadmm node', checked before anything else happens; valid names pass the check.
func TestRunName(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"a/b", "a b", "tab\tname", "", strings.Repeat("x", 65), "ümlaut", "a:b", "run\n", "/dpadmm"} {
		var out, errb bytes.Buffer
		args := []string{"node", "--run", name, "--data", "embedded", "--datadir", filepath.Join(dir, "n"), "--profile", "test"}
		code := run(args, &out, &errb)
		want := "--run must be 1 to 64 characters from A-Z a-z 0-9 . _ -"
		if name == "" {
			want = "--run is required"
		}
		if code != 2 || !strings.Contains(errb.String(), want) {
			t.Errorf("--run %q: exit %d, stderr %q", name, code, errb.String())
		}
	}
	for _, name := range []string{"a", "demo-1", "Run_2.b", strings.Repeat("x", 64), "..", "-"} {
		if err := checkRunName("node", name); err != nil {
			t.Errorf("--run %q refused: %v", name, err)
		}
	}
	// With a static neighbour-exchange membership the name is checked too.
	var out, errb bytes.Buffer
	if code := run([]string{"node", "--insecure-testnet", "--algo", "radmm", "--static", "s.json", "--run", "x/y", "--data", "d", "--datadir", dir}, &out, &errb); code != 2 ||
		!strings.Contains(errb.String(), "--run must be") {
		t.Errorf("--static with --run x/y: exit %d, stderr %q", code, errb.String())
	}
}

// TestCurveLastHopCLI: 'dpadmm testnet --curve' writes hop 0, every --curve-every hops
// and the last hop.
func TestCurveLastHopCLI(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.csv")
	var out, errb bytes.Buffer
	if code := run([]string{"testnet", "--nodes", "5", "--hops", "350", "--loss", "squared", "--curve-every", "100", "--curve", path, "--quiet"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var hops []string
	for _, r := range recs[1:] {
		hops = append(hops, r[0])
	}
	if got := strings.Join(hops, ","); got != "0,100,200,300,350" {
		t.Fatalf("curve hops %s, want 0,100,200,300,350", got)
	}
	if _, err := strconv.ParseFloat(recs[len(recs)-1][1], 64); err != nil {
		t.Fatalf("last row %v: %v", recs[len(recs)-1], err)
	}
}

// TestOutputPathsCheckedFirst: output paths that would fail at the end of a run (a
// directory, an unwritable directory, two flags naming one file) are refused before it,
// and nothing is written.
func TestOutputPathsCheckedFirst(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	same := filepath.Join(dir, "same.out")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--report", sub}, "a directory, not a file"},
		{[]string{"--report", same, "--curve", same}, "--curve and --report both name"},
		{[]string{"--report", filepath.Join(dir, "x.json"), "--schema-out", filepath.Join(dir, "x.json")}, "--report and --schema-out both name"},
		{[]string{"--report", "/proc/r.json"}, "cannot write in /proc"},
	} {
		code, _, e := runCmd(append([]string{"testnet", "--nodes", "3", "--hops", "30", "--quiet"}, c.args...)...)
		if code != 1 || !strings.Contains(e, c.want) {
			t.Errorf("%v: exit %d: %s", c.args, code, e)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("files left behind: %v", ents)
	}
	// A device takes writes however many flags name it.
	if code, _, e := runCmd("testnet", "--nodes", "3", "--hops", "30", "--quiet", "--report", os.DevNull, "--curve", os.DevNull); code != 0 {
		t.Errorf("--report and --curve %s: exit %d: %s", os.DevNull, code, e)
	}
}
