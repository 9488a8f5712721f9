package node

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dpadmm/dpadmm/node/store"
	"github.com/libp2p/go-libp2p/core/peer"
)

func httpBody(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

// metricValue returns the value of the first sample of series (with the label text, if
// any) in a Prometheus text exposition, and whether it was found.
func opsMetric(text, series string) (string, bool) {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + `(\{[^}]*\})? (\S+)$`)
	m := re.FindStringSubmatch(text)
	if m == nil {
		return "", false
	}
	return m[2], true
}

// TestMetricsAndHealth: a running node on a real libp2p host serves /healthz (200),
// /readyz (503 with the reason before its run, 200 once it runs or is done), and on
// /metrics, without --debug-status, the series an operator alerts on (epsilon spent and
// budget left, own updates, members, connected peers, run state, build info), the Go and
// process collectors and go-libp2p's own metrics; none of the per-hop counters, and the
// status-based series come from the snapshot: with a long status period they do not
// change while the walk runs.
func TestMetricsAndHealth(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sh := shards(t, 1)
	c := baseConfig("ops", sh[0], 30)
	c.DataDir, c.HTTP, c.StatusPeriod = t.TempDir(), "127.0.0.1:0", time.Hour
	c.BudgetEpsilon, c.BudgetKind = 1000, "local"
	id, _ := store.DataDirPeerID(c.DataDir)
	c.Members, c.Weight = []peer.ID{id}, 1
	nd, err := New(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer nd.Close()
	base := "http://" + nd.HTTPAddr
	if code, body := httpBody(t, base+"/healthz"); code != 200 || strings.TrimSpace(body) != "ok" {
		t.Fatalf("/healthz %d %q", code, body)
	}
	code, body := httpBody(t, base+"/readyz")
	var rz map[string]any
	if err := json.Unmarshal([]byte(body), &rz); err != nil || code != 503 || rz["ready"] != false || rz["state"] != RunWaiting || rz["reason"] == "" {
		t.Fatalf("/readyz before the run: %d %s", code, body)
	}
	_, before := httpBody(t, base+"/metrics")
	if _, err := nd.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if code, body := httpBody(t, base+"/readyz"); code != 200 || !strings.Contains(body, `"state":"done"`) {
		t.Fatalf("/readyz after the run: %d %s", code, body)
	}
	_, after := httpBody(t, base+"/metrics")
	if dump := os.Getenv("DPADMM_DUMP_METRICS"); dump != "" {
		os.WriteFile(dump, []byte(after), 0o644)
	}
	for _, s := range []string{"dpadmm_epsilon_spent", "dpadmm_budget_epsilon", "dpadmm_budget_left_epsilon", "dpadmm_own_updates",
		"dpadmm_updates_left", "dpadmm_members", "dpadmm_connected_peers", "dpadmm_run_state", "dpadmm_build_info",
		"dpadmm_network_planned_holds", "dpadmm_status_snapshot_age_seconds",
		"go_goroutines", "process_cpu_seconds_total"} {
		if !strings.Contains(after, s) {
			t.Errorf("/metrics lacks %s", s)
		}
	}
	// The unit label is the run's (the walk's default: per record).
	if !strings.Contains(after, `dpadmm_epsilon_spent{figure="local",unit="record"}`) {
		t.Error("/metrics: the local figure's unit label is not the run's (record)")
	}
	if !regexp.MustCompile(`(?m)^libp2p_\w+`).MatchString(after) {
		t.Error("/metrics lacks go-libp2p's metrics")
	}
	for _, s := range []string{"dpadmm_hops_processed_total", "dpadmm_noisy_updates_total", "dpadmm_handoffs_acked_total", "dpadmm_custody_events_total",
		"process_network_receive_bytes_total", "process_network_transmit_bytes_total"} {
		if strings.Contains(after, s) {
			t.Errorf("/metrics serves the per-hop series %s without --debug-status", s)
		}
	}
	// The snapshot is refreshed once per status period (one hour here), and once when the
	// membership is fixed and once when the run ends: the own-updates series went from 0
	// to the run's 30 updates with no value in between, whatever the scrapes.
	if v0, _ := opsMetric(before, "dpadmm_own_updates"); v0 != "0" {
		t.Errorf("dpadmm_own_updates before the run %q", v0)
	}
	if v1, _ := opsMetric(after, "dpadmm_own_updates"); v1 != strconv.Itoa(nd.Status().Updates) || v1 == "0" {
		t.Errorf("dpadmm_own_updates after the run %q, the node made %d", v1, nd.Status().Updates)
	}
	if v, ok := opsMetric(after, `dpadmm_members`); !ok || v != "1" {
		t.Errorf("dpadmm_members %q", v)
	}
	if !strings.Contains(after, `dpadmm_run_state{state="done"} 1`) || !strings.Contains(before, `dpadmm_run_state{state="waiting"} 1`) {
		t.Errorf("run state series:\nbefore %s\nafter %s", grepLines(before, "dpadmm_run_state"), grepLines(after, "dpadmm_run_state"))
	}
}

func grepLines(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestGrafanaDashboardSeries: every query of docs/grafana-dashboard.json names only series
// that a running node serves on its public /metrics (scraped from a real node), so that
// the dashboard shows data and no panel silently stays empty.
func TestGrafanaDashboardSeries(t *testing.T) {
	b, err := os.ReadFile("../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sh := shards(t, 1)
	c := baseConfig("dash", sh[0], 5)
	c.DataDir, c.HTTP = t.TempDir(), "127.0.0.1:0"
	id, _ := store.DataDirPeerID(c.DataDir)
	c.Members, c.Weight = []peer.ID{id}, 1
	nd, err := New(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer nd.Close()
	if _, err := nd.Run(ctx); err != nil {
		t.Fatal(err)
	}
	// Counters of labelled series exist once a label value was used: the node's own
	// rejection counters are declared but may have no sample yet; their HELP lines are.
	_, text := httpBody(t, "http://"+nd.HTTPAddr+"/metrics")
	served := map[string]bool{}
	for _, l := range strings.Split(text, "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 3 && (f[0] == "#") && (f[1] == "HELP" || f[1] == "TYPE"):
			served[f[2]] = true
		case len(f) >= 2 && f[0] != "#":
			served[strings.SplitN(f[0], "{", 2)[0]] = true
		}
	}
	names := regexp.MustCompile(`\b(dpadmm|go|process|libp2p)_[a-z0-9_]+`)
	n := 0
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			found := names.FindAllString(tg.Expr, -1)
			if len(found) == 0 {
				t.Errorf("panel %q: query %q names no series", p.Title, tg.Expr)
			}
			for _, s := range found {
				n++
				if !served[s] {
					t.Errorf("panel %q: %s is not served on /metrics", p.Title, s)
				}
			}
		}
	}
	if n < 10 {
		t.Errorf("only %d series checked", n)
	}
}

// TestJoinerWaitsForLateStarter: a joiner whose --peer (the starter) is not listening yet
// says what it waits for (join.waiting_for, /readyz's reason), dials it again with a
// back-off, and joins the run once the starter is up: the run completes on both.
func TestJoinerWaitsForLateStarter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sh := shards(t, 2)
	port := freePort(t)
	sdir := t.TempDir()
	sid, err := store.DataDirPeerID(sdir)
	if err != nil {
		t.Fatal(err)
	}
	addr := "/ip4/127.0.0.1/tcp/" + strconv.Itoa(port) + "/p2p/" + sid.String()
	jc := baseConfig("late", sh[1], 20)
	jc.DataDir, jc.Peers = t.TempDir(), []string{addr}
	joiner, err := New(ctx, jc)
	if err != nil {
		t.Fatal(err)
	}
	defer joiner.Close()
	jdone := make(chan error, 1)
	go func() { _, err := joiner.Run(ctx); jdone <- err }()
	var js *JoinStatus
	for i := 0; i < 200; i++ {
		if js = joiner.Status().Join; js != nil && len(js.WaitingFor) == 1 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if js == nil || len(js.WaitingFor) != 1 || js.WaitingFor[0] != addr {
		t.Fatalf("joiner's join status %+v, want it waiting for %s", js, addr)
	}
	if st, why := joiner.Readiness(); st != RunWaiting || !strings.Contains(why, "--peer not reachable yet") {
		t.Errorf("readiness %s %q", st, why)
	}
	time.Sleep(1500 * time.Millisecond) // the starter comes up late
	sc := baseConfig("late", sh[0], 20)
	sc.DataDir, sc.Start, sc.MinPeers, sc.JoinWindow = sdir, true, 2, 500*time.Millisecond
	sc.Listen = []string{"/ip4/127.0.0.1/tcp/" + strconv.Itoa(port)}
	starter, err := New(ctx, sc)
	if err != nil {
		t.Fatal(err)
	}
	defer starter.Close()
	m, err := starter.Run(ctx)
	if err != nil {
		t.Fatalf("starter: %v", err)
	}
	if err := <-jdone; err != nil {
		t.Fatalf("joiner: %v", err)
	}
	if m.Nodes != 2 {
		t.Errorf("run of %d nodes, want 2", m.Nodes)
	}
}
