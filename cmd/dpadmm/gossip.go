package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/gossip"
	"github.com/dpadmm/dpadmm/node"
	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/testnet"
	"github.com/dpadmm/dpadmm/testnet/sim"
)

// gossipArgs carries the parsed flags of a neighbour-exchange testnet run.
type gossipArgs struct {
	train, test                   *consensus.Dataset
	data, scaling, split          string
	scaler                        *consensus.Scaler
	nodes                         int
	prob                          consensus.Problem
	algo, graph                   string
	iters                         int
	alpha, eta, etaGrowth, etaMax float64
	target                        float64 // --target-epsilon (0: --alpha)
	etaFile                       string
	gamma, paperC, delta          float64
	seed                          uint64
	report, curve                 string
	asJSON, quiet                 bool
	// Real network (--mem, --procs): data directories, fsync and the barrier policy.
	mem, procs       bool
	dir              string
	fsync            bool
	onMissing        node.MissingPolicy
	barrier, maxWait time.Duration
	// --procs fault injection: node killNode is killed (SIGKILL) once its release of
	// iteration killAt is durable, then restarted on its data directory (0 = off).
	killNode, killAt int
}

// parseAlpha reads --alpha: a positive number or "inf" (no noise). The default is the
// paper's "low privacy requirement" alpha = 2 for the private algorithms and no noise
// for conventional ADMM.
func parseAlpha(s, algo string) (float64, error) {
	if s == "" {
		if algo == "admm" {
			return math.Inf(1), nil
		}
		return 2, nil
	}
	if strings.EqualFold(s, "inf") || strings.EqualFold(s, "+inf") {
		return math.Inf(1), nil
	}
	a, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(a) || !(a > 0) {
		return 0, fmt.Errorf("want a number > 0 or inf, got %q", s)
	}
	return a, nil
}

// readEtaFile reads a penalty schedule: one line per perturbed iteration k = 1..K, each
// holding either one value (every node) or one comma-separated value per node (MR-ADMM's
// per-node schedules eta_i(2k-1)). Blank lines and lines starting with # are skipped.
// It returns the rows; every row has the same number of values.
func readEtaFile(path string) ([][]float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out [][]float64
	sc := bufio.NewScanner(f)
	line := 0
	for sc.Scan() {
		line++
		t := strings.TrimSpace(sc.Text())
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		fields := strings.Split(t, ",")
		row := make([]float64, len(fields))
		for c, fs := range fields {
			v, err := strconv.ParseFloat(strings.TrimSpace(fs), 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || !(v > 0) {
				return nil, fmt.Errorf("%s:%d: want a finite penalty > 0, got %q", path, line, strings.TrimSpace(fs))
			}
			row[c] = v
		}
		if len(out) > 0 && len(row) != len(out[0]) {
			return nil, fmt.Errorf("%s:%d: %d values, earlier lines have %d", path, line, len(row), len(out[0]))
		}
		out = append(out, row)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no penalty values", path)
	}
	return out, nil
}

// etaSchedules turns the rows of an eta file into one list for all nodes or one schedule
// per node.
func etaSchedules(path string, rows [][]float64, nodes int) (all []float64, perNode []gossip.Schedule, err error) {
	switch len(rows[0]) {
	case 1:
		for _, r := range rows {
			all = append(all, r[0])
		}
		return all, nil, nil
	case nodes:
		perNode = make([]gossip.Schedule, nodes)
		for i := range perNode {
			l := make([]float64, len(rows))
			for k, r := range rows {
				l[k] = r[i]
			}
			perNode[i] = gossip.Schedule{List: l}
		}
		return nil, perNode, nil
	}
	return nil, nil, fmt.Errorf("%s: %d values per line; want 1 (all nodes) or %d (one per node)", path, len(rows[0]), nodes)
}

func runGossipTestnet(ctx context.Context, a gossipArgs, stdout, stderr io.Writer) error {
	o := sim.GossipOptions{
		Train: a.train, Test: a.test, Data: a.data, Scaling: a.scaling, Scaler: a.scaler, Nodes: a.nodes, Split: a.split,
		Problem: a.prob, Algo: a.algo, Graph: a.graph, Iters: a.iters, Alpha: a.alpha, TargetEpsilon: a.target, Eta: a.eta,
		EtaGrowth: a.etaGrowth, EtaMax: a.etaMax, Gamma: a.gamma, C: a.paperC, Seed: a.seed,
		Delta: a.delta,
	}
	if a.etaFile != "" {
		rows, err := readEtaFile(a.etaFile)
		if err != nil {
			return err
		}
		if o.EtaList, o.NodeSchedules, err = etaSchedules(a.etaFile, rows, a.nodes); err != nil {
			return err
		}
	}
	var curveFile *os.File
	if a.curve != "" {
		var err error
		if curveFile, err = os.Create(a.curve); err != nil {
			return err
		}
		defer curveFile.Close()
		o.Curve = curveFile
	}
	prog := newProgress(stderr, a.quiet)
	if prog != nil {
		o.Progress = func(iter, total int) {
			prog.Printf("iteration %d/%d (%.0f%%)", iter, total, 100*float64(iter)/float64(total))
		}
	}
	var rep *sim.GossipReport
	var err error
	if a.mem || a.procs {
		rep, err = runGossipNet(ctx, o, a, stderr)
	} else {
		rep, err = sim.RunGossipContext(ctx, o)
	}
	prog.Done()
	if err != nil {
		return err
	}
	if curveFile != nil {
		if err := curveFile.Close(); err != nil {
			return err
		}
	}
	if err := writeReport(rep, a.report, a.asJSON, a.quiet, stdout, stderr, func(w io.Writer) { printGossipSummary(w, rep) }); err != nil {
		return err
	}
	printWarnings(stderr, rep.Warnings)
	if n := gossipEpsilonNote(rep, a.target); n != "" && !a.quiet {
		fmt.Fprintln(stderr, n)
	}
	if rep.Interrupted {
		return interruptedReport(rep.Hops, rep.HopsPlanned, "iterations", a.report)
	}
	return nil
}

// gossipEpsilonNote points a run with a large network figure (above DefaultMaxEpsilon) and
// no target at --target-epsilon and fewer iterations: the figure grows with every
// perturbed iteration, and an exact local solve already gives a good model in few.
func gossipEpsilonNote(r *sim.GossipReport, target float64) string {
	e := r.Gossip.Epsilon
	if target > 0 || !e.Bounded() || float64(e) <= DefaultMaxEpsilon {
		return ""
	}
	return fmt.Sprintf("note: network epsilon %s over %d iterations; --target-epsilon E calibrates --alpha to E, and few iterations "+
		"keep the noise small (--iters 2 to 4: 0.96 test accuracy at epsilon 2 on the breast cancer data; docs/radmm-network.md)", fmtEps(e), r.Iters)
}

// runGossipNet runs o over one full node per graph node: in this process (--mem,
// testnet.RunGossipMemReport) or one 'dpadmm node --algo ... --static' process each
// (--procs, testnet.RunGossipProcs, this executable run again).
func runGossipNet(ctx context.Context, o sim.GossipOptions, a gossipArgs, stderr io.Writer) (*sim.GossipReport, error) {
	log, err := node.NewLogger(stderr, "text", "warn")
	if err != nil {
		return nil, err
	}
	if a.dir != "" {
		if err := os.MkdirAll(a.dir, 0o755); err != nil {
			return nil, err
		}
	}
	if a.procs {
		bin, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("cannot find this executable to start the nodes: %w", err)
		}
		return testnet.RunGossipProcs(ctx, testnet.GossipProcsConfig{
			Options: o, Binary: bin, Dir: a.dir, Sync: a.fsync, Barrier: a.barrier, MaxWait: a.maxWait,
			OnMissing: a.onMissing, Logger: log, KillNode: a.killNode, KillAtIter: a.killAt,
		})
	}
	rep, _, err := testnet.RunGossipMemReport(ctx, testnet.GossipMemConfig{
		Options: o, Dir: a.dir, Sync: a.fsync, Barrier: a.barrier, MaxWait: a.maxWait, OnMissing: a.onMissing, Logger: log,
	})
	return rep, err
}

func printGossipSummary(w io.Writer, r *sim.GossipReport) {
	fmt.Fprintf(w, "%s on %s: %d nodes, %d iterations, a model of %d coordinates, %d messages, %.3g s (%.1f us/iteration)\n",
		r.Algo, r.Graph, r.Nodes, r.Iters, r.Dims, r.Messages, r.WallSeconds, r.UsPerIter)
	fmt.Fprintf(w, "objective of the averaged model %.6g, reference %.6g, gap %.3g%%, largest node deviation %.3g\n",
		r.Objective, r.ReferenceObjective, 100*r.Gap, r.MaxDeviation)
	if r.Accuracy != nil {
		fmt.Fprintf(w, "test accuracy %.4f\n", *r.Accuracy)
	}
	io.WriteString(w, regressionLine(r.Report))
	if nw := r.Network; nw != nil {
		fmt.Fprintf(w, "network %s: %d libp2p hosts on loopback, %d ledger entries, %.3g s; policy %s (barrier %gs, max wait %gs): %d stale uses\n",
			nw.Mode, nw.Hosts, nw.LedgerEntries, nw.WallSeconds, nw.OnMissing, nw.BarrierSeconds, nw.MaxWaitSeconds, nw.StaleUses)
		if nw.Restarts > 0 {
			fmt.Fprintf(w, "  %d node process(es) killed (SIGKILL) and restarted; each resumed from its journal\n", nw.Restarts)
		}
		for _, u := range nw.Stale {
			fmt.Fprintf(w, "  node %d computed iteration %d with neighbour %d's vector of iteration %d (missing at the barrier)\n",
				u.Node, u.Iter+1, u.Neighbor, u.UsedIter)
		}
		if nw.Dir != "" {
			fmt.Fprintf(w, "  data directories (ledgers, %s) in %s\n", store.StaleFile, nw.Dir)
		}
	}
	g := r.Gossip
	switch {
	case r.Alpha == math.MaxFloat64:
		fmt.Fprintf(w, "privacy: none (alpha = inf, no noise)\n")
	case g.ConditionsHold:
		fmt.Fprintf(w, "privacy: network epsilon %s (pure DP, worst node %d) from %s; conditions: %s (hold)\n",
			fmtEps(g.Epsilon), g.WorstNode, g.Theorem, g.Conditions)
		fmt.Fprintf(w, "         as (epsilon, delta=%g) through the RDP accountant: epsilon %s (%s; %s)\n",
			g.RDP.Delta, fmtEps(g.RDP.Epsilon), g.RDP.Theorem, g.RDP.Conversion)
	default:
		fmt.Fprintf(w, "privacy: NO guarantee: %s; the formula would give %s (%s; conditions: %s)\n",
			g.Reason, fmtEps(g.Formula), g.Theorem, g.Conditions)
	}
}
