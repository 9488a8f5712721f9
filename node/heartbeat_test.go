package node

import (
	"context"
	"testing"
	"time"
)

// TestLivenessAfterStall: a liveness check that comes more than the down time after the
// previous one (the node's process was stopped or its loop blocked) declares nobody
// down: the silence was the node's own. Members that then stay silent for the down time
// are declared down; a member already down comes back up only on a heartbeat heard, not
// because the silence clock restarted.
func TestLivenessAfterStall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nodes, _ := custodyNode(t, ctx, "stall", 3, func(i int, c *Config) { c.Heartbeat, c.HeartbeatMisses = 100*time.Millisecond, 5 }, nil)
	n := nodes[0]
	limit := n.downAfter()
	downs := func() (k int) {
		for _, p := range n.members[1:] {
			if n.isDown(p) {
				k++
			}
		}
		return k
	}
	set := func(alive, since, check time.Duration) {
		now := time.Now()
		n.mu.Lock()
		defer n.mu.Unlock()
		for _, p := range n.members[1:] {
			n.alive[p] = now.Add(-alive)
		}
		n.liveSince, n.liveCheck = now.Add(-since), now.Add(-check)
	}
	// check sets when the members were last heard, when the silence clock started and
	// when the previous check ran (each that long ago), runs a check and wants down
	// members declared down.
	check := func(alive, since, last time.Duration, down int, what string) {
		t.Helper()
		set(alive, since, last)
		n.checkLiveness(ctx)
		if k := downs(); k != down {
			t.Fatalf("%s: %d members down, want %d", what, k, down)
		}
	}
	// Every member was last heard 10 down times ago, and so was the last check.
	check(10*limit, 20*limit, 10*limit, 0, "after a stall")
	// The same silence seen by a check that ran on time: both are down.
	check(10*limit, 20*limit, limit/2, 2, "silent members with the loop running")
	// Another stall: the silence clock restarts, but the members stay down until heard.
	check(12*limit, 22*limit, 10*limit, 2, "after a second stall")
	// A heartbeat heard: up again.
	check(0, 22*limit, limit/2, 0, "after their heartbeats")
	// A loop that blocks before every check: the first late check restarts the clock,
	// the next late one judges (members silent since before the restart are down).
	check(10*limit, 10*limit, 10*limit, 0, "first late check")
	check(20*limit, 2*limit, 2*limit, 2, "second late check in a row")
}
