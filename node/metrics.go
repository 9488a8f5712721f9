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
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

type metrics struct {
	reg      *prometheus.Registry
	hops     prometheus.Counter
	updates  prometheus.Counter
	sent     prometheus.Counter
	ignored  prometheus.Counter
	rejected *prometheus.CounterVec
	custody  *prometheus.CounterVec
	control  *prometheus.CounterVec
	nupd     atomic.Int64
	done     atomic.Bool

	// Neighbour-exchange runs (RunGossip); zero and unused for the walk.
	gIters    prometheus.Counter
	gStale    prometheus.Counter
	gIgnored  prometheus.Counter
	gRejected *prometheus.CounterVec
	gossip    atomic.Pointer[gossipView]
	// gCollectors are registered by enableGossip when a neighbour-exchange run starts.
	gCollectors []prometheus.Collector
	gOnce       sync.Once
}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.hops = prometheus.NewCounter(prometheus.CounterOpts{Name: "dpadmm_hops_processed_total", Help: "Tokens processed (one ledger entry each)."})
	m.updates = prometheus.NewCounter(prometheus.CounterOpts{Name: "dpadmm_noisy_updates_total", Help: "Noisy updates made by this node."})
	m.sent = prometheus.NewCounter(prometheus.CounterOpts{Name: "dpadmm_handoffs_acked_total", Help: "Token hand-offs acknowledged by the receiver."})
	m.ignored = prometheus.NewCounter(prometheus.CounterOpts{Name: "dpadmm_tokens_ignored_total", Help: "Stale or duplicated tokens ignored."})
	m.rejected = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dpadmm_tokens_rejected_total", Help: "Inbound hand-offs rejected, by reason."}, []string{"reason"})
	m.custody = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dpadmm_custody_events_total", Help: "Token custody events (peer_down, peer_up, regenerated, fenced, fenced_out, released, retired, no_peer)."}, []string{"event"})
	m.control = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dpadmm_control_rejected_total", Help: "Control-topic messages rejected by the GossipSub validator before relaying, by reason (oversized, malformed, foreign run, unknown type)."}, []string{"reason"})
	m.reg.MustRegister(m.hops, m.updates, m.sent, m.ignored, m.rejected, m.custody, m.control,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	m.registerGossip()
	return m
}

func (m *metrics) updatesValue() int { return int(m.nupd.Load()) }

// Rejected returns the number of rejected inbound hand-offs for a reason label
// (oversized, malformed, version, non-member, invalid, step).
func (n *Node) Rejected(reason string) float64 {
	return n.metrics.labelled("dpadmm_tokens_rejected_total", "reason", reason)
}

// Handler returns the HTTP handler serving /status and /metrics.
func (n *Node) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(n.Status())
	})
	mux.Handle("/metrics", promhttp.HandlerFor(n.metrics.reg, promhttp.HandlerOpts{}))
	return mux
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
// regenerated, fenced, fenced_out, released, retired, no_peer).
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
