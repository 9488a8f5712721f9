package audit

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/testnet/sim"
	"github.com/dpadmm/dpadmm/walk"
)

var (
	auditOnce  sync.Once
	auditTrain *consensus.Dataset
	auditErr   error
)

// auditData is the embedded breast cancer data prepared as 'dpadmm testnet' does by
// default: 80% training rows, standardized, rows scaled to norm <= 1.
func auditData(t *testing.T) *consensus.Dataset {
	t.Helper()
	auditOnce.Do(func() {
		full, err := consensus.Embedded()
		if err != nil {
			auditErr = err
			return
		}
		train, _ := consensus.TrainTest(full, 0.2, 1)
		sc, err := consensus.FitScaler(train, consensus.Scaling("standardize+rownorm"))
		if err != nil {
			auditErr = err
			return
		}
		auditTrain = sc.Apply(train)
	})
	if auditErr != nil {
		t.Fatal(auditErr)
	}
	return auditTrain
}

// smallWalkAudit is a walk audit small enough for a test: 10 nodes, the pairwise observer
// after 2 further updates, the final model after 4, the demo's gamma, lambda, clip and sigma.
func smallWalkAudit(t *testing.T, trials int, noise func(uint64) privacy.Noise) WalkAuditOptions {
	return WalkAuditOptions{
		Train: auditData(t), Nodes: 10, Seed: 1, Problem: consensus.Problem{Loss: consensus.Logistic, Reg: consensus.Regularizer{L2: 1e-2}},
		Gamma: 100, Lambda: 0.5, Clip: 0.1, Sigma: 1, PairHops: 2, FinalHops: 4, Trials: trials, Noise: noise,
	}
}

func find(t *testing.T, res []AuditResult, observer, test string) AuditResult {
	t.Helper()
	for _, r := range res {
		if r.Observer == observer && r.Test == test {
			return r
		}
	}
	t.Fatalf("no result for %s/%s", observer, test)
	return AuditResult{}
}

// checkClaims compares the walk audit's upper bounds with the Gaussian mechanism's RDP
// curve written out: sensitivity 4 lambda C against noise std lambda sigma is the curve of
// GaussianCurve(4C, sigma), one update for the local observer, divided by m for an observer
// who first sees the token after m noisy updates (i's included).
func checkClaims(t *testing.T, o WalkAuditOptions, res []AuditResult) {
	t.Helper()
	one := privacy.GaussianCurve(4*o.Clip, o.Sigma)
	for _, c := range []struct {
		observer string
		m        int
	}{{"local", 1}, {"pairwise", o.PairHops + 1}, {"final", o.FinalHops + 1}} {
		want, _ := privacy.ToDP(one.Scale(1/float64(c.m)), o.Delta)
		if c.m == 1 { // the local claim: one Gaussian mechanism, converted exactly where that is smaller
			want = math.Min(want, privacy.GDPEpsilon(4*o.Clip/o.Sigma, o.Delta))
		}
		for _, test := range []string{AuditProjection, AuditResidue} {
			if got := find(t, res, c.observer, test).UpperEpsilon; math.Abs(float64(got)-want) > 1e-9*want {
				t.Errorf("%s/%s: upper bound %v, want %v (m = %d)", c.observer, test, got, want, c.m)
			}
		}
	}
}

func checkNoViolation(t *testing.T, res []AuditResult) {
	t.Helper()
	if len(res) == 0 {
		t.Fatal("no results")
	}
	for _, r := range res {
		if r.Violation || r.LowerEpsilon > r.UpperEpsilon {
			t.Errorf("%s/%s/%s: lower bound %v above the claim %v (%+v)", r.Algo, r.Observer, r.Test, r.LowerEpsilon, r.UpperEpsilon, r.Counts)
		}
		if !(r.LowerEpsilonCI[0] <= r.LowerEpsilon && r.LowerEpsilon <= r.Estimate && r.Estimate <= r.LowerEpsilonCI[1]) {
			t.Errorf("%s/%s: lo %v <= lower %v <= estimate %v <= hi %v violated", r.Observer, r.Test,
				r.LowerEpsilonCI[0], r.LowerEpsilon, r.Estimate, r.LowerEpsilonCI[1])
		}
		if r.Counts.Pos != r.EvalTrials || r.Counts.Neg != r.EvalTrials {
			t.Errorf("%s/%s: counts %+v for %d evaluation trials", r.Observer, r.Test, r.Counts, r.EvalTrials)
		}
	}
}

// TestAuditWalkShippedSecure: the shipped machine with the crypto/rand lattice sampler stays
// below every claim, for every observer and test, and the claims are the Gaussian
// mechanism's.
func TestAuditWalkShippedSecure(t *testing.T) {
	o := smallWalkAudit(t, 1000, nil)
	res, err := WalkAudit(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 6 {
		t.Fatalf("%d results, want 3 observers x 2 tests", len(res))
	}
	o.Delta = 1e-5
	checkClaims(t, o, res)
	checkNoViolation(t, res)
	for _, r := range res {
		if !r.Secure || r.Trials != 1000 || r.EvalTrials != 500 {
			t.Errorf("%s/%s: secure %v, trials %d/%d", r.Observer, r.Test, r.Secure, r.Trials, r.EvalTrials)
		}
	}
}

// TestAuditWalkShippedSeeded: with seeded noise the audit is reproducible (whatever the
// number of workers) and below the claims.
func TestAuditWalkShippedSeeded(t *testing.T) {
	o := smallWalkAudit(t, 600, AuditNoise(true, 9))
	o.Workers = 2
	a, err := WalkAudit(o)
	if err != nil {
		t.Fatal(err)
	}
	checkNoViolation(t, a)
	o.Workers = 1
	b, err := WalkAudit(o)
	if err != nil {
		t.Fatal(err)
	}
	for k := range a {
		if a[k] != b[k] {
			t.Errorf("line %d differs between runs:\n%+v\n%+v", k, a[k], b[k])
		}
		if a[k].Secure {
			t.Errorf("seeded noise reported as secure")
		}
	}
	// The canary search finds a row that moves i's update by most of the sensitivity.
	if r := find(t, a, "local", AuditProjection); !(r.SensitivityUsed > 0.5 && r.SensitivityUsed <= 1) {
		t.Errorf("the canary attains %v of the sensitivity 4 lambda C", r.SensitivityUsed)
	}
}

// scaledNoise draws f times the noise it is asked for: a mechanism whose noise is smaller
// than the sigma the accountant is told.
type scaledNoise struct {
	privacy.Noise
	f float64
}

func (s scaledNoise) Normal(dst []float64, sigma float64) { s.Noise.Normal(dst, s.f*sigma) }

// TestAuditWalkFlagsSmallNoise: the real machine with noise divided by 10 (the accountant
// still told sigma) is flagged by the local observer's projection test.
func TestAuditWalkFlagsSmallNoise(t *testing.T) {
	seeded := AuditNoise(true, 5)
	o := smallWalkAudit(t, 600, func(b uint64) privacy.Noise { return scaledNoise{seeded(b), 0.1} })
	res, err := WalkAudit(o)
	if err != nil {
		t.Fatal(err)
	}
	r := find(t, res, "local", AuditProjection)
	if !r.Violation || !(r.LowerEpsilon > r.UpperEpsilon) || r.Verdict() != "VIOLATION" {
		t.Fatalf("noise / 10 not flagged: lower %v, upper %v, counts %+v", r.LowerEpsilon, r.UpperEpsilon, r.Counts)
	}
	t.Logf("noise / 10: local lower bound %.3g > claim %.3g", r.LowerEpsilon, r.UpperEpsilon)
}

// floatLattice is the insecure arithmetic of a noisy walk update: the data part
// v = 2 lambda Clip(x - z, C) in floating point (here taken from the shipped machine run
// without noise, whose u is then v), plus lambda eta with eta from the secure sampler (on its
// lattice), zhat += du/n, z = prox_{gamma r}(zhat).
type floatLattice struct {
	m         [2]*walk.Machine
	noise     privacy.Noise
	zero, eta []float64
	z, zh     []float64
	cfg       walk.Config
}

func newFloatLattice(s WalkAuditSetup, noise privacy.Noise) (WalkUpdate, error) {
	f := &floatLattice{noise: noise, cfg: s.Config, zero: make([]float64, s.Dim), eta: make([]float64, s.Dim),
		z: make([]float64, s.Dim), zh: make([]float64, s.Dim)}
	for w := range f.m {
		ll, err := consensus.NewLocalLoss(s.Data[w], s.Loss, s.Weight)
		if err != nil {
			return nil, err
		}
		cfg := s.Config
		cfg.Sigma, cfg.Rand = 0, rand.New(rand.NewPCG(1, 1))
		if f.m[w], err = walk.New(cfg, ll, s.Dim); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// dataPart returns v for world w and the token (z, zhat), without touching them.
func (f *floatLattice) dataPart(w int, z, zhat []float64) ([]float64, error) {
	copy(f.z, z)
	copy(f.zh, zhat)
	m := f.m[w]
	if err := m.Restore(walk.Checkpoint{U: f.zero}); err != nil {
		return nil, err
	}
	if err := m.Step(walk.Message{From: -1, Token: walk.Token{Run: f.cfg.Run, Z: f.z, Zhat: f.zh}}); err != nil {
		return nil, err
	}
	m.Advance(m.Ready())
	return m.U(), nil
}

func (f *floatLattice) Update(w int, tok *walk.Token) error {
	v, err := f.dataPart(w, tok.Z, tok.Zhat)
	if err != nil {
		return err
	}
	c := &f.cfg
	f.noise.Normal(f.eta, c.Sigma)
	inv := 1 / float64(c.Nodes)
	for k := range v {
		du := v[k] + c.Lambda*f.eta[k]
		tok.Zhat[k] += du * inv
	}
	c.Reg.Prox(tok.Z, tok.Zhat, c.Gamma)
	return nil
}

// TestAuditWalkFlagsFloatLattice: node i holds one row, and D and D' differ in one coordinate
// of that row, so that the clipped data parts of i's update differ in their 12th significant
// digit, in that coordinate only. The floating-point
// mechanism leaks the data part's low-order bits through the lattice noise: the residue test
// separates D from D' and its lower bound beats the claim, while the projection test sees
// nothing. The shipped machine on the same data is not flagged.
func TestAuditWalkFlagsFloatLattice(t *testing.T) {
	data := auditData(t)
	p := data.Cols
	row := func(a0 float64) *consensus.Dataset {
		a := make([]float64, p)
		a[0] = a0
		return &consensus.Dataset{Name: "node", Rows: 1, Cols: p, X: a, Y: []float64{1}, Features: data.Features}
	}
	const a0 = 0.05
	canary := &AuditCanary{D: row(a0), DPrime: row(a0 * (1 + 2e-12)), Description: "D: one row a, D': a with a_0 changed in its 12th digit"}
	o := smallWalkAudit(t, 600, nil)
	o.Canary = canary

	var built *floatLattice
	o.Update = func(s WalkAuditSetup, noise privacy.Noise) (WalkUpdate, error) {
		u, err := newFloatLattice(s, noise)
		if err == nil && built == nil {
			built = u.(*floatLattice)
		}
		return u, err
	}
	res, err := WalkAudit(o)
	if err != nil {
		t.Fatal(err)
	}
	// The premise, checked on the data parts the audited mechanism computed on the initial
	// token (the token i receives in every trial).
	tok := walk.NewToken("audit", 0, p, o.Problem.Reg, o.Gamma)
	v, err := built.dataPart(0, tok.Z, tok.Zhat)
	if err != nil {
		t.Fatal(err)
	}
	v2, _ := built.dataPart(1, tok.Z, tok.Zhat)
	// Equal to 11 significant digits, different at 12, and not clipped.
	d11, d12 := fmt.Sprintf("%.10e", v[0]) == fmt.Sprintf("%.10e", v2[0]), fmt.Sprintf("%.11e", v[0]) == fmt.Sprintf("%.11e", v2[0])
	if !d11 || d12 || math.Abs(v[0]) >= 2*o.Lambda*o.Clip {
		t.Fatalf("data parts %.17g and %.17g: want them equal to 11 significant digits, different at the 12th, and not clipped", v[0], v2[0])
	}
	for k := 1; k < p; k++ {
		if v[k] != v2[k] {
			t.Fatalf("data parts differ in coordinate %d", k)
		}
	}
	h := privacy.Granularity(o.Lambda * o.Sigma)
	if q := (v[0] - v2[0]) / h; math.Abs(q-math.Round(q)) < 0.1 {
		t.Fatalf("the data parts differ by %v lattice steps: their residues nearly agree, pick another a0", q)
	}
	t.Logf("data parts %.17g and %.17g: %.3g lattice steps apart", v[0], v2[0], (v[0]-v2[0])/h)
	r := find(t, res, "local", AuditResidue)
	if !r.Violation || r.Counts.FP+r.Counts.FN > r.EvalTrials/50 {
		t.Fatalf("floating-point data part not caught by the residue test: lower %v, upper %v, counts %+v", r.LowerEpsilon, r.UpperEpsilon, r.Counts)
	}
	if pr := find(t, res, "local", AuditProjection); pr.Violation {
		t.Errorf("the projection test cannot see a 1e-12 difference, yet it flags: %+v", pr)
	}
	t.Logf("floating-point lattice update: residue lower bound %.3g > claim %.3g (%+v)", r.LowerEpsilon, r.UpperEpsilon, r.Counts)

	o.Update = nil // the shipped machine, same data
	res, err = WalkAudit(o)
	if err != nil {
		t.Fatal(err)
	}
	checkNoViolation(t, res)
	if r := find(t, res, "local", AuditResidue); r.LowerEpsilon > 0.5 {
		t.Errorf("the residue test finds structure in the lattice-exact update: %+v", r)
	}
}

// TestAuditRADMMShipped: one R-ADMM release through the real gossip machine stays below its
// Theorem V.1 figure, which is the per-release formula 2 w (1.4 c1/(rho/N + 2 eta V) + alpha)
// with w = C N/M.
func TestAuditRADMMShipped(t *testing.T) {
	data := auditData(t)
	for _, c := range []struct {
		name  string
		alpha float64
		noise func(uint64) privacy.Noise
	}{{"secure", 2, nil}, {"seeded", 2, AuditNoise(true, 4)}, {"little noise", 200, AuditNoise(true, 4)}} {
		o := RADMMAuditOptions{Train: data, Seed: 1, Problem: consensus.Problem{Loss: consensus.Logistic, Reg: consensus.Regularizer{L2: 1e-2}},
			Alpha: c.alpha, Trials: 600, Noise: c.noise}
		res, err := RADMMAudit(o)
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != 2 {
			t.Fatalf("%s: %d results, want 2", c.name, len(res))
		}
		checkNoViolation(t, res)
		w := 10 * 5 / float64(data.Rows+1)
		want := 2 * w * (1.4*0.25/(10*1e-2+2*1*2) + c.alpha)
		for _, r := range res {
			if math.Abs(float64(r.UpperEpsilon)-want) > 1e-12*want || !r.ConditionsHold || r.Delta != 0 {
				t.Errorf("%s/%s: upper %v (conditions %v, delta %v), want %v", c.name, r.Test, r.UpperEpsilon, r.ConditionsHold, r.Delta, want)
			}
		}
		if c.alpha > 100 {
			// With little noise the attack must see the canary, or it has no power at all.
			if r := find(t, res, "neighbour", AuditProjection); !(r.LowerEpsilon > 1) {
				t.Errorf("alpha %v: projection lower bound %v, want > 1", c.alpha, r.LowerEpsilon)
			}
		}
	}
}

// TestAuditPNG draws a small audit.
func TestAuditPNG(t *testing.T) {
	res := []AuditResult{
		{Observer: "local", Test: AuditProjection, LowerEpsilon: 0.3, LowerEpsilonCI: [2]privacy.Epsilon{0.2, 0.9}, UpperEpsilon: 1.7, Confidence: 0.95},
		{Observer: "final", Test: AuditResidue, LowerEpsilon: 0, LowerEpsilonCI: [2]privacy.Epsilon{0, privacy.Unbounded}, UpperEpsilon: privacy.Unbounded, Confidence: 0.95, Violation: true},
	}
	var b bytes.Buffer
	if err := WriteAuditPNG(&b, res, "test"); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b.Bytes(), []byte("\x89PNG\r\n\x1a\n")) || b.Len() < 1000 {
		t.Errorf("not a PNG: %d bytes", b.Len())
	}
	if err := WriteAuditPNG(&b, nil, "empty"); err == nil {
		t.Error("an empty audit was drawn")
	}
}

// TestAuditOptionErrors: bad settings are refused before any trial.
func TestAuditOptionErrors(t *testing.T) {
	for _, mod := range []func(o *WalkAuditOptions){
		func(o *WalkAuditOptions) { o.FinalHops = o.PairHops },
		func(o *WalkAuditOptions) { o.Nodes = o.FinalHops + 1 },
		func(o *WalkAuditOptions) { o.Trials = 5 },
		func(o *WalkAuditOptions) { o.Sigma = math.NaN() },
		func(o *WalkAuditOptions) { o.Confidence = 1 },
		func(o *WalkAuditOptions) { o.Node = 99 },
		func(o *WalkAuditOptions) { o.Step = walk.StepParams{Kind: walk.StepSGD, Eta: 0.5} },  // no rate
		func(o *WalkAuditOptions) { o.Step = walk.StepParams{Kind: walk.StepGADMM, Beta: 1} }, // no step size
	} {
		o := smallWalkAudit(t, 100, AuditNoise(true, 1))
		mod(&o)
		if _, err := WalkAudit(o); err == nil {
			t.Errorf("accepted %+v", o)
		}
	}
	if _, err := RADMMAudit(RADMMAuditOptions{Train: auditData(t), Problem: consensus.Problem{Loss: consensus.Logistic}}); err == nil {
		t.Error("R-ADMM audit without l2 accepted")
	}
}

// auditSteps are the local steps of the walk with the audit's default parameters (those of
// 'dpadmm audit'): every step the walk ships.
var auditSteps = []walk.StepParams{
	{Kind: walk.StepProx},
	{Kind: walk.StepLinearized, Eta: 1},
	{Kind: walk.StepLSSGD, Eta: 1, Rate: 1},
	{Kind: walk.StepSGD, Eta: 0.5, Rate: 1},
	{Kind: walk.StepGADMM, Eta: 1, Beta: 1},
}

// TestAuditStepsShipped: for every local step the shipped machine (seeded noise) stays
// below every claim; each step has its tests (the row-count scale test for ls-sgd and sgd),
// its step name on every row, the Bonferroni confidence of its rows, and a canary that
// reaches the step's per-example clip.
func TestAuditStepsShipped(t *testing.T) {
	for _, st := range auditSteps {
		o := smallWalkAudit(t, 1000, AuditNoise(true, 3))
		o.Step = st
		res, err := WalkAudit(o)
		if err != nil {
			t.Fatalf("%s: %v", st.Kind, err)
		}
		checkNoViolation(t, res)
		tests := map[string]bool{}
		for _, r := range res {
			tests[r.Observer+"/"+r.Test] = true
			if r.Step != st.Kind.String() || r.Algo != sim.WalkAlgo(st) {
				t.Errorf("%s: row named algo %q step %q", st.Kind, r.Algo, r.Step)
			}
			if want := 1 - 0.05/float64(len(res)); r.FamilySize != len(res) || math.Abs(r.RowConfidence-want) > 1e-15 || r.Confidence != 0.95 {
				t.Errorf("%s: family %d, row confidence %v, confidence %v; want %d, %v, 0.95", st.Kind, r.FamilySize, r.RowConfidence, r.Confidence, len(res), want)
			}
		}
		wantScale := st.Kind == walk.StepLSSGD || st.Kind == walk.StepSGD
		if tests["local/"+AuditRowCountScale] != wantScale || !tests["local/"+AuditResidue] || !tests["final/"+AuditProjection] {
			t.Errorf("%s: tests %v", st.Kind, tests)
		}
		sens := res[0].SensitivityUsed
		switch st.Kind {
		case walk.StepLSSGD, walk.StepSGD:
			// Both canary gradients clipped, opposite: 2C' with C' the lattice-reduced clip.
			if !(sens > 0.999 && sens <= 1) {
				t.Errorf("%s: the canary attains %v of 2C", st.Kind, sens)
			}
		case walk.StepGADMM:
			// Every row clipped: eta 2 w C / (1 + eta beta) of eta 2 w_max C.
			if want := 1 / (1 + st.Eta*st.Beta); !(sens > 0.9*want && sens <= want) {
				t.Errorf("gadmm: the canary attains %v of eta Delta, want about %v", sens, want)
			}
		default:
			if !(sens > 0.5 && sens <= 1) {
				t.Errorf("%s: the canary attains %v of 4 lambda C", st.Kind, sens)
			}
		}
		t.Logf("%s: sensitivity used %.3g; local claim %.3g, pairwise %.3g, final %.3g", st.Kind, sens,
			find(t, res, "local", AuditProjection).UpperEpsilon, find(t, res, "pairwise", AuditProjection).UpperEpsilon,
			find(t, res, "final", AuditProjection).UpperEpsilon)
	}
}

// TestAuditStepClaims: the claims are the accountant's figures of each step: the local one
// is the step's local bound for one update (ls-sgd and sgd at q = 1: the Gaussian mechanism
// with sensitivity 2C, replace-one), ls-sgd has no network figure (pairwise and final are
// the local one), sgd's realised figure is capped by the local one, gadmm's local figure is
// eta^2 Delta^2 / (2 sigma^2) as zCDP.
func TestAuditStepClaims(t *testing.T) {
	claim := func(st walk.StepParams, unit privacy.Unit) (loc, pair, final float64, res []AuditResult) {
		o := smallWalkAudit(t, 40, AuditNoise(true, 1))
		o.Step, o.Unit = st, unit
		res, err := WalkAudit(o)
		if err != nil {
			t.Fatal(err)
		}
		return float64(find(t, res, "local", AuditProjection).UpperEpsilon), float64(find(t, res, "pairwise", AuditProjection).UpperEpsilon),
			float64(find(t, res, "final", AuditProjection).UpperEpsilon), res
	}
	const clip, sigma, delta = 0.1, 1.0, 1e-5
	gauss, _ := privacy.ToDP(privacy.GaussianCurve(2*clip, sigma), delta)
	for _, st := range auditSteps[2:4] {
		loc, pair, final, res := claim(st, "")
		if math.Abs(loc-gauss) > 1e-9*gauss {
			t.Errorf("%s: local claim %v, want the Gaussian mechanism's %v (sensitivity 2C, noise sigma)", st.Kind, loc, gauss)
		}
		if st.Kind == walk.StepLSSGD && (pair != loc || final != loc) {
			t.Errorf("ls-sgd: pairwise %v and final %v, want the local figure %v", pair, final, loc)
		}
		if st.Kind == walk.StepSGD && !(pair <= loc && final <= pair && final > 0) {
			t.Errorf("sgd: pairwise %v and final %v: want 0 < final <= pairwise <= local %v", pair, final, loc)
		}
		if r := find(t, res, "pairwise", AuditProjection); st.Kind == walk.StepLSSGD && !strings.Contains(r.Theorem, "no network figure") {
			t.Errorf("ls-sgd: pairwise theorem %q does not say why it is the local figure", r.Theorem)
		}
	}
	loc, _, _, res := claim(auditSteps[4], privacy.UnitNode)
	// Delta = 2 w C with w the largest node weight n*rows/N (node 0 holds its shard's rows
	// plus one), and one update's curve is the Gaussian mechanism's at eta Delta / sigma.
	o := smallWalkAudit(t, 40, nil)
	shards, err := consensus.Split(o.Train, o.Nodes, o.Split, o.Seed)
	if err != nil {
		t.Fatal(err)
	}
	most := shards[0].Rows + 1
	for _, s := range shards[1:] {
		most = max(most, s.Rows)
	}
	w := float64(o.Nodes) * float64(most) / float64(o.Train.Rows+1)
	want, _ := privacy.ToDP(privacy.GaussianCurve(auditSteps[4].Eta*2*w*clip, sigma), delta)
	if math.Abs(loc-want) > 1e-9*want || !find(t, res, "local", AuditProjection).ConditionsHold {
		t.Errorf("gadmm: local claim %v, want %v (the Gaussian mechanism at eta Delta = 2 eta w C against sigma)", loc, want)
	}
	// Per record (the default): Delta = 2 c C, c = n/M the weight of one row (node 0's
	// shard plus the canary row: n/(N+1)), and the canary is one row.
	rloc, _, _, rres := claim(auditSteps[4], "")
	c := float64(o.Nodes) / float64(o.Train.Rows+1)
	rwant, _ := privacy.ToDP(privacy.GaussianCurve(auditSteps[4].Eta*2*c*clip, sigma), delta)
	if math.Abs(rloc-rwant) > 1e-6*rwant || !strings.Contains(find(t, rres, "local", AuditProjection).Note, "plus a canary row") {
		t.Errorf("gadmm per record: local claim %v, want %v; note %q", rloc, rwant, find(t, rres, "local", AuditProjection).Note)
	}
}

// TestAuditStepsFlagSmallNoise: every step's machine with its noise divided by 20 (the
// accountant still told sigma) is flagged by the local observer's projection test.
func TestAuditStepsFlagSmallNoise(t *testing.T) {
	for _, st := range auditSteps[1:] {
		seeded := AuditNoise(true, 5)
		o := smallWalkAudit(t, 600, func(b uint64) privacy.Noise { return scaledNoise{seeded(b), 0.05} })
		o.Step = st
		if st.Kind == walk.StepGADMM {
			o.Unit = privacy.UnitNode // the node-level canary moves the update enough to be seen at this trial count
		}
		res, err := WalkAudit(o)
		if err != nil {
			t.Fatal(err)
		}
		r := find(t, res, "local", AuditProjection)
		if !r.Violation || !(r.LowerEpsilon > r.UpperEpsilon) {
			t.Errorf("%s: noise / 20 not flagged: lower %v, upper %v, counts %+v", st.Kind, r.LowerEpsilon, r.UpperEpsilon, r.Counts)
		}
		t.Logf("%s, noise / 20: local lower bound %.3g > claim %.3g", st.Kind, r.LowerEpsilon, r.UpperEpsilon)
	}
}

// addRemove is the shipped machine run on add/remove neighbours instead of the audit's
// replace-one pair: in D' node i's data is D without its canary row (the last), with the
// loss weight n m_i/M of a total of M - 1 rows, as a mechanism whose figures wrongly
// assumed add/remove and a public-count-free release would run.
type addRemove struct {
	m    [2]*walk.Machine
	zero []float64
	mech string
}

func newAddRemove(s WalkAuditSetup, noise privacy.Noise) (WalkUpdate, error) {
	d := s.Data[0]
	n := float64(s.Config.Nodes)
	total := math.Round(n * float64(d.Rows) / s.Weight)
	less := &consensus.Dataset{Name: d.Name, Rows: d.Rows - 1, Cols: d.Cols, X: d.X[:(d.Rows-1)*d.Cols], Y: d.Y[:d.Rows-1], Features: d.Features}
	a := &addRemove{zero: make([]float64, s.Dim), mech: auditMechanism(s.Config.Step.Kind)}
	for w, c := range []struct {
		d      *consensus.Dataset
		weight float64
	}{{d, s.Weight}, {less, n * float64(less.Rows) / (total - 1)}} {
		ll, err := consensus.NewLocalLoss(c.d, s.Loss, c.weight)
		if err != nil {
			return nil, err
		}
		cfg := s.Config
		cfg.Noise, cfg.Rand = noise, rand.New(rand.NewPCG(1, uint64(w)))
		if a.m[w], err = walk.New(cfg, ll, s.Dim); err != nil {
			return nil, err
		}
	}
	return a, nil
}

func (a *addRemove) Update(world int, tok *walk.Token) error {
	return stepFresh(a.m[world], a.zero, tok, a.mech)
}

// TestAuditStepsFlagAddRemove: ls-sgd and sgd run on add/remove neighbours (D' one row
// fewer, the total row count one less) are caught by the row-count scale test, which
// separates the datasets in (nearly) every trial, while the projection test finds nothing beyond
// the claim (one row removed moves the clipped sum by C, within the replace-one 2C): the
// reason the figures are for replace-one and the audit's canary keeps the counts equal.
func TestAuditStepsFlagAddRemove(t *testing.T) {
	for _, st := range auditSteps[2:4] {
		o := smallWalkAudit(t, 600, AuditNoise(true, 6))
		o.Step, o.Update = st, newAddRemove
		res, err := WalkAudit(o)
		if err != nil {
			t.Fatal(err)
		}
		r := find(t, res, "local", AuditRowCountScale)
		if !r.Violation || r.Counts.FP+r.Counts.FN > r.EvalTrials/100 {
			t.Errorf("%s: add/remove not caught by the scale test: lower %v, upper %v, counts %+v", st.Kind, r.LowerEpsilon, r.UpperEpsilon, r.Counts)
		}
		if p := find(t, res, "local", AuditProjection); p.Violation {
			t.Errorf("%s: the projection test flags one row removed: %+v", st.Kind, p)
		}
		t.Logf("%s, add/remove: scale test lower bound %.3g > claim %.3g (%+v)", st.Kind, r.LowerEpsilon, r.UpperEpsilon, r.Counts)
	}
}

// TestAuditBonferroni: the rows' bounds are recomputed at 1 - (1-confidence)/R, which can
// turn a line that would be a violation at 95% alone into a correct one, and a second
// correction of the same rows with the same confidence changes nothing.
func TestAuditBonferroni(t *testing.T) {
	cnt := privacy.AttackCounts{Pos: 500, Neg: 500, FN: 250, FP: 95}
	one, err := privacy.EmpiricalEpsilon(cnt, 1e-5, 0.95)
	if err != nil {
		t.Fatal(err)
	}
	upper := one.Epsilon * 0.99 // just below the uncorrected bound
	res := make([]AuditResult, 30)
	for k := range res {
		res[k] = AuditResult{Counts: cnt, Delta: 1e-5, Confidence: 0.95, UpperEpsilon: privacy.Eps(upper)}
	}
	single := []AuditResult{res[0]}
	if err := AuditBonferroni(single, 0.95); err != nil || !single[0].Violation {
		t.Fatalf("alone at 95%%: violation %v (%v), lower %v upper %v", single[0].Violation, err, single[0].LowerEpsilon, upper)
	}
	if err := AuditBonferroni(res, 0.95); err != nil {
		t.Fatal(err)
	}
	again := append([]AuditResult(nil), res...)
	if err := AuditBonferroni(again, 0.95); err != nil {
		t.Fatal(err)
	}
	for k, r := range res {
		want, _ := privacy.EmpiricalEpsilon(cnt, 1e-5, 1-0.05/30)
		if r.Violation || r.FamilySize != 30 || r.RowConfidence != 1-0.05/30 || float64(r.LowerEpsilon) != want.Epsilon || r != again[k] {
			t.Errorf("row %d: %+v", k, r)
		}
	}
	if err := AuditBonferroni(res, 1); err == nil {
		t.Error("confidence 1 accepted")
	}
}

// TestAuditStepsShippedSecure: the gradient steps with the crypto/rand lattice sampler (the
// production noise path of their integer queries) stay below every claim.
func TestAuditStepsShippedSecure(t *testing.T) {
	for _, st := range []walk.StepParams{auditSteps[3], auditSteps[4]} {
		o := smallWalkAudit(t, 400, nil)
		o.Step = st
		res, err := WalkAudit(o)
		if err != nil {
			t.Fatalf("%s: %v", st.Kind, err)
		}
		checkNoViolation(t, res)
		if !res[0].Secure {
			t.Errorf("%s: crypto/rand noise not reported as secure", st.Kind)
		}
	}
}

// TestAuditWalkRecordUnit: the record-level claim. With a small gamma the record radius
// gamma (c L + tol) is far below the clip, so the claim is the Gaussian mechanism at the
// radius; the canary search (rows projected onto the unit ball) reaches a large part of
// that radius, and the empirical lower bound stays below the claim.
func TestAuditWalkRecordUnit(t *testing.T) {
	o := smallWalkAudit(t, 1000, AuditNoise(true, 5))
	o.Gamma, o.Sigma, o.Unit, o.RowBound = 0.5, 0.02, privacy.UnitRecord, 1
	res, err := WalkAudit(o)
	if err != nil {
		t.Fatal(err)
	}
	checkNoViolation(t, res)
	loc := find(t, res, "local", AuditProjection)
	// The radius: every node's row weight is n/M (walk.LossWeight), L = 1 (logistic).
	train := auditData(t)
	radius := privacy.RecordClip(o.Gamma, 10/float64(train.Rows+1), 1, consensus.ProxTolerance)
	if !(radius < o.Clip) {
		t.Fatalf("radius %v does not bind below the clip %v", radius, o.Clip)
	}
	rdp, _ := privacy.ToDP(privacy.GaussianCurve(4*radius, o.Sigma), o.Delta)
	want := math.Min(rdp, privacy.GDPEpsilon(4*radius/o.Sigma, o.Delta))
	if got := float64(loc.UpperEpsilon); math.Abs(got-want) > 1e-3*want {
		t.Errorf("local claim %v, want the record-level %v (radius %v)", got, want, radius)
	}
	if !(loc.SensitivityUsed > 0.3 && loc.SensitivityUsed <= 1) || !strings.Contains(loc.SensitivityOf, "record radius") {
		t.Errorf("the canary attains %v of %q", loc.SensitivityUsed, loc.SensitivityOf)
	}
	t.Logf("local: lower bound %v, claim %v, canary at %.2f of the radius", loc.LowerEpsilon, loc.UpperEpsilon, loc.SensitivityUsed)
}
