package walk

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
)

// The scale distinguisher of the gradient steps: why their figures are for replace-one.
//
// The sgd step releases z_out = z_in - eta_k c_q h N (no regulariser here, so the prox is
// the identity) with N an integer vector, c_q = w_i/(q m_i) = n/(q M) and M the total row
// count. An observer who knows the token the holder received and the public parameters
// computes (z_in - z_out)/(eta_k c_q(M) h) for each candidate M and keeps the one that
// makes it integral. Node 0 holds 40 of 120 rows; an add/remove neighbour holds 41 (M =
// 121), a replace-one neighbour 40 with one row changed (M = 120).

// scaleGuess returns the candidate total row count (of ms) for which the released
// difference is closest to a lattice point.
func scaleGuess(zin, zout []float64, eta, q, h float64, n int, ms []int) int {
	best, bestM := math.Inf(1), -1
	for _, M := range ms {
		cq := float64(n) / (q * float64(M))
		d := 0.0
		for k := range zin {
			x := (zin[k] - zout[k]) / (eta * cq * h)
			d += math.Abs(x - math.Round(x))
		}
		if d < best {
			best, bestM = d, M
		}
	}
	return bestM
}

// sgdRelease runs one sgd update of node 0 (of n = 3) holding d, with total row count M,
// from token zin, and returns the released model.
func sgdRelease(t *testing.T, d *consensus.Dataset, M int, zin []float64, sigma, q float64) []float64 {
	t.Helper()
	const n = 3
	cfg := Config{Node: 0, Nodes: n, Gamma: 1, Lambda: 0.5, Clip: 1, Sigma: sigma, Rand: rand.New(rand.NewPCG(1, 2)),
		Noise: privacy.NewSecureNoise(), Run: "r", Step: StepParams{Kind: StepSGD, Eta: 0.5, Rate: q}}
	m := oneNode(t, d, float64(n)*float64(d.Rows)/float64(M), cfg, nil)
	if err := m.Step(Message{Token: Token{Run: "r", Z: append([]float64(nil), zin...), Zhat: make([]float64, len(zin))}}); err != nil {
		t.Fatal(err)
	}
	rd := m.Ready()
	if len(rd.Outbox) != 1 {
		t.Fatalf("outbox %d", len(rd.Outbox))
	}
	return rd.Outbox[0].Token.Z
}

// TestScaleDistinguisherReplaceOne: the scale test tells add/remove neighbours apart in
// (nearly) every trial, which is why no gradient-step figure claims add/remove; on
// replace-one neighbours (same counts) it returns the same answer for both datasets in
// every trial, so it has no advantage at all.
func TestScaleDistinguisherReplaceOne(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	rows := func(k int) *consensus.Dataset {
		d := &consensus.Dataset{Name: "t", Rows: k, Cols: 4, X: make([]float64, 4*k), Y: make([]float64, k)}
		for i := range d.X {
			d.X[i] = r.NormFloat64() / 2
		}
		for i := range d.Y {
			d.Y[i] = float64(2*r.IntN(2) - 1)
		}
		return d
	}
	base := rows(41)
	d40 := &consensus.Dataset{Name: "t", Rows: 40, Cols: 4, X: base.X[:160], Y: base.Y[:40]}
	d41 := base
	rep := &consensus.Dataset{Name: "t", Rows: 40, Cols: 4, X: append([]float64(nil), base.X[:160]...), Y: append([]float64(nil), base.Y[:40]...)}
	copy(rep.X[156:160], base.X[160:164]) // the last row replaced by the 41st
	rep.Y[39] = base.Y[40]
	const sigma, q, trials = 2.0, 0.5, 60
	h := privacy.Granularity(sigma)
	ms := []int{120, 121}
	rightAR, sameRO := 0, 0
	for tr := 0; tr < trials; tr++ {
		zin := []float64{r.NormFloat64(), r.NormFloat64(), r.NormFloat64(), r.NormFloat64()}
		// add/remove: D (40 rows, M 120) or D+1 (41 rows, M 121), at random.
		if tr%2 == 0 {
			if scaleGuess(zin, sgdRelease(t, d40, 120, zin, sigma, q), 0.5, q, h, 3, ms) == 120 {
				rightAR++
			}
		} else if scaleGuess(zin, sgdRelease(t, d41, 121, zin, sigma, q), 0.5, q, h, 3, ms) == 121 {
			rightAR++
		}
		// replace-one: the same test on D and on D with one row replaced.
		g1 := scaleGuess(zin, sgdRelease(t, d40, 120, zin, sigma, q), 0.5, q, h, 3, ms)
		g2 := scaleGuess(zin, sgdRelease(t, rep, 120, zin, sigma, q), 0.5, q, h, 3, ms)
		if g1 == g2 {
			sameRO++
		}
	}
	if rightAR < trials*95/100 {
		t.Errorf("add/remove: the scale test guessed right %d of %d times; expected nearly always (the reason replace-one is the adjacency)", rightAR, trials)
	}
	if sameRO != trials {
		t.Errorf("replace-one: the scale test told the neighbours apart in %d of %d trials", trials-sameRO, trials)
	}
}
