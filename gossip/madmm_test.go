package gossip

import (
	"math"
	"testing"

	"github.com/dpadmm/dpadmm/privacy"
)

// TestMADMMBaseline: the M-ADMM-style baseline solves (8) exactly with the recorded linear
// noise and a growing penalty at every iteration (checked through the KKT condition of (8)
// recomputed from the broadcast vectors and the duals rebuilt with (9)), scales its noise
// with the penalty (||eps|| ~ Gamma(d, eta(t)/alpha)), and charges every iteration
// ObjPertTerm with alpha/eta(t).
func TestMADMMBaseline(t *testing.T) {
	const n, T, alpha = 5, 40, 2.0
	sched := Geometric(0.5, 1.05)
	net, _, _ := buildNet(t, MADMM, "ring", n, T, sched, 0.5, alpha, 7)
	net.run(t)
	dim := len(net.ms[0].f)
	lam := make([][]float64, n)
	for i := range lam {
		lam[i] = make([]float64, dim)
	}
	g := make([]float64, dim)
	normSum, draws := 0.0, 0
	for tt := 1; tt <= T; tt++ {
		eta := sched.At(tt)
		for i, m := range net.ms {
			V := float64(m.V)
			fi, prev := net.hist[tt][i], net.hist[tt-1]
			eps := net.noise[tt][i]
			if eps == nil {
				t.Fatalf("iteration %d node %d not perturbed", tt, i)
			}
			m.obj.Grad(g, fi)
			for j := range g {
				s := V * prev[i][j]
				for _, k := range m.cfg.Neighbors {
					s += prev[k][j]
				}
				// KKT of (8) with linear term 2 lambda + eps and penalty eta.
				r := g[j] + 2*lam[i][j] + eps[j] + eta*(2*V*fi[j]-s)
				if math.Abs(r) > 1e-7 {
					t.Fatalf("t=%d node %d coord %d: KKT residual %g", tt, i, j, r)
				}
			}
			normSum += math.Sqrt(dot(eps, eps)) * alpha / eta
			draws++
		}
		for i, m := range net.ms {
			for j := range lam[i] {
				s := 0.0
				for _, k := range m.cfg.Neighbors {
					s += net.hist[tt][i][j] - net.hist[tt][k][j]
				}
				lam[i][j] += eta / 2 * s
			}
		}
	}
	// ||eps|| alpha/eta(t) ~ Gamma(d, 1): mean d, sd sqrt(d/draws) for the mean.
	mean := normSum / float64(draws)
	if sd := math.Sqrt(float64(dim) / float64(draws)); math.Abs(mean-float64(dim)) > 5*sd {
		t.Errorf("mean of ||eps|| alpha/eta = %v, want %d +- %v", mean, dim, 5*sd)
	}
	for i, l := range net.ledgers {
		m := net.ms[i]
		k := 0
		for _, e := range l {
			if e.Mechanism != privacy.MechPure {
				continue
			}
			k++
			eta := sched.At(k)
			want := privacy.ObjPertTerm(m.obj.RowWeight, m.obj.RegOverN, 0.25, alpha/eta, eta, m.V)
			if math.Abs(e.Epsilon-want) > 1e-12*want || e.Lambda != eta || math.Abs(e.Sigma-eta/alpha) > 1e-15 {
				t.Errorf("node %d k=%d: entry eps %v sigma %v eta %v, want %v %v %v", i, k, e.Epsilon, e.Sigma, e.Lambda, want, eta/alpha, eta)
			}
		}
		if k != T {
			t.Errorf("node %d: %d charged entries, want %d", i, k, T)
		}
	}
	if MADMM.Scheme() != privacy.SchemeDVP || MADMM.Recycled() || !MADMM.Scheduled() {
		t.Error("madmm: wrong scheme or kind")
	}
	if a, err := ParseAlgo("madmm"); err != nil || a != MADMM {
		t.Errorf("ParseAlgo(madmm) = %v, %v", a, err)
	}
	// A decreasing schedule is refused.
	if _, err := oneMachine(t, func(c *Config) {
		c.Algo, c.Alpha, c.Noise = MADMM, 1, privacy.NewSeededNoise(1)
		c.Penalty = Schedule{List: []float64{1, 0.5, 0.5, 0.5}}
	}); err == nil {
		t.Error("madmm with a decreasing schedule accepted")
	}
}
