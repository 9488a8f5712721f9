package consensus

import (
	"fmt"
	"math"
	"sort"
)

// Split partitions d into nodes shards of near-equal size (sizes differ by at most one).
// Modes: "iid" shuffles the rows with the seed first, "contiguous" keeps file order, "label"
// sorts rows by label (stable) so that shards are label-skewed. nodes must be in 1..Rows.
func Split(d *Dataset, nodes int, mode string, seed uint64) ([]*Dataset, error) {
	if nodes < 1 || nodes > d.Rows {
		return nil, fmt.Errorf("consensus: %s: cannot split %d rows over %d nodes (need 1 <= nodes <= rows)", d.Name, d.Rows, nodes)
	}
	idx := make([]int, d.Rows)
	for i := range idx {
		idx[i] = i
	}
	switch mode {
	case "iid", "":
		newRand(seed).Shuffle(len(idx), func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
	case "contiguous":
	case "label":
		sort.SliceStable(idx, func(a, b int) bool { return d.Y[idx[a]] < d.Y[idx[b]] })
	default:
		return nil, fmt.Errorf("consensus: unknown split mode %q (want iid, contiguous or label)", mode)
	}
	out := make([]*Dataset, nodes)
	for k := 0; k < nodes; k++ {
		lo, hi := k*d.Rows/nodes, (k+1)*d.Rows/nodes
		out[k] = d.Subset(idx[lo:hi])
		out[k].Name = fmt.Sprintf("%s[%d/%d]", d.Name, k, nodes)
	}
	return out, nil
}

// TrainTest shuffles d with the seed and returns a train set and a test set holding
// round(testFrac*Rows) rows (testFrac is clamped to [0,1]). When 0 < testFrac < 1 and d has
// at least two rows, both sets are non-empty.
func TrainTest(d *Dataset, testFrac float64, seed uint64) (train, test *Dataset) {
	if math.IsNaN(testFrac) {
		testFrac = 0
	}
	testFrac = math.Min(math.Max(testFrac, 0), 1)
	nt := int(math.Round(testFrac * float64(d.Rows)))
	if testFrac > 0 && testFrac < 1 && d.Rows >= 2 {
		nt = min(max(nt, 1), d.Rows-1)
	}
	idx := newRand(seed).Perm(d.Rows)
	test = d.Subset(idx[:nt])
	train = d.Subset(idx[nt:])
	return train, test
}
