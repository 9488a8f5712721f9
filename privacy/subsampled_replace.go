package privacy

import "math"

// Replace-one adjacency for the Poisson-subsampled Gaussian mechanism.
//
// Why replace-one. A walk member publishes its row count (the join announcement), and the
// gradient steps release prox(z - eta_k c_q h N) with N an integer vector and
// c_q = n/(q M), M the total row count: an observer who knows the token the holder received
// can test which M makes the scaled difference integral, so adding or removing a row of
// node i is visible whatever the noise. What the system can hide is one row of node i
// REPLACED by another (the counts unchanged): that is the adjacency of every ls-sgd and sgd
// figure (local, pairwise, ledger, budget). The scale test is kept as a regression test
// (lssgd_replace_test.go): it tells add/remove neighbours apart every time, and
// replace-one neighbours no better than the figure allows.
//
// The bound. Let D and D' differ in one row (x in D, x' in D'), and Dm = D without x. The
// sampled clipped sum of D is that of Dm plus, with probability q, the clipped gradient of
// x (norm <= C), so M(D) vs M(Dm) and M(Dm) vs M(D') are each an add/remove pair of the
// Poisson-subsampled Gaussian with noise multiplier z = sigma/C, whose Renyi divergence in
// either direction is at most eps_AR(order) = SubsampledGaussianCurve(q, z, 1) (Mironov,
// Talwar, Zhang 2019; the larger of the two directions). The weak triangle inequality of
// Renyi divergence (Mironov 2017, Prop. 11) then gives, for every p > 1 and p' = p/(p-1):
//
//	D_a(M(D) || M(D')) <= (a - 1/p)/(a - 1) eps_AR(p a) + eps_AR(p'(a - 1) + 1).
//
// (Proof: E_R[(P/R)^a] = E_Q[(P/Q)^a (Q/R)^(a-1)] <= E_Q[(P/Q)^(pa)]^(1/p)
// E_Q[(Q/R)^(p'(a-1))]^(1/p') by Hoelder, and E_Q[(P/Q)^b] = exp((b-1) D_b(P||Q)),
// E_Q[(Q/R)^c] = E_R[(Q/R)^(c+1)] = exp(c D_(c+1)(Q||R)).) The curve takes the smallest
// value over p in replaceP, and caps it by the unsampled Gaussian of sensitivity 2C,
// a (2/z)^2/2 = 2a/z^2: the difference of the two clipped sums is at most 2C whatever the
// sample, and subsampling never increases the divergence of the pair once both samples
// are coupled (each of the two mechanisms is the same mixture over the sample of Dm and
// the coin of the replaced row; joint convexity). At q = 1 the mechanism is exactly a
// Gaussian of sensitivity 2C and the curve is exactly 2a/z^2.
//
// This is not the tight replace-one curve (which has no closed form for Poisson
// sampling); it is a proven upper bound, within a factor of about 4 of the add/remove
// curve at small q, where the tight one is about that much too (the sensitivity doubles).

// SubsampledReplaceNote names the result SubsampledReplaceCurve computes and its
// conditions.
const SubsampledReplaceNote = "Poisson-subsampled Gaussian mechanism under replace-one adjacency: the add/remove RDP of " +
	"Mironov, Talwar and Zhang 2019 at two orders, joined by the weak triangle inequality of Renyi divergence " +
	"(Mironov 2017, Prop. 11) through the dataset without the replaced row, minimised over the Hoelder exponent, capped " +
	"by the Gaussian of sensitivity 2C (exact at q = 1); conditions: one row of the node replaced (row counts unchanged), " +
	"each row included independently with probability q, every example's contribution clipped at C, Gaussian noise of " +
	"std noiseMultiplier*C on the clipped sum"

// replaceP are the Hoelder exponents tried by SubsampledReplaceCurve.
var replaceP = []float64{1.25, 1.5, 2, 3, 5}

// SubsampledReplaceCurve returns the RDP curve of steps adaptive compositions of the
// Poisson-subsampled Gaussian mechanism (rate q, noise std noiseMultiplier*C on a sum of
// examples clipped at C) under replace-one adjacency; see the comment above. q == 1 gives
// exactly GaussianCurve(2, noiseMultiplier) scaled by steps; q == 0 or steps == 0 the zero
// curve; invalid input +Inf (SubsampledReplaceCurveChecked reports it).
func SubsampledReplaceCurve(q, noiseMultiplier float64, steps int) Curve {
	c, err := SubsampledReplaceCurveChecked(q, noiseMultiplier, steps)
	if err != nil {
		return InfCurve()
	}
	return c
}

// SubsampledReplaceCurveChecked is SubsampledReplaceCurve returning an error for invalid
// input instead of the +Inf curve.
func SubsampledReplaceCurveChecked(q, noiseMultiplier float64, steps int) (Curve, error) {
	if err := validateSubsampled(q, noiseMultiplier, steps); err != nil {
		return InfCurve(), err
	}
	if q == 0 || steps == 0 {
		return ZeroCurve(), nil
	}
	per := replaceOneOn(Orders, q, noiseMultiplier)
	s := float64(steps)
	for k := range per {
		per[k] *= s
	}
	return per, nil
}

// replaceOneOn is the single-step replace-one curve on the given orders.
func replaceOneOn(orders []float64, q, z float64) Curve {
	c := make(Curve, len(orders))
	r := 2 / z // sensitivity 2C against noise z C
	for k, a := range orders {
		c[k] = a * r * r / 2
		if !(a > 1) || math.IsInf(a, 0) {
			c[k] = math.Inf(1)
		}
	}
	if q < 1 {
		// The two orders each exponent needs, evaluated in one batch.
		var need []float64
		for _, a := range orders {
			if !(a > 1) || math.IsInf(a, 0) {
				continue
			}
			for _, p := range replaceP {
				need = append(need, p*a, p/(p-1)*(a-1)+1)
			}
		}
		ar := subsampledGaussianOn(need, q, z)
		x := 0
		for k, a := range orders {
			if !(a > 1) || math.IsInf(a, 0) {
				continue
			}
			for _, p := range replaceP {
				v := (a-1/p)/(a-1)*ar[x] + ar[x+1]
				x += 2
				if v = v * subsampledRoundUp; v < c[k] && !math.IsNaN(v) {
					c[k] = v
				}
			}
		}
	}
	return c
}
