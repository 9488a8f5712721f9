package experiment

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/gossip"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/testnet"
	"github.com/dpadmm/dpadmm/testnet/sim"
	"github.com/dpadmm/dpadmm/walk"
)

// The utility scorecard ('dpadmm experiment utility'): every data set, node count, split,
// algorithm and target epsilon, over several seeds, the test accuracy (R^2 for a
// regression) of the model each algorithm gives at that per-record epsilon, next to the
// non-private model of the same objective on the same split (the reference; it equals
// sklearn's, TestSklearnCompare) and the majority class (the floor).
//
// The walk runs at the defaults of 'dpadmm testnet' (node.DefaultConfig: gamma 0.03,
// lambda 0.1, cap 20 updates, n x 20 hops) with sigma calibrated so that each node's local
// per-record figure (the one that holds against an observer of every message,
// privacy.StepLocalBound) is the target at Delta. R-ADMM (one-vs-rest for three or more
// classes) runs Iters iterations with alpha calibrated so that its pure per-record
// epsilon (Theorem V.1, max over nodes) is the target (GossipOptions.TargetEpsilon: each
// node's alpha by gossip.Setup.AlphaFor, the rule of 'testnet|node --target-epsilon'); a
// target below the figure's alpha-free part is out of reach and reported as such (no
// metric, the reason in the note).

// UtilityData is one data set of the scorecard (Train scaled by the public rule of Scaler).
type UtilityData struct {
	Name        string
	Train, Test *consensus.Dataset
	Problem     consensus.Problem // the walk's problem (multinomial for three or more classes)
	Scaler      *consensus.Scaler
}

// UtilityOptions configures RunUtility.
type UtilityOptions struct {
	Data     []UtilityData
	Nodes    []int     // default 3, 50
	Splits   []string  // default iid, label
	Epsilons []float64 // default 0.5, 1, 2, 4, 8
	Algos    []string  // "walk", "walk-sgd", "radmm" (default all three)
	Seeds    int       // runs per cell (default 3)
	Seed     uint64    // run s uses Seed+s
	Delta    float64   // default 1e-5
	Iters    int       // R-ADMM iterations (default 2)
	Progress func(done, total int)
}

// UtilityRow is one run of the scorecard.
type UtilityRow struct {
	Data, Split, Algo string
	Nodes             int
	Target            float64 // the target epsilon
	Seed              uint64
	Epsilon           float64 // the figure the run reports (at most Target; above it when out of reach)
	Accountant        string  // which accountant gave Epsilon (gdp, rdp, pure)
	Metric            string  // accuracy or r2
	Value             float64 // NaN when out of reach
	Reference         float64 // the non-private model on the same split
	Floor             float64 // majority share (accuracy) or 0 (r2)
	Note              string
}

func (o *UtilityOptions) defaults() error {
	if len(o.Data) == 0 {
		return errors.New("testnet: utility: no data")
	}
	if len(o.Nodes) == 0 {
		o.Nodes = []int{3, 50}
	}
	if len(o.Splits) == 0 {
		o.Splits = []string{"iid", "label"}
	}
	if len(o.Epsilons) == 0 {
		o.Epsilons = []float64{0.5, 1, 2, 4, 8}
	}
	if len(o.Algos) == 0 {
		o.Algos = []string{"walk", "walk-sgd", "radmm"}
	}
	if o.Seeds == 0 {
		o.Seeds = 3
	}
	if o.Delta == 0 {
		o.Delta = privacy.DefaultDelta
	}
	if o.Iters == 0 {
		o.Iters = 2
	}
	for _, a := range o.Algos {
		if a != "walk" && a != "walk-sgd" && a != "radmm" {
			return fmt.Errorf("testnet: utility: unknown algorithm %q (want walk, walk-sgd or radmm)", a)
		}
	}
	for _, e := range o.Epsilons {
		if !(e > 0) || math.IsInf(e, 0) {
			return fmt.Errorf("testnet: utility: epsilon must be finite and > 0, got %v", e)
		}
	}
	if o.Seeds < 1 || o.Iters < 2 {
		return fmt.Errorf("testnet: utility: need seeds >= 1 and iters >= 2, got %d and %d", o.Seeds, o.Iters)
	}
	return nil
}

// RunUtility runs the scorecard; rows come in a fixed order (data, nodes, split, algo,
// epsilon, seed), whatever the timing.
func RunUtility(ctx context.Context, o UtilityOptions) ([]UtilityRow, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	total := len(o.Data) * len(o.Nodes) * len(o.Splits) * len(o.Algos) * len(o.Epsilons) * o.Seeds
	var rows []UtilityRow
	for _, d := range o.Data {
		for _, n := range o.Nodes {
			if n > d.Train.Rows {
				continue
			}
			for _, split := range o.Splits {
				ref, floor, metric, err := utilityReference(d)
				if err != nil {
					return nil, err
				}
				for _, algo := range o.Algos {
					for _, eps := range o.Epsilons {
						for s := 0; s < o.Seeds; s++ {
							if err := ctx.Err(); err != nil {
								return rows, err
							}
							row := UtilityRow{Data: d.Name, Split: split, Algo: algo, Nodes: n, Target: eps, Seed: o.Seed + uint64(s),
								Metric: metric, Reference: ref, Floor: floor}
							var err error
							if algo != "radmm" {
								err = utilityWalk(ctx, &o, d, &row)
							} else {
								err = utilityRADMM(ctx, &o, d, &row)
							}
							if err != nil {
								return rows, fmt.Errorf("testnet: utility: %s, %d nodes, %s split, %s at epsilon %g: %w", d.Name, n, split, algo, eps, err)
							}
							rows = append(rows, row)
							if o.Progress != nil {
								o.Progress(len(rows), total)
							}
						}
					}
				}
			}
		}
	}
	return rows, nil
}

// utilityReference is the non-private model of d's objective on the whole training set
// (the split does not change it), scored on Test, and the floor.
func utilityReference(d UtilityData) (ref, floor float64, metric string, err error) {
	w, _, err := consensus.Solve(d.Train, d.Problem, consensus.SolveOptions{Tol: 1e-10, MaxIter: 100000})
	if err != nil && !errors.Is(err, consensus.ErrNoConvergence) {
		return 0, 0, "", err
	}
	if d.Problem.Loss == consensus.Squared {
		_, r2, _ := consensus.Regression(d.Test, w)
		return r2, 0, "r2", nil
	}
	return d.Problem.Accuracy(d.Test, w), sim.MajorityShare(d.Test), "accuracy", nil
}

// UtilitySGD are the DP-SGD walk's settings of the scorecard (and of 'dpadmm testnet|node
// --algo auto', fitted by SGDFor): step size, sampling rate and cap.
var UtilitySGD = walk.StepParams{Kind: walk.StepSGD, Eta: 2, Rate: 0.1}

// UtilitySGDCap is the DP-SGD walk's cap of noisy updates per node in the scorecard.
const UtilitySGDCap = 100

// UtilitySGDSmallEta is the DP-SGD walk's step size in the scorecard when the expected
// batch is below 10 rows.
const UtilitySGDSmallEta = 0.1

// SGDFor fits the DP-SGD walk's settings p to shards of rows rows each, as the scorecard
// does (and 'dpadmm testnet|node --algo auto'): with fitRate, the sampling rate is raised
// to an expected batch of at least 1.5 rows (at most 1); with fitEta, the step size is
// UtilitySGDSmallEta when the expected batch is below 10 rows. Small shards need both:
// the noise of one step grows as 1/(q rows_i) (measured: with step size 2, diabetes on 50
// nodes diverges; with 0.1 it reaches R^2 0.2-0.3 at epsilon 4, and breast cancer 0.93
// at epsilon 2). The rates and step sizes are public settings of each node's mechanism;
// rows <= 0 leaves p as it is.
func SGDFor(p walk.StepParams, rows float64, fitRate, fitEta bool) walk.StepParams {
	if !(rows > 0) {
		return p
	}
	if fitRate {
		p.Rate = math.Min(1, math.Max(p.Rate, 1.5/rows))
	}
	if fitEta && p.Rate*rows < 10 {
		p.Eta = UtilitySGDSmallEta
	}
	return p
}

// utilityWalk runs the walk (row.Algo "walk": the prox step at the testnet defaults;
// "walk-sgd": the DP-SGD walk with UtilitySGD) with sigma calibrated to row.Target.
func utilityWalk(ctx context.Context, o *UtilityOptions, d UtilityData, row *UtilityRow) error {
	opt := testnet.DefaultOptions()
	opt.Train, opt.Test, opt.Scaler, opt.Problem = d.Train, d.Test, d.Scaler, d.Problem
	opt.Nodes, opt.Split, opt.Seed, opt.Delta = row.Nodes, row.Split, row.Seed, o.Delta
	if row.Algo == "walk-sgd" {
		opt.Step, opt.MaxUpdates = SGDFor(UtilitySGD, float64(d.Train.Rows/row.Nodes), true, true), UtilitySGDCap
	}
	opt.Hops = uint64(row.Nodes * opt.MaxUpdates)
	opt.Unit = privacy.UnitRecord
	r := walk.PlanRun(opt.WalkBase(), d.Problem.Loss, row.Nodes, d.Train.Rows)
	sigma, _, err := privacy.CalibrateLocal(r, opt.MaxUpdates, row.Target, o.Delta)
	if err != nil {
		return err
	}
	opt.Sigma = sigma
	rep, err := sim.RunContext(ctx, opt)
	if err != nil {
		return err
	}
	loc := rep.Privacy.Local
	row.Epsilon, row.Accountant = loc.Epsilon.Float(), loc.Accountant
	row.Note = rep.Privacy.UnitNote
	return row.score(rep)
}

// score sets Value from a report.
func (row *UtilityRow) score(rep *sim.Report) error {
	switch {
	case row.Metric == "r2" && rep.R2 != nil:
		row.Value = *rep.R2
	case row.Metric == "accuracy" && rep.Accuracy != nil:
		row.Value = *rep.Accuracy
	default:
		return errors.New("the run reports no test " + row.Metric)
	}
	return nil
}

// utilityRADMM runs R-ADMM with alpha calibrated to row.Target (pure DP, max over nodes).
func utilityRADMM(ctx context.Context, o *UtilityOptions, d UtilityData, row *UtilityRow) error {
	row.Accountant = "pure"
	if d.Problem.Loss == consensus.Squared {
		row.Value, row.Epsilon = math.NaN(), math.Inf(1)
		row.Note = "R-ADMM's Theorem V.1 needs a loss with a bounded derivative (logistic): not run on a regression"
		return nil
	}
	g := testnet.DefaultGossipOptions()
	g.Train, g.Test, g.Scaler, g.Nodes, g.Split, g.Seed, g.Delta = d.Train, d.Test, d.Scaler, row.Nodes, row.Split, row.Seed, o.Delta
	g.Problem = d.Problem.For(d.Train, d.Scaler.HasIntercept(), false) // the neighbour exchange's
	g.Problem.Reg.L2 = max(g.Problem.Reg.L2, 1e-2)                     // node.RADMMDefaultL2: Theorem V.1 divides by rho/N
	g.Algo, g.Graph = "radmm", "complete"
	// The nodes' alphas are calibrated to the target by the run itself (gossip.Setup.AlphaFor,
	// as every node calibrates its own).
	g.Iters, g.TargetEpsilon = o.Iters, row.Target
	rep, err := sim.RunGossipContext(ctx, g)
	if errors.Is(err, gossip.ErrTargetOutOfReach) {
		row.Value, row.Epsilon = math.NaN(), math.Inf(1)
		row.Note = "out of reach: " + err.Error()
		return nil
	}
	if err != nil {
		return err
	}
	row.Epsilon = rep.Gossip.Epsilon.Float()
	if !rep.Gossip.ConditionsHold {
		row.Value = math.NaN()
		row.Note = "Theorem V.1's conditions fail: " + rep.Gossip.Reason
		return nil
	}
	row.Note = fmt.Sprintf("alpha %.4g, %d iterations", rep.Alpha, o.Iters)
	return row.score(rep.Report)
}

// UtilityCell is the mean over seeds of one (data, nodes, split, algo, epsilon).
type UtilityCell struct {
	Data, Split, Algo, Metric string
	Nodes                     int
	Target, Epsilon           float64 // Epsilon: the largest figure over the seeds
	Mean, Min, Max            float64 // NaN when out of reach
	Reference, Floor          float64
	Note                      string
}

// SummariseUtility groups rows by cell, in order.
func SummariseUtility(rows []UtilityRow) []UtilityCell {
	var out []UtilityCell
	for i := 0; i < len(rows); {
		j := i
		r := rows[i]
		c := UtilityCell{Data: r.Data, Split: r.Split, Algo: r.Algo, Metric: r.Metric, Nodes: r.Nodes, Target: r.Target,
			Reference: r.Reference, Floor: r.Floor, Min: math.Inf(1), Max: math.Inf(-1), Note: r.Note}
		sum, k := 0.0, 0
		for ; j < len(rows) && rows[j].Data == r.Data && rows[j].Nodes == r.Nodes && rows[j].Split == r.Split &&
			rows[j].Algo == r.Algo && rows[j].Target == r.Target; j++ {
			c.Epsilon = math.Max(c.Epsilon, rows[j].Epsilon)
			if v := rows[j].Value; !math.IsNaN(v) {
				sum += v
				k++
				c.Min, c.Max = math.Min(c.Min, v), math.Max(c.Max, v)
			}
		}
		c.Mean = math.NaN()
		if k > 0 {
			c.Mean = sum / float64(k)
		} else {
			c.Min, c.Max = math.NaN(), math.NaN()
		}
		out = append(out, c)
		i = j
	}
	return out
}

// WriteUtilityCSV writes one line per run.
func WriteUtilityCSV(w io.Writer, rows []UtilityRow) error {
	cw := csv.NewWriter(w)
	f := func(x float64) string { return strconv.FormatFloat(x, 'g', 6, 64) }
	_ = cw.Write([]string{"data", "nodes", "split", "algo", "target_epsilon", "seed", "epsilon", "accountant", "metric", "value", "reference", "floor", "note"})
	for _, r := range rows {
		_ = cw.Write([]string{r.Data, strconv.Itoa(r.Nodes), r.Split, r.Algo, f(r.Target), strconv.FormatUint(r.Seed, 10), f(r.Epsilon),
			r.Accountant, r.Metric, f(r.Value), f(r.Reference), f(r.Floor), r.Note})
	}
	cw.Flush()
	return cw.Error()
}

// WriteUtilityPNG draws one panel per (data, nodes, split): the mean metric of each
// algorithm against the target epsilon (log scale), with the non-private reference and
// the floor as dashed lines.
func WriteUtilityPNG(w io.Writer, cells []UtilityCell) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("testnet: utility plot: %v", r)
		}
	}()
	type key struct {
		data, split string
		nodes       int
	}
	var keys []key
	panel := map[key][]UtilityCell{}
	for _, c := range cells {
		k := key{c.Data, c.Split, c.Nodes}
		if _, ok := panel[k]; !ok {
			keys = append(keys, k)
		}
		panel[k] = append(panel[k], c)
	}
	if len(keys) == 0 {
		return errors.New("testnet: utility plot: no results")
	}
	cols := min(4, len(keys))
	rowsN := (len(keys) + cols - 1) / cols
	const pw, ph = 300, 240
	img := vgimg.NewWith(vgimg.UseWH(vg.Length(pw*cols), vg.Length(ph*rowsN)), vgimg.UseDPI(96), vgimg.UseBackgroundColor(color.White))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: rowsN, Cols: cols, PadX: vg.Millimeter, PadY: vg.Millimeter}
	palette := []color.Color{color.RGBA{31, 119, 180, 255}, color.RGBA{214, 39, 40, 255}, color.RGBA{44, 160, 44, 255}}
	for i, k := range keys {
		p := plot.New()
		cs := panel[k]
		p.Title.Text = fmt.Sprintf("%s, %d nodes, %s", k.data, k.nodes, k.split)
		p.X.Label.Text = "per-record epsilon (delta 1e-5; R-ADMM: pure)"
		p.Y.Label.Text = cs[0].Metric
		if cs[0].Metric == "r2" {
			p.Y.Label.Text = "R^2 (below -1 drawn at -1)"
		}
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		var algos []string
		for _, c := range cs {
			if !slices.Contains(algos, c.Algo) {
				algos = append(algos, c.Algo)
			}
		}
		lo, hi := math.Inf(1), math.Inf(-1)
		for ai, a := range algos {
			var pts plotter.XYs
			for _, c := range cs {
				if c.Algo == a && !math.IsNaN(c.Mean) {
					pts = append(pts, plotter.XY{X: c.Target, Y: math.Max(c.Mean, -1)}) // an R^2 below -1 at -1
				}
				lo, hi = math.Min(lo, c.Target), math.Max(hi, c.Target)
			}
			if len(pts) == 0 {
				continue
			}
			l, s, err := plotter.NewLinePoints(pts)
			if err != nil {
				return err
			}
			l.Color, s.Color = palette[ai%len(palette)], palette[ai%len(palette)]
			p.Add(l, s)
			p.Legend.Add(a, l, s)
		}
		for _, h := range []struct {
			y    float64
			name string
			c    color.Color
		}{{cs[0].Reference, "non-private", color.Black}, {cs[0].Floor, "majority", color.Gray{Y: 140}}} {
			l, err := plotter.NewLine(plotter.XYs{{X: lo, Y: h.y}, {X: hi, Y: h.y}})
			if err != nil {
				return err
			}
			l.Color, l.Dashes = h.c, []vg.Length{vg.Points(4), vg.Points(3)}
			p.Add(l)
			p.Legend.Add(h.name, l)
		}
		p.Legend.Top, p.Legend.Left = false, false
		p.Legend.YOffs = vg.Points(20)
		p.Y.Min = math.Max(math.Min(p.Y.Min, 0), -1)
		p.Y.Max = math.Max(p.Y.Max, 1)
		// A log axis over positive targets: one target alone gets a decade around it (the
		// plot's own padding could reach 0).
		if lo > 0 && hi >= lo && !math.IsInf(hi, 0) {
			p.X.Min, p.X.Max = lo, hi
			if lo == hi {
				p.X.Min, p.X.Max = lo/math.Sqrt(10), hi*math.Sqrt(10)
			}
		}
		p.Draw(tiles.At(dc, i%cols, i/cols))
	}
	_, err = (vgimg.PngCanvas{Canvas: img}).WriteTo(w)
	return err
}
