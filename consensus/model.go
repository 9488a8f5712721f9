package consensus

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
)

// ModelFormat names the layout of ModelSpec; a reader refuses another.
const ModelFormat = "dpadmm-linear/1"

// The tasks of a ModelSpec.
const (
	TaskBinary     = "binary"     // logistic loss: P(positive) = sigmoid(score)
	TaskMulticlass = "multiclass" // multinomial loss: P(class k) = softmax(scores)_k
	TaskRegression = "regression" // squared loss: the prediction is the score
)

// Categorical is the one-hot vocabulary of one text column: Values in the order of their
// features (Column=Value).
type Categorical struct {
	Column string   `json:"column"`
	Values []string `json:"values"`
}

// ModelSpec is a trained linear model in a form that applies to raw rows: what it
// predicts (task, loss, classes with their original label strings), which columns it
// reads (features, one-hot vocabulary), how they are scaled (Scaling, with the
// intercept's constant feature and the target's scaling), and the coefficients.
//
// Weights has one row per score (binary and regression: 1; multiclass: one per class),
// over the scaled features and then, with an intercept, its constant feature: score_k =
// Weights[k] . Scaling.ScaleRow(x). Coef and Intercept give the same scores in the units
// of the raw features (score_k = Coef[k] . x + Intercept[k]) when the scaling is linear
// in x (none, standardize, rownorm, standardize+rownorm); a unitball scaling divides
// rows longer than 1 by their norm, which no single linear map does, and they are then
// absent. For regression both include the target's scaling: the score is the prediction.
type ModelSpec struct {
	Format      string        `json:"format"`
	Task        string        `json:"task"`
	Loss        string        `json:"loss"`
	Label       string        `json:"label,omitempty"`
	Classes     []string      `json:"classes,omitempty"`
	Features    []string      `json:"features"`
	Categorical []Categorical `json:"categorical,omitempty"`
	// Fill is the public rule for missing cells the training data were read with; predict
	// and eval apply it to their rows.
	Fill    *FillRule `json:"fill,omitempty"`
	Scaling *Scaler   `json:"scaling"`
	// Ranges, when present, are the public ranges of the features (one [min, max] per
	// feature, in Features order; [0, 1] for a one-hot one), the schema's, to which the
	// training rows were clipped: Scores clips a row to them first, as training did.
	Ranges    [][2]float64 `json:"ranges,omitempty"`
	Weights   [][]float64  `json:"weights"`
	Coef      [][]float64  `json:"coef,omitempty"`
	Intercept []float64    `json:"intercept,omitempty"`
}

// NewModelSpec describes the model w trained with loss on data d (scaled by sc, so with
// the intercept's column last when sc has one). d supplies the feature names, the label
// column, the classes and the one-hot vocabulary; the multinomial w holds the classes'
// weight vectors one after the other (class-major).
func NewModelSpec(d *Dataset, sc *Scaler, loss Loss, w []float64) (*ModelSpec, error) {
	if d == nil || sc == nil {
		return nil, errors.New("consensus: model spec: data and scaling are required")
	}
	p := d.Cols
	raw := p
	if sc.HasIntercept() {
		raw--
	}
	m := &ModelSpec{Format: ModelFormat, Loss: loss.String(), Label: d.Label, Scaling: sc,
		Features: append([]string(nil), d.Features[:raw]...), Categorical: d.Categories, Fill: d.Fill}
	if len(d.Ranges) >= raw {
		m.Ranges = append([][2]float64(nil), d.Ranges[:raw]...)
	}
	k := 1
	switch {
	case loss == Squared:
		m.Task = TaskRegression
	case d.Classes != nil && len(d.Classes.List) > 2:
		m.Task, m.Classes, k = TaskMulticlass, append([]string(nil), d.Classes.List...), len(d.Classes.List)
	default:
		m.Task = TaskBinary
		if c := d.Classes; c != nil {
			m.Classes = []string{c.Negative, c.Positive}
		} else {
			m.Classes = []string{"-1", "1"}
		}
	}
	if len(w) != k*p {
		return nil, fmt.Errorf("consensus: model spec: %d coefficients for %d score(s) over %d columns", len(w), k, p)
	}
	for i := 0; i < k; i++ {
		m.Weights = append(m.Weights, append([]float64(nil), w[i*p:(i+1)*p]...))
	}
	m.Coef, m.Intercept = m.rawCoef()
	return m, nil
}

// rawCoef returns the coefficients in raw feature units, nil for a scaling that is not
// linear in x (see ModelSpec).
func (m *ModelSpec) rawCoef() ([][]float64, []float64) {
	sc := m.Scaling
	if sc.Kind.unitball() {
		return nil, nil
	}
	f, div := sc.featureFactor(), 1.0
	if sc.Kind.rownorm() {
		div = sc.RowDiv
	}
	tc, ts := 0.0, 1.0
	if m.Task == TaskRegression && sc.HasTarget() {
		tc, ts = sc.TargetCenter, sc.TargetScale
	}
	coef := make([][]float64, len(m.Weights))
	icpt := make([]float64, len(m.Weights))
	for k, w := range m.Weights {
		coef[k] = make([]float64, len(m.Features))
		b := 0.0
		if sc.HasIntercept() {
			b = w[len(w)-1] * sc.Intercept
		}
		for j := range m.Features {
			c := w[j] * f / div
			if sc.Kind.standardize() && j < len(sc.Mean) {
				c /= sc.Std[j]
				b -= c * sc.Mean[j]
			}
			coef[k][j] = c * ts
		}
		icpt[k] = tc + ts*b
	}
	return coef, icpt
}

// Validate checks that m is complete and consistent (a file read from disk).
func (m *ModelSpec) Validate() error {
	switch {
	case m == nil:
		return errors.New("no model spec")
	case m.Format != ModelFormat:
		return fmt.Errorf("model format %q, this version reads %q", m.Format, ModelFormat)
	case m.Scaling == nil:
		return errors.New("model spec: no scaling")
	case len(m.Features) == 0:
		return errors.New("model spec: no features")
	}
	if err := m.Scaling.Validate(0); err != nil {
		return fmt.Errorf("model spec: %v", err)
	}
	if d := m.Scaling.Dims(); d > 0 && d != len(m.Features) {
		return fmt.Errorf("model spec: the scaling covers %d features, the model has %d", d, len(m.Features))
	}
	if m.Ranges != nil && len(m.Ranges) != len(m.Features) {
		return fmt.Errorf("model spec: %d feature ranges for %d features", len(m.Ranges), len(m.Features))
	}
	for j, r := range m.Ranges {
		if math.IsNaN(r[0]) || math.IsNaN(r[1]) || math.IsInf(r[0], 0) || math.IsInf(r[1], 0) || r[0] > r[1] {
			return fmt.Errorf("model spec: the range of feature %q is not a finite [min, max]: %v", m.Features[j], r)
		}
	}
	want, k := len(m.Features), 1
	if m.Scaling.HasIntercept() {
		want++
	}
	switch m.Task {
	case TaskRegression:
	case TaskBinary:
		if len(m.Classes) != 2 {
			return fmt.Errorf("model spec: a binary model has 2 classes, got %d", len(m.Classes))
		}
	case TaskMulticlass:
		if len(m.Classes) < 3 {
			return fmt.Errorf("model spec: a multiclass model has 3 or more classes, got %d", len(m.Classes))
		}
		k = len(m.Classes)
	default:
		return fmt.Errorf("model spec: unknown task %q", m.Task)
	}
	if len(m.Weights) != k {
		return fmt.Errorf("model spec: %d weight rows, the %s task needs %d", len(m.Weights), m.Task, k)
	}
	for _, w := range m.Weights {
		if len(w) != want {
			return fmt.Errorf("model spec: a weight row of %d values, want %d (features and intercept)", len(w), want)
		}
		for _, v := range w {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return errors.New("model spec: a weight is not finite")
			}
		}
	}
	return nil
}

// Scores returns the model's scores of one raw row (len(Features) values): Weights times
// the scaled row; for regression the prediction in the target's units.
func (m *ModelSpec) Scores(x []float64) []float64 {
	z := m.Scaling.ScaleRow(m.Clip(x))
	out := make([]float64, len(m.Weights))
	for k, w := range m.Weights {
		s := 0.0
		for j, v := range z {
			s += w[j] * v
		}
		out[k] = s
	}
	if m.Task == TaskRegression {
		out[0] = m.Scaling.Predict(out[0])
	}
	return out
}

// Clip returns x clipped to the model's feature ranges (x itself when it has none or
// every value is inside them).
func (m *ModelSpec) Clip(x []float64) []float64 {
	if m.Outside(x) == 0 {
		return x
	}
	out := make([]float64, len(x))
	for j, v := range x {
		out[j] = v
		if j < len(m.Ranges) {
			out[j] = math.Max(m.Ranges[j][0], math.Min(m.Ranges[j][1], v))
		}
	}
	return out
}

// Outside counts the values of x outside the model's feature ranges.
func (m *ModelSpec) Outside(x []float64) int {
	n := 0
	for j, v := range x {
		if j < len(m.Ranges) && (v < m.Ranges[j][0] || v > m.Ranges[j][1]) {
			n++
		}
	}
	return n
}

// Probabilities returns the class probabilities of scores (nil for regression): binary
// [1 - sigmoid(s), sigmoid(s)], multiclass the softmax.
func (m *ModelSpec) Probabilities(scores []float64) []float64 {
	switch m.Task {
	case TaskBinary:
		p := sigmoid(scores[0])
		return []float64{1 - p, p}
	case TaskMulticlass:
		return Softmax(nil, scores)
	}
	return nil
}

// Predict returns the predicted class index of scores (the first of equal maxima; binary:
// positive when the score is >= 0, as the accuracy of the logistic loss counts it), -1
// for regression.
func (m *ModelSpec) Predict(scores []float64) int {
	switch m.Task {
	case TaskBinary:
		if scores[0] >= 0 {
			return 1
		}
		return 0
	case TaskMulticlass:
		best := 0
		for k, s := range scores {
			if s > scores[best] {
				best = k
			}
		}
		return best
	}
	return -1
}

// Softmax sets dst to the softmax of s (allocated when nil) and returns it, computed
// stably (the maximum subtracted first).
func Softmax(dst, s []float64) []float64 {
	if dst == nil {
		dst = make([]float64, len(s))
	}
	mx := math.Inf(-1)
	for _, v := range s {
		mx = math.Max(mx, v)
	}
	sum := 0.0
	for k, v := range s {
		dst[k] = math.Exp(v - mx)
		sum += dst[k]
	}
	for k := range dst {
		dst[k] /= sum
	}
	return dst
}

// ErrNoPredictor: a model file holds no predictor (an older file, or not a model file);
// any other error of ParseModelSpec is a predictor that is present and broken.
var ErrNoPredictor = errors.New(`model file: no "predictor" (written by an older version, or not a model file)`)

// ParseModelSpec reads a model spec from JSON: a spec itself (its "format" is
// ModelFormat), or any file that holds one under "predictor" (a node's model.json, a
// testnet report). The spec is validated.
func ParseModelSpec(b []byte) (*ModelSpec, error) {
	var probe struct {
		Format    string          `json:"format"`
		Predictor json.RawMessage `json:"predictor"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return nil, fmt.Errorf("model file: %v", err)
	}
	raw := b
	if probe.Format == "" {
		if len(probe.Predictor) == 0 || string(probe.Predictor) == "null" {
			return nil, ErrNoPredictor
		}
		raw = probe.Predictor
	}
	var m ModelSpec
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("model file: predictor: %v", err)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// WithWeights returns a copy of m that scores with the flat weight vector w (the score
// rows one after the other, as NewModelSpec takes them), its raw-unit coefficients
// recomputed: the predictor of a model built from m's, such as the average of several
// members' models.
func (m *ModelSpec) WithWeights(w []float64) (*ModelSpec, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	k, p := len(m.Weights), len(m.Weights[0])
	if len(w) != k*p {
		return nil, fmt.Errorf("consensus: model spec: %d coefficients for %d score(s) over %d columns", len(w), k, p)
	}
	c := *m
	c.Weights = make([][]float64, k)
	for i := range c.Weights {
		c.Weights[i] = append([]float64(nil), w[i*p:(i+1)*p]...)
	}
	c.Coef, c.Intercept = c.rawCoef()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Flat returns the weights one score row after the other (the layout of WithWeights).
func (m *ModelSpec) Flat() []float64 {
	var w []float64
	for _, r := range m.Weights {
		w = append(w, r...)
	}
	return w
}

// SameInputs returns nil when m and o predict the same task from the same inputs (task,
// loss, classes, features, vocabulary, fill rule, scaling and ranges: everything but the
// weights and the label column's name, which members may call differently), else an
// error naming the first field that differs.
func (m *ModelSpec) SameInputs(o *ModelSpec) error {
	js := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			return "error: " + err.Error()
		}
		return string(b)
	}
	for _, f := range []struct {
		name string
		a, b any
	}{
		{"format", m.Format, o.Format}, {"task", m.Task, o.Task}, {"loss", m.Loss, o.Loss},
		{"classes", m.Classes, o.Classes}, {"features", m.Features, o.Features}, {"categorical", m.Categorical, o.Categorical},
		{"fill", m.Fill, o.Fill}, {"scaling", m.Scaling, o.Scaling}, {"ranges", m.Ranges, o.Ranges},
		{"weight rows", len(m.Weights), len(o.Weights)},
	} {
		if js(f.a) != js(f.b) {
			return fmt.Errorf("their %s differ: %s against %s", f.name, js(f.a), js(f.b))
		}
	}
	return nil
}

// MajorityShare is the fraction of d's rows in its most frequent label (the accuracy of
// always predicting that class; 0 without rows).
func (d *Dataset) MajorityShare() float64 {
	if d == nil || d.Rows == 0 {
		return 0
	}
	count := map[float64]int{}
	best := 0
	for _, y := range d.Y {
		count[y]++
		best = max(best, count[y])
	}
	return float64(best) / float64(d.Rows)
}
