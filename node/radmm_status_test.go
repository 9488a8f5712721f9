package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/privacy"
)

func httpGet(t *testing.T, url string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return b
}

// metricValue returns the value of the sample whose line starts with name (a metric
// name, with its labels if any) in a Prometheus text exposition.
func metricValue(t *testing.T, text, name string) float64 {
	t.Helper()
	for _, l := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(l, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("metric %s: %q", name, l)
			}
			return v
		}
	}
	t.Fatalf("metric %s not found in:\n%s", name, text)
	return 0
}

// TestRADMMStatusHTTP: a node of a four-node private R-ADMM ring serves /status and
// /metrics over HTTP. While the run goes on, every /status it serves has an epsilon equal
// to the Theorem V.1 sum over the odd iterations released so far (computed here from the
// formula); at the end it reports iteration T, both neighbours, T+1 ledger entries, the
// full epsilon with the theorem's name and conditions holding, and done; /metrics agrees.
func TestRADMMStatusHTTP(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	d := radmmData(t)
	sh, err := consensus.Split(d, 4, "iid", 5)
	if err != nil {
		t.Fatal(err)
	}
	const T = 40
	p := RADMMParams{Algo: "radmm", Graph: "ring", Iters: T, Alpha: 2, Eta: 1, Gamma: 0.5, PaperC: 5, Barrier: 15 * time.Second}
	nodes, logs, _ := radmmClusterWith(t, ctx, "gstat", sh, p, func(i int, c *Config) {
		if i == 0 {
			c.HTTP = "127.0.0.1:0"
		}
	})
	base := "http://" + nodes[0].HTTPAddr
	var st Status
	if err := json.Unmarshal(httpGet(t, base+"/status"), &st); err != nil {
		t.Fatal(err)
	}
	if st.RADMM != nil {
		t.Fatalf("gossip status before RunRADMM: %+v", st.RADMM)
	}
	w, r := p.PaperC*4/float64(d.Rows), p.PaperC*radmmProblem.Reg.L2
	term := 2 * w * (1.4*0.25/(r+2*p.Eta*2) + p.Alpha) // ring: V = 2
	epsAt := func(iter int) float64 { return float64((iter+1)/2) * term }

	var (
		wg      sync.WaitGroup
		seen    []int
		pollErr error
	)
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			resp, err := http.Get(base + "/status")
			if err != nil {
				pollErr = err
				return
			}
			var s Status
			err = json.NewDecoder(resp.Body).Decode(&s)
			resp.Body.Close()
			if err != nil {
				pollErr = err
				return
			}
			g := s.RADMM
			if g == nil || g.Iter < 0 {
				continue
			}
			if want := epsAt(g.Iter); math.Abs(float64(g.EpsilonSpent)-want) > 1e-9*math.Max(want, 1) || g.LedgerEntries != g.Iter+1 {
				pollErr = fmt.Errorf("status at iteration %d: epsilon %v, want %v; %d ledger entries", g.Iter, g.EpsilonSpent, want, g.LedgerEntries)
				return
			}
			if n := len(seen); n > 0 && g.Iter < seen[n-1] {
				pollErr = fmt.Errorf("iteration went back from %d to %d", seen[n-1], g.Iter)
				return
			}
			seen = append(seen, g.Iter)
		}
	}()
	models := runRADMMAll(t, ctx, nodes, logs)
	close(stop)
	wg.Wait()
	if pollErr != nil {
		t.Fatal(pollErr)
	}
	if len(seen) == 0 {
		t.Fatal("no status observed during the run")
	}
	t.Logf("%d statuses observed during the run, iterations %d..%d", len(seen), seen[0], seen[len(seen)-1])

	if err := json.Unmarshal(httpGet(t, base+"/status"), &st); err != nil {
		t.Fatal(err)
	}
	g := st.RADMM
	if g == nil {
		t.Fatal("no gossip section in /status")
	}
	want := epsAt(T)
	nb := models[0].Neighbors
	if g.Algorithm != "radmm" || g.Iter != T || g.Iters != T || len(g.Neighbors) != 2 || g.Neighbors[0] != nb[0] ||
		g.Neighbors[1] != nb[1] || g.Reachable != 2 || g.LedgerEntries != T+1 || g.StaleUses != 0 || !g.Done ||
		g.Rejected != 0 || !g.ConditionsHold || g.Theorem != privacy.ObjPertTheorem || g.Conditions != privacy.ObjPertConditions {
		t.Fatalf("final gossip status %+v", *g)
	}
	if math.Abs(float64(g.EpsilonSpent)-want) > 1e-9*want || math.Abs(float64(g.EpsilonSpent-models[0].Privacy.Epsilon)) > 1e-12*want ||
		st.Epsilon != g.EpsilonSpent || st.EpsilonNote != privacy.ObjPertTheorem || !st.Done || st.Index != models[0].Index {
		t.Fatalf("status epsilon %v (top level %v, %q), want %v; model.json %v", g.EpsilonSpent, st.Epsilon, st.EpsilonNote, want, models[0].Privacy.Epsilon)
	}
	text := string(httpGet(t, base+"/metrics"))
	for name, v := range map[string]float64{
		"dpadmm_gossip_iterations_total":        T,
		"dpadmm_gossip_iteration":               T,
		"dpadmm_gossip_stale_total":             0,
		"dpadmm_gossip_neighbors_reachable":     2,
		"dpadmm_gossip_epsilon_conditions_hold": 1,
	} {
		if got := metricValue(t, text, name); got != v {
			t.Errorf("%s = %v, want %v", name, got, v)
		}
	}
	if got := metricValue(t, text, "dpadmm_gossip_epsilon_spent"); math.Abs(got-want) > 1e-9*want {
		t.Errorf("dpadmm_gossip_epsilon_spent = %v, want %v", got, want)
	}
	if strings.Contains(text, "dpadmm_hops_processed_total") {
		t.Error("the walk's per-hop metrics are served without DebugStatus")
	}
	// A walk node does not expose the neighbour-exchange metrics, and its per-hop metrics
	// only with DebugStatus.
	rec := httptest.NewRecorder()
	(&Node{metrics: newMetrics()}).Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	dbg := httptest.NewRecorder()
	(&Node{metrics: newMetrics(), cfg: Config{
		Network: Network{DebugStatus: true},
	}}).Handler().ServeHTTP(dbg, httptest.NewRequest("GET", "/metrics", nil))
	if strings.Contains(rec.Body.String(), "dpadmm_gossip_") || strings.Contains(rec.Body.String(), "dpadmm_hops_processed_total") ||
		!strings.Contains(dbg.Body.String(), "dpadmm_hops_processed_total") {
		t.Error("walk node metrics: gossip metrics shown, or per-hop metrics public or missing with DebugStatus")
	}
}

// TestRADMMStatusNoNoise: without noise the status reports no guarantee (epsilon -1,
// conditions not holding, with a reason) and the metric +Inf.
func TestRADMMStatusNoNoise(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := radmmData(t)
	sh, err := consensus.Split(d, 3, "iid", 5)
	if err != nil {
		t.Fatal(err)
	}
	p := RADMMParams{Algo: "radmm", Graph: "ring", Iters: 4, Alpha: math.Inf(1), Eta: 1, Gamma: 0.5, PaperC: 5, Barrier: 15 * time.Second}
	nodes, logs, _ := radmmCluster(t, ctx, "gstat0", sh, p)
	runRADMMAll(t, ctx, nodes, logs)
	g := nodes[1].Status().RADMM
	if g == nil || g.EpsilonSpent.Bounded() || g.ConditionsHold || g.Reason == "" || !g.Done || g.Iter != 4 {
		t.Fatalf("status without noise: %+v", g)
	}
	rec := httptest.NewRecorder()
	nodes[1].Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if v := metricValue(t, rec.Body.String(), "dpadmm_gossip_epsilon_spent"); !math.IsInf(v, 1) {
		t.Fatalf("epsilon metric without noise %v, want +Inf", v)
	}
	if v := metricValue(t, rec.Body.String(), "dpadmm_gossip_epsilon_conditions_hold"); v != 0 {
		t.Fatalf("conditions metric without noise %v, want 0", v)
	}
}
