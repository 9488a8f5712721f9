package testnet

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
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
