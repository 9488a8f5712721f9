package testnet

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/gossip"
	"github.com/dpadmm/dpadmm/node"
	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/testnet/sim"
)

// gmemOpts is a small private R-ADMM run: 5 nodes on a ring, noise on.
func gmemOpts(t *testing.T, iters int) sim.GossipOptions {
	train, test := gossipData(t, 200)
	o := gossipOpts(train, test, "radmm", "ring", iters, 2)
	o.Nodes = 5
	return o
}

// runSimLedgers drives a fresh simulator to the end and returns it (machines and ledgers).
func runSimLedgers(t *testing.T, o sim.GossipOptions) *sim.GossipSim {
	t.Helper()
	gs, err := sim.NewGossipSim(&o)
	if err == nil {
		err = gs.Finish()
	}
	if err != nil {
		t.Fatal(err)
	}
	return gs
}

func gmemSameBits(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if math.Float64bits(a[k]) != math.Float64bits(b[k]) {
			return false
		}
	}
	return true
}

// TestGossipMemMatchesSim: 5 real libp2p hosts on a ring give, for the same seed, the
// simulator's averaged model bit for bit (RunGossip's report), every node's model and the
// same ledger (iteration, mechanism, epsilon, noise scale) as the simulator's machines.
func TestGossipMemMatchesSim(t *testing.T) {
	o := gmemOpts(t, 20)
	rep, err := sim.RunGossip(o)
	if err != nil {
		t.Fatal(err)
	}
	ref := runSimLedgers(t, o)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := RunGossipMem(ctx, GossipMemConfig{Options: o, Run: "gm-test", Barrier: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !gmemSameBits(res.Model, rep.Model) {
		t.Fatalf("averaged model differs from the simulator's:\nmem %v\nsim %v", res.Model, rep.Model)
	}
	if res.MaxDeviation != rep.MaxDeviation {
		t.Errorf("max deviation %v, simulator %v", res.MaxDeviation, rep.MaxDeviation)
	}
	for i := range res.Models {
		if !gmemSameBits(res.Models[i], ref.Machines[i].ModelView()) {
			t.Errorf("node %d: model differs from the simulator's", i)
		}
		if len(res.Stale[i]) != 0 {
			t.Errorf("node %d: %d stale uses in a fault-free run", i, len(res.Stale[i]))
		}
		got, want := res.Ledger[i], ref.Ledgers[i]
		if len(got) != o.Iters+1 || len(got) != len(want) {
			t.Fatalf("node %d: %d ledger entries, simulator %d, want %d", i, len(got), len(want), o.Iters+1)
		}
		for k := range got {
			g, w := got[k], want[k]
			// The simulator names nodes by index, the nodes by peer ID.
			var to []string
			for _, r := range strings.Split(w.Recipient, ",") {
				j, err := strconv.Atoi(r)
				if err != nil {
					t.Fatal(err)
				}
				to = append(to, res.Peers[j])
			}
			if g.Hop != w.Hop || g.Mechanism != w.Mechanism || g.Epsilon != w.Epsilon || g.Sigma != w.Sigma ||
				g.Sensitivity != w.Sensitivity || g.Recipient != strings.Join(to, ",") || g.Node != res.Peers[i] || g.Run != "gm-test" {
				t.Fatalf("node %d entry %d: %+v, simulator %+v", i, k, g, w)
			}
		}
	}
}

// TestGossipMemLedgerOnDisk: the entries returned are those made durable in the data
// directory, and a fault-free run writes no stale records.
func TestGossipMemLedgerOnDisk(t *testing.T) {
	o := gmemOpts(t, 6)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := RunGossipMem(ctx, GossipMemConfig{Options: o, Dir: dir, Sync: true, Barrier: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for i := range res.Ledger {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("node-%d", i), store.LedgerFile))
		if err != nil {
			t.Fatal(err)
		}
		es, err := privacy.ParseLedger(strings.NewReader(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		if len(es) != len(res.Ledger[i]) {
			t.Fatalf("node %d: %d entries on disk, %d returned", i, len(es), len(res.Ledger[i]))
		}
		for k := range es {
			if es[k].Hop != uint64(k) || es[k].Epsilon != res.Ledger[i][k].Epsilon {
				t.Fatalf("node %d entry %d on disk: %+v", i, k, es[k])
			}
		}
		st, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("node-%d", i), store.StaleFile))
		if err != nil || len(st) != 0 {
			t.Fatalf("node %d: stale records %q (%v) in a fault-free run", i, st, err)
		}
	}
}

// TestGossipMemStop: node 2 of a 5-ring stops after releasing iteration 4. Under the
// default policy its neighbours 1 and 3 wait one barrier timeout at iteration 5 and stop
// the run with an error naming node 2; the others stop in turn; nobody returns a model.
func TestGossipMemStop(t *testing.T) {
	o := gmemOpts(t, 12)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := RunGossipMem(ctx, GossipMemConfig{Options: o, Barrier: 300 * time.Millisecond, HaltNode: 2, HaltAfter: 4})
	if !errors.Is(err, node.ErrNeighborMissing) {
		t.Fatalf("err = %v, want ErrNeighborMissing", err)
	}
	if !errors.Is(res.Errs[2], node.ErrHalted) {
		t.Fatalf("halted node: %v", res.Errs[2])
	}
	for _, i := range []int{1, 3} {
		e := res.Errs[i]
		if !errors.Is(e, node.ErrNeighborMissing) || !strings.Contains(e.Error(), "iteration 5 for neighbour(s) [2]") ||
			!strings.Contains(e.Error(), "policy stop") {
			t.Errorf("node %d: %v", i, e)
		}
	}
	for i, m := range res.Models {
		if m != nil {
			t.Errorf("node %d returned a model", i)
		}
		if !errors.Is(res.Errs[i], node.ErrNeighborMissing) && i != 2 {
			t.Errorf("node %d: %v", i, res.Errs[i])
		}
	}
}

// TestGossipMemStale: the same fault under policy stale. Nodes 1 and 3 substitute node
// 2's last vector f_2(4) at iterations 5..T-1, record each use durably and report it; the
// others, whose neighbours stay connected, wait and record nothing. The surviving nodes'
// models equal (bit for bit) those of the simulator's machines driven with the same
// substitution, and differ from the fault-free run.
func TestGossipMemStale(t *testing.T) {
	const T, halt = 8, 4
	o := gmemOpts(t, T)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := RunGossipMem(ctx, GossipMemConfig{Options: o, Dir: dir, Barrier: 400 * time.Millisecond,
		OnMissing: node.MissingStale, HaltNode: 2, HaltAfter: halt})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(res.Errs[2], node.ErrHalted) {
		t.Fatalf("halted node: %v", res.Errs[2])
	}
	var want []node.StaleUse
	for it := halt + 1; it < T; it++ {
		want = append(want, node.StaleUse{Iter: it, Neighbor: 2, UsedIter: halt})
	}
	for i := range res.Stale {
		w := want
		if i != 1 && i != 3 {
			w = nil
		}
		if !reflect.DeepEqual(res.Stale[i], w) {
			t.Errorf("node %d: stale uses %+v, want %+v", i, res.Stale[i], w)
		}
		if i == 2 {
			continue
		}
		f, err := os.Open(filepath.Join(dir, fmt.Sprintf("node-%d", i), store.StaleFile))
		if err != nil {
			t.Fatal(err)
		}
		lines := 0
		for sc := bufio.NewScanner(f); sc.Scan(); lines++ {
		}
		f.Close()
		if lines != len(w) {
			t.Errorf("node %d: %d stale records on disk, want %d", i, lines, len(w))
		}
	}

	// Reference: the simulator's machines with node 2 frozen after iteration 4 and its
	// last vector substituted at every barrier that misses it.
	ref, err := sim.NewGossipSim(&o)
	if err != nil {
		t.Fatal(err)
	}
	var frozen []float64
	var queue []gossip.Envelope
	for {
		moved := false
		for i, m := range ref.Machines {
			if (i == 2 && frozen != nil) || !m.HasReady() {
				continue
			}
			rd := m.Ready()
			queue = append(queue, rd.Outbox...)
			if i == 2 && rd.Ledger[0].Hop == halt {
				frozen = append([]float64(nil), rd.Outbox[0].Msg.Vec...)
			}
			m.Advance(rd)
			moved = true
		}
		q := queue
		queue = nil
		for _, env := range q {
			moved = true
			if env.To == 2 && frozen != nil {
				continue
			}
			if err := ref.Machines[env.To].Step(env.Msg); err != nil {
				t.Fatal(err)
			}
		}
		if moved {
			continue
		}
		for _, j := range []int{1, 3} {
			m := ref.Machines[j]
			if miss, _ := m.Missing(); len(miss) == 1 && miss[0] == 2 {
				if err := m.Step(gossip.Message{From: 2, Iter: m.Iter(), Vec: frozen}); err != nil {
					t.Fatal(err)
				}
				moved = true
			}
		}
		if !moved {
			break
		}
	}
	// The halted node contributes to the average the vector it last released (read back
	// from its journal).
	all := make([][]float64, len(ref.Machines))
	for i, m := range ref.Machines {
		all[i] = m.ModelView()
	}
	all[2] = frozen
	if avg, _ := sim.AverageModels(all, o.Train.Cols); !gmemSameBits(res.Model, avg) {
		t.Errorf("average %v, want %v (node 2 at its last release)", res.Model, avg)
	}
	clean := runSimLedgers(t, o)
	for i, m := range ref.Machines {
		if i == 2 {
			continue
		}
		if !m.Done() {
			t.Fatalf("reference node %d stuck at %d", i, m.Iter())
		}
		if !gmemSameBits(res.Models[i], m.ModelView()) {
			t.Errorf("node %d: model differs from the reference with the same substitution", i)
		}
		if gmemSameBits(res.Models[i], clean.Machines[i].ModelView()) {
			t.Errorf("node %d: model equals the fault-free one; the substitution had no effect", i)
		}
	}
}

// BenchmarkGossipMemIter16: one R-ADMM iteration (ns/op) of 16 full nodes on loopback on
// a random 4-regular graph, p = 64 and p = 1000, rows scaled to norm <= 1 (b.N iterations
// per run; node set-up is not timed). Private R-ADMM alternates an exact Newton solve (odd) and a
// closed-form step (even), so ns/op is the mean of the two.
func BenchmarkGossipMemIter16(b *testing.B) {
	for _, p := range []int{64, 1000} {
		b.Run(fmt.Sprintf("p=%d", p), func(b *testing.B) {
			raw, _ := consensus.SyntheticLogistic(16*50, p, 8, 3)
			// The nodes take part only with rows of norm <= 1 (Theorem V.1).
			sc, err := consensus.FitScaler(raw, consensus.ScaleRowNorm)
			if err != nil {
				b.Fatal(err)
			}
			o := sim.GossipOptions{
				Train: sc.Apply(raw), Nodes: 16, Problem: consensus.Problem{Loss: consensus.Logistic, Reg: consensus.Regularizer{L2: 0.01}},
				Algo: "radmm", Graph: "regular:4", Iters: b.N, Alpha: 1, Eta: 0.1, Gamma: 0.5, Seed: 1,
			}
			ctx := context.Background()
			gm, err := NewGossipMem(ctx, GossipMemConfig{Options: o, Barrier: 10 * time.Minute})
			if err != nil {
				b.Fatal(err)
			}
			defer gm.Close()
			b.ResetTimer()
			if _, err := gm.Run(ctx); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
		})
	}
}

// jsonKeys returns the sorted key paths of a JSON object (nested objects included).
func jsonKeys(t *testing.T, v any) []string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var keys []string
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			keys = append(keys, prefix+k)
			if sub, ok := v.(map[string]any); ok {
				walk(prefix+k+".", sub)
			}
		}
	}
	walk("", m)
	sort.Strings(keys)
	return keys
}

// TestGossipMemReportMatchesSim: the report of a run over 5 hosts has the simulator's
// model, objective, deviation, privacy figures (per node, network, from the ledgers) and
// message count, the same keys plus "network", and the network section counts what the
// run did (no stale use, T+1 ledger entries per node).
func TestGossipMemReportMatchesSim(t *testing.T) {
	o := gmemOpts(t, 12)
	gs, err := sim.RunGossip(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, res, err := RunGossipMemReport(ctx, GossipMemConfig{Options: o, Barrier: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !gmemSameBits(rep.Model, gs.Model) || !gmemSameBits(rep.Model, res.Model) {
		t.Fatalf("model differs:\nmem %v\nsim %v", rep.Model, gs.Model)
	}
	if math.Float64bits(rep.Objective) != math.Float64bits(gs.Objective) || rep.MaxDeviation != gs.MaxDeviation ||
		rep.Gap != gs.Gap || rep.ReferenceObjective != gs.ReferenceObjective {
		t.Fatalf("objective %v dev %v gap %v, simulator %v %v %v", rep.Objective, rep.MaxDeviation, rep.Gap,
			gs.Objective, gs.MaxDeviation, gs.Gap)
	}
	if !reflect.DeepEqual(rep.Gossip, gs.Gossip) || !reflect.DeepEqual(rep.Privacy, gs.Privacy) {
		t.Fatalf("privacy differs:\nmem %+v\nsim %+v", rep.Gossip, gs.Gossip)
	}
	if rep.Messages != gs.Messages || rep.Messages == 0 {
		t.Fatalf("messages %d, simulator %d", rep.Messages, gs.Messages)
	}
	nw := rep.Network
	if nw == nil || nw.Mode != "mem" || nw.Hosts != 5 || nw.StaleUses != 0 || len(nw.Stale) != 0 ||
		nw.LedgerEntries != 5*(o.Iters+1) || nw.OnMissing != "stop" || nw.BarrierSeconds != 20 || nw.MaxWaitSeconds != 200 {
		t.Fatalf("network section %+v", nw)
	}
	if rep.TraceHash != "" || gs.TraceHash == "" {
		t.Fatalf("trace hash mem %q sim %q", rep.TraceHash, gs.TraceHash)
	}
	got, want := jsonKeys(t, rep), jsonKeys(t, gs)
	var extra []string
	for _, k := range got {
		if k != "network" && !strings.HasPrefix(k, "network.") {
			extra = append(extra, k)
		}
	}
	if !reflect.DeepEqual(extra, want) {
		t.Fatalf("keys besides network differ:\nmem %v\nsim %v", extra, want)
	}
}

// TestGossipNetReportStale: stale uses reported by the nodes are listed with their node in
// the network section, counted, and explained in its note.
func TestGossipNetReportStale(t *testing.T) {
	o := gmemOpts(t, 6)
	gs := runSimLedgers(t, o)
	n := len(gs.Machines)
	stale := make([][]node.StaleUse, n)
	stale[1] = []node.StaleUse{{Iter: 3, Neighbor: 2, UsedIter: 2}, {Iter: 4, Neighbor: 2, UsedIter: 2}}
	stale[3] = []node.StaleUse{{Iter: 3, Neighbor: 2, UsedIter: 2}}
	rep, err := gossipNetReport(&o, gs, gs.Models(), gs.Inexact(), gs.Ledgers, stale, make([]int, n), []int{0, 1, 0, 0, 2},
		time.Second, sim.GossipNetworkReport{Mode: "mem"})
	if err != nil {
		t.Fatal(err)
	}
	nw := rep.Network
	want := []sim.GossipStale{{Node: 1, StaleUse: stale[1][0]}, {Node: 1, StaleUse: stale[1][1]}, {Node: 3, StaleUse: stale[3][0]}}
	if nw.StaleUses != 3 || !reflect.DeepEqual(nw.Stale, want) || nw.Ignored != 3 || nw.Hosts != n ||
		!strings.Contains(nw.Note, "3 stale uses") {
		t.Fatalf("network section %+v", nw)
	}
	ledgers := append([][]privacy.Entry(nil), gs.Ledgers...)
	ledgers[2] = nil
	if _, err := gossipNetReport(&o, gs, gs.Models(), gs.Inexact(), ledgers, stale, make([]int, n), make([]int, n),
		time.Second, sim.GossipNetworkReport{Mode: "mem"}); err == nil || !strings.Contains(err.Error(), "node 2") {
		t.Fatalf("missing ledger: %v", err)
	}
}

// TestGossipMemReportInterrupted: a run over hosts canceled midway gives a report marked
// interrupted whose iteration count is the least any node made durable and whose model is
// the average of every node's last durable release, equal bit for bit to the simulator's
// vectors of those iterations; the privacy figures stay those of the planned run.
func TestGossipMemReportInterrupted(t *testing.T) {
	const T = 100000
	o := gmemOpts(t, T)
	dir := t.TempDir()
	dirs := make([]string, o.Nodes)
	for i := range dirs {
		dirs[i] = filepath.Join(dir, fmt.Sprintf("node-%d", i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	go func() {
		for ctx.Err() == nil && ledgerIters(dirs) < 10 {
			time.Sleep(2 * time.Millisecond)
		}
		cancel()
	}()
	rep, _, err := RunGossipMemReport(ctx, GossipMemConfig{Options: o, Dir: dir, Barrier: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	last := make([]int, o.Nodes)
	least := T
	for i, d := range dirs {
		es, err := readLedgerFile(d)
		if err != nil {
			t.Fatal(err)
		}
		last[i] = len(es) - 1
		least = min(least, last[i])
	}
	if !rep.Interrupted || rep.Hops != uint64(least) || least < 10 || least >= T || rep.HopsPlanned != T {
		t.Fatalf("interrupted %v after %d of %d iterations; least durable iteration %d", rep.Interrupted, rep.Hops, rep.HopsPlanned, least)
	}

	// The simulator's release of every node at its last durable iteration.
	gs, err := sim.NewGossipSim(&o)
	if err != nil {
		t.Fatal(err)
	}
	want := make([][]float64, o.Nodes)
	for done := 0; done < o.Nodes; {
		for i, m := range gs.Machines {
			if m.HasReady() {
				if rd := m.Ready(); len(rd.Outbox) > 0 && rd.Outbox[0].Msg.Iter == last[i] {
					want[i] = append([]float64(nil), rd.Outbox[0].Msg.Vec...)
					done++
				}
			}
		}
		if _, err := gs.Step(); err != nil {
			t.Fatal(err)
		}
	}
	if avg, _ := sim.AverageModels(want, o.Train.Cols); !gmemSameBits(rep.Model, avg) {
		t.Fatalf("model %v, want the average of the last releases %v", rep.Model, avg)
	}
	ctx0, cancel0 := context.WithCancel(context.Background())
	cancel0()
	plan, err := sim.RunGossipContext(ctx0, o) // stopped before the first step: the planned figures
	if err != nil {
		t.Fatal(err)
	}
	g, p := rep.Gossip, plan.Gossip
	if g.Epsilon != p.Epsilon || g.Formula != p.Formula || !reflect.DeepEqual(g.PerNode, p.PerNode) || !g.ConditionsHold || g.Epsilon <= 0 {
		t.Fatalf("privacy %+v, planned %+v", g, p)
	}
}
