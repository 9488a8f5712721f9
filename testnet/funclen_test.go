package testnet

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// maxFuncLines is the longest non-test function, in lines from its func keyword to its
// closing brace, allowed in the driver packages (node, testnet and its sub-packages, cmd/dpadmm).
const maxFuncLines = 100

// longFuncAllowed lists the functions that exceed maxFuncLines today, as
// "DIR/FILE.go:Name" or "DIR/FILE.go:Recv.Name". Only functions of the files of
// longFuncFilesAllowed may appear here; an entry that no longer exceeds the limit fails
// the test, so the list only shrinks, to empty.
var longFuncAllowed = map[string]bool{}

// longFuncFilesAllowed are the file patterns (filepath.Match, relative to the module root)
// whose functions longFuncAllowed may name: none any more.
var longFuncFilesAllowed []string

// TestFunctionLength: no non-test function of node, testnet (and sub-packages) or cmd/dpadmm is longer than
// maxFuncLines lines, except those of longFuncAllowed.
func TestFunctionLength(t *testing.T) {
	for key := range longFuncAllowed {
		file, _, _ := strings.Cut(key, ":")
		ok := false
		for _, p := range longFuncFilesAllowed {
			m, _ := filepath.Match(p, file)
			ok = ok || m
		}
		if !ok {
			t.Errorf("%s: only functions of %v may be allowed to exceed %d lines", key, longFuncFilesAllowed, maxFuncLines)
		}
	}
	long := map[string]int{}
	for _, dir := range []string{"node", "testnet", "testnet/sim", "testnet/faultsim", "testnet/audit", "testnet/experiment", "cmd/dpadmm"} {
		for key, n := range longFunctions(t, dir) {
			long[key] = n
		}
	}
	var keys []string
	for key := range long {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		if !longFuncAllowed[key] {
			t.Errorf("%s has %d lines, more than %d: split it", key, long[key], maxFuncLines)
		}
	}
	for key := range longFuncAllowed {
		if _, ok := long[key]; !ok {
			t.Errorf("%s is allowed to exceed %d lines but no longer does (or no longer exists): remove it from longFuncAllowed", key, maxFuncLines)
		}
	}
}

// longFunctions returns the non-test functions of the package in dir (relative to the
// module root) longer than maxFuncLines, keyed as in longFuncAllowed.
func longFunctions(t *testing.T, dir string) map[string]int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
			if n <= maxFuncLines {
				continue
			}
			name := fd.Name.Name
			if fd.Recv != nil && len(fd.Recv.List) == 1 {
				name = recvName(fd.Recv.List[0].Type) + "." + name
			}
			out[fmt.Sprintf("%s/%s:%s", dir, filepath.Base(f), name)] = n
		}
	}
	return out
}

// recvName is the type name of a method receiver (without * and type parameters).
func recvName(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return recvName(x.X)
	case *ast.IndexExpr:
		return recvName(x.X)
	case *ast.IndexListExpr:
		return recvName(x.X)
	case *ast.Ident:
		return x.Name
	}
	return "?"
}
