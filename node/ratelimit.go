package node

import (
	"sync"
	"time"

	"github.com/rs/zerolog"
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

// warnBurst is how many warnings with one message text a node logs per logEvery, whatever
// the peers they name; warnLimit holds back the rest.
const warnBurst = 5

// warnLimit is a zerolog hook that bounds warning lines per message text: at most burst
// lines with one text every period, across every peer they name, so that many peers (or
// many identities of one attacker) repeating one fault cannot flood the log. The first
// line after a held-back stretch says how many were held back (warnings_not_logged); they
// are dropped, not logged at another level. Other levels pass.
type warnLimit struct {
	period time.Duration
	burst  int
	now    func() time.Time
	mu     sync.Mutex
	win    map[string]*warnWindow
}

type warnWindow struct {
	start      time.Time
	count, off int
}

func newWarnLimit(period time.Duration, burst int) *warnLimit {
	return &warnLimit{period: period, burst: burst, now: time.Now, win: map[string]*warnWindow{}}
}

// Run implements zerolog.Hook.
func (w *warnLimit) Run(e *zerolog.Event, lvl zerolog.Level, msg string) {
	if lvl != zerolog.WarnLevel {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	win := w.win[msg]
	if win == nil {
		if len(w.win) > 4096 { // bounded memory: forget every window (rare: few distinct texts)
			w.win = map[string]*warnWindow{}
		}
		win = &warnWindow{start: now}
		w.win[msg] = win
	}
	if now.Sub(win.start) >= w.period {
		if win.off > 0 {
			e.Int("warnings_not_logged", win.off)
		}
		win.start, win.count, win.off = now, 0, 0
	}
	win.count++
	if win.count > w.burst {
		win.off++
		e.Discard()
	}
}
