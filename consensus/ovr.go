package consensus

// One-vs-rest: K logistic problems over a label of K classes, class k against the others.
// The model holds K weight vectors (class-major, as the multinomial model); row (a, y)
// contributes log(1 + exp(-y_k a.w_k)) to block k with y_k = +1 when y = k, else -1.
// Each block is a binary logistic problem on relabelled rows (OvRShard), which is how the
// R-ADMM family fits it: K independent objective-perturbation releases per iteration.

// ovrValue returns sum_k log(1 + exp(-y_k m_k)) for scores m and class y.
func ovrValue(m []float64, y int) float64 {
	s := 0.0
	for k, v := range m {
		if k == y {
			s += softplus(-v)
		} else {
			s += softplus(v)
		}
	}
	return s
}

// ovrGrad adds c times the one-vs-rest gradient over d's rows to g (model w, class-major).
func ovrGrad(g, w []float64, d *Dataset, c float64) {
	p := d.Cols
	k := len(w) / max(p, 1)
	for r := 0; r < d.Rows; r++ {
		a := d.Row(r)
		y := classOf(d.Y[r])
		for b := 0; b < k; b++ {
			yk := -1.0
			if b == y {
				yk = 1
			}
			e := c * Logistic.deriv(dot(a, w[b*p:(b+1)*p]), yk)
			row := g[b*p : (b+1)*p]
			for j, v := range a {
				row[j] += e * v
			}
		}
	}
}

// OvRShard returns the binary shard of class k: d's rows with label +1 when their class
// is k and -1 otherwise (Classes names k as positive, the others as negative).
func OvRShard(d *Dataset, k int) *Dataset {
	c := d.Clone()
	for i, y := range c.Y {
		if classOf(y) == k {
			c.Y[i] = 1
		} else {
			c.Y[i] = -1
		}
	}
	c.Classes = &Classes{Negative: "not " + d.Classes.List[k], Positive: d.Classes.List[k]}
	return c
}
