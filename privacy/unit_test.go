package privacy

import (
	"math"
	"strings"
	"testing"
)

// TestGDPGolden: the exact Gaussian-DP conversion against values computed independently
// (bisection on delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) with Python's
// math.erfc, 200 halvings); mu = 1 at delta 1e-5 is the 4.38 of Dong, Roth and Su's
// examples.
func TestGDPGolden(t *testing.T) {
	for _, c := range []struct{ mu, delta, want float64 }{
		{0.5, 1e-5, 1.9930914044151207},
		{1, 1e-5, 4.3771780956812245},
		{2, 1e-6, 10.99715121422065},
		{0.1, 1e-5, 0.34066936468432574},
		{3, 1e-5, 16.675494402828164},
		{0.25, 1e-5, 0.9263415039982289},
	} {
		got := GDPEpsilon(c.mu, c.delta)
		if math.Abs(got-c.want) > 1e-9*c.want {
			t.Errorf("GDPEpsilon(%v, %v) = %v, want %v", c.mu, c.delta, got, c.want)
		}
		if d := GDPDelta(c.mu, got); d > c.delta*(1+1e-9) {
			t.Errorf("delta at the returned epsilon %v > %v", d, c.delta)
		}
	}
	if GDPEpsilon(0, 1e-5) != 0 || !math.IsInf(GDPEpsilon(math.Inf(1), 1e-5), 1) || !math.IsInf(GDPEpsilon(1, 0), 1) {
		t.Error("edge cases")
	}
}

// TestGDPBelowRDP: for every composition of Gaussian mechanisms the exact conversion is
// at most the RDP one (it is the tight curve), and StepLocalEpsilon reports the smaller
// with its accountant's name.
func TestGDPBelowRDP(t *testing.T) {
	for _, clip := range []float64{0.01, 0.1, 1} {
		for _, sigma := range []float64{0.5, 1, 4} {
			for _, k := range []int{1, 10, 100} {
				rdp, _ := ToDP(WalkLocalCurve(clip, sigma, k), 1e-5)
				g := GDPEpsilon(GaussianMu(4*clip, sigma, k), 1e-5)
				if g > rdp*(1+1e-12) {
					t.Errorf("C %v sigma %v k %d: GDP %v above RDP %v", clip, sigma, k, g, rdp)
				}
				eps, r2, _, acct := StepLocalEpsilon(WalkRun{Clip: clip, Sigma: sigma}, k, 1e-5)
				if r2 != rdp || eps != math.Min(g, rdp) || (acct == AccountantGDP) != (g < rdp) {
					t.Errorf("StepLocalEpsilon %v %v %q, want min(%v, %v)", eps, r2, acct, g, rdp)
				}
				if b := StepLocalBound(WalkRun{Clip: clip, Sigma: sigma}, k, 1e-5); b.Epsilon != eps {
					t.Errorf("StepLocalBound %v, StepLocalEpsilon %v", b.Epsilon, eps)
				}
			}
		}
	}
}

// TestRecordClip: the record radius is gamma (c L + tol), FigureClip takes the smaller of
// it and the clip for the prox and linearized steps under the record unit only, and every
// figure of a WalkRun follows it.
func TestRecordClip(t *testing.T) {
	if got, want := RecordClip(2, 0.01, 1, 1e-9), 2*(0.01+1e-9); math.Abs(got-want) > 1e-15 {
		t.Errorf("RecordClip %v, want %v", got, want)
	}
	if !math.IsInf(RecordClip(1, 0.01, math.Inf(1), 0), 1) || !math.IsInf(RecordClip(0, 0.01, 1, 0), 1) {
		t.Error("a non-Lipschitz loss or gamma 0 must give no radius")
	}
	r := WalkRun{Clip: 0.1, Sigma: 1, RecordClip: 0.02}
	if r.FigureClip() != 0.02 || !r.RecordBinds() || r.UnitOf() != UnitRecord {
		t.Errorf("record unit: figure clip %v", r.FigureClip())
	}
	node := r
	node.Unit = UnitNode
	sgd := r
	sgd.Step, sgd.Rate = StepSGD, 0.1
	if node.FigureClip() != 0.1 || sgd.FigureClip() != 0.1 || (WalkRun{Clip: 0.01, RecordClip: 0.02}).FigureClip() != 0.01 {
		t.Error("the node unit, the gradient steps and a clip below the radius keep the clip")
	}
	a, _ := ToDP(StepLocalCurve(r, 10), 1e-5)
	b, _ := ToDP(WalkLocalCurve(0.02, 1, 10), 1e-5)
	if a != b {
		t.Errorf("StepLocalCurve under the record unit %v, want the curve at the radius %v", a, b)
	}
	if c := StepLocalBound(r, 10, 1e-5).Conditions; !strings.Contains(c, "record-level") {
		t.Errorf("the local figure's conditions under the record unit: %q", c)
	}
	if c := StepLocalBound(node, 10, 1e-5).Conditions; strings.Contains(c, "record-level") {
		t.Errorf("the node unit's conditions: %q", c)
	}
	inf := WalkRun{Clip: math.Inf(1), Sigma: 1, RecordClip: 0.02}
	if !StepNoisy(inf) {
		t.Error("without a clip the record radius still bounds the update")
	}
	if _, err := ParseUnit("row"); err == nil {
		t.Error("ParseUnit accepted an unknown unit")
	}
}

// TestUnitNoteWeightUnknown: a record figure bounded by the clip for want of the weight of
// one row says so, not that the loss or the rows lack a radius.
func TestUnitNoteWeightUnknown(t *testing.T) {
	r := WalkRun{Clip: 0.1, RecordClip: math.Inf(1), WeightUnknown: true}
	if n := r.UnitNote(); !strings.Contains(n, "the weight of one row is unknown") {
		t.Errorf("note %q", n)
	}
	r.WeightUnknown = false
	if n := r.UnitNote(); !strings.Contains(n, "not Lipschitz") {
		t.Errorf("note %q", n)
	}
}
