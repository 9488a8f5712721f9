package store

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// RADMMJournalFile is the data-directory file that lets a neighbour-exchange (R-ADMM)
// node resume its run after a crash: one JSON line per release (RADMMRecord), made
// durable BEFORE the release's ledger entry and before any frame of it is sent. A line
// holds the released vector, the neighbour vectors the machine consumed at the barrier
// before it and every noise draw that went into it. A restarted node rebuilds a fresh
// machine, replays the journal (recorded inputs, recorded noise) and checks that every
// release it recomputes equals the journaled vector bit for bit; it then re-sends its
// last released vectors unchanged. An already-released iteration is therefore never
// re-noised. The file holds private state (the noise of past releases): it must stay on
// the node, like the data.
const RADMMJournalFile = "gossip-journal"

// StaleFile is the data-directory file recording every use of a stale neighbour vector
// (R-ADMM policy stale), one JSON line each, made durable before the release that
// depends on it is sent.
const StaleFile = "gossip-stale"

// RADMMRecord is one line of RADMMJournalFile.
type RADMMRecord struct {
	Run  string `json:"run"`
	Iter int    `json:"iter"`
	// Members and Total (first line only) are the run's membership in index order and M,
	// so that a restarted node of an announce/join run takes the same place.
	Members []string   `json:"members,omitempty"`
	Addrs   [][]string `json:"addrs,omitempty"` // members' known multiaddrs (no /p2p)
	Total   int        `json:"total_rows,omitempty"`
	Vec     []float64  `json:"vec"`
	// In are the neighbour vectors of iteration Iter-1 the machine consumed (a stale
	// substitution is recorded with the vector used).
	In    []RADMMInput `json:"in,omitempty"`
	Noise []NoiseDraw  `json:"noise,omitempty"`
}

// RADMMInput is one neighbour vector a release consumed.
type RADMMInput struct {
	From int       `json:"from"`
	Iter int       `json:"iter"`
	Vec  []float64 `json:"vec"`
	// Stale marks a stale substitution; Used is then the iteration the vector was released
	// for (journals written before these fields existed replay such an input as a vector
	// of iteration Iter).
	Stale bool `json:"stale,omitempty"`
	Used  int  `json:"used_iter,omitempty"`
}

// NoiseDraw is one call of a noise source: Normal (Sigma and the values filled) or
// Uniform (Uniform true, one value).
type NoiseDraw struct {
	Uniform bool      `json:"u,omitempty"`
	Sigma   float64   `json:"s,omitempty"`
	Vals    []float64 `json:"v"`
}

// RADMMJournal is what a data directory's journal says about a run: the membership, M
// and f_i(0) recorded with the first release, and how many releases are journaled.
type RADMMJournal struct {
	Members  []string
	Addrs    [][]string // the members' addresses known at the first release
	Total    int
	Init     []float64
	Releases int
	Records  []RADMMRecord
}

// ReadRADMMJournal returns the journal of run in dir, or nil when there is none. A
// truncated last line (a crash while it was written, before it was durable and so before
// any send of its release) is ignored.
func ReadRADMMJournal(dir, run string) (*RADMMJournal, error) {
	recs, _, err := ReadRADMMRecords(filepath.Join(dir, RADMMJournalFile), run)
	if err != nil || len(recs) == 0 {
		return nil, err
	}
	return &RADMMJournal{Members: recs[0].Members, Addrs: recs[0].Addrs, Total: recs[0].Total, Init: recs[0].Vec, Releases: len(recs), Records: recs}, nil
}

// Last returns the last journaled release: its iteration and the vector f_i(iter) sent
// to the neighbours (a copy).
func (j *RADMMJournal) Last() (int, []float64) {
	r := j.Records[len(j.Records)-1]
	return r.Iter, append([]float64(nil), r.Vec...)
}

// ReadRADMMRecords returns the records of run in the journal file path (none when there
// is no file) and the length of the file's complete lines. Records of other runs are
// skipped; those of run must number its releases 0, 1, 2, ... in order.
func ReadRADMMRecords(path, run string) ([]RADMMRecord, int64, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("store: %s: %w", RADMMJournalFile, err)
	}
	good := int64(bytes.LastIndexByte(b, '\n') + 1)
	var out []RADMMRecord
	sc := bufio.NewScanner(bytes.NewReader(b[:good]))
	sc.Buffer(make([]byte, 0, 1<<16), 1<<30)
	for line := 1; sc.Scan(); line++ {
		var r RADMMRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, 0, fmt.Errorf("store: %s line %d: %w", RADMMJournalFile, line, err)
		}
		if r.Run != run {
			continue
		}
		if r.Iter != len(out) {
			return nil, 0, fmt.Errorf("store: %s line %d: release %d follows %d releases of run %q", RADMMJournalFile, line, r.Iter, len(out), run)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		return nil, 0, fmt.Errorf("store: %s: %w", RADMMJournalFile, err)
	}
	return out, good, nil
}

// RADMMLog is the open journal (RADMMJournalFile) and stale-use record (StaleFile) of a
// neighbour-exchange run. Each append is fsynced (unless the store is NoSync) before it
// returns.
type RADMMLog struct {
	journal, stale *os.File
	noSync         bool
}

// OpenRADMM reads the journal records of run (ReadRADMMRecords), drops a torn last line
// (never durable, so its release was never sent) and opens the journal and the stale-use
// record for appending.
func (s *Store) OpenRADMM(run string) (*RADMMLog, []RADMMRecord, error) {
	jpath := filepath.Join(s.Dir, RADMMJournalFile)
	recs, good, err := ReadRADMMRecords(jpath, run)
	if err != nil {
		return nil, nil, err
	}
	l := &RADMMLog{noSync: s.NoSync}
	if l.journal, err = os.OpenFile(jpath, os.O_CREATE|os.O_WRONLY, 0o600); err != nil {
		return nil, nil, fmt.Errorf("store: %s: %w", RADMMJournalFile, err)
	}
	if err := l.journal.Truncate(good); err != nil {
		l.Close()
		return nil, nil, fmt.Errorf("store: %s: %w", RADMMJournalFile, err)
	}
	if _, err := l.journal.Seek(good, 0); err != nil {
		l.Close()
		return nil, nil, fmt.Errorf("store: %s: %w", RADMMJournalFile, err)
	}
	if l.stale, err = os.OpenFile(filepath.Join(s.Dir, StaleFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
		l.Close()
		return nil, nil, fmt.Errorf("store: %s: %w", StaleFile, err)
	}
	return l, recs, nil
}

// Append makes the record of one release durable.
func (l *RADMMLog) Append(rec *RADMMRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("store: %s: %w", RADMMJournalFile, err)
	}
	return l.line(l.journal, RADMMJournalFile, b)
}

// AppendStale makes one stale-use record (any JSON-encodable value) durable.
func (l *RADMMLog) AppendStale(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("store: %s: %w", StaleFile, err)
	}
	return l.line(l.stale, StaleFile, b)
}

func (l *RADMMLog) line(f *os.File, name string, b []byte) error {
	if f == nil {
		return fmt.Errorf("store: %s is closed", name)
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("store: %s: %w", name, err)
	}
	if !l.noSync {
		if err := f.Sync(); err != nil {
			return fmt.Errorf("store: %s fsync: %w", name, err)
		}
	}
	return nil
}

// Close closes both files. Safe to call more than once.
func (l *RADMMLog) Close() error {
	var err error
	for _, f := range []**os.File{&l.journal, &l.stale} {
		if *f != nil {
			if e := (*f).Close(); err == nil {
				err = e
			}
			*f = nil
		}
	}
	return err
}
