package testnet

import (
	"context"
	"testing"
	"time"

	"github.com/dpadmm/dpadmm/testnet/sim"
	"github.com/dpadmm/dpadmm/walk"
)

// TestStepsSameModelInEveryMode: every local step other than the exact prox gives the
// simulator's report (model bit for bit, path, privacy section) on real libp2p hosts in
// one process (--mem) and as separate 'dpadmm node' processes (--procs), for one seed.
// Without -tags long only the first step (LS-SGD) also runs on hosts; the others run in
// the simulator.
func TestStepsSameModelInEveryMode(t *testing.T) {
	bin := buildDpadmm(t)
	const n, hops, seed = 3, 60, 5
	steps := []walk.StepParams{
		{Kind: walk.StepLSSGD, Eta: 0.5, Nu: 2, Rate: 0.5},
		{Kind: walk.StepLinearized, Eta: 0.5},
		{Kind: walk.StepGADMM, Eta: 0.5, Beta: 1},
		{Kind: walk.StepSGD, Eta: 0.5, Rate: 0.5},
	}
	for i, st := range steps {
		t.Run(st.Kind.String(), func(t *testing.T) {
			o := netOptions(t, n, hops, seed)
			o.Step = st
			gs, err := sim.Run(o)
			if err != nil {
				t.Fatal(err)
			}
			if gs.LocalStep != st.Kind.String() {
				t.Fatalf("report local_step %q, want %q", gs.LocalStep, st.Kind)
			}
			if longRun || i == 0 { // the others on hosts with -tags long
				sameInEveryMode(t, o, gs, bin)
			}
		})
	}
}

// sameInEveryMode runs o on real libp2p hosts in one process (--mem) and as 'dpadmm node'
// processes of binary bin (--procs), and requires both reports to be sim's (sameReport).
func sameInEveryMode(t *testing.T, o sim.Options, gs *sim.Report, bin string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mem, err := RunNet(ctx, o, NetOptions{Mode: "mem"})
	if err != nil {
		t.Fatal(err)
	}
	sameReport(t, "mem", mem, gs)
	procs, err := RunNet(ctx, o, NetOptions{Mode: "procs", Binary: bin, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	sameReport(t, "procs", procs, gs)
}
