package node

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/libp2p/go-libp2p/core/control"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"
	ma "github.com/multiformats/go-multiaddr"
)

// Who may take part in a run. A run is open (any peer with the matching configuration
// that joins within the join window becomes a member, for demos) unless it is closed by
// one or both of:
//   - a pre-shared swarm key (libp2p private network, Kubo's swarm.key format): peers
//     without the key cannot complete a connection handshake at all;
//   - an allow-list of peer IDs signed by the run's owner (AllowList): the starter admits
//     only listed peers, with at most their listed rows, and joiners accept the
//     announcement and the start message only from the owner and only if every member
//     is listed.
// Joiners may also pin the starter's peer ID (Config.Starter). Row counts, which set the
// members' weights n*rows_i/N, are bounded by the allow-list's max_rows or by
// Config.MaxRows (part of the config hash); a start message whose total exceeds what its
// members may claim is refused. Once the membership is fixed, a connection gater refuses
// every connection from a non-member before any byte of a stream is read.

// AllowEntry is one admitted peer and the most rows it may claim (0: no bound).
type AllowEntry struct {
	ID      string `json:"id"`
	MaxRows int    `json:"max_rows,omitempty"`
}

// AllowList is a run's allow-list, signed by its owner (the starter).
type AllowList struct {
	Run     string       `json:"run"`
	Owner   string       `json:"owner"`
	Members []AllowEntry `json:"members"`
	// Signature is the owner's libp2p signature (base64) over allowSigned(run, owner,
	// members).
	Signature string `json:"signature"`
}

// allowDomain separates allow-list signatures from any other use of the owner's key.
const allowDomain = "dpadmm allow-list v1\n"

func allowSigned(run, owner string, members []AllowEntry) []byte {
	b, _ := json.Marshal(struct {
		Run     string       `json:"run"`
		Owner   string       `json:"owner"`
		Members []AllowEntry `json:"members"`
	}{run, owner, members})
	return append([]byte(allowDomain), b...)
}

// SignAllowList returns the allow-list of run for entries, signed with the owner's key.
// The owner is always admitted (with no row bound unless listed).
func SignAllowList(key crypto.PrivKey, run string, entries []AllowEntry) (*AllowList, error) {
	owner, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, err
	}
	a := &AllowList{Run: run, Owner: owner.String(), Members: append([]AllowEntry(nil), entries...)}
	if a.bound(owner) < 0 {
		a.Members = append([]AllowEntry{{ID: owner.String()}}, a.Members...)
	}
	if err := a.check(); err != nil {
		return nil, err
	}
	sig, err := key.Sign(allowSigned(a.Run, a.Owner, a.Members))
	if err != nil {
		return nil, err
	}
	a.Signature = base64.StdEncoding.EncodeToString(sig)
	return a, nil
}

func (a *AllowList) check() error {
	if a.Run == "" {
		return errors.New("node: allow-list: no run")
	}
	if len(a.Members) == 0 {
		return errors.New("node: allow-list: no members")
	}
	seen := map[string]bool{}
	for _, m := range a.Members {
		if _, err := peer.Decode(m.ID); err != nil {
			return fmt.Errorf("node: allow-list: member %q: %v", m.ID, err)
		}
		if seen[m.ID] {
			return fmt.Errorf("node: allow-list: member %s listed twice", m.ID)
		}
		seen[m.ID] = true
		if m.MaxRows < 0 {
			return fmt.Errorf("node: allow-list: member %s: max_rows %d < 0", m.ID, m.MaxRows)
		}
	}
	return nil
}

// ParseAllowList decodes an allow-list and checks it: for run, well formed, and signed by
// its owner (whose public key the owner's peer ID embeds, as Ed25519 IDs do).
func ParseAllowList(b []byte, run string) (*AllowList, error) {
	var a AllowList
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return nil, fmt.Errorf("node: allow-list: %v", err)
	}
	if a.Run != run {
		return nil, fmt.Errorf("node: allow-list is for run %q, not %q", a.Run, run)
	}
	if err := a.check(); err != nil {
		return nil, err
	}
	owner, err := peer.Decode(a.Owner)
	if err != nil {
		return nil, fmt.Errorf("node: allow-list: owner %q: %v", a.Owner, err)
	}
	pub, err := owner.ExtractPublicKey()
	if err != nil {
		return nil, fmt.Errorf("node: allow-list: the owner's peer ID does not embed its public key: %v", err)
	}
	sig, err := base64.StdEncoding.DecodeString(a.Signature)
	if err != nil {
		return nil, fmt.Errorf("node: allow-list: signature: %v", err)
	}
	ok, err := pub.Verify(allowSigned(a.Run, a.Owner, a.Members), sig)
	if err != nil || !ok {
		return nil, errors.New("node: allow-list: the owner's signature does not verify (the file was changed or signed by someone else)")
	}
	if a.bound(owner) < 0 {
		return nil, errors.New("node: allow-list: the owner is not a member")
	}
	return &a, nil
}

// bound returns p's row bound (0: none), or -1 when p is not listed.
func (a *AllowList) bound(p peer.ID) int {
	for _, m := range a.Members {
		if m.ID == p.String() {
			return m.MaxRows
		}
	}
	return -1
}

// ParseSwarmKey decodes a pre-shared key in Kubo's swarm.key format
// ("/key/swarm/psk/1.0.0/", "/base16/", 64 hex digits).
func ParseSwarmKey(b []byte) (pnet.PSK, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	var lines []string
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) != 3 || lines[0] != "/key/swarm/psk/1.0.0/" || lines[1] != "/base16/" {
		return nil, errors.New(`node: swarm key: want three lines "/key/swarm/psk/1.0.0/", "/base16/" and 64 hex digits (Kubo's swarm.key)`)
	}
	k, err := hex.DecodeString(lines[2])
	if err != nil || len(k) != 32 {
		return nil, errors.New("node: swarm key: the key must be 64 hex digits (32 bytes)")
	}
	return pnet.PSK(k), nil
}

// memberGater is the host's connection gater: it admits everyone until the membership is
// fixed, then only members (and refuses a connection from anyone else at the handshake,
// before any stream exists).
type memberGater struct {
	mu      sync.RWMutex
	members *memberTable // nil: not fixed yet (shared, read-only)
	refused atomic.Int64
	onDeny  func(peer.ID)
	relays  map[peer.ID]bool // static circuit relays, admitted even once fixed (set before use)
	// inUse reports whether p is a circuit relay named in this node's or a member's
	// addresses (a relay found through the DHT, set before use); nil: none.
	inUse func(p peer.ID) bool
}

func (g *memberGater) fix(ms []peer.ID) {
	t := memberTableOf(ms)
	g.mu.Lock()
	g.members = t
	g.mu.Unlock()
}

// member reports whether the membership is fixed and whether p belongs to it.
func (g *memberGater) member(p peer.ID) (fixed, in bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	_, in = g.members.index(p)
	return g.members != nil, in
}

func (g *memberGater) allowed(p peer.ID) bool {
	g.mu.RLock()
	_, in := g.members.index(p)
	ok := g.members == nil || in || g.relays[p]
	g.mu.RUnlock()
	if ok || g.inUse != nil && g.inUse(p) {
		return true
	}
	g.refused.Add(1)
	if g.onDeny != nil {
		g.onDeny(p)
	}
	return false
}

func (g *memberGater) InterceptPeerDial(p peer.ID) bool                 { return g.allowed(p) }
func (g *memberGater) InterceptAddrDial(p peer.ID, _ ma.Multiaddr) bool { return g.allowed(p) }
func (g *memberGater) InterceptAccept(network.ConnMultiaddrs) bool      { return true }
func (g *memberGater) InterceptSecured(_ network.Direction, p peer.ID, _ network.ConnMultiaddrs) bool {
	return g.allowed(p)
}
func (g *memberGater) InterceptUpgraded(network.Conn) (bool, control.DisconnectReason) {
	return true, 0
}

// Membership names how a run is closed, for logs and model.json.
func (c *Config) Membership() string {
	var parts []string
	if c.SwarmKey != nil {
		parts = append(parts, "swarm-key")
	}
	if c.Allow != nil {
		parts = append(parts, "allow-list")
	}
	if c.Starter != "" {
		parts = append(parts, "pinned-starter")
	}
	if c.Members != nil {
		parts = append(parts, "static")
	}
	if len(parts) == 0 {
		return "open"
	}
	slices.Sort(parts)
	return strings.Join(parts, "+")
}
