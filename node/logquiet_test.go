package node

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestRateLimiter: per key, the first line passes, the repeats within the period are
// held back and counted, and the first line after the period passes with that count;
// keys are independent.
func TestRateLimiter(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	r := newRateLimiter(10 * time.Second)
	r.now = func() time.Time { return now }
	type step struct {
		after time.Duration // clock advance before the call
		key   string
		ok    bool
		held  int
	}
	steps := []step{
		{0, "a", true, 0},
		{time.Second, "a", false, 0},
		{time.Second, "b", true, 0}, // another peer: its own budget
		{5 * time.Second, "a", false, 0},
		{2900 * time.Millisecond, "a", false, 0}, // 9.9 s after the first line
		{100 * time.Millisecond, "a", true, 3},   // 10 s: passes, three held back
		{time.Second, "a", false, 0},
		{20 * time.Second, "a", true, 1},
		{0, "b", true, 0}, // b's last line was long ago, nothing held
	}
	for k, s := range steps {
		now = now.Add(s.after)
		ok, held := r.Allow(s.key)
		if ok != s.ok || held != s.held {
			t.Fatalf("step %d (%s): allow %v held %d, want %v %d", k, s.key, ok, held, s.ok, s.held)
		}
	}
}

// TestLimitedLog: a repeated warning is written once per period with the count of the
// repeats not written; the repeats go out at debug level only.
func TestLimitedLog(t *testing.T) {
	var b bytes.Buffer
	l, err := NewLogger(&b, "json", "warn")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	n := &Node{log: l, logLimit: newRateLimiter(logEvery)}
	n.logLimit.now = func() time.Time { return now }
	for k := 0; k < 500; k++ {
		n.limitedLog(zerolog.WarnLevel, "redirect:p").Msg("redirecting the token to another peer after failures")
	}
	now = now.Add(logEvery)
	n.limitedLog(zerolog.WarnLevel, "redirect:p").Msg("redirecting the token to another peer after failures")
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), b.String())
	}
	var last map[string]any
	if err := json.Unmarshal([]byte(lines[1]), &last); err != nil {
		t.Fatal(err)
	}
	if last["level"] != "warn" || last["repeats_not_logged"] != 499.0 {
		t.Fatalf("second line %v", last)
	}
}

// TestLogTimestamp: every line carries its time with milliseconds (JSON: RFC 3339 with
// three decimals; console: hours to milliseconds), within a second of the clock.
func TestLogTimestamp(t *testing.T) {
	var b bytes.Buffer
	l, err := NewLogger(&b, "json", "info")
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	l.Info().Msg("one")
	var rec map[string]any
	if err := json.Unmarshal(b.Bytes(), &rec); err != nil {
		t.Fatal(err)
	}
	ts, _ := rec["time"].(string)
	if !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d\d:\d\d)$`).MatchString(ts) {
		t.Fatalf("time %q", ts)
	}
	at, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		t.Fatal(err)
	}
	if d := at.Sub(before); d < -time.Millisecond || d > time.Second {
		t.Fatalf("time %v, clock %v", at, before)
	}
	var c bytes.Buffer
	cl, _ := NewLogger(&c, "text", "info")
	cl.Info().Msg("two")
	if !regexp.MustCompile(`^\d\d:\d\d:\d\d\.\d{3} INF two`).MatchString(c.String()) {
		t.Fatalf("console line %q", c.String())
	}
}

// TestIdentifyQuiet: go-libp2p's identify warnings ("failed to identify peer", logged
// whenever a peer disconnects during the exchange) are hidden at the default warn level
// and shown at debug, with the error as text; other subsystems' warnings still show.
func TestIdentifyQuiet(t *testing.T) {
	for _, level := range []string{"warn", "debug"} {
		var b bytes.Buffer
		l, err := NewLogger(&b, "json", level)
		if err != nil {
			t.Fatal(err)
		}
		h := NewSlogHandler(l)
		slog.New(h).With("logger", "net/identify").Warn("failed to identify peer", "peer", "p1", "error", errors.New("stream reset"))
		slog.New(h).With("logger", "swarm2").Warn("dial backoff", "error", errors.New("no route"))
		lines := strings.Split(strings.TrimSpace(b.String()), "\n")
		want := 1
		if level == "debug" {
			want = 2
		}
		if len(lines) != want {
			t.Fatalf("level %s: %d lines, want %d:\n%s", level, len(lines), want, b.String())
		}
		for _, line := range lines {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatal(err)
			}
			switch rec["logger"] {
			case "net/identify":
				if rec["level"] != "debug" || rec["error"] != "stream reset" {
					t.Errorf("identify line %v", rec)
				}
			case "swarm2":
				if rec["level"] != "warn" || rec["error"] != "no route" {
					t.Errorf("swarm line %v", rec)
				}
			default:
				t.Errorf("line %v", rec)
			}
		}
	}
}
