package node

import (
	"testing"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/walk"
)

// signedFrame returns the hand-off frame of tok from host h to `to`, holding the evidence
// ev (nil: none, the origin's), signed with h's identity key as a node signs it.
func signedFrame(t testing.TB, h host.Host, to peer.ID, tok walk.Token, ev []byte) []byte {
	t.Helper()
	body, err := EncodeToken(nil, tok)
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

// BenchmarkHandoffSignature: what signing adds to one hand-off at p = 64: the sender's
// signature (signFrame) and the receiver's two verifications (verifyHandoff).
func BenchmarkHandoffSignature(b *testing.B) {
	var hs [3]host.Host
	var ids []peer.ID
	for i := range hs {
		h, err := libp2p.New(libp2p.NoListenAddrs)
		if err != nil {
			b.Fatal(err)
		}
		defer h.Close()
		hs[i], ids = h, append(ids, h.ID())
	}
	tok := walk.NewToken("bench", 0, 64, consensus.Regularizer{}, 1)
	tok.Hop = 5
	prev := tok
	prev.Hop = 4
	ev := evidenceOf(b, hs[0], 0, prev, ids[1])
	body, _ := EncodeToken(nil, tok)
	held := hold(body, ev)
	key := hs[1].Peerstore().PrivKey(ids[1])
	b.Run("sign", func(b *testing.B) {
		for b.Loop() {
			if _, err := signFrame(key, held, ids[2]); err != nil {
				b.Fatal(err)
			}
		}
	})
	frame, _ := signFrame(key, held, ids[2])
	c, err := parseCert(frame[len(body):], true)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("verify", func(b *testing.B) {
		for b.Loop() {
			if _, err := verifyHandoff(tok, c, ids[1], ids[2], ids, 0, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}
