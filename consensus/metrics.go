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

// ClassReport holds the classification scores of predictions against true classes.
type ClassReport struct {
	Classes   []string    `json:"classes"`
	Accuracy  float64     `json:"accuracy"`
	Confusion [][]int     `json:"confusion"` // [true][predicted]
	PerClass  []ClassStat `json:"per_class"`
	MacroF1   float64     `json:"macro_f1"`
	// ROCAUC is the area under the ROC curve of the positive class's probability (binary
	// only; absent when the data hold one class).
	ROCAUC *float64 `json:"roc_auc,omitempty"`
}

// ClassStat is one class's precision, recall and F1 (0 where undefined: no prediction of
// the class, or no row of it) and its number of rows.
type ClassStat struct {
	Class     string  `json:"class"`
	Precision float64 `json:"precision"`
	Recall    float64 `json:"recall"`
	F1        float64 `json:"f1"`
	Support   int     `json:"support"`
}

// Classify scores predicted class indices against true ones (both in [0, len(classes))).
// score, when not nil, is the positive class's probability of each row (binary): it
// gives the ROC AUC, ties counted one half (the Mann-Whitney statistic).
func Classify(classes []string, truth, pred []int, score []float64) ClassReport {
	k := len(classes)
	r := ClassReport{Classes: classes, Confusion: make([][]int, k)}
	for i := range r.Confusion {
		r.Confusion[i] = make([]int, k)
	}
	ok := 0
	for i, t := range truth {
		r.Confusion[t][pred[i]]++
		if t == pred[i] {
			ok++
		}
	}
	if len(truth) > 0 {
		r.Accuracy = float64(ok) / float64(len(truth))
	}
	for c := 0; c < k; c++ {
		tp, col, row := r.Confusion[c][c], 0, 0
		for o := 0; o < k; o++ {
			col += r.Confusion[o][c]
			row += r.Confusion[c][o]
		}
		s := ClassStat{Class: classes[c], Support: row}
		if col > 0 {
			s.Precision = float64(tp) / float64(col)
		}
		if row > 0 {
			s.Recall = float64(tp) / float64(row)
		}
		if s.Precision+s.Recall > 0 {
			s.F1 = 2 * s.Precision * s.Recall / (s.Precision + s.Recall)
		}
		r.PerClass = append(r.PerClass, s)
		r.MacroF1 += s.F1 / float64(k)
	}
	if score != nil && k == 2 {
		var pos, neg []float64
		for i, t := range truth {
			if t == 1 {
				pos = append(pos, score[i])
			} else {
				neg = append(neg, score[i])
			}
		}
		if len(pos) > 0 && len(neg) > 0 {
			u := 0.0
			for _, p := range pos {
				for _, q := range neg {
					switch {
					case p > q:
						u++
					case p == q:
						u += 0.5
					}
				}
			}
			auc := u / float64(len(pos)*len(neg))
			r.ROCAUC = &auc
		}
	}
	return r
}
