package testnet

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestRulesWrittenOnce keeps the rules that decide what a node computes or what a figure
// says in their one function: a copy elsewhere could round or default differently without
// a compiler error (the simulator would then predict a run the nodes do not make, or a
// report would print another figure than the node). Each rule is a pattern that may
// appear only in the files listed; test files are exempt.
func TestRulesWrittenOnce(t *testing.T) {
	rules := []struct {
		name    string
		pattern *regexp.Regexp
		allowed map[string]bool
	}{
		{"the walk loss weight n rows_i / M (walk.LossWeight)",
			regexp.MustCompile(`float64\([^()]*\)\s*\*\s*float64\([^()]*[Rr]ows[^()]*\)\s*/\s*float64\(`),
			map[string]bool{"walk/weight.go": true}},
		{"the default delta (privacy.DefaultDelta)",
			regexp.MustCompile(`[Dd]elta\s*(=|:=|,)\s*1e-5\b|"delta",\s*1e-5`),
			map[string]bool{"privacy/epsilon.go": true}},
		{"the refusal of seeded noise (privacy.CheckNoise)",
			regexp.MustCompile(`\.Secure\(\)\s*&&\s*!\S*[Aa]llow`),
			map[string]bool{"privacy/noise.go": true}},
		{"the noise calibration search in log2(sigma) (privacy.CalibrateFigure)",
			regexp.MustCompile(`math\.Exp2\((lo|hi|mid|l)\)`),
			map[string]bool{"privacy/rdp.go": true}},
		{"the weighted-curve converter (privacy.UnitConverter)",
			regexp.MustCompile(`const probe = 1000`),
			map[string]bool{"privacy/pairwise.go": true}},
		{"the neighbour exchange's one-vs-rest fit of three or more classes (consensus.Problem.For)",
			regexp.MustCompile(`Loss\s*=\s*(consensus\.)?LogisticOvR\b`),
			map[string]bool{"consensus/problem.go": true}},
		{"gradient ADMM's sensitivity 2 w C (walk.GADMMDelta)",
			regexp.MustCompile(`\b2\s*\*\s*\w*\.?\w*[Ww](eigh)?t\w*\s*\*\s*\w*\.?[Cc]lip\b`),
			map[string]bool{"walk/gadmm.go": true}},
	}
	forEachSource(t, func(rel string, lines []string) {
		for _, r := range rules {
			if r.allowed[rel] {
				continue
			}
			for _, line := range lines {
				if r.pattern.MatchString(line) {
					t.Errorf("%s: a copy of %s: %s", rel, r.name, strings.TrimSpace(line))
				}
			}
		}
	})
}

// forEachSource calls f with the path (relative to the module root) and the non-comment
// lines of every non-test Go file of the module.
func forEachSource(t *testing.T, f func(rel string, lines []string)) {
	t.Helper()
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("..", path)
		var lines []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), "//") {
				l = "" // comments name rules; they are not copies (line numbers kept)
			}
			lines = append(lines, l)
		}
		f(filepath.ToSlash(rel), lines)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestStepNamesTyped: the local steps are named only by privacy.StepName constants (or
// walk.StepKind): no comparison with a bare step-name string outside the vocabulary.
func TestStepNamesTyped(t *testing.T) {
	re := regexp.MustCompile(`(==|!=|case)\s*"(prox|linearized|ls-sgd|sgd|gadmm)"`)
	forEachSource(t, func(rel string, lines []string) {
		if rel == "cmd/dpadmm/experiment.go" {
			return // subcommand names ('dpadmm experiment gadmm'), not steps
		}
		for k, line := range lines {
			if re.MatchString(line) {
				t.Errorf("%s:%d: a bare step name: %s", rel, k+1, strings.TrimSpace(line))
			}
		}
	})
}
