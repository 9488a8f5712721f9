package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/dpadmm/dpadmm/consensus"
)

// The command-line conventions shared by every subcommand:
//   - --help prints the command's text and its flags (printFlags) to stdout; exit 0.
//   - A usage error (an unknown or malformed flag, a flag value out of range, a missing or
//     unexpected argument) is a *usageError: run prints it, a "did you mean" suggestion
//     when one is close, and a pointer to --help, all on stderr; exit 2.
//   - Any other error (a file that cannot be read, a failed run) exits 1.

// usageError is a command-line usage error. run prints it and exits with code 2.
type usageError struct {
	cmd     string // the command, e.g. "testnet" or "account plan" ("" = dpadmm itself)
	msg     string
	suggest string // a flag or command the user probably meant ("" = none)
}

func (e *usageError) Error() string { return e.msg }

// Is makes every usage error match errUsage.
func (e *usageError) Is(target error) bool { return target == errUsage }

// usagef returns a usage error of the command cmd.
func usagef(cmd, format string, a ...any) error {
	return &usageError{cmd: cmd, msg: fmt.Sprintf(format, a...)}
}

// printUsageError writes e to w: the message, a suggestion and where the help is.
func printUsageError(w io.Writer, e *usageError) {
	prog := "dpadmm"
	if e.cmd != "" {
		prog += " " + e.cmd
	}
	fmt.Fprintf(w, "%s: %s\n", prog, e.msg)
	if e.suggest != "" {
		fmt.Fprintf(w, "did you mean %s?\n", e.suggest)
	}
	fmt.Fprintf(w, "run '%s --help' for usage\n", prog)
}

// newFlagSet returns the flag set of the command cmd ("testnet", "account plan"). Its
// --help writes help and then the flags (printFlags) to stdout; parse it with parseFlags
// or parseInterleaved, which turn its errors into usage errors.
func newFlagSet(cmd, help string, stdout io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() { printHelp(stdout, help, fs) }
	return fs
}

// printHelp writes help, then "Flags:" and the flags of fs (none for a flag set without
// flags).
func printHelp(w io.Writer, help string, fs *flag.FlagSet) {
	io.WriteString(w, help)
	if !strings.HasSuffix(help, "\n") {
		io.WriteString(w, "\n")
	}
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		io.WriteString(w, "\nFlags:\n")
		printFlags(w, fs)
	}
}

// parseFlags parses args with fs and returns the usage error of a flag that is unknown or
// malformed, with a suggestion. -h or --help calls fs.Usage and returns flag.ErrHelp,
// which run maps to exit code 0. The flag package itself prints nothing.
func parseFlags(fs *flag.FlagSet, args []string) error {
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = usage
	fs.SetOutput(out)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		usage()
		return flag.ErrHelp
	}
	return flagError(fs, err)
}

// flagDash matches a flag name written with one dash in the flag package's messages.
var flagDash = regexp.MustCompile(`(flag |for |argument: )-([A-Za-z0-9])`)

// flagError turns an error of fs.Parse into a usage error in the two-dash spelling, with
// the closest flag name as a suggestion for an unknown flag.
func flagError(fs *flag.FlagSet, err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		ue := &usageError{cmd: fs.Name(), msg: "unknown flag --" + name}
		if s := closest(name, names); s != "" {
			ue.suggest = "--" + s
		} else if s := qualified(name, names); s != "" {
			ue.suggest = "--" + s
		}
		return ue
	}
	return &usageError{cmd: fs.Name(), msg: flagDash.ReplaceAllString(msg, "$1--$2")}
}

// unknownCommand is the usage error of an unknown subcommand name of cmd, with the
// closest of names as a suggestion.
func unknownCommand(cmd, what, name string, names []string) error {
	ue := &usageError{cmd: cmd, msg: fmt.Sprintf("unknown %s %q (available: %s)", what, name, strings.Join(names, ", "))}
	ue.suggest = closest(name, names)
	return ue
}

// qualified returns the only candidate that is typed with a qualifying prefix
// ("even-gamma" for "gamma"), or "".
func qualified(typed string, candidates []string) string {
	found := ""
	for _, c := range candidates {
		if strings.HasSuffix(c, "-"+typed) {
			if found != "" {
				return ""
			}
			found = c
		}
	}
	return found
}

// closest returns the candidate nearest to typed in edit distance (adjacent
// transpositions count one, case ignored), or the only candidate that starts with typed,
// or "" when none is close: at most 1 edit for names of up to 4 characters, 2 above.
func closest(typed string, candidates []string) string {
	t := strings.ToLower(strings.TrimLeft(typed, "-"))
	if t == "" {
		return ""
	}
	limit := 1
	if utf8.RuneCountInString(t) > 4 {
		limit = 2
	}
	best, bestD := "", math.MaxInt
	var prefixed []string
	sorted := append([]string(nil), candidates...)
	sort.Strings(sorted)
	for _, c := range sorted {
		lc := strings.ToLower(strings.TrimLeft(c, "-"))
		if d := editDistance(t, lc); d < bestD {
			best, bestD = c, d
		}
		if len(t) >= 3 && strings.HasPrefix(lc, t) {
			prefixed = append(prefixed, c)
		}
	}
	switch {
	case bestD <= limit:
		return best
	case len(prefixed) == 1:
		return prefixed[0]
	}
	return ""
}

// editDistance is the optimal string alignment distance between a and b: insertions,
// deletions, substitutions and transpositions of adjacent characters each cost one.
func editDistance(a, b string) int {
	s, t := []rune(a), []rune(b)
	d := make([][]int, len(s)+1)
	for i := range d {
		d[i] = make([]int, len(t)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(s); i++ {
		for j := 1; j <= len(t); j++ {
			cost := 1
			if s[i-1] == t[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && s[i-1] == t[j-2] && s[i-2] == t[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(s)][len(t)]
}

// Layout of printFlags: the "--name TYPE" column is at most flagColumn wide (longer
// names put their description on the next line) and lines wrap at helpWidth.
const (
	flagColumn = 28
	helpWidth  = 100
)

// printFlags writes the flags of fs in name order, one entry each:
//
//	--name TYPE   description (default X)
//
// The default is left out when it is the zero value or when the description already
// gives it ("(default ...").
func printFlags(w io.Writer, fs *flag.FlagSet) {
	var fl []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) { fl = append(fl, f) })
	printFlagList(w, fl)
}

// printFlagList writes the flags fl as printFlags does, in name order.
func printFlagList(w io.Writer, fl []*flag.Flag) {
	type entry struct {
		head  string
		words []string // the description; "(default X)" is one word, never split
	}
	fl = append([]*flag.Flag(nil), fl...)
	sort.Slice(fl, func(i, j int) bool { return fl[i].Name < fl[j].Name })
	var es []entry
	width := 0
	for _, f := range fl {
		typ, desc := flag.UnquoteUsage(f)
		if typ == "value" {
			typ = "string"
		}
		head := "--" + f.Name
		if typ != "" {
			head += " " + typ
		}
		words := strings.Fields(desc)
		if !zeroDefault(f.DefValue) && !strings.Contains(strings.ToLower(desc), "(default") {
			if typ == "string" {
				words = append(words, fmt.Sprintf("(default %q)", f.DefValue))
			} else {
				words = append(words, fmt.Sprintf("(default %s)", f.DefValue))
			}
		}
		if n := len(head); n <= flagColumn && n > width {
			width = n
		}
		es = append(es, entry{head, words})
	}
	indent := strings.Repeat(" ", 2+width+3)
	for _, e := range es {
		var b strings.Builder
		if len(e.head) > width {
			b.WriteString("  " + e.head + "\n" + indent)
		} else {
			fmt.Fprintf(&b, "  %-*s   ", width, e.head)
		}
		col := len(indent)
		for i, word := range e.words {
			if i > 0 && col+1+len(word) > helpWidth {
				b.WriteString("\n" + indent)
				col = len(indent)
			} else if i > 0 {
				b.WriteByte(' ')
				col++
			}
			b.WriteString(word)
			col += len(word)
		}
		b.WriteByte('\n')
		io.WriteString(w, b.String())
	}
}

// zeroDefault reports whether a flag's default value is its type's zero value.
func zeroDefault(v string) bool {
	switch v {
	case "", "0", "false", "0s":
		return true
	}
	return false
}

// Checks of flag values shared by the commands. Each returns a usage error of cmd.

// checkGamma requires the ADMM prox parameter to be finite and > 0.
func checkGamma(cmd string, v float64) error {
	if !(v > 0) || math.IsInf(v, 0) {
		return usagef(cmd, "--gamma must be finite and > 0, got %v", v)
	}
	return nil
}

// checkLambda requires the relaxation parameter to be in (0,1].
func checkLambda(cmd string, v float64) error {
	if !(v > 0 && v <= 1) {
		return usagef(cmd, "--lambda must be in (0,1], got %v", v)
	}
	return nil
}

// checkProblemFlags checks --loss, --l1 and --l2 and returns the problem they define.
func checkProblemFlags(cmd, loss string, l1, l2 float64) (consensus.Problem, error) {
	l, err := consensus.ParseLoss(loss)
	if err != nil {
		return consensus.Problem{}, usagef(cmd, "--loss must be logistic or squared, got %q", loss)
	}
	for _, c := range []struct {
		name string
		v    float64
	}{{"l1", l1}, {"l2", l2}} {
		if math.IsNaN(c.v) || math.IsInf(c.v, 0) || c.v < 0 {
			return consensus.Problem{}, usagef(cmd, "--%s must be finite and >= 0, got %v", c.name, c.v)
		}
	}
	return consensus.Problem{Loss: l, Reg: consensus.Regularizer{L1: l1, L2: l2}}, nil
}

// checkSplit checks --split (the other data flags are checked by dataFlags.check).
func checkSplit(cmd, split string) error {
	switch split {
	case "", "iid", "contiguous", "label":
		return nil
	}
	return usagef(cmd, "--split must be iid, contiguous or label, got %q", split)
}

// maxRunNameLen is the longest run name the command line accepts.
const maxRunNameLen = 64

// checkRunName requires a run name that is safe in protocol IDs and topic names
// (/dpadmm/<run>/walk/1, dpadmm/<run>/control): 1 to maxRunNameLen characters from
// A-Z a-z 0-9 . _ -.
func checkRunName(cmd, name string) error {
	ok := len(name) >= 1 && len(name) <= maxRunNameLen
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			ok = false
		}
	}
	if !ok {
		return usagef(cmd, "--run must be 1 to %d characters from A-Z a-z 0-9 . _ - (it becomes part of protocol IDs and topic names), got %q",
			maxRunNameLen, name)
	}
	return nil
}
