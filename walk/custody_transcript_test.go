package walk

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of the transcript tests (testdata/custody/*.txt)")

// TestCustodyTranscripts runs the transcripts of testdata/custody, in the style of etcd's
// raft interaction tests: each block is a command, a line "----", and the output it must
// print, followed by an empty line. Commands (key=value arguments):
//
//	add-nodes n=N [ack-timeout=T] [depth=D] [fallback=F]   N custody machines on a FIFO wire
//	start node=I                 node I creates the initial token and steps it
//	deliver [n=K] [to=J] [kind=token|ack|release]   the first K matching wire messages (by
//	                             default those in flight when the command starts)
//	drop [to=J] [from=I] [kind=...]                 remove matching wire messages
//	crash node=I                 I stops: its messages in flight are lost, and every other
//	                             node is told PeerDown(I) (the heartbeats' verdict)
//	tick [n=K]                   every live node ticks K times (1)
//	ledger node=I                node I's ledger
//	backups node=I               node I's backups
//	wire                         the messages in flight
//
// Every command prints what the machines emitted: events, ledger entries and messages,
// per node, in the order of their Ready. The harness (custodyNet) also checks on every
// Ready that each token message is covered by a ledger entry of its sender.
func TestCustodyTranscripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "custody", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) { runTranscript(t, f) })
	}
}

type tcBlock struct{ cmd, want string }

func readTranscript(t *testing.T, path string) []tcBlock {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []tcBlock
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		blk := tcBlock{cmd: line}
		if !sc.Scan() || sc.Text() != "----" {
			t.Fatalf("%s: command %q without ----", path, line)
		}
		var want []string
		for sc.Scan() && sc.Text() != "" {
			want = append(want, sc.Text())
		}
		blk.want = strings.Join(want, "\n")
		out = append(out, blk)
	}
	return out
}

func runTranscript(t *testing.T, path string) {
	blocks := readTranscript(t, path)
	var w *custodyNet
	crashed := map[int]bool{}
	var rewritten strings.Builder
	for _, blk := range blocks {
		f := strings.Fields(blk.cmd)
		args := map[string]string{}
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			args[k] = v
		}
		num := func(k string, def int) int {
			v, ok := args[k]
			if !ok {
				return def
			}
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("%s: %s=%q", blk.cmd, k, v)
			}
			return n
		}
		match := func(m CustodyMsg) bool {
			return (args["to"] == "" || strconv.Itoa(m.To) == args["to"]) &&
				(args["from"] == "" || strconv.Itoa(m.From) == args["from"]) &&
				(args["kind"] == "" || kindName(m.Kind) == args["kind"])
		}
		var out []string
		if w != nil {
			w.out = &out
		}
		switch f[0] {
		case "add-nodes":
			cc := DefaultCustodyConfig()
			cc.AckTimeout, cc.Depth, cc.FallbackTimeout = num("ack-timeout", 20), num("depth", 8), num("fallback", 0)
			w = newCustodyNet(t, num("n", 3), cc)
			out = append(out, fmt.Sprintf("%d nodes, ack timeout %d, depth %d, fallback %d", len(w.nodes), cc.AckTimeout, cc.Depth, cc.FallbackTimeout))
		case "start":
			w.out = &out
			w.start(num("node", 0))
		case "deliver":
			pending := 0 // by default the messages in flight now, not those they cause
			for _, m := range w.wire {
				if match(m) {
					pending++
				}
			}
			for k := 0; k < num("n", pending); k++ {
				m, ok := w.pop(match)
				if !ok {
					break
				}
				if crashed[m.To] {
					out = append(out, "lost "+msgString(m))
					continue
				}
				out = append(out, "deliver "+msgString(m))
				w.deliver(m)
			}
		case "drop":
			for {
				m, ok := w.pop(match)
				if !ok {
					break
				}
				out = append(out, "dropped "+msgString(m))
			}
		case "crash":
			j := num("node", -1)
			crashed[j] = true
			for {
				m, ok := w.pop(func(m CustodyMsg) bool { return m.From == j })
				if !ok {
					break
				}
				out = append(out, "lost "+msgString(m))
			}
			for i := range w.nodes {
				if i != j && !crashed[i] {
					w.nodes[i].PeerDown(j)
					w.collect(i)
				}
			}
		case "tick":
			for k := 0; k < num("n", 1); k++ {
				for i := range w.nodes {
					if !crashed[i] {
						w.tick(i)
					}
				}
			}
		case "ledger":
			i := num("node", 0)
			for _, e := range w.ledgers[i] {
				out = append(out, fmt.Sprintf("%s e%d h%d -> %s", e.Mechanism, e.Epoch, e.Hop, e.Recipient))
			}
		case "backups":
			for _, b := range w.nodes[num("node", 0)].Backups() {
				out = append(out, fmt.Sprintf("e%d h%d to %d acked=%v dist=%d", b.Epoch, b.Hop, b.To, b.Acked, b.Dist))
			}
		case "wire":
			for _, m := range w.wire {
				out = append(out, msgString(m))
			}
		default:
			t.Fatalf("unknown command %q", blk.cmd)
		}
		if len(out) == 0 {
			out = []string{"ok"}
		}
		got := strings.Join(out, "\n")
		fmt.Fprintf(&rewritten, "%s\n----\n%s\n\n", blk.cmd, got)
		if !*rewrite && got != blk.want {
			t.Fatalf("%s: %s\ngot:\n%s\nwant:\n%s", path, blk.cmd, got, blk.want)
		}
	}
	if *rewrite {
		// Keep the comments: rewrite only the outputs, block by block.
		b, _ := os.ReadFile(path)
		var keep strings.Builder
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "#") {
				keep.WriteString(line + "\n")
			} else {
				break
			}
		}
		if err := os.WriteFile(path, []byte(keep.String()+"\n"+rewritten.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func kindName(k CustodyKind) string {
	switch k {
	case CustodyToken:
		return "token"
	case CustodyAck:
		return "ack"
	case CustodyRelease:
		return "release"
	}
	return "kind" + strconv.Itoa(int(k))
}

func msgString(m CustodyMsg) string {
	s := fmt.Sprintf("%d->%d %s e%d h%d", m.From, m.To, kindName(m.Kind), m.Epoch, m.Hop)
	switch {
	case m.Kind == CustodyAck && m.Stale:
		s += " stale"
	case m.Kind == CustodyRelease && m.Retire:
		s += " retire"
	case m.Kind == CustodyRelease:
		s += " dist=" + strconv.Itoa(m.Dist)
	}
	return s
}

var custodyEventNames = map[CustodyEventKind]string{
	CustodyAccepted: "accepted", CustodyWalk: "walk", CustodyFenced: "fenced", CustodyDuplicate: "duplicate",
	CustodyResent: "resent", CustodyRegenerated: "regenerated", CustodyFallback: "fallback",
	CustodyDropped: "dropped", CustodyRetired: "retired", CustodyNoPeer: "no-peer", CustodyRetransmitted: "retransmitted",
}

// readyLines renders node i's Ready: events, ledger entries, messages.
func readyLines(i int, rd CustodyReady) []string {
	var out []string
	for _, e := range rd.Events {
		s := fmt.Sprintf("  n%d %s e%d h%d peer %d", i, custodyEventNames[e.Kind], e.Epoch, e.Hop, e.Peer)
		if e.Kind == CustodyWalk {
			s += map[EventKind]string{EventUpdate: " (update)", EventForward: " (forward)", EventBudgetForward: " (budget forward)"}[e.Walk]
		}
		out = append(out, s)
	}
	for _, e := range rd.Ledger {
		out = append(out, fmt.Sprintf("  n%d ledger %s e%d h%d -> %s", i, e.Mechanism, e.Epoch, e.Hop, e.Recipient))
	}
	for _, m := range rd.Outbox {
		out = append(out, "  n"+strconv.Itoa(i)+" send "+msgString(m))
	}
	return out
}
