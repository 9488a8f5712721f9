// Package graph builds the communication graphs over which dpadmm's random walks move:
// complete, ring, grid, Erdos-Renyi, random regular, and user-supplied edge lists.
//
// The package is pure except for load.go, which reads edge-list files.
package graph

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
)

// Graph is an undirected graph on nodes 0..N-1.
type Graph struct {
	N        int
	Complete bool
	Adj      [][]int // sorted neighbour lists; nil when Complete
	Spec     string
}

// maxTries bounds the resampling of random graphs.
const maxTries = 1000

// Parse builds the graph described by spec on n nodes: "complete", "ring", "grid" (r x c with
// r*c == n and r the largest divisor of n not above sqrt(n)), "er:p" (Erdos-Renyi with edge
// probability p, resampled until connected), "regular:d" (uniform-ish random d-regular graph
// from the configuration model, resampled until simple and connected) or "file:PATH" (edge
// list, see ParseEdges). Every graph other than complete must be connected.
func Parse(spec string, n int, seed uint64) (*Graph, error) {
	if n < 1 {
		return nil, fmt.Errorf("graph: %s: need at least one node, got n=%d", spec, n)
	}
	kind, arg, _ := strings.Cut(strings.TrimSpace(spec), ":")
	r := rand.New(rand.NewPCG(seed, seed^0xda942042e4dd58b5))
	var g *Graph
	switch kind {
	case "complete":
		if arg != "" {
			return nil, fmt.Errorf("graph: %q: complete takes no argument", spec)
		}
		return &Graph{N: n, Complete: true, Spec: spec}, nil
	case "ring":
		if arg != "" {
			return nil, fmt.Errorf("graph: %q: ring takes no argument", spec)
		}
		e := newEdges(n)
		for i := 0; i < n; i++ {
			e.add(i, (i+1)%n)
		}
		g = e.graph(spec)
	case "grid":
		if arg != "" {
			return nil, fmt.Errorf("graph: %q: grid takes no argument", spec)
		}
		rows := 1
		for k := 1; k*k <= n; k++ {
			if n%k == 0 {
				rows = k
			}
		}
		cols := n / rows
		if rows == 1 && n > 3 {
			return nil, fmt.Errorf("graph: grid with n=%d: n is prime, no r x c grid with r, c >= 2; use ring", n)
		}
		e := newEdges(n)
		for i := 0; i < rows; i++ {
			for j := 0; j < cols; j++ {
				v := i*cols + j
				if j+1 < cols {
					e.add(v, v+1)
				}
				if i+1 < rows {
					e.add(v, v+cols)
				}
			}
		}
		g = e.graph(spec)
	case "er":
		p, err := strconv.ParseFloat(arg, 64)
		if err != nil || !(p > 0 && p <= 1) {
			return nil, fmt.Errorf("graph: %q: edge probability must be in (0,1]", spec)
		}
		for try := 0; try < maxTries; try++ {
			e := newEdges(n)
			for i := 0; i < n; i++ {
				for j := i + 1; j < n; j++ {
					if r.Float64() < p {
						e.add(i, j)
					}
				}
			}
			if cand := e.graph(spec); cand.Connected() {
				return cand, nil
			}
		}
		return nil, fmt.Errorf("graph: %s with n=%d: no connected sample in %d tries; increase p (ln(n)/n = %.3g)",
			spec, n, maxTries, math.Log(float64(n))/float64(n))
	case "regular":
		d, err := strconv.Atoi(arg)
		if err != nil || d < 1 || d >= n {
			return nil, fmt.Errorf("graph: %q with n=%d: degree must be an integer in 1..n-1", spec, n)
		}
		if n*d%2 != 0 {
			return nil, fmt.Errorf("graph: %q with n=%d: n*d must be even", spec, n)
		}
		if d == 1 && n > 2 {
			return nil, fmt.Errorf("graph: %s with n=%d is not connected (a 1-regular graph is a matching)", spec, n)
		}
		g, err = randomRegular(n, d, r, spec)
		if err != nil {
			return nil, err
		}
	case "file":
		if arg == "" {
			return nil, fmt.Errorf("graph: %q: missing path", spec)
		}
		var err error
		g, err = loadEdges(arg, n)
		if err != nil {
			return nil, err
		}
		g.Spec = spec
	default:
		return nil, fmt.Errorf("graph: unknown graph %q (want complete, ring, grid, er:p, regular:d or file:PATH)", spec)
	}
	if !g.Connected() {
		return nil, fmt.Errorf("graph: %s with n=%d is not connected", spec, n)
	}
	return g, nil
}

// randomRegular samples a simple connected d-regular graph. For d > (n-1)/2 it samples the
// complement, which has the smaller degree n-1-d.
func randomRegular(n, d int, r *rand.Rand, spec string) (*Graph, error) {
	if d == n-1 {
		e := newEdges(n)
		for i := 0; i < n; i++ {
			for j := i + 1; j < n; j++ {
				e.add(i, j)
			}
		}
		return e.graph(spec), nil
	}
	comp := 2*d > n-1
	k := d
	if comp {
		k = n - 1 - d
	}
	stubs := make([]int, 0, n*k)
	for try := 0; try < maxTries; try++ {
		stubs = stubs[:0]
		for i := 0; i < n; i++ {
			for j := 0; j < k; j++ {
				stubs = append(stubs, i)
			}
		}
		// Steger-Wormald pairing: join two random free stubs whenever they form a new
		// simple edge, restarting only when no such pair can be found. The plain
		// configuration model rejects whole samples and almost never succeeds for
		// n=1000, d>=6 (success probability about exp(-(d*d-1)/4)).
		e := newEdges(n)
		ok := true
		for len(stubs) > 0 && ok {
			found := false
			for attempt := 0; attempt < 64*len(stubs); attempt++ {
				a, b := r.IntN(len(stubs)), r.IntN(len(stubs))
				u, v := stubs[a], stubs[b]
				if a == b || u == v || e.has(u, v) {
					continue
				}
				e.add(u, v)
				if a < b {
					a, b = b, a
				}
				last := len(stubs) - 1
				stubs[a] = stubs[last]
				stubs = stubs[:last]
				last--
				stubs[b] = stubs[last]
				stubs = stubs[:last]
				found = true
				break
			}
			ok = found
		}
		if !ok {
			continue
		}
		if comp {
			c := newEdges(n)
			for i := 0; i < n; i++ {
				for j := i + 1; j < n; j++ {
					if !e.has(i, j) {
						c.add(i, j)
					}
				}
			}
			e = c
		}
		if g := e.graph(spec); g.Connected() {
			return g, nil
		}
	}
	return nil, fmt.Errorf("graph: %s with n=%d: no simple connected sample in %d tries (not connected or not simple)", spec, n, maxTries)
}

// edges accumulates an undirected simple graph.
type edges struct {
	n   int
	set []map[int]bool
}

func newEdges(n int) *edges {
	e := &edges{n: n, set: make([]map[int]bool, n)}
	for i := range e.set {
		e.set[i] = map[int]bool{}
	}
	return e
}

func (e *edges) add(u, v int) {
	if u == v {
		return
	}
	e.set[u][v] = true
	e.set[v][u] = true
}

func (e *edges) has(u, v int) bool { return e.set[u][v] }

func (e *edges) graph(spec string) *Graph {
	g := &Graph{N: e.n, Adj: make([][]int, e.n), Spec: spec}
	for i, s := range e.set {
		nb := make([]int, 0, len(s))
		for j := range s {
			nb = append(nb, j)
		}
		sort.Ints(nb)
		g.Adj[i] = nb
	}
	return g
}

// ParseEdges reads an edge list for n nodes: one "i j" pair of 0-based node indices per
// line, "#" starting a comment, blank lines ignored. Duplicate edges are merged; self-loops,
// indices outside 0..n-1 and malformed lines are errors naming the line. name is used in
// error messages.
func ParseEdges(name string, rd io.Reader, n int) (*Graph, error) {
	if n < 1 {
		return nil, fmt.Errorf("graph: %s: need at least one node, got n=%d", name, n)
	}
	e := newEdges(n)
	sc := bufio.NewScanner(rd)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if k := strings.IndexByte(text, '#'); k >= 0 {
			text = text[:k]
		}
		f := strings.Fields(text)
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("graph: %s:%d: want two node indices, got %d fields", name, line, len(f))
		}
		var uv [2]int
		for k, s := range f {
			v, err := strconv.Atoi(s)
			if err != nil {
				return nil, fmt.Errorf("graph: %s:%d: %q is not a node index", name, line, s)
			}
			if v < 0 || v >= n {
				return nil, fmt.Errorf("graph: %s:%d: node %d out of range 0..%d", name, line, v, n-1)
			}
			uv[k] = v
		}
		if uv[0] == uv[1] {
			return nil, fmt.Errorf("graph: %s:%d: self-loop on node %d", name, line, uv[0])
		}
		e.add(uv[0], uv[1])
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("graph: %s:%d: %v", name, line+1, err)
	}
	return e.graph("file:" + name), nil
}

// Neighbors returns the neighbours of i. For a complete graph it builds the list of all
// other nodes (avoid in hot paths).
func (g *Graph) Neighbors(i int) []int {
	if g.Complete {
		out := make([]int, 0, g.N-1)
		for j := 0; j < g.N; j++ {
			if j != i {
				out = append(out, j)
			}
		}
		return out
	}
	return g.Adj[i]
}

// Degree returns the number of neighbours of i.
func (g *Graph) Degree(i int) int {
	if g.Complete {
		return g.N - 1
	}
	return len(g.Adj[i])
}

// RandomNext returns the next node of a random walk at i: for a complete graph a uniform
// node among all N (i included, as in the paper's setting), otherwise a uniform neighbour.
// A node without neighbours returns i.
func (g *Graph) RandomNext(i int, r *rand.Rand) int {
	if g.Complete {
		return r.IntN(g.N)
	}
	nb := g.Adj[i]
	if len(nb) == 0 {
		return i
	}
	return nb[r.IntN(len(nb))]
}

// Connected reports whether every node is reachable from node 0.
func (g *Graph) Connected() bool {
	if g.Complete || g.N <= 1 {
		return true
	}
	seen := make([]bool, g.N)
	seen[0] = true
	queue := []int{0}
	count := 1
	for len(queue) > 0 {
		u := queue[0]
		queue = queue[1:]
		for _, v := range g.Adj[u] {
			if !seen[v] {
				seen[v] = true
				count++
				queue = append(queue, v)
			}
		}
	}
	return count == g.N
}
