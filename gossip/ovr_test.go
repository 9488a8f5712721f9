package gossip

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
)

// TestOvRObjectiveIsBinaryBlocks: the one-vs-rest objective of K classes is, block by
// block, the binary objective of class k against the others (labels +1/-1): its value is
// their sum, its gradient and its perturbed solve are theirs on each block, bit for bit.
func TestOvRObjectiveIsBinaryBlocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const rows, p, k = 30, 4, 3
	d := &consensus.Dataset{Name: "ovr", Rows: rows, Cols: p, Classes: &consensus.Classes{List: []string{"a", "b", "c"}}}
	for r := 0; r < rows; r++ {
		for j := 0; j < p; j++ {
			d.X = append(d.X, 0.4*rng.NormFloat64())
		}
		d.Y = append(d.Y, float64(r%k))
	}
	o, err := NewObjective(d, consensus.LogisticOvR, 2, 0.1)
	if err != nil {
		t.Fatal(err)
	}
	if o.Dim() != k*p || o.Blocks() != k {
		t.Fatalf("dim %d blocks %d", o.Dim(), o.Blocks())
	}
	f, b := make([]float64, k*p), make([]float64, k*p)
	for j := range f {
		f[j], b[j] = rng.NormFloat64(), rng.NormFloat64()
	}
	g := make([]float64, k*p)
	o.Grad(g, f)
	x := make([]float64, k*p)
	res := o.Solve(x, b, make([]float64, k*p), 0.5)
	if !res.Converged {
		t.Fatalf("solve %+v", res)
	}
	sum := 0.0
	for c := 0; c < k; c++ {
		bin, err := NewObjective(consensus.OvRShard(d, c), consensus.Logistic, 2, 0.1)
		if err != nil {
			t.Fatal(err)
		}
		blk := f[c*p : (c+1)*p]
		sum += bin.Value(blk)
		gb := make([]float64, p)
		bin.Grad(gb, blk)
		xb := make([]float64, p)
		bin.Solve(xb, b[c*p:(c+1)*p], make([]float64, p), 0.5)
		for j := 0; j < p; j++ {
			if gb[j] != g[c*p+j] || xb[j] != x[c*p+j] {
				t.Fatalf("block %d coordinate %d: gradient %v vs %v, solve %v vs %v", c, j, g[c*p+j], gb[j], x[c*p+j], xb[j])
			}
		}
	}
	if math.Abs(sum-o.Value(f)) > 1e-12*math.Abs(sum) {
		t.Fatalf("value %v, sum of the binary blocks %v", o.Value(f), sum)
	}
}

// TestOvRFigureIsKBinaryFigures: a one-vs-rest node's Theorem V.1 figure is K times the
// binary figure of the same schedule (K releases per iteration, pure DP adds), term by
// term, and names the composition; the data checks accept class indices.
func TestOvRFigureIsKBinaryFigures(t *testing.T) {
	d := &consensus.Dataset{Name: "o", Rows: 3, Cols: 2, X: []float64{0.5, 0, 0, 0.5, 0.3, 0.3}, Y: []float64{0, 1, 2},
		Classes: &consensus.Classes{List: []string{"a", "b", "c"}}}
	maxNorm, ok := RowChecks(d)
	if !ok || maxNorm > 1 {
		t.Fatalf("row checks %v %v", maxNorm, ok)
	}
	bin := NewSetup(consensus.Logistic, 1, 0.01, 3, 9)
	ovr := NewSetup(consensus.LogisticOvR, 1, 0.01, 3, 9).WithClasses(d)
	etas := []float64{1, 1.2, 1.5}
	fb := privacy.ObjPertBound(bin.Account(RADMM, 2, 3, maxNorm, true, 2, etas))
	fo := privacy.ObjPertBound(ovr.Account(RADMM, 2, 3, maxNorm, ok, 2, etas))
	if !fb.ConditionsHold || !fo.ConditionsHold {
		t.Fatalf("conditions: %s / %s", fb.Reason, fo.Reason)
	}
	if math.Abs(fo.Epsilon-3*fb.Epsilon) > 1e-12*fo.Epsilon || len(fo.PerIteration) != len(fb.PerIteration) {
		t.Fatalf("one-vs-rest %v, binary %v", fo.Epsilon, fb.Epsilon)
	}
	for i := range fb.PerIteration {
		if math.Abs(fo.PerIteration[i]-3*fb.PerIteration[i]) > 1e-12 {
			t.Fatalf("iteration %d: %v vs 3 x %v", i, fo.PerIteration[i], fb.PerIteration[i])
		}
	}
	if !strings.Contains(fo.Theorem, "one-vs-rest over 3 classes") {
		t.Fatalf("theorem %q", fo.Theorem)
	}
}
