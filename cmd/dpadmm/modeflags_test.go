package main

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// TestModeFlags: flags belong to the group they are defined in; check accepts the flags
// a mode reads and names every other one given with what it applies to; --help prints
// one section per group title.
func TestModeFlags(t *testing.T) {
	newSet := func() *modeFlags {
		m := newModeFlags("x", "Usage: x\n", io.Discard)
		m.Int("n", 1, "every mode")
		m.in("the walk", "", "walk:*")
		m.Int("hops", 10, "walk")
		m.Float64("gamma", 1, "walk prox")
		m.hint("gamma", "see --even-gamma")
		m.in("the walk", "the walk's linear step", "walk:lin")
		m.Float64("step", 0, "linear step")
		m.in("exchange", "", "gossip")
		m.Int("iters", 5, "exchange")
		m.Bool("both", false, "moved")
		m.common("both")
		return m
	}
	for _, c := range []struct {
		args []string
		mode string
		want string // "" = accepted
	}{
		{[]string{"--n", "2", "--hops", "3", "--both"}, "walk:prox", ""},
		{[]string{"--step", "1"}, "walk:lin", ""},
		{[]string{"--iters", "3", "--both"}, "gossip", ""},
		{[]string{"--step", "1"}, "walk:prox", "--step applies to the walk's linear step, not to MODE"},
		{[]string{"--hops", "3", "--gamma", "1", "--step", "2"}, "gossip",
			"--gamma, --hops apply to the walk; --step applies to the walk's linear step, not to MODE; see --even-gamma"},
		{[]string{"--iters", "1"}, "walk:lin", "--iters applies to exchange, not to MODE"},
	} {
		m := newSet()
		if err := m.parse(c.args); err != nil {
			t.Fatal(err)
		}
		err := m.check(c.mode, "MODE")
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v in %s: %v", c.args, c.mode, err)
		case c.want != "" && (err == nil || err.Error() != c.want || !errors.Is(err, errUsage)):
			t.Errorf("%v in %s: %v, want usage error %q", c.args, c.mode, err, c.want)
		}
	}
	m := newSet()
	if !m.reads("walk:lin", "hops") || m.reads("gossip", "hops") || !m.reads("gossip", "n") || !m.reads("walk:x", "both") {
		t.Error("reads")
	}
	var b bytes.Buffer
	m.printHelp(&b, "Usage: x\n")
	help := b.String()
	for _, want := range []string{"\nFlags:\n  --both ", "  --n int ", "\nFlags of the walk:\n  --gamma float", "  --step float", "\nFlags of exchange:\n  --iters int"} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q:\n%s", want, help)
		}
	}
	if strings.Count(help, "Flags of the walk:") != 1 || strings.Index(help, "Flags of the walk") > strings.Index(help, "Flags of exchange") {
		t.Errorf("sections:\n%s", help)
	}
}

// TestUsageQualifiedSuggestion: an unknown flag that is the last part of exactly one
// flag's name suggests that flag.
func TestUsageQualifiedSuggestion(t *testing.T) {
	if got := qualified("gamma", []string{"even-gamma", "eta"}); got != "even-gamma" {
		t.Errorf("qualified gamma: %q", got)
	}
	if got := qualified("gamma", []string{"even-gamma", "odd-gamma"}); got != "" {
		t.Errorf("two candidates: %q", got)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"experiment", "radmm", "--gamma", "1"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "did you mean --even-gamma?") {
		t.Errorf("experiment radmm --gamma: exit %d, %q", code, errb.String())
	}
}
