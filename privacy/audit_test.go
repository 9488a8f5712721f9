package privacy

import (
	"math"
	"math/rand/v2"
	"testing"
)

// binomCDF returns P[Bin(n, p) <= k] by direct summation of the probability mass function
// (terms from log-gamma), independent of the incomplete beta function.
func binomCDF(k, n int, p float64) float64 {
	if p <= 0 {
		return 1
	}
	if p >= 1 {
		if k >= n {
			return 1
		}
		return 0
	}
	s := 0.0
	ln := func(x int) float64 { v, _ := math.Lgamma(float64(x) + 1); return v }
	for i := 0; i <= k; i++ {
		s += math.Exp(ln(n) - ln(i) - ln(n-i) + float64(i)*math.Log(p) + float64(n-i)*math.Log1p(-p))
	}
	return s
}

// rootBisect returns p in (0,1) with f(p) = 0 for f increasing (sign change assumed).
func rootBisect(f func(float64) float64) float64 {
	lo, hi := 0.0, 1.0
	for i := 0; i < 200; i++ {
		mid := (lo + hi) / 2
		if f(mid) < 0 {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

// TestClopperPearsonAgainstSummation: the upper bound p solves P[Bin(n,p) <= k] = 1 - c and
// the lower bound P[Bin(n,p) >= k] = 1 - c; both roots are found here by bisection on
// directly summed binomial tails.
func TestClopperPearsonAgainstSummation(t *testing.T) {
	for _, c := range []struct {
		k, n int
		conf float64
	}{{0, 10, 0.95}, {3, 10, 0.9}, {7, 10, 0.975}, {1, 1000, 0.975}, {12, 500, 0.99}, {480, 500, 0.95}, {2, 20000, 0.9875}, {150, 3000, 0.5}} {
		hi := ClopperPearsonUpper(c.k, c.n, c.conf)
		wantHi := rootBisect(func(p float64) float64 { return (1 - c.conf) - binomCDF(c.k, c.n, p) })
		if math.Abs(hi-wantHi) > 1e-9*math.Max(wantHi, 1e-3) {
			t.Errorf("upper(%d,%d,%v) = %.12g, summation gives %.12g", c.k, c.n, c.conf, hi, wantHi)
		}
		lo := ClopperPearsonLower(c.k, c.n, c.conf)
		wantLo := 0.0
		if c.k > 0 {
			// P[X >= k] = 1 - P[X <= k-1], increasing in p.
			wantLo = rootBisect(func(p float64) float64 { return (1 - binomCDF(c.k-1, c.n, p)) - (1 - c.conf) })
		}
		if math.Abs(lo-wantLo) > 1e-9*math.Max(wantLo, 1e-3) {
			t.Errorf("lower(%d,%d,%v) = %.12g, summation gives %.12g", c.k, c.n, c.conf, lo, wantLo)
		}
		if !(lo <= float64(c.k)/float64(c.n) && float64(c.k)/float64(c.n) <= hi) {
			t.Errorf("(%d,%d): interval [%v, %v] misses the observed rate", c.k, c.n, lo, hi)
		}
	}
	// Closed forms at the edges: k = 0 gives 1 - (1-c)^(1/n), k = n gives (1-c)^(1/n).
	if got, want := ClopperPearsonUpper(0, 10, 0.95), 1-math.Pow(0.05, 0.1); math.Abs(got-want) > 1e-12 {
		t.Errorf("upper(0,10) = %v, want %v (0.2589...)", got, want)
	}
	if got, want := ClopperPearsonLower(10, 10, 0.95), math.Pow(0.05, 0.1); math.Abs(got-want) > 1e-12 {
		t.Errorf("lower(10,10) = %v, want %v", got, want)
	}
	if ClopperPearsonUpper(10, 10, 0.95) != 1 || ClopperPearsonLower(0, 10, 0.95) != 0 {
		t.Error("edges: upper(n,n) must be 1 and lower(0,n) 0")
	}
	lo, hi := ClopperPearson(3, 10, 0.9)
	if lo != ClopperPearsonLower(3, 10, 0.95) || hi != ClopperPearsonUpper(3, 10, 0.95) {
		t.Errorf("two-sided 90%% must be the one-sided 95%% bounds, got [%v, %v]", lo, hi)
	}
	for _, bad := range [][3]float64{{-1, 10, 0.9}, {11, 10, 0.9}, {0, 0, 0.9}, {1, 10, 1}, {1, 10, 0}, {1, 10, math.NaN()}} {
		if v := ClopperPearsonUpper(int(bad[0]), int(bad[1]), bad[2]); !math.IsNaN(v) {
			t.Errorf("upper%v = %v, want NaN", bad, v)
		}
	}
}

func TestEpsilonFromRates(t *testing.T) {
	for _, c := range []struct{ fpr, fnr, delta, want float64 }{
		{0.01, 0.5, 0, math.Log(50)},
		{0.5, 0.01, 0, math.Log(50)},                         // the symmetric form
		{0.01, 0.2, 0.1, math.Log(0.7 / 0.01)},               // delta lowers the numerator
		{0.3, 0.3, 0, math.Log(0.7 / 0.3)},                   // both forms agree
		{0.6, 0.6, 0, 0},                                     // worse than guessing: no evidence
		{0.5, 0.5, 0, 0},                                     // coin flip
		{0.2, 0.01, 1e-3, math.Log((1 - 1e-3 - 0.2) / 0.01)}, // second form wins over ln(0.989/0.2)
		{0.2, 0.9999, 1e-3, 0},                               // both forms negative
	} {
		if got := EpsilonFromRates(c.fpr, c.fnr, c.delta); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("EpsilonFromRates(%v, %v, %v) = %v, want %v", c.fpr, c.fnr, c.delta, got, c.want)
		}
	}
	if got := EpsilonFromRates(0, 0.5, 1e-5); !math.IsInf(got, 1) {
		t.Errorf("no false positive at all: %v, want +Inf", got)
	}
	if !math.IsNaN(EpsilonFromRates(math.NaN(), 0.1, 0)) {
		t.Error("NaN rate must give NaN")
	}
}

// TestEmpiricalEpsilonPerfectSeparation: no error in n trials per side; the one-sided bound
// uses the rate bound 1 - ((1-c)/2)^(1/n) on both rates.
func TestEmpiricalEpsilonPerfectSeparation(t *testing.T) {
	const n, conf, delta = 1000, 0.95, 1e-5
	e, err := EmpiricalEpsilon(AttackCounts{Pos: n, Neg: n}, delta, conf)
	if err != nil {
		t.Fatal(err)
	}
	r := 1 - math.Pow(0.025, 1.0/n)
	if want := math.Log((1 - delta - r) / r); math.Abs(e.Epsilon-want) > 1e-9 {
		t.Errorf("epsilon %v, want %v", e.Epsilon, want)
	}
	r4 := 1 - math.Pow(0.0125, 1.0/n)
	if want := math.Log((1 - delta - r4) / r4); math.Abs(e.Lo-want) > 1e-9 {
		t.Errorf("lo %v, want %v", e.Lo, want)
	}
	if !math.IsInf(e.Point, 1) || !math.IsInf(e.Hi, 1) {
		t.Errorf("point %v and hi %v must be +Inf without errors", e.Point, e.Hi)
	}
	// Half the trials wrong on each side: nothing can be concluded.
	e, _ = EmpiricalEpsilon(AttackCounts{Pos: n, Neg: n, FN: n / 2, FP: n / 2}, delta, conf)
	if e.Epsilon != 0 || e.Lo != 0 || !(e.Hi > 0) {
		t.Errorf("coin-flip test: %+v", e)
	}
	for _, bad := range []AttackCounts{{Pos: 0, Neg: 5}, {Pos: 5, Neg: 5, FN: 6}, {Pos: 5, Neg: 5, FP: -1}} {
		if _, err := EmpiricalEpsilon(bad, delta, conf); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if _, err := EmpiricalEpsilon(AttackCounts{Pos: 5, Neg: 5}, 1, conf); err == nil {
		t.Error("delta 1 accepted")
	}
	if _, err := EmpiricalEpsilon(AttackCounts{Pos: 5, Neg: 5}, 0, 1); err == nil {
		t.Error("confidence 1 accepted")
	}
}

// TestEmpiricalEpsilonRandomizedResponse audits randomized response, whose exact epsilon is
// known: P[1 | D] = e^eps/(1+e^eps), P[1 | D'] = 1/(1+e^eps), and the test "guess D on 1" has
// FPR = FNR = 1/(1+e^eps), i.e. EpsilonFromRates = eps at delta 0. The lower bound must stay
// below eps in at least the stated fraction of repetitions, the interval must cover eps at
// least as often, and with many trials the bound must come close to eps.
func TestEmpiricalEpsilonRandomizedResponse(t *testing.T) {
	const eps, conf = 1.5, 0.9
	q := 1 / (1 + math.Exp(eps))
	r := rand.New(rand.NewPCG(3, 4))
	binom := func(n int, p float64) int {
		k := 0
		for i := 0; i < n; i++ {
			if r.Float64() < p {
				k++
			}
		}
		return k
	}
	const reps, n = 300, 2000
	over, missed := 0, 0
	for i := 0; i < reps; i++ {
		c := AttackCounts{Pos: n, Neg: n, FN: binom(n, q), FP: binom(n, q)}
		e, err := EmpiricalEpsilon(c, 0, conf)
		if err != nil {
			t.Fatal(err)
		}
		if e.Epsilon > eps {
			over++
		}
		if !(e.Lo <= eps && eps <= e.Hi) {
			missed++
		}
		if !(e.Lo <= e.Epsilon && e.Epsilon <= e.Point && e.Point <= e.Hi) {
			t.Fatalf("order lo <= epsilon <= point <= hi violated: %+v", e)
		}
	}
	// Allowed: 10% of reps in expectation; the Bonferroni split makes it about 2.5%.
	if over > reps/10 || missed > reps/10 {
		t.Errorf("bound above eps in %d/%d reps, interval missed eps in %d/%d (confidence %v)", over, reps, missed, reps, conf)
	}
	big := AttackCounts{Pos: 200000, Neg: 200000, FN: binom(200000, q), FP: binom(200000, q)}
	e, _ := EmpiricalEpsilon(big, 0, conf)
	if !(e.Epsilon > eps-0.05 && e.Epsilon < eps) {
		t.Errorf("200000 trials: bound %v, want just below %v", e.Epsilon, eps)
	}
}

// TestBestThreshold compares the chosen test with a brute force over every threshold and
// both directions.
func TestBestThreshold(t *testing.T) {
	var pos, neg []float64
	for i := 0; i < 40; i++ {
		pos, neg = append(pos, float64(50+i)), append(neg, float64(i))
	}
	thr, est, err := BestThreshold(pos, neg, 0, 0.95)
	if err != nil {
		t.Fatal(err)
	}
	if c := thr.Counts(pos, neg); c.FN != 0 || c.FP != 0 || thr.Below {
		t.Errorf("separable scores: test %+v gives %+v", thr, c)
	}
	if est.Counts.FN != 0 || est.Counts.FP != 0 {
		t.Errorf("estimate counts %+v", est.Counts)
	}
	// Reversed orientation: D has the low scores.
	thr, _, _ = BestThreshold(neg, pos, 0, 0.95)
	if c := thr.Counts(neg, pos); c.FN != 0 || c.FP != 0 || !thr.Below {
		t.Errorf("reversed scores: test %+v gives %+v", thr, c)
	}

	r := rand.New(rand.NewPCG(1, 2))
	for rep := 0; rep < 20; rep++ {
		p := make([]float64, 60+r.IntN(40))
		q := make([]float64, 60+r.IntN(40))
		for i := range p {
			p[i] = math.Round(4*(r.NormFloat64()+1)) / 4 // ties on purpose
		}
		for i := range q {
			q[i] = math.Round(4*r.NormFloat64()) / 4
		}
		if rep == 0 {
			p[3], q[5] = math.NaN(), math.NaN()
		}
		_, got, err := BestThreshold(p, q, 1e-5, 0.95)
		if err != nil {
			t.Fatal(err)
		}
		best := 0.0
		cands := append(append([]float64{math.Inf(-1)}, p...), q...)
		for _, c := range cands {
			if math.IsNaN(c) {
				continue
			}
			for _, below := range []bool{false, true} {
				e, _ := EmpiricalEpsilon(ThresholdTest{Threshold: c, Below: below}.Counts(p, q), 1e-5, 0.95)
				best = math.Max(best, e.Epsilon)
			}
		}
		if math.Abs(got.Epsilon-best) > 1e-12 {
			t.Errorf("rep %d: best threshold gives %v, brute force %v", rep, got.Epsilon, best)
		}
	}
	if _, _, err := BestThreshold(nil, []float64{1}, 0, 0.9); err == nil {
		t.Error("empty calibration accepted")
	}
}
