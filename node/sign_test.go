package node

import (
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/node/wire"
	"github.com/dpadmm/dpadmm/walk"
)

// signedFrame returns the hand-off frame of tok from host h to `to`, holding the evidence
// ev (nil: none, the origin's), signed with h's identity key as a node signs it.
func signedFrame(t testing.TB, h host.Host, to peer.ID, tok walk.Token, ev []byte) []byte {
	t.Helper()
	body, err := wire.EncodeToken(nil, tok)
	if err != nil {
		t.Fatal(err)
	}
	f, err := signFrame(h.Peerstore().PrivKey(h.ID()), hold(body, ev), to)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// evidenceOf returns the evidence that recipient received tok from member signer (index
// idx, host h): h's signature of that hand-off.
func evidenceOf(t testing.TB, h host.Host, idx int, tok walk.Token, recipient peer.ID) []byte {
	t.Helper()
	sig, err := h.Peerstore().PrivKey(h.ID()).Sign(sigMsg(tok.Run, tok.Walk, tok.Epoch, tok.Hop, handoffDigest(tok.Z, tok.Zhat), recipient))
	if err != nil {
		t.Fatal(err)
	}
	return appendEvidence(nil, idx, tok, sig)
}

// certFor returns the evidence of a final model z at hop k and epoch released by
// `releaser`: node signer's (member idx) signed hand-off of that token (zhat = 0) to it.
func certFor(t testing.TB, signer *Node, idx int, run string, epoch, k uint64, z []float64, releaser peer.ID) *FinalCert {
	t.Helper()
	zhat := make([]float64, len(z))
	sig, err := signer.key.Sign(sigMsg(run, 0, epoch, k, handoffDigest(z, zhat), releaser))
	if err != nil {
		t.Fatal(err)
	}
	d := vecDigest(zhat)
	return &FinalCert{Signer: idx, Epoch: epoch, Hop: k, Digest: d[:], Sig: sig}
}

// signatureBench is the signature work of one hand-off at dimension dim: the sender's
// signature (signFrame) and the receiver's two verifications (verifyHandoff: the
// sender's signature and the evidence, another member's). verifyOwn is the receiver's
// check on two nodes, as in BenchmarkRuntimeHop: the evidence is its own hand-off, found
// in its memo of the signatures it made, so one verification.
type signatureBench struct {
	sign, verify, verifyOwn func() error
}

// newSignatureBench builds the hosts, token and evidence of signatureBench.
func newSignatureBench(b *testing.B, dim int) *signatureBench {
	var hs [3]host.Host
	var ids []peer.ID
	for i := range hs {
		h, err := libp2p.New(libp2p.NoListenAddrs)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { h.Close() })
		hs[i], ids = h, append(ids, h.ID())
	}
	tok := walk.NewToken("bench", 0, dim, consensus.Regularizer{}, 1)
	tok.Hop = 5
	prev := tok
	prev.Hop = 4
	ev := evidenceOf(b, hs[0], 0, prev, ids[1])
	body, _ := wire.EncodeToken(nil, tok)
	held := hold(body, ev)
	key := hs[1].Peerstore().PrivKey(ids[1])
	frame, _ := signFrame(key, held, ids[2])
	c, err := wire.ParseCert(frame[len(body):], true)
	if err != nil {
		b.Fatal(err)
	}
	// Two members: member 1 receives from member 0 a frame whose evidence is its own
	// hand-off of the previous hop to member 0, which its memo holds.
	pair := ids[:2]
	ownEv := evidenceOf(b, hs[1], 1, prev, ids[0])
	ownFrame := signedFrame(b, hs[0], ids[1], tok, ownEv)
	oc, err := wire.ParseCert(ownFrame[len(body):], true)
	if err != nil {
		b.Fatal(err)
	}
	var memo ownSigs
	memo.add(sigKey(ids[1], sigMsg(tok.Run, tok.Walk, oc.Ev.Epoch, oc.Ev.Hop, oc.EvDig, ids[0]), oc.EvSig))
	mine := func(m, s []byte) bool { return memo.has(sigKey(ids[1], m, s)) }
	return &signatureBench{
		sign: func() error { _, err := signFrame(key, held, ids[2]); return err },
		verify: func() error {
			_, err := verifyHandoff(tok, c, ids[1], ids[2], ids, 0, nil, nil, nil)
			return err
		},
		verifyOwn: func() error {
			_, err := verifyHandoff(tok, oc, ids[0], ids[1], pair, 0, nil, key, mine)
			return err
		},
	}
}

// perOp returns the mean time of n calls of f.
func perOp(b *testing.B, n int, f func() error) time.Duration {
	start := time.Now()
	for range n {
		if err := f(); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start) / time.Duration(n)
}

// BenchmarkHandoffSignature: what signing adds to one hand-off at p = 64: the sender's
// signature (signFrame) and the receiver's two verifications (verifyHandoff).
func BenchmarkHandoffSignature(b *testing.B) {
	sb := newSignatureBench(b, 64)
	for _, c := range []struct {
		name string
		f    func() error
	}{{"sign", sb.sign}, {"verify", sb.verify}, {"verify-own-evidence", sb.verifyOwn}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if err := c.f(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzHandoffFrame: any frame a peer sends is decoded and verified without a panic, and
// every change of a correctly signed frame (any byte of body, evidence or signature,
// a cut or an extension) is refused: what the receiver accepts is exactly what the
// sender signed for it, on evidence its signer signed.
func FuzzHandoffFrame(f *testing.F) {
	var hs [3]host.Host
	var ids []peer.ID
	for i := range hs {
		h, err := libp2p.New(libp2p.NoListenAddrs)
		if err != nil {
			f.Fatal(err)
		}
		f.Cleanup(func() { h.Close() })
		hs[i], ids = h, append(ids, h.ID())
	}
	tok := walk.NewToken("fuzz", 0, 3, consensus.Regularizer{}, 1)
	tok.Epoch, tok.Hop, tok.Z[1], tok.Zhat[2] = 2, 7, 0.5, -1.25
	prev := tok
	prev.Hop = 6
	good := signedFrame(f, hs[1], ids[2], tok, evidenceOf(f, hs[0], 0, prev, ids[1]))
	// own: the evidence is the recipient's own hand-off (the walk came back to it), which
	// it checks with its key rather than by a verification.
	own := signedFrame(f, hs[1], ids[2], tok, evidenceOf(f, hs[2], 2, prev, ids[1]))
	ownKey := hs[2].Peerstore().PrivKey(ids[2])
	var mine func(msg, sig []byte) bool
	checkMine := func(b []byte, key crypto.PrivKey, mine func(msg, sig []byte) bool) bool {
		t, err := wire.DecodeToken(b)
		if err != nil || len(b) < wire.TokenHeader {
			return false
		}
		c, err := wire.ParseCert(b[wire.BodyLen(b):], true)
		if err != nil {
			return false
		}
		_, err = verifyHandoff(t, c, ids[1], ids[2], ids, 0, nil, key, mine)
		return err == nil
	}
	check := func(b []byte, key crypto.PrivKey) bool { return checkMine(b, key, nil) }
	accept := func(b []byte) bool { return check(b, nil) }
	// The recipient's memo of its own signatures holds the own evidence's (ownSigs).
	{
		t, _ := wire.DecodeToken(own)
		c, err := wire.ParseCert(own[wire.BodyLen(own):], true)
		if err != nil {
			f.Fatal(err)
		}
		k := sigKey(ids[2], sigMsg(t.Run, t.Walk, c.Ev.Epoch, c.Ev.Hop, c.EvDig, ids[1]), c.EvSig)
		mine = func(msg, sig []byte) bool { return sigKey(ids[2], msg, sig) == k }
	}
	if !accept(good) || !check(own, ownKey) || !check(own, nil) || !checkMine(own, ownKey, mine) {
		f.Fatal("a correctly signed frame is refused")
	}
	// Evidence claiming to be the recipient's hand-off that it never signed.
	if check(signedFrame(f, hs[1], ids[2], tok, evidenceOf(f, hs[0], 2, prev, ids[1])), ownKey) {
		f.Fatal("evidence naming the recipient as signer, signed by another member, was accepted")
	}
	f.Add(uint16(0), byte(1), int8(0))
	f.Add(uint16(40), byte(0x80), int8(0))
	f.Add(uint16(len(good)-1), byte(1), int8(0))
	f.Add(uint16(0), byte(0), int8(-3))
	f.Add(uint16(0), byte(0), int8(5))
	f.Fuzz(func(t *testing.T, pos uint16, xor byte, cut int8) {
		b := slices.Clone(good)
		switch {
		case cut < 0:
			b = b[:max(0, len(b)+int(cut))]
		case cut > 0:
			b = append(b, make([]byte, cut)...)
		}
		if xor != 0 && len(b) > 0 {
			b[int(pos)%len(b)] ^= xor
		}
		if (xor != 0 || cut != 0) && accept(b) {
			t.Fatalf("a changed frame (pos %d xor %#x cut %d) was accepted", pos, xor, cut)
		}
		o := slices.Clone(own)
		switch {
		case cut < 0:
			o = o[:max(0, len(o)+int(cut))]
		case cut > 0:
			o = append(o, make([]byte, cut)...)
		}
		if xor != 0 && len(o) > 0 {
			o[int(pos)%len(o)] ^= xor
		}
		if (xor != 0 || cut != 0) && (check(o, ownKey) || checkMine(o, ownKey, mine)) {
			t.Fatalf("a changed frame with the recipient's own evidence (pos %d xor %#x cut %d) was accepted", pos, xor, cut)
		}
	})
}
