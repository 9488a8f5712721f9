package consensus

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// RawRows are the rows of a CSV file read for a model (ModelSpec.ReadRows): the raw
// features in the model's order, and the label column's texts when the file has it.
type RawRows struct {
	X      [][]float64
	Labels []string // nil when the file has no label column
	Lines  []int    // the file line of each row (1-based, the header counted)
	// Unseen counts the cells of a categorical column holding a value the model's
	// vocabulary lacks (encoded as all zeros, as scikit-learn's handle_unknown='ignore').
	Unseen int
}

// readLIBSVM reads the rows of a LIBSVM file for a model trained on LIBSVM data: its
// features are f1, f2, ... (the reader's names), taken from those indices (an index a
// row lacks is 0, as in the format); the label is every row's first token.
func (m *ModelSpec) readLIBSVM(name string, b []byte) (*RawRows, error) {
	src := make([]int, len(m.Features))
	for j, f := range m.Features {
		k, err := strconv.Atoi(strings.TrimPrefix(f, "f"))
		if !strings.HasPrefix(f, "f") || err != nil || k < 1 {
			return nil, errorOf(ErrMissingColumn, "%s: a LIBSVM file, but the model's features have names (%q): give the rows as CSV with a header", name, f)
		}
		src[j] = k - 1
	}
	d, err := ParseLIBSVM(name, bytes.NewReader(b), LoadOptions{})
	if err != nil {
		return nil, err
	}
	out := &RawRows{Labels: make([]string, 0, d.Rows)}
	line := 0
	for i := 0; i < d.Rows; i++ {
		x := make([]float64, len(m.Features))
		for j, c := range src {
			if c < d.Cols {
				x[j] = d.Row(i)[c]
			}
		}
		line++
		out.X, out.Lines = append(out.X, x), append(out.Lines, line)
		out.Labels = append(out.Labels, strconv.FormatFloat(d.Y[i], 'g', -1, 64))
	}
	return out, nil
}

// ReadRows reads raw rows for m from a CSV file with a header: each of the model's
// features is taken from the column of its name (a one-hot feature "col=value" from the
// text column col, a value the model has not seen giving zeros), in any column order;
// other columns are ignored, and the label column (m.Label) is read when present. A file
// without a header (a first line of numbers) is read by position: the features in the
// model's order, after the label in column 0 when there is one more column. A UTF-8 byte order mark is skipped. Every
// error names the file line and column.
func (m *ModelSpec) ReadRows(name string, r io.Reader, delim rune) (*RawRows, error) {
	if delim == 0 {
		delim = ','
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	b = bytes.TrimPrefix(b, []byte("\ufeff"))
	if detectFormat(name, b, "") == "libsvm" {
		return m.readLIBSVM(name, b)
	}
	cr := csv.NewReader(bytes.NewReader(b))
	cr.Comma, cr.FieldsPerRecord, cr.TrimLeadingSpace = delim, -1, delim != '\t'
	recs, err := cr.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: malformed CSV: %v", name, err)
	}
	for len(recs) > 0 && len(recs[len(recs)-1]) == 1 && strings.TrimSpace(recs[len(recs)-1][0]) == "" {
		recs = recs[:len(recs)-1]
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("%s: empty file", name)
	}
	col, label, first, err := m.columns(name, recs[0])
	if err != nil {
		return nil, err
	}
	out := &RawRows{}
	if label >= 0 {
		out.Labels = []string{}
	}
	for i := first; i < len(recs); i++ {
		rec, line := recs[i], i+1
		if len(rec) == 1 && strings.TrimSpace(rec[0]) == "" {
			continue
		}
		if len(rec) != len(recs[0]) {
			// A row of another width has its fields shifted: every column after the
			// difference would be read from its neighbour's field.
			what := "the header has"
			if first == 0 {
				what = "the first row has"
			}
			return nil, fmt.Errorf("%s:%d: %d fields, %s %d", name, line, len(rec), what, len(recs[0]))
		}
		x := make([]float64, len(m.Features))
		for j, c := range col {
			if c.src >= len(rec) {
				return nil, fmt.Errorf("%s:%d: %d fields, the model's column %q is field %d", name, line, len(rec), c.name, c.src+1)
			}
			cell := strings.TrimSpace(rec[c.src])
			missing := m.Fill != nil && m.Fill.missing(cell)
			if c.value != "" {
				if cell == c.value || missing && c.value == MissingCategory {
					x[j] = 1
				}
				continue
			}
			if missing {
				if v, ok := m.Fill.value(c.name); ok {
					x[j] = v
					continue
				}
			}
			v, ok := parseNumber(cell)
			if !ok {
				what := "is not a number"
				if cell == "" {
					what = "is empty (a missing value)"
				}
				return nil, fmt.Errorf("%s:%d: column %q %s (%q)", name, line, c.name, what, cell)
			}
			if err := checkFinite(name, line, fmt.Sprintf("column %q", c.name), v); err != nil {
				return nil, err
			}
			x[j] = v
		}
		for _, cat := range m.Categorical {
			if s := colIndex(recs[0], cat.Column, first); s >= 0 && s < len(rec) {
				v := strings.TrimSpace(rec[s])
				if m.Fill != nil && m.Fill.missing(v) {
					v = MissingCategory
				}
				known := false
				for _, k := range cat.Values {
					known = known || k == v
				}
				if !known {
					out.Unseen++
				}
			}
		}
		out.X = append(out.X, x)
		out.Lines = append(out.Lines, line)
		if label >= 0 {
			if label >= len(rec) {
				return nil, fmt.Errorf("%s:%d: no label field", name, line)
			}
			out.Labels = append(out.Labels, cleanLabel(rec[label]))
		}
	}
	if len(out.X) == 0 {
		return nil, fmt.Errorf("%s: no data rows", name)
	}
	return out, nil
}

// featureCol says where a feature comes from: the source column, and for a one-hot
// feature the category it marks.
type featureCol struct {
	src   int
	name  string
	value string
}

// columns maps the model's features to the file's columns (see ReadRows); first is the
// index of the first data record.
func (m *ModelSpec) columns(name string, head []string) (col []featureCol, label, first int, err error) {
	headerless := true
	for _, h := range head {
		_, ok := parseNumber(h)
		headerless = headerless && ok
	}
	if headerless {
		// A file without a header: the features in the model's order, after the label in
		// column 0 when there is one more column than features.
		p := len(m.Features)
		switch len(head) {
		case p + 1:
			label = 0
		case p:
			label = -1
		default:
			return nil, 0, 0, errorOf(ErrMissingColumn, "%s:1: no header, and %d columns for the model's %d features (with the label first, or without it)", name, len(head), p)
		}
		for j := range m.Features {
			col = append(col, featureCol{src: j + 1 + label, name: m.Features[j]})
		}
		return col, label, 0, nil
	}
	first, label = 1, colIndex(head, m.Label, 1)
	cats := map[string]bool{}
	for _, c := range m.Categorical {
		cats[c.Column] = true
	}
	// A column the model reads (a feature, a text column, the label) must be named once.
	reads := map[string]bool{m.Label: m.Label != ""}
	for _, f := range m.Features {
		reads[f] = true
		if c, _, ok := strings.Cut(f, "="); ok && cats[c] {
			reads[c] = true
		}
	}
	for j := range head {
		h := strings.TrimSpace(head[j])
		if k := slices.IndexFunc(head[:j], func(x string) bool { return strings.TrimSpace(x) == h }); k >= 0 && reads[h] {
			return nil, 0, 0, fmt.Errorf("%s:1: columns %d and %d are both named %q: which one holds the model's input is ambiguous", name, k, j, h)
		}
	}
	var missing []string
	for _, f := range m.Features {
		if s := colIndex(head, f, 1); s >= 0 {
			col = append(col, featureCol{src: s, name: f})
			continue
		}
		if c, v, ok := strings.Cut(f, "="); ok && cats[c] {
			if s := colIndex(head, c, 1); s >= 0 {
				col = append(col, featureCol{src: s, name: c, value: v})
				continue
			}
		}
		missing = append(missing, f)
	}
	if len(missing) > 0 {
		return nil, 0, 0, errorOf(ErrMissingColumn, "%s:1: the model's feature column(s) %q are not in the header %q", name, missing, head)
	}
	return col, label, first, nil
}

// ErrMissingColumn: a file read for a model lacks one of its feature columns.
var ErrMissingColumn = errors.New("missing column")

// colIndex returns the index of the header column named n (surrounding space ignored),
// -1 when absent or when the file has no header (first == 0).
func colIndex(head []string, n string, first int) int {
	if first == 0 || n == "" {
		return -1
	}
	for j, h := range head {
		if strings.TrimSpace(h) == n {
			return j
		}
	}
	return -1
}

// ClassIndex returns the index of label in m.Classes (labels compare as in training: as
// numbers when both are, else as texts without surrounding space and a trailing '.'), -1
// when it is none of them.
func (m *ModelSpec) ClassIndex(label string) int {
	k, ok := keyOf(label)
	if !ok {
		return -1
	}
	for i, c := range m.Classes {
		if ck, ok := keyOf(c); ok && ck == k {
			return i
		}
	}
	return -1
}
