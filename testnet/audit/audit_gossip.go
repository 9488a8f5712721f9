package audit

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/gossip"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/testnet/sim"
)

// RADMMAuditOptions configures an audit of one R-ADMM release (objective perturbation).
type RADMMAuditOptions struct {
	// Train is the (scaled) training data, split over Nodes nodes with Split and Seed; rows
	// must have norm <= 1 and labels -1/+1 for Theorem V.1 to apply.
	Train *consensus.Dataset
	Nodes int    // N (default 5, the paper's)
	Graph string // graph spec (default ring)
	Split string // iid (default), contiguous or label
	Seed  uint64 // data split, graph and canary (not the noise)
	// Problem: the loss and L2 (> 0); L1 must be 0. The constants map as in GossipOptions:
	// C_i/B_i = PaperC N/M, rho/N = PaperC L2.
	Problem consensus.Problem
	// Alpha is the noise parameter (density exp(-alpha ||eps||)); default 2.
	Alpha float64
	// Eta is the penalty (default 1), Gamma the even-step weight (default 0.5, unused by the
	// audited odd step), PaperC the paper's C (default 10).
	Eta, Gamma, PaperC float64
	// Node is the audited node i.
	Node int
	// Trials per dataset (default 2000): the first half calibrates, the second evaluates.
	Trials int
	// Confidence of the bounds (default 0.95), family-wise over the audit's rows
	// (AuditBonferroni). The claim is pure DP, so the bounds are at delta = 0.
	Confidence float64
	// Noise returns the noise source of a block of trials (AuditNoise); nil means crypto/rand.
	Noise   func(block uint64) privacy.Noise
	Workers int
	// Canary gives node i's data in D and D'; nil means the node's shard plus a unit-norm
	// canary row (a, +1) in D and (a, -1) in D', a chosen to maximise the distance between the
	// noiseless releases.
	Canary *AuditCanary
}

func (o *RADMMAuditOptions) defaults() error {
	if o.Train == nil || o.Train.Rows == 0 {
		return errors.New("testnet: audit: empty training set")
	}
	if o.Nodes == 0 {
		o.Nodes = 5
	}
	if o.Graph == "" {
		o.Graph = "ring"
	}
	if o.Split == "" {
		o.Split = "iid"
	}
	if o.Alpha == 0 {
		o.Alpha = 2
	}
	if o.Eta == 0 {
		o.Eta = 1
	}
	if o.Gamma == 0 {
		o.Gamma = 0.5
	}
	if o.PaperC == 0 {
		o.PaperC = 10
	}
	if o.Trials == 0 {
		o.Trials = 2000
	}
	if o.Confidence == 0 {
		o.Confidence = 0.95
	}
	if o.Noise == nil {
		o.Noise = AuditNoise(false, 0)
	}
	switch {
	case o.Nodes < 2:
		return fmt.Errorf("testnet: audit: R-ADMM needs at least 2 nodes, got %d", o.Nodes)
	case o.Node < 0 || o.Node >= o.Nodes:
		return fmt.Errorf("testnet: audit: node %d outside [0, %d)", o.Node, o.Nodes)
	case !(o.Alpha > 0) || math.IsInf(o.Alpha, 0):
		return fmt.Errorf("testnet: audit: alpha must be finite and > 0, got %v", o.Alpha)
	case !(o.Eta > 0) || math.IsInf(o.Eta, 0) || !(o.PaperC > 0) || math.IsInf(o.PaperC, 0):
		return fmt.Errorf("testnet: audit: eta and C must be finite and > 0, got %v and %v", o.Eta, o.PaperC)
	case o.Trials < 20:
		return fmt.Errorf("testnet: audit: need at least 20 trials, got %d", o.Trials)
	case !(o.Confidence > 0 && o.Confidence < 1):
		return fmt.Errorf("testnet: audit: confidence must be in (0,1), got %v", o.Confidence)
	case o.Problem.Reg.L1 != 0 || !(o.Problem.Reg.L2 > 0):
		return fmt.Errorf("testnet: audit: R-ADMM needs l1 = 0 and l2 > 0, got %v and %v", o.Problem.Reg.L1, o.Problem.Reg.L2)
	}
	return o.Problem.Validate()
}

// radmmEnv is the fixed setup of an R-ADMM audit.
type radmmEnv struct {
	o                   *RADMMAuditOptions
	neighbors           []int
	rowWeight, regOverN float64
	c1                  float64
	setup               gossip.Setup // the objective's weights and c1, as every node builds them
	data                [2]*consensus.Dataset
	dim                 int
}

// radmmWorker releases f_i(1) through node i's real machine.
type radmmWorker struct {
	e     *radmmEnv
	obj   [2]*gossip.Objective
	noise privacy.Noise
	alpha float64
	zero  []float64
	// inexact counts the releases whose perturbed solve missed its tolerance.
	inexact int
}

func (e *radmmEnv) newWorker(noise privacy.Noise, alpha float64) (*radmmWorker, error) {
	w := &radmmWorker{e: e, noise: noise, alpha: alpha, zero: make([]float64, e.dim)}
	for k := range w.obj {
		obj, err := gossip.NewObjective(e.data[k], e.o.Problem.Loss, e.rowWeight, e.regOverN)
		if err != nil {
			return nil, err
		}
		w.obj[k] = obj
	}
	return w, nil
}

// release runs node i's machine for dataset world from f(0) = 0 at every node: the
// broadcast of f_i(0), the neighbours' f_j(0), then the first (odd, perturbed) iteration,
// whose released vector is copied into dst.
func (w *radmmWorker) release(world int, dst []float64) error {
	e := w.e
	o := e.o
	cfg := gossip.Config{
		Node: o.Node, Nodes: o.Nodes, Neighbors: e.neighbors, Algo: gossip.RADMM, Iters: 2,
		Penalty: gossip.Constant(o.Eta), Gamma: o.Gamma, Alpha: w.alpha, C1: e.c1, Run: "audit",
	}
	if !math.IsInf(w.alpha, 1) {
		cfg.Noise = w.noise
	}
	m, err := gossip.New(cfg, w.obj[world])
	if err != nil {
		return err
	}
	m.Advance(m.Ready()) // f_i(0) sent
	for _, j := range e.neighbors {
		if err := m.Step(gossip.Message{From: j, Iter: 0, Vec: w.zero}); err != nil {
			return err
		}
	}
	rd := m.Ready()
	if m.Iter() != 1 || len(rd.Outbox) == 0 || len(rd.Ledger) != 1 || rd.Ledger[0].Mechanism != privacy.MechPure {
		return fmt.Errorf("testnet: audit: node %d did not release iteration 1", o.Node)
	}
	copy(dst, rd.Outbox[0].Msg.Vec)
	if _, bad := m.MaxResidual(); bad > 0 {
		w.inexact++
	}
	m.Advance(rd)
	return nil
}

// noiseScore recovers the noise of the perturbed solve under D and D' from the KKT
// condition grad O(f) + b + eps + q f = 0 (here b = 0: f(0) = 0 everywhere and the duals
// start at 0; q = 2 eta V) and returns alpha (||eps_D'|| - ||eps_D||), the log-likelihood
// ratio of the noise density exp(-alpha ||eps||) (the Jacobian of f -> eps is left out).
type noiseScore struct {
	obj   [2]*gossip.Objective
	q, a  float64
	g, g2 []float64
}

func (s *noiseScore) score(f []float64) float64 {
	var n [2]float64
	for w, g := range [][]float64{s.g, s.g2} {
		s.obj[w].Grad(g, f)
		t := 0.0
		for k, v := range g {
			e := v + s.q*f[k]
			t += e * e
		}
		n[w] = math.Sqrt(t)
	}
	return s.a * (n[1] - n[0])
}

// RADMMAudit audits one release of R-ADMM with objective perturbation: node i's primal
// vector f_i(1), the first (odd) iteration, as a neighbour j sees it, with its data in D or
// D'. Two tests: the projection on the difference of the noiseless releases, and the noise
// recovery likelihood ratio. The claim is the per-release figure of Theorem V.1 (the ledger's
// epsilon of that release, privacy.ObjPertBound with one odd iteration), pure DP, so the
// bounds are computed at delta = 0.
func RADMMAudit(o RADMMAuditOptions) ([]AuditResult, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	g, err := sim.GossipGraph(o.Graph, o.Nodes, o.Seed)
	if err != nil {
		return nil, err
	}
	shards, err := consensus.Split(o.Train, o.Nodes, o.Split, o.Seed)
	if err != nil {
		return nil, err
	}
	i, dim := o.Node, o.Train.Cols
	setup := gossip.NewSetup(o.Problem.Loss, o.PaperC, o.Problem.Reg.L2, o.Nodes, o.Train.Rows+1).WithClasses(o.Train) // with the canary row
	e := &radmmEnv{o: &o, neighbors: g.Neighbors(i), rowWeight: setup.RowWeight, regOverN: setup.RegOverN, c1: setup.C1,
		setup: setup, dim: dim}
	canary := o.Canary
	if canary == nil {
		if canary, err = e.searchCanary(shards[i]); err != nil {
			return nil, err
		}
	}
	if canary.D == nil || canary.DPrime == nil || canary.D.Cols != dim || canary.DPrime.Cols != dim {
		return nil, errors.New("testnet: audit: the canary datasets must both be given, with the data's features")
	}
	e.data = [2]*consensus.Dataset{canary.D, canary.DPrime}
	r0, err := e.reference()
	if err != nil {
		return nil, err
	}
	sens, err := e.sensitivity(r0[0])
	if err != nil {
		return nil, err
	}
	T := o.Trials
	proj := newCandidates(AuditProjection, T, []string{"direction: noiseless difference"}, []scorer{newProjScore(r0[0], r0[1])})
	// Each worker has its own objectives (they hold scratch buffers), hence its own
	// noise-recovery scorer; every score goes to its trial's slot.
	rec := newCandidates(AuditNoiseRecovery, T, []string{"KKT noise recovery, Jacobian term omitted"}, []scorer{nil})
	inexact, err := e.trials(proj, rec)
	if err != nil {
		return nil, err
	}
	fig := e.claim(inexact)
	upper := fig.Guarantee()
	note := ""
	if !fig.ConditionsHold {
		note = "conditions fail: " + fig.Reason + "; "
	}
	secure := o.Noise(0).Secure()
	cal := T / 2
	tests := []*candidateScores{proj, rec}
	conf := rowConfidence(o.Confidence, len(tests))
	var out []AuditResult
	for _, cs := range tests {
		rule, est, which, err := cs.evaluate(cal, 0, conf)
		if err != nil {
			return nil, err
		}
		r := AuditResult{Algo: "radmm", Step: "radmm", Observer: "neighbour",
			View: fmt.Sprintf("f_i(1), node %d's first (odd, perturbed) release, sent to its %d neighbours", i, len(e.neighbors)),
			Test: cs.test, Theorem: fig.Theorem + "; one odd iteration", ConditionsHold: fig.ConditionsHold,
			Delta: 0, Confidence: o.Confidence, Trials: T, EvalTrials: T - cal, Rule: rule, Secure: secure, SensitivityUsed: sens,
			SensitivityOf: "2 C_i/B_i (gradient of i's objective)",
			Note: fmt.Sprintf("%s%s; %s; alpha %g, C_i/B_i %.4g, rho/N %.4g, eta %g, V_i %d", note, which, canary.Description,
				o.Alpha, e.rowWeight, e.regOverN, o.Eta, len(e.neighbors))}
		r.finish(est, upper)
		out = append(out, r)
	}
	return out, AuditBonferroni(out, o.Confidence)
}

// reference returns the noiseless releases of both worlds.
func (e *radmmEnv) reference() ([2][]float64, error) {
	w, err := e.newWorker(nil, math.Inf(1))
	if err != nil {
		return [2][]float64{}, err
	}
	var r [2][]float64
	for k := range r {
		r[k] = make([]float64, e.dim)
		if err := w.release(k, r[k]); err != nil {
			return r, err
		}
	}
	return r, nil
}

// searchCanary tries a unit-norm canary row along each axis and along the shard's mean
// row, labelled +1 in D and -1 in D', and keeps the one whose noiseless releases differ
// most.
func (e *radmmEnv) searchCanary(base *consensus.Dataset) (*AuditCanary, error) {
	dim, i := e.dim, e.o.Node
	var dirs [][]float64
	for k := 0; k < dim; k++ {
		d := make([]float64, dim)
		d[k] = 1
		dirs = append(dirs, d)
	}
	mean := make([]float64, dim)
	for r := 0; r < base.Rows; r++ {
		for k, v := range base.Row(r) {
			mean[k] += v
		}
	}
	dirs = append(dirs, mean)
	bestD := -1.0
	var canary *AuditCanary
	for _, d := range dirs {
		nd := math.Sqrt(dotp(d, d))
		if !(nd > 0) {
			continue
		}
		a := make([]float64, dim)
		for k := range a {
			a[k] = d[k] / nd
		}
		e.data = [2]*consensus.Dataset{withRow(base, a, 1), withRow(base, a, -1)}
		r, err := e.reference()
		if err != nil {
			return nil, err
		}
		if dd := dist(r[0], r[1]); dd > bestD {
			bestD = dd
			canary = &AuditCanary{D: e.data[0], DPrime: e.data[1],
				Description: fmt.Sprintf("D: node %d's shard plus a unit-norm canary row labelled +1, D': the same row labelled -1", i)}
		}
	}
	if canary == nil {
		return nil, errors.New("testnet: audit: no canary direction")
	}
	return canary, nil
}

// sensitivity returns the gradient difference the canary makes at the noiseless release
// f of D, as a fraction of the sensitivity 2 C_i/B_i.
func (e *radmmEnv) sensitivity(f []float64) (float64, error) {
	w, err := e.newWorker(nil, math.Inf(1))
	if err != nil {
		return 0, err
	}
	g, g2 := make([]float64, e.dim), make([]float64, e.dim)
	w.obj[0].Grad(g, f)
	w.obj[1].Grad(g2, f)
	return dist(g, g2) / (2 * e.rowWeight), nil
}

// trials runs the trials of both worlds, recording each release for the projection test
// and its recovered noise for the noise-recovery test; it returns the inexact solves.
func (e *radmmEnv) trials(proj, rec *candidateScores) (int, error) {
	o, dim := e.o, e.dim
	var mu sync.Mutex
	var workers []*radmmWorker
	err := runBlocks(o.Trials, o.Workers, o.Noise, func(nz privacy.Noise) (func(int) error, error) {
		w, err := e.newWorker(nz, o.Alpha)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		workers = append(workers, w)
		mu.Unlock()
		ns := &noiseScore{obj: w.obj, q: 2 * o.Eta * float64(len(e.neighbors)), a: o.Alpha,
			g: make([]float64, dim), g2: make([]float64, dim)}
		f := make([]float64, dim)
		return func(t int) error {
			for world := 0; world < 2; world++ {
				if err := w.release(world, f); err != nil {
					return err
				}
				proj.record(world, t, f)
				rec.sc[0][world][t] = ns.score(f)
			}
			return nil
		}, nil
	})
	inexact := 0
	for _, w := range workers {
		inexact += w.inexact
	}
	return inexact, err
}

// claim is the accountant's claim: Theorem V.1 for one odd iteration, its preconditions
// checked on both datasets.
func (e *radmmEnv) claim(inexact int) privacy.ObjPertFigure {
	o := e.o
	// One perturbed iteration of R-ADMM (the recycled scheme) with the audit's eta and alpha,
	// over both datasets' rows.
	maxNorm, pm1 := gossip.RowChecks(e.data[0], e.data[1])
	acc := e.setup.Account(gossip.RADMM, len(e.neighbors), max(e.data[0].Rows, e.data[1].Rows), maxNorm, pm1, o.Alpha, []float64{o.Eta})
	acc.ExactSolves = inexact == 0
	return privacy.ObjPertBound(acc)
}
