package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	// The ONNX protobuf types. github.com/owulveryck/onnx-go v0.5.0 generates them too,
	// but in internal/onnx/ir, which no other module may import; gonnx's onnx package is
	// generated with google.golang.org/protobuf from the same onnx.proto3 and supports
	// every data type (DOUBLE included).
	"github.com/advancedclimatesystems/gonnx/onnx"
	"google.golang.org/protobuf/proto"

	"github.com/dpadmm/dpadmm/consensus"
)

const exportHelp = `Usage: dpadmm export --model FILE [--format onnx|csv] --out FILE

Writes a trained model in a form other tools read. FILE is a walk node's model.json, a
neighbour-exchange node's model.json, a 'dpadmm testnet --report' file, a bare model spec,
or a directory holding model.json: any file with the self-describing model ("predictor")
that 'dpadmm predict' applies.

--format onnx writes an ONNX model (opset 13, IR version 7) in float64: input "x" of shape
[N, features], the raw features in the model's feature order (text columns one-hot encoded
with the model's vocabulary); the model's scaling and intercept are part of the graph.
Outputs: "scores" [N, K]; for a classifier "probabilities" [N, classes] and "label" [N]
(int64, an index into the classes); for a regression model "prediction" [N], in the
target's units. The classes, the features, the one-hot vocabulary and the scaling are in
the model's metadata_props and its doc_string.

--format csv writes one row per score: "class" (the positive class of a binary model,
each class of a multiclass model) or "target", then "space", "intercept" and one column
per feature. With a linear scaling (none, standardize, rownorm, standardize+rownorm) the
space is "raw": score = intercept + coefficients . x on the raw features. A unit-ball
scaling divides each row by its norm, which no coefficients on raw features can do: the
space is then "unitball" and the coefficients apply to u = v / max(1, ||v||), v the raw
row (unitball) or the standardized row (standardize+unitball, whose means and standard
deviations are two more rows, space "mean" and "std"). docs/export.md shows how to apply
both files in Python.
`

// Fixed versions of the ONNX file: opset 13 has every operator of the graph with its
// current signature (ReduceL2 takes its axes as an attribute until opset 18), and IR
// version 7 is the one that introduced opset 13, so the oldest runtimes that know these
// operators read the file.
const (
	onnxOpset     = 13
	onnxIRVersion = 7
)

// runExport is 'dpadmm export'.
func runExport(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("export", exportHelp, stdout)
	model := fs.String("model", "", "model file: model.json, a testnet report, a model spec, or a directory holding model.json (required)")
	format := fs.String("format", "onnx", "output format: onnx|csv")
	out := fs.String("out", "", "the file to write (required)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return usagef("export", "unexpected argument %q", fs.Arg(0))
	case *model == "":
		return usagef("export", "--model is required (a model.json, a testnet report, or a directory holding model.json)")
	case *out == "":
		return usagef("export", "--out is required")
	case *format != "onnx" && *format != "csv":
		return usagef("export", "--format must be onnx or csv, got %q", *format)
	}
	spec, path, err := readSpec(*model)
	if err != nil {
		return err
	}
	var b []byte
	if *format == "onnx" {
		b, err = exportONNX(spec)
	} else {
		b, err = exportCSV(spec)
	}
	if err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	if err := writeFileAtomic(*out, b); err != nil {
		return err
	}
	what := fmt.Sprintf("%s model, %d features, scaling %s", spec.Task, len(spec.Features), spec.Scaling.Kind)
	if *format == "onnx" {
		fmt.Fprintf(stdout, "wrote %s: ONNX (opset %d, float64), %s\n", *out, onnxOpset, what)
	} else {
		fmt.Fprintf(stdout, "wrote %s: CSV coefficients (space %s), %s\n", *out, csvSpace(spec.Scaling), what)
	}
	return nil
}

// onnxBuilder assembles the graph of exportONNX: nodes in topological order and their
// constant inputs (initializers).
type onnxBuilder struct {
	g *onnx.GraphProto
}

// constant adds a float64 initializer of the given shape and returns its name; a name
// added before keeps its first value.
func (b *onnxBuilder) constant(name string, dims []int64, v ...float64) string {
	for _, t := range b.g.Initializer {
		if t.Name == name {
			return name
		}
	}
	b.g.Initializer = append(b.g.Initializer, &onnx.TensorProto{Name: name, Dims: dims,
		DataType: int32(onnx.TensorProto_DOUBLE), DoubleData: v})
	return name
}

// node adds the operator op from inputs to the value out and returns out.
func (b *onnxBuilder) node(op string, inputs []string, out string, attrs ...*onnx.AttributeProto) string {
	b.g.Node = append(b.g.Node, &onnx.NodeProto{Name: out, OpType: op, Input: inputs, Output: []string{out}, Attribute: attrs})
	return out
}

func intAttr(name string, v int64) *onnx.AttributeProto {
	return &onnx.AttributeProto{Name: name, Type: onnx.AttributeProto_INT, I: v}
}

func intsAttr(name string, v ...int64) *onnx.AttributeProto {
	return &onnx.AttributeProto{Name: name, Type: onnx.AttributeProto_INTS, Ints: v}
}

// tensorInfo describes a graph input or output: element type and shape, where a dimension
// of 0 is the number of rows N.
func tensorInfo(name, doc string, elem onnx.TensorProto_DataType, dims ...int64) *onnx.ValueInfoProto {
	shape := &onnx.TensorShapeProto{}
	for _, d := range dims {
		dim := &onnx.TensorShapeProto_Dimension{Value: &onnx.TensorShapeProto_Dimension_DimValue{DimValue: d}}
		if d == 0 {
			dim.Value = &onnx.TensorShapeProto_Dimension_DimParam{DimParam: "N"}
		}
		shape.Dim = append(shape.Dim, dim)
	}
	return &onnx.ValueInfoProto{Name: name, DocString: doc, Type: &onnx.TypeProto{Value: &onnx.TypeProto_TensorType{
		TensorType: &onnx.TypeProto_Tensor{ElemType: int32(elem), Shape: shape}}}}
}

// exportONNX returns spec as a serialized ONNX model in float64, from standard operators
// of the default domain only:
//
//	x            [N, p]  raw features
//	Max, Min             clipped to [range_min, range_max]      a model with ranges (a schema's)
//	Sub, Div             (x - mean) / std                       standardize kinds
//	Div                  / row_div                              rownorm kinds
//	ReduceL2, Max, Div   / max(1, ||row||)                      unitball kinds
//	Mul                  * sqrt(1 - c^2)                        with an intercept c
//	MatMul, Add          scores = z W + b, W [p, K], b = c w_last   (Add only with c)
//	Mul, Add             center + scale * scores                regression with a target scaling
//	Sigmoid, Sub, Concat probabilities = [1 - sigmoid(s), sigmoid(s)]   binary
//	Softmax              probabilities = softmax(scores)       multiclass
//	ArgMax               label: binary over [-s, s] with ties to the last (positive when
//	                     s >= 0), multiclass over the scores (the first of equal maxima)
//	Squeeze              prediction [N]                         regression
//
// so that every output equals ModelSpec.Scores, Probabilities and Predict up to rounding.
func exportONNX(spec *consensus.ModelSpec) ([]byte, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	sc := spec.Scaling
	p, k := len(spec.Features), len(spec.Weights)
	b := &onnxBuilder{g: &onnx.GraphProto{Name: "dpadmm_linear"}}
	z := "x"
	if r := spec.Ranges; r != nil {
		lo, hi := make([]float64, p), make([]float64, p)
		for j := range r {
			lo[j], hi[j] = r[j][0], r[j][1]
		}
		z = b.node("Max", []string{z, b.constant("range_min", []int64{int64(p)}, lo...)}, "x_above_min")
		z = b.node("Min", []string{z, b.constant("range_max", []int64{int64(p)}, hi...)}, "x_clipped")
	}
	if sc.Kind == consensus.ScaleStandardize || sc.Kind == consensus.ScaleStandardizeNorm || sc.Kind == consensus.ScaleStandardizeUnitBall {
		z = b.node("Sub", []string{z, b.constant("mean", []int64{int64(p)}, sc.Mean...)}, "x_centered")
		z = b.node("Div", []string{z, b.constant("std", []int64{int64(p)}, sc.Std...)}, "x_standardized")
	}
	switch sc.Kind {
	case consensus.ScaleRowNorm, consensus.ScaleStandardizeNorm:
		z = b.node("Div", []string{z, b.constant("row_div", nil, sc.RowDiv)}, "x_rownorm")
	case consensus.ScaleUnitBall, consensus.ScaleStandardizeUnitBall:
		norm := b.node("ReduceL2", []string{z}, "row_norm", intsAttr("axes", 1), intAttr("keepdims", 1))
		div := b.node("Max", []string{norm, b.constant("one", nil, 1)}, "row_divisor")
		z = b.node("Div", []string{z, div}, "x_unitball")
	}
	if c := sc.Intercept; sc.HasIntercept() {
		z = b.node("Mul", []string{z, b.constant("feature_factor", nil, math.Sqrt(1-c*c))}, "x_scaled")
	}
	w := make([]float64, 0, p*k) // [p, K], row-major: W[j][k] = Weights[k][j]
	for j := 0; j < p; j++ {
		for _, row := range spec.Weights {
			w = append(w, row[j])
		}
	}
	// The scores: z W, then + b, then center + scale * s; the last step's value is "scores".
	type step struct{ op, operand, out string }
	steps := []step{{"MatMul", b.constant("weights", []int64{int64(p), int64(k)}, w...), "margin"}}
	if c := sc.Intercept; sc.HasIntercept() {
		bias := make([]float64, k)
		for i, row := range spec.Weights {
			bias[i] = row[p] * c
		}
		steps = append(steps, step{"Add", b.constant("bias", []int64{int64(k)}, bias...), "margin_bias"})
	}
	if spec.Task == consensus.TaskRegression && sc.HasTarget() {
		steps = append(steps,
			step{"Mul", b.constant("target_scale", nil, sc.TargetScale), "margin_target"},
			step{"Add", b.constant("target_center", nil, sc.TargetCenter), "prediction_target"})
	}
	s := z
	for i, st := range steps {
		out := st.out
		if i == len(steps)-1 {
			out = "scores"
		}
		s = b.node(st.op, []string{s, st.operand}, out)
	}

	f64, i64 := onnx.TensorProto_DOUBLE, onnx.TensorProto_INT64
	b.g.Input = []*onnx.ValueInfoProto{tensorInfo("x", fmt.Sprintf("raw features, one row per example, in the order of metadata \"features\" (%d)", p), f64, 0, int64(p))}
	switch spec.Task {
	case consensus.TaskBinary:
		pos := b.node("Sigmoid", []string{s}, "p_positive")
		neg := b.node("Sub", []string{b.constant("one", nil, 1), pos}, "p_negative")
		b.node("Concat", []string{neg, pos}, "probabilities", intAttr("axis", 1))
		ns := b.node("Sub", []string{b.constant("zero", nil, 0), s}, "neg_scores")
		pair := b.node("Concat", []string{ns, s}, "label_scores", intAttr("axis", 1))
		b.node("ArgMax", []string{pair}, "label", intAttr("axis", 1), intAttr("keepdims", 0), intAttr("select_last_index", 1))
	case consensus.TaskMulticlass:
		b.node("Softmax", []string{s}, "probabilities", intAttr("axis", 1))
		b.node("ArgMax", []string{s}, "label", intAttr("axis", 1), intAttr("keepdims", 0))
	case consensus.TaskRegression:
		b.g.Initializer = append(b.g.Initializer, &onnx.TensorProto{Name: "squeeze_axes", Dims: []int64{1},
			DataType: int32(i64), Int64Data: []int64{1}})
		b.node("Squeeze", []string{s, "squeeze_axes"}, "prediction")
	}
	b.g.Output = []*onnx.ValueInfoProto{tensorInfo("scores", scoresDoc(spec), f64, 0, int64(k))}
	if spec.Task == consensus.TaskRegression {
		b.g.Output = append(b.g.Output, tensorInfo("prediction", "the prediction in the target's units (the scores as a vector)", f64, 0))
	} else {
		b.g.Output = append(b.g.Output,
			tensorInfo("probabilities", "class probabilities, columns in the order of metadata \"classes\"", f64, 0, int64(len(spec.Classes))),
			tensorInfo("label", "predicted class: an index into metadata \"classes\"", i64, 0))
	}

	meta, err := onnxMetadata(spec)
	if err != nil {
		return nil, err
	}
	doc := onnxDoc(spec)
	b.g.DocString = doc
	m := &onnx.ModelProto{IrVersion: onnxIRVersion, OpsetImport: []*onnx.OperatorSetIdProto{{Domain: "", Version: onnxOpset}},
		ProducerName: "dpadmm", ProducerVersion: version, ModelVersion: 1, DocString: doc, Graph: b.g, MetadataProps: meta}
	return proto.MarshalOptions{Deterministic: true}.Marshal(m)
}

// scoresDoc describes the "scores" output.
func scoresDoc(spec *consensus.ModelSpec) string {
	switch spec.Task {
	case consensus.TaskBinary:
		return "the logit of the positive class (metadata \"classes\"[1])"
	case consensus.TaskMulticlass:
		return "one score per class, in the order of metadata \"classes\""
	}
	return "the prediction in the target's units"
}

// onnxMetadata is the model's metadata_props: the spec's description, its lists as JSON.
func onnxMetadata(spec *consensus.ModelSpec) ([]*onnx.StringStringEntryProto, error) {
	var meta []*onnx.StringStringEntryProto
	add := func(key string, v any) error {
		s, ok := v.(string)
		if !ok {
			j, err := json.Marshal(v)
			if err != nil {
				return err
			}
			s = string(j)
		}
		meta = append(meta, &onnx.StringStringEntryProto{Key: key, Value: s})
		return nil
	}
	outputs := []string{"scores", "probabilities", "label"}
	if spec.Task == consensus.TaskRegression {
		outputs = []string{"scores", "prediction"}
	}
	fields := []struct {
		key string
		v   any
	}{
		{"model_format", spec.Format}, {"task", spec.Task}, {"loss", spec.Loss}, {"label", spec.Label},
		{"classes", spec.Classes}, {"features", spec.Features}, {"categorical", spec.Categorical},
		{"scaling", spec.Scaling}, {"ranges", spec.Ranges}, {"input", "x"}, {"outputs", outputs},
	}
	for _, f := range fields {
		switch v := f.v.(type) {
		case string:
			if v == "" {
				continue
			}
		case []string:
			if v == nil {
				continue
			}
		case []consensus.Categorical:
			if v == nil {
				continue
			}
		case [][2]float64:
			if v == nil {
				continue
			}
		}
		if err := add(f.key, f.v); err != nil {
			return nil, err
		}
	}
	return meta, nil
}

// onnxDoc is the model's doc_string: what the graph computes, in words.
func onnxDoc(spec *consensus.ModelSpec) string {
	var b strings.Builder
	fmt.Fprintf(&b, "dpadmm linear model (%s): %s task, %s loss", spec.Format, spec.Task, spec.Loss)
	if spec.Label != "" {
		fmt.Fprintf(&b, ", label column %q", spec.Label)
	}
	b.WriteString(".\n")
	if len(spec.Classes) > 0 {
		fmt.Fprintf(&b, "Classes (label indices 0..%d): %s.\n", len(spec.Classes)-1, strings.Join(spec.Classes, ", "))
	}
	fmt.Fprintf(&b, "Input x: float64 [N, %d], the raw features in this order: %s.\n", len(spec.Features), strings.Join(spec.Features, ", "))
	if spec.Ranges != nil {
		b.WriteString("Each feature is first clipped to its public range (initializers range_min, range_max), as the training rows were.\n")
	}
	for _, c := range spec.Categorical {
		fmt.Fprintf(&b, "Text column %q is one-hot encoded as features %s=VALUE for VALUE in: %s.\n", c.Column, c.Column, strings.Join(c.Values, ", "))
	}
	fmt.Fprintf(&b, "Scaling %s", spec.Scaling.Kind)
	if spec.Scaling.HasIntercept() {
		fmt.Fprintf(&b, " with an intercept feature %g", spec.Scaling.Intercept)
	}
	if spec.Task == consensus.TaskRegression && spec.Scaling.HasTarget() {
		fmt.Fprintf(&b, ", predictions mapped back as %g + %g * score", spec.Scaling.TargetCenter, spec.Scaling.TargetScale)
	}
	b.WriteString(" (parameters in metadata \"scaling\").\n")
	if spec.Task == consensus.TaskRegression {
		b.WriteString("Outputs: scores [N, 1] and prediction [N], in the target's units.\n")
	} else {
		b.WriteString("Outputs: scores [N, K], probabilities [N, classes], label [N] (int64 index into the classes).\n")
	}
	return b.String()
}

// csvSpace is the "space" of the coefficient rows of exportCSV for the scaling sc.
func csvSpace(sc *consensus.Scaler) string {
	if sc.Kind == consensus.ScaleUnitBall || sc.Kind == consensus.ScaleStandardizeUnitBall {
		return "unitball"
	}
	return "raw"
}

// exportCSV returns spec's coefficients as CSV (see exportHelp): with a linear scaling the
// raw-unit coefficients, derived from the weights as consensus.NewModelSpec derives a
// model file's "coef" (the weights are what Scores applies, so the table always agrees
// with it), else the weights in the unit-ball space with the intercept feature's factor
// sqrt(1-c^2), the intercept's constant c and a regression target's scaling folded in,
// followed by the standardization's mean and std rows when there is one.
func exportCSV(spec *consensus.ModelSpec) ([]byte, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	sc := spec.Scaling
	space := csvSpace(sc)
	var coef [][]float64
	var icpt []float64
	if space == "raw" {
		var err error
		if coef, icpt, err = rawCoef(spec); err != nil {
			return nil, err
		}
	} else {
		f, c, tc, ts := 1.0, sc.Intercept, 0.0, 1.0
		if sc.HasIntercept() {
			f = math.Sqrt(1 - c*c)
		}
		if spec.Task == consensus.TaskRegression && sc.HasTarget() {
			tc, ts = sc.TargetCenter, sc.TargetScale
		}
		p := len(spec.Features)
		for _, w := range spec.Weights {
			row := make([]float64, p)
			for j := range row {
				row[j] = ts * f * w[j]
			}
			b := 0.0
			if sc.HasIntercept() {
				b = w[p] * c
			}
			coef, icpt = append(coef, row), append(icpt, tc+ts*b)
		}
	}
	var buf bytes.Buffer
	cw := csv.NewWriter(&buf)
	num := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	first := "class"
	if spec.Task == consensus.TaskRegression {
		first = "target"
	}
	_ = cw.Write(append([]string{first, "space", "intercept"}, spec.Features...))
	for k, row := range coef {
		var name string
		switch spec.Task {
		case consensus.TaskBinary:
			name = spec.Classes[1]
		case consensus.TaskMulticlass:
			name = spec.Classes[k]
		default:
			name = spec.Label
			if name == "" {
				name = "target"
			}
		}
		rec := []string{name, space, num(icpt[k])}
		for _, v := range row {
			rec = append(rec, num(v))
		}
		_ = cw.Write(rec)
	}
	if r := spec.Ranges; r != nil {
		for side, name := range []string{"min", "max"} {
			rec := []string{"", name, ""}
			for _, v := range r {
				rec = append(rec, num(v[side]))
			}
			_ = cw.Write(rec)
		}
	}
	if space == "unitball" && sc.Kind == consensus.ScaleStandardizeUnitBall {
		for _, r := range []struct {
			space string
			v     []float64
		}{{"mean", sc.Mean}, {"std", sc.Std}} {
			rec := []string{"", r.space, ""}
			for _, v := range r.v {
				rec = append(rec, num(v))
			}
			_ = cw.Write(rec)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// rawCoef returns the raw-unit coefficients and intercepts of spec (a linear scaling):
// consensus.NewModelSpec applied to spec's weights, on a dataset that carries only the
// names.
func rawCoef(spec *consensus.ModelSpec) ([][]float64, []float64, error) {
	cols := len(spec.Weights[0])
	d := &consensus.Dataset{Cols: cols, Features: append([]string(nil), spec.Features...), Label: spec.Label,
		Categories: spec.Categorical}
	if spec.Scaling.HasIntercept() {
		d.Features = append(d.Features, consensus.InterceptFeature)
	}
	loss := consensus.Logistic
	switch spec.Task {
	case consensus.TaskRegression:
		loss = consensus.Squared
	case consensus.TaskMulticlass:
		loss, d.Classes = consensus.Multinomial, &consensus.Classes{List: spec.Classes}
	default:
		d.Classes = &consensus.Classes{Negative: spec.Classes[0], Positive: spec.Classes[1]}
	}
	var w []float64
	for _, row := range spec.Weights {
		w = append(w, row...)
	}
	m, err := consensus.NewModelSpec(d, spec.Scaling, loss, w)
	if err != nil {
		return nil, nil, err
	}
	if len(m.Coef) != len(spec.Weights) {
		return nil, nil, fmt.Errorf("no raw-unit coefficients for scaling %s", spec.Scaling.Kind)
	}
	return m.Coef, m.Intercept, nil
}
