package node

import (
	"bytes"
	"errors"
	"testing"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/node/wire"
	"github.com/dpadmm/dpadmm/walk"
)

// TestSigCache: with a SigCache, a signature that verified is a lookup the next time; a
// signature that does not verify is refused every time and never remembered, and a
// remembered one vouches for nothing but its own signer, message and bytes.
func TestSigCache(t *testing.T) {
	key, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := peer.IDFromPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	other, _, _ := crypto.GenerateEd25519Key(nil)
	q, _ := peer.IDFromPrivateKey(other)
	msg := []byte("hand-off")
	sig, err := key.Sign(msg)
	if err != nil {
		t.Fatal(err)
	}
	c := NewSigCache()
	ks := cachedKeys{cache: c}
	forged := append([]byte(nil), sig...)
	forged[5] ^= 1
	for range 2 {
		if err := verifySig(p, ks, msg, forged); !errors.Is(err, ErrSignature) {
			t.Fatalf("forged signature: %v", err)
		}
	}
	if len(c.seen) != 0 {
		t.Fatal("a forged signature was remembered")
	}
	for range 2 {
		if err := verifySig(p, ks, msg, sig); err != nil {
			t.Fatal(err)
		}
	}
	if len(c.seen) != 1 || !c.has(sigKey(p, msg, sig)) {
		t.Fatalf("%d signatures remembered, want the one that verified", len(c.seen))
	}
	for _, bad := range []struct {
		p   peer.ID
		msg string
	}{{q, "hand-off"}, {p, "hand-of"}, {p, "hand-off "}} {
		if err := verifySig(bad.p, ks, []byte(bad.msg), sig); !errors.Is(err, ErrSignature) {
			t.Fatalf("the remembered signature for another signer or message (%s, %q): %v", bad.p, bad.msg, err)
		}
	}
}

// TestSigCacheOwnSignature: with a SigCache, a frame the node signs is remembered as
// verifying (for its recipient in the same process), and a frame whose signature or
// message differs is still verified, and refused.
func TestSigCacheOwnSignature(t *testing.T) {
	key, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := libp2p.New(libp2p.Identity(key), libp2p.NoListenAddrs)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	c := NewSigCache()
	n := &Node{Host: h, key: key, cfg: Config{Harness: Harness{SigCache: c}}}
	to := peer.ID("recipient")
	tok := walk.NewToken("r", 0, 4, consensus.Regularizer{}, 1)
	tok.Hop = 3
	body, err := wire.EncodeToken(nil, tok)
	if err != nil {
		t.Fatal(err)
	}
	frame, err := n.signFrame(hold(body, nil), to)
	if err != nil {
		t.Fatal(err)
	}
	if want := mustSign(t, key, hold(body, nil), to); !bytes.Equal(frame, want) {
		t.Fatal("the frame differs from signFrame's")
	}
	sig := frame[len(frame)-64:]
	msg := sigMsg(tok.Run, tok.Walk, tok.Epoch, tok.Hop, handoffDigest(tok.Z, tok.Zhat), to)
	if len(c.seen) != 1 || !c.has(sigKey(h.ID(), msg, sig)) {
		t.Fatalf("%d signatures remembered, want the frame's", len(c.seen))
	}
	ks := cachedKeys{cache: c}
	if err := verifySig(h.ID(), ks, msg, sig); err != nil {
		t.Fatal(err)
	}
	forged := bytes.Clone(sig)
	forged[9] ^= 1
	if err := verifySig(h.ID(), ks, msg, forged); !errors.Is(err, ErrSignature) {
		t.Fatalf("a changed signature: %v", err)
	}
	if err := verifySig(h.ID(), ks, append(bytes.Clone(msg), 0), sig); !errors.Is(err, ErrSignature) {
		t.Fatalf("a changed message: %v", err)
	}
	if len(c.seen) != 1 {
		t.Fatalf("%d signatures remembered after two refusals", len(c.seen))
	}
	// Without a cache nothing is remembered anywhere, and the frame is the same.
	plain := &Node{Host: h, key: key}
	if f, err := plain.signFrame(hold(body, nil), to); err != nil || !bytes.Equal(f, frame) {
		t.Fatalf("without a cache: %v", err)
	}
}
