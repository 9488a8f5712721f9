package gossip

import (
	"math"
	"testing"
)

// TestAverage: the mean of the members' models and each member's distance to it, against
// values worked by hand.
func TestAverage(t *testing.T) {
	avg, dev := Average([][]float64{{1, 2}, {3, 6}, {2, 1}}, 2)
	if avg[0] != 2 || avg[1] != 3 {
		t.Fatalf("average %v, want [2 3]", avg)
	}
	want := []float64{math.Sqrt(2), math.Sqrt(1 + 9), math.Sqrt(0 + 4)}
	for i := range want {
		if math.Abs(dev[i]-want[i]) > 1e-15 {
			t.Errorf("member %d: deviation %v, want %v", i, dev[i], want[i])
		}
	}
}
