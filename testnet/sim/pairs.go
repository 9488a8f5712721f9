package sim

import (
	"bufio"
	"errors"
	"fmt"
	"image"
	"image/color"
	"io"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/palette/moreland"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/dpadmm/dpadmm/privacy"
)

// PairMatrices holds the pairwise matrices of a run, for the CSV and heat-map outputs.
// The epsilons they give are the ones the report summarises: the theorem, conditions and
// whether they hold are in Privacy.PairwisePlanned and Privacy.PairwiseRealised.
type PairMatrices struct {
	N     int
	Delta float64
	// Planned is the planned matrix; nil when not computed. When PlannedHold is false the
	// planned figure of every pair is PlannedFallback, the local bound the report prints.
	Planned         *privacy.PairwiseMatrix
	PlannedHold     bool
	PlannedFallback float64
	PlannedLabel    string
	// Realised is the matrix of the run's own path; nil when not computed.
	Realised      *privacy.PairwiseMatrix
	RealisedLabel string
}

// unitEpsilon is privacy.UnitConverter, the one converter of weighted curves.
func unitEpsilon(unit privacy.Curve, delta float64) func(w float64) float64 {
	return privacy.UnitConverter(unit, delta)
}

// matrixEpsilons returns the n*n row-major epsilons of m at delta, NaN on the diagonal.
func matrixEpsilons(m *privacy.PairwiseMatrix, delta float64) []float64 {
	n := m.N
	out := make([]float64, n*n)
	if m.Uniform {
		e, _ := privacy.ToDP(m.Unit.Scale(m.UniformWeight), delta)
		for k := range out {
			out[k] = e
		}
	} else {
		epsOf := unitEpsilon(m.Unit, delta)
		lastW, lastE := math.NaN(), 0.0
		for k, w := range m.W {
			if w != lastW {
				lastW, lastE = w, epsOf(w)
			}
			out[k] = lastE
		}
	}
	for i := 0; i < n; i++ {
		out[i*n+i] = math.NaN()
	}
	return out
}

func nanMatrix(n int) []float64 {
	out := make([]float64, n*n)
	for k := range out {
		out[k] = math.NaN()
	}
	return out
}

// PlannedEpsilons returns the planned epsilon of every ordered pair, row-major (row i is
// the data owner, column j the observer); NaN on the diagonal and when not computed.
func (pm *PairMatrices) PlannedEpsilons() []float64 {
	n := pm.N
	switch {
	case !pm.PlannedHold && pm.PlannedFallback > 0:
		out := make([]float64, n*n)
		for k := range out {
			out[k] = pm.PlannedFallback
		}
		for i := 0; i < n; i++ {
			out[i*n+i] = math.NaN()
		}
		return out
	case pm.Planned == nil:
		return nanMatrix(n)
	}
	return matrixEpsilons(pm.Planned, pm.Delta)
}

// RealisedEpsilons is PlannedEpsilons for the realised matrix.
func (pm *PairMatrices) RealisedEpsilons() []float64 {
	if pm.Realised == nil {
		return nanMatrix(pm.N)
	}
	return matrixEpsilons(pm.Realised, pm.Delta)
}

// PairsHeader is the header line of the pairs CSV.
const PairsHeader = "i,j,planned_epsilon,realised_epsilon"

// WritePairsCSV writes one line per ordered pair i != j: "i,j,planned_epsilon,
// realised_epsilon". A figure that was not computed is an empty field; +Inf is "+Inf".
func WritePairsCSV(w io.Writer, pm *PairMatrices) error {
	if pm == nil || pm.N < 2 {
		return errors.New("testnet: pairs: need at least 2 nodes")
	}
	return writePairs(w, pm.N, pm.PlannedEpsilons(), pm.RealisedEpsilons())
}

func writePairs(w io.Writer, n int, planned, realised []float64) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	bw.WriteString(PairsHeader + "\n")
	var line []byte
	num := func(b []byte, x float64) []byte {
		if math.IsNaN(x) {
			return b
		}
		return strconv.AppendFloat(b, x, 'g', 10, 64)
	}
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			if i == j {
				continue
			}
			line = strconv.AppendInt(line[:0], int64(i), 10)
			line = append(line, ',')
			line = strconv.AppendInt(line, int64(j), 10)
			line = append(line, ',')
			line = num(line, planned[i*n+j])
			line = append(line, ',')
			line = num(line, realised[i*n+j])
			line = append(line, '\n')
			bw.Write(line)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("testnet: pairs: %w", err)
	}
	return nil
}

// Plot kinds for WritePairsPNG.
const (
	PlotBoth     = "both"
	PlotPlanned  = "planned"
	PlotRealised = "realised"
)

// HeatPanel is one panel of a pairwise heat map: an n x n row-major epsilon matrix (row
// i the data owner, column j the observer; NaN is drawn grey) and its title.
type HeatPanel struct {
	Title string
	Eps   []float64
}

// WritePairsPNG draws the pairwise heat map of a run as PNG: kind is PlotPlanned,
// PlotRealised or PlotBoth (two panels on one colour scale).
func WritePairsPNG(w io.Writer, pm *PairMatrices, kind string) error {
	if pm == nil || pm.N < 2 {
		return errors.New("testnet: plot: need at least 2 nodes")
	}
	var panels []HeatPanel
	title := func(what, label string) string {
		return fmt.Sprintf("%s pairwise epsilon (delta=%g)\n%s", what, pm.Delta, label)
	}
	switch kind {
	case PlotBoth, PlotPlanned, PlotRealised:
	default:
		return fmt.Errorf("testnet: plot: kind must be %s, %s or %s, got %q", PlotBoth, PlotPlanned, PlotRealised, kind)
	}
	if kind != PlotRealised {
		label := pm.PlannedLabel
		if label == "" {
			label = "not computed"
		}
		panels = append(panels, HeatPanel{Title: title("planned", label), Eps: pm.PlannedEpsilons()})
	}
	if kind != PlotPlanned {
		label := pm.RealisedLabel
		if label == "" {
			label = "not computed"
		}
		panels = append(panels, HeatPanel{Title: title("realised", label), Eps: pm.RealisedEpsilons()})
	}
	return WriteHeatPNG(w, pm.N, panels)
}

// epsGrid adapts a row-major m x m matrix of cells to plotter.GridXYZ: column c is
// observer j, row r is data owner i. A cell covers b x b node pairs (b = 1 unless the
// matrix was pooled) and is repeated k times in both directions so that the rasterized
// heat map keeps sharp cell edges when scaled to the plot.
type epsGrid struct {
	m, b, k int
	z       []float64
}

func (g epsGrid) Dims() (c, r int)   { return g.m * g.k, g.m * g.k }
func (g epsGrid) Z(c, r int) float64 { return g.z[(r/g.k)*g.m+c/g.k] }
func (g epsGrid) X(c int) float64    { return (float64(c)+0.5)/float64(g.k)*float64(g.b) - 0.5 }
func (g epsGrid) Y(r int) float64    { return (float64(r)+0.5)/float64(g.k)*float64(g.b) - 0.5 }

// maxHeatCells is the largest number of cells per side drawn; larger matrices are pooled.
const maxHeatCells = 1000

// poolMax reduces an n x n matrix to m x m cells of b x b pairs, keeping the largest
// value of each cell (NaN only when the whole cell is NaN), so the worst pairs stay
// visible.
func poolMax(z []float64, n, b int) (cells []float64, m int) {
	m = (n + b - 1) / b
	cells = make([]float64, m*m)
	for k := range cells {
		cells[k] = math.NaN()
	}
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			v := z[i*n+j]
			k := (i/b)*m + j/b
			if !math.IsNaN(v) && (math.IsNaN(cells[k]) || v > cells[k]) {
				cells[k] = v
			}
		}
	}
	return cells, m
}

// indexTicks marks node indices 0, s, 2s, ... below n with a round step s.
func indexTicks(n int) plot.Ticker {
	return plot.TickerFunc(func(_, _ float64) []plot.Tick {
		step := 1
		for _, s := range []int{1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 2500, 5000, 10000} {
			step = s
			if n/s <= 6 {
				break
			}
		}
		var ts []plot.Tick
		for v := 0; v < n; v += step {
			ts = append(ts, plot.Tick{Value: float64(v), Label: strconv.Itoa(v)})
		}
		return ts
	})
}

// heatControls are the control colours of the heat-map palette (dark purple to yellow,
// luminance increasing, as in viridis): larger epsilons are lighter, and no value is
// drawn white.
var heatControls = []color.Color{
	color.RGBA{0x44, 0x01, 0x54, 0xff},
	color.RGBA{0x3b, 0x52, 0x8b, 0xff},
	color.RGBA{0x21, 0x91, 0x8c, 0xff},
	color.RGBA{0x5e, 0xc9, 0x62, 0xff},
	color.RGBA{0xfd, 0xe7, 0x25, 0xff},
}

// heatPaletteColors is a palette.Palette of fixed colours.
type heatPaletteColors []color.Color

func (p heatPaletteColors) Colors() []color.Color { return p }

// heatPalette samples the heat-map colour map at k evenly spaced points, clamped to
// [0, 1] (the colour map rejects values outside its range).
func heatPalette(k int) (heatPaletteColors, error) {
	cmap, err := moreland.NewLuminance(heatControls)
	if err != nil {
		return nil, fmt.Errorf("testnet: plot: %w", err)
	}
	cmap.SetMin(0)
	cmap.SetMax(1)
	out := make(heatPaletteColors, k)
	for i := range out {
		v := math.Min(1, math.Max(0, float64(i)/float64(k-1)))
		c, err := cmap.At(v)
		if err != nil {
			return nil, fmt.Errorf("testnet: plot: %w", err)
		}
		out[i] = c
	}
	return out, nil
}

// heatPanelPlot is one heat map: p's n x n matrix, pooled to cells of b x b pairs when
// b > 1 (largest value of each cell), each cell repeated up times per side, on the colour
// scale [0, hi] of pal.
func heatPanelPlot(p HeatPanel, n, b, up int, pal heatPaletteColors, hi float64) *plot.Plot {
	m := (n + b - 1) / b
	pl := plot.New()
	pl.Title.Text = p.Title
	pl.X.Label.Text = "j (observer)"
	pl.Y.Label.Text = "i (data owner)"
	cells := p.Eps
	if b > 1 {
		cells, _ = poolMax(p.Eps, n, b)
		pl.Title.Text += fmt.Sprintf("\n(each cell: max over %d x %d pairs)", b, b)
	}
	h := plotter.NewHeatMap(epsGrid{m: m, b: b, k: up, z: cells}, pal)
	h.Min, h.Max = 0, hi
	h.NaN = color.Gray{Y: 200}
	h.Overflow = color.RGBA{R: 255, G: 0, B: 255, A: 255}
	h.Rasterized = true
	pl.Add(h)
	pl.X.Min, pl.X.Max = -0.5, float64(m*b)-0.5
	pl.Y.Min, pl.Y.Max = -0.5, float64(m*b)-0.5
	pl.X.Tick.Marker, pl.Y.Tick.Marker = indexTicks(n), indexTicks(n)
	return pl
}

// heatBarPlot is the colour bar of the heat maps: pal spanning [0, hi] on the x axis (its
// y axis has no meaning and is hidden).
func heatBarPlot(pal heatPaletteColors, hi float64) *plot.Plot {
	cols := pal.Colors()
	strip := image.NewRGBA(image.Rect(0, 0, len(cols), 1))
	for x, col := range cols {
		strip.Set(x, 0, col)
	}
	bar := plot.New()
	bar.HideY()
	bar.X.Label.Text = "epsilon (grey: i = j or not computed; magenta: no finite bound)"
	bar.Add(plotter.NewImage(strip, 0, 0, hi, 1))
	bar.X.Min, bar.X.Max = 0, hi
	return bar
}

// Size of a heat-map panel and of the colour bar below the panels, in points (96 dpi:
// 4/3 pixel per point).
const heatPanelW, heatPanelH, heatBarH = 360, 380, 70

// WriteHeatPNG draws side-by-side heat maps of n x n pairwise epsilon matrices on one
// colour scale from 0 to the largest finite value, with a colour bar, as PNG.
func WriteHeatPNG(w io.Writer, n int, panels []HeatPanel) (err error) {
	// The plotting library reports some invalid states by panicking; turn any such
	// panic into an error so that bad input never crashes the program.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("testnet: plot: %v", r)
		}
	}()
	if n < 1 || len(panels) == 0 {
		return errors.New("testnet: plot: nothing to draw")
	}
	hi := 0.0
	for _, p := range panels {
		if len(p.Eps) != n*n {
			return fmt.Errorf("testnet: plot: panel %q has %d values, want %d", p.Title, len(p.Eps), n*n)
		}
		for _, v := range p.Eps {
			if !math.IsNaN(v) && !math.IsInf(v, 0) && v < math.MaxFloat64 && v > hi {
				hi = v
			}
		}
	}
	if !(hi > 0) {
		hi = 1
	}
	pal, err := heatPalette(256)
	if err != nil {
		return err
	}
	const panelW, panelH, barH = heatPanelW, heatPanelH, heatBarH
	width := vg.Length(panelW * len(panels))
	c := vgimg.NewWith(vgimg.UseWH(width, panelH+barH), vgimg.UseDPI(96), vgimg.UseBackgroundColor(color.White))
	dc := draw.New(c)
	top := draw.Crop(dc, 0, 0, barH, 0)
	tiles := draw.Tiles{Rows: 1, Cols: len(panels), PadX: vg.Points(10), PadTop: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(4)}
	b := (n + maxHeatCells - 1) / maxHeatCells
	up := max(1, min(480/((n+b-1)/b), 64))
	for t, p := range panels {
		heatPanelPlot(p, n, b, up, pal, hi).Draw(tiles.At(top, t, 0))
	}
	heatBarPlot(pal, hi).Draw(draw.Crop(dc, vg.Points(40), -vg.Points(40), 0, -(panelH)))
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(w); err != nil {
		return fmt.Errorf("testnet: plot: %w", err)
	}
	return nil
}
