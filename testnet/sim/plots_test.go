package sim

import (
	"bytes"
	"image/color"
	"image/png"
	"math"
	"testing"

	"gonum.org/v1/plot"
)

// pngOf decodes a PNG written by a plot function and checks that it has the size of a
// canvas of wPt x hPt points at 96 dpi (4/3 pixel per point, within a pixel of rounding)
// and is not blank: at least minInk of the pixels not white and at least 30 colours.
func pngOf(t *testing.T, name string, b []byte, wPt, hPt, minInk float64) (colours map[color.RGBA]bool) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	r := img.Bounds()
	wantW, wantH := wPt*96/72, hPt*96/72
	if math.Abs(float64(r.Dx())-wantW) > 1 || math.Abs(float64(r.Dy())-wantH) > 1 {
		t.Errorf("%s: %d x %d pixels, want %.0f x %.0f", name, r.Dx(), r.Dy(), wantW, wantH)
	}
	colours = map[color.RGBA]bool{}
	ink := 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			c := color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)
			colours[c] = true
			if c.R < 0xf0 || c.G < 0xf0 || c.B < 0xf0 {
				ink++
			}
		}
	}
	if frac := float64(ink) / float64(r.Dx()*r.Dy()); frac < minInk || len(colours) < 30 {
		t.Errorf("%s: %.3f of the pixels drawn, %d colours: blank?", name, frac, len(colours))
	}
	return colours
}

// labelled fails unless both axes of p have a label and p has a title.
func labelled(t *testing.T, name string, p *plot.Plot) {
	t.Helper()
	if p.Title.Text == "" {
		t.Errorf("%s: no title", name)
	}
	if p.X.Label.Text == "" {
		t.Errorf("%s: x axis without label", name)
	}
	if p.Y.Label.Text == "" {
		t.Errorf("%s: y axis without label", name)
	}
}

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
		pngOf(t, "heat", buf.Bytes(), float64(heatPanelW*len(panels)), heatPanelH+heatBarH, 0.3)
	}
	pal, err := heatPalette(16)
	if err != nil {
		t.Fatal(err)
	}
	labelled(t, "heat panel", heatPanelPlot(HeatPanel{Title: "x", Eps: eps}, n, 1, 4, pal, 1))
	bar := heatBarPlot(pal, 1)
	if bar.X.Label.Text == "" {
		t.Error("colour bar without label")
	}
}
