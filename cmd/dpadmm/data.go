package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/testnet/sim"
)

// scaleAuto is the default --scale of testnet and node (consensus.ScaleAuto).
const scaleAuto = consensus.ScaleAuto

// dataFlagConfig says which data flags a command has and their defaults.
type dataFlagConfig struct {
	// dataUsage is the help of --data.
	dataUsage string
	// test registers --test and --test-frac (a held-out test set).
	test bool
	// scale is the default of --scale; "" means the run's scaling (account models).
	scale consensus.Scaling
	// fit allows data-dependent scalings fitted on the training rows (the simulators);
	// otherwise they need --scale-file. It also registers --scale-out.
	fit bool
	// fitPublic allows data-dependent scalings on the embedded data, fitted on the whole
	// of it: the data are public and every node fits the same numbers (nodes).
	fitPublic bool
	// lossFlag: the command has --loss (error hints mention it).
	lossFlag bool
	// prefix starts the help of every flag but --data (e.g. "with --data: ").
	prefix string
	// intercept registers --intercept (default on): the model fits an intercept.
	intercept bool
	// classes registers --classes (the run's ordered class list; nodes).
	classes bool
}

// The data flags of each command.
var (
	// testnetData: the simulator fits data-dependent scalings on the pooled training rows.
	testnetData = dataFlagConfig{dataUsage: "training data, CSV or LIBSVM (default: embedded breast cancer data)",
		test: true, scale: scaleAuto, fit: true, lossFlag: true, intercept: true}
	// experimentData: as testnet; the experiment's loss is always logistic.
	experimentData = dataFlagConfig{dataUsage: "data, CSV or LIBSVM (default: embedded breast cancer data)",
		test: true, scale: consensus.ScaleStandardizeNorm, fit: true}
	// auditData: as experiment, with the intercept of the runs it audits.
	auditData = dataFlagConfig{dataUsage: "data, CSV or LIBSVM (default: embedded breast cancer data)",
		test: true, scale: consensus.ScaleStandardizeUnitBall, fit: true, intercept: true}
	// nodeData: a node scales with public parameters only (unitball by default).
	nodeData = dataFlagConfig{dataUsage: "local training data, CSV or LIBSVM, or \"embedded\" (required)",
		scale: scaleAuto, fitPublic: true, lossFlag: true, intercept: true, classes: true}
	// evalData: eval applies the scaling its model file records, as account models.
	evalData = dataFlagConfig{dataUsage: "evaluation data, CSV or LIBSVM, or \"embedded\" (required)", lossFlag: true}
	// modelsData: account models --data applies the run's scaling.
	modelsData = dataFlagConfig{dataUsage: "evaluate f_bar on this dataset (CSV or LIBSVM, or \"embedded\")",
		lossFlag: true, prefix: "with --data: "}
)

// dataFlags are the data-loading flags of a command, registered by addDataFlags.
type dataFlags struct {
	fs          *flag.FlagSet
	cfg         dataFlagConfig
	path        *string
	test        *string
	testFrac    *float64
	label       *string
	positive    *string
	categorical *string
	delimiter   *string
	scale       *string
	scaleFile   *string
	scaleOut    *string
	intercept   *float64
	targetRange *string
	classes     *string
	ignore      *string
	fill        *string
	fillFile    *string
	schema      *string
	schemaOut   *string
}

// usage returns a usage error (exit code 2) of the command whose flags f are.
func (f *dataFlags) usage(format string, a ...any) error {
	cmd := ""
	if f.fs != nil {
		cmd = f.fs.Name()
	}
	return usagef(cmd, format, a...)
}

// addDataFlags registers the data flags on fs.
func addDataFlags(fs *flag.FlagSet, cfg dataFlagConfig) *dataFlags {
	p := cfg.prefix
	f := &dataFlags{fs: fs, cfg: cfg}
	f.path = fs.String("data", "", cfg.dataUsage)
	if cfg.test {
		f.test = fs.String("test", "", p+"test data (default: hold out --test-frac of --data)")
		f.testFrac = fs.Float64("test-frac", 0.2, p+"fraction of rows held out for testing when --test is not given")
	}
	f.label = fs.String("label", "", p+"CSV label column: name or 0-based index (default: first column)")
	f.positive = fs.String("positive", "", p+"logistic loss: the label that becomes +1, e.g. '>50K'. Any two distinct labels are accepted ({0,1}, {1,2}, {-1,1}, text); "+
		"by default the larger is +1 (numerically when both are numbers, else the second in byte order). Labels compare as numbers when both are (1 = 1.0), "+
		"else as text without surrounding space and a trailing '.'; a file holding one class needs --positive")
	f.ignore = fs.String("ignore-columns", "", p+"CSV columns not to read, comma-separated names or 0-based indices (an ID, a free-text note)")
	f.fill = fs.String("fill", "", p+"fill missing feature cells (empty, NA, N/A, NaN, ?, null) with this public number; "+
		"a text column's become the category (missing). Never a statistic of the local rows: one row would then change the others")
	f.fillFile = fs.String("fill-file", "", p+"per-column fill values from a public JSON file {\"default\": N, \"columns\": {\"name\": N}} (the same on every node; enters the config hash)")
	f.categorical = fs.String("categorical", "none", p+"non-numeric CSV feature columns: none (error) or auto (one-hot)")
	f.delimiter = fs.String("delimiter", ",", p+"CSV field delimiter: one character, or tab")
	scaleHelp := p + "feature scaling: none|unitball|standardize|standardize+unitball|rownorm|standardize+rownorm; unitball (x/max(1,||x||)) needs no parameters"
	switch {
	case cfg.scale == scaleAuto:
		scaleHelp += "; auto is standardize+unitball from public parameters (the --schema's ranges, or the whole embedded data), else unitball, as every node can"
		if cfg.fit {
			scaleHelp += "; standardize and rownorm given explicitly are fitted on the pooled training rows (no node has them) unless --scale-file gives them"
		} else {
			scaleHelp += "; standardize and rownorm need --scale-file or --schema, they are never fitted on the local data"
		}
	case cfg.scale == "":
		scaleHelp += " (default: the run's, recorded in model.json); the others need --scale-file, they are never fitted on the evaluation data"
	case cfg.fit:
		scaleHelp += "; standardize and rownorm are fitted on the (pooled) training rows unless --scale-file gives them"
	default:
		scaleHelp += "; standardize and rownorm need --scale-file (public parameters, the same on every node), they are never fitted on the local data"
		if cfg.fitPublic {
			scaleHelp += " (--data embedded: fitted on the whole public embedded data, before --shard)"
		}
	}
	f.scale = fs.String("scale", string(cfg.scale), scaleHelp)
	f.scaleFile = fs.String("scale-file", "", p+"scaling parameters from this JSON file {\"kind\",\"mean\",\"std\",\"row_div\"} instead of fitting them")
	if cfg.intercept {
		f.intercept = fs.Float64("intercept", consensus.DefaultIntercept, p+"fit an intercept through a constant feature c in (0,1); 0 fits none. Rows become [sqrt(1-c^2) x, c]: "+
			"still of norm <= 1, so no privacy figure changes; a small c puts little noise on the intercept. The walk does not penalise it with --l1/--l2")
		tr := p + "squared loss: a public range LO:HI of the target; targets are mapped to (y - center)/half-width and predictions back"
		if cfg.fit {
			tr += " (default: the mean and standard deviation of the pooled training targets)"
		} else {
			tr += " (default: the --scale-file's target, else none: give one, unscaled targets train poorly)"
		}
		f.targetRange = fs.String("target-range", "", tr)
	}
	if cfg.intercept {
		f.schema = fs.String("schema", "", p+"a public schema every member shares (JSON: label, classes, features with a range or categories, fill): "+
			"its ranges scale the features (no statistic of private rows), and its hash enters the config hash")
	}
	if cfg.intercept && cfg.fit {
		f.schemaOut = fs.String("schema-out", "", "write a schema drafted from the training data (observed ranges, means and standard deviations, categories: review, round and replace them by public values before sharing)")
	}
	if cfg.classes {
		f.classes = fs.String("classes", "", p+"the run's classes, comma-separated in order (binary: negative,positive; 3 or more: the multinomial loss), "+
			"as the label column writes them; they enter the config hash, so every member maps labels alike, and a shard may lack some (default: the labels of --data)")
	}
	if cfg.fit {
		f.scaleOut = fs.String("scale-out", "", "write the scaling used (kind and parameters) to this JSON file, the format of --scale-file")
	}
	return f
}

// isSet reports whether the flag name was given on the command line.
func (f *dataFlags) isSet(name string) bool {
	set := false
	f.fs.Visit(func(fl *flag.Flag) { set = set || fl.Name == name })
	return set
}

func (f *dataFlags) embedded() bool { return *f.path == "" || *f.path == "embedded" }

// delim parses --delimiter.
func (f *dataFlags) delim() (rune, error) {
	s := *f.delimiter
	switch strings.ToLower(s) {
	case "tab", `\t`:
		return '\t', nil
	case "":
		return ',', nil
	}
	r, n := utf8.DecodeRuneInString(s)
	if n != len(s) || r == utf8.RuneError || r == '"' || r == '\n' || r == '\r' || r == ' ' {
		return 0, fmt.Errorf("--delimiter must be one character (not a quote, space or newline) or tab, got %q", s)
	}
	return r, nil
}

// check validates the data flags for a run with the given loss; its errors are usage
// errors (the command prints them with its usage).
func (f *dataFlags) check(loss consensus.Loss) error {
	if _, err := f.delim(); err != nil {
		return err
	}
	if *f.categorical != "none" && *f.categorical != "auto" {
		return fmt.Errorf("--categorical must be none or auto, got %q", *f.categorical)
	}
	if *f.positive != "" && loss != consensus.Logistic {
		return fmt.Errorf("--positive applies to the logistic loss (class labels), not to the %s loss (numeric targets)", loss)
	}
	if f.testFrac != nil && !(*f.testFrac >= 0 && *f.testFrac < 1) {
		return fmt.Errorf("--test-frac must be in [0,1), got %v", *f.testFrac)
	}
	if f.embedded() {
		for _, n := range []string{"label", "categorical", "delimiter"} {
			if f.isSet(n) {
				return fmt.Errorf("--%s applies to a --data file, not to the embedded data", n)
			}
		}
	}
	if *f.scale == "" && f.cfg.scale == "" || consensus.Scaling(*f.scale) == scaleAuto {
		return nil // the run's scaling, or auto: resolved when the data are loaded
	}
	kind, err := consensus.ParseScaling(*f.scale)
	if err != nil {
		return fmt.Errorf("--scale: %v", err)
	}
	if kind.DataDependent() && !f.mayFit() && *f.scaleFile == "" && !f.hasSchema() {
		where := "this node's own rows: nodes with different data would scale their features differently, and the parameters would describe private data"
		if f.cfg.scale == "" {
			where = "the evaluation data: the model was trained on the run's scaling, not on one fitted to its test set"
		}
		return fmt.Errorf("--scale %s would be fitted on %s; give public parameters with --scale-file FILE, or use --scale unitball (no parameters)", kind, where)
	}
	return nil
}

// loadRequest is what a command knows about the data it loads.
type loadRequest struct {
	loss consensus.Loss
	// multiclass accepts a label of more than two classes (the multinomial loss).
	multiclass bool
	seed       uint64 // train/test split
	// dims, when > 0, is the number of features the data must have (a model's): LIBSVM
	// files are padded to it, more features are an error.
	dims int
	// run is the run's scaling recorded in model.json (account models; nil: the files
	// record none).
	run *consensus.Scaler
}

// loadedData is the prepared data: the features of train and test scaled with one
// scaler, labels in {-1, +1} for the logistic loss.
type loadedData struct {
	train, test *consensus.Dataset
	name        string
	scaler      *consensus.Scaler
	// scaling names the scaling for reports: its kind, and where its parameters came
	// from when it has any.
	scaling string
	// warnings are what the reader found suspicious but accepted (an ID-like column).
	warnings []string
	// schema is the run's public schema (--schema), nil without one.
	schema *consensus.Schema
}

// load reads, relabels, splits and scales the data of the flags (check must have passed).
func (f *dataFlags) load(req loadRequest) (*loadedData, error) {
	delim, _ := f.delim()
	if req.run.HasIntercept() && req.dims > 0 {
		req.dims-- // the model's last coordinate is the intercept, not a feature
	}
	opt := consensus.LoadOptions{Label: *f.label, Categorical: *f.categorical, Delimiter: delim,
		Binary: req.loss.Classifies(), Multiclass: req.multiclass || req.loss == consensus.Multinomial,
		Positive: *f.positive, MinCols: req.dims, MaxCols: req.dims}
	if *f.ignore != "" {
		opt.Ignore = strings.Split(*f.ignore, ",")
	}
	schema, err := f.parseOptions(&opt)
	if err != nil {
		return nil, err
	}
	out := &loadedData{name: "embedded:breast_cancer"}
	var full *consensus.Dataset
	if f.embedded() {
		full, err = consensus.ParseEmbedded(opt)
	} else {
		out.name = *f.path
		full, err = consensus.Load(*f.path, opt)
	}
	if err != nil {
		return nil, f.hint(err, req.loss)
	}
	if req.dims > 0 && full.Cols != req.dims {
		return nil, fmt.Errorf("%s has %d features, the model has %d", out.name, full.Cols, req.dims)
	}
	if full, err = applySchema(schema, full, out); err != nil {
		return nil, err
	}
	out.warnings = append(out.warnings, full.Warnings...)
	out.schema = schema
	train, test := full, (*consensus.Dataset)(nil)
	if f.test != nil && *f.test != "" {
		topt := opt
		topt.Classes = full.Classes
		// A LIBSVM test file may lack the training file's last features: pad it; more
		// features are an error naming the line.
		topt.MinCols, topt.MaxCols = train.Cols, train.Cols
		if test, err = consensus.Load(*f.test, topt); err != nil {
			return nil, f.hint(err, req.loss)
		}
		if train.Label != "" && test.Label != "" {
			// Both files name their columns (a CSV header): match them by name.
			if test, err = test.InOrderOf(train.Features, out.name); err != nil {
				return nil, err
			}
		}
		if test, err = applySchema(schema, test, nil); err != nil {
			return nil, err
		}
		if test.Cols != train.Cols {
			return nil, fmt.Errorf("%s has %d features, %s has %d (with --categorical auto both files must hold the same categories)", *f.test, test.Cols, out.name, train.Cols)
		}
	} else if f.testFrac != nil && *f.testFrac > 0 {
		train, test = consensus.TrainTest(full, *f.testFrac, req.seed)
	}
	sc, how, err := f.scaler(train, full, schema, req)
	if err != nil {
		return nil, err
	}
	if sc.Kind == consensus.ScaleUnitBall && consensus.Scaling(*f.scale) == scaleAuto {
		out.warnings = append(out.warnings, magnitudeWarning(train)...)
	}
	switch {
	case req.run != nil:
		sc.Intercept = req.run.Intercept
		sc.TargetCenter, sc.TargetScale = req.run.TargetCenter, req.run.TargetScale
	case f.intercept != nil:
		if c := *f.intercept; !(c >= 0 && c < 1) {
			return nil, f.usage("--intercept must be in [0, 1) (0: no intercept), got %v", c)
		}
		sc.Intercept = *f.intercept
		if err := f.target(sc, train, schema, req.loss); err != nil {
			return nil, err
		}
	}
	out.scaler, out.scaling = sc, how
	out.train = sc.Apply(train)
	if test != nil {
		out.test = sc.Apply(test)
	}
	return out, f.writeOutputs(full, sc)
}

// writeOutputs writes --schema-out (a schema drafted from the data) and --scale-out.
func (f *dataFlags) writeOutputs(full *consensus.Dataset, sc *consensus.Scaler) error {
	write := func(path *string, v any) error {
		if path == nil || *path == "" {
			return nil
		}
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(*path, append(b, '\n'), 0o644)
	}
	if err := write(f.schemaOut, consensus.DraftSchema(full)); err != nil {
		return err
	}
	return write(f.scaleOut, sc)
}

// parseOptions sets the options of the fill rule, the schema and --classes, and returns
// the schema (nil without one).
func (f *dataFlags) parseOptions(opt *consensus.LoadOptions) (*consensus.Schema, error) {
	fill, err := f.fillRule()
	if err != nil {
		return nil, err
	}
	opt.Fill = fill
	var schema *consensus.Schema
	if f.hasSchema() {
		if schema, err = consensus.LoadSchema(*f.schema); err != nil {
			return nil, err
		}
		f.schemaOptions(schema, opt)
	}
	if f.classes != nil && *f.classes != "" {
		cl, err := parseClasses(*f.classes)
		if err != nil {
			return nil, err
		}
		if sl := schema.ClassListOrNil(); sl != nil && strings.Join(sl.Names(), ",") != strings.Join(cl.Names(), ",") {
			return nil, fmt.Errorf("--classes %s differs from the schema's classes %q", *f.classes, sl.Names())
		}
		opt.Classes = cl
	}
	return schema, nil
}

// warn prints the reader's warnings.
func (ld *loadedData) warn(w io.Writer) {
	for _, m := range ld.warnings {
		fmt.Fprintln(w, "warning: "+m)
	}
}

// target sets the target scaling of a squared-loss run: --target-range, else the
// schema's range, else the scale file's, else (simulators) the pooled training targets'
// mean and deviation.
func (f *dataFlags) target(sc *consensus.Scaler, train *consensus.Dataset, schema *consensus.Schema, loss consensus.Loss) error {
	if loss != consensus.Squared {
		if *f.targetRange != "" {
			return fmt.Errorf("--target-range applies to the squared loss (numeric targets), not to the %s loss", loss)
		}
		sc.TargetCenter, sc.TargetScale = 0, 0
		return nil
	}
	if r := *f.targetRange; r != "" {
		a, b, ok := strings.Cut(r, ":")
		lo, err1 := strconv.ParseFloat(strings.TrimSpace(a), 64)
		hi, err2 := strconv.ParseFloat(strings.TrimSpace(b), 64)
		if !ok || err1 != nil || err2 != nil {
			return fmt.Errorf("--target-range must be LO:HI (two numbers), got %q", r)
		}
		if err := sc.SetTargetRange(lo, hi); err != nil {
			return fmt.Errorf("--target-range: %v", err)
		}
		return nil
	}
	if schema != nil && schema.TargetMin != nil {
		return sc.SetTargetRange(*schema.TargetMin, *schema.TargetMax)
	}
	if !sc.HasTarget() && f.cfg.fit {
		sc.FitTarget(train)
	}
	return nil
}

// fillRule returns the rule of --fill and --fill-file (nil for none): the file's columns,
// and its default or --fill for the others.
func (f *dataFlags) fillRule() (*consensus.FillRule, error) {
	if *f.fill == "" && *f.fillFile == "" {
		return nil, nil
	}
	r := &consensus.FillRule{}
	if *f.fillFile != "" {
		b, err := os.ReadFile(*f.fillFile)
		if err != nil {
			return nil, fmt.Errorf("--fill-file: %v", err)
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(r); err != nil {
			return nil, fmt.Errorf("--fill-file %s: %v (want {\"default\": N, \"columns\": {\"name\": N}})", *f.fillFile, err)
		}
	}
	if *f.fill != "" {
		v, err := strconv.ParseFloat(strings.TrimSpace(*f.fill), 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, f.usage("--fill must be a finite number, got %q", *f.fill)
		}
		r.Default = &v
	}
	for c, v := range r.Columns {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("--fill-file: column %q: fill value %v is not finite", c, v)
		}
	}
	return r, nil
}

// parseClasses parses --classes: two classes (negative, positive) or more (multinomial).
func parseClasses(s string) (*consensus.Classes, error) {
	parts := strings.Split(s, ",")
	seen := map[string]bool{}
	for i, p := range parts {
		parts[i] = strings.TrimSpace(p)
		if parts[i] == "" || seen[parts[i]] {
			return nil, fmt.Errorf("--classes %q: every class must be named once", s)
		}
		seen[parts[i]] = true
	}
	switch len(parts) {
	case 0, 1:
		return nil, fmt.Errorf("--classes %q: a label needs two classes or more", s)
	case 2:
		return &consensus.Classes{Negative: parts[0], Positive: parts[1]}, nil
	}
	return &consensus.Classes{List: parts}, nil
}

// problem returns prob for the loaded data (consensus.Problem.For): the walk's or the
// neighbour exchange's.
func (ld *loadedData) problem(prob consensus.Problem, walk bool) consensus.Problem {
	return prob.For(ld.train, ld.scaler.HasIntercept(), walk)
}

// scaler resolves the scaling: --scale-file, else --scale (fitted on train when the
// command may fit), else the run's. how describes it for reports.
func (f *dataFlags) scaler(train, full *consensus.Dataset, schema *consensus.Schema, req loadRequest) (sc *consensus.Scaler, how string, err error) {
	scaleSet := f.isSet("scale") && consensus.Scaling(*f.scale) != scaleAuto
	defer func() {
		if err != nil || req.run == nil {
			return
		}
		c := *sc
		c.Intercept = req.run.Intercept // the intercept is the run's (load sets it)
		if c.Fingerprint() != req.run.Fingerprint() {
			sc, err = nil, fmt.Errorf("the scaling given (%s) differs from the run's, recorded in model.json (%s): the model only applies to features scaled as in the run",
				describeScaler(sc), describeScaler(req.run))
		}
	}()
	if *f.scaleFile != "" {
		s, err := consensus.LoadScaler(*f.scaleFile, train.Cols)
		if err != nil {
			return nil, "", err
		}
		if scaleSet {
			if k, _ := consensus.ParseScaling(*f.scale); k != s.Kind {
				return nil, "", fmt.Errorf("--scale %s, but %s holds a %s scaling", k, *f.scaleFile, s.Kind)
			}
		}
		return s, string(s.Kind) + " from " + *f.scaleFile, nil
	}
	if !scaleSet && f.cfg.scale == "" {
		if req.run == nil {
			return nil, "", errors.New("the model.json files record no scaling (written by an older version, or by a testnet that scaled the data itself): give the run's with --scale or --scale-file")
		}
		return req.run, string(req.run.Kind) + " (the run's, from model.json)", nil
	}
	if !scaleSet && req.run == nil && f.cfg.scale == scaleAuto {
		var public *consensus.Dataset
		if f.embedded() {
			public = full
		}
		s, how, err := consensus.AutoScaler(schema, public)
		if schema != nil {
			how = "standardize+unitball from the ranges of " + *f.schema
		}
		return s, how, err
	}
	kind, err := consensus.ParseScaling(*f.scale)
	if err != nil {
		return nil, "", err
	}
	if schema != nil {
		s, err := schema.Scaler(kind)
		return s, string(kind) + " from the ranges of " + *f.schema, err
	}
	if kind.DataDependent() && !f.mayFit() {
		// check refuses this; kept as a guard against fitting on private or test rows.
		return nil, "", fmt.Errorf("--scale %s needs --scale-file", kind)
	}
	s, err := consensus.FitScaler(train, kind)
	if err != nil {
		return nil, "", err
	}
	how = string(kind)
	switch {
	case kind.DataDependent() && f.cfg.fit:
		how += " (fitted on the pooled training rows)"
	case kind.DataDependent():
		how += " (fitted on the whole public embedded data)"
	}
	return s, how, nil
}

// hasSchema reports whether --schema was given.
func (f *dataFlags) hasSchema() bool { return f.schema != nil && *f.schema != "" }

// schemaOptions sets the parsing options a schema decides: its label column, classes and
// fill rule where no flag gives them, and one-hot encoding when it has text columns.
func (f *dataFlags) schemaOptions(s *consensus.Schema, opt *consensus.LoadOptions) {
	if s.Label != "" && !f.isSet("label") {
		opt.Label = s.Label
	}
	if cl := s.ClassListOrNil(); cl != nil {
		opt.Classes = cl
	}
	if s.Fill != nil && opt.Fill == nil {
		opt.Fill = s.Fill
	}
	for _, ft := range s.Features {
		if len(ft.Categories) > 0 {
			opt.Categorical = "auto"
		}
	}
}

// applySchema maps d to the schema's features (nothing without a schema); out, when not
// nil, gets a warning for the cells clipped into their ranges.
func applySchema(s *consensus.Schema, d *consensus.Dataset, out *loadedData) (*consensus.Dataset, error) {
	if s == nil {
		return d, nil
	}
	r, clipped, err := s.Apply(d)
	if err != nil {
		return nil, err
	}
	if clipped > 0 && out != nil {
		out.warnings = append(out.warnings, fmt.Sprintf("%s: %d cell(s) outside the schema's ranges were clipped into them", d.Name, clipped))
	}
	return r, nil
}

// magnitudeWarning warns when a unitball run's columns differ in magnitude by more than
// 100x: the largest then decide every row's direction.
func magnitudeWarning(d *consensus.Dataset) []string {
	lo, hi, loName, hiName := math.Inf(1), 0.0, "", ""
	for j := 0; j < d.Cols; j++ {
		m := 0.0
		for i := 0; i < d.Rows; i++ {
			m = math.Max(m, math.Abs(d.Row(i)[j]))
		}
		if m == 0 {
			continue
		}
		if m < lo {
			lo, loName = m, d.Features[j]
		}
		if m > hi {
			hi, hiName = m, d.Features[j]
		}
	}
	if !(hi > 100*lo) {
		return nil
	}
	return []string{fmt.Sprintf("no public scaling parameters: rows are only divided by max(1, ||x||), as a node without them would, and the columns' largest "+
		"magnitudes range from %.3g (%s) to %.3g (%s), so the largest columns decide every row; give every member a --schema with public ranges "+
		"(testnet --schema-out drafts one from the data, to review before sharing)", lo, loName, hi, hiName)}
}

// mayFit reports whether a data-dependent scaling may be fitted on the data loaded: in
// the simulators, and on the public embedded data where the command allows it.
func (f *dataFlags) mayFit() bool { return f.cfg.fit || f.cfg.fitPublic && f.embedded() }

// describeScaler names a scaler for messages: its kind and, with parameters, the start
// of its fingerprint.
func describeScaler(s *consensus.Scaler) string {
	fp := s.Fingerprint()
	if fp == "" {
		return "none"
	}
	if k, h, ok := strings.Cut(fp, ":"); ok && len(h) > 12 {
		return k + " with parameters " + h[:12]
	}
	return fp
}

// hint adds advice naming this command's flags to a data error.
func (f *dataFlags) hint(err error, loss consensus.Loss) error {
	var h string
	var de *consensus.DelimiterError
	switch {
	case errors.As(err, &de):
		d := string(de.Delimiter)
		if de.Delimiter == '\t' {
			d = "tab"
		}
		h = "pass --delimiter " + strconv.Quote(d)
	case errors.Is(err, consensus.ErrNotBinary):
		h = "is --label the right column?"
		if f.cfg.lossFlag {
			h += " A numeric target needs --loss squared."
		}
		if f.cfg.intercept && strings.Contains(err.Error(), "a third label") {
			h += " A label of three or more classes is fitted by the walk (multinomial loss) and the neighbour-exchange algorithms (one-vs-rest), not by this command."
		}
	case errors.Is(err, consensus.ErrTooManyClasses):
		h = "is --label the right column?"
		if f.cfg.lossFlag && strings.Contains(err.Error(), "regression target") {
			h += " A numeric target needs --loss squared."
		}
		if f.classes != nil {
			h += " To fit that many classes, list them with --classes or in a --schema."
		} else {
			h += " To fit that many classes, list them in a --schema."
		}
	case errors.Is(err, consensus.ErrOneClass):
		h = "say which label is +1 with --positive LABEL (with the same value on every node)"
	case errors.Is(err, consensus.ErrPositive):
		h = "--positive must be one of the two labels"
	case errors.Is(err, consensus.ErrNotNumeric) && strings.Contains(err.Error(), "decimal comma"):
		return err
	case errors.Is(err, consensus.ErrEmptyCell):
		h = "--fill N (or --fill-file FILE) fills missing cells with public values"
	case errors.Is(err, consensus.ErrNotNumeric) && strings.Contains(err.Error(), "an ID?"):
		h = "--ignore-columns NAME leaves a column out"
	case errors.Is(err, consensus.ErrNotNumeric):
		h = "--categorical auto one-hot encodes text columns"
	case errors.Is(err, consensus.ErrLabelNotNumeric):
		h = "is --label the right column?"
		if loss != consensus.Logistic && f.cfg.lossFlag {
			h += " Class labels need --loss logistic."
		}
	default:
		return err
	}
	if strings.HasPrefix(h, "is --label the right column?") && f.label != nil && *f.label == "" {
		h = "without --label the label is the first column; name it with --label NAME." + strings.TrimPrefix(h, "is --label the right column?")
	}
	return fmt.Errorf("%w; hint: %s", err, h)
}

// regressionLine is the summary line of the RMSE and R^2 of a squared-loss run, "" for
// other runs.
func regressionLine(r *sim.Report) string {
	if r.TrainRMSE == nil && r.RMSE == nil {
		return ""
	}
	part := func(what string, rmse, r2 *float64) string {
		if rmse == nil {
			return ""
		}
		s := fmt.Sprintf("   %s RMSE %.6g", what, *rmse)
		if r2 != nil {
			s += fmt.Sprintf(" R^2 %.4f", *r2)
		}
		return s
	}
	return "regression" + part("train", r.TrainRMSE, r.TrainR2) + part("test", r.RMSE, r.R2) + "\n"
}
