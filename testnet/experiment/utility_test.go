package experiment

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
)

// TestUtilityScorecard: a small scorecard on the embedded data: every run reports a
// figure at most its target (the walk: the per-record local figure; R-ADMM: pure epsilon,
// or out of reach with the reason), a test accuracy in [0, 1], the non-private reference
// above the majority floor; the CSV has a line per run and the PNG is drawn.
func TestUtilityScorecard(t *testing.T) {
	raw, err := consensus.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	sc, err := consensus.FitScaler(raw, consensus.ScaleStandardizeUnitBall)
	if err != nil {
		t.Fatal(err)
	}
	sc.Intercept = 0.1
	d := sc.Apply(raw)
	train, test := consensus.TrainTest(d, 0.2, 1)
	prob := consensus.Problem{Loss: consensus.Logistic, Reg: consensus.Regularizer{L2: 1e-3, Free: 1}}
	rows, err := RunUtility(context.Background(), UtilityOptions{
		Data:  []UtilityData{{Name: "bc", Train: train, Test: test, Problem: prob, Scaler: sc}},
		Nodes: []int{3}, Splits: []string{"iid"}, Epsilons: []float64{1, 8}, Seeds: 2, Seed: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3*2*2 {
		t.Fatalf("%d rows, want 12", len(rows))
	}
	for _, r := range rows {
		if math.IsNaN(r.Value) {
			if !strings.Contains(r.Note, "out of reach") {
				t.Errorf("%+v: no metric and no reason", r)
			}
			continue
		}
		if r.Epsilon > r.Target*(1+1e-9) || !(r.Value >= 0 && r.Value <= 1) || !(r.Reference > r.Floor) {
			t.Errorf("%+v", r)
		}
		if r.Algo == "walk" && (r.Accountant != "gdp" || !strings.Contains(r.Note, "per record")) {
			t.Errorf("walk row %+v: want the exact Gaussian accountant and the record unit", r)
		}
		if r.Algo == "walk-sgd" && (r.Accountant != "pld" || !strings.Contains(r.Note, "per record")) {
			t.Errorf("walk-sgd row %+v: want the PLD accountant and the record unit", r)
		}
	}
	cells := SummariseUtility(rows)
	if len(cells) != 6 {
		t.Fatalf("%d cells, want 6", len(cells))
	}
	// At epsilon 8 the walk on 3 nodes is within 5 points of the non-private model.
	for _, c := range cells {
		if c.Algo == "walk" && c.Target == 8 && !(c.Mean > c.Reference-0.05) {
			t.Errorf("walk at epsilon 8: %v against the reference %v", c.Mean, c.Reference)
		}
	}
	var csvb, png bytes.Buffer
	if err := WriteUtilityCSV(&csvb, rows); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(csvb.String(), "\n"); n != len(rows)+1 {
		t.Errorf("CSV has %d lines, want %d", n, len(rows)+1)
	}
	if err := WriteUtilityPNG(&png, cells); err != nil || !bytes.HasPrefix(png.Bytes(), []byte("\x89PNG")) {
		t.Errorf("PNG: %v", err)
	}
	if _, err := RunUtility(context.Background(), UtilityOptions{Data: []UtilityData{{Name: "bc", Train: train, Test: test, Problem: prob}}, Algos: []string{"sgd"}}); err == nil {
		t.Error("unknown algorithm accepted")
	}
}
