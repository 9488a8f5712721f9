package store

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/walk"
)

// File names inside a data directory.
const (
	IdentityFile   = "identity.key"    // libp2p private key (protobuf), mode 0600
	LedgerFile     = "ledger"          // append-only privacy ledger, one checked JSON line per entry
	CheckpointFile = "checkpoint.json" // private state, written atomically (the first format; still read)
	// CheckpointLog holds the private state as a journal of checked records, appended
	// once per save; the last valid record is the checkpoint (see SaveCheckpoint).
	CheckpointLog = "checkpoint.log"
	// InboxLog holds the last token received and acked, as a journal like CheckpointLog
	// whose records are encoded tokens.
	InboxLog = "inbox.log"
	// InboxFile held the last token received in the first format (written atomically);
	// it is read where there is no InboxLog, and removed by the first save of InboxLog.
	InboxFile = "inbox.token"
	ModelFile = "model.json" // final released model and privacy report
	// StartFile is the start message of the run the directory took part in (node.StartFile).
	StartFile = "start.json"
)

// RunStateFiles are the files whose presence says that a data directory took part in a
// run: any of them without a ledger is refused (Open), since the releases the ledger
// recorded would no longer be counted.
var RunStateFiles = []string{CheckpointFile, CheckpointLog, InboxLog, InboxFile, StartFile, ModelFile, RADMMJournalFile, StaleFile}

// ErrLedger is returned when a data directory has a checkpoint but its ledger is missing
// or corrupt: the node refuses to take part rather than under-count privacy spending.
var ErrLedger = errors.New("store: privacy ledger missing or corrupt; refusing to take part (restore the ledger or start with a fresh --datadir)")

// Checkpoint is the durable private state of a node between hops.
type Checkpoint struct {
	Version int       `json:"version"`
	Run     string    `json:"run"`
	Node    int       `json:"node"`
	Updates int       `json:"updates"` // noisy updates made (K_i)
	U       []float64 `json:"u"`       // u_i
	Epoch   uint64    `json:"epoch"`   // (Epoch, Hop) of the last token processed
	Hop     uint64    `json:"hop"`
	// Out is the encoded token this node holds in custody until the recipient acks; on
	// restart it is resent byte for byte (never re-noised).
	Out   []byte `json:"out,omitempty"`
	OutTo string `json:"out_to,omitempty"` // recipient peer ID
	// HopSource and NoiseSource are the states of seeded generators (Config.Sources)
	// after the last step, so that a restarted testnet node continues their sequences.
	HopSource   []byte `json:"hop_source,omitempty"`
	NoiseSource []byte `json:"noise_source,omitempty"`
	// LedgerSeq and LedgerHash are the sequence number and chain hash of the last ledger
	// line when the record was written (Store.SaveCheckpoint sets them): a ledger that
	// lost lines, or whose lines were rewritten, no longer holds them, and LoadCheckpoint
	// refuses it. 0 in records of earlier builds.
	LedgerSeq  uint64 `json:"ledger_seq,omitempty"`
	LedgerHash uint64 `json:"ledger_hash,omitempty"`
	// Fence is the highest token this node accepted or released, ordered by (epoch, hop,
	// digest); MaxEpoch the highest epoch it accepted or created (regeneration). A token
	// not above both is refused with AckStale.
	Fence    *Mark  `json:"fence,omitempty"`
	MaxEpoch uint64 `json:"max_epoch,omitempty"`
	// Recent are the tokens accepted lately: a retransmission of one of them is acked as
	// a duplicate without being processed again.
	Recent []Mark `json:"recent,omitempty"`
	// Backups are this node's own last releases, kept until the token is Depth acked
	// hand-offs further on (release chain), and regenerated with a new epoch when their
	// recipient is declared down before that. Written before the release is sent.
	Backups []Backup `json:"backups,omitempty"`
	// The hostile-member rules' memory (walk.CustodySnapshot): the evidences this node
	// took tokens on (oldest first), the highest hop seen in any epoch, each member's new
	// lineages and refused epoch jumps taken here, and the members reported down so far.
	// A restarted node keeps refusing a second token on a used evidence and a rewind.
	// Absent in records of earlier builds.
	Used    []walk.EvidenceRecord `json:"used,omitempty"`
	MaxHop  uint64                `json:"max_hop,omitempty"`
	Raises  []int                 `json:"raises,omitempty"`
	Strikes []int                 `json:"strikes,omitempty"`
	Downs   int                   `json:"downs,omitempty"`
	// Held is the token (encoded with its evidence, as in the inbox) that the step of
	// this record handed to this node itself, or the token of hop K so reached: it is
	// written with the step (one record) and held again on restart when it is above
	// (Epoch, Hop). nil: none; absent in records of earlier builds.
	Held []byte `json:"held,omitempty"`
}

// Mark identifies a token for fencing and merging: (Epoch, Hop, Digest) in that order,
// Digest being walk.TokenDigest.
type Mark struct {
	Epoch  uint64 `json:"epoch"`
	Hop    uint64 `json:"hop"`
	Digest uint64 `json:"digest"`
}

// Cmp compares a and b in the order (Epoch, Hop, Digest): -1, 0 or 1.
func (a Mark) Cmp(b Mark) int {
	switch {
	case a.Epoch != b.Epoch:
		return cmp.Compare(a.Epoch, b.Epoch)
	case a.Hop != b.Hop:
		return cmp.Compare(a.Hop, b.Hop)
	}
	return cmp.Compare(a.Digest, b.Digest)
}

// Backup is one of a node's own releases kept in custody (see Checkpoint.Backups).
type Backup struct {
	Token     []byte `json:"token"`          // encoded release as sent (re-encoded with the new epoch on regeneration)
	To        string `json:"to,omitempty"`   // current recipient ("" while no live peer was available)
	Pred      string `json:"pred,omitempty"` // peer the token came from ("" for the initial token or after a restart)
	PredEpoch uint64 `json:"pred_epoch,omitempty"`
	PredHop   uint64 `json:"pred_hop,omitempty"`
	Acked     bool   `json:"acked,omitempty"`
	Dist      int    `json:"dist,omitempty"` // acked hand-offs known beyond this release
}

// Store is a node's data directory.
type Store struct {
	Dir string
	// NoSync skips fsync (for testnets on tmpfs); the write order is unchanged.
	NoSync bool
	mu     sync.Mutex // guards ledger, chain, hashes, noisy
	ledger *os.File
	// chain numbers and chains the ledger's lines (privacy.LedgerChain); hashes is the chain
	// hash of every line by sequence number; noisy the number of noisy-update entries.
	chain  privacy.LedgerChain
	hashes map[uint64]uint64
	noisy  int
	// size is the ledger file's length in bytes (the offset of the next line).
	size  int64
	syncs atomic.Int64 // fsyncs made (Syncs)
	// unsynced: the ledger file holds lines written since its last fsync (durable in the
	// checkpoint journal's records: group commit). failed: a ledger write failed, and the
	// file may hold lines the chain does not: every later write is refused.
	unsynced bool
	failed   error
	ck       journal // CheckpointLog
	inbox    journal // InboxLog
}

// journal is a record file opened for appending (see CheckpointLog).
type journal struct {
	mu   sync.Mutex // guards the fields below
	f    *os.File   // nil until the first append of this process
	size int64
	buf  []byte
	tab  ckTable // CheckpointLog: what the next record may refer to
	// spare is the storage of the table being built (the one before tab).
	spare ckTable
}

// Open opens (creating if needed) a data directory and checks the ledger: if a
// checkpoint exists, the ledger must exist and parse, else ErrLedger.
func Open(dir string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("store: a data directory is required")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("store: data directory: %w", err)
	}
	s := &Store{Dir: dir}
	lp := filepath.Join(dir, LedgerFile)
	var state []string // files that say this directory took part in a run
	for _, f := range RunStateFiles {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			state = append(state, f)
		}
	}
	// The journal's ledger sections are read before the ledger: a line is written to the
	// ledger before the record that carries it, so a ledger read after the journal holds
	// every line the journal had (the page cache), and an Open beside a running node
	// never finds lines to restore.
	secs := s.ledgerSections()
	b, err := os.ReadFile(lp)
	switch {
	case errors.Is(err, os.ErrNotExist) && len(state) > 0:
		return nil, fmt.Errorf("%w: %s is missing but the run state %s exists: this data directory took part in a run and "+
			"its ledger was deleted or not restored, so the node would under-count the privacy it spent. To recover, restore "+
			"the ledger from the same backup as the other files, or start with a fresh --datadir (a new identity) and count "+
			"this node's earlier releases by hand", ErrLedger, lp, strings.Join(state, ", "))
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("%w: %v", ErrLedger, err)
	}
	b, repaired, err := repairLedger(b, secs)
	if err != nil {
		return nil, err
	}
	es, hashes, chain, err := privacy.ReadLedgerChain(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrLedger, lp, err)
	}
	if repaired {
		if err := s.WriteAtomic(LedgerFile, b); err != nil {
			return nil, fmt.Errorf("%w: restoring its lines from the checkpoint journal: %v", ErrLedger, err)
		}
	}
	s.size = int64(len(b))
	// Lines carried by the journal may not have reached the ledger's disk (the previous
	// process stopped before they did): the first new journal fsyncs the ledger first.
	s.unsynced = len(secs) > 0
	s.chain = chain
	s.hashes = make(map[uint64]uint64, len(es))
	for k, e := range es {
		s.hashes[e.Seq] = hashes[k]
		if e.Noisy() {
			s.noisy++
		}
	}
	f, err := os.OpenFile(lp, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store: ledger: %w", err)
	}
	s.ledger = f
	return s, nil
}

// Close closes the ledger file and the checkpoint journal.
func (s *Store) Close() error {
	for _, j := range []*journal{&s.ck, &s.inbox} {
		j.mu.Lock()
		if j.f != nil {
			j.f.Close()
			j.f = nil
		}
		j.mu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ledger == nil {
		return nil
	}
	err := s.ledger.Close()
	s.ledger = nil
	return err
}

// Entries returns the number of ledger entries.
func (s *Store) Entries() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.chain.Lines()
}

// Ledger reads and returns all ledger entries.
func (s *Store) Ledger() ([]privacy.Entry, error) {
	b, err := os.ReadFile(filepath.Join(s.Dir, LedgerFile))
	if err != nil {
		return nil, err
	}
	return privacy.ParseLedger(bytes.NewReader(b))
}

// AppendLedger appends entries (renumbering Seq so it stays monotone across restarts)
// and fsyncs before returning.
func (s *Store) AppendLedger(es []privacy.Entry) error {
	if len(es) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	lines, err := s.writeLedger(es)
	if err != nil {
		return err
	}
	if err := s.sync(s.ledger); err != nil {
		s.failed = fmt.Errorf("store: ledger fsync: %w", err)
		return s.failed
	}
	s.unsynced = false
	s.commitLedger(lines)
	return nil
}

// ledgerLines are lines written to the ledger file, not yet in the store's chain state.
type ledgerLines struct {
	off   int64  // the file offset of the first
	buf   []byte // the lines
	chain privacy.LedgerChain
	noisy int
	marks []ledgerMark
}

type ledgerMark struct{ seq, hash uint64 }

// writeLedger encodes es as the next lines of the ledger and writes them to the file
// (no fsync). The lines are encoded on a copy of the chain, which replaces it at
// commitLedger, once they are durable: an invalid entry leaves the ledger as it was; a
// failed write (or a failed fsync or record after it) may leave lines in the file that
// the chain does not hold, so the store then refuses every later write (failed), and
// the next Open reads the file as it is. s.mu is held.
func (s *Store) writeLedger(es []privacy.Entry) (ledgerLines, error) {
	switch {
	case s.ledger == nil:
		return ledgerLines{}, errors.New("store: ledger is closed")
	case s.failed != nil:
		return ledgerLines{}, fmt.Errorf("store: the ledger is refused after an earlier failure: %w", s.failed)
	}
	l := ledgerLines{off: s.size, chain: s.chain, marks: make([]ledgerMark, 0, len(es))}
	for _, e := range es {
		var err error
		if l.buf, err = l.chain.Append(l.buf, e); err != nil {
			return l, err
		}
		l.marks = append(l.marks, ledgerMark{l.chain.Seq(), l.chain.Last()})
		if e.Noisy() {
			l.noisy++
		}
	}
	n, err := s.ledger.Write(l.buf)
	s.size += int64(n)
	if err != nil {
		s.failed = fmt.Errorf("store: ledger write: %w", err)
		return l, s.failed
	}
	return l, nil
}

// commitLedger makes durable lines the store's ledger state. s.mu is held.
func (s *Store) commitLedger(l ledgerLines) {
	s.chain = l.chain
	s.noisy += l.noisy
	if s.hashes == nil {
		s.hashes = map[uint64]uint64{}
	}
	for _, m := range l.marks {
		s.hashes[m.seq] = m.hash
	}
}

// sync fsyncs f unless NoSync, and counts it.
func (s *Store) sync(f *os.File) error {
	if s.NoSync {
		return nil
	}
	s.syncs.Add(1)
	return f.Sync()
}

// Syncs returns the number of fsyncs this store has made (none under NoSync).
func (s *Store) Syncs() int64 { return s.syncs.Load() }

// NoisyEntries returns the number of noisy-update entries in the ledger: the privacy this
// node has spent, whatever its checkpoint says.
func (s *Store) NoisyEntries() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.noisy
}

// checkLedgerMark refuses a checkpoint record whose ledger mark the ledger no longer
// holds: a shortened ledger (fewer lines than when the record was written) or a rewritten
// one (the line of that sequence number hashes differently).
func (s *Store) checkLedgerMark(c *Checkpoint) error {
	if c == nil || c.LedgerSeq == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.hashes[c.LedgerSeq]
	switch {
	case !ok:
		return fmt.Errorf("%w: the checkpoint was written after ledger entry %d, but the ledger ends at %d: ledger lines were removed", ErrLedger, c.LedgerSeq, s.chain.Seq())
	case h != c.LedgerHash:
		return fmt.Errorf("%w: ledger entry %d is not the one the checkpoint was written after: the ledger was rewritten", ErrLedger, c.LedgerSeq)
	}
	return nil
}

// WriteAtomic writes name in the data directory via a temporary file, fsync and rename
// (and an fsync of the directory), so that a crash leaves the old or the new content.
func (s *Store) WriteAtomic(name string, data []byte) error {
	p := filepath.Join(s.Dir, name)
	tmp, err := os.CreateTemp(s.Dir, "."+name+".tmp*")
	if err != nil {
		return fmt.Errorf("store: write %s: %w", name, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("store: write %s: %w", name, err)
	}
	if err := s.sync(tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("store: fsync %s: %w", name, err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return fmt.Errorf("store: rename %s: %w", name, err)
	}
	if !s.NoSync {
		d, err := os.Open(s.Dir)
		if err != nil {
			return fmt.Errorf("store: fsync of the directory for %s: %w", name, err)
		}
		err = s.sync(d)
		d.Close()
		if err != nil {
			return fmt.Errorf("store: fsync of the directory for %s: %w", name, err)
		}
	}
	return nil
}

// A journal (CheckpointLog, InboxLog) is a sequence of records (RecordMagic, RecordHeader
// bytes of header), each
//
//	magic "DPCK" | version u8 | length u32 | CRC-32C u32 of the payload | payload
//
// (little-endian). A save appends one record (and fsyncs it unless NoSync): one write on
// an open file instead of a temporary file, a rename and two fsyncs. The first save of a
// process and every save that would take the journal past journalCompact rewrite it
// atomically (WriteAtomic) with that one record, so a journal always starts with a
// complete record. A crash during an append leaves a torn last record (cut short, failing
// its CRC, or zero bytes where the file grew before its data was written), which is
// skipped: the previous record is then the current one, as with the old or new content
// of an atomic rename. Nothing is sent on the strength of a record before its append
// returned, so a torn record was never acted on. A record that is not last and does not
// check is corruption.
const (
	RecordMagic    = "DPCK"
	journalVersion = 1
	RecordHeader   = 4 + 1 + 4 + 4
	journalCompact = 1 << 20
)

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// frameRecord writes the header of the record b, whose payload follows RecordHeader
// bytes reserved for it.
func frameRecord(b []byte) {
	copy(b, RecordMagic)
	b[4] = journalVersion
	binary.LittleEndian.PutUint32(b[5:], uint32(len(b)-RecordHeader))
	binary.LittleEndian.PutUint32(b[9:], crc32.Checksum(b[RecordHeader:], crc32c))
}

// appendRecord appends the record whose payload fill appends to its argument; fresh
// tells fill that the record starts a new file (the journal is rewritten: the first
// save of the process, or the journal reached journalCompact). j.mu is held.
func (s *Store) appendRecord(j *journal, name string, fill func(b []byte, fresh bool) ([]byte, error)) error {
	fresh := j.f == nil || j.size >= journalCompact
	b := append(j.buf[:0], make([]byte, RecordHeader)...)
	b, err := fill(b, fresh)
	if err != nil {
		return fmt.Errorf("store: %s: %w", name, err)
	}
	frameRecord(b)
	j.buf = b
	if fresh {
		if j.f != nil {
			j.f.Close()
			j.f = nil
		}
		if err := s.WriteAtomic(name, b); err != nil {
			return err
		}
		f, err := os.OpenFile(filepath.Join(s.Dir, name), os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return fmt.Errorf("store: %s: %w", name, err)
		}
		j.f, j.size = f, int64(len(b))
		return nil
	}
	if _, err := j.f.Write(b); err != nil {
		j.f.Close()
		j.f = nil // the next save rewrites the journal
		return fmt.Errorf("store: %s write: %w", name, err)
	}
	if err := s.sync(j.f); err != nil {
		j.f.Close()
		j.f = nil
		return fmt.Errorf("store: %s fsync: %w", name, err)
	}
	j.size += int64(len(b))
	return nil
}

// lastRecord returns the payload of the last complete record of the journal name
// (os.ErrNotExist when there is no such file).
func (s *Store) lastRecord(name string) ([]byte, error) {
	var last []byte
	err := s.records(name, func(r []byte) error { last = r; return nil })
	return last, err
}

// records calls fn with the payload of every complete record of the journal name, in
// order (os.ErrNotExist when there is no such file).
func (s *Store) records(name string, fn func([]byte) error) error {
	p := filepath.Join(s.Dir, name)
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	var last []byte
	for off := 0; off < len(b); {
		r := b[off:]
		if last != nil && allZero(r) {
			break // torn last record whose bytes never reached the disk (a file extended with zeros)
		}
		if len(r) < RecordHeader || string(r[:4]) != RecordMagic {
			if k := min(len(r), 4); last != nil && len(r) < RecordHeader && string(r[:k]) == RecordMagic[:k] {
				break // torn last record: the previous one is current
			}
			return fmt.Errorf("store: %s is corrupt: no record at byte %d", p, off)
		}
		if r[4] != journalVersion {
			return fmt.Errorf("store: %s: record version %d not supported", p, r[4])
		}
		n := int(binary.LittleEndian.Uint32(r[5:]))
		if n > len(r)-RecordHeader || crc32.Checksum(r[RecordHeader:RecordHeader+n], crc32c) != binary.LittleEndian.Uint32(r[9:]) {
			if last != nil && n >= len(r)-RecordHeader {
				break // torn last record
			}
			return fmt.Errorf("store: %s is corrupt: record at byte %d does not check", p, off)
		}
		last = r[RecordHeader : RecordHeader+n]
		if err := fn(last); err != nil {
			return fmt.Errorf("store: %s: record at byte %d: %w", p, off, err)
		}
		off += RecordHeader + n
	}
	if last == nil {
		return fmt.Errorf("store: %s is corrupt: no complete record", p)
	}
	return nil
}

// allZero reports whether b holds only zero bytes.
func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// SaveCheckpoint makes the checkpoint durable: one record of CheckpointLog, the
// checkpoint in its binary encoding (appendCheckpoint; LoadCheckpoint also reads JSON
// records, which start with '{'). The first save of a process removes checkpoint.json (the first
// format) once the journal is durable.
func (s *Store) SaveCheckpoint(c *Checkpoint) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.saveCheckpoint(c, nil)
}

// saveCheckpoint is SaveCheckpoint with, when lines is not nil, the ledger lines written
// just before it (not fsynced) carried in the record (see SaveCheckpointLedger). s.mu is
// held (then s.ck.mu: the order of every path that takes both).
func (s *Store) saveCheckpoint(c *Checkpoint, lines *ledgerLines) error {
	c.Version = 1
	if lines != nil {
		c.LedgerSeq, c.LedgerHash = lines.chain.Seq(), lines.chain.Last()
	} else {
		c.LedgerSeq, c.LedgerHash = s.chain.Seq(), s.chain.Last()
	}
	s.ck.mu.Lock()
	defer s.ck.mu.Unlock()
	first := s.ck.f == nil
	err := s.appendRecord(&s.ck, CheckpointLog, func(b []byte, fresh bool) ([]byte, error) {
		prev := &s.ck.tab
		if fresh {
			prev = nil
		}
		switch {
		case fresh && (lines != nil || s.unsynced):
			// The journal is rewritten: the lines its dropped records carried, and these,
			// are made durable in the ledger file itself.
			if s.ledger == nil {
				return nil, errors.New("ledger is closed")
			}
			if err := s.sync(s.ledger); err != nil {
				return nil, fmt.Errorf("ledger fsync: %w", err)
			}
			s.unsynced = false
		case lines != nil:
			b = appendLedgerSection(b, lines.off, lines.buf)
		}
		return appendCheckpointInto(b, c, prev, &s.ck.spare), nil
	})
	if err != nil {
		return err
	}
	s.ck.tab, s.ck.spare = s.ck.spare, s.ck.tab
	if first {
		if err := os.Remove(filepath.Join(s.Dir, CheckpointFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("store: checkpoint: %w", err)
		}
	}
	return nil
}

// SaveInbox makes raw, a token about to be acked, durable as the last record of
// InboxLog. The first save of a process removes InboxFile (the first format) once the
// journal is durable, if it can.
func (s *Store) SaveInbox(raw []byte) error {
	j := &s.inbox
	j.mu.Lock()
	defer j.mu.Unlock()
	first := j.f == nil
	if err := s.appendRecord(j, InboxLog, func(b []byte, _ bool) ([]byte, error) { return append(b, raw...), nil }); err != nil {
		return err
	}
	if first {
		// Best effort: the record is durable (the token may be acked), and a file of the
		// first format left behind is not read while the journal exists.
		os.Remove(filepath.Join(s.Dir, InboxFile))
	}
	return nil
}

// LoadInbox returns the last token stored by SaveInbox (InboxFile where there is no
// InboxLog), or os.ErrNotExist.
func (s *Store) LoadInbox() ([]byte, error) {
	b, err := s.lastRecord(InboxLog)
	if errors.Is(err, os.ErrNotExist) {
		return os.ReadFile(filepath.Join(s.Dir, InboxFile))
	}
	return b, err
}

// LoadCheckpoint returns the checkpoint, or nil if there is none: the last record of
// CheckpointLog, else checkpoint.json (the first format).
func (s *Store) LoadCheckpoint() (*Checkpoint, error) {
	var c *Checkpoint
	var tab ckTable
	err := s.records(CheckpointLog, func(b []byte) error {
		var err error
		if c, err = decodeCheckpoint(b, &tab); err != nil {
			return err
		}
		tab = tab.next(c)
		return nil
	})
	if errors.Is(err, os.ErrNotExist) {
		if c, err = s.loadCheckpointJSON(); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, err
	}
	if err := s.checkLedgerMark(c); err != nil {
		return nil, err
	}
	if c == nil && s.NoisyEntries() > 0 {
		return nil, fmt.Errorf("%w: the ledger holds %d noisy updates but there is no checkpoint: the node's private state is lost, "+
			"and starting it again would spend its privacy budget a second time; start a new run with a new data directory",
			ErrLedger, s.NoisyEntries())
	}
	if c != nil && c.Updates > s.NoisyEntries() {
		return nil, fmt.Errorf("%w: the checkpoint counts %d noisy updates, the ledger %d: ledger lines were removed",
			ErrLedger, c.Updates, s.NoisyEntries())
	}
	return c, nil
}

func (s *Store) loadCheckpointJSON() (*Checkpoint, error) {
	p := filepath.Join(s.Dir, CheckpointFile)
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	c, err := decodeCheckpoint(b, nil)
	if err != nil {
		return nil, fmt.Errorf("store: %s: %w", p, err)
	}
	return c, nil
}

// decodeCheckpoint decodes a checkpoint: JSON (checkpoint.json, or a JSON record) or the
// binary encoding, whose references go to prev.
func decodeCheckpoint(b []byte, prev *ckTable) (*Checkpoint, error) {
	var c Checkpoint
	if _, rest, ok, err := cutLedgerSection(b); err != nil {
		return nil, fmt.Errorf("checkpoint is corrupt: %v", err)
	} else if ok {
		b = rest
	}
	if isBinaryCheckpoint(b) {
		bc, err := decodeCheckpointBinary(b, prev)
		if err != nil {
			return nil, fmt.Errorf("checkpoint is corrupt: %v", err)
		}
		c = *bc
	} else {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return nil, fmt.Errorf("checkpoint is corrupt: %v", err)
		}
	}
	if c.Version != 1 {
		return nil, fmt.Errorf("checkpoint version %d not supported (this build reads version 1)", c.Version)
	}
	return &c, nil
}

// Identity returns the node's private key, creating it on first use.
func (s *Store) Identity() (crypto.PrivKey, error) {
	p := filepath.Join(s.Dir, IdentityFile)
	b, err := os.ReadFile(p)
	if err == nil {
		k, err := crypto.UnmarshalPrivateKey(b)
		if err != nil {
			return nil, fmt.Errorf("store: identity key %s is corrupt: %v", p, err)
		}
		// The key's parts must agree: an Ed25519 key whose seed was damaged still names
		// the old peer ID (from its public half) but signs for another key, and every
		// handshake would fail.
		msg := []byte("dpadmm identity check")
		sig, err := k.Sign(msg)
		if err != nil {
			return nil, fmt.Errorf("store: identity key %s is corrupt: %v", p, err)
		}
		if ok, err := k.GetPublic().Verify(msg, sig); err != nil || !ok {
			return nil, fmt.Errorf("store: identity key %s is corrupt: its private and public parts do not match (restore it from a backup, or start with a fresh --datadir and a new peer ID)", p)
		}
		return k, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("store: identity key: %w", err)
	}
	k, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		return nil, err
	}
	raw, err := crypto.MarshalPrivateKey(k)
	if err != nil {
		return nil, err
	}
	if err := s.WriteAtomic(IdentityFile, raw); err != nil {
		return nil, err
	}
	if err := os.Chmod(p, 0o600); err != nil {
		return nil, err
	}
	return k, nil
}

// DataDirPeerID returns the peer ID of the identity in dir, creating the identity (and
// the directory) if needed, so that a launcher can fix a static membership before
// starting the nodes.
func DataDirPeerID(dir string) (peer.ID, error) {
	st, err := Open(dir)
	if err != nil {
		return "", err
	}
	defer st.Close()
	k, err := st.Identity()
	if err != nil {
		return "", err
	}
	return peer.IDFromPrivateKey(k)
}
