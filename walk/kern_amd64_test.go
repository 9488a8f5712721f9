//go:build amd64 && !purego

package walk

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
)

// TestRankOneKernelDecision: the fused AVX2 kernel computes s and the clipping bound with the
// same bits as the Go code (s = K (y - (a.z + a.w)) from the sums of sums8, clipBound), so
// that with C set to the Go bound it completes the update, and with C one ulp below it
// returns 2 (clipping may be due) having written nothing. It also returns 1, writing
// nothing, for a NaN in z or zhat. Without AVX2 on this CPU the kernel is never used, and
// the test says so.
func TestRankOneKernelDecision(t *testing.T) {
	if !slices.Contains(kernelsAvailable(), kernAVX2) {
		t.Log("no AVX2 on this CPU: the fused kernel is not used here")
		return
	}
	r := rand.New(rand.NewPCG(21, 22))
	for trial := 0; trial < 300; trial++ {
		p := 8 * (1 + r.IntN(9))
		a, u, z, zhat := make([]float64, p), make([]float64, p), make([]float64, p), make([]float64, p)
		for k := range a {
			a[k], u[k], z[k], zhat[k] = r.NormFloat64(), r.NormFloat64(), r.NormFloat64(), r.NormFloat64()
		}
		reg := consensus.Regularizer{L1: 0.1 * r.Float64()}
		lambda := []float64{0.5, 0.3}[trial%2]
		cfg := Config{Node: 0, Nodes: 9, Gamma: 0.5 + r.Float64(), Lambda: lambda, Clip: math.Inf(1), Reg: reg,
			Rand: rand.New(rand.NewPCG(1, 1)), Run: "r"}
		m := newMachine(t, cfg, oneRow(a, r.NormFloat64()), 1)
		if err := m.Restore(Checkpoint{U: u}); err != nil {
			t.Fatal(err)
		}
		var o [36]float64
		sums8(z, zhat, m.u, a, p, &o)
		az := ((o[0] + o[1]) + (o[2] + o[3])) + ((o[4] + o[5]) + (o[6] + o[7]))
		aw := ((o[8] + o[9]) + (o[10] + o[11])) + ((o[12] + o[13]) + (o[14] + o[15]))
		ww := ((o[16] + o[17]) + (o[18] + o[19])) + ((o[20] + o[21]) + (o[22] + o[23]))
		s := m.r1.K * (m.r1.Y - (az + aw))
		bound := m.clipBound(ww, aw, s, p)
		run := func(clip float64, z, zhat []float64) (int, []float64) {
			pp := m.p1
			pp[4] = clip
			uu := slices.Clone(m.u)
			zz, hh := slices.Clone(z), slices.Clone(zhat)
			ret := rankOneAVX2(&zz[0], &hh[0], &uu[0], &a[0], p, &pp)
			if ret != 0 && (!slices.Equal(uu, m.u) || !same(zz, z) || !same(hh, zhat)) {
				t.Fatalf("trial %d: kernel returned %d but wrote", trial, ret)
			}
			if ret != 1 && math.Float64bits(pp[14]) != math.Float64bits(s) {
				t.Fatalf("trial %d: kernel s = %v, Go %v", trial, pp[14], s)
			}
			return ret, uu
		}
		if ret, _ := run(bound, z, zhat); ret != 0 {
			t.Fatalf("trial %d: C = bound %v: kernel returned %d, want 0", trial, bound, ret)
		}
		if ret, _ := run(math.Nextafter(bound, 0), z, zhat); ret != 2 {
			t.Fatalf("trial %d: C just below bound %v: kernel returned %d, want 2", trial, bound, ret)
		}
		bad := slices.Clone(zhat)
		bad[r.IntN(p)] = math.NaN()
		if ret, _ := run(bound, z, bad); ret != 1 {
			t.Fatalf("trial %d: NaN in zhat: kernel returned %d, want 1", trial, ret)
		}
		bad = slices.Clone(z)
		bad[r.IntN(p)] = math.Inf(-1)
		if ret, _ := run(bound, bad, zhat); ret != 1 {
			t.Fatalf("trial %d: -Inf in z: kernel returned %d, want 1", trial, ret)
		}
	}
}

// same compares bit patterns (NaN included).
func same(x, y []float64) bool {
	for k := range x {
		if math.Float64bits(x[k]) != math.Float64bits(y[k]) {
			return false
		}
	}
	return len(x) == len(y)
}
