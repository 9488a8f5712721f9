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

// ParseEmbedded reads the embedded dataset as Embedded does, with the label handling of
// opt (Binary, Positive, Classes); its label column is "label" (labels 1 and -1).
func ParseEmbedded(opt LoadOptions) (*Dataset, error) {
	opt.Label, opt.Format, opt.Delimiter = "label", "csv", 0
	return ParseCSV("embedded:breast_cancer", bytes.NewReader(breastCancerCSV), opt)
}

// EmbeddedCSV returns the embedded dataset's CSV file (a copy).
func EmbeddedCSV() []byte { return bytes.Clone(breastCancerCSV) }
