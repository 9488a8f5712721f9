package sim

import (
	"bytes"
	"encoding/csv"
	"math"
	"strconv"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
)

// curveRows runs o with a curve every `every` hops and returns the curve's rows (hop,
// objective, gap) and the report.
func curveRows(t *testing.T, o Options, every uint64) ([][3]float64, *Report) {
	t.Helper()
	var buf bytes.Buffer
	o.Curve, o.CurveEvery = &buf, every
	rep, err := Run(o)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) < 2 || len(recs[0]) != 3 || recs[0][0] != "hop" {
		t.Fatalf("curve %v", recs)
	}
	var rows [][3]float64
	for _, r := range recs[1:] {
		var row [3]float64
		for k := range row {
			if row[k], err = strconv.ParseFloat(r[k], 64); err != nil {
				t.Fatal(err)
			}
		}
		rows = append(rows, row)
	}
	return rows, rep
}

// TestCurveLastHop: the curve has hop 0, every multiple of CurveEvery and the last hop,
// once, whether or not the number of hops is a multiple; its last point is the report's
// objective and gap.
func TestCurveLastHop(t *testing.T) {
	full, err := consensus.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	sc, err := consensus.FitScaler(full, "standardize+rownorm")
	if err != nil {
		t.Fatal(err)
	}
	base := Options{Train: sc.Apply(full), Nodes: 5, Problem: consensus.Problem{Loss: consensus.Logistic, Reg: consensus.Regularizer{L2: 1e-2}},
		Gamma: 10, Lambda: 0.5, Clip: 0.1, Sigma: 1, Seed: 3, Delta: 1e-5}
	for _, c := range []struct {
		hops, every uint64
		want        []float64
	}{
		{35, 10, []float64{0, 10, 20, 30, 35}},
		{30, 10, []float64{0, 10, 20, 30}},
		{7, 10, []float64{0, 7}},
		{3, 1, []float64{0, 1, 2, 3}},
	} {
		o := base
		o.Hops = c.hops
		rows, rep := curveRows(t, o, c.every)
		var hops []float64
		for _, r := range rows {
			hops = append(hops, r[0])
		}
		if len(hops) != len(c.want) {
			t.Fatalf("hops %d every %d: curve hops %v, want %v", c.hops, c.every, hops, c.want)
		}
		for k := range hops {
			if hops[k] != c.want[k] {
				t.Fatalf("hops %d every %d: curve hops %v, want %v", c.hops, c.every, hops, c.want)
			}
		}
		last := rows[len(rows)-1]
		wantGap := (rep.Objective - rep.ReferenceObjective) / math.Abs(rep.ReferenceObjective)
		if math.Abs(last[1]-rep.Objective) > 1e-9*math.Abs(rep.Objective) || math.Abs(last[2]-wantGap) > 1e-5*math.Max(math.Abs(wantGap), 1e-3) {
			t.Errorf("hops %d: last point objective %v gap %v, report %v and %v", c.hops, last[1], last[2], rep.Objective, wantGap)
		}
	}
}
