package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/dpadmm/dpadmm/node/drive"
)

// asMainEnv makes the test binary behave as the dpadmm command: 'testnet --procs'
// starts its nodes by running this executable again (os.Executable).
const asMainEnv = "DPADMM_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMainEnv) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// testnetReport runs 'dpadmm testnet' with args plus --report and returns the report
// as a generic map and as raw model bits.
func testnetReport(t *testing.T, args ...string) (map[string]any, []float64) {
	t.Helper()
	rep := filepath.Join(t.TempDir(), "r.json")
	var out, errb bytes.Buffer
	if code := run(append(append([]string{"testnet"}, args...), "--report", rep), &out, &errb); code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, errb.String())
	}
	b, err := os.ReadFile(rep)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var typed struct {
		Model []float64 `json:"model"`
	}
	if err := json.Unmarshal(b, &typed); err != nil {
		t.Fatal(err)
	}
	return m, typed.Model
}

func keys(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// compareWithSim requires a network report to carry every key of the simulator's report
// (plus "network") and the same model, path fingerprint and privacy section.
func compareWithSim(t *testing.T, what string, got map[string]any, gotModel []float64, sim map[string]any, simModel []float64) {
	t.Helper()
	want := append(keys(sim), "network")
	sort.Strings(want)
	if !reflect.DeepEqual(keys(got), want) {
		t.Errorf("%s report keys %v, want %v", what, keys(got), want)
	}
	if len(gotModel) != len(simModel) || len(simModel) == 0 {
		t.Fatalf("%s model dimension %d, simulator %d", what, len(gotModel), len(simModel))
	}
	for k := range simModel {
		if math.Float64bits(gotModel[k]) != math.Float64bits(simModel[k]) {
			t.Fatalf("%s model coordinate %d: %v, simulator %v", what, k, gotModel[k], simModel[k])
		}
	}
	for _, k := range []string{"trace_hash", "objective", "accuracy", "privacy", "hops", "nodes", "warnings"} {
		if !reflect.DeepEqual(got[k], sim[k]) {
			t.Errorf("%s %s: %v, simulator %v", what, k, got[k], sim[k])
		}
	}
}

// TestTestnetMem: --mem writes the simulator's report (same keys, same model and
// privacy figures for the same seed) plus the network section.
func TestTestnetMem(t *testing.T) {
	args := []string{"--nodes", "4", "--hops", "150", "--seed", "3", "--quiet"}
	sim, simModel := testnetReport(t, args...)
	nodes := filepath.Join(t.TempDir(), "nodes")
	mem, memModel := testnetReport(t, append([]string{"--mem", "--dir", nodes}, args...)...)
	compareWithSim(t, "--mem", mem, memModel, sim, simModel)
	checkNodePredictors(t, writeReportFile(t, mem), nodes, 4, "embedded")
	nw := mem["network"].(map[string]any)
	if nw["mode"] != "mem" || nw["hosts"].(float64) != 4 || nw["ledger_entries"].(float64) != 150 {
		t.Errorf("network section %v", nw)
	}
}

// TestTestnetWithholdAcks: --withhold-acks reaches the withheld-ack accounting from the
// command line: the withholding node never acks, its senders redirect, the network
// section counts the redirects, the planned figure no longer holds because of the
// re-sends, and the realised figure charges each extra view (never below the same run's
// figure without the views would be a mistake the test cannot see, so it checks the
// counts and the verdict).
func TestTestnetWithholdAcks(t *testing.T) {
	m, _ := testnetReport(t, "--mem", "--nodes", "4", "--hops", "40", "--seed", "2", "--quiet",
		"--withhold-acks", "2", "--ack-timeout", "150ms")
	nw := m["network"].(map[string]any)
	redirects, _ := nw["redirects"].(float64)
	if redirects < 1 || nw["ledger_entries"].(float64) != 40+redirects {
		t.Fatalf("network section %v", nw)
	}
	pr := m["privacy"].(map[string]any)
	pl := pr["pairwise_planned"].(map[string]any)
	if pl["conditions_hold"] != false || !strings.Contains(pl["note"].(string), "re-sent") {
		t.Errorf("planned %v", pl)
	}
	re := pr["pairwise_realised"].(map[string]any)
	if re["conditions_hold"] != true || !strings.Contains(re["note"].(string), "did not go on with the token") {
		t.Errorf("realised %v", re)
	}
	for _, args := range [][]string{
		{"--withhold-acks", "9"}, {"--withhold-acks", "x"}, {"--withhold-acks", "1,1"}, {"--ack-timeout", "-1s"},
	} {
		var out, errb bytes.Buffer
		if code := run(append([]string{"testnet", "--mem", "--nodes", "4", "--seed", "2"}, args...), &out, &errb); code != 2 ||
			!strings.Contains(errb.String(), args[0]) {
			t.Errorf("%v: exit %d: %s", args, code, errb.String())
		}
	}
	// The initial holder of the seed cannot withhold.
	var out, errb bytes.Buffer
	h := strconv.Itoa(drive.SeededHolder(2, 4))
	if code := run([]string{"testnet", "--mem", "--nodes", "4", "--seed", "2", "--withhold-acks", h}, &out, &errb); code != 2 ||
		!strings.Contains(errb.String(), "initial holder") {
		t.Errorf("holder %s: exit %d: %s", h, code, errb.String())
	}
}

// TestTestnetProcs: --procs=3 starts three node processes (this test binary run as the
// dpadmm command) and writes the simulator's report; --kill-holder-at kills the holder
// with SIGKILL and the run still completes with the same model.
func TestTestnetProcs(t *testing.T) {
	t.Setenv(asMainEnv, "1")
	args := []string{"--nodes", "3", "--hops", "120", "--seed", "5", "--quiet"}
	sim, simModel := testnetReport(t, args...)
	procs, procsModel := testnetReport(t, append([]string{"--procs"}, args...)...)
	compareWithSim(t, "--procs", procs, procsModel, sim, simModel)
	dir := filepath.Join(t.TempDir(), "tn")
	killed, killedModel := testnetReport(t, "--procs=3", "--hops", "120", "--seed", "5", "--quiet",
		"--kill-holder-at", "60", "--dir", dir)
	compareWithSim(t, "--procs --kill-holder-at", killed, killedModel, sim, simModel)
	nw := killed["network"].(map[string]any)
	kills, _ := nw["kills"].([]any)
	if len(kills) != 1 || kills[0].(map[string]any)["hop"].(float64) != 60 || nw["ledger_entries"].(float64) != 120 {
		t.Errorf("network section %v", nw)
	}
	for _, f := range []string{"static.json", "node-0.log", "node-2/model.json", "node-1/ledger"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("--dir: %v", err)
		}
	}
	checkNodePredictors(t, writeReportFile(t, killed), dir, 3, "embedded")
}

// writeReportFile writes a report read back from JSON to a file and returns its path.
func writeReportFile(t *testing.T, r map[string]any) string {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "report.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTestnetNetworkFlagErrors: --mem/--procs flag combinations that make no sense are
// usage errors with a message.
func TestTestnetNetworkFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"testnet", "--mem"}, // no explicit node count
		{"testnet", "--procs"},
		{"testnet", "--mem", "--procs", "--nodes", "3"},
		{"testnet", "--procs=3", "--nodes", "4"},
		{"testnet", "--procs=x"},
		{"testnet", "--procs=0"},
		{"testnet", "--mem", "--nodes", "3", "--graph", "ring"},
		{"testnet", "--mem", "--nodes", "3", "--algo", "radmm", "--kill-holder-at", "5"}, // neighbour exchange: no kill
		{"testnet", "--mem", "--nodes", "3", "--kill-holder-at", "5"},
		{"testnet", "--procs", "--nodes", "3", "--hops", "10", "--kill-holder-at", "11"},
		{"testnet", "--procs", "--nodes", "3", "--kill-holder-at", "5", "--kill-phase", "later"},
		{"testnet", "--procs", "--nodes", "3", "--hops", "10", "--kill-holder-at", "10", "--kill-phase", "custody"},
		{"testnet", "--kill-holder-at", "5"},
		{"testnet", "--sim=false"},
	} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errb.String())
		} else if !strings.Contains(errb.String(), "dpadmm testnet:") && !strings.Contains(errb.String(), "invalid") {
			t.Errorf("%v: no message: %q", args, errb.String())
		}
	}
}
