package consensus

// Per-example access to a local loss, for the gradient-based local steps of the walk
// (per-example clipping needs each row's gradient, not only their sum).

// Loss returns the per-example loss of f_i.
func (l *LocalLoss) Loss() Loss { return l.loss }

// Example returns row r of the shard (a view, not a copy) and its target. r must be in
// [0, Rows()).
func (l *LocalLoss) Example(r int) (a []float64, y float64) {
	return l.shard.Row(r), l.shard.Y[r]
}

// Value returns loss(m, y) at margin m = a.w: (m - y)^2 / 2 (squared) or
// log(1 + exp(-y m)) (logistic, computed without overflow).
func (l Loss) Value(m, y float64) float64 { return l.value(m, y) }

// Deriv returns d loss(m, y) / d m at margin m = a.w: m - y (squared) or
// -y sigmoid(-y m) (logistic). The gradient of the example's loss in w is Deriv(a.w, y) a.
func (l Loss) Deriv(m, y float64) float64 { return l.deriv(m, y) }

// Curvature returns sup_m d^2 loss(m, y) / dm^2: 1 for the squared loss, 1/4 for the
// logistic loss. The per-example loss w -> loss(a.w, y) is then Curvature() ||a||^2-smooth,
// and convex in w.
func (l Loss) Curvature() float64 {
	switch l {
	case Logistic, LogisticOvR:
		return 0.25
	case Multinomial:
		return 0.5 // the largest eigenvalue of diag(q) - q q^T (multinomial.go)
	}
	return 1
}
