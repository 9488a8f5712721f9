package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/help from the current help output")

// helpCases are the help outputs under golden test: file name and command line.
var helpCases = []struct {
	name string
	args []string
}{
	{"dpadmm", []string{"--help"}},
	{"testnet", []string{"testnet", "--help"}},
	{"node", []string{"node", "--help"}},
	{"experiment", []string{"experiment", "--help"}},
	{"experiment-walk", []string{"experiment", "walk", "--help"}},
	{"experiment-gadmm", []string{"experiment", "gadmm", "--help"}},
	{"account", []string{"account", "--help"}},
	{"account-plan", []string{"account", "plan", "--help"}},
	{"account-trace", []string{"account", "trace", "--help"}},
	{"account-subsampled", []string{"account", "subsampled", "--help"}},
	{"account-models", []string{"account", "models", "--help"}},
	{"eval", []string{"eval", "--help"}},
	{"predict", []string{"predict", "--help"}},
	{"audit", []string{"audit", "--help"}},
	{"status", []string{"status", "--help"}},
	{"version", []string{"version", "--help"}},
}

// TestHelpGolden: every command's --help (and -h) prints its text and flags to stdout,
// nothing to stderr, exits 0 and equals testdata/help/NAME.txt (go test -run HelpGolden
// -update rewrites the files).
func TestHelpGolden(t *testing.T) {
	for _, c := range helpCases {
		var out, errb bytes.Buffer
		if code := run(c.args, &out, &errb); code != 0 || errb.Len() != 0 {
			t.Errorf("%v: exit %d, stderr %q", c.args, code, errb.String())
			continue
		}
		golden := filepath.Join("testdata", "help", c.name+".txt")
		if *update {
			if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatalf("%v (run go test -run HelpGolden -update to create it)", err)
		}
		if got := out.String(); got != string(want) {
			t.Errorf("%v: help differs from %s (go test -run HelpGolden -update rewrites it):\n%s", c.args, golden, firstDiff(got, string(want)))
		}
		// -h gives the same text.
		short := append(append([]string(nil), c.args[:len(c.args)-1]...), "-h")
		var out2 bytes.Buffer
		if code := run(short, &out2, &errb); code != 0 || out2.String() != out.String() {
			t.Errorf("%v: exit %d, output differs from --help", short, code)
		}
	}
}

// firstDiff describes the first line where got and want differ.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var a, b string
		if i < len(g) {
			a = g[i]
		}
		if i < len(w) {
			b = w[i]
		}
		if a != b {
			return "line " + strconv.Itoa(i+1) + ":\n  got:  " + a + "\n  want: " + b
		}
	}
	return "(no line differs)"
}

// TestHelpConventions: the help texts list flags with two dashes, never with one, print
// each default once, and no help ends with an empty "Flags:" section.
func TestHelpConventions(t *testing.T) {
	for _, c := range helpCases {
		var out, errb bytes.Buffer
		run(c.args, &out, &errb)
		text := out.String()
		lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
		if last := strings.TrimSpace(lines[len(lines)-1]); strings.HasSuffix(last, ":") {
			t.Errorf("%v: help ends with an empty section %q", c.args, last)
		}
		_, flags, hasFlags := strings.Cut(text, "\nFlags:\n")
		if !hasFlags {
			continue
		}
		for _, l := range strings.Split(flags, "\n") {
			f := strings.TrimSpace(l)
			if strings.HasPrefix(l, "  -") && !strings.HasPrefix(f, "--") {
				t.Errorf("%v: flag listed with one dash: %q", c.args, l)
			}
			if strings.Count(strings.ToLower(l), "(default") > 1 {
				t.Errorf("%v: default printed twice: %q", c.args, l)
			}
		}
	}
}

// TestHelpPrintFlags: the layout of printFlags on a small flag set, written out by hand.
func TestHelpPrintFlags(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("name", "abc", "a name")
	fs.Int("n", 0, "a count")
	fs.Bool("quiet", false, "no output")
	fs.Duration("wait", 2*time.Second, "how long to wait")
	fs.Float64("rate", 0.5, "a rate (default: half)")
	fs.String("long-name-of-a-flag-here", "", "one that is wider than the column and whose description is long enough to wrap onto a second line of the help text")
	var b bytes.Buffer
	printFlags(&b, fs)
	want := "" +
		"  --long-name-of-a-flag-here string\n" +
		"                    one that is wider than the column and whose description is long enough to wrap\n" +
		"                    onto a second line of the help text\n" +
		"  --n int           a count\n" +
		"  --name string     a name (default \"abc\")\n" +
		"  --quiet           no output\n" +
		"  --rate float      a rate (default: half)\n" +
		"  --wait duration   how long to wait (default 2s)\n"
	if b.String() != want {
		t.Errorf("printFlags:\n%s\nwant:\n%s", b.String(), want)
	}
}

// TestUsageTypo: a mistyped flag or command prints the error, a suggestion and one line
// pointing to --help, on stderr, and exits 2; it does not print the help.
func TestUsageTypo(t *testing.T) {
	cases := []struct {
		args    []string
		msg     string
		suggest string // "" = no suggestion line
		help    string // the pointer's command
	}{
		{[]string{"testnet", "--gamm", "3"}, "dpadmm testnet: unknown flag --gamm", "--gamma", "dpadmm testnet"},
		{[]string{"testnet", "--nodse", "3"}, "unknown flag --nodse", "--nodes", "dpadmm testnet"},
		{[]string{"testnet", "-hosp", "3"}, "unknown flag --hosp", "--hops", "dpadmm testnet"},
		{[]string{"testnet", "--reprot=r.json"}, "unknown flag --reprot", "--report", "dpadmm testnet"},
		{[]string{"testnet", "--zzzzzz"}, "unknown flag --zzzzzz", "", "dpadmm testnet"},
		{[]string{"node", "--datadri", "d"}, "dpadmm node: unknown flag --datadri", "--datadir", "dpadmm node"},
		{[]string{"account", "plan", "--sigam", "1"}, "dpadmm account plan: unknown flag --sigam", "--sigma", "dpadmm account plan"},
		{[]string{"account", "trace", "f", "--coaliton", "1"}, "unknown flag --coaliton", "--coalition", "dpadmm account trace"},
		{[]string{"account", "models", "--alow-missing", "d"}, "unknown flag --alow-missing", "--allow-missing", "dpadmm account models"},
		{[]string{"account", "subsampled", "--noise-mult", "2"}, "unknown flag --noise-mult", "--noise-multiplier", "dpadmm account subsampled"},
		{[]string{"experiment", "radmm", "--seed", "1", "--alpas", "1"}, "unknown flag --alpas", "--alphas", "dpadmm experiment radmm"},
		{[]string{"eval", "--dat", "x", "m.json"}, "dpadmm eval: unknown flag --dat", "--data", "dpadmm eval"},
		{[]string{"tesnet"}, `dpadmm: unknown command "tesnet"`, "testnet", "dpadmm"},
		{[]string{"acount", "plan"}, `unknown command "acount"`, "account", "dpadmm"},
		{[]string{"--verison"}, `unknown flag "--verison"`, "--version", "dpadmm"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`, "", "dpadmm"},
		{[]string{"account", "plna"}, `dpadmm account: unknown subcommand "plna"`, "plan", "dpadmm account"},
		{[]string{"experiment", "radm"}, `unknown experiment "radm"`, "radmm", "dpadmm experiment"},
		{[]string{"testnet", "--sigma", "x"}, `dpadmm testnet: invalid value "x" for flag --sigma`, "", "dpadmm testnet"},
		{[]string{"testnet", "--report"}, "dpadmm testnet: flag needs an argument: --report", "", "dpadmm testnet"},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		code := run(c.args, &out, &errb)
		if code != 2 || out.Len() != 0 {
			t.Errorf("%v: exit %d, stdout %q; want exit 2 and nothing on stdout", c.args, code, out.String())
			continue
		}
		lines := strings.Split(strings.TrimRight(errb.String(), "\n"), "\n")
		want := []string{c.msg}
		if c.suggest != "" {
			want = append(want, "did you mean "+c.suggest+"?")
		}
		want = append(want, "run '"+c.help+" --help' for usage")
		if len(lines) != len(want) || !strings.Contains(lines[0], c.msg) {
			t.Errorf("%v: stderr\n%s\nwant %d lines: %q", c.args, errb.String(), len(want), want)
			continue
		}
		for k := 1; k < len(want); k++ {
			if lines[k] != want[k] {
				t.Errorf("%v: line %d %q, want %q", c.args, k+1, lines[k], want[k])
			}
		}
	}
}

// TestUsageEditDistance: known distances (optimal string alignment) and the choice of
// suggestions.
func TestUsageEditDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		d    int
	}{
		{"", "", 0}, {"", "abc", 3}, {"gamma", "gamma", 0}, {"gamm", "gamma", 1}, {"nodse", "nodes", 1},
		{"kitten", "sitting", 3}, {"ca", "abc", 3}, {"abcd", "badc", 2}, {"flaw", "lawn", 2},
	} {
		if got := editDistance(c.a, c.b); got != c.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.d)
		}
		if got := editDistance(c.b, c.a); got != c.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", c.b, c.a, got, c.d)
		}
	}
	names := []string{"hops", "nodes", "node", "gamma", "max-updates", "max-wait", "sigma"}
	for typed, want := range map[string]string{
		"hosp": "hops", "HOPS": "hops", "nodess": "nodes", "gama": "gamma", "max-update": "max-updates",
		"xyz": "", "q": "", "max": "", "sig": "sigma", "max-w": "max-wait",
	} {
		if got := closest(typed, names); got != want {
			t.Errorf("closest(%q) = %q, want %q", typed, got, want)
		}
	}
}

// TestHelpCommand: 'dpadmm help CMD' prints CMD's help; 'dpadmm help' the overview.
func TestHelpCommand(t *testing.T) {
	for _, c := range []struct{ args, want string }{
		{"help testnet", "Usage: dpadmm testnet"},
		{"help predict", "Usage: dpadmm predict"},
		{"help", "dpadmm: differentially private decentralized ADMM"},
	} {
		var out, errb bytes.Buffer
		if code := run(strings.Fields(c.args), &out, &errb); code != 0 || !strings.HasPrefix(out.String(), c.want) {
			t.Errorf("%s: exit %d: %.80s %s", c.args, code, out.String(), errb.String())
		}
	}
}
