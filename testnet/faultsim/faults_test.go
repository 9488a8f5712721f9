package faultsim

import (
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"testing"

	"github.com/dpadmm/dpadmm/testnet/sim"
)

// faultStats summarises many fault runs.
type faultStats struct {
	runs                                        int
	rec                                         []int64
	lost                                        []uint64
	wasted, regen, resent, fenced, fallbacks    int
	retrans, dups, multiLive, held, underCounts int
}

func (s *faultStats) add(r *FaultReport) {
	s.runs++
	s.rec = append(s.rec, r.RecoveryTicks)
	s.lost = append(s.lost, r.HopsLost)
	s.wasted += r.Wasted
	s.regen += r.Regenerated
	s.resent += r.Resent
	s.fenced += r.Fenced
	s.fallbacks += r.Fallbacks
	s.retrans += r.Retransmits
	s.dups += r.Dups
	s.underCounts += r.UnderCount
	if r.LiveTokens > 1 {
		s.multiLive++
	}
	if r.Held {
		s.held++
	}
}

func quantile[T int64 | uint64](v []T, q float64) T {
	w := slices.Clone(v)
	sort.Slice(w, func(a, b int) bool { return w[a] < w[b] })
	return w[int(math.Ceil(q*float64(len(w))))-1]
}

func (s *faultStats) log(t *testing.T, what string) {
	t.Helper()
	var lostSum uint64
	for _, l := range s.lost {
		lostSum += l
	}
	n := float64(s.runs)
	t.Logf("%s: %d runs (token held at the kill in %d, on the wire in %d)", what, s.runs, s.held, s.runs-s.held)
	t.Logf("  recovery ticks p50 %d p99 %d max %d", quantile(s.rec, 0.5), quantile(s.rec, 0.99), quantile(s.rec, 1))
	t.Logf("  hops lost p50 %d p99 %d max %d mean %.2f; wasted steps (lost + fenced duplicates' work) mean %.2f",
		quantile(s.lost, 0.5), quantile(s.lost, 0.99), quantile(s.lost, 1), float64(lostSum)/n, float64(s.wasted)/n)
	t.Logf("  per run: regenerations %.2f, re-sends %.2f, retransmissions %.2f, fenced %.2f, duplicate acks %.2f, fallbacks %.2f",
		float64(s.regen)/n, float64(s.resent)/n, float64(s.retrans)/n, float64(s.fenced)/n, float64(s.dups)/n, float64(s.fallbacks)/n)
	t.Logf("  runs ending with more than one live token: %d; ledger under-counts: %d", s.multiLive, s.underCounts)
}

// checkFaultRun asserts what every fault run must satisfy.
func checkFaultRun(t *testing.T, cfg FaultConfig, r *FaultReport) {
	t.Helper()
	switch {
	case r.UnderCount != 0:
		t.Fatalf("seed %d: %d token messages without a durable ledger entry", r.Seed, r.UnderCount)
	case r.ReleaseConflicts != 0:
		t.Fatalf("seed %d: %d (node, epoch, hop) released with different contents", r.Seed, r.ReleaseConflicts)
	case r.NoisyMismatch != 0:
		t.Fatalf("seed %d: %d nodes whose noisy updates differ from their ledger", r.Seed, r.NoisyMismatch)
	case r.PayloadLeaks != 0:
		t.Fatalf("seed %d: %d acks or releases carried token data", r.Seed, r.PayloadLeaks)
	case !r.Recovered || r.LiveTokens < 1:
		t.Fatalf("seed %d: the walk did not recover: %+v", r.Seed, *r)
	case r.LiveEpochs != 1:
		t.Fatalf("seed %d: %d live epochs at the end", r.Seed, r.LiveEpochs)
	case !r.Finite:
		t.Fatalf("seed %d: non-finite model %v", r.Seed, r.Z)
	case r.HopsLost > r.FrontHop:
		t.Fatalf("seed %d: %d hops lost of %d", r.Seed, r.HopsLost, r.FrontHop)
	}
	if cfg.NoKill {
		return
	}
	k := int(math.Ceil(0.25 * float64(cfg.Nodes)))
	if len(r.Killed) != k || !slices.Contains(r.Killed, r.Holder) {
		t.Fatalf("seed %d: killed %v, holder %d: want %d nodes including the holder", r.Seed, r.Killed, r.Holder, k)
	}
	// Progress after the kill: the survivor went well past the pre-kill front.
	if r.FinalHop < r.FrontHop+50 {
		t.Fatalf("seed %d: final hop %d, front before the kill %d: no progress", r.Seed, r.FinalHop, r.FrontHop)
	}
}

// TestFaultKill25PercentHolder1000Seeds is the acceptance run of docs/fault-tolerance.md:
// 40 nodes, a quarter of them (always including the token's holder) crash at a random
// tick; the backup chain (depth 8) must bring the walk back in every seed, with every
// release in the ledger and one live token at the end.
func TestFaultKill25PercentHolder1000Seeds(t *testing.T) {
	var st faultStats
	maxBackups := 0
	for seed := uint64(1); seed <= 1000; seed++ {
		cfg := FaultConfig{Nodes: 40, Seed: seed, Fallback: 3000, Depth: 8}
		r, err := RunFaults(cfg)
		if err != nil {
			t.Fatal(err)
		}
		checkFaultRun(t, cfg, r)
		if r.LiveTokens != 1 {
			t.Fatalf("seed %d: %d live tokens at the end", seed, r.LiveTokens)
		}
		maxBackups = max(maxBackups, r.BackupsAtKill)
		if r.BackupsAtKill > 2*cfg.Depth || r.BackupsAtKill < 1 {
			t.Fatalf("seed %d: %d backups in the network before the crash (depth %d)", seed, r.BackupsAtKill, cfg.Depth)
		}
		if r.Fallbacks != 0 {
			t.Fatalf("seed %d: the fallback fired although the chain recovered", seed)
		}
		st.add(r)
	}
	st.log(t, "kill 25% incl. holder, n=40, depth 8, heartbeat 5x3 ticks")
	t.Logf("  most backups in the network before a crash: %d", maxBackups)
}

// TestFaultFallbackWithoutChain: with depth 1 (plain custody, no backup once acked) a
// crash of the holder loses the token; the slow fallback must still bring it back.
func TestFaultFallbackWithoutChain(t *testing.T) {
	var st faultStats
	for seed := uint64(1); seed <= 100; seed++ {
		cfg := FaultConfig{Nodes: 40, Seed: seed, Depth: 1, Fallback: 3000, AfterTicks: 4500}
		r, err := RunFaults(cfg)
		if err != nil {
			t.Fatal(err)
		}
		checkFaultRun(t, cfg, r)
		st.add(r)
	}
	if st.fallbacks == 0 {
		t.Fatal("the fallback never fired")
	}
	st.log(t, "depth 1 + fallback after 3000 silent ticks")
}

// TestFaultLossyLinks: 2% of all custody messages are lost on top of the crash. Lost acks
// cause retransmissions and, after two losses in a row, duplicate copies of one epoch.
func TestFaultLossyLinks(t *testing.T) {
	var st faultStats
	for seed := uint64(1); seed <= 200; seed++ {
		cfg := FaultConfig{Nodes: 40, Seed: seed, LossRate: 0.02, Fallback: 3000, AfterTicks: 1200}
		r, err := RunFaults(cfg)
		if err != nil {
			t.Fatal(err)
		}
		checkFaultRun(t, cfg, r)
		st.add(r)
	}
	if st.retrans == 0 || st.dups == 0 {
		t.Fatal("losses did not exercise retransmission")
	}
	if st.multiLive > st.runs/10 {
		t.Fatalf("%d of %d runs end with duplicate tokens", st.multiLive, st.runs)
	}
	st.log(t, "kill 25% + 2% message loss")
}

// TestFaultFreeMatchesSim: without faults the custody layer is invisible: the walk takes
// the plain simulator's path and reaches the same model bit for bit.
func TestFaultFreeMatchesSim(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		cfg := FaultConfig{Nodes: 12, Seed: seed, NoKill: true, SnapHop: 150, WarmTicks: 400}
		r, err := RunFaults(cfg)
		if err != nil {
			t.Fatal(err)
		}
		checkFaultRun(t, cfg, r)
		if r.Snap == nil {
			t.Fatal("no snapshot")
		}
		if r.Resent+r.Regenerated+r.Retransmits+r.Fenced+r.Dups+r.Wasted != 0 {
			t.Fatalf("fault-free run used recovery: %+v", *r)
		}
		for k, v := range plainSimZ(t, cfg, r.Snap.Hop) {
			if math.Float64bits(v) != math.Float64bits(r.Snap.Z[k]) {
				t.Fatalf("seed %d hop %d: z[%d] = %v with custody, %v in the plain simulator", seed, r.Snap.Hop, k, r.Snap.Z[k], v)
			}
		}
	}
}

// plainSimZ returns z after hop hops of the plain simulator over the data of cfg.
func plainSimZ(t *testing.T, cfg FaultConfig, hop uint64) []float64 {
	t.Helper()
	if err := cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	shards, prob, err := faultData(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sim.NewSim(sim.SimConfig{Shards: shards, Problem: prob, Gamma: faultGamma, Lambda: faultLambda, Clip: faultClip,
		Sigma: cfg.Sigma, Seed: cfg.Seed, Run: faultRun})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RunHops(hop, 0, nil); err != nil {
		t.Fatal(err)
	}
	return s.Z()
}

func TestFaultSameSeedSameRun(t *testing.T) {
	a, err := RunFaults(FaultConfig{Seed: 11, LossRate: 0.02})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := RunFaults(FaultConfig{Seed: 11, LossRate: 0.02})
	c, _ := RunFaults(FaultConfig{Seed: 12, LossRate: 0.02})
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed, different runs")
	}
	if reflect.DeepEqual(a.Z, c.Z) {
		t.Fatal("different seeds gave the same model")
	}
}

func TestFaultConfigErrors(t *testing.T) {
	for _, c := range []FaultConfig{
		{Nodes: 1},
		{KillFrac: 1.5},
		{LossRate: 1},
		{Sigma: math.Inf(1)},
		{MaxLatency: -1},
		{Depth: -1},
		{Restart: -1},
		{Crashes: []FaultCrash{{Node: 40, At: 1}}},
		{Partitions: []FaultPartition{{Nodes: []int{-1}, From: 1, Until: 2}}},
	} {
		if _, err := RunFaults(c); err == nil {
			t.Fatalf("%+v accepted", c)
		}
	}
}

// TestFaultCrashAtReleaseRestart: a node crashes right after a release became durable
// (ledger, walk state with its generators, custody snapshot) and before it was sent, and
// restarts 5 ticks later, before any peer declares it down: it restores what its effects
// made durable and sends the release at its ack timeout, so the walk takes the plain
// simulator's path and reaches the same z bit for bit (no re-noised update, no other
// choice of next hop). The step of a token taken is acked once it is durable
// (drive.Walk's coalescing), so the crash also withheld the ack of the token it stepped:
// its sender sends it again, once, and is answered that it is a duplicate; nothing else
// shows the restart.
func TestFaultCrashAtReleaseRestart(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		cfg := FaultConfig{Nodes: 12, Seed: seed, NoKill: true, SnapHop: 150, WarmTicks: 400,
			Crashes: []FaultCrash{{Node: int(seed) % 12, At: 100, Down: 5, AtRelease: true}}}
		r, err := RunFaults(cfg)
		if err != nil {
			t.Fatal(err)
		}
		checkFaultRun(t, cfg, r)
		if r.Restarts != 1 {
			t.Fatalf("seed %d: %d restarts", seed, r.Restarts)
		}
		if r.Resent+r.Regenerated+r.Fenced+r.Wasted != 0 || r.Dups > 1 || r.Retransmits != r.Dups {
			t.Fatalf("seed %d: the restart showed more than one re-send answered as a duplicate: %+v", seed, *r)
		}
		want := plainSimZ(t, cfg, r.Snap.Hop)
		for k, v := range want {
			if math.Float64bits(v) != math.Float64bits(r.Snap.Z[k]) {
				t.Fatalf("seed %d hop %d: z[%d] = %v after the restart, %v in the plain simulator", seed, r.Snap.Hop, k, r.Snap.Z[k], v)
			}
		}
	}
}

// TestFaultKillRestart: the crash study's kill (a quarter of the nodes, the holder among
// them), the crashed nodes restarting 60 ticks later from what their effects made durable
// (the holder may step the token of its inbox again, an old lineage that the fence
// retires): the walk recovers, every release is in the ledger, one epoch lives at the end.
func TestFaultKillRestart(t *testing.T) {
	var st faultStats
	restarts := 0
	for seed := uint64(1); seed <= 100; seed++ {
		cfg := FaultConfig{Nodes: 40, Seed: seed, Fallback: 3000, Restart: 60}
		r, err := RunFaults(cfg)
		if err != nil {
			t.Fatal(err)
		}
		checkFaultRun(t, cfg, r)
		restarts += r.Restarts
		st.add(r)
	}
	if restarts != 100*10 {
		t.Fatalf("%d restarts, want 10 per run", restarts)
	}
	st.log(t, "kill 25% incl. holder, restart after 60 ticks")
}

// TestFaultPartitionHeals: a quarter of the nodes are cut off from the others for 100
// ticks (no crash). Heartbeats stop crossing the cut, so each side declares the other
// down and the side without the token regenerates it from its backups; after the heal
// the fence retires the lower epoch: one live epoch at the end, every release in the
// ledger.
func TestFaultPartitionHeals(t *testing.T) {
	var st faultStats
	for seed := uint64(1); seed <= 50; seed++ {
		perm := rand.New(rand.NewPCG(seed, 5)).Perm(40)
		cfg := FaultConfig{Nodes: 40, Seed: seed, NoKill: true, Fallback: 3000,
			Partitions: []FaultPartition{{Nodes: perm[:10], From: 150, Until: 250}}}
		r, err := RunFaults(cfg)
		if err != nil {
			t.Fatal(err)
		}
		checkFaultRun(t, cfg, r)
		st.add(r)
	}
	if st.regen == 0 || st.fenced == 0 {
		t.Fatal("the partition exercised no regeneration or fencing")
	}
	n := float64(st.runs)
	t.Logf("partition of 10 of 40 nodes for 100 ticks, %d runs: per run regenerations %.2f, fenced %.2f, re-sends %.2f, wasted steps %.2f; runs ending with more than one live token: %d; ledger under-counts: %d",
		st.runs, float64(st.regen)/n, float64(st.fenced)/n, float64(st.resent)/n, float64(st.wasted)/n, st.multiLive, st.underCounts)
}
