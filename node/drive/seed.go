package drive

import (
	"math/rand/v2"

	"github.com/dpadmm/dpadmm/privacy"
)

// Seeded randomness of testnets. A run with seed S gives every node i its own streams,
// each derived from (S, i, purpose) by SeedMix, so that the simulator, the in-process
// network and the process network (a node started with --seed S) draw exactly the same
// numbers. None of them is secure: a node accepts them only with AllowSeededNoise.
//
// Purposes in use (a new stream takes a new purpose):
//
//	1, 2   next hop of the walk (SeededRand; node -1: the initial holder)
//	3      DP noise (SeededNoise)
//	4, 5   f_i(0) of a neighbour-exchange node (SeededRADMMInit); walk custody backups
//	7, 8   the fault schedule of the walk's crash study (node -2)
//	9      heartbeat latencies of the fault network
//	11, 12 the privacy audit's noise and decisions

// SeedMix returns the seed of node i's stream for purpose under the run seed: the
// splitmix64 finalizer of seed ^ (i+1)*0x9e3779b97f4a7c15 ^ purpose*0xbf58476d1ce4e5b9.
func SeedMix(seed uint64, i int, purpose uint64) uint64 {
	z := seed ^ (uint64(i)+1)*0x9e3779b97f4a7c15 ^ purpose*0xbf58476d1ce4e5b9
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// SeededSources returns node i's next-hop and noise generators for a run seed, in the
// checkpointable form of Config.Sources: rand.New(hop) draws as SeededRand(seed, i) and
// privacy.NewNoiseFromRand(rand.New(noise)) as SeededNoise(seed, i).
func SeededSources(seed uint64, i int) (hop, noise *rand.PCG) {
	s := SeedMix(seed, i, 3)
	// privacy.NewSeededNoise(s) is PCG(s, s^0x9e3779b97f4a7c15); TestSeededSources checks it.
	return rand.NewPCG(SeedMix(seed, i, 1), SeedMix(seed, i, 2)), rand.NewPCG(s, s^0x9e3779b97f4a7c15)
}

// SeededRand returns node i's next-hop source for a run seed (Config.Rand).
func SeededRand(seed uint64, i int) *rand.Rand {
	return rand.New(rand.NewPCG(SeedMix(seed, i, 1), SeedMix(seed, i, 2)))
}

// SeededHolder returns the initial token holder of a walk over n nodes for a run seed.
func SeededHolder(seed uint64, n int) int { return SeededRand(seed, -1).IntN(n) }

// SeededNoise returns node i's DP noise source for a run seed (Config.Noise).
func SeededNoise(seed uint64, i int) privacy.Noise {
	return privacy.NewSeededNoise(SeedMix(seed, i, 3))
}

// SeededRADMMInit returns the source of f_i(0) of neighbour-exchange node i for a run
// seed (Config.Rand of a neighbour-exchange node).
func SeededRADMMInit(seed uint64, i int) *rand.Rand {
	return rand.New(rand.NewPCG(SeedMix(seed, i, 4), SeedMix(seed, i, 5)))
}
