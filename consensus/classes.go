package consensus

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Classes is the mapping of a binary label column to the labels of the logistic loss:
// Negative becomes -1 and Positive +1.
//
// Two labels are the same class when both parse as numbers and are equal ("1", "1.0"
// and "+1" are one class), otherwise when their texts are equal after surrounding space
// and one trailing '.' are removed (UCI Adult's test file writes ">50K." for ">50K").
// Without an explicit positive label the larger of the two is +1: numerically when both
// are numbers ({0,1}, {1,2} and {-1,1} all make the larger +1), else the second in byte
// order of the texts ("no" < "yes", "<=50K" < ">50K").
type Classes struct {
	// Negative is "" when the data held only the positive class.
	Negative string `json:"negative,omitempty"`
	Positive string `json:"positive,omitempty"`
	// List, for a label of more than two classes (the multinomial loss), holds the classes
	// in their order: the label of a row is its index in List. Negative and Positive are
	// then empty.
	List []string `json:"list,omitempty"`
}

// Names returns the ordered class list: binary [negative, positive] (negative "" when the
// data held the positive class only), multinomial List; nil for no classes.
func (c *Classes) Names() []string {
	switch {
	case c == nil:
		return nil
	case len(c.List) > 0:
		return append([]string(nil), c.List...)
	}
	return []string{c.Negative, c.Positive}
}

// labelKey identifies a class: a finite number, or a cleaned text.
type labelKey struct {
	num bool
	v   float64
	s   string
}

func cleanLabel(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 1 {
		s = strings.TrimSuffix(s, ".")
	}
	return s
}

// keyOf returns the class of a label text; ok is false for a non-finite number.
func keyOf(s string) (labelKey, bool) {
	c := cleanLabel(s)
	if v, err := strconv.ParseFloat(c, 64); err == nil || isRangeErr(err) {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return labelKey{}, false
		}
		if v == 0 {
			v = 0 // -0 and 0 are one class
		}
		return labelKey{num: true, v: v}, true
	}
	return labelKey{s: c}, true
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

// less orders two classes: numerically when both are numbers, else by their texts.
func (k labelKey) less(o labelKey, kt, ot string) bool {
	if k.num && o.num {
		return k.v < o.v
	}
	return cleanLabel(kt) < cleanLabel(ot)
}

// classSeen is one distinct label and where it first appeared.
type classSeen struct {
	key  labelKey
	text string
	line int // 0: given (the training data's classes)
}

func (c classSeen) where() string {
	if c.line == 0 {
		return "the training data's class"
	}
	return fmt.Sprintf("line %d", c.line)
}

// mapBinary maps the label texts raw (read from lines of file name, column col) to -1/+1
// following opt (Positive, Classes) and returns the mapping used.
// mapMulti maps a label column of any number of classes to their indices in the class
// list: opt.Classes.List when given (a label outside it is an error), else the distinct
// labels in order (numerically when all are numbers, else by text).
func mapMulti(name, col string, raw []string, lines []int, opt LoadOptions) ([]float64, *Classes, error) {
	var seen []classSeen
	fixed := opt.Classes != nil && len(opt.Classes.List) > 0
	if fixed {
		for _, t := range opt.Classes.List {
			k, ok := keyOf(t)
			if !ok {
				return nil, nil, fmt.Errorf("consensus: class %q is not a finite number", t)
			}
			seen = append(seen, classSeen{key: k, text: cleanLabel(t)})
		}
	}
	keys := make([]labelKey, len(raw))
	for i, t := range raw {
		k, ok := keyOf(t)
		if !ok {
			return nil, nil, fmt.Errorf("consensus: %s:%d: %s: label %q is not finite", name, lines[i], col, strings.TrimSpace(t))
		}
		keys[i] = k
		if slices.IndexFunc(seen, func(s classSeen) bool { return s.key == k }) >= 0 {
			continue
		}
		if fixed {
			return nil, nil, errorOf(ErrNotBinary, "consensus: %s:%d: %s: label %q is not one of the run's classes %s",
				name, lines[i], col, cleanLabel(t), classList(seen))
		}
		seen = append(seen, classSeen{key: k, text: cleanLabel(t), line: lines[i]})
	}
	if !fixed {
		numeric := !slices.ContainsFunc(seen, func(s classSeen) bool { return !s.key.num })
		switch {
		case numeric && len(seen) > MaxNumericClasses:
			return nil, nil, errorOf(ErrTooManyClasses, "consensus: %s: %s: %d distinct numbers, a %d-class model if read as classes: most likely a regression target (the squared loss); a class list given explicitly may be longer",
				name, col, len(seen), len(seen))
		case len(seen) > MaxInferredClasses:
			return nil, nil, errorOf(ErrTooManyClasses, "consensus: %s: %s: %d distinct labels, more than the %d classes inferred from the data at most; give the class list explicitly to fit that many",
				name, col, len(seen), MaxInferredClasses)
		}
		sort.SliceStable(seen, func(a, b int) bool { return seen[a].key.less(seen[b].key, seen[a].text, seen[b].text) })
	}
	cl := &Classes{}
	for _, s := range seen {
		cl.List = append(cl.List, s.text)
	}
	y := make([]float64, len(raw))
	for i, k := range keys {
		y[i] = float64(slices.IndexFunc(seen, func(s classSeen) bool { return s.key == k }))
	}
	return y, cl, nil
}

// distinctLabels counts the distinct classes of raw (up to 3: enough to tell binary from
// more).
func distinctLabels(raw []string) int {
	var keys []labelKey
	for _, t := range raw {
		k, ok := keyOf(t)
		if !ok {
			continue
		}
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
			if len(keys) == 3 {
				break
			}
		}
	}
	return len(keys)
}

func mapBinary(name, col string, raw []string, lines []int, opt LoadOptions) ([]float64, *Classes, error) {
	if opt.Classes != nil && len(opt.Classes.List) > 0 || opt.Multiclass && opt.Classes == nil && opt.Positive == "" && distinctLabels(raw) > 2 {
		return mapMulti(name, col, raw, lines, opt)
	}
	var seen []classSeen
	if c := opt.Classes; c != nil {
		for _, t := range []string{c.Negative, c.Positive} {
			if t == "" {
				continue
			}
			k, ok := keyOf(t)
			if !ok {
				return nil, nil, fmt.Errorf("consensus: class %q is not a finite number", t)
			}
			seen = append(seen, classSeen{key: k, text: cleanLabel(t)})
		}
	}
	given := len(seen)
	keys := make([]labelKey, len(raw))
	for i, t := range raw {
		k, ok := keyOf(t)
		if !ok {
			return nil, nil, fmt.Errorf("consensus: %s:%d: %s: label %q is not finite", name, lines[i], col, strings.TrimSpace(t))
		}
		keys[i] = k
		found := false
		for _, s := range seen {
			if s.key == k {
				found = true
				break
			}
		}
		if found {
			continue
		}
		if len(seen) == 2 {
			if given == 2 {
				return nil, nil, errorOf(ErrNotBinary, "consensus: %s:%d: %s: label %q is neither of the training data's classes %s",
					name, lines[i], col, cleanLabel(t), classList(seen[:given]))
			}
			return nil, nil, errorOf(ErrNotBinary, "consensus: %s:%d: %s: a third label %q after %q (%s) and %q (%s): a binary (logistic) label needs exactly two classes",
				name, lines[i], col, cleanLabel(t), seen[0].text, seen[0].where(), seen[1].text, seen[1].where())
		}
		seen = append(seen, classSeen{key: k, text: cleanLabel(t), line: lines[i]})
	}
	if len(seen) == 0 {
		return nil, nil, fmt.Errorf("consensus: %s: no labels", name)
	}
	var pos labelKey
	posText := ""
	switch {
	case opt.Classes != nil:
		pos, _ = keyOf(opt.Classes.Positive)
		posText = cleanLabel(opt.Classes.Positive)
	case opt.Positive != "":
		k, ok := keyOf(opt.Positive)
		if !ok {
			return nil, nil, fmt.Errorf("consensus: positive label %q is not a finite number", opt.Positive)
		}
		pos, posText = k, cleanLabel(opt.Positive)
		if len(seen) == 2 && seen[0].key != k && seen[1].key != k {
			return nil, nil, errorOf(ErrPositive, "consensus: %s: %s: the positive label %q is neither of its labels %q (%s) and %q (%s)",
				name, col, posText, seen[0].text, seen[0].where(), seen[1].text, seen[1].where())
		}
	case len(seen) == 1:
		return nil, nil, errorOf(ErrOneClass, "consensus: %s: %s: every row has the label %q: one class, and nothing says whether it is the positive (+1) or the negative class",
			name, col, seen[0].text)
	default:
		hi := seen[1]
		if hi.key.less(seen[0].key, hi.text, seen[0].text) {
			hi = seen[0]
		}
		pos, posText = hi.key, hi.text
	}
	cl := &Classes{Positive: posText}
	for _, s := range seen {
		if s.key != pos {
			cl.Negative = s.text
		} else {
			cl.Positive = s.text
		}
	}
	y := make([]float64, len(raw))
	for i, k := range keys {
		if k == pos {
			y[i] = 1
		} else {
			y[i] = -1
		}
	}
	return y, cl, nil
}

func classList(s []classSeen) string {
	q := make([]string, len(s))
	for i, c := range s {
		q[i] = strconv.Quote(c.text)
	}
	return strings.Join(q, " and ")
}
