package testnet

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/dpadmm/dpadmm/gossip"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/testnet/sim"
)

// TestGossipNodesStaticEtaFileMatchesSim: four full nodes (node.Node.RunRADMM) with a
// static membership and a per-node MR-ADMM penalty table end with the simulator's models
// for the same options and seed, bit for bit (every node and the average of
// RunGossip's report), and each node's ledger equals the simulator's machine's ledger
// (iteration, mechanism, penalty, epsilon).
func TestGossipNodesStaticEtaFileMatchesSim(t *testing.T) {
	train, test := gossipData(t, 160)
	o := gossipOpts(train, test, "mradmm", "ring", 12, 2)
	o.Nodes = 4
	K := 6
	o.NodeSchedules = make([]gossip.Schedule, o.Nodes)
	for i := range o.NodeSchedules {
		for k := 0; k < K; k++ {
			o.NodeSchedules[i].List = append(o.NodeSchedules[i].List, (0.05+0.02*float64(i))*math.Pow(1.15, float64(k)))
		}
	}
	rep, err := sim.RunGossip(o)
	if err != nil {
		t.Fatal(err)
	}
	ref := runSimLedgers(t, o)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	models, err := RunGossipNodes(ctx, o, "gnodes-test", t.TempDir(), 10*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("4 static nodes, %d iterations: %v", o.Iters, time.Since(start))
	all := make([][]float64, len(models))
	for i, m := range models {
		all[i] = m.Model
		if !gmemSameBits(m.Model, ref.Machines[i].ModelView()) {
			t.Fatalf("node %d: model %v, simulator %v", i, m.Model, ref.Machines[i].ModelView())
		}
		if m.TotalRows != train.Rows || m.Nodes != 4 || len(m.Stale) != 0 {
			t.Fatalf("node %d: model.json %+v", i, m)
		}
		want := 0.0
		for k, e := range ref.Ledgers[i] {
			if e.Mechanism == privacy.MechPure {
				want += e.Epsilon
				if e.Lambda != o.NodeSchedules[i].List[(k-1)/2] {
					t.Fatalf("node %d: simulator charged iteration %d with eta %v", i, k, e.Lambda)
				}
			}
		}
		if float64(m.Privacy.Ledger) != want || !m.Privacy.ConditionsHold {
			t.Fatalf("node %d: ledger epsilon %v, simulator %v (%+v)", i, m.Privacy.Ledger, want, m.Privacy)
		}
	}
	if avg, _ := sim.AverageModels(all, train.Cols); !gmemSameBits(avg, rep.Model) {
		t.Fatalf("average %v, simulator report %v", avg, rep.Model)
	}
}
