package drive

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dpadmm/dpadmm/privacy"
)

// TestSeedMixSplitmix64: SeedMix(0, i, 0) is the splitmix64 finalizer of (i+1) times the
// golden gamma, i.e. the (i+1)-th output of splitmix64 seeded with 0, whose first outputs
// are published with the generator (Vigna, splitmix64.c).
func TestSeedMixSplitmix64(t *testing.T) {
	for i, want := range []uint64{0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f} {
		if got := SeedMix(0, i, 0); got != want {
			t.Errorf("SeedMix(0, %d, 0) = %#x, want %#x", i, got, want)
		}
	}
	// The purpose and the seed enter by xor before the finalizer.
	if SeedMix(0, 0, 1) == SeedMix(0, 0, 2) || SeedMix(1, 0, 1) == SeedMix(0, 0, 1) {
		t.Error("purpose or seed does not change the stream")
	}
}

// TestSeededSources: the checkpointable generators draw exactly as SeededRand and
// SeededNoise, and SeededHolder is the first draw of node -1's hop source.
func TestSeededSources(t *testing.T) {
	for _, i := range []int{-1, 0, 7} {
		hop, noise := SeededSources(99, i)
		a, b := rand.New(hop), SeededRand(99, i)
		for k := 0; k < 100; k++ {
			if x, y := a.IntN(1000), b.IntN(1000); x != y {
				t.Fatalf("node %d draw %d: next hop %d, SeededRand %d", i, k, x, y)
			}
		}
		x, y := make([]float64, 64), make([]float64, 64)
		privacy.NewNoiseFromRand(rand.New(noise)).Normal(x, 1)
		SeededNoise(99, i).Normal(y, 1)
		for k := range x {
			if math.Float64bits(x[k]) != math.Float64bits(y[k]) {
				t.Fatalf("node %d noise %d: %v, SeededNoise %v", i, k, x[k], y[k])
			}
		}
	}
	for _, n := range []int{1, 5, 50} {
		hop, _ := SeededSources(3, -1)
		if got, want := SeededHolder(3, n), rand.New(hop).IntN(n); got != want {
			t.Errorf("SeededHolder(3, %d) = %d, want %d", n, got, want)
		}
	}
}
