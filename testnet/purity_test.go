package testnet

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestPurePackagesImportRules enforces the architecture's one rule: the algorithm
// packages are pure. They may not do I/O, read the clock, use global randomness,
// log, or start goroutines. Test files are exempt (they may read testdata).
func TestPurePackagesImportRules(t *testing.T) {
	forbidden := map[string]string{
		"os":                    "file and process I/O belongs in node/ or testnet/",
		"net":                   "networking belongs in node/",
		"net/http":              "networking belongs in node/",
		"log":                   "pure code emits Events; logging lives at the edges",
		"log/slog":              "pure code emits Events; logging lives at the edges",
		"github.com/rs/zerolog": "pure code emits Events; zerolog lives in node, testnet and cmd",
		"math/rand":             "use an injected math/rand/v2 source, never the global one",
		"crypto/rand":           "only privacy's secure noise source may read crypto/rand",
		"sync":                  "pure machines are single-threaded",
		"time":                  "time is ticks in pure code",
	}
	// allowedFiles lists the only files of pure packages that may use an otherwise
	// forbidden import, and why.
	allowedFiles := map[string]map[string]bool{
		// Loaders of user-supplied dataset and edge-list files.
		"consensus/load.go":       {"os": true},
		"consensus/graph/load.go": {"os": true},
		// The production noise source is the one place that reads the OS CSPRNG.
		"privacy/secure.go": {"crypto/rand": true},
	}
	pure := []string{"consensus", "walk", "gossip", "privacy"}
	root := ".."
	for _, pkg := range pure {
		err := filepath.WalkDir(filepath.Join(root, pkg), func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				rel, _ := filepath.Rel(root, path)
				if why, bad := forbidden[p]; bad && !allowedFiles[filepath.ToSlash(rel)][p] {
					t.Errorf("%s imports %q: %s", path, p, why)
				}
				if strings.Contains(p, "libp2p") && p != "github.com/libp2p/go-libp2p/core/peer" {
					t.Errorf("%s imports %q: only core/peer of libp2p is allowed in pure packages", path, p)
				}
				for _, other := range []string{"node", "testnet", "cmd"} {
					if strings.HasPrefix(p, "github.com/dpadmm/dpadmm/"+other) {
						t.Errorf("%s imports %q: pure packages may not depend on drivers", path, p)
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestPurePackagesStartNoGoroutines scans the pure packages' source for go statements.
func TestPurePackagesStartNoGoroutines(t *testing.T) {
	for _, pkg := range []string{"consensus", "walk", "gossip", "privacy"} {
		_ = filepath.WalkDir(filepath.Join("..", pkg), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			for i, line := range strings.Split(string(src), "\n") {
				s := strings.TrimSpace(line)
				if strings.HasPrefix(s, "go ") || strings.HasPrefix(s, "go func") {
					t.Errorf("%s:%d starts a goroutine in a pure package", path, i+1)
				}
			}
			return nil
		})
	}
}

// TestPurePackagesUseNoGlobalRand: math/rand/v2's top-level functions draw from a global,
// unseeded source; pure packages may only build generators (rand.New, rand.NewPCG,
// rand.NewChaCha8, rand.NewZipf) and use the types, so every draw comes from an injected
// source. The check is syntactic: a selector on the name math/rand/v2 is imported as.
func TestPurePackagesUseNoGlobalRand(t *testing.T) {
	allowed := map[string]bool{"New": true, "NewPCG": true, "NewChaCha8": true, "NewZipf": true,
		"Rand": true, "Source": true, "PCG": true, "ChaCha8": true, "Zipf": true}
	bad := 0
	for _, pkg := range []string{"consensus", "walk", "gossip", "privacy"} {
		err := filepath.WalkDir(filepath.Join("..", pkg), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			name := ""
			for _, imp := range f.Imports {
				if p, _ := strconv.Unquote(imp.Path.Value); p == "math/rand/v2" {
					name = "rand"
					if imp.Name != nil {
						name = imp.Name.Name
					}
				}
			}
			if name == "" {
				return nil
			}
			ast.Inspect(f, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == name && id.Obj == nil && !allowed[sel.Sel.Name] {
					t.Errorf("%s: %s.%s uses math/rand/v2's global source", fset.Position(sel.Pos()), name, sel.Sel.Name)
					bad++
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// The check finds a global draw when there is one.
	src := "package p\nimport \"math/rand/v2\"\nfunc f() int { r := rand.New(rand.NewPCG(1, 2)); return r.IntN(3) + rand.IntN(3) }\n"
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == "rand" && id.Obj == nil && !allowed[sel.Sel.Name] {
				found++
			}
		}
		return true
	})
	if found != 1 {
		t.Fatalf("the check found %d global draws in a sample with one", found)
	}
}

// TestDriveImportsNoLibp2p: the driver contract (node/drive: the adapters that apply the
// machines' Readies, the runtime loop, the seeded streams) imports no libp2p, no pubsub and
// no part of node that does, and the simulator (testnet/sim) and the fault simulators (testnet/faultsim) reach
// it without depending on libp2p at all (go list -deps): they run the machines through
// exactly the adapters the node runs, without the network stack.
func TestDriveImportsNoLibp2p(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/dpadmm/dpadmm/node/drive").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.Contains(p, "libp2p") || strings.Contains(p, "prometheus") || strings.Contains(p, "zerolog") ||
			p == "github.com/dpadmm/dpadmm/node" {
			t.Errorf("node/drive depends on %s", p)
		}
	}
	for _, pkg := range []string{"testnet/sim", "testnet/faultsim"} {
		out, err = exec.Command("go", "list", "-deps", "github.com/dpadmm/dpadmm/"+pkg).Output()
		if err != nil {
			t.Fatalf("go list: %v", err)
		}
		for _, p := range strings.Fields(string(out)) {
			if strings.Contains(p, "libp2p") || p == "github.com/dpadmm/dpadmm/node" || p == "github.com/dpadmm/dpadmm/node/store" {
				t.Errorf("%s depends on %s: the simulators reach the driver contract through node/drive", pkg, p)
			}
		}
	}
}
