package node

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestPublicStatusHidesPath: after a walk, /status served without DebugStatus carries none
// of the per-hop keys (they let whoever polls several nodes reconstruct the secret path)
// and is a snapshot at most StatusPeriod old; /metrics carries the rejection counters but
// not the hop, hand-off, custody, Go or process collectors. With DebugStatus both are
// served in full.
func TestPublicStatusHidesPath(t *testing.T) {
	const hops = 30
	sh := shards(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nodes := pausedCluster(t, ctx, "pub", sh, hops, 0, false, []string{t.TempDir(), t.TempDir(), t.TempDir()})
	runAll(t, ctx, nodes)
	get := func(nd *Node, path string) string {
		rec := httptest.NewRecorder()
		nd.Handler().ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		return rec.Body.String()
	}
	for i, nd := range nodes {
		var st map[string]any
		if err := json.Unmarshal([]byte(get(nd, "/status")), &st); err != nil {
			t.Fatal(err)
		}
		for _, k := range perHopKeys {
			if _, ok := st[k]; ok {
				t.Errorf("node %d: public /status has %q", i, k)
			}
		}
		if st["status_period_seconds"] != DefaultStatusPeriod.Seconds() || st["own_updates"] == nil {
			t.Errorf("node %d: public /status %v", i, st)
		}
		m := get(nd, "/metrics")
		for _, k := range []string{"dpadmm_hops_processed_total", "dpadmm_handoffs_acked_total", "dpadmm_noisy_updates_total",
			"dpadmm_custody_events_total"} {
			if strings.Contains(m, k) {
				t.Errorf("node %d: public /metrics has %s", i, k)
			}
		}
		// The Go and process collectors are served (operators alert on memory and CPU); they
		// are a timing channel of the node's own computation, as docs/threat-model.md says.
		for _, k := range []string{"go_gc_duration_seconds", "process_cpu_seconds_total"} {
			if !strings.Contains(m, k) {
				t.Errorf("node %d: public /metrics lacks %s", i, k)
			}
		}
		if !strings.Contains(m, "dpadmm_tokens_ignored_total") {
			t.Errorf("node %d: public /metrics lacks the rejection counters:\n%s", i, m)
		}
		nd.cfg.DebugStatus = true
		full := get(nd, "/status")
		if !strings.Contains(full, `"hops_seen"`) || !strings.Contains(full, `"ledger_entries"`) {
			t.Errorf("node %d: debug /status lacks the per-hop keys: %s", i, full)
		}
		if m := get(nd, "/metrics"); !strings.Contains(m, "dpadmm_hops_processed_total") || !strings.Contains(m, "process_cpu_seconds_total") {
			t.Errorf("node %d: debug /metrics lacks the hop counters", i)
		}
		nd.cfg.DebugStatus = false
	}
}
