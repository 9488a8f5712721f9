package audit

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/testnet/sim"
	"github.com/dpadmm/dpadmm/walk"
)

// Empirical privacy audit of the walk (random-walk private ADMM), with every local step of
// walk.StepKind, and of R-ADMM.
//
// The harness runs the real machine code many times on two neighbouring datasets D and D'
// that differ only at the audited node, and applies to what each observer sees the strongest
// distinguishing test it has. The error rates of the test, evaluated on trials not used to
// choose it, give a lower confidence bound on epsilon (privacy.EmpiricalEpsilon), printed
// next to the upper bound the project's accountant claims for that observer. A lower bound
// above the upper bound is a violation: the mechanism, or its accounting, is wrong.
//
// The adversary knows everything but the noise and which dataset was used: the other nodes'
// data, the initial state (u = 0 at every node, the initial token) and the path of the
// token. Every trial starts from that state; half of the trials on each dataset choose the
// test (its threshold, and for the residue test the lattice step), the other half evaluate it.

// Audit test names.
const (
	// AuditProjection is the likelihood-ratio test of a Gaussian shift: the view is projected
	// on the difference of its noiseless values under D and D'.
	AuditProjection = "projection"
	// AuditResidue checks whether the low-order bits of the released update, modulo the
	// noise lattice step, are those of D's or of D''s noiseless update.
	AuditResidue = "lattice residue"
	// AuditNoiseRecovery recovers the objective-perturbation noise from the released
	// primal vector under each dataset (KKT condition of the perturbed solve) and compares
	// its likelihood exp(-alpha ||eps||) under D and D'.
	AuditNoiseRecovery = "noise recovery"
	// AuditRowCountScale is the scale test of the DP-SGD-type steps (ls-sgd, sgd): it reads
	// the total row count off the release (see scaleScore).
	AuditRowCountScale = "row-count scale"
)

// AuditResult is one line of an audit: one observer, one distinguishing test.
type AuditResult struct {
	// Algo is the algorithm as --algo names it: "walk" (prox, linearized and ls-sgd steps),
	// "walk-sgd", "walk-gadmm" (WalkAlgo) or "radmm".
	Algo string `json:"algo"`
	// Step names the mechanism within Algo: the walk's local step (walk.StepKind.String():
	// prox, linearized, ls-sgd, sgd, gadmm) or "radmm" for the R-ADMM release.
	Step     string `json:"step"`
	Observer string `json:"observer"`
	View     string `json:"view"` // what the observer sees
	Test     string `json:"test"`
	// LowerEpsilon is the empirical lower bound: with probability at least RowConfidence,
	// the mechanism is not (e, Delta)-DP for this observer for any e < LowerEpsilon; all the
	// FamilySize bounds of the audit run hold together with probability at least Confidence
	// (AuditBonferroni).
	LowerEpsilon privacy.Epsilon `json:"lower_epsilon"`
	// LowerTheorem is the result LowerEpsilon rests on (privacy.AuditTheorem).
	LowerTheorem string `json:"lower_theorem"`
	// LowerEpsilonCI is a two-sided RowConfidence interval for the epsilon implied by the
	// test's true error rates (the lower end is at most LowerEpsilon); +Inf is JSON null.
	LowerEpsilonCI [2]privacy.Epsilon `json:"lower_epsilon_ci"`
	// Estimate is the epsilon implied by the observed error rates (+Inf: JSON null).
	Estimate privacy.Epsilon `json:"estimate"`
	// UpperEpsilon is the accountant's figure for this observer at Delta (unbounded, JSON
	// null, when it gives no guarantee), resting on Theorem.
	UpperEpsilon   privacy.Epsilon `json:"upper_epsilon"`
	Theorem        string          `json:"theorem"`
	ConditionsHold bool            `json:"conditions_hold"`
	Delta          float64         `json:"delta"`
	// Confidence is the family-wise confidence of the audit run; RowConfidence =
	// 1 - (1-Confidence)/FamilySize is that of this row's bound and interval, FamilySize the
	// number of bounds the run reports (Bonferroni).
	Confidence    float64 `json:"confidence"`
	RowConfidence float64 `json:"row_confidence"`
	FamilySize    int     `json:"family_size"`
	// Trials is the number of trials per dataset (calibration and evaluation); EvalTrials of
	// them, per dataset, give the bound.
	Trials     int                   `json:"trials"`
	EvalTrials int                   `json:"eval_trials"`
	Counts     privacy.AttackCounts  `json:"counts"`
	Rule       privacy.ThresholdTest `json:"rule"`
	Secure     bool                  `json:"secure_noise"`
	// SensitivityUsed is the fraction of the sensitivity assumed by the claim that the
	// canary attains without noise, SensitivityOf saying of what: for the prox and
	// linearized steps ||v_D - v_D'|| / (4 lambda C) with v i's (lattice-rounded) data part;
	// for ls-sgd and sgd h ||N_D - N_D'|| / (2C), N the integer clipped gradient sum read off
	// the release (replace-one: one row changed); for gadmm ||x~_D - x~_D'|| / (eta Delta),
	// eta Delta the run's privacy.GADMMParams.Sensitivity (node-level); for R-ADMM
	// ||grad O_D - grad O_D'|| / (2 C_i/B_i) at the noiseless release.
	SensitivityUsed float64 `json:"sensitivity_used"`
	SensitivityOf   string  `json:"sensitivity_of"`
	// Violation is LowerEpsilon > UpperEpsilon: the audit refutes the claim.
	Violation bool   `json:"violation"`
	Note      string `json:"note,omitempty"`
}

// Verdict returns "OK" when the lower bound does not exceed the upper bound, else "VIOLATION".
func (r AuditResult) Verdict() string {
	if r.Violation {
		return "VIOLATION"
	}
	return "OK"
}

// finish fills the bounds and the verdict of r from the evaluation estimate and the claim.
func (r *AuditResult) finish(est privacy.AuditEstimate, upper float64) {
	if math.IsInf(r.Rule.Threshold, -1) { // "always D": keep the JSON valid
		r.Rule.Threshold = -math.MaxFloat64
	}
	r.LowerTheorem = privacy.AuditTheorem
	r.LowerEpsilon = privacy.Eps(est.Epsilon)
	r.LowerEpsilonCI = [2]privacy.Epsilon{privacy.Eps(est.Lo), privacy.Eps(est.Hi)}
	r.Estimate = privacy.Eps(est.Point)
	r.Counts = est.Counts
	r.Violation = est.Epsilon > upper
	r.UpperEpsilon = privacy.Eps(upper)
}

// AuditBonferroni corrects the rows of one audit run for multiple testing: every row's
// bound and interval are recomputed from its evaluation counts at the confidence
// 1 - (1-confidence)/len(res) (Bonferroni's inequality: the probability that some row's
// bound is wrong is at most the sum of the rows' error probabilities, whatever their
// dependence), so that all of them hold together with probability at least confidence.
// Without it an audit of R rows at 95% each would flag a tight but correct mechanism with
// probability up to 1 - 0.95^R. Verdicts are recomputed against UpperEpsilon. WalkAudit and
// RADMMAudit apply it to their own rows; a run that reports several audits applies it again
// to all of them.
func AuditBonferroni(res []AuditResult, confidence float64) error {
	if !(confidence > 0 && confidence < 1) {
		return fmt.Errorf("testnet: audit: confidence must be in (0,1), got %v", confidence)
	}
	row := rowConfidence(confidence, len(res))
	for k := range res {
		r := &res[k]
		est, err := privacy.EmpiricalEpsilon(r.Counts, r.Delta, row)
		if err != nil {
			return fmt.Errorf("testnet: audit: %s/%s/%s: %w", r.Step, r.Observer, r.Test, err)
		}
		r.Confidence, r.RowConfidence, r.FamilySize = confidence, row, len(res)
		r.finish(est, float64(r.UpperEpsilon))
	}
	return nil
}

// rowConfidence is the confidence of each of `rows` bounds that hold together with
// confidence c (Bonferroni).
func rowConfidence(c float64, rows int) float64 { return 1 - (1-c)/float64(max(rows, 1)) }

// zeroNoise is a Noise that draws zeros: the noiseless run of a mechanism through its own
// code. Uniform returns 0, so that a Poisson sample at any rate q > 0 takes every row: the
// reference of a subsampled step is its update with the canary row sampled, the case the
// tests distinguish.
type zeroNoise struct{}

func (zeroNoise) Normal(dst []float64, sigma float64) {
	v := 0.0
	if privacy.ValidateSigma(sigma) != nil {
		v = math.NaN()
	}
	for i := range dst {
		dst[i] = v
	}
}
func (zeroNoise) Uniform() float64 { return 0 }
func (zeroNoise) Secure() bool     { return false }

// switchNoise forwards to the current source; the machines of a worker hold it, and the
// worker points it at the source of each block of trials.
type switchNoise struct{ cur privacy.Noise }

func (s *switchNoise) Normal(dst []float64, sigma float64) { s.cur.Normal(dst, sigma) }
func (s *switchNoise) Uniform() float64                    { return s.cur.Uniform() }
func (s *switchNoise) Secure() bool                        { return s.cur.Secure() }

// AuditNoise returns the noise factory of an audit: crypto/rand noise for every block when
// seeded is false, else a seeded source per block derived from seed (reproducible, not
// secure).
func AuditNoise(seeded bool, seed uint64) func(block uint64) privacy.Noise {
	if !seeded {
		return func(uint64) privacy.Noise { return privacy.NewSecureNoise() }
	}
	return func(b uint64) privacy.Noise { return privacy.NewSeededNoise(sim.Mix(seed, int(b), 11)) }
}

// auditBlock is the number of trials per dataset that share one noise source.
const auditBlock = 64

// runBlocks runs trials [0, trials) in blocks of auditBlock on workers goroutines. newWorker
// builds one worker's state around its switchable noise; do runs one trial (both datasets).
func runBlocks(trials, workers int, noise func(uint64) privacy.Noise,
	newWorker func(n privacy.Noise) (func(t int) error, error)) error {
	if workers < 1 {
		workers = min(2, runtime.GOMAXPROCS(0))
	}
	blocks := (trials + auditBlock - 1) / auditBlock
	workers = max(1, min(workers, blocks))
	var next atomic.Int64
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			sw := &switchNoise{}
			do, err := newWorker(sw)
			if err != nil {
				errs[w] = err
				return
			}
			for {
				b := int(next.Add(1) - 1)
				if b >= blocks {
					return
				}
				sw.cur = noise(uint64(b))
				for t := b * auditBlock; t < min(trials, (b+1)*auditBlock); t++ {
					if err := do(t); err != nil {
						errs[w] = err
						next.Store(int64(blocks)) // stop the other workers
						return
					}
				}
			}
		}(w)
	}
	wg.Wait()
	return errors.Join(errs...)
}

// scorer turns one view of one trial into a score, higher meaning "more like D".
type scorer interface {
	score(view []float64) float64
}

// projScore is the projection on the difference of the noiseless views: <v - mid, dir>.
type projScore struct{ mid, dir []float64 }

func newProjScore(refD, refD2 []float64) projScore {
	p := projScore{mid: make([]float64, len(refD)), dir: make([]float64, len(refD))}
	for k := range refD {
		p.mid[k] = (refD[k] + refD2[k]) / 2
		p.dir[k] = refD[k] - refD2[k]
	}
	return p
}

func (p projScore) score(v []float64) float64 {
	s := 0.0
	for k, x := range v {
		s += (x - p.mid[k]) * p.dir[k]
	}
	return s
}

// residueScore compares the residues modulo 1 of the update read off a view in units of a
// lattice step h with those of the noiseless updates under D and D': sum_k
// cos 2 pi (phi_k - rho_D,k) - cos 2 pi (phi_k - rho_D',k), with phi = frac(read(v, k)). A
// mechanism whose released update is a multiple of h plus a data part leaks the data
// part's residue; an update that is a multiple of h leaks nothing this way. read returns
// NaN for a coordinate the view does not determine (it is left out).
type residueScore struct {
	read        func(v []float64, k int) float64
	rhoD, rhoD2 []float64
}

func fracPart(x float64) float64 { return x - math.Floor(x) }

func newResidueScore(read func(v []float64, k int) float64, dims int, refD, refD2 []float64) *residueScore {
	r := &residueScore{read: read}
	r.rhoD, r.rhoD2 = make([]float64, dims), make([]float64, dims)
	for k := range dims {
		r.rhoD[k], r.rhoD2[k] = fracPart(read(refD, k)), fracPart(read(refD2, k))
	}
	return r
}

// walkRead is the read-off of the prox and linearized steps: r = (scale*v - base)*n is the
// update in units of u, divided by h.
func walkRead(h, scale, n float64, base []float64, reg consensus.Regularizer) func(v []float64, k int) float64 {
	return func(v []float64, k int) float64 {
		if reg.Unpenalised(k, len(v)) { // the intercept: z = zhat there (Reg.Free), nothing to undo
			return (v[k] - base[k]) * n / h
		}
		return (scale*v[k] - base[k]) * n / h
	}
}

func (r *residueScore) score(v []float64) float64 {
	s := 0.0
	for k := range r.rhoD {
		phi := fracPart(r.read(v, k))
		if math.IsNaN(phi) || math.IsNaN(r.rhoD[k]) || math.IsNaN(r.rhoD2[k]) {
			continue
		}
		s += math.Cos(2*math.Pi*(phi-r.rhoD[k])) - math.Cos(2*math.Pi*(phi-r.rhoD2[k]))
	}
	return s
}

// candidateScores holds, for one observer and one test, the scores of every trial under
// each candidate scorer (e.g. one per lattice step): sc[c][w][t].
type candidateScores struct {
	test    string
	names   []string // one per candidate
	scorers []scorer
	sc      [][2][]float64
}

func newCandidates(test string, trials int, names []string, scorers []scorer) *candidateScores {
	c := &candidateScores{test: test, names: names, scorers: scorers, sc: make([][2][]float64, len(scorers))}
	for i := range c.sc {
		c.sc[i] = [2][]float64{make([]float64, trials), make([]float64, trials)}
	}
	return c
}

func (c *candidateScores) record(w, t int, view []float64) {
	for i, s := range c.scorers {
		c.sc[i][w][t] = s.score(view)
	}
}

// evaluate chooses the candidate and threshold on the calibration trials [0, nc) and
// returns the estimate of the evaluation trials [cal, trials), with the chosen candidate's name.
func (c *candidateScores) evaluate(nc int, delta, confidence float64) (privacy.ThresholdTest, privacy.AuditEstimate, string, error) {
	bestC, bestE := -1, 0.0
	var bestT privacy.ThresholdTest
	for i := range c.sc {
		thr, est, err := privacy.BestThreshold(c.sc[i][0][:nc], c.sc[i][1][:nc], delta, confidence)
		if err != nil {
			return privacy.ThresholdTest{}, privacy.AuditEstimate{}, "", err
		}
		if bestC < 0 || est.Epsilon > bestE {
			bestC, bestE, bestT = i, est.Epsilon, thr
		}
	}
	cnt := bestT.Counts(c.sc[bestC][0][nc:], c.sc[bestC][1][nc:])
	est, err := privacy.EmpiricalEpsilon(cnt, delta, confidence)
	return bestT, est, c.names[bestC], err
}

// AuditCanary gives the audited node's local data in the two neighbouring datasets (the
// other nodes' data is the same in both). The walk's loss weights are computed with D's
// row count in both.
type AuditCanary struct {
	D, DPrime *consensus.Dataset
	// Description says how they differ, for the report.
	Description string
}

// WalkAuditSetup is what a WalkUpdateFactory needs to build the audited node's update.
type WalkAuditSetup struct {
	// Config is the audited node's machine configuration, Noise and Rand not set.
	Config walk.Config
	// Data holds the node's local data in D (0) and D' (1); Loss and Weight make its local
	// loss (consensus.NewLocalLoss(Data[w], Loss, Weight)).
	Data   [2]*consensus.Dataset
	Loss   consensus.Loss
	Weight float64
	Dim    int
}

// WalkUpdate is the audited node's noisy update. Update applies the node's update with its
// data in dataset world (0: D, 1: D') to the token it receives, in place (Z and Zhat), from
// the node's initial state (u_i = 0, no update made yet), drawing noise from the source given
// to the factory. It is used from one goroutine.
type WalkUpdate interface {
	Update(world int, tok *walk.Token) error
}

// WalkUpdateFactory builds the update under test for one worker, drawing from noise.
type WalkUpdateFactory func(s WalkAuditSetup, noise privacy.Noise) (WalkUpdate, error)

// machineUpdate is the real update: walk.Machine.Step on a machine reset to u_i = 0.
type machineUpdate struct {
	m    [2]*walk.Machine
	zero []float64
	mech string
}

// MachineUpdate is the WalkUpdateFactory of the shipped walk machine (walk.New, Step, Ready,
// Advance) with the local step of s.Config: the update the audit runs unless another is
// injected.
func MachineUpdate(s WalkAuditSetup, noise privacy.Noise) (WalkUpdate, error) {
	mu := &machineUpdate{zero: make([]float64, s.Dim), mech: auditMechanism(s.Config.Step.Kind)}
	for w := range mu.m {
		ll, err := consensus.NewLocalLoss(s.Data[w], s.Loss, s.Weight)
		if err != nil {
			return nil, err
		}
		cfg := s.Config
		cfg.Noise, cfg.Rand = noise, rand.New(rand.NewPCG(1, uint64(w)))
		if mu.m[w], err = walk.New(cfg, ll, s.Dim); err != nil {
			return nil, err
		}
	}
	return mu, nil
}

func (mu *machineUpdate) Update(world int, tok *walk.Token) error {
	return stepFresh(mu.m[world], mu.zero, tok, mu.mech)
}

// stepFresh resets m to u = 0 with no update made (so that a decaying step size is at its
// first value), steps it on tok (updated in place, the machine works on the token's
// vectors) and advances it. The step must be one noisy update whose ledger entry has the
// mechanism mech of the machine's local step (auditMechanism): an update charged as
// anything else is not the mechanism the claim is about.
func stepFresh(m *walk.Machine, zero []float64, tok *walk.Token, mech string) error {
	if err := m.Restore(walk.Checkpoint{U: zero}); err != nil {
		return err
	}
	if err := m.Step(walk.Message{From: -1, Token: *tok}); err != nil {
		return err
	}
	rd := m.Ready()
	if len(rd.Outbox) != 1 || len(rd.Ledger) != 1 {
		return errors.New("testnet: audit: the machine made no noisy update")
	}
	if got := rd.Ledger[0].Mechanism; got != mech {
		return fmt.Errorf("testnet: audit: the machine's update is charged as %q, its step's mechanism is %q", got, mech)
	}
	out := rd.Outbox[0].Token
	copy(tok.Z, out.Z)
	copy(tok.Zhat, out.Zhat)
	tok.Hop = out.Hop
	m.Advance(rd)
	return nil
}

// WalkAuditOptions configures an audit of the walk.
type WalkAuditOptions struct {
	// Train is the (scaled) training data, split over Nodes nodes with Split and Seed.
	Train *consensus.Dataset
	Nodes int    // n (>= FinalHops + 2)
	Split string // iid (default), contiguous or label
	Seed  uint64 // data split and canary (not the noise)
	// Problem, Gamma, Lambda, Clip and Sigma are the walk's settings (walk.Config): for
	// ls-sgd and sgd Clip is the per-example gradient clip and Sigma the noise std on the
	// clipped sum, for gadmm Clip the per-example clip and Sigma the noise std on x.
	Problem                    consensus.Problem
	Gamma, Lambda, Clip, Sigma float64
	// Step is the local step of every node (walk.Config.Step); the zero value is the prox
	// step. The gradient steps need Step.Eta > 0, ls-sgd and sgd a rate in (0,1].
	Step walk.StepParams
	// Unit is the unit of the audited claim ("" is privacy.UnitRecord) and RowBound the
	// public bound on row norms (walk.Config): under the record unit with a row bound the
	// claim is the record-level figure, and every canary row is projected onto the ball of
	// that radius (an admissible row).
	Unit     privacy.Unit
	RowBound float64
	// Node is the audited node i.
	Node int
	// PairHops is m: the noisy updates by other nodes between i's update and the pairwise
	// observer j, who then holds the token (default 4).
	PairHops int
	// FinalHops is the number of noisy updates by other nodes after i's before the final
	// model is released (default 20); it must exceed PairHops.
	FinalHops int
	// Trials is the number of trials per dataset (default 2000); the first half calibrates
	// the tests, the second half evaluates them.
	Trials int
	// Delta and Confidence of the bounds (defaults 1e-5 and 0.95); Confidence is
	// family-wise over the audit's rows (AuditBonferroni).
	Delta, Confidence float64
	// Noise returns the noise source of a block of trials (AuditNoise); nil means crypto/rand.
	Noise func(block uint64) privacy.Noise
	// Workers is the number of goroutines (0: min(2, GOMAXPROCS)).
	Workers int
	// Canary gives node i's data in D and D'; nil means the canary search of WalkAudit.
	Canary *AuditCanary
	// Update is the audited node's update; nil means MachineUpdate, the shipped machine.
	Update WalkUpdateFactory
}

func (o *WalkAuditOptions) defaults() error {
	if o.Train == nil || o.Train.Rows == 0 {
		return errors.New("testnet: audit: empty training set")
	}
	if o.Nodes == 0 {
		o.Nodes = 50
	}
	if o.Split == "" {
		o.Split = "iid"
	}
	if o.PairHops == 0 {
		o.PairHops = 4
	}
	if o.FinalHops == 0 {
		o.FinalHops = max(20, o.PairHops+1)
	}
	if o.Trials == 0 {
		o.Trials = 2000
	}
	if o.Delta == 0 {
		o.Delta = privacy.DefaultDelta
	}
	if o.Confidence == 0 {
		o.Confidence = 0.95
	}
	if o.Noise == nil {
		o.Noise = AuditNoise(false, 0)
	}
	if o.Update == nil {
		o.Update = MachineUpdate
	}
	switch {
	case o.PairHops < 1 || o.FinalHops <= o.PairHops:
		return fmt.Errorf("testnet: audit: need 1 <= pair hops < final hops, got %d and %d", o.PairHops, o.FinalHops)
	case o.Nodes < o.FinalHops+2:
		return fmt.Errorf("testnet: audit: %d final hops need at least %d nodes (the path visits distinct nodes and the final observer is off the path), got %d", o.FinalHops, o.FinalHops+2, o.Nodes)
	case o.Node < 0 || o.Node >= o.Nodes:
		return fmt.Errorf("testnet: audit: node %d outside [0, %d)", o.Node, o.Nodes)
	case o.Trials < 20:
		return fmt.Errorf("testnet: audit: need at least 20 trials, got %d", o.Trials)
	case !(o.Sigma > 0) || math.IsInf(o.Sigma, 0):
		return fmt.Errorf("testnet: audit: sigma must be finite and > 0, got %v", o.Sigma)
	case !(o.Clip > 0) || math.IsInf(o.Clip, 0):
		return fmt.Errorf("testnet: audit: clip must be finite and > 0, got %v", o.Clip)
	case !(o.Delta > 0 && o.Delta < 1):
		return fmt.Errorf("testnet: audit: delta must be in (0,1), got %v", o.Delta)
	case !(o.Confidence > 0 && o.Confidence < 1):
		return fmt.Errorf("testnet: audit: confidence must be in (0,1), got %v", o.Confidence)
	}
	// The data-free checks of the machine's configuration, step included, before any trial.
	c := o.baseStepConfig()
	c.Rand, c.Noise = rand.New(rand.NewPCG(0, 0)), zeroNoise{}
	if err := c.Validate(); err != nil {
		return fmt.Errorf("testnet: audit: %w", err)
	}
	return o.Problem.Validate()
}

// baseStepConfig is the configuration every node shares, for the data-free checks.
func (o *WalkAuditOptions) baseStepConfig() walk.Config {
	return walk.Config{Node: 0, Nodes: o.Nodes, Gamma: o.Gamma, Lambda: o.Lambda, Clip: o.Clip, Sigma: o.Sigma,
		Reg: o.Problem.Reg, Run: "audit", Step: o.Step, Unit: o.Unit, RowBound: o.RowBound}
}

// walkEnv is the fixed setup of a walk audit.
type walkEnv struct {
	o      *WalkAuditOptions
	setup  WalkAuditSetup
	path   []int                // the other nodes' updates after i's, in order
	shards []*consensus.Dataset // every node's data in D (node i: Data[0])
	weight []float64
	dim    int
	tok0   walk.Token
	mech   string // the ledger mechanism of one noisy update of the step
	// totalRows is the total row count M of the run with node i's data in D.
	totalRows int
}

// baseConfig is the walk configuration of node k.
func (e *walkEnv) baseConfig(k int) walk.Config {
	c := e.o.baseStepConfig()
	c.Node = k
	return c
}

// walkViews are the three observers' views of one trial: the token as the next holder
// and as j receive it (tokenView), and the final model z.
type walkViews struct{ local, pair, final []float64 }

// walkWorker runs trials on one goroutine: the update under test and the real machines of
// the path.
type walkWorker struct {
	e    *walkEnv
	up   WalkUpdate
	path []*walk.Machine
	zero []float64
	tok  walk.Token
}

func (e *walkEnv) newWorker(up WalkUpdateFactory, noise privacy.Noise) (*walkWorker, error) {
	u, err := up(e.setup, noise)
	if err != nil {
		return nil, fmt.Errorf("testnet: audit: node %d: %w", e.o.Node, err)
	}
	w := &walkWorker{e: e, up: u, zero: make([]float64, e.dim)}
	sc := walk.NewScratch(e.dim)
	for t, k := range e.path {
		ll, err := consensus.NewLocalLoss(e.shards[k], e.o.Problem.Loss, e.weight[k])
		if err != nil {
			return nil, err
		}
		cfg := e.baseConfig(k)
		cfg.Noise, cfg.Rand, cfg.Scratch = noise, rand.New(rand.NewPCG(2, uint64(t))), sc
		m, err := walk.New(cfg, ll, e.dim)
		if err != nil {
			return nil, fmt.Errorf("testnet: audit: node %d: %w", k, err)
		}
		w.path = append(w.path, m)
	}
	w.tok = walk.Token{Run: "audit", Z: make([]float64, e.dim), Zhat: make([]float64, e.dim)}
	return w, nil
}

// run makes one trial on dataset world and writes the views into v (allocated by the
// caller); with localOnly it stops after i's update (v.local only).
func (w *walkWorker) run(world int, v *walkViews, localOnly bool) error {
	e := w.e
	copy(w.tok.Z, e.tok0.Z)
	copy(w.tok.Zhat, e.tok0.Zhat)
	w.tok.Hop = 0
	if err := w.up.Update(world, &w.tok); err != nil {
		return fmt.Errorf("testnet: audit: node %d: %w", e.o.Node, err)
	}
	e.tokenView(v.local, &w.tok)
	if localOnly {
		return nil
	}
	for t, m := range w.path {
		if err := stepFresh(m, w.zero, &w.tok, e.mech); err != nil {
			return fmt.Errorf("testnet: audit: node %d: %w", e.path[t], err)
		}
		if t+1 == e.o.PairHops {
			e.tokenView(v.pair, &w.tok)
		}
	}
	copy(v.final, w.tok.Z)
	return nil
}

func (e *walkEnv) newViews() *walkViews {
	tv := e.tokenDim()
	return &walkViews{local: make([]float64, tv), pair: make([]float64, tv), final: make([]float64, e.dim)}
}

// reference runs the noiseless trial of both datasets through the same code (zero noise).
func (e *walkEnv) reference(up WalkUpdateFactory, localOnly bool) ([2]*walkViews, error) {
	w, err := e.newWorker(up, zeroNoise{})
	if err != nil {
		return [2]*walkViews{}, err
	}
	var ref [2]*walkViews
	for world := range ref {
		ref[world] = e.newViews()
		if err := w.run(world, ref[world], localOnly); err != nil {
			return ref, err
		}
	}
	return ref, nil
}

func dist(a, b []float64) float64 {
	s := 0.0
	for k := range a {
		s += (a[k] - b[k]) * (a[k] - b[k])
	}
	return math.Sqrt(s)
}

// searchCanary returns node i's D and D' data (canaryPair: for every step but gadmm its
// shard plus (a, +1) in D and (a, -1) in D', a replace-one pair with equal row counts; for
// gadmm, whose figures are node-level, every row of the node (a, +1) in D and (a, -1) in
// D'), with a chosen to maximise localDistance: the distance between the two noiseless
// local views (i's update), or between the queries a gradient step releases. Candidates are r*d for d the normalised mean of the shard's rows, one of its
// first three rows or the direction of the shard's own update, and r in 1/4..16; the best
// is then refined by a random local search (seeded by Seed). A candidate must beat the best
// by a relative 1e-9: the gradient steps clip every example, so beyond the clip all radii
// give the same update up to rounding, and the search keeps the smallest (which keeps the
// smoothness conditions of the network figures). A candidate the step refuses (gadmm: eta
// above 1/nu for the canary's smoothness) is skipped. For both losses (a, -1) is the same
// loss as (-a, +1), so -d need not be tried.
func (e *walkEnv) searchCanary(shard *consensus.Dataset) (*AuditCanary, float64, error) {
	p := shard.Cols
	var skipped error
	eval := func(a []float64) (float64, error) {
		e.setup.Data = e.canaryPair(shard, a)
		ref, err := e.reference(e.o.Update, true)
		if errors.Is(err, walk.ErrGADMMParams) {
			skipped = err
			return -1, nil
		}
		if err != nil {
			return 0, err
		}
		return e.localDistance(ref), nil
	}
	dirs, err := e.canaryDirections(shard)
	if err != nil {
		return nil, 0, err
	}
	var best []float64
	bestD := -1.0
	better := func(a []float64, dd float64) {
		if dd > 0 && dd > bestD*(1+1e-9) || bestD < 0 && dd >= 0 {
			best, bestD = a, dd
		}
	}
	for _, d := range dirs {
		nd := math.Sqrt(dotp(d, d))
		if !(nd > 0) || math.IsInf(nd, 0) {
			continue
		}
		for _, r := range []float64{0.25, 0.5, 1, 2, 4, 8, 16} {
			a := make([]float64, p)
			for k := range a {
				a[k] = r * d[k] / nd
			}
			e.admissible(a)
			dd, err := eval(a)
			if err != nil {
				return nil, 0, err
			}
			better(a, dd)
		}
	}
	if best == nil {
		if skipped != nil {
			return nil, 0, fmt.Errorf("testnet: audit: the %s step refuses every canary row: %w", e.o.Step.Kind, skipped)
		}
		return nil, 0, errors.New("testnet: audit: no canary direction")
	}
	rnd := rand.New(rand.NewPCG(sim.Mix(e.o.Seed, e.o.Node, 12), 0))
	step := 0.3
	for it := 0; it < 80; it++ {
		if it%20 == 19 {
			step /= 2
		}
		scale := step * math.Sqrt(dotp(best, best)/float64(p))
		a := make([]float64, p)
		for k := range a {
			a[k] = best[k] + scale*rnd.NormFloat64()
		}
		e.admissible(a)
		dd, err := eval(a)
		if err != nil {
			return nil, 0, err
		}
		better(a, dd)
	}
	pair := e.canaryPair(shard, best)
	c := &AuditCanary{D: pair[0], DPrime: pair[1], Description: e.canaryDescription(math.Sqrt(dotp(best, best)))}
	return c, bestD, nil
}

// admissible projects a canary row onto the ball of the public row bound, when one is set.
func (e *walkEnv) admissible(a []float64) {
	if b := e.o.RowBound; b > 0 {
		if nn := math.Sqrt(dotp(a, a)); nn > b {
			for k := range a {
				a[k] *= b / nn * (1 - 1e-15)
			}
		}
	}
}

// canaryDirections returns the directions the canary search tries: the mean of the
// shard's rows, its first three rows and the direction of the shard's own update.
func (e *walkEnv) canaryDirections(shard *consensus.Dataset) ([][]float64, error) {
	p := shard.Cols
	mean := make([]float64, p)
	for r := 0; r < shard.Rows; r++ {
		for k, v := range shard.Row(r) {
			mean[k] += v
		}
	}
	dirs := [][]float64{mean}
	for r := 0; r < min(3, shard.Rows); r++ {
		dirs = append(dirs, append([]float64(nil), shard.Row(r)...))
	}
	// The shard's own update (a zero row adds nothing to either loss).
	zero := withRow(shard, make([]float64, p), 1)
	e.setup.Data = [2]*consensus.Dataset{zero, zero}
	ref, err := e.reference(e.o.Update, true)
	if err != nil {
		return nil, err
	}
	return append(dirs, append([]float64(nil), ref[0].local[:p]...)), nil
}

func dotp(a, b []float64) float64 {
	s := 0.0
	for k := range a {
		s += a[k] * b[k]
	}
	return s
}

// withRow returns a copy of d with row a of label y appended.
func withRow(d *consensus.Dataset, a []float64, y float64) *consensus.Dataset {
	c := d.Clone()
	c.X = append(c.X, a...)
	c.Y = append(c.Y, y)
	c.Rows++
	return c
}

// WalkAudit audits one noisy update of node i of the walk, with the local step of
// o.Step, against three observers:
//
//   - local: the next holder, who sees the token right after i's update and knows the token
//     i received; claim: one update's local bound of the step (privacy.StepLocalBound, for
//     the prox step Cyffers et al. Theorem 3);
//   - pairwise: node j, who receives the token after PairHops further noisy updates by
//     other nodes (their real machines); claim: the realised-path figure of the step for
//     (i, j) on that path (privacy.StepRealisedPairwise, m = PairHops + 1 noisy updates; see
//     realisedClaim for the steps without a network figure);
//   - final: a node off the path that sees only the final model z, released after
//     FinalHops further updates; claim: the realised-path figure with the final model
//     released to all (m = FinalHops + 1).
//
// Every observer gets the projection test. The residue test reads the update off the view
// in units of a lattice step: for the prox and linearized steps at every observer (zhat, or
// z divided by the L2 shrinking factor when L1 = 0; skipped for the final model with
// L1 > 0), with the lattice steps privacy.Granularity(lambda sigma), lambda
// privacy.Granularity(sigma) and privacy.Granularity(sigma); for the gradient steps at the
// local observer, in units of privacy.Granularity(sigma) of their integer noisy query
// (stepRead). ls-sgd and sgd also get the row-count scale test at the local observer
// (scaleScore). The rows are corrected for multiple testing (AuditBonferroni).
func WalkAudit(o WalkAuditOptions) ([]AuditResult, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	shards, err := consensus.Split(o.Train, o.Nodes, o.Split, o.Seed)
	if err != nil {
		return nil, err
	}
	n, i, dim := o.Nodes, o.Node, o.Train.ModelDim()
	e := &walkEnv{o: &o, shards: shards, dim: dim, mech: auditMechanism(o.Step.Kind)}
	for t := 1; t <= o.FinalHops; t++ {
		e.path = append(e.path, (i+t)%n)
	}
	e.tok0 = walk.NewToken("audit", 0, dim, o.Problem.Reg, o.Gamma)
	canary, err := e.setCanary(shards[i])
	if err != nil {
		return nil, err
	}
	ref, err := e.reference(o.Update, false)
	if err != nil {
		return nil, err
	}
	run, err := e.walkRun()
	if err != nil {
		return nil, err
	}
	sens, sensOf := e.sensitivity(ref, run)
	observers := e.observers(ref)
	if err := e.trials(observers); err != nil {
		return nil, err
	}
	claims, err := e.claims(run)
	if err != nil {
		return nil, err
	}
	return e.results(observers, claims, canary, sens, sensOf)
}

// results evaluates every observer's tests and returns the audit's rows, corrected for
// multiple testing.
func (e *walkEnv) results(observers []*walkObserver, claims []walkClaim, canary *AuditCanary, sens float64, sensOf string) ([]AuditResult, error) {
	o := e.o
	rows := 0
	for _, ob := range observers {
		rows += len(ob.tests)
	}
	conf := rowConfidence(o.Confidence, rows)
	secure := o.Noise(0).Secure()
	T := o.Trials
	cal := T / 2
	var out []AuditResult
	for k, ob := range observers {
		for _, cs := range ob.tests {
			rule, est, which, err := cs.evaluate(cal, o.Delta, conf)
			if err != nil {
				return nil, err
			}
			r := AuditResult{Algo: sim.WalkAlgo(o.Step), Step: o.Step.Kind.String(), Observer: ob.name, View: ob.view, Test: cs.test,
				Theorem: claims[k].thm, ConditionsHold: claims[k].hold, Delta: o.Delta, Confidence: o.Confidence,
				Trials: T, EvalTrials: T - cal, Rule: rule, Secure: secure, SensitivityUsed: sens, SensitivityOf: sensOf,
				Note: which + "; " + canary.Description + "; " + AuditStepNote(o.Step)}
			upper := claims[k].eps
			if !claims[k].hold {
				upper = math.Inf(1)
			}
			r.finish(est, upper)
			out = append(out, r)
		}
	}
	return out, AuditBonferroni(out, o.Confidence)
}

// setWeights sets every node's loss weight n*rows_k/N from e.shards.
func (e *walkEnv) setWeights() {
	n := e.o.Nodes
	total := 0
	for _, s := range e.shards {
		total += s.Rows
	}
	e.weight, e.totalRows = make([]float64, n), total
	for k, s := range e.shards {
		e.weight[k] = walk.LossWeight(n, s.Rows, total)
	}
}

// setCanary finds the canary of node i's shard base (or takes Options.Canary) and sets the
// audited node's data to it.
func (e *walkEnv) setCanary(base *consensus.Dataset) (*AuditCanary, error) {
	o, i, dim := e.o, e.o.Node, e.dim
	// The canary search runs with the weights of the shard plus one row.
	e.shards = append([]*consensus.Dataset(nil), e.shards...)
	e.shards[i] = withRow(base, make([]float64, dim), 1)
	e.setWeights()
	e.setup = WalkAuditSetup{Config: e.baseConfig(i), Loss: o.Problem.Loss, Weight: e.weight[i], Dim: dim}
	canary := o.Canary
	if canary == nil {
		var err error
		if canary, _, err = e.searchCanary(base); err != nil {
			return nil, err
		}
	}
	if canary.D == nil || canary.DPrime == nil || canary.D.Cols != o.Train.Cols || canary.DPrime.Cols != o.Train.Cols {
		return nil, errors.New("testnet: audit: the canary datasets must both be given, with the data's features")
	}
	e.shards[i] = canary.D
	e.setWeights()
	e.setup.Weight = e.weight[i]
	e.setup.Data = [2]*consensus.Dataset{canary.D, canary.DPrime}
	return canary, nil
}

// walkObserver is one observer of the walk audit with its tests.
type walkObserver struct {
	name, view string
	get        func(v *walkViews) []float64
	tests      []*candidateScores
}

// observers returns the local, pairwise and final observers with their tests built on the
// noiseless references ref.
func (e *walkEnv) observers(ref [2]*walkViews) []*walkObserver {
	o := e.o
	tv := "zhat"
	if o.Step.Kind == walk.StepGADMM {
		tv = "the token (x~, lambda)"
	}
	observers := []*walkObserver{
		{name: "local", view: tv + " right after i's update (token i received known)", get: func(v *walkViews) []float64 { return v.local }},
		{name: "pairwise", view: fmt.Sprintf("%s received by j = node %d after %d further noisy updates", tv, e.path[o.PairHops], o.PairHops),
			get: func(v *walkViews) []float64 { return v.pair }},
		{name: "final", view: fmt.Sprintf("final model z after %d further noisy updates", o.FinalHops),
			get: func(v *walkViews) []float64 { return v.final }},
	}
	T := o.Trials
	for k, ob := range observers {
		rD, rD2 := ob.get(ref[0]), ob.get(ref[1])
		ob.tests = append(ob.tests, newCandidates(AuditProjection, T, []string{"direction: noiseless difference"}, []scorer{newProjScore(rD, rD2)}))
		if res := e.residueTest(k, rD, rD2); res != nil {
			ob.tests = append(ob.tests, res)
		}
		if k == 0 {
			if sc := e.scaleTest(); sc != nil {
				ob.tests = append(ob.tests, sc)
			}
		}
	}
	return observers
}

// walkResidueTest is the residue test of the prox and linearized steps for observer k
// (0 local, 1 pairwise, 2 final): the view, times scale (1 for zhat, the L2 shrinking
// factor for the final model z; none with L1 > 0), minus the initial zhat, times n, on the
// candidate lattice steps.
func (e *walkEnv) walkResidueTest(k int, rD, rD2 []float64) *candidateScores {
	o, n := e.o, float64(e.o.Nodes)
	scale := 1.0
	if k == 2 {
		if o.Problem.Reg.L1 != 0 {
			return nil // z = soft(zhat) loses the low-order bits of small coordinates
		}
		scale = 1 + o.Gamma*o.Problem.Reg.L2
	}
	var steps []float64
	var names []string
	var sc []scorer
	for _, h := range []float64{privacy.Granularity(o.Lambda * o.Sigma), o.Lambda * privacy.Granularity(o.Sigma), privacy.Granularity(o.Sigma)} {
		dup := !(h > 0)
		for _, g := range steps {
			dup = dup || g == h
		}
		if !dup {
			steps = append(steps, h)
			names = append(names, fmt.Sprintf("lattice step %g", h))
			sc = append(sc, newResidueScore(walkRead(h, scale, n, e.tok0.Zhat, o.Problem.Reg), e.dim, rD, rD2))
		}
	}
	return newCandidates(AuditResidue, o.Trials, names, sc)
}

// trials runs the trials of both worlds and records every observer's view.
func (e *walkEnv) trials(observers []*walkObserver) error {
	o := e.o
	return runBlocks(o.Trials, o.Workers, o.Noise, func(nz privacy.Noise) (func(int) error, error) {
		w, err := e.newWorker(o.Update, nz)
		if err != nil {
			return nil, err
		}
		v := e.newViews()
		return func(t int) error {
			for world := 0; world < 2; world++ {
				if err := w.run(world, v, false); err != nil {
					return err
				}
				for _, ob := range observers {
					view := ob.get(v)
					for _, cs := range ob.tests {
						cs.record(world, t, view)
					}
				}
			}
			return nil
		}, nil
	})
}
