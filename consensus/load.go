package consensus

import (
	"fmt"
	"os"
)

// Load reads a dataset file (CSV or LIBSVM, see Parse). Errors name the file and the line.
func Load(path string, opt LoadOptions) (*Dataset, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("consensus: %v", err)
	}
	defer f.Close()
	return Parse(path, f, opt)
}
