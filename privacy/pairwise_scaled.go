package privacy

import (
	"fmt"
	"math"
)

// RealisedPairwiseScaled is RealisedPairwise for walks whose hops do not all add noise of
// the same scale: noisy step k adds Gaussian noise of std scale[k] times the unit's, and
// when it is an update of node i it shifts the state by at most scale[k] times the unit's
// shift (the DP-SGD walk, whose step eta_k = eta/sqrt(k) multiplies both the gradient
// noise and the clipped gradient of the holder's k-th update). With every scale 1 it is
// RealisedPairwise.
//
// The bound. In one segment (the noisy steps between two views of j) let tau_k = scale[k]
// and d_k = scale[k] s_k (s_k = 1 for i's updates). Privacy amplification by iteration
// (Feldman, Mironov, Talwar, Thakurta 2018, Thm 22) with step-dependent noise gives, for
// shifts a_k >= 0 with prefix sums A_k <= D_k = d_1 + .. + d_k and A_m = D_m,
//
//	D_alpha(X_m || X'_m) <= sum_k alpha a_k^2 / (2 tau_k^2)    (in units of the unit's shift and noise).
//
// Writing V_k = tau_1^2 + .. + tau_k^2, a piece of A that is linear in V with slope g costs
// g^2 dV, so the minimum over allocations is the sum of rise^2/run along the greatest convex
// minorant of the points (V_k, D_k), k = 0..m (the argument of RealisedPairwise with V in
// place of the step count; the KKT conditions are the same with the weights tau_k^2). Its
// vertices inside the segment are the points just before one of i's updates, so the hull of
// those corners and the two end points is enough: it is built by a monotone chain in time
// linear in i's updates. The segment's cost is that sum, and the weight of the pair (i, j)
// the sum over j's segments; the curve is Weight times WalkUpdateCurve(tr.Clip, tr.Sigma),
// as in RealisedPairwise. Cost O(K n) time, O(n^2 + K) memory.
//
// scale must have one entry per step, each finite and > 0 (forward steps' entries are
// ignored but must still be valid).
func RealisedPairwiseScaled(tr *Trace, scale []float64, coalitions ...[]int) (*Realised, error) {
	return realisedPairwiseScaled(tr, scale, nil, coalitions...)
}

func realisedPairwiseScaled(tr *Trace, scale []float64, spread Spread, coalitions ...[]int) (*Realised, error) {
	if err := checkRealisedInput(tr, coalitions); err != nil {
		return nil, err
	}
	n := tr.Nodes
	if len(scale) != len(tr.Steps) {
		return nil, fmt.Errorf("privacy: realised pairwise: %d scales for %d steps", len(scale), len(tr.Steps))
	}
	for k, s := range scale {
		if !(s > 0) || math.IsInf(s, 0) {
			return nil, fmt.Errorf("privacy: realised pairwise: step %d: scale %v must be finite and > 0", k, s)
		}
	}
	updates := make([]int, n)
	for _, s := range tr.Steps {
		if s.Noisy {
			updates[s.Node]++
		}
	}
	w := make([]float64, n*n)
	spread.run(n, func(lo, hi int) {
		sw := newScaledSweep(n)
		row := make([]float64, n)
		view := make([]bool, n)
		for j := lo; j < hi; j++ {
			clear(row)
			view[j] = true
			sw.sweep(row, tr.Steps, scale, view, tr.FinalReleasedToAll)
			view[j] = false
			for i, x := range row {
				if i != j {
					w[i*n+j] = x
				}
			}
		}
	})
	sw := newScaledSweep(n)
	view := make([]bool, n)
	unit := WalkUpdateCurve(tr.Clip, tr.Sigma)
	res := &Realised{Pairs: &PairwiseMatrix{N: n, W: w, Unit: unit}, Updates: updates}
	maxU := 0
	for _, u := range updates {
		maxU = max(maxU, u)
	}
	// The local curve of the busiest node: each update's shift and noise scale together,
	// so every update costs at most one unit.
	res.Local = unit.Scale(float64(maxU))
	for _, members := range coalitions {
		for _, v := range members {
			view[v] = true
		}
		cw := CoalitionWeights{Members: append([]int(nil), members...), Weight: make([]float64, n)}
		sw.sweep(cw.Weight, tr.Steps, scale, view, tr.FinalReleasedToAll)
		for _, v := range members {
			view[v] = false
			cw.Weight[v] = 0
		}
		res.Coalitions = append(res.Coalitions, cw)
	}
	return res, nil
}

// scaledPt is a point (V, D) of a node's hull in a segment.
type scaledPt struct{ x, y float64 }

// scaledSweep holds the per-node hulls of one segment.
type scaledSweep struct {
	hull    [][]scaledPt
	d       []float64 // D of each node in the segment
	touched []int
}

func newScaledSweep(n int) *scaledSweep {
	return &scaledSweep{hull: make([][]scaledPt, n), d: make([]float64, n)}
}

// push adds p to the lower hull h (points arrive with nondecreasing x).
func pushLower(h []scaledPt, p scaledPt) []scaledPt {
	if k := len(h); k > 0 && h[k-1].x == p.x {
		if p.y >= h[k-1].y {
			return h
		}
		h = h[:k-1]
	}
	for len(h) >= 2 {
		o, a := h[len(h)-2], h[len(h)-1]
		if (a.x-o.x)*(p.y-o.y)-(a.y-o.y)*(p.x-o.x) > 0 {
			break
		}
		h = h[:len(h)-1]
	}
	return append(h, p)
}

// sweep adds to row[i] the cost of every segment of the observer whose views are the steps
// of the nodes with view[v] (a single observer, or a coalition pooled as one).
func (sw *scaledSweep) sweep(row []float64, steps []TraceStep, scale []float64, view []bool, final bool) {
	V := 0.0
	closeSeg := func() {
		for _, i := range sw.touched {
			h := pushLower(sw.hull[i], scaledPt{V, sw.d[i]})
			c := 0.0
			for k := 1; k < len(h); k++ {
				if dy := h[k].y - h[k-1].y; dy > 0 {
					c += dy * dy / (h[k].x - h[k-1].x)
				}
			}
			row[i] += c
			sw.hull[i], sw.d[i] = h[:0], 0
		}
		sw.touched, V = sw.touched[:0], 0
	}
	for k, st := range steps {
		v := st.Node
		if view[v] {
			closeSeg()
			continue
		}
		if !st.Noisy {
			continue
		}
		s := scale[k]
		if len(sw.hull[v]) == 0 {
			sw.touched = append(sw.touched, v)
			sw.hull[v] = append(sw.hull[v], scaledPt{0, 0})
		}
		sw.hull[v] = pushLower(sw.hull[v], scaledPt{V, sw.d[v]})
		sw.d[v] += s
		V += s * s
	}
	if final {
		closeSeg()
	} else {
		for _, i := range sw.touched {
			sw.hull[i], sw.d[i] = sw.hull[i][:0], 0
		}
		sw.touched = sw.touched[:0]
	}
}

// SGDStepScales returns the scale of every step of an "sgd" trace: 1/sqrt(k) for the
// holder's k-th noisy update in the trace (its step eta_k = eta/sqrt(k) relative to
// eta_1), 1 for a forward. It assumes the trace lists each node's noisy updates in the
// order the node made them, all of them (the realised accountant checks the per-node
// counts against the nodes' counters).
func SGDStepScales(tr *Trace) []float64 {
	cnt := make([]int, tr.Nodes)
	out := make([]float64, len(tr.Steps))
	for k, s := range tr.Steps {
		out[k] = 1
		if s.Noisy && s.Node >= 0 && s.Node < tr.Nodes {
			cnt[s.Node]++
			out[k] = 1 / math.Sqrt(float64(cnt[s.Node]))
		}
	}
	return out
}
