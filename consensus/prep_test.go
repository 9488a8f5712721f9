package consensus

import (
	"math"
	"sort"
	"testing"
)

func TestSynthetic(t *testing.T) {
	d, w := SyntheticLasso(100, 10, 3, 0, 7)
	if d.Rows != 100 || d.Cols != 10 || len(w) != 10 {
		t.Fatalf("%dx%d", d.Rows, d.Cols)
	}
	nz := 0
	for _, v := range w {
		if v != 0 {
			nz++
			if math.Abs(v) < 1 || math.Abs(v) > 2 {
				t.Errorf("active weight %v outside [1,2]", v)
			}
		}
	}
	if nz != 3 {
		t.Errorf("%d active weights", nz)
	}
	for i := 0; i < d.Rows; i++ {
		if math.Abs(dot(d.Row(i), w)-d.Y[i]) > 1e-12 {
			t.Fatal("noise-free targets differ from X w*")
		}
	}
	d2, w2 := SyntheticLasso(100, 10, 3, 0, 7)
	if d2.X[17] != d.X[17] || w2[0] != w[0] {
		t.Error("not deterministic")
	}
	d3, _ := SyntheticLasso(100, 10, 3, 0, 8)
	if d3.X[17] == d.X[17] {
		t.Error("seed ignored")
	}
	l, wl := SyntheticLogistic(2000, 5, 5, 3)
	agree := 0
	for i := 0; i < l.Rows; i++ {
		if l.Y[i] != 1 && l.Y[i] != -1 {
			t.Fatalf("label %v", l.Y[i])
		}
		if (dot(l.Row(i), wl) >= 0) == (l.Y[i] > 0) {
			agree++
		}
	}
	if frac := float64(agree) / float64(l.Rows); frac < 0.75 || frac > 0.99 {
		t.Errorf("labels agree with sign(x.w*) on %v of rows", frac)
	}
}

func TestScaler(t *testing.T) {
	d := &Dataset{Name: "s", Rows: 3, Cols: 3, X: []float64{1, 5, 10, 2, 5, 20, 3, 5, 30}, Y: []float64{1, 2, 3}}
	if _, err := ParseScaling("zscore"); err == nil {
		t.Error("unknown scaling accepted")
	}
	sc, err := FitScaler(d, ScaleStandardize)
	if err != nil {
		t.Fatal(err)
	}
	z := sc.Apply(d)
	for j := 0; j < 3; j++ {
		m, v := 0.0, 0.0
		for i := 0; i < 3; i++ {
			m += z.X[i*3+j] / 3
		}
		for i := 0; i < 3; i++ {
			v += (z.X[i*3+j] - m) * (z.X[i*3+j] - m) / 3
		}
		wantV := 1.0
		if j == 1 {
			wantV = 0 // constant column
			if sc.Std[1] != 1 {
				t.Errorf("constant column std %v", sc.Std[1])
			}
		}
		if math.Abs(m) > 1e-12 || math.Abs(v-wantV) > 1e-12 {
			t.Errorf("column %d mean %v var %v", j, m, v)
		}
	}
	if d.X[0] != 1 {
		t.Error("Apply modified its input")
	}
	for _, kind := range []Scaling{ScaleRowNorm, ScaleStandardizeNorm} {
		sc, err := FitScaler(d, kind)
		if err != nil {
			t.Fatal(err)
		}
		z := sc.Apply(d)
		mx := 0.0
		for i := 0; i < z.Rows; i++ {
			mx = math.Max(mx, norm2(z.Row(i)))
		}
		if math.Abs(mx-1) > 1e-12 {
			t.Errorf("%s: largest row norm %v", kind, mx)
		}
	}
}

func TestSplit(t *testing.T) {
	d, _ := SyntheticLogistic(23, 2, 2, 1)
	for _, mode := range []string{"iid", "contiguous", "label"} {
		for _, nodes := range []int{1, 4, 23} {
			shards, err := Split(d, nodes, mode, 9)
			if err != nil {
				t.Fatal(err)
			}
			if len(shards) != nodes {
				t.Fatalf("%d shards", len(shards))
			}
			var rows []float64
			total := 0
			for _, s := range shards {
				if s.Rows < 23/nodes || s.Rows > 23/nodes+1 {
					t.Errorf("%s/%d: shard of %d rows", mode, nodes, s.Rows)
				}
				total += s.Rows
				for i := 0; i < s.Rows; i++ {
					rows = append(rows, s.Row(i)[0])
				}
			}
			if total != 23 {
				t.Fatalf("%d rows in total", total)
			}
			orig := make([]float64, 23)
			for i := range orig {
				orig[i] = d.Row(i)[0]
			}
			if mode == "contiguous" {
				for i := range orig {
					if rows[i] != orig[i] {
						t.Fatal("contiguous split reordered rows")
					}
				}
			}
			sort.Float64s(rows)
			sort.Float64s(orig)
			for i := range orig {
				if rows[i] != orig[i] {
					t.Fatalf("%s: shards are not a partition", mode)
				}
			}
		}
	}
	shards, _ := Split(d, 2, "label", 0)
	if shards[0].Y[0] != -1 || shards[1].Y[shards[1].Rows-1] != 1 {
		t.Error("label split not sorted by label")
	}
	for _, n := range []int{0, 24, -1} {
		if _, err := Split(d, n, "iid", 0); err == nil {
			t.Errorf("nodes=%d accepted", n)
		}
	}
	if _, err := Split(d, 2, "random", 0); err == nil {
		t.Error("unknown mode accepted")
	}
}

func TestTrainTest(t *testing.T) {
	d, _ := SyntheticLasso(10, 2, 1, 0, 1)
	tr, te := TrainTest(d, 0.25, 3)
	if tr.Rows != 7 || te.Rows != 3 {
		t.Fatalf("%d/%d", tr.Rows, te.Rows)
	}
	tr, te = TrainTest(d, 0.01, 3)
	if tr.Rows != 9 || te.Rows != 1 {
		t.Fatalf("small fraction: %d/%d", tr.Rows, te.Rows)
	}
	tr, te = TrainTest(d, 0, 3)
	if tr.Rows != 10 || te.Rows != 0 {
		t.Fatalf("zero fraction: %d/%d", tr.Rows, te.Rows)
	}
}

// TestSyntheticLassoSphere: unit rows, the support's size and range, and the noise level
// of the residual y - X w*.
func TestSyntheticLassoSphere(t *testing.T) {
	d, w := SyntheticLassoSphere(2000, 64, 8, 0.1, 18)
	nz := 0
	for _, v := range w {
		if v != 0 {
			nz++
			if v < 0 || v >= 1 {
				t.Fatalf("support value %v outside [0,1)", v)
			}
		}
	}
	if nz != 8 {
		t.Fatalf("support size %d, want 8", nz)
	}
	var ss float64
	for i := 0; i < d.Rows; i++ {
		a := d.Row(i)
		if n := math.Sqrt(dot(a, a)); math.Abs(n-1) > 1e-12 {
			t.Fatalf("row %d norm %v", i, n)
		}
		r := d.Y[i] - dot(a, w)
		ss += r * r
	}
	if sd := math.Sqrt(ss / float64(d.Rows)); sd < 0.09 || sd > 0.11 {
		t.Fatalf("noise std %v, want about 0.1", sd)
	}
}
