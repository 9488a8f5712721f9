package testnet

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/node"
	"github.com/dpadmm/dpadmm/node/drive"
	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/testnet/sim"
)

// buildDpadmm builds the dpadmm command into a temporary directory.
func buildDpadmm(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "dpadmm")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/dpadmm/dpadmm/cmd/dpadmm").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// netOptions are the options of the CLI demo (embedded data, 20% held out, scaled on
// the training part) for n nodes and a short walk.
func netOptions(t *testing.T, n int, hops, seed uint64) sim.Options {
	t.Helper()
	d, err := consensus.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	train, test := consensus.TrainTest(d, 0.2, seed)
	sc, err := consensus.FitScaler(train, consensus.ScaleStandardizeNorm)
	if err != nil {
		t.Fatal(err)
	}
	return sim.Options{
		Train: sc.Apply(train), Test: sc.Apply(test), Data: "embedded:breast_cancer", Scaling: "standardize+rownorm",
		Nodes: n, Problem: consensus.Problem{Loss: consensus.Logistic, Reg: consensus.Regularizer{L2: 0.01}},
		Gamma: 100, Lambda: 0.5, Clip: 0.1, Sigma: 1, Hops: hops, Seed: seed, MaxUpdates: 100, Delta: 1e-5,
	}
}

// sameReport requires the walk's results of two reports to be identical: model bit for
// bit, path fingerprint, objective and the whole privacy section.
func sameReport(t *testing.T, what string, got, want *sim.Report) {
	t.Helper()
	if len(got.Model) != len(want.Model) || len(want.Model) == 0 {
		t.Fatalf("%s: model dimension %d, want %d", what, len(got.Model), len(want.Model))
	}
	for k := range want.Model {
		if math.Float64bits(got.Model[k]) != math.Float64bits(want.Model[k]) {
			t.Fatalf("%s: coordinate %d: %v, simulator %v", what, k, got.Model[k], want.Model[k])
		}
	}
	if got.TraceHash != want.TraceHash || got.Hops != want.Hops {
		t.Errorf("%s: trace %s after %d hops, simulator %s after %d", what, got.TraceHash, got.Hops, want.TraceHash, want.Hops)
	}
	if got.Objective != want.Objective || *got.Accuracy != *want.Accuracy {
		t.Errorf("%s: objective %v accuracy %v, simulator %v %v", what, got.Objective, *got.Accuracy, want.Objective, *want.Accuracy)
	}
	if !reflect.DeepEqual(got.Privacy, want.Privacy) {
		t.Errorf("%s: privacy section differs:\n%+v\nsimulator:\n%+v", what, got.Privacy, want.Privacy)
	}
}

// readLedgers parses every node's ledger under dir/node-<i>.
func readLedgers(t *testing.T, dir string, n int) [][]privacy.Entry {
	t.Helper()
	out := make([][]privacy.Entry, n)
	for i := range out {
		b, err := os.ReadFile(filepath.Join(dir, "node-"+itoa(i), store.LedgerFile))
		if err != nil {
			t.Fatal(err)
		}
		if out[i], err = privacy.ParseLedger(bytes.NewReader(b)); err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
	}
	return out
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestProcs runs three `dpadmm node` processes on loopback (the binary is built first)
// on the embedded data and requires the simulator's model bit for bit, in-process
// (--mem) and multi-process (--procs), then kills the token holder with SIGKILL in each
// of the two phases and requires that the run completes with consistent ledgers and,
// since the seeded generators are checkpointed, still the simulator's model.
func TestProcs(t *testing.T) {
	bin := buildDpadmm(t)
	const n, hops, seed = 3, 120, 11
	o := netOptions(t, n, hops, seed)
	o.KeepTrace = true
	gs, err := sim.Run(o)
	if err != nil {
		t.Fatal(err)
	}
	o.KeepTrace = false
	t.Run("SameModelInEveryMode", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		t0 := time.Now()
		mem, err := RunNet(ctx, o, NetOptions{Mode: "mem"})
		if err != nil {
			t.Fatal(err)
		}
		t1 := time.Now()
		dir := t.TempDir()
		procs, err := RunNet(ctx, o, NetOptions{Mode: "procs", Binary: bin, Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d hops over %d nodes: mem %v (%.0f hops/s), procs %v (%.0f hops/s)", hops, n,
			t1.Sub(t0), mem.Network.HopsPerSecond, time.Since(t1), procs.Network.HopsPerSecond)
		sameReport(t, "mem", mem, gs)
		sameReport(t, "procs", procs, gs)
		// The nodes ran with --insecure-testnet (seeded noise, fixed membership): their
		// model.json says there is no guarantee.
		b, err := os.ReadFile(filepath.Join(dir, "node-0", store.ModelFile))
		if err != nil {
			t.Fatal(err)
		}
		var m node.Model
		if err := json.Unmarshal(b, &m); err != nil || m.Guarantee != node.InsecureGuarantee {
			t.Errorf("model.json guarantee %q (%v), want %q", m.Guarantee, err, node.InsecureGuarantee)
		}
		for _, r := range []*sim.Report{mem, procs} {
			if nw := r.Network; nw == nil || nw.Hosts != n || nw.LedgerEntries != hops || nw.Redirects != 0 || nw.Repeats != 0 {
				t.Errorf("network section: %+v", r.Network)
			}
		}
		// The processes' own files: one model.json per node, all equal to the report's.
		for i := 0; i < n; i++ {
			b, err := os.ReadFile(filepath.Join(dir, "node-"+itoa(i), store.ModelFile))
			if err != nil || !bytes.Contains(b, []byte(`"hops":120`)) {
				t.Errorf("node %d model.json: %v %.200s", i, err, b)
			}
		}
	})
	for _, phase := range []string{"received", "custody"} {
		t.Run("KillHolder/"+phase, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			// A hop whose holder hands the token to another node, so that the custody
			// phase exercises the resend (a self-hand-off would leave it in the inbox).
			at := uint64(hops / 2)
			for gs.Trace[at].Node == gs.Trace[at+1].Node {
				at++
			}
			holder := gs.Trace[at].Node
			dir := t.TempDir()
			t0 := time.Now()
			rep, err := RunNet(ctx, o, NetOptions{Mode: "procs", Binary: bin, Dir: dir, KillHolderAt: at, KillPhase: phase})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("kill at hop %d (%s): run completed in %v", at, phase, time.Since(t0))
			ks := rep.Network.Kills
			if len(ks) != 1 || ks[0].Hop != at || ks[0].Node != holder || ks[0].Phase != phase {
				t.Fatalf("kills %+v, want node %d at hop %d (%s)", ks, holder, at, phase)
			}
			sameReport(t, "procs with a kill", rep, gs)
			// Ledgers read independently: every hop 1..hops logged by exactly one node.
			byHop := map[uint64][]int{}
			total := 0
			for i, es := range readLedgers(t, dir, n) {
				for _, e := range es {
					byHop[e.Hop] = append(byHop[e.Hop], i)
					total++
				}
			}
			for h := uint64(1); h <= hops; h++ {
				if len(byHop[h]) != 1 {
					t.Errorf("hop %d logged by nodes %v", h, byHop[h])
				}
			}
			if total != hops || rep.Network.LedgerEntries != total {
				t.Errorf("%d ledger entries (report %d) for %d hops", total, rep.Network.LedgerEntries, hops)
			}
			log, err := os.ReadFile(filepath.Join(dir, "node-"+itoa(holder)+".log"))
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{"received": "processing the stored inbound token", "custody": "resending the token held in custody"}[phase]
			if !strings.Contains(string(log), want) || !strings.Contains(string(log), "restored checkpoint") && at > 1 {
				t.Errorf("the restarted holder did not log %q:\n%s", want, log)
			}
		})
	}
}

// TestProcsRejects checks the launchers' argument errors (before anything starts).
func TestProcsRejects(t *testing.T) {
	o := netOptions(t, 3, 10, 1)
	ctx := context.Background()
	for name, c := range map[string]struct {
		o    sim.Options
		no   NetOptions
		want string
	}{
		"graph": {func() sim.Options { p := o; p.Graph = "ring"; return p }(), NetOptions{Mode: "mem"}, "complete graph"},
		"budget": {func() sim.Options {
			p := o
			p.Budget = &sim.BudgetSpec{Kind: "local", Epsilon: 1, Delta: 1e-5}
			return p
		}(), NetOptions{Mode: "mem"}, "budgets"},
		"mode":      {o, NetOptions{Mode: "udp"}, "unknown network mode"},
		"mem kill":  {o, NetOptions{Mode: "mem", KillHolderAt: 3}, "separate processes"},
		"no binary": {o, NetOptions{Mode: "procs"}, "no dpadmm binary"},
		"late kill": {o, NetOptions{Mode: "procs", Binary: "/bin/true", KillHolderAt: 11}, "beyond"},
		"phase":     {o, NetOptions{Mode: "procs", Binary: "/bin/true", KillHolderAt: 3, KillPhase: "later"}, "kill phase"},
		"last hop":  {o, NetOptions{Mode: "procs", Binary: "/bin/true", KillHolderAt: 10, KillPhase: "custody"}, "never held in custody"},
	} {
		if _, err := RunNet(ctx, c.o, c.no); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", name, err, c.want)
		}
	}
}

// TestProcsSeedWrappers: the simulator's per-node sources are node's seeded ones, which
// 'dpadmm node --seed' uses: the first draws agree for the walk's hop and noise sources and
// for f_i(0) of a neighbour-exchange node.
func TestProcsSeedWrappers(t *testing.T) {
	for _, i := range []int{-1, 0, 7} {
		a, b := sim.NodeRand(99, i), drive.SeededRand(99, i)
		c, d := GossipInitRand(99, i), drive.SeededRADMMInit(99, i)
		for k := 0; k < 20; k++ {
			if x, y := a.Uint64(), b.Uint64(); x != y {
				t.Fatalf("node %d draw %d: NodeRand %d, drive.SeededRand %d", i, k, x, y)
			}
			if x, y := c.Uint64(), d.Uint64(); x != y {
				t.Fatalf("node %d draw %d: GossipInitRand %d, drive.SeededRADMMInit %d", i, k, x, y)
			}
		}
		x, y := make([]float64, 16), make([]float64, 16)
		sim.NodeNoise(99, i).Normal(x, 1)
		drive.SeededNoise(99, i).Normal(y, 1)
		for k := range x {
			if math.Float64bits(x[k]) != math.Float64bits(y[k]) {
				t.Fatalf("node %d noise %d: %v, drive.SeededNoise %v", i, k, x[k], y[k])
			}
		}
	}
}

// TestProcsLedgerPath rebuilds paths from hand-made ledgers, with a redirection (its
// first recipient becomes a view), a repeat, a missing hop and a duplicate token.
func TestProcsLedgerPath(t *testing.T) {
	names := []string{"a", "b"}
	e := func(node string, hop uint64, mech, to string) privacy.Entry {
		return privacy.Entry{Node: node, Hop: hop, Mechanism: mech, Recipient: to}
	}
	g, f := privacy.MechGaussian, privacy.MechForward
	// a's release of hop 3 goes to itself (a self-hand-off), then is also sent to b,
	// which does not step it: b views it. Hop 4 is logged twice (a repeat).
	ok := [][]privacy.Entry{
		{e("a", 1, g, "b"), e("a", 3, f, "a"), e("a", 3, f, "b"), e("a", 4, g, "b"), e("a", 4, g, "b")},
		{e("b", 2, g, "a")},
	}
	lp, err := LedgerPath(ok, names, 4, "b")
	if err != nil {
		t.Fatal(err)
	}
	want := []sim.TraceStep{{Hop: 0, Node: 0, Noisy: true}, {Hop: 1, Node: 1, Noisy: true}, {Hop: 2, Node: 0},
		{Hop: 3, Node: 1, View: true}, {Hop: 3, Node: 0, Noisy: true}}
	if !reflect.DeepEqual(lp.Path, want) || lp.Redirects != 1 || lp.Repeats != 1 || lp.Entries != 6 || lp.Views != 1 ||
		!reflect.DeepEqual(lp.Updates, []int{2, 1}) {
		t.Fatalf("got %+v", lp)
	}
	if h := sim.PathHash(lp.Path); h == sim.PathHash(want[:3]) || h != sim.PathHash(want) ||
		h == sim.PathHash([]sim.TraceStep{want[0], want[1], want[2], want[4]}) {
		t.Errorf("path hash %x", h)
	}
	// Without the final holder, b (the last release's recipient) is a view at the end.
	lp, err = LedgerPath(ok, names, 4, "")
	if err != nil {
		t.Fatal(err)
	}
	if w := append(want, sim.TraceStep{Hop: 4, Node: 1, View: true}); !reflect.DeepEqual(lp.Path, w) || lp.Views != 2 {
		t.Fatalf("no final holder: got %+v", lp)
	}
	for name, ls := range map[string][][]privacy.Entry{
		"missing":   {{e("a", 1, g, "b")}, {}},
		"duplicate": {{e("a", 1, g, "b"), e("a", 2, g, "b")}, {e("b", 2, g, "a")}},
		"foreign":   {{e("b", 1, g, "b")}, {e("b", 2, g, "a")}},
		"beyond":    {{e("a", 1, g, "b"), e("a", 3, g, "b")}, {e("b", 2, g, "a")}},
		"recipient": {{e("a", 1, g, "b"), e("a", 1, f, "z")}, {e("b", 2, g, "a")}},
	} {
		if _, err := LedgerPath(ls, names, 2, ""); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := LedgerPath([][]privacy.Entry{{e("a", 1, g, "b")}, {e("b", 2, g, "a")}}, names, 2, "z"); err == nil {
		t.Error("final holder outside the membership: no error")
	}
	// A release regenerated under a new epoch (its recipient b acked it, then was
	// declared down before stepping it) and sent to c: b viewed it, c goes on.
	three := []string{"a", "b", "c"}
	ee := func(node string, epoch, hop uint64, mech, to string) privacy.Entry {
		return privacy.Entry{Node: node, Epoch: epoch, Hop: hop, Mechanism: mech, Recipient: to}
	}
	lp, err = LedgerPath([][]privacy.Entry{{ee("a", 0, 1, g, "b"), ee("a", 1, 1, f, "c")}, {}, {ee("c", 1, 2, g, "a")}}, three, 2, "a")
	if err != nil {
		t.Fatal(err)
	}
	if w := []sim.TraceStep{{Hop: 0, Node: 0, Noisy: true}, {Hop: 1, Node: 1, View: true}, {Hop: 1, Node: 2, Noisy: true}}; !reflect.DeepEqual(lp.Path, w) ||
		lp.Views != 1 || lp.Redirects != 1 || lp.Repeats != 0 {
		t.Fatalf("regenerated release: got %+v", lp)
	}
	// A node stepping one hop in two epochs (a rolled-back walk) is not one path.
	if _, err := LedgerPath([][]privacy.Entry{{ee("a", 0, 1, g, "b"), ee("a", 1, 1, g, "c")}, {}, {ee("c", 1, 2, g, "a")}}, three, 2, "a"); err == nil {
		t.Error("rolled-back walk: no error")
	}
}
