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
	// Every member was last heard 10 down times ago, and so was the last check.
	set(10*limit, 20*limit, 10*limit)
	n.checkLiveness(ctx)
	if k := downs(); k != 0 {
		t.Fatalf("after a stall: %d members declared down", k)
	}
	// The same silence seen by a check that ran on time: both are down.
	set(10*limit, 20*limit, limit/2)
	n.checkLiveness(ctx)
	if k := downs(); k != 2 {
		t.Fatalf("silent members with the loop running: %d declared down, want 2", k)
	}
	// Another stall: the silence clock restarts, but the members stay down until heard.
	set(12*limit, 22*limit, 10*limit)
	n.checkLiveness(ctx)
	if k := downs(); k != 2 {
		t.Fatalf("after a second stall: %d members down, want 2", k)
	}
	// A heartbeat heard: up again.
	set(0, 22*limit, limit/2)
	n.checkLiveness(ctx)
	if k := downs(); k != 0 {
		t.Fatalf("after their heartbeats: %d members down, want 0", k)
	}
	// A loop that blocks before every check: the first late check restarts the clock,
	// the next late one judges (members silent since before the restart are down).
	set(10*limit, 10*limit, 10*limit)
	n.checkLiveness(ctx)
	if k := downs(); k != 0 {
		t.Fatalf("first late check: %d members down, want 0", k)
	}
	n.mu.Lock()
	for _, p := range n.members[1:] {
		n.alive[p] = time.Now().Add(-20 * limit)
	}
	n.liveSince, n.liveCheck = time.Now().Add(-2*limit), time.Now().Add(-2*limit)
	n.mu.Unlock()
	n.checkLiveness(ctx)
	if k := downs(); k != 2 {
		t.Fatalf("second late check in a row: %d members down, want 2", k)
	}
}
