package walk

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/consensus/graph"
	"github.com/dpadmm/dpadmm/privacy"
)

// FuzzMachineStep drives a small walk of n machines (node count, dimension, local step,
// noise, hop limit K, caps, graph and seeds from setup) with the inputs chosen by ops:
// deliver the token in flight, a corrupted copy of it (wrong dimension, NaN or Inf, huge
// or tiny coordinates, a hop far ahead or behind, another run or walk, another epoch), a
// duplicate of the last delivery, a misrouted delivery, a restart of a machine from its
// last checkpoint, a tick. Every step is checked against the machine's contract:
//
//   - Step never panics; a malformed token (wrong run, walk or dimension, a NaN or Inf, a
//     hop beyond K) is refused with its error, and a refused token changes nothing: no
//     Ready, the same checkpoint, the token's vectors untouched;
//   - an accepted step queues exactly one envelope, covered by one ledger entry of the same
//     Ready naming that recipient and that hop, whose mechanism fields are the accounting
//     the planner uses for the step (privacy.StepLocalCurve of StepRun, the run's figure);
//     a forward (cap reached) is charged nothing and leaves the token and u_i as they were;
//   - the hop grows by exactly one per hand-off and never beyond K; the token at hop K ends
//     the walk (Ready.Final, EventFinal) with no ledger entry, no state and no outbox;
//   - every release is finite, and with noise on the lattice documented in lattice.go (prox,
//     linearized: zhat' = zhat + h q / n, z' = prox(zhat'), u' = u + h q for an integer
//     vector q) or gadmm.go (x~' on hZ, lambda' a function of the received token);
//   - a machine rebuilt from the checkpoint and random-source states before a step and given
//     the same token returns the same error or the same Ready, byte for byte (Seq aside: the
//     driver numbers its ledger).
func FuzzMachineStep(f *testing.F) {
	// Seeds: the setup word is decoded by newFuzzWalk (low digits first); ops by run.
	f.Add(uint64(0), []byte{0, 0, 0, 0, 0, 0, 0, 0})
	f.Add(fuzzSetup(3, 4, StepProx, true, 5, 0, 0, false, true, 0, 1), []byte{0, 8, 3, 2, 0, 3, 6, 4, 5, 1, 0, 0, 0, 0, 0})
	f.Add(fuzzSetup(2, 6, StepProx, true, 0, 2, 0, true, false, 2, 3), []byte{0, 0x83, 5, 0, 3, 0, 3, 1, 0, 3, 7, 0, 3, 6, 0})
	f.Add(fuzzSetup(4, 3, StepLinearized, true, 3, 0, 1, false, false, 1, 2), []byte{0, 0, 3, 10, 0, 4, 0, 7, 2, 0, 0, 0})
	f.Add(fuzzSetup(3, 2, StepLSSGD, true, 0, 1, 2, true, false, 0, 1), []byte{0, 0, 3, 5, 0, 3, 11, 0, 5, 2, 0, 6, 1, 0})
	f.Add(fuzzSetup(5, 5, StepGADMM, true, 6, 0, 0, false, false, 0, 0), []byte{0, 0, 0, 3, 8, 3, 9, 0, 0, 0, 0, 0})
	f.Add(fuzzSetup(2, 1, StepSGD, true, 2, 0, 0, true, false, 2, 2), []byte{0, 0, 0, 3, 5, 0, 0, 0, 0, 3, 6, 0})
	f.Add(fuzzSetup(3, 3, StepProx, false, 0, 0, 0, false, true, 0, 3), []byte{0, 3, 5, 0, 3, 5, 0, 0, 3, 6, 0, 0})
	f.Fuzz(func(t *testing.T, setup uint64, ops []byte) {
		w := newFuzzWalk(t, setup)
		w.run(ops)
	})
}

// fuzzSetup encodes a setup word for newFuzzWalk (for the seed corpus).
func fuzzSetup(n, dim int, kind StepKind, noisy bool, hops, maxUpd, budget int, ring, oneRow bool, lambda, reg int) uint64 {
	digits := []struct{ v, base uint64 }{
		{uint64(n - 2), 4}, {uint64(dim - 1), 6}, {uint64(kind), 5}, {b2u(noisy), 2}, {uint64(hops), 12},
		{uint64(maxUpd), 4}, {uint64(budget), 3}, {b2u(ring), 2}, {b2u(oneRow), 2}, {uint64(lambda), 3},
		{uint64(reg), 4}, {0, 2}, {0, 2},
	}
	var s, mul uint64 = 0, 1
	for _, d := range digits {
		s += d.v * mul
		mul *= d.base
	}
	return s + 12345*mul
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// fuzzNode is one machine with the state its driver keeps: the random sources (whose
// states a node persists with its checkpoint) and the last checkpoint.
type fuzzNode struct {
	m      *Machine
	cfg    Config // Rand and Noise as given to m
	data   *consensus.Dataset
	hopSrc *rand.PCG
	noise  *rand.PCG
	ckpt   Checkpoint // deep copy of the last Ready.State
}

// fuzzSnap is what a driver would persist before a step.
type fuzzSnap struct {
	ckpt       Checkpoint
	hop, noise []byte
}

// fuzzWalk is a walk of n machines under test.
type fuzzWalk struct {
	t        *testing.T
	n, dim   int
	kind     StepKind
	lossFn   consensus.Loss
	weight   float64
	hops     uint64
	sigma    float64
	lambda   float64
	gamma    float64
	reg      consensus.Regularizer
	graph    *graph.Graph
	names    []string
	nodes    []*fuzzNode
	unit     privacy.Curve // the planner's curve of one noisy update (StepLocalCurve of StepRun)
	mech     string        // the ledger mechanism of a noisy update of this step
	rate     float64       // the entry's sampling rate (ls-sgd, sgd), else 0
	latticeH float64       // prox, linearized with noise: the lattice step h of lattice.go

	// The token in flight and the last delivery.
	pending, last *Envelope
	epoch         uint64
	stats         *fuzzStats
}

// fuzzStats counts the cases the checks met (TestMachineFuzzReach).
type fuzzStats struct {
	updates  [5]int // noisy updates by step kind
	forwards [EventFinal + 1]int
	finals   int
	lattice  [5]int        // releases checked on the noise lattice, by step kind
	refused  map[error]int // refusals by error
	huge     [2]int        // tokens with huge finite coordinates: refused, accepted
	restarts int
	busy     int
}

const (
	fuzzRun    = "fz"
	fuzzWalkID = 7
	fuzzClip   = 1.0
	// fuzzMaxOps bounds the inputs of one fuzz case (each also rebuilds a machine).
	fuzzMaxOps = 96
)

// newFuzzWalk builds the walk that setup describes; every setup gives a valid one.
func newFuzzWalk(t *testing.T, setup uint64) *fuzzWalk {
	t.Helper()
	bits := setup
	take := func(k uint64) uint64 { v := bits % k; bits /= k; return v }
	w := &fuzzWalk{t: t, gamma: 1, stats: &fuzzStats{refused: map[error]int{}}}
	w.n = 2 + int(take(4))
	w.dim = 1 + int(take(6))
	w.kind = StepKind(take(5))
	noisy := take(2) == 1
	w.hops = take(12) // 0: no limit
	maxUpd := int(take(4))
	budget := int(take(3)) // 0: not budgeted, else BudgetCap budget-1
	ring := take(2) == 1
	oneRow := take(2) == 1
	w.lambda = []float64{0.5, 0.7, 1}[take(3)]
	w.reg = []consensus.Regularizer{{}, {L1: 0.05}, {L2: 0.1}, {L1: 0.02, L2: 0.3}}[take(4)]
	named := take(2) == 1
	halfRate := take(2) == 1
	seed := bits
	if noisy {
		w.sigma = 0.5
	}
	if ring {
		g, err := graph.Parse("ring", w.n, 0)
		if err != nil {
			t.Fatal(err)
		}
		w.graph = g
	}
	if named {
		w.names = make([]string, w.n)
		for i := range w.names {
			w.names[i] = fmt.Sprintf("node-%c", 'a'+i)
		}
	}
	rows := 3
	w.lossFn, w.weight = consensus.Logistic, 1.5
	if w.kind == StepProx || w.kind == StepLinearized {
		w.lossFn = consensus.Squared
	}
	if oneRow {
		rows = 1 // with the squared loss and the prox step: the rank-one path and its kernels
	}
	step := StepParams{Kind: w.kind}
	switch w.kind {
	case StepLinearized:
		step.Eta = 1
	case StepLSSGD, StepSGD:
		step.Eta, step.Rate = 0.5, 1
		if w.kind == StepLSSGD {
			step.Nu = 0.3
		}
		if halfRate && rows > 1 {
			step.Rate = 0.5
		}
	}
	dr := rand.New(rand.NewPCG(seed, 99))
	datas := make([]*consensus.Dataset, w.n)
	losses := make([]*consensus.LocalLoss, w.n)
	nu := 0.0
	for i := range datas {
		d := &consensus.Dataset{Name: "fuzz", Rows: rows, Cols: w.dim, X: make([]float64, rows*w.dim), Y: make([]float64, rows)}
		for k := range d.X {
			d.X[k] = 4*dr.Float64() - 2
		}
		for r := range d.Y {
			d.Y[r] = 1
			if dr.IntN(2) == 0 {
				d.Y[r] = -1
			}
			if w.lossFn == consensus.Squared {
				d.Y[r] = 2*dr.Float64() - 1
			}
		}
		datas[i] = d
		losses[i] = w.newLoss(d)
		nu = math.Max(nu, losses[i].Smoothness())
	}
	if w.kind == StepGADMM {
		step.Eta, step.Beta = 0.5/nu, 1
	}
	for i := range datas {
		cfg := Config{Node: i, Nodes: w.n, Gamma: w.gamma, Lambda: w.lambda, Clip: fuzzClip, Sigma: w.sigma, Reg: w.reg,
			Graph: w.graph, MaxUpdates: maxUpd, Budgeted: budget > 0, BudgetCap: max(budget-1, 0),
			Run: fuzzRun, Walk: fuzzWalkID, Hops: w.hops, Names: w.names, Step: step}
		nd := &fuzzNode{cfg: cfg, data: datas[i], hopSrc: rand.NewPCG(seed, uint64(i)), noise: rand.NewPCG(seed^0x5eed, uint64(i))}
		m, err := w.build(nd, nd.hopSrc, nd.noise)
		if err != nil {
			t.Fatalf("setup %d: node %d: %v", setup, i, err)
		}
		nd.m, nd.ckpt = m, Checkpoint{Node: i, U: m.U()}
		w.nodes = append(w.nodes, nd)
	}
	// The accounting of one noisy update as the planner and the reports state it.
	run := privacy.WalkRun{Nodes: w.n, Complete: w.graph == nil, Clip: fuzzClip, Sigma: w.sigma}
	if err := StepRun(w.nodes[0].cfg, losses, w.dim, w.n, &run); err != nil {
		t.Fatalf("setup %d: %v", setup, err)
	}
	w.unit = privacy.StepLocalCurve(run, 1)
	switch w.kind {
	case StepProx, StepLinearized:
		w.mech = privacy.MechGaussian
		if w.sigma > 0 {
			h, _, err := LatticeClip(fuzzClip, w.lambda, w.sigma, w.dim)
			if err != nil {
				t.Fatal(err)
			}
			w.latticeH = h
		}
	case StepLSSGD, StepSGD:
		w.mech, w.rate = privacy.MechSubsampled, step.Rate
	case StepGADMM:
		w.mech = privacy.MechGADMM
	}
	return w
}

func (w *fuzzWalk) newLoss(d *consensus.Dataset) *consensus.LocalLoss {
	l, err := consensus.NewLocalLoss(d, w.lossFn, w.weight)
	if err != nil {
		w.t.Fatal(err)
	}
	return l
}

// build returns a fresh machine for nd (a fresh local loss, as after a restart) drawing
// from the given random sources.
func (w *fuzzWalk) build(nd *fuzzNode, hop, noise *rand.PCG) (*Machine, error) {
	cfg := nd.cfg
	cfg.Rand, cfg.Noise = rand.New(hop), privacy.NewNoiseFromRand(rand.New(noise))
	return New(cfg, w.newLoss(nd.data), w.dim)
}

func (w *fuzzWalk) name(i int) string {
	if w.names != nil {
		return w.names[i]
	}
	return fmt.Sprint(i)
}

// run applies the inputs of ops.
func (w *fuzzWalk) run(ops []byte) {
	next := func() byte {
		if len(ops) == 0 {
			return 0
		}
		b := ops[0]
		ops = ops[1:]
		return b
	}
	for k := 0; len(ops) > 0 && k < fuzzMaxOps; k++ {
		b := next()
		busy := b&0x80 != 0
		switch b & 7 {
		case 0, 1, 2: // the token in flight (or a fresh walk at node b>>3)
			to, tok := w.inFlight(int(b >> 3))
			w.deliver(to, tok, w.expect(to, tok), busy)
		case 3: // a corrupted copy
			to, tok := w.inFlight(int(b >> 3))
			w.corrupt(&tok, next(), next())
			w.deliver(to, tok, w.expect(to, tok), busy)
		case 4: // a duplicate of the last delivery
			if w.last != nil {
				w.deliver(w.last.To, cloneToken(w.last.Token), w.expect(w.last.To, w.last.Token), busy)
			}
		case 5: // a restart from the last checkpoint
			w.restart(int(next()) % w.n)
		case 6: // a tick
			w.tick(int(next()) % w.n)
		case 7: // the token in flight delivered to another node
			_, tok := w.inFlight(int(b >> 3))
			to := int(next()) % w.n
			w.deliver(to, tok, w.expect(to, tok), busy)
		}
	}
}

// errFinite: the step may be accepted, or refused with ErrNotFinite.
var errFinite = errors.New("accepted, or refused as not finite")

// inFlight returns the token in flight and its recipient, or a fresh walk at node sel.
func (w *fuzzWalk) inFlight(sel int) (int, Token) {
	if w.pending != nil {
		return w.pending.To, cloneToken(w.pending.Token)
	}
	tok := NewToken(fuzzRun, fuzzWalkID, w.dim, w.reg, w.gamma)
	tok.Epoch = w.epoch
	return sel % w.n, tok
}

// expect returns the outcome the contract prescribes for delivering tok to node to, from
// the token alone, in the order of the checks: another run or walk (ErrForeign), a wrong
// dimension (ErrDim), a hop beyond K or, without K, one that cannot advance (ErrHop), a
// NaN or Inf (ErrNotFinite). A well-formed token whose coordinates, and the node's u_i, are
// at most 1e6 must be accepted (nil): no update can overflow. Otherwise (huge finite
// coordinates) either outcome is allowed (errAny), refusal with ErrNotFinite only.
func (w *fuzzWalk) expect(to int, tok Token) error {
	switch {
	case tok.Run != fuzzRun || tok.Walk != fuzzWalkID:
		return ErrForeign
	case len(tok.Z) != w.dim || len(tok.Zhat) != w.dim:
		return ErrDim
	case w.hops > 0 && tok.Hop > w.hops || w.hops == 0 && tok.Hop == math.MaxUint64:
		return ErrHop
	case !AllFinite(tok.Z) || !AllFinite(tok.Zhat):
		return ErrNotFinite
	}
	for _, v := range [][]float64{tok.Z, tok.Zhat, w.nodes[to].m.U()} {
		for _, x := range v {
			if !(math.Abs(x) <= 1e6) {
				return errFinite
			}
		}
	}
	return nil
}

// corrupt changes tok as kind says, with arg choosing the coordinate or the amount.
func (w *fuzzWalk) corrupt(tok *Token, kind, arg byte) {
	k := int(arg) % w.dim
	switch kind % 13 {
	case 0:
		tok.Z = tok.Z[:w.dim-1]
	case 1:
		tok.Zhat = append(tok.Zhat, 0)
	case 2:
		tok.Z[k] = math.NaN()
	case 3:
		tok.Zhat[k] = math.Inf(1)
	case 4:
		tok.Z[k] = math.Inf(-1)
	case 5: // huge but finite: the update may overflow, then it must be refused
		v := []float64{math.MaxFloat64, -math.MaxFloat64, 1e308, 1e200, -1e160}[arg%5]
		if arg&8 != 0 {
			tok.Zhat[k] = v
		} else {
			tok.Z[k] = v
		}
	case 6: // far ahead: beyond K, or the last values of the hop counter
		switch {
		case w.hops > 0:
			tok.Hop = w.hops + 1 + uint64(arg)<<(arg%64)
		case arg&1 == 0:
			tok.Hop = math.MaxUint64
		default:
			tok.Hop = math.MaxUint64 - 1 // the last hop that can be made
		}
	case 7: // behind: a replay of an older hop number
		tok.Hop -= min(tok.Hop, uint64(arg%4)+1)
	case 8:
		tok.Run += "x"
	case 9:
		tok.Walk ^= 1 + uint64(arg)
	case 10: // another epoch (a regeneration upstream): still well formed
		tok.Epoch += 1 + uint64(arg)
		if arg == 255 {
			tok.Epoch = math.MaxUint64
		}
	case 11: // tiny coordinates
		tok.Z[k] = []float64{5e-324, -2.2250738585072014e-308, 0, math.Copysign(0, -1)}[arg%4]
	default: // an empty token
		tok.Z, tok.Zhat = nil, nil
	}
}

func (w *fuzzWalk) snap(nd *fuzzNode) fuzzSnap {
	h, err := nd.hopSrc.MarshalBinary()
	if err != nil {
		w.t.Fatal(err)
	}
	z, err := nd.noise.MarshalBinary()
	if err != nil {
		w.t.Fatal(err)
	}
	return fuzzSnap{ckpt: Checkpoint{Node: nd.m.cfg.Node, Updates: nd.m.Updates(), U: nd.m.U()}, hop: h, noise: z}
}

// twin rebuilds node i's machine from a snapshot: checkpoint and random-source states.
func (w *fuzzWalk) twin(i int, s fuzzSnap) *Machine {
	hop, noise := &rand.PCG{}, &rand.PCG{}
	if err := hop.UnmarshalBinary(s.hop); err != nil {
		w.t.Fatal(err)
	}
	if err := noise.UnmarshalBinary(s.noise); err != nil {
		w.t.Fatal(err)
	}
	m, err := w.build(w.nodes[i], hop, noise)
	if err != nil {
		w.t.Fatal(err)
	}
	if err := m.Restore(s.ckpt); err != nil {
		w.t.Fatalf("restore of a checkpoint the machine produced: %v", err)
	}
	return m
}

// deliver steps node to with tok and checks the contract. want is the error Step must
// return (errors.Is), nil when it must accept, errFinite when it may also refuse the token
// as not finite.
func (w *fuzzWalk) deliver(to int, tok Token, want error, busy bool) {
	t := w.t
	nd := w.nodes[to]
	before := w.snap(nd)
	in := cloneToken(tok)
	err := nd.m.Step(Message{From: -1, Token: tok})

	tw := w.twin(to, before)
	terr := tw.Step(Message{From: -1, Token: cloneToken(in)})
	if fmt.Sprint(err) != fmt.Sprint(terr) {
		t.Fatalf("node %d: step %v, the same step after a restore %v", to, err, terr)
	}
	if err != nil {
		switch {
		case want == nil:
			t.Fatalf("node %d: a well-formed token (epoch %d, hop %d) was refused: %v", to, in.Epoch, in.Hop, err)
		case want == errFinite && !errors.Is(err, ErrNotFinite):
			t.Fatalf("node %d: a well-formed token refused with %v", to, err)
		case want != errFinite && !errors.Is(err, want):
			t.Fatalf("node %d: refused with %v, want %v", to, err, want)
		}
		w.unchanged(to, before, in, tok, "refused token")
		for _, e := range []error{ErrForeign, ErrDim, ErrHop, ErrNotFinite} {
			if errors.Is(err, e) {
				w.stats.refused[e]++
			}
		}
		if want == errFinite {
			w.stats.huge[0]++
		}
		return
	}
	if want != nil && want != errFinite {
		t.Fatalf("node %d: a malformed token was accepted (want %v): epoch %d hop %d len %d/%d", to, want, in.Epoch, in.Hop, len(in.Z), len(in.Zhat))
	}
	if !nd.m.HasReady() {
		t.Fatalf("node %d: accepted without a Ready", to)
	}
	if want == errFinite {
		w.stats.huge[1]++
	}
	rd := nd.m.Ready()
	if a, b := readyBytes(rd), readyBytes(tw.Ready()); !bytes.Equal(a, b) {
		t.Fatalf("node %d: the same step after a restore gave another Ready:\n%x\n%x", to, a, b)
	}
	w.checkReady(to, before, in, rd)
	if busy { // a Step before Advance is refused and leaves the pending Ready alone
		enc := readyBytes(rd)
		if err := nd.m.Step(Message{From: -1, Token: cloneToken(in)}); !errors.Is(err, ErrBusy) {
			t.Fatalf("node %d: step with a pending Ready: %v, want ErrBusy", to, err)
		}
		if !bytes.Equal(enc, readyBytes(nd.m.Ready())) {
			t.Fatalf("node %d: a refused step changed the pending Ready", to)
		}
		w.stats.busy++
	}
	// The driver: ledger and state durable, then the send; then Advance.
	if rd.State != nil {
		nd.ckpt = Checkpoint{Node: rd.State.Node, Updates: rd.State.Updates, U: append([]float64(nil), rd.State.U...)}
	}
	w.last = &Envelope{To: to, Token: in}
	if rd.Final != nil {
		w.pending = nil
		w.epoch++ // a new walk after the end is told apart by its epoch
		w.stats.finals++
	} else {
		env := rd.Outbox[0]
		w.pending = &Envelope{To: env.To, Token: cloneToken(env.Token)}
	}
	nd.m.Advance(rd)
	if nd.m.HasReady() || !readyEmpty(nd.m.Ready()) {
		t.Fatalf("node %d: a Ready is pending after Advance", to)
	}
}

// unchanged checks that node i is as in snapshot s and the token as delivered.
func (w *fuzzWalk) unchanged(i int, s fuzzSnap, in, tok Token, what string) {
	t := w.t
	m := w.nodes[i].m
	if m.HasReady() || !readyEmpty(m.Ready()) {
		t.Fatalf("node %d: %s left a Ready", i, what)
	}
	if m.Updates() != s.ckpt.Updates || !sameBits(m.U(), s.ckpt.U) {
		t.Fatalf("node %d: %s changed the checkpoint: K_i %d -> %d", i, what, s.ckpt.Updates, m.Updates())
	}
	if !sameBits(tok.Z, in.Z) || !sameBits(tok.Zhat, in.Zhat) {
		t.Fatalf("node %d: %s changed the token's vectors", i, what)
	}
}

// checkReady checks the Ready of an accepted step of node i on token in; s is the node
// before the step.
func (w *fuzzWalk) checkReady(i int, s fuzzSnap, in Token, rd Ready) {
	t := w.t
	m := w.nodes[i].m
	if rd.Final != nil {
		switch {
		case w.hops == 0 || in.Hop != w.hops:
			t.Fatalf("node %d: final Ready at hop %d, K %d", i, in.Hop, w.hops)
		case len(rd.Ledger) != 0 || rd.State != nil || len(rd.Outbox) != 0:
			t.Fatalf("node %d: final Ready with %d entries, state %v, %d envelopes", i, len(rd.Ledger), rd.State != nil, len(rd.Outbox))
		case len(rd.Events) != 1 || rd.Events[0] != (Event{Kind: EventFinal, Hop: w.hops, To: i}):
			t.Fatalf("node %d: final Ready with events %+v", i, rd.Events)
		case !sameToken(*rd.Final, in):
			t.Fatalf("node %d: the final token is not the token received", i)
		case m.Updates() != s.ckpt.Updates || !sameBits(m.U(), s.ckpt.U):
			t.Fatalf("node %d: the final step changed the checkpoint", i)
		}
		return
	}
	if w.hops > 0 && in.Hop >= w.hops {
		t.Fatalf("node %d: token at hop %d handed on, K %d", i, in.Hop, w.hops)
	}
	if len(rd.Outbox) != 1 || len(rd.Ledger) != 1 || len(rd.Events) != 1 || rd.State == nil {
		t.Fatalf("node %d: Ready with %d envelopes, %d entries, %d events, state %v", i, len(rd.Outbox), len(rd.Ledger), len(rd.Events), rd.State != nil)
	}
	env, e, ev := rd.Outbox[0], rd.Ledger[0], rd.Events[0]
	out := env.Token
	switch {
	case out.Hop != in.Hop+1 || out.Hop == 0:
		t.Fatalf("node %d: hop %d -> %d", i, in.Hop, out.Hop)
	case w.hops > 0 && out.Hop > w.hops:
		t.Fatalf("node %d: hand-off at hop %d beyond K %d", i, out.Hop, w.hops)
	case out.Run != in.Run || out.Walk != in.Walk || out.Epoch != in.Epoch:
		t.Fatalf("node %d: token identity changed: %q/%d/%d -> %q/%d/%d", i, in.Run, in.Walk, in.Epoch, out.Run, out.Walk, out.Epoch)
	case env.To < 0 || env.To >= w.n:
		t.Fatalf("node %d: recipient %d", i, env.To)
	case w.graph != nil && env.To != (i+1)%w.n && env.To != (i+w.n-1)%w.n:
		t.Fatalf("node %d: recipient %d is not a ring neighbour", i, env.To)
	case len(out.Z) != w.dim || len(out.Zhat) != w.dim:
		t.Fatalf("node %d: released dimension %d/%d", i, len(out.Z), len(out.Zhat))
	case !AllFinite(out.Z) || !AllFinite(out.Zhat):
		t.Fatalf("node %d: non-finite release z %v zhat %v (received z %v zhat %v)", i, out.Z, out.Zhat, in.Z, in.Zhat)
	}
	// The ledger entry covers the envelope: same recipient, hop and token identity.
	switch {
	case e.Recipient != w.name(env.To) || e.Hop != out.Hop || e.Epoch != out.Epoch || e.Run != out.Run || e.Walk != out.Walk:
		t.Fatalf("node %d: entry %+v does not cover the hand-off to %d at hop %d epoch %d", i, e, env.To, out.Hop, out.Epoch)
	case e.Node != w.name(i):
		t.Fatalf("node %d: entry of node %q", i, e.Node)
	case e.Validate() != nil:
		t.Fatalf("node %d: invalid entry: %v", i, e.Validate())
	case e.Epsilon != 0:
		t.Fatalf("node %d: entry with a pure-DP epsilon %v", i, e.Epsilon)
	case ev.Hop != out.Hop || ev.To != env.To:
		t.Fatalf("node %d: event %+v for the hand-off to %d at hop %d", i, ev, env.To, out.Hop)
	case rd.State.Node != i || rd.State.Updates != m.Updates() || !sameBits(rd.State.U, m.U()):
		t.Fatalf("node %d: Ready.State is not the machine's state", i)
	}
	if s.ckpt.Updates >= m.Cap() {
		w.checkForward(i, s, in, rd)
		return
	}
	switch {
	case ev.Kind != EventUpdate || m.Updates() != s.ckpt.Updates+1:
		t.Fatalf("node %d: update with event %v, K_i %d -> %d", i, ev.Kind, s.ckpt.Updates, m.Updates())
	case e.Mechanism != w.mech || !e.Noisy():
		t.Fatalf("node %d: noisy update charged as %q, want %q", i, e.Mechanism, w.mech)
	case e.Clip != fuzzClip || e.Rate != w.rate:
		t.Fatalf("node %d: entry clip %v rate %v, want %v %v", i, e.Clip, e.Rate, fuzzClip, w.rate)
	}
	w.checkCharge(i, e)
	w.checkRelease(i, s, in, out)
	w.stats.updates[w.kind]++
}

// checkForward checks a hand-off at the cap: charged nothing, the token and u_i unchanged.
func (w *fuzzWalk) checkForward(i int, s fuzzSnap, in Token, rd Ready) {
	t := w.t
	m := w.nodes[i].m
	env, e, ev := rd.Outbox[0], rd.Ledger[0], rd.Events[0]
	kind := EventForward
	if c := m.cfg; c.Budgeted && (c.MaxUpdates == 0 || c.BudgetCap <= c.MaxUpdates) {
		kind = EventBudgetForward
	}
	switch {
	case ev.Kind != kind:
		t.Fatalf("node %d: forward at the cap reported as %v, want %v", i, ev.Kind, kind)
	case e.Mechanism != privacy.MechForward || e.Noisy() || e.Sensitivity != 0 || e.Sigma != 0 || e.Rate != 0:
		t.Fatalf("node %d: forward charged %+v", i, e)
	case m.Updates() != s.ckpt.Updates || !sameBits(m.U(), s.ckpt.U):
		t.Fatalf("node %d: a forward changed the checkpoint", i)
	case !sameBits(env.Token.Z, in.Z) || !sameBits(env.Token.Zhat, in.Zhat):
		t.Fatalf("node %d: a forward changed the token", i)
	}
	for _, v := range e.Curve() {
		if v != 0 {
			t.Fatalf("node %d: a forward's entry has curve %v", i, e.Curve())
		}
	}
	w.stats.forwards[kind]++
}

// checkCharge checks that a noisy update's entry charges the accounting of the step: the
// curve of its mechanism fields is the planner's curve of one update (StepLocalCurve of
// StepRun); for gradient ADMM, whose run figure takes the largest sensitivity over the
// nodes, the node's own GADMMCheck sensitivity and a curve within the run's.
func (w *fuzzWalk) checkCharge(i int, e privacy.Entry) {
	t := w.t
	got := e.Curve()
	if len(got) != len(w.unit) {
		t.Fatalf("node %d: entry curve of %d orders, planner %d", i, len(got), len(w.unit))
	}
	if w.kind == StepGADMM {
		nd := w.nodes[i]
		st, err := GADMMCheck(nd.cfg, w.newLoss(nd.data), w.dim)
		if err != nil {
			t.Fatal(err)
		}
		if e.Sensitivity != st.Sensitivity || e.Sigma != w.sigma {
			t.Fatalf("node %d: gadmm entry sensitivity %v sigma %v, want %v %v", i, e.Sensitivity, e.Sigma, st.Sensitivity, w.sigma)
		}
	}
	for k := range got {
		a, b := got[k], w.unit[k]
		if math.IsInf(b, 1) && math.IsInf(a, 1) {
			continue
		}
		tol := 1e-12 * math.Abs(b)
		if w.kind == StepGADMM && a <= b+tol || math.Abs(a-b) <= tol {
			continue
		}
		t.Fatalf("node %d: entry %+v charges %v at order %d, the planner's step figure %v", i, e, a, k, b)
	}
}

// checkRelease checks the released token of a noisy update against the lattice of the
// noise: a release is a function of public state (the received token) and an integer
// vector.
func (w *fuzzWalk) checkRelease(i int, s fuzzSnap, in, out Token) {
	t := w.t
	m := w.nodes[i].m
	u := m.U()
	switch {
	case w.kind == StepSGD:
		if !sameBits(out.Z, out.Zhat) || !sameBits(u, s.ckpt.U) {
			t.Fatalf("node %d: sgd release with zhat != z or a changed u", i)
		}
	case w.kind == StepGADMM:
		if !sameBits(u, s.ckpt.U) {
			t.Fatalf("node %d: gadmm changed u", i)
		}
		if !(w.sigma > 0) {
			return
		}
		nd := w.nodes[i]
		st, err := GADMMCheck(nd.cfg, w.newLoss(nd.data), w.dim)
		if err != nil {
			t.Fatal(err)
		}
		y := make([]float64, w.dim)
		beta := nd.cfg.Step.Beta
		GADMMY(y, in.Z, in.Zhat, w.reg, beta, false)
		for k := range out.Z {
			if q := out.Z[k] / st.H; q != math.Trunc(q) {
				t.Fatalf("node %d: gadmm release x~[%d] = %v is not on the lattice %v", i, k, out.Z[k], st.H)
			}
			// The product may be fused into the subtraction on some architectures.
			lam := in.Zhat[k] - float64(beta*(in.Z[k]-y[k]))
			if fused := math.FMA(-beta, in.Z[k]-y[k], in.Zhat[k]); out.Zhat[k] != lam && out.Zhat[k] != fused {
				t.Fatalf("node %d: gadmm release lambda[%d] = %v, from the received token %v", i, k, out.Zhat[k], lam)
			}
		}
		w.stats.lattice[w.kind]++
	case w.latticeH > 0: // prox and linearized with noise (lattice.go)
		h, inv := w.latticeH, 1/float64(w.n)
		for k := range out.Z {
			if !onLattice(s.ckpt.U[k], u[k], in.Zhat[k], out.Zhat[k], h, inv, w.n) {
				t.Fatalf("node %d: coordinate %d: u %v -> %v, zhat %v -> %v is no lattice step h q (h = %v)",
					i, k, s.ckpt.U[k], u[k], in.Zhat[k], out.Zhat[k], h)
			}
		}
		z := make([]float64, w.dim)
		w.reg.Prox(z, out.Zhat, w.gamma)
		if !sameBits(z, out.Z) {
			t.Fatalf("node %d: released z %v is not prox(zhat) %v", i, out.Z, z)
		}
		w.stats.lattice[w.kind]++
	}
}

// onLattice reports whether some integer q gives u1 = u0 + h q and zhat1 = zhat0 + (h q)/n
// as lattice.go computes them (candidates for q from both differences, and their neighbours).
func onLattice(u0, u1, zh0, zh1, h, inv float64, n int) bool {
	for _, c := range []float64{math.RoundToEven((u1 - u0) / h), math.RoundToEven((zh1 - zh0) * float64(n) / h)} {
		for d := -2.0; d <= 2; d++ {
			du := float64((c + d) * h)
			if u0+du == u1 && zh0+float64(du*inv) == zh1 {
				return true
			}
		}
	}
	return false
}

// restart replaces node i's machine by one rebuilt from its last checkpoint (the random
// sources continue, as a node restores them from its checkpoint too).
func (w *fuzzWalk) restart(i int) {
	t := w.t
	nd := w.nodes[i]
	m, err := w.build(nd, nd.hopSrc, nd.noise)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Restore(nd.ckpt); err != nil {
		t.Fatalf("node %d: restore of its own checkpoint: %v", i, err)
	}
	if m.Updates() != nd.m.Updates() || !sameBits(m.U(), nd.m.U()) {
		t.Fatalf("node %d: the last checkpoint (K_i %d) is not the machine's state (K_i %d)", i, m.Updates(), nd.m.Updates())
	}
	nd.m = m
	w.stats.restarts++
}

// tick: the walk machine has no timers; a tick changes nothing.
func (w *fuzzWalk) tick(i int) {
	nd := w.nodes[i]
	s := w.snap(nd)
	nd.m.Tick()
	w.unchanged(i, s, Token{}, Token{}, "tick")
}

// sameBits reports whether a and b are equal bit for bit.
func sameBits(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if math.Float64bits(a[k]) != math.Float64bits(b[k]) {
			return false
		}
	}
	return true
}

// sameToken reports whether a and b are the same token, vectors bit for bit.
func sameToken(a, b Token) bool {
	return a.Run == b.Run && a.Walk == b.Walk && a.Epoch == b.Epoch && a.Hop == b.Hop && sameBits(a.Z, b.Z) && sameBits(a.Zhat, b.Zhat)
}

// readyEmpty reports whether rd is the empty Ready of a machine with nothing pending.
func readyEmpty(rd Ready) bool {
	return rd.Ledger == nil && rd.State == nil && rd.Outbox == nil && rd.Events == nil && rd.Final == nil
}

// readyBytes encodes a Ready for comparison: ledger lines (Seq, which the driver assigns,
// set to 0), state, envelopes, events and the final token, floats by their bits.
func readyBytes(rd Ready) []byte {
	var b []byte
	u64 := func(v uint64) { b = binary.LittleEndian.AppendUint64(b, v) }
	tok := func(t Token) {
		b = append(b, t.Run...)
		b = append(b, 0)
		u64(t.Walk)
		u64(t.Epoch)
		u64(t.Hop)
		for _, v := range [][]float64{t.Z, t.Zhat} {
			u64(uint64(len(v)))
			for _, x := range v {
				u64(math.Float64bits(x))
			}
		}
	}
	u64(uint64(len(rd.Ledger)))
	for _, e := range rd.Ledger {
		e.Seq = 0
		b = append(b, e.MarshalLine()...)
	}
	if rd.State != nil {
		b = append(b, 1)
		u64(uint64(rd.State.Node))
		u64(uint64(rd.State.Updates))
		tok(Token{Z: rd.State.U})
	}
	u64(uint64(len(rd.Outbox)))
	for _, o := range rd.Outbox {
		u64(uint64(o.To))
		tok(o.Token)
	}
	u64(uint64(len(rd.Events)))
	for _, e := range rd.Events {
		u64(uint64(e.Kind))
		u64(e.Hop)
		u64(uint64(e.To))
	}
	if rd.Final != nil {
		b = append(b, 2)
		tok(*rd.Final)
	}
	return b
}

// TestMachineFuzzReach runs FuzzMachineStep's walk on random setups and inputs and checks
// that every check of the harness is reached: noisy updates of every step, forwards at
// both caps, finals at K, releases checked on the lattice, refusals of every kind, huge
// tokens both refused and accepted, restarts and busy steps.
func TestMachineFuzzReach(t *testing.T) {
	r := rand.New(rand.NewPCG(2024, 7))
	total := fuzzStats{refused: map[error]int{}}
	ops := make([]byte, 80)
	for c := 0; c < 400; c++ {
		for k := range ops {
			ops[k] = byte(r.Uint32())
		}
		w := newFuzzWalk(t, r.Uint64())
		w.run(ops)
		s := w.stats
		for k := range s.updates {
			total.updates[k] += s.updates[k]
			total.lattice[k] += s.lattice[k]
		}
		for k := range s.forwards {
			total.forwards[k] += s.forwards[k]
		}
		for e, v := range s.refused {
			total.refused[e] += v
		}
		total.finals += s.finals
		total.huge[0] += s.huge[0]
		total.huge[1] += s.huge[1]
		total.restarts += s.restarts
		total.busy += s.busy
	}
	t.Logf("%+v", total)
	for k, v := range total.updates {
		if v == 0 {
			t.Errorf("no noisy update of step %v", StepKind(k))
		}
	}
	for _, k := range []StepKind{StepProx, StepLinearized, StepGADMM} {
		if total.lattice[k] == 0 {
			t.Errorf("no %v release checked on the lattice", k)
		}
	}
	for _, e := range []error{ErrForeign, ErrDim, ErrHop, ErrNotFinite} {
		if total.refused[e] == 0 {
			t.Errorf("no refusal with %v", e)
		}
	}
	switch {
	case total.forwards[EventForward] == 0 || total.forwards[EventBudgetForward] == 0:
		t.Errorf("forwards %v", total.forwards)
	case total.finals == 0 || total.restarts == 0 || total.busy == 0:
		t.Errorf("finals %d, restarts %d, busy steps %d", total.finals, total.restarts, total.busy)
	case total.huge[0] == 0 || total.huge[1] == 0:
		t.Errorf("huge tokens refused %d, accepted %d", total.huge[0], total.huge[1])
	}
}
