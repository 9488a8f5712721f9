package consensus

import (
	"fmt"
	"math"
	"strings"
)

// Loss selects the per-example loss function.
type Loss int

const (
	// Squared is the least-squares loss (1/2)(x.w - y)^2.
	Squared Loss = iota
	// Logistic is the logistic loss log(1 + exp(-y x.w)) for labels y in {-1, +1}.
	Logistic
	// Multinomial is the softmax loss of a label of K > 2 classes (see multinomial.go):
	// the model holds one weight vector per class.
	Multinomial
	// LogisticOvR is one-vs-rest over a label of K > 2 classes: K logistic problems, class
	// k against the others (labels +1 for class k, -1 otherwise), one weight vector each,
	// laid out as the multinomial model's; the predicted class has the largest score. It is
	// the R-ADMM family's multi-class model (ovr.go).
	LogisticOvR
)

// ParseLoss parses "squared" (also "lasso", "ls", "ridge") or "logistic" (also "logreg").
func ParseLoss(s string) (Loss, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "squared", "square", "ls", "lasso", "ridge", "leastsquares":
		return Squared, nil
	case "logistic", "logreg", "log":
		return Logistic, nil
	case "multinomial", "softmax":
		return Multinomial, nil
	case "logistic-ovr", "ovr":
		return LogisticOvR, nil
	}
	return 0, fmt.Errorf("consensus: unknown loss %q (want squared, logistic or multinomial)", s)
}

// Classifies reports whether the loss is a classification loss (logistic, multinomial).
func (l Loss) Classifies() bool { return l == Logistic || l == Multinomial || l == LogisticOvR }

// Blocks reports whether the model holds one weight vector per class (multinomial,
// one-vs-rest).
func (l Loss) Blocks() bool { return l == Multinomial || l == LogisticOvR }

// String returns the canonical name of the loss.
func (l Loss) String() string {
	switch l {
	case Squared:
		return "squared"
	case Logistic:
		return "logistic"
	case Multinomial:
		return "multinomial"
	case LogisticOvR:
		return "logistic-ovr"
	}
	return fmt.Sprintf("Loss(%d)", int(l))
}

// softplus returns log(1+exp(t)) without overflow or loss of precision.
func softplus(t float64) float64 {
	if t > 0 {
		return t + math.Log1p(math.Exp(-t))
	}
	return math.Log1p(math.Exp(t))
}

// sigmoid returns 1/(1+exp(-t)) without overflow.
func sigmoid(t float64) float64 {
	if t >= 0 {
		return 1 / (1 + math.Exp(-t))
	}
	e := math.Exp(t)
	return e / (1 + e)
}

// value returns the loss of margin m = x.w for target y.
func (l Loss) value(m, y float64) float64 {
	switch l {
	case Logistic:
		return softplus(-y * m)
	case Multinomial, LogisticOvR:
		return math.NaN() // not a function of one margin: see multinomial.go, ovr.go
	}
	r := m - y
	return 0.5 * r * r
}

// deriv returns d loss / d m.
func (l Loss) deriv(m, y float64) float64 {
	switch l {
	case Logistic:
		return -y * sigmoid(-y*m)
	case Multinomial, LogisticOvR:
		return math.NaN() // not a function of one margin: see multinomial.go, ovr.go
	}
	return m - y
}

// Regularizer is L1*||w||_1 + (L2/2)*||w||^2 over the penalised coordinates of w: all but
// the intercept's (see Scaler.Intercept), which is not penalised.
type Regularizer struct {
	L1, L2 float64
	// Free is the number of trailing coordinates of each block of Block coordinates that the
	// regularizer leaves alone (0 or 1: the intercept); its prox is the identity on them.
	// Block 0 means one block, the whole model; a multinomial model has one block per class
	// (its weight vector, whose last coordinate is that class's intercept).
	Free  int
	Block int
}

// Unpenalised reports whether coordinate j of an n-dimensional model is left alone.
func (r Regularizer) Unpenalised(j, n int) bool {
	if r.Free <= 0 {
		return false
	}
	b := r.Block
	if b <= 0 || b > n {
		b = n
	}
	return j%b >= b-r.Free
}

// Value returns L1*||w||_1 + (L2/2)*||w||^2 over the penalised coordinates.
func (r Regularizer) Value(w []float64) float64 {
	s1, s2 := 0.0, 0.0
	for j, v := range w {
		if r.Unpenalised(j, len(w)) {
			continue
		}
		s1 += math.Abs(v)
		s2 += v * v
	}
	return r.L1*s1 + 0.5*r.L2*s2
}

// Prox sets dst = prox_{gamma r}(v): soft-thresholding at gamma*L1 followed by division by
// 1+gamma*L2 (the exact elastic-net proximal map). dst may alias v; it does not allocate.
func (r Regularizer) Prox(dst, v []float64, gamma float64) {
	t := gamma * r.L1
	s := 1 / (1 + gamma*r.L2)
	for i, x := range v {
		switch {
		case r.Unpenalised(i, len(v)):
			dst[i] = x
		case x > t:
			dst[i] = (x - t) * s
		case x < -t:
			dst[i] = (x + t) * s
		default:
			dst[i] = 0
		}
	}
}

// Problem is a regularized empirical risk minimization problem:
// minimize MeanLoss(w) + Reg.Value(w).
type Problem struct {
	Loss Loss
	Reg  Regularizer
}

// Validate rejects unknown losses and negative or non-finite regularization weights.
func (p Problem) Validate() error {
	if p.Loss != Squared && p.Loss != Logistic && p.Loss != Multinomial && p.Loss != LogisticOvR {
		return fmt.Errorf("consensus: unknown loss %d", int(p.Loss))
	}
	for _, c := range []struct {
		name string
		v    float64
	}{{"l1", p.Reg.L1}, {"l2", p.Reg.L2}} {
		if math.IsNaN(c.v) || math.IsInf(c.v, 0) || c.v < 0 {
			return fmt.Errorf("consensus: regularization %s=%v must be finite and >= 0", c.name, c.v)
		}
	}
	if p.Reg.Free < 0 || p.Reg.Free > 1 {
		return fmt.Errorf("consensus: %d unpenalised coordinates (the intercept is the only one)", p.Reg.Free)
	}
	return nil
}

// For returns p completed for a run on the training data train, for the walk (walk true)
// or the neighbour-exchange family: the loss follows the label (three or more classes:
// multinomial, which the neighbour exchange fits one-vs-rest, Theorem V.1 per block), the
// multinomial regulariser acts per class block, and with an intercept (intercept true, or
// train carries one) the walk leaves its coordinate unpenalised (Regularizer.Free) while
// the neighbour exchange penalises it with the others (Theorem V.1 uses the regulariser's
// strong convexity in every coordinate; see docs/models.md).
func (p Problem) For(train *Dataset, intercept, walk bool) Problem {
	p.Reg.Free = 0
	if walk && (intercept || train.HasIntercept()) {
		p.Reg.Free = 1
	}
	p.Loss = LossFor(train, p.Loss) // a label of 3+ classes: multinomial
	if !walk && p.Loss == Multinomial {
		p.Loss = LogisticOvR
	}
	p.Reg.Block = 0
	if p.Loss == Multinomial {
		p.Reg.Block = train.Cols // one weight vector, and intercept, per class
	}
	return p
}

// MeanLoss returns (1/Rows) * sum_r loss(x_r.w, y_r); it is 0 for an empty dataset.
func (p Problem) MeanLoss(d *Dataset, w []float64) float64 {
	if d.Rows == 0 {
		return 0
	}
	s := 0.0
	if p.Loss.Blocks() {
		m := make([]float64, len(w)/max(d.Cols, 1))
		for i := 0; i < d.Rows; i++ {
			multiScores(m, d.Row(i), w)
			if p.Loss == LogisticOvR {
				s += ovrValue(m, classOf(d.Y[i]))
			} else {
				s += multiValue(m, classOf(d.Y[i]))
			}
		}
		return s / float64(d.Rows)
	}
	for i := 0; i < d.Rows; i++ {
		s += p.Loss.value(dot(d.Row(i), w), d.Y[i])
	}
	return s / float64(d.Rows)
}

// Objective returns MeanLoss + Reg.Value, the objective reported everywhere.
func (p Problem) Objective(d *Dataset, w []float64) float64 {
	return p.MeanLoss(d, w) + p.Reg.Value(w)
}

// Accuracy returns the fraction of rows with sign(x.w) == y, predicting +1 when x.w >= 0.
// It is 0 for an empty dataset.
func (p Problem) Accuracy(d *Dataset, w []float64) float64 {
	if d.Rows == 0 {
		return 0
	}
	ok := 0
	if p.Loss.Blocks() {
		m := make([]float64, len(w)/max(d.Cols, 1))
		for i := 0; i < d.Rows; i++ {
			multiScores(m, d.Row(i), w)
			best := 0
			for k, v := range m {
				if v > m[best] {
					best = k
				}
			}
			if float64(best) == d.Y[i] {
				ok++
			}
		}
		return float64(ok) / float64(d.Rows)
	}
	for i := 0; i < d.Rows; i++ {
		pred := 1.0
		if dot(d.Row(i), w) < 0 {
			pred = -1
		}
		if pred == d.Y[i] {
			ok++
		}
	}
	return float64(ok) / float64(d.Rows)
}

// meanGrad sets g to the gradient of MeanLoss at w.
func (p Problem) meanGrad(g []float64, d *Dataset, w []float64) {
	clear(g)
	if d.Rows == 0 {
		return
	}
	if p.Loss == Multinomial {
		k := len(w) / max(d.Cols, 1)
		multiGradRows(g, w, d, k, 1/float64(d.Rows), math.Inf(1), make([]float64, k), make([]float64, k))
		return
	}
	if p.Loss == LogisticOvR {
		ovrGrad(g, w, d, 1/float64(d.Rows))
		return
	}
	for i := 0; i < d.Rows; i++ {
		a := d.Row(i)
		c := p.Loss.deriv(dot(a, w), d.Y[i])
		for j, v := range a {
			g[j] += c * v
		}
	}
	inv := 1 / float64(d.Rows)
	for j := range g {
		g[j] *= inv
	}
}
