package testnet

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/dpadmm/dpadmm/node"
	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/privacy"
)

// TestLedgerInexact: only a noisy pure release charged without guarantee marks an inexact
// solve; a forward entry, a finite charge and a release without noise (no guarantee
// anyway) do not.
func TestLedgerInexact(t *testing.T) {
	fwd := privacy.Entry{Mechanism: privacy.MechForward}
	ok := privacy.Entry{Mechanism: privacy.MechPure, Sigma: 0.5, Epsilon: 0.3}
	bad := privacy.Entry{Mechanism: privacy.MechPure, Sigma: 0.5, Epsilon: math.MaxFloat64}
	noNoise := privacy.Entry{Mechanism: privacy.MechPure, Epsilon: math.MaxFloat64}
	for _, c := range []struct {
		es   []privacy.Entry
		want bool
	}{
		{nil, false}, {[]privacy.Entry{fwd, ok, fwd, ok}, false}, {[]privacy.Entry{fwd, noNoise, fwd}, false},
		{[]privacy.Entry{fwd, ok, fwd, bad, fwd}, true},
	} {
		if got := ledgerInexact(c.es); got != c.want {
			t.Errorf("%+v: %v, want %v", c.es, got, c.want)
		}
	}
}

// TestReadStaleFile: the records of store.StaleFile in order, a torn last line ignored, nil
// without the file; a corrupt complete line is an error.
func TestReadStaleFile(t *testing.T) {
	dir := t.TempDir()
	if got, err := readStaleFile(dir); got != nil || err != nil {
		t.Fatalf("no file: %v, %v", got, err)
	}
	path := filepath.Join(dir, store.StaleFile)
	os.WriteFile(path, []byte(`{"iter":5,"neighbor":2,"used_iter":4}`+"\n"+`{"iter":6,"neighbor":2,"used_iter":4}`+"\n"+`{"iter":7,"nei`), 0o600)
	got, err := readStaleFile(dir)
	want := []node.StaleUse{{Iter: 5, Neighbor: 2, UsedIter: 4}, {Iter: 6, Neighbor: 2, UsedIter: 4}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, %v; want %+v", got, err, want)
	}
	os.WriteFile(path, []byte("{\n"), 0o600)
	if _, err := readStaleFile(dir); err == nil {
		t.Fatal("corrupt line accepted")
	}
}

// TestGossipNetRefusesLongRows: a run over hosts whose data has a row of norm > 1 is
// refused before any node starts, in both modes, naming the norm; rows of norm exactly 1
// are accepted.
func TestGossipNetRefusesLongRows(t *testing.T) {
	train, _ := gossipData(t, 60)
	o := gossipOpts(train, nil, "radmm", "ring", 2, 2)
	o.Nodes = 3
	long := *train
	long.X = append([]float64(nil), train.X...)
	for j := 0; j < long.Cols; j++ {
		long.X[7*long.Cols+j] = 1 // row 7: norm sqrt(cols) > 1
	}
	o.Train = &long
	ctx := context.Background()
	if _, err := NewGossipMem(ctx, GossipMemConfig{Options: o}); err == nil || !strings.Contains(err.Error(), "norm") {
		t.Errorf("mem: %v", err)
	}
	if _, err := RunGossipProcs(ctx, GossipProcsConfig{Options: o, Binary: filepath.Join(t.TempDir(), "none")}); err == nil ||
		!strings.Contains(err.Error(), "norm") {
		t.Errorf("procs: %v", err)
	}
	unit := *train
	unit.X = append([]float64(nil), train.X...)
	for j := 0; j < unit.Cols; j++ {
		unit.X[7*unit.Cols+j] = 0
	}
	unit.X[7*unit.Cols] = 1
	o.Train = &unit
	gm, err := NewGossipMem(ctx, GossipMemConfig{Options: o})
	if err != nil {
		t.Fatalf("rows of norm <= 1 refused: %v", err)
	}
	gm.Close()
}
