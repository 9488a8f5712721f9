//go:build netns

package node

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dpadmm/dpadmm/node/store"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

// The DHT network-namespace tests attach real `dpadmm node --profile internet` processes
// to bootstrap servers configured like the public Amino DHT (node/testdata/dhtserver:
// /ipfs/kad/1.0.0, server mode, public query and routing-table filters, public addresses
// only). Every host is a network namespace on one bridge in a namespace of its own, with
// an address in 5.0.0.0/24, which go-multiaddr calls public (the TEST-NET ranges are
// "unroutable" to it, and the public filters would drop them); nothing routes out of the
// bridge. Needs root, iproute2 and (for the relay case) iptables:
//
//	sudo go test -tags netns -run DHTNetns -v ./node/

const (
	labPrefix = "dpx-"
	labWAN    = labPrefix + "wan"
)

var labBuild struct {
	once      sync.Once
	dir       string
	node, srv string
	err       error
}

// labBinaries builds dpadmm and the DHT server once for every test of the package.
func labBinaries(t *testing.T) (nodeBin, srvBin string) {
	t.Helper()
	labBuild.once.Do(func() {
		labBuild.dir, labBuild.err = os.MkdirTemp("", "dpx-bin")
		if labBuild.err != nil {
			return
		}
		labBuild.node = filepath.Join(labBuild.dir, "dpadmm")
		labBuild.srv = filepath.Join(labBuild.dir, "dhtserver")
		for _, b := range [][2]string{{labBuild.node, "./cmd/dpadmm"}, {labBuild.srv, "./node/testdata/dhtserver"}} {
			cmd := exec.Command("go", "build", "-o", b[0], b[1])
			cmd.Dir = ".."
			if out, err := cmd.CombinedOutput(); err != nil {
				labBuild.err = fmt.Errorf("go build %s: %v\n%s", b[1], err, out)
				return
			}
		}
	})
	if labBuild.err != nil {
		t.Fatal(labBuild.err)
	}
	return labBuild.node, labBuild.srv
}

type labProc struct {
	name     string
	started  time.Time
	cmd      *exec.Cmd
	out, err string // files
	done     chan error
}

type lab struct {
	t         *testing.T
	nodeBin   string
	srvBin    string
	work      string
	nss       []string
	procs     []*labProc
	nextVeth  int
	startedAt time.Time
}

func labRun(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// newLab makes the bridge namespace; the other namespaces are added by host and natHost.
func newLab(t *testing.T) *lab {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2")
	}
	nodeBin, srvBin := labBinaries(t)
	work := t.TempDir()
	if keep := os.Getenv("DPADMM_NETNS_KEEP"); keep != "" {
		// Keep the logs and data directories of the run (DPADMM_NETNS_KEEP=DIR).
		work = filepath.Join(keep, t.Name())
		os.RemoveAll(work)
		if err := os.MkdirAll(work, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	l := &lab{t: t, nodeBin: nodeBin, srvBin: srvBin, work: work, startedAt: time.Now()}
	l.clearStale()
	t.Cleanup(l.cleanup)
	l.addNS(labWAN)
	labRun(t, "ip", "-n", labWAN, "link", "add", "br0", "type", "bridge")
	labRun(t, "ip", "-n", labWAN, "link", "set", "br0", "up")
	return l
}

func (l *lab) clearStale() {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], labPrefix) {
			exec.Command("ip", "netns", "del", f[0]).Run()
		}
	}
}

func (l *lab) cleanup() {
	for _, p := range l.procs {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			<-p.done
		}
	}
	for i := len(l.nss) - 1; i >= 0; i-- {
		exec.Command("ip", "netns", "del", l.nss[i]).Run()
	}
}

func (l *lab) addNS(ns string) {
	labRun(l.t, "ip", "netns", "add", ns)
	l.nss = append(l.nss, ns)
	labRun(l.t, "ip", "-n", ns, "link", "set", "lo", "up")
}

// host adds namespace dpx-<name> with eth0 on the bridge at ip/24 and returns its name.
func (l *lab) host(name, ip string) string {
	ns := labPrefix + name
	l.addNS(ns)
	l.nextVeth++
	peer := fmt.Sprintf("v%d", l.nextVeth)
	labRun(l.t, "ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", peer, "netns", labWAN)
	labRun(l.t, "ip", "-n", labWAN, "link", "set", peer, "master", "br0", "up")
	labRun(l.t, "ip", "-n", ns, "addr", "add", ip+"/24", "dev", "eth0")
	labRun(l.t, "ip", "-n", ns, "link", "set", "eth0", "up")
	return ns
}

// natHost adds a home network behind a NAT gateway: dpx-<name>-gw sits on the bridge at
// gwIP and masquerades 10.9.0.0/24; dpx-<name> holds 10.9.0.2 with the gateway as its
// default route. Nothing on the bridge can open a connection to it, and it can open
// connections only to the addresses in reach (so that no hole punch or outbound dial
// replaces the relay).
func (l *lab) natHost(name, gwIP string, reach ...string) string {
	if _, err := exec.LookPath("iptables"); err != nil {
		l.t.Skip("needs iptables for the NAT gateway")
	}
	gw := l.host(name+"-gw", gwIP)
	ns := labPrefix + name
	l.addNS(ns)
	labRun(l.t, "ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", "eth1", "netns", gw)
	labRun(l.t, "ip", "-n", gw, "addr", "add", "10.9.0.1/24", "dev", "eth1")
	labRun(l.t, "ip", "-n", gw, "link", "set", "eth1", "up")
	labRun(l.t, "ip", "-n", ns, "addr", "add", "10.9.0.2/24", "dev", "eth0")
	labRun(l.t, "ip", "-n", ns, "link", "set", "eth0", "up")
	labRun(l.t, "ip", "-n", ns, "route", "add", "default", "via", "10.9.0.1")
	labRun(l.t, "ip", "netns", "exec", gw, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
	labRun(l.t, "ip", "netns", "exec", gw, "iptables", "-t", "nat", "-A", "POSTROUTING", "-s", "10.9.0.0/24", "-o", "eth0", "-j", "MASQUERADE")
	// Unsolicited inbound traffic is dropped, as by a home router.
	labRun(l.t, "ip", "netns", "exec", gw, "iptables", "-A", "FORWARD", "-i", "eth0", "-m", "conntrack", "!", "--ctstate", "ESTABLISHED,RELATED", "-j", "DROP")
	for _, ip := range reach {
		labRun(l.t, "ip", "netns", "exec", gw, "iptables", "-A", "FORWARD", "-i", "eth1", "-d", ip, "-j", "ACCEPT")
	}
	labRun(l.t, "ip", "netns", "exec", gw, "iptables", "-A", "FORWARD", "-i", "eth1", "-j", "DROP")
	return ns
}

func (l *lab) start(ns, name, bin string, args ...string) *labProc {
	p := &labProc{name: name, out: filepath.Join(l.work, name+".out"), err: filepath.Join(l.work, name+".err"), done: make(chan error, 1)}
	fo, err := os.Create(p.out)
	if err != nil {
		l.t.Fatal(err)
	}
	fe, err := os.Create(p.err)
	if err != nil {
		l.t.Fatal(err)
	}
	p.cmd = exec.Command("ip", append([]string{"netns", "exec", ns, bin}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = fo, fe
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		l.t.Fatal(err)
	}
	go func() { err := p.cmd.Wait(); fo.Close(); fe.Close(); p.done <- err }()
	l.procs = append(l.procs, p)
	return p
}

// server starts a public-style DHT server in ns, connected to the given servers, and
// returns its TCP multiaddr. A peer "-relay-service" makes it a relay too.
func (l *lab) server(ns, name string, peers ...string) string {
	file := filepath.Join(l.work, name+".addr")
	args := []string{"-listen", "/ip4/0.0.0.0/tcp/4001", "-addr-file", file}
	if len(peers) > 0 && peers[0] == "-relay-service" {
		args, peers = append(args, peers[0]), peers[1:]
	}
	for _, p := range peers {
		args = append(args, "-peer", p)
	}
	p := l.start(ns, name, l.srvBin, args...)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(file); err == nil {
			return strings.Fields(string(b))[0]
		}
		select {
		case err := <-p.done:
			p.done <- err
			l.t.Fatalf("dht server %s exited: %v\n%s", name, err, l.read(p.err))
		case <-time.After(100 * time.Millisecond):
		}
	}
	l.t.Fatalf("dht server %s wrote no address", name)
	return ""
}

func (l *lab) read(file string) string {
	b, _ := os.ReadFile(file)
	return string(b)
}

// member is one `dpadmm node` of a lab run.
type member struct {
	ns, name string
	shard    string
	args     []string
	dir      string
	p        *labProc
}

// runMembers starts the members (the first one starts the run) and waits for all.
func (l *lab) runMembers(ms []*member, timeout time.Duration) {
	for _, m := range ms {
		if m.dir == "" {
			m.dir = filepath.Join(l.work, m.name)
		}
		args := append([]string{"node", "--run", "dhtlab", "--data", "embedded", "--shard", m.shard,
			"--datadir", m.dir, "--profile", "internet", "--log-format", "json", "--log-level", "info", "--quiet"}, m.args...)
		m.p = l.start(m.ns, m.name, l.nodeBin, args...)
	}
	deadline := time.After(timeout)
	for _, m := range ms {
		select {
		case err := <-m.p.done:
			if err != nil {
				l.dump(ms)
				l.t.Fatalf("%s: %v", m.name, err)
			}
		case <-deadline:
			l.dump(ms)
			l.t.Fatalf("run not finished after %v (%s still running)", timeout, m.name)
		}
	}
}

func (l *lab) dump(ms []*member) {
	for _, p := range l.procs {
		l.t.Logf("==== %s stderr\n%s", p.name, lastLines(l.read(p.err), 60))
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// sameModel checks that every member wrote model.json with one and the same model.
func sameModel(t *testing.T, ms []*member) []float64 {
	t.Helper()
	var first []float64
	for i, m := range ms {
		b, err := os.ReadFile(filepath.Join(m.dir, store.ModelFile))
		if err != nil {
			t.Fatalf("%s: %v", m.name, err)
		}
		var f struct {
			Model []float64 `json:"model"`
			Nodes int       `json:"nodes"`
		}
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatalf("%s: %v", m.name, err)
		}
		if f.Nodes != len(ms) || len(f.Model) == 0 {
			t.Fatalf("%s: %d nodes, model %v", m.name, f.Nodes, f.Model)
		}
		if i == 0 {
			first = f.Model
		} else if !sameBits(first, f.Model) {
			t.Fatalf("%s holds another model:\n%v\n%v", m.name, first, f.Model)
		}
	}
	return first
}

type logLine struct {
	Time    string `json:"time"`
	Message string `json:"message"`
	Members int    `json:"members"`
	Via     string `json:"via"`
	To      string `json:"to"`
	Peer    string // the last "peer" key: the remote peer where one is named
	Self    string // the first "peer" key: the logging node
	Addrs   []string
	t       time.Time
}

func logLines(t *testing.T, file string) []logLine {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []logLine
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var raw map[string]json.RawMessage
		if json.Unmarshal(sc.Bytes(), &raw) != nil {
			continue
		}
		var ll logLine
		json.Unmarshal(sc.Bytes(), &ll)
		if a, ok := raw["addrs"]; ok {
			json.Unmarshal(a, &ll.Addrs)
		}
		// "peer" appears twice on lines about a remote peer: the node's own, then the
		// remote one; a map keeps only the last.
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.Token()
		for dec.More() {
			k, _ := dec.Token()
			var v json.RawMessage
			if dec.Decode(&v) != nil {
				break
			}
			var str string
			if k == "peer" && json.Unmarshal(v, &str) == nil {
				if ll.Self == "" {
					ll.Self = str
				}
				ll.Peer = str
			}
		}
		if ll.t, err = time.Parse(LogTimeFormat, ll.Time); err != nil {
			continue
		}
		out = append(out, ll)
	}
	return out
}

// firstLog is the time of the first line of file with this message (and at least
// members members when members > 0).
func firstLog(t *testing.T, file, msg string, members int) (logLine, bool) {
	for _, ll := range logLines(t, file) {
		if ll.Message == msg && ll.Members >= members {
			return ll, true
		}
	}
	return logLine{}, false
}

// discoveryTime is the time from the earliest "dht routing table filled" of any member
// to the starter's join of the last of the n members: how long the rendezvous took
// once the members were attached to the DHT.
func discoveryTime(t *testing.T, ms []*member) time.Duration {
	t.Helper()
	var filled time.Time
	for _, m := range ms {
		ll, ok := firstLog(t, m.p.err, "dht routing table filled", 0)
		if !ok {
			t.Fatalf("%s: no routing-table line", m.name)
		}
		if filled.IsZero() || ll.t.Before(filled) {
			filled = ll.t
		}
	}
	joined, ok := firstLog(t, ms[0].p.err, "peer joined", len(ms))
	if !ok {
		t.Fatalf("starter: no join of member %d", len(ms))
	}
	return joined.t.Sub(filled)
}

// TestLabAddressesPublic: the lab's addresses are public to go-multiaddr (else the
// servers' filters would drop them and the test would not model the public network),
// and the NAT'd home network is not.
func TestLabAddressesPublic(t *testing.T) {
	for _, ip := range []string{"5.0.0.1", "5.0.0.254"} {
		if !manet.IsPublicAddr(ma.StringCast("/ip4/" + ip + "/tcp/1")) {
			t.Errorf("%s is not public to manet", ip)
		}
	}
	if manet.IsPublicAddr(ma.StringCast("/ip4/10.9.0.2/tcp/1")) {
		t.Error("10.9.0.2 is public to manet")
	}
}

// TestDHTNetnsOneServer: three members and one public-style DHT server; the members find
// each other through the rendezvous within 30 s of their routing tables filling and
// finish with the same model.
func TestDHTNetnsOneServer(t *testing.T) {
	l := newLab(t)
	s := l.server(l.host("s1", "5.0.0.1"), "s1")
	ms := []*member{
		{ns: l.host("a", "5.0.0.2"), name: "a", shard: "0/3", args: []string{"--start", "--min-peers", "3", "--join-window", "2s"}},
		{ns: l.host("b", "5.0.0.3"), name: "b", shard: "1/3"},
		{ns: l.host("c", "5.0.0.4"), name: "c", shard: "2/3"},
	}
	for _, m := range ms {
		m.args = append(m.args, "--bootstrap", s, "--hops", "200")
	}
	l.runMembers(ms, 150*time.Second)
	model := sameModel(t, ms)
	d := discoveryTime(t, ms)
	t.Logf("routing table filled -> all members joined: %v; wall %v; model %v", d.Round(time.Millisecond), time.Since(l.startedAt).Round(time.Second), model[:3])
	if d > 30*time.Second {
		t.Fatalf("members found %v after the routing tables filled (want <= 30s)", d)
	}
}

// TestDHTNetnsTwoServers: two DHT servers that know only each other; two members
// bootstrap from the first, one from the second.
func TestDHTNetnsTwoServers(t *testing.T) {
	l := newLab(t)
	s1 := l.server(l.host("s1", "5.0.0.1"), "s1")
	s2 := l.server(l.host("s2", "5.0.0.5"), "s2", s1)
	ms := []*member{
		{ns: l.host("a", "5.0.0.2"), name: "a", shard: "0/3", args: []string{"--start", "--min-peers", "3", "--join-window", "2s", "--bootstrap", s1}},
		{ns: l.host("b", "5.0.0.3"), name: "b", shard: "1/3", args: []string{"--bootstrap", s1}},
		{ns: l.host("c", "5.0.0.4"), name: "c", shard: "2/3", args: []string{"--bootstrap", s2}},
	}
	for _, m := range ms {
		m.args = append(m.args, "--hops", "200")
	}
	l.runMembers(ms, 150*time.Second)
	model := sameModel(t, ms)
	d := discoveryTime(t, ms)
	t.Logf("routing table filled -> all members joined: %v; wall %v; model %v", d.Round(time.Millisecond), time.Since(l.startedAt).Round(time.Second), model[:3])
	if d > 30*time.Second {
		t.Fatalf("members found %v after the routing tables filled (want <= 30s)", d)
	}
}

// TestDHTNetnsRelay: a member behind a NAT gateway that drops unsolicited inbound
// traffic and lets it reach only the DHT server and the relay gets a circuit-relay v2
// reservation on a member that runs --relay-service and publishes the /p2p-circuit
// address; the two other members can reach it only through the relay. The starter's
// join window (35 s) leaves time for AutoNAT to find the member unreachable (its first
// probe comes 15 s after start, a dial-back fails after up to 15 s more) and for the
// reservation. All four finish with the same model, the NAT'd member having taken hops.
func TestDHTNetnsRelay(t *testing.T) {
	l := newLab(t)
	s := l.server(l.host("s1", "5.0.0.1"), "s1")
	rdir := filepath.Join(l.work, "r")
	id, err := exec.Command(l.nodeBin, "keys", "id", "--datadir", rdir).Output()
	if err != nil {
		t.Fatal(err)
	}
	relay := "/ip4/5.0.0.6/tcp/4001/p2p/" + strings.TrimSpace(string(id))
	ms := []*member{
		{ns: l.host("a", "5.0.0.2"), name: "a", shard: "0/4", args: []string{"--start", "--min-peers", "4", "--join-window", "35s"}},
		{ns: l.host("b", "5.0.0.3"), name: "b", shard: "1/4"},
		{ns: l.host("r", "5.0.0.6"), name: "r", shard: "2/4", dir: rdir, args: []string{"--relay-service", "--listen", "/ip4/0.0.0.0/tcp/4001"}},
		{ns: l.natHost("d", "5.0.0.7", "5.0.0.1", "5.0.0.6"), name: "d", shard: "3/4", args: []string{"--relay", relay}},
	}
	for _, m := range ms {
		m.args = append(m.args, "--bootstrap", s, "--hops", "400")
	}
	l.runMembers(ms, 240*time.Second)
	model := sameModel(t, ms)
	d := ms[3]
	var circuit logLine
	for _, ll := range logLines(t, d.p.err) {
		for _, a := range ll.Addrs {
			if ll.Message == "published addresses changed" && strings.Contains(a, "/p2p-circuit") && circuit.Time == "" {
				circuit = ll
			}
		}
	}
	if circuit.Time == "" {
		l.dump(ms)
		t.Fatal("the NAT'd member never published a /p2p-circuit address")
	}
	dID := peerIDFromLog(t, d.p.err)
	for _, m := range ms[:2] {
		via := ""
		for _, ll := range logLines(t, m.p.err) {
			if ll.Message == "rendezvous peer connected" && ll.Peer == dID {
				via = ll.Via
			}
		}
		if !strings.Contains(via, "/p2p-circuit") {
			l.dump(ms)
			t.Fatalf("%s reached the NAT'd member via %q, not through the relay", m.name, via)
		}
		// Streams over the relayed (limited) connection work: no hand-off to the NAT'd
		// member failed (go-libp2p refuses such streams unless the context allows them).
		for _, ll := range logLines(t, m.p.err) {
			if ll.Message == "hand-off attempt failed" && ll.To == dID {
				l.dump(ms)
				t.Fatalf("%s: a hand-off to the NAT'd member failed at %s", m.name, ll.Time)
			}
		}
	}
	st, err := store.Open(d.dir)
	if err != nil {
		t.Fatal(err)
	}
	entries := st.Entries()
	st.Close()
	if entries == 0 {
		t.Fatal("the NAT'd member took no hop")
	}
	started := d.p.started
	t.Logf("relayed address %v after start: %s; the NAT'd member took %d of 400 hops; wall %v; model %v",
		circuit.t.Sub(started).Round(100*time.Millisecond), circuit.Addrs, entries, time.Since(l.startedAt).Round(time.Second), model[:3])
}

// peerIDFromLog is the short peer ID a node logs under "peer" in its "node up" line.
func peerIDFromLog(t *testing.T, file string) string {
	t.Helper()
	ll, ok := firstLog(t, file, "node up", 0)
	if !ok {
		t.Fatal("no node up line")
	}
	return ll.Self
}

// TestDHTNetnsPublicRelay: the relay is not a member but the DHT server itself, running
// circuit-relay v2 as Kubo's servers do, and every member lists it with --relay. The
// member behind NAT may open connections to the server and to member b only, so member
// a reaches it only through the relay. When the run starts every member closes its
// connections to non-members, the relay's included; the gater still admits the listed
// relay, so the NAT'd member renews its reservation at once and a reconnects through the
// relay: in a run of 15000 hops (20 s or more) a never declares the NAT'd member down
// (--heartbeat-misses 10, 10 s without a heartbeat), which it does when the gater
// refuses the relay or the reservation is renewed only after go-libp2p's 30 s. gossipsub uses no
// relayed connection: the NAT'd member hears the control messages through b.
func TestDHTNetnsPublicRelay(t *testing.T) { publicRelay(t, true) }

// TestDHTNetnsRelayFromDHT is TestDHTNetnsPublicRelay without --relay: the NAT'd member
// finds the relay among its DHT routing table's peers (the internet profile's AutoRelay
// source), and once the run starts the relay stays admitted because a member's published
// address names it (Node.relayInUse).
func TestDHTNetnsRelayFromDHT(t *testing.T) { publicRelay(t, false) }

func publicRelay(t *testing.T, static bool) {
	l := newLab(t)
	s := l.server(l.host("s1", "5.0.0.1"), "s1", "-relay-service")
	ms := []*member{
		{ns: l.host("a", "5.0.0.2"), name: "a", shard: "0/3", args: []string{"--start", "--min-peers", "3", "--join-window", "45s"}},
		{ns: l.host("b", "5.0.0.3"), name: "b", shard: "1/3"},
		{ns: l.natHost("d", "5.0.0.7", "5.0.0.1", "5.0.0.3"), name: "d", shard: "2/3"},
	}
	for _, m := range ms {
		m.args = append(m.args, "--bootstrap", s, "--hops", "15000", "--heartbeat-misses", "10")
		if static {
			m.args = append(m.args, "--relay", s)
		}
	}
	l.runMembers(ms, 240*time.Second)
	model := sameModel(t, ms)
	a, d := ms[0], ms[2]
	dID := peerIDFromLog(t, d.p.err)
	var circuit logLine
	var relayed []string
	for _, ll := range logLines(t, d.p.err) {
		if ll.Message != "published addresses changed" {
			continue
		}
		for _, x := range ll.Addrs {
			if strings.Contains(x, "/p2p-circuit") {
				if circuit.Time == "" {
					circuit = ll
				}
				relayed = append(relayed, ll.t.Sub(d.p.started).Round(100*time.Millisecond).String())
			}
		}
	}
	if circuit.Time == "" {
		l.dump(ms)
		t.Fatal("the NAT'd member never published a /p2p-circuit address")
	}
	via, failed := "", 0
	for _, ll := range logLines(t, a.p.err) {
		if ll.Message == "rendezvous peer connected" && ll.Peer == dID {
			via = ll.Via
		}
		if ll.Message == "hand-off attempt failed" && ll.To == dID {
			failed++
		}
		if ll.Message == "member declared down (no heartbeat)" && ll.Peer == dID {
			l.dump(ms)
			t.Fatalf("a lost the NAT'd member at %s", ll.Time)
		}
	}
	if !strings.Contains(via, "/p2p-circuit") {
		l.dump(ms)
		t.Fatalf("a reached the NAT'd member via %q, not through the relay", via)
	}
	st, err := store.Open(d.dir)
	if err != nil {
		t.Fatal(err)
	}
	entries := st.Entries()
	st.Close()
	if entries == 0 {
		t.Fatal("the NAT'd member took no hop")
	}
	t.Logf("relayed address published at %v after start; a's failed hand-off attempts to the NAT'd member: %d (logged, rate-limited); it took %d of 15000 hops; wall %v; model %v",
		relayed, failed, entries, time.Since(l.startedAt).Round(time.Second), model[:3])
}
