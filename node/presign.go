package node

import (
	"bytes"
	"sync"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/dpadmm/dpadmm/walk"
)

// Signing ahead. A hand-off frame is signed for its recipient (signFrame: one Ed25519
// signature) after the release is durable, on the hand-off's path. The frame is a
// function of the held token's bytes and the recipient alone, so the node signs it
// while the ledger entry and the checkpoint are written (walkFx.Prepare, called by the
// Walk adapter before Persist): the signature leaves nothing the node has not already
// decided, and nothing is sent before the record is durable. handoff then takes the
// frame signed ahead when its token bytes and recipient are the same, and signs itself
// otherwise (a re-encoded token, a redirection). Without fsync (Reliability.NoSync)
// there is no wait to overlap, and the loop signs before the record is written: one
// goroutine hand-over fewer on the hop's path.

// presigned is a frame being signed ahead (frame and err are set when done closes).
type presigned struct {
	raw   []byte
	done  chan struct{}
	frame []byte
	err   error
}

type presignKey struct {
	to         peer.ID
	epoch, hop uint64
}

// presigns holds the frames signed ahead and not yet taken (at most presignMax: a frame
// whose send never came is dropped with the rest when the set is full).
type presigns struct {
	mu sync.Mutex
	m  map[presignKey]*presigned
}

const presignMax = 16

// Prepare starts signing the frames of the Ready's token messages (drive.Preparer).
func (f walkFx) Prepare(msgs []walk.CustodyMsg) {
	n := f.n
	for _, m := range msgs {
		if m.Kind != walk.CustodyToken || m.To < 0 || m.To >= len(n.members) {
			continue
		}
		raw := n.rawOf(m.Token, m.Evidence)
		if raw == nil {
			continue
		}
		to := n.members[m.To]
		ps := &presigned{raw: raw, done: make(chan struct{})}
		n.presign.mu.Lock()
		if n.presign.m == nil || len(n.presign.m) >= presignMax {
			n.presign.m = map[presignKey]*presigned{}
		}
		n.presign.m[presignKey{to, m.Epoch, m.Hop}] = ps
		n.presign.mu.Unlock()
		if n.cfg.NoSync {
			ps.frame, ps.err = n.signFrame(raw, to)
			close(ps.done)
			continue
		}
		n.bg.Add(1)
		go func() {
			defer n.bg.Done()
			ps.frame, ps.err = n.signFrame(raw, to)
			close(ps.done)
		}()
	}
}

// dropPresigned forgets the frame signed ahead of raw for to (its send was superseded).
func (n *Node) dropPresigned(to peer.ID, raw []byte) {
	epoch, hop := rawID(raw)
	n.presign.mu.Lock()
	delete(n.presign.m, presignKey{to, epoch, hop})
	n.presign.mu.Unlock()
}

// frameFor returns the frame of raw for to: the one signed ahead if it is of these
// bytes, else a new signature.
func (n *Node) frameFor(to peer.ID, raw []byte) ([]byte, error) {
	epoch, hop := rawID(raw)
	k := presignKey{to, epoch, hop}
	n.presign.mu.Lock()
	ps := n.presign.m[k]
	if ps != nil {
		delete(n.presign.m, k)
	}
	n.presign.mu.Unlock()
	if ps != nil && bytes.Equal(ps.raw, raw) {
		<-ps.done
		if ps.err == nil {
			return ps.frame, nil
		}
	}
	return n.signFrame(raw, to)
}

// signFrame signs the frame of raw for to with n's key and remembers the signature
// (ownSigs): when the walk comes back within two hops, the evidence the next sender shows
// is this signature, and the memo answers for it without signing again. With a SigCache
// (in-process nodes) the signature is also remembered there as one that verifies:
// Ed25519 signing (RFC 8032) makes a signature that verifies under the signer's key, so
// the recipient's check in the same process is the cache's answer, not a second
// computation of a known result. A frame whose bytes differ (a forgery, a corruption)
// has another key and is verified.
func (n *Node) signFrame(raw []byte, to peer.ID) ([]byte, error) {
	c := n.cfg.SigCache
	if n.key.Type() != crypto.Ed25519 {
		c = nil
	}
	self := n.signerID()
	return signFrameNote(n.key, raw, to, func(msg, sig []byte) {
		k := sigKey(self, msg, sig)
		n.own.add(k)
		if c != nil {
			c.add(k)
		}
	})
}

// ownSigs remembers the keys (sigKey) of the last ownSigMax hand-off signatures the node
// made. Only the node adds to it, so a key found is a signature the node made of that
// message: evidence it may accept as its own without signing again.
type ownSigs struct {
	mu   sync.Mutex
	keys [ownSigMax][32]byte
	next int
}

const ownSigMax = 32

func (o *ownSigs) add(k [32]byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.keys[o.next%ownSigMax] = k
	o.next++
}

func (o *ownSigs) has(k [32]byte) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i := range min(o.next, ownSigMax) {
		if o.keys[i] == k {
			return true
		}
	}
	return false
}

// signerID is the peer ID of n's key (the host's ID when the host was made with that
// key, as New makes it): the signer that the memo and the cache name for n's signatures.
func (n *Node) signerID() peer.ID {
	n.keyOnce.Do(func() { n.keyID, _ = peer.IDFromPrivateKey(n.key) })
	return n.keyID
}
