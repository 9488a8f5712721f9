package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/gossip"
	"github.com/dpadmm/dpadmm/node"
	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/privacy"
)

const accountModelsHelp = `Usage:
  dpadmm account models [--allow-missing] [--json] [--out F.json] [--data F [--label L] [--positive P] [--scale S | --scale-file F] [--loss L]] FILE|DIR ...

models: the network view of a neighbour-exchange run (dpadmm node --algo radmm|mradmm|...)
from the members' model.json files (a DIR means DIR/model.json). Every file must come from
the same run (run name, config hash, member list, algorithm, graph, iterations, dimension)
and hold a distinct member index. It prints:
  - the averaged model f_bar = (1/N) sum_i f_i(T), the paper's averaged classifier, and the
    largest node deviation max_i ||f_i(T) - f_bar||_2;
  - one row per member: index, peer (short id), its Theorem V.1 epsilon, whether its
    conditions hold, stale uses, inexact solves, its deviation;
  - the network figure of Definition V.1: the maximum over the members of the per-node
    pure epsilon, with the theorem and its conditions, or "NO guarantee" naming the first
    member without one (or the missing members) and the reason.
A member without a file is an error: the average needs every member. --allow-missing
averages the files given and says so; the network figure is then not a guarantee.

--data evaluates f_bar on a dataset (e.g. a public test set) with the run's loss (recorded
in model.json; --loss for older files): logistic gives accuracy, the share of the most
frequent class (a warning when the accuracy is no better) and mean loss, squared the mean
loss, the RMSE and R^2. The rows are read through f_bar's predictor, as 'dpadmm eval'
reads them (columns by name, the run's scaling and ranges); with --scale or --scale-file,
or for files without a predictor, as 'dpadmm node' reads data, scaled with the scaling
the model.json files record; a scaling with parameters is never fitted on the evaluation
data. The other data flags (--label,
--positive, --categorical, --delimiter) are those of 'dpadmm node'.

Keys of --json (stable; an epsilon of null means no guarantee, as in model.json):
  run, config_hash, algo, graph, graph_seed, nodes, iters, dims
  averaged        member indices averaged (ascending)
  missing         member indices without a file (empty unless --allow-missing)
  partial         true when missing is not empty (f_bar is then not the network average)
  model           f_bar, dims numbers
  max_node_deviation
  scaling         the run's feature scaling {kind, mean, std, row_div} (absent when the
                  files record none)
  per_node        [{index, peer, peer_short, file, epsilon, formula_epsilon, ledger_epsilon,
                    conditions_hold, reason, secure_noise, stale_uses, inexact_solves,
                    deviation}] by index
  gossip_privacy  {epsilon, formula_epsilon, worst_node, given_max_epsilon, theorem,
                   conditions, conditions_hold, reason, failing_nodes, secure_noise, scope}
  predictor       f_bar as a self-describing model (the members' predictor, averaged
                  weights); absent when a file has none or they differ: predictor_note
  evaluation      {data, rows, loss, scale, accuracy and majority_share (logistic only),
                   mean_loss, rmse and r2 (squared only; r2 absent when the targets are
                   constant), warnings} (with --data)
--out writes {run, config_hash, algo, nodes, averaged, missing, partial, dims, model, scaling,
predictor}: a model file for 'dpadmm predict', eval and export.
`

// maxModelFile caps the size of one model.json read by "account models" (bytes).
const maxModelFile = 64 << 20

// modelsNode is one member's row of "account models".
type modelsNode struct {
	Index     int    `json:"index"`
	Peer      string `json:"peer"`
	PeerShort string `json:"peer_short"`
	File      string `json:"file"`
	// The member's own figure (its model.json): epsilon null when it has no guarantee.
	privacy.PureFigure
	Ledger      privacy.Epsilon `json:"ledger_epsilon"`
	SecureNoise bool            `json:"secure_noise"`
	StaleUses   int             `json:"stale_uses"`
	Inexact     int             `json:"inexact_solves"`
	Deviation   float64         `json:"deviation"` // ||f_i - f_bar||_2
}

// modelsEval is the evaluation of f_bar on a dataset (--data): its scores as eval gives
// them (accuracy, majority share and warnings; RMSE, R^2).
type modelsEval struct {
	Data  string `json:"data"`
	Rows  int    `json:"rows"`
	Loss  string `json:"loss"`
	Scale string `json:"scale"`
	evalScores
	spec *consensus.ModelSpec // the predictor the rows were scored with (nil: the data flags' path)
}

// modelsReport is the JSON output of "account models".
type modelsReport struct {
	Run          string             `json:"run"`
	ConfigHash   string             `json:"config_hash"`
	Algo         string             `json:"algo"`
	Loss         string             `json:"loss,omitempty"` // from the files (older files have none)
	Graph        string             `json:"graph"`
	GraphSeed    uint64             `json:"graph_seed"`
	Nodes        int                `json:"nodes"`
	Iters        int                `json:"iters"`
	Dims         int                `json:"dims"`
	Averaged     []int              `json:"averaged"`
	Missing      []int              `json:"missing"`
	Partial      bool               `json:"partial"`
	Model        []float64          `json:"model"`
	MaxDeviation float64            `json:"max_node_deviation"`
	PerNode      []modelsNode       `json:"per_node"`
	Privacy      node.NetworkFigure `json:"gossip_privacy"`
	Eval         *modelsEval        `json:"evaluation,omitempty"`

	// Scaling is the run's feature scaling, as the files record it (absent: none recorded).
	Scaling *consensus.Scaler `json:"scaling,omitempty"`
	// Predictor is f_bar in the self-describing form of predict, eval and export: the
	// members' common predictor with the averaged weights; PredictorNote says why there
	// is none (a member's file has none, or the members' differ).
	Predictor     *consensus.ModelSpec `json:"predictor,omitempty"`
	PredictorNote string               `json:"predictor_note,omitempty"`
}

// averagedModel is the content of --out.
type averagedModel struct {
	Run        string    `json:"run"`
	ConfigHash string    `json:"config_hash"`
	Algo       string    `json:"algo"`
	Nodes      int       `json:"nodes"`
	Averaged   []int     `json:"averaged"`
	Missing    []int     `json:"missing"`
	Partial    bool      `json:"partial"`
	Dims       int       `json:"dims"`
	Model      []float64 `json:"model"`
	// Scaling is the run's feature scaling, which inputs of the model must get first.
	Scaling *consensus.Scaler `json:"scaling,omitempty"`
	// Predictor makes the file a model for dpadmm predict, eval and export.
	Predictor *consensus.ModelSpec `json:"predictor,omitempty"`
}

// loadedModel is one validated model.json.
type loadedModel struct {
	file string
	m    node.RADMMModel
}

// errMissingMembers is returned (wrapped) when members have no file and --allow-missing is off.
var errMissingMembers = errors.New("the average needs every member; pass --allow-missing to average the ones given")

func runAccountModels(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("account models", accountModelsHelp, stdout)
	allowMissing := fs.Bool("allow-missing", false, "average the files given when members have none (the output says so; no network guarantee)")
	asJSON := fs.Bool("json", false, "print JSON (keys above)")
	outPath := fs.String("out", "", "write the averaged model as JSON to this file")
	df := addDataFlags(fs, modelsData)
	lossName := fs.String("loss", "logistic", "with --data: the run's loss, logistic|squared (default: the loss the model.json files record; files written before the loss was recorded need it)")
	files, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return usageErr(stderr, "models: want at least one model.json file or data directory")
	}
	lossSet := false
	fs.Visit(func(f *flag.Flag) { lossSet = lossSet || f.Name == "loss" })
	loss, err := consensus.ParseLoss(*lossName)
	if err != nil {
		return usageErr(stderr, "models: --loss: %v", err)
	}
	if *df.path == "" {
		for _, n := range []string{"label", "positive", "categorical", "delimiter", "scale", "scale-file"} {
			if df.isSet(n) {
				return usageErr(stderr, "models: --%s needs --data", n)
			}
		}
	}
	if err := df.check(loss); err != nil {
		return usageErr(stderr, "models: %v", err)
	}
	rep, err := modelsFromFiles(files, *allowMissing)
	if err != nil {
		return err
	}
	// The files record the run's loss: it is the default for --data, and a different
	// --loss is refused.
	if rep.Loss != "" {
		fl, err := consensus.ParseLoss(rep.Loss)
		if err != nil {
			return fmt.Errorf("models: the files record an unknown loss %q", rep.Loss)
		}
		if lossSet && fl != loss {
			return usageErr(stderr, "models: --loss %s, but the run's model.json files record the %s loss", loss, fl)
		}
		loss = fl
		if err := df.check(loss); err != nil {
			return usageErr(stderr, "models: %v (the run used the %s loss)", err, loss)
		}
	}
	if *df.path != "" {
		ev, err := evalAveraged(rep, df, loss)
		if err != nil {
			return fmt.Errorf("models: --data: %w", err)
		}
		rep.Eval = ev
	}
	if *outPath != "" {
		am := averagedModel{Run: rep.Run, ConfigHash: rep.ConfigHash, Algo: rep.Algo, Nodes: rep.Nodes,
			Averaged: rep.Averaged, Missing: rep.Missing, Partial: rep.Partial, Dims: rep.Dims, Model: rep.Model, Scaling: rep.Scaling,
			Predictor: rep.Predictor}
		if err := writeFileWith(*outPath, func(w io.Writer) error { return writeJSON(w, am) }); err != nil {
			return err
		}
	}
	if *asJSON {
		return writeJSON(stdout, rep)
	}
	printModelsReport(stdout, rep, *outPath)
	return nil
}

// readGossipModel reads and validates one model.json of a neighbour-exchange run (path
// may be a data directory). Every error names the file.
func readGossipModel(path string) (loadedModel, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, store.ModelFile)
	}
	f, err := os.Open(path)
	if err != nil {
		return loadedModel{}, fmt.Errorf("models: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxModelFile+1))
	if err != nil {
		return loadedModel{}, fmt.Errorf("models: %s: %w", path, err)
	}
	if len(b) > maxModelFile {
		return loadedModel{}, fmt.Errorf("models: %s: larger than %d bytes: not a model.json", path, maxModelFile)
	}
	m, err := decodeGossipModel(b)
	if err != nil {
		return loadedModel{}, fmt.Errorf("models: %s: %w", path, err)
	}
	return loadedModel{file: path, m: m}, nil
}

// decodeGossipModel decodes and checks one model.json (cheap checks first).
func decodeGossipModel(b []byte) (node.RADMMModel, error) {
	var m node.RADMMModel
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("not a valid model.json: %w", err)
	}
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case m.Algo == "" || len(m.Members) == 0:
		return m, errors.New("not the model.json of a neighbour-exchange run (no algo or members; a walk's model.json already holds the network model)")
	case m.Run == "":
		return m, errors.New("no run name")
	case m.ConfigHash == "":
		return m, errors.New("no config hash")
	case m.Nodes != len(m.Members):
		return m, fmt.Errorf("nodes = %d but %d members listed", m.Nodes, len(m.Members))
	case m.Index < 0 || m.Index >= m.Nodes:
		return m, fmt.Errorf("index %d out of range [0, %d)", m.Index, m.Nodes)
	case m.Peer != "" && m.Members[m.Index] != m.Peer:
		return m, fmt.Errorf("peer %s is not member %d (%s) of its own member list", m.Peer, m.Index, m.Members[m.Index])
	case m.Dims < 1:
		return m, fmt.Errorf("dims = %d must be >= 1", m.Dims)
	case len(m.Model) != m.Dims:
		return m, fmt.Errorf("model has %d coordinates, dims says %d", len(m.Model), m.Dims)
	case m.Iters < 0:
		return m, fmt.Errorf("iters = %d must be >= 0", m.Iters)
	case m.Inexact < 0:
		return m, fmt.Errorf("inexact_solves = %d must be >= 0", m.Inexact)
	}
	for j, v := range m.Model {
		if !finite(v) {
			return m, fmt.Errorf("model coordinate %d is %v, not finite", j, v)
		}
	}
	// The epsilons were checked by privacy.Epsilon: a number >= 0, or null (no guarantee;
	// files of earlier builds wrote -1, read the same).
	p := m.Privacy
	if p.Theorem == "" {
		return m, errors.New("privacy figure names no theorem")
	}
	return m, nil
}

// modelsFromFiles reads, cross-checks and averages the files.
func modelsFromFiles(files []string, allowMissing bool) (*modelsReport, error) {
	var ms []loadedModel
	for _, f := range files {
		lm, err := readGossipModel(f)
		if err != nil {
			return nil, err
		}
		ms = append(ms, lm)
	}
	ref := ms[0]
	seen := map[int]string{}
	for _, lm := range ms {
		m, r := lm.m, ref.m
		mismatch := func(what string, a, b any) error {
			return fmt.Errorf("models: %s: %s %v differs from %s in %s (%v): not the same run", lm.file, what, a, ref.file, what, b)
		}
		switch {
		case m.Run != r.Run:
			return nil, mismatch("run", strconv.Quote(m.Run), strconv.Quote(r.Run))
		case m.ConfigHash != r.ConfigHash:
			return nil, mismatch("config hash", m.ConfigHash, r.ConfigHash)
		case !slices.Equal(m.Members, r.Members):
			return nil, mismatch("member list", m.Members, r.Members)
		case m.Algo != r.Algo:
			return nil, mismatch("algo", m.Algo, r.Algo)
		case m.Loss != r.Loss:
			return nil, mismatch("loss", strconv.Quote(m.Loss), strconv.Quote(r.Loss))
		case m.Graph != r.Graph || m.GraphSeed != r.GraphSeed:
			return nil, mismatch("graph", fmt.Sprintf("%s (seed %d)", m.Graph, m.GraphSeed), fmt.Sprintf("%s (seed %d)", r.Graph, r.GraphSeed))
		case m.Dims != r.Dims:
			return nil, mismatch("dimension", m.Dims, r.Dims)
		case m.Iters != r.Iters:
			return nil, mismatch("iteration count", m.Iters, r.Iters)
		case (m.Scaling == nil) != (r.Scaling == nil) || m.Scaling.Fingerprint() != r.Scaling.Fingerprint():
			return nil, mismatch("scaling", describeRecorded(m.Scaling), describeRecorded(r.Scaling))
		}
		if prev, dup := seen[m.Index]; dup {
			return nil, fmt.Errorf("models: %s and %s both hold member index %d", prev, lm.file, m.Index)
		}
		seen[m.Index] = lm.file
	}
	sort.Slice(ms, func(a, b int) bool { return ms[a].m.Index < ms[b].m.Index })
	r := ref.m
	rep := &modelsReport{
		Run: r.Run, ConfigHash: r.ConfigHash, Algo: r.Algo, Loss: r.Loss, Graph: r.Graph, GraphSeed: r.GraphSeed,
		Nodes: r.Nodes, Iters: r.Iters, Dims: r.Dims, Averaged: []int{}, Missing: []int{}, Scaling: r.Scaling,
	}
	for i := 0; i < r.Nodes; i++ {
		if _, ok := seen[i]; !ok {
			rep.Missing = append(rep.Missing, i)
		}
	}
	if len(rep.Missing) > 0 {
		rep.Partial = true
		if !allowMissing {
			return nil, fmt.Errorf("models: members %s of %d have no file: %w", intList(rep.Missing), r.Nodes, errMissingMembers)
		}
	}
	// f_bar = (1/N) sum_i f_i and the deviations.
	models := make([][]float64, len(ms))
	for k, lm := range ms {
		models[k] = lm.m.Model
	}
	avg, devs := gossip.Average(models, r.Dims)
	rep.Model = avg
	for k, lm := range ms {
		m, d := lm.m, devs[k]
		rep.MaxDeviation = math.Max(rep.MaxDeviation, d)
		rep.Averaged = append(rep.Averaged, m.Index)
		rep.PerNode = append(rep.PerNode, modelsNode{
			Index: m.Index, Peer: m.Peer, PeerShort: shortPeer(m.Peer), File: lm.file,
			PureFigure: m.Privacy.PureFigure, Ledger: m.Privacy.Ledger, SecureNoise: m.Privacy.SecureNoise,
			StaleUses: len(m.Stale), Inexact: m.Inexact, Deviation: d,
		})
	}
	rep.Privacy = networkFigure(ms, rep.Missing)
	rep.Predictor, rep.PredictorNote = averagedPredictor(ms, avg)
	return rep, nil
}

// averagedPredictor is the predictor of f_bar: the members' predictor (they must agree on
// everything but the weights, and each must score with the model its file holds) with
// the averaged weights. Without one, the note says why.
func averagedPredictor(ms []loadedModel, avg []float64) (*consensus.ModelSpec, string) {
	ref := ms[0]
	for _, lm := range ms {
		p := lm.m.Predictor
		if p == nil {
			return nil, fmt.Sprintf("%s holds no predictor (written by an earlier version)", lm.file)
		}
		if err := p.Validate(); err != nil {
			return nil, fmt.Sprintf("%s: predictor: %v", lm.file, err)
		}
		if !slices.Equal(p.Flat(), lm.m.Model) {
			return nil, fmt.Sprintf("%s: its predictor's weights are not its model", lm.file)
		}
		if lm.m.Loss != "" && p.Loss != lm.m.Loss {
			return nil, fmt.Sprintf("%s: its predictor's loss %s is not the file's %s", lm.file, p.Loss, lm.m.Loss)
		}
		if err := p.SameInputs(ref.m.Predictor); err != nil {
			return nil, fmt.Sprintf("the predictors of %s and %s do not describe the same model: %v", ref.file, lm.file, err)
		}
	}
	spec, err := ref.m.Predictor.WithWeights(avg)
	if err != nil {
		return nil, fmt.Sprintf("averaged predictor: %v", err)
	}
	return spec, ""
}

// networkFigure is Definition V.1 over the members' files (node.NetworkFigureOf).
func networkFigure(ms []loadedModel, missing []int) node.NetworkFigure {
	models := make([]node.RADMMModel, len(ms))
	for k, lm := range ms {
		models[k] = lm.m
	}
	return node.NetworkFigureOf(models, missing)
}

// evalAveraged evaluates the averaged model of rep on the dataset of the data flags, its
// features scaled as in the run (the scaling the model.json files record, or the one
// the flags give for files that record none).
func evalAveraged(rep *modelsReport, df *dataFlags, loss consensus.Loss) (*modelsEval, error) {
	if spec := rep.Predictor; spec != nil && !df.isSet("scale") && !df.isSet("scale-file") {
		// f_bar's predictor reads the rows as predict and eval do (columns by name, the
		// run's ranges and scaling).
		sp := *spec
		rows, scores, err := scoreSpec(&sp, df, "account models")
		if err != nil {
			return nil, err
		}
		if rows == 0 {
			return nil, fmt.Errorf("%s has no rows", *df.path)
		}
		return &modelsEval{Data: *df.path, Rows: rows, Loss: loss.String(), Scale: string(spec.Scaling.Kind) + " (the run's, from the predictor)", evalScores: scores, spec: spec}, nil
	}
	w := rep.Model
	ld, err := df.load(loadRequest{loss: loss, dims: len(w), run: rep.Scaling})
	if err != nil {
		return nil, err
	}
	d := ld.train
	if d.Rows == 0 {
		return nil, fmt.Errorf("%s has no rows", ld.name)
	}
	return &modelsEval{Data: ld.name, Rows: d.Rows, Loss: loss.String(), Scale: ld.scaling, evalScores: scoreModel(d, w, loss)}, nil
}

func printModelsReport(w io.Writer, r *modelsReport, outPath string) {
	fmt.Fprintf(w, "%s on %s: run %q, %d members, %d iterations, a model of %d coordinates, config hash %s\n",
		r.Algo, r.Graph, r.Run, r.Nodes, r.Iters, r.Dims, r.ConfigHash)
	if r.Partial {
		fmt.Fprintf(w, "PARTIAL (--allow-missing): averaged %d of %d members, members %s missing: f_bar is NOT the network average\n",
			len(r.Averaged), r.Nodes, intList(r.Missing))
	}
	fmt.Fprintf(w, "averaged model f_bar = (1/N) sum_i f_i(T) over %d members, largest node deviation %.3g\n", len(r.Averaged), r.MaxDeviation)
	const show = 12
	var b strings.Builder
	for j, v := range r.Model {
		if j == show {
			fmt.Fprintf(&b, " ... (%d more; --json or --out for all)", len(r.Model)-show)
			break
		}
		if j > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%.6g", v)
	}
	fmt.Fprintf(w, "f_bar: [%s]\n", b.String())
	if r.Eval != nil {
		e := r.Eval
		fmt.Fprintf(w, "evaluation on %s (%d rows, scale %s): ", e.Data, e.Rows, e.Scale)
		name := e.Loss
		if e.spec != nil {
			name = specLossName(e.spec)
		}
		printScores(w, name, e.evalScores)
	}
	fmt.Fprintf(w, "\n%5s  %-8s  %10s  %4s  %5s  %7s  %9s\n", "index", "peer", "epsilon", "hold", "stale", "inexact", "deviation")
	for _, n := range r.PerNode {
		eps := "none"
		if n.Epsilon.Bounded() {
			eps = fmtEps(n.Epsilon)
		}
		hold := "no"
		if n.ConditionsHold {
			hold = "yes"
		}
		fmt.Fprintf(w, "%5d  %-8s  %10s  %4s  %5d  %7d  %9.3g\n", n.Index, n.PeerShort, eps, hold, n.StaleUses, n.Inexact, n.Deviation)
	}
	fmt.Fprintln(w)
	g := r.Privacy
	if g.ConditionsHold {
		fmt.Fprintf(w, "privacy: network epsilon %s (pure DP, worst node %d) from %s; conditions: %s (hold on every member)\n",
			fmtEps(g.Epsilon), g.WorstNode, g.Theorem, g.Conditions)
	} else {
		fmt.Fprintf(w, "privacy: NO guarantee: %s; the formula would give %s (%s; conditions: %s)\n",
			g.Reason, fmtEps(g.Formula), g.Theorem, g.Conditions)
		if g.GivenMax.Bounded() {
			fmt.Fprintf(w, "         the members with a guarantee reach epsilon %s: a lower bound, not the network figure\n", fmtEps(g.GivenMax))
		}
	}
	if !g.SecureNoise {
		fmt.Fprintf(w, "         note: a member drew seeded noise (testnets only): the noise is NOT secure\n")
	}
	if outPath != "" {
		if r.Predictor != nil {
			fmt.Fprintf(w, "averaged model written to %s, with its predictor (dpadmm predict --model %s)\n", outPath, outPath)
		} else {
			fmt.Fprintf(w, "averaged model written to %s, without a predictor: %s\n", outPath, r.PredictorNote)
		}
	}
}

// describeRecorded names a scaling recorded in model.json, nil meaning none recorded.
func describeRecorded(s *consensus.Scaler) string {
	if s == nil {
		return "(none recorded)"
	}
	return describeScaler(s)
}

// shortPeer is the last 8 characters of a peer ID, as the node's logs show it.
func shortPeer(p string) string {
	if len(p) > 8 {
		return p[len(p)-8:]
	}
	return p
}

func intList(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}
