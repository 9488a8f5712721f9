package walk

import (
	"flag"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/testnet/transcript"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of the transcript tests (testdata/custody/*.txt)")

// TestCustodyTranscripts runs the transcripts of testdata/custody, in the style of etcd's
// raft interaction tests: each block is a command, a line "----", and the output it must
// print, followed by an empty line. Commands (key=value arguments):
//
//	add-nodes n=N [ack-timeout=T] [depth=D] [fallback=F] [floor=L] [hops=K] [pause=P] [after-step=1]
//	                             N custody machines on a FIFO wire
//	start node=I                 node I creates the initial token and steps it
//	deliver [n=K] [to=J] [kind=token|ack|release]   the first K matching wire messages (by
//	                             default those in flight when the command starts)
//	drop [to=J] [from=I] [kind=...]                 remove matching wire messages
//	crash node=I                 I stops: its messages in flight are lost, and every other
//	                             node is told PeerDown(I) (the heartbeats' verdict)
//	tick [n=K] [node=I]          every live node (or only I) ticks K times (1)
//	catch-up node=I n=K          I's driver was away: it catches up K ticks at once (CatchUp)
//	inject from=I to=J epoch=E hop=H [v=V] [shown=S]   deliver a made-up token (z = zhat =
//	                             V) showing as evidence a hand-off of hop S from node 0
//	down node=I peer=J / up ...  I is told that J went down (came back)
//	stop node=I                  I's driver is stopping (Custody.Stop)
//	fallback node=I              I's fallback timeout, ticks per hop, next deadline
//	final node=I from=J epoch=E hop=H   I learns of a final model released by J
//	ledger node=I                node I's ledger
//	backups node=I               node I's backups
//	wire                         the messages in flight
//
// Every command prints what the machines emitted, per node, in the order of their
// Readies: events, ledger entries, a token held (hold), a state to persist (persist),
// messages, the final token (final) and the end of the walk (done). The harness (custodyNet) also checks on every
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

func runTranscript(t *testing.T, path string) {
	tf := transcript.Open(t, path, *rewrite)
	var w *custodyNet
	crashed := map[int]bool{}
	for _, blk := range tf.Blocks {
		f := strings.Fields(blk.Cmd)
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
				t.Fatalf("%s: %s=%q", blk.Cmd, k, v)
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
			cc.FallbackFloor, cc.Hops = num("floor", 0), uint64(num("hops", 0))
			cc.PauseAtHop, cc.PauseAfterStep = uint64(num("pause", 0)), num("after-step", 0) == 1
			w = newCustodyNet(t, num("n", 3), cc)
			s := fmt.Sprintf("%d nodes, ack timeout %d, depth %d, fallback %d", len(w.nodes), cc.AckTimeout, cc.Depth, cc.FallbackTimeout)
			if cc.FallbackFloor > 0 {
				s += fmt.Sprintf(" (derived, floor %d)", cc.FallbackFloor)
			}
			if cc.Hops > 0 {
				s += fmt.Sprintf(", hops %d", cc.Hops)
			}
			if cc.PauseAtHop > 0 {
				s += fmt.Sprintf(", pause at hop %d (after step %v)", cc.PauseAtHop, cc.PauseAfterStep)
			}
			out = append(out, s)
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
			only := num("node", -1)
			for k := 0; k < num("n", 1); k++ {
				for i := range w.nodes {
					if !crashed[i] && (only < 0 || i == only) {
						w.tick(i)
					}
				}
			}
		case "catch-up":
			// Node I's driver was away for K ticks and catches up at once (CatchUp).
			i := num("node", 0)
			w.nodes[i].CatchUp(w.nodes[i].Now() + int64(num("n", 1)))
			w.collect(i)
		case "inject":
			// A token of the given epoch and hop, made up (z = zhat = v in every
			// coordinate), delivered from `from` to `to`.
			tk := NewToken("run", 0, 3, consensus.Regularizer{}, 1)
			tk.Epoch, tk.Hop = uint64(num("epoch", 0)), uint64(num("hop", 0))
			for k := range tk.Z {
				tk.Z[k], tk.Zhat[k] = float64(num("v", 1)), float64(num("v", 1))
			}
			m := CustodyMsg{Kind: CustodyToken, From: num("from", 0), To: num("to", 1), Epoch: tk.Epoch, Hop: tk.Hop, Token: tk}
			if _, ok := args["shown"]; ok {
				// The sender shows (as verified evidence) its receipt of hop `shown` from node 0.
				m.Shown = &Evidence{Present: true, Signer: 0, Hop: uint64(num("shown", 0))}
			}
			out = append(out, "deliver "+msgString(m))
			w.deliver(m)
		case "down", "up":
			// Node `node` is told that `peer` went down (or came back).
			i, j := num("node", 0), num("peer", 1)
			if f[0] == "down" {
				w.nodes[i].PeerDown(j)
			} else {
				w.nodes[i].PeerUp(j)
			}
			w.collect(i)
		case "stop":
			// Node `node`'s driver is stopping (Custody.Stop).
			i := num("node", 0)
			w.nodes[i].Stop()
			w.collect(i)
		case "fallback":
			c := w.nodes[num("node", 0)]
			out = append(out, fmt.Sprintf("now %d, timeout %d, ticks per hop %.3g, next deadline %s", c.Now(), c.FallbackTimeout(), c.HopTicks(), deadline(c.NextDeadline())))
		case "final":
			// Node `node` learns of a final model of (epoch, hop) released by `from`.
			i := num("node", 0)
			r := w.nodes[i].StepFinal(num("from", 1), uint64(num("epoch", 0)), uint64(num("hop", 0)))
			out = append(out, "refusal "+r.String())
			w.collect(i)
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
			t.Fatalf("unknown command %q", blk.Cmd)
		}
		if len(out) == 0 {
			out = []string{"ok"}
		}
		got := strings.Join(out, "\n")
		tf.Check(blk, got)
	}
	tf.Close()
}

func deadline(t int64) string {
	if t == math.MaxInt64 {
		return "none"
	}
	return strconv.FormatInt(t, 10)
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
	case m.Kind == CustodyAck && m.Refused != RefuseNone:
		s += " refused=" + m.Refused.String()
	case m.Kind == CustodyAck && m.Duplicate:
		s += " duplicate"
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
	CustodyRefused: "refused", CustodyEvicted: "evicted", CustodyExpired: "expired", CustodyGaveUp: "gave-up",
	CustodyPaused: "paused", CustodyFinished: "final", CustodyStepFailed: "step-failed", CustodyHandedOver: "handed-over",
}

// readyLines renders node i's Ready: events, ledger entries, messages.
func readyLines(i int, rd CustodyReady, snap CustodySnapshot) []string {
	var out []string
	for _, e := range rd.Events {
		s := fmt.Sprintf("  n%d %s e%d h%d peer %d", i, custodyEventNames[e.Kind], e.Epoch, e.Hop, e.Peer)
		if e.Kind == CustodyRefused {
			s += " (" + e.Refusal.String() + ")"
		}
		if e.Kind == CustodyWalk {
			s += map[EventKind]string{EventUpdate: " (update)", EventForward: " (forward)", EventBudgetForward: " (budget forward)"}[e.Walk]
		}
		out = append(out, s)
	}
	for _, e := range rd.Ledger {
		out = append(out, fmt.Sprintf("  n%d ledger %s e%d h%d -> %s", i, e.Mechanism, e.Epoch, e.Hop, e.Recipient))
	}
	if h := rd.Held; h != nil {
		out = append(out, fmt.Sprintf("  n%d hold e%d h%d", i, h.Token.Epoch, h.Token.Hop))
	}
	if rd.Persist {
		s := snap
		out = append(out, fmt.Sprintf("  n%d persist epoch %d, %d backups", i, s.Epoch, len(s.Backups)))
	}
	for _, m := range rd.Outbox {
		out = append(out, "  n"+strconv.Itoa(i)+" send "+msgString(m))
	}
	if f := rd.Final; f != nil {
		out = append(out, fmt.Sprintf("  n%d final e%d h%d from %d", i, f.Token.Epoch, f.Token.Hop, f.From))
	}
	if rd.Done {
		out = append(out, fmt.Sprintf("  n%d done", i))
	}
	return out
}
