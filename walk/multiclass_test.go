package walk

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
)

// multiShard is a random 3-class shard of rows in the unit ball, with the intercept column.
func multiShard(rng *rand.Rand, rows, p int) *consensus.Dataset {
	d := &consensus.Dataset{Name: "m", Rows: rows, Cols: p, Classes: &consensus.Classes{List: []string{"a", "b", "c"}}}
	for r := 0; r < rows; r++ {
		x := make([]float64, p-1)
		n := 0.0
		for j := range x {
			x[j] = rng.NormFloat64()
			n += x[j] * x[j]
		}
		n = math.Max(1, math.Sqrt(n))
		for j := range x {
			d.X = append(d.X, x[j]/n*math.Sqrt(1-0.01))
		}
		d.X = append(d.X, 0.1)
		d.Y = append(d.Y, float64(rng.IntN(3)))
	}
	return d
}

// TestMultinomialClippedSensitivity: the multinomial gradient estimate of the sgd step
// (rate 1, no noise), divided by c_q, moves by at most 2C when one row is replaced by any
// other (the sensitivity every gradient-step figure charges), over random shards, models
// and replacement rows; and a single row's contribution reaches C when it is clipped, so
// the bound is attained rather than loose by a constant.
func TestMultinomialClippedSensitivity(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const clip = 0.3
	cfg := func() Config {
		return Config{Node: 0, Nodes: 2, Gamma: 1, Lambda: 0.5, Clip: clip, Run: "r", Rand: rand.New(rand.NewPCG(1, 1)),
			Step: StepParams{Kind: StepSGD, Eta: 0.5, Rate: 1}}
	}
	grad := func(d *consensus.Dataset, w []float64) []float64 {
		ll, err := consensus.NewLocalLoss(d, consensus.Multinomial, 1)
		if err != nil {
			t.Fatal(err)
		}
		m, err := New(cfg(), ll, ll.Dim())
		if err != nil {
			t.Fatal(err)
		}
		if err := m.gradient(w); err != nil {
			t.Fatal(err)
		}
		g := append([]float64(nil), m.st.grad[:len(w)]...)
		for k := range g {
			g[k] /= m.st.cq
		}
		return g
	}
	worst := 0.0
	for trial := 0; trial < 200; trial++ {
		d := multiShard(rng, 5, 4)
		w := make([]float64, 12)
		for k := range w {
			w[k] = 5 * rng.NormFloat64()
		}
		d2 := d.Clone()
		o := multiShard(rng, 1, 4)
		r := rng.IntN(d.Rows)
		copy(d2.Row(r), o.Row(0))
		d2.Y[r] = o.Y[0]
		g1, g2 := grad(d, w), grad(d2, w)
		diff := 0.0
		for k := range g1 {
			diff += (g1[k] - g2[k]) * (g1[k] - g2[k])
		}
		worst = math.Max(worst, math.Sqrt(diff))
		if math.Sqrt(diff) > 2*clip*(1+1e-12) {
			t.Fatalf("trial %d: replacing row %d moved the gradient sum by %v > 2C = %v", trial, r, math.Sqrt(diff), 2*clip)
		}
	}
	if worst < clip {
		t.Fatalf("largest change %v: the test never reached the clipped regime", worst)
	}
}

// TestInterceptUnpenalised: with Reg.Free the z-step leaves each class's intercept
// coordinate at zhat (no shrinking, no thresholding) while the other coordinates are
// shrunk, on the prox and sgd steps; and the intercept column keeps rows in the unit ball.
func TestInterceptUnpenalised(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	d := multiShard(rng, 6, 4)
	for r := 0; r < d.Rows; r++ {
		if n := math.Sqrt(dotSeq(d.Row(r), d.Row(r))); n > 1+1e-12 {
			t.Fatalf("row %d of norm %v: the intercept column must keep rows in the unit ball", r, n)
		}
	}
	for _, step := range []StepParams{{}, {Kind: StepSGD, Eta: 0.5, Rate: 1}} {
		ll, err := consensus.NewLocalLoss(d, consensus.Multinomial, 1)
		if err != nil {
			t.Fatal(err)
		}
		c := Config{Node: 0, Nodes: 2, Gamma: 1, Lambda: 0.5, Clip: 10, Run: "r", Rand: rand.New(rand.NewPCG(1, 1)), Step: step,
			Reg: consensus.Regularizer{L1: 0.01, L2: 1, Free: 1, Block: 4}}
		m, err := New(c, ll, 12)
		if err != nil {
			t.Fatal(err)
		}
		z := make([]float64, 12)
		for k := range z {
			z[k] = rng.NormFloat64()
		}
		z0 := append([]float64(nil), z...) // Step updates the token's vectors in place
		if err := m.Step(Message{Token: Token{Run: "r", Z: z, Zhat: append([]float64(nil), z...)}}); err != nil {
			t.Fatal(err)
		}
		tok := m.Ready().Outbox[0].Token
		for k := range tok.Z {
			free := k%4 == 3
			switch {
			case step.Kind == StepProx && free && tok.Z[k] != tok.Zhat[k]:
				t.Fatalf("%s: intercept coordinate %d: z %v, zhat %v", step.Kind, k, tok.Z[k], tok.Zhat[k])
			case step.Kind == StepProx && !free && math.Abs(tok.Z[k]) > math.Max(0, math.Abs(tok.Zhat[k])-0.01)/2+1e-15:
				t.Fatalf("%s: coordinate %d not shrunk: z %v, zhat %v", step.Kind, k, tok.Z[k], tok.Zhat[k])
			}
		}
		if step.Kind == StepSGD {
			// z_out = prox(z_in - eta g): the free coordinates are z_in - eta g exactly.
			g := make([]float64, 12)
			ll.ClippedRowGrad(g, z0, 10)
			for k := 3; k < 12; k += 4 {
				want := z0[k] - 0.5*g[k] // c_q = Weight/Rows at rate 1: ClippedRowGrad is G
				if math.Abs(tok.Z[k]-want) > 1e-12 {
					t.Fatalf("sgd: intercept coordinate %d: %v, want %v", k, tok.Z[k], want)
				}
			}
		}
	}
}
