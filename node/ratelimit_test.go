package node

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestWarnLimitAcrossPeers: many peers repeating one fault (the same warning text, each
// naming another peer) give at most warnBurst lines per period; the first line of the
// next period says how many were held back; another text and other levels pass.
func TestWarnLimitAcrossPeers(t *testing.T) {
	var b bytes.Buffer
	wl := newWarnLimit(10*time.Second, 5)
	now := time.Unix(1000, 0)
	wl.now = func() time.Time { return now }
	lg := zerolog.New(&b).Hook(wl)
	for i := 0; i < 200; i++ {
		lg.Warn().Int("from", i).Msg("connection refused: the peer is not a member of the run")
	}
	lg.Warn().Msg("another warning")
	lg.Info().Msg("info passes")
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 7 {
		t.Fatalf("%d lines, want 5 + 1 + 1:\n%s", len(lines), b.String())
	}
	now = now.Add(11 * time.Second)
	b.Reset()
	lg.Warn().Int("from", 7).Msg("connection refused: the peer is not a member of the run")
	if !strings.Contains(b.String(), `"warnings_not_logged":195`) {
		t.Errorf("next period: %s", b.String())
	}
}
