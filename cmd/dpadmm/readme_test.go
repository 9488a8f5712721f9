package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dpadmm/dpadmm/node/store"
)

// TestREADMECommands runs every command of the shell code blocks of README.md and of
// every docs/*.md, so that a documented example that fails makes 'go test ./...' fail.
// The documents themselves are the list: nothing here names a command, and a command the
// test cannot classify fails the test. Each file is a subtest (README.md first, then
// docs/*.md in name order) with its own /tmp; a unit (below) that does not touch /tmp and
// is written exactly as in an earlier file (README.md's tour repeats commands of
// docs/cli.md) runs once.
//
// What counts as a command. Every line of a ```sh (or ```bash, ```shell) block is one:
// lines ending in a backslash are joined with the next, '# ...' comments are removed, and
// '&&' chains are run in order in one working directory. Blocks in another language or
// none (```text: for example an interactive session that needs Ctrl-C) are shown, not
// run. A line must start with 'dpadmm' or 'go run ./cmd/dpadmm' (run as 'dpadmm': the
// same program, not rebuilt); 'go test' lines are left out ('go test ./...' is what runs
// this test). After the command, one '> FILE' (stdout is written to FILE) or one '| jq
// FILTER' (stdout must be JSON; a path filter such as .a.b must select a value; jq itself
// is not needed) is allowed. Any other form (another program, '||', ';', '<', '$',
// backquotes, a 'dpadmm node' line that fits none of the patterns below) fails the test,
// so a new documented command cannot go untested.
//
// How commands run. This test binary is the dpadmm program (DPADMM_TEST_AS_MAIN, see
// TestMain); each command is a separate process started in a fresh, empty working
// directory, with TMPDIR inside the test's temporary directory. Before running, the
// arguments go through a small-size table, applied alike to every node of a run (some of
// these values enter the run's configuration hash):
//   - --hops at most 60, --iters at most 10, --nodes at most 20, --trials at most 200,
//     --steps at most 1000, --seeds at most 1, --tune-seeds at most 1; --kill-holder-at
//     below the hops (half of them when it was not);
//   - added when absent: 'audit --trials 200', 'experiment radmm --seeds 1 --iters 10',
//     'experiment walk --seeds 1 --hops 60 --tune-seeds 1', 'experiment gadmm --iters 10',
//     and '--hops 60' for a walk 'node' (whose default is 1,000 hops);
//   - '/tmp/...' becomes a directory shared by all the commands of one file (a file's
//     commands share /tmp as one shell would);
//   - a relative path with a '/' that names an existing file or directory of the
//     repository (examples/a.csv, consensus/data/breast_cancer.csv), and is not the value
//     of an output flag, becomes that file's absolute path: the commands are written to
//     run from the root of a fresh clone, and only files committed there exist (a path
//     that does not exist stays as written, so its command fails); a path starting with
//     '../' (outside the repository) fails the test;
//   - '--http HOST:PORT' becomes 127.0.0.1:0.
//
// Nodes. A 'dpadmm node --start' line and the node lines right after it with the same
// --run (no blank or comment line between) form one run; the commands right after them
// (such as 'dpadmm account models') that name the run's data directories belong to it and
// run once every node has exited. The nodes run concurrently, all on loopback: '--profile lan' becomes
// '--profile test' (127.0.0.1 TCP, no mDNS, 1 s join window: mDNS needs a multicast
// route that test machines and CI runners often lack), the starter gets
// '--listen /ip4/127.0.0.1/tcp/PORT' and every other node '--peer' with that address and
// the starter's peer ID (read from its data directory before it starts). The starter's
// --min-peers must not exceed the number of nodes in the run. A node line without --start
// that follows no starter must have --bootstrap or --peer: its addresses are replaced by
// the loopback address of a starter this test runs (the same command with its own data
// directory, '--profile test --start --min-peers 2', no --bootstrap/--peer), so the
// documented addresses are never dialled; a node kept on '--profile internet' also gets
// '--listen /ip4/127.0.0.1/tcp/0' so that it listens on loopback only.
//
// Order. The files run in parallel, each with its own /tmp and TMPDIR; within a file,
// commands run one after the other in file order, except that a command whose
// input under /tmp (an argument that is not the value of an output flag) does not exist
// yet waits until the commands after it have run (the eval example of docs/cli.md scores
// a model.json written by the R-ADMM example further down).
//
// Checks. Every process exits with status 0. Files named by --report, --curve, --pairs,
// --plot, --trace, --out, --png, --ledger-dir, --scale-out and '>' exist and are not
// empty (a directory has an entry); .json files and the stdout of '--json' commands and
// '| jq' pipes parse as JSON, .jsonl files line by line, .png files start with the PNG
// signature; every node's --datadir holds a model.json that parses.
func TestREADMECommands(t *testing.T) {
	t.Setenv(asMainEnv, "1") // children of children (testnet --procs) run this binary too
	files, err := readmeFiles()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	ran := &readmeRan{where: map[string]string{}} // unit text -> file and line where it ran
	for _, file := range files {
		t.Run(file, func(t *testing.T) {
			t.Parallel() // each file has its own /tmp, TMPDIR and working directories
			src, err := os.ReadFile(filepath.Join(root, file))
			if err != nil {
				t.Fatal(err)
			}
			lines, err := parseReadme(string(src))
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			units, err := planReadme(lines)
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if file == "README.md" && len(units) == 0 {
				t.Fatal("README.md has no command in a ```sh block")
			}
			env := &readmeEnv{t: t, bin: bin, root: root, file: file,
				tmpRoot: filepath.Join(t.TempDir(), "tmp"), tmpDir: filepath.Join(t.TempDir(), "TMPDIR")}
			for _, d := range []string{env.tmpRoot, env.tmpDir} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			env.runUnits(units, ran)
		})
	}
}

// readmeFiles returns README.md and docs/*.md, relative to the module root.
func readmeFiles() ([]string, error) {
	docs, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	files := []string{"README.md"}
	for _, d := range docs {
		files = append(files, "docs/"+filepath.Base(d))
	}
	return files, nil
}

// runUnits runs a file's units in file order; a unit whose /tmp input is missing waits
// for the others, and a unit already run from an earlier file (same text, no /tmp path)
// is skipped.
func (e *readmeEnv) runUnits(units []readmeUnit, ran *readmeRan) {
	t := e.t
	queue := units
	for len(queue) > 0 {
		var later []readmeUnit
		for _, u := range queue {
			if miss := e.missingInput(u); miss != "" {
				later = append(later, u)
				continue
			}
			key, tmp := u.key()
			if where, ok := ran.claim(key, fmt.Sprintf("%s line %d", e.file, u.line())); ok && !tmp {
				t.Logf("%s line %d: already run at %s", e.file, u.line(), where)
				continue
			}
			start := time.Now()
			t.Run(fmt.Sprintf("line%d", u.line()), func(t *testing.T) {
				env := *e
				env.t = t
				env.run(u)
			})
			t.Logf("%s line %d (%s): %.1f s", e.file, u.line(), u.kind, time.Since(start).Seconds())
		}
		if len(later) == len(queue) {
			for _, u := range later {
				t.Errorf("%s line %d: input %s is written by no command of the file", e.file, u.line(), e.missingInput(u))
			}
			return
		}
		queue = later
	}
}

// readmeRan records where each unit ran, for the files' parallel subtests.
type readmeRan struct {
	mu    sync.Mutex
	where map[string]string
}

// claim returns where the unit key already ran, if it did, and otherwise records here as
// the place where it runs.
func (r *readmeRan) claim(key, here string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if where, ok := r.where[key]; ok {
		return where, true
	}
	r.where[key] = here
	return "", false
}

// key returns the text of a unit's lines, and whether any of them names a /tmp path.
func (u readmeUnit) key() (string, bool) {
	var b strings.Builder
	for _, l := range u.lines {
		b.WriteString(l.text + "\n")
	}
	k := b.String()
	return k, strings.Contains(k, "/tmp")
}

// readmeCmd is one dpadmm command of a documented line.
type readmeCmd struct {
	args   []string // after "dpadmm"
	stdout string   // "> FILE": the file, "" if none
	jq     []string // "| jq ARGS": the arguments, nil if none
}

// readmeLine is one logical line of a ```sh block: continuations joined, comment removed.
type readmeLine struct {
	num   int    // 1-based line of the file where it starts
	text  string // as written, without the comment
	para  int    // lines with the same para have no blank or comment line between them
	chain []readmeCmd
}

var readmeJQPath = regexp.MustCompile(`^(\.[A-Za-z_][A-Za-z0-9_]*)+$`)

// parseReadme returns the command lines of the ```sh blocks of a Markdown file, without 'go
// test' lines, or an error naming every line it cannot handle.
func parseReadme(src string) ([]readmeLine, error) {
	var out []readmeLine
	var bad []string
	in, para := false, 0
	all := strings.Split(src, "\n")
	for i := 0; i < len(all); i++ {
		raw := all[i]
		trim := strings.TrimSpace(raw)
		if strings.HasPrefix(trim, "```") {
			para++
			if in {
				in = false
				continue
			}
			info := strings.Fields(strings.TrimPrefix(trim, "```"))
			if len(info) > 0 && (info[0] == "sh" || info[0] == "bash" || info[0] == "shell") {
				in = true
				continue
			}
			for i++; i < len(all) && !strings.HasPrefix(strings.TrimSpace(all[i]), "```"); i++ {
			} // another language or none: not commands
			continue
		}
		if !in {
			continue
		}
		num := i + 1
		for strings.HasSuffix(raw, "\\") && i+1 < len(all) {
			i++
			raw = strings.TrimSuffix(raw, "\\") + " " + all[i]
		}
		words, err := shellWords(raw)
		if err != nil {
			bad = append(bad, fmt.Sprintf("line %d: %v: %s", num, err, trim))
			continue
		}
		if len(words) == 0 { // blank or comment-only: ends a paragraph
			para++
			continue
		}
		l := readmeLine{num: num, para: para, text: strings.Join(quoteWords(words), " ")}
		if words[0].word == "go" && len(words) > 1 && words[1].word == "test" && !words[1].op {
			continue // go test ./... is what runs this test
		}
		chain, err := splitChain(words)
		if err != nil {
			bad = append(bad, fmt.Sprintf("line %d: %v: %s", num, err, l.text))
			continue
		}
		l.chain = chain
		out = append(out, l)
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("commands this test cannot run (extend readme_test.go or rewrite them):\n  %s", strings.Join(bad, "\n  "))
	}
	return out, nil
}

// shellWord is a word or an operator (&&, |, >) of a shell line.
type shellWord struct {
	word string
	op   bool
}

// shellWords splits a line into words and operators with the shell's quoting rules
// ('...', "...", no expansion), stopping at an unquoted # that starts a word. It refuses
// what this test does not handle: ;, <, &, ||, $, backquotes and a lone backslash.
func shellWords(s string) ([]shellWord, error) {
	var out []shellWord
	var cur strings.Builder
	have := false
	flush := func() {
		if have {
			out = append(out, shellWord{word: cur.String()})
			cur.Reset()
			have = false
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\r':
			flush()
		case c == '#' && !have:
			return out, nil
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("unterminated quote")
			}
			cur.WriteString(s[i+1 : i+1+j])
			have, i = true, i+1+j
		case c == '"':
			j := strings.IndexByte(s[i+1:], '"')
			if j < 0 {
				return nil, errors.New("unterminated quote")
			}
			q := s[i+1 : i+1+j]
			if strings.ContainsAny(q, "$`\\") {
				return nil, errors.New("expansion in double quotes")
			}
			cur.WriteString(q)
			have, i = true, i+1+j
		case c == '&' && i+1 < len(s) && s[i+1] == '&':
			flush()
			out = append(out, shellWord{word: "&&", op: true})
			i++
		case c == '|' && (i+1 >= len(s) || s[i+1] != '|'):
			flush()
			out = append(out, shellWord{word: "|", op: true})
		case c == '>' && (i+1 >= len(s) || s[i+1] != '>'):
			flush()
			out = append(out, shellWord{word: ">", op: true})
		case strings.IndexByte(";<&|>$`\\(){}*?", c) >= 0:
			return nil, fmt.Errorf("shell syntax %q", c)
		default:
			cur.WriteByte(c)
			have = true
		}
	}
	flush()
	return out, nil
}

func quoteWords(ws []shellWord) []string {
	var s []string
	for _, w := range ws {
		if !w.op && (w.word == "" || strings.ContainsAny(w.word, " \t'\"#&|>")) {
			s = append(s, "'"+w.word+"'")
		} else {
			s = append(s, w.word)
		}
	}
	return s
}

// splitChain splits words at && into dpadmm commands, each with at most one trailing
// '> FILE' or '| jq ...'.
func splitChain(ws []shellWord) ([]readmeCmd, error) {
	var chain []readmeCmd
	for len(ws) > 0 {
		end := len(ws)
		for k, w := range ws {
			if w.op && w.word == "&&" {
				end = k
				break
			}
		}
		seg := ws[:end]
		if end < len(ws) {
			ws = ws[end+1:]
			if len(ws) == 0 {
				return nil, errors.New("&& at the end")
			}
		} else {
			ws = nil
		}
		var c readmeCmd
		var prog []shellWord
		for k, w := range seg {
			if w.op {
				prog = seg[:k]
				rest := seg[k+1:]
				for _, r := range rest {
					if r.op {
						return nil, errors.New("more than one redirection or pipe")
					}
				}
				switch {
				case w.word == ">" && len(rest) == 1:
					c.stdout = rest[0].word
				case w.word == "|" && len(rest) >= 1 && rest[0].word == "jq":
					for _, r := range rest[1:] {
						c.jq = append(c.jq, r.word)
					}
					if f := jqFilter(c.jq); f != "." && !readmeJQPath.MatchString(f) {
						return nil, fmt.Errorf("jq filter %q is not a path such as .a.b", f)
					}
				default:
					return nil, fmt.Errorf("%q is handled only as '> FILE' or '| jq FILTER'", w.word)
				}
				break
			}
		}
		if prog == nil {
			prog = seg
		}
		var args []string
		for _, w := range prog {
			args = append(args, w.word)
		}
		switch {
		case len(args) >= 1 && args[0] == "dpadmm":
			c.args = args[1:]
		case len(args) >= 3 && args[0] == "go" && args[1] == "run" && strings.TrimSuffix(args[2], "/") == "./cmd/dpadmm":
			c.args = args[3:]
		default:
			return nil, errors.New("not a dpadmm command")
		}
		if len(c.args) == 0 {
			return nil, errors.New("dpadmm without a command")
		}
		chain = append(chain, c)
	}
	return chain, nil
}

// jqFilter is the filter among jq's arguments (the first that is not an option).
func jqFilter(args []string) string {
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			return a
		}
	}
	return "."
}

// readmeUnit is what runs as one: a line (a command or a && chain), a run of nodes with
// the commands that use their outputs, or a joining node with a starter of this test.
type readmeUnit struct {
	kind  string // "command", "run", "joiner"
	lines []readmeLine
}

func (u readmeUnit) line() int { return u.lines[0].num }

func isNode(l readmeLine) bool {
	for _, c := range l.chain {
		if c.args[0] == "node" {
			return true
		}
	}
	return false
}

// planReadme groups the lines into units, or explains which lines fit no pattern.
func planReadme(lines []readmeLine) ([]readmeUnit, error) {
	var units []readmeUnit
	var bad []string
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if !isNode(l) {
			units = append(units, readmeUnit{kind: "command", lines: []readmeLine{l}})
			continue
		}
		c := l.chain[0]
		if len(l.chain) != 1 || c.stdout != "" || c.jq != nil {
			bad = append(bad, fmt.Sprintf("line %d: a node command must be alone on its line: %s", l.num, l.text))
			continue
		}
		switch {
		case hasFlag(c.args, "start"):
			u := readmeUnit{kind: "run", lines: []readmeLine{l}}
			run, _ := flagValue(c.args, "run")
			dirs := map[string]bool{}
			d, _ := flagValue(c.args, "datadir")
			dirs[filepath.Clean(d)] = true
			for i+1 < len(lines) && lines[i+1].para == l.para && isNode(lines[i+1]) && len(lines[i+1].chain) == 1 &&
				!hasFlag(lines[i+1].chain[0].args, "start") {
				if r, _ := flagValue(lines[i+1].chain[0].args, "run"); r != run {
					break
				}
				i++
				u.lines = append(u.lines, lines[i])
				d, _ := flagValue(lines[i].chain[0].args, "datadir")
				dirs[filepath.Clean(d)] = true
			}
			nodes := len(u.lines)
			if mp, ok := flagValue(c.args, "min-peers"); ok {
				if n, err := strconv.Atoi(mp); err != nil || n > nodes {
					bad = append(bad, fmt.Sprintf("line %d: --min-peers %s but the run has %d node commands (it would wait forever)", l.num, mp, nodes))
					continue
				}
			} else if nodes < 2 {
				bad = append(bad, fmt.Sprintf("line %d: the run has one node and the default --min-peers 2", l.num))
				continue
			}
			for i+1 < len(lines) && lines[i+1].para == l.para && !isNode(lines[i+1]) && usesDirs(lines[i+1], dirs) {
				i++
				u.lines = append(u.lines, lines[i])
			}
			units = append(units, u)
		case hasFlag(c.args, "bootstrap") || hasFlag(c.args, "peer"):
			units = append(units, readmeUnit{kind: "joiner", lines: []readmeLine{l}})
		default:
			bad = append(bad, fmt.Sprintf("line %d: a node without --start must follow its run's starter or give --bootstrap/--peer: %s", l.num, l.text))
		}
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("node commands this test cannot run:\n  %s", strings.Join(bad, "\n  "))
	}
	return units, nil
}

// usesDirs says whether a line names one of the data directories (or a file in one).
func usesDirs(l readmeLine, dirs map[string]bool) bool {
	for _, c := range l.chain {
		for _, a := range c.args {
			for p := filepath.Clean(a); p != "." && p != "/"; p = filepath.Dir(p) {
				if dirs[p] {
					return true
				}
			}
		}
	}
	return false
}

// flagValue returns the value of --name (or -name) given as "--name v" or "--name=v".
func flagValue(args []string, name string) (string, bool) {
	for k, a := range args {
		n, v, eq := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || n != name {
			continue
		}
		if eq {
			return v, true
		}
		if k+1 < len(args) {
			return args[k+1], true
		}
		return "", true
	}
	return "", false
}

func hasFlag(args []string, name string) bool {
	_, ok := flagValue(args, name)
	return ok
}

// setFlag replaces the value of --name, or appends "--name value".
func setFlag(args []string, name, value string) []string {
	out := append([]string(nil), args...)
	for k, a := range out {
		n, _, eq := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || n != name {
			continue
		}
		if eq {
			out[k] = "--" + name + "=" + value
		} else if k+1 < len(out) {
			out[k+1] = value
		}
		return out
	}
	return append(out, "--"+name, value)
}

// dropFlag removes every --name and its value.
func dropFlag(args []string, name string) []string {
	var out []string
	for k := 0; k < len(args); k++ {
		n, _, eq := strings.Cut(strings.TrimLeft(args[k], "-"), "=")
		if strings.HasPrefix(args[k], "-") && n == name {
			if !eq {
				k++
			}
			continue
		}
		out = append(out, args[k])
	}
	return out
}

// readmeCaps are the small sizes: a larger value is lowered to these.
var readmeCaps = map[string]int{"hops": 60, "iters": 10, "nodes": 20, "trials": 200, "steps": 1000, "seeds": 1, "tune-seeds": 1}

// readmeOutputs are the flags that name a file or directory a command writes.
var readmeOutputs = []string{"report", "curve", "pairs", "plot", "trace", "out", "png", "ledger-dir", "scale-out", "datadir"}

// readmeEnv is what the commands of one file share.
type readmeEnv struct {
	t       *testing.T
	bin     string
	root    string // the module root: relative inputs that exist there are read from it
	file    string // the file whose commands run, relative to root ("README.md", "docs/cli.md")
	tmpRoot string // the file's /tmp
	tmpDir  string // the children's TMPDIR
}

// repoPath maps a relative argument to the repository's copy when it names an existing
// file or directory there (examples/a.csv), and refuses a path outside the repository.
func (e *readmeEnv) repoPath(v string) string {
	e.t.Helper()
	if strings.HasPrefix(v, "../") {
		e.t.Errorf("%s: %s is outside the repository: a fresh clone does not have it (ship the file in examples/)", e.file, v)
		return v
	}
	if v == "" || filepath.IsAbs(v) || !strings.Contains(v, "/") || strings.HasPrefix(v, "-") {
		return v
	}
	if _, err := os.Stat(filepath.Join(e.root, v)); err == nil {
		return filepath.Join(e.root, v)
	}
	return v
}

// rewrite applies the small-size table and the path mappings to one command.
func (e *readmeEnv) rewrite(args []string) []string {
	e.t.Helper()
	out := make([]string, 0, len(args)+4)
	for k, a := range args {
		flag, v, eq := "", a, false
		if strings.HasPrefix(a, "-") {
			flag, v, eq = strings.Cut(a, "=")
			if !eq {
				flag, v = "", a
			} else {
				flag += "="
			}
		}
		output := isOutputValue(args, k)
		for _, f := range readmeOutputs {
			output = output || flag == "--"+f+"=" || flag == "-"+f+"="
		}
		switch {
		case v == "/tmp" || strings.HasPrefix(v, "/tmp/"):
			v = e.tmpRoot + strings.TrimPrefix(v, "/tmp")
		case !output:
			v = e.repoPath(v)
		}
		out = append(out, flag+v)
	}
	for name, lim := range readmeCaps {
		if v, ok := flagValue(out, name); ok {
			if n, err := strconv.Atoi(v); err == nil && n > lim {
				out = setFlag(out, name, strconv.Itoa(lim))
			}
		}
	}
	if v, ok := flagValue(out, "http"); ok && v != "" {
		out = setFlag(out, "http", "127.0.0.1:0")
	}
	switch out[0] {
	case "audit":
		if !hasFlag(out, "trials") {
			out = append(out, "--trials", strconv.Itoa(readmeCaps["trials"]))
		}
	case "experiment":
		// The flags each experiment has: radmm --seeds and --iters, walk --seeds, --hops
		// (default 100 x nodes) and --tune-seeds, gadmm --iters.
		fs := []string{"seeds", "iters"}
		if len(out) > 1 && out[1] == "walk" {
			fs = []string{"seeds", "hops", "tune-seeds"}
		} else if len(out) > 1 && out[1] == "gadmm" {
			fs = []string{"iters"}
		}
		for _, f := range fs {
			if !hasFlag(out, f) {
				out = append(out, "--"+f, strconv.Itoa(readmeCaps[f]))
			}
		}
	case "node":
		if a, _ := flagValue(out, "algo"); (a == "" || a == "walk" || strings.HasPrefix(a, "walk-")) && !hasFlag(out, "hops") {
			out = append(out, "--hops", strconv.Itoa(readmeCaps["hops"]))
		}
	}
	if v, ok := flagValue(out, "kill-holder-at"); ok {
		hops := 3500 // the testnet default
		if h, ok := flagValue(out, "hops"); ok {
			hops, _ = strconv.Atoi(h)
		}
		if n, err := strconv.Atoi(v); err == nil && n >= hops {
			out = setFlag(out, "kill-holder-at", strconv.Itoa(hops/2))
		}
	}
	return out
}

// isOutputValue says whether args[k] is the value of an output flag.
func isOutputValue(args []string, k int) bool {
	if k == 0 {
		return false
	}
	for _, f := range readmeOutputs {
		if args[k-1] == "--"+f || args[k-1] == "-"+f {
			return true
		}
	}
	return false
}

// missingInput returns an input under /tmp that a unit reads and that does not exist
// yet ("" if none). Inputs inside a run's own data directories are the run's outputs.
func (e *readmeEnv) missingInput(u readmeUnit) string {
	own := map[string]bool{}
	for _, l := range u.lines {
		for _, c := range l.chain {
			if d, ok := flagValue(c.args, "datadir"); ok {
				own[filepath.Clean(d)] = true
			}
		}
	}
	for _, l := range u.lines {
		for _, c := range l.chain {
			for k, a := range c.args {
				a = strings.TrimPrefix(a, "--data=")
				if !(a == "/tmp" || strings.HasPrefix(a, "/tmp/")) || isOutputValue(c.args, k) {
					continue
				}
				inOwn := false
				for p := filepath.Clean(a); p != "/"; p = filepath.Dir(p) {
					inOwn = inOwn || own[p]
				}
				if inOwn {
					continue
				}
				if _, err := os.Stat(e.tmpRoot + strings.TrimPrefix(a, "/tmp")); err != nil {
					return a
				}
			}
		}
	}
	return ""
}

// workDir makes a fresh, empty working directory.
func (e *readmeEnv) workDir() string {
	e.t.Helper()
	return e.t.TempDir()
}

// readmeProc is one started dpadmm process.
type readmeProc struct {
	args           []string
	cmd            *exec.Cmd
	stdout, stderr syncBuffer
	done           chan struct{}
	err            error
}

// readmeTimeout bounds every process (a hung example fails instead of hanging the test).
const readmeTimeout = 90 * time.Second

func (e *readmeEnv) start(ctx context.Context, dir string, args []string) *readmeProc {
	e.t.Helper()
	e.t.Logf("dpadmm %s", strings.Join(args, " "))
	p := &readmeProc{args: args, done: make(chan struct{})}
	p.cmd = exec.CommandContext(ctx, e.bin, args...)
	p.cmd.Dir = dir
	p.cmd.Env = append(os.Environ(), asMainEnv+"=1", "TMPDIR="+e.tmpDir)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	// On timeout: SIGTERM (testnet --procs stops its nodes), SIGKILL 10 s later.
	p.cmd.Cancel = func() error { return p.cmd.Process.Signal(syscall.SIGTERM) }
	p.cmd.WaitDelay = 10 * time.Second
	if err := p.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	e.t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait waits for p and fails the test unless it exited with status 0.
func (e *readmeEnv) wait(l readmeLine, p *readmeProc) bool {
	e.t.Helper()
	<-p.done
	if p.err != nil {
		e.t.Errorf("%s line %d: %s\nran: dpadmm %s\nexit: %v\nstdout:\n%s\nstderr:\n%s", e.file,
			l.num, l.text, strings.Join(p.args, " "), p.err, tail(p.stdout.String()), tail(p.stderr.String()))
		return false
	}
	return true
}

func tail(s string) string {
	if lines := strings.Split(s, "\n"); len(lines) > 40 {
		return "...\n" + strings.Join(lines[len(lines)-40:], "\n")
	}
	return s
}

func (e *readmeEnv) run(u readmeUnit) {
	ctx, cancel := context.WithTimeout(context.Background(), readmeTimeout)
	defer cancel()
	dir := e.workDir()
	switch u.kind {
	case "command":
		e.runLine(ctx, dir, u.lines[0])
	case "run":
		e.runNodes(ctx, cancel, dir, u)
	case "joiner":
		e.runJoiner(ctx, dir, u.lines[0])
	}
}

// runLine runs the commands of a line in order, stopping at the first failure (&&).
func (e *readmeEnv) runLine(ctx context.Context, dir string, l readmeLine) {
	e.t.Helper()
	for _, c := range l.chain {
		args := e.rewrite(c.args)
		p := e.start(ctx, dir, args)
		if !e.wait(l, p) {
			return
		}
		e.checkOutputs(l, dir, args, p)
		if c.stdout != "" {
			out := filepath.Join(dir, c.stdout)
			if err := os.WriteFile(out, []byte(p.stdout.String()), 0o644); err != nil {
				e.t.Fatal(err)
			}
			e.checkFile(l, out)
		}
		if c.jq != nil {
			var v any
			if err := json.Unmarshal([]byte(p.stdout.String()), &v); err != nil {
				e.t.Errorf("%s line %d: stdout piped to jq is not JSON: %v", e.file, l.num, err)
				continue
			}
			if f := jqFilter(c.jq); f != "." {
				for _, key := range strings.Split(f[1:], ".") {
					m, _ := v.(map[string]any)
					if v = m[key]; v == nil {
						e.t.Errorf("%s line %d: jq filter %s selects nothing", e.file, l.num, f)
						break
					}
				}
			}
		}
	}
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func (e *readmeEnv) freePort() int {
	e.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		e.t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// starterAddr gives a node that will run in dir with args a fixed loopback listen port
// and returns those args and its full multiaddr (with /p2p/ID).
func (e *readmeEnv) starterAddr(dir string, args []string) ([]string, string, int) {
	e.t.Helper()
	datadir, _ := flagValue(args, "datadir")
	if !filepath.IsAbs(datadir) {
		datadir = filepath.Join(dir, datadir)
	}
	if err := os.MkdirAll(datadir, 0o700); err != nil {
		e.t.Fatal(err)
	}
	id, err := store.DataDirPeerID(datadir)
	if err != nil {
		e.t.Fatal(err)
	}
	port := e.freePort()
	args = setFlag(args, "listen", fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", port))
	return args, fmt.Sprintf("/ip4/127.0.0.1/tcp/%d/p2p/%s", port, id), port
}

// waitListening waits until the starter accepts TCP connections on port.
func (e *readmeEnv) waitListening(l readmeLine, p *readmeProc, port int) bool {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
			return true
		}
		select {
		case <-p.done:
			e.wait(l, p)
			e.t.Errorf("%s line %d: the starter exited before listening", e.file, l.num)
			return false
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			e.t.Errorf("%s line %d: the starter is not listening after 30 s\nstderr:\n%s", e.file, l.num, tail(p.stderr.String()))
			return false
		}
	}
}

// onLoopback keeps a node on loopback: --profile lan (the default; mDNS, all
// interfaces) becomes --profile test, and a node on --profile internet without --listen
// gets --listen /ip4/127.0.0.1/tcp/0.
func onLoopback(args []string) []string {
	switch p, _ := flagValue(args, "profile"); {
	case p == "" || p == "lan":
		return setFlag(args, "profile", "test")
	case p == "internet" && !hasFlag(args, "listen"):
		return append(args, "--listen", "/ip4/127.0.0.1/tcp/0")
	}
	return args
}

// runNodes runs a starter and its nodes concurrently on loopback, then the commands
// that use their data directories.
func (e *readmeEnv) runNodes(ctx context.Context, cancel func(), dir string, u readmeUnit) {
	var nodes, after []readmeLine
	for _, l := range u.lines {
		if isNode(l) {
			nodes = append(nodes, l)
		} else {
			after = append(after, l)
		}
	}
	args, addr, port := e.starterAddr(dir, onLoopback(e.rewrite(nodes[0].chain[0].args)))
	starter := e.start(ctx, dir, args)
	if !e.waitListening(nodes[0], starter, port) {
		return
	}
	procs := []*readmeProc{starter}
	for _, l := range nodes[1:] {
		a := append(onLoopback(e.rewrite(l.chain[0].args)), "--peer", addr)
		procs = append(procs, e.start(ctx, dir, a))
	}
	ok := true
	var wg sync.WaitGroup
	var mu sync.Mutex
	for k, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-p.done
			if p.err != nil {
				cancel() // the others would wait for the failed one
			}
			mu.Lock()
			defer mu.Unlock()
			ok = e.wait(nodes[k], p) && ok
		}()
	}
	wg.Wait()
	if !ok {
		return
	}
	for k, p := range procs {
		e.checkOutputs(nodes[k], dir, p.args, p)
	}
	for _, l := range after {
		e.runLine(ctx, dir, l)
	}
}

// runJoiner runs a node that joins an existing network through --bootstrap or --peer
// against a starter of this test on loopback: the documented addresses are replaced by the
// starter's.
func (e *readmeEnv) runJoiner(ctx context.Context, dir string, l readmeLine) {
	args := e.rewrite(l.chain[0].args)
	sargs := dropFlag(dropFlag(args, "bootstrap"), "peer")
	sargs = setFlag(setFlag(setFlag(sargs, "datadir", "starter"), "profile", "test"), "min-peers", "2")
	sargs = dropFlag(sargs, "listen")
	sargs, addr, port := e.starterAddr(dir, append(sargs, "--start"))
	for _, f := range []string{"bootstrap", "peer"} {
		if hasFlag(args, f) {
			args = setFlag(args, f, addr)
		}
	}
	args = onLoopback(args)
	starter := e.start(ctx, dir, sargs)
	if !e.waitListening(l, starter, port) {
		return
	}
	p := e.start(ctx, dir, args)
	okJ := e.wait(l, p)
	okS := e.wait(l, starter)
	if okJ {
		e.checkOutputs(l, dir, args, p)
	}
	if okS {
		e.checkOutputs(l, dir, sargs, starter)
	}
}

// checkOutputs checks the files a command's flags name, and its stdout with --json.
func (e *readmeEnv) checkOutputs(l readmeLine, dir string, args []string, p *readmeProc) {
	e.t.Helper()
	for _, f := range readmeOutputs {
		v, ok := flagValue(args, f)
		if !ok || v == "-" {
			continue
		}
		if !filepath.IsAbs(v) {
			v = filepath.Join(dir, v)
		}
		if f == "datadir" {
			if args[0] == "node" {
				e.checkFile(l, filepath.Join(v, store.ModelFile))
			}
			continue
		}
		e.checkFile(l, v)
	}
	if hasFlag(args, "json") {
		if r, _ := flagValue(args, "report"); r == "" || r == "-" {
			if !json.Valid([]byte(p.stdout.String())) {
				e.t.Errorf("%s line %d: --json output is not JSON:\n%s", e.file, l.num, tail(p.stdout.String()))
			}
		}
	}
}

// checkFile requires path to be a non-empty file (JSON, JSON lines and PNG files
// well-formed) or a directory with an entry.
func (e *readmeEnv) checkFile(l readmeLine, path string) {
	e.t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		e.t.Errorf("%s line %d: %v", e.file, l.num, err)
		return
	}
	if st.IsDir() {
		if ents, _ := os.ReadDir(path); len(ents) == 0 {
			e.t.Errorf("%s line %d: directory %s is empty", e.file, l.num, path)
		}
		return
	}
	b, err := os.ReadFile(path)
	switch {
	case err != nil:
		e.t.Errorf("%s line %d: %v", e.file, l.num, err)
	case len(b) == 0:
		e.t.Errorf("%s line %d: %s is empty", e.file, l.num, path)
	case strings.HasSuffix(path, ".json") && !json.Valid(b):
		e.t.Errorf("%s line %d: %s is not JSON", e.file, l.num, path)
	case strings.HasSuffix(path, ".png") && !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")):
		e.t.Errorf("%s line %d: %s is not a PNG file", e.file, l.num, path)
	case strings.HasSuffix(path, ".jsonl"):
		for k, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if !json.Valid([]byte(line)) {
				e.t.Errorf("%s line %d: %s line %d is not JSON", e.file, l.num, path, k+1)
				break
			}
		}
	}
}

// TestREADMEParse: the README parser joins continuations, drops comments and 'go test'
// lines, splits && chains, reads '> FILE' and '| jq FILTER', ignores other code blocks,
// groups a starter with its nodes and the commands on their data directories, and
// refuses what it cannot run.
func TestREADMEParse(t *testing.T) {
	src := "text `dpadmm not-in-a-block`\n" +
		"```go\ndpadmm in-a-go-block\n```\n" +
		"```sh\n" +
		"go test ./...        # the tests\n" +
		"go run ./cmd/dpadmm testnet   # demo\n" +
		"# a comment line\n" +
		"dpadmm testnet --nodes 4 \\\n" +
		"  --hops 9 --label '>50K'  # note\n" +
		"dpadmm testnet --trace t.jsonl && dpadmm account trace t.jsonl\n" +
		"dpadmm testnet --json > r.json\n" +
		"dpadmm account plan --json | jq .planned.epsilon\n" +
		"\n" +
		"dpadmm node --run r --datadir /tmp/a --start --min-peers 2\n" +
		"dpadmm node --run r --datadir /tmp/b\n" +
		"dpadmm account models /tmp/a /tmp/b\n" +
		"dpadmm eval --data x.csv /tmp/a/model.json\n" +
		"dpadmm node --run s --datadir d --peer /ip4/10.0.0.5/tcp/1/p2p/X\n" +
		"```\n" +
		"```\ndpadmm in-a-plain-block\n```\n"
	lines, err := parseReadme(src)
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		num  int
		args [][]string
	}
	wants := []want{
		{7, [][]string{{"testnet"}}},
		{9, [][]string{{"testnet", "--nodes", "4", "--hops", "9", "--label", ">50K"}}},
		{11, [][]string{{"testnet", "--trace", "t.jsonl"}, {"account", "trace", "t.jsonl"}}},
		{12, [][]string{{"testnet", "--json"}}},
		{13, [][]string{{"account", "plan", "--json"}}},
		{15, [][]string{{"node", "--run", "r", "--datadir", "/tmp/a", "--start", "--min-peers", "2"}}},
		{16, [][]string{{"node", "--run", "r", "--datadir", "/tmp/b"}}},
		{17, [][]string{{"account", "models", "/tmp/a", "/tmp/b"}}},
		{18, [][]string{{"eval", "--data", "x.csv", "/tmp/a/model.json"}}},
		{19, [][]string{{"node", "--run", "s", "--datadir", "d", "--peer", "/ip4/10.0.0.5/tcp/1/p2p/X"}}},
	}
	if len(lines) != len(wants) {
		t.Fatalf("%d lines, want %d: %+v", len(lines), len(wants), lines)
	}
	for k, w := range wants {
		l := lines[k]
		if l.num != w.num || len(l.chain) != len(w.args) {
			t.Fatalf("line %d: %+v, want line %d with %d commands", k, l, w.num, len(w.args))
		}
		for c := range w.args {
			if strings.Join(l.chain[c].args, "\x00") != strings.Join(w.args[c], "\x00") {
				t.Errorf("line %d command %d: %q, want %q", w.num, c, l.chain[c].args, w.args[c])
			}
		}
	}
	if lines[3].chain[0].stdout != "r.json" || jqFilter(lines[4].chain[0].jq) != ".planned.epsilon" {
		t.Errorf("redirect %q, jq %q", lines[3].chain[0].stdout, lines[4].chain[0].jq)
	}
	units, err := planReadme(lines)
	if err != nil {
		t.Fatal(err)
	}
	kinds := []string{}
	for _, u := range units {
		kinds = append(kinds, fmt.Sprintf("%s@%d/%d", u.kind, u.line(), len(u.lines)))
	}
	if got, want := strings.Join(kinds, " "), "command@7/1 command@9/1 command@11/1 command@12/1 command@13/1 run@15/4 joiner@19/1"; got != want {
		t.Errorf("units %s, want %s", got, want)
	}

	for _, bad := range []string{
		"ls -l",
		"dpadmm testnet ; dpadmm version",
		"dpadmm testnet || true",
		"dpadmm testnet --seed $SEED",
		"dpadmm testnet --json | head",
		"dpadmm testnet --json | jq '.model[0]'",
		"dpadmm testnet > a > b",
		"dpadmm eval --data 'x.csv",
		"go run ./other testnet",
	} {
		if _, err := parseReadme("```sh\n" + bad + "\n```\n"); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	for _, bad := range []string{
		"dpadmm node --run r --datadir a --start --min-peers 3\ndpadmm node --run r --datadir b",
		"dpadmm node --run r --datadir a --start",
		"dpadmm node --run r --datadir a",
		"dpadmm node --run r --datadir a --start --min-peers 2\n\ndpadmm node --run r --datadir b",
		"dpadmm node --run r --datadir a --start --min-peers 2\ndpadmm node --run q --datadir b",
		"dpadmm node --run r --datadir a --json > x.json",
	} {
		lines, err := parseReadme("```sh\n" + bad + "\n```\n")
		if err != nil {
			t.Fatalf("%q: %v", bad, err)
		}
		if _, err := planReadme(lines); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestREADMERepoPaths: a relative input that exists in the repository is read from it, one
// that does not stays as written (its command then fails), and output values, /tmp paths
// and words without a '/' are left alone.
func TestREADMERepoPaths(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	e := &readmeEnv{t: t, root: root, file: "test", tmpRoot: "/TMP"}
	got := e.rewrite([]string{"eval", "--data", "examples/a.csv", "--out", "examples/x", "--scale-out=docs/s.json",
		"--test=examples/nope.csv", "--shard", "0/3", "/tmp/g0/model.json", "--data=consensus/data/breast_cancer.csv"})
	want := []string{"eval", "--data", filepath.Join(root, "examples/a.csv"), "--out", "examples/x", "--scale-out=docs/s.json",
		"--test=examples/nope.csv", "--shard", "0/3", "/TMP/g0/model.json", "--data=" + filepath.Join(root, "consensus/data/breast_cancer.csv")}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("rewrite:\n got %q\nwant %q", got, want)
	}
}

// TestREADMELength: the README stays a front door (under 250 lines); the manual is in
// docs/.
func TestREADMELength(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n >= 250 {
		t.Errorf("README.md has %d lines: move detail into docs/ (fewer than 250)", n)
	}
}
