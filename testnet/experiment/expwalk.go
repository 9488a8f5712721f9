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
	"sync"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/testnet/sim"
	"github.com/dpadmm/dpadmm/walk"
)

// The privacy/utility comparison of the random-walk methods (the walk paper's Figure 1,
// moved to the decentralized setting): for every epsilon of a grid, every method's noise is
// calibrated by this package's accountant to that epsilon, each method is run for the same
// number of hops over several seeds, and the final model's test objective is reported
// (mean, minimum and maximum over seeds). Each method's free parameters (gamma or step
// size, and clip) are tuned once, on the smallest epsilon, by the mean training objective
// over a few seeds, and kept for every epsilon, as the paper does.

// WalkMethod is one curve of the comparison: a walk local step and its tuning grid.
type WalkMethod struct {
	// Name labels the curve (CSV, legend).
	Name string
	// Step is the local step; Step.Eta is overwritten by the tuned step size when Etas is
	// not empty.
	Step walk.StepParams
	// Gammas, Etas and Clips are the tuning grids (an empty grid keeps the value of
	// WalkExperimentOptions.Gamma, Step.Eta or Clips[0] of the options).
	Gammas, Etas, Clips []float64
}

// WalkExperimentOptions configures RunWalkExperiment.
type WalkExperimentOptions struct {
	// Train and Test are the data (Train already scaled). Every training row is one node.
	Train, Test *consensus.Dataset
	Data        string            // name of the data, for the CSV
	Problem     consensus.Problem // the reported objective (loss and regularizer)
	Hops        uint64            // hops of every run (default 100 x nodes)
	Epsilons    []float64         // the epsilon grid (default the authors': geomspace(0.01, 5, 7))
	Delta       float64           // default 1e-6
	// Figure is what the noise is calibrated to: "pairwise" (the planned network figure of
	// the worst pair, the default) or "local" (an observer of every message).
	Figure string
	// Cap is every node's hard cap K_i on noisy updates (default: the expected visits
	// plus 6 standard deviations, so that forwards are unlikely).
	Cap        int
	Lambda     float64 // relaxation of the ADMM steps (default 0.5)
	Gamma      float64 // ADMM gamma when a method has no gamma grid (default 1)
	Seeds      int     // runs per method and epsilon (default 10)
	TuneSeeds  int     // runs per grid point when tuning (default 3)
	Seed       uint64  // run s uses seed Seed+s
	Methods    []WalkMethod
	Workers    int // runs in parallel (default 1); the results do not depend on it
	Progress   func(done, total int)
	NonPrivate bool // also run every tuned method without noise (a reference line per method)
	// TuneEach tunes every method at every epsilon instead of once at the smallest (the
	// paper's protocol); the non-private runs then use the setting tuned at the largest.
	TuneEach bool
}

// WalkExperimentPoint is one method at one epsilon.
type WalkExperimentPoint struct {
	Method  string
	Epsilon float64 // the target; the calibrated figure is at most this
	Sigma   float64 // the calibrated noise
	Gamma   float64
	Eta     float64
	Clip    float64
	// Test objective of the final model over the seeds: mean, minimum, maximum, standard
	// deviation; and the mean training objective.
	Mean, Min, Max, Std, TrainMean float64
}

// WalkExperimentResult is the outcome of RunWalkExperiment.
type WalkExperimentResult struct {
	Options   WalkExperimentOptions
	Points    []WalkExperimentPoint
	Reference float64 // test objective of the non-private optimum of the training objective
	// Zero is the test objective of the zero model (the walk's initial model): a method
	// above it has learnt nothing.
	Zero float64
	// NonPrivate holds, per method, the mean test objective of the tuned method without
	// noise (when Options.NonPrivate).
	NonPrivate map[string]float64
}

// DefaultWalkMethods returns the comparison's methods: walk ADMM (exact prox), walk
// gradient ADMM, the Laplacian-smoothed SGD step with nu = 0, 2, 3, and the DP-SGD walk,
// with their tuning grids.
func DefaultWalkMethods() []WalkMethod {
	clips := []float64{0.001, 0.01, 0.1, 1}
	etas := []float64{0.03, 0.1, 0.3, 1}
	ls := func(nu float64) WalkMethod {
		return WalkMethod{Name: "walk ls-sgd nu=" + strconv.FormatFloat(nu, 'g', -1, 64),
			Step: walk.StepParams{Kind: walk.StepLSSGD, Nu: nu, Rate: 1}, Etas: etas, Clips: clips}
	}
	return []WalkMethod{
		{Name: "walk ADMM", Step: walk.StepParams{Kind: walk.StepProx}, Gammas: []float64{0.3, 1, 3, 10}, Clips: clips},
		{Name: "walk gradient ADMM", Step: walk.StepParams{Kind: walk.StepGADMM, Beta: 1}, Etas: []float64{0.1, 0.3, 0.9}, Clips: clips},
		ls(0), ls(2), ls(3),
		{Name: "walk DP-SGD", Step: walk.StepParams{Kind: walk.StepSGD, Rate: 1}, Etas: etas, Clips: clips},
	}
}

func (o *WalkExperimentOptions) defaults() error {
	if o.Train == nil || o.Train.Rows < 2 {
		return errors.New("testnet: walk experiment: at least two training rows are needed")
	}
	n := o.Train.Rows
	if o.Hops == 0 {
		o.Hops = 100 * uint64(n)
	}
	if o.Epsilons == nil {
		o.Epsilons = Geomspace(0.01, 5, 7)
	}
	if o.Delta == 0 {
		o.Delta = 1e-6
	}
	if o.Figure == "" {
		o.Figure = "pairwise"
	}
	if o.Figure != "pairwise" && o.Figure != "local" {
		return fmt.Errorf("testnet: walk experiment: figure must be pairwise or local, got %q", o.Figure)
	}
	if o.Cap == 0 {
		mean := float64(o.Hops) / float64(n)
		o.Cap = int(math.Ceil(mean + 6*math.Sqrt(mean) + 1))
	}
	if o.Lambda == 0 {
		o.Lambda = 0.5
	}
	if o.Gamma == 0 {
		o.Gamma = 1
	}
	if o.Seeds == 0 {
		o.Seeds = 10
	}
	if o.TuneSeeds == 0 {
		o.TuneSeeds = 3
	}
	if o.Methods == nil {
		o.Methods = DefaultWalkMethods()
	}
	if o.Workers < 1 {
		o.Workers = 1
	}
	for _, e := range o.Epsilons {
		if !(e > 0) || math.IsInf(e, 0) {
			return fmt.Errorf("testnet: walk experiment: epsilon must be finite and > 0, got %v", e)
		}
	}
	if len(o.Epsilons) == 0 || o.Seeds < 1 || o.TuneSeeds < 1 || o.Cap < 1 {
		return errors.New("testnet: walk experiment: need epsilons, seeds >= 1 and a cap >= 1")
	}
	if !(o.Delta > 0 && o.Delta < 1) {
		return fmt.Errorf("testnet: walk experiment: delta must be in (0,1), got %v", o.Delta)
	}
	return nil
}

// Geomspace returns k numbers from a to b spaced evenly on a log scale (numpy.geomspace).
func Geomspace(a, b float64, k int) []float64 {
	out := make([]float64, k)
	for i := range out {
		if k == 1 {
			out[i] = a
			continue
		}
		out[i] = a * math.Pow(b/a, float64(i)/float64(k-1))
	}
	if k > 1 {
		out[k-1] = b
	}
	return out
}

// walkSetting is one point of a method's tuning grid.
type walkSetting struct {
	gamma, eta, clip float64
}

func (m WalkMethod) grid(o *WalkExperimentOptions) []walkSetting {
	gs, es, cs := m.Gammas, m.Etas, m.Clips
	if len(gs) == 0 {
		gs = []float64{o.Gamma}
	}
	if len(es) == 0 {
		es = []float64{m.Step.Eta}
	}
	if len(cs) == 0 {
		cs = []float64{1}
	}
	var out []walkSetting
	for _, g := range gs {
		for _, e := range es {
			for _, c := range cs {
				out = append(out, walkSetting{g, e, c})
			}
		}
	}
	return out
}

// StepEpsilon is the figure the experiment calibrates to, for one node that makes at most
// cap noisy updates with noise sigma, in a walk of n nodes and hops hops on the complete
// graph, whose step and clip are step's (StepRun): the planned network figure of the worst
// pair (privacy.WalkPlannedBound, which falls back to the local figure where its
// conditions fail) or the local figure (privacy.StepLocalBound). It is +Inf when the figure
// does not exist.
func StepEpsilon(step privacy.WalkRun, figure string, n, cap int, hops uint64, sigma, delta float64) float64 {
	r := step
	r.Nodes, r.Complete, r.Sigma, r.Cap, r.Hops, r.Planning = n, true, sigma, cap, hops, true
	if figure == "local" {
		return privacy.StepLocalBound(r, cap, delta).Epsilon
	}
	return privacy.WalkPlannedBound(r, delta).Epsilon
}

// CalibrateFigure is privacy.CalibrateFigure: the one calibration search ('dpadmm account
// plan' and the walk experiment calibrate the noise of any step with it).
func CalibrateFigure(eps float64, figure func(sigma float64) float64) (float64, error) {
	return privacy.CalibrateFigure(eps, figure)
}

// walkRunResult is the final training and test objective of one run.
type walkRunResult struct{ train, test float64 }

// runWalkOnce runs one simulated walk: every training row is one node.
func (o *WalkExperimentOptions) runWalkOnce(ctx context.Context, shards []*consensus.Dataset, m WalkMethod, st walkSetting, sigma float64, seed uint64) (walkRunResult, error) {
	step := m.Step
	if len(m.Etas) > 0 {
		step.Eta = st.eta
	}
	gs, err := sim.NewSim(sim.SimConfig{Shards: shards, Problem: o.Problem, Gamma: st.gamma, Lambda: o.Lambda, Clip: st.clip,
		Sigma: sigma, Step: step, MaxUpdates: o.Cap, Seed: seed, Run: "experiment"})
	if err != nil {
		return walkRunResult{}, err
	}
	const chunk = 1 << 14
	for done := uint64(0); done < o.Hops; {
		if err := ctx.Err(); err != nil {
			return walkRunResult{}, err
		}
		k := min(chunk, o.Hops-done)
		if err := gs.RunHops(k, 0, nil); err != nil {
			return walkRunResult{}, err
		}
		done += k
	}
	z := gs.Z()
	res := walkRunResult{train: o.Problem.Objective(o.Train, z), test: math.NaN()}
	if o.Test != nil && o.Test.Rows > 0 {
		res.test = o.Problem.Objective(o.Test, z)
	}
	return res, nil
}

// RunWalkExperiment runs the comparison.
func RunWalkExperiment(ctx context.Context, o WalkExperimentOptions) (*WalkExperimentResult, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	n := o.Train.Rows
	shards, err := consensus.Split(o.Train, n, "contiguous", o.Seed)
	if err != nil {
		return nil, err
	}
	res := &WalkExperimentResult{Options: o, NonPrivate: map[string]float64{}}
	if o.Test != nil && o.Test.Rows > 0 {
		w, _, err := consensus.Solve(o.Train, o.Problem, consensus.SolveOptions{Tol: 1e-12, MaxIter: 100000})
		if err != nil {
			return nil, fmt.Errorf("testnet: reference solve: %w", err)
		}
		res.Reference = o.Problem.Objective(o.Test, w)
		res.Zero = o.Problem.Objective(o.Test, make([]float64, o.Test.Cols))
	}
	x := &walkExp{ctx: ctx, o: &o, shards: shards, n: n}
	for _, m := range o.Methods {
		tunings := 1
		if o.TuneEach {
			tunings = len(o.Epsilons)
		}
		x.total += tunings*len(m.grid(&o))*o.TuneSeeds + len(o.Epsilons)*o.Seeds
		if o.NonPrivate {
			x.total += o.Seeds
		}
	}
	for _, m := range o.Methods {
		if err := x.method(m, res); err != nil {
			return nil, fmt.Errorf("testnet: %s: %w", m.Name, err)
		}
	}
	return res, nil
}

// walkExp runs the walk experiment's runs on o.Workers goroutines and counts them.
type walkExp struct {
	ctx    context.Context
	o      *WalkExperimentOptions
	shards []*consensus.Dataset
	n      int
	total  int // runs of the whole experiment
	mu     sync.Mutex
	done   int // runs done
}

// tick counts one run done and reports progress.
func (x *walkExp) tick() {
	x.mu.Lock()
	x.done++
	d := x.done
	x.mu.Unlock()
	if x.o.Progress != nil {
		x.o.Progress(d, x.total)
	}
}

// runs executes fn(k) for k in [0, count) on o.Workers goroutines; after an error no new
// k starts, and the first error is returned.
func (x *walkExp) runs(count int, fn func(k int) error) error {
	var (
		wg    sync.WaitGroup
		next  int
		first error
		lk    sync.Mutex
	)
	for w := 0; w < min(x.o.Workers, count); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				lk.Lock()
				k := next
				next++
				stop := first != nil
				lk.Unlock()
				if k >= count || stop {
					return
				}
				if err := fn(k); err != nil {
					lk.Lock()
					if first == nil {
						first = err
					}
					lk.Unlock()
					return
				}
				x.tick()
			}
		}()
	}
	wg.Wait()
	return first
}

// sigmaFor returns the noise that gives m at setting st the figure eps.
func (x *walkExp) sigmaFor(m WalkMethod, st walkSetting, eps float64) (float64, error) {
	o := x.o
	step := m.Step
	if len(m.Etas) > 0 {
		step.Eta = st.eta
	}
	r, err := sim.StepRun(walk.Config{Gamma: st.gamma, Clip: st.clip, Sigma: 1, Step: step}, o.Problem, x.shards)
	if err != nil {
		return 0, err
	}
	r.Clip = st.clip
	return privacy.CalibrateFigure(eps, func(s float64) float64 {
		return StepEpsilon(r, o.Figure, x.n, o.Cap, o.Hops, s, o.Delta)
	})
}

// tune returns m's grid point with the smallest mean training objective at eps.
func (x *walkExp) tune(m WalkMethod, eps float64) (walkSetting, error) {
	o := x.o
	grid := m.grid(o)
	scores := make([]float64, len(grid)*o.TuneSeeds)
	sigmas := make([]float64, len(grid))
	// A grid point the step refuses (a step size above 1/nu for gradient ADMM, say) is
	// left out of the tuning; a method with no valid point is an error.
	invalid := make([]error, len(grid))
	for g, st := range grid {
		sigmas[g], invalid[g] = x.sigmaFor(m, st, eps)
	}
	err := x.runs(len(scores), func(k int) error {
		g, s := k/o.TuneSeeds, k%o.TuneSeeds
		if invalid[g] != nil {
			scores[k] = math.Inf(1)
			return nil
		}
		r, err := o.runWalkOnce(x.ctx, x.shards, m, grid[g], sigmas[g], o.Seed+1000+uint64(s))
		if err != nil && x.ctx.Err() == nil {
			invalid[g], scores[k] = err, math.Inf(1)
			return nil
		}
		scores[k] = r.train
		return err
	})
	if err != nil {
		return walkSetting{}, err
	}
	best, bestScore := -1, math.Inf(1)
	for g := range grid {
		if invalid[g] != nil {
			continue
		}
		mean := 0.0
		for s := 0; s < o.TuneSeeds; s++ {
			mean += scores[g*o.TuneSeeds+s] / float64(o.TuneSeeds)
		}
		if best < 0 || mean < bestScore || (math.IsNaN(bestScore) && !math.IsNaN(mean)) {
			best, bestScore = g, mean
		}
	}
	if best < 0 {
		return walkSetting{}, fmt.Errorf("no valid point in the tuning grid: %w", invalid[0])
	}
	return grid[best], nil
}

// method tunes and runs method m at every epsilon (and without noise with NonPrivate)
// and adds its points to res.
func (x *walkExp) method(m WalkMethod, res *WalkExperimentResult) error {
	o := x.o
	var st walkSetting
	var err error
	if !o.TuneEach {
		if st, err = x.tune(m, slices.Min(o.Epsilons)); err != nil {
			return err
		}
	}
	seeds := func(sigma float64) ([]walkRunResult, error) {
		out := make([]walkRunResult, o.Seeds)
		err := x.runs(o.Seeds, func(k int) error {
			var err error
			out[k], err = o.runWalkOnce(x.ctx, x.shards, m, st, sigma, o.Seed+uint64(k))
			return err
		})
		return out, err
	}
	for _, eps := range o.Epsilons {
		if o.TuneEach {
			if st, err = x.tune(m, eps); err != nil {
				return err
			}
		}
		sigma, err := x.sigmaFor(m, st, eps)
		if err != nil {
			return err
		}
		out, err := seeds(sigma)
		if err != nil {
			return err
		}
		res.Points = append(res.Points, pointOf(m, st, eps, sigma, out))
	}
	if o.NonPrivate {
		out, err := seeds(0)
		if err != nil {
			return err
		}
		res.NonPrivate[m.Name] = pointOf(m, st, 0, 0, out).Mean
	}
	return nil
}

func pointOf(m WalkMethod, st walkSetting, eps, sigma float64, out []walkRunResult) WalkExperimentPoint {
	p := WalkExperimentPoint{Method: m.Name, Epsilon: eps, Sigma: sigma, Gamma: st.gamma, Eta: st.eta, Clip: st.clip,
		Min: math.Inf(1), Max: math.Inf(-1)}
	if m.Step.Kind != walk.StepProx && m.Step.Kind != walk.StepLinearized && m.Step.Kind != walk.StepLSSGD {
		p.Gamma = 0 // gradient ADMM and SGD have no gamma
	}
	if len(m.Etas) == 0 {
		p.Eta = m.Step.Eta
	}
	for _, r := range out {
		v := r.test
		if math.IsNaN(v) {
			v = r.train
		}
		p.Mean += v / float64(len(out))
		p.TrainMean += r.train / float64(len(out))
		p.Min, p.Max = math.Min(p.Min, v), math.Max(p.Max, v)
	}
	for _, r := range out {
		v := r.test
		if math.IsNaN(v) {
			v = r.train
		}
		p.Std += (v - p.Mean) * (v - p.Mean) / float64(len(out))
	}
	p.Std = math.Sqrt(p.Std)
	return p
}

// WriteCSV writes one line per method and epsilon.
func (r *WalkExperimentResult) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"data", "method", "figure", "epsilon", "delta", "sigma", "gamma", "step_size", "clip", "hops", "cap", "seeds",
		"test_mean", "test_min", "test_max", "test_std", "train_mean", "reference_test", "zero_model_test", "nonprivate_test", "tuning"})
	f := func(x float64) string { return strconv.FormatFloat(x, 'g', 8, 64) }
	o := r.Options
	for _, p := range r.Points {
		np := ""
		if v, ok := r.NonPrivate[p.Method]; ok {
			np = f(v)
		}
		cw.Write([]string{o.Data, p.Method, o.Figure, f(p.Epsilon), f(o.Delta), f(p.Sigma), f(p.Gamma), f(p.Eta), f(p.Clip),
			strconv.FormatUint(o.Hops, 10), strconv.Itoa(o.Cap), strconv.Itoa(o.Seeds),
			f(p.Mean), f(p.Min), f(p.Max), f(p.Std), f(p.TrainMean), f(r.Reference), f(r.Zero), np, r.tuning()})
	}
	cw.Flush()
	return cw.Error()
}

// walkPalette are the curve colours, in method order.
var walkPalette = []color.RGBA{{31, 119, 180, 255}, {214, 39, 40, 255}, {44, 160, 44, 255}, {148, 103, 189, 255},
	{140, 86, 75, 255}, {255, 127, 14, 255}, {23, 190, 207, 255}, {127, 127, 127, 255}}

// WritePNG draws test objective against epsilon on log-log axes: one line per method
// (mean over seeds) with its min-max range as error bars, and the non-private optimum.
func (r *WalkExperimentResult) WritePNG(w io.Writer) error {
	p := plot.New()
	o := r.Options
	p.Title.Text = fmt.Sprintf("%s: test objective vs epsilon\n(delta %g, %s figure, %d hops, %d seeds, tuned at %s)", o.Data, o.Delta, o.Figure, o.Hops, o.Seeds, r.tuning())
	p.X.Label.Text = "epsilon"
	p.Y.Label.Text = "test objective (mean, min-max over seeds)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	lo, hi := math.Inf(1), math.Inf(-1)
	for k, m := range o.Methods {
		var xys plotter.XYs
		var errs plotter.YErrors
		for _, pt := range r.Points {
			if pt.Method != m.Name || !(pt.Mean > 0) || math.IsInf(pt.Mean, 0) {
				continue
			}
			xys = append(xys, plotter.XY{X: pt.Epsilon, Y: pt.Mean})
			errs = append(errs, struct{ Low, High float64 }{pt.Mean - math.Max(pt.Min, pt.Mean*1e-3), pt.Max - pt.Mean})
			lo, hi = math.Min(lo, math.Max(pt.Min, pt.Mean*1e-3)), math.Max(hi, pt.Max)
		}
		if len(xys) == 0 {
			continue
		}
		c := walkPalette[k%len(walkPalette)]
		line, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		line.Color, pts.Color = c, c
		line.Width = vg.Points(1.5)
		pts.Shape = draw.CircleGlyph{}
		eb := &plotErrBars{xys: xys, errs: errs}
		bars, err := plotter.NewYErrorBars(eb)
		if err != nil {
			return err
		}
		bars.Color = c
		p.Add(line, pts, bars)
		p.Legend.Add(m.Name, line, pts)
	}
	if r.Reference > 0 {
		ref := plotter.NewFunction(func(float64) float64 { return r.Reference })
		ref.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		ref.Color = color.Black
		p.Add(ref)
		p.Legend.Add("non-private optimum", ref)
		lo = math.Min(lo, r.Reference)
	}
	if r.Zero > 0 {
		zero := plotter.NewFunction(func(float64) float64 { return r.Zero })
		zero.Dashes = []vg.Length{vg.Points(1), vg.Points(2)}
		zero.Color = color.Gray{Y: 90}
		p.Add(zero)
		p.Legend.Add("zero model", zero)
		hi = math.Max(hi, r.Zero)
	}
	if !(lo > 0) || math.IsInf(hi, 0) {
		return errors.New("testnet: walk experiment: nothing to plot")
	}
	p.Y.Min, p.Y.Max = lo/1.5, hi*1.5
	eps := o.Epsilons
	p.X.Min, p.X.Max = slices.Min(eps)/1.3, slices.Max(eps)*1.3
	wt, err := p.WriterTo(9*vg.Inch, 6*vg.Inch, "png")
	if err != nil {
		return err
	}
	_, err = wt.WriteTo(w)
	return err
}

type plotErrBars struct {
	xys  plotter.XYs
	errs plotter.YErrors
}

func (e *plotErrBars) Len() int                        { return len(e.xys) }
func (e *plotErrBars) XY(i int) (float64, float64)     { return e.xys[i].X, e.xys[i].Y }
func (e *plotErrBars) YError(i int) (float64, float64) { return e.errs[i].Low, e.errs[i].High }

// tuning names how the methods were tuned.
func (r *WalkExperimentResult) tuning() string {
	if r.Options.TuneEach {
		return "each epsilon"
	}
	return "smallest epsilon"
}
