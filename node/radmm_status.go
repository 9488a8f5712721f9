package node

import (
	"math"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dpadmm/dpadmm/privacy"
)

// RADMMStatus is the neighbour-exchange part of /status (Status.RADMM).
type RADMMStatus struct {
	// Algorithm is the announced algorithm (radmm, mradmm, ...).
	Algorithm string `json:"algo"`
	// Iter is the last iteration this node computed and released (-1 before the run
	// started), Iters is T.
	Iter  int `json:"iter"`
	Iters int `json:"iters"`
	// Neighbors are the member indices of this node's graph neighbours (empty before the
	// membership is fixed); Reachable is how many of them are connected now.
	Neighbors []int `json:"neighbors"`
	Reachable int   `json:"neighbors_reachable"`
	// StaleUses counts the neighbour vectors reused after a missed barrier (policy stale).
	StaleUses int `json:"stale_uses"`
	// LedgerEntries counts the ledger entries this run made durable (f_i(0) included).
	LedgerEntries int `json:"ledger_entries"`
	// EpsilonSpent is the running pure-DP epsilon of this node's releases so far: the sum
	// of the per-iteration Theorem V.1 terms in its ledger. Unbounded (JSON null) when a
	// release carries no guarantee (no noise, or a perturbed subproblem that missed the
	// solver tolerance).
	EpsilonSpent privacy.Epsilon `json:"epsilon_spent"`
	// Theorem names the result EpsilonSpent rests on and Conditions its hypotheses.
	// ConditionsHold reports whether they hold as far as known so far (checked before
	// the run from the data and parameters, and from the ledger during it); Reason says
	// why not.
	Theorem        string `json:"epsilon_theorem"`
	Conditions     string `json:"epsilon_conditions"`
	ConditionsHold bool   `json:"epsilon_conditions_hold"`
	Reason         string `json:"epsilon_reason,omitempty"`
	// Rejected and Ignored count inbound frames refused (malformed, forged, foreign) and
	// dropped (stale, duplicate, too far ahead).
	Rejected int `json:"rejected_frames"`
	Ignored  int `json:"ignored_frames"`
	// Done reports that iteration T was computed.
	Done bool `json:"done"`
}

// exchangeProgress is a snapshot of a running R-ADMM exchange (radmmExchange.snapshot).
type exchangeProgress struct {
	Iter          int   // last iteration released; -1 before f_i(0)
	Iters         int   // T
	Neighbors     []int // member indices
	Reachable     int   // neighbours connected now
	StaleUses     int
	LedgerEntries int
	// Epsilon is the sum of the pure-DP ledger entries made durable by this run (+Inf when
	// one of them carries no guarantee).
	Epsilon  float64
	Rejected int
	Ignored  int
	Done     bool
}

// snapshot returns the exchange's progress; safe to call from any goroutine.
func (x *radmmExchange) snapshot() exchangeProgress {
	x.progMu.Lock()
	pr := x.prog
	x.progMu.Unlock()
	p := exchangeProgress{
		Iter: pr.iter, Iters: x.cfg.Iters, Neighbors: append([]int(nil), x.cfg.Neighbors...),
		StaleUses: pr.stale, LedgerEntries: pr.entries, Epsilon: pr.eps,
		Rejected: int(x.rejected.Load()), Ignored: int(x.ignored.Load()), Done: pr.done,
	}
	if h := x.n.Host; h != nil {
		for _, j := range x.cfg.Neighbors {
			if h.Network().Connectedness(x.cfg.Members[j]) == network.Connected {
				p.Reachable++
			}
		}
	}
	return p
}

// progress records the durable ledger entries es of the release of iteration iter
// (loop goroutine only).
func (x *radmmExchange) progress(es []privacy.Entry, iter int) {
	x.progMu.Lock()
	defer x.progMu.Unlock()
	x.prog.entries += len(es)
	for _, e := range es {
		if e.Mechanism != privacy.MechPure {
			continue
		}
		if e.Epsilon >= math.MaxFloat64 || math.IsNaN(e.Epsilon) {
			x.prog.eps = math.Inf(1)
		} else {
			x.prog.eps += e.Epsilon
		}
	}
	prev := x.prog.iter
	x.prog.iter = iter
	if iter > prev && iter > 0 {
		x.n.metrics.radmmIters.Add(float64(iter - max(prev, 0)))
	}
}

func (x *radmmExchange) ignore() {
	x.ignored.Add(1)
	x.n.metrics.radmmIgnored.Inc()
}

// radmmView is what the status endpoint knows of a neighbour-exchange run: the announced
// algorithm and T, the planned Theorem V.1 figure (conditions checked from the data and
// parameters) and, once the membership is fixed, the running exchange.
type radmmView struct {
	algo  string
	iters int
	plan  *privacy.ObjPertFigure
	ex    *radmmExchange
}

func (m *metrics) registerRADMM() {
	m.radmmIters = prometheus.NewCounter(prometheus.CounterOpts{Name: "dpadmm_gossip_iterations_total",
		Help: "Neighbour exchange: iterations computed and released by this node (f_i(0) not counted)."})
	m.radmmStale = prometheus.NewCounter(prometheus.CounterOpts{Name: "dpadmm_gossip_stale_total",
		Help: "Neighbour exchange: neighbour vectors reused after a missed barrier (policy stale)."})
	m.radmmIgnored = prometheus.NewCounter(prometheus.CounterOpts{Name: "dpadmm_gossip_messages_ignored_total",
		Help: "Neighbour exchange: inbound frames ignored (stale, duplicate, too far ahead)."})
	m.radmmRejected = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dpadmm_gossip_messages_rejected_total",
		Help: "Neighbour exchange: inbound frames rejected, by reason (oversized, malformed, version, non-member, forged, " +
			"not-neighbor, run, dimension, iteration, non-finite, machine)."}, []string{"reason"})
	view := func(f func(v *radmmView, p exchangeProgress) float64) func() float64 {
		return func() float64 {
			v := m.radmm.Load()
			if v == nil || v.ex == nil {
				return 0
			}
			return f(v, v.ex.snapshot())
		}
	}
	eps := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "dpadmm_gossip_epsilon_spent",
		Help: "Neighbour exchange: pure-DP epsilon of this node's releases so far, the running sum of the per-iteration " +
			"terms of " + privacy.ObjPertTheorem + " in the ledger (+Inf: a release without guarantee). " +
			"See dpadmm_gossip_epsilon_conditions_hold."},
		view(func(_ *radmmView, p exchangeProgress) float64 { return p.Epsilon }))
	hold := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "dpadmm_gossip_epsilon_conditions_hold",
		Help: "Neighbour exchange: 1 when the conditions of the theorem behind dpadmm_gossip_epsilon_spent hold as far as known, else 0."},
		func() float64 {
			if v := m.radmm.Load(); v != nil {
				if ok, _ := v.conditions(); ok {
					return 1
				}
			}
			return 0
		})
	iter := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "dpadmm_gossip_iteration",
		Help: "Neighbour exchange: last iteration released by this node."},
		view(func(_ *radmmView, p exchangeProgress) float64 { return float64(p.Iter) }))
	reach := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "dpadmm_gossip_neighbors_reachable",
		Help: "Neighbour exchange: graph neighbours connected now."},
		view(func(_ *radmmView, p exchangeProgress) float64 { return float64(p.Reachable) }))
	m.radmmCollectors = []prometheus.Collector{m.radmmIters, m.radmmStale, m.radmmIgnored, m.radmmRejected, eps, hold, iter, reach}
}

// enableRADMM registers the neighbour-exchange metrics (once; walk nodes do not show them).
func (m *metrics) enableRADMM() {
	m.radmmOnce.Do(func() { m.reg.MustRegister(m.radmmCollectors...); m.pub.MustRegister(m.radmmCollectors...) })
}

// conditions reports whether the Theorem V.1 conditions hold as far as known, and why not.
func (v *radmmView) conditions() (bool, string) {
	if v.plan == nil {
		return false, "not known before the membership is fixed"
	}
	if !v.plan.ConditionsHold {
		return false, v.plan.Reason
	}
	if v.ex != nil && math.IsInf(v.ex.snapshot().Epsilon, 1) {
		return false, "a release carried no guarantee (a perturbed subproblem missed the solver tolerance)"
	}
	return true, ""
}

// radmmStatus returns the neighbour-exchange part of /status (nil for the walk).
func (n *Node) radmmStatus() *RADMMStatus {
	v := n.metrics.radmm.Load()
	if v == nil {
		return nil
	}
	st := &RADMMStatus{Algorithm: v.algo, Iter: -1, Iters: v.iters, Neighbors: []int{}, Theorem: privacy.ObjPertTheorem,
		Conditions: privacy.ObjPertConditions}
	if v.plan != nil {
		st.Theorem, st.Conditions = v.plan.Theorem, v.plan.Conditions
	}
	st.ConditionsHold, st.Reason = v.conditions()
	if v.ex != nil {
		p := v.ex.snapshot()
		st.Iter, st.Neighbors, st.Reachable, st.StaleUses = p.Iter, p.Neighbors, p.Reachable, p.StaleUses
		st.LedgerEntries, st.EpsilonSpent, st.Rejected, st.Ignored = p.LedgerEntries, finiteOr(p.Epsilon), p.Rejected, p.Ignored
		st.Done = p.Done
	}
	return st
}
