package main

import (
	"bytes"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// TestVersion: 'dpadmm version' and 'dpadmm --version' print the same four lines: the
// version, the module, the commit and the Go version this binary runs with.
func TestVersion(t *testing.T) {
	var first string
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 0 || errb.Len() != 0 {
			t.Fatalf("%v: exit %d, stderr %q", args, code, errb.String())
		}
		lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
		if len(lines) != 4 || lines[0] != "dpadmm "+version || !strings.HasPrefix(lines[1], "module ") ||
			!strings.HasPrefix(lines[2], "commit ") || lines[3] != "go     "+runtime.Version() {
			t.Errorf("%v: output\n%s", args, out.String())
		}
		if first == "" {
			first = out.String()
		} else if out.String() != first {
			t.Errorf("%v: output differs from 'version'", args)
		}
	}
}

// TestVersionBuildInfo: the lines built from the build information, on hand-made inputs.
func TestVersionBuildInfo(t *testing.T) {
	info := &debug.BuildInfo{
		GoVersion: "go1.99.1",
		Main:      debug.Module{Path: "github.com/dpadmm/dpadmm", Version: "v0.3.0-0.20260101120000-0123456789ab+dirty"},
		Settings: []debug.BuildSetting{
			{Key: "-buildmode", Value: "exe"},
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2026-01-01T12:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	want := "dpadmm " + version + "\n" +
		"module github.com/dpadmm/dpadmm v0.3.0-0.20260101120000-0123456789ab+dirty\n" +
		"commit 0123456789abcdef0123456789abcdef01234567 2026-01-01T12:00:00Z (modified)\n" +
		"go     go1.99.1\n"
	if got := versionFrom(info, true).String(); got != want {
		t.Errorf("dirty build:\n%s\nwant:\n%s", got, want)
	}
	info.Settings[4].Value = "false"
	if got := versionFrom(info, true).String(); !strings.Contains(got, "commit 0123456789abcdef0123456789abcdef01234567 2026-01-01T12:00:00Z\n") {
		t.Errorf("clean build:\n%s", got)
	}
	info.Settings = nil
	info.Main.Version = "(devel)"
	if got := versionFrom(info, true).String(); !strings.Contains(got, "module github.com/dpadmm/dpadmm (devel)\ncommit unknown\n") {
		t.Errorf("build without VCS information:\n%s", got)
	}
	want = "dpadmm " + version + "\nmodule unknown unknown\ncommit unknown\ngo     " + runtime.Version() + "\n"
	if got := versionFrom(nil, false).String(); got != want {
		t.Errorf("no build information:\n%s\nwant:\n%s", got, want)
	}
}
