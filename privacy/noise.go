package privacy

import (
	"errors"
	"math"
	"math/rand/v2"
)

// Noise is a source of differential-privacy noise.
//
// Implementations are not safe for concurrent use; give each goroutine its own source.
type Noise interface {
	// Normal fills dst with iid N(0, sigma^2) samples. sigma == 0 gives zeros. An invalid
	// sigma (negative, NaN or infinite, see ValidateSigma) fills dst with NaN so that any
	// downstream finiteness check rejects the result instead of releasing unnoised data.
	Normal(dst []float64, sigma float64)
	// Uniform returns a uniform sample in the open interval (0,1).
	Uniform() float64
	// Secure reports whether the source is backed by crypto/rand.
	Secure() bool
}

// ValidateSigma reports whether s is a usable noise standard deviation: finite and >= 0.
// Callers should validate sigma before use; Noise implementations never treat an invalid
// sigma as "no noise".
func ValidateSigma(s float64) error {
	if math.IsNaN(s) {
		return errors.New("privacy: noise sigma is NaN")
	}
	if math.IsInf(s, 0) {
		return errors.New("privacy: noise sigma is infinite")
	}
	if s < 0 {
		return errors.New("privacy: noise sigma is negative")
	}
	return nil
}

// fillSpecial handles sigma == 0 (zeros) and invalid sigma (NaN). It returns true when dst
// has been filled and no sampling is needed.
func fillSpecial(dst []float64, sigma float64) bool {
	if sigma == 0 {
		for i := range dst {
			dst[i] = 0
		}
		return true
	}
	if ValidateSigma(sigma) != nil {
		for i := range dst {
			dst[i] = math.NaN()
		}
		return true
	}
	return false
}

// seeded is a deterministic Noise backed by a PCG generator.
type seeded struct {
	r *rand.Rand
}

// NewSeededNoise returns a deterministic Noise seeded with seed (PCG from math/rand/v2).
// It is meant for the simulator and tests; it provides no privacy because anyone who knows
// the seed can remove the noise. Secure reports false.
func NewSeededNoise(seed uint64) Noise {
	return &seeded{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// NewNoiseFromRand wraps an injected *rand.Rand as a (non-secure) Noise.
func NewNoiseFromRand(r *rand.Rand) Noise {
	return &seeded{r: r}
}

// Normal implements Noise.
func (s *seeded) Normal(dst []float64, sigma float64) {
	if fillSpecial(dst, sigma) {
		return
	}
	for i := range dst {
		dst[i] = s.r.NormFloat64() * sigma
	}
}

// Uniform implements Noise: a multiple of 2^-53 in (0,1).
func (s *seeded) Uniform() float64 {
	for {
		k := s.r.Uint64() >> 11
		if k != 0 {
			return float64(k) * 0x1p-53
		}
	}
}

// Secure implements Noise; always false.
func (s *seeded) Secure() bool { return false }

// ErrSeededNoise refuses a seeded (non-secure) noise source outside a test harness.
var ErrSeededNoise = errors.New("privacy: refusing a seeded (non-secure) noise source outside testnets")

// CheckNoise is the one rule for the noise source of a release outside the simulator: a
// source that is not Secure (a seeded generator, reproducible and predictable) is refused
// unless the caller is a test harness that allows it (allowSeeded), which must then say
// that its figures carry no guarantee. Both machines' drivers call it.
func CheckNoise(n Noise, allowSeeded bool) error {
	if n == nil {
		return errors.New("privacy: no noise source")
	}
	if !n.Secure() && !allowSeeded {
		return ErrSeededNoise
	}
	return nil
}
