package consensus

import "math"

// Regression returns the root mean squared error sqrt((1/n) sum_r (x_r.w - y_r)^2) of the
// predictions x.w on d and the coefficient of determination R^2 = 1 - SS_res/SS_tot, with
// SS_tot = sum_r (y_r - mean(y))^2 over d itself. ok is false when R^2 is undefined (no
// rows, or every target equal); rmse is 0 for an empty dataset. With d.TargetScale the
// RMSE is in the targets' original units (R^2 does not depend on an affine scaling).
func Regression(d *Dataset, w []float64) (rmse, r2 float64, ok bool) {
	if d.Rows == 0 {
		return 0, 0, false
	}
	n := float64(d.Rows)
	mean := 0.0
	for _, y := range d.Y {
		mean += y
	}
	mean /= n
	res, tot := 0.0, 0.0
	for i := 0; i < d.Rows; i++ {
		r := dot(d.Row(i), w) - d.Y[i]
		res += r * r
		t := d.Y[i] - mean
		tot += t * t
	}
	rmse = math.Sqrt(res / n)
	if d.TargetScale > 0 {
		rmse *= d.TargetScale // in the targets' own units
	}
	if !(tot > 0) {
		return rmse, 0, false
	}
	return rmse, 1 - res/tot, true
}
