//go:build !amd64 || purego

package walk

// Without assembly kernels (other architectures, or the purego build tag) the Go loops of
// updateRankOne and apply do all the work.

var kernel = kernGo

func kernelsAvailable() []int { return []int{kernGo} }

func sumsKernel(z, zhat, u, a []float64, o *[36]float64) (int, bool) { return 0, false }

func sweepKernel(z, zhat, u, a, eta []float64, k *[8]float64) int { return 0 }

func zerosKernel(v []float64) (float64, int) { return 0, 0 }

func rankOneKernel(z, zhat, u, a []float64, p *[16]float64) bool { return false }
