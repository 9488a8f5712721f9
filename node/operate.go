package node

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/dpadmm/dpadmm/privacy"
)

// Run states, as /readyz and the dpadmm_run_state series report them.
const (
	RunWaiting = "waiting" // the membership is not fixed yet (announce, join, start)
	RunRunning = "running" // joined: the walk or the exchange is in progress
	RunDone    = "done"    // the run ended with a model
	RunFailed  = "failed"  // the run ended with an error
)

// runStates lists the states in the order the series are emitted.
var runStates = []string{RunWaiting, RunRunning, RunDone, RunFailed}

// Readiness returns the node's run state and, unless it is running or done, why it is
// not ready.
func (n *Node) Readiness() (state, reason string) {
	if n.failed.Load() {
		return RunFailed, "the run ended with an error (see the log)"
	}
	n.mu.Lock()
	members := len(n.members)
	n.mu.Unlock()
	if n.metrics.done.Load() {
		return RunDone, ""
	}
	if members == 0 {
		if j := n.join.snapshot(0); j != nil {
			why := fmt.Sprintf("waiting for the run to start (%s: %d of %d)", j.Role, j.Joined, j.Want)
			if j.Want <= 0 {
				why = fmt.Sprintf("waiting for the run to start (%s: waiting for the starter to fix the membership)", j.Role)
			}
			n.mu.Lock()
			if len(n.waitingFor) > 0 {
				why += fmt.Sprintf("; --peer not reachable yet: %s", strings.Join(n.waitingFor, ", "))
			}
			n.mu.Unlock()
			return RunWaiting, why
		}
		return RunWaiting, "waiting for the run to start"
	}
	return RunRunning, ""
}

// buildInfo is the dpadmm_build_info series: 1, labelled with the module version, the VCS
// revision the binary was built from and the Go version.
func buildInfo() prometheus.Collector {
	version, commit := "(devel)", "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				commit = s.Value
			}
		}
	}
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "dpadmm_build_info",
		Help: "1, labelled with the build's version, VCS commit and Go version."}, []string{"version", "commit", "goversion"})
	g.WithLabelValues(version, commit, runtime.Version()).Set(1)
	return g
}

// statusCollector serves the public /status snapshot (PublicStatus: refreshed at most
// every StatusPeriod while the walk runs, so that no series changes with every hop) as
// gauges a Prometheus user can alert on: the privacy spent and left, the node's own
// updates, its members and connected peers, and its run state.
type statusCollector struct {
	n                                                         *Node
	spent, budget, budgetLeft, updates, updatesLeft, members  *prometheus.Desc
	peers, state, snapshotAge, networkPlanned, plannedHolding *prometheus.Desc
}

func newStatusCollector(n *Node) *statusCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &statusCollector{n: n,
		spent:          d("dpadmm_epsilon_spent", "This node's epsilon spent so far (delta of the run), by figure: local (an observer of every message; the R-ADMM theorem for neighbour exchange) or network_planned (the walk's planned pairwise figure, whether or not its conditions hold: see dpadmm_network_planned_holds).", "figure", "unit"),
		budget:         d("dpadmm_budget_epsilon", "The node's privacy budget (0: none)."),
		budgetLeft:     d("dpadmm_budget_left_epsilon", "What is left of the budget (budget minus the local figure spent), never below 0."),
		updates:        d("dpadmm_own_updates", "Noisy updates (walk) or releases (neighbour exchange) this node made, as of the public status snapshot."),
		updatesLeft:    d("dpadmm_updates_left", "Noisy updates left before the cap (max updates or budget); -1: no cap."),
		members:        d("dpadmm_members", "Members of the run (0 until the membership is fixed)."),
		peers:          d("dpadmm_connected_peers", "libp2p peers this node is connected to."),
		state:          d("dpadmm_run_state", "1 for the node's current run state (waiting, running, done, failed), 0 for the others.", "state"),
		snapshotAge:    d("dpadmm_status_snapshot_age_seconds", "Age of the status snapshot these series come from."),
		networkPlanned: d("dpadmm_network_planned_epsilon", "The walk's planned pairwise epsilon of this node's updates so far (absent for neighbour exchange)."),
		plannedHolding: d("dpadmm_network_planned_holds", "1 when the planned figure's conditions hold, else 0 (the local figure is then the guarantee)."),
	}
}

func (c *statusCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.spent, c.budget, c.budgetLeft, c.updates, c.updatesLeft, c.members,
		c.peers, c.state, c.snapshotAge, c.networkPlanned, c.plannedHolding} {
		ch <- d
	}
}

func (c *statusCollector) Collect(ch chan<- prometheus.Metric) {
	st, age := c.n.publicSnapshot()
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	unit := string(privacy.UnitRecord) // Theorem V.1 is per record
	if c.n.cfg.RADMM == nil {
		unit = string(c.n.cfg.Training.unit()) // the walk's --privacy-unit
	}
	if st.Epsilon.Bounded() {
		g(c.spent, float64(st.Epsilon), "local", unit)
	}
	if nb := st.Network; nb != nil {
		if nb.Epsilon.Bounded() {
			g(c.spent, float64(nb.Epsilon), "network_planned", unit)
			g(c.networkPlanned, float64(nb.Epsilon))
		}
		hold := 0.0
		if nb.ConditionsHold {
			hold = 1
		}
		g(c.plannedHolding, hold)
	}
	g(c.budget, st.BudgetEpsilon)
	g(c.budgetLeft, st.BudgetLeft)
	g(c.updates, float64(st.Updates))
	g(c.updatesLeft, float64(st.UpdatesLeft))
	g(c.members, float64(st.Members))
	g(c.peers, float64(st.Peers))
	g(c.snapshotAge, age)
	cur, _ := c.n.Readiness()
	for _, s := range runStates {
		v := 0.0
		if s == cur {
			v = 1
		}
		g(c.state, v, s)
	}
}

// runFailed records that a run of this node ended with an error (Readiness: failed).
type runFailed struct{ atomic.Bool }

// registerNode adds the collectors that read the node itself: the status gauges on both
// registries (the public one and the debug one, which serves everything).
func (m *metrics) registerNode(n *Node) {
	c := newStatusCollector(n)
	m.pub.MustRegister(c)
	m.reg.MustRegister(c, buildInfo())
}

// withoutSeries wraps a collector and drops the series whose name starts with one of the
// prefixes (their descriptions and their samples).
type withoutSeries struct {
	c        prometheus.Collector
	prefixes []string
}

func (w withoutSeries) drop(d *prometheus.Desc) bool {
	s := d.String() // Desc{fqName: "name", ...}
	for _, p := range w.prefixes {
		if strings.Contains(s, `fqName: "`+p) {
			return true
		}
	}
	return false
}

func (w withoutSeries) Describe(ch chan<- *prometheus.Desc) {
	in := make(chan *prometheus.Desc)
	go func() { w.c.Describe(in); close(in) }()
	for d := range in {
		if !w.drop(d) {
			ch <- d
		}
	}
}

func (w withoutSeries) Collect(ch chan<- prometheus.Metric) {
	in := make(chan prometheus.Metric)
	go func() { w.c.Collect(in); close(in) }()
	for m := range in {
		if !w.drop(m.Desc()) {
			ch <- m
		}
	}
}

// publicProcessCollector is the process collector without the machine's network byte
// counters (process_network_*: they count every token sent or received, so they would show
// when this node holds the token at the resolution of a scrape).
func publicProcessCollector() prometheus.Collector {
	return withoutSeries{c: collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), prefixes: []string{"process_network_"}}
}

// Progress is what a node's own terminal shows of its walk (LocalProgress). It follows the
// token's hops as this node sees them, so it is printed locally only, never served on
// /status or /metrics (which a remote reader could poll on every node to rebuild the path).
type Progress struct {
	// Hop is the hop of the last token this node received or sent (kept in its
	// checkpoint, so it survives a restart), Hops the run's K.
	Hop, Hops uint64
	Updates   int
	Epsilon   privacy.Epsilon
	// Holding: the token is here (received, or sent and not yet acknowledged).
	Holding bool
	// SinceToken is the time since this node last stepped the token (-1: never).
	SinceToken time.Duration
	// Fallback is the configured silence after which the custody layer re-sends this
	// node's last release (0: derived from the run; negative: off).
	Fallback time.Duration
	Done     bool
}

// LocalProgress returns the node's walk progress for its own terminal.
func (n *Node) LocalProgress() Progress {
	p := Progress{Hop: n.lastHop.Load(), Hops: n.cfg.Hops, Updates: n.metrics.updatesValue(), Holding: n.holding.Load(),
		SinceToken: -1, Fallback: n.cfg.FallbackTimeout, Done: n.metrics.done.Load()}
	p.Epsilon = privacy.Eps(privacy.StepLocalBound(n.stepRun(), p.Updates, n.cfg.Delta).Epsilon)
	if t := n.lastTok.Load(); t > 0 {
		p.SinceToken = time.Since(time.Unix(0, t))
	}
	return p
}
