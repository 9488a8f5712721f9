package graph

import (
	"fmt"
	"os"
)

// loadEdges reads the edge-list file at path (see ParseEdges).
func loadEdges(path string, n int) (*Graph, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("graph: %v", err)
	}
	defer f.Close()
	return ParseEdges(path, f, n)
}
