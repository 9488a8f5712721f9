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

// LoadScaler reads a scale file (the JSON form of Scaler, see ParseScaler); dims, when
// > 0, is the number of features its standardisation must cover.
func LoadScaler(path string, dims int) (*Scaler, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("consensus: %v", err)
	}
	s, err := ParseScaler(b, dims)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return s, nil
}

// LoadSchema reads and checks a schema file (see Schema).
func LoadSchema(path string) (*Schema, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("schema: %v", err)
	}
	s, err := ParseSchema(b)
	if err != nil {
		return nil, fmt.Errorf("schema %s: %v", path, err)
	}
	return s, nil
}
