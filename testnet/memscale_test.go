//go:build scale

package testnet

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dpadmm/dpadmm/consensus"
)

// TestMemScale runs DPADMM_MEM_HOSTS (default 200) real libp2p hosts in this process; it is
// behind the scale build tag because it takes about a minute:
//
//	go test -tags scale -run MemScale -v ./testnet/
func TestMemScale(t *testing.T) {
	hosts := 200
	if v := os.Getenv("DPADMM_MEM_HOSTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 2 {
			t.Fatalf("DPADMM_MEM_HOSTS=%q: want an integer >= 2", v)
		}
		hosts = n
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	d, err := consensus.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	sh, err := consensus.Split(d, hosts, "iid", 1)
	if err != nil {
		t.Fatal(err)
	}
	prob := consensus.Problem{Loss: consensus.Logistic, Reg: consensus.Regularizer{L2: 0.01}}
	const hops = 2000
	res, err := RunMem(ctx, MemConfig{Shards: sh, Problem: prob, Gamma: 1, Lambda: 0.5, Clip: 1, Sigma: 0.8, Seed: 1, Hops: hops})
	if err != nil {
		t.Fatal(err)
	}
	status, _ := os.ReadFile("/proc/self/status")
	rss := ""
	for _, l := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(l, "VmHWM") {
			rss = l
		}
	}
	t.Logf("%d hosts, %d hops in %v: %.0f hops/s; peak %s", hosts, hops, res.Wall, hops/res.Wall.Seconds(), rss)
}

// TestMemScaleMock runs DPADMM_MEM_HOSTS (default 1000) hosts on the mock transport, p =
// 100, DPADMM_MEM_HOPS (default 100000) hops of the one-row lasso walk, and requires the
// simulator's model and path bit for bit, and at the default size the goals (under 60 s
// and 2 GB); it logs the wall time, peak RSS and heap, and the simulator's time:
//
//	go test -tags scale -run MemScaleMock -v ./testnet/
func TestMemScaleMock(t *testing.T) {
	hosts, hops := envInt(t, "DPADMM_MEM_HOSTS", 1000), envInt(t, "DPADMM_MEM_HOPS", 100000)
	res := lassoMemVsSim(t, hosts, 100, uint64(hops), TransportMock, 0, 10*time.Minute)
	if hosts == 1000 && hops == 100000 && (res.Wall > time.Minute || res.PeakRSS > 2e9) {
		t.Errorf("goal missed: %v and peak RSS %.2f GB (goal: under 60 s and 2 GB)", res.Wall, float64(res.PeakRSS)/1e9)
	}
	t.Logf("mock: %d hosts, p = 100, %d hops in %v (%.0f hops/s); peak RSS %.0f MB (%.2f MB per host), heap %.0f MB (%.2f MB per host); %d connections closed by the limit",
		hosts, hops, res.Wall, float64(hops)/res.Wall.Seconds(), float64(res.PeakRSS)/1e6, float64(res.PeakRSS)/1e6/float64(hosts),
		float64(res.Heap)/1e6, float64(res.Heap)/1e6/float64(hosts), res.Trimmed)
}

// envInt reads an integer >= 2 from the environment variable name, or returns def.
func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 2 {
		t.Fatalf("%s=%q: want an integer >= 2", name, v)
	}
	return n
}
