package walk

import "testing"

// FuzzCustodyRewinder is the rewind rule's property: one hostile member among four (member
// 3) hands the walk on as it should, and, whenever the script says so, hands an honest
// member a token under a new epoch that goes back to a hop it received earlier (the
// evidence of that hand-off shown), carrying its own vector; the script also orders the
// deliveries. However it plays, the walk of K hops ends, its hops stay within the
// documented bound K + (n-1)(2 + d + 2)(Depth + RewindSlack) (d = 0 members down; every
// hop of every lineage counts, the overlapping ones included), and the final model is not
// the member's vector (honest updates follow its last accepted lineage).
func FuzzCustodyRewinder(f *testing.F) {
	f.Add(uint64(1), []byte{0, 0, 0, 4, 0, 0, 8, 1, 0, 12, 0, 0, 4, 2, 0})
	f.Add(uint64(7), []byte{4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4})
	f.Add(uint64(3), []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17})
	f.Fuzz(func(t *testing.T, seed uint64, script []byte) {
		if len(script) == 0 || len(script) > 256 {
			return
		}
		const n, k, bad = 4, 60, 3
		cc := testCustodyConfig()
		cc.Hops, cc.FallbackTimeout = k, 100
		w := newCustodyNet(t, n, cc)
		vec := []float64{7.77, -7.77, 7.77}
		var seen []CustodyMsg // hand-offs member 3 received from the others
		w.start(int(seed % 3))
		// An inflating member raises its epoch with every try (up to the epoch window above
		// a node's); a plain one takes the next epoch of the run.
		inflate, epoch := seed&8 != 0, uint64(0)
		idle := 0
		for step, s := 0, 0; step < 50000; step++ {
			done := false
			for i := range w.nodes {
				done = done || w.nodes[i].Done()
			}
			if done {
				break
			}
			op := script[s%len(script)]
			s++
			if op%4 == 0 && len(seen) > 0 && seen[int(op/4)%len(seen)].Hop+1 < k {
				// A rewind: a hop it received, one further, under a new epoch, to an honest
				// member, with the evidence of that hand-off.
				old := seen[int(op/4)%len(seen)] // below hop K-1: a hop the walk can go on from
				if inflate {
					epoch++ // one above its last try, whatever was taken: up to the window
				} else {
					epoch = 0
					for i := range w.nodes {
						epoch = max(epoch, w.nodes[i].Epoch())
					}
					epoch++ // the lowest epoch that opens a new lineage everywhere
				}
				to := int(op/16) % 3
				tok := cloneToken(old.Token)
				tok.Epoch, tok.Hop = epoch, old.Hop+1
				copy(tok.Z, vec)
				shown := Evidence{Present: true, Signer: old.From, Epoch: old.Epoch, Hop: old.Hop}
				m := CustodyMsg{Kind: CustodyToken, From: bad, To: to, Epoch: tok.Epoch, Hop: tok.Hop, Token: tok, Shown: &shown}
				if err := w.nodes[to].Step(m); err != nil {
					t.Fatal(err)
				}
				w.collect(to)
				w.wire = removeTo(w.wire, bad, to) // its ack to the attacker: nothing to deliver
				// The network goes on meanwhile: one delivery follows.
			}
			if len(w.wire) == 0 {
				// Nothing in flight: time passes (ack timeouts, the fallback).
				if idle++; idle > 40*cc.FallbackTimeout {
					t.Fatalf("the walk stopped at step %d without a final model", step)
				}
				for i := range w.nodes {
					w.tick(i)
				}
				continue
			}
			idle = 0
			if step%4 == 3 {
				for i := range w.nodes { // time passes as messages flow
					w.tick(i)
				}
			}
			m := w.wire[0]
			w.wire = w.wire[1:]
			if m.To == bad && m.Kind == CustodyToken {
				seen = append(seen, CustodyMsg{From: m.From, Epoch: m.Epoch, Hop: m.Hop, Token: cloneToken(m.Token)})
			}
			w.deliver(m)
		}
		hops, fin := 0, (*CustodyFinal)(nil)
		for i := range w.nodes {
			hops += w.count(i, CustodyWalk)
		}
		for i := range w.nodes {
			if w.nodes[i].Done() {
				fin = w.final[i]
			}
		}
		if fin == nil {
			var hi []uint64
			for i := range w.nodes {
				hi = append(hi, w.nodes[i].maxHop, w.nodes[i].Epoch(), uint64(w.count(i, CustodyRefused)), uint64(w.count(i, CustodyAccepted)))
			}
			t.Fatalf("the walk did not end: %d hops; per node max hop, epoch, refusals, accepted: %v", hops, hi)
		}
		bound := k + (n-1)*(2+0+2)*(cc.Depth+RewindSlack)
		if hops > bound {
			t.Fatalf("%d hops for K = %d: above the bound %d", hops, k, bound)
		}
		if fin.Token.Z[0] == vec[0] && fin.Token.Z[1] == vec[1] {
			t.Fatal("the final model is the hostile member's vector")
		}
	})
}

// removeTo drops the messages from `from` to `to` on the wire.
func removeTo(wire []CustodyMsg, to, from int) []CustodyMsg {
	out := wire[:0]
	for _, m := range wire {
		if !(m.To == to && m.From == from) {
			out = append(out, m)
		}
	}
	return out
}
