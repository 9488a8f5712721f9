package experiment

import (
	"bytes"
	"encoding/csv"
	"image/png"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/gossip"
	"github.com/dpadmm/dpadmm/testnet/sim"
)

// expData returns the embedded data split 80/20 and scaled to rows of norm <= 1.
func expData(t *testing.T) (train, test *consensus.Dataset) {
	t.Helper()
	full, err := consensus.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	train, test = consensus.TrainTest(full, 0.2, 1)
	sc, err := consensus.FitScaler(train, consensus.ScaleStandardizeNorm)
	if err != nil {
		t.Fatal(err)
	}
	return sc.Apply(train), sc.Apply(test)
}

func shortExperiment(t *testing.T) ExperimentOptions {
	train, test := expData(t)
	return ExperimentOptions{
		Train: train, Test: test, Nodes: 5, Graph: "ring", Iters: 7, Alphas: []float64{2, 0.5}, Seeds: 2, Seed: 3,
		Problem: consensus.Problem{Loss: consensus.Logistic, Reg: consensus.Regularizer{L2: 2.2e-3}},
		Eta:     1, EtaGrowth: 1.04, Gamma: 0.5, C: 20,
	}
}

// TestExperimentShortRun: a short run gives the expected series, CSV rows and columns, a
// PNG that decodes and is not blank, and baselines whose P(T) equals R-ADMM's; the matched
// alphas and R-ADMM's P(T) agree with closed forms of eq. (32) computed here.
func TestExperimentShortRun(t *testing.T) {
	o := shortExperiment(t)
	calls := 0
	o.Progress = func(done, total int) {
		calls++
		if done != calls || total != 2+2*2*4 {
			t.Errorf("progress %d/%d at call %d", done, total, calls)
		}
	}
	res, err := RunExperiment(o)
	if err != nil {
		t.Fatal(err)
	}
	if calls != 18 || res.Runs != 18 {
		t.Fatalf("%d progress calls, %d runs, want 18", calls, res.Runs)
	}
	if len(res.Series) != 1+2*4 {
		t.Fatalf("%d series, want 9", len(res.Series))
	}
	T := o.Iters
	M := float64(o.Train.Rows)
	w := o.C * float64(o.Nodes) / M // C_i/B_i
	r := o.C * o.Problem.Reg.L2     // rho/N
	const c1, V = 0.25, 2.0
	jac := func(eta float64) float64 { return 2 * w * 1.4 * c1 / (r + 2*eta*V) }
	for _, a := range o.Alphas {
		got := map[string]ExperimentSeries{}
		for _, s := range res.Series {
			if s.Alpha == a {
				got[s.Algo] = s
			}
		}
		K := (T + 1) / 2
		target := float64(K) * (jac(1) + 2*w*a)
		pr := got[ExpRADMM].Privacy
		if math.Abs(pr.Mean[T]-target) > 1e-12*target {
			t.Errorf("alpha %g: R-ADMM P(T) = %.15g, closed form %.15g", a, pr.Mean[T], target)
		}
		for _, algo := range []string{ExpDVP, ExpMADMM} {
			p := got[algo].Privacy
			for _, v := range []float64{p.Mean[T], p.Min[T], p.Max[T]} {
				if math.Abs(v-pr.Mean[T]) > 1e-9*pr.Mean[T] {
					t.Errorf("alpha %g: %s P(T) = %.15g, R-ADMM %.15g", a, algo, v, pr.Mean[T])
				}
			}
			if !got[algo].ConditionsHold {
				t.Errorf("%s: conditions fail: %s", algo, got[algo].Reason)
			}
		}
		// DVP: T (jac(1) + 2 w alpha') = target.
		if want := (target/float64(T) - jac(1)) / (2 * w); math.Abs(got[ExpDVP].NoiseAlpha-want) > 1e-9*want {
			t.Errorf("alpha %g: DVP alpha %.15g, closed form %.15g", a, got[ExpDVP].NoiseAlpha, want)
		}
		// M-ADMM: sum_t jac(eta_t) + 2 w alpha' sum_t 1/eta_t = target, eta_t = 1.04^ceil(t/2).
		sj, si := 0.0, 0.0
		for tt := 1; tt <= T; tt++ {
			eta := math.Pow(1.04, float64((tt+1)/2))
			sj += jac(eta)
			si += 1 / eta
		}
		if want := (target - sj) / (2 * w * si); math.Abs(got[ExpMADMM].NoiseAlpha-want) > 1e-9*want {
			t.Errorf("alpha %g: M-ADMM alpha %.15g, closed form %.15g", a, got[ExpMADMM].NoiseAlpha, want)
		}
		// MR-ADMM keeps alpha and has a smaller P(T) (growing penalty).
		if mr := got[ExpMRADMM]; mr.NoiseAlpha != a || !(mr.Privacy.Mean[T] < target) {
			t.Errorf("alpha %g: MR-ADMM alpha %v P(T) %v", a, mr.NoiseAlpha, mr.Privacy.Mean[T])
		}
		// P(t) rises only at odd t for R-ADMM, at every t for DVP.
		if pr.Mean[2] != pr.Mean[1] || !(got[ExpDVP].Privacy.Mean[2] > got[ExpDVP].Privacy.Mean[1]) {
			t.Errorf("alpha %g: P(t) steps wrong: %v %v", a, pr.Mean[:3], got[ExpDVP].Privacy.Mean[:3])
		}
		for _, s := range got {
			for tt := 0; tt <= T; tt++ {
				if !(s.Loss.Min[tt] <= s.Loss.Mean[tt] && s.Loss.Mean[tt] <= s.Loss.Max[tt]) ||
					!(s.TestError.Min[tt] >= 0 && s.TestError.Max[tt] <= 1) {
					t.Errorf("%s alpha %g t=%d: band %v %v %v", s.Algo, a, tt, s.Loss.Min[tt], s.Loss.Mean[tt], s.Loss.Max[tt])
				}
			}
		}
	}

	var buf bytes.Buffer
	if err := res.WriteCSV(&buf); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(recs[0], ",") != ExperimentCSVHeader {
		t.Fatalf("header %v", recs[0])
	}
	if want := 1 + 9*(T+1); len(recs) != want {
		t.Fatalf("%d CSV lines, want %d", len(recs), want)
	}
	count := map[string]int{}
	for _, rec := range recs[1:] {
		if len(rec) != 13 {
			t.Fatalf("row %v has %d fields", rec, len(rec))
		}
		count[rec[0]+"/"+rec[1]]++
		if rec[0] == ExpNoPriv && (rec[1] != "inf" || rec[10] != "") {
			t.Errorf("non-private row %v", rec)
		}
		if rec[0] != ExpNoPriv {
			if _, err := strconv.ParseFloat(rec[10], 64); err != nil {
				t.Errorf("privacy field of %v: %v", rec, err)
			}
		}
	}
	for _, k := range []string{"admm/inf", "admm-dvp/2", "madmm/0.5", "radmm/2", "mradmm/0.5"} {
		if count[k] != T+1 {
			t.Errorf("%s: %d rows, want %d", k, count[k], T+1)
		}
	}

	buf.Reset()
	if err := res.WritePNG(&buf); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	b := img.Bounds()
	if b.Dx() < 600 || b.Dy() < 400 {
		t.Fatalf("image %v too small", b)
	}
	colours := map[[3]uint32]bool{}
	nonWhite := 0
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, _ := img.At(x, y).RGBA()
			colours[[3]uint32{r >> 8, g >> 8, bl >> 8}] = true
			if r < 0xf000 || g < 0xf000 || bl < 0xf000 {
				nonWhite++
			}
		}
	}
	if total := (b.Dx() / 2) * (b.Dy() / 2); nonWhite < total/50 || len(colours) < 20 {
		t.Errorf("image looks blank: %d of %d pixels not white, %d colours", nonWhite, total, len(colours))
	}
	sum := res.Summary()
	if len(sum) != 2 || sum[0].Alpha != 2 || len(sum[0].Rows) != 4 {
		t.Fatalf("summary %+v", sum)
	}
	if sum[0].RBeatsDVP != (sum[0].Loss[ExpRADMM] < sum[0].Loss[ExpDVP]) {
		t.Error("summary verdict inconsistent")
	}
}

// TestExperimentMatchesGossipCurve: one seed of the experiment gives the same L(t), test
// error and P(t) as RunGossip's curve for the same options.
func TestExperimentMatchesGossipCurve(t *testing.T) {
	o := shortExperiment(t)
	o.Seeds, o.Alphas, o.NoNonPriv = 1, []float64{1}, true
	res, err := RunExperiment(o)
	if err != nil {
		t.Fatal(err)
	}
	var s ExperimentSeries
	for _, x := range res.Series {
		if x.Algo == ExpRADMM {
			s = x
		}
	}
	var curve bytes.Buffer
	g := sim.GossipOptions{Train: o.Train, Test: o.Test, Nodes: 5, Problem: o.Problem, Algo: "radmm", Graph: "ring",
		Iters: o.Iters, Alpha: 1, Eta: 1, Gamma: 0.5, C: o.C, Seed: o.Seed, Curve: &curve}
	if _, err := sim.RunGossip(g); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&curve).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != o.Iters+2 {
		t.Fatalf("%d curve lines", len(recs))
	}
	for tt, rec := range recs[1:] {
		L, _ := strconv.ParseFloat(rec[1], 64)
		E, _ := strconv.ParseFloat(rec[3], 64)
		P, _ := strconv.ParseFloat(rec[4], 64)
		if math.Abs(L-s.Loss.Mean[tt]) > 1e-8*L || math.Abs(E-s.TestError.Mean[tt]) > 1e-5 || math.Abs(P-s.Privacy.Mean[tt]) > 1e-8*math.Max(P, 1) {
			t.Errorf("t=%d: gossip curve %v, experiment %v %v %v", tt, rec, s.Loss.Mean[tt], s.TestError.Mean[tt], s.Privacy.Mean[tt])
		}
	}
}

// TestExperimentBadInput: bad options give clear errors, never a panic.
func TestExperimentBadInput(t *testing.T) {
	cases := map[string]func(o *ExperimentOptions){
		"alpha 0":        func(o *ExperimentOptions) { o.Alphas = []float64{2, 0} },
		"alpha negative": func(o *ExperimentOptions) { o.Alphas = []float64{-1} },
		"alpha inf":      func(o *ExperimentOptions) { o.Alphas = []float64{math.Inf(1)} },
		"seeds 0":        func(o *ExperimentOptions) { o.Seeds = -1 },
		"iters":          func(o *ExperimentOptions) { o.Iters = -3 },
		"no data":        func(o *ExperimentOptions) { o.Train = nil },
		"squared loss":   func(o *ExperimentOptions) { o.Problem.Loss = consensus.Squared },
		"eta growth":     func(o *ExperimentOptions) { o.EtaGrowth = 0.9 },
		"graph":          func(o *ExperimentOptions) { o.Graph = "star" },
		"no l2":          func(o *ExperimentOptions) { o.Problem.Reg.L2 = 0 },
		// C_i > B_i violates Theorem V.1: nothing to match.
		"C too large": func(o *ExperimentOptions) { o.C = 1000 },
	}
	for name, mod := range cases {
		o := shortExperiment(t)
		o.Seeds, o.Iters = 1, 2
		mod(&o)
		if _, err := RunExperiment(o); err == nil {
			t.Errorf("%s: no error", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	// A target below the baseline's Jacobian term alone cannot be matched.
	o := shortExperiment(t)
	g := o.gossipOptions(ExpDVP, 1, 1)
	gs, err := sim.NewGossipSim(&g)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := MatchAlpha(gossip.ADMMDVP, gs.Acc, 1e-6); err == nil || !strings.Contains(err.Error(), "Jacobian") {
		t.Errorf("unreachable target: %v", err)
	}
	for _, bad := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		if _, err := MatchAlpha(gossip.ADMMDVP, gs.Acc, bad); err == nil {
			t.Errorf("target %v accepted", bad)
		}
	}
}

// TestExperimentWorkers: the result does not depend on the number of parallel workers.
func TestExperimentWorkers(t *testing.T) {
	var csvs [2]bytes.Buffer
	for k, w := range []int{1, 3} {
		o := shortExperiment(t)
		o.Iters, o.Seeds, o.Workers = 4, 3, w
		res, err := RunExperiment(o)
		if err != nil {
			t.Fatal(err)
		}
		if res.Runs != 3+2*4*3 {
			t.Fatalf("workers %d: %d runs", w, res.Runs)
		}
		if err := res.WriteCSV(&csvs[k]); err != nil {
			t.Fatal(err)
		}
	}
	if csvs[0].String() != csvs[1].String() {
		t.Error("1 and 3 workers give different results")
	}
	o := shortExperiment(t)
	o.Workers = -1
	if _, err := RunExperiment(o); err == nil {
		t.Error("workers -1 accepted")
	}
}
