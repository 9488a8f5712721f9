package node

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/dpadmm/dpadmm/privacy"
)

// File names inside a data directory.
const (
	IdentityFile   = "identity.key"    // libp2p private key (protobuf), mode 0600
	LedgerFile     = "ledger"          // append-only privacy ledger, one checked JSON line per entry
	CheckpointFile = "checkpoint.json" // private state, written atomically
	InboxFile      = "inbox.token"     // last token received and acked, written atomically
	ModelFile      = "model.json"      // final released model and privacy report
)

// ErrLedger is returned when a data directory has a checkpoint but its ledger is missing
// or corrupt: the node refuses to take part rather than under-count privacy spending.
var ErrLedger = errors.New("node: privacy ledger missing or corrupt; refusing to take part (restore the ledger or start with a fresh --datadir)")

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
}

// Mark identifies a token for fencing and merging: (Epoch, Hop, Digest) in that order,
// Digest being walk.TokenDigest.
type Mark struct {
	Epoch  uint64 `json:"epoch"`
	Hop    uint64 `json:"hop"`
	Digest uint64 `json:"digest"`
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
	NoSync  bool
	mu      sync.Mutex // guards ledger, entries, seq
	ledger  *os.File
	entries int
	seq     uint64
}

// OpenStore opens (creating if needed) a data directory and checks the ledger: if a
// checkpoint exists, the ledger must exist and parse, else ErrLedger.
func OpenStore(dir string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("node: a data directory is required")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("node: data directory: %w", err)
	}
	s := &Store{Dir: dir}
	lp := filepath.Join(dir, LedgerFile)
	_, cerr := os.Stat(filepath.Join(dir, CheckpointFile))
	hasCkpt := cerr == nil
	b, err := os.ReadFile(lp)
	switch {
	case errors.Is(err, os.ErrNotExist) && hasCkpt:
		return nil, fmt.Errorf("%w: %s is missing but %s exists", ErrLedger, lp, CheckpointFile)
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("%w: %v", ErrLedger, err)
	}
	es, perr := privacy.ParseLedger(bytes.NewReader(b))
	if perr != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrLedger, lp, perr)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		return nil, fmt.Errorf("%w: %s: last line is truncated", ErrLedger, lp)
	}
	s.entries = len(es)
	for _, e := range es {
		if e.Seq > s.seq {
			s.seq = e.Seq
		}
	}
	f, err := os.OpenFile(lp, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("node: ledger: %w", err)
	}
	s.ledger = f
	return s, nil
}

// Close closes the ledger file.
func (s *Store) Close() error {
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
	return s.entries
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
	if s.ledger == nil {
		return errors.New("node: ledger is closed")
	}
	var buf []byte
	seq := s.seq
	for _, e := range es {
		seq++
		e.Seq = seq
		line, err := e.MarshalLineChecked()
		if err != nil {
			return err
		}
		buf = append(buf, line...)
	}
	if _, err := s.ledger.Write(buf); err != nil {
		return fmt.Errorf("node: ledger write: %w", err)
	}
	if !s.NoSync {
		if err := s.ledger.Sync(); err != nil {
			return fmt.Errorf("node: ledger fsync: %w", err)
		}
	}
	s.seq = seq
	s.entries += len(es)
	return nil
}

// WriteAtomic writes name in the data directory via a temporary file, fsync and rename
// (and an fsync of the directory), so that a crash leaves the old or the new content.
func (s *Store) WriteAtomic(name string, data []byte) error {
	p := filepath.Join(s.Dir, name)
	tmp, err := os.CreateTemp(s.Dir, "."+name+".tmp*")
	if err != nil {
		return fmt.Errorf("node: write %s: %w", name, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("node: write %s: %w", name, err)
	}
	if !s.NoSync {
		if err := tmp.Sync(); err != nil {
			tmp.Close()
			return fmt.Errorf("node: fsync %s: %w", name, err)
		}
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return fmt.Errorf("node: rename %s: %w", name, err)
	}
	if !s.NoSync {
		if d, err := os.Open(s.Dir); err == nil {
			d.Sync()
			d.Close()
		}
	}
	return nil
}

// SaveCheckpoint writes the checkpoint atomically.
func (s *Store) SaveCheckpoint(c *Checkpoint) error {
	c.Version = 1
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("node: checkpoint: %w", err)
	}
	return s.WriteAtomic(CheckpointFile, b)
}

// LoadCheckpoint returns the checkpoint, or nil if there is none.
func (s *Store) LoadCheckpoint() (*Checkpoint, error) {
	b, err := os.ReadFile(filepath.Join(s.Dir, CheckpointFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var c Checkpoint
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("node: checkpoint %s is corrupt: %v", filepath.Join(s.Dir, CheckpointFile), err)
	}
	if c.Version != 1 {
		return nil, fmt.Errorf("node: checkpoint version %d not supported", c.Version)
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
			return nil, fmt.Errorf("node: identity key %s is corrupt: %v", p, err)
		}
		return k, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("node: identity key: %w", err)
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
	st, err := OpenStore(dir)
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
