package privacy

import (
	"crypto/rand"
	"encoding/binary"
	"math"
	"math/big"
	"math/bits"
)

// GranularityBits fixes the lattice of the secure sampler: outputs are integer multiples of
// Granularity(sigma) = 2^(ceil(log2 sigma) - GranularityBits), so sigma spans between
// 2^(GranularityBits-1) and 2^GranularityBits lattice steps.
const GranularityBits = 40

// Granularity returns the lattice spacing used by the secure sampler for noise scale sigma:
// the power of two 2^(ceil(log2 sigma) - GranularityBits). It returns 0 for sigma <= 0,
// non-finite sigma, or sigma so small that the spacing underflows.
func Granularity(sigma float64) float64 {
	if !(sigma > 0) || math.IsInf(sigma, 0) {
		return 0
	}
	frac, exp := math.Frexp(sigma) // sigma = frac * 2^exp, frac in [0.5, 1)
	e := exp
	if frac == 0.5 {
		e = exp - 1 // sigma is exactly 2^(exp-1)
	}
	return math.Ldexp(1, e-GranularityBits)
}

// secure is the crypto/rand-backed Noise.
type secure struct {
	buf [512]byte
	pos int
	// scratch big integers for the exact Bernoulli(exp(-gamma)) step
	a, num, den, den2, u, r, q big.Int
	tmp                        []byte
}

// NewSecureNoise returns a Noise backed by crypto/rand, for production use.
//
// Sampler: Normal(dst, sigma) returns g*Y with g = Granularity(sigma) (a power of two
// about 2^-40 sigma) and Y drawn from the discrete Gaussian on the integers with parameter
// sigma/g, P(Y=y) proportional to exp(-y^2 / (2 (sigma/g)^2)), by the rejection sampler of
// Canonne, Kamath and Steinke ("The Discrete Gaussian for Differential Privacy", NeurIPS
// 2020, Algorithms 1-3): a discrete Laplace proposal and Bernoulli(exp(-gamma)) acceptance,
// all in exact integer arithmetic on the exact binary value of sigma/g, driven by uniform
// integers from crypto/rand. No floating-point operation touches the sample until the
// final exact product g*Y, so the output avoids the floating-point artefacts of textbook
// samplers (Mironov, CCS 2012), and every output lies on the data-independent lattice gZ.
// The distribution differs from a continuous N(0, sigma^2) only by the lattice rounding
// (spacing below 2^-39 sigma). Running time varies with the sample (rejection sampling);
// timing side channels are not addressed.
//
// sigma values so small that Granularity underflows to 0 are treated as invalid (NaN).
// The returned value is not safe for concurrent use.
func NewSecureNoise() Noise {
	return &secure{pos: 512}
}

func (s *secure) uint64() uint64 {
	if s.pos+8 > len(s.buf) {
		// crypto/rand.Read never returns an error on supported platforms (Go 1.24+): it
		// aborts the program rather than return weak bytes.
		_, _ = rand.Read(s.buf[:])
		s.pos = 0
	}
	v := binary.LittleEndian.Uint64(s.buf[s.pos:])
	s.pos += 8
	return v
}

// Uniform implements Noise: a multiple of 2^-53 in (0,1), from 53 crypto/rand bits.
func (s *secure) Uniform() float64 {
	for {
		k := s.uint64() >> 11
		if k != 0 {
			return float64(k) * 0x1p-53
		}
	}
}

// below returns a uniform integer in [0, n), n >= 1, by masked rejection.
func (s *secure) below(n uint64) uint64 {
	if n&(n-1) == 0 {
		return s.uint64() & (n - 1)
	}
	mask := uint64(1)<<bits.Len64(n) - 1
	for {
		if v := s.uint64() & mask; v < n {
			return v
		}
	}
}

// bernFrac returns true with probability num/den (0 <= num <= den, den >= 1).
func (s *secure) bernFrac(num, den uint64) bool {
	return s.below(den) < num
}

// bernExpSmall returns true with probability exp(-num/den), 0 <= num <= den, den*k must
// not overflow for the k reached (k grows like a Poisson count, so den < 2^56 suffices).
func (s *secure) bernExpSmall(num, den uint64) bool {
	k := uint64(1)
	for s.bernFrac(num, den*k) {
		k++
	}
	return k%2 == 1
}

// bernExpMinus1 returns true with probability exp(-1).
func (s *secure) bernExpMinus1() bool { return s.bernExpSmall(1, 1) }

// bigBelow sets s.u to a uniform integer in [0, n), n >= 1.
func (s *secure) bigBelow(n *big.Int) {
	bl := n.BitLen()
	nb := (bl + 7) / 8
	if cap(s.tmp) < nb {
		s.tmp = make([]byte, nb)
	}
	b := s.tmp[:nb]
	topMask := byte(0xff >> (uint(nb*8 - bl)))
	for {
		for i := 0; i < nb; i += 8 {
			var w [8]byte
			binary.LittleEndian.PutUint64(w[:], s.uint64())
			copy(b[i:], w[:])
		}
		b[0] &= topMask
		s.u.SetBytes(b)
		if s.u.Cmp(n) < 0 {
			return
		}
	}
}

// bernExpBig returns true with probability exp(-num/den) for big num >= 0, den > 0.
func (s *secure) bernExpBig(num, den *big.Int) bool {
	s.q.QuoRem(num, den, &s.r) // gamma = q + r/den
	if !s.q.IsUint64() {
		return false // exp(-2^64) is 0 to any precision
	}
	for k := s.q.Uint64(); k > 0; k-- {
		if !s.bernExpMinus1() {
			return false
		}
	}
	// Bernoulli(exp(-r/den)), r/den in [0,1): K-loop with Bernoulli(r/(den*K)).
	k := int64(1)
	for {
		s.den2.Mul(den, big.NewInt(k))
		s.bigBelow(&s.den2)
		if s.u.Cmp(&s.r) >= 0 {
			break
		}
		k++
	}
	return k%2 == 1
}

// discreteLaplace returns Y with P(Y=y) proportional to exp(-|y|/t), t >= 1.
func (s *secure) discreteLaplace(t uint64) int64 {
	for {
		u := s.below(t)
		if !s.bernExpSmall(u, t) {
			continue
		}
		v := uint64(0)
		for s.bernExpMinus1() {
			v++
		}
		x := u + t*v
		neg := s.uint64()&1 == 1
		if neg && x == 0 {
			continue
		}
		if neg {
			return -int64(x)
		}
		return int64(x)
	}
}

// discreteGaussian returns Y with P(Y=y) proportional to exp(-y^2/(2 sigma^2)) where
// sigma = m / 2^f exactly (m >= 1), and t = floor(sigma)+1 < 2^48.
func (s *secure) discreteGaussian(m uint64, f uint) int64 {
	t := m>>f + 1
	// gamma = (|Y| - sigma^2/t)^2 / (2 sigma^2) = (|Y| 2^(2f) t - m^2)^2 / (2^(2f+1) t^2 m^2).
	var m2, tb big.Int
	m2.SetUint64(m)
	m2.Mul(&m2, &m2)
	tb.SetUint64(t)
	s.den.Mul(&tb, &tb)
	s.den.Mul(&s.den, &m2)
	s.den.Lsh(&s.den, 2*f+1)
	for {
		y := s.discreteLaplace(t)
		ay := y
		if ay < 0 {
			ay = -ay
		}
		s.a.SetInt64(ay)
		s.a.Mul(&s.a, &tb)
		s.a.Lsh(&s.a, 2*f)
		s.a.Sub(&s.a, &m2)
		s.num.Mul(&s.a, &s.a)
		if s.bernExpBig(&s.num, &s.den) {
			return y
		}
	}
}

// Normal implements Noise; outputs are integer multiples of Granularity(sigma).
func (s *secure) Normal(dst []float64, sigma float64) {
	if fillSpecial(dst, sigma) {
		return
	}
	g := Granularity(sigma)
	sl := sigma / g // exact: division by a power of two (g > 0 checked below)
	if g == 0 || !(sl >= 0x1p39 && sl <= 0x1p40) {
		for i := range dst {
			dst[i] = math.NaN()
		}
		return
	}
	fr, ex := math.Frexp(sl)            // sl = fr * 2^ex, ex in {40, 41}
	m := uint64(math.Ldexp(fr, 53))     // exact 53-bit integer
	f := uint(53 - ex)                  // sl = m / 2^f
	tz := uint(bits.TrailingZeros64(m)) // reduce m/2^f
	if tz > f {
		tz = f
	}
	m >>= tz
	f -= tz
	for i := range dst {
		// |Y| < 2^53 with overwhelming probability (it would need ~2^13 sigma); the
		// product by a power of two is exact.
		dst[i] = float64(s.discreteGaussian(m, f)) * g
	}
}

// Secure implements Noise; always true.
func (s *secure) Secure() bool { return true }
