package node

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
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
	h, err := libp2p.New(libp2p.Identity(key), libp2p.NoListenAddrs)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	n := &Node{key: key, Host: h}
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

// signCounter is a private key that counts its signatures.
type signCounter struct {
	crypto.PrivKey
	n int
}

func (k *signCounter) Sign(b []byte) ([]byte, error) { k.n++; return k.PrivKey.Sign(b) }

// TestOwnSigMemo: a node remembers the hand-off signatures it makes (ownSigs), and
// evidence that is one of them is accepted without signing again; evidence naming the
// node as signer that is not in the memo is checked by signing (and refused if forged);
// the memo keeps the last ownSigMax signatures.
func TestOwnSigMemo(t *testing.T) {
	key, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	self, _ := peer.IDFromPrivateKey(key)
	var o ownSigs
	msg, sig := []byte("hand-off"), mustRawSign(t, key, []byte("hand-off"))
	o.add(sigKey(self, msg, sig))
	if !o.has(sigKey(self, msg, sig)) {
		t.Fatal("a signature made is not remembered")
	}
	forged := bytes.Clone(sig)
	forged[3] ^= 1
	if o.has(sigKey(self, msg, forged)) || o.has(sigKey(self, []byte("hand-of"), sig)) || o.has(sigKey("other", msg, sig)) {
		t.Fatal("the memo vouches for other bytes, another message or another signer")
	}
	for i := range ownSigMax {
		o.add(sigKey(self, []byte{byte(i)}, sig))
	}
	if o.has(sigKey(self, msg, sig)) {
		t.Fatalf("the memo keeps more than %d signatures", ownSigMax)
	}
	if !o.has(sigKey(self, []byte{ownSigMax - 1}, sig)) {
		t.Fatal("the last signature is forgotten")
	}

	// Through verifyHandoff: member 2 receives from member 1 a frame whose evidence is
	// member 2's own hand-off to member 1.
	keys := make([]crypto.PrivKey, 3)
	ids := make([]peer.ID, 3)
	for i := range keys {
		keys[i], _, _ = crypto.GenerateEd25519Key(nil)
		ids[i], _ = peer.IDFromPrivateKey(keys[i])
	}
	prev := walk.NewToken("r", 0, 3, consensus.Regularizer{}, 1)
	prev.Hop = 4
	tok := prev
	tok.Hop = 5
	evMsg := sigMsg(prev.Run, prev.Walk, prev.Epoch, prev.Hop, handoffDigest(prev.Z, prev.Zhat), ids[1])
	evSig := mustRawSign(t, keys[2], evMsg)
	frame := func(evSig []byte) (walk.Token, wire.Cert) {
		body, err := wire.EncodeToken(nil, tok)
		if err != nil {
			t.Fatal(err)
		}
		held := hold(body, appendEvidence(nil, 2, prev, evSig))
		f, err := signFrame(keys[1], held, ids[2])
		if err != nil {
			t.Fatal(err)
		}
		c, err := wire.ParseCert(f[wire.BodyLen(f):], true)
		if err != nil {
			t.Fatal(err)
		}
		return tok, c
	}
	var memo ownSigs
	memo.add(sigKey(ids[2], evMsg, evSig))
	mine := func(m, s []byte) bool { return memo.has(sigKey(ids[2], m, s)) }
	k := &signCounter{PrivKey: keys[2]}
	tk, c := frame(evSig)
	if _, err := verifyHandoff(tk, c, ids[1], ids[2], ids, 0, nil, k, mine); err != nil || k.n != 0 {
		t.Fatalf("own evidence in the memo: %v, %d signatures made", err, k.n)
	}
	if _, err := verifyHandoff(tk, c, ids[1], ids[2], ids, 0, nil, k, nil); err != nil || k.n != 1 {
		t.Fatalf("own evidence without the memo: %v, %d signatures made, want 1", err, k.n)
	}
	bad := bytes.Clone(evSig)
	bad[7] ^= 1
	tk, c = frame(bad)
	if _, err := verifyHandoff(tk, c, ids[1], ids[2], ids, 0, nil, k, mine); !errors.Is(err, ErrSignature) {
		t.Fatalf("forged own evidence: %v", err)
	}
}

func mustRawSign(t *testing.T, key crypto.PrivKey, msg []byte) []byte {
	t.Helper()
	s, err := key.Sign(msg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestNewRefusesForeignHost: a Config.NewHost that returns a host of another key than
// the data directory's is refused (the node would sign as someone else), and the data
// directory stays usable.
func TestNewRefusesForeignHost(t *testing.T) {
	d, _ := consensus.SyntheticLogistic(10, 3, 1, 1)
	dir := t.TempDir()
	c := baseConfig("foreign", d, 10)
	c.DataDir = dir
	c.NewHost = func(crypto.PrivKey) (host.Host, error) { return libp2p.New(libp2p.NoListenAddrs) }
	if _, err := New(t.Context(), c); err == nil || !strings.Contains(err.Error(), "not the data directory key's") {
		t.Fatalf("a host of another key: %v", err)
	}
	c.NewHost = nil
	n, err := New(t.Context(), c)
	if err != nil {
		t.Fatalf("the data directory after the refusal: %v", err)
	}
	n.Close()
}
