package experiment

import (
	"context"
	"reflect"
	"testing"

	"github.com/dpadmm/dpadmm/testnet/sim"
)

// TestExperimentContextInterrupted: an experiment canceled after its first two runs (the
// two seeds of non-private ADMM, one worker) returns those runs' series, equal to the
// same series of the complete experiment, and no other.
func TestExperimentContextInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := shortExperiment(t)
	o.Workers = 1
	o.Progress = func(done, total int) {
		if done == 2 {
			cancel()
		}
	}
	got, err := RunExperimentContext(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Interrupted || got.Runs != 2 || got.Total != 2+2*2*4 || len(got.Series) != 1 || got.Series[0].Algo != ExpNoPriv {
		t.Fatalf("interrupted %v, %d of %d runs, %d series", got.Interrupted, got.Runs, got.Total, len(got.Series))
	}
	full, err := RunExperiment(shortExperiment(t))
	if err != nil {
		t.Fatal(err)
	}
	if full.Interrupted || full.Runs != full.Total {
		t.Fatalf("complete experiment: interrupted %v, %d of %d runs", full.Interrupted, full.Runs, full.Total)
	}
	g, f := got.Series[0], full.Series[0]
	for _, b := range [][2]Band{{g.Loss, f.Loss}, {g.TestError, f.TestError}, {g.Privacy, f.Privacy}} {
		for k, pair := range [][2][]float64{{b[0].Mean, b[1].Mean}, {b[0].Min, b[1].Min}, {b[0].Max, b[1].Max}} {
			if !sim.SameBits(pair[0], pair[1]) || len(pair[0]) != o.Iters+1 {
				t.Errorf("series %s: band %d: %v, complete experiment %v", g.Algo, k, pair[0], pair[1])
			}
		}
	}
	g.Loss, g.TestError, g.Privacy, f.Loss, f.TestError, f.Privacy = Band{}, Band{}, Band{}, Band{}, Band{}, Band{}
	if !reflect.DeepEqual(g, f) {
		t.Errorf("series %+v, complete experiment %+v", g, f)
	}
}
