package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dpadmm/dpadmm/node"
	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/testnet/experiment"
)

// syncBuffer is a bytes.Buffer safe for a child's output goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// child is a dpadmm command run as a separate process: this test binary with asMainEnv
// set (TestMain runs it as the dpadmm command), its temporary directory TMPDIR set to a
// directory of the test, and its stdout and stderr captured through pipes (not a
// terminal).
type child struct {
	cmd    *exec.Cmd
	stdout *syncBuffer
	stderr *syncBuffer
	tmp    string
	done   chan struct{}
	err    error
}

func startChild(t *testing.T, args ...string) *child {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{stdout: &syncBuffer{}, stderr: &syncBuffer{}, tmp: filepath.Join(t.TempDir(), "tmp"), done: make(chan struct{})}
	if err := os.Mkdir(c.tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	c.cmd = exec.Command(bin, args...)
	c.cmd.Env = append(os.Environ(), asMainEnv+"=1", "TMPDIR="+c.tmp)
	c.cmd.Stdout, c.cmd.Stderr = c.stdout, c.stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.err = c.cmd.Wait(); close(c.done) }()
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			c.cmd.Process.Kill()
			<-c.done
		}
	})
	return c
}

// waitFor waits until out contains s, failing the test after timeout.
func (c *child) waitFor(t *testing.T, out *syncBuffer, s string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(out.String(), s) {
		select {
		case <-c.done:
			t.Fatalf("exited (%v) before printing %q\nstdout:\n%s\nstderr:\n%s", c.err, s, c.stdout, c.stderr)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q after %v\nstdout:\n%s\nstderr:\n%s", s, timeout, c.stdout, c.stderr)
		}
	}
}

// waitForLedger waits until the ledger of one of the node data directories in dirs has
// an entry (the walk made a hop), failing the test after timeout.
func (c *child) waitForLedger(t *testing.T, dirs []string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for _, d := range dirs {
			if fi, err := os.Stat(filepath.Join(d, store.LedgerFile)); err == nil && fi.Size() > 0 {
				return
			}
		}
		select {
		case <-c.done:
			t.Fatalf("exited (%v) before a ledger entry was written\nstdout:\n%s\nstderr:\n%s", c.err, c.stdout, c.stderr)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ledger entry after %v\nstdout:\n%s\nstderr:\n%s", timeout, c.stdout, c.stderr)
		}
	}
}

// stop sends sig and returns the exit code and how long the process took to exit; it
// fails the test if that takes longer than within.
func (c *child) stop(t *testing.T, sig syscall.Signal, within time.Duration) (int, time.Duration) {
	t.Helper()
	start := time.Now()
	if err := c.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.done:
	case <-time.After(within):
		t.Fatalf("still running %v after %v\nstderr:\n%s", within, sig, c.stderr)
	}
	took := time.Since(start)
	var ee *exec.ExitError
	switch {
	case c.err == nil:
		return 0, took
	case errors.As(c.err, &ee):
		return ee.ExitCode(), took
	}
	t.Fatalf("wait: %v", c.err)
	return 0, 0
}

// assertEmptyDir fails unless dir has no entries (a temporary directory left behind).
func assertEmptyDir(t *testing.T, dir string) {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		t.Errorf("left behind in TMPDIR: %s", e.Name())
	}
}

// plainLines checks that progress output has no carriage return (it is not a terminal)
// and returns its lines that start with prefix; it fails when there are none.
func plainLines(t *testing.T, out, prefix string) []string {
	t.Helper()
	if strings.Contains(out, "\r") {
		t.Errorf("carriage return in output to a pipe: %q", out)
	}
	var ls []string
	stamp := regexp.MustCompile(`^\d\d:\d\d:\d\d `) // a node's progress lines start with the time
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(stamp.ReplaceAllString(l, ""), prefix) {
			ls = append(ls, l)
		}
	}
	if len(ls) == 0 {
		t.Errorf("no progress line %q... in %q", prefix, out)
	}
	return ls
}

// checkInterrupted checks the partial-report keys and returns the steps done.
func checkInterrupted(t *testing.T, rep map[string]any, planned float64) uint64 {
	t.Helper()
	if rep["interrupted"] != true || rep["ended"] != "interrupted" || rep["hops_planned"] != planned {
		t.Fatalf("report: interrupted %v, ended %v, hops_planned %v", rep["interrupted"], rep["ended"], rep["hops_planned"])
	}
	h, _ := rep["hops"].(float64)
	if !(h > 0 && h < planned) {
		t.Fatalf("report: hops %v, want in (0, %v)", rep["hops"], planned)
	}
	return uint64(h)
}

// TestInterruptSimSIGINT: SIGINT stops a long simulator run within a few seconds with
// exit code 130; the report is written, marked interrupted, with the hops done; the
// progress lines on a pipe are plain lines.
func TestInterruptSimSIGINT(t *testing.T) {
	dir := t.TempDir()
	rep := filepath.Join(dir, "r.json")
	curve := filepath.Join(dir, "c.csv")
	c := startChild(t, "testnet", "--hops", "50000000", "--report", rep, "--curve", curve, "--curve-every", "100000")
	c.waitFor(t, c.stderr, "hop ", 30*time.Second) // the first progress line, after a second of walking
	code, took := c.stop(t, syscall.SIGINT, 5*time.Second)
	if code != 130 {
		t.Fatalf("exit %d, want 130\n%s", code, c.stderr)
	}
	t.Logf("stopped %v after SIGINT", took)
	m := readReport(t, rep)
	hops := checkInterrupted(t, m, 50000000)
	if !strings.Contains(c.stderr.String(), "interrupted: stopped after "+strconv.FormatUint(hops, 10)+" of 50000000 hops") {
		t.Errorf("stderr does not say where it stopped:\n%s", c.stderr)
	}
	for _, l := range plainLines(t, c.stderr.String(), "hop ") {
		if !strings.Contains(l, "/50000000 (") {
			t.Errorf("progress line %q", l)
		}
	}
	// The curve holds every point up to the hops done (flushed, not truncated): the header,
	// hop 0 and every 100,000th hop, and the last hop done when it is not one of them.
	b, err := os.ReadFile(curve)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	want := 2 + int(hops/100000)
	if hops%100000 != 0 {
		want++
	}
	if len(lines) != want {
		t.Errorf("curve has %d lines for %d hops, want %d", len(lines), hops, want)
	}
	assertEmptyDir(t, c.tmp)
}

// TestInterruptExperimentSIGTERM: SIGTERM stops 'experiment radmm' with exit code 143
// after the runs under way stop; the series whose runs all completed are written to
// NAME.partial.csv (every series with its T+1 rows) and no NAME.csv is written.
func TestInterruptExperimentSIGTERM(t *testing.T) {
	out := t.TempDir()
	const T = 300
	c := startChild(t, "experiment", "radmm", "--iters", strconv.Itoa(T), "--seeds", "2", "--workers", "1", "--out", out, "--name", "f")
	c.waitFor(t, c.stderr, "run 3/", 60*time.Second)
	code, _ := c.stop(t, syscall.SIGTERM, 5*time.Second)
	if code != 143 {
		t.Fatalf("exit %d, want 143\n%s", code, c.stderr)
	}
	for k, l := range plainLines(t, c.stderr.String(), "experiment radmm: run ") {
		if want := "experiment radmm: run " + strconv.Itoa(k+1) + "/"; !strings.HasPrefix(l, want) {
			t.Errorf("progress line %d %q, want %q...", k, l, want)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "f.csv")); err == nil {
		t.Error("an interrupted experiment wrote f.csv")
	}
	f, err := os.Open(filepath.Join(out, "f.partial.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(recs[0], ",") != experiment.ExperimentCSVHeader {
		t.Fatalf("header %v", recs[0])
	}
	rows := map[string]int{}
	for _, r := range recs[1:] {
		rows[r[0]+" "+r[1]]++
	}
	// Seeds 2 and one worker: the first runs are non-private ADMM (seeds 1, 2), then the
	// series of the first alpha in order; at least run 3 was done, so ADMM is complete.
	if rows["admm inf"] != T+1 {
		t.Errorf("series admm: %d rows, want %d", rows["admm inf"], T+1)
	}
	for s, k := range rows {
		if k != T+1 {
			t.Errorf("series %s: %d rows, want %d", s, k, T+1)
		}
	}
	if !strings.Contains(c.stderr.String(), "series whose runs all completed are in") {
		t.Errorf("stderr:\n%s", c.stderr)
	}
}

// TestInterruptMemSIGTERM: SIGTERM stops 'testnet --mem' (real libp2p hosts in one
// process) with exit code 143, no error logged about hand-offs, its temporary data
// directories removed, and a partial report whose model, path fingerprint and privacy
// figures are the simulator's after the same number of hops.
func TestInterruptMemSIGTERM(t *testing.T) {
	rep := filepath.Join(t.TempDir(), "r.json")
	c := startChild(t, "testnet", "--mem", "--nodes", "3", "--hops", "1000000", "--report", rep)
	c.waitFor(t, c.stderr, "ledger entries ", 60*time.Second)
	code, _ := c.stop(t, syscall.SIGTERM, 10*time.Second)
	if code != 143 {
		t.Fatalf("exit %d, want 143\n%s", code, c.stderr)
	}
	plainLines(t, c.stderr.String(), "ledger entries ")
	if s := c.stderr.String(); strings.Contains(s, "ERR") || strings.Contains(s, "hand-off failed") {
		t.Errorf("errors logged on interruption:\n%s", s)
	}
	assertEmptyDir(t, c.tmp)
	m := readReport(t, rep)
	hops := checkInterrupted(t, m, 1000000)
	sim, _ := testnetReport(t, "--nodes", "3", "--hops", strconv.FormatUint(hops, 10), "--quiet")
	sameReportFigures(t, m, sim)
}

// sameReportFigures checks that a partial network report has the simulator's model (bit
// for bit through JSON), trace hash and privacy figures.
func sameReportFigures(t *testing.T, got, sim map[string]any) {
	t.Helper()
	gm, _ := got["model"].([]any)
	sm, _ := sim["model"].([]any)
	if len(gm) == 0 || len(gm) != len(sm) {
		t.Fatalf("model of %d values, simulator %d", len(gm), len(sm))
	}
	for k := range gm {
		if math.Float64bits(gm[k].(float64)) != math.Float64bits(sm[k].(float64)) {
			t.Fatalf("model[%d] = %v, simulator %v", k, gm[k], sm[k])
		}
	}
	if got["trace_hash"] != sim["trace_hash"] {
		t.Errorf("trace_hash %v, simulator %v", got["trace_hash"], sim["trace_hash"])
	}
	gp, _ := json.Marshal(got["privacy"].(map[string]any)["pairwise_realised"].(map[string]any)["worst"])
	sp, _ := json.Marshal(sim["privacy"].(map[string]any)["pairwise_realised"].(map[string]any)["worst"])
	if !bytes.Equal(gp, sp) {
		t.Errorf("realised worst pair %s, simulator %s", gp, sp)
	}
}

// TestInterruptProcsSIGINT: SIGINT to 'testnet --procs' stops the node processes
// (SIGTERM, each ends its run) and exits 130; every node's data directory (kept with
// --dir) opens cleanly (ledger intact, checkpoint consistent with it), and the partial
// report is the simulator's after the hops done.
func TestInterruptProcsSIGINT(t *testing.T) {
	dir := t.TempDir()
	rep := filepath.Join(dir, "r.json")
	nodes := filepath.Join(dir, "nodes")
	c := startChild(t, "testnet", "--procs", "--nodes", "3", "--hops", "1000000", "--dir", nodes, "--report", rep)
	c.waitFor(t, c.stderr, "ledger entries ", 60*time.Second)
	// The progress of node processes counts no entries (their /status hides the
	// per-hop figures): wait for the walk's first hop in the ledgers themselves.
	var dirs []string
	for i := 0; i < 3; i++ {
		dirs = append(dirs, filepath.Join(nodes, "node-"+strconv.Itoa(i)))
	}
	c.waitForLedger(t, dirs, 60*time.Second)
	code, _ := c.stop(t, syscall.SIGINT, 15*time.Second)
	if code != 130 {
		t.Fatalf("exit %d, want 130\n%s", code, c.stderr)
	}
	assertEmptyDir(t, c.tmp)
	for i := 0; i < 3; i++ {
		st, err := store.Open(filepath.Join(nodes, "node-"+strconv.Itoa(i)))
		if err != nil {
			t.Fatalf("node %d: data directory after the interruption: %v", i, err)
		}
		ck, err := st.LoadCheckpoint()
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		if ck != nil && ck.Updates > st.Entries() {
			t.Errorf("node %d: checkpoint with %d updates, ledger with %d entries", i, ck.Updates, st.Entries())
		}
		st.Close()
		log, _ := os.ReadFile(filepath.Join(nodes, "node-"+strconv.Itoa(i)+".log"))
		if strings.Contains(string(log), "hand-off failed") {
			t.Errorf("node %d logged a failed hand-off on interruption:\n%s", i, log)
		}
	}
	m := readReport(t, rep)
	hops := checkInterrupted(t, m, 1000000)
	sim, _ := testnetReport(t, "--nodes", "3", "--hops", strconv.FormatUint(hops, 10), "--quiet")
	sameReportFigures(t, m, sim)
}

// TestInterruptGossipProcsSIGTERM: SIGTERM to an R-ADMM testnet of node processes stops
// them (each writes the state it reached), exits 143 with a partial report, counts the
// iterations every node completed from their ledgers and leaves no temporary directory.
func TestInterruptGossipProcsSIGTERM(t *testing.T) {
	rep := filepath.Join(t.TempDir(), "r.json")
	c := startChild(t, "testnet", "--algo", "radmm", "--procs", "--nodes", "3", "--iters", "1000000", "--report", rep)
	c.waitFor(t, c.stderr, "iteration ", 60*time.Second)
	code, _ := c.stop(t, syscall.SIGTERM, 15*time.Second)
	if code != 143 {
		t.Fatalf("exit %d, want 143\n%s", code, c.stderr)
	}
	plainLines(t, c.stderr.String(), "iteration ")
	assertEmptyDir(t, c.tmp)
	m := readReport(t, rep)
	iters := checkInterrupted(t, m, 1000000)
	nw, _ := m["network"].(map[string]any)
	// Every node released f(0) and iterations 1..iters at least (one ledger entry each).
	if e, _ := nw["ledger_entries"].(float64); e < 3*float64(iters+1) {
		t.Errorf("%v ledger entries for %d iterations of 3 nodes", nw["ledger_entries"], iters)
	}
	for k, v := range m["model"].([]any) {
		if f, ok := v.(float64); !ok || math.IsNaN(f) || math.IsInf(f, 0) {
			t.Fatalf("model[%d] = %v", k, v)
		}
	}
}

// TestNodeWaitingProgress: a starter waiting for peers says so on stdout (plain lines)
// at the default log level, and SIGINT ends it with exit code 130 and a message naming
// its data directory, which opens cleanly afterwards.
func TestNodeWaitingProgress(t *testing.T) {
	dd := filepath.Join(t.TempDir(), "n0")
	c := startChild(t, "node", "--run", "demo", "--data", "embedded", "--shard", "0/3", "--datadir", dd,
		"--start", "--min-peers", "3", "--profile", "test")
	c.waitFor(t, c.stdout, "waiting for peers: 1 of 3 joined, run demo (0 peers connected)", 30*time.Second)
	code, _ := c.stop(t, syscall.SIGINT, 5*time.Second)
	if code != 130 {
		t.Fatalf("exit %d, want 130\n%s", code, c.stderr)
	}
	plainLines(t, c.stdout.String(), "waiting for peers: ")
	if s := c.stderr.String(); !strings.Contains(s, "dpadmm node: interrupted: stopped before the run ended") || !strings.Contains(s, dd) {
		t.Errorf("stderr:\n%s", s)
	}
	st, err := store.Open(dd)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
}

// TestProgressPrinter: to a pipe or buffer every update is a plain line; on a terminal
// the updates rewrite one line ('\r', padded over a longer previous text) and Done ends
// it; a quiet printer prints nothing.
func TestProgressPrinter(t *testing.T) {
	var b bytes.Buffer
	p := newProgress(&b, false)
	p.Printf("hop %d/%d", 10, 100)
	p.Printf("hop %d/%d\n", 20, 100)
	p.Done()
	if b.String() != "hop 10/100\nhop 20/100\n" {
		t.Errorf("plain output %q", b.String())
	}
	b.Reset()
	tty := &progress{w: &b, tty: true}
	tty.Printf("run 10/100")
	tty.Printf("run 9")
	tty.Done()
	if b.String() != "\rrun 10/100\rrun 9     \n" {
		t.Errorf("terminal output %q", b.String())
	}
	b.Reset()
	q := newProgress(&b, true)
	q.Printf("x")
	q.Done()
	if b.Len() != 0 {
		t.Errorf("quiet output %q", b.String())
	}
}

// TestNodeProgressLine: the progress line of a node before and during its run.
func TestNodeProgressLine(t *testing.T) {
	for _, c := range []struct {
		st   node.Status
		want string
	}{
		{node.Status{Join: &node.JoinStatus{Role: "starter", Joined: 1, Want: 3}},
			"waiting for peers: 1 of 3 joined, run demo (0 peers connected)"},
		{node.Status{Join: &node.JoinStatus{Role: "starter", Joined: 3, Want: 3, WindowLeft: 1.2, Connected: 2}},
			"waiting for peers: 3 of 3 joined, run demo; starting when the join window closes in 2 s (2 peers connected)"},
		{node.Status{Join: &node.JoinStatus{Role: "static", Joined: 2, Want: 4, Connected: 1}},
			"waiting for peers: 2 of 4 members connected, run demo (1 peers connected)"},
		{node.Status{Join: &node.JoinStatus{Role: "joiner", MDNS: "no usable network interface for mDNS"}},
			"waiting for run demo to be announced by its starter (0 peers connected); no usable network interface for mDNS; give peers with --peer"},
		{node.Status{Join: &node.JoinStatus{Role: "joiner", Announced: true, Connected: 1}},
			"joined run demo; waiting for its starter to start it (1 peers connected)"},
		{node.Status{Join: &node.JoinStatus{Role: "joiner", Announced: true, Missed: true, Connected: 2}},
			"run demo started without this node (it arrived after the join window closed); waiting for another start (2 peers connected)"},
		{node.Status{HopsSeen: 40, Updates: 63, Ledger: 64, Epsilon: 19.1534},
			"run demo: hops seen 40, own updates 63, ledger entries 64, epsilon spent 19.15 (local)"},
		{node.Status{Epsilon: -1, RADMM: &node.RADMMStatus{Iter: 12, Iters: 100, Neighbors: []int{1, 3}, Reachable: 1, LedgerEntries: 13}},
			"run demo: iteration 12/100, 1 of 2 neighbours reachable, 13 ledger entries, epsilon spent unbounded"},
	} {
		if got := nodeProgressLine(c.st, "demo"); got != c.want {
			t.Errorf("got  %q\nwant %q", got, c.want)
		}
	}
}

// TestWalkProgressLine: a walk node's progress line gives the hop of K with the
// percentage, the rate and the time left, its updates and epsilon, and says what it waits
// for when the token has been away for a while.
func TestWalkProgressLine(t *testing.T) {
	for _, c := range []struct {
		p    node.Progress
		rate float64
		want string
	}{
		{node.Progress{Hop: 1000, Hops: 4000, Updates: 20, Epsilon: 3.25, SinceToken: time.Second}, 50,
			"run demo: hop 1000 of 4000 (25.0%), 50.0 hops/s, about 1m0s left; own updates 20, epsilon spent 3.25 (local)"},
		{node.Progress{Hop: 10, Hops: 4000, Holding: true}, 0,
			"run demo: hop 10 of 4000 (0.2%); own updates 0, epsilon spent 0 (local); this node holds the token"},
		{node.Progress{Hop: 0, Hops: 4000, SinceToken: -1}, 0,
			"run demo: hop 0 of 4000 (0.0%); own updates 0, epsilon spent 0 (local); the token has not come here yet"},
		{node.Progress{Hop: 77, Hops: 100, SinceToken: 42 * time.Second, Fallback: time.Minute}, 2,
			"run demo: hop 77 of 100 (77.0%), 2.0 hops/s, about 12s left; own updates 0, epsilon spent 0 (local); the token left this node 42s ago (hop 77) and is with another member; if nothing comes for 1m0s, this node re-sends its last release"},
		{node.Progress{Hop: 100, Hops: 100, Done: true}, 3,
			"run demo: hop 100 of 100 (100.0%), 3.0 hops/s; own updates 0, epsilon spent 0 (local); done"},
	} {
		if got := walkProgressLine(c.p, "demo", c.rate); got != c.want {
			t.Errorf("got  %q\nwant %q", got, c.want)
		}
	}
	var r hopRate
	t0 := time.Unix(0, 0)
	r.add(t0, 100)
	if got := r.add(t0.Add(10*time.Second), 200); got != 10 {
		t.Errorf("rate %v, want 10 hops/s", got)
	}
}
