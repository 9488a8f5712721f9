package privacy

import (
	"errors"
	"math"

	"gonum.org/v1/gonum/dsp/fourier"
)

// A privacy-loss-distribution (PLD) accountant for the Poisson-subsampled Gaussian
// mechanism (Koskela, Jälkö and Honkela 2020, "Computing tight differential privacy
// guarantees using FFT"; Meiser and Mohammadi 2018; the dp_accounting library's
// PLD accountant): the loss L = log(p(t)/q(t)), t ~ P, of one release is discretised on a
// grid of width H with every value rounded UP (so the composed loss is stochastically
// larger than the true one: a pessimistic estimate), k releases compose by convolution
// (FFT), and delta(eps) = P[L = inf] + E[(1 - e^(eps - L))+] is exact for the discretised
// distribution. It is used where the RDP conversion is loose: compositions of subsampled
// steps (the ls-sgd and sgd walks' local figure).

// Neighbouring relations of SubsampledGaussianPLD.
const (
	// RelationSubstitute: one record replaced by another (the walk's gradient steps): with
	// sensitivity 1 per record and a difference of 2, P = (1-q) N(0, s^2) + q N(1, s^2)
	// against Q = (1-q) N(0, s^2) + q N(-1, s^2).
	RelationSubstitute = "substitute"
	// RelationRemove: one record added or removed (Poisson): the larger delta of
	// (1-q) N(0, s^2) + q N(1, s^2) against N(0, s^2), and the reverse.
	RelationRemove = "remove"
)

// PLDName names the accountant.
const PLDName = "privacy loss distribution of the Poisson-subsampled Gaussian (Koskela, Jälkö, Honkela 2020; losses rounded up " +
	"on a grid that adds at most 0.1% of the RDP figure: a pessimistic estimate), composed by FFT"

// PLD is a discretised privacy-loss distribution: Mass[j] is the probability of the loss
// (Offset + j) * H, Inf the probability of an infinite loss (the truncated upper tail).
type PLD struct {
	H      float64
	Offset int
	Mass   []float64
	Inf    float64
}

// pldTail is the probability mass each tail may lose to truncation per operation: the
// upper tail goes to Inf (counted in full in delta), the lower one to the lowest kept
// value (its loss only rises).
const pldTail = 1e-16

// SubsampledGaussianPLD is the PLD of one release of the Poisson-subsampled Gaussian
// mechanism with sampling rate q, noise multiplier s (noise std over the sensitivity of
// one record's contribution) under the pair (P, Q) described by the relation's constant,
// on a loss grid of width h.
func SubsampledGaussianPLD(q, s, h float64, p, pq func(t float64) float64, cdf func(t float64) float64) PLD {
	// t ranges over P's bulk; P's mass below lo goes to the first bin, above hi to Inf.
	lo, hi := -14*s-2, 14*s+2
	n := 400000
	dt := (hi - lo) / float64(n)
	loss := func(t float64) float64 { return math.Log(p(t)) - math.Log(pq(t)) }
	d := PLD{H: h}
	first := int(math.Ceil(loss(lo) / h))
	last := int(math.Ceil(loss(hi) / h))
	if last < first {
		first, last = last, first
	}
	d.Offset = first
	d.Mass = make([]float64, last-first+1)
	d.Mass[0] += cdf(lo)
	prev := cdf(lo)
	for i := 1; i <= n; i++ {
		t := lo + float64(i)*dt
		c := cdf(t)
		// The loss is monotone in t for these pairs: its largest value over the interval
		// is at one end; the mass goes to the larger (rounded up).
		l := math.Max(loss(t), loss(t-dt))
		j := int(math.Ceil(l/h)) - first
		j = min(max(j, 0), len(d.Mass)-1)
		d.Mass[j] += c - prev
		prev = c
	}
	d.Inf = 1 - prev
	return d.truncate()
}

// SubsampledGaussian returns the PLD of one release of the Poisson-subsampled Gaussian
// with rate q and noise multiplier s under relation (RelationSubstitute, RelationRemove;
// for remove, dir 0 is (mixture, N(0)) and dir 1 the reverse), on the grid h.
func SubsampledGaussian(q, s float64, relation string, dir int, h float64) (PLD, error) {
	if !(q > 0 && q <= 1) || !(s > 0) || math.IsInf(s, 0) || !(h > 0) {
		return PLD{}, errors.New("privacy: pld: need q in (0,1], a finite noise multiplier > 0 and a grid > 0")
	}
	phi := func(t, m float64) float64 { return math.Exp(-(t - m) * (t - m) / (2 * s * s)) }
	cdf := func(t, m float64) float64 { return 0.5 * math.Erfc(-(t-m)/(s*math.Sqrt2)) }
	mix := func(t float64) float64 { return (1-q)*phi(t, 0) + q*phi(t, 1) }
	mixCDF := func(t float64) float64 { return (1-q)*cdf(t, 0) + q*cdf(t, 1) }
	switch {
	case relation == RelationSubstitute:
		neg := func(t float64) float64 { return (1-q)*phi(t, 0) + q*phi(t, -1) }
		return SubsampledGaussianPLD(q, s, h, mix, neg, mixCDF), nil
	case relation == RelationRemove && dir == 0:
		return SubsampledGaussianPLD(q, s, h, mix, func(t float64) float64 { return phi(t, 0) }, mixCDF), nil
	case relation == RelationRemove && dir == 1:
		return SubsampledGaussianPLD(q, s, h, func(t float64) float64 { return phi(t, 0) }, mix,
			func(t float64) float64 { return cdf(t, 0) }), nil
	}
	return PLD{}, errors.New("privacy: pld: unknown relation " + relation)
}

// truncate drops the negligible tails: the upper one (mass below pldTail) into Inf, the
// lower one onto the lowest kept value.
func (d PLD) truncate() PLD {
	lo, s := 0, 0.0
	for lo < len(d.Mass)-1 && s+d.Mass[lo] < pldTail {
		s += d.Mass[lo]
		lo++
	}
	hi, u := len(d.Mass)-1, 0.0
	for hi > lo && u+d.Mass[hi] < pldTail {
		u += d.Mass[hi]
		hi--
	}
	out := PLD{H: d.H, Offset: d.Offset + lo, Mass: append([]float64(nil), d.Mass[lo:hi+1]...), Inf: d.Inf + u}
	out.Mass[0] += s
	return out
}

// convolve is the distribution of the sum of independent losses of a and b (same grid).
func convolve(a, b PLD) PLD {
	n := len(a.Mass) + len(b.Mass) - 1
	size := 1
	for size < n {
		size <<= 1
	}
	fft := fourier.NewFFT(size)
	pa, pb := make([]float64, size), make([]float64, size)
	copy(pa, a.Mass)
	copy(pb, b.Mass)
	ca, cb := fft.Coefficients(nil, pa), fft.Coefficients(nil, pb)
	for i := range ca {
		ca[i] *= cb[i]
	}
	seq := fft.Sequence(nil, ca)
	out := PLD{H: a.H, Offset: a.Offset + b.Offset, Mass: make([]float64, n)}
	for i := range out.Mass {
		out.Mass[i] = math.Max(seq[i]/float64(size), 0) // rounding can leave tiny negatives
	}
	finite := (1 - a.Inf) * (1 - b.Inf)
	out.Inf = 1 - finite
	// Renormalise the finite part to its exact total (the FFT's rounding).
	s := 0.0
	for _, m := range out.Mass {
		s += m
	}
	if s > 0 {
		for i := range out.Mass {
			out.Mass[i] *= finite / s
		}
	}
	return out.truncate()
}

// Compose returns the PLD of k independent releases with distribution d (repeated
// squaring).
func (d PLD) Compose(k int) PLD {
	if k <= 0 {
		return PLD{H: d.H, Mass: []float64{1}}
	}
	res, have := PLD{}, false
	for p := d; k > 0; k >>= 1 {
		if k&1 == 1 {
			if have {
				res = convolve(res, p)
			} else {
				res, have = p, true
			}
		}
		if k > 1 {
			p = convolve(p, p)
		}
	}
	return res
}

// Delta returns delta(eps) = P[inf] + sum_j Mass[j] (1 - e^(eps - L_j))+.
func (d PLD) Delta(eps float64) float64 {
	s := d.Inf
	for j, m := range d.Mass {
		if l := float64(d.Offset+j) * d.H; l > eps {
			s += m * -math.Expm1(eps-l)
		}
	}
	return s
}

// Epsilon returns the smallest eps >= 0 with Delta(eps) <= delta (+Inf when even the
// largest loss does not reach it: the infinite-loss mass exceeds delta).
func (d PLD) Epsilon(delta float64) float64 {
	if d.Inf > delta {
		return math.Inf(1)
	}
	if d.Delta(0) <= delta {
		return 0
	}
	lo, hi := 0.0, float64(d.Offset+len(d.Mass))*d.H
	for it := 0; it < 100 && hi-lo > 1e-10; it++ {
		m := (lo + hi) / 2
		if d.Delta(m) > delta {
			lo = m
		} else {
			hi = m
		}
	}
	return hi
}

// SubsampledGaussianEpsilon is the PLD epsilon at delta of k releases of the
// Poisson-subsampled Gaussian (rate q, noise multiplier s) under relation (for remove, the
// larger of the two directions). The grid is chosen so that the rounding (at most one grid
// step per release) adds at most 0.1% of the RDP figure of the same composition (clamped
// to [1e-6, 1e-2]); the result is never above that RDP figure.
func SubsampledGaussianEpsilon(q, s float64, k int, relation string, delta float64) (float64, error) {
	var c Curve
	if relation == RelationSubstitute {
		c = SubsampledReplaceCurve(q, s, k)
	} else {
		c = SubsampledGaussianCurve(q, s, k)
	}
	ref, _ := ToDP(c, delta)
	if k <= 0 {
		return 0, nil
	}
	if math.IsInf(ref, 0) || math.IsNaN(ref) {
		return math.Inf(1), errors.New("privacy: pld: the RDP figure is not finite")
	}
	h := math.Min(math.Max(1e-3*ref/float64(k), 1e-6), 1e-2)
	eps, err := SubsampledGaussianEpsilonGrid(q, s, k, relation, delta, h)
	return math.Min(eps, ref), err
}

// SubsampledGaussianEpsilonGrid is SubsampledGaussianEpsilon on the loss grid h.
func SubsampledGaussianEpsilonGrid(q, s float64, k int, relation string, delta, h float64) (float64, error) {
	dirs := []int{0}
	if relation == RelationRemove {
		dirs = []int{0, 1}
	}
	eps := 0.0
	for _, dir := range dirs {
		d, err := SubsampledGaussian(q, s, relation, dir, h)
		if err != nil {
			return math.Inf(1), err
		}
		eps = math.Max(eps, d.Compose(k).Epsilon(delta))
	}
	return eps, nil
}
