package node

import (
	"context"
	"encoding/binary"
	"hash/fnv"
	"math"
	"testing"
	"time"

	"github.com/dpadmm/dpadmm/node/store"
	"github.com/libp2p/go-libp2p/core/peer"
)

// zDigest is FNV-1a 64 over the little-endian IEEE-754 bytes of z, computed here with
// hash/fnv independently of walk.TokenDigest.
func zDigest(z []float64) uint64 {
	h := fnv.New64a()
	for _, v := range z {
		h.Write(binary.LittleEndian.AppendUint64(nil, math.Float64bits(v)))
	}
	return h.Sum64()
}

// TestFinalKeepsHighest delivers conflicting final models to one node in both orders: the
// node keeps the one of highest (epoch, hop, digest of z), whatever the order; equal marks
// from two publishers keep the higher publisher ID; republications and invalid finals
// change nothing.
func TestFinalKeepsHighest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const hops = 20
	sh := shards(t, 3)
	nodes := staticCluster(t, ctx, "final", sh, hops, 0, []string{"", "", ""})
	n := nodes[0]
	p1, p2 := nodes[1].ID(), nodes[2].ID()
	fixMembers(t, n, []peer.ID{n.ID(), p1, p2})
	cols := sh[0].Cols
	vec := func(x float64) []float64 {
		z := make([]float64, cols)
		for i := range z {
			z[i] = x + float64(i)
		}
		return z
	}
	// Each final carries the other member's signed hand-off of hop K to its publisher.
	fin := func(from peer.ID, epoch uint64, z []float64) finalMsg {
		signer, idx := nodes[2], 2
		if from == p2 {
			signer, idx = nodes[1], 1
		}
		fc := certFor(t, signer, idx, "final", epoch, hops, z, from)
		return finalMsg{from: from, m: ctlMsg{Type: "final", Run: "final", Hash: n.hash, Hop: hops, Epoch: epoch, Model: z, Cert: fc}}
	}
	reset := func() { n.fin.model, n.fin.mark = nil, store.Mark{} }
	// Same epoch, different z: the winner is the higher digest of z.
	za, zb := vec(1), vec(2)
	hiID := p1 // equal marks: the higher peer ID (string form) is kept
	if p2.String() > p1.String() {
		hiID = p2
	}
	hiZ, hiFrom := za, p1
	if zDigest(zb) > zDigest(za) {
		hiZ, hiFrom = zb, p2
	}
	cases := []struct {
		name     string
		x, y     finalMsg
		want     []float64
		wantFrom peer.ID
		epoch    uint64
	}{
		{"higher epoch", fin(p1, 0, vec(5)), fin(p2, 1, vec(-3)), vec(-3), p2, 1},
		{"same epoch, digest", fin(p1, 2, za), fin(p2, 2, zb), hiZ, hiFrom, 2},
		{"same token, two publishers", fin(p1, 3, vec(7)), fin(p2, 3, vec(7)), vec(7), hiID, 3},
	}
	for _, c := range cases {
		for order, pair := range [2][2]finalMsg{{c.x, c.y}, {c.y, c.x}} {
			reset()
			first, err := n.acceptFinal(pair[0])
			if err != nil || !first {
				t.Fatalf("%s, order %d: first final not kept: %v", c.name, order, err)
			}
			second, err := n.acceptFinal(pair[1])
			if err != nil {
				t.Fatalf("%s, order %d: %v", c.name, order, err)
			}
			m := n.fin.model
			if !sameBits(m.Model, c.want) || m.ReleasedBy != c.wantFrom.String() || m.Epoch != c.epoch || m.Hops != hops {
				t.Fatalf("%s, order %d: kept %v from %s epoch %d, want %v from %s epoch %d", c.name, order,
					m.Model, shortID(peer.ID(m.ReleasedBy)), m.Epoch, c.want, shortID(c.wantFrom), c.epoch)
			}
			if wantSecond := pair[1].from == c.wantFrom && sameBits(pair[1].m.Model, c.want); second != wantSecond {
				t.Fatalf("%s, order %d: second final kept = %v, want %v", c.name, order, second, wantSecond)
			}
			if n.fin.mark != (store.Mark{Epoch: c.epoch, Hop: hops, Digest: zDigest(c.want)}) {
				t.Fatalf("%s: kept mark %+v", c.name, n.fin.mark)
			}
			// A republication of either changes nothing.
			for _, f := range pair {
				if ok, err := n.acceptFinal(f); ok || err != nil || !sameBits(n.fin.model.Model, c.want) {
					t.Fatalf("%s: republication changed the kept model (%v, %v)", c.name, ok, err)
				}
			}
		}
	}
	// Invalid finals are refused and never replace the kept one, even at a higher epoch.
	reset()
	n.acceptFinal(fin(p1, 0, vec(1)))
	nan := vec(9)
	nan[0] = math.NaN()
	bad := map[string]finalMsg{
		"wrong hop":    {from: p2, m: ctlMsg{Type: "final", Run: "final", Hash: n.hash, Hop: hops - 1, Epoch: 9, Model: vec(2)}},
		"wrong hash":   {from: p2, m: ctlMsg{Type: "final", Run: "final", Hash: "x", Hop: hops, Epoch: 9, Model: vec(2)}},
		"dimension":    fin(p2, 9, vec(2)[:cols-1]),
		"non-finite":   fin(p2, 9, nan),
		"non-member":   fin(peer.ID("not a member"), 9, vec(2)),
		"empty member": fin("", 9, vec(2)),
		// A forged final far above every epoch seen (2^62), and the epoch that used to
		// wrap the next regeneration to 0.
		"epoch 2^62": fin(p2, 1<<62, vec(2)),
		"epoch max":  fin(p2, math.MaxUint64, vec(2)),
	}
	for name, f := range bad {
		if ok, err := n.acceptFinal(f); ok || err == nil {
			t.Errorf("%s: accepted (%v)", name, err)
		}
	}
	if !sameBits(n.fin.model.Model, vec(1)) || n.fin.model.ReleasedBy != p1.String() {
		t.Fatal("an invalid final replaced the kept model")
	}

	n.cfg.FinalWait = 300 * time.Millisecond // the end window is at most FinalWait
	if w := n.endWindow(); w != 300*time.Millisecond {
		t.Fatalf("end window %v, want FinalWait", w)
	}
	// The end window: a releaser holding its own final keeps listening and takes a higher
	// one published meanwhile; the republication loop stops when superseded.
	for _, order := range [][2]uint64{{4, 5}, {5, 4}} {
		reset()
		n.keepFinal(n.newModel(vec(10), order[0], hops, n.ID()), finalMark(order[0], hops, vec(10)))
		n.fin.in <- fin(p1, order[1], vec(11))
		n.settleFinal(ctx)
		want, by := vec(10), n.ID()
		if order[1] > order[0] {
			want, by = vec(11), p1
		}
		if !sameBits(n.fin.model.Model, want) || n.fin.model.ReleasedBy != by.String() {
			t.Fatalf("after the end window (own epoch %d, other %d): kept %v from %s", order[0], order[1], n.fin.model.Model, n.fin.model.ReleasedBy)
		}
	}
	reset()
	n.keepFinal(n.newModel(vec(10), 4, hops, n.ID()), finalMark(4, hops, vec(10)))
	n.fin.in <- fin(p2, 6, vec(12))
	if !n.republishFinal(ctx) || n.fin.model.ReleasedBy != p2.String() || n.fin.model.Epoch != 6 {
		t.Fatalf("republication not superseded by a higher final: %+v", n.fin.model)
	}
}

// TestFinalPushedDirectly: the releaser's direct push of the final model (for a member
// whose control-plane mesh is not formed) reaches the member's loop with the stream's
// authenticated sender; oversized, malformed, foreign and non-final pushes are ignored.
func TestFinalPushedDirectly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const hops = 20
	sh := shards(t, 2)
	nodes := staticCluster(t, ctx, "push", sh, hops, 0, []string{"", ""})
	recv, send := nodes[0], nodes[1]
	fixMembers(t, recv, []peer.ID{recv.ID(), send.ID()})
	z := make([]float64, sh[0].Cols)
	for i := range z {
		z[i] = 0.25 * float64(i)
	}
	good := ctlMsg{Type: "final", Run: "push", Hash: recv.hash, Hop: hops, Epoch: 2, Model: z,
		Cert: certFor(t, recv, 0, "push", 2, hops, z, send.ID())}
	send.pushFinal(ctx, recv.ID(), marshal(good))
	select {
	case f := <-recv.fin.in:
		if f.from != send.ID() || f.m.Epoch != 2 || len(f.m.Model) != len(z) || f.m.Model[3] != z[3] {
			t.Fatalf("pushed final arrived as %+v from %s", f.m, f.from)
		}
		if ok, err := recv.acceptFinal(f); err != nil || !ok {
			t.Fatalf("pushed final not kept: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("pushed final never reached the loop")
	}
	big := make([]byte, maxControl+10)
	for i := range big {
		big[i] = ' '
	}
	foreign := good
	foreign.Run = "other"
	notFinal := good
	notFinal.Type = "start"
	for name, raw := range map[string][]byte{
		"oversized": big, "malformed": []byte("{not json"), "foreign run": marshal(foreign), "not a final": marshal(notFinal),
	} {
		send.pushFinal(ctx, recv.ID(), raw)
		select {
		case f := <-recv.fin.in:
			t.Fatalf("%s push reached the loop: %+v", name, f.m)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
