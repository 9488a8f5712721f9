package privacy

import (
	"bytes"
	"errors"
	"math"
	"testing"
)

// TestTraceStepRoundTrip: a trace's local step (with gradient ADMM's parameters) survives
// WriteTrace and ReadTrace, and a trace without one reads as the prox step.
func TestTraceStepRoundTrip(t *testing.T) {
	steps := []TraceStep{{0, true}, {1, true}, {0, false}, {1, true}}
	p := GADMMParams{Eta: 0.1, Beta: 1, Sigma: 0.5, Sensitivity: 0.02, Nu: 2}
	for _, r := range []WalkRun{{}, {Step: "sgd", Rate: 0.5, SGDNonExpansive: true}, {Step: StepGADMM, GADMM: p}} {
		tr := &Trace{Nodes: 2, Clip: 1, Sigma: 0.5, Steps: steps, Step: TraceStepOf(r)}
		var b bytes.Buffer
		if err := WriteTrace(&b, tr); err != nil {
			t.Fatal(err)
		}
		got, err := ReadTrace(&b)
		if err != nil {
			t.Fatal(err)
		}
		w := got.WalkRun()
		if w.Step != r.Step || w.Rate != r.Rate || w.SGDNonExpansive != r.SGDNonExpansive || w.GADMM != r.GADMM {
			t.Errorf("step %q: read back %+v", r.Step, w)
		}
	}
}

// TestStepRealisedDispatch: the realised accountant of each step: the prox figure for the
// prox step; gradient ADMM's own (never above its local figure at the busiest node's
// count); sgd as walk updates of clip C/2 with each hop's own step size (exactly
// RealisedPairwiseScaled of that trace with SGDStepScales) only when certified; ls-sgd never.
func TestStepRealisedDispatch(t *testing.T) {
	steps := []TraceStep{{0, true}, {1, true}, {2, true}, {0, true}, {1, true}, {2, false}, {1, true}}
	tr := &Trace{Nodes: 3, Clip: 1, Sigma: 2, Steps: steps, FinalReleasedToAll: true}
	base := tr.WalkRun()
	ref, _ := RealisedPairwise(tr)
	got, info, err := StepRealisedPairwise(tr, base)
	if err != nil || info.Theorem != TheoremRealised || !sameCurve(got.Pairs.Unit, ref.Pairs.Unit) {
		t.Fatalf("prox: %v %q", err, info.Theorem)
	}
	sgd := base
	sgd.Step, sgd.Rate = "sgd", 1
	if _, _, err := StepRealisedPairwise(tr, sgd); !errors.Is(err, ErrNoNetworkFigure) {
		t.Errorf("uncertified sgd: %v", err)
	}
	sgd.SGDNonExpansive = true
	t2 := *tr
	t2.Clip = tr.Clip / 2
	want, _ := RealisedPairwiseScaled(&t2, SGDStepScales(&t2))
	got, info, err = StepRealisedPairwise(tr, sgd)
	if err != nil || !info.CapAtLocal || !sameCurve(got.Pairs.Unit, want.Pairs.Unit) {
		t.Errorf("sgd: %v %+v", err, info)
	}
	for i := 0; i < 3; i++ {
		for j := 0; j < 3; j++ {
			if got.Pairs.Weight(i, j) != want.Pairs.Weight(i, j) {
				t.Errorf("sgd: weight (%d,%d) %v want %v", i, j, got.Pairs.Weight(i, j), want.Pairs.Weight(i, j))
			}
		}
	}
	ls := base
	ls.Step = "ls-sgd"
	if _, _, err := StepRealisedPairwise(tr, ls); !errors.Is(err, ErrNoNetworkFigure) {
		t.Errorf("ls-sgd: %v", err)
	}
	g := base
	g.Step, g.GADMM = StepGADMM, GADMMParams{Eta: 0.1, Beta: 1, Sensitivity: 0.2, Nu: 1}
	got, info, err = StepRealisedPairwise(tr, g)
	if err != nil || info.Theorem != GADMMRealisedName {
		t.Fatalf("gadmm: %v %q", err, info.Theorem)
	}
	loc, _ := ToDP(StepLocalCurve(g, 3), 1e-5)
	for i := 0; i < 3; i++ {
		for j := 0; j < 3; j++ {
			if i == j {
				continue
			}
			if e, _ := ToDP(got.Pairs.Unit.Scale(got.Pairs.Weight(i, j)), 1e-5); e > loc*(1+1e-12) || math.IsNaN(e) {
				t.Errorf("gadmm pair %d->%d: %v above the local %v", i, j, e, loc)
			}
		}
	}
}

func sameCurve(a, b Curve) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if a[k] != b[k] {
			return false
		}
	}
	return true
}
