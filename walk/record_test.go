package walk

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
)

// TestRecordClipBruteForce: on the real breast-cancer rows (standardised, projected onto
// the unit ball, with the intercept), replacing one row of a node's shard by another
// admissible row moves the computed prox by at most 2 * RecordClip (the radius's
// definition: the update 2 lambda Clip(x - z) moves by at most 4 lambda C'), for random
// prox centres, gammas and replacement rows (other rows, their negation with a flipped
// label, and random unit vectors). The bound is an independent computation: the solver's
// outputs on the two shards, compared.
func TestRecordClipBruteForce(t *testing.T) {
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
	shards, err := consensus.Split(d, 4, "iid", 1)
	if err != nil {
		t.Fatal(err)
	}
	sh := shards[0]
	w := LossWeight(4, sh.Rows, d.Rows)
	rng := rand.New(rand.NewPCG(3, 4))
	worst := 0.0
	for trial := 0; trial < 60; trial++ {
		gamma := []float64{0.03, 1, 30}[trial%3]
		cfg := Config{Gamma: gamma, RowBound: sc.RowBound()}
		l, err := consensus.NewLocalLoss(sh, consensus.Logistic, w)
		if err != nil {
			t.Fatal(err)
		}
		radius := RecordClip(cfg, l)
		if want := privacy.RecordClip(gamma, w/float64(sh.Rows), 1, consensus.ProxTolerance); math.Abs(radius-want) > 1e-12*want {
			t.Fatalf("radius %v, want %v", radius, want)
		}
		v := make([]float64, sh.Cols)
		for j := range v {
			v[j] = rng.NormFloat64() * 3
		}
		// The replacement: row r replaced by a random admissible row with a random label.
		r := rng.IntN(sh.Rows)
		alt := sh.Clone()
		row := alt.Row(r)
		nn := 0.0
		for j := range row {
			row[j] = rng.NormFloat64()
			nn += row[j] * row[j]
		}
		for j := range row {
			row[j] /= math.Max(1, math.Sqrt(nn)) * (1 + 1e-12)
		}
		alt.Y[r] = -alt.Y[r]
		l2, err := consensus.NewLocalLoss(alt, consensus.Logistic, w)
		if err != nil {
			t.Fatal(err)
		}
		x1, x2 := make([]float64, sh.Cols), make([]float64, sh.Cols)
		if err := l.Prox(x1, v, gamma); err != nil {
			t.Fatal(err)
		}
		if err := l2.Prox(x2, v, gamma); err != nil {
			t.Fatal(err)
		}
		dist := 0.0
		for j := range x1 {
			dist += (x1[j] - x2[j]) * (x1[j] - x2[j])
		}
		dist = math.Sqrt(dist)
		if dist > 2*radius {
			t.Fatalf("gamma %v: one row moved the prox by %v > 2 x radius %v", gamma, dist, radius)
		}
		worst = math.Max(worst, dist/(2*radius))
	}
	if worst < 0.05 {
		t.Errorf("the replacements use at most %.3g of the bound: the test cannot fail", worst)
	}
	t.Logf("largest move: %.3g of 2 x radius", worst)
}

// TestRecordUnitChecks: the node unit is refused for the steps that clip per example, and
// a node whose own rows exceed the public row bound cannot start.
func TestRecordUnitChecks(t *testing.T) {
	d, _ := consensus.SyntheticLogistic(20, 3, 1, 1)
	l, err := consensus.NewLocalLoss(d, consensus.Logistic, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkUnit(Config{Unit: privacy.UnitNode, Step: StepParams{Kind: StepSGD, Eta: 0.1, Rate: 0.5}}, l); err == nil {
		t.Error("node unit accepted for sgd")
	}
	big := 0.0
	for r := 0; r < d.Rows; r++ {
		a, _ := l.Example(r)
		s := 0.0
		for _, x := range a {
			s += x * x
		}
		big = math.Max(big, math.Sqrt(s))
	}
	if err := checkUnit(Config{RowBound: big / 2}, l); err == nil {
		t.Errorf("rows of norm up to %v accepted under the bound %v", big, big/2)
	}
	if err := checkUnit(Config{RowBound: big * 2}, l); err != nil {
		t.Error(err)
	}
	if !math.IsInf(Lipschitz(consensus.Squared, 1), 1) || Lipschitz(consensus.Multinomial, 1) != math.Sqrt2 || !math.IsInf(Lipschitz(consensus.Logistic, 0), 1) {
		t.Error("Lipschitz constants")
	}
}

// TestRecordLedgerSensitivity: under the record unit the ledger entry of a noisy prox
// update records the sensitivity the figures charge, 4 lambda min(C, C'), so that a
// ledger recomputed later gives the live figure; under the node unit 4 lambda C.
func TestRecordLedgerSensitivity(t *testing.T) {
	raw, _ := consensus.SyntheticLogistic(40, 3, 1, 1)
	sc, err := consensus.FitScaler(raw, consensus.ScaleUnitBall)
	if err != nil {
		t.Fatal(err)
	}
	d := sc.Apply(raw)
	for _, unit := range []privacy.Unit{privacy.UnitRecord, privacy.UnitNode} {
		cfg := Config{Node: 0, Nodes: 4, Gamma: 0.5, Lambda: 0.5, Clip: 0.1, Sigma: 1, Run: "r", Unit: unit, RowBound: 1,
			Rand: rand.New(rand.NewPCG(1, 2)), Noise: privacy.NewNoiseFromRand(rand.New(rand.NewPCG(3, 4)))}
		l, err := consensus.NewLocalLoss(d, consensus.Logistic, LossWeight(4, d.Rows, 4*d.Rows))
		if err != nil {
			t.Fatal(err)
		}
		m, err := New(cfg, l, d.Cols)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Step(Message{From: -1, Token: NewToken("r", 0, d.Cols, consensus.Regularizer{}, cfg.Gamma)}); err != nil {
			t.Fatal(err)
		}
		rd := m.Ready()
		if len(rd.Ledger) != 1 {
			t.Fatalf("%d ledger entries", len(rd.Ledger))
		}
		want := 4 * cfg.Lambda * cfg.Clip
		if unit == privacy.UnitRecord {
			want = 4 * cfg.Lambda * math.Min(cfg.Clip, RecordClip(cfg, l))
			if !(want < 4*cfg.Lambda*cfg.Clip) {
				t.Fatalf("the record radius %v does not bind", RecordClip(cfg, l))
			}
		}
		if got := rd.Ledger[0].Sensitivity; got != want {
			t.Errorf("%s unit: ledger sensitivity %v, want %v", unit, got, want)
		}
	}
}
