package privacy

import "math"

// The JSON form of the figures, shared by every output that prints one: the testnet
// report (testnet/sim), 'dpadmm account plan|trace', model.json and /status (node). The
// keys are those of docs/report-schema.md. An unbounded epsilon is JSON null (Epsilon);
// the RDP order of an unbounded figure, which has none, is -1.

// Figure is one (epsilon, delta) bound with the theorem it rests on, its conditions and
// whether they hold (Bound in JSON form).
type Figure struct {
	Epsilon        Epsilon `json:"epsilon"`
	Order          float64 `json:"order"`
	Theorem        string  `json:"theorem"`
	Conditions     string  `json:"conditions"`
	ConditionsHold bool    `json:"conditions_hold"`
	Note           string  `json:"note,omitempty"`
}

// Figure returns b in JSON form.
func (b Bound) Figure() Figure {
	return Figure{Epsilon: Eps(b.Epsilon), Order: JSONOrder(b.Order), Theorem: b.Theorem, Conditions: b.Conditions,
		ConditionsHold: b.ConditionsHold, Note: b.Note}
}

// JSONOrder maps an RDP order that is not finite (that of an unbounded figure) to -1.
func JSONOrder(x float64) float64 {
	if math.IsInf(x, 0) || math.IsNaN(x) {
		return -1
	}
	return x
}

// Pair is one ordered pair (i -> j): what observer j learns about node i's data.
type Pair struct {
	Epsilon Epsilon `json:"epsilon"`
	Order   float64 `json:"order"`
	I       int     `json:"i"`
	J       int     `json:"j"`
}

// PairwiseFigure is a network figure over all ordered pairs (i, j), i != j: the worst
// pair and the distribution of the pairwise epsilons, with its theorem and conditions.
type PairwiseFigure struct {
	Worst          Pair    `json:"worst"`
	Mean           Epsilon `json:"mean"`
	P50            Epsilon `json:"p50"`
	P90            Epsilon `json:"p90"`
	P99            Epsilon `json:"p99"`
	Theorem        string  `json:"theorem"`
	Conditions     string  `json:"conditions"`
	ConditionsHold bool    `json:"conditions_hold"`
	Note           string  `json:"note"`
	// Coalition is the figure against the pooled view of a set of observers (realised
	// figures only).
	Coalition *CoalitionFigure `json:"coalition,omitempty"`
}

// Figure returns the numbers of s in JSON form; theorem, conditions and note are the
// caller's, as in Summarize.
func (s PairwiseSummary) Figure() PairwiseFigure {
	return PairwiseFigure{
		Worst: Pair{Epsilon: Eps(s.Worst.Epsilon), Order: JSONOrder(s.Worst.Order), I: s.Worst.I, J: s.Worst.J},
		Mean:  Eps(s.Mean), P50: Eps(s.P50), P90: Eps(s.P90), P99: Eps(s.P99),
		Theorem: s.Theorem, Conditions: s.Conditions, ConditionsHold: s.ConditionsHold, Note: s.Note,
	}
}

// CoalitionFigure is the realised figure against a set of observers that pool their
// views: each node's data against the coalition, and the worst node.
type CoalitionFigure struct {
	Members        []int     `json:"members"`
	Epsilon        Epsilon   `json:"epsilon"` // worst node outside the coalition
	Order          float64   `json:"order"`
	I              int       `json:"i"`
	PerNodeEpsilon []Epsilon `json:"per_node_epsilon"` // members get 0
	Theorem        string    `json:"theorem"`
	Conditions     string    `json:"conditions"`
	ConditionsHold bool      `json:"conditions_hold"`
}

// Figure returns the coalition's figure at delta over the unit curve of the realised
// pairwise matrix: each node's epsilon against the pooled view (a member's own data is not
// private from the coalition: 0), and the worst node outside it (I is -1 when every node
// is a member). theorem names the pairwise figure it extends.
func (c CoalitionWeights) Figure(unit Curve, delta float64, theorem, conditions string) *CoalitionFigure {
	n := len(c.Weight)
	cr := &CoalitionFigure{Members: c.Members, PerNodeEpsilon: make([]Epsilon, n), I: -1,
		Theorem:    theorem + ", coalition: the members' views pooled as one observer",
		Conditions: conditions, ConditionsHold: true}
	member := make([]bool, n)
	for _, v := range c.Members {
		if v >= 0 && v < n {
			member[v] = true
		}
	}
	epsOf := UnitConverter(unit, delta)
	best := -1.0
	for i, w := range c.Weight {
		if member[i] {
			continue
		}
		e := epsOf(w)
		cr.PerNodeEpsilon[i] = Eps(e)
		if e > best {
			best, cr.I = e, i
		}
	}
	if cr.I >= 0 {
		e, o := ToDP(unit.Scale(c.Weight[cr.I]), delta)
		cr.Epsilon, cr.Order = Eps(e), JSONOrder(o)
		cr.PerNodeEpsilon[cr.I] = cr.Epsilon
	}
	return cr
}

// PureFigure is a pure epsilon-DP figure (Theorem V.1, objective perturbation) in JSON
// form: the guarantee (unbounded when a condition fails), the formula's value regardless
// of the conditions, and why they fail. The R-ADMM model.json, the testnet report's
// gossip_privacy and 'account models' write it.
type PureFigure struct {
	Epsilon        Epsilon `json:"epsilon"`
	Formula        Epsilon `json:"formula_epsilon"`
	Theorem        string  `json:"theorem"`
	Conditions     string  `json:"conditions"`
	ConditionsHold bool    `json:"conditions_hold"`
	Reason         string  `json:"reason,omitempty"`
}

// Pure returns one node's figure in JSON form.
func (f ObjPertFigure) Pure() PureFigure {
	return PureFigure{Epsilon: Eps(f.Guarantee()), Formula: Eps(f.Epsilon), Theorem: f.Theorem, Conditions: f.Conditions,
		ConditionsHold: f.ConditionsHold, Reason: f.Reason}
}

// Pure returns the network figure in JSON form.
func (f ObjPertNetworkFigure) Pure() PureFigure {
	return PureFigure{Epsilon: Eps(f.Guarantee()), Formula: Eps(f.Epsilon), Theorem: f.Theorem, Conditions: f.Conditions,
		ConditionsHold: f.ConditionsHold, Reason: f.Reason}
}
