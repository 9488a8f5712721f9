package testnet

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/dpadmm/dpadmm/node"
	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/testnet/sim"
)

// The runs over hosts (--mem, --procs) run full nodes, node.New and node.Node.RunRADMM
// (the runtime of 'dpadmm node --algo radmm|...'), with a static membership in node-index
// order, the simulator's shards, f_i(0) drawn from GossipInitRand and seeded noise
// (NodeNoise). What a node leaves in its data directory (model.json at the end of the
// run, the ledger, the journal and the stale records) is read back here to build the
// report.

// gossipNetParams returns the node parameters of a run over hosts of the options o
// (filled by NewGossipSim) with the given barrier settings (0 = the node's defaults).
func gossipNetParams(o *sim.GossipOptions, barrier, maxWait time.Duration, pol node.MissingPolicy) (node.RADMMParams, error) {
	p, err := GossipParamsFor(o)
	if err != nil {
		return p, err
	}
	p.Barrier, p.MaxWait, p.OnMissing = barrier, maxWait, pol
	return p, nil
}

// checkNodeRows refuses a run over hosts whose shards hold a row of norm > 1: a node takes
// part only with normalised rows (Theorem V.1; node.Config.Validate refuses the others).
func checkNodeRows(gs *sim.GossipSim) error {
	for i, a := range gs.Acc {
		if a.MaxRowNorm > 1+1e-12 {
			return fmt.Errorf("testnet: node %d's shard has a row of norm %.6g > 1, and a node takes part only with rows of norm <= 1 "+
				"(Theorem V.1): scale with --scale unitball or standardize+unitball (the default)", i, a.MaxRowNorm)
		}
	}
	return nil
}

// gossipLeft is what one node of a run over hosts left behind.
type gossipLeft struct {
	// Model is f_i(T) from model.json for a node that completed the run; otherwise the
	// last release in its journal (the state it had made durable), or f_i(0) when it
	// released nothing.
	Model []float64
	// Inexact: a local solve missed its tolerance (model.json; otherwise read from the
	// ledger, see ledgerInexact).
	Inexact  bool
	Stale    []node.StaleUse // nil when none
	Rejected int             // inbound frames rejected (completed nodes only)
	Ignored  int             // inbound frames ignored (completed nodes only)
	Ledger   []privacy.Entry // the entries of the run on disk (never nil)
}

// readGossipLeft reads what the node with data directory dir left of run: from m, its
// model.json when it completed the run (nil otherwise), and from the directory its ledger
// and, without m, its journal and stale records. init is its f_i(0).
func readGossipLeft(dir, run string, init []float64, m *node.RADMMModel) (gossipLeft, error) {
	var l gossipLeft
	es, err := readLedgerFile(dir)
	if err != nil {
		return l, fmt.Errorf("ledger: %w", err)
	}
	l.Ledger = []privacy.Entry{}
	for _, e := range es {
		if e.Run == run {
			l.Ledger = append(l.Ledger, e)
		}
	}
	if m != nil {
		l.Model, l.Inexact, l.Rejected, l.Ignored = m.Model, m.Inexact > 0, m.Rejected, m.Ignored
		if len(m.Stale) > 0 {
			l.Stale = m.Stale
		}
		return l, nil
	}
	l.Model, l.Inexact = init, ledgerInexact(l.Ledger)
	j, err := store.ReadRADMMJournal(dir, run)
	if err != nil {
		return l, err
	}
	if j != nil {
		_, l.Model = j.Last()
	}
	if l.Stale, err = readStaleFile(dir); err != nil {
		return l, err
	}
	return l, nil
}

// ledgerInexact reports whether a ledger records a noisy release whose local solve missed
// its tolerance: the machine charges such a release epsilon math.MaxFloat64 (no guarantee;
// gossip.Ready.Ledger). A run without noise carries no guarantee whatever the solves, so
// nothing is lost by not telling its inexact solves apart.
func ledgerInexact(es []privacy.Entry) bool {
	for _, e := range es {
		if e.Mechanism == privacy.MechPure && e.Sigma > 0 && !(e.Epsilon < math.MaxFloat64) {
			return true
		}
	}
	return false
}

// readStaleFile returns the stale uses recorded in dir (store.StaleFile; nil when none).
// A torn last line (a crash while it was written) is ignored.
func readStaleFile(dir string) ([]node.StaleUse, error) {
	b, err := os.ReadFile(filepath.Join(dir, store.StaleFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	b = b[:bytes.LastIndexByte(b, '\n')+1]
	var out []node.StaleUse
	sc := bufio.NewScanner(bytes.NewReader(b))
	for line := 1; sc.Scan(); line++ {
		var u node.StaleUse
		if err := json.Unmarshal(sc.Bytes(), &u); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", store.StaleFile, line, err)
		}
		out = append(out, u)
	}
	return out, sc.Err()
}
