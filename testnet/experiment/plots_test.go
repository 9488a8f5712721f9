package experiment

import (
	"github.com/dpadmm/dpadmm/testnet/internal/fixture"

	"bytes"
	"math"
	"slices"
	"testing"
)

// fig5Synthetic is a comparison result with every algorithm at three alphas: bands of
// width w around means that fall with t, each algorithm at its own level.
func fig5Synthetic() *ExperimentResult {
	const T = 20
	alphas := []float64{2, 1, 0.5}
	band := func(level, w float64) Band {
		var b Band
		for t := 0; t <= T; t++ {
			m := level * (1 + 1/float64(t+1))
			b.Mean, b.Min, b.Max = append(b.Mean, m), append(b.Min, m*(1-w)), append(b.Max, m*(1+w))
		}
		return b
	}
	r := &ExperimentResult{Options: ExperimentOptions{Nodes: 5, Graph: "ring", Iters: T, Seeds: 3, Alphas: alphas}}
	r.Series = append(r.Series, ExperimentSeries{Algo: ExpNoPriv, Alpha: math.Inf(1), Loss: band(0.3, 0.01),
		TestError: band(0.02, 0.1), Privacy: band(math.NaN(), 0)})
	for _, a := range alphas {
		for k, algo := range ExperimentAlgos {
			lv := 0.35 + 0.1*float64(k)/a
			r.Series = append(r.Series, ExperimentSeries{Algo: algo, Alpha: a, Loss: band(lv, 0.3),
				TestError: band(lv/3, 0.4), Privacy: band(10/a, 0)})
		}
	}
	return r
}

// TestPlotsRenderPNG renders the Fig. 5 comparison PNG, decodes it and checks its size,
// that it is not blank and that every axis shown is labelled (the pairwise heat maps:
// testnet/sim TestHeatPNG; the audit plot: testnet/audit TestAuditPlotRenders).
func TestPlotsRenderPNG(t *testing.T) {
	t.Run("fig5", func(t *testing.T) {
		r := fig5Synthetic()
		var buf bytes.Buffer
		if err := r.WritePNG(&buf); err != nil {
			t.Fatal(err)
		}
		colours := fixture.PNGOf(t, "fig5", buf.Bytes(), 3*fig5PanelW, 3*fig5PanelH+fig5LegendH, 0.05)
		// Every algorithm's mean line shows in its own colour.
		for _, algo := range append([]string{ExpNoPriv}, ExperimentAlgos...) {
			if !colours[expStyles[algo].color] {
				t.Errorf("no pixel in the colour of %s", algo)
			}
		}
		var list []*ExperimentSeries
		for k := range r.Series {
			if s := &r.Series[k]; s.Alpha == 1 || s.Algo == ExpNoPriv {
				list = append(list, s)
			}
		}
		panels, items, err := fig5Row(list, 1, r.Options.Iters)
		if err != nil {
			t.Fatal(err)
		}
		for k, p := range panels {
			fixture.Labelled(t, "fig5 panel "+string(rune('0'+k)), p)
		}
		if len(items) != 5 {
			t.Errorf("%d legend entries, want 5", len(items))
		}
	})
}

// TestPlotDrawOrder: the non-private reference is drawn last (on top of every private
// curve), the others keep their order, and the styles are distinct.
func TestPlotDrawOrder(t *testing.T) {
	r := fig5Synthetic()
	var list []*ExperimentSeries
	for k := range r.Series {
		if s := &r.Series[k]; s.Alpha == 2 || s.Algo == ExpNoPriv {
			list = append(list, s)
		}
	}
	got := drawOrder(list)
	var names []string
	for _, s := range got {
		names = append(names, s.Algo)
	}
	if want := append(slices.Clone(ExperimentAlgos), ExpNoPriv); !slices.Equal(names, want) {
		t.Errorf("draw order %v, want %v", names, want)
	}
	algos := append([]string{ExpNoPriv}, ExperimentAlgos...)
	for a := range algos {
		for b := a + 1; b < len(algos); b++ {
			sa, sb := expStyles[algos[a]], expStyles[algos[b]]
			if sa.color == sb.color || slices.Equal(sa.dashes, sb.dashes) {
				t.Errorf("%s and %s share a colour or a dash pattern", algos[a], algos[b])
			}
		}
	}
}

// TestYRange checks the y limits of the band panels against the rule, computed here
// directly: bottom = smallest lower edge, top = the smallest upper edge with at least 90%
// of the upper edges at or below it (raised to the largest mean), 4% margins, log axis
// only when allowed, positive and spanning a decade.
func TestYRange(t *testing.T) {
	// 20 upper edges 1.0, 1.1, ..., 2.9 plus two spikes at 50: 22 values, 90% = 19.8, so
	// the top is the 20th smallest, 2.9; the spikes are clipped.
	var a Band
	for k := 0; k < 20; k++ {
		a.Min = append(a.Min, 0.5+0.01*float64(k))
		a.Mean = append(a.Mean, 0.8)
		a.Max = append(a.Max, 1+0.1*float64(k))
	}
	b := Band{Min: []float64{0.6, 0.7}, Mean: []float64{0.9, 0.9}, Max: []float64{50, 50}}
	lo, hi := 0.5, 2.9
	r := chooseYRange([]Band{a, b}, 0.9, true)
	if want := (yRange{Min: lo - 0.04*(hi-lo), Max: hi + 0.04*(hi-lo)}); math.Abs(r.Min-want.Min) > 1e-12 || math.Abs(r.Max-want.Max) > 1e-12 || r.Log {
		t.Errorf("range %+v, want %+v", r, want)
	}
	// Brute-force check of the quantile rule on the pooled upper edges.
	all := append(slices.Clone(a.Max), b.Max...)
	for _, x := range all {
		n := 0
		for _, v := range all {
			if v <= x {
				n++
			}
		}
		if float64(n) >= 0.9*float64(len(all)) && x < hi-1e-12 {
			t.Errorf("%v has %d of %d edges at or below it: the quantile is not the smallest such value", x, n, len(all))
		}
	}

	// A mean above the quantile raises the top: no mean line leaves the panel.
	c := Band{Min: []float64{0.9}, Mean: []float64{4}, Max: []float64{4.5}}
	r = chooseYRange([]Band{a, c}, 0.9, false)
	if top := 4 + 0.04*(4-0.5); math.Abs(r.Max-top) > 1e-12 {
		t.Errorf("top %v, want %v (the largest mean plus margin)", r.Max, top)
	}

	// Values over two decades: a log axis when allowed, with the margins a factor.
	d := Band{Min: []float64{0.01, 0.02}, Mean: []float64{0.1, 0.2}, Max: []float64{1, 2}}
	r = chooseYRange([]Band{d}, 1, true)
	f := math.Pow(2/0.01, 0.04)
	if !r.Log || math.Abs(r.Min-0.01/f) > 1e-15 || math.Abs(r.Max-2*f) > 1e-12 {
		t.Errorf("log range %+v, want [%v, %v] log", r, 0.01/f, 2*f)
	}
	if r := chooseYRange([]Band{d}, 1, false); r.Log || r.Min != 0 {
		t.Errorf("linear range %+v: want linear, bottom clamped at 0", r)
	}
	// A zero lower edge rules out the log axis; so does a span under a decade.
	z := Band{Min: []float64{0, 0.5}, Mean: []float64{1, 1}, Max: []float64{100, 100}}
	if r := chooseYRange([]Band{z}, 1, true); r.Log {
		t.Errorf("log axis with a zero value: %+v", r)
	}
	if r := chooseYRange([]Band{{Min: []float64{1}, Mean: []float64{2}, Max: []float64{9}}}, 1, true); r.Log {
		t.Errorf("log axis for less than a decade: %+v", r)
	}
	// Non-finite values are ignored; nothing finite gives [0, 1]; a flat line gets a span.
	nan := Band{Min: []float64{math.NaN(), 1}, Mean: []float64{math.Inf(1), 1}, Max: []float64{math.NaN(), 1}}
	if r := chooseYRange([]Band{nan}, 0.9, true); !(r.Min < 1 && r.Max > 1) || math.IsInf(r.Max, 0) {
		t.Errorf("flat band with NaN: %+v", r)
	}
	if r := chooseYRange([]Band{{Mean: []float64{math.NaN()}}}, 0.9, true); r != (yRange{Min: 0, Max: 1}) {
		t.Errorf("no finite value: %+v", r)
	}
}

// TestPlotLogTicks: labelled ticks of the log axis at 1, 2, 5 x 10^k inside the range.
func TestPlotLogTicks(t *testing.T) {
	var labels []float64
	for _, tk := range (logTicks{}).Ticks(0.3, 30) {
		if tk.Value < 0.3 || tk.Value > 30 {
			t.Errorf("tick %v outside [0.3, 30]", tk.Value)
		}
		if tk.Label != "" {
			labels = append(labels, tk.Value)
		}
	}
	want := []float64{0.5, 1, 2, 5, 10, 20}
	if len(labels) != len(want) {
		t.Fatalf("labels at %v, want %v", labels, want)
	}
	for k := range want {
		if math.Abs(labels[k]-want[k]) > 1e-12*want[k] {
			t.Errorf("labels at %v, want %v", labels, want)
		}
	}
	// Under three 1-2-5 labels in the range: every multiple is labelled.
	n := 0
	for _, tk := range (logTicks{}).Ticks(0.25, 0.45) {
		if tk.Label != "" {
			n++
		}
	}
	if n != 2 { // 0.3 and 0.4
		t.Errorf("%d labels in [0.25, 0.45], want 2", n)
	}
}
