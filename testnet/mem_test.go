package testnet

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
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

// TestMemFreshDirs: RunMem marks as fresh (node.Harness.FreshDataDir: no position check)
// exactly the data directories it creates; a node directory that already exists under
// MemConfig.Dir, whose ledger members may have counted, keeps the check.
func TestMemFreshDirs(t *testing.T) {
	d, _ := consensus.SyntheticLasso(30, 3, 2, 0.1, 1)
	sh, err := consensus.Split(d, 3, "iid", 1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "node-1"), 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := MemConfig{Shards: sh}
	m, err := cfg.members(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, false, true}; !slices.Equal(m.fresh, want) {
		t.Fatalf("fresh %v, want %v", m.fresh, want)
	}
}
