package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

const versionHelp = `Usage: dpadmm version   (or dpadmm --version)

Prints the version of dpadmm, the module it was built from with its version, the VCS
commit of the build (with "(modified)" when the work tree had uncommitted changes) and
the Go version, from the build information Go embeds in the executable. A binary built
outside a repository, or with -buildvcs=false, has no commit: "unknown".
`

// buildVersion is what 'dpadmm version' prints.
type buildVersion struct {
	Version  string // main.version (-ldflags "-X main.version=...")
	Module   string // module path of the main package
	ModVer   string // module version: a tag, a pseudo-version, or "(devel)"
	Commit   string // vcs.revision; "" = unknown
	Time     string // vcs.time
	Modified bool   // vcs.modified: the work tree had uncommitted changes
	Go       string // Go version the binary was built with
}

// versionFrom reads the build information; info may be nil (not available).
func versionFrom(info *debug.BuildInfo, ok bool) buildVersion {
	v := buildVersion{Version: version, Go: runtime.Version()}
	if !ok || info == nil {
		return v
	}
	v.Module, v.ModVer = info.Main.Path, info.Main.Version
	if info.GoVersion != "" {
		v.Go = info.GoVersion
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// String is the text of 'dpadmm version'.
func (v buildVersion) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "dpadmm %s\n", v.Version)
	mod, mv := v.Module, v.ModVer
	if mod == "" {
		mod = "unknown"
	}
	if mv == "" {
		mv = "unknown"
	}
	fmt.Fprintf(&b, "module %s %s\n", mod, mv)
	commit := "unknown"
	if v.Commit != "" {
		commit = v.Commit
		if v.Time != "" {
			commit += " " + v.Time
		}
		if v.Modified {
			commit += " (modified)"
		}
	}
	fmt.Fprintf(&b, "commit %s\n", commit)
	fmt.Fprintf(&b, "go     %s\n", v.Go)
	return b.String()
}

// runVersion is 'dpadmm version'.
func runVersion(args []string, stdout io.Writer) error {
	fs := newFlagSet("version", versionHelp, stdout)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("version", "unexpected argument %q", fs.Arg(0))
	}
	io.WriteString(stdout, versionFrom(debug.ReadBuildInfo()).String())
	return nil
}
