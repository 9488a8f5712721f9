package audit

import (
	"fmt"
	"math"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/testnet/sim"
	"github.com/dpadmm/dpadmm/walk"
)

// What the walk audit needs to know of each local step (walk.StepKind): the ledger
// mechanism of one update, what an observer receives, the neighbouring datasets the step's
// figures are for, how to read the noisy query back off a release, and the claims.
//
//	step        mechanism    view of the token   adjacency of the figures       sensitivity
//	prox        gaussian     zhat                node-level                     4 lambda C
//	linearized  gaussian     zhat                node-level                     4 lambda C
//	ls-sgd      subsampled   zhat                replace-one row                2C on the clipped sum
//	sgd         subsampled   z (= zhat)          replace-one row                2C on the clipped sum
//	gadmm       gadmm        (x~, lambda)        node-level                     eta Delta = 2 eta w C
//
// The prox and linearized steps clip x - z, so any change of the node's rows moves the
// update by at most 4 lambda C; a single canary row already reaches most of it. ls-sgd and
// sgd clip every example's gradient: their figures are for one row replaced (the row count
// is public and the release encodes it, see scaleScore), and the audit's canary (the shard
// plus (a, +1) in D, (a, -1) in D') is such a pair. Gradient ADMM's sensitivity is
// node-level (walk/gadmm.go): a single row moves its gradient by 1/m_i of it, so its canary
// changes every row of the node (canaryPair).

// auditMechanism is the ledger mechanism of one noisy update of step k.
func auditMechanism(k walk.StepKind) string {
	switch k {
	case walk.StepLSSGD, walk.StepSGD:
		return walk.MechSubsampled
	case walk.StepGADMM:
		return walk.MechGADMM
	}
	return walk.MechGaussian
}

// gradStep reports whether the step's privacy is the DP-SGD mechanism on the clipped
// gradient sum (ls-sgd, sgd).
func (e *walkEnv) gradStep() bool {
	return e.o.Step.Kind == walk.StepLSSGD || e.o.Step.Kind == walk.StepSGD
}

// tokenDim is the length of a token view: zhat, or for gadmm the whole token (x~, lambda),
// whose lambda is not a function of x~ alone once other nodes have stepped.
func (e *walkEnv) tokenDim() int {
	if e.o.Step.Kind == walk.StepGADMM {
		return 2 * e.dim
	}
	return e.dim
}

// tokenView copies the view of tok that an observer receiving it is audited on.
func (e *walkEnv) tokenView(dst []float64, tok *walk.Token) {
	if e.o.Step.Kind == walk.StepGADMM {
		copy(dst, tok.Z)
		copy(dst[e.dim:], tok.Zhat)
		return
	}
	copy(dst, tok.Zhat)
}

// canaryPair returns node i's data in D and D' for the canary row a: the shard plus (a, +1)
// and plus (a, -1), a replace-one pair; for gadmm every one of the shard's rows + 1 is
// (a, +1) in D and (a, -1) in D' (node-level neighbours with the same row count, so that
// the loss weights are those of the other steps' canaries).
func (e *walkEnv) canaryPair(shard *consensus.Dataset, a []float64) [2]*consensus.Dataset {
	if e.o.Step.Kind == walk.StepGADMM && e.o.Unit == privacy.UnitNode {
		return [2]*consensus.Dataset{repeatRow(shard, a, 1, shard.Rows+1), repeatRow(shard, a, -1, shard.Rows+1)}
	}
	y, y2 := canaryLabels(shard)
	return [2]*consensus.Dataset{withRow(shard, a, y), withRow(shard, a, y2)}
}

// canaryLabels are the labels of the canary row in D and D': +1 and -1, or the classes 0
// and 1 of a multinomial label.
func canaryLabels(d *consensus.Dataset) (float64, float64) {
	if d.NumClasses() > 0 {
		return 0, 1
	}
	return 1, -1
}

// repeatRow returns a copy of d (name, features) whose rows are `rows` copies of a, label y.
func repeatRow(d *consensus.Dataset, a []float64, y float64, rows int) *consensus.Dataset {
	c := d.Clone()
	c.Rows, c.X, c.Y = rows, make([]float64, 0, rows*len(a)), make([]float64, rows)
	for r := range rows {
		c.X = append(c.X, a...)
		c.Y[r] = y
	}
	return c
}

// canaryDescription says how D and D' differ, for a canary row of norm norm (no "; ":
// the report splits notes there).
func (e *walkEnv) canaryDescription(norm float64) string {
	i := e.o.Node
	switch {
	case e.o.Step.Kind == walk.StepGADMM && e.o.Unit == privacy.UnitNode:
		return fmt.Sprintf("D: every one of node %d's %d rows is a canary row a (||a|| = %.3g) labelled +1, D': the same rows labelled -1 "+
			"(node-level neighbours, the adjacency of the gadmm figures)", i, e.shards[i].Rows, norm)
	}
	l1, l2 := "labelled +1", "labelled -1"
	if d := e.shards[i]; d.NumClasses() > 0 {
		l1, l2 = fmt.Sprintf("of class %q", d.Classes.List[0]), fmt.Sprintf("of class %q", d.Classes.List[1])
	}
	if e.gradStep() {
		return fmt.Sprintf("D: node %d's shard plus a canary row a (||a|| = %.3g) %s, D': the same row %s "+
			"(one row replaced, equal row counts: the adjacency of the %s figures)", i, norm, l1, l2, e.o.Step.Kind)
	}
	return fmt.Sprintf("D: node %d's shard plus a canary row a (||a|| = %.3g) %s, D': the same row %s", i, norm, l1, l2)
}

// AuditStepNote names the local step p and its parameters, as the audit's notes do.
func AuditStepNote(p walk.StepParams) string {
	switch p.Kind {
	case walk.StepLinearized:
		return fmt.Sprintf("local step linearized, step size %g", p.Eta)
	case walk.StepLSSGD:
		return fmt.Sprintf("local step ls-sgd, step size %g, nu %g, sample rate %g", p.Eta, p.Nu, p.Rate)
	case walk.StepSGD:
		return fmt.Sprintf("local step sgd, step size %g, sample rate %g", p.Eta, p.Rate)
	case walk.StepGADMM:
		s := fmt.Sprintf("local step gadmm, step size %g, beta %g", p.Eta, p.Beta)
		if p.Strong {
			s += ", strongly convex mode"
		}
		return s
	}
	return "local step " + p.Kind.String()
}

// stepRead returns the read-off of the gradient steps' noisy query from a local view (the
// token right after i's update, from the public token i received, u_i = 0 and the first
// step size eta_1 = Eta): coordinate k of the integer vector N = R + Y the step released,
// as a float (walk/gradstep.go, walk/gadmm.go), for a total row count M. NaN for a
// coordinate the view does not determine. nil for the prox and linearized steps.
//
//   - sgd: z' = prox_{eta r}(z - eta G) with G = c_q h N and c_q = w_i/(q m_i) = n/(q M):
//     the soft-thresholding is undone where z'_k != 0 (where it is 0 with L1 > 0 the
//     coordinate is lost), then N = (z - w)/(eta c_q h);
//   - ls-sgd: zhat' = zhat + 2 lambda rho Q_nu^-1 [(z - u_i) - gamma G]/n with rho =
//     eta/(gamma + eta); Q_nu is the circulant (1 + 2 nu, -nu, -nu) of walk/lsop.go, applied
//     here to undo LS_nu = Q_nu^-1;
//   - gadmm: x~' = h (P + R + Y) with P public: x~'/h (M does not enter).
func (e *walkEnv) stepRead(M int) func(v []float64, k int) float64 {
	o := e.o
	h := privacy.Granularity(o.Sigma)
	if o.Step.Kind == walk.StepGADMM {
		return func(v []float64, k int) float64 { return v[k] / h }
	}
	if !e.gradStep() {
		return nil
	}
	mi := float64(e.shards[o.Node].Rows)
	w := float64(o.Nodes) * mi / float64(M) // the loss weight of setWeights with total M
	cq := w / (o.Step.Rate * mi)
	eta := walk.StepSize(o.Step.Eta, 1)
	z0, zh0 := e.tok0.Z, e.tok0.Zhat
	if o.Step.Kind == walk.StepSGD {
		t, sh := eta*o.Problem.Reg.L1, 1/(1+eta*o.Problem.Reg.L2)
		return func(v []float64, k int) float64 {
			w := v[k] / sh
			switch {
			case o.Problem.Reg.Unpenalised(k, len(z0)): // the intercept: no prox to invert
				w = v[k]
			case t == 0:
			case v[k] > 0:
				w += t
			case v[k] < 0:
				w -= t
			default:
				return math.NaN()
			}
			return (z0[k] - w) / eta / (cq * h)
		}
	}
	rho, nu, n, p := eta/(o.Gamma+eta), o.Step.Nu, float64(o.Nodes), e.dim
	d := func(v []float64, k int) float64 { return (v[k] - zh0[k]) * n / (2 * o.Lambda) }
	return func(v []float64, k int) float64 {
		qd := d(v, k)
		if nu != 0 {
			qd = (1+2*nu)*qd - nu*(d(v, (k+p-1)%p)+d(v, (k+1)%p))
		}
		return (z0[k] - qd/rho) / o.Gamma / (cq * h)
	}
}

// residueTest is the residue test of observer k (0 local, 1 pairwise, 2 final), or nil:
// walkResidueTest for the prox and linearized steps; for the gradient steps, at the local
// observer only, the residue of the integer query read off the view (stepRead), which the
// shipped steps release exactly (a floating-point data part would show there). Later views
// lose that lattice (the L2 shrink and every node's own c_q for sgd, the smoothing for
// ls-sgd; gadmm releases are on the lattice at every hop whatever the data).
func (e *walkEnv) residueTest(k int, rD, rD2 []float64) *candidateScores {
	read := e.stepRead(e.totalRows)
	if read == nil {
		return e.walkResidueTest(k, rD, rD2)
	}
	if k != 0 {
		return nil
	}
	name := fmt.Sprintf("lattice step %g of the integer noisy query", privacy.Granularity(e.o.Sigma))
	return newCandidates(AuditResidue, e.o.Trials, []string{name}, []scorer{newResidueScore(read, e.dim, rD, rD2)})
}

// scaleScore is the row-count scale test of ls-sgd and sgd (walk/sgd_replace_test.go). Their
// release encodes the total row count M: the query read off the view (stepRead) is the
// integer N only when it is divided by c_q h with c_q = n/(q M) for the true M. The score
// is min over M' in {M-1, M+1} of the distance of the read-off at M' to the integer lattice
// (sum over coordinates of |x - round x|) minus that at M, D's total: high when the
// release is on D's lattice. Under add/remove neighbours (totals M and M +- 1) it tells D
// from D' in every trial; under replace-one (the audit's canary: equal totals) both
// datasets give the same score distribution and it has no power, which is why the figures
// of these steps are for replace-one and why the audit keeps that canary.
type scaleScore struct {
	reads [3]func(v []float64, k int) float64 // at M, M-1, M+1
	dims  int
}

func (s scaleScore) off(read func(v []float64, k int) float64, v []float64) float64 {
	d := 0.0
	for k := range s.dims {
		if x := read(v, k); !math.IsNaN(x) && !math.IsInf(x, 0) {
			d += math.Abs(x - math.Round(x))
		}
	}
	return d
}

func (s scaleScore) score(v []float64) float64 {
	return math.Min(s.off(s.reads[1], v), s.off(s.reads[2], v)) - s.off(s.reads[0], v)
}

// scaleTest is the row-count scale test of the local observer (ls-sgd and sgd), or nil.
func (e *walkEnv) scaleTest() *candidateScores {
	M := e.totalRows
	if !e.gradStep() || M < 2 {
		return nil
	}
	s := scaleScore{dims: e.dim}
	for c, m := range []int{M, M - 1, M + 1} {
		s.reads[c] = e.stepRead(m)
	}
	name := fmt.Sprintf("total row count %d against %d and %d", M, M-1, M+1)
	return newCandidates(AuditRowCountScale, e.o.Trials, []string{name}, []scorer{s})
}

// localDistance is what the canary search maximises: the distance between the noiseless
// local views, or for the gradient steps between the queries they release (stepRead, in
// the units of the clipped sum for ls-sgd and sgd, of x~ for gadmm), which is what the
// step's sensitivity bounds.
func (e *walkEnv) localDistance(ref [2]*walkViews) float64 {
	read := e.stepRead(e.totalRows)
	if read == nil {
		return dist(ref[0].local, ref[1].local)
	}
	h, s := privacy.Granularity(e.o.Sigma), 0.0
	for k := range e.dim {
		if d := read(ref[0].local, k) - read(ref[1].local, k); !math.IsNaN(d) {
			s += d * d
		}
	}
	return h * math.Sqrt(s)
}

// sensitivity returns the fraction of the claimed sensitivity the canary attains without
// noise (localDistance over the sensitivity of one update), and what that sensitivity is.
func (e *walkEnv) sensitivity(ref [2]*walkViews, run privacy.WalkRun) (float64, string) {
	o, d := e.o, e.localDistance(ref)
	switch {
	case e.gradStep():
		return d / (2 * o.Clip), "2C: the clipped gradient sum with one row replaced (h ||N_D - N_D'||, N the integer query read off the release)"
	case o.Step.Kind == walk.StepGADMM:
		s := run.GADMM.Sensitivity
		if !(s > 0) {
			return 0, "eta Delta (no sensitivity: the run's gadmm parameters are invalid)"
		}
		what := "node-level, w the largest node weight"
		if o.Unit != privacy.UnitNode {
			what = "per record, w the weight of one row"
		}
		return d / s, fmt.Sprintf("eta Delta = 2 eta w C = %.4g, %s (x~ moves by at most "+
			"eta Delta/(1 + eta beta): the ledger drops that factor, so at most %.3g of it is attainable)", s, what, 1/(1+o.Step.Eta*o.Step.Beta))
	}
	if run.RecordBinds() {
		c := run.FigureClip()
		return d * float64(o.Nodes) / (4 * o.Lambda * c), fmt.Sprintf("4 lambda C' (i's data part), C' = gamma (c L + tol) = %.4g the record radius (one row replaced)", c)
	}
	return d * float64(o.Nodes) / (4 * o.Lambda * o.Clip), "4 lambda C (i's data part)"
}

// walkRun returns the privacy.WalkRun of the audited run, the input of every figure the
// accountant prints for it: the step's fields from every node's loss in D (StepRun, as the
// simulator's report; for gadmm its sensitivity and smoothness, for sgd whether every step
// is non-expansive), on the complete graph (the audited path is one the uniform walk can
// take; the realised figure holds for it even against an observer who knows it).
func (e *walkEnv) walkRun() (privacy.WalkRun, error) {
	o := e.o
	r, err := sim.StepRun(o.baseStepConfig(), o.Problem, e.shards)
	if err != nil {
		return r, fmt.Errorf("testnet: audit: the figures of the %s step: %w", o.Step.Kind, err)
	}
	r.Nodes, r.Complete, r.Clip, r.Sigma = o.Nodes, true, o.Clip, o.Sigma
	return r, nil
}

// walkClaim is the accountant's claim for one observer.
type walkClaim struct {
	eps  float64
	thm  string
	hold bool
}

// claims returns the accountant's claims for the local, pairwise and final observers: one
// update's local figure of the step (privacy.StepLocalBound), then realisedClaim on the
// traces of the audited path, up to j's observation for the pairwise observer and the whole
// path with the final model released to all for the final observer (who never holds the
// token).
func (e *walkEnv) claims(run privacy.WalkRun) ([]walkClaim, error) {
	o, n, i := e.o, e.o.Nodes, e.o.Node
	if !privacy.StepNoisy(run) {
		no := walkClaim{math.Inf(1), "no figure: the step adds no noise or has no finite sensitivity", false}
		return []walkClaim{no, no, no}, nil
	}
	j, finalObs := e.path[o.PairHops], (i+o.FinalHops+1)%n
	loc := privacy.StepLocalBound(run, 1, o.Delta)
	pair, err := e.realisedClaim(run, loc, o.PairHops+1, j, false) // the last step is j holding the token
	if err != nil {
		return nil, err
	}
	final, err := e.realisedClaim(run, loc, o.FinalHops, finalObs, true)
	if err != nil {
		return nil, err
	}
	return []walkClaim{{loc.Epsilon, loc.Theorem, loc.ConditionsHold}, pair, final}, nil
}

// realisedClaim is the realised figure for observer on the path i, path[:upto] (with final,
// the final model released to all), decided as the simulator's report decides it
// (realisedSection): privacy.StepRealisedPairwise of the run's step; a step that no network
// theorem covers in this run (privacy.ErrNoNetworkFigure: ls-sgd, an sgd run not certified
// non-expansive) gets the local figure of the busiest node of the path, here loc (one update
// each), which holds regardless; where the local figure bounds every pair too (CapAtLocal:
// the DP-SGD walk) the smaller of the two.
func (e *walkEnv) realisedClaim(run privacy.WalkRun, loc privacy.Bound, upto, observer int, final bool) (walkClaim, error) {
	o, i := e.o, e.o.Node
	tr := &privacy.Trace{Nodes: o.Nodes, Clip: o.Clip, Sigma: o.Sigma, FinalReleasedToAll: final, Step: privacy.TraceStepOf(run)}
	tr.Steps = append(tr.Steps, privacy.TraceStep{Node: i, Noisy: true})
	for _, k := range e.path[:upto] {
		tr.Steps = append(tr.Steps, privacy.TraceStep{Node: k, Noisy: true})
	}
	// The observer's view follows i's update and `upto` others, less the pairwise
	// observer's own (the last step of its trace: it holds the token there).
	m := fmt.Sprintf("m = %d noisy updates", upto)
	if final {
		m = fmt.Sprintf("final model released to all, m = %d noisy updates", upto+1)
	}
	rp, info, err := privacy.StepRealisedPairwise(tr, run)
	if reason, ok := privacy.NoNetworkReason(err); ok {
		return walkClaim{loc.Epsilon, fmt.Sprintf("%s, the local figure, which bounds every observer (no network figure: %s); %s",
			loc.Theorem, reason, m), loc.ConditionsHold}, nil
	}
	if err != nil {
		return walkClaim{}, fmt.Errorf("testnet: audit: realised figure: %w", err)
	}
	eps, _ := rp.Pairs.Epsilon(i, observer, o.Delta)
	thm := info.Theorem + "; " + m
	eps, capped := info.Cap(eps, loc.Epsilon)
	if capped {
		thm += "; capped at the local figure (" + loc.Theorem + "), which bounds every observer"
	}
	return walkClaim{eps, thm, true}, nil
}
