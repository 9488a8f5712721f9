package testnet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/node/wire"
	"github.com/dpadmm/dpadmm/privacy"
)

// readLedgerFile reads the ledger of a node data directory. A missing file is an empty
// ledger. A last line without its newline (a process killed in the middle of the write,
// before it could send the release the entry covers) is left out. The checksums and the
// chain links are checked as a node checks them on start (privacy.ReadLedgerChain).
func readLedgerFile(dir string) ([]privacy.Entry, error) {
	b, err := os.ReadFile(filepath.Join(dir, store.LedgerFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if k := bytes.LastIndexByte(b, '\n'); k+1 < len(b) {
		b = b[:k+1]
	}
	es, _, _, err := privacy.ReadLedgerChain(b)
	return es, err
}

// partialWalk is the state a walk over real hosts had reached when it was stopped, read
// from the nodes' data directories (dirs[i] of the node named names[i]).
type partialWalk struct {
	hops    uint64    // highest hop in the ledgers (the walk has one token: hops 1..hops are all there)
	z       []float64 // z of the latest release found (nil: none)
	zHop    uint64    // its hop
	path    *PathFromLedgers
	entries []int // ledger entries per node
}

// readPartialWalk rebuilds the path of an interrupted walk from the ledgers (LedgerPath
// up to the highest hop logged, the last release held by the last peer it was sent to)
// and finds the latest release in the nodes' inboxes and custody checkpoints: the model
// the walk had reached.
func readPartialWalk(dirs, names []string) (*partialWalk, error) {
	n := len(dirs)
	pw := &partialWalk{entries: make([]int, n)}
	ledgers := make([][]privacy.Entry, n)
	for i, d := range dirs {
		// The node's store, opened as the node opens it (its ledger's lines restored
		// from the checkpoint journal if a crash kept them from the file), gives the
		// checkpoint and the inbox.
		var inbox []byte
		var ck *store.Checkpoint
		ckErr := errors.New("no store")
		if st, err := store.Open(d); err == nil {
			inbox, _ = st.LoadInbox()
			ck, ckErr = st.LoadCheckpoint()
			st.Close()
		}
		es, err := readLedgerFile(d)
		if err != nil {
			return nil, fmt.Errorf("node %d: ledger: %w", i, err)
		}
		ledgers[i], pw.entries[i] = es, len(es)
		for _, e := range es {
			pw.hops = max(pw.hops, e.Hop)
		}
		consider := func(raw []byte) {
			if len(raw) == 0 {
				return
			}
			tok, err := wire.DecodeToken(raw)
			if err != nil {
				return
			}
			if pw.z == nil || tok.Hop > pw.zHop {
				pw.z, pw.zHop = tok.Z, tok.Hop
			}
		}
		consider(inbox)
		if ckErr == nil && ck != nil {
			consider(ck.Out)
			for _, b := range ck.Backups {
				consider(b.Token)
			}
		}
	}
	// A release is logged before its custody record is written and before it is sent
	// (the Ready order). A ledger hop beyond the latest release any node holds was logged
	// by a node stopped between the two writes: that release was never sent, so nobody saw
	// it, and the walk's progress (its model, its hops, its path) ends at the latest
	// release that exists. Its ledger entries are still counted (entries).
	if pw.z != nil && pw.zHop < pw.hops {
		pw.hops = pw.zHop
		for i, es := range ledgers {
			kept := es[:0:0]
			for _, e := range es {
				if e.Hop <= pw.hops {
					kept = append(kept, e)
				}
			}
			ledgers[i] = kept
		}
	}
	// The last release is held by the last peer its sender named for it (the ones named
	// before it, after failed hand-offs, are views).
	final := ""
	for _, es := range ledgers {
		for _, e := range es {
			if e.Hop == pw.hops && pw.hops > 0 && e.Recipient != "" {
				final = e.Recipient
			}
		}
	}
	lp, err := LedgerPath(ledgers, names, pw.hops, final)
	if err != nil {
		return nil, err
	}
	pw.path = lp
	return pw, nil
}

// stopGrace is how long a stopped testnet waits for its node processes to exit after
// SIGTERM before it kills them.
const stopGrace = 5 * time.Second

// pollEvery calls f every d until ctx is done; the returned function stops it and
// waits for a running f.
func pollEvery(ctx context.Context, d time.Duration, f func()) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				f()
			}
		}
	}()
	return func() { cancel(); <-done }
}

// ledgerIters is the number of iterations every neighbour-exchange node has completed,
// from the lines of the ledgers in dirs (one release per iteration 0..T, so entries - 1).
func ledgerIters(dirs []string) int {
	least := -1
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, store.LedgerFile))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			continue
		}
		k := max(bytes.Count(b, []byte{'\n'})-1, 0)
		if least < 0 || k < least {
			least = k
		}
	}
	return max(least, 0)
}
