package privacy

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"gonum.org/v1/gonum/mathext"
)

// Empirical privacy auditing: a lower bound on epsilon from the error rates of an attack that
// tells two neighbouring datasets D and D' apart (Jagielski, Ullman, Oprea, "Auditing
// Differentially Private Machine Learning: How Private is Private SGD?", NeurIPS 2020; Nasr,
// Song, Thakurta, Papernot, Carlini, "Adversary Instantiation: Lower Bounds for Differentially
// Private Machine Learning", IEEE S&P 2021).
//
// If a mechanism M is (eps, delta)-DP, then for every test that guesses "D" or "D'" from one
// output, with false-positive rate FPR = P[guess D | D'] and false-negative rate
// FNR = P[guess D' | D] (Kairouz, Oh, Viswanath 2015, Theorem 2.1):
//
//	FPR + e^eps FNR >= 1 - delta   and   FNR + e^eps FPR >= 1 - delta,
//
// so eps >= max(ln((1 - delta - FNR)/FPR), ln((1 - delta - FPR)/FNR)). Both expressions
// decrease in FPR and in FNR, so replacing the rates by upper confidence bounds gives a lower
// confidence bound on eps. The rates are estimated from independent trials on D and on D'
// with exact (Clopper-Pearson) binomial bounds.

// ClopperPearsonUpper returns the exact one-sided upper confidence bound on a binomial
// proportion after k successes in n trials: the p with P[Bin(n, p) <= k] = 1 - confidence,
// i.e. the confidence quantile of Beta(k+1, n-k); 1 when k == n. It returns NaN for
// arguments outside 0 <= k <= n, n >= 1, 0 < confidence < 1.
func ClopperPearsonUpper(k, n int, confidence float64) float64 {
	if !cpArgsOK(k, n, confidence) {
		return math.NaN()
	}
	if k == n {
		return 1
	}
	return betaQuantile(float64(k+1), float64(n-k), confidence)
}

// ClopperPearsonLower returns the exact one-sided lower confidence bound: the p with
// P[Bin(n, p) >= k] = 1 - confidence, i.e. the (1 - confidence) quantile of Beta(k, n-k+1);
// 0 when k == 0. NaN for invalid arguments (see ClopperPearsonUpper).
func ClopperPearsonLower(k, n int, confidence float64) float64 {
	if !cpArgsOK(k, n, confidence) {
		return math.NaN()
	}
	if k == 0 {
		return 0
	}
	return betaQuantile(float64(k), float64(n-k+1), 1-confidence)
}

// ClopperPearson returns the exact two-sided interval at the given confidence: each side is
// a one-sided bound at confidence (1 + confidence)/2.
func ClopperPearson(k, n int, confidence float64) (lo, hi float64) {
	c := (1 + confidence) / 2
	return ClopperPearsonLower(k, n, c), ClopperPearsonUpper(k, n, c)
}

func cpArgsOK(k, n int, confidence float64) bool {
	return n >= 1 && k >= 0 && k <= n && confidence > 0 && confidence < 1
}

// betaQuantile returns x with I_x(a, b) = y. gonum's InvRegIncBeta is refined by bisection
// on RegIncBeta (monotone in x), so the result is the quantile to the accuracy of the
// regularized incomplete beta function itself even where the inverse's iteration is loose
// (very unequal a and b).
func betaQuantile(a, b, y float64) float64 {
	x := mathext.InvRegIncBeta(a, b, y)
	if math.IsNaN(x) || x < 0 || x > 1 {
		x = 0.5
	}
	f := func(t float64) float64 { return mathext.RegIncBeta(a, b, t) - y }
	// Bracket the root around the first estimate, then bisect.
	lo, hi := x, x
	for step := 1e-12 + 1e-9*x; ; step *= 4 {
		lo = math.Max(0, x-step)
		if lo == 0 || f(lo) <= 0 {
			break
		}
	}
	for step := 1e-12 + 1e-9*(1-x); ; step *= 4 {
		hi = math.Min(1, x+step)
		if hi == 1 || f(hi) >= 0 {
			break
		}
	}
	for i := 0; i < 200 && hi-lo > 1e-15*math.Max(hi, 1e-300); i++ {
		mid := lo + (hi-lo)/2
		if mid == lo || mid == hi {
			break
		}
		if f(mid) < 0 {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo + (hi-lo)/2
}

// EpsilonFromRates returns max(0, ln((1 - delta - fnr)/fpr), ln((1 - delta - fpr)/fnr)):
// the smallest epsilon compatible, at delta, with a test of false-positive rate fpr and
// false-negative rate fnr. A zero rate against a positive numerator gives +Inf. NaN
// arguments give NaN.
func EpsilonFromRates(fpr, fnr, delta float64) float64 {
	if math.IsNaN(fpr) || math.IsNaN(fnr) || math.IsNaN(delta) {
		return math.NaN()
	}
	side := func(num, den float64) float64 {
		if !(num > 0) {
			return 0
		}
		if den <= 0 {
			return math.Inf(1)
		}
		return math.Log(num / den)
	}
	return math.Max(0, math.Max(side(1-delta-fnr, fpr), side(1-delta-fpr, fnr)))
}

// AttackCounts are the outcomes of a distinguishing test run on independent trials of a
// mechanism on D (positives) and on D' (negatives).
type AttackCounts struct {
	Pos int `json:"pos"` // trials on D
	Neg int `json:"neg"` // trials on D'
	FN  int `json:"fn"`  // trials on D that the test assigned to D'
	FP  int `json:"fp"`  // trials on D' that the test assigned to D
}

// Validate reports whether the counts are usable.
func (c AttackCounts) Validate() error {
	if c.Pos < 1 || c.Neg < 1 {
		return fmt.Errorf("privacy: audit: need trials on both datasets, got %d and %d", c.Pos, c.Neg)
	}
	if c.FN < 0 || c.FN > c.Pos || c.FP < 0 || c.FP > c.Neg {
		return fmt.Errorf("privacy: audit: error counts FN=%d/%d FP=%d/%d out of range", c.FN, c.Pos, c.FP, c.Neg)
	}
	return nil
}

// AuditTheorem names the result EmpiricalEpsilon rests on.
const AuditTheorem = "hypothesis-testing bound of (eps, delta)-DP, FPR + e^eps FNR >= 1 - delta both ways " +
	"(Kairouz-Oh-Viswanath 2015 Thm 2.1), with Clopper-Pearson bounds on the rates " +
	"(Jagielski et al. 2020, Nasr et al. 2021); Bonferroni over the two rates"

// AuditEstimate is the empirical epsilon of one test.
type AuditEstimate struct {
	// Epsilon is the one-sided lower confidence bound: with probability at least Confidence
	// over the trials, the mechanism is not (e, Delta)-DP for any e < Epsilon. It uses
	// Clopper-Pearson upper bounds on FPR and FNR at confidence 1 - (1-Confidence)/2 each.
	Epsilon float64 `json:"epsilon"`
	// Point is EpsilonFromRates of the observed rates (may be +Inf).
	Point float64 `json:"point"`
	// Lo and Hi are a two-sided Confidence interval for EpsilonFromRates of the test's true
	// rates (each of the four rate bounds at confidence 1 - (1-Confidence)/4). Lo <= Epsilon;
	// Hi may be +Inf (no false positive or no false negative observed).
	Lo         float64      `json:"lo"`
	Hi         float64      `json:"hi"`
	FPR        float64      `json:"fpr"`
	FNR        float64      `json:"fnr"`
	Delta      float64      `json:"delta"`
	Confidence float64      `json:"confidence"`
	Counts     AttackCounts `json:"counts"`
}

// EmpiricalEpsilon computes the audit estimate of a test from its counts at delta (in
// [0, 1)) and confidence (in (0, 1)).
func EmpiricalEpsilon(c AttackCounts, delta, confidence float64) (AuditEstimate, error) {
	if err := c.Validate(); err != nil {
		return AuditEstimate{}, err
	}
	if !(delta >= 0 && delta < 1) {
		return AuditEstimate{}, fmt.Errorf("privacy: audit: delta must be in [0,1), got %v", delta)
	}
	if !(confidence > 0 && confidence < 1) {
		return AuditEstimate{}, fmt.Errorf("privacy: audit: confidence must be in (0,1), got %v", confidence)
	}
	tail := 1 - confidence
	e := AuditEstimate{Delta: delta, Confidence: confidence, Counts: c,
		FPR: float64(c.FP) / float64(c.Neg), FNR: float64(c.FN) / float64(c.Pos)}
	e.Point = EpsilonFromRates(e.FPR, e.FNR, delta)
	e.Epsilon = lowerEpsilon(c, delta, confidence)
	two := 1 - tail/4
	e.Lo = EpsilonFromRates(ClopperPearsonUpper(c.FP, c.Neg, two), ClopperPearsonUpper(c.FN, c.Pos, two), delta)
	e.Hi = EpsilonFromRates(ClopperPearsonLower(c.FP, c.Neg, two), ClopperPearsonLower(c.FN, c.Pos, two), delta)
	return e, nil
}

// lowerEpsilon is AuditEstimate.Epsilon of valid counts.
func lowerEpsilon(c AttackCounts, delta, confidence float64) float64 {
	one := 1 - (1-confidence)/2
	return EpsilonFromRates(ClopperPearsonUpper(c.FP, c.Neg, one), ClopperPearsonUpper(c.FN, c.Pos, one), delta)
}

// ThresholdTest guesses D when the score is above Threshold (or, with Below, when it is at
// or below Threshold).
type ThresholdTest struct {
	Threshold float64 `json:"threshold"`
	Below     bool    `json:"below"`
}

// GuessD reports whether the test assigns score s to D.
func (t ThresholdTest) GuessD(s float64) bool {
	if t.Below {
		return s <= t.Threshold
	}
	return s > t.Threshold
}

// Counts applies the test to the scores of trials on D (pos) and on D' (neg).
func (t ThresholdTest) Counts(pos, neg []float64) AttackCounts {
	c := AttackCounts{Pos: len(pos), Neg: len(neg)}
	for _, s := range pos {
		if !t.GuessD(s) {
			c.FN++
		}
	}
	for _, s := range neg {
		if t.GuessD(s) {
			c.FP++
		}
	}
	return c
}

// maxThresholds bounds the candidate thresholds BestThreshold evaluates.
const maxThresholds = 2048

// BestThreshold chooses, on calibration scores of trials on D (pos) and D' (neg), the
// threshold test (either direction) with the largest EmpiricalEpsilon lower bound at delta
// and confidence (ties: the fewest errors), and returns it with that calibration estimate. The estimate is biased
// upwards by the choice: evaluate the chosen test on fresh trials (Counts, then
// EmpiricalEpsilon) to obtain a valid bound. A NaN score is a guess of D' (GuessD).
// When there are many distinct scores, all thresholds among the 512 most extreme at each end
// are tried and a regular subsample of the rest.
func BestThreshold(pos, neg []float64, delta, confidence float64) (ThresholdTest, AuditEstimate, error) {
	if len(pos) == 0 || len(neg) == 0 {
		return ThresholdTest{}, AuditEstimate{}, errors.New("privacy: audit: need calibration scores for both datasets")
	}
	type item struct {
		s   float64
		pos bool
	}
	all := make([]item, 0, len(pos)+len(neg))
	nanPos, nanNeg := 0, 0
	for _, s := range pos {
		if math.IsNaN(s) {
			nanPos++
			continue
		}
		all = append(all, item{s, true})
	}
	for _, s := range neg {
		if math.IsNaN(s) {
			nanNeg++
			continue
		}
		all = append(all, item{s, false})
	}
	sort.Slice(all, func(a, b int) bool { return all[a].s < all[b].s })
	// cut[k]: after the first k sorted items (threshold between distinct values), the
	// number of positives and negatives at or below the threshold.
	type cut struct {
		thr          float64
		posLE, negLE int
	}
	cuts := []cut{{thr: math.Inf(-1)}}
	p, q := 0, 0
	for k := 0; k < len(all); k++ {
		if all[k].pos {
			p++
		} else {
			q++
		}
		if k+1 < len(all) && all[k+1].s == all[k].s {
			continue
		}
		cuts = append(cuts, cut{thr: all[k].s, posLE: p, negLE: q})
	}
	idx := make([]int, 0, maxThresholds+2)
	if len(cuts) <= maxThresholds {
		for k := range cuts {
			idx = append(idx, k)
		}
	} else {
		const edge = maxThresholds / 4
		for k := 0; k < edge; k++ {
			idx = append(idx, k, len(cuts)-1-k)
		}
		mid := len(cuts) - 2*edge
		for k := 0; k < maxThresholds/2; k++ {
			idx = append(idx, edge+k*mid/(maxThresholds/2))
		}
	}
	if err := (AttackCounts{Pos: len(pos), Neg: len(neg)}).Validate(); err != nil {
		return ThresholdTest{}, AuditEstimate{}, err
	}
	if !(delta >= 0 && delta < 1) || !(confidence > 0 && confidence < 1) {
		return ThresholdTest{}, AuditEstimate{}, fmt.Errorf("privacy: audit: need delta in [0,1) and confidence in (0,1), got %v and %v", delta, confidence)
	}
	var best ThresholdTest
	var bestCnt AttackCounts
	found, bestEps, bestErrs := false, 0.0, 0
	np, nn := len(pos), len(neg)
	for _, k := range idx {
		c := cuts[k]
		for _, below := range []bool{false, true} {
			// A NaN score is never above nor at or below a threshold: it is a guess of D'.
			cnt := AttackCounts{Pos: np, Neg: nn, FN: c.posLE + nanPos, FP: nn - nanNeg - c.negLE}
			if below {
				cnt.FN, cnt.FP = np-c.posLE, c.negLE
			}
			e := lowerEpsilon(cnt, delta, confidence)
			errs := cnt.FN + cnt.FP
			if !found || e > bestEps || (e == bestEps && errs < bestErrs) {
				bestEps, bestErrs, bestCnt = e, errs, cnt
				best, found = ThresholdTest{Threshold: c.thr, Below: below}, true
			}
		}
	}
	est, err := EmpiricalEpsilon(bestCnt, delta, confidence)
	if err != nil {
		return ThresholdTest{}, AuditEstimate{}, err
	}
	return best, est, nil
}
