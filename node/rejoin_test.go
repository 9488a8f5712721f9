package node

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/node/store"
)

// TestStartFile: the start record written when the membership is fixed is read back as
// written; a record whose content no longer matches its checksum, one that is not JSON,
// one for another configuration or run, and one that does not name the node are refused
// with ErrStartFile, and a directory without one gives nothing.
func TestStartFile(t *testing.T) {
	ctx := context.Background()
	sh := shards(t, 2)
	dirs := []string{t.TempDir(), t.TempDir()}
	ids := make([]peer.ID, 2)
	for i, d := range dirs {
		id, err := store.DataDirPeerID(d)
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	open := func(mut func(c *Config)) *Node {
		t.Helper()
		c := baseConfig("sf", sh[0], 20)
		c.DataDir = dirs[0]
		if mut != nil {
			mut(&c)
		}
		n, err := New(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	n := open(nil)
	if r, ms, err := n.loadStart(); r != nil || ms != nil || err != nil {
		t.Fatalf("no start.json: %+v %v %v", r, ms, err)
	}
	n.startMsg = ctlMsg{Type: "start", Run: "sf", Hash: n.hash, Members: []string{ids[1].String(), ids[0].String()},
		Addrs: [][]string{{"/ip4/127.0.0.1/tcp/4001"}, {"/ip4/127.0.0.1/tcp/4002"}}, Total: 50, Holder: 1}
	if err := n.saveStart(ids[1]); err != nil {
		t.Fatal(err)
	}
	r, ms, err := n.loadStart()
	if err != nil || len(ms) != 2 || ms[0] != ids[1] || ms[1] != ids[0] || r.Total != 50 || r.Holder != 1 ||
		r.Starter != ids[1].String() || r.Addrs[1][0] != "/ip4/127.0.0.1/tcp/4002" || r.ConfigHash != n.hash {
		t.Fatalf("read back %+v %v %v", r, ms, err)
	}
	good, err := os.ReadFile(filepath.Join(dirs[0], StartFile))
	if err != nil {
		t.Fatal(err)
	}
	n.Close()
	refused := func(name string, content []byte, mut func(c *Config), want string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dirs[0], StartFile), content, 0o600); err != nil {
			t.Fatal(err)
		}
		n := open(mut)
		defer n.Close()
		if _, _, err := n.loadStart(); !errors.Is(err, ErrStartFile) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want ErrStartFile with %q", name, err, want)
		}
	}
	refused("total changed", bytes.Replace(good, []byte(`"total_rows": 50`), []byte(`"total_rows": 60`), 1), nil, "checksum")
	refused("cut", good[:len(good)/2], nil, "corrupt")
	refused("other config", good, func(c *Config) { c.Gamma = 2 }, "config")
	refused("other run", good, func(c *Config) { c.Run = "sf2" }, "for run")
	refused("other data", good, func(c *Config) { c.Data = shards(t, 3)[0] }, "rows of data")
	// A record that names other members only, with a valid checksum.
	other := startRecord{Version: 1, Run: "sf", ConfigHash: r.ConfigHash, Starter: ids[1].String(), Members: []string{ids[1].String(), ids[1].String()}, Total: 50, Rows: sh[0].Rows}
	other.Checksum = other.sum()
	refused("not a member", append(marshal(other), '\n'), nil, "does not name this node")
	if !bytes.Contains(good, []byte(`"checksum"`)) {
		t.Errorf("start.json has no checksum: %s", good)
	}
}

// TestFinalRequest: a member that has written model.json answers a final-model request
// with its model, epoch and hop, which the asking member accepts (acceptFinal); a member
// without model.json answers nothing, and neither does a node to a non-member.
func TestFinalRequest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const hops = 20
	sh := shards(t, 3)
	nodes := staticCluster(t, ctx, "freq", sh[:2], hops, 0, []string{"", ""})
	asker, holder := nodes[0], nodes[1]
	for _, n := range nodes {
		fixMembers(t, n, []peer.ID{asker.ID(), holder.ID()})
	}
	req := marshal(ctlMsg{Type: FinalRequest, Run: "freq", Hash: asker.hash})
	if _, ok := asker.requestFinal(ctx, holder.ID(), req); ok {
		t.Fatal("a member without model.json answered a final-model request")
	}
	z := make([]float64, sh[0].Cols)
	for i := range z {
		z[i] = 0.5 - 0.125*float64(i)
	}
	// A model.json without the final's certificate: answered, but refused by the asker
	// (a member cannot pass off a model without the hop-K hand-off to its releaser).
	m := Model{Run: "freq", ConfigHash: holder.hash, Hops: hops, Epoch: 3, Model: z, ReleasedBy: holder.ID().String()}
	if err := holder.store.WriteAtomic(store.ModelFile, marshal(m)); err != nil {
		t.Fatal(err)
	}
	if f, ok := asker.requestFinal(ctx, holder.ID(), req); !ok {
		t.Fatal("no answer")
	} else if ok, err := asker.acceptFinal(f); ok || err == nil {
		t.Fatal("a final without its certificate was accepted")
	}
	// With the certificate: the asker's own signed hand-off of hop K to the holder.
	m.Cert = certFor(t, asker, 0, "freq", 3, hops, z, holder.ID())
	if err := holder.store.WriteAtomic(store.ModelFile, marshal(m)); err != nil {
		t.Fatal(err)
	}
	f, ok := asker.requestFinal(ctx, holder.ID(), req)
	if !ok || f.from != holder.ID() || f.m.Type != "final" || f.m.Epoch != 3 || f.m.Hop != hops || !sameBits(f.m.Model, z) {
		t.Fatalf("answer %+v from %s (%v)", f.m, f.from, ok)
	}
	if ok, err := asker.acceptFinal(f); !ok || err != nil {
		t.Fatalf("answered final not accepted: %v", err)
	}
	if !sameBits(asker.fin.model.Model, z) || asker.fin.model.ReleasedBy != holder.ID().String() {
		t.Fatalf("kept model %+v", asker.fin.model)
	}
	// A non-member gets nothing.
	holder.mu.Lock()
	holder.setMemberList([]peer.ID{holder.ID()}, 0)
	holder.mu.Unlock()
	if _, ok := asker.requestFinal(ctx, holder.ID(), req); ok {
		t.Fatal("a final-model request from a non-member was answered")
	}
}

// TestRejoinFromStartFile: nodes whose data directories hold a start.json (as after a
// stop between the start message and the first hop) skip announce/join, take the
// recorded membership, the starter re-sends the initial token to the recorded holder,
// and the walk ends with the model of a sequential reference run of that membership
// and holder, bit for bit.
func TestRejoinFromStartFile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n, hops, holder = 3, 40, 2
	sh := shards(t, n)
	dirs := make([]string, n)
	ids := make([]peer.ID, n)
	names := make([]string, n)
	total := 0
	for i := range dirs {
		dirs[i] = t.TempDir()
		id, err := store.DataDirPeerID(dirs[i])
		if err != nil {
			t.Fatal(err)
		}
		ids[i], names[i] = id, id.String()
		total += sh[i].Rows
	}
	nodes := make([]*Node, n)
	for i := range nodes {
		c := baseConfig("sfrun", sh[i], hops)
		c.DataDir, c.Start = dirs[i], i == 0
		nd, err := New(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		nd.startMsg = ctlMsg{Type: "start", Run: "sfrun", Hash: nd.hash, Members: names, Total: total, Holder: holder}
		if err := nd.saveStart(ids[0]); err != nil {
			t.Fatal(err)
		}
		nd.startMsg = ctlMsg{} // Run must take it from the file
		nodes[i] = nd
	}
	connectAll(t, ctx, nodes)
	models := runAll(t, ctx, nodes)
	want := reference(t, sh, hops, holder)
	for i, m := range models {
		if !sameBits(m.Model, want) || m.Index != i || m.Nodes != n {
			t.Fatalf("node %d: index %d of %d, model %v; reference %v", i, m.Index, m.Nodes, m.Model, want)
		}
	}
}

// TestRADMMRejoinFromStartFile: R-ADMM members whose data directories hold a start.json
// but no journal yet (as after a stop between the start message and the first release)
// skip announce/join, take the recorded membership and total rows, and end with the
// models of an in-process run of the same machines, bit for bit.
func TestRADMMRejoinFromStartFile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	d := radmmData(t)
	sh, err := consensus.Split(d, 3, "iid", 5)
	if err != nil {
		t.Fatal(err)
	}
	p := RADMMParams{Algo: "radmm", Graph: "ring", Iters: 8, Alpha: 2, Eta: 1, Gamma: 0.5, PaperC: 5, Barrier: 15 * time.Second}
	nodes, logs, _ := radmmCluster(t, ctx, "gsf", sh, p)
	names := make([]string, len(nodes))
	for i, nd := range nodes {
		names[i] = nd.ID().String()
	}
	for _, nd := range nodes {
		nd.startMsg = ctlMsg{Type: "start", Run: "gsf", Hash: nd.hash, Members: names, Total: d.Rows}
		if err := nd.saveStart(nodes[0].ID()); err != nil {
			t.Fatal(err)
		}
		nd.startMsg = ctlMsg{}
	}
	models := make([]*RADMMModel, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, nd := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); models[i], errs[i] = nd.RunRADMM(ctx) }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: %v\n%s", i, err, logs[i].String())
		}
	}
	ref := radmmReference(t, sh, p, d.Rows)
	for i, m := range models {
		if m.Index != i || m.TotalRows != d.Rows || !sameFloats(m.Model, ref[i]) {
			t.Fatalf("node %d: index %d, total rows %d, model %v; reference %v", i, m.Index, m.TotalRows, m.Model, ref[i])
		}
		if !strings.Contains(logs[i].String(), "rejoining the run") {
			t.Errorf("node %d did not take the membership from start.json:\n%s", i, logs[i].String())
		}
	}
}
