package gossip

import (
	"math"

	"github.com/dpadmm/dpadmm/privacy"
)

// SampleGamma draws from Gamma(shape, scale) with the Marsaglia-Tsang method ("A simple
// method for generating gamma variables", ACM TOMS 26(3), 2000), using standard normals and
// uniforms from the injected source. For shape < 1 it uses Gamma(shape+1) * U^(1/shape).
// It returns NaN for a shape or scale that is not finite and > 0.
func SampleGamma(src privacy.Noise, shape, scale float64) float64 {
	if !(shape > 0) || !(scale > 0) || math.IsInf(shape, 0) || math.IsInf(scale, 0) {
		return math.NaN()
	}
	if shape < 1 {
		u := src.Uniform()
		return SampleGamma(src, shape+1, scale) * math.Pow(u, 1/shape)
	}
	d := shape - 1.0/3
	c := 1 / math.Sqrt(9*d)
	var z [1]float64
	for {
		src.Normal(z[:], 1)
		x := z[0]
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := src.Uniform()
		if u < 1-0.0331*x*x*x*x {
			return d * v * scale
		}
		if math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v * scale
		}
	}
}

// SampleDirection fills dst with a point uniform on the unit sphere (a normalised standard
// normal vector, redrawn in the null event of a zero vector).
func SampleDirection(src privacy.Noise, dst []float64) {
	if len(dst) == 0 {
		return
	}
	for {
		src.Normal(dst, 1)
		s := 0.0
		for _, v := range dst {
			s += v * v
		}
		if s > 0 && !math.IsInf(s, 0) && !math.IsNaN(s) {
			inv := 1 / math.Sqrt(s)
			for i := range dst {
				dst[i] *= inv
			}
			return
		}
	}
}

// SampleObjNoise fills dst with a draw of density proportional to exp(-alpha ||eps||_2) on
// R^d (d = len(dst)): the norm is Gamma(shape d, scale 1/alpha) and the direction uniform
// (Zhang-Khalili-Liu 2020, Sec. III-C). alpha = +Inf gives zeros (no noise).
func SampleObjNoise(src privacy.Noise, dst []float64, alpha float64) {
	if math.IsInf(alpha, 1) {
		clear(dst)
		return
	}
	r := SampleGamma(src, float64(len(dst)), 1/alpha)
	SampleDirection(src, dst)
	for i := range dst {
		dst[i] *= r
	}
}
