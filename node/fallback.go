package node

import (
	"math"
	"time"

	"github.com/dpadmm/dpadmm/walk"
)

// This file maps wall-clock time to the ticks of walk.Custody, which holds the custody
// rules with their timers: ack timeouts, busy retries, backup expiry and the slow
// fallback (its timeout fixed by Config.FallbackTimeout or derived from the observed hop
// time, its backoff and its give-up after walk.MaxFallbacks). The runtime loop (runLoop
// on a wallClock) ticks lazily: it sleeps until the machine's next deadline or an input,
// and then catches up to the current tick, so that an idle node does not wake up between
// its deadlines.

// MaxFallbacks is how many fallback re-sends a node makes without any token, ack or
// release in between before it stops (walk.MaxFallbacks).
const MaxFallbacks = walk.MaxFallbacks

// tickOf is the duration of one custody tick: AckTimeout/100, between 1 ms and 100 ms
// (100 ms with the default ack timeout of 10 s). An ack timeout is then about 100 ticks,
// and a busy receiver is asked again after 1, 2, 4, ... ticks.
func tickOf(c Config) time.Duration {
	return min(max(c.AckTimeout/100, time.Millisecond), 100*time.Millisecond)
}

// ticks returns d in ticks, rounded up, at least 1.
func (n *Node) ticks(d time.Duration) int {
	t := (d + n.walk.tick - 1) / n.walk.tick
	return int(min(max(t, 1), math.MaxInt32))
}

// tickDur returns t ticks as a duration.
func (n *Node) tickDur(t int64) time.Duration {
	if t > int64(math.MaxInt64/n.walk.tick) {
		return math.MaxInt64
	}
	return time.Duration(t) * n.walk.tick
}

// fallbackFloor is the shortest derived fallback timeout: twice the time a regeneration
// needs (the down declaration plus an ack timeout), so that the fallback never pre-empts
// the faster recovery by the backup chain.
func (n *Node) fallbackFloor() time.Duration {
	d := n.cfg.AckTimeout
	if n.cfg.Heartbeat > 0 {
		d += n.downAfter()
	}
	return 2 * d
}

// hopTime is the slowest time per hop observed here between two visits of one lineage
// (the machine's ticks per hop).
func (n *Node) hopTime() time.Duration {
	if n.walk.cust == nil {
		return 0
	}
	return time.Duration(n.walk.cust.HopTicks() * float64(n.walk.tick))
}
