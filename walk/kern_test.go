package walk

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
)

// countNoise counts the samples drawn from a seeded source.
type countNoise struct {
	privacy.Noise
	n int
}

func (c *countNoise) Normal(dst []float64, sigma float64) {
	c.n += len(dst)
	c.Noise.Normal(dst, sigma)
}

// TestKernelsAgree: every kernel available on this machine (pure Go, and on amd64 the SSE2
// and AVX2 assembly) gives the same bits for z, zhat and u after a sequence of updates, over
// dimensions 1..70 (most not a multiple of 4), with and without noise, clipping active or
// not, and L1 and L2 weights zero or not. The pure-Go results are in turn checked against the
// general (Cholesky) path by TestRankOneUpdateMatchesGeneral.
func TestKernelsAgree(t *testing.T) {
	defer func(k int) { kernel = k }(kernel)
	ks := kernelsAvailable()
	t.Logf("kernels: default %s, available %d", kernelNames[kernel], len(ks))
	r := rand.New(rand.NewPCG(11, 12))
	for trial := 0; trial < 400; trial++ {
		p := 1 + r.IntN(70)
		if trial < 8 {
			p = []int{1, 3, 4, 5, 7, 8, 64, 67}[trial]
		}
		a, u, zhat := make([]float64, p), make([]float64, p), make([]float64, p)
		for k := range a {
			a[k] = r.NormFloat64()
			u[k] = r.NormFloat64()
			zhat[k] = 0.3 * r.NormFloat64()
		}
		var reg consensus.Regularizer
		if trial%2 == 0 {
			reg.L1 = 0.2 * r.Float64()
		}
		if trial%3 == 0 {
			reg.L2 = 0.3 * r.Float64()
		}
		clip := []float64{math.Inf(1), 1e3, 0.05, 0.5}[trial%4]
		sigma := 0.0
		if trial%5 < 2 {
			sigma = 0.8
		}
		y, gamma := r.NormFloat64(), 0.3+r.Float64()
		seed := r.Uint64()
		run := func(kern int) (z, h, uu []float64, drawn int) {
			kernel = kern
			cfg := Config{Node: 0, Nodes: 9, Gamma: gamma, Lambda: 0.5, Clip: clip, Sigma: sigma, Reg: reg,
				Rand: rand.New(rand.NewPCG(1, 1)), Run: "r"}
			cn := &countNoise{Noise: privacy.NewSeededNoise(seed)}
			if sigma > 0 {
				cfg.Noise = cn
			}
			m := newMachine(t, cfg, oneRow(a, y), 1)
			if !m.rankOne {
				t.Fatal("one-row squared loss without the rank-one form")
			}
			if err := m.Restore(Checkpoint{U: u}); err != nil {
				t.Fatal(err)
			}
			z, h = make([]float64, p), append([]float64(nil), zhat...)
			reg.Prox(z, h, gamma)
			for range 5 {
				if err := m.update(z, h); err != nil {
					t.Fatal(err)
				}
			}
			return z, h, m.U(), cn.n
		}
		z0, h0, u0, n0 := run(kernGo)
		if sigma > 0 && n0 != 5*p {
			t.Fatalf("trial %d: %d noise samples drawn, want %d", trial, n0, 5*p)
		}
		for _, kern := range ks[1:] {
			z, h, uu, n := run(kern)
			if n != n0 {
				t.Fatalf("trial %d kernel %s: %d noise samples, Go %d", trial, kernelNames[kern], n, n0)
			}
			for k := 0; k < p; k++ {
				if math.Float64bits(z[k]) != math.Float64bits(z0[k]) || math.Float64bits(h[k]) != math.Float64bits(h0[k]) ||
					math.Float64bits(uu[k]) != math.Float64bits(u0[k]) {
					t.Fatalf("trial %d (p=%d clip=%v sigma=%v reg=%+v) kernel %s coord %d: z %v/%v zhat %v/%v u %v/%v",
						trial, p, clip, sigma, reg, kernelNames[kern], k, z[k], z0[k], h[k], h0[k], uu[k], u0[k])
				}
			}
		}
	}
}

// TestKernelSoftThreshold: the branch-free soft-threshold of the assembly sweeps equals soft
// bit for bit at and around the thresholds +-t, at +-0, and for t = 0. With z = u and s = 0
// the step du is +0, so the sweep leaves zhat as given and writes z = soft(zhat).
func TestKernelSoftThreshold(t *testing.T) {
	defer func(k int) { kernel = k }(kernel)
	for _, tt := range []float64{0, 0.25, 1e-300} {
		sh := 1 / 1.3
		vals := []float64{tt, -tt, math.Nextafter(tt, 1), math.Nextafter(tt, -1), math.Nextafter(-tt, 1),
			math.Nextafter(-tt, -1), 0, math.Copysign(0, -1), 1e300, -1e300, 2 * tt, -2 * tt, 0.1, -0.1, 5, -5}
		p := len(vals)
		for _, kern := range kernelsAvailable() {
			kernel = kern
			z, u, a := make([]float64, p), make([]float64, p), make([]float64, p)
			for k := range z {
				z[k], u[k], a[k] = float64(k), float64(k), 1
			}
			h := append([]float64(nil), vals...)
			kk := [8]float64{0, 1, 0.5, tt, -tt, sh, 0}
			k0 := sweepKernel(z, h, u, a, nil, &kk)
			if kern != kernGo && k0 != p {
				t.Fatalf("kernel %s swept %d of %d", kernelNames[kern], k0, p)
			}
			for k := 0; k < k0; k++ {
				du := kk[1] * ((float64(k) - float64(k)) + kk[0]*a[k]) // +0
				hw := vals[k] + du*kk[2]                               // vals[k], but -0 + +0 = +0
				want := soft(hw, tt, sh)
				if math.Float64bits(z[k]) != math.Float64bits(want) || math.Float64bits(h[k]) != math.Float64bits(hw) {
					t.Fatalf("kernel %s t=%v: soft(%v) = %v, want %v (zhat %v, want %v)", kernelNames[kern], tt, vals[k], z[k], want, h[k], hw)
				}
			}
		}
	}
}

// TestRankOneRefusesNonFinite: a token with NaN or Inf anywhere (in the kernels' prefix or
// in the Go tail) is refused before anything is written: u, z, zhat unchanged, no noise
// drawn, no update counted, no ledger entry. Then a good token is accepted, and so is a
// finite token whose sums overflow.
func TestRankOneRefusesNonFinite(t *testing.T) {
	defer func(k int) { kernel = k }(kernel)
	r := rand.New(rand.NewPCG(2, 3))
	for _, kc := range kernelCases() {
		kern, p, sigma := kc.kern, kc.p, kc.sigma
		kernel = kern
		a := make([]float64, p)
		for k := range a {
			a[k] = r.NormFloat64()
		}
		cn := &countNoise{Noise: privacy.NewSeededNoise(1)}
		cfg := Config{Node: 0, Nodes: 3, Gamma: 1, Lambda: 0.5, Clip: 1, Sigma: sigma, Noise: cn,
			Rand: rand.New(rand.NewPCG(1, 1)), Run: "r", Walk: 1}
		m := newMachine(t, cfg, oneRow(a, 1), 1)
		u0 := m.U()
		for _, pos := range []int{0, 3, 31, 63, p - 1} {
			for _, bad := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
				for _, inZhat := range []bool{false, true} {
					tok := NewToken("r", 1, p, consensus.Regularizer{}, 1)
					for k := range tok.Z {
						tok.Z[k], tok.Zhat[k] = 0.01*float64(k), 0.02*float64(k)
					}
					if inZhat {
						tok.Zhat[pos] = bad
					} else {
						tok.Z[pos] = bad
					}
					z0, h0 := append([]float64(nil), tok.Z...), append([]float64(nil), tok.Zhat...)
					if err := m.Step(Message{Token: tok}); err != ErrNotFinite {
						t.Fatalf("kernel %s: %v at %d (zhat %v): err %v", kernelNames[kern], bad, pos, inZhat, err)
					}
					for k := range u0 {
						same := func(x, y float64) bool { return math.Float64bits(x) == math.Float64bits(y) }
						if !same(m.u[k], u0[k]) || !same(tok.Z[k], z0[k]) || !same(tok.Zhat[k], h0[k]) {
							t.Fatalf("kernel %s: refused token changed coordinate %d", kernelNames[kern], k)
						}
					}
					if m.HasReady() || m.Updates() != 0 || cn.n != 0 || len(m.Ready().Ledger) != 0 {
						t.Fatalf("kernel %s: refused token left state: ready %v updates %d noise %d", kernelNames[kern], m.HasReady(), m.Updates(), cn.n)
					}
				}
			}
		}
		if err := m.Step(Message{Token: NewToken("r", 1, p, consensus.Regularizer{}, 1)}); err != nil {
			t.Fatal(err)
		}
		drawn := 0
		if sigma > 0 {
			drawn = p
		}
		if rd := m.Ready(); len(rd.Ledger) != 1 || rd.Ledger[0].Mechanism != MechGaussian || m.Updates() != 1 || cn.n != drawn {
			t.Fatalf("kernel %s: good token: ledger %+v updates %d noise %d", kernelNames[kern], rd.Ledger, m.Updates(), cn.n)
		}
		m.Advance(m.Ready())
		// A finite token whose sums overflow is not refused.
		tok := NewToken("r", 1, p, consensus.Regularizer{}, 1)
		tok.Z[p/2], tok.Zhat[p-1] = 1e300, -1e300
		if err := m.Step(Message{Token: tok}); err != nil || m.Updates() != 2 {
			t.Fatalf("kernel %s: finite token with overflowing sums: err %v, updates %d", kernelNames[kern], err, m.Updates())
		}
	}
}

type kernelCase struct {
	kern, p int
	sigma   float64
}

// kernelCases lists every available kernel with dimensions on and off the kernels' blocks,
// with and without noise (the noiseless AVX2 case runs the fused kernel when p is a
// multiple of 8).
func kernelCases() []kernelCase {
	var cs []kernelCase
	for _, kern := range kernelsAvailable() {
		for _, p := range []int{64, 67} {
			for _, sigma := range []float64{0, 1} {
				cs = append(cs, kernelCase{kern, p, sigma})
			}
		}
	}
	return cs
}

// TestAllFinite: AllFinite agrees with a coordinate-by-coordinate check for every kernel,
// every length up to 40 and a NaN, an Inf or a huge finite value at every position.
func TestAllFinite(t *testing.T) {
	defer func(k int) { kernel = k }(kernel)
	for _, kern := range kernelsAvailable() {
		kernel = kern
		for n := 0; n <= 40; n++ {
			v := make([]float64, n)
			for k := range v {
				v[k] = float64(k) - 7.5
			}
			if !AllFinite(v) {
				t.Fatalf("kernel %s n=%d: finite vector reported non-finite", kernelNames[kern], n)
			}
			for pos := 0; pos < n; pos++ {
				for _, bad := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), math.MaxFloat64, -math.MaxFloat64} {
					old := v[pos]
					v[pos] = bad
					want := !math.IsNaN(bad) && !math.IsInf(bad, 0)
					if got := AllFinite(v); got != want {
						t.Fatalf("kernel %s n=%d: %v at %d: AllFinite %v, want %v", kernelNames[kern], n, bad, pos, got, want)
					}
					v[pos] = old
				}
			}
		}
	}
}
