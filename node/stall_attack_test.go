package node

import (
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/rs/zerolog"

	"github.com/dpadmm/dpadmm/node/store"
	"github.com/dpadmm/dpadmm/node/wire"
	"github.com/dpadmm/dpadmm/walk"
)

// rewinder is a hostile member of a static walk run, a raw libp2p host built from the
// project's wire format: it acks every hand-off, hands the token on to a random honest
// member (one hop further, its vectors unchanged, the hand-off it received as evidence),
// pushes the final model with its certificate when it receives hop K, and, whenever it
// receives a token near hop K, hands every honest member a token under a new epoch that
// goes back to a hop it received earlier, carrying its own vector. Against members 1 and
// 2 it stops after two refusals (a third evicts it); member 0 it attacks until evicted
// there, and then hands the token on to the others only.
type rewinder struct {
	t       *testing.T
	ctx     context.Context
	h       host.Host
	run     string
	hash    string
	k       uint64
	honest  []peer.ID // members 0..len-1
	idx     int       // its member index
	rnd     *rand.Rand
	vec     []float64
	in      chan rewinderIn
	history []rewinderIn // hand-offs received, oldest first
	epoch   uint64       // highest epoch seen or used
	refused map[peer.ID]int
	shown   map[peer.ID]map[uint64]bool // hops of the hand-offs shown to each member
	evicted map[peer.ID]bool            // members that answered reject (evicted it)
	mu      sync.Mutex
	tries   int // rewinds sent
	taken   int // rewinds acked ok
}

type rewinderIn struct {
	tok  walk.Token
	ev   []byte // the evidence this hand-off gives its receiver's next hand-off
	from int
	sig  []byte
}

func (a *rewinder) serve(s network.Stream) {
	defer s.Close()
	from := slices.Index(a.honest, s.Conn().RemotePeer())
	for {
		b, err := wire.ReadFrame(s, 1<<24)
		if err != nil {
			return
		}
		tok, err := wire.DecodeToken(b)
		if err != nil || from < 0 {
			s.Write([]byte{wire.AckReject})
			continue
		}
		c, err := wire.ParseCert(b[wire.BodyLen(b):], true)
		if err != nil {
			s.Write([]byte{wire.AckReject})
			continue
		}
		if _, err := s.Write([]byte{wire.AckOK}); err != nil {
			return
		}
		a.in <- rewinderIn{tok: tok, ev: appendEvidence(nil, from, tok, c.Sig), from: from, sig: c.Sig}
	}
}

// send hands frame b to p and returns the ack (busy answers waited out).
func (a *rewinder) send(p peer.ID, b []byte) byte {
	s, err := a.h.NewStream(a.ctx, p, wire.WalkProtocol(a.run))
	if err != nil {
		return wire.AckReject
	}
	defer s.Close()
	s.SetDeadline(time.Now().Add(10 * time.Second))
	for {
		if err := wire.WriteFrame(s, b); err != nil {
			return wire.AckReject
		}
		var ack [1]byte
		if _, err := io.ReadFull(s, ack[:]); err != nil {
			return wire.AckReject
		}
		if ack[0] != wire.AckBusy {
			return ack[0]
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (a *rewinder) loop() {
	for {
		select {
		case <-a.ctx.Done():
			return
		case m := <-a.in:
			a.history = append(a.history, m)
			a.epoch = max(a.epoch, m.tok.Epoch)
			if m.tok.Hop >= a.k {
				a.pushFinal(m)
				continue
			}
			a.forward(m)
			if 2*m.tok.Hop >= a.k {
				a.rewind(m.tok.Hop)
			}
		}
	}
}

// forward hands m's token on, one hop further, to a random honest member that takes it.
func (a *rewinder) forward(m rewinderIn) {
	next := m.tok
	next.Hop++
	next.Z, next.Zhat = slices.Clone(m.tok.Z), slices.Clone(m.tok.Zhat)
	for _, j := range a.rnd.Perm(len(a.honest)) {
		body, err := wire.EncodeToken(nil, next)
		if err != nil {
			a.t.Error(err)
			return
		}
		f, err := signFrame(a.h.Peerstore().PrivKey(a.h.ID()), hold(body, m.ev), a.honest[j])
		if err != nil {
			a.t.Error(err)
			return
		}
		if a.send(a.honest[j], f) == wire.AckOK {
			return
		}
	}
}

// rewind hands members 1 and 2 one token each under a new epoch at the latest hop it
// received before hop and has not shown them yet, carrying its own vector, until each
// refused two; member 0 gets such tokens in a burst, with ever older hand-offs, until it
// answers reject (evicted there).
func (a *rewinder) rewind(hop uint64) {
	for i, p := range a.honest {
		for try := 0; ; try++ {
			if i != 0 && (try > 0 || a.refused[p] >= 2) || i == 0 && (a.evicted[p] || try >= 8) {
				break
			}
			var old *rewinderIn
			for x := len(a.history) - 1; x >= 0; x-- {
				if h := a.history[x]; h.tok.Hop+1 < hop && !a.shown[p][h.tok.Hop] {
					old = &a.history[x]
					break
				}
			}
			if old == nil {
				break
			}
			if a.shown[p] == nil {
				a.shown[p] = map[uint64]bool{}
			}
			a.shown[p][old.tok.Hop] = true
			a.epoch++
			tok := old.tok
			tok.Epoch, tok.Hop = a.epoch, old.tok.Hop+1
			tok.Z, tok.Zhat = slices.Clone(a.vec), slices.Clone(old.tok.Zhat)
			body, err := wire.EncodeToken(nil, tok)
			if err != nil {
				a.t.Error(err)
				return
			}
			f, err := signFrame(a.h.Peerstore().PrivKey(a.h.ID()), hold(body, old.ev), p)
			if err != nil {
				a.t.Error(err)
				return
			}
			code := a.send(p, f)
			a.mu.Lock()
			a.tries++
			switch code {
			case wire.AckOK:
				a.taken++
			case wire.AckReject:
				a.evicted[p] = true
			default:
				a.refused[p]++
			}
			a.mu.Unlock()
		}
	}
}

// pushFinal pushes the final model of the token of hop K it received, with its real
// certificate, to every honest member (as the releaser).
func (a *rewinder) pushFinal(m rewinderIn) {
	zh := vecDigest(m.tok.Zhat)
	msg := ctlMsg{Type: "final", Run: a.run, Hash: a.hash, Hop: m.tok.Hop, Epoch: m.tok.Epoch, Model: m.tok.Z,
		Cert: &FinalCert{Signer: m.from, Epoch: m.tok.Epoch, Hop: m.tok.Hop, Digest: zh[:], Sig: m.sig}, By: a.h.ID().String()}
	b, _ := json.Marshal(msg)
	for _, p := range a.honest {
		s, err := a.h.NewStream(a.ctx, p, wire.FinalProtocol(a.run))
		if err != nil {
			continue
		}
		s.Write(b)
		s.CloseWrite()
		io.ReadAll(s)
		s.Close()
	}
}

// TestStallAttackBounded: one hostile member among four, on real hosts on loopback,
// hands the honest members new lineages going back to hops it received earlier, carrying
// its own vector, whenever it holds a token past K/2 (the stall of a run that never
// ended, whose final model was the attacker's vector); member 0 it attacks until evicted
// there. The run ends; the honest members' releases stay within the documented bound
// K + (n-1)(2 + d + 2)(Depth + RewindSlack) (docs/fault-tolerance.md, d = 0 members
// down); every honest member writes the same final model of hop K, which is not the
// attacker's vector; the refusals and the eviction name the attacker in the logs. Member
// 0 hands it no token once it evicted it, and when the attacker itself releases the final
// model (it received hop K from an honest member), member 0, which refuses the
// attacker's own push, learns it from the others after its slow fallback.
func TestStallAttackBounded(t *testing.T) {
	const k = 120
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sh := shards(t, 3)
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	atkHost, err := libp2p.New(libp2p.ListenAddrStrings(loopback...))
	if err != nil {
		t.Fatal(err)
	}
	defer atkHost.Close()
	ids := make([]peer.ID, 4)
	for i, d := range dirs {
		if ids[i], err = store.DataDirPeerID(d); err != nil {
			t.Fatal(err)
		}
	}
	ids[3] = atkHost.ID()
	logs := make([]*syncBuffer, 3)
	t.Cleanup(func() {
		if t.Failed() {
			for i, l := range logs {
				t.Logf("node %d:\n%s", i, l.String())
			}
		}
	})
	nodes := make([]*Node, 3)
	for i := range nodes {
		c := baseConfig("stall", sh[i], k)
		c.DataDir, c.Members, c.Holder, c.Weight = dirs[i], ids, 0, 1
		c.Heartbeat = time.Hour // the raw host sends no heartbeats: nobody is declared down
		c.FinalWait = time.Second
		// A token the attacker holds where every member refuses its hand-offs is recovered
		// by the slow fallback.
		c.AckTimeout, c.FallbackTimeout = time.Second, 3*time.Second
		logs[i] = &syncBuffer{}
		c.Logger = zerolog.New(logs[i]).With().Timestamp().Logger().Level(zerolog.WarnLevel)
		nd, err := New(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		nodes[i] = nd
	}
	connectAll(t, ctx, nodes)
	for _, nd := range nodes {
		if err := atkHost.Connect(ctx, peer.AddrInfo{ID: nd.ID(), Addrs: nd.Host.Addrs()}); err != nil {
			t.Fatal(err)
		}
	}
	vec := make([]float64, sh[0].Cols)
	for i := range vec {
		vec[i] = 0.777
	}
	a := &rewinder{t: t, ctx: ctx, h: atkHost, run: "stall", hash: nodes[0].ConfigHash(), k: k, honest: ids[:3], idx: 3,
		rnd: rand.New(rand.NewPCG(3, 4)), vec: vec, in: make(chan rewinderIn, 64), refused: map[peer.ID]int{}, shown: map[peer.ID]map[uint64]bool{}, evicted: map[peer.ID]bool{}}
	atkHost.SetStreamHandler(wire.WalkProtocol("stall"), a.serve)
	// The attacker is on the control topic, as a member is.
	ps, err := pubsub.NewGossipSub(ctx, atkHost)
	if err != nil {
		t.Fatal(err)
	}
	topic, err := ps.Join(wire.ControlTopic("stall"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := topic.Subscribe(); err != nil {
		t.Fatal(err)
	}
	go a.loop()
	start := time.Now()
	models := runAll(t, ctx, nodes)
	took := time.Since(start)
	a.mu.Lock()
	tries, taken := a.tries, a.taken
	a.mu.Unlock()
	if tries == 0 {
		t.Fatal("the attacker never tried a rewind: the test does not exercise the rule")
	}
	const n, depth = 4, 8
	bound := k + (n-1)*(2+0+2)*(depth+walk.RewindSlack)
	releases := 0
	for i, nd := range nodes {
		releases += nd.Store().Entries()
		if !sameBits(models[i].Model, models[0].Model) || models[i].Hops != k {
			t.Fatalf("node %d: another final model (hop %d)", i, models[i].Hops)
		}
	}
	if releases > bound {
		t.Fatalf("honest releases %d exceed the bound %d (rewinds tried %d, taken %d)", releases, bound, tries, taken)
	}
	if sameBits(models[0].Model, vec) {
		t.Fatal("the final model is the attacker's vector")
	}
	named := false
	short := shortID(atkHost.ID())
	for _, l := range logs {
		for _, line := range strings.Split(l.String(), "\n") {
			named = named || strings.Contains(line, "it would rewind the walk") && strings.Contains(line, short)
		}
	}
	if !named {
		t.Error("no honest member named the attacker in a rewind refusal")
	}
	// Member 0 evicted it, and says so naming it.
	evicted := false
	for _, line := range strings.Split(logs[0].String(), "\n") {
		evicted = evicted || strings.Contains(line, "member evicted") && strings.Contains(line, short)
	}
	if !evicted || nodes[0].Rejected("rewind") < 1 {
		t.Errorf("member 0 did not evict the attacker naming it (rejected{rewind} %v):\n%s", nodes[0].Rejected("rewind"), logs[0].String())
	}
	t.Logf("K %d: %d honest releases (bound %d), %d rewinds tried, %d taken, %v", k, releases, bound, tries, taken, took)
}
