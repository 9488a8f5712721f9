package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

type metrics struct {
	// reg holds every collector (tests and DebugStatus read it); pub only those that say
	// nothing of when this node holds the token (rejections), served on /metrics without
	// DebugStatus.
	reg      *prometheus.Registry
	pub      *prometheus.Registry
	hops     prometheus.Counter
	updates  prometheus.Counter
	sent     prometheus.Counter
	ignored  prometheus.Counter
	rejected *prometheus.CounterVec
	custody  *prometheus.CounterVec
	control  *prometheus.CounterVec
	nupd     atomic.Int64
	done     atomic.Bool

	// Neighbour-exchange runs (RunRADMM); zero and unused for the walk.
	radmmIters    prometheus.Counter
	radmmStale    prometheus.Counter
	radmmIgnored  prometheus.Counter
	radmmRejected *prometheus.CounterVec
	radmm         atomic.Pointer[radmmView]
	// radmmCollectors are registered by enableRADMM when a neighbour-exchange run starts.
	radmmCollectors []prometheus.Collector
	radmmOnce       sync.Once
}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry(), pub: prometheus.NewRegistry()}
	m.hops = prometheus.NewCounter(prometheus.CounterOpts{Name: "dpadmm_hops_processed_total", Help: "Tokens processed (one ledger entry each)."})
	m.updates = prometheus.NewCounter(prometheus.CounterOpts{Name: "dpadmm_noisy_updates_total", Help: "Noisy updates made by this node."})
	m.sent = prometheus.NewCounter(prometheus.CounterOpts{Name: "dpadmm_handoffs_acked_total", Help: "Token hand-offs acknowledged by the receiver."})
	m.ignored = prometheus.NewCounter(prometheus.CounterOpts{Name: "dpadmm_tokens_ignored_total", Help: "Stale or duplicated tokens ignored."})
	m.rejected = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dpadmm_tokens_rejected_total", Help: "Inbound hand-offs rejected, by reason."}, []string{"reason"})
	m.custody = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dpadmm_custody_events_total", Help: "Token custody events (peer_down, peer_up, regenerated, fallback, fenced, fenced_out, released, retired, expired, no_peer)."}, []string{"event"})
	m.control = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dpadmm_control_rejected_total", Help: "Control-topic messages rejected by the GossipSub validator before relaying, by reason (oversized, malformed, foreign run, unknown type)."}, []string{"reason"})
	// The main reasons start at 0, so that a rate or an alert has a series from the start.
	for _, r := range []string{"oversized", "malformed", "version", "non-member", "invalid", "step", "epoch", "evicted", "evidence-reused"} {
		m.rejected.WithLabelValues(r)
	}
	for _, r := range []string{"oversized", "malformed", "foreign run", "unknown type"} {
		m.control.WithLabelValues(r)
	}
	goc := collectors.NewGoCollector()
	m.reg.MustRegister(m.hops, m.updates, m.sent, m.ignored, m.rejected, m.custody, m.control, goc,
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.pub.MustRegister(m.ignored, m.rejected, m.control, goc, publicProcessCollector(), buildInfo())
	m.registerRADMM()
	return m
}

func (m *metrics) updatesValue() int { return int(m.nupd.Load()) }

// Rejected returns the number of rejected inbound hand-offs for a reason label
// (oversized, malformed, version, non-member, invalid, step).
func (n *Node) Rejected(reason string) float64 {
	return n.metrics.labelled("dpadmm_tokens_rejected_total", "reason", reason)
}

// Handler returns the HTTP handler serving /status, /metrics, /healthz and /readyz.
//
// /healthz answers 200 while the process serves HTTP (a liveness probe). /readyz answers
// 200 once the node has joined a run and the run is running or done, 503 with the reason
// while it waits for its run or after the run failed (a readiness probe): see Readiness.
func (n *Node) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		state, reason := n.Readiness()
		w.Header().Set("Content-Type", "application/json")
		if state != RunRunning && state != RunDone {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		json.NewEncoder(w).Encode(map[string]any{"ready": state == RunRunning || state == RunDone, "state": state, "reason": reason})
	})
	mux.HandleFunc("/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(n.PublicStatus())
	})
	reg := n.metrics.pub
	if n.cfg.DebugStatus {
		reg = n.metrics.reg
	}
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}

// DefaultStatusPeriod is the default refresh period of the public /status snapshot.
const DefaultStatusPeriod = time.Minute

// perHopKeys are the /status keys that change with every hop seen here; they are served
// only with Config.DebugStatus.
var perHopKeys = []string{"hops_seen", "ledger_entries", "model_age_seconds", "hop", "holding", "paused"}

// PublicStatus is what /status serves: Status itself with Config.DebugStatus; otherwise a
// snapshot of it refreshed at most every StatusPeriod (live while the node waits for its
// run to start, when there is no path yet, and for R-ADMM, whose iterations follow a public
// schedule), without perHopKeys, with status_period_seconds
// saying how old it may be. Polling it on every node then tells at most how many noisy
// updates each node made per period, not the order of the hops.
func (n *Node) PublicStatus() any {
	if n.cfg.DebugStatus {
		return n.Status()
	}
	period := n.cfg.StatusPeriod
	if period <= 0 {
		period = DefaultStatusPeriod
	}
	snap, age := n.publicSnapshot()
	var m map[string]any
	if err := json.Unmarshal(marshal(snap), &m); err != nil {
		return map[string]string{"error": err.Error()}
	}
	for _, k := range perHopKeys {
		delete(m, k)
	}
	m["uptime_seconds"] = time.Since(n.started).Seconds()
	m["status_period_seconds"] = period.Seconds()
	m["snapshot_age_seconds"] = age
	return m
}

// publicSnapshot returns the public status snapshot and its age in seconds: Status
// refreshed at most every StatusPeriod (live while the node waits for its run to start and
// for R-ADMM, whose iterations follow a public schedule). /status and the public /metrics
// series both read it, so that neither changes with every hop.
func (n *Node) publicSnapshot() (Status, float64) {
	period := n.cfg.StatusPeriod
	if period <= 0 {
		period = DefaultStatusPeriod
	}
	n.mu.Lock()
	members := len(n.members)
	n.mu.Unlock()
	done := n.metrics.done.Load()
	n.pubMu.Lock()
	defer n.pubMu.Unlock()
	now := time.Now()
	// Also refreshed when the membership is fixed or the run ends: once each per run.
	if n.pubAt.IsZero() || now.Sub(n.pubAt) >= period || n.pubSnap.Join != nil || n.cfg.RADMM != nil ||
		n.pubSnap.Members != members || n.pubSnap.Done != done {
		n.pubSnap, n.pubAt = n.Status(), now
	}
	return n.pubSnap, now.Sub(n.pubAt).Seconds()
}

func (n *Node) serveHTTP(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("node: --http %s: %w", addr, err)
	}
	n.HTTPAddr = ln.Addr().String()
	n.httpSrv = &http.Server{Handler: n.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := n.httpSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error().Err(err).Msg("http server stopped")
		}
	}()
	return nil
}

// CustodyEvents returns the number of custody events of a kind (peer_down, peer_up,
// regenerated, fallback, fenced, fenced_out, released, retired, expired, no_peer).
func (n *Node) CustodyEvents(event string) float64 {
	return n.metrics.labelled("dpadmm_custody_events_total", "event", event)
}

// labelled returns the value of the counter name with label key=value (0 when absent).
func (m *metrics) labelled(name, key, value string) float64 {
	mf, err := m.reg.Gather()
	if err != nil {
		return 0
	}
	for _, f := range mf {
		if f.GetName() != name {
			continue
		}
		for _, c := range f.GetMetric() {
			for _, l := range c.GetLabel() {
				if l.GetName() == key && l.GetValue() == value {
					return c.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
