package testnet

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/dpadmm/dpadmm/testnet/sim"
)

// cancelOn is a curve writer that cancels a context when a line starting with prefix is
// written.
type cancelOn struct {
	prefix string
	cancel context.CancelFunc
}

func (c cancelOn) Write(p []byte) (int, error) {
	if strings.HasPrefix(string(p), c.prefix) {
		c.cancel()
	}
	return len(p), nil
}

// TestRunContextInterrupted: a simulated walk whose context is canceled at hop 8192 (by
// the curve writer, at the end of a block of hops) stops there and reports exactly the
// run of 8192 hops: same model, path fingerprint and privacy section, marked
// interrupted with the planned length.
func TestRunContextInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := netOptions(t, 10, 100000, 1)
	o.Curve, o.CurveEvery = cancelOn{"8192,", cancel}, 8192
	got, err := sim.RunContext(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Interrupted || got.Ended != "interrupted" || got.Hops != 8192 || got.HopsPlanned != 100000 {
		t.Fatalf("interrupted %v, ended %q, hops %d of %d", got.Interrupted, got.Ended, got.Hops, got.HopsPlanned)
	}
	want, err := sim.Run(netOptions(t, 10, 8192, 1))
	if err != nil {
		t.Fatal(err)
	}
	if want.Interrupted || want.Ended != "hops" || want.HopsPlanned != 0 {
		t.Fatalf("complete run: interrupted %v, ended %q, hops_planned %d", want.Interrupted, want.Ended, want.HopsPlanned)
	}
	sameReport(t, "interrupted at 8192", got, want)
}

// TestRunGossipContextInterrupted: a neighbour-exchange simulation canceled once every
// node completed iteration 10 reports 10 iterations done of the 40 planned, with finite
// models and the privacy figures of the whole planned run (an upper bound).
func TestRunGossipContextInterrupted(t *testing.T) {
	train, test := gossipData(t, 200)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := gossipOpts(train, test, "radmm", "ring", 40, 2)
	o.Curve = cancelOn{"10,", cancel}
	got, err := sim.RunGossipContext(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Interrupted || got.Ended != "interrupted" || got.Hops != 10 || got.HopsPlanned != 40 || got.Iters != 40 {
		t.Fatalf("interrupted %v, ended %q, iterations %d of %d (iters %d)", got.Interrupted, got.Ended, got.Hops, got.HopsPlanned, got.Iters)
	}
	for k, v := range got.Model {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			t.Fatalf("model[%d] = %v", k, v)
		}
	}
	full, err := sim.RunGossip(gossipOpts(train, test, "radmm", "ring", 40, 2))
	if err != nil {
		t.Fatal(err)
	}
	if full.Interrupted || got.Gossip.Epsilon != full.Gossip.Epsilon || got.Gossip.Epsilon <= 0 {
		t.Errorf("epsilon %v, the full run's %v (interrupted %v)", got.Gossip.Epsilon, full.Gossip.Epsilon, full.Interrupted)
	}
}
