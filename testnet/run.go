package testnet

import (
	"fmt"
	"io"
	"math"
	"time"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
)

// Options configures a complete simulated run: data preparation, the walk, the reference
// solve and the privacy figures.
type Options struct {
	Train, Test *consensus.Dataset // Train is already scaled; Test may be nil
	Data        string             // name of the data source, for the report
	Scaling     string             // scaling used, for the report
	Nodes       int
	Split       string
	Problem     consensus.Problem
	Gamma       float64
	Lambda      float64
	Clip        float64
	Sigma       float64
	Hops        uint64
	Seed        uint64
	Graph       string
	MaxUpdates  int
	Delta       float64
	CurveEvery  uint64
	Curve       io.Writer // CSV "hop,objective,gap"; nil = none
	// Progress is called about once per second of wall time; nil = silent.
	Progress func(hop, total uint64, obj float64)
	// KeepTrace keeps the (hop, node, noisy) path in Report.Trace.
	KeepTrace bool
}

// Report is the JSON report of a run.
type Report struct {
	Algo               string      `json:"algo"`
	Objective          float64     `json:"objective"`
	ReferenceObjective float64     `json:"reference_objective"`
	Gap                float64     `json:"gap"`
	TestObjective      *float64    `json:"test_objective,omitempty"`
	Accuracy           *float64    `json:"accuracy,omitempty"`
	TrainAccuracy      *float64    `json:"train_accuracy,omitempty"`
	Hops               uint64      `json:"hops"`
	Nodes              int         `json:"nodes"`
	Dims               int         `json:"dims"`
	TrainRows          int         `json:"train_rows"`
	TestRows           int         `json:"test_rows"`
	WallSeconds        float64     `json:"wall_seconds"`
	UsPerHop           float64     `json:"us_per_hop"`
	Seed               uint64      `json:"seed"`
	Loss               string      `json:"loss"`
	L1                 float64     `json:"l1"`
	L2                 float64     `json:"l2"`
	Gamma              float64     `json:"gamma"`
	Lambda             float64     `json:"lambda"`
	Clip               float64     `json:"clip"`
	Sigma              float64     `json:"sigma"`
	MaxUpdates         int         `json:"max_updates"`
	Scale              string      `json:"scale"`
	Split              string      `json:"split"`
	Graph              string      `json:"graph"`
	Data               string      `json:"data"`
	TraceHash          string      `json:"trace_hash"`
	Model              []float64   `json:"model"`
	Privacy            Privacy     `json:"privacy"`
	Trace              []TraceStep `json:"trace,omitempty"`
}

// Privacy holds the privacy figures of a run.
type Privacy struct {
	Delta           float64  `json:"delta"`
	Conversion      string   `json:"conversion"`
	Updates         []int    `json:"updates"`
	Local           Local    `json:"local"`
	PairwisePlanned Pairwise `json:"pairwise_planned"`
}

// Local is the local (eavesdropper on all of a node's messages) guarantee per node.
type Local struct {
	Epsilon        float64   `json:"epsilon"` // max over nodes
	Order          float64   `json:"order"`
	PerNodeEpsilon []float64 `json:"per_node_epsilon"`
	Theorem        string    `json:"theorem"`
	Conditions     string    `json:"conditions"`
	ConditionsHold bool      `json:"conditions_hold"`
}

// Worst is the worst pair (i -> j).
type Worst struct {
	Epsilon float64 `json:"epsilon"`
	Order   float64 `json:"order"`
	I       int     `json:"i"`
	J       int     `json:"j"`
}

// Pairwise is the network-DP figure over the secret random path (Theorem 4).
type Pairwise struct {
	Worst          Worst  `json:"worst"`
	Theorem        string `json:"theorem"`
	Conditions     string `json:"conditions"`
	ConditionsHold bool   `json:"conditions_hold"`
	Note           string `json:"note"`
}

// jsonNum maps +Inf and NaN to a large finite value so the report stays valid JSON.
func jsonNum(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return math.MaxFloat64
	}
	return x
}

// Accounting computes the privacy section from per-node update counts.
func Accounting(updates []int, clip, sigma, delta float64, graphSpec string) Privacy {
	n := len(updates)
	pr := Privacy{Delta: delta, Conversion: privacy.Conversion, Updates: updates}
	loc := Local{
		PerNodeEpsilon: make([]float64, n),
		Theorem:        "local RDP, Theorem 3 (local) / eq. (27) with L*gamma -> C: K_i * 8 alpha C^2 / sigma^2",
		Conditions:     "none (Gaussian mechanism, sensitivity 4 lambda C, noise lambda sigma)",
		ConditionsHold: true,
	}
	worstI, kmax := 0, -1
	for i, k := range updates {
		eps, ord := privacy.ToDP(privacy.WalkLocalCurve(clip, sigma, k), delta)
		loc.PerNodeEpsilon[i] = jsonNum(eps)
		if eps > loc.Epsilon || i == 0 {
			loc.Epsilon, loc.Order = eps, ord
		}
		if k > kmax {
			kmax, worstI = k, i
		}
	}
	loc.Epsilon = jsonNum(loc.Epsilon)
	pr.Local = loc
	pw := Pairwise{
		Theorem: "Theorem 4, conservative corrected form (digest 3.6 E1/E2): K_i (1+c) e1 ln(n)/(n-1), e1 = 8 alpha C^2/sigma^2, c = (alpha-1) e1",
		Conditions: "complete graph, path secret from j, c <= 1 at the chosen order " +
			"(sigma >= 2 sqrt(2) C sqrt(alpha(alpha-1)))",
	}
	if n >= 2 {
		eps, ord := privacy.ToDP(privacy.Theorem4Curve(n, kmax, clip, sigma), delta)
		j := 0
		if worstI == 0 {
			j = 1
		}
		pw.Worst = Worst{Epsilon: jsonNum(eps), Order: ord, I: worstI, J: j}
		complete := graphSpec == "" || graphSpec == "complete"
		pw.ConditionsHold = complete && !math.IsInf(eps, 0) && !math.IsNaN(eps) && sigma > 0
		switch {
		case !complete:
			pw.Note = "Theorem 4 covers only the complete graph; this figure does not apply to " + graphSpec
		case sigma == 0:
			pw.Note = "no noise: no privacy"
		case !pw.ConditionsHold:
			pw.Note = "no admissible order: sigma too small for the theorem's condition"
		default:
			pw.Note = "planning figure over the secret random path, worst node i (most updates); j is any other node (symmetric); " +
				"the paper's amplification argument has unverified steps (digest 3.6 E5); the local figure always holds"
		}
	} else {
		pw.Note = "one node: no pairwise figure"
	}
	pr.PairwisePlanned = pw
	return pr
}

// Run performs a complete simulated run and returns its report.
func Run(o Options) (*Report, error) {
	if o.Train == nil || o.Train.Rows == 0 {
		return nil, fmt.Errorf("testnet: empty training set")
	}
	if o.Nodes < 1 || o.Nodes > o.Train.Rows {
		return nil, fmt.Errorf("testnet: nodes must be in [1,%d] (training rows), got %d", o.Train.Rows, o.Nodes)
	}
	if !(o.Delta > 0 && o.Delta < 1) {
		return nil, fmt.Errorf("testnet: delta must be in (0,1), got %v", o.Delta)
	}
	split := o.Split
	if split == "" {
		split = "iid"
	}
	shards, err := consensus.Split(o.Train, o.Nodes, split, o.Seed)
	if err != nil {
		return nil, err
	}
	ref, refObj, err := consensus.Solve(o.Train, o.Problem, consensus.SolveOptions{Tol: 1e-12, MaxIter: 100000})
	if err != nil {
		return nil, fmt.Errorf("testnet: reference solve: %w", err)
	}
	_ = ref
	sim, err := NewSim(SimConfig{
		Shards: shards, Problem: o.Problem, Gamma: o.Gamma, Lambda: o.Lambda, Clip: o.Clip,
		Sigma: o.Sigma, Graph: o.Graph, MaxUpdates: o.MaxUpdates, Seed: o.Seed,
	})
	if err != nil {
		return nil, err
	}
	sim.Store.KeepTrace = o.KeepTrace
	gap := func(obj float64) float64 { return (obj - refObj) / math.Max(math.Abs(refObj), 1e-300) }
	if o.Curve != nil {
		fmt.Fprintln(o.Curve, "hop,objective,gap")
		obj := o.Problem.Objective(o.Train, sim.Z())
		fmt.Fprintf(o.Curve, "0,%.10g,%.6g\n", obj, gap(obj))
	}
	start := time.Now()
	var simDur time.Duration
	last := start
	const chunk = 4096
	for done := uint64(0); done < o.Hops; {
		k := min(uint64(chunk), o.Hops-done)
		if o.Curve != nil && o.CurveEvery > 0 {
			k = min(k, o.CurveEvery-sim.Hops()%o.CurveEvery)
		}
		t0 := time.Now()
		if err := sim.RunHops(k, 0, nil); err != nil {
			return nil, err
		}
		simDur += time.Since(t0)
		done += k
		if o.Curve != nil && o.CurveEvery > 0 && sim.Hops()%o.CurveEvery == 0 {
			obj := o.Problem.Objective(o.Train, sim.Z())
			fmt.Fprintf(o.Curve, "%d,%.10g,%.6g\n", sim.Hops(), obj, gap(obj))
		}
		if o.Progress != nil && time.Since(last) >= time.Second {
			last = time.Now()
			o.Progress(sim.Hops(), o.Hops, o.Problem.Objective(o.Train, sim.Z()))
		}
	}
	wall := time.Since(start)
	z := append([]float64(nil), sim.Z()...)
	obj := o.Problem.Objective(o.Train, z)
	r := &Report{
		Algo: "walk", Objective: obj, ReferenceObjective: refObj, Gap: gap(obj),
		Hops: sim.Hops(), Nodes: o.Nodes, Dims: sim.Dim, TrainRows: o.Train.Rows,
		WallSeconds: wall.Seconds(), Seed: o.Seed, Loss: o.Problem.Loss.String(),
		L1: o.Problem.Reg.L1, L2: o.Problem.Reg.L2, Gamma: o.Gamma, Lambda: o.Lambda,
		Clip: jsonNum(o.Clip), Sigma: o.Sigma, MaxUpdates: o.MaxUpdates, Scale: o.Scaling, Split: split,
		Graph: graphName(o.Graph), Data: o.Data, TraceHash: fmt.Sprintf("%016x", sim.TraceHash()), Model: z,
		Trace: sim.Store.Path,
	}
	if sim.Hops() > 0 {
		r.UsPerHop = float64(simDur.Nanoseconds()) / 1e3 / float64(sim.Hops())
	}
	if o.Problem.Loss == consensus.Logistic {
		a := o.Problem.Accuracy(o.Train, z)
		r.TrainAccuracy = &a
	}
	if o.Test != nil && o.Test.Rows > 0 {
		r.TestRows = o.Test.Rows
		t := o.Problem.Objective(o.Test, z)
		r.TestObjective = &t
		if o.Problem.Loss == consensus.Logistic {
			a := o.Problem.Accuracy(o.Test, z)
			r.Accuracy = &a
		}
	}
	r.Privacy = Accounting(sim.Updates(), o.Clip, o.Sigma, o.Delta, graphName(o.Graph))
	return r, nil
}

func graphName(s string) string {
	if s == "" {
		return "complete"
	}
	return s
}
