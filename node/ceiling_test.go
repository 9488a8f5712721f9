package node

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dpadmm/dpadmm/node/store"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/rs/zerolog"
)

// TestEpsilonCeiling: once the membership is known and before any update, a node whose
// local epsilon over its cap would exceed MaxEpsilon refuses to run with the figure in
// the error, and writes no ledger entry; without a cap a ceiling refuses too; a figure
// below the ceiling runs.
func TestEpsilonCeiling(t *testing.T) {
	var logs syncBuffer
	run := func(t *testing.T, maxUpd int, ceiling float64) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		sh := shards(t, 1)
		c := baseConfig("ceiling", sh[0], 8)
		c.DataDir, c.MaxUpdates, c.MaxEpsilon = t.TempDir(), maxUpd, ceiling
		logs = syncBuffer{}
		c.Logger = zerolog.New(&logs)
		id, _ := store.DataDirPeerID(c.DataDir)
		c.Members, c.Weight = []peer.ID{id}, 1
		nd, err := New(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		defer nd.Close()
		_, err = nd.Run(ctx)
		if err != nil {
			if b, _ := os.ReadFile(filepath.Join(c.DataDir, store.LedgerFile)); len(b) > 0 {
				t.Errorf("a refused node wrote its ledger: %q", b)
			}
		}
		return err
	}
	// Clip 1, sigma 0.5 (baseConfig), node-level (no row bound): one update alone is
	// epsilon above 10 at delta 1e-5.
	if err := run(t, 8, 10); err == nil || !strings.Contains(err.Error(), "above the ceiling 10") {
		t.Errorf("8 updates under a ceiling of 10: %v", err)
	}
	if err := run(t, 0, 10); err == nil || !strings.Contains(err.Error(), "no cap") {
		t.Errorf("no cap under a ceiling: %v", err)
	}
	if err := run(t, 8, 0); err != nil {
		t.Errorf("no ceiling: %v", err)
	}
	// The figure is logged with its unit before any update.
	if s := logs.String(); !strings.Contains(s, "local privacy figure at the cap") || !strings.Contains(s, "per record, by the node-level clip") {
		t.Errorf("no figure line in the log: %s", s)
	}
	// The verdict's reasons are logged as warnings, as 'dpadmm testnet' prints them (one
	// member: no pairwise figure).
	if s := logs.String(); !strings.Contains(s, "will not hold for this run: n = 1") {
		t.Errorf("no warning from the verdict in the log: %s", s)
	}
}
