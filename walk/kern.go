package walk

// Kernels of the one-row update: the pure-Go loops, or the assembly versions of the same
// loops where the architecture has them (kern_amd64.s): on amd64 AVX2 when the CPU and OS
// support it (golang.org/x/sys/cpu), SSE2 otherwise; other architectures and the purego
// build tag use the Go loops only. The kernels do the operations of the Go loops in the same
// order and use no fused multiply-add, so every kernel gives the same bits (TestKernelsAgree):
// a run is reproducible from its seed on a given machine whatever kernel it uses. With AVX2
// and no noise, a dimension that is a multiple of 8 takes the whole update in one call
// (rankOneAVX2).
const (
	kernGo = iota
	kernSSE2
	kernAVX2
)

var kernelNames = [...]string{kernGo: "go", kernSSE2: "sse2", kernAVX2: "avx2"}
