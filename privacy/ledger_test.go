package privacy

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

func sampleEntries() []Entry {
	return []Entry{
		{Seq: 1, Node: "n0", Run: "r", Walk: 2, Epoch: 0, Hop: 5, Mechanism: MechGaussian,
			Sensitivity: 0.4, Sigma: 1.5, Clip: 0.2, Lambda: 0.5, Recipient: "n3"},
		{Seq: 2, Node: "n0", Run: "r", Mechanism: MechPure, Epsilon: 0.3, Recipient: "n1"},
		{Seq: 3, Node: "n0", Run: "r", Mechanism: MechForward, Recipient: "n2"},
	}
}

func TestLedgerRoundTrip(t *testing.T) {
	es := sampleEntries()
	var buf bytes.Buffer
	for _, e := range es {
		line := e.MarshalLine()
		if line == nil || bytes.Count(line, []byte("\n")) != 1 || line[len(line)-1] != '\n' {
			t.Fatalf("bad line %q", line)
		}
		buf.Write(line)
		buf.WriteString("\n") // blank lines are skipped
	}
	got, err := ParseLedger(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(es) {
		t.Fatalf("got %d entries", len(got))
	}
	for i := range es {
		if got[i] != es[i] {
			t.Errorf("entry %d: %+v, want %+v", i, got[i], es[i])
		}
	}
	// Recompute-from-ledger equals the live value.
	live := GaussianCurve(0.4, 1.5).Add(PureDPCurve(0.3))
	rec := LedgerCurve(got)
	for k := range Orders {
		if rec[k] != live[k] {
			t.Fatalf("alpha=%v: ledger %v, live %v", Orders[k], rec[k], live[k])
		}
	}
}

func TestLedgerCorruption(t *testing.T) {
	var lines []string
	for _, e := range sampleEntries() {
		lines = append(lines, string(e.MarshalLine()))
	}
	good := strings.Join(lines, "")
	cases := map[string]string{
		"flipped digit": strings.Replace(good, `"sigma":1.5`, `"sigma":1.6`, 1),
		"truncated":     good[:len(good)-12],
	}
	for name, text := range cases {
		_, err := ParseLedger(strings.NewReader(text))
		if err == nil {
			t.Errorf("%s: corruption not detected", name)
			continue
		}
		want := "line 1"
		if name == "truncated" {
			want = "line 3"
		}
		if !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "privacy: ") {
			t.Errorf("%s: error %q does not name %s", name, err, want)
		}
	}
}

func TestEntryValidation(t *testing.T) {
	bad := []Entry{
		{Mechanism: MechGaussian, Sigma: math.NaN()},
		{Mechanism: MechGaussian, Sensitivity: -1, Sigma: 1},
		{Mechanism: MechPure, Epsilon: math.Inf(1)},
		{Mechanism: "laplace"},
	}
	for _, e := range bad {
		if e.Validate() == nil {
			t.Errorf("%+v accepted", e)
		}
		if e.MarshalLine() != nil {
			t.Errorf("%+v marshalled", e)
		}
		if c := e.Curve(); !math.IsInf(c[0], 1) {
			t.Errorf("%+v: curve %v, want +Inf", e, c[0])
		}
	}
	if c := (Entry{Mechanism: MechForward}).Curve(); c[len(c)-1] != 0 {
		t.Error("forward entry costs privacy")
	}
}
