package node

import (
	"errors"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
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
