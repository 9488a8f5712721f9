package gossip

import (
	"flag"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dpadmm/dpadmm/testnet/transcript"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of the transcript tests (testdata/barrier/*.txt)")

// TestBarrierTranscripts runs the transcripts of testdata/barrier in the style of etcd's
// raft interaction tests: each block is a command, a line "----" and the output it must
// print, followed by an empty line. Commands:
//
//	add-nodes N [topology ring|path|complete] [policy stop|wait|stale] [iters T]
//	          [barrier B] [max-wait M] [recheck R] [window W]
//	                       N exchanges (R-ADMM, no noise) on a FIFO wire; the initial
//	                       releases are applied
//	tick [K]               every live node ticks K times (1), node by node
//	deliver [K] [I->J] [iT]  the first K matching messages on the wire (by default those
//	                       in flight when the command starts); to a crashed node: lost
//	drop [I->J] [iT]       remove the matching messages from the wire
//	dup [I->J] [iT]        put a copy of every matching message at the end of the wire
//	crash I                I stops: its messages on the wire are lost, its neighbours see
//	                       it go down
//	restart I              I replays its journal through a fresh exchange and resumes;
//	                       its neighbours see it reconnect
//	disconnect I J         I and J see each other go down (messages stay on the wire)
//	reconnect I J          I and J see each other reconnect
//	ledger I | stale I     node I's durable ledger entries or stale uses
//	status I               node I's iteration, missing neighbours and ticks waited
//	models                 whether each node is done with the model of a fault-free
//	                       lockstep run of the same machines (bit for bit)
//	wire                   the messages in flight
//
// Every command prints what the exchanges emitted, per node in the order of their Ready:
// events, ledger entries, stale uses, the journaled state, messages, stop and done. The
// harness (exchNet.check) asserts the policy's invariants on every Ready.
func TestBarrierTranscripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "barrier", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) { runBarrierTranscript(t, f) })
	}
}

func runBarrierTranscript(t *testing.T, path string) {
	tf := transcript.Open(t, path, *rewrite)
	var w *exchNet
	for _, blk := range tf.Blocks {
		f := strings.Fields(blk.Cmd)
		atoi := func(s string) int {
			n, err := strconv.Atoi(s)
			if err != nil {
				t.Fatalf("%s: %q is not a number", blk.Cmd, s)
			}
			return n
		}
		// Positional arguments: numbers and an optional I->J link filter.
		var nums []int
		from, to, iter := -1, -1, -1
		for _, a := range f[1:] {
			if l, r, ok := strings.Cut(a, "->"); ok {
				from, to = atoi(l), atoi(r)
				continue
			}
			if n, err := strconv.Atoi(strings.TrimPrefix(a, "i")); err == nil && strings.HasPrefix(a, "i") {
				iter = n
				continue
			}
			if _, err := strconv.Atoi(a); err == nil {
				nums = append(nums, atoi(a))
			}
		}
		num := func(k, def int) int {
			if k < len(nums) {
				return nums[k]
			}
			return def
		}
		match := func(e Envelope) bool {
			return (from < 0 || e.Msg.From == from) && (to < 0 || e.To == to) && (iter < 0 || e.Msg.Iter == iter)
		}
		var out []string
		if w != nil {
			w.out = &out
		}
		switch f[0] {
		case "add-nodes":
			opts := map[string]string{"topology": "ring", "policy": "stop", "iters": "6"}
			for k := 2; k+1 < len(f); k += 2 {
				opts[f[k]] = f[k+1]
			}
			cfg := ExchangeConfig{Barrier: 4, MaxWait: 12, Recheck: 2, Window: 2}
			for k, p := range map[string]*int{"barrier": &cfg.Barrier, "max-wait": &cfg.MaxWait, "recheck": &cfg.Recheck, "window": &cfg.Window} {
				if v, ok := opts[k]; ok {
					*p = atoi(v)
				}
			}
			pol, err := ParseMissingPolicy(opts["policy"])
			if err != nil {
				t.Fatal(err)
			}
			cfg.OnMissing = pol
			n := atoi(f[1])
			w = newExchNet(t, topology(t, opts["topology"], n), atoi(opts["iters"]), cfg)
			out = append(out, fmt.Sprintf("%d nodes, %s, policy %s, %s iterations, barrier %d, max wait %d, recheck %d, window %d",
				n, opts["topology"], pol, opts["iters"], cfg.Barrier, cfg.MaxWait, cfg.Recheck, cfg.Window))
			w.out = &out
			w.start()
		case "tick":
			for k := 0; k < num(0, 1); k++ {
				for i := range w.xs {
					w.tick(i)
				}
			}
		case "deliver":
			pending := 0
			for _, e := range w.wire {
				if match(e) {
					pending++
				}
			}
			for k := 0; k < num(0, pending); k++ {
				idx := -1
				for q, e := range w.wire {
					if match(e) {
						idx = q
						break
					}
				}
				if idx < 0 {
					break
				}
				e := w.wire[idx]
				var lines []string
				w.out = &lines
				_, err := w.deliver(idx)
				w.out = &out
				head := fmt.Sprintf("deliver %d->%d i%d", e.Msg.From, e.To, e.Msg.Iter)
				if err == errLost {
					head = "lost " + head[len("deliver "):]
				}
				out = append(append(out, head), lines...)
			}
		case "drop":
			keep := w.wire[:0]
			for _, e := range w.wire {
				if match(e) {
					out = append(out, fmt.Sprintf("dropped %d->%d i%d", e.Msg.From, e.To, e.Msg.Iter))
					continue
				}
				keep = append(keep, e)
			}
			w.wire = keep
		case "dup":
			for _, e := range append([]Envelope(nil), w.wire...) {
				if match(e) {
					w.wire = append(w.wire, e)
					out = append(out, fmt.Sprintf("duplicated %d->%d i%d", e.Msg.From, e.To, e.Msg.Iter))
				}
			}
		case "crash":
			w.crash(num(0, -1))
		case "restart":
			w.restart(num(0, -1))
		case "disconnect", "reconnect":
			i, j := num(0, -1), num(1, -1)
			for _, p := range [][2]int{{i, j}, {j, i}} {
				if w.crashed[p[0]] {
					continue
				}
				if f[0] == "disconnect" {
					w.xs[p[0]].PeerDown(p[1])
				} else {
					w.xs[p[0]].Reconnected(p[1])
				}
				w.collect(p[0])
			}
		case "ledger":
			for _, e := range w.ledgers[num(0, 0)] {
				out = append(out, fmt.Sprintf("%s h%d -> %s", e.Mechanism, e.Hop, e.Recipient))
			}
		case "stale":
			for _, u := range w.stale[num(0, 0)] {
				out = append(out, fmt.Sprintf("i%d neighbour %d vector of i%d", u.Iter, u.Neighbor, u.UsedIter))
			}
		case "status":
			x := w.xs[num(0, 0)]
			miss, waited := x.Missing()
			s := fmt.Sprintf("i%d missing %v waited %d now %d", x.Iter(), miss, waited, x.Now())
			if x.Done() {
				s += " done"
			}
			if x.Stopped() != nil {
				s += " stopped"
			}
			out = append(out, s)
		case "models":
			ref := make([]*Machine, len(w.xs))
			for i := range ref {
				ref[i] = exchMachine(t, w.nbrs, i, w.iters)
			}
			newNet(ref).run(t)
			for i, x := range w.xs {
				s := fmt.Sprintf("n%d i%d", i, x.Iter())
				switch {
				case !x.Done():
					s += " not done"
				case sameVec(x.Machine().ModelView(), ref[i].ModelView()):
					s += " done, model equal to the fault-free run's"
				default:
					s += " done, model differs from the fault-free run's"
				}
				out = append(out, s)
			}
		case "wire":
			for _, e := range w.wire {
				out = append(out, fmt.Sprintf("%d->%d i%d", e.Msg.From, e.To, e.Msg.Iter))
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
