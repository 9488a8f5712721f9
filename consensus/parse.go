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
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// LoadOptions controls how dataset files are parsed.
type LoadOptions struct {
	Label       string // CSV: column name or 0-based index; "" = first column. Ignored for LIBSVM.
	Format      string // "", "csv", "libsvm" ("" = by extension, then sniffing)
	Categorical string // "none" (default: error on non-numeric) or "auto" (one-hot encode)
	MinCols     int    // LIBSVM: pad to at least this many features
	// MaxCols, when > 0, is the largest number of features accepted: a LIBSVM feature
	// index above it, or a CSV with more feature columns, is an error naming the line.
	MaxCols int
	// Delimiter is the CSV field delimiter; 0 means ','.
	Delimiter rune
	// Binary reads the label as a class: the label column must hold two distinct values,
	// mapped to -1 and +1 (see Classes for how labels compare and which is +1), and
	// Dataset.Classes records the mapping. Without Binary labels must be numbers, used
	// as they are (regression targets).
	Binary bool
	// Positive, with Binary, is the label that becomes +1; "" means the larger of the two
	// (numerically when both are numbers, else the second in byte order).
	Positive string
	// Multiclass, with Binary, accepts a label of more than two classes: Y is then the
	// class index and Dataset.Classes.List the classes (see mapMulti).
	Multiclass bool
	// Ignore names CSV columns (by header name or 0-based index) that are not read at all:
	// an ID, a free-text note, a column that leaks the label.
	Ignore []string
	// Fill, when not nil, fills missing cells of feature columns (see FillRule) instead of
	// refusing them.
	Fill *FillRule
	// Classes, with Binary, fixes the mapping (e.g. the training file's, for its test
	// file); a label that is neither class is an error. It overrides Positive.
	Classes *Classes
}

// FillRule fills missing feature cells by a public rule: Columns[name] for a listed
// column, else Default (an error when neither is set). A cell is missing when it is empty
// or one of MissingMarkers. A text column's missing cells become the category
// MissingCategory. The values are public (a constant, or a file every member shares), never
// statistics of the local rows: a mean of a node's own rows would make each filled cell a
// function of the other rows, so that one row's change would move others, and the
// released model would carry that dependence outside every figure's adjacency.
type FillRule struct {
	Default *float64           `json:"default,omitempty"`
	Columns map[string]float64 `json:"columns,omitempty"`
}

// MissingMarkers are the cell texts a FillRule treats as missing (besides an empty cell).
var MissingMarkers = []string{"NA", "N/A", "NaN", "nan", "na", "n/a", "?", "null", "NULL", "None"}

// MissingCategory is the category of a missing cell of a text column under a FillRule.
const MissingCategory = "(missing)"

// value returns the fill value of column col, ok false when the rule has none.
func (f *FillRule) value(col string) (float64, bool) {
	if v, ok := f.Columns[col]; ok {
		return v, true
	}
	if f.Default != nil {
		return *f.Default, true
	}
	return 0, false
}

// missing reports whether a cell is missing under the rule.
func (f *FillRule) missing(cell string) bool {
	c := strings.TrimSpace(cell)
	if c == "" {
		return true
	}
	for _, m := range MissingMarkers {
		if c == m {
			return true
		}
	}
	return false
}

// Errors a caller can detect with errors.Is, to add advice that names its own options.
var (
	// ErrNotBinary: a binary label column holds a third value, or a label outside the
	// given classes.
	ErrNotBinary = errors.New("labels are not binary")
	// ErrOneClass: every label is the same and nothing says whether it is the positive
	// class.
	ErrOneClass = errors.New("one class only")
	// ErrPositive: the positive label given is neither of the file's two labels.
	ErrPositive = errors.New("positive label not found")
	// ErrNotNumeric: a feature cell is not a number and categorical encoding is off.
	ErrNotNumeric = errors.New("feature is not a number")
	// ErrLabelNotNumeric: a label is not a number where a numeric target is needed.
	ErrLabelNotNumeric = errors.New("label is not a number")
	// ErrEmptyCell: a CSV cell is empty (a missing value).
	ErrEmptyCell = errors.New("empty cell")
	// ErrDelimiter: the CSV seems to use another field delimiter.
	ErrDelimiter = errors.New("wrong delimiter")
	// ErrTooManyFeatures: more features than LoadOptions.MaxCols.
	ErrTooManyFeatures = errors.New("too many features")
	// ErrTooManyClasses: a class list inferred from the labels (no class list given)
	// would be longer than MaxInferredClasses, or a numeric label column holds more than
	// MaxNumericClasses distinct values (a regression target read as classes).
	ErrTooManyClasses = errors.New("too many classes")
)

// Limits of a class list inferred from the labels: a class list given (a schema, the
// classes option) may be longer. A numeric label column with more distinct values than
// MaxNumericClasses is most likely a regression target.
const (
	MaxInferredClasses = 100
	MaxNumericClasses  = 20
)

// dataError is a parse error whose message is complete and which unwraps to one of the
// Err* kinds above.
type dataError struct {
	msg  string
	kind error
}

func (e *dataError) Error() string { return e.msg }
func (e *dataError) Unwrap() error { return e.kind }

// DelimiterError reports a CSV whose first line is one column holding another likely
// delimiter; it matches ErrDelimiter.
type DelimiterError struct {
	Delimiter rune // the delimiter the file seems to use
	msg       string
}

func (e *DelimiterError) Error() string { return e.msg }
func (e *DelimiterError) Unwrap() error { return ErrDelimiter }

func errorOf(kind error, format string, a ...any) error {
	return &dataError{msg: fmt.Sprintf(format, a...), kind: kind}
}

// Parse reads a dataset in the format selected by opt.Format, the extension of name, or
// sniffing of the content, in that order. name is used in error messages and as Dataset.Name.
func Parse(name string, r io.Reader, opt LoadOptions) (*Dataset, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("consensus: %s: %v", name, err)
	}
	data = bytes.TrimPrefix(data, []byte("\ufeff")) // a UTF-8 byte order mark (Excel)
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
	// A number beyond the float64 range ("1e400") is a number, +-Inf: checkFinite names it.
	return v, err == nil || errors.Is(err, strconv.ErrRange)
}

// checkFinite reports a value that is not finite, naming the file, line and column (col:
// "column 2 (ash)", "feature 3", "the label"). A NaN cell of a CSV feature column marks a
// missing value: it is an ErrEmptyCell, which a fill rule replaces; elsewhere (a label,
// a LIBSVM value, which no fill rule reaches) it is a plain error.
func checkFinite(name string, line int, col string, v float64) error {
	fillable := strings.HasPrefix(col, "column ") && !strings.Contains(col, "the label")
	switch {
	case math.IsNaN(v) && !fillable:
		return fmt.Errorf("consensus: %s:%d: %s: NaN is not a number (a missing value): drop the row", name, line, col)
	case math.IsNaN(v):
		return errorOf(ErrEmptyCell, "consensus: %s:%d: %s: NaN (a missing value) is not a number: fill it in or drop the row", name, line, col)
	case math.IsInf(v, 0):
		return fmt.Errorf("consensus: %s:%d: %s: value %v is not finite (a number beyond the float64 range reads as infinite)", name, line, col, v)
	}
	return nil
}

// ParseCSV reads a delimited dataset (opt.Delimiter, default ','). The first row is a
// header when one of its fields is not numeric while the field below it is, or when
// opt.Label names a column. The label column is opt.Label (name or 0-based index), by
// default the first column; with opt.Binary it holds two classes (see Classes), else
// numbers. Non-numeric feature columns are one-hot encoded (categories in sorted order)
// when opt.Categorical is "auto", and are an error otherwise. Empty cells are an error.
// Every error names the file line (1-based, the header counted).
func ParseCSV(name string, r io.Reader, opt LoadOptions) (*Dataset, error) {
	switch opt.Categorical {
	case "", "none", "auto":
	default:
		return nil, fmt.Errorf("consensus: unknown categorical mode %q (want none or auto)", opt.Categorical)
	}
	delim := opt.Delimiter
	if delim == 0 {
		delim = ','
	}
	if delim == '"' || delim == '\r' || delim == '\n' || delim == utf8.RuneError || !utf8.ValidRune(delim) || unicode.IsSpace(delim) && delim != '\t' {
		return nil, fmt.Errorf("consensus: invalid CSV delimiter %q", delim)
	}
	br := bufio.NewReader(r)
	if b, _ := br.Peek(3); bytes.Equal(b, []byte("\ufeff")) {
		_, _ = br.Discard(3) // a UTF-8 byte order mark (Excel's "CSV UTF-8")
	}
	cr := csv.NewReader(br)
	cr.Comma = delim
	cr.FieldsPerRecord = -1
	cr.TrimLeadingSpace = delim != '\t'
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
				if errors.Is(pe.Err, csv.ErrQuote) && pe.StartLine < pe.Line {
					// An unterminated quote swallows the lines after it: name the line
					// where the quoted record started, not where the reader gave up.
					return nil, fmt.Errorf("consensus: %s:%d: malformed CSV: a quoted field of the record starting on line %d is not closed (the reader gave up on line %d: %v)",
						name, pe.StartLine, pe.StartLine, pe.Line, pe.Err)
				}
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
	if width == 1 {
		for _, other := range []rune{';', '\t', ',', '|'} {
			if other != delim && strings.ContainsRune(recs[0][0], other) {
				return nil, &DelimiterError{Delimiter: other, msg: fmt.Sprintf("consensus: %s:%d: the first line is one column %q: the file seems to be delimited by %q, not %q",
					name, lines[0], clip(recs[0][0], 60), other, delim)}
			}
		}
		return nil, fmt.Errorf("consensus: %s:%d: one column only: a dataset needs a label column and at least one feature column", name, lines[0])
	}
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
	headLine := 0 // the header's file line (0: no header)
	if header {
		names = make([]string, width)
		for j, f := range recs[0] {
			names[j] = strings.TrimSpace(f)
		}
		headLine, recs, lines = lines[0], recs[1:], lines[1:]
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
	colName := func(j int) string { return fmt.Sprintf("column %d (%s)", j, names[j]) }
	ignored, err := ignoredColumns(name, opt.Ignore, names, header, label)
	if err != nil {
		return nil, err
	}
	if header {
		// A model names its features: every column read needs its own name.
		for j := range names {
			if ignored[j] {
				continue
			}
			if k := slices.IndexFunc(names[:j], func(n string) bool { return n == names[j] }); k >= 0 && !ignored[k] {
				return nil, fmt.Errorf("consensus: %s:%d: columns %d and %d are both named %q: a model names its features, so every column read needs its own name (--ignore-columns leaves one out)", name, headLine, k, j, names[j])
			}
		}
	}
	// Missing values first, in file order: a clear error rather than a parse failure (a
	// feature cell is filled when opt.Fill has a value for its column).
	for i, rec := range recs {
		for j, f := range rec {
			if ignored[j] {
				continue
			}
			if j != label && opt.Fill != nil && opt.Fill.missing(f) {
				if _, ok := opt.Fill.value(names[j]); ok {
					continue
				}
				if strings.TrimSpace(f) != "" {
					continue // a marker in a column without a fill value: read as text
				}
			}
			if strings.TrimSpace(f) == "" {
				if j == label {
					// No fill rule reaches a label: a plain error, without the --fill hint.
					return nil, fmt.Errorf("consensus: %s:%d: %s, the label, is empty: a row without its label cannot be used (no fill rule applies to labels): drop the row", name, lines[i], colName(j))
				}
				return nil, errorOf(ErrEmptyCell, "consensus: %s:%d: %s is empty (a missing value): fill it in or drop the row", name, lines[i], colName(j))
			}
		}
	}
	rows := len(recs)
	d := &Dataset{Name: name, Rows: rows, Fill: opt.Fill}
	labelCol := colName(label) + ", the label"
	if opt.Binary {
		raw := make([]string, rows)
		for i, rec := range recs {
			raw[i] = rec[label]
		}
		y, cl, err := mapBinary(name, labelCol, raw, lines, opt)
		if err != nil {
			return nil, err
		}
		d.Y, d.Classes = y, cl
	} else {
		d.Y = make([]float64, rows)
		for i, rec := range recs {
			v, ok := parseNumber(rec[label])
			if !ok {
				return nil, errorOf(ErrLabelNotNumeric, "consensus: %s:%d: %s: %q is not a number%s", name, lines[i], labelCol, rec[label], decimalComma(rec[label], delim))
			}
			if err := checkFinite(name, lines[i], labelCol, v); err != nil {
				return nil, err
			}
			d.Y[i] = v
		}
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
		if j == label || ignored[j] {
			continue
		}
		c := column{src: j, num: make([]float64, rows)}
		badRow := -1
		fill, canFill := 0.0, false
		if opt.Fill != nil {
			fill, canFill = opt.Fill.value(names[j])
		}
		for i, rec := range recs {
			if canFill && opt.Fill.missing(rec[j]) {
				c.num[i] = fill
				continue
			}
			v, ok := parseNumber(rec[j])
			if !ok {
				badRow = i
				break
			}
			if err := checkFinite(name, lines[i], colName(j), v); err != nil {
				return nil, err
			}
			c.num[i] = v
		}
		if badRow >= 0 {
			if opt.Categorical != "auto" {
				hint := decimalComma(recs[badRow][j], delim)
				if slices.Contains(MissingMarkers, strings.TrimSpace(recs[badRow][j])) {
					return nil, errorOf(ErrEmptyCell, "consensus: %s:%d: %s: %q marks a missing value, not a number: fill it in or drop the row",
						name, lines[badRow], colName(j), strings.TrimSpace(recs[badRow][j]))
				}
				if hint == "" {
					hint = " (a text column: categorical mode auto one-hot encodes it)"
					distinct := map[string]bool{}
					for _, rec := range recs {
						distinct[strings.TrimSpace(rec[j])] = true
					}
					if len(distinct) == rows && rows >= distinctWarnRows {
						hint = fmt.Sprintf(" (a different text in every row: an ID? ignore the column (--ignore-columns %q); one-hot encoding it would make one feature per row)", names[j])
					}
				}
				return nil, errorOf(ErrNotNumeric, "consensus: %s:%d: %s: %q is not a number%s",
					name, lines[badRow], colName(j), recs[badRow][j], hint)
			}
			cell := func(rec []string) string {
				if opt.Fill != nil && opt.Fill.missing(rec[j]) {
					return MissingCategory
				}
				return strings.TrimSpace(rec[j])
			}
			set := map[string]bool{}
			for _, rec := range recs {
				set[cell(rec)] = true
			}
			if len(set) == rows && rows >= distinctWarnRows {
				d.Warnings = append(d.Warnings, fmt.Sprintf("%s: %s holds a different text in every one of the %d rows (an ID?): one-hot encoding makes one feature per row, "+
					"which cannot generalise; drop it with --ignore-columns %q", name, colName(j), rows, names[j]))
			}
			for k := range set {
				c.cats = append(c.cats, k)
			}
			sort.Strings(c.cats)
			c.code = make([]int, rows)
			for i, rec := range recs {
				c.code[i] = sort.SearchStrings(c.cats, cell(rec))
			}
			c.num = nil
		}
		if c.num != nil && rows >= distinctWarnRows && isIDColumn(c.num) {
			d.Warnings = append(d.Warnings, fmt.Sprintf("%s: %s holds a different integer in every one of the %d rows, in steps of 1 (an ID?): "+
				"it is used as a feature; drop it with --ignore-columns %q", name, colName(j), rows, names[j]))
		}
		cols = append(cols, c)
	}
	if header {
		d.Label = names[label]
	}
	for _, c := range cols {
		if c.cats == nil {
			d.Features = append(d.Features, names[c.src])
		} else {
			d.Categories = append(d.Categories, Categorical{Column: names[c.src], Values: append([]string(nil), c.cats...)})
			for _, k := range c.cats {
				d.Features = append(d.Features, names[c.src]+"="+k)
			}
		}
	}
	d.Cols = len(d.Features)
	if opt.MaxCols > 0 && d.Cols > opt.MaxCols {
		return nil, errorOf(ErrTooManyFeatures, "consensus: %s: %d features, more than the %d expected", name, d.Cols, opt.MaxCols)
	}
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

// decimalComma returns a hint when s would be a number with a decimal point instead of a
// comma in a file whose delimiter is not a comma.
// distinctWarnRows is the smallest file whose all-distinct columns are flagged as IDs.
const distinctWarnRows = 20

// isIDColumn reports whether v holds distinct integers forming a run of consecutive
// values (1..n in any order, or a shifted run): a row number or identifier.
func isIDColumn(v []float64) bool {
	seen := make(map[float64]bool, len(v))
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, x := range v {
		if x != math.Trunc(x) || seen[x] {
			return false
		}
		seen[x] = true
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	return hi-lo == float64(len(v)-1)
}

// ignoredColumns resolves LoadOptions.Ignore: names (with a header) or 0-based indices;
// the label cannot be ignored, and an unknown column is an error.
func ignoredColumns(name string, ignore, names []string, header bool, label int) (map[int]bool, error) {
	out := map[int]bool{}
	for _, c := range ignore {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		j := -1
		for k, n := range names {
			if header && n == c {
				j = k
				break
			}
		}
		if j < 0 {
			if k, err := strconv.Atoi(c); err == nil && k >= 0 && k < len(names) {
				j = k
			}
		}
		switch {
		case j < 0:
			return nil, fmt.Errorf("consensus: %s:1: column %q to ignore is not in the file (%d columns)", name, c, len(names))
		case j == label:
			return nil, fmt.Errorf("consensus: %s: column %q is the label: it cannot be ignored", name, c)
		}
		out[j] = true
	}
	return out, nil
}

func decimalComma(s string, delim rune) string {
	if delim == ',' || !strings.Contains(s, ",") {
		return ""
	}
	if _, ok := parseNumber(strings.Replace(s, ",", ".", 1)); ok {
		return " (a decimal comma? write decimals with a point)"
	}
	return ""
}

// clip shortens s to at most n bytes for an error message.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// maxLIBSVMIndex bounds feature indices so that a malformed file cannot demand huge memory.
const maxLIBSVMIndex = 1 << 20

// ParseLIBSVM reads a LIBSVM/svmlight dataset: one "label idx:val idx:val ..." line per row,
// 1-based indices, "qid:" tokens ignored, "#" starting a comment. The number of features is
// the largest index seen, at least opt.MinCols; an index above opt.MaxCols (when > 0) is
// an error. With opt.Binary the labels are two classes (see Classes), else numbers.
func ParseLIBSVM(name string, r io.Reader, opt LoadOptions) (*Dataset, error) {
	type entry struct {
		idx int
		val float64
	}
	var rows [][]entry
	var ys []float64
	var raw []string
	var lines []int
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
		if opt.Binary {
			raw = append(raw, f[0])
			lines = append(lines, line)
			ys = append(ys, 0)
		} else {
			y, err := strconv.ParseFloat(f[0], 64)
			if err != nil {
				return nil, errorOf(ErrLabelNotNumeric, "consensus: %s:%d: label %q is not a number", name, line, f[0])
			}
			if err := checkFinite(name, line, "the label", y); err != nil {
				return nil, err
			}
			ys = append(ys, y)
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
			if opt.MaxCols > 0 && idx > opt.MaxCols {
				return nil, errorOf(ErrTooManyFeatures, "consensus: %s:%d: feature index %d, but %d features are expected (the training data's or the model's)",
					name, line, idx, opt.MaxCols)
			}
			v, err := strconv.ParseFloat(tok[k+1:], 64)
			if err != nil {
				return nil, fmt.Errorf("consensus: %s:%d: feature %d: %q is not a number", name, line, idx, tok[k+1:])
			}
			if err := checkFinite(name, line, fmt.Sprintf("feature %d", idx), v); err != nil {
				return nil, err
			}
			row = append(row, entry{idx, v})
			maxIdx = max(maxIdx, idx)
		}
		rows = append(rows, row)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("consensus: %s:%d: %v", name, line+1, err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("consensus: %s: empty file", name)
	}
	var classes *Classes
	if opt.Binary {
		y, cl, err := mapBinary(name, "label", raw, lines, opt)
		if err != nil {
			return nil, err
		}
		ys, classes = y, cl
	}
	p := max(maxIdx, opt.MinCols)
	if len(rows)*p > 1<<28 {
		return nil, fmt.Errorf("consensus: %s: %d rows x %d features is too large for a dense matrix", name, len(rows), p)
	}
	d := &Dataset{Name: name, Rows: len(rows), Cols: p, Y: ys, X: make([]float64, len(rows)*p), Features: make([]string, p), Classes: classes}
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
