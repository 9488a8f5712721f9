package experiment

import (
	"bytes"
	"context"
	"image/png"
	"math"
	"strings"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
)

// TestWalkExperimentSmall: a small comparison runs end to end; the calibrated sigma falls
// as epsilon grows and is the smallest that meets each target (within the bisection's
// precision); the noise-free runs match the runs at a huge epsilon better than the runs at
// a tiny one; CSV and PNG are written.
func TestWalkExperimentSmall(t *testing.T) {
	full, _ := consensus.SyntheticLassoSphere(250, 16, 4, 0.1, 3)
	train, test := consensus.TrainTest(full, 0.2, 3)
	o := WalkExperimentOptions{Train: train, Test: test, Data: "synthetic",
		Problem:  consensus.Problem{Loss: consensus.Squared, Reg: consensus.Regularizer{L1: 1e-3}},
		Epsilons: []float64{0.05, 1, 1000}, Seeds: 2, TuneSeeds: 1, Seed: 1, NonPrivate: true,
		Methods: DefaultWalkMethods()[:1]}
	res, err := RunWalkExperiment(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Points) != 3 {
		t.Fatalf("%d points, want 3", len(res.Points))
	}
	ro := res.Options
	for k, p := range res.Points {
		step := privacy.WalkRun{Clip: p.Clip}
		got := StepEpsilon(step, ro.Figure, train.Rows, ro.Cap, ro.Hops, p.Sigma, ro.Delta)
		// The figure is a step function of sigma (orders on a grid, the verdict's
		// conditions): the calibrated sigma meets the target and a slightly smaller one
		// does not.
		less := StepEpsilon(step, ro.Figure, train.Rows, ro.Cap, ro.Hops, p.Sigma*(1-1e-5), ro.Delta)
		if got > p.Epsilon || !(less > p.Epsilon) {
			t.Errorf("eps %v: calibrated sigma %v gives %v, sigma*(1-1e-5) gives %v", p.Epsilon, p.Sigma, got, less)
		}
		// The same figure from the accountant directly.
		direct := privacy.WalkPlannedBound(privacy.WalkRun{Nodes: train.Rows, Complete: true, Clip: p.Clip, Sigma: p.Sigma,
			Cap: ro.Cap, Hops: ro.Hops, Planning: true}, ro.Delta).Epsilon
		if direct != got {
			t.Errorf("eps %v: %v from StepEpsilon, %v from the verdict", p.Epsilon, got, direct)
		}
		if k > 0 && !(p.Sigma < res.Points[k-1].Sigma) {
			t.Errorf("sigma %v at eps %v not below %v", p.Sigma, p.Epsilon, res.Points[k-1].Sigma)
		}
		if !(p.Min <= p.Mean && p.Mean <= p.Max) || math.IsNaN(p.Mean) {
			t.Errorf("eps %v: mean %v outside [%v, %v]", p.Epsilon, p.Mean, p.Min, p.Max)
		}
	}
	np := res.NonPrivate[ro.Methods[0].Name]
	if d0, d2 := math.Abs(res.Points[0].Mean-np), math.Abs(res.Points[2].Mean-np); !(d2 < d0) {
		t.Errorf("eps 1000 is %v from the noise-free runs, eps 0.05 %v", d2, d0)
	}
	var csv, img bytes.Buffer
	if err := res.WriteCSV(&csv); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(csv.String(), "\n"); lines != 4 {
		t.Errorf("CSV has %d lines, want 4", lines)
	}
	if err := res.WritePNG(&img); err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(&img); err != nil {
		t.Fatalf("PNG: %v", err)
	}
}
