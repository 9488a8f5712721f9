// Package transcript reads and checks the transcript tests of the pure machines
// (walk/testdata/custody, gossip/testdata/barrier), in the style of etcd's raft
// interaction tests: each block is a command, a line "----" and the output it must print,
// followed by an empty line. Lines starting with "#" are notes, kept with the command
// that follows them when a transcript is rewritten.
package transcript

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
)

// Block is one command of a transcript, the notes before it and its expected output.
type Block struct{ Notes, Cmd, Want string }

// Parse returns the blocks of a transcript's text.
func Parse(text string) ([]Block, error) {
	var out []Block
	var notes strings.Builder
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			notes.WriteString(line + "\n")
			continue
		}
		if strings.TrimSpace(line) == "" {
			continue
		}
		blk := Block{Notes: notes.String(), Cmd: line}
		notes.Reset()
		if !sc.Scan() || sc.Text() != "----" {
			return nil, fmt.Errorf("transcript: command %q without ----", line)
		}
		var want []string
		for sc.Scan() && sc.Text() != "" {
			want = append(want, sc.Text())
		}
		blk.Want = strings.Join(want, "\n")
		out = append(out, blk)
	}
	return out, sc.Err()
}

// File is a transcript being run: Check each block's output in order, then Close.
type File struct {
	Blocks    []Block
	t         testing.TB
	path      string
	rewrite   bool
	rewritten strings.Builder
}

// Open reads the transcript at path. With rewrite, Check records the outputs instead of
// comparing them and Close writes them back (notes kept).
func Open(t testing.TB, path string, rewrite bool) *File {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := Parse(string(b))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &File{Blocks: blocks, t: t, path: path, rewrite: rewrite}
}

// Check compares got, the output of blk's command, with the expected one (or records it
// when rewriting).
func (f *File) Check(blk Block, got string) {
	f.t.Helper()
	// Blocks are separated by an empty line; the file's leading notes by one more.
	first := f.rewritten.Len() == 0
	if !first {
		f.rewritten.WriteString("\n")
	}
	f.rewritten.WriteString(blk.Notes)
	if first && blk.Notes != "" {
		f.rewritten.WriteString("\n")
	}
	fmt.Fprintf(&f.rewritten, "%s\n----\n%s\n", blk.Cmd, got)
	if !f.rewrite && got != blk.Want {
		f.t.Fatalf("%s: %s\ngot:\n%s\nwant:\n%s", f.path, blk.Cmd, got, blk.Want)
	}
}

// Close writes the transcript back when rewriting.
func (f *File) Close() {
	f.t.Helper()
	if f.rewrite {
		if err := os.WriteFile(f.path, []byte(f.rewritten.String()), 0o644); err != nil {
			f.t.Fatal(err)
		}
	}
}
