package graph

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// checkSimple verifies sorted, symmetric, loop-free adjacency lists.
func checkSimple(t *testing.T, g *Graph) {
	t.Helper()
	for i, nb := range g.Adj {
		for k, j := range nb {
			if j == i {
				t.Fatalf("self-loop at %d", i)
			}
			if k > 0 && nb[k-1] >= j {
				t.Fatalf("adjacency of %d not sorted/unique: %v", i, nb)
			}
			found := false
			for _, x := range g.Adj[j] {
				found = found || x == i
			}
			if !found {
				t.Fatalf("edge %d-%d not symmetric", i, j)
			}
		}
	}
}

func edgeCount(g *Graph) int {
	s := 0
	for _, nb := range g.Adj {
		s += len(nb)
	}
	return s / 2
}

func TestParse(t *testing.T) {
	cases := []struct {
		spec      string
		n         int
		edges     int
		minDeg    int
		maxDeg    int
		wantError string
	}{
		{"ring", 5, 5, 2, 2, ""},
		{"ring", 2, 1, 1, 1, ""},
		{"grid", 12, 17, 2, 4, ""}, // 3x4
		{"grid", 9, 12, 2, 4, ""},
		{"grid", 7, 0, 0, 0, "prime"},
		{"er:0.5", 30, -1, 1, 29, ""},
		{"er:0.001", 40, 0, 0, 0, "no connected sample"},
		{"er:2", 4, 0, 0, 0, "probability"},
		{"regular:3", 10, 15, 3, 3, ""},
		{"regular:7", 10, 35, 7, 7, ""},
		{"regular:9", 10, 45, 9, 9, ""},
		{"regular:3", 7, 0, 0, 0, "even"},
		{"regular:1", 4, 0, 0, 0, "not connected"},
		{"star", 4, 0, 0, 0, "unknown graph"},
		{"ring", 0, 0, 0, 0, "at least one node"},
	}
	for _, c := range cases {
		t.Run(c.spec, func(t *testing.T) {
			g, err := Parse(c.spec, c.n, 42)
			if c.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantError) || !strings.HasPrefix(err.Error(), "graph: ") {
					t.Fatalf("error %v, want %q", err, c.wantError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			checkSimple(t, g)
			if !g.Connected() {
				t.Fatal("not connected")
			}
			if c.edges >= 0 && edgeCount(g) != c.edges {
				t.Errorf("%d edges, want %d", edgeCount(g), c.edges)
			}
			for i := 0; i < g.N; i++ {
				if d := g.Degree(i); d < c.minDeg || d > c.maxDeg {
					t.Errorf("node %d degree %d outside [%d,%d]", i, d, c.minDeg, c.maxDeg)
				}
			}
		})
	}
}

func TestParseDeterministic(t *testing.T) {
	a, _ := Parse("regular:4", 20, 5)
	b, _ := Parse("regular:4", 20, 5)
	for i := range a.Adj {
		if len(a.Adj[i]) != len(b.Adj[i]) {
			t.Fatal("same seed gives different graphs")
		}
		for k := range a.Adj[i] {
			if a.Adj[i][k] != b.Adj[i][k] {
				t.Fatal("same seed gives different graphs")
			}
		}
	}
}

func TestComplete(t *testing.T) {
	g, err := Parse("complete", 4, 0)
	if err != nil || !g.Complete || g.Adj != nil {
		t.Fatalf("%v %+v", err, g)
	}
	if g.Degree(2) != 3 || len(g.Neighbors(2)) != 3 || !g.Connected() {
		t.Fatal("bad complete graph")
	}
	r := rand.New(rand.NewPCG(1, 2))
	counts := make([]int, 4)
	for i := 0; i < 4000; i++ {
		counts[g.RandomNext(0, r)]++
	}
	for j, c := range counts {
		if c < 850 || c > 1150 {
			t.Errorf("node %d chosen %d times of 4000 (self included, uniform)", j, c)
		}
	}
}

func TestRandomNextNeighbors(t *testing.T) {
	g, _ := Parse("ring", 6, 0)
	r := rand.New(rand.NewPCG(3, 4))
	seen := map[int]int{}
	for i := 0; i < 1000; i++ {
		seen[g.RandomNext(0, r)]++
	}
	if len(seen) != 2 || seen[1] == 0 || seen[5] == 0 {
		t.Fatalf("walk from 0 on ring went to %v", seen)
	}
}

func TestParseEdges(t *testing.T) {
	g, err := ParseEdges("e.txt", strings.NewReader("# triangle plus tail\n0 1\n1 2\n2 0 # closing\n\n2 3\n1 0\n"), 4)
	if err != nil {
		t.Fatal(err)
	}
	checkSimple(t, g)
	if edgeCount(g) != 4 || !g.Connected() {
		t.Fatalf("edges %d", edgeCount(g))
	}
	for _, c := range []struct{ in, want string }{
		{"0 1\n1 9\n", "e.txt:2"},
		{"0 1\n1\n", "e.txt:2"},
		{"0 x\n", "e.txt:1"},
		{"0 1\n2 2\n", "e.txt:2"},
		{"0 1\n1 2 3\n", "e.txt:2"},
	} {
		if _, err := ParseEdges("e.txt", strings.NewReader(c.in), 4); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.in, err, c.want)
		}
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "g.txt")
	if err := os.WriteFile(p, []byte("0 1\n2 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Parse("file:"+p, 4, 0); err == nil || !strings.Contains(err.Error(), "not connected") {
		t.Fatalf("disconnected file graph: %v", err)
	}
	if err := os.WriteFile(p, []byte("0 1\n1 2\n2 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err = Parse("file:"+p, 4, 0)
	if err != nil || edgeCount(g) != 3 || g.Spec != "file:"+p {
		t.Fatalf("path graph: %v", err)
	}
	if _, err := Parse("file:"+filepath.Join(dir, "missing"), 4, 0); err == nil {
		t.Fatal("missing file accepted")
	}
}

// TestRegularLargeDegree checks that random d-regular graphs of practical size are
// sampled (the plain configuration model almost never succeeds at n=1000, d=6).
func TestRegularLargeDegree(t *testing.T) {
	g, err := Parse("regular:6", 1000, 7)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < g.N; i++ {
		if g.Degree(i) != 6 {
			t.Fatalf("node %d has degree %d, want 6", i, g.Degree(i))
		}
		for _, j := range g.Adj[i] {
			if j == i {
				t.Fatalf("self-loop at %d", i)
			}
		}
	}
	if !g.Connected() {
		t.Fatal("regular:6 sample is not connected")
	}
}
