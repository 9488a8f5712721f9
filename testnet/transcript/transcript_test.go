package transcript

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestParseAndRewrite: notes stay with the command after them, outputs are compared, and
// a rewrite reproduces a transcript whose outputs did not change byte for byte.
func TestParseAndRewrite(t *testing.T) {
	text := "# head\n# more\n\nadd-nodes n=2\n----\n2 nodes\n\n# about tick\ntick\n----\nok\n"
	bs, err := Parse(text)
	if err != nil || len(bs) != 2 || bs[0].Notes != "# head\n# more\n" || bs[1].Notes != "# about tick\n" ||
		bs[0].Want != "2 nodes" || bs[1].Cmd != "tick" {
		t.Fatalf("%+v %v", bs, err)
	}
	if _, err := Parse("tick\nok\n"); err == nil || !strings.Contains(err.Error(), "without ----") {
		t.Fatalf("a block without ----: %v", err)
	}
	p := filepath.Join(t.TempDir(), "x.txt")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	f := Open(t, p, true)
	for _, b := range f.Blocks {
		f.Check(b, b.Want)
	}
	f.Close()
	if got, _ := os.ReadFile(p); string(got) != text {
		t.Fatalf("rewritten:\n%q\nwant\n%q", got, text)
	}
}
