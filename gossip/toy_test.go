package gossip

import (
	"math"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
)

// toyNet builds the digest 7.5 triangle: N = 3, d = 2, C = 1, rho = 0.3, gamma = 0.5, three
// points per node, fixed f(0), per-node penalties eta_i(1), eta_i(3) and (when noisy) the
// fixed noise vectors eps_i(1), eps_i(3).
func toyNet(t *testing.T, algo Algo, noisy bool, iters int, etas [][]float64) *net {
	t.Helper()
	data := []*consensus.Dataset{
		ds("n0", [][]float64{{0.6, 0}, {0, 0.8}, {0.5, 0.5}}, []float64{1, -1, 1}),
		ds("n1", [][]float64{{0.3, -0.4}, {-0.6, 0.2}, {0.1, 0.9}}, []float64{1, -1, -1}),
		ds("n2", [][]float64{{0.7, 0.7}, {-0.2, -0.5}, {0.4, -0.1}}, []float64{1, -1, 1}),
	}
	f0 := [][]float64{{0.1, -0.2}, {-0.3, 0.4}, {0.2, 0.2}}
	eps := map[int][][]float64{
		1: {{0.5, -0.25}, {-0.1, 0.3}, {0.2, 0}},
		2: {{-0.3, 0.1}, {0.05, -0.2}, {0, 0.4}},
	}
	nbr := [][]int{{1, 2}, {0, 2}, {0, 1}}
	var ms []*Machine
	for i := 0; i < 3; i++ {
		obj, err := NewObjective(data[i], consensus.Logistic, 1.0/3, 0.3/3)
		if err != nil {
			t.Fatal(err)
		}
		cfg := DefaultConfig()
		cfg.Node, cfg.Nodes, cfg.Neighbors, cfg.Algo, cfg.Iters = i, 3, nbr[i], algo, iters
		cfg.Penalty = Schedule{List: etas[i]}
		cfg.Init = f0[i]
		if noisy {
			cfg.Alpha = 1
			cfg.Noise = privacy.NewSeededNoise(uint64(i))
		}
		m, err := New(cfg, obj)
		if err != nil {
			t.Fatal(err)
		}
		if noisy {
			ii := i
			m.noiseHook = func(k int, dst []float64) { copy(dst, eps[k][ii]) }
		}
		ms = append(ms, m)
	}
	return newNet(ms)
}

// TestToyPrivateMRADMM reproduces digest 7.5 (private MR-ADMM with fixed noise), checking
// (18), (15), the KKT recovery, (19) and the closed form, against the digest's values.
func TestToyPrivateMRADMM(t *testing.T) {
	n := toyNet(t, MRADMM, true, 4, [][]float64{{1, 1.1}, {1, 1.05}, {0.8, 0.9}})
	n.run(t)
	want := map[int][][]float64{
		1: {{-0.0526806648, 0.0960910533}, {-0.0159292116, 0.0597016968}, {0.0499426432, 0.1966018178}},
		2: {{-0.0597858064, 0.165559282}, {0.0495205565, 0.0120096395}, {-0.0229697358, 0.134241926}},
		3: {{0.1139133829, 0.0955063174}, {0.0301673929, 0.1057633371}, {0.0083442864, -0.0014698538}},
		4: {{0.1520865596, 0.03516724}, {0.0811548942, 0.0754367546}, {0.0839368829, -0.0110215899}},
	}
	for tt, w := range want {
		for i := range w {
			vecNear(t, "f", n.hist[tt][i], w[i], 1e-9)
		}
	}
	lam3 := [][]float64{{0.034435917, 0.0156348293}, {-0.0470697146, -0.0249623782}, {0.0100715737, 0.0030701413}}
	sum := []float64{0, 0}
	for i, m := range n.ms {
		vecNear(t, "lambda(3)", m.Dual(), lam3[i], 1e-9)
		for j, v := range m.Dual() {
			sum[j] += v
		}
	}
	vecNear(t, "sum lambda(3)", sum, []float64{-0.002562223889, -0.006257407615}, 1e-11)
	// Ledger: f(0) forward, odd pure, even forward.
	for i, l := range n.ledgers {
		mechs := ""
		for _, e := range l {
			mechs += e.Mechanism[:1]
		}
		if mechs != "fpfpf" {
			t.Errorf("node %d ledger mechanisms %q, want fpfpf", i, mechs)
		}
		if l[1].Hop != 1 || l[2].Hop != 2 || l[1].Lambda != n.ms[i].cfg.Penalty.List[0] {
			t.Errorf("node %d ledger %+v", i, l[1])
		}
	}
}

// TestToyRADMMConverges: non-private R-ADMM on the triangle reaches the centralized optimum
// f* = [1.250323884, -0.353847753] (digest 7.5), and sum_i lambda_i = 0 with a common eta.
func TestToyRADMMConverges(t *testing.T) {
	one := make([]float64, 100)
	for k := range one {
		one[k] = 1
	}
	n := toyNet(t, RADMM, false, 200, [][]float64{one, one, one})
	n.run(t)
	worst := 0.0
	for _, m := range n.ms {
		f := m.Model()
		worst = math.Max(worst, math.Hypot(f[0]-1.250323884, f[1]+0.353847753))
	}
	// Digest: max_i ||f_i(2K) - f*|| = 0.0021839 at K = 100.
	if math.Abs(worst-0.0021839) > 2e-6 {
		t.Errorf("max deviation at K=100 = %.7g, want 0.0021839", worst)
	}
	s := []float64{0, 0}
	for _, m := range n.ms {
		for j, v := range m.Dual() {
			s[j] += v
		}
	}
	vecNear(t, "sum lambda", s, []float64{0, 0}, 1e-12)
}
