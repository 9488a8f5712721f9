package consensus

import (
	"fmt"
	"math"
	"math/rand/v2"
)

func newRand(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// trueWeights draws a vector of length p with min(active, p) nonzero entries at random
// positions, each of magnitude uniform in [1, 2] and random sign.
func trueWeights(r *rand.Rand, p, active int) []float64 {
	w := make([]float64, p)
	active = min(max(active, 0), p)
	for _, j := range r.Perm(p)[:active] {
		v := 1 + r.Float64()
		if r.IntN(2) == 0 {
			v = -v
		}
		w[j] = v
	}
	return w
}

func gaussianDesign(r *rand.Rand, name string, rows, p int) *Dataset {
	rows, p = max(rows, 0), max(p, 0)
	d := &Dataset{Name: name, Rows: rows, Cols: p, X: make([]float64, rows*p), Y: make([]float64, rows), Features: make([]string, p)}
	for j := range d.Features {
		d.Features[j] = fmt.Sprintf("x%d", j+1)
	}
	for i := range d.X {
		d.X[i] = r.NormFloat64()
	}
	return d
}

// SyntheticLasso returns a regression dataset y = X w* + noise*N(0,1) with an iid standard
// Gaussian design and a sparse w* (active entries of magnitude in [1,2]), and w* itself.
func SyntheticLasso(rows, p, active int, noise float64, seed uint64) (*Dataset, []float64) {
	r := newRand(seed)
	d := gaussianDesign(r, fmt.Sprintf("synthetic:lasso:%d", seed), rows, p)
	w := trueWeights(r, d.Cols, active)
	for i := 0; i < d.Rows; i++ {
		d.Y[i] = dot(d.Row(i), w) + noise*r.NormFloat64()
	}
	return d, w
}

// SyntheticLogistic returns a classification dataset with labels sign(x.w* + logistic noise),
// an iid standard Gaussian design and a sparse w*, and w* itself.
func SyntheticLogistic(rows, p, active int, seed uint64) (*Dataset, []float64) {
	r := newRand(seed)
	d := gaussianDesign(r, fmt.Sprintf("synthetic:logistic:%d", seed), rows, p)
	w := trueWeights(r, d.Cols, active)
	for i := 0; i < d.Rows; i++ {
		u := r.Float64()
		for u == 0 {
			u = r.Float64()
		}
		if dot(d.Row(i), w)+math.Log(u/(1-u)) >= 0 {
			d.Y[i] = 1
		} else {
			d.Y[i] = -1
		}
	}
	return d, w
}

// SyntheticLassoSphere returns the lasso data of the random-walk ADMM paper's experiment
// (Cyffers, Bellet, Basu, App. E): rows drawn uniformly from the unit sphere of R^p (a
// standard Gaussian vector divided by its norm), a ground truth with min(support, p)
// nonzero coordinates uniform in [0, 1), and y = X w* + noise*N(0,1) (the paper: noise
// variance 0.01, noise 0.1). It returns the data and w*.
func SyntheticLassoSphere(rows, p, support int, noise float64, seed uint64) (*Dataset, []float64) {
	r := newRand(seed)
	d := gaussianDesign(r, fmt.Sprintf("synthetic:lasso-sphere:%d", seed), rows, p)
	for i := 0; i < d.Rows; i++ {
		row := d.Row(i)
		if nn := math.Sqrt(dot(row, row)); nn > 0 {
			for j := range row {
				row[j] /= nn
			}
		}
	}
	w := make([]float64, d.Cols)
	support = min(max(support, 0), d.Cols)
	for _, j := range r.Perm(d.Cols)[:support] {
		w[j] = r.Float64()
	}
	for i := 0; i < d.Rows; i++ {
		d.Y[i] = dot(d.Row(i), w) + noise*r.NormFloat64()
	}
	return d, w
}
