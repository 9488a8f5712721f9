package experiment

import (
	"bufio"
	"context"
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
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/gossip"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/testnet/sim"
)

// The Fig. 5 comparison of Zhang, Khalili, Liu, "Recycled ADMM" (IEEE TIFS 15, 2020):
// average training loss L(t), test error of the averaged classifier and the privacy bound
// P(t) over t for the private conventional-ADMM baselines and the recycled algorithms, at
// matched total privacy, over several seeds (mean and range).
//
// Matched privacy: for every alpha in the list, R-ADMM and MR-ADMM run with that alpha.
// The target is R-ADMM's network figure P(T) (Theorem V.1, eq. (32), max over nodes, formula
// value) at the same T. Each baseline's alpha is then solved by bisection on its own
// accountant (privacy.ObjPertNetwork with that baseline's scheme: every iteration charged,
// for M-ADMM with alpha/eta(t)) so that its P(T) equals the target. MR-ADMM keeps the same
// alpha as R-ADMM, so its P(T) is slightly BELOW the target (its growing penalty shrinks
// the Jacobian term): it is compared at no more privacy loss than the others.

// Experiment algorithm names (gossip.ParseAlgo names).
const (
	ExpDVP      = "admm-dvp" // baseline: dual variable perturbation (Zhang and Zhu 2017)
	ExpMADMM    = "madmm"    // baseline: M-ADMM-style penalty perturbation (Zhang, Khalili, Liu 2018)
	ExpRADMM    = "radmm"
	ExpMRADMM   = "mradmm"
	ExpNoPriv   = "admm" // non-private conventional ADMM (reference curve)
	expMatchTol = 1e-12  // relative tolerance of the matched P(T)
)

// ExperimentAlgos are the private algorithms of the comparison, in legend order.
var ExperimentAlgos = []string{ExpDVP, ExpMADMM, ExpRADMM, ExpMRADMM}

// ExperimentOptions configures RunExperiment.
type ExperimentOptions struct {
	Train, Test *consensus.Dataset // Train already scaled (rows of norm <= 1); Test may be nil
	Nodes       int                // N (default 5)
	Graph       string             // graph spec (default ring)
	Split       string             // iid (default)
	Problem     consensus.Problem  // logistic loss, l1 = 0, l2 > 0
	Iters       int                // T (default 50)
	Alphas      []float64          // R-ADMM/MR-ADMM alphas (default 2, 1, 0.5)
	Seeds       int                // runs per setting (default 10)
	Seed        uint64             // run s uses seed Seed+s (partition, f(0), noise)
	Eta         float64            // R-ADMM and DVP penalty; base of the schedules (default 1)
	EtaGrowth   float64            // MR-ADMM eta(2k-1) = Eta q^k (default 1.04); M-ADMM eta(t) = Eta q^ceil(t/2)
	Gamma       float64            // even-step proximal weight (default 0.5)
	C           float64            // the paper's C (default 1; see GossipOptions)
	NoNonPriv   bool               // leave out the non-private ADMM reference
	Workers     int                // runs in parallel (default 1); results do not depend on it
	// Progress, when set, is called after every run with the runs done and the total.
	Progress func(done, total int)
}

// Band is the mean, minimum and maximum over seeds of a quantity at every t = 0..T.
type Band struct {
	Mean, Min, Max []float64
}

// ExperimentSeries is one curve set: an algorithm at one panel alpha.
type ExperimentSeries struct {
	Algo string
	// Alpha is the panel's alpha (that of R-ADMM and MR-ADMM); +Inf for non-private ADMM.
	Alpha float64
	// NoiseAlpha is the alpha this algorithm ran with, mean over seeds (matched for the
	// baselines; M-ADMM adds eta(t)*eps with eps of density exp(-NoiseAlpha ||eps||)).
	NoiseAlpha, NoiseAlphaMin, NoiseAlphaMax float64
	Loss, TestError, Privacy                 Band
	// ConditionsHold reports whether Theorem V.1's (or the baseline bound's) conditions held
	// in every run, including exact solves; Privacy is the formula value either way.
	ConditionsHold bool
	Reason         string
}

// ExperimentResult is the outcome of RunExperiment.
type ExperimentResult struct {
	Options ExperimentOptions // with defaults filled
	Series  []ExperimentSeries
	Runs    int
	Theorem string
	// Interrupted is set when the context was canceled before every run was done: Runs
	// counts the runs completed out of Total, and Series holds only the series whose runs
	// (every seed) all completed, in their usual order.
	Interrupted bool
	Total       int
}

func (o *ExperimentOptions) defaults() error {
	if o.Nodes == 0 {
		o.Nodes = 5
	}
	if o.Graph == "" {
		o.Graph = "ring"
	}
	if o.Split == "" {
		o.Split = "iid"
	}
	if o.Iters == 0 {
		o.Iters = 50
	}
	if o.Alphas == nil {
		o.Alphas = []float64{2, 1, 0.5}
	}
	if o.Seeds == 0 {
		o.Seeds = 10
	}
	if o.Eta == 0 {
		o.Eta = 1
	}
	if o.EtaGrowth == 0 {
		o.EtaGrowth = 1.04
	}
	if o.C == 0 {
		o.C = 1
	}
	if o.Workers == 0 {
		o.Workers = 1
	}
	switch {
	case o.Workers < 1:
		return fmt.Errorf("testnet: experiment: workers must be >= 1, got %d", o.Workers)
	case o.Train == nil || o.Train.Rows == 0:
		return errors.New("testnet: experiment: empty training set")
	case o.Iters < 1:
		return fmt.Errorf("testnet: experiment: iterations must be >= 1, got %d", o.Iters)
	case o.Seeds < 1:
		return fmt.Errorf("testnet: experiment: seeds must be >= 1, got %d", o.Seeds)
	case len(o.Alphas) == 0:
		return errors.New("testnet: experiment: no alpha given")
	case !(o.Eta > 0) || math.IsInf(o.Eta, 0):
		return fmt.Errorf("testnet: experiment: eta must be > 0 and finite, got %v", o.Eta)
	case !(o.EtaGrowth >= 1) || math.IsInf(o.EtaGrowth, 0):
		return fmt.Errorf("testnet: experiment: eta growth must be >= 1 and finite, got %v", o.EtaGrowth)
	case o.Problem.Loss != consensus.Logistic:
		return errors.New("testnet: experiment: the comparison uses the logistic loss (Theorem V.1 needs |L'| <= 1, L'' <= 1/4)")
	}
	for _, a := range o.Alphas {
		if math.IsNaN(a) || !(a > 0) || math.IsInf(a, 0) {
			return fmt.Errorf("testnet: experiment: alpha must be finite and > 0, got %v", a)
		}
	}
	return nil
}

// experimentNoiseAlphas sets every node's alpha schedule of acc for algo at base alpha:
// alpha_i(k) = algo.NoiseAlpha(alpha, eta_i(k)).
func experimentNoiseAlphas(algo gossip.Algo, acc []privacy.ObjPertNode, alpha float64) {
	for i := range acc {
		if len(acc[i].Alphas) != len(acc[i].Etas) {
			acc[i].Alphas = make([]float64, len(acc[i].Etas))
		}
		for k, e := range acc[i].Etas {
			acc[i].Alphas[k] = algo.NoiseAlpha(alpha, e)
		}
	}
}

// MatchAlpha returns the base alpha at which algo's network figure (the formula value of
// privacy.ObjPertNetwork over acc, with alpha_i(k) = algo.NoiseAlpha(alpha, eta_i(k)))
// equals target, found by bisection (the figure is continuous and increasing in alpha).
// acc is modified. It fails when even alpha -> 0 (infinite noise) exceeds the target: the
// Jacobian part of the bound alone is larger.
func MatchAlpha(algo gossip.Algo, acc []privacy.ObjPertNode, target float64) (float64, error) {
	if !(target > 0) || math.IsInf(target, 0) {
		return 0, fmt.Errorf("testnet: match: target privacy must be finite and > 0, got %v", target)
	}
	P := func(a float64) float64 {
		experimentNoiseAlphas(algo, acc, a)
		return privacy.ObjPertNetwork(acc).Epsilon
	}
	lo, hi := 0.0, 1.0
	if p0 := P(1e-300); !(p0 < target) {
		return 0, fmt.Errorf("testnet: match: %s cannot reach P(T) = %.6g: its Jacobian term alone is %.6g (more iterations are charged)", algo, target, p0)
	}
	for n := 0; P(hi) < target; n++ {
		if n > 2000 {
			return 0, fmt.Errorf("testnet: match: %s: no alpha reaches P(T) = %.6g", algo, target)
		}
		lo, hi = hi, 2*hi
	}
	for n := 0; n < 400 && hi-lo > 1e-16*hi; n++ {
		mid := lo + (hi-lo)/2
		if P(mid) < target {
			lo = mid
		} else {
			hi = mid
		}
	}
	// Of the two ends, keep the closer one.
	a := hi
	if math.Abs(P(lo)-target) < math.Abs(P(hi)-target) {
		a = lo
	}
	if got := P(a); math.Abs(got-target) > expMatchTol*target {
		return 0, fmt.Errorf("testnet: match: %s: P(T) = %.12g, target %.12g", algo, got, target)
	}
	return a, nil
}

// expRun is one run's curves (t = 0..T).
type expRun struct {
	loss, terr, priv []float64
	noiseAlpha       float64
	hold             bool
	reason           string
}

// gossipOptions returns the simulator options of one run: algo at base alpha (matched for the
// baselines by the caller) and seed.
func (o *ExperimentOptions) gossipOptions(algo string, alpha float64, seed uint64) sim.GossipOptions {
	g := sim.GossipOptions{
		Train: o.Train, Test: o.Test, Nodes: o.Nodes, Split: o.Split, Problem: o.Problem, Algo: algo,
		Graph: o.Graph, Iters: o.Iters, Alpha: alpha, Eta: o.Eta, Gamma: o.Gamma, C: o.C, Seed: seed,
	}
	switch algo {
	case ExpMRADMM:
		g.EtaGrowth = o.EtaGrowth
	case ExpMADMM:
		// The same penalty as MR-ADMM at the same iteration t: eta(t) = Eta q^ceil(t/2).
		g.EtaList = make([]float64, o.Iters)
		for t := 1; t <= o.Iters; t++ {
			g.EtaList[t-1] = o.Eta * math.Pow(o.EtaGrowth, float64((t+1)/2))
		}
	}
	return g
}

// runOne runs algo at base alpha with the given seed, recording L(t), the test error of
// the averaged classifier and P(t) (formula value of the accountant in fig).
func (o *ExperimentOptions) runOne(ctx context.Context, algo gossip.Algo, alpha float64, seed uint64) (*expRun, error) {
	g := o.gossipOptions(algo.String(), alpha, seed)
	gs, err := sim.NewGossipSim(&g)
	if err != nil {
		return nil, err
	}
	private := !math.IsInf(alpha, 1)
	var fig privacy.ObjPertNetworkFigure
	if private {
		experimentNoiseAlphas(algo, gs.Acc, alpha)
		fig = privacy.ObjPertNetwork(gs.Acc)
	}
	evalSet := o.Test
	if evalSet == nil || evalSet.Rows == 0 {
		evalSet = o.Train
	}
	n := len(gs.Machines)
	r := &expRun{noiseAlpha: alpha, hold: true}
	record := func(t int) error {
		for i, m := range gs.Machines {
			if m.Iter() != t {
				return fmt.Errorf("testnet: experiment: node %d at iteration %d while recording %d", i, m.Iter(), t)
			}
		}
		L := 0.0
		for i, m := range gs.Machines {
			L += o.Problem.MeanLoss(gs.Shards[i], m.ModelView())
		}
		avg, _ := gs.Average()
		p := math.NaN()
		if private {
			p = fig.PrivacyAt(algo.Scheme(), t)
		}
		r.loss = append(r.loss, L/float64(n))
		r.terr = append(r.terr, 1-o.Problem.Accuracy(evalSet, avg))
		r.priv = append(r.priv, p)
		return nil
	}
	if err := record(0); err != nil {
		return nil, err
	}
	last := 0
	for !gs.Done() {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		moved, err := gs.Step()
		if err != nil {
			return nil, err
		}
		if !moved {
			return nil, errors.New("testnet: experiment: gossip deadlock")
		}
		if t := gs.MinIter(); t > last {
			if t != last+1 {
				return nil, fmt.Errorf("testnet: experiment: iteration jumped from %d to %d", last, t)
			}
			last = t
			if err := record(t); err != nil {
				return nil, err
			}
		}
	}
	if private {
		for i, m := range gs.Machines {
			if _, bad := m.MaxResidual(); bad > 0 {
				gs.Acc[i].ExactSolves = false
			}
		}
		fig = privacy.ObjPertNetwork(gs.Acc)
		r.hold, r.reason = fig.ConditionsHold, fig.Reason
	}
	return r, nil
}

// target returns R-ADMM's planned P(T) at alpha for the seed, and checks the conditions.
func (o *ExperimentOptions) target(alpha float64, seed uint64) (float64, []privacy.ObjPertNode, error) {
	g := o.gossipOptions(ExpRADMM, alpha, seed)
	gs, err := sim.NewGossipSim(&g)
	if err != nil {
		return 0, nil, err
	}
	fig := privacy.ObjPertNetwork(gs.Acc)
	if !fig.ConditionsHold {
		return 0, nil, fmt.Errorf("testnet: experiment: Theorem V.1's conditions fail for radmm at alpha %g, so there is no privacy to match: %s", alpha, fig.Reason)
	}
	return fig.Epsilon, gs.Acc, nil
}

// matchedAlpha returns the base alpha of algo at seed whose planned P(T) equals target.
func (o *ExperimentOptions) matchedAlpha(algo gossip.Algo, target float64, seed uint64) (float64, error) {
	g := o.gossipOptions(algo.String(), 1, seed)
	gs, err := sim.NewGossipSim(&g)
	if err != nil {
		return 0, err
	}
	return MatchAlpha(algo, gs.Acc, target)
}

// PlannedPrivacy returns the planned network P(T) (formula value of the accountant) of algo
// at base alpha for the options and seed; used to check the matching.
func (o ExperimentOptions) PlannedPrivacy(algoName string, alpha float64, seed uint64) (float64, error) {
	if err := o.defaults(); err != nil {
		return 0, err
	}
	algo, err := gossip.ParseAlgo(algoName)
	if err != nil {
		return 0, err
	}
	g := o.gossipOptions(algo.String(), alpha, seed)
	gs, err := sim.NewGossipSim(&g)
	if err != nil {
		return 0, err
	}
	experimentNoiseAlphas(algo, gs.Acc, alpha)
	return privacy.ObjPertNetwork(gs.Acc).Epsilon, nil
}

func band(runs [][]float64) Band {
	T := len(runs[0])
	b := Band{Mean: make([]float64, T), Min: make([]float64, T), Max: make([]float64, T)}
	for t := 0; t < T; t++ {
		lo, hi, s := math.Inf(1), math.Inf(-1), 0.0
		for _, r := range runs {
			v := r[t]
			s += v
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
		b.Mean[t], b.Min[t], b.Max[t] = s/float64(len(runs)), lo, hi
	}
	return b
}

func collect(algo string, alpha float64, runs []*expRun) ExperimentSeries {
	s := ExperimentSeries{Algo: algo, Alpha: alpha, ConditionsHold: true}
	var L, E, P [][]float64
	s.NoiseAlphaMin, s.NoiseAlphaMax = math.Inf(1), math.Inf(-1)
	for _, r := range runs {
		L, E, P = append(L, r.loss), append(E, r.terr), append(P, r.priv)
		s.NoiseAlpha += r.noiseAlpha / float64(len(runs))
		s.NoiseAlphaMin, s.NoiseAlphaMax = math.Min(s.NoiseAlphaMin, r.noiseAlpha), math.Max(s.NoiseAlphaMax, r.noiseAlpha)
		if !r.hold && s.ConditionsHold {
			s.ConditionsHold, s.Reason = false, r.reason
		}
	}
	s.Loss, s.TestError, s.Privacy = band(L), band(E), band(P)
	return s
}

// RunExperiment runs the comparison: for every alpha and seed, R-ADMM and MR-ADMM at alpha,
// ADMM-DVP and the M-ADMM-style baseline at the alpha that matches R-ADMM's P(T) (see
// MatchAlpha), and, unless NoNonPriv, non-private ADMM once per seed.
func RunExperiment(o ExperimentOptions) (*ExperimentResult, error) {
	return RunExperimentContext(context.Background(), o)
}

// RunExperimentContext is RunExperiment stopped early when ctx is canceled: no new run
// starts, the runs under way stop at their next local step, and the result holds the
// series completed so far (ExperimentResult.Interrupted), without an error.
func RunExperimentContext(ctx context.Context, o ExperimentOptions) (*ExperimentResult, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	jobs, err := o.jobs()
	if err != nil {
		return nil, err
	}
	total := len(jobs)
	results, errs, done := o.runJobs(ctx, jobs)
	stopped := ctx.Err() != nil
	for _, err := range errs {
		if err != nil && !(stopped && errors.Is(err, ctx.Err())) {
			return nil, err
		}
	}
	res := &ExperimentResult{Options: o, Theorem: privacy.ObjPertTheorem, Runs: done, Total: total, Interrupted: stopped && done < total}
	for k := 0; k < total; k += o.Seeds {
		if slices.Contains(results[k:k+o.Seeds], nil) {
			continue // interrupted before every seed of this series was done
		}
		j := jobs[k]
		name := j.algo.String()
		sr := collect(name, j.alpha, results[k:k+o.Seeds])
		if j.algo == gossip.ADMM {
			sr.ConditionsHold, sr.Reason = false, "no noise, no privacy"
		}
		res.Series = append(res.Series, sr)
	}
	return res, nil
}

// expJob is one run of the experiment.
type expJob struct {
	algo  gossip.Algo
	alpha float64 // panel alpha; +Inf for non-private ADMM
	seed  uint64
}

// jobs returns one job per run, series by series (the seeds of one series together).
func (o *ExperimentOptions) jobs() ([]expJob, error) {
	algos := make([]gossip.Algo, len(ExperimentAlgos))
	for k, name := range ExperimentAlgos {
		a, err := gossip.ParseAlgo(name)
		if err != nil {
			return nil, err
		}
		algos[k] = a
	}
	var jobs []expJob
	if !o.NoNonPriv {
		for s := 0; s < o.Seeds; s++ {
			jobs = append(jobs, expJob{gossip.ADMM, math.Inf(1), o.Seed + uint64(s)})
		}
	}
	for _, alpha := range o.Alphas {
		for _, algo := range algos {
			for s := 0; s < o.Seeds; s++ {
				jobs = append(jobs, expJob{algo, alpha, o.Seed + uint64(s)})
			}
		}
	}
	return jobs, nil
}

// runJob runs job j, its alpha matched to R-ADMM's privacy for a baseline.
func (o *ExperimentOptions) runJob(ctx context.Context, j expJob) (*expRun, error) {
	a := j.alpha
	if j.algo != gossip.ADMM && !j.algo.Recycled() {
		target, _, err := o.target(j.alpha, j.seed)
		if err != nil {
			return nil, err
		}
		if a, err = o.matchedAlpha(j.algo, target, j.seed); err != nil {
			return nil, err
		}
	} else if j.algo.Recycled() {
		// Refuse a run whose guarantee does not hold (same check as for the baselines).
		if _, _, err := o.target(j.alpha, j.seed); err != nil {
			return nil, err
		}
	}
	r, err := o.runOne(ctx, j.algo, a, j.seed)
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("%s at alpha %g, seed %d: %w", j.algo, a, j.seed, err)
	}
	return r, nil
}

// runJobs runs the jobs on o.Workers goroutines and returns their results and errors by
// job index (so the outcome does not depend on the number of workers or the order in
// which runs finish) and the number of runs done. After an error no new job starts.
func (o *ExperimentOptions) runJobs(ctx context.Context, jobs []expJob) ([]*expRun, []error, int) {
	total := len(jobs)
	results := make([]*expRun, total)
	errs := make([]error, total)
	var mu sync.Mutex
	done := 0
	next := 0
	var wg sync.WaitGroup
	for w := 0; w < min(o.Workers, total); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				k := next
				failed := false
				for _, e := range errs {
					failed = failed || e != nil
				}
				next++
				mu.Unlock()
				if k >= total || failed || ctx.Err() != nil {
					return
				}
				r, err := o.runJob(ctx, jobs[k])
				mu.Lock()
				results[k], errs[k] = r, err
				if err == nil {
					done++
					if o.Progress != nil {
						o.Progress(done, total)
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return results, errs, done
}

// ExperimentCSVHeader is the header of WriteCSV.
const ExperimentCSVHeader = "algo,alpha,noise_alpha,iter,loss_mean,loss_min,loss_max," +
	"test_error_mean,test_error_min,test_error_max,privacy_mean,privacy_min,privacy_max"

// WriteCSV writes one line per series and iteration t = 0..T. alpha is the panel's alpha
// ("inf" for non-private ADMM), noise_alpha the mean alpha the algorithm ran with; the
// privacy columns are empty without noise.
func (r *ExperimentResult) WriteCSV(w io.Writer) error {
	bw := bufio.NewWriter(w)
	bw.WriteString(ExperimentCSVHeader + "\n")
	num := func(x float64) string {
		switch {
		case math.IsNaN(x):
			return ""
		case math.IsInf(x, 1):
			return "inf"
		}
		return strconv.FormatFloat(x, 'g', 10, 64)
	}
	for _, s := range r.Series {
		for t := range s.Loss.Mean {
			fmt.Fprintf(bw, "%s,%s,%s,%d,%s,%s,%s,%s,%s,%s,%s,%s,%s\n", s.Algo, num(s.Alpha), num(s.NoiseAlpha), t,
				num(s.Loss.Mean[t]), num(s.Loss.Min[t]), num(s.Loss.Max[t]),
				num(s.TestError.Mean[t]), num(s.TestError.Min[t]), num(s.TestError.Max[t]),
				num(s.Privacy.Mean[t]), num(s.Privacy.Min[t]), num(s.Privacy.Max[t]))
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("testnet: experiment csv: %w", err)
	}
	return nil
}

// ExperimentSummary is the final-iteration comparison at one alpha.
type ExperimentSummary struct {
	Alpha float64
	// Rows, in ExperimentAlgos order: final mean loss, test error and P(T).
	Rows []ExperimentSeries
	// Final values by algorithm.
	Loss, TestError, Privacy map[string]float64
	// RBeatsDVP and MRBeatsDVP: lower final mean loss than ADMM-DVP at matched P(T).
	RBeatsDVP, MRBeatsDVP bool
}

// Summary returns, per alpha, the final mean values of every private algorithm and whether
// R-ADMM and MR-ADMM reach a lower loss than ADMM-DVP at matched privacy.
func (r *ExperimentResult) Summary() []ExperimentSummary {
	var out []ExperimentSummary
	for _, a := range r.Options.Alphas {
		s := ExperimentSummary{Alpha: a, Loss: map[string]float64{}, TestError: map[string]float64{}, Privacy: map[string]float64{}}
		for _, sr := range r.Series {
			if sr.Alpha != a {
				continue
			}
			T := len(sr.Loss.Mean) - 1
			s.Rows = append(s.Rows, sr)
			s.Loss[sr.Algo], s.TestError[sr.Algo], s.Privacy[sr.Algo] = sr.Loss.Mean[T], sr.TestError.Mean[T], sr.Privacy.Mean[T]
		}
		s.RBeatsDVP = s.Loss[ExpRADMM] < s.Loss[ExpDVP]
		s.MRBeatsDVP = s.Loss[ExpMRADMM] < s.Loss[ExpDVP]
		out = append(out, s)
	}
	return out
}

// expStyle is how an algorithm is drawn: a colour (Okabe-Ito palette, told apart with
// the common colour-vision deficiencies), a dash pattern and a width, so that curves stay
// distinct where they overlap and in grey-scale print.
type expStyle struct {
	color  color.RGBA
	dashes []vg.Length
	width  vg.Length
}

var expStyles = map[string]expStyle{
	ExpDVP:    {color.RGBA{0xd5, 0x5e, 0x00, 0xff}, []vg.Length{vg.Points(7), vg.Points(3)}, vg.Points(1.6)},                                   // vermillion, dashed
	ExpMADMM:  {color.RGBA{0x00, 0x72, 0xb2, 0xff}, []vg.Length{vg.Points(7), vg.Points(2.5), vg.Points(1.5), vg.Points(2.5)}, vg.Points(1.6)}, // blue, dash-dot
	ExpRADMM:  {color.RGBA{0x00, 0x9e, 0x73, 0xff}, nil, vg.Points(1.8)},                                                                       // bluish green, solid
	ExpMRADMM: {color.RGBA{0xaa, 0x33, 0x77, 0xff}, []vg.Length{vg.Points(2), vg.Points(2)}, vg.Points(1.8)},                                   // purple, dotted
	ExpNoPriv: {color.RGBA{0x00, 0x00, 0x00, 0xff}, []vg.Length{vg.Points(1), vg.Points(2.5)}, vg.Points(2.6)},                                 // black, heavy dots, drawn last
}

// expLabel is the legend text of an algorithm.
func expLabel(algo string) string {
	switch algo {
	case ExpDVP:
		return "ADMM-DVP (baseline, matched P(T))"
	case ExpMADMM:
		return "M-ADMM-style (baseline, matched P(T))"
	case ExpRADMM:
		return "R-ADMM"
	case ExpMRADMM:
		return "MR-ADMM"
	case ExpNoPriv:
		return "non-private ADMM (reference)"
	}
	return algo
}

func seriesXY(v []float64) (plotter.XYs, error) {
	xy := make(plotter.XYs, 0, len(v))
	for t, y := range v {
		if math.IsNaN(y) || math.IsInf(y, 0) {
			return nil, fmt.Errorf("non-finite value %v at t = %d", y, t)
		}
		xy = append(xy, plotter.XY{X: float64(t), Y: y})
	}
	return xy, nil
}

// expBandAlpha is the opacity of a min-max band: low enough that five overlapping bands
// still show each other.
const expBandAlpha = 0x1a

// expEdgeAlpha is the opacity of a band's edges.
const expEdgeAlpha = 0xa0

// newBand returns the filled min-max band of b in style st, translucent, with thin
// edges in the algorithm's colour and dash pattern.
func newBand(b Band, st expStyle) (*plotter.Polygon, error) {
	lo, err := seriesXY(b.Min)
	if err != nil {
		return nil, err
	}
	hi, err := seriesXY(b.Max)
	if err != nil {
		return nil, err
	}
	ring := append(plotter.XYs{}, lo...)
	for k := len(hi) - 1; k >= 0; k-- {
		ring = append(ring, hi[k])
	}
	poly, err := plotter.NewPolygon(ring)
	if err != nil {
		return nil, err
	}
	c := st.color
	poly.Color = color.NRGBA{c.R, c.G, c.B, expBandAlpha}
	poly.LineStyle = draw.LineStyle{Color: color.NRGBA{c.R, c.G, c.B, expEdgeAlpha}, Width: vg.Points(0.7), Dashes: st.dashes}
	return poly, nil
}

// newMeanLine returns the mean line of b in style st.
func newMeanLine(b Band, st expStyle) (*plotter.Line, error) {
	mean, err := seriesXY(b.Mean)
	if err != nil {
		return nil, err
	}
	l, err := plotter.NewLine(mean)
	if err != nil {
		return nil, err
	}
	l.Color, l.Width, l.Dashes = st.color, st.width, st.dashes
	return l, nil
}

// drawOrder returns list with the non-private reference moved to the end, so that it is
// drawn last (on top).
func drawOrder(list []*ExperimentSeries) []*ExperimentSeries {
	var out []*ExperimentSeries
	var ref *ExperimentSeries
	for _, s := range list {
		if s.Algo == ExpNoPriv {
			ref = s
			continue
		}
		out = append(out, s)
	}
	if ref != nil {
		out = append(out, ref)
	}
	return out
}

// fig5Item is a legend entry of the comparison: band and mean line of an algorithm.
type fig5Item struct {
	band *plotter.Polygon
	line *plotter.Line
}

// fig5Row builds the three panels of one alpha: L(t), test error and P(t) of the series
// in list (bands first, then every mean line, the non-private reference last), and the
// legend entries of the algorithms it drew.
func fig5Row(list []*ExperimentSeries, alpha float64, T int) ([3]*plot.Plot, map[string]fig5Item, error) {
	list = drawOrder(list)
	items := map[string]fig5Item{}
	panels := [3]*plot.Plot{plot.New(), plot.New(), plot.New()}
	panels[0].Title.Text = fmt.Sprintf("average training loss L(t), alpha = %g", alpha)
	panels[1].Title.Text = fmt.Sprintf("test error (averaged model), alpha = %g", alpha)
	panels[2].Title.Text = fmt.Sprintf("privacy bound P(t) (Thm V.1), alpha = %g", alpha)
	panels[0].Y.Label.Text = "L(t)"
	panels[1].Y.Label.Text = "test error"
	panels[2].Y.Label.Text = "P(t), epsilon (pure DP)"
	var lossBands, errBands []Band
	var lines [3][]plot.Plotter
	for _, s := range list {
		st := expStyles[s.Algo]
		lossBands, errBands = append(lossBands, s.Loss), append(errBands, s.TestError)
		for k, b := range []Band{s.Loss, s.TestError} {
			poly, err := newBand(b, st)
			if err != nil {
				return panels, nil, fmt.Errorf("%s: %w", s.Algo, err)
			}
			panels[k].Add(poly)
			l, err := newMeanLine(b, st)
			if err != nil {
				return panels, nil, fmt.Errorf("%s: %w", s.Algo, err)
			}
			lines[k] = append(lines[k], l)
			if k == 0 {
				items[s.Algo] = fig5Item{poly, l}
			}
		}
		if s.Algo != ExpNoPriv {
			l, err := newMeanLine(s.Privacy, st)
			if err != nil {
				return panels, nil, fmt.Errorf("%s privacy: %w", s.Algo, err)
			}
			lines[2] = append(lines[2], l)
		}
	}
	for k, p := range panels {
		p.Add(lines[k]...) // every line above every band
	}
	chooseYRange(lossBands, yQuantile, true).apply(&panels[0].Y)
	chooseYRange(errBands, yQuantile, false).apply(&panels[1].Y)
	if _, isLog := panels[0].Y.Scale.(plot.LogScale); isLog {
		panels[0].Y.Label.Text = "L(t), log scale"
	}
	panels[2].Y.Min = 0
	panels[2].Y.Tick.Marker = expTicks{}
	for _, p := range panels {
		p.Title.TextStyle.Font.Size = vg.Points(11)
		p.X.Label.Text = "iteration t"
		p.X.Label.TextStyle.Font.Size = vg.Points(11)
		p.Y.Label.TextStyle.Font.Size = vg.Points(11)
		p.X.Min, p.X.Max = 0, float64(T)
		p.X.Tick.Marker = expTicks{}
		p.Add(plotter.NewGrid())
	}
	return panels, items, nil
}

// Size of the comparison figure, in points (96 dpi: 4/3 pixel per point).
const (
	fig5PanelW, fig5PanelH, fig5LegendH = 340, 260, 60
)

// WritePNG draws the comparison as one PNG: one row per alpha with the average training
// loss L(t), the test error of the averaged classifier and the privacy bound P(t); mean
// lines over the seeds, each algorithm in its own colour and dash pattern, over
// translucent min-max bands (every band is drawn before every line, the non-private
// reference last). The y limits of the loss and test-error panels come from the data
// (chooseYRange): from the smallest lower band edge to the 90th percentile of the upper
// band edges, raised to the largest mean, with a log axis for the loss when these limits
// span a decade or more; P(t) runs from 0. A legend on top names the curves and the rule.
func (r *ExperimentResult) WritePNG(w io.Writer) (err error) {
	// The plotting library reports some invalid states by panicking.
	defer func() {
		if e := recover(); e != nil {
			err = fmt.Errorf("testnet: experiment plot: %v", e)
		}
	}()
	alphas := r.Options.Alphas
	if len(r.Series) == 0 || len(alphas) == 0 {
		return errors.New("testnet: experiment plot: nothing to draw")
	}
	var nonPriv *ExperimentSeries
	for k := range r.Series {
		if r.Series[k].Algo == ExpNoPriv {
			nonPriv = &r.Series[k]
		}
	}
	c := vgimg.NewWith(vgimg.UseWH(vg.Length(3*fig5PanelW), vg.Length(fig5PanelH*len(alphas)+fig5LegendH)),
		vgimg.UseDPI(96), vgimg.UseBackgroundColor(color.White))
	dc := draw.New(c)
	body := draw.Crop(dc, 0, 0, 0, -vg.Length(fig5LegendH))
	tiles := draw.Tiles{Rows: len(alphas), Cols: 3, PadX: vg.Points(10), PadY: vg.Points(10),
		PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8)}
	items := map[string]fig5Item{}
	T := r.Options.Iters
	for row, a := range alphas {
		var list []*ExperimentSeries
		if nonPriv != nil {
			list = append(list, nonPriv)
		}
		for k := range r.Series {
			if s := &r.Series[k]; s.Algo != ExpNoPriv && s.Alpha == a {
				list = append(list, s)
			}
		}
		panels, got, err := fig5Row(list, a, T)
		if err != nil {
			return fmt.Errorf("testnet: experiment plot: %w", err)
		}
		for name, it := range got {
			items[name] = it
		}
		for col, p := range panels {
			p.Draw(tiles.At(body, col, row))
		}
	}
	// Legend: baselines, recycled algorithms, reference and notes in three columns.
	cols := [][]string{{ExpDVP, ExpMADMM}, {ExpRADMM, ExpMRADMM}, {ExpNoPriv}}
	top := draw.Crop(dc, vg.Points(12), 0, vg.Length(fig5PanelH*len(alphas)), 0)
	for k, names := range cols {
		l := plot.NewLegend()
		l.Top, l.Left = true, true
		l.TextStyle.Font.Size = vg.Points(11)
		l.ThumbnailWidth = vg.Points(40)
		l.YOffs = -vg.Points(10)
		for _, name := range names {
			if it, ok := items[name]; ok {
				l.Add(expLabel(name), it.band, it.line)
			}
		}
		if k == 2 {
			l.Add(fmt.Sprintf("N = %d, %s graph, T = %d, %d seeds: mean, min-max band", r.Options.Nodes, r.Options.Graph, T, r.Options.Seeds))
			l.Add(fmt.Sprintf("y: lowest band edge to %.0fth pct. of upper edges;", 100*yQuantile))
			l.Add(fmt.Sprintf("L(t) on a log axis when that spans %gx or more", yLogRatio))
		}
		l.Draw(draw.Crop(top, vg.Length(k*fig5PanelW), 0, 0, 0))
	}
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(w); err != nil {
		return fmt.Errorf("testnet: experiment plot: %w", err)
	}
	return nil
}

// expTicks are gonum's default tick positions with short labels (%g, 4 digits).
type expTicks struct{}

func (expTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for k := range ts {
		if ts[k].Label != "" {
			ts[k].Label = strconv.FormatFloat(ts[k].Value, 'g', 4, 64)
		}
	}
	return ts
}
