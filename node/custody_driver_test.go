package node

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/rs/zerolog"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/node/wire"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/walk"
)

// fixMembers fixes n's membership as Run does before the walk (setMembers: the custody
// machine, restored from the data directory), without running the walk.
func fixMembers(t *testing.T, n *Node, ms []peer.ID) {
	t.Helper()
	if err := n.setMembers(ms, 1); err != nil {
		t.Fatal(err)
	}
}

// custodyRecord is one input a node gave its custody machine and the Readies it applied.
type custodyRecord struct {
	in  CustodyInput
	rds []walk.CustodyReady
}

type sentToken struct {
	to  peer.ID
	raw []byte
}

// TestNodeCustodyIsTheMachine: the node has no custody rule of its own. Five nodes run on
// loopback; the holder of hop 8 stores and acks it and is closed for good, and the four
// others regenerate the token and finish. Every input each node gave its walk.Custody
// (hand-offs, hand-off results, releases, liveness, ticks of its clock, final models) is
// recorded in its loop; replayed into a fresh walk.Custody built from the same
// configuration and seeds, the inputs must give exactly the Readies the node applied.
// And what the node did is those Readies: its ledger file holds exactly their entries,
// in order, and every token frame it wrote (to whom, which token, which evidence) is a
// token message of them, each of them written at least once. And the inputs are the
// wire's (checkWireInputs): every token input is a frame its sender wrote, with that
// frame's signature as evidence, and every ack and release input its sender's machine
// sent.
func TestNodeCustodyIsTheMachine(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	const nn, hops, pause = 5, 30, 8
	sh := shards(t, nn)
	dirs := make([]string, nn)
	ids := make([]peer.ID, nn)
	for i := range dirs {
		dirs[i] = t.TempDir()
		ids[i], _ = store.DataDirPeerID(dirs[i])
	}
	total := 0
	for _, s := range sh {
		total += s.Rows
	}
	var mu sync.Mutex
	records := make([][]custodyRecord, nn)
	frames := make([][]sentToken, nn)
	nodes := make([]*Node, nn)
	for i := range nodes {
		c := baseConfig("trace", sh[i], hops)
		c.DataDir, c.Members, c.Holder = dirs[i], ids, 0
		c.Weight = float64(nn) * float64(sh[i].Rows) / float64(total)
		c.Rand, c.Noise, c.Sources = nil, nil, testSources(33)
		c.AckTimeout, c.FinalWait = 3*time.Second, 3*time.Second
		c.Heartbeat, c.HeartbeatMisses = 100*time.Millisecond, 20
		c.PauseAtHop, c.DebugStatus = pause, true
		c.Logger = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel).With().Int("i", i).Logger()
		nd, err := New(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		nodes[i] = nd
		nd.custodyTrace = func(in CustodyInput, rds []walk.CustodyReady) {
			in.Msg.Token = cloneTok(in.Msg.Token)
			in.Token = cloneTok(in.Token)
			mu.Lock()
			records[i] = append(records[i], custodyRecord{in: in, rds: rds})
			mu.Unlock()
		}
		nd.sendHook = func(to peer.ID, raw []byte) {
			mu.Lock()
			frames[i] = append(frames[i], sentToken{to: to, raw: slices.Clone(raw)})
			mu.Unlock()
		}
	}
	connectAll(t, ctx, nodes)
	res, killed := runUntilPaused(t, ctx, nodes)
	waitAcked(t, ctx, nodes, killed)
	nodes[killed].Close()
	<-res[killed]
	for i := range nodes {
		if i == killed {
			continue
		}
		if r := <-res[i]; r.err != nil {
			t.Fatalf("node %d: %v", i, r.err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	all := make([][]walk.CustodyReady, nn)
	for i, nd := range nodes {
		all[i] = replayCustody(t, nd, sh[i], ids, records[i])
	}
	checkWireInputs(t, nodes, records, frames, all)
	regenerated := 0
	for i, nd := range nodes {
		if i == killed {
			continue
		}
		replayed := all[i]
		var ledger []privacy.Entry
		outbox := map[string]int{}
		for _, rd := range replayed {
			ledger = append(ledger, rd.Ledger...)
			for _, m := range rd.Outbox {
				if m.Kind == walk.CustodyToken {
					outbox[tokenKey(ids[m.To], m.Token, m.Evidence)]++
				}
			}
			for _, e := range rd.Events {
				if e.Kind == walk.CustodyRegenerated {
					regenerated++
				}
			}
		}
		es, err := nd.Store().Ledger()
		if err != nil {
			t.Fatal(err)
		}
		if len(es) != len(ledger) {
			t.Fatalf("node %d: %d ledger lines, the machine's Readies hold %d entries", i, len(es), len(ledger))
		}
		for k := range es {
			e, w := es[k], ledger[k]
			e.Seq, e.Prev, w.Seq, w.Prev = 0, "", 0, ""
			if !reflect.DeepEqual(e, w) {
				t.Fatalf("node %d: ledger line %d is %+v, the machine's entry %+v", i, k, e, w)
			}
		}
		wrote := map[string]int{}
		for _, f := range frames[i] {
			tok, err := wire.DecodeToken(f.raw)
			if err != nil {
				t.Fatal(err)
			}
			k := tokenKey(f.to, tok, heldEvidence(f.raw))
			wrote[k]++
			if wrote[k] > outbox[k] {
				t.Fatalf("node %d wrote %s %d times, the machine sent it %d times", i, k, wrote[k], outbox[k])
			}
		}
		for k := range outbox {
			// A hand-off to the closed member fails at the dial once its address is in
			// backoff, before a frame exists; every other one is written.
			if wrote[k] == 0 && !strings.HasSuffix(k, " to "+shortID(ids[killed])) {
				t.Errorf("node %d: the machine's %s was never written", i, k)
			}
		}
		t.Logf("node %d: %d inputs, %d Readies, %d ledger entries, %d frames for %d token messages", i, len(records[i]), len(replayed), len(es), len(frames[i]), len(outbox))
	}
	if regenerated == 0 {
		t.Fatal("no regeneration: the crash was not recovered by the custody rules")
	}
}

// checkWireInputs: the node maps the wire to its machine's inputs and invents none. Every
// token a node gave its machine was written to it, as a frame, by the member it names as
// sender (the same token and evidence); every ack and release it gave its machine was
// sent to it by that member's machine (replayed: its Readies). The exceptions are the
// outcomes of a node's own hand-offs that no machine decided: a transport failure
// (RefuseFailed), a frame refused before the machine (RefuseInvalid), and a busy answer
// of a receiver that had no machine running (not started, or its loop had ended).
func checkWireInputs(t *testing.T, nodes []*Node, records [][]custodyRecord, frames [][]sentToken, replayed [][]walk.CustodyReady) {
	t.Helper()
	ids := make([]peer.ID, len(nodes))
	for i, nd := range nodes {
		ids[i] = nd.ID()
	}
	msgKey := func(m walk.CustodyMsg) string {
		return fmt.Sprintf("%d->%d kind %d (epoch %d, hop %d) stale %v duplicate %v refused %v dist %d retire %v",
			m.From, m.To, m.Kind, m.Epoch, m.Hop, m.Stale, m.Duplicate, m.Refused, m.Dist, m.Retire)
	}
	// A frame is keyed by recipient, sender, token and the sender's signature on it; the
	// receiver's machine gets that hand-off as its evidence (signer, epoch, hop, signature).
	frameKey := func(to peer.ID, from int, tok walk.Token, sig []byte) string {
		return fmt.Sprintf("(epoch %d, hop %d, digest %x) %d->%s signature %x", tok.Epoch, tok.Hop, walk.TokenDigest(tok), from, shortID(to), sig)
	}
	wrote := map[string]bool{}
	for i, fs := range frames {
		for _, f := range fs {
			tok, err := wire.DecodeToken(f.raw)
			if err != nil {
				t.Fatal(err)
			}
			// The hook sees the token as held; the frame written is it signed for the
			// recipient (Ed25519 signatures are deterministic: the same bytes).
			fr, err := signFrame(nodes[i].key, f.raw, f.to)
			if err != nil {
				t.Fatal(err)
			}
			c, err := wire.ParseCert(fr[wire.BodyLen(fr):], true)
			if err != nil {
				t.Fatal(err)
			}
			wrote[frameKey(f.to, i, tok, c.Sig)] = true
		}
	}
	sent := map[string]bool{}
	for _, rds := range replayed {
		for _, rd := range rds {
			for _, m := range rd.Outbox {
				if m.Kind != walk.CustodyToken {
					sent[msgKey(m)] = true
				}
			}
		}
	}
	var tokens, msgs, outcomes int
	for j, recs := range records {
		for k, r := range recs {
			if r.in.Kind != "step" {
				continue
			}
			m := r.in.Msg
			switch {
			case m.Kind == walk.CustodyToken:
				c, err := wire.ParseCert(m.Evidence, false)
				switch {
				case err != nil:
					t.Errorf("node %d, input %d: token with evidence that does not parse: %v", j, k, err)
				case !c.Ev.Present || c.Ev.Signer != m.From || c.Ev.Epoch != m.Token.Epoch || c.Ev.Hop != m.Token.Hop:
					t.Errorf("node %d, input %d: token (epoch %d, hop %d) from %d with the evidence of %+v", j, k, m.Token.Epoch, m.Token.Hop, m.From, c.Ev)
				case !wrote[frameKey(ids[j], m.From, m.Token, c.EvSig)]:
					t.Errorf("node %d, input %d: token %s that no member wrote to it", j, k, frameKey(ids[j], m.From, m.Token, c.EvSig))
				}
				tokens++
			case m.Kind == walk.CustodyAck && (m.Refused == walk.RefuseFailed || m.Refused == walk.RefuseInvalid ||
				m.Refused == walk.RefuseBusy && !sent[msgKey(m)]):
				outcomes++
			default:
				if !sent[msgKey(m)] {
					t.Errorf("node %d, input %d: %s that no machine sent", j, k, msgKey(m))
				}
				msgs++
			}
		}
	}
	if tokens == 0 || msgs == 0 {
		t.Fatalf("%d token and %d ack or release inputs: the trace holds no hand-off", tokens, msgs)
	}
	t.Logf("wire: %d token inputs, each a frame its sender wrote; %d acks and releases, each its sender's machine's; %d transport outcomes", tokens, msgs, outcomes)
}

func cloneTok(t walk.Token) walk.Token {
	t.Z, t.Zhat = slices.Clone(t.Z), slices.Clone(t.Zhat)
	return t
}

func tokenKey(to peer.ID, t walk.Token, ev []byte) string {
	if len(ev) == 0 {
		ev = []byte{wire.EvNone}
	}
	return fmt.Sprintf("(epoch %d, hop %d, digest %x, evidence %x) to %s", t.Epoch, t.Hop, walk.TokenDigest(t), ev, shortID(to))
}

// replayCustody builds node nd's custody machine again, as setMembers did, from the
// same configuration and seeds, gives it the recorded inputs and checks that every input
// gives the Readies the node applied. It returns the replayed Readies.
func replayCustody(t *testing.T, nd *Node, d *consensus.Dataset, ms []peer.ID, recs []custodyRecord) []walk.CustodyReady {
	t.Helper()
	c := nd.cfg
	idx := nd.index
	names := make([]string, len(ms))
	for i, p := range ms {
		names[i] = p.String()
	}
	hop, noise := c.Sources(idx)
	wc := walk.Config{Node: idx, Nodes: len(ms), Gamma: c.Gamma, Lambda: c.Lambda, Clip: c.Clip, Sigma: c.Sigma,
		Reg: c.Problem.Reg, Rand: rand.New(hop), MaxUpdates: c.MaxUpdates, Run: c.Run, Names: names, Step: c.Step,
		Noise: privacy.NewNoiseFromRand(rand.New(noise))}
	ll, err := consensus.NewLocalLoss(d, c.Problem.Loss, c.Weight)
	if err != nil {
		t.Fatal(err)
	}
	m, err := walk.NewCustody(wc, ll, d.Cols, nd.custodyConfig(nd.walk.custSeed))
	if err != nil {
		t.Fatal(err)
	}
	var out []walk.CustodyReady
	for k, r := range recs {
		in := r.in
		switch in.Kind {
		case "start":
			m.Start(in.Token)
		case "handover":
			m.Handover(in.Peer, in.Token)
		case "step":
			m.Step(in.Msg)
		case "down":
			m.PeerDown(in.Peer)
		case "up":
			m.PeerUp(in.Peer)
		case "tick":
			m.CatchUp(in.Tick)
		case "stop":
			m.Stop()
		case "final":
			m.StepFinal(in.Peer, in.Epoch, in.Hop)
		default:
			t.Fatalf("node %d: input %d of kind %q", idx, k, in.Kind)
		}
		if in.Batched {
			if len(r.rds) != 0 {
				t.Fatalf("node %d, input %d (%s): Readies applied inside a batch", idx, k, in.Kind)
			}
			continue
		}
		var got []walk.CustodyReady
		for m.HasReady() {
			rd := m.Ready()
			got = append(got, copyReady(rd))
			m.Advance(rd)
		}
		if len(got) != len(r.rds) {
			t.Fatalf("node %d, input %d (%s): the machine gives %d Readies, the node applied %d", idx, k, in.Kind, len(got), len(r.rds))
		}
		for j := range got {
			if why := readyDiff(got[j], r.rds[j]); why != "" {
				t.Fatalf("node %d, input %d (%s), Ready %d: %s", idx, k, in.Kind, j, why)
			}
		}
		out = append(out, got...)
	}
	return out
}

// readyDiff describes how two Readies differ ("" when they are equal).
func readyDiff(a, b walk.CustodyReady) string {
	if !reflect.DeepEqual(a.Ledger, b.Ledger) && !(len(a.Ledger) == 0 && len(b.Ledger) == 0) {
		return fmt.Sprintf("ledger %+v, node %+v", a.Ledger, b.Ledger)
	}
	if len(a.Outbox) != len(b.Outbox) {
		return fmt.Sprintf("%d messages, node %d", len(a.Outbox), len(b.Outbox))
	}
	for k := range a.Outbox {
		x, y := a.Outbox[k], b.Outbox[k]
		dx, dy := walk.TokenDigest(x.Token), walk.TokenDigest(y.Token)
		x.Token.Z, x.Token.Zhat, y.Token.Z, y.Token.Zhat = nil, nil, nil, nil
		if !reflect.DeepEqual(x, y) || dx != dy {
			return fmt.Sprintf("message %d: %+v, node %+v", k, a.Outbox[k], b.Outbox[k])
		}
	}
	if len(a.Events) != len(b.Events) {
		return fmt.Sprintf("%d events, node %d", len(a.Events), len(b.Events))
	}
	for k := range a.Events {
		x, y := a.Events[k], b.Events[k]
		if fmt.Sprint(x.Err) != fmt.Sprint(y.Err) {
			return fmt.Sprintf("event %d: %+v, node %+v", k, x, y)
		}
		x.Err, y.Err = nil, nil
		if x != y {
			return fmt.Sprintf("event %d: %+v, node %+v", k, x, y)
		}
	}
	if a.Persist != b.Persist || a.Done != b.Done || (a.Held == nil) != (b.Held == nil) || (a.Final == nil) != (b.Final == nil) || (a.State == nil) != (b.State == nil) {
		return fmt.Sprintf("persist %v/%v, done %v/%v, held %v/%v, final %v/%v, state %v/%v", a.Persist, b.Persist, a.Done, b.Done,
			a.Held != nil, b.Held != nil, a.Final != nil, b.Final != nil, a.State != nil, b.State != nil)
	}
	if a.Held != nil && (walk.TokenDigest(a.Held.Token) != walk.TokenDigest(b.Held.Token) || a.Held.Token.Hop != b.Held.Token.Hop ||
		!slices.Equal(a.Held.Evidence, b.Held.Evidence) || a.Held.Pred != b.Held.Pred) {
		return "held tokens differ"
	}
	if a.Final != nil && (walk.TokenDigest(a.Final.Token) != walk.TokenDigest(b.Final.Token) || a.Final.From != b.Final.From) {
		return "finals differ"
	}
	if a.State != nil && (a.State.Updates != b.State.Updates || !sameBits(a.State.U, b.State.U)) {
		return "walk states differ"
	}
	return ""
}
