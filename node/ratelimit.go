package node

import (
	"sync"
	"time"
)

// logEvery is the shortest interval between two log lines of a repeated warning about
// the same peer (a member that stays unreachable makes every hand-off fail).
const logEvery = 10 * time.Second

// rateLimiter lets through one log line per key every period and counts the lines it
// holds back, so that the next line let through can say how many there were.
type rateLimiter struct {
	period time.Duration
	now    func() time.Time
	mu     sync.Mutex
	last   map[string]time.Time
	held   map[string]int
}

// newRateLimiter returns a limiter with the given period.
func newRateLimiter(period time.Duration) *rateLimiter {
	return &rateLimiter{period: period, now: time.Now, last: map[string]time.Time{}, held: map[string]int{}}
}

// Allow reports whether a line for key may be logged now and, if so, how many lines
// for key were held back since the last one let through.
func (r *rateLimiter) Allow(key string) (ok bool, suppressed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if t, seen := r.last[key]; seen && now.Sub(t) < r.period {
		r.held[key]++
		return false, 0
	}
	r.last[key] = now
	suppressed = r.held[key]
	delete(r.held, key)
	return true, suppressed
}
