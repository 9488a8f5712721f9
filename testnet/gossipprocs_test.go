package testnet

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/node"
)

// planOf writes the plan RunGossipProcs writes for node i of sim (fake addresses).
func planOf(t testing.TB, sim *GossipSim, o GossipOptions, i int) []byte {
	t.Helper()
	n := len(sim.Machines)
	members := make([]node.StaticMember, n)
	for k := range members {
		members[k] = node.StaticMember{ID: fmt.Sprintf("peer-%d", k), Addrs: []string{fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", 4000+k)}}
	}
	c := sim.Configs[i]
	p := GossipPlan{
		Run: "plan-test", Self: i, Members: members, Neighbors: c.Neighbors, Algo: c.Algo.String(), Iters: c.Iters,
		Penalty: c.Penalty, Gamma: c.Gamma, Alpha: strconv.FormatFloat(c.Alpha, 'g', -1, 64), C1: c.C1,
		Loss: sim.Loss.String(), RowWeight: sim.RowWeight, RegOverN: sim.RegOverN, Init: c.Init, Seed: o.Seed,
		Rows: sim.Shards[i].Rows, Cols: sim.Shards[i].Cols, Barrier: "1s", MaxWait: "10s", OnMissing: "stop",
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGossipPlanRebuildsMachines: machines rebuilt in the simulator from the JSON plans
// (what a --procs node reads) and the shards parsed back from the CSV a node reads give
// RunGossip's model bit for bit, for private R-ADMM and for MR-ADMM with a growing penalty
// and no noise (alpha = +Inf must survive the plan).
func TestGossipPlanRebuildsMachines(t *testing.T) {
	train, test := gossipData(t, 200)
	for _, c := range []struct {
		algo  string
		alpha float64
		q     float64
	}{{"radmm", 2, 0}, {"mradmm", math.Inf(1), 1.1}} {
		t.Run(c.algo, func(t *testing.T) {
			o := gossipOpts(train, test, c.algo, "ring", 10, c.alpha)
			o.Nodes, o.EtaGrowth = 4, c.q
			rep, err := RunGossip(o)
			if err != nil {
				t.Fatal(err)
			}
			sim, err := NewGossipSim(&o)
			if err != nil {
				t.Fatal(err)
			}
			for i := range sim.Machines {
				p, err := ParseGossipPlan(planOf(t, sim, o, i))
				if err != nil {
					t.Fatal(err)
				}
				path := t.TempDir() + "/shard.csv"
				if err := writeShardCSV(path, sim.Shards[i]); err != nil {
					t.Fatal(err)
				}
				shard := loadCSVShard(t, path)
				if sim.Machines[i], err = p.Machine(shard); err != nil {
					t.Fatal(err)
				}
			}
			for !sim.Done() {
				moved, err := sim.Step()
				if err != nil {
					t.Fatal(err)
				}
				if !moved {
					t.Fatal("deadlock")
				}
			}
			avg, _ := sim.Average()
			if !gmemSameBits(avg, rep.Model) {
				t.Fatalf("model from plans differs:\nplan %v\nsim  %v", avg, rep.Model)
			}
		})
	}
}

func TestGossipPlanRejects(t *testing.T) {
	train, test := gossipData(t, 200)
	o := gossipOpts(train, test, "radmm", "ring", 4, 2)
	o.Nodes = 3
	sim, err := NewGossipSim(&o)
	if err != nil {
		t.Fatal(err)
	}
	good := planOf(t, sim, o, 1)
	edit := func(f func(p *GossipPlan)) []byte {
		var p GossipPlan
		if err := json.Unmarshal(good, &p); err != nil {
			t.Fatal(err)
		}
		f(&p)
		b, _ := json.Marshal(p)
		return b
	}
	cases := map[string]struct {
		b    []byte
		want string
	}{
		"garbage":   {[]byte("{"), "gossip plan"},
		"unknown":   {[]byte(`{"run":"x","bogus":1}`), "unknown field"},
		"self":      {edit(func(p *GossipPlan) { p.Self = 3 }), "self"},
		"neighbour": {edit(func(p *GossipPlan) { p.Neighbors = []int{1} }), "neighbour"},
		"alpha":     {edit(func(p *GossipPlan) { p.Alpha = "-1" }), "alpha"},
		"barrier":   {edit(func(p *GossipPlan) { p.Barrier = "0s" }), "barrier"},
		"max wait":  {edit(func(p *GossipPlan) { p.MaxWait = "1ms" }), "max wait"},
		"policy":    {edit(func(p *GossipPlan) { p.OnMissing = "retry" }), "on-missing"},
		"init":      {edit(func(p *GossipPlan) { p.Init = p.Init[1:] }), "initial vector"},
	}
	for name, c := range cases {
		_, err := ParseGossipPlan(c.b)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", name, err, c.want)
		}
	}
	p, err := ParseGossipPlan(good)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Machine(o.Train); err == nil || !strings.Contains(err.Error(), "rows") {
		t.Errorf("wrong shard accepted: %v", err)
	}
	if _, err := p.Machine(nil); err == nil {
		t.Error("nil shard accepted")
	}
}

func loadCSVShard(t *testing.T, path string) *consensus.Dataset {
	t.Helper()
	d, err := consensus.Load(path, consensus.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// FuzzParseGossipPlan: any input gives a plan or an error, never a panic, and a parsed
// plan builds its machine on a shard of its declared size or says why not.
func FuzzParseGossipPlan(f *testing.F) {
	d, _ := consensus.SyntheticLogistic(60, 5, 3, 21)
	train, test := consensus.TrainTest(d, 0.2, 1)
	for _, algo := range []string{"radmm", "mradmm", "admm-dvp"} {
		o := gossipOpts(train, test, algo, "ring", 4, 2)
		o.Nodes = 3
		sim, err := NewGossipSim(&o)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(planOf(f, sim, o, 0))
	}
	f.Add([]byte(`{"run":"r","self":0,"members":[{"id":"a","addrs":["x"]},{"id":"b","addrs":["y"]}],"neighbors":[1],"rows":1,"cols":1,"init":[0],"alpha":"+Inf","barrier_timeout":"1s","max_wait":"1s"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParseGossipPlan(b)
		if err != nil {
			return
		}
		if p.Rows*p.Cols > 10000 || p.Rows > 10000 {
			return
		}
		d := &consensus.Dataset{Rows: p.Rows, Cols: p.Cols, X: make([]float64, p.Rows*p.Cols), Y: make([]float64, p.Rows)}
		for r := range d.Y {
			d.Y[r] = 1
		}
		p.Machine(d)
	})
}
