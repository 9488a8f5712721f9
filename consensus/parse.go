package consensus

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// LoadOptions controls how dataset files are parsed.
type LoadOptions struct {
	Label       string // CSV: column name or 0-based index; "" = first column. Ignored for LIBSVM.
	Format      string // "", "csv", "libsvm" ("" = by extension, then sniffing)
	Categorical string // "none" (default: error on non-numeric) or "auto" (one-hot encode)
	MinCols     int    // LIBSVM: pad to at least this many features
}

// Parse reads a dataset in the format selected by opt.Format, the extension of name, or
// sniffing of the content, in that order. name is used in error messages and as Dataset.Name.
func Parse(name string, r io.Reader, opt LoadOptions) (*Dataset, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("consensus: %s: %v", name, err)
	}
	switch detectFormat(name, data, opt.Format) {
	case "libsvm":
		return ParseLIBSVM(name, bytes.NewReader(data), opt)
	case "csv":
		return ParseCSV(name, bytes.NewReader(data), opt)
	}
	return nil, fmt.Errorf("consensus: %s: unknown format %q (want csv or libsvm)", name, opt.Format)
}

func detectFormat(name string, data []byte, format string) string {
	switch strings.ToLower(format) {
	case "csv":
		return "csv"
	case "libsvm", "svmlight", "svm":
		return "libsvm"
	case "":
	default:
		return format
	}
	switch strings.ToLower(filepath.Ext(name)) {
	case ".csv":
		return "csv"
	case ".libsvm", ".svm", ".svmlight":
		return "libsvm"
	}
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) > 1 && strings.Contains(f[1], ":") && !strings.Contains(line, ",") {
			return "libsvm"
		}
		return "csv"
	}
	return "csv"
}

func parseNumber(s string) (float64, bool) {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	return v, err == nil
}

func checkFinite(name string, line int, col int, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Errorf("consensus: %s:%d: column %d: value %v is not finite", name, line, col, v)
	}
	return nil
}

// ParseCSV reads a comma-separated dataset. The first row is a header when one of its fields
// is not numeric while the field below it is, or when opt.Label names a column. The label
// column is opt.Label (name or 0-based index), by default the first column. Non-numeric
// feature columns are one-hot encoded (categories in sorted order) when opt.Categorical is
// "auto", and are an error otherwise.
func ParseCSV(name string, r io.Reader, opt LoadOptions) (*Dataset, error) {
	switch opt.Categorical {
	case "", "none", "auto":
	default:
		return nil, fmt.Errorf("consensus: unknown categorical mode %q (want none or auto)", opt.Categorical)
	}
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.TrimLeadingSpace = true
	cr.ReuseRecord = false
	var recs [][]string
	var lines []int
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				return nil, fmt.Errorf("consensus: %s:%d: malformed CSV: %v", name, pe.Line, pe.Err)
			}
			return nil, fmt.Errorf("consensus: %s: %v", name, err)
		}
		if len(rec) == 1 && strings.TrimSpace(rec[0]) == "" {
			continue
		}
		line, _ := cr.FieldPos(0)
		recs = append(recs, rec)
		lines = append(lines, line)
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("consensus: %s: empty file", name)
	}
	width := len(recs[0])
	for i, rec := range recs {
		if len(rec) != width {
			return nil, fmt.Errorf("consensus: %s:%d: %d fields, want %d as on line %d", name, lines[i], len(rec), width, lines[0])
		}
	}
	_, labelIsIndex := strconv.Atoi(strings.TrimSpace(opt.Label))
	labelByName := opt.Label != "" && labelIsIndex != nil
	header := labelByName
	if !header && len(recs) > 1 {
		for j, f := range recs[0] {
			if _, ok := parseNumber(f); !ok {
				if _, ok2 := parseNumber(recs[1][j]); ok2 {
					header = true
					break
				}
			}
		}
	}
	if !header && len(recs) == 1 {
		all := true
		for _, f := range recs[0] {
			if _, ok := parseNumber(f); ok {
				all = false
			}
		}
		header = all
	}
	var names []string
	if header {
		names = make([]string, width)
		for j, f := range recs[0] {
			names[j] = strings.TrimSpace(f)
		}
		recs, lines = recs[1:], lines[1:]
	} else {
		names = make([]string, width)
		for j := range names {
			names[j] = fmt.Sprintf("c%d", j)
		}
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("consensus: %s: no data rows", name)
	}
	label := 0
	if opt.Label != "" {
		label = -1
		for j, n := range names {
			if header && n == strings.TrimSpace(opt.Label) {
				label = j
				break
			}
		}
		if label < 0 {
			if idx, err := strconv.Atoi(strings.TrimSpace(opt.Label)); err == nil && idx >= 0 && idx < width {
				label = idx
			}
		}
		if label < 0 {
			return nil, fmt.Errorf("consensus: %s:1: label column %q not found (%d columns)", name, opt.Label, width)
		}
	}
	rows := len(recs)
	d := &Dataset{Name: name, Rows: rows}
	d.Y = make([]float64, rows)
	for i, rec := range recs {
		v, ok := parseNumber(rec[label])
		if !ok {
			return nil, fmt.Errorf("consensus: %s:%d: column %d (label %s): %q is not a number", name, lines[i], label, names[label], rec[label])
		}
		if err := checkFinite(name, lines[i], label, v); err != nil {
			return nil, err
		}
		d.Y[i] = v
	}
	// Per feature column: numeric values, or category codes.
	type column struct {
		src  int
		num  []float64
		cats []string // sorted; nil for numeric columns
		code []int
	}
	var cols []column
	for j := 0; j < width; j++ {
		if j == label {
			continue
		}
		c := column{src: j, num: make([]float64, rows)}
		badRow := -1
		for i, rec := range recs {
			v, ok := parseNumber(rec[j])
			if !ok {
				badRow = i
				break
			}
			if err := checkFinite(name, lines[i], j, v); err != nil {
				return nil, err
			}
			c.num[i] = v
		}
		if badRow >= 0 {
			if opt.Categorical != "auto" {
				return nil, fmt.Errorf("consensus: %s:%d: column %d (%s): %q is not a number (use categorical=auto to one-hot encode)",
					name, lines[badRow], j, names[j], recs[badRow][j])
			}
			set := map[string]bool{}
			for _, rec := range recs {
				set[strings.TrimSpace(rec[j])] = true
			}
			for k := range set {
				c.cats = append(c.cats, k)
			}
			sort.Strings(c.cats)
			c.code = make([]int, rows)
			for i, rec := range recs {
				c.code[i] = sort.SearchStrings(c.cats, strings.TrimSpace(rec[j]))
			}
			c.num = nil
		}
		cols = append(cols, c)
	}
	for _, c := range cols {
		if c.cats == nil {
			d.Features = append(d.Features, names[c.src])
		} else {
			for _, k := range c.cats {
				d.Features = append(d.Features, names[c.src]+"="+k)
			}
		}
	}
	d.Cols = len(d.Features)
	if rows*d.Cols > 1<<28 {
		return nil, fmt.Errorf("consensus: %s: %d rows x %d features is too large for a dense matrix", name, rows, d.Cols)
	}
	d.X = make([]float64, 0, rows*d.Cols)
	for i := 0; i < rows; i++ {
		for _, c := range cols {
			if c.cats == nil {
				d.X = append(d.X, c.num[i])
				continue
			}
			for k := range c.cats {
				v := 0.0
				if c.code[i] == k {
					v = 1
				}
				d.X = append(d.X, v)
			}
		}
	}
	return d, nil
}

// maxLIBSVMIndex bounds feature indices so that a malformed file cannot demand huge memory.
const maxLIBSVMIndex = 1 << 20

// ParseLIBSVM reads a LIBSVM/svmlight dataset: one "label idx:val idx:val ..." line per row,
// 1-based indices, "qid:" tokens ignored, "#" starting a comment. The number of features is
// the largest index seen, at least opt.MinCols.
func ParseLIBSVM(name string, r io.Reader, opt LoadOptions) (*Dataset, error) {
	type entry struct {
		idx int
		val float64
	}
	var rows [][]entry
	var ys []float64
	maxIdx := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 64*1024*1024)
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
		y, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return nil, fmt.Errorf("consensus: %s:%d: label %q is not a number", name, line, f[0])
		}
		if err := checkFinite(name, line, 0, y); err != nil {
			return nil, err
		}
		var row []entry
		for _, tok := range f[1:] {
			k := strings.IndexByte(tok, ':')
			if k < 0 {
				return nil, fmt.Errorf("consensus: %s:%d: malformed token %q (want index:value)", name, line, tok)
			}
			if tok[:k] == "qid" {
				continue
			}
			idx, err := strconv.Atoi(tok[:k])
			if err != nil || idx < 1 || idx > maxLIBSVMIndex {
				return nil, fmt.Errorf("consensus: %s:%d: bad feature index %q (want 1..%d)", name, line, tok[:k], maxLIBSVMIndex)
			}
			v, err := strconv.ParseFloat(tok[k+1:], 64)
			if err != nil {
				return nil, fmt.Errorf("consensus: %s:%d: feature %d: %q is not a number", name, line, idx, tok[k+1:])
			}
			if err := checkFinite(name, line, idx, v); err != nil {
				return nil, err
			}
			row = append(row, entry{idx, v})
			maxIdx = max(maxIdx, idx)
		}
		rows = append(rows, row)
		ys = append(ys, y)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("consensus: %s:%d: %v", name, line+1, err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("consensus: %s: empty file", name)
	}
	p := max(maxIdx, opt.MinCols)
	if len(rows)*p > 1<<28 {
		return nil, fmt.Errorf("consensus: %s: %d rows x %d features is too large for a dense matrix", name, len(rows), p)
	}
	d := &Dataset{Name: name, Rows: len(rows), Cols: p, Y: ys, X: make([]float64, len(rows)*p), Features: make([]string, p)}
	for j := range d.Features {
		d.Features[j] = fmt.Sprintf("f%d", j+1)
	}
	for i, row := range rows {
		for _, e := range row {
			d.X[i*p+e.idx-1] = e.val
		}
	}
	return d, nil
}
