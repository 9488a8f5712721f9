package sim

import (
	"github.com/dpadmm/dpadmm/testnet/internal/fixture"

	"bytes"
	"math"
	"testing"
)

// TestHeatPNG renders the pairwise heat maps (one panel and two), decodes them and checks
// their size, that they are not blank and that every axis shown is labelled.
func TestHeatPNG(t *testing.T) {
	const n = 12
	eps := make([]float64, n*n)
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			eps[i*n+j] = 1 / (1 + math.Abs(float64(i-j)))
			if i == j {
				eps[i*n+j] = math.NaN()
			}
		}
	}
	for _, panels := range [][]HeatPanel{{{Title: "one", Eps: eps}}, {{Title: "a", Eps: eps}, {Title: "b", Eps: eps}}} {
		var buf bytes.Buffer
		if err := WriteHeatPNG(&buf, n, panels); err != nil {
			t.Fatal(err)
		}
		fixture.PNGOf(t, "heat", buf.Bytes(), float64(heatPanelW*len(panels)), heatPanelH+heatBarH, 0.3)
	}
	pal, err := heatPalette(16)
	if err != nil {
		t.Fatal(err)
	}
	fixture.Labelled(t, "heat panel", heatPanelPlot(HeatPanel{Title: "x", Eps: eps}, n, 1, 4, pal, 1))
	bar := heatBarPlot(pal, 1)
	if bar.X.Label.Text == "" {
		t.Error("colour bar without label")
	}
}
