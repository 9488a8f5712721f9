package gossip

import (
	"fmt"
	"math"
)

// Schedule is one node's penalty schedule eta_i(2k-1), k = 1..K (MR-ADMM, Alg. 2). The single
// value of outer step k is used in the odd solve (14), the dual update (15) and the even step
// (16) of that step; conventional ADMM uses eta(t) for iteration t = k.
type Schedule struct {
	// Eta is the base penalty eta_i (> 0).
	Eta float64
	// Q is the growth factor q: eta_i(2k-1) = Eta * Q^k with k starting at 1 (digest 6.2
	// pitfall 3). Q == 0 or Q == 1 means a constant schedule.
	Q float64
	// Max caps a geometric schedule (0 = no cap); the convergence proof needs a bounded
	// schedule (digest 4.2).
	Max float64
	// List, when non-empty, gives eta_i(2k-1) explicitly (List[k-1]); Eta and Q are ignored.
	List []float64
}

// Constant returns the constant schedule eta.
func Constant(eta float64) Schedule { return Schedule{Eta: eta} }

// Geometric returns eta * q^k, k = 1, 2, ...
func Geometric(eta, q float64) Schedule { return Schedule{Eta: eta, Q: q} }

// At returns eta(k) for k >= 1.
func (s Schedule) At(k int) float64 {
	if len(s.List) > 0 {
		if k < 1 || k > len(s.List) {
			return math.NaN()
		}
		return s.List[k-1]
	}
	if s.Q == 0 || s.Q == 1 {
		return s.Eta
	}
	v := s.Eta * math.Pow(s.Q, float64(k))
	if s.Max > 0 && v > s.Max {
		v = s.Max
	}
	return v
}

// IsConstant reports whether the schedule is the same for every k in 1..K.
func (s Schedule) IsConstant(K int) bool {
	for k := 2; k <= K; k++ {
		if s.At(k) != s.At(1) {
			return false
		}
	}
	return true
}

// Validate checks that eta(k), k = 1..K, is finite, > 0 and non-decreasing.
func (s Schedule) Validate(K int) error {
	if len(s.List) > 0 && len(s.List) < K {
		return fmt.Errorf("gossip: penalty list has %d values, need %d", len(s.List), K)
	}
	if len(s.List) == 0 {
		if !(s.Eta > 0) || math.IsInf(s.Eta, 0) {
			return fmt.Errorf("gossip: eta must be > 0 and finite, got %v", s.Eta)
		}
		if s.Q != 0 && (!(s.Q >= 1) || math.IsInf(s.Q, 0)) {
			return fmt.Errorf("gossip: eta growth q must be >= 1 and finite (MR-ADMM needs a non-decreasing schedule), got %v", s.Q)
		}
		if s.Max < 0 || math.IsNaN(s.Max) {
			return fmt.Errorf("gossip: eta cap must be >= 0, got %v", s.Max)
		}
	}
	prev := 0.0
	for k := 1; k <= K; k++ {
		v := s.At(k)
		if !(v > 0) || math.IsInf(v, 0) {
			return fmt.Errorf("gossip: eta(k=%d) = %v must be > 0 and finite", k, v)
		}
		if v < prev {
			return fmt.Errorf("gossip: penalty schedule decreases at k=%d (%v < %v); MR-ADMM needs a non-decreasing schedule", k, v, prev)
		}
		prev = v
	}
	return nil
}

// Values returns eta(1..K).
func (s Schedule) Values(K int) []float64 {
	out := make([]float64, K)
	for k := range out {
		out[k] = s.At(k + 1)
	}
	return out
}
