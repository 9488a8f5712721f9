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
