package testnet

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxExported is the number of exported top-level names (functions, types, variables,
// constants) a package may have without saying why in its package documentation.
const maxExported = 60

// TestExportedNamesExplained: every package of the module with more than maxExported
// exported top-level names says in its package comment why (a sentence containing
// "exported names"), so that a package that grows a broad API does so on purpose.
func TestExportedNamesExplained(t *testing.T) {
	root := ".."
	checked := 0
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if base := d.Name(); path != root && (strings.HasPrefix(base, ".") || base == "testdata") {
			return filepath.SkipDir
		}
		files, err := filepath.Glob(filepath.Join(path, "*.go"))
		if err != nil {
			return err
		}
		fset := token.NewFileSet()
		var parsed []*ast.File
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
			if err != nil {
				return err
			}
			parsed = append(parsed, f)
		}
		if len(parsed) > 0 && parsed[0].Name.Name != "main" {
			n, doc := 0, ""
			for _, f := range parsed {
				if f.Doc != nil {
					doc += f.Doc.Text()
				}
				for _, decl := range f.Decls {
					switch d := decl.(type) {
					case *ast.FuncDecl:
						if d.Recv == nil && d.Name.IsExported() {
							n++
						}
					case *ast.GenDecl:
						for _, s := range d.Specs {
							switch s := s.(type) {
							case *ast.TypeSpec:
								if s.Name.IsExported() {
									n++
								}
							case *ast.ValueSpec:
								for _, id := range s.Names {
									if id.IsExported() {
										n++
									}
								}
							}
						}
					}
				}
			}
			checked++
			if n > maxExported && !strings.Contains(doc, "exported names") {
				t.Errorf("%s: %d exported names and no package comment saying why (more than %d)", path, n, maxExported)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 10 {
		t.Fatalf("only %d packages checked", checked)
	}
}
