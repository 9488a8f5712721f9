//go:build amd64 && !purego

package walk

import "golang.org/x/sys/cpu"

// The amd64 kernels of the one-row update (kern_amd64.s): AVX2 when the CPU and OS support
// it, SSE2 (part of the amd64 baseline) otherwise. They do the same operations in the same
// order as the Go loops of updateRankOne and apply, so the results are the same bits.

//go:noescape
func sumsAVX2(z, zhat, u, a *float64, n int, out *[36]float64)

//go:noescape
func sumsSSE2(z, zhat, u, a *float64, n int, out *[16]float64)

//go:noescape
func sweepAVX2(z, zhat, u, a, eta *float64, n int, k *[8]float64)

//go:noescape
func sweepSSE2(z, zhat, u, a, eta *float64, n int, k *[8]float64)

// kernel selects the kernels: kernAVX2, kernSSE2 or kernGo. Tests switch it to compare.
var kernel = defaultKernel()

func defaultKernel() int {
	if cpu.X86.HasAVX2 {
		return kernAVX2
	}
	return kernSSE2
}

// kernelsAvailable lists the kernels this build and CPU can run.
func kernelsAvailable() []int {
	if cpu.X86.HasAVX2 {
		return []int{kernGo, kernSSE2, kernAVX2}
	}
	return []int{kernGo, kernSSE2}
}

// sumsKernel runs the first sweep of updateRankOne over the longest prefix of z whose length
// is a multiple of 8, writing its lane sums to o[0:32] (see sumsAVX2), and returns the length
// of that prefix (0 when no kernel is in use) and whether o[32:36] holds the lane sums
// reduced. z, zhat, u and a have the same length.
func sumsKernel(z, zhat, u, a []float64, o *[36]float64) (int, bool) {
	n := len(z) &^ 7
	if n == 0 || kernel == kernGo {
		return 0, false
	}
	_, _, _ = zhat[n-1], u[n-1], a[n-1]
	if kernel == kernAVX2 {
		sumsAVX2(&z[0], &zhat[0], &u[0], &a[0], n, o)
		return n, true
	}
	var h [16]float64
	for j := 0; j < 8; j += 4 {
		sumsSSE2(&z[j], &zhat[j], &u[j], &a[j], n, &h)
		copy(o[j:j+4], h[0:4])
		copy(o[8+j:12+j], h[4:8])
		copy(o[16+j:20+j], h[8:12])
		copy(o[24+j:28+j], h[12:16])
	}
	return n, false
}

// sweepKernel runs the final sweep of apply (the rank-one form, d_k = (z_k - u_k) + s a_k)
// over the longest prefix whose length is a multiple of 4 and returns its length. eta == nil
// means no noise. k = s, sc, inv, t, -t, sh, l.
func sweepKernel(z, zhat, u, a, eta []float64, k *[8]float64) int {
	n := len(z) &^ 3
	if n == 0 || kernel == kernGo {
		return 0
	}
	_, _, _ = zhat[n-1], u[n-1], a[n-1]
	var e *float64
	if eta != nil {
		_ = eta[n-1]
		e = &eta[0]
	}
	if kernel == kernAVX2 {
		sweepAVX2(&z[0], &zhat[0], &u[0], &a[0], e, n, k)
	} else {
		sweepSSE2(&z[0], &zhat[0], &u[0], &a[0], e, n, k)
	}
	return n
}

//go:noescape
func zerosAVX2(v *float64, n int) float64

//go:noescape
func zerosSSE2(v *float64, n int) float64

// zerosKernel returns the sum of v_k*0 over a prefix of v (0 when all are finite, NaN
// otherwise) and the length of that prefix: the longest multiple of 16 (AVX2) or 8 (SSE2).
func zerosKernel(v []float64) (float64, int) {
	switch {
	case kernel == kernAVX2 && len(v) >= 16:
		n := len(v) &^ 15
		return zerosAVX2(&v[0], n), n
	case kernel != kernGo && len(v) >= 8:
		n := len(v) &^ 7
		return zerosSSE2(&v[0], n), n
	}
	return 0, 0
}

//go:noescape
func rankOneAVX2(z, zhat, u, a *float64, n int, p *[16]float64) int

// rankOneKernel runs the whole noiseless one-row update in one call (see rankOneAVX2) and
// reports whether it did; false leaves everything as it was, for the general code.
func rankOneKernel(z, zhat, u, a []float64, p *[16]float64) bool {
	n := len(z)
	if n == 0 || n&7 != 0 || kernel != kernAVX2 {
		return false
	}
	_, _, _ = zhat[n-1], u[n-1], a[n-1]
	return rankOneAVX2(&z[0], &zhat[0], &u[0], &a[0], n, p) == 0
}
