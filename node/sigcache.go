package node

import (
	"crypto/sha256"
	"encoding/binary"
	"sync"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// SigCache remembers signatures that verified, for the in-process nodes of a testnet to
// share (Harness.SigCache): a walk's hand-off signature is verified by its recipient and
// again, as evidence, by the next one, which in one process is the same computation
// twice. Verification is a function of (signer, message, signature) alone, so a hit is
// the verification's own answer; only signatures that verified are remembered, and a
// forged one is verified, and refused, every time. A node that signs a hand-off frame
// also remembers its signature (Node.signFrame): Ed25519 signing makes a signature that
// verifies under the signer's key, so the recipient's check in the same process is a
// lookup from the start. The key is SHA-256 of the signer's
// peer ID (which holds its Ed25519 key), the message and the signature. At most
// sigCacheMax are kept (the set is emptied when full).
type SigCache struct {
	mu   sync.Mutex
	seen map[[32]byte]struct{}
}

const sigCacheMax = 1 << 16

// NewSigCache returns an empty cache.
func NewSigCache() *SigCache { return &SigCache{seen: map[[32]byte]struct{}{}} }

func sigKey(p peer.ID, msg, sig []byte) [32]byte {
	h := sha256.New()
	var n [8]byte
	for _, b := range [][]byte{[]byte(p), msg, sig} {
		binary.LittleEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	var k [32]byte
	h.Sum(k[:0])
	return k
}

func (c *SigCache) has(k [32]byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.seen[k]
	return ok
}

func (c *SigCache) add(k [32]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.seen) >= sigCacheMax {
		clear(c.seen)
	}
	c.seen[k] = struct{}{}
}

// cachedKeys is a peerstore with the testnet's SigCache: verifySig consults the cache
// before verifying and records what verified.
type cachedKeys struct {
	ps    interface{ PubKey(peer.ID) crypto.PubKey }
	cache *SigCache
}

func (k cachedKeys) PubKey(p peer.ID) crypto.PubKey {
	if k.ps == nil {
		return nil
	}
	return k.ps.PubKey(p)
}

// keys returns the key source of n's signature checks: its peerstore, with the
// harness's SigCache when one is set.
func (n *Node) keys() interface{ PubKey(peer.ID) crypto.PubKey } {
	if c := n.cfg.SigCache; c != nil {
		return cachedKeys{ps: n.Host.Peerstore(), cache: c}
	}
	return n.Host.Peerstore()
}
