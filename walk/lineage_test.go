package walk

import (
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// MaxSelfHops is the smallest j with n^-j <= 2^-64, checked in exact integer arithmetic
// (n^j >= 2^64) rather than through the logarithm the function uses.
func TestMaxSelfHopsBruteForce(t *testing.T) {
	for n := 2; n <= 5000; n++ {
		j := MaxSelfHops(n)
		// n^j >= 2^64 and n^(j-1) < 2^64, with big enough integers: count bits.
		pow := func(e uint64) float64 { return float64(e) * math.Log2(float64(n)) }
		exact := uint64(0)
		for p := uint64(1); ; exact++ { // smallest e with n^e overflowing 64 bits
			hi, lo := mulFull(p, uint64(n))
			if hi != 0 || lo == 0 {
				exact++
				break
			}
			p = lo
		}
		if j != exact {
			t.Fatalf("n=%d: MaxSelfHops %d, exact %d (log2 n^j = %.3f)", n, j, exact, pow(j))
		}
	}
	if MaxSelfHops(1) != math.MaxUint64 || MaxSelfHops(0) != math.MaxUint64 {
		t.Fatal("a single member hands every hop to itself: no bound")
	}
}

// mulFull returns the 128-bit product of a and b.
func mulFull(a, b uint64) (hi, lo uint64) {
	const mask = 1<<32 - 1
	a0, a1, b0, b1 := a&mask, a>>32, b&mask, b>>32
	w0 := a0 * b0
	t := a1*b0 + w0>>32
	w1, w2 := t&mask, t>>32
	w1 += a0 * b1
	return a1*b1 + w2 + w1>>32, a * b
}

func TestCheckLineageCases(t *testing.T) {
	const n = 8
	lim := MaxSelfHops(n) // 22
	ev := func(signer int, e, h uint64) Evidence {
		return Evidence{Present: true, Signer: signer, Epoch: e, Hop: h}
	}
	for _, c := range []struct {
		name           string
		epoch, hop     uint64
		ev             Evidence
		sender, origin int
		want           string // "" = accepted, else a fragment of the error
	}{
		{"origin sends the initial token", 0, 0, Evidence{}, 0, 0, ""},
		{"origin after one step", 0, 1, Evidence{}, 3, 3, ""},
		{"origin after the longest run", 0, lim + 1, Evidence{}, 3, 3, ""},
		{"origin beyond it", 0, lim + 2, Evidence{}, 3, 3, "in a row"},
		{"no evidence from another member", 0, 1, Evidence{}, 2, 3, "did not create"},
		{"next hop", 4, 10, ev(1, 4, 9), 2, 0, ""},
		{"regenerated under a new epoch", 7, 10, ev(1, 4, 9), 2, 0, ""},
		{"self-hand-offs up to the bound", 4, 9 + lim + 1, ev(1, 4, 9), 2, 0, ""},
		{"hop-K jump", 4, 9 + lim + 2, ev(1, 4, 9), 2, 0, "in a row"},
		{"evidence signed by the sender", 4, 10, ev(2, 4, 9), 2, 0, "sender itself"},
		{"evidence from outside the membership", 4, 10, ev(8, 4, 9), 2, 0, "of 8"},
		{"negative signer", 4, 10, ev(-1, 4, 9), 2, 0, "of 8"},
		{"evidence at the same hop", 4, 9, ev(1, 4, 9), 2, 0, "must increase"},
		{"evidence from a later epoch", 3, 10, ev(1, 4, 9), 2, 0, "later epoch"},
	} {
		err := CheckLineage(c.epoch, c.hop, c.ev, c.sender, c.origin, n)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: got %v, want an error with %q", c.name, err, c.want)
		}
	}
	// Final models.
	k := uint64(100)
	if err := CheckFinalLineage(5, k, ev(1, 5, k), 2, 0, n); err != nil {
		t.Errorf("received hop K: %v", err)
	}
	if err := CheckFinalLineage(5, k, ev(1, 4, k), 2, 0, n); err == nil {
		t.Error("evidence at hop K from another epoch accepted")
	}
	if err := CheckFinalLineage(5, k, ev(2, 5, k), 2, 0, n); err == nil {
		t.Error("hop K signed by the releaser itself accepted")
	}
	if err := CheckFinalLineage(5, k, ev(1, 5, k-lim), 2, 0, n); err != nil {
		t.Errorf("hop K reached by %d self-hand-offs: %v", lim, err)
	}
	if err := CheckFinalLineage(5, k, ev(1, 5, k-lim-1), 2, 0, n); err == nil {
		t.Errorf("hop K reached by %d self-hand-offs accepted", lim+1)
	}
	if err := CheckFinalLineage(0, lim, Evidence{}, 0, 0, n); err != nil {
		t.Errorf("origin alone to hop K=%d: %v", lim, err)
	}
	if err := CheckFinalLineage(0, lim+1, Evidence{}, 0, 0, n); err == nil {
		t.Error("origin alone beyond the bound accepted")
	}
}

// An honest uniform walk on the complete graph, with evidence tracked as a node tracks
// it (the last hand-off received from another member, kept across self-hand-offs), is
// never refused: every hand-off and the final pass the rules.
func TestCheckLineageAcceptsHonestWalks(t *testing.T) {
	for _, n := range []int{2, 3, 5, 40} {
		r := rand.New(rand.NewPCG(uint64(n), 7))
		const hops = 200000
		origin := r.IntN(n)
		holder, ev := origin, Evidence{}
		var epoch uint64
		for hop := uint64(1); hop <= hops; hop++ {
			next := r.IntN(n)
			if r.IntN(1000) == 0 {
				epoch++ // a regeneration: same evidence, a new epoch
			}
			if next == holder {
				continue // a self-hand-off: no signature, the evidence is kept
			}
			if err := CheckLineage(epoch, hop, ev, holder, origin, n); err != nil {
				t.Fatalf("n=%d: honest hand-off refused: %v", n, err)
			}
			ev = Evidence{Present: true, Signer: holder, Epoch: epoch, Hop: hop}
			holder = next
		}
		if err := CheckFinalLineage(epoch, hops, ev, holder, origin, n); err != nil {
			t.Fatalf("n=%d: honest final refused: %v", n, err)
		}
	}
}

func TestEvidenceUse(t *testing.T) {
	u := EvidenceUse{Max: 2}
	a := Evidence{Present: true, Signer: 1, Epoch: 0, Hop: 3}
	b := Evidence{Present: true, Signer: 2, Epoch: 0, Hop: 5}
	c := Evidence{}
	t1, t2 := TokenID{0, 4, 9}, TokenID{1, 4, 9}
	if u.Reused(a, t1) {
		t.Fatal("fresh evidence reported reused")
	}
	u.Use(a, t1)
	if u.Reused(a, t1) || !u.Reused(a, t2) {
		t.Fatal("same token must pass, another token on the same evidence must not")
	}
	u.Use(b, t1)
	u.Use(c, t1) // a is forgotten (Max 2)
	if u.Reused(a, t2) || !u.Reused(b, t2) || !u.Reused(c, t2) {
		t.Fatal("bounded memory: the oldest evidence is forgotten, the others kept")
	}
}

// TestEvidenceUseRestarted: after Restarted, an evidence used before buys one token of a
// later epoch, not of the same or an earlier one, and only once per restart; a use
// made after the restart buys nothing more; Records never changes a slice it returned.
func TestEvidenceUseRestarted(t *testing.T) {
	var u EvidenceUse
	a := Evidence{Present: true, Signer: 1, Epoch: 2, Hop: 3}
	b := Evidence{Present: true, Signer: 2, Epoch: 2, Hop: 5}
	ta, tb := TokenID{2, 4, 9}, TokenID{2, 6, 9}
	u.Use(a, ta)
	u.Use(b, tb)
	if !u.Reused(a, TokenID{3, 4, 1}) {
		t.Fatal("a later epoch renewed an evidence without a restart")
	}
	old := u.Records()
	snap := append([]EvidenceRecord(nil), old...)
	var v EvidenceUse
	v.Load(old)
	v.Restarted(nil)
	same, earlier, later, later2 := TokenID{2, 8, 1}, TokenID{1, 8, 1}, TokenID{3, 8, 1}, TokenID{4, 9, 1}
	if v.Reused(a, ta) || !v.Reused(a, same) || !v.Reused(a, earlier) || v.Reused(a, later) {
		t.Fatal("after the restart: the token recorded passes, the same or an earlier epoch is refused, a later one passes")
	}
	v.Use(a, later)
	if !v.Reused(a, later2) || v.Reused(a, later) {
		t.Fatal("a renewed evidence was renewed twice, or its new token is not recognised")
	}
	if v.Reused(b, later) || !v.Reused(b, TokenID{2, 7, 1}) {
		t.Fatal("the renewal of one evidence changed another's")
	}
	rs := v.Records()
	if len(rs) != 2 || rs[0].Ev != b || rs[1].Ev != a || rs[1].ID != later {
		t.Fatalf("records after the renewal: %+v", rs)
	}
	if !reflect.DeepEqual(old, snap) {
		t.Fatal("a renewal changed a slice Records returned before")
	}
	// A second restart renews once more.
	var w EvidenceUse
	w.Load(rs)
	w.Restarted(nil)
	if w.Reused(a, later2) {
		t.Fatal("the second restart did not renew the evidence")
	}
	// Only the uses the filter keeps (Custody.Restore: tokens near the highest hop seen).
	var x EvidenceUse
	x.Load(rs)
	x.Restarted(func(id TokenID) bool { return id.Hop >= 7 })
	if !x.Reused(b, TokenID{3, 9, 1}) || x.Reused(a, TokenID{4, 9, 1}) {
		t.Fatal("the filter of renewable uses was not applied (b's token at hop 6 is old, a's at hop 8 recent)")
	}
}
