package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/node"
	"github.com/dpadmm/dpadmm/node/drive"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/testnet"
	"github.com/dpadmm/dpadmm/testnet/sim"
	"github.com/dpadmm/dpadmm/walk"
)

const testnetHelp = `Usage: dpadmm testnet [--sim | --mem --nodes N | --procs --nodes N] [flags]

Runs a local testnet. --sim (the default) runs the deterministic simulator: N random-walk
private ADMM machines (Cyffers, Bellet, Basu, Algorithm 4) in one goroutine, one seed.
With no flags it trains an L2-regularised logistic regression on the embedded breast
cancer data over 50 nodes in about a second and prints accuracy and privacy figures.

Real network: --mem runs the same walk over N real libp2p hosts (loopback TCP, one
node runtime each: durable ledger, checkpoint, acked hand-off) in this process; --procs
starts N 'dpadmm node' processes (this executable) on 127.0.0.1 with a fixed membership
and seeded randomness. Both write the same report as --sim, plus a "network" section;
for one seed the model, the path (trace_hash) and the privacy figures equal the
simulator's bit for bit. --kill-holder-at H (procs) kills the process holding the token
after H hops with SIGKILL (found by polling every node's /status; the nodes are started
with --pause-at-hop H, which makes that holder stop, acked token stored, until killed)
and restarts it on the same data directory; the run completes and, since the nodes
checkpoint their seeded generators, still gives the simulator's model. --dir keeps the
data directories, ledgers and logs. Complete graph only; no budget, curve or ledger-dir.
--transport mock (with --mem, the walk) puts the hosts on go-libp2p's in-memory mock
network instead of loopback TCP: same hosts and streams, no sockets or encryption, for
runs of thousands of hosts (above 64 hosts --mem turns the heartbeats off, and the
nodes' streams are in-memory pipes to the peer's handler). The report's "network"
section gives the peak resident set and heap, in all and per host.
  dpadmm testnet --procs --nodes 3 --hops 2000 --kill-holder-at 1000 --dir /tmp/tn
--withhold-acks 2,5 (mem, procs) makes those nodes keep every token sent to them and never
ack it: the sender redirects the release, two peers see it, and the report charges both
views (re-sends void the planned figure; the realised one counts each view):
  dpadmm testnet --mem --nodes 6 --hops 300 --withhold-acks 2

Noise convention: --sigma S is the std of eta in eq. (7); the noise added to a node's u
has std lambda*S. --clip C bounds ||x - z|| before the u-update. One noisy update is a
Gaussian mechanism with sensitivity 4*lambda*C and noise std lambda*S, i.e. RDP
8*alpha*C^2/S^2 per update, for a whole shard (--privacy-unit user); per record (the
default) the record radius gamma (c L + tol) replaces C where it is smaller.

Defaults (the no-flag demo): 50 nodes of the embedded breast-cancer data (rows
standardized from the data set's public ranges, then scaled to norm <= 1), logistic loss
with l2 1e-3, gamma 0.03, lambda 0.1, clip 0.1, a hard cap of 20 noisy updates per node
(the bounds need a maximum K_i) and 1000 hops, sigma calibrated so that each node's local
per-record epsilon is 2 (--target-epsilon, delta 1e-5): test accuracy 0.91-0.94 (seeds
1-3, scikit-learn 0.97 on the same split) and a realised worst-pair epsilon of 1.08-1.17.
--algo auto (the DP-SGD walk, fitted to the shard size) ends nearer the non-private
objective at the same epsilon. With --sigma 0 (no privacy) the walk reaches the reference
optimum (objective gap 0.1%):
  dpadmm testnet --sigma 0 --gamma 10 --lambda 0.5 --clip 100 --hops 20000 --max-updates 0

Privacy figures (report key privacy; every figure names its theorem, its conditions and
whether they hold; when they fail the local bound is printed instead, with the reason):
  local              observer of every message of node i: K_i updates composed (Theorem 3)
  pairwise_planned   what node j learns about node i when the path is secret, before the
                     run: Theorem 4 (complete graph) or the first-passage law of the walk
                     (other graphs), with K_i the hard cap; it assumes every hop is a noisy
                     update, so it fails when capped or out-of-budget nodes forward the token
  pairwise_realised  from this run's own path: amplification by iteration applied jointly
                     to all of i's updates between two views of j (best shift allocation
                     per view), composed over j's views; holds even for an observer who
                     knows the path; the final model counts as released to every node
--pairs writes every ordered pair; its columns carry the figures of pairwise_planned and
pairwise_realised. --plot draws them as heat maps (row i: data owner, column j: observer).
--budget-epsilon E stops a node's noisy updates before its epsilon (--budget-kind local or
network, at --delta) would exceed E; the node then forwards the token unchanged, and the run
ends early ("ended": "budget exhausted") when every node is out of budget.

Neighbour exchange (Zhang, Khalili, Liu, Recycled ADMM): --algo admm|radmm|mradmm|admm-dvp|
admm-pvp runs one machine per node on a fixed connected graph (default ring, 5 nodes, 100
iterations, --even-gamma 0.5). Odd iterations solve the local problem with objective
perturbation (noise density exp(-alpha*||eps||), --alpha, default 2; inf = no noise;
--target-epsilon E calibrates each node's alpha so that the network figure is E); even
iterations are recycled closed-form steps that cost no privacy. The figure grows with every
odd iteration, so few iterations learn best at a fixed epsilon (--iters 2 to 4 on the breast
cancer data). mradmm grows the penalty: eta(k) = --eta * --eta-growth^k (capped by
--eta-max), or from --eta-file (one value per line for all nodes, or one comma-separated
column per node).
admm-dvp and admm-pvp are the dual- and primal-variable-perturbation baselines (Zhang and
Zhu 2017); madmm is an M-ADMM-style baseline (every iteration perturbed, noise scaled by the
growing penalty, nothing recycled). Constants: node i minimises (C/B_i)*sum of its losses + (rho/N)||f||^2/2 with
C = --paper-c * N * B_i / M and rho = --paper-c * N * l2, so the consensus optimum is the
reference optimum and the reported objective (of the average of the nodes' models) stays
the mean loss plus the regularizer. The report gives the Theorem V.1 pure-DP figure per node
and the network figure (max over nodes), or no guarantee with the failing condition.
MR-ADMM with different schedules per node converges near, not exactly to, the optimum.

The neighbour-exchange algorithms run over real libp2p hosts too, as the nodes of
'dpadmm node --algo' with a static membership (--mem: one node per graph node in this
process; --procs: one 'dpadmm node --algo ... --static FILE' process per node), with an
explicit --nodes N. Each node sends its vector to its neighbours over a direct stream
(/dpadmm/<run>/radmm/1) after writing its ledger entry, and waits at every iteration for
its neighbours' vectors. --barrier-timeout is how long it waits before checking a missing
neighbour, --max-wait how long a still-connected neighbour is waited for, and
--on-missing what it does with a neighbour declared missing: stop (default: the run ends
with an error), wait (keep waiting) or stale (continue with the neighbour's last vector;
the substitution is recorded durably, logged and listed in the report's network section,
and the model is no longer the fault-free one). See docs/radmm-network.md. For one seed
and no stale use the report equals --sim's (model and objective bit for bit, same keys)
plus a "network" section (mode, hosts, policy, stale uses, ledger entries, wall time);
trace_hash is empty (the vectors are not fingerprinted between hosts). With --procs,
--kill-at-iter I --kill-node K kills node K (SIGKILL) once its release of iteration I is
durable and not yet sent, and restarts it on its data directory: it replays its journal,
re-sends the same vectors (never re-noised) and the run ends with the fault-free model.
  dpadmm testnet --algo radmm --mem --nodes 5 --iters 100 --report r.json
  dpadmm testnet --algo radmm --procs --nodes 4 --iters 20 --kill-at-iter 7 --kill-node 2

Output: a human summary on stdout (gap in %; with --loss squared also RMSE and R^2), progress
on stderr. --report FILE writes the JSON report (keys: docs/report-schema.md; "gap" is a
fraction there); --report - or --json writes it to stdout, and the summary goes to stderr.
Warnings ("warning: " lines on stderr, also with --quiet; the report's "warnings" list):
hops beyond the noisy updates the caps allow, a planned privacy figure the run will lose
(before a walk), hops after the last noisy update, and a test accuracy no better than the
majority class or R^2 <= 0 (after the run).

Flags: those under "Flags:" apply to every run; the others to the algorithm or network
their section names. A flag of another section is a usage error saying where it applies.
`

func runTestnet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newTestnetFlags(stdout)
	if err := f.m.parse(args); err != nil {
		return err
	}
	auto, err := resolveAuto(f.m, f.algo, f.lossName)
	if err != nil {
		return testnetUsage(stderr, "%v", err)
	}
	mode, what, err := f.mode()
	if err != nil {
		return testnetUsage(stderr, "%v", err)
	}
	if err := f.m.check(mode, what); err != nil {
		return err
	}
	// Flag values are checked before any data is loaded: a bad value is a usage error.
	if err := f.defaults(mode); err != nil {
		return testnetUsage(stderr, "%v", err)
	}
	if err := auto.fillHops(*f.nodes); err != nil {
		return testnetUsage(stderr, "%v", err)
	}
	prob, err := f.checkCommon()
	if err != nil {
		return asUsage("testnet", err)
	}
	if err := checkOutputDirs(map[string]string{"--report": *f.reportPath, "--pairs": *f.pairsPath, "--plot": *f.plotPath,
		"--trace": *f.tracePath, "--curve": *f.curvePath, "--schema-out": *f.df.schemaOut, "--scale-out": *f.df.scaleOut}); err != nil {
		return err
	}
	if isGossip(mode) && !f.m.isSet("l2") {
		prob.Reg.L2 = node.RADMMDefaultL2
	}
	if isGossip(mode) {
		alpha, err := f.checkGossip()
		if err != nil {
			return testnetUsage(stderr, "%v", err)
		}
		ld, err := f.df.load(loadRequest{loss: prob.Loss, seed: *f.seed, multiclass: true})
		if err != nil {
			return err
		}
		ld.warn(stderr)
		return runGossipTestnet(ctx, f.gossipArgs(mode, ld, ld.problem(prob, false), alpha), stdout, stderr)
	}
	step, err := f.checkWalk(mode)
	if err != nil {
		return asUsage("testnet", err)
	}
	var members []int
	if *f.coalition != "" {
		if members, err = parseCoalition(*f.coalition, *f.nodes); err != nil {
			return testnetUsage(stderr, "--coalition: %v", err)
		}
	}
	ld, err := f.df.load(loadRequest{loss: prob.Loss, seed: *f.seed, multiclass: true})
	if err != nil {
		return err
	}
	ld.warn(stderr)
	perNode := ld.train.Rows / max(*f.nodes, 1) // the smallest iid shard
	step, autoMsg := auto.fit(step, float64(perNode), fmt.Sprintf("fitted to %d rows per node", perNode))
	if autoMsg != "" {
		fmt.Fprintln(stderr, autoMsg)
	}
	opt := f.walkOptions(ld, ld.problem(prob, true), step, members)
	if err := f.calibrate(&opt); err != nil {
		return asUsage("testnet", err)
	}
	if f.targetMsg != "" && (!*f.quiet || strings.HasPrefix(f.targetMsg, "note:")) {
		fmt.Fprintln(stderr, f.targetMsg) // --quiet keeps notes, not the calibration line
	}
	return f.runWalk(ctx, mode, opt, stdout, stderr)
}

// asUsage returns err as a usage error of cmd (unchanged when it is one already).
func asUsage(cmd string, err error) error {
	if errors.Is(err, errUsage) {
		return err
	}
	return usagef(cmd, "%v", err)
}

// gossipArgs are the arguments of runGossipTestnet from the flags.
func (f *testnetFlags) gossipArgs(mode string, ld *loadedData, prob consensus.Problem, alpha float64) gossipArgs {
	policy, _ := node.ParseMissingPolicy(*f.onMissing)
	net := network(mode)
	return gossipArgs{
		train: ld.train, test: ld.test, data: ld.name, scaling: ld.scaling, scaler: ld.scaler, nodes: *f.nodes, split: *f.split,
		prob: prob, algo: *f.algo, graph: *f.graphSpec, iters: *f.iters, alpha: alpha, target: f.gossipTarget(), eta: *f.eta,
		etaGrowth: *f.etaGrowth, etaMax: *f.etaMax, etaFile: *f.etaFile, gamma: *f.evenGamma, paperC: *f.paperC, delta: *f.delta,
		seed: *f.seed, report: *f.reportPath, asJSON: *f.asJSON, curve: *f.curvePath, quiet: *f.quiet,
		mem: net == netMem, procs: net == netProcs, dir: *f.netDir, fsync: *f.fsync, onMissing: policy,
		barrier: *f.barrierTimeout, maxWait: *f.maxWait, killNode: *f.killNode, killAt: *f.killIter,
	}
}

// walkOptions are the simulator's options of a walk from the flags.
func (f *testnetFlags) walkOptions(ld *loadedData, prob consensus.Problem, step walk.StepParams, members []int) sim.Options {
	opt := sim.Options{
		Train: ld.train, Test: ld.test, Data: ld.name, Scaling: ld.scaling, Scaler: ld.scaler, Nodes: *f.nodes, Split: *f.split,
		Problem: prob, Gamma: *f.gamma, Lambda: *f.lambda, Clip: *f.clip, Sigma: *f.sigma, Step: step, Hops: *f.hops,
		Seed: *f.seed, Graph: *f.graphSpec, MaxUpdates: *f.maxUpd, Delta: *f.delta,
		LedgerDir: *f.ledgerDir, Coalition: members, Unit: privacy.Unit(*f.unit),
	}
	if *f.budgetEps > 0 {
		opt.Budget = &sim.BudgetSpec{Kind: *f.budgetKind, Epsilon: *f.budgetEps, Delta: *f.delta}
	}
	opt.KeepTrace = *f.tracePath != ""
	return opt
}

// runWalk runs the walk of opt on the network of mode and writes its outputs.
func (f *testnetFlags) runWalk(ctx context.Context, mode string, opt sim.Options, stdout, stderr io.Writer) error {
	var curveFile *os.File
	if *f.curvePath != "" {
		var err error
		if curveFile, err = os.Create(*f.curvePath); err != nil {
			return err
		}
		defer curveFile.Close()
		every := *f.curveEvery
		if every == 0 {
			every = *f.hops / 100
		}
		opt.Curve, opt.CurveEvery = curveFile, max(every, 1)
	}
	prog := newProgress(stderr, *f.quiet)
	var netProgress func(entries, hops uint64)
	if prog != nil {
		opt.Progress = func(h, total uint64, obj float64) {
			prog.Printf("hop %d/%d (%.0f%%) objective %.6g", h, total, 100*float64(h)/float64(total), obj)
		}
		netProgress = func(entries, hops uint64) {
			prog.Printf("ledger entries %d of %d hops (%.0f%%)", entries, hops, 100*float64(min(entries, hops))/float64(hops))
		}
	}
	warned := 0
	opt.Warn = func(msg string) {
		printWarnings(stderr, []string{msg})
		warned++
	}
	var rep *sim.Report
	var err error
	if net := network(mode); net != netSim {
		withhold, _ := parseWithhold(*f.withhold, *f.nodes, drive.SeededHolder(*f.seed, *f.nodes)) // checked by checkWalk
		ack := *f.ackTimeout
		if ack == 0 && len(withhold) > 0 {
			ack = 300 * time.Millisecond // every hand-off to a withholding node waits this long
		}
		rep, err = runNetwork(ctx, opt, net == netMem, *f.transport, *f.killAt, *f.killPhase, *f.netDir, *f.fsync, withhold, ack, netProgress, stderr)
	} else {
		rep, err = sim.RunContext(ctx, opt)
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
	if err := f.writeWalkOutputs(rep, stdout, stderr); err != nil {
		return err
	}
	// The plan's warnings were printed before the run; they open rep.Warnings.
	printWarnings(stderr, rep.Warnings[min(warned, len(rep.Warnings)):])
	if rep.Interrupted {
		return interruptedReport(rep.Hops, rep.HopsPlanned, "hops", *f.reportPath)
	}
	return nil
}

// writeWalkOutputs writes the trace, the pairwise CSV and plot, and the report of a walk.
func (f *testnetFlags) writeWalkOutputs(rep *sim.Report, stdout, stderr io.Writer) error {
	if *f.tracePath != "" {
		if err := writeTrace(*f.tracePath, rep); err != nil {
			return err
		}
		rep.Trace = nil // the trace goes to its own file, not into the report
	}
	if *f.pairsPath != "" {
		if err := writeFileWith(*f.pairsPath, func(w io.Writer) error { return sim.WritePairsCSV(w, rep.Pairs) }); err != nil {
			return err
		}
	}
	if *f.plotPath != "" {
		if err := writeFileWith(*f.plotPath, func(w io.Writer) error { return sim.WritePairsPNG(w, rep.Pairs, *f.plotKind) }); err != nil {
			return err
		}
	}
	return writeReport(rep, *f.reportPath, *f.asJSON, *f.quiet, stdout, stderr, func(w io.Writer) { printSummary(w, rep) })
}

// printWarnings prints each warning on its own line, prefixed "warning: ". Warnings go to
// stderr even with --quiet: they say the run will disappoint, or did.
func printWarnings(w io.Writer, msgs []string) {
	for _, m := range msgs {
		fmt.Fprintf(w, "warning: %s\n", m)
	}
}

// writeReport writes the JSON report rep to the file path ("" = none, "-" = stdout) and,
// with asJSON, to stdout; then, unless quiet, the human summary: to stdout, or to stderr
// when stdout carries the JSON.
func writeReport(rep any, path string, asJSON, quiet bool, stdout, stderr io.Writer, summary func(io.Writer)) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if path != "" && path != "-" {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return err
		}
	}
	toStdout := asJSON || path == "-"
	if toStdout {
		if _, err := stdout.Write(b); err != nil {
			return err
		}
	}
	if !quiet {
		w := stdout
		if toStdout {
			w = stderr
		}
		summary(w)
	}
	return nil
}

// interruptedReport is the error of a testnet stopped by a signal after done of planned
// steps, naming the partial report it wrote.
func interruptedReport(done, planned uint64, what, report string) error {
	msg := fmt.Sprintf("stopped after %d of %d %s", done, planned, what)
	if report != "" {
		msg += fmt.Sprintf("; partial report (\"interrupted\": true) written to %s", report)
	}
	return interrupted("%s", msg)
}

// fmtEps formats an epsilon for the human summaries: 4 significant digits, or "inf"
// when it is unbounded.
func fmtEps(x privacy.Epsilon) string {
	if !x.Bounded() {
		return "inf"
	}
	return fmt.Sprintf("%.4g", float64(x))
}

func printSummary(w io.Writer, r *sim.Report) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s on %s: %d nodes, %d train rows, p=%d, %s loss, l1=%g l2=%g, scale %s, graph %s\n",
		r.Algo, r.Data, r.Nodes, r.TrainRows, r.Dims, r.Loss, r.L1, r.L2, r.Scale, r.Graph)
	switch privacy.StepName(r.LocalStep) {
	case "", privacy.StepProx:
		fmt.Fprintf(&b, "  gamma=%g lambda=%g clip=%g sigma=%g hops=%d seed=%d\n", r.Gamma, r.Lambda, r.Clip, r.Sigma, r.Hops, r.Seed)
	case privacy.StepGADMM:
		fmt.Fprintf(&b, "  gradient ADMM: step-size=%g beta=%g clip=%g sigma=%g hops=%d seed=%d\n", r.StepSize, r.Beta, r.Clip, r.Sigma, r.Hops, r.Seed)
	case privacy.StepSGD:
		fmt.Fprintf(&b, "  DP-SGD walk: step-size=%g sample-rate=%g clip=%g sigma=%g hops=%d seed=%d\n", r.StepSize, r.SampleRate, r.Clip, r.Sigma, r.Hops, r.Seed)
	default:
		fmt.Fprintf(&b, "  local step %s: step-size=%g nu=%g sample-rate=%g gamma=%g lambda=%g clip=%g sigma=%g hops=%d seed=%d\n",
			r.LocalStep, r.StepSize, r.Nu, r.SampleRate, r.Gamma, r.Lambda, r.Clip, r.Sigma, r.Hops, r.Seed)
	}
	fmt.Fprintf(&b, "objective  %.6g   reference %.6g   gap %.3g%%\n", r.Objective, r.ReferenceObjective, 100*r.Gap)
	if r.TrainAccuracy != nil {
		fmt.Fprintf(&b, "accuracy   train %.4f", *r.TrainAccuracy)
		if r.Accuracy != nil {
			fmt.Fprintf(&b, "   test %.4f (%d rows)", *r.Accuracy, r.TestRows)
		}
		b.WriteString("\n")
	}
	if r.TestObjective != nil {
		fmt.Fprintf(&b, "test objective %.6g\n", *r.TestObjective)
	}
	b.WriteString(regressionLine(r))
	fmt.Fprintf(&b, "speed      %.3f us/hop, %.2f s wall\n", r.UsPerHop, r.WallSeconds)
	if nw := r.Network; nw != nil {
		fmt.Fprintf(&b, "network    %s: %d libp2p hosts %s, %.0f hops/s; ledgers: %d entries (%d hops, %d redirects, %d repeats)\n",
			nw.Mode, nw.Hosts, hostsWhere(nw.Mode, nw.Transport), nw.HopsPerSecond, nw.LedgerEntries, r.Hops, nw.Redirects, nw.Repeats)
		if nw.Views > 0 {
			fmt.Fprintf(&b, "  %d release(s) also reached a peer that did not go on with the token (redirected hand-off): charged to it as a view in the realised path\n", nw.Views)
		}
		for _, k := range nw.Kills {
			fmt.Fprintf(&b, "  killed the holder at hop %d (node %d, token %s) with SIGKILL, restarted after %.2f s\n", k.Hop, k.Node, k.Phase, k.DownSeconds)
		}
		if nw.Dir != "" {
			fmt.Fprintf(&b, "  data directories and logs in %s\n", nw.Dir)
		}
	}
	p := r.Privacy
	fmt.Fprintf(&b, "ended      %s after %d hops\n", r.Ended, r.Hops)
	if bu := r.Budget; bu != nil {
		fmt.Fprintf(&b, "budget     %s epsilon %g (delta %g): %d nodes exhausted, %d overruns\n", bu.Kind, bu.Epsilon, bu.Delta, bu.Exhausted, bu.Overruns)
	}
	fmt.Fprintf(&b, "privacy    (epsilon, delta=%g), %s\n", p.Delta, p.Conversion)
	if p.UnitNote != "" {
		fmt.Fprintf(&b, "  unit: %s\n", p.UnitNote)
	}
	acct := ""
	if p.Local.Accountant != "" && p.Local.Accountant != privacy.AccountantRDP {
		acct = fmt.Sprintf(" by the %s accountant (RDP: %s)", p.Local.Accountant, fmtEps(p.Local.EpsilonRDP))
	}
	fmt.Fprintf(&b, "  local, max over nodes: epsilon %s%s (max %d updates per node); conditions %s\n",
		fmtEps(p.Local.Epsilon), acct, p.Local.Updates, holds(p.Local.ConditionsHold))
	fmt.Fprintf(&b, "    %s\n", p.Local.Theorem)
	if p.Local.Note != "" {
		fmt.Fprintf(&b, "    %s\n", p.Local.Note)
	}
	summaryPairwise(&b, "planned", p.PairwisePlanned)
	if p.PairwiseRealised != nil {
		summaryPairwise(&b, "realised", *p.PairwiseRealised)
		if c := p.PairwiseRealised.Coalition; c != nil {
			fmt.Fprintf(&b, "  coalition %v (views pooled), worst node %d: epsilon %s; conditions %s\n",
				c.Members, c.I, fmtEps(c.Epsilon), holds(c.ConditionsHold))
		}
	}
	io.WriteString(w, b.String())
}

func holds(ok bool) string {
	if ok {
		return "hold"
	}
	return "do NOT hold"
}

func summaryPairwise(b *strings.Builder, what string, pw sim.Pairwise) {
	fmt.Fprintf(b, "  pairwise %s, worst pair %d->%d: epsilon %s (mean %s, p90 %s); conditions %s\n",
		what, pw.Worst.I, pw.Worst.J, fmtEps(pw.Worst.Epsilon), fmtEps(pw.Mean), fmtEps(pw.P90), holds(pw.ConditionsHold))
	fmt.Fprintf(b, "    %s\n", pw.Theorem)
	if pw.Note != "" {
		fmt.Fprintf(b, "    %s\n", pw.Note)
	}
}

// testnetUsage returns a usage error of "testnet" (run prints it; exit code 2).
func testnetUsage(_ io.Writer, format string, a ...any) error {
	return usagef("testnet", format, a...)
}

// parseCoalition parses "j1,j2,..." into distinct node indices in [0, n).
func parseCoalition(s string, n int) ([]int, error) {
	var members []int
	seen := map[int]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		v, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not a node index", f)
		}
		if v < 0 || v >= n {
			return nil, fmt.Errorf("node %d outside [0, %d)", v, n)
		}
		if seen[v] {
			return nil, fmt.Errorf("node %d listed twice", v)
		}
		seen[v] = true
		members = append(members, v)
	}
	return members, nil
}

// checkOutputDirs checks, before a run, every output file named (flag -> path; "" and "-"
// name none), so that a run is not lost for a path written only at its end: an existing
// path is not a directory and opens for writing (not truncated: a device such as
// /dev/stdout or /dev/null is fine); a new one's directory exists and takes a new file (a
// file is created there and removed); and no two flags name the same regular file (the
// second write would replace the first).
func checkOutputDirs(paths map[string]string) error {
	flags := make([]string, 0, len(paths))
	for fl := range paths {
		flags = append(flags, fl)
	}
	sort.Strings(flags)
	owner := map[string]string{}
	for _, fl := range flags {
		p := paths[fl]
		if p == "" || p == "-" {
			continue
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return fmt.Errorf("%s %s: %v", fl, p, err)
		}
		st, err := os.Stat(p)
		if err == nil {
			if st.IsDir() {
				return fmt.Errorf("%s %s: a directory, not a file", fl, p)
			}
			if st.Mode().IsRegular() {
				if other, ok := owner[abs]; ok {
					return fmt.Errorf("%s and %s both name %s: the second would replace the first", other, fl, p)
				}
				owner[abs] = fl
			}
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				return fmt.Errorf("%s %s: cannot write it: %v", fl, p, err)
			}
			f.Close()
			continue
		}
		if other, ok := owner[abs]; ok {
			return fmt.Errorf("%s and %s both name %s: the second would replace the first", other, fl, p)
		}
		owner[abs] = fl
		dir := filepath.Dir(p)
		st, err = os.Stat(dir)
		switch {
		case err != nil:
			return fmt.Errorf("%s %s: its directory %s cannot be used: %v", fl, p, dir, err)
		case !st.IsDir():
			return fmt.Errorf("%s %s: %s is not a directory", fl, p, dir)
		}
		probe, err := os.CreateTemp(dir, ".dpadmm-write-check-*")
		if err != nil {
			return fmt.Errorf("%s %s: cannot write in %s: %v", fl, p, dir, err)
		}
		probe.Close()
		os.Remove(probe.Name())
	}
	return nil
}

// writeFileWith creates path, lets write fill it and closes it, reporting the first error.

func writeFileWith(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}

// writeTrace stores the run's path in the format read by 'dpadmm account trace'.
func writeTrace(path string, rep *sim.Report) error {
	// The report publishes the final model, so the trace says so: 'account trace' then
	// charges updates an observer never saw during the run, as the report does.
	tr := &privacy.Trace{Nodes: rep.Nodes, Clip: rep.Clip, Sigma: rep.Sigma, Steps: make([]privacy.TraceStep, len(rep.Trace)),
		FinalReleasedToAll: true, Step: privacy.TraceStepOf(rep.StepRun)}
	for k, st := range rep.Trace {
		tr.Steps[k] = privacy.TraceStep{Node: st.Node, Noisy: st.Noisy}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := privacy.WriteTrace(f, tr); err != nil {
		f.Close()
		return fmt.Errorf("trace %s: %w", path, err)
	}
	return f.Close()
}

// procsFlag is --procs: a boolean flag that also accepts a node count (--procs=N).
type procsFlag struct {
	on bool
	n  int
}

func (p *procsFlag) String() string {
	if p == nil || !p.on {
		return "false"
	}
	if p.n > 0 {
		return strconv.Itoa(p.n)
	}
	return "true"
}

func (p *procsFlag) IsBoolFlag() bool { return true }

func (p *procsFlag) Set(s string) error {
	if n, err := strconv.Atoi(s); err == nil { // a count first: --procs=1 is one node
		if n < 1 {
			return fmt.Errorf("want a node count >= 1, got %q", s)
		}
		p.on, p.n = true, n
		return nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("want true, false or a node count >= 1, got %q", s)
	}
	p.on, p.n = b, 0
	return nil
}

// runNetwork runs opt over real libp2p hosts: in this process (mem) or as one
// 'dpadmm node' process per node, this executable run again (procs).
func runNetwork(ctx context.Context, opt sim.Options, mem bool, transport string, killAt uint64, killPhase, dir string, fsync bool,
	withhold []int, ackTimeout time.Duration, progress func(entries, hops uint64), stderr io.Writer) (*sim.Report, error) {
	log, err := node.NewLogger(stderr, "text", "warn")
	if err != nil {
		return nil, err
	}
	no := testnet.NetOptions{Mode: "mem", Dir: dir, Sync: fsync, Logger: log, KillHolderAt: killAt, KillPhase: killPhase, Progress: progress,
		Withhold: withhold, AckTimeout: ackTimeout}
	if mem {
		no.Transport = transport
	} else {
		no.Mode = "procs"
		if no.Binary, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("cannot find this executable to start the nodes: %w", err)
		}
	}
	return testnet.RunNet(ctx, opt, no)
}

// hostsWhere says where a testnet's hosts ran and how they talked.
func hostsWhere(mode, transport string) string {
	switch {
	case mode == "procs":
		return "on loopback TCP, one process each"
	case transport == "mock":
		return "in this process, in memory (mock transport)"
	}
	return "in this process, on loopback TCP"
}
