package gossip

import (
	"math"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
)

// net is a minimal synchronous driver for tests: it applies Readies in node order, records
// every broadcast vector by iteration and node, and delivers messages.
type net struct {
	ms      []*Machine
	hist    map[int][][]float64 // hist[t][i] = f_i(t)
	noise   map[int][][]float64 // noise[t][i] = eps_i used at iteration t (perturbed iterations)
	ledgers [][]privacy.Entry
	queue   []Envelope
}

func newNet(ms []*Machine) *net {
	return &net{ms: ms, hist: map[int][][]float64{}, noise: map[int][][]float64{}, ledgers: make([][]privacy.Entry, len(ms))}
}

func (n *net) rec(m map[int][][]float64, t, i int, v []float64) {
	if m[t] == nil {
		m[t] = make([][]float64, len(n.ms))
	}
	m[t][i] = append([]float64(nil), v...)
}

func (n *net) run(t *testing.T) {
	t.Helper()
	for round := 0; round < 1000000; round++ {
		moved := false
		for i, m := range n.ms {
			if !m.HasReady() {
				continue
			}
			moved = true
			rd := m.Ready()
			n.ledgers[i] = append(n.ledgers[i], rd.Ledger...)
			it := int(rd.Ledger[0].Hop)
			n.rec(n.hist, it, i, m.f)
			if rd.Ledger[0].Mechanism == privacy.MechPure {
				n.rec(n.noise, it, i, m.eps)
			}
			n.queue = append(n.queue, rd.Outbox...)
			m.Advance(rd)
		}
		q := n.queue
		n.queue = nil
		for _, e := range q {
			moved = true
			if err := n.ms[e.To].Step(e.Msg); err != nil {
				t.Fatalf("deliver %d->%d iter %d: %v", e.Msg.From, e.To, e.Msg.Iter, err)
			}
		}
		if !moved {
			for _, m := range n.ms {
				if !m.Done() {
					t.Fatalf("deadlock: node %d at iteration %d", m.cfg.Node, m.t)
				}
			}
			return
		}
	}
	t.Fatal("no termination")
}

func ds(name string, x [][]float64, y []float64) *consensus.Dataset {
	d := &consensus.Dataset{Name: name, Rows: len(x), Cols: len(x[0])}
	for i, r := range x {
		d.X = append(d.X, r...)
		d.Y = append(d.Y, y[i])
	}
	return d
}

func vecNear(t *testing.T, name string, got, want []float64, tol float64) {
	t.Helper()
	for j := range want {
		if math.Abs(got[j]-want[j]) > tol || math.IsNaN(got[j]) {
			t.Errorf("%s = %v, want %v (tol %g)", name, got, want, tol)
			return
		}
	}
}
