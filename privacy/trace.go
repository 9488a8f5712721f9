package privacy

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
)

// TraceFormat is the value of the "format" field in the header line of a trace file.
const TraceFormat = "dpadmm-trace/1"

// TraceStep is one hop of a random walk. Node holds the token at this hop; if Noisy is
// true it performs one noisy update, and the result goes to the Node of the next step.
// A step with Noisy false only forwards the token. It also serves as a view: a peer that
// received the bytes of a release without going on with the token (the sender
// redirected the hand-off after a withheld or lost ack) is a step with Noisy false right
// after the release, so that it and the next holder see the same state and both are
// charged for it.
type TraceStep struct {
	Node  int
	Noisy bool
}

// Trace is the realised path of a walk, the input of the realised pairwise accountant.
type Trace struct {
	Nodes              int         // number of nodes; every Step.Node is in [0, Nodes)
	Clip               float64     // clipping bound C of every noisy update
	Sigma              float64     // noise parameter sigma of every noisy update
	Steps              []TraceStep // hop k is Steps[k]
	FinalReleasedToAll bool        // the final model is published to every node
	// Step names the local step of the noisy updates and its accounting parameters; nil
	// is Algorithm 4's prox step (and the linearized step, which the same figures cover).
	Step *TraceStepInfo
}

// TraceStepInfo is the local step of a trace's noisy updates (the step fields of a
// WalkRun).
type TraceStepInfo struct {
	Step            StepName     `json:"step"`
	Rate            float64      `json:"sample_rate,omitempty"`
	SGDNonExpansive bool         `json:"sgd_non_expansive,omitempty"`
	GADMM           *GADMMParams `json:"gadmm,omitempty"`
	// Unit and RecordClip are the WalkRun fields of the same names: under the record
	// unit the prox and linearized figures use the smaller of the clip and RecordClip.
	Unit       Unit    `json:"unit,omitempty"`
	RecordClip float64 `json:"record_clip,omitempty"`
}

// WalkRun returns the WalkRun fields of the trace: its nodes, clip, noise and step.
func (tr *Trace) WalkRun() WalkRun {
	r := WalkRun{Nodes: tr.Nodes, Complete: true, Clip: tr.Clip, Sigma: tr.Sigma}
	if s := tr.Step; s != nil {
		r.Step, r.Rate, r.SGDNonExpansive = s.Step, s.Rate, s.SGDNonExpansive
		r.Unit, r.RecordClip = s.Unit, s.RecordClip
		if s.GADMM != nil {
			r.GADMM = *s.GADMM
		}
	}
	return r
}

// TraceStepOf returns the TraceStepInfo of r's step (nil for the prox step).
func TraceStepOf(r WalkRun) *TraceStepInfo {
	rc := r.RecordClip
	if math.IsInf(rc, 0) || math.IsNaN(rc) {
		rc = 0 // JSON has no infinity: 0 is "no record radius"
	}
	if (r.Step == "" || r.Step == StepProx) && r.Unit == "" && rc == 0 {
		return nil
	}
	s := &TraceStepInfo{Step: r.Step, Rate: r.Rate, SGDNonExpansive: r.SGDNonExpansive, Unit: r.Unit, RecordClip: rc}
	if r.Step == StepGADMM {
		p := r.GADMM
		s.GADMM = &p
	}
	return s
}

// traceHeader is the first line of an encoded trace.
type traceHeader struct {
	Format             string  `json:"format"`
	Nodes              int     `json:"nodes"`
	Clip               float64 `json:"clip"`
	Sigma              float64 `json:"sigma"`
	Steps              int     `json:"steps"`
	FinalReleasedToAll bool    `json:"final_released_to_all"`
	// LocalStep is Trace.Step; absent for the prox step (older traces have none).
	LocalStep *TraceStepInfo `json:"local_step,omitempty"`
}

// Validate reports whether the trace is well formed.
func (tr *Trace) Validate() error {
	if tr == nil {
		return errors.New("privacy: trace: nil trace")
	}
	if err := tr.validateHeader(); err != nil {
		return fmt.Errorf("privacy: trace: %v", err)
	}
	for k, s := range tr.Steps {
		if s.Node < 0 || s.Node >= tr.Nodes {
			return fmt.Errorf("privacy: trace: step %d: node %d outside [0, %d)", k, s.Node, tr.Nodes)
		}
	}
	return nil
}

func (tr *Trace) validateHeader() error {
	if tr.Nodes < 1 {
		return fmt.Errorf("nodes must be >= 1, got %d", tr.Nodes)
	}
	if !(tr.Clip > 0) || math.IsInf(tr.Clip, 0) {
		return fmt.Errorf("clip must be finite and > 0, got %v", tr.Clip)
	}
	if !(tr.Sigma > 0) || math.IsInf(tr.Sigma, 0) {
		return fmt.Errorf("sigma must be finite and > 0, got %v", tr.Sigma)
	}
	return nil
}

// WriteTrace encodes tr as JSON lines: a header object, then one line "[node,noisy]"
// per step with noisy 0 or 1.
func WriteTrace(w io.Writer, tr *Trace) error {
	if err := tr.Validate(); err != nil {
		return err
	}
	h := traceHeader{Format: TraceFormat, Nodes: tr.Nodes, Clip: tr.Clip, Sigma: tr.Sigma,
		Steps: len(tr.Steps), FinalReleasedToAll: tr.FinalReleasedToAll, LocalStep: tr.Step}
	b, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("privacy: trace: %w", err)
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	bw.Write(b)
	bw.WriteByte('\n')
	var line []byte
	for _, s := range tr.Steps {
		line = append(line[:0], '[')
		line = strconv.AppendInt(line, int64(s.Node), 10)
		if s.Noisy {
			line = append(line, ",1]\n"...)
		} else {
			line = append(line, ",0]\n"...)
		}
		bw.Write(line)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("privacy: trace: write: %w", err)
	}
	return nil
}

// ReadTrace decodes a trace written by WriteTrace. Errors name the offending line.
// Blank lines are ignored.
func ReadTrace(r io.Reader) (*Trace, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<20)
	lineNo := 0
	var tr *Trace
	want := 0
	for sc.Scan() {
		lineNo++
		line := sc.Bytes()
		if len(trimSpace(line)) == 0 {
			continue
		}
		if tr == nil {
			var h traceHeader
			if err := json.Unmarshal(line, &h); err != nil {
				return nil, fmt.Errorf("privacy: trace: line %d: header: %v", lineNo, err)
			}
			if h.Format != TraceFormat {
				return nil, fmt.Errorf("privacy: trace: line %d: format %q, want %q", lineNo, h.Format, TraceFormat)
			}
			if h.Steps < 0 {
				return nil, fmt.Errorf("privacy: trace: line %d: steps must be >= 0, got %d", lineNo, h.Steps)
			}
			tr = &Trace{Nodes: h.Nodes, Clip: h.Clip, Sigma: h.Sigma, FinalReleasedToAll: h.FinalReleasedToAll, Step: h.LocalStep}
			if err := tr.validateHeader(); err != nil {
				return nil, fmt.Errorf("privacy: trace: line %d: header: %v", lineNo, err)
			}
			want = h.Steps
			capHint := want
			if capHint > 1<<20 {
				capHint = 1 << 20
			}
			tr.Steps = make([]TraceStep, 0, capHint)
			continue
		}
		s, err := parseStep(line, tr.Nodes)
		if err != nil {
			return nil, fmt.Errorf("privacy: trace: line %d: %v", lineNo, err)
		}
		tr.Steps = append(tr.Steps, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("privacy: trace: line %d: %v", lineNo+1, err)
	}
	if tr == nil {
		return nil, errors.New("privacy: trace: empty input, missing header line")
	}
	if len(tr.Steps) != want {
		return nil, fmt.Errorf("privacy: trace: header announces %d steps, found %d", want, len(tr.Steps))
	}
	return tr, nil
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// parseStep parses "[node,noisy]" with optional spaces.
func parseStep(line []byte, nodes int) (TraceStep, error) {
	b := trimSpace(line)
	if len(b) < 5 || b[0] != '[' || b[len(b)-1] != ']' {
		return TraceStep{}, fmt.Errorf("step: want [node,noisy], got %q", shorten(line))
	}
	b = b[1 : len(b)-1]
	comma := -1
	for i, c := range b {
		if c == ',' {
			comma = i
			break
		}
	}
	if comma < 0 {
		return TraceStep{}, fmt.Errorf("step: want [node,noisy], got %q", shorten(line))
	}
	node, err := strconv.Atoi(string(trimSpace(b[:comma])))
	if err != nil {
		return TraceStep{}, fmt.Errorf("step: node: not an integer: %q", shorten(b[:comma]))
	}
	if node < 0 || node >= nodes {
		return TraceStep{}, fmt.Errorf("step: node %d outside [0, %d)", node, nodes)
	}
	var noisy bool
	switch string(trimSpace(b[comma+1:])) {
	case "1", "true":
		noisy = true
	case "0", "false":
	default:
		return TraceStep{}, fmt.Errorf("step: noisy flag must be 0 or 1, got %q", shorten(b[comma+1:]))
	}
	return TraceStep{Node: node, Noisy: noisy}, nil
}

func shorten(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "..."
	}
	return string(b)
}
