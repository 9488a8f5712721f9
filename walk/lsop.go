package walk

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/dsp/fourier"
)

// LSOperator applies the Laplacian smoothing operator LS_nu = Q_nu^-1 of Liu et al. 2022
// (TIFS, "Laplacian Smoothing Stochastic ADMMs With Differential Privacy Guarantees",
// sec. III-A, eq. (2)), where Q_nu = I - nu L and L is the 1-D discrete Laplacian with
// periodic boundary: Q_nu is the symmetric circulant matrix with 1 + 2 nu on the diagonal
// and -nu on the two cyclic off-diagonals (for p = 2 both land on the same cell, for p = 1
// Q_nu = [1]). Its eigenvalues are
//
//	den_k = 1 + 2 nu - 2 nu cos(2 pi k / p),  k = 0..p-1,  1 <= den_k <= 1 + 4 nu,
//
// so LS_nu a = ifft(fft(a)_k / den_k). The real FFT of gonum (an FFTPACK port, any length
// p) returns the p/2+1 coefficients k = 0..floor(p/2); those of k > p/2 are their
// conjugates and den_{p-k} = den_k, so dividing the half spectrum is the whole filter. The
// transforms are unnormalized (Coefficients then Sequence multiplies by p): the
// precomputed factors are 1/(p den_k). den_0 = 1, so the sum of the coordinates is
// preserved. nu = 0 is the identity, applied as a copy (bit for bit).
//
// An LSOperator owns its work buffers: it is not safe for concurrent use.
type LSOperator struct {
	nu    float64
	p     int
	fft   *fourier.FFT
	scale []float64    // 1/(p den_k), k = 0..p/2
	coef  []complex128 // work: the half spectrum
}

// NewLSOperator returns LS_nu for dimension p >= 1 and nu >= 0 (finite).
func NewLSOperator(p int, nu float64) (*LSOperator, error) {
	if p < 1 {
		return nil, fmt.Errorf("walk: ls: dimension must be >= 1, got %d", p)
	}
	if !(nu >= 0) || math.IsInf(nu, 0) {
		return nil, fmt.Errorf("walk: ls: nu must be finite and >= 0, got %v", nu)
	}
	o := &LSOperator{nu: nu, p: p}
	if nu == 0 {
		return o, nil
	}
	o.fft = fourier.NewFFT(p)
	o.scale = make([]float64, p/2+1)
	o.coef = make([]complex128, p/2+1)
	for k := range o.scale {
		o.scale[k] = 1 / (float64(p) * LSEigen(p, nu, k))
	}
	return o, nil
}

// LSEigen returns den_k = 1 + 2 nu - 2 nu cos(2 pi k / p), the k-th eigenvalue of Q_nu.
func LSEigen(p int, nu float64, k int) float64 {
	return 1 + 2*nu - 2*nu*math.Cos(2*math.Pi*float64(k)/float64(p))
}

// Nu returns the smoothing parameter.
func (o *LSOperator) Nu() float64 { return o.nu }

// Apply sets dst = Q_nu^-1 src. dst and src must have length p; they may be the same slice.
// It does not allocate.
func (o *LSOperator) Apply(dst, src []float64) {
	if o.nu == 0 {
		copy(dst[:o.p], src[:o.p])
		return
	}
	c := o.fft.Coefficients(o.coef, src[:o.p])
	for k, s := range o.scale {
		c[k] = complex(real(c[k])*s, imag(c[k])*s)
	}
	o.fft.Sequence(dst[:o.p], c)
}

// Tau returns tau = trace(Q_nu^-1)/p = (1/p) sum_k 1/den_k, the factor by which LS_nu
// shrinks the expected squared norm of isotropic noise (digest notation; Liu et al. 2022,
// Remark 1).
func (o *LSOperator) Tau() float64 {
	t := 0.0
	for k := 0; k < o.p; k++ {
		t += 1 / LSEigen(o.p, o.nu, k)
	}
	return t / float64(o.p)
}
