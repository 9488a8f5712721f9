package testnet

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dpadmm/dpadmm/node"
	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/testnet/sim"
)

// sawRelease is a peer that received the release of hop index After (the output of
// the step of that hop) without stepping it.
type sawRelease struct{ After, Node int }

// bruteWeights is the realised pairwise weight matrix computed from first principles,
// without building a trace: holders[k] steps hop k (noisy or not) and sees the output of
// hop k-1; a view sees the output of its hop; with final, the last output is seen by all.
// Each observer j's views cut the noisy steps into segments, and i's updates within one
// segment are charged jointly: the least sum of squared shifts (minShiftCost), summed over
// j's segments.
func bruteWeights(n int, holders []sim.TraceStep, views []sawRelease, final bool) []float64 {
	w := make([]float64, n*n)
	for j := 0; j < n; j++ {
		// j's views, as positions p: j sees the state after steps 0..p-1.
		var pos []int
		for t, st := range holders {
			if st.Node == j {
				pos = append(pos, t)
			}
		}
		for _, v := range views {
			if v.Node == j {
				pos = append(pos, v.After+1)
			}
		}
		if final {
			pos = append(pos, len(holders))
		}
		sort.Ints(pos)
		prev := 0
		for _, p := range pos {
			for i := 0; i < n; i++ {
				if i == j {
					continue
				}
				// The segment's noisy steps and S_k, i's updates among the first k of them.
				S := []float64{0}
				for k := prev; k < p; k++ {
					if holders[k].Noisy {
						c := S[len(S)-1]
						if holders[k].Node == i {
							c++
						}
						S = append(S, c)
					}
				}
				w[i*n+j] += minShiftCost(S)
			}
			prev = max(prev, p)
		}
	}
	return w
}

// minShiftCost is min sum a_k^2 over allocations with prefix sums A_k <= S_k and A_m = S_m
// (amplification by iteration with several changed steps), by dynamic programming over
// chords: the optimum is piecewise linear between points where A = S, and a chord from
// (a, S_a) to (b, S_b) is feasible when it stays at or below S in between.
func minShiftCost(S []float64) float64 {
	m := len(S) - 1
	if m == 0 || S[m] == 0 {
		return 0
	}
	best := make([]float64, m+1)
	for b := 1; b <= m; b++ {
		best[b] = math.Inf(1)
		for a := 0; a < b; a++ {
			if math.IsInf(best[a], 1) && a > 0 {
				continue
			}
			slope := (S[b] - S[a]) / float64(b-a)
			ok := true
			for k := a + 1; k < b; k++ {
				if S[a]+slope*float64(k-a) > S[k]+1e-12 {
					ok = false
					break
				}
			}
			if ok {
				best[b] = math.Min(best[b], best[a]+slope*slope*float64(b-a))
			}
		}
	}
	return best[m]
}

// ledgersFor writes the ledgers of real nodes for a path with views: the holder of hop k
// logs its step naming its first recipient, then a forward entry for every further
// recipient (the viewers first, in order, then the next holder); the last hop's
// recipients end with final.
func ledgersFor(n int, holders []sim.TraceStep, views []sawRelease, final int) [][]privacy.Entry {
	name := func(i int) string { return "n" + strconv.Itoa(i) }
	ls := make([][]privacy.Entry, n)
	for k, st := range holders {
		var to []int
		for _, v := range views {
			if v.After == k {
				to = append(to, v.Node)
			}
		}
		next := final
		if k+1 < len(holders) {
			next = holders[k+1].Node
		}
		to = append(to, next)
		for r, p := range to {
			mech := privacy.MechForward
			if r == 0 && st.Noisy {
				mech = privacy.MechGaussian
			}
			ls[st.Node] = append(ls[st.Node], privacy.Entry{Seq: uint64(len(ls[st.Node]) + 1), Node: name(st.Node),
				Hop: uint64(k + 1), Mechanism: mech, Recipient: name(p)})
		}
	}
	return ls
}

// TestLedgerPathViewsChargedExactly: on random walks where some releases are also seen
// by peers that do not step them, the realised accountant run on LedgerPath's path
// (views inserted as steps without noise) gives exactly the weights computed from first
// principles, with and without the final release to all; without the views it would
// miss those peers' observations.
func TestLedgerPathViewsChargedExactly(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	names := func(n int) []string {
		s := make([]string, n)
		for i := range s {
			s[i] = "n" + strconv.Itoa(i)
		}
		return s
	}
	missed := 0
	for trial := 0; trial < 60; trial++ {
		n := 3 + r.IntN(5)
		hops := 5 + r.IntN(40)
		holders := make([]sim.TraceStep, hops)
		for k := range holders {
			holders[k] = sim.TraceStep{Hop: uint64(k), Node: r.IntN(n), Noisy: r.Float64() < 0.8}
		}
		final := r.IntN(n)
		var views []sawRelease
		for k := range holders {
			if r.Float64() >= 0.3 {
				continue
			}
			next := final
			if k+1 < hops {
				next = holders[k+1].Node
			}
			for _, v := range r.Perm(n)[:1+r.IntN(2)] {
				if v != holders[k].Node && v != next {
					views = append(views, sawRelease{After: k, Node: v})
				}
			}
		}
		lp, err := LedgerPath(ledgersFor(n, holders, views, final), names(n), uint64(hops), names(n)[final])
		if err != nil {
			t.Fatal(err)
		}
		if lp.Views != len(views) || len(lp.Path) != hops+len(views) || lp.Redirects != len(views) || lp.Repeats != 0 {
			t.Fatalf("trial %d: %d views, %d steps, %d redirects for %d hops and %d views", trial, lp.Views, len(lp.Path), lp.Redirects, hops, len(views))
		}
		steps := make([]privacy.TraceStep, len(lp.Path))
		for k, st := range lp.Path {
			if st.View && st.Noisy {
				t.Fatalf("trial %d: noisy view %+v", trial, st)
			}
			steps[k] = privacy.TraceStep{Node: st.Node, Noisy: st.Noisy}
		}
		for _, final := range []bool{false, true} {
			res, err := privacy.RealisedPairwise(&privacy.Trace{Nodes: n, Clip: 1, Sigma: 1, Steps: steps, FinalReleasedToAll: final})
			if err != nil {
				t.Fatal(err)
			}
			want := bruteWeights(n, holders, views, final)
			without := bruteWeights(n, holders, nil, final)
			for i := 0; i < n; i++ {
				for j := 0; j < n; j++ {
					if got := res.Pairs.Weight(i, j); math.Abs(got-want[i*n+j]) > 1e-9 {
						t.Fatalf("trial %d final %v: weight (%d, %d) = %v, from first principles %v", trial, final, i, j, got, want[i*n+j])
					}
					if want[i*n+j] > without[i*n+j]+1e-9 {
						missed++
					}
				}
			}
			for i, u := range res.Updates {
				if u != lp.Updates[i] {
					t.Fatalf("trial %d: node %d has %d updates in the trace, %d in the ledgers", trial, i, u, lp.Updates[i])
				}
			}
		}
	}
	if missed == 0 {
		t.Fatal("no view changed any weight: the check is vacuous")
	}
}

// TestWithheldAckChargesWithholder runs a walk over real libp2p hosts on loopback, in this
// process, in which one member reads every token sent to it and never acks. Its senders
// redirect those releases to the third member; the run completes, and the realised
// accountant's input contains the withholding member as a viewer of each release it
// withheld, so it is charged for its senders' updates (it never holds the token, so
// without the views the path would not contain it at all). Being a node with no update,
// its own figures are 0.
func TestWithheldAckChargesWithholder(t *testing.T) {
	withheldAck(t, NetOptions{Mode: "mem"})
}

// TestWithheldAckChargesWithholderProcs is TestWithheldAckChargesWithholder with one
// `dpadmm node` process per member (the withholder runs with --withhold-acks).
func TestWithheldAckChargesWithholderProcs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the dpadmm binary")
	}
	withheldAck(t, NetOptions{Mode: "procs", Binary: buildDpadmm(t)})
}

func withheldAck(t *testing.T, no NetOptions) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const n, hops, seed = 3, 10, 4
	holder := sim.NodeRand(seed, -1).IntN(n)
	w := (holder + 1) % n
	o := netOptions(t, n, hops, seed)
	o.KeepTrace = true
	dir := t.TempDir()
	no.Dir, no.Withhold, no.AckTimeout = dir, []int{w}, 300*time.Millisecond
	t0 := time.Now()
	rep, err := RunNet(ctx, o, no)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d hops over %d hosts (node %d withholds acks) in %v; network %+v", no.Mode, hops, n, w, time.Since(t0), *rep.Network)
	nw := rep.Network
	if nw.Redirects == 0 || nw.Views == 0 || nw.LedgerEntries != hops+nw.Redirects+nw.Repeats {
		t.Fatalf("network section %+v: want redirected releases, each a view", *nw)
	}
	if len(rep.Trace) != hops+nw.Views {
		t.Fatalf("trace has %d steps for %d hops and %d views", len(rep.Trace), hops, nw.Views)
	}
	// The withholder never holds the token; it appears only as the viewer of the releases
	// it withheld, each right after its sender's step.
	var holders []sim.TraceStep
	var views []sawRelease
	senders := map[int]bool{}
	for k, st := range rep.Trace {
		if !st.View {
			if st.Node == w {
				t.Fatalf("step %d: the withholding node holds the token", k)
			}
			holders = append(holders, st)
			continue
		}
		if st.Node != w || k == 0 || rep.Trace[k-1].View && rep.Trace[k-1].Node == w || st.Hop != uint64(len(holders)) {
			t.Fatalf("view %d %+v after %+v: want only the withholder, once, after the release of hop %d", k, st, rep.Trace[k-1], len(holders))
		}
		views = append(views, sawRelease{After: len(holders) - 1, Node: w})
		senders[holders[len(holders)-1].Node] = true
	}
	if len(views) != nw.Views || uint64(len(holders)) != hops {
		t.Fatalf("%d views and %d hops in the trace, network section %+v", len(views), len(holders), *nw)
	}
	// The report's realised matrix (final model released to all) is the first-principles
	// one with the withholder's views; during the run (no final release) the withholder's
	// figure for a sender it withheld from is positive, and 0 without the views.
	want := bruteWeights(n, holders, views, true)
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			if got := rep.Pairs.Realised.Weight(i, j); math.Abs(got-want[i*n+j]) > 1e-9 {
				t.Fatalf("report weight (%d, %d) = %v, from first principles %v", i, j, got, want[i*n+j])
			}
		}
	}
	steps := make([]privacy.TraceStep, len(rep.Trace))
	for k, st := range rep.Trace {
		steps[k] = privacy.TraceStep{Node: st.Node, Noisy: st.Noisy}
	}
	during, err := privacy.RealisedPairwise(&privacy.Trace{Nodes: n, Clip: o.Clip, Sigma: o.Sigma, Steps: steps})
	if err != nil {
		t.Fatal(err)
	}
	charged := false
	for s := range senders {
		wt := during.Pairs.Weight(s, w)
		if noView := bruteWeights(n, holders, nil, false)[s*n+w]; noView != 0 {
			t.Fatalf("without views the withholder's weight for node %d is %v, want 0", s, noView)
		}
		if e, _ := during.Pairs.Epsilon(s, w, o.Delta); wt > 0 && e > 0 {
			charged = true
			t.Logf("withholder %d, sender %d: weight %v, epsilon %.4g during the run", w, s, wt, e)
		}
	}
	if !charged {
		t.Fatal("the withholder is not charged for any sender's update it received")
	}
	// The re-sent releases void the planned figure, in the report as in the senders' model.json.
	if pl := rep.Privacy.PairwisePlanned; pl.ConditionsHold || !strings.Contains(pl.Note, "re-sent to a second member") {
		t.Fatalf("planned figure after %d re-sends: hold %v, note %q", nw.Views, pl.ConditionsHold, pl.Note)
	}
	voided := false
	for s := range senders {
		b, err := os.ReadFile(filepath.Join(dir, "node-"+strconv.Itoa(s), store.ModelFile))
		if err != nil {
			t.Fatal(err)
		}
		var m node.Model
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(m.Privacy.Network.Note, "re-sent") {
			voided = !m.Privacy.Network.ConditionsHold
		}
	}
	if !voided {
		t.Fatal("no sender's model.json says its re-sent release voids the planned figure")
	}
	// Zero updates: the withholder's figures are exactly 0 in the report and model.json.
	if u := rep.Privacy.Updates[w]; u != 0 {
		t.Fatalf("withholder made %d updates", u)
	}
	if e := rep.Privacy.Local.PerNodeEpsilon[w]; e != 0 {
		t.Fatalf("report: local epsilon %v for a node with no update", e)
	}
	b, err := os.ReadFile(filepath.Join(dir, "node-"+strconv.Itoa(w), store.ModelFile))
	if err != nil {
		t.Fatal(err)
	}
	var m node.Model
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if p := m.Privacy; p.Updates != 0 || p.LedgerEntries != 0 || p.Local.Epsilon != 0 || p.Network.Epsilon != 0 {
		t.Fatalf("model.json of the withholder: %+v", p)
	}
}
