package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/rs/zerolog"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/node/wire"
	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/walk"
)

// attackRig is one real node (the victim, member 0) and two raw libp2p hosts that are
// members 1 (the attacker) and 2 (an honest member, the origin of the walk, whose key the
// test uses to sign the hand-offs it would have made). Both raw hosts ack every hand-off
// the victim makes to them and keep the frames.
type attackRig struct {
	ctx         context.Context
	v           *Node
	atk, honest host.Host
	dim         int
	run         string
	got         chan []byte // frames the victim handed to a raw host
	dir         string
	runErr      chan error
	runModel    chan *Model
	cfg         Config
	ran         chan struct{} // closed when the victim's Run returned
}

func newAttackRig(t *testing.T, run string, hops uint64) *attackRig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	sh := shards(t, 2)
	r := &attackRig{ctx: ctx, run: run, dim: sh[0].Cols, dir: t.TempDir(), got: make(chan []byte, 64),
		runErr: make(chan error, 1), runModel: make(chan *Model, 1)}
	vid, err := store.DataDirPeerID(r.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, hp := range []*host.Host{&r.atk, &r.honest} {
		h, err := libp2p.New(libp2p.ListenAddrStrings(loopback...))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		h.SetStreamHandler(wire.WalkProtocol(run), func(s network.Stream) {
			defer s.Close()
			for {
				b, err := wire.ReadFrame(s, 1<<24)
				if err != nil {
					return
				}
				select {
				case r.got <- b:
				default:
				}
				if _, err := s.Write([]byte{wire.AckOK}); err != nil {
					return
				}
			}
		})
		*hp = h
	}
	c := baseConfig(run, sh[0], hops)
	c.DataDir, c.Members, c.Holder, c.Weight = r.dir, []peer.ID{vid, r.atk.ID(), r.honest.ID()}, 2, 1
	c.Logger = zerolog.Nop()
	c.FinalWait = time.Second
	c.Heartbeat = time.Hour // the raw hosts send no heartbeats: nobody is declared down
	r.cfg = c
	r.startVictim(t)
	// Before the data directory is removed: stop the victim and wait until its run has
	// returned, so that nothing is still written into the directory.
	t.Cleanup(func() { r.v.Close(); <-r.ran })
	return r
}

// startVictim starts the victim node from r.cfg (its data directory) and runs it.
func (r *attackRig) startVictim(t *testing.T) {
	t.Helper()
	v, err := New(r.ctx, r.cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.v = v
	for _, h := range []host.Host{r.atk, r.honest} {
		if err := h.Connect(r.ctx, peer.AddrInfo{ID: v.ID(), Addrs: v.Host.Addrs()}); err != nil {
			t.Fatal(err)
		}
	}
	ran := make(chan struct{})
	r.ran = ran
	go func() {
		defer close(ran)
		m, err := v.Run(r.ctx)
		r.runModel <- m
		r.runErr <- err
	}()
}

// restartVictim stops the victim, waits until its run has returned, and starts it again
// from its data directory (the same identity).
func (r *attackRig) restartVictim(t *testing.T) {
	t.Helper()
	r.v.Close()
	<-r.ran
	<-r.runModel
	<-r.runErr
	r.startVictim(t)
}

// token returns a token of the run at (epoch, hop) with a recognisable z.
func (r *attackRig) token(epoch, hop uint64, mark float64) walk.Token {
	tok := walk.NewToken(r.run, 0, r.dim, consensus.Regularizer{}, 1)
	tok.Epoch, tok.Hop = epoch, hop
	for k := range tok.Z {
		tok.Z[k], tok.Zhat[k] = mark+float64(k), mark-float64(k)
	}
	return tok
}

// send writes one frame from h to the victim and returns the ack, waiting out wire.AckBusy
// (membership not fixed yet, or the victim busy with its own hand-off).
func (r *attackRig) send(t *testing.T, h host.Host, b []byte) byte {
	t.Helper()
	s, err := h.NewStream(r.ctx, r.v.ID(), wire.WalkProtocol(r.run))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.SetDeadline(time.Now().Add(20 * time.Second))
	for {
		if err := wire.WriteFrame(s, b); err != nil {
			t.Fatal(err)
		}
		var ack [1]byte
		if _, err := s.Read(ack[:]); err != nil {
			t.Fatal(err)
		}
		if ack[0] != wire.AckBusy {
			return ack[0]
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// idle waits until the victim holds no token (its hand-offs acked).
func (r *attackRig) idle(t *testing.T) {
	t.Helper()
	for i := 0; i < 1000; i++ {
		if !r.v.holding.Load() {
			time.Sleep(50 * time.Millisecond)
			if !r.v.holding.Load() {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the victim kept the token")
}

// TestHandoffForgeriesRefused: a member cannot jump the hop counter, forge or replay a
// signature, or vouch for itself; each forgery is refused with wire.AckReject before any
// update, and a correctly signed contiguous hand-off is then taken (the checks can pass).
func TestHandoffForgeriesRefused(t *testing.T) {
	const hops = 200 // K; MaxSelfHops(3) = 41
	r := newAttackRig(t, "forge", hops)
	atk, honest, vid := r.atk, r.honest, r.v.ID()
	prev := r.token(0, 3, 7) // the honest member's hand-off of hop 3 to the attacker
	ev := evidenceOf(t, honest, 2, prev, atk.ID())
	body := func(tok walk.Token) []byte { b, _ := wire.EncodeToken(nil, tok); return b }
	flip := func(b []byte, at int) []byte { c := slices.Clone(b); c[at] ^= 1; return c }
	bodyLen := len(body(r.token(0, 4, 1)))
	for _, c := range []struct {
		name  string
		frame []byte
	}{
		{"unsigned token (the first wire format)", body(r.token(0, 4, 1))},
		{"hop K without evidence, not the origin", signedFrame(t, atk, vid, r.token(0, hops, 1), nil)},
		{"hop K after a real hand-off of hop 3", signedFrame(t, atk, vid, r.token(0, hops, 1), ev)},
		{"hop 46 after hop 3 (42 hand-offs to itself)", signedFrame(t, atk, vid, r.token(0, 46, 1), ev)},
		{"evidence signed by the attacker itself", signedFrame(t, atk, vid, r.token(0, 4, 1), evidenceOf(t, atk, 1, prev, atk.ID()))},
		{"evidence naming the honest member, signed by the attacker", signedFrame(t, atk, vid, r.token(0, 4, 1), evidenceOf(t, atk, 2, prev, atk.ID()))},
		{"evidence of a hand-off to someone else", signedFrame(t, atk, vid, r.token(0, 4, 1), evidenceOf(t, honest, 2, prev, vid))},
		{"frame signed for another recipient", signedFrame(t, atk, honest.ID(), r.token(0, 4, 1), ev)},
		{"z changed after signing", flip(signedFrame(t, atk, vid, r.token(0, 4, 1), ev), wire.TokenHeader+len("forge")+3)},
		{"signature damaged", flip(signedFrame(t, atk, vid, r.token(0, 4, 1), ev), bodyLen+len(ev)+5)},
		{"evidence from a later epoch", signedFrame(t, atk, vid, r.token(0, 4, 1), evidenceOf(t, honest, 2, r.token(1, 3, 7), atk.ID()))},
	} {
		before := r.v.metrics.updatesValue()
		if code := r.send(t, atk, c.frame); code != wire.AckReject {
			t.Fatalf("%s: ack %d, want reject", c.name, code)
		}
		if r.v.metrics.updatesValue() != before {
			t.Fatalf("%s: the victim made an update", c.name)
		}
	}
	if got := r.v.Rejected("signature") + r.v.Rejected("malformed"); got != 11 {
		t.Fatalf("rejected{signature}+{malformed} = %v, want 11", got)
	}
	// The honest continuation of the real hand-off is taken and stepped.
	if code := r.send(t, atk, signedFrame(t, atk, vid, r.token(0, 4, 1), ev)); code != wire.AckOK {
		t.Fatalf("contiguous signed hand-off: ack %d, want ok", code)
	}
	r.idle(t)
	if r.v.metrics.updatesValue() < 1 {
		t.Fatal("the victim made no update on the accepted hand-off")
	}
	// Its own hand-off onwards is signed for its recipient and shows the attacker's
	// hand-off as evidence.
	select {
	case f := <-r.got:
		tok, err := wire.DecodeToken(f)
		if err != nil {
			t.Fatal(err)
		}
		c, err := wire.ParseCert(f[bodyLen:], true)
		if err != nil || !c.Ev.Present || c.Ev.Signer != 1 || c.Ev.Hop != 4 || tok.Hop < 5 {
			t.Fatalf("victim's hand-off: hop %d, evidence %+v, err %v", tok.Hop, c.Ev, err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the victim handed nothing on")
	}
}

// TestBudgetBurnRefused: a member that received one real hand-off re-sends its
// continuation to the same node under 100 rising epochs (each a fresh lineage by the
// fence's order); the node spends no second update on it.
func TestBudgetBurnRefused(t *testing.T) {
	r := newAttackRig(t, "burn", 200)
	atk, honest, vid := r.atk, r.honest, r.v.ID()
	ev := evidenceOf(t, honest, 2, r.token(0, 3, 7), atk.ID())
	if code := r.send(t, atk, signedFrame(t, atk, vid, r.token(0, 4, 1), ev)); code != wire.AckOK {
		t.Fatalf("first hand-off: ack %d, want ok", code)
	}
	r.idle(t)
	spent := r.v.metrics.updatesValue()
	ok := 0
	for e := uint64(1); e <= 100; e++ {
		if r.send(t, atk, signedFrame(t, atk, vid, r.token(e, 4, float64(e)), ev)) == wire.AckOK {
			ok++
		}
	}
	r.idle(t)
	if ok != 0 || r.v.metrics.updatesValue() != spent {
		t.Fatalf("%d of 100 re-sent tokens taken; updates %d -> %d", ok, spent, r.v.metrics.updatesValue())
	}
	if r.v.Rejected("evidence-reused") < 1 {
		t.Fatal("no re-send was refused for reusing its evidence")
	}
	// Epochs raised beyond what a new lineage may raise (walk.RaiseCap) or beyond the
	// plausible window also evicted the attacker; an honest member's real hand-off (it
	// received hop 9 from the attacker) is still taken.
	if r.v.Rejected("epoch")+r.v.Rejected("rewind") < 1 || r.v.Rejected("evicted") < 1 {
		t.Fatalf("rejected{epoch} = %v, {rewind} = %v, {evicted} = %v: the implausible epochs were not refused",
			r.v.Rejected("epoch"), r.v.Rejected("rewind"), r.v.Rejected("evicted"))
	}
	// The attack voids the victim's planned network figure (one verdict function): it
	// reports the local figure with the reason, not a planned figure that assumes one
	// uniform secret path.
	if b := r.v.plannedBound(r.v.metrics.updatesValue()); b.ConditionsHold || !strings.Contains(b.Note, "custody anomalies") {
		t.Errorf("victim's planned figure after the attack: hold %v, note %q", b.ConditionsHold, b.Note)
	}
	ev2 := evidenceOf(t, atk, 1, r.token(0, 9, 5), honest.ID())
	if code := r.send(t, honest, signedFrame(t, honest, vid, r.token(0, 10, 2), ev2)); code != wire.AckOK {
		t.Fatalf("next real hand-off: ack %d, want ok", code)
	}
}

// TestBudgetBurnAfterRestart: the record of evidences used survives a restart of the
// victim (it is part of the checkpoint). After the restart, an evidence used before buys
// one token of a later epoch (walk.EvidenceUse: the regeneration a member makes while
// the victim is down keeps that evidence, and refusing it could stall the run), so of
// the attacker's re-sends of the continuation of one real hand-off, under new epochs,
// the first costs one update, charged in the ledger, and the others are refused as
// reused evidence and cost nothing.
func TestBudgetBurnAfterRestart(t *testing.T) {
	r := newAttackRig(t, "burnrestart", 200)
	atk, honest, vid := r.atk, r.honest, r.v.ID()
	ev := evidenceOf(t, honest, 2, r.token(0, 3, 7), atk.ID())
	if code := r.send(t, atk, signedFrame(t, atk, vid, r.token(0, 4, 1), ev)); code != wire.AckOK {
		t.Fatalf("first hand-off: ack %d, want ok", code)
	}
	r.idle(t)
	spent := r.v.metrics.updatesValue()
	if spent != 1 {
		t.Fatalf("%d updates after one hand-off", spent)
	}
	r.restartVictim(t)
	for i := 0; i < 500 && r.v.metrics.updatesValue() != spent; i++ {
		time.Sleep(10 * time.Millisecond) // the checkpoint is restored when Run starts
	}
	if got := r.v.metrics.updatesValue(); got != spent {
		t.Fatalf("after the restart: %d updates, want %d", got, spent)
	}
	ok := 0
	for e := uint64(1); e <= 3; e++ {
		if r.send(t, atk, signedFrame(t, atk, vid, r.token(e, 4, float64(e)), ev)) == wire.AckOK {
			ok++
		}
		r.idle(t)
	}
	if ok != 1 || r.v.metrics.updatesValue() != spent+1 || r.v.Rejected("evidence-reused") != 2 {
		t.Fatalf("after the restart: %d of 3 re-sent tokens taken (want 1), updates %d -> %d (want +1), rejected{evidence-reused} %v (want 2)",
			ok, spent, r.v.metrics.updatesValue(), r.v.Rejected("evidence-reused"))
	}
	es, err := r.v.Store().Ledger()
	if err != nil {
		t.Fatal(err)
	}
	noisy := 0
	for _, e := range es {
		if e.Mechanism == privacy.MechGaussian {
			noisy++
		}
	}
	if noisy != int(spent)+1 {
		t.Fatalf("the victim's ledger has %d noisy updates, want %d", noisy, spent+1)
	}
}

// TestForgedFinalRefused: final models pushed by a member without evidence of holding
// hop K, with evidence it signed itself, or with a real hop-K signature over another
// model are refused; the final it really received (the honest member's signed hand-off
// of hop K) is kept and written to model.json.
func TestForgedFinalRefused(t *testing.T) {
	const k = 50
	r := newAttackRig(t, "final", k)
	atk, honest := r.atk, r.honest
	tok := r.token(0, k, 3)
	sig := func(h host.Host, tk walk.Token) []byte {
		s, err := h.Peerstore().PrivKey(h.ID()).Sign(sigMsg(r.run, 0, tk.Epoch, tk.Hop, handoffDigest(tk.Z, tk.Zhat), atk.ID()))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	zh := vecDigest(tok.Zhat)
	real := &FinalCert{Signer: 2, Epoch: 0, Hop: k, Digest: zh[:], Sig: sig(honest, tok)}
	other := r.token(0, k, 9)
	push := func(m ctlMsg) {
		t.Helper()
		m.Type, m.Run, m.Hash, m.Hop = "final", r.run, r.v.ConfigHash(), k
		if m.Model == nil {
			m.Model = tok.Z
		}
		s, err := atk.NewStream(r.ctx, r.v.ID(), wire.FinalProtocol(r.run))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(m)
		s.Write(b)
		s.CloseWrite()
		io.ReadAll(s)
		s.Close()
	}
	for i, c := range []struct {
		name string
		m    ctlMsg
	}{
		{"no evidence", ctlMsg{}},
		{"claims to be the origin", ctlMsg{Cert: &FinalCert{Signer: -1}}},
		{"signed by the releaser itself", ctlMsg{Cert: &FinalCert{Signer: 1, Hop: k, Digest: zh[:], Sig: sig(atk, tok)}}},
		{"real signature, another model", ctlMsg{Cert: real, Model: other.Z}},
		{"real signature, another epoch (2^62)", ctlMsg{Cert: real, Epoch: 1 << 62}},
		{"evidence at hop 3 (47 hops short)", ctlMsg{Cert: &FinalCert{Signer: 2, Hop: 3, Digest: zh[:], Sig: sig(honest, r.token(0, 3, 3))}}},
	} {
		push(c.m)
		refused := func() float64 {
			return r.v.metrics.labelled("dpadmm_control_rejected_total", "reason", "final without evidence")
		}
		for j := 0; j < 300 && refused() < float64(i+1); j++ {
			time.Sleep(10 * time.Millisecond)
		}
		if refused() != float64(i+1) {
			t.Fatalf("%s: not refused (%v refusals after %d pushes)", c.name, refused(), i+1)
		}
	}
	time.Sleep(time.Second) // past the end window a kept final would have been written
	if _, err := os.Stat(filepath.Join(r.dir, store.ModelFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("model.json written after forged finals only (%v)", err)
	}
	push(ctlMsg{Cert: real, By: atk.ID().String()})
	var m *Model
	select {
	case m = <-r.runModel:
	case <-time.After(30 * time.Second):
		t.Fatal("the real final model was not taken")
	}
	if err := <-r.runErr; err != nil {
		t.Fatal(err)
	}
	if m == nil || !slices.Equal(m.Model, tok.Z) || m.ReleasedBy != atk.ID().String() {
		t.Fatalf("kept model %+v, want the z of the real hop-K hand-off released by the attacker", m)
	}
}

// TestFinalLineageNamesColluders: two members that sign for each other hand the victim
// hop K (the attacker's signed hand-off of hop K-1 to its colluder shown as evidence).
// The victim releases the final model, but its model.json names the lineage that produced
// it, the attacker and its colluder, and says that the attacker misbehaved here (an epoch
// jump it refused); the published certificate carries the previous hand-off, which every
// member checks (a damaged one is refused).
func TestFinalLineageNamesColluders(t *testing.T) {
	const k = 40
	r := newAttackRig(t, "lineage", k)
	atk, mate, vid := r.atk, r.honest, r.v.ID()
	jump := signedFrame(t, atk, vid, r.token(1000, 4, 1), evidenceOf(t, mate, 2, r.token(0, 3, 7), atk.ID()))
	if code := r.send(t, atk, jump); code != wire.AckReject {
		t.Fatalf("epoch jump: ack %d, want reject", code)
	}
	prev := r.token(0, k-1, 4)
	ev := evidenceOf(t, atk, 1, prev, mate.ID()) // the attacker "handed" its colluder hop K-1
	if code := r.send(t, mate, signedFrame(t, mate, vid, r.token(0, k, 5), ev)); code != wire.AckOK {
		t.Fatalf("hop K from the colluder: ack %d, want ok", code)
	}
	var m *Model
	select {
	case m = <-r.runModel:
		if err := <-r.runErr; err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the victim did not release the final model")
	}
	if m.ReleasedBy != vid.String() || len(m.Lineage) != 2 {
		t.Fatalf("released by %s, lineage %+v", tail(m.ReleasedBy), m.Lineage)
	}
	want := []LineageLink{{From: atk.ID().String(), To: mate.ID().String(), Hop: k - 1}, {From: mate.ID().String(), To: vid.String(), Hop: k}}
	if !reflect.DeepEqual(m.Lineage, want) {
		t.Fatalf("lineage %+v, want %+v", m.Lineage, want)
	}
	if !strings.Contains(m.LineageNote, shortID(atk.ID())) || strings.Contains(m.LineageNote, shortID(mate.ID())) {
		t.Fatalf("lineage note %q", m.LineageNote)
	}
	b, err := os.ReadFile(filepath.Join(r.dir, store.ModelFile))
	if err != nil || !bytes.Contains(b, []byte(`"lineage"`)) || !bytes.Contains(b, []byte(`"prev"`)) {
		t.Fatalf("model.json lacks the lineage or the previous hand-off (%v)", err)
	}
	// Every member checks the previous hand-off: a damaged signature is refused.
	r.v.mu.Lock()
	members, origin := r.v.members, r.v.origin
	r.v.mu.Unlock()
	good := *m.Cert
	if err := verifyFinal(r.run, k, 0, m.Model, &good, vid, members, origin, r.v.Host.Peerstore()); err != nil {
		t.Fatalf("the published certificate does not check: %v", err)
	}
	bad := good
	p := *good.Prev
	p.Sig = slices.Clone(p.Sig)
	p.Sig[3] ^= 1
	bad.Prev = &p
	if err := verifyFinal(r.run, k, 0, m.Model, &bad, vid, members, origin, r.v.Host.Peerstore()); err == nil {
		t.Fatal("a damaged previous hand-off was accepted")
	}
}
