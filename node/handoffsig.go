package node

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/dpadmm/dpadmm/node/wire"
	"github.com/dpadmm/dpadmm/walk"
)

// Signed hand-offs. Every hand-off of the walk token is signed by its sender over
//
//	"dpadmm/handoff/1" | run | walk | epoch | hop | digest(z, zhat) | recipient
//
// and carries the evidence that the sender holds the token legitimately: the signed
// hand-off it received last from another member (walk.Evidence; the lineage rule is
// walk.CheckLineage). Bytes after the token body (wire.EncodeToken):
//
//	held  = body | evidence                  (inbox, custody, backups: as stored)
//	frame = held | siglen u16 | sig          (on the wire, signed for one recipient)
//	evidence = 0x00                                             (none: the origin's)
//	         | 0x01 | signer u32 | epoch u64 | hop u64 | digest [32] | siglen u16 | sig
//
// little-endian. digest is sha256(sha256(z) | sha256(zhat)) over the float64 bits, so a
// final model (z published, zhat not) can be checked against a hand-off signature from
// z and sha256(zhat) alone. A node stores the evidence for its next hand-off with the
// token it received (the sender's signature becomes that evidence), and keeps it
// through hand-offs to itself and regenerations (which change only the epoch).

// ErrSignature marks a hand-off or final model whose signature or evidence does not
// verify.
var ErrSignature = errors.New("node: bad hand-off signature")

// handoffDigest is the digest of a token's vectors as signed.
func handoffDigest(z, zhat []float64) [32]byte {
	return combineDigest(vecDigest(z), vecDigest(zhat))
}

func vecDigest(v []float64) [32]byte {
	h := sha256.New()
	var b [8]byte
	for _, x := range v {
		binary.LittleEndian.PutUint64(b[:], math.Float64bits(x))
		h.Write(b[:])
	}
	var d [32]byte
	h.Sum(d[:0])
	return d
}

func combineDigest(z, zhat [32]byte) [32]byte {
	var b [64]byte
	copy(b[:32], z[:])
	copy(b[32:], zhat[:])
	return sha256.Sum256(b[:])
}

// sigMsg is the signed statement "the token (run, walk, epoch, hop, digest) was handed
// to recipient".
func sigMsg(run string, wk, epoch, hop uint64, dig [32]byte, recipient peer.ID) []byte {
	b := make([]byte, 0, 17+1+len(run)+24+32+2+len(recipient))
	b = append(b, "dpadmm/handoff/1"...)
	b = append(b, byte(len(run)))
	b = append(b, run...)
	b = binary.LittleEndian.AppendUint64(b, wk)
	b = binary.LittleEndian.AppendUint64(b, epoch)
	b = binary.LittleEndian.AppendUint64(b, hop)
	b = append(b, dig[:]...)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(recipient)))
	return append(b, recipient...)
}

// appendEvidence appends the evidence made of a received hand-off: the token tok signed
// by member signer (index) with signature sig.
func appendEvidence(b []byte, signer int, tok walk.Token, sig []byte) []byte {
	d := handoffDigest(tok.Z, tok.Zhat)
	b = append(b, wire.EvPresent)
	b = binary.LittleEndian.AppendUint32(b, uint32(signer))
	b = binary.LittleEndian.AppendUint64(b, tok.Epoch)
	b = binary.LittleEndian.AppendUint64(b, tok.Hop)
	b = append(b, d[:]...)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(sig)))
	return append(b, sig...)
}

// heldEvidence returns the evidence bytes of a held token (a token without a trailer,
// of the first format or the origin's, has the evidence "none").
func heldEvidence(held []byte) []byte {
	if len(held) < wire.TokenHeader {
		return []byte{wire.EvNone}
	}
	tr := held[wire.BodyLen(held):]
	if len(tr) == 0 {
		return []byte{wire.EvNone}
	}
	return tr
}

// hold returns body followed by the evidence ev (wire.EvNone when empty).
func hold(body, ev []byte) []byte {
	if len(ev) == 0 {
		ev = []byte{wire.EvNone}
	}
	return append(body[:len(body):len(body)], ev...)
}

// reEpoch returns a copy of the held token raw with its epoch replaced (a regeneration
// or fallback: same z, zhat and evidence).
func reEpoch(raw []byte, epoch uint64) []byte {
	out := append([]byte(nil), raw...)
	binary.LittleEndian.PutUint64(out[9:], epoch)
	return out
}

// signFrame returns the frame of the held token raw for recipient to, signed with key.
func signFrame(key crypto.PrivKey, raw []byte, to peer.ID) ([]byte, error) {
	return signFrameNote(key, raw, to, nil)
}

// signFrameNote is signFrame that passes the signed message and its signature to note
// (when not nil) before it returns the frame.
func signFrameNote(key crypto.PrivKey, raw []byte, to peer.ID, note func(msg, sig []byte)) ([]byte, error) {
	tok, err := wire.DecodeToken(raw)
	if err != nil {
		return nil, err
	}
	msg := sigMsg(tok.Run, tok.Walk, tok.Epoch, tok.Hop, handoffDigest(tok.Z, tok.Zhat), to)
	sig, err := key.Sign(msg)
	if err != nil {
		return nil, fmt.Errorf("node: signing a hand-off: %w", err)
	}
	if note != nil {
		note(msg, sig)
	}
	body := wire.BodyLen(raw)
	tr, err := wire.ParseCert(raw[body:], false)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, body+max(tr.EvLen, 1)+2+len(sig))
	out = append(out, raw[:body]...)
	out = append(out, heldEvidence(raw)...)
	out = binary.LittleEndian.AppendUint16(out, uint16(len(sig)))
	return append(out, sig...), nil
}

// pubKey returns p's public key: from the peer ID (Ed25519 and other inlined keys) or
// from the peerstore (learnt by identify).
func pubKey(p peer.ID, ps interface{ PubKey(peer.ID) crypto.PubKey }) (crypto.PubKey, error) {
	if k, err := p.ExtractPublicKey(); err == nil && k != nil {
		return k, nil
	}
	if ps != nil {
		if k := ps.PubKey(p); k != nil {
			return k, nil
		}
	}
	return nil, fmt.Errorf("%w: no public key for %s", ErrSignature, shortID(p))
}

// ownSig checks that sig is this node's (p, key) signature of msg: Ed25519 signs
// deterministically, so it is exactly the bytes key gives msg.
func ownSig(p peer.ID, key crypto.PrivKey, msg, sig []byte) error {
	want, err := key.Sign(msg)
	if err != nil || !bytes.Equal(want, sig) {
		return fmt.Errorf("%w: signature of %s does not verify", ErrSignature, shortID(p))
	}
	return nil
}

// verifySig checks that sig is p's signature of msg.
func verifySig(p peer.ID, ps interface{ PubKey(peer.ID) crypto.PubKey }, msg, sig []byte) error {
	ck, cached := ps.(cachedKeys)
	var key [32]byte
	if cached {
		if key = sigKey(p, msg, sig); ck.cache.has(key) {
			return nil
		}
	}
	k, err := pubKey(p, ps)
	if err != nil {
		return err
	}
	ok, err := k.Verify(msg, sig)
	if err != nil || !ok {
		return fmt.Errorf("%w: signature of %s does not verify", ErrSignature, shortID(p))
	}
	if cached {
		ck.cache.add(key)
	}
	return nil
}

// verifyHandoff checks a received frame: the sender's signature for this recipient, the
// evidence's signature (the signer's hand-off of the evidence token to the sender) and
// the lineage rule. members are in index order; origin is the member that created the
// initial token. It returns the evidence to hold with the token for the next hand-off.
//
// key, when not nil, is self's private key: evidence that self signed (the walk came back
// to self within two hops, frequent on small networks) is then checked, for an Ed25519
// key, by signing its message again and comparing bytes, which Ed25519's deterministic
// signatures (RFC 8032) make exact and which costs a third of a verification; other key
// types are verified. mine, when not nil, reports whether self made the signature sig
// of msg (the node's memo of the frames it signed, ownSigs): such evidence is then
// accepted without signing again.
func verifyHandoff(tok walk.Token, c wire.Cert, from, self peer.ID, members []peer.ID, origin int,
	ps interface{ PubKey(peer.ID) crypto.PubKey }, key crypto.PrivKey, mine func(msg, sig []byte) bool) ([]byte, error) {
	if !c.Signed {
		return nil, fmt.Errorf("%w: unsigned hand-off", ErrSignature)
	}
	sender := -1
	for i, m := range members {
		if m == from {
			sender = i
		}
	}
	if sender < 0 {
		return nil, fmt.Errorf("%w: sender is not a member", ErrSignature)
	}
	if err := walk.CheckLineage(tok.Epoch, tok.Hop, c.Ev, sender, origin, len(members)); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSignature, err)
	}
	// The two Ed25519 verifications dominate a hand-off's cost: the evidence's runs
	// alongside the sender's.
	evErr := make(chan error, 1)
	var evMsg []byte
	if c.Ev.Present {
		evMsg = sigMsg(tok.Run, tok.Walk, c.Ev.Epoch, c.Ev.Hop, c.EvDig, from)
	}
	switch {
	case !c.Ev.Present:
		evErr <- nil
	case members[c.Ev.Signer] == self && mine != nil && mine(evMsg, c.EvSig):
		evErr <- nil // self signed these bytes of this message
	default:
		go func() {
			msg := evMsg
			if signer := members[c.Ev.Signer]; signer == self && key != nil && key.Type() == crypto.Ed25519 {
				evErr <- ownSig(signer, key, msg, c.EvSig)
				return
			}
			evErr <- verifySig(members[c.Ev.Signer], ps, msg, c.EvSig)
		}()
	}
	err := verifySig(from, ps, sigMsg(tok.Run, tok.Walk, tok.Epoch, tok.Hop, handoffDigest(tok.Z, tok.Zhat), self), c.Sig)
	if e := <-evErr; e != nil && err == nil {
		err = fmt.Errorf("%w (evidence)", e)
	}
	if err != nil {
		return nil, err
	}
	var ev []byte
	return appendEvidence(ev, sender, tok, c.Sig), nil
}

// FinalCert is the evidence published with a final model: the hand-off of the hop the
// releaser held legitimately (walk.CheckFinalLineage), as walk.Evidence fields, its
// signature and, when that hand-off was hop K itself, sha256 of zhat_K (so that the
// signature can be checked against the published z_K; zhat_K itself is not published).
type FinalCert struct {
	Signer int    `json:"signer"` // -1: no evidence (the origin reached hop K alone)
	Epoch  uint64 `json:"epoch"`
	Hop    uint64 `json:"hop"`
	Digest []byte `json:"digest"` // digest of the evidence token (hop < K) or sha256(zhat_K) (hop = K)
	Sig    []byte `json:"sig"`
	// Prev is the hand-off before it, when the releaser received hop K from another
	// member: the evidence that member showed (who handed it the token of hop K-1 or
	// earlier, signed for it). With it every member sees the last two hand-offs that
	// produced the final model (Model.Lineage), two colluders included. nil: not known
	// (the origin's token, a hand-off to itself, or a releaser restarted from its inbox).
	Prev *FinalLink `json:"prev,omitempty"`
}

// FinalLink is one signed hand-off of a final model's lineage: member Signer handed the
// token of (Epoch, Hop), whose hand-off digest is Digest, to the next member of the
// lineage, and Sig is its signature of that hand-off.
type FinalLink struct {
	Signer int    `json:"signer"`
	Epoch  uint64 `json:"epoch"`
	Hop    uint64 `json:"hop"`
	Digest []byte `json:"digest"`
	Sig    []byte `json:"sig"`
}

// finalLinkOf returns the evidence a hand-off frame b showed (the hand-off its sender
// received), as a FinalLink; nil when it shows none.
func finalLinkOf(b []byte) *FinalLink {
	c, err := wire.ParseCert(b[wire.BodyLen(b):], true)
	if err != nil || !c.Ev.Present {
		return nil
	}
	return &FinalLink{Signer: c.Ev.Signer, Epoch: c.Ev.Epoch, Hop: c.Ev.Hop, Digest: slices.Clone(c.EvDig[:]), Sig: slices.Clone(c.EvSig)}
}

// verifyPrev checks the link before a final's certificate: a member other than the
// certificate's signer, an earlier hop within the hand-offs to itself the signer may
// make, an epoch not above it, and its signature of the hand-off to the signer.
func verifyPrev(run string, fc *FinalCert, members []peer.ID, ps interface{ PubKey(peer.ID) crypto.PubKey }) error {
	p := fc.Prev
	switch {
	case fc.Signer < 0:
		return fmt.Errorf("%w: a previous hand-off without a certificate signer", ErrSignature)
	case p.Signer < 0 || p.Signer >= len(members) || p.Signer == fc.Signer:
		return fmt.Errorf("%w: previous hand-off by member %d", ErrSignature, p.Signer)
	case p.Hop >= fc.Hop || fc.Hop-p.Hop > walk.MaxSelfHops(len(members))+1 || p.Epoch > fc.Epoch:
		return fmt.Errorf("%w: previous hand-off at (epoch %d, hop %d) before (epoch %d, hop %d)", ErrSignature, p.Epoch, p.Hop, fc.Epoch, fc.Hop)
	case len(p.Digest) != 32 || len(p.Sig) == 0 || len(p.Sig) > wire.MaxSig:
		return fmt.Errorf("%w: malformed previous hand-off", ErrSignature)
	}
	var dig [32]byte
	copy(dig[:], p.Digest)
	return verifySig(members[p.Signer], ps, sigMsg(run, 0, p.Epoch, p.Hop, dig, members[fc.Signer]), p.Sig)
}

// finalCert builds the certificate of the final model from the evidence ev held with the
// token of hop k (the evidence of its hand-off to this node) and zhat_K.
func finalCert(ev []byte, k uint64, zhat []float64) (*FinalCert, error) {
	if len(ev) == 0 {
		ev = []byte{wire.EvNone}
	}
	c, err := wire.ParseCert(ev, false)
	if err != nil {
		return nil, err
	}
	if !c.Ev.Present {
		return &FinalCert{Signer: -1}, nil
	}
	fc := &FinalCert{Signer: c.Ev.Signer, Epoch: c.Ev.Epoch, Hop: c.Ev.Hop, Digest: c.EvDig[:], Sig: c.EvSig}
	if c.Ev.Hop == k {
		d := vecDigest(zhat)
		fc.Digest = d[:]
	}
	return fc, nil
}

// verifyFinal checks a final model z at hop k and epoch released by member releaser.
func verifyFinal(run string, k, epoch uint64, z []float64, fc *FinalCert, releaser peer.ID, members []peer.ID, origin int,
	ps interface{ PubKey(peer.ID) crypto.PubKey }) error {
	if fc == nil {
		return fmt.Errorf("%w: final model without evidence", ErrSignature)
	}
	rel := -1
	for i, m := range members {
		if m == releaser {
			rel = i
		}
	}
	if rel < 0 {
		return fmt.Errorf("%w: releaser is not a member", ErrSignature)
	}
	ev := walk.Evidence{Present: fc.Signer >= 0, Signer: fc.Signer, Epoch: fc.Epoch, Hop: fc.Hop}
	if err := walk.CheckFinalLineage(epoch, k, ev, rel, origin, len(members)); err != nil {
		return fmt.Errorf("%w: %w", ErrSignature, err)
	}
	if !ev.Present {
		if fc.Prev != nil {
			return fmt.Errorf("%w: a previous hand-off without a certificate signer", ErrSignature)
		}
		return nil
	}
	if len(fc.Digest) != 32 || len(fc.Sig) == 0 || len(fc.Sig) > wire.MaxSig {
		return fmt.Errorf("%w: malformed final evidence", ErrSignature)
	}
	var dig [32]byte
	copy(dig[:], fc.Digest)
	if fc.Hop == k {
		dig = combineDigest(vecDigest(z), dig) // the signature must cover the published z
	}
	if err := verifySig(members[fc.Signer], ps, sigMsg(run, 0, fc.Epoch, fc.Hop, dig, releaser), fc.Sig); err != nil {
		return err
	}
	if fc.Prev != nil {
		return verifyPrev(run, fc, members, ps)
	}
	return nil
}

// checkSigned verifies the signature and evidence of frame b (decoded as tok) from
// member from. It returns the token to hold (body and the evidence for its next
// hand-off) and the evidence the sender showed (Node.evUsed).
func (n *Node) checkSigned(tok walk.Token, b []byte, from peer.ID) ([]byte, walk.Evidence, error) {
	body := wire.BodyLen(b)
	c, err := wire.ParseCert(b[body:], true)
	if err != nil {
		return nil, walk.Evidence{}, err
	}
	n.mu.Lock()
	members, origin := n.members, n.origin
	n.mu.Unlock()
	self, kid := n.ID(), n.signerID()
	ev, err := verifyHandoff(tok, c, from, self, members, origin, n.keys(), n.key,
		func(msg, sig []byte) bool { return kid == self && n.own.has(sigKey(kid, msg, sig)) })
	if err != nil {
		return nil, walk.Evidence{}, err
	}
	return hold(b[:body], ev), c.Ev, nil
}

// keepPrevLink remembers the evidence a hand-off of hop K from member sender showed (its
// sender's previous hand-off), for the final model's certificate (FinalCert.Prev). A few
// are kept.
func (n *Node) keepPrevLink(epoch, hop uint64, sender int, l *FinalLink) {
	if l == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.fin.prevLinks == nil || len(n.fin.prevLinks) >= 16 {
		n.fin.prevLinks = map[[3]uint64]*FinalLink{}
	}
	n.fin.prevLinks[[3]uint64{epoch, hop, uint64(sender)}] = l
}

// prevLink returns the link kept for the hand-off of (epoch, hop) by member sender, nil
// when none.
func (n *Node) prevLink(epoch, hop uint64, sender int) *FinalLink {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.fin.prevLinks[[3]uint64{epoch, hop, uint64(sender)}]
}
