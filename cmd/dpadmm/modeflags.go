package main

import (
	"flag"
	"fmt"
	"io"
	"path"
	"strings"
)

// modeFlags is the flag set of a command whose flags depend on its mode: the algorithm
// family (the walk and its local step, or neighbour exchange) and, for 'dpadmm testnet',
// the network (simulator, in-process hosts, processes). A mode is a name such as
// "walk:prox", "gossip" or "walk:prox/sim", chosen by the command from the parsed flags.
//
// Every flag is defined inside a group (in), which declares the modes that read it as
// path.Match patterns ("walk:*", "*/sim"); the flags defined before the first group are
// read by every mode. After parsing, check refuses a flag given on the command line that
// the chosen mode does not read, naming what the flag belongs to. The groups are the only
// statement of which flag applies where: nothing else lists flags per mode, and --help
// prints the flags section by section from them.
type modeFlags struct {
	*flag.FlagSet
	groups []*flagGroup
	cur    *flagGroup
	of     map[string]*flagGroup // flag name -> its group
	hints  map[string]string     // flag name -> sentence added when check refuses it
}

// flagGroup is a set of flags read by the same modes.
type flagGroup struct {
	section string   // help section: "" for the flags of every mode
	where   string   // what the flags apply to, for check's message ("" = section)
	modes   []string // path.Match patterns of the modes that read them; nil: every mode
	names   []string
}

// newModeFlags returns the mode flag set of the command cmd. Its --help writes help and
// then the flags: those of every mode under "Flags:", the others under one heading per
// section in the order of the groups.
func newModeFlags(cmd, help string, stdout io.Writer) *modeFlags {
	m := &modeFlags{FlagSet: newFlagSet(cmd, help, stdout), of: map[string]*flagGroup{}, hints: map[string]string{}}
	m.cur = &flagGroup{}
	m.groups = []*flagGroup{m.cur}
	m.Usage = func() { m.printHelp(stdout, help) }
	return m
}

// in starts a group: the flags defined from now on are read by the modes matching one of
// the patterns. section is the help heading ("Flags of SECTION:"); groups with the same
// section share it. where, when not empty, is what check says the flags apply to (default:
// the section).
func (m *modeFlags) in(section, where string, modes ...string) {
	m.assign()
	m.cur = &flagGroup{section: section, where: where, modes: modes}
	m.groups = append(m.groups, m.cur)
}

// common moves the flags named to the flags of every mode (for flags defined together
// with others by a shared helper).
func (m *modeFlags) common(names ...string) {
	m.assign()
	for _, n := range names {
		g := m.of[n]
		if g == nil || g == m.groups[0] {
			continue
		}
		g.names = remove(g.names, n)
		m.groups[0].names = append(m.groups[0].names, n)
		m.of[n] = m.groups[0]
	}
}

func remove(xs []string, x string) []string {
	out := xs[:0]
	for _, y := range xs {
		if y != x {
			out = append(out, y)
		}
	}
	return out
}

// hint adds sentence to the error of check when it refuses the flag name.
func (m *modeFlags) hint(name, sentence string) { m.hints[name] = sentence }

// assign puts the flags defined since the last call into the current group.
func (m *modeFlags) assign() {
	m.VisitAll(func(f *flag.Flag) {
		if m.of[f.Name] == nil {
			m.of[f.Name] = m.cur
			m.cur.names = append(m.cur.names, f.Name)
		}
	})
}

// parse parses args (parseFlags).
func (m *modeFlags) parse(args []string) error {
	m.assign()
	return parseFlags(m.FlagSet, args)
}

// isSet reports whether the flag name was given on the command line.
func (m *modeFlags) isSet(name string) bool {
	set := false
	m.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// reads reports whether mode reads the flag name.
func (m *modeFlags) reads(mode, name string) bool {
	m.assign()
	g := m.of[name]
	if g == nil {
		return false
	}
	if g.modes == nil {
		return true
	}
	for _, p := range g.modes {
		if ok, _ := path.Match(p, mode); ok {
			return true
		}
	}
	return false
}

// check returns a usage error naming every flag given on the command line that mode does
// not read, with what each applies to; what describes the mode ("--algo radmm with
// --mem"). nil when every flag given applies.
func (m *modeFlags) check(mode, what string) error {
	m.assign()
	var order []*flagGroup
	bad := map[*flagGroup][]string{}
	var hints []string
	m.Visit(func(f *flag.Flag) {
		if m.reads(mode, f.Name) {
			return
		}
		g := m.of[f.Name]
		if bad[g] == nil {
			order = append(order, g)
		}
		bad[g] = append(bad[g], "--"+f.Name)
		if h := m.hints[f.Name]; h != "" {
			hints = append(hints, h)
		}
	})
	if len(order) == 0 {
		return nil
	}
	var parts []string
	for _, g := range order {
		verb := "applies"
		if len(bad[g]) > 1 {
			verb = "apply"
		}
		where := g.where
		if where == "" {
			where = g.section
		}
		parts = append(parts, fmt.Sprintf("%s %s to %s", strings.Join(bad[g], ", "), verb, where))
	}
	msg := strings.Join(parts, "; ") + ", not to " + what
	for _, h := range hints {
		msg += "; " + h
	}
	return usagef(m.Name(), "%s", msg)
}

// printHelp writes help, then the flags of every mode under "Flags:" and the others under
// "Flags of SECTION:", one heading per section.
func (m *modeFlags) printHelp(w io.Writer, help string) {
	m.assign()
	io.WriteString(w, help)
	if !strings.HasSuffix(help, "\n") {
		io.WriteString(w, "\n")
	}
	var sections []string
	names := map[string][]string{}
	for _, g := range m.groups {
		if _, ok := names[g.section]; !ok {
			sections = append(sections, g.section)
		}
		names[g.section] = append(names[g.section], g.names...)
	}
	for _, s := range sections {
		if len(names[s]) == 0 {
			continue
		}
		if s == "" {
			io.WriteString(w, "\nFlags:\n")
		} else {
			fmt.Fprintf(w, "\nFlags of %s:\n", s)
		}
		var fl []*flag.Flag
		for _, n := range names[s] {
			fl = append(fl, m.Lookup(n))
		}
		printFlagList(w, fl)
	}
}
