package faultsim

import (
	"flag"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/dpadmm/dpadmm/gossip"
	"github.com/dpadmm/dpadmm/testnet/sim"
)

var gossipFaultSeeds = flag.Int("gossip-fault-seeds", 200, "seeds per policy of TestGossipFaultStudy (the README's figures use 1000)")

// gfOpts is the run of the R-ADMM fault study: private R-ADMM (alpha 2, seeded noise) on a
// ring of 8 nodes, 30 iterations.
func gfOpts(t *testing.T, seed uint64) sim.GossipOptions {
	train, test := gossipData(t, 160)
	o := gossipOpts(train, test, "radmm", "ring", 30, 2)
	o.Seed = seed
	return o
}

// simModels runs the lockstep simulator (GossipSim) for o and returns its final models.
func simModels(t *testing.T, o sim.GossipOptions) [][]float64 {
	t.Helper()
	sim := runSimLedgers(t, o)
	var out [][]float64
	for _, m := range sim.Machines {
		out = append(out, m.Model())
	}
	return out
}

// gfSchedule draws the faults of one study run: one partition cutting off 1 to 3 random
// nodes and one crash of a random node with a restart (half of them at a release, once it
// is durable and before it is sent), each starting in ticks [20, 60) (after the first
// exchanges, far from the end of the run) and lasting 2 to 4 barrier timeouts; frames
// take 1-3 ticks, 5% of the attempts fail and 5% of the acknowledgements are lost.
func gfSchedule(seed uint64, n, barrier int) GossipFaultConfig {
	r := rand.New(rand.NewPCG(seed, 77))
	b := int64(barrier)
	perm := r.Perm(n)
	from := 20 + r.Int64N(40)
	at := 20 + r.Int64N(40)
	return GossipFaultConfig{Seed: seed, Faults: FaultSchedule{
		MaxLatency: 3, Loss: 0.05, Dup: 0.05,
		Partitions: []FaultPartition{{Nodes: perm[:1+r.IntN(3)], From: from, Until: from + 2*b + r.Int64N(2*b)}},
		Crashes:    []FaultCrash{{Node: r.IntN(n), At: at, Down: 2*b + r.Int64N(2*b), AtRelease: r.IntN(2) == 0}},
	}}
}

// checkGossipFaultInvariants asserts what every run must satisfy, whatever the faults.
func checkGossipFaultInvariants(t *testing.T, seed uint64, r *GossipFaultReport, o sim.GossipOptions) {
	t.Helper()
	switch {
	case r.UnderCount != 0:
		t.Fatalf("seed %d: %d frames delivered without a ledger entry of their sender naming the recipient", seed, r.UnderCount)
	case r.DoubleCharge != 0:
		t.Fatalf("seed %d: %d iterations charged twice", seed, r.DoubleCharge)
	case r.ReleaseConflicts != 0:
		t.Fatalf("seed %d: %d iterations sent with different vectors", seed, r.ReleaseConflicts)
	case r.ReplayMismatch != 0:
		t.Fatalf("seed %d: %d journaled releases not recomputed bit for bit", seed, r.ReplayMismatch)
	case r.BadStandIns != 0:
		t.Fatalf("seed %d: %d stand-ins that are not recorded stale uses of vectors received", seed, r.BadStandIns)
	}
	for i, l := range r.Ledgers {
		for k, e := range l {
			// One entry per release, in order; odd iterations charged, even ones at 0.
			if e.Hop != uint64(k) || (k%2 == 1) != (e.Epsilon > 0) {
				t.Fatalf("seed %d node %d: ledger entry %d is %s for iteration %d at epsilon %v", seed, i, k, e.Mechanism, e.Hop, e.Epsilon)
			}
		}
		if r.Ended[i] == "done" && len(l) != o.Iters+1 {
			t.Fatalf("seed %d node %d finished with %d ledger entries", seed, i, len(l))
		}
	}
}

// TestGossipFaultFreeMatchesSim: without partitions or crashes, but with random latency,
// failed attempts and lost acknowledgements, every policy ends with every model equal bit
// for bit to the lockstep simulator's; nothing is stopped or substituted.
func TestGossipFaultFreeMatchesSim(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		o := gfOpts(t, seed)
		want := simModels(t, o)
		for _, pol := range []gossip.MissingPolicy{gossip.MissingStop, gossip.MissingWait, gossip.MissingStale} {
			for _, loss := range []float64{0, 0.1} {
				cfg := GossipFaultConfig{Options: o, Seed: seed, Faults: FaultSchedule{Loss: loss, Dup: loss}, Exchange: gossip.ExchangeConfig{OnMissing: pol}}
				r, err := RunGossipFaults(cfg)
				if err != nil {
					t.Fatal(err)
				}
				checkGossipFaultInvariants(t, seed, r, o)
				if r.Finished() != o.Nodes || r.StaleUses() != 0 || r.Resent != 0 {
					t.Fatalf("seed %d %s loss %v: %v", seed, pol, loss, r)
				}
				if loss > 0 && (r.FailedAttempts == 0 || r.Duplicated == 0 || r.Ignored == 0) {
					t.Fatalf("seed %d: losses not exercised: %v", seed, r)
				}
				for i, m := range r.Models {
					if !sim.SameBits(m, want[i]) {
						t.Fatalf("seed %d %s loss %v: node %d model differs from the simulator's", seed, pol, loss, i)
					}
				}
			}
		}
	}
}

// TestGossipFaultSameSeedSameRun: the network is deterministic.
func TestGossipFaultSameSeedSameRun(t *testing.T) {
	o := gfOpts(t, 5)
	run := func(seed uint64) *GossipFaultReport {
		cfg := gfSchedule(seed, o.Nodes, 32)
		cfg.Options, cfg.Exchange.OnMissing = o, gossip.MissingStale
		r, err := RunGossipFaults(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a, b, c := run(9), run(9), run(10)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed, different runs")
	}
	if reflect.DeepEqual(a.Models, c.Models) {
		t.Fatal("different fault schedules gave the same models")
	}
}

// TestGossipFaultConfigErrors: bad schedules are refused.
func TestGossipFaultConfigErrors(t *testing.T) {
	o := gfOpts(t, 1)
	for _, c := range []GossipFaultConfig{
		{Faults: FaultSchedule{Loss: 1}},
		{Faults: FaultSchedule{Dup: -0.1}},
		{Faults: FaultSchedule{MaxLatency: -1}},
		{Faults: FaultSchedule{Partitions: []FaultPartition{{Nodes: []int{8}}}}},
		{Faults: FaultSchedule{Crashes: []FaultCrash{{Node: 1, At: 0}}}},
		{Faults: FaultSchedule{Crashes: []FaultCrash{{Node: 1, At: 5, Down: -1}}}},
		{Faults: FaultSchedule{Heartbeat: 5, Missed: 3}},
		{Exchange: gossip.ExchangeConfig{Barrier: 4, MaxWait: 2, Recheck: 1}},
	} {
		c.Options = o
		if _, err := RunGossipFaults(c); err == nil {
			t.Fatalf("%+v accepted", c)
		}
	}
}

// gfStats summarises the runs of one policy.
type gfStats struct {
	runs, outcomeOK, stale, staleRuns, maxStale, restarts, resent, ignored, dropped, failed, dups int
	slow, base                                                                                    []float64
}

func (s *gfStats) log(t *testing.T, what string) {
	t.Helper()
	sort.Float64s(s.slow)
	sort.Float64s(s.base)
	q := func(v []float64, p float64) float64 { return v[int(math.Ceil(p*float64(len(v))))-1] }
	n := float64(s.runs)
	t.Logf("%s: %d runs, %d with the documented outcome; fault-free run p50 %.0f ticks; ticks / fault-free ticks p50 %.2f p99 %.2f max %.2f",
		what, s.runs, s.outcomeOK, q(s.base, 0.5), q(s.slow, 0.5), q(s.slow, 0.99), q(s.slow, 1))
	t.Logf("  stale uses: %d in %d runs (max %d in a run); restarts %d; per run: re-sent frames %.1f, frames ignored %.1f, dropped beyond the window %.2f, failed attempts %.1f, lost acks %.1f",
		s.stale, s.staleRuns, s.maxStale, s.restarts, float64(s.resent)/n, float64(s.ignored)/n, float64(s.dropped)/n, float64(s.failed)/n, float64(s.dups)/n)
}

// TestGossipFaultStudy is the R-ADMM fault study (README, "R-ADMM fault study"): for each
// seed and policy, the run of gfOpts with a partition of 1-3 nodes and a crash and
// restart of one node (gfSchedule), each longer than the barrier timeout, on a lossy,
// duplicating network. Every run keeps the invariants (no ledger under-count, no iteration
// charged twice, re-sends identical, restarts replaying their journal bit for bit, every
// stand-in a vector really received). The policies end as documented:
//   - stop: every node ends with the missing-neighbour stop (no model is computed past a
//     missing neighbour, and none finishes);
//   - wait: every node finishes once the faults heal, with the simulator's models bit for
//     bit and no stale use;
//   - stale: every node finishes; the stale uses are recorded (at least one per run).
//
// -gossip-fault-seeds sets the seeds per policy (default 200, about 10 s in all).
func TestGossipFaultStudy(t *testing.T) {
	seeds := uint64(*gossipFaultSeeds)
	const barrier = 32
	for _, pol := range []gossip.MissingPolicy{gossip.MissingStop, gossip.MissingWait, gossip.MissingStale} {
		var st gfStats
		for seed := uint64(1); seed <= seeds; seed++ {
			o := gfOpts(t, seed)
			base, err := RunGossipFaults(GossipFaultConfig{Options: o, Seed: seed, Exchange: gossip.ExchangeConfig{OnMissing: pol}})
			if err != nil {
				t.Fatal(err)
			}
			cfg := gfSchedule(seed, o.Nodes, barrier)
			cfg.Options, cfg.Exchange.OnMissing = o, pol
			r, err := RunGossipFaults(cfg)
			if err != nil {
				t.Fatal(err)
			}
			checkGossipFaultInvariants(t, seed, r, o)
			st.runs++
			st.slow = append(st.slow, float64(r.Ticks)/float64(base.Ticks))
			st.base = append(st.base, float64(base.Ticks))
			st.stale += r.StaleUses()
			st.maxStale = max(st.maxStale, r.StaleUses())
			if r.StaleUses() > 0 {
				st.staleRuns++
			}
			st.restarts += r.Restarts
			st.resent += r.Resent
			st.ignored += r.Ignored
			st.dropped += r.Dropped
			st.failed += r.FailedAttempts
			st.dups += r.Duplicated
			if r.Restarts != 1 && (pol != gossip.MissingStop || r.Restarts != 0) {
				// Under stop the node may have stopped before its crash.
				t.Fatalf("seed %d %s: %d restarts", seed, pol, r.Restarts)
			}
			switch pol {
			case gossip.MissingStop:
				for i, e := range r.Ended {
					s := r.Stops[i]
					if e != "stopped" || s == nil || s.Reason != gossip.StopMissing || !strings.Contains(s.Error(), "policy stop") {
						t.Fatalf("seed %d stop: node %d ended %s (%v): %v", seed, i, e, s, r)
					}
				}
				if r.StaleUses() != 0 {
					t.Fatalf("seed %d stop: stale uses", seed)
				}
			case gossip.MissingWait:
				if r.Finished() != o.Nodes || r.StaleUses() != 0 {
					t.Fatalf("seed %d wait: %v, ended %v", seed, r, r.Ended)
				}
				want := simModels(t, o)
				for i, m := range r.Models {
					if !sim.SameBits(m, want[i]) {
						t.Fatalf("seed %d wait: node %d model differs from the simulator's", seed, i)
					}
				}
			case gossip.MissingStale:
				if r.Finished() != o.Nodes || r.StaleUses() == 0 {
					t.Fatalf("seed %d stale: %v, ended %v", seed, r, r.Ended)
				}
				for i, us := range r.Stale {
					for _, u := range us {
						if !slices.Contains(gfNeighbors(t, o, i), u.Neighbor) {
							t.Fatalf("seed %d: node %d stale use of non-neighbour %d", seed, i, u.Neighbor)
						}
					}
				}
			}
			st.outcomeOK++
		}
		st.log(t, "policy "+pol.String())
	}
}

// gfNeighbors returns node i's neighbours in o's graph.
func gfNeighbors(t *testing.T, o sim.GossipOptions, i int) []int {
	g, err := sim.GossipGraph(o.Graph, o.Nodes, o.Seed)
	if err != nil {
		t.Fatal(err)
	}
	return g.Neighbors(i)
}
