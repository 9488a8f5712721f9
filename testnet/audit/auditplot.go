package audit

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/dpadmm/dpadmm/privacy"
)

// auditBars is the lower bounds with their confidence intervals, as error bars.
type auditBars struct {
	x, y, lo, hi []float64
}

func (b auditBars) Len() int                    { return len(b.x) }
func (b auditBars) XY(i int) (float64, float64) { return b.x[i], b.y[i] }
func (b auditBars) YError(i int) (float64, float64) {
	return b.y[i] - b.lo[i], b.hi[i] - b.y[i]
}

// WriteAuditPNG draws an audit as PNG: for each line (step when the audit has several,
// observer and test) the empirical lower bound on epsilon with its confidence interval, and
// beside it the accountant's upper bound.
// Infinite values (an interval without upper end, an observer without guarantee) are drawn
// at the top of the plot and marked "inf" in the axis label. The legend is below the plot.
func WriteAuditPNG(w io.Writer, results []AuditResult, title string) (err error) {
	// The plotting library reports some invalid states by panicking.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("testnet: audit plot: %v", r)
		}
	}()
	if len(results) == 0 {
		return errors.New("testnet: audit plot: no results")
	}
	p, leg, err := auditPlot(results, title)
	if err != nil {
		return fmt.Errorf("testnet: audit plot: %w", err)
	}
	c := vgimg.NewWith(vgimg.UseWH(auditWidth(len(results)), auditPlotH+auditLegendH), vgimg.UseDPI(96), vgimg.UseBackgroundColor(color.White))
	dc := draw.New(c)
	p.Draw(draw.Crop(dc, 0, 0, auditLegendH, 0))
	leg.Draw(draw.Crop(dc, 0, 0, 0, -auditPlotH))
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(w); err != nil {
		return fmt.Errorf("testnet: audit plot: %w", err)
	}
	return nil
}

// Size of the audit figure in points (96 dpi: 4/3 pixel per point): the plot, and the
// strip below it that holds the legend, where it cannot cover a bar.
const auditPlotH, auditLegendH = 420, 40

// auditWidth is the width of the audit figure for k result lines.
func auditWidth(k int) vg.Length { return vg.Length(math.Max(520, float64(110*k))) }

// auditPlot builds the plot of WriteAuditPNG and its legend.
func auditPlot(results []AuditResult, title string) (*plot.Plot, *plot.Legend, error) {
	finite := func(x privacy.Epsilon) bool { return x.Bounded() }
	top := 0.0
	for _, r := range results {
		for _, v := range []privacy.Epsilon{r.LowerEpsilon, r.LowerEpsilonCI[1], r.UpperEpsilon} {
			if finite(v) {
				top = math.Max(top, float64(v))
			}
		}
	}
	if !(top > 0) {
		top = 1
	}
	top *= 1.15
	clamp := func(v privacy.Epsilon) float64 {
		if !finite(v) {
			return top
		}
		return math.Min(float64(v), top)
	}
	var bars auditBars
	var upper plotter.XYs
	names := make([]string, len(results))
	steps := map[string]bool{}
	for _, r := range results {
		steps[r.Step] = true
	}
	for i, r := range results {
		names[i] = fmt.Sprintf("%s\n%s", r.Observer, r.Test)
		if len(steps) > 1 {
			names[i] = r.Step + "\n" + names[i]
		}
		if !finite(r.UpperEpsilon) {
			names[i] += "\n(upper: inf)"
		}
		if r.Violation {
			names[i] += "\nVIOLATION"
		}
		x := float64(i)
		bars.x = append(bars.x, x-0.12)
		bars.y = append(bars.y, clamp(r.LowerEpsilon))
		bars.lo = append(bars.lo, clamp(r.LowerEpsilonCI[0]))
		bars.hi = append(bars.hi, clamp(r.LowerEpsilonCI[1]))
		upper = append(upper, plotter.XY{X: x + 0.12, Y: clamp(r.UpperEpsilon)})
	}
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = "epsilon"
	p.X.Label.Text = "observer and distinguishing test"
	if len(steps) > 1 {
		p.X.Label.Text = "step, observer and distinguishing test"
	}
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.6, float64(len(results))-0.4
	p.Y.Min, p.Y.Max = 0, top
	p.Add(plotter.NewGrid())
	eb, err := plotter.NewYErrorBars(bars)
	if err != nil {
		return nil, nil, err
	}
	blue := color.RGBA{0x1f, 0x4e, 0xb4, 0xff}
	red := color.RGBA{0xc0, 0x20, 0x20, 0xff}
	eb.LineStyle.Color, eb.LineStyle.Width = blue, vg.Points(1.5)
	lower, err := plotter.NewScatter(bars)
	if err != nil {
		return nil, nil, err
	}
	lower.GlyphStyle = draw.GlyphStyle{Color: blue, Radius: vg.Points(4), Shape: draw.CircleGlyph{}}
	up, err := plotter.NewScatter(upper)
	if err != nil {
		return nil, nil, err
	}
	up.GlyphStyle = draw.GlyphStyle{Color: red, Radius: vg.Points(5), Shape: draw.PyramidGlyph{}}
	p.Add(eb, lower, up)
	leg := plot.NewLegend()
	leg.Add(auditLegend(results[0]), lower)
	leg.Add("claimed upper bound (accountant)", up)
	leg.Top, leg.Left = true, true
	leg.XOffs = vg.Points(12)
	return p, &leg, nil
}

// auditLegend describes the lower bounds of an audit whose first row is r.
func auditLegend(r AuditResult) string {
	if r.FamilySize > 1 {
		return fmt.Sprintf("empirical lower bound on epsilon, %.4g%% interval (Bonferroni: %d bounds, %g%% jointly)",
			100*r.RowConfidence, r.FamilySize, 100*r.Confidence)
	}
	return fmt.Sprintf("empirical lower bound on epsilon, %g%% interval", 100*r.Confidence)
}
