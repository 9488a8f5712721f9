package testnet

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/dpadmm/dpadmm/node"
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

// TestReadStaleFile: the records of node.StaleFile in order, a torn last line ignored, nil
// without the file; a corrupt complete line is an error.
func TestReadStaleFile(t *testing.T) {
	dir := t.TempDir()
	if got, err := readStaleFile(dir); got != nil || err != nil {
		t.Fatalf("no file: %v, %v", got, err)
	}
	path := filepath.Join(dir, node.StaleFile)
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
