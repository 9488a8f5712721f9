package node

import (
	"bytes"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/node/wire"
	"github.com/dpadmm/dpadmm/walk"
)

// TestFrameSignedAhead: handoff takes the frame signed ahead for the same token bytes
// and recipient (once), and signs anew for other bytes or another recipient; a frame
// signed ahead is the frame signFrame makes.
func TestFrameSignedAhead(t *testing.T) {
	key, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	to, _ := peer.IDFromPrivateKey(key)
	other := peer.ID("someone else")
	tok := walk.NewToken("r", 0, 4, consensus.Regularizer{}, 1)
	tok.Hop = 7
	body, err := wire.EncodeToken(nil, tok)
	if err != nil {
		t.Fatal(err)
	}
	raw := hold(body, nil)
	n := &Node{key: key}
	want, err := signFrame(key, raw, to)
	if err != nil {
		t.Fatal(err)
	}
	put := func(r []byte, frame []byte) {
		ps := &presigned{raw: r, done: make(chan struct{}), frame: frame}
		close(ps.done)
		epoch, hop := rawID(r)
		n.presign.m = map[presignKey]*presigned{{to, epoch, hop}: ps}
	}
	put(raw, []byte("signed ahead"))
	if got, _ := n.frameFor(other, raw); !bytes.Equal(got, mustSign(t, key, raw, other)) {
		t.Fatal("another recipient's frame was not signed for it")
	}
	if got, _ := n.frameFor(to, raw); string(got) != "signed ahead" {
		t.Fatalf("the frame signed ahead was not taken: %q", got)
	}
	if got, _ := n.frameFor(to, raw); !bytes.Equal(got, want) {
		t.Fatal("a frame signed ahead was taken twice")
	}
	changed := bytes.Clone(raw)
	changed[len(changed)-2] ^= 1
	put(changed, []byte("signed ahead"))
	if got, _ := n.frameFor(to, raw); !bytes.Equal(got, want) {
		t.Fatal("a frame signed ahead for other bytes was taken")
	}
}

func mustSign(t *testing.T, key crypto.PrivKey, raw []byte, to peer.ID) []byte {
	t.Helper()
	f, err := signFrame(key, raw, to)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
