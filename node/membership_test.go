package node

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/node/store"
	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/rs/zerolog"
)

func newKeyID(t *testing.T) (crypto.PrivKey, peer.ID) {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := peer.IDFromPrivateKey(k)
	return k, id
}

// TestAllowListSignature: a signed list parses; any change to it, a list signed by another
// key under the owner's name, or a list for another run is refused.
func TestAllowListSignature(t *testing.T) {
	k, owner := newKeyID(t)
	_, a := newKeyID(t)
	other, _ := newKeyID(t)
	l, err := SignAllowList(k, "r", []AllowEntry{{ID: a.String(), MaxRows: 10}})
	if err != nil {
		t.Fatal(err)
	}
	if l.Owner != owner.String() || l.bound(owner) != 0 || l.bound(a) != 10 {
		t.Fatalf("list %+v", l)
	}
	b, _ := json.Marshal(l)
	if _, err := ParseAllowList(b, "r"); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseAllowList(b, "s"); err == nil {
		t.Error("a list for run r accepted for run s")
	}
	tampered := strings.Replace(string(b), `"max_rows":10`, `"max_rows":1000000000`, 1)
	if _, err := ParseAllowList([]byte(tampered), "r"); err == nil || !strings.Contains(err.Error(), "signature") {
		t.Errorf("a changed row bound accepted: %v", err)
	}
	forged, _ := SignAllowList(other, "r", []AllowEntry{{ID: a.String()}, {ID: owner.String()}})
	forged.Owner = owner.String()
	fb, _ := json.Marshal(forged)
	if _, err := ParseAllowList(fb, "r"); err == nil {
		t.Error("a list signed by another key under the owner's name accepted")
	}
	for _, bad := range []string{`{}`, `{"run":"r","owner":"x","members":[],"signature":""}`, `not json`} {
		if _, err := ParseAllowList([]byte(bad), "r"); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestSwarmKeyParse: Kubo's format parses; anything else is refused.
func TestSwarmKeyParse(t *testing.T) {
	good := "/key/swarm/psk/1.0.0/\n/base16/\n" + strings.Repeat("ab", 32) + "\n"
	if k, err := ParseSwarmKey([]byte(good)); err != nil || len(k) != 32 || k[0] != 0xab {
		t.Fatalf("%v %v", k, err)
	}
	for _, bad := range []string{"", "/key/swarm/psk/1.0.0/\n/base64/\nabc\n", "/key/swarm/psk/1.0.0/\n/base16/\nabcd\n",
		"/key/swarm/psk/1.0.0/\n/base16/\n" + strings.Repeat("zz", 32) + "\n"} {
		if _, err := ParseSwarmKey([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestClosedRunRefusesOutsiders: a run closed by an allow-list. An outsider with the
// run's configuration, and a listed peer that claims more rows than its bound, both join
// during the join window; the starter admits neither, the run ends with the two honest
// members, and neither outsider writes a ledger entry. A start hijack (a rogue peer
// announcing the same configuration and publishing its own start message that lists the
// honest joiner) is ignored by the joiner, which pinned the owner.
func TestClosedRunRefusesOutsiders(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sh := shards(t, 4)
	const hops = 20
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()}
	ids := make([]peer.ID, 4)
	for i := range ids {
		ids[i], _ = store.DataDirPeerID(dirs[i])
	}
	st, _ := store.Open(dirs[0])
	key, _ := st.Identity()
	st.Close()
	// Node 0 owns the run; 1 is listed; 2 is listed with a bound below its rows; 3 is not
	// listed at all.
	allow, err := SignAllowList(key, "closed", []AllowEntry{{ID: ids[1].String()}, {ID: ids[2].String(), MaxRows: 1}})
	if err != nil {
		t.Fatal(err)
	}
	var logs [4]syncBuffer
	nodes := make([]*Node, 4)
	for i := range nodes {
		c := baseConfig("closed", sh[i], hops)
		c.DataDir, c.Allow = dirs[i], allow
		c.Logger = zerolog.New(&logs[i])
		if i == 0 {
			c.Start, c.MinPeers, c.JoinWindow = true, 2, 1500*time.Millisecond
		}
		if i >= 2 {
			// An outsider does not check itself against the list (an honest node holding
			// it refuses to start: TestJoinerChecksAllowList); the starter's rule is what
			// this test exercises.
			c.Allow = nil
		}
		nd, err := New(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		nodes[i] = nd
	}
	connectAll(t, ctx, nodes)
	octx, ocancel := context.WithCancel(ctx)
	outs := make(chan error, 2)
	for _, i := range []int{2, 3} {
		go func() { _, err := nodes[i].Run(octx); outs <- err }()
	}
	models := runAll(t, ctx, nodes[:2])
	ocancel()
	for range 2 {
		if err := <-outs; !errors.Is(err, context.Canceled) {
			t.Fatalf("refused node: %v, want it still waiting", err)
		}
	}
	for i, m := range models {
		if m.Nodes != 2 || m.Membership != "allow-list" {
			t.Fatalf("node %d: %d members, membership %q", i, m.Nodes, m.Membership)
		}
	}
	for _, i := range []int{2, 3} {
		if nodes[i].Store().Entries() != 0 {
			t.Errorf("refused node %d wrote ledger entries", i)
		}
	}
	log0 := logs[0].String()
	for _, want := range []string{"not on the run's allow-list", "claims", "more than the 1 it may"} {
		if !strings.Contains(log0, want) {
			t.Errorf("starter log lacks %q", want)
		}
	}
}

// TestPinnedStarterIgnoresHijack: a joiner pinned to the owner ignores another peer that
// announces the same configuration and publishes a start message listing the joiner.
func TestPinnedStarterIgnoresHijack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sh := shards(t, 2)
	dirs := []string{t.TempDir(), t.TempDir()}
	owner, _ := newKeyID(t)
	ownerID, _ := peer.IDFromPrivateKey(owner)
	var log syncBuffer
	c := baseConfig("pinned", sh[1], 10)
	c.DataDir, c.Starter, c.Logger = dirs[1], ownerID, zerolog.New(&log)
	joiner, err := New(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer joiner.Close()
	rc := baseConfig("pinned", sh[0], 10)
	rc.DataDir, rc.Start, rc.MinPeers, rc.JoinWindow = dirs[0], true, 2, 300*time.Millisecond
	rc.Starter = ownerID // the rogue claims nothing: it simply starts
	if _, err := New(ctx, rc); err == nil || !strings.Contains(err.Error(), "pins another peer") {
		t.Fatalf("a starter not matching --starter: %v", err)
	}
	rc.Starter = ""
	rogue, err := New(ctx, rc)
	if err != nil {
		t.Fatal(err)
	}
	defer rogue.Close()
	connectAll(t, ctx, []*Node{rogue, joiner})
	jctx, jcancel := context.WithTimeout(ctx, 4*time.Second)
	defer jcancel()
	done := make(chan error, 2)
	go func() { _, err := joiner.Run(jctx); done <- err }()
	go func() { _, err := rogue.Run(jctx); done <- err }()
	if err := <-done; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first to end: %v, want both still waiting", err)
	}
	<-done
	if joiner.Store().Entries() != 0 {
		t.Error("the pinned joiner took part in the rogue's run")
	}
	if !strings.Contains(log.String(), "other than the pinned starter") {
		t.Errorf("joiner log lacks the refusal:\n%.2000s", log.String())
	}
}

// TestSwarmKeyClosesTransport: two nodes with the swarm key connect; a host without it
// (or with another key) cannot, and a node with the key listens on TCP only.
func TestSwarmKeyClosesTransport(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sh := shards(t, 2)
	psk, _ := ParseSwarmKey([]byte("/key/swarm/psk/1.0.0/\n/base16/\n" + strings.Repeat("3c", 32) + "\n"))
	nodes := make([]*Node, 2)
	for i := range nodes {
		c := baseConfig("psk", sh[i], 5)
		c.DataDir, c.SwarmKey = t.TempDir(), psk
		c.Listen = []string{"/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1"}
		nd, err := New(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		nodes[i] = nd
		for _, a := range nd.Host.Addrs() {
			if strings.Contains(a.String(), "quic") {
				t.Errorf("node with a swarm key listens on %s", a)
			}
		}
	}
	if err := nodes[1].Host.Connect(ctx, peer.AddrInfo{ID: nodes[0].ID(), Addrs: nodes[0].Host.Addrs()}); err != nil {
		t.Fatalf("members with the key: %v", err)
	}
	plain, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	other, _ := ParseSwarmKey([]byte("/key/swarm/psk/1.0.0/\n/base16/\n" + strings.Repeat("4d", 32) + "\n"))
	wrong, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.PrivateNetwork(other))
	if err != nil {
		t.Fatal(err)
	}
	defer wrong.Close()
	for name, h := range map[string]interface {
		Connect(context.Context, peer.AddrInfo) error
	}{"no key": plain, "another key": wrong} {
		cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
		if err := h.Connect(cctx, peer.AddrInfo{ID: nodes[0].ID(), Addrs: nodes[0].Host.Addrs()}); err == nil {
			t.Errorf("%s: connected to a node of a private network", name)
		}
		ccancel()
	}
	// A node with another key that dials a member is told why it fails.
	c := baseConfig("psk", sh[1], 5)
	c.DataDir, c.SwarmKey = t.TempDir(), other
	odd, err := New(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer odd.Close()
	addr := nodes[0].Host.Addrs()[0].String() + "/p2p/" + nodes[0].ID().String()
	if err := odd.dial(ctx, addr); err == nil || !strings.Contains(err.Error(), "check that both hold the same key file") {
		t.Errorf("dial with another key: %v", err)
	}
}

// TestMemberVerdict: the control validator's membership rules: a final from a non-member
// (once the membership is fixed) and a start or announcement from anyone but the pinned
// starter are rejected; everything else passes to the other checks.
func TestMemberVerdict(t *testing.T) {
	_, a := newKeyID(t)
	_, b := newKeyID(t)
	n := &Node{gater: &memberGater{}}
	final := []byte(`{"type":"final","run":"r"}`)
	start := []byte(`{"type":"start","run":"r"}`)
	if why := n.memberVerdict(b, final); why != "" {
		t.Errorf("final before the membership is fixed: %q", why)
	}
	n.gater.fix([]peer.ID{a})
	if why := n.memberVerdict(b, final); why != "final from a non-member" {
		t.Errorf("final from a non-member: %q", why)
	}
	if why := n.memberVerdict(a, final); why != "" {
		t.Errorf("final from a member: %q", why)
	}
	if why := n.memberVerdict(b, start); why != "" {
		t.Errorf("start in an open run: %q", why)
	}
	n.cfg.Starter = a
	if why := n.memberVerdict(b, start); !strings.Contains(why, "pinned starter") {
		t.Errorf("start from another peer: %q", why)
	}
	if why := n.memberVerdict(a, start); why != "" {
		t.Errorf("start from the pinned starter: %q", why)
	}
}

// TestOpenRunCapsRows: in a run without --max-rows or an allow-list, the starter admits
// at most OpenRowFactor times its own rows per member: a joiner claiming more stops with
// ErrRowCap and a message that says how to proceed, and the run goes on with the others
// (weights stay n*rows_i/N over the admitted members).
func TestOpenRunCapsRows(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d, _ := consensus.SyntheticLogistic(120, 4, 3, 5)
	small, err := consensus.Split(d, 40, "iid", 5) // 3 rows each
	if err != nil {
		t.Fatal(err)
	}
	big, err := consensus.Split(d, 3, "iid", 5) // 40 rows: more than 10 x 3
	if err != nil {
		t.Fatal(err)
	}
	data := []*consensus.Dataset{small[0], small[1], big[0]}
	var logs [3]syncBuffer
	nodes := make([]*Node, 3)
	for i := range nodes {
		c := baseConfig("opencap", data[i], 12)
		c.DataDir, c.Logger = t.TempDir(), zerolog.New(&logs[i])
		if i == 0 {
			c.Start, c.MinPeers, c.JoinWindow = true, 2, 1500*time.Millisecond
		}
		nd, err := New(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		nodes[i] = nd
	}
	connectAll(t, ctx, nodes)
	bigErr := make(chan error, 1)
	go func() { _, err := nodes[2].Run(ctx); bigErr <- err }()
	models := runAll(t, ctx, nodes[:2])
	select {
	case err := <-bigErr:
		if !errors.Is(err, ErrRowCap) || !strings.Contains(err.Error(), "--max-rows 40") {
			t.Fatalf("the over-claiming joiner: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the over-claiming joiner did not stop")
	}
	for i, m := range models {
		if m.Nodes != 2 || m.Membership != "open" {
			t.Fatalf("node %d: %d members, membership %q", i, m.Nodes, m.Membership)
		}
	}
	if nodes[2].Store().Entries() != 0 {
		t.Error("the refused joiner wrote ledger entries")
	}
	if !strings.Contains(logs[0].String(), "members may claim at most 30 rows each") {
		t.Errorf("the starter does not say what it admits:\n%.3000s", logs[0].String())
	}
}

// TestJoinerChecksAllowList: a joiner holding the run's allow-list refuses to start when
// it is not on it, or holds more rows than its bound, naming its peer ID: the starter
// would refuse its join without telling it.
func TestJoinerChecksAllowList(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sh := shards(t, 2)
	dirs := []string{t.TempDir(), t.TempDir()}
	owner, _ := store.Open(dirs[0])
	key, _ := owner.Identity()
	owner.Close()
	joiner, _ := store.DataDirPeerID(dirs[1])
	for _, c := range []struct {
		entries []AllowEntry
		want    string
	}{
		{nil, "is not on the allow-list of run"},
		{[]AllowEntry{{ID: joiner.String(), MaxRows: 1}}, "more than the 1 the allow-list"},
	} {
		allow, err := SignAllowList(key, "closed", c.entries)
		if err != nil {
			t.Fatal(err)
		}
		cfg := baseConfig("closed", sh[1], 10)
		cfg.DataDir, cfg.Allow = dirs[1], allow
		if nd, err := New(ctx, cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			if nd != nil {
				nd.Close()
			}
			t.Errorf("%v: %v, want %q", c.entries, err, c.want)
		}
	}
}
