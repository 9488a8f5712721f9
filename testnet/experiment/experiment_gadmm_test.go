package experiment

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"
)

// TestGADMMExperiment runs a small version of the Sec. 10 experiment and checks the
// recomputed Table 1 constants against the digest's independent recomputation (midpoint
// eta and L = max{R/P, S/Q}; L at the printed eta 1.95 of row 1 is 0.989), that the gap
// falls from x0, that a large sigma stagnates higher than a small one, and the outputs.
func TestGADMMExperiment(t *testing.T) {
	o := DefaultGADMMExperimentOptions()
	o.Dim, o.Rows, o.Iters, o.Runs, o.Sigmas = 16, 120, 60, 6, []float64{0.05, 0.7}
	res, err := RunGADMMExperiment(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ eta, l float64 }{{1.7531, 0.947368}, {4.8113, 0.914881}, {20.0000, 0.857143}, {43.3013, 0.799231}}
	var tab, sig []GADMMCurve
	for _, c := range res.Curves {
		if c.Panel == "table1" {
			tab = append(tab, c)
		} else {
			sig = append(sig, c)
		}
	}
	if len(tab) != 4 || len(sig) != 2 {
		t.Fatalf("%d table curves, %d sigma curves", len(tab), len(sig))
	}
	for k, c := range tab {
		if math.Abs(c.Eta-want[k].eta) > 5e-5*want[k].eta || math.Abs(c.L-want[k].l) > 1e-6 {
			t.Errorf("row %d: eta %v L %v, want %v %v", k, c.Eta, c.L, want[k].eta, want[k].l)
		}
		if c.Gap.Mean[o.Iters] >= c.Gap.Mean[0]/10 {
			t.Errorf("row %d: gap %v at T, %v at 0: no progress", k, c.Gap.Mean[o.Iters], c.Gap.Mean[0])
		}
	}
	if math.Abs(tab[0].LAtPrinted-0.989) > 5e-4 {
		t.Errorf("L at the printed eta 1.95: %v, want about 0.989", tab[0].LAtPrinted)
	}
	last := func(c GADMMCurve) float64 { // mean gap over the last 10 iterations
		s := 0.0
		for _, v := range c.Gap.Mean[o.Iters-9:] {
			s += v
		}
		return s / 10
	}
	if !(last(sig[1]) > 2*last(sig[0])) {
		t.Errorf("sigma 0.7 stagnates at %v, sigma 0.05 at %v", last(sig[1]), last(sig[0]))
	}
	var csv, png bytes.Buffer
	if err := res.WriteCSV(&csv); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(csv.String(), "\n"); n != 1+6*(o.Iters+1) {
		t.Errorf("csv has %d lines", n)
	}
	if err := res.WritePNG(&png); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(png.Bytes(), []byte("\x89PNG")) {
		t.Error("not a PNG")
	}
}
