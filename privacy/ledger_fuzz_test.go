package privacy

import (
	"bytes"
	"testing"
)

// FuzzParseLedger feeds arbitrary bytes to the ledger parser: it must never panic, and
// whatever it accepts must be valid entries that re-encode to lines it accepts again with
// the same content.
func FuzzParseLedger(f *testing.F) {
	var all []byte
	for _, e := range sampleEntries() {
		line := e.MarshalLine()
		f.Add(line)
		all = append(all, line...)
	}
	f.Add(all)
	f.Add([]byte("{}\n"))
	f.Add([]byte("not json\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, b []byte) {
		es, err := ParseLedger(bytes.NewReader(b))
		if err != nil {
			return
		}
		var again []byte
		for _, e := range es {
			if err := e.Validate(); err != nil {
				t.Fatalf("accepted an invalid entry %+v: %v", e, err)
			}
			again = append(again, e.MarshalLine()...)
		}
		es2, err := ParseLedger(bytes.NewReader(again))
		if err != nil {
			t.Fatalf("re-encoded ledger refused: %v", err)
		}
		if len(es2) != len(es) {
			t.Fatalf("re-encoded ledger has %d entries, want %d", len(es2), len(es))
		}
		for i := range es {
			if es2[i] != es[i] {
				t.Fatalf("entry %d changed: %+v vs %+v", i, es2[i], es[i])
			}
		}
	})
}
