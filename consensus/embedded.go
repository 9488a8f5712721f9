package consensus

import (
	"bytes"
	_ "embed"
)

//go:embed data/breast_cancer.csv
var breastCancerCSV []byte

// Embedded returns the Breast Cancer Wisconsin (Diagnostic) dataset (569 rows, 30 raw
// features, labels +1 benign / -1 malignant) compiled into the binary.
func Embedded() (*Dataset, error) {
	d, err := ParseCSV("embedded:breast_cancer", bytes.NewReader(breastCancerCSV), LoadOptions{Label: "label"})
	if err != nil {
		return nil, err
	}
	if err := d.BinaryLabels(); err != nil {
		return nil, err
	}
	return d, nil
}
