//go:build long

// The walk rejoin studies with real 'dpadmm node' processes: seconds of wall-clock hops,
// heartbeats and lingers each, so they run with -tags long (.ci/run runs them).

package main

import (
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dpadmm/dpadmm/node"
	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/privacy"
)

var statusURL = regexp.MustCompile(`status on (http://127\.0\.0\.1:[0-9]+/status)`)

// nodeStatus reads the /status of a node process that printed its status address.
func nodeStatus(c *child) (node.Status, bool) {
	var st node.Status
	m := statusURL.FindStringSubmatch(c.stdout.String())
	if m == nil {
		return st, false
	}
	cl := http.Client{Timeout: time.Second}
	resp, err := cl.Get(m[1])
	if err != nil {
		return st, false
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st) == nil
}

// walkRejoinNet starts a walk run of three 'dpadmm node' processes on loopback through
// announce/join/start (node 0 starts it, the others join with --peer to node 0); each
// node listens on a port of its own; every node pauses if it receives the token of hop
// pause (stored and acked, not stepped). It returns the processes, their data
// directories and a function that (re)starts node i with extra arguments, on its port
// or, with newPort, on a port the system chooses.
func walkRejoinNet(t *testing.T, run string, hops, pause int, extra ...string) ([]*child, []string, func(i int, newPort bool, more ...string) *child) {
	t.Helper()
	ports := []int{freePort(t), freePort(t), freePort(t)}
	port := ports[0]
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	id0, err := store.DataDirPeerID(dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	peer0 := fmt.Sprintf("/ip4/127.0.0.1/tcp/%d/p2p/%s", port, id0)
	start := func(i int, newPort bool, more ...string) *child {
		args := []string{"node", "--run", run, "--data", "embedded", "--shard", fmt.Sprintf("%d/3", i), "--datadir", dirs[i],
			"--hops", fmt.Sprint(hops), "--profile", "test", "--no-fsync", "--insecure-testnet", "--debug-status", "--http", "127.0.0.1:0",
			"--heartbeat", "200ms", "--heartbeat-misses", "10", "--log-level", "info", "--quiet"}
		if !newPort {
			args = append(args, "--listen", fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", ports[i]))
		}
		if i == 0 {
			args = append(args, "--start", "--min-peers", "3", "--join-window", "300ms")
		} else {
			args = append(args, "--peer", peer0)
		}
		return startChild(t, append(append(args, extra...), more...)...)
	}
	p := fmt.Sprint(pause)
	cs := []*child{start(0, false, "--pause-at-hop", p)}
	for k := 0; ; k++ {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			c.Close()
			break
		}
		if k > 1000 {
			t.Fatal("starter not listening")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cs = append(cs, start(1, false, "--pause-at-hop", p), start(2, false, "--pause-at-hop", p))
	return cs, dirs, start
}

// pausedNode waits until one node reports on /status that it paused at hop h holding
// the token, and returns it.
func pausedNode(t *testing.T, cs []*child, h uint64) int {
	t.Helper()
	deadline := time.Now().Add(40 * time.Second)
	for time.Now().Before(deadline) {
		for i, c := range cs {
			select {
			case <-c.done:
				t.Fatalf("node %d exited (%v) before the pause\nstderr:\n%s", i, c.err, c.stderr)
			default:
			}
			if st, ok := nodeStatus(c); ok && st.Paused && st.Hop == h && st.Holding {
				return i
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no node paused at the pause hop")
	return -1
}

// TestNodeRejoinWalkSIGINT: a walk run of three 'dpadmm node' processes joined through
// announce/join/start. While the token is paused at one node (Y), another node (X) is
// stopped with SIGINT and started again on the same --datadir (on another port): it
// rejoins without a start message, and its /status shows the membership and the noisy
// updates its ledger holds, with the local epsilon of that many updates. Then Y is
// stopped with SIGINT and restarted: it steps the token it had stored. The run ends with
// every node holding the same z, and each model.json counts the noisy updates of its
// node's ledger.
func TestNodeRejoinWalkSIGINT(t *testing.T) {
	const hops, pause = 90, 40
	// No member is declared down during the restarts (100 missed beats of 200 ms): a
	// backup holder would otherwise regenerate the token without the paused holder. The
	// restarted X re-sends its last release at its first tick (its record of the ack had
	// not reached its disk) to the member that took it, possibly Y just as Y is stopped
	// below: Y answers duplicate while it drains its hand-off streams (node.Node's
	// quiesce), so X keeps to Y and does not redirect the release to the third member,
	// which would pause at the same hop (every node has --pause-at-hop).
	cs, dirs, start := walkRejoinNet(t, "rejoin-walk", hops, pause, "--heartbeat-misses", "100")
	y := pausedNode(t, cs, pause)
	x := (y + 1) % 3
	if code, _ := cs[x].stop(t, syscall.SIGINT, 10*time.Second); code != 130 {
		t.Fatalf("node %d: exit %d after SIGINT, want 130\n%s", x, code, cs[x].stderr)
	}
	spent := noisyEntries(t, dirs[x])
	if spent == 0 {
		t.Fatalf("node %d stopped with no noisy update in its ledger: nothing to check", x)
	}
	cs[x] = start(x, true) // on a new port: the others learn it when X dials them
	// The token is paused at Y: X takes no token while its status is read.
	var st node.Status
	deadline := time.Now().Add(20 * time.Second)
	for {
		if s, ok := nodeStatus(cs[x]); ok && s.Members == 3 {
			st = s
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("restarted node %d: no membership on /status after 20 s\nstdout:\n%s\nstderr:\n%s", x, cs[x].stdout, cs[x].stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ref := readModelStatusRef(t, dirs[x])
	if st.Index != ref || st.Updates != spent || st.HopsSeen != 0 {
		t.Fatalf("restarted node %d: /status members %d index %d own_updates %d hops_seen %d; want index %d (start.json), own_updates %d (its ledger)",
			x, st.Members, st.Index, st.Updates, st.HopsSeen, ref, spent)
	}
	if !(st.Epsilon > 0) {
		t.Fatalf("restarted node %d: epsilon spent %v for %d updates", x, st.Epsilon, spent)
	}
	if !strings.Contains(cs[x].stderr.String(), "rejoining the run") {
		t.Errorf("restarted node %d did not log its rejoin:\n%s", x, cs[x].stderr)
	}
	// Now the holder Y: stopped and restarted, it steps the stored token and the walk goes on.
	if code, _ := cs[y].stop(t, syscall.SIGINT, 10*time.Second); code != 130 {
		t.Fatalf("node %d: exit %d after SIGINT, want 130\n%s", y, code, cs[y].stderr)
	}
	cs[y] = start(y, false)
	for i, c := range cs {
		waitExit(t, fmt.Sprintf("node %d", i), c, 45*time.Second)
	}
	ms := make([]node.Model, 3)
	for i := range ms {
		ms[i] = readModel(t, dirs[i])
		if ms[i].Nodes != 3 || ms[i].Hops != hops {
			t.Fatalf("node %d: model.json nodes %d hops %d", i, ms[i].Nodes, ms[i].Hops)
		}
		if k := noisyEntries(t, dirs[i]); ms[i].Privacy.Updates != k {
			t.Errorf("node %d: model.json own_updates %d, its ledger %d noisy updates", i, ms[i].Privacy.Updates, k)
		}
	}
	sameZ(t, ms)
	if !(ms[x].Privacy.Updates >= spent) {
		t.Errorf("node %d: %d updates at the end, %d before its restart", x, ms[x].Privacy.Updates, spent)
	}
}

// readModelStatusRef returns this node's index in its directory's start.json.
func readModelStatusRef(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, node.StartFile))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Members []string `json:"members"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	id, err := store.DataDirPeerID(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range r.Members {
		if m == id.String() {
			return i
		}
	}
	t.Fatalf("%s does not list %s", node.StartFile, id)
	return -1
}

// TestNodeRejoinWalkAfterEnd: a member stopped with SIGINT during a walk run (the others
// finish without it) and started again on its --datadir after the run ended obtains the
// final model from the member that released it (which keeps it for --final-linger) and
// writes the same z as the others; the releaser then exits without waiting out the
// linger.
func TestNodeRejoinWalkAfterEnd(t *testing.T) {
	// The walk goes on long enough after the holder's restart (about 1 s of hops) for
	// both running members to declare X down (Y restarts with 3 missed beats of 200 ms):
	// the releaser, whichever it is, then waits for X only because of the linger and
	// pushes nothing to it; X asks for the final model (it may also receive one of the
	// releaser's control-topic republications).
	const hops, pause = 15000, 30
	cs, dirs, start := walkRejoinNet(t, "rejoin-end", hops, pause, "--final-linger", "40s")
	y := pausedNode(t, cs, pause)
	x := (y + 1) % 3
	if code, _ := cs[x].stop(t, syscall.SIGINT, 10*time.Second); code != 130 {
		t.Fatalf("node %d: exit %d after SIGINT, want 130\n%s", x, code, cs[x].stderr)
	}
	if code, _ := cs[y].stop(t, syscall.SIGINT, 10*time.Second); code != 130 {
		t.Fatalf("node %d: exit %d after SIGINT, want 130\n%s", y, code, cs[y].stderr)
	}
	cs[y] = start(y, false, "--heartbeat-misses", "3")
	// The run ends without X: wait for the other two nodes' model.json.
	deadline := time.Now().Add(45 * time.Second)
	for {
		done := 0
		for i := range dirs {
			if _, err := os.Stat(filepath.Join(dirs[i], store.ModelFile)); i != x && err == nil {
				done++
			}
		}
		if done == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run did not end without node %d\nnode %d stderr:\n%s", x, y, cs[y].stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(dirs[x], store.ModelFile)); err == nil {
		t.Fatalf("node %d has a model.json while it was stopped", x)
	}
	t0 := time.Now()
	cs[x] = start(x, false)
	for i, c := range cs {
		if i != x {
			waitExit(t, fmt.Sprintf("node %d", i), c, 45*time.Second)
		}
	}
	defer func() {
		if t.Failed() {
			for i, c := range cs {
				if i != x {
					t.Logf("node %d stderr:\n%s", i, c.stderr)
				}
			}
		}
	}()
	waitExit(t, fmt.Sprintf("restarted node %d", x), cs[x], 30*time.Second)
	if took := time.Since(t0); took > 30*time.Second {
		t.Errorf("the run's nodes exited %v after node %d came back (the linger is 40 s)", took, x)
	}
	ms := make([]node.Model, 3)
	for i := range ms {
		ms[i] = readModel(t, dirs[i])
	}
	sameZ(t, ms)
	if !strings.Contains(cs[x].stderr.String(), "final model obtained from a member on rejoining") {
		t.Errorf("restarted node %d did not log where its final model came from:\n%s", x, cs[x].stderr)
	}
	if ms[x].Privacy.Updates != noisyEntries(t, dirs[x]) {
		t.Errorf("node %d: model.json own_updates %d, ledger %d", x, ms[x].Privacy.Updates, noisyEntries(t, dirs[x]))
	}
}

// noisyEntries counts the noisy updates in the ledger of a stopped node's directory.
func noisyEntries(t *testing.T, dir string) int {
	t.Helper()
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	es, err := st.Ledger()
	if err != nil {
		t.Fatal(err)
	}
	k := 0
	for _, e := range es {
		if e.Mechanism == privacy.MechGaussian {
			k++
		}
	}
	return k
}

func readModel(t *testing.T, dir string) node.Model {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, store.ModelFile))
	if err != nil {
		t.Fatal(err)
	}
	var m node.Model
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// sameZ fails unless every model has the same z, bit for bit.
func sameZ(t *testing.T, ms []node.Model) {
	t.Helper()
	for i := range ms {
		if len(ms[i].Model) == 0 || len(ms[i].Model) != len(ms[0].Model) || ms[i].Hops != ms[0].Hops {
			t.Fatalf("node %d: model of %d values at hop %d, node 0: %d at hop %d", i, len(ms[i].Model), ms[i].Hops, len(ms[0].Model), ms[0].Hops)
		}
		for k := range ms[i].Model {
			if math.Float64bits(ms[i].Model[k]) != math.Float64bits(ms[0].Model[k]) {
				t.Fatalf("node %d: z[%d] = %v, node 0 has %v", i, k, ms[i].Model[k], ms[0].Model[k])
			}
		}
	}
}
