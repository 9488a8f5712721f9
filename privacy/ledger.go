package privacy

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"strconv"
)

// Mechanism names used in Entry.Mechanism.
const (
	MechGaussian = "gaussian" // Gaussian mechanism: Sensitivity and Sigma in the same units
	MechPure     = "pure"     // pure Epsilon-DP release
	MechForward  = "forward"  // forwarding without new data use: no privacy cost
	// MechSubsampled is the Poisson-subsampled Gaussian mechanism: each record included
	// with probability Rate, noise std Sigma on a sum of examples each clipped at
	// Sensitivity, under replace-one adjacency (one record replaced, counts unchanged).
	// See SubsampledEntryNote.
	MechSubsampled = "subsampled"
	// MechGADMM is one noisy gradient-ADMM iteration (gadmm.go): a Gaussian mechanism on
	// the x-step, Sensitivity = eta*Delta and Sigma the noise std on x, in x units.
	MechGADMM = "gadmm"
)

// Entry is one ledger record: a privacy event, stored so that accounting can be recomputed.
// For "gaussian" events Sensitivity and Sigma are in the units of the released quantity
// (for a walk update: 4*Lambda*Clip and Lambda*S). JSON field names are stable.
type Entry struct {
	Seq         uint64  `json:"seq"`
	Node        string  `json:"node"`
	Run         string  `json:"run"`
	Walk        uint64  `json:"walk"`
	Epoch       uint64  `json:"epoch"`
	Hop         uint64  `json:"hop"`
	Mechanism   string  `json:"mech"` // "gaussian" | "pure" | "forward" | "gadmm"
	Sensitivity float64 `json:"sens"`
	Sigma       float64 `json:"sigma"`
	Clip        float64 `json:"clip"`
	Lambda      float64 `json:"lambda"`
	Epsilon     float64 `json:"eps,omitempty"`
	Recipient   string  `json:"to"`
	// Rate is the Poisson sampling rate q in (0,1] of a "subsampled" entry (0, omitted,
	// for every other mechanism).
	Rate float64 `json:"q,omitempty"`
	// Prev chains a node's ledger: the hex of LineHash of the previous line ("" on the
	// first line, and in ledgers that are not chained). A line removed or rewritten in
	// the middle breaks the chain; the last line's hash, recorded in the checkpoint,
	// catches a shortened tail.
	Prev string `json:"prev,omitempty"`
}

// LineHash is the chain hash of one encoded ledger line (with its newline): the first 8
// bytes of its SHA-256, big-endian.
func LineHash(line []byte) uint64 {
	s := sha256.Sum256(line)
	return binary.BigEndian.Uint64(s[:8])
}

// Validate checks that the numeric fields are finite and non-negative and the mechanism is
// known.
func (e Entry) Validate() error {
	for _, f := range []struct {
		name string
		v    float64
	}{{"sens", e.Sensitivity}, {"sigma", e.Sigma}, {"clip", e.Clip}, {"lambda", e.Lambda}, {"eps", e.Epsilon}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 {
			return fmt.Errorf("privacy: ledger entry %d: field %s = %v must be finite and >= 0", e.Seq, f.name, f.v)
		}
	}
	switch e.Mechanism {
	case MechGaussian, MechPure, MechForward, MechGADMM:
		if e.Rate != 0 {
			return fmt.Errorf("privacy: ledger entry %d: field q = %v is only valid for mechanism %q", e.Seq, e.Rate, MechSubsampled)
		}
		return nil
	case MechSubsampled:
		return validateSubsampledEntry(e)
	}
	return fmt.Errorf("privacy: ledger entry %d: unknown mechanism %q", e.Seq, e.Mechanism)
}

// Curve returns the entry's RDP curve: GaussianCurve(Sensitivity, Sigma) for "gaussian" and
// "gadmm", SubsampledReplaceCurve(Rate, Sigma/Sensitivity, 1) for "subsampled",
// PureDPCurve(Epsilon) for "pure", zeros for "forward", and +Inf for an invalid entry.
func (e Entry) Curve() Curve {
	if e.Validate() != nil {
		return InfCurve()
	}
	switch e.Mechanism {
	case MechGaussian, MechGADMM:
		return GaussianCurve(e.Sensitivity, e.Sigma)
	case MechPure:
		return PureDPCurve(e.Epsilon)
	case MechSubsampled:
		return subsampledEntryCurve(e)
	default:
		return ZeroCurve()
	}
}

// LedgerCurve returns the composition (sum) of the entries' curves.
func LedgerCurve(es []Entry) Curve {
	total := ZeroCurve()
	for _, e := range es {
		total = total.Add(e.Curve())
	}
	return total
}

// crcSuffixLen is len(`,"crc":"xxxxxxxx"}`).
const crcSuffixLen = 18

// MarshalLineChecked encodes e as one JSON line ending in '\n', with a trailing "crc" field
// holding the CRC-32 (IEEE) of the line's JSON without that field, so that truncation or
// corruption is detected by ParseLedger.
func (e Entry) MarshalLineChecked() ([]byte, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	body, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("privacy: ledger entry %d: %v", e.Seq, err)
	}
	sum := crc32.ChecksumIEEE(body)
	out := make([]byte, 0, len(body)+crcSuffixLen+1)
	out = append(out, body[:len(body)-1]...)
	out = fmt.Appendf(out, `,"crc":"%08x"}`, sum)
	return append(out, '\n'), nil
}

// MarshalLine is MarshalLineChecked returning nil for an invalid entry.
func (e Entry) MarshalLine() []byte {
	b, err := e.MarshalLineChecked()
	if err != nil {
		return nil
	}
	return b
}

// ParseLedger reads lines written by MarshalLine. Blank lines are skipped. A line with a
// bad checksum, bad JSON, unknown fields or invalid values is an error naming its
// 1-based line number.
func ParseLedger(r io.Reader) ([]Entry, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	var out []Entry
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		e, err := parseLine(b)
		if err != nil {
			return out, fmt.Errorf("privacy: ledger line %d: %v", line, err)
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("privacy: ledger line %d: %v", line+1, err)
	}
	return out, nil
}

func parseLine(b []byte) (Entry, error) {
	var e Entry
	n := len(b)
	if n < crcSuffixLen+2 || !bytes.HasPrefix(b[n-crcSuffixLen:], []byte(`,"crc":"`)) || b[n-2] != '"' || b[n-1] != '}' {
		return e, fmt.Errorf("missing checksum (truncated or corrupt)")
	}
	want, err := strconv.ParseUint(string(b[n-10:n-2]), 16, 32)
	if err != nil {
		return e, fmt.Errorf("malformed checksum")
	}
	body := make([]byte, 0, n-crcSuffixLen+1)
	body = append(body, b[:n-crcSuffixLen]...)
	body = append(body, '}')
	if got := crc32.ChecksumIEEE(body); uint64(got) != want {
		return e, fmt.Errorf("checksum mismatch (corrupt line)")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return e, err
	}
	if err := e.Validate(); err != nil {
		return e, err
	}
	return e, nil
}

// Noisy reports whether the entry records a noisy update (a release that used the node's
// data): the Gaussian, subsampled Gaussian and gradient-ADMM mechanisms.
func (e Entry) Noisy() bool {
	switch e.Mechanism {
	case MechGaussian, MechSubsampled, MechGADMM:
		return true
	}
	return false
}
