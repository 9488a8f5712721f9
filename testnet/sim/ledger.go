package sim

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/dpadmm/dpadmm/privacy"
)

// LedgerSink receives the simulator's ledger entries: one per hop, appended for the
// node that handled the hop before the token is handed on.
type LedgerSink interface {
	// Append records entry e of node i. e is only valid during the call.
	Append(i int, e *privacy.Entry) error
	// Close makes every appended entry durable and releases resources.
	Close() error
}

// LedgerFileName returns the name of node i's ledger file inside a ledger directory.
func LedgerFileName(i int) string { return fmt.Sprintf("node-%d.ledger", i) }

// DefaultLedgerBuffer is the number of buffered ledger bytes (all nodes together) at
// which FileLedger writes its buffers out: large enough that a write batch amortises
// the open/close of each file, small enough to stay in cache.
const DefaultLedgerBuffer = 4 << 20

// FileLedger writes each node's ledger entries (one line per hop the node handled,
// forwards included) to <dir>/node-<i>.ledger. The lines are those of a node's own
// ledger: encoded by privacy.LedgerChain (CRC-checked JSON, sequence numbers from 1, each
// line after the first carrying the hash of the one before), so a ledger file reads and
// verifies the same whichever driver wrote it (ReadLedgerDir, privacy.ReadLedgerChain).
//
// Durability: the simulator is the only writer and runs in one goroutine, so entries are
// buffered in memory per node and written out in batches: when the buffered bytes reach
// the limit, every node with pending lines has its file opened with O_APPEND, written
// and closed again, so at most one file is open at any time whatever the number of
// nodes. Close writes out the rest and fsyncs every file written and the directory.
// A real node instead appends and fsyncs each entry before the token leaves it (the
// Ready contract: Ledger durable before Outbox is sent); a crash of the simulator loses
// at most the unsynced tail, never an entry of a hop that another process saw.
type FileLedger struct {
	dir     string
	limit   int
	chain   []privacy.LedgerChain // numbering and chain hash of each node's file
	buf     [][]byte              // pending lines per node
	dirty   []int                 // nodes with pending lines, in first-append order
	written []bool                // files written since the last sync
	created []bool                // files created (at their first write)
	pending int
	closed  bool
}

// NewFileLedger creates dir (if needed). Node i's file is created at its first write,
// so a node that handled no hop has no file. It refuses a directory that already holds
// a ledger file: ledgers are append-only records and two runs must not share one.
func NewFileLedger(dir string, nodes int) (*FileLedger, error) {
	if dir == "" {
		return nil, errors.New("testnet: ledger directory is empty")
	}
	if nodes < 1 {
		return nil, fmt.Errorf("testnet: ledger: nodes must be >= 1, got %d", nodes)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("testnet: ledger directory: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("testnet: ledger directory: %w", err)
	}
	for _, e := range ents {
		if name := e.Name(); strings.HasPrefix(name, "node-") && strings.HasSuffix(name, ".ledger") {
			return nil, fmt.Errorf("testnet: ledger directory %s already holds %s (use an empty directory per run)", dir, name)
		}
	}
	return &FileLedger{dir: dir, limit: DefaultLedgerBuffer, chain: make([]privacy.LedgerChain, nodes), buf: make([][]byte, nodes),
		written: make([]bool, nodes), created: make([]bool, nodes)}, nil
}

// SetBufferLimit sets the number of buffered bytes that triggers a write batch
// (values < 1 write every entry through at once).
func (l *FileLedger) SetBufferLimit(n int) { l.limit = n }

// Path returns the path of node i's ledger file.
func (l *FileLedger) Path(i int) string { return filepath.Join(l.dir, LedgerFileName(i)) }

// Append buffers node i's entry line; it reaches the file at the next batch or Close.
func (l *FileLedger) Append(i int, e *privacy.Entry) error {
	if l.closed {
		return errors.New("testnet: ledger is closed")
	}
	if i < 0 || i >= len(l.buf) {
		return fmt.Errorf("testnet: ledger: node %d outside [0,%d)", i, len(l.buf))
	}
	n := len(l.buf[i])
	b, err := l.chain[i].Append(l.buf[i], *e)
	if err != nil {
		return fmt.Errorf("testnet: ledger node %d: %w", i, err)
	}
	if n == 0 {
		l.dirty = append(l.dirty, i)
	}
	l.buf[i] = b
	l.pending += len(b) - n
	if l.pending >= l.limit {
		return l.flush()
	}
	return nil
}

// Flush writes every buffered line to its file (without fsync).
func (l *FileLedger) Flush() error {
	if l.closed {
		return errors.New("testnet: ledger is closed")
	}
	return l.flush()
}

func (l *FileLedger) flush() error {
	for k, i := range l.dirty {
		if err := appendFile(l.Path(i), l.buf[i], !l.created[i]); err != nil {
			l.dirty = l.dirty[k:]
			return err
		}
		l.created[i], l.written[i] = true, true
		l.buf[i] = l.buf[i][:0]
	}
	l.dirty = l.dirty[:0]
	l.pending = 0
	return nil
}

// appendFile appends b to path; create makes the file, which must not exist yet.
func appendFile(path string, b []byte, create bool) error {
	flag := os.O_WRONLY | os.O_APPEND
	if create {
		flag |= os.O_CREATE | os.O_EXCL
	}
	f, err := os.OpenFile(path, flag, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("testnet: ledger %s appeared during the run (another writer?)", path)
	}
	if err != nil {
		return fmt.Errorf("testnet: ledger: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("testnet: ledger: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("testnet: ledger: %w", err)
	}
	return nil
}

// Sync writes out the buffers and fsyncs every file written since the last Sync, and
// the directory. fsync acts on the file, so a descriptor opened for the purpose also
// flushes what earlier descriptors wrote.
func (l *FileLedger) Sync() error {
	if l.closed {
		return errors.New("testnet: ledger is closed")
	}
	return l.sync()
}

func (l *FileLedger) sync() error {
	if err := l.flush(); err != nil {
		return err
	}
	for i, w := range l.written {
		if !w {
			continue
		}
		if err := syncPath(l.Path(i)); err != nil {
			return err
		}
		l.written[i] = false
	}
	return syncPath(l.dir)
}

func syncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("testnet: ledger sync: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("testnet: ledger sync %s: %w", path, err)
	}
	return f.Close()
}

// Close writes out and fsyncs everything. Closing twice is a no-op.
func (l *FileLedger) Close() error {
	if l.closed {
		return nil
	}
	err := l.sync()
	l.closed = true
	return err
}

// MemLedger keeps every node's entries in memory, for tests and audits of short runs.
type MemLedger struct {
	Entries [][]privacy.Entry // Entries[i] is node i's ledger in append order
}

// NewMemLedger returns an empty in-memory ledger for n nodes.
func NewMemLedger(n int) *MemLedger { return &MemLedger{Entries: make([][]privacy.Entry, n)} }

// Append records a copy of e for node i.
func (l *MemLedger) Append(i int, e *privacy.Entry) error {
	if i < 0 || i >= len(l.Entries) {
		return fmt.Errorf("testnet: ledger: node %d outside [0,%d)", i, len(l.Entries))
	}
	if err := e.Validate(); err != nil {
		return fmt.Errorf("testnet: ledger node %d: %w", i, err)
	}
	l.Entries[i] = append(l.Entries[i], *e)
	return nil
}

// Close does nothing: memory needs no sync.
func (l *MemLedger) Close() error { return nil }

// ReadLedgerDir parses and verifies the ledger files of nodes 0..n-1 in dir
// (privacy.ReadLedgerChain: checksums and chain links). A missing file is an empty ledger
// (FileLedger creates a node's file at its first entry); a corrupt, truncated or
// re-chained one is an error naming it.
func ReadLedgerDir(dir string, n int) ([][]privacy.Entry, error) {
	out := make([][]privacy.Entry, n)
	for i := range out {
		p := filepath.Join(dir, LedgerFileName(i))
		f, err := os.Open(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("testnet: ledger: %w", err)
		}
		b, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("testnet: ledger: %w", err)
		}
		es, _, _, err := privacy.ReadLedgerChain(b)
		if err != nil {
			return nil, fmt.Errorf("testnet: %s: %w", p, err)
		}
		out[i] = es
	}
	return out, nil
}
