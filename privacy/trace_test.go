package privacy

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
)

func randomTrace(r *rand.Rand, n, steps int, noisyFrac float64, final bool) *Trace {
	tr := &Trace{Nodes: n, Clip: 0.5, Sigma: 3, FinalReleasedToAll: final}
	tr.Steps = make([]TraceStep, steps)
	for k := range tr.Steps {
		tr.Steps[k] = TraceStep{Node: r.IntN(n), Noisy: r.Float64() < noisyFrac}
	}
	return tr
}

func TestTraceRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	tr := randomTrace(r, 17, 500, 0.7, true)
	var buf bytes.Buffer
	if err := WriteTrace(&buf, tr); err != nil {
		t.Fatal(err)
	}
	got, err := ReadTrace(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if got.Nodes != tr.Nodes || got.Clip != tr.Clip || got.Sigma != tr.Sigma || got.FinalReleasedToAll != tr.FinalReleasedToAll {
		t.Fatalf("header mismatch: %+v", got)
	}
	if len(got.Steps) != len(tr.Steps) {
		t.Fatalf("steps: got %d want %d", len(got.Steps), len(tr.Steps))
	}
	for k := range tr.Steps {
		if got.Steps[k] != tr.Steps[k] {
			t.Fatalf("step %d: got %+v want %+v", k, got.Steps[k], tr.Steps[k])
		}
	}
}

func TestTraceMalformed(t *testing.T) {
	hdr := `{"format":"dpadmm-trace/1","nodes":3,"clip":1,"sigma":2,"steps":2,"final_released_to_all":false}` + "\n"
	cases := []struct{ in, want string }{
		{"", "missing header"},
		{"not json\n", "line 1: header"},
		{`{"format":"other","nodes":3,"clip":1,"sigma":2,"steps":0}` + "\n", "format"},
		{`{"format":"dpadmm-trace/1","nodes":0,"clip":1,"sigma":2,"steps":0}` + "\n", "nodes must be"},
		{`{"format":"dpadmm-trace/1","nodes":3,"clip":1,"sigma":-2,"steps":0}` + "\n", "sigma must be"},
		{hdr + "[0,1]\n[3,1]\n", "line 3: step: node 3 outside"},
		{hdr + "[0,1]\n[x,1]\n", "line 3: step: node: not an integer"},
		{hdr + "[0,1]\n[1,2]\n", "line 3: step: noisy flag"},
		{hdr + "[0,1]\n1,1\n", "line 3: step: want [node,noisy]"},
		{hdr + "[0,1]\n", "announces 2 steps, found 1"},
	}
	for _, c := range cases {
		_, err := ReadTrace(strings.NewReader(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "privacy: trace: ") {
			t.Errorf("input %q: got error %v, want one containing %q", c.in, err, c.want)
		}
	}
	ok := hdr + "\n[0, 1]\n [2,0] \n"
	tr, err := ReadTrace(strings.NewReader(ok))
	if err != nil {
		t.Fatal(err)
	}
	if tr.Steps[0] != (TraceStep{0, true}) || tr.Steps[1] != (TraceStep{2, false}) {
		t.Fatalf("got %+v", tr.Steps)
	}
}

func TestTraceLarge(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	tr := randomTrace(r, 1000, 1_000_000, 0.9, false)
	var buf bytes.Buffer
	if err := WriteTrace(&buf, tr); err != nil {
		t.Fatal(err)
	}
	got, err := ReadTrace(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Steps) != 1_000_000 || got.Steps[999_999] != tr.Steps[999_999] {
		t.Fatal("large trace mismatch")
	}
}

func FuzzReadTrace(f *testing.F) {
	hdr := `{"format":"dpadmm-trace/1","nodes":3,"clip":1,"sigma":2,"steps":2}` + "\n"
	f.Add(hdr + "[0,1]\n[2,0]\n")
	f.Add(hdr + "[0,1]\n[9,0]\n")
	f.Add("{}\n")
	f.Add(hdr + "[,]\n")
	f.Fuzz(func(t *testing.T, in string) {
		tr, err := ReadTrace(strings.NewReader(in))
		if err != nil {
			return
		}
		if _, err := RealisedPairwise(tr); err != nil && tr.Nodes >= 2 && tr.Nodes < 100 {
			t.Fatalf("valid trace rejected: %v", err)
		}
	})
}
