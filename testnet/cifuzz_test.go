package testnet

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestEveryFuzzTargetInCI: the fuzz list of .ci/run names exactly the fuzz targets of the
// module, each in the package directory that declares it, so that a renamed or moved
// target is neither fuzzed under a name that no longer exists (which fuzzes nothing) nor
// left out.
func TestEveryFuzzTargetInCI(t *testing.T) {
	root := filepath.Join("..")
	b, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	_, list, ok := bytes.Cut(b, []byte("<<'LIST'\n"))
	if !ok {
		t.Fatal(".ci/run has no fuzz LIST")
	}
	list, _, _ = bytes.Cut(list, []byte("\nLIST\n"))
	listed := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(list))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			t.Fatalf(".ci/run fuzz line %q: want PKG TARGET BUDGET", sc.Text())
		}
		listed[filepath.Clean(f[0])+" "+f[1]] = true
	}
	decl := regexp.MustCompile(`(?m)^func (Fuzz\w+)\(`)
	found := map[string]bool{}
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(p))
		for _, m := range decl.FindAllSubmatch(src, -1) {
			found[filepath.Clean(rel)+" "+string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) < 10 {
		t.Fatalf("found only %d fuzz targets: %v", len(found), found)
	}
	for k := range found {
		if !listed[k] {
			t.Errorf("fuzz target %s is not in .ci/run's fuzz list", k)
		}
	}
	for k := range listed {
		if !found[k] {
			t.Errorf(".ci/run fuzzes %s, which does not exist", k)
		}
	}
}
