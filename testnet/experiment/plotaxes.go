package experiment

import (
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
)

// yRange is the y extent of a panel and whether its axis is logarithmic.
type yRange struct {
	Min, Max float64
	Log      bool
}

// Y-range rule of the band plots (see chooseYRange).
const (
	// yQuantile is the quantile of the upper band edges that sets the top of a panel: a
	// few seeds with spikes do not flatten every other curve.
	yQuantile = 0.9
	// yLogRatio is the ratio Max/Min from which a panel that allows it is drawn on a log
	// axis (values spanning a decade or more).
	yLogRatio = 10.0
	// yPad is the margin added on both sides, as a fraction of the span (of the log span
	// on a log axis).
	yPad = 0.04
)

// quantileNearestRank returns the q-quantile of v (nearest rank: the smallest value with
// at least ceil(q*len(v)) values at or below it). v is sorted in place; it must not be
// empty.
func quantileNearestRank(v []float64, q float64) float64 {
	slices.Sort(v)
	k := int(math.Ceil(q*float64(len(v)))) - 1
	return v[min(max(k, 0), len(v)-1)]
}

// chooseYRange picks the y limits of a panel showing bands (min-max over seeds) and their
// mean lines, so that the differences between the curves stay visible:
//
//   - the bottom is the smallest lower band edge (every band starts inside the panel);
//   - the top is the q-quantile of all upper band edges pooled (points of every band at
//     every t), raised to the largest mean value so that no mean line leaves the panel;
//     the few upper edges above it are clipped;
//   - the axis is logarithmic when allowLog, the bottom is > 0 and top/bottom >= yLogRatio
//     (the values span a decade or more); otherwise linear;
//   - both ends get a margin of yPad of the span; on a linear axis a bottom >= 0 stays
//     >= 0.
//
// Non-finite values are ignored; without any finite value the range is [0, 1].
func chooseYRange(bands []Band, q float64, allowLog bool) yRange {
	lo, meanHi := math.Inf(1), math.Inf(-1)
	var uppers []float64
	finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	for _, b := range bands {
		for _, v := range b.Min {
			if finite(v) {
				lo = math.Min(lo, v)
			}
		}
		for _, v := range b.Mean {
			if finite(v) {
				lo = math.Min(lo, v)
				meanHi = math.Max(meanHi, v)
			}
		}
		for _, v := range b.Max {
			if finite(v) {
				uppers = append(uppers, v)
			}
		}
	}
	hi := meanHi
	if len(uppers) > 0 {
		hi = math.Max(hi, quantileNearestRank(uppers, q))
	}
	if math.IsInf(lo, 1) || math.IsInf(hi, -1) {
		return yRange{Min: 0, Max: 1}
	}
	if hi <= lo {
		d := math.Max(math.Abs(lo)*0.05, 1e-9)
		lo, hi = lo-d, hi+d
	}
	if allowLog && lo > 0 && hi/lo >= yLogRatio {
		f := math.Pow(hi/lo, yPad)
		return yRange{Min: lo / f, Max: hi * f, Log: true}
	}
	d := yPad * (hi - lo)
	r := yRange{Min: lo - d, Max: hi + d}
	if lo >= 0 {
		r.Min = math.Max(r.Min, 0)
	}
	return r
}

// apply sets the range, scale and tick marks of axis a.
func (r yRange) apply(a *plot.Axis) {
	a.Min, a.Max = r.Min, r.Max
	if r.Log {
		a.Scale = plot.LogScale{}
		a.Tick.Marker = logTicks{}
		return
	}
	a.Scale = plot.LinearScale{}
	a.Tick.Marker = expTicks{}
}

// logTicks marks a log axis at 1, 2 and 5 x 10^k (labelled; only 10^k over more than
// three decades) and the other integer multiples of 10^k (unlabelled); when fewer than
// three labels would fall in the range, every multiple is labelled.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(lo > 0) || !(hi > lo) || math.IsInf(hi, 0) {
		return nil
	}
	k0, k1 := int(math.Floor(math.Log10(lo))), int(math.Ceil(math.Log10(hi)))
	type mark struct {
		v     float64
		major bool
	}
	var marks []mark
	majors, wide := 0, k1-k0 > 3

	for k := k0; k <= k1; k++ {
		p := math.Pow(10, float64(k))
		for m := 1; m <= 9; m++ {
			v := float64(m) * p
			if v < lo*(1-1e-9) || v > hi*(1+1e-9) {
				continue
			}
			major := m == 1 || !wide && (m == 2 || m == 5)
			if major {
				majors++
			}
			marks = append(marks, mark{v, major})
		}
	}
	ts := make([]plot.Tick, len(marks))
	for i, mk := range marks {
		ts[i].Value = mk.v
		if mk.major || majors < 3 {
			ts[i].Label = strconv.FormatFloat(mk.v, 'g', 3, 64)
		}
	}
	return ts
}
