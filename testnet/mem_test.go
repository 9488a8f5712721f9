package testnet

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/testnet/sim"
)

// TestMemMatchesSim runs the same seed through the simulator and through real libp2p
// hosts in this process and requires the same final model, bit for bit.
func TestMemMatchesSim(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	d, err := consensus.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	const n, hops, seed = 5, 200, 42
	sh, err := consensus.Split(d, n, "iid", seed)
	if err != nil {
		t.Fatal(err)
	}
	prob := consensus.Problem{Loss: consensus.Logistic, Reg: consensus.Regularizer{L2: 0.01}}
	gs, err := sim.NewSim(sim.SimConfig{Shards: sh, Problem: prob, Gamma: 1, Lambda: 0.5, Clip: 1, Sigma: 0.8, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	if err := gs.RunHops(hops, 0, nil); err != nil {
		t.Fatal(err)
	}
	res, err := RunMem(ctx, MemConfig{Shards: sh, Problem: prob, Gamma: 1, Lambda: 0.5, Clip: 1, Sigma: 0.8, Seed: seed, Hops: hops})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("mem: %d hops over %d hosts in %v (%.0f hops/s)", hops, n, res.Wall, hops/res.Wall.Seconds())
	want := gs.Z()
	if len(res.Model) != len(want) {
		t.Fatalf("dimension %d, want %d", len(res.Model), len(want))
	}
	for k := range want {
		if math.Float64bits(res.Model[k]) != math.Float64bits(want[k]) {
			t.Fatalf("coordinate %d: mem %v, sim %v", k, res.Model[k], want[k])
		}
	}
	nonzero := false
	for _, v := range want {
		nonzero = nonzero || v != 0
	}
	if !nonzero {
		t.Fatal("model is all zeros: the comparison is vacuous")
	}
	simUpd := gs.Updates()
	total := 0
	for i := range simUpd {
		if res.Updates[i] != simUpd[i] {
			t.Fatalf("node %d: %d updates on mem, %d in sim", i, res.Updates[i], simUpd[i])
		}
		total += res.Ledger[i]
	}
	if total != hops {
		t.Fatalf("ledger entries %d, want %d", total, hops)
	}
}
