package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
	"github.com/dpadmm/dpadmm/node"
)

// nodeConfigFrom parses 'dpadmm node' args as runNode does up to the configuration, with
// --run-config applied, and returns the configuration (data loaded) and the warnings of
// checkRunConfig.
func nodeConfigFrom(t *testing.T, args ...string) (node.Config, []string, error) {
	t.Helper()
	f := newNodeFlags(io.Discard)
	if err := f.m.parse(args); err != nil {
		t.Fatal(err)
	}
	var rc *node.RunConfig
	var over []string
	if *f.runConfig != "" {
		var err error
		if rc, over, err = f.applyRunConfig(*f.runConfig); err != nil {
			return node.Config{}, nil, err
		}
	}
	mode, what, err := f.mode()
	if err != nil {
		return node.Config{}, nil, err
	}
	if err := f.m.check(mode, what); err != nil {
		return node.Config{}, nil, err
	}
	cfg, err := f.config(mode)
	if err != nil {
		return node.Config{}, nil, err
	}
	if err := f.loadData(&cfg); err != nil {
		return node.Config{}, nil, err
	}
	w, err := checkRunConfig(&cfg, rc, over)
	return cfg, w, err
}

// TestRunConfigRoundTrip: a run configuration written from a node's configuration, read
// back by --run-config with no hyperparameter flag, gives a node whose configuration (and
// hash) is the file's, for the walk with every local step and for the neighbour-exchange
// algorithms, penalty table included.
func TestRunConfigRoundTrip(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "d.csv")
	if err := os.WriteFile(data, []byte("a,b,c,label\n0.1,0.2,0.3,1\n-0.2,0.1,0,-1\n0.3,-0.1,0.2,1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	common := []string{"--data", data, "--label", "label", "--positive", "1", "--datadir", filepath.Join(dir, "dd"), "--scale", "none", "--intercept", "0"}
	cases := [][]string{
		{"--run", "w1", "--gamma", "7", "--lambda", "0.4", "--clip", "0.3", "--sigma", "2.5", "--max-updates", "17", "--hops", "123", "--l2", "0.02", "--l1", "0.001"},
		{"--run", "w2", "--local-step", "linearized", "--step-size", "0.7"},
		{"--run", "w3", "--local-step", "ls-sgd", "--step-size", "0.7", "--nu", "2", "--sample-rate", "0.5"},
		{"--run", "w4", "--algo", "walk-sgd", "--step-size", "0.25", "--sample-rate", "0.75", "--max-rows", "40", "--sigma", "1",
			"--gamma", "100", "--lambda", "0.5", "--max-updates", "100", "--hops", "1000"},
		{"--run", "w5", "--algo", "walk-gadmm", "--step-size", "0.1", "--beta", "3"},
		{"--run", "g1", "--algo", "mradmm", "--graph", "ring", "--iters", "9", "--alpha", "3", "--eta", "0.2", "--eta-growth", "1.1", "--eta-max", "2", "--paper-c", "1.5", "--even-gamma", "0.5"},
		{"--run", "g2", "--algo", "admm", "--iters", "4"},
	}
	for _, c := range cases {
		want, _, err := nodeConfigFrom(t, append(append([]string(nil), c...), common...)...)
		if err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		rc := want.RunConfig()
		path := filepath.Join(dir, rc.Run+".json")
		if err := node.WriteRunConfig(path, rc); err != nil {
			t.Fatal(err)
		}
		got, warns, err := nodeConfigFrom(t, append([]string{"--run-config", path}, common...)...)
		if err != nil || len(warns) > 0 {
			t.Fatalf("%v: --run-config: %v %v", c, err, warns)
		}
		if d := got.RunConfig().Diff(rc); len(d) > 0 || got.RunConfig().Hash() != rc.Hash() {
			t.Errorf("%v: round trip differs: %v", c, d)
		}
	}
	// The same configuration in YAML, read with --config.
	yml := filepath.Join(dir, "w4.yaml")
	if err := os.WriteFile(yml, []byte("run: w4\nalgo: walk\ndims: 3\nloss: logistic\nl1: 0\nl2: 0.001\ngamma: 100\nlambda: 0.5\n"+
		"clip: 0.1\nsigma: 1\nmax_updates: 100\nhops: 1000\nnoise: gaussian\nstep: sgd\nstep_size: 0.25\nsample_rate: 0.75\nmax_rows: 40\nclasses: [\"-1\", \"1\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	jsonRC, err := node.ReadRunConfig(filepath.Join(dir, "w4.json"))
	if err != nil {
		t.Fatal(err)
	}
	got4, warns, err := nodeConfigFrom(t, append([]string{"--config", yml}, common...)...)
	if err != nil || len(warns) > 0 {
		t.Fatalf("YAML --config: %v %v", err, warns)
	}
	if d := got4.RunConfig().Diff(jsonRC); len(d) > 0 {
		t.Errorf("YAML and JSON files differ in effect: %v", d)
	}
	// The same in TOML (a file named *.toml), and a malformed TOML file is refused with
	// the file named.
	tml := filepath.Join(dir, "w4.toml")
	if err := os.WriteFile(tml, []byte("run = \"w4\"\nalgo = \"walk\"\ndims = 3\nloss = \"logistic\"\nl1 = 0\nl2 = 0.001\ngamma = 100\nlambda = 0.5\n"+
		"clip = 0.1\nsigma = 1\nmax_updates = 100\nhops = 1000\nnoise = \"gaussian\"\nstep = \"sgd\"\nstep_size = 0.25\nsample_rate = 0.75\nmax_rows = 40\nclasses = [\"-1\", \"1\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got5, warns, err := nodeConfigFrom(t, append([]string{"--config", tml}, common...)...)
	if err != nil || len(warns) > 0 {
		t.Fatalf("TOML --config: %v %v", err, warns)
	}
	if d := got5.RunConfig().Diff(jsonRC); len(d) > 0 {
		t.Errorf("TOML and JSON files differ in effect: %v", d)
	}
	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(bad, []byte("run = \"w4\"\ngamma = = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := node.ReadRunConfig(bad); err == nil || !strings.Contains(err.Error(), "bad.toml (TOML)") {
		t.Errorf("malformed TOML: %v", err)
	}
	// A penalty table travels in the file.
	tab := node.RunConfig{Run: "g3", Algorithm: "mradmm", Dims: 3, Loss: consensus.Logistic.String(), Graph: "ring", Iters: 3,
		Alpha: "2", PaperC: 1, Noise: "objective-perturbation", EtaTable: [][]float64{{0.5}, {0.7}}, Classes: []string{"-1", "1"}}
	path := filepath.Join(dir, "tab.json")
	if err := node.WriteRunConfig(path, tab); err != nil {
		t.Fatal(err)
	}
	got, _, err := nodeConfigFrom(t, append([]string{"--run-config", path}, common...)...)
	if err != nil {
		t.Fatal(err)
	}
	// The file lists no features: the node's configuration adds its data's.
	grc := got.RunConfig()
	if grc.Features != node.FeaturesDigest([]string{"a", "b", "c"}) {
		t.Errorf("features %q", grc.Features)
	}
	grc.Features = ""
	if got.RADMM == nil || len(got.RADMM.EtaTable) != 2 || grc.Hash() != tab.Hash() {
		t.Errorf("table: %+v", got.RADMM)
	}
}

// TestRunConfigOverridesAndErrors: a flag given on the command line wins over the file
// and the difference is reported with the key named; a file that does not fit the data
// (dimensions) is refused naming the key; unknown keys, bad JSON and a missing file are
// refused.
func TestRunConfigOverridesAndErrors(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "d.csv")
	if err := os.WriteFile(data, []byte("a,b,label\n0.1,0.2,1\n-0.2,0.1,-1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	common := []string{"--data", data, "--label", "label", "--positive", "1", "--datadir", filepath.Join(dir, "dd"), "--scale", "none", "--intercept", "0"}
	rc := node.RunConfig{Run: "r", Algorithm: "walk", Dims: 2, Loss: "logistic", L2: 0.01, Gamma: 10, Lambda: 0.5, Clip: 0.1,
		Sigma: 1, MaxUpdates: 5, Hops: 50, Noise: "gaussian"}
	path := filepath.Join(dir, "rc.json")
	if err := node.WriteRunConfig(path, rc); err != nil {
		t.Fatal(err)
	}
	cfg, warns, err := nodeConfigFrom(t, append([]string{"--run-config", path, "--clip", "0.2"}, common...)...)
	if err != nil || cfg.Clip != 0.2 || len(warns) != 1 || !strings.Contains(warns[0], "clip: yours 0.2, the run's 0.1") {
		t.Errorf("override: %v clip %v warnings %v", err, cfg.Clip, warns)
	}
	rc3 := rc
	rc3.Dims = 3
	p3 := filepath.Join(dir, "rc3.json")
	if err := node.WriteRunConfig(p3, rc3); err != nil {
		t.Fatal(err)
	}
	if _, _, err := nodeConfigFrom(t, append([]string{"--run-config", p3}, common...)...); err == nil || !strings.Contains(err.Error(), "dims: yours 2, the run's 3") {
		t.Errorf("dims: %v", err)
	}
	for name, body := range map[string]string{
		"unknown.json": `{"run":"r","algo":"walk","clipp":0.1}`,
		"bad.json":     `{"run":`,
		"norun.json":   `{"algo":"walk"}`,
		"algo.json":    `{"run":"r","algo":"nope"}`,
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		if code := run(append([]string{"node", "--run-config", p}, common...), &out, &errb); code != 2 || !strings.Contains(errb.String(), "run") {
			t.Errorf("%s: exit %d: %s", name, code, errb.String())
		}
	}
	var out, errb bytes.Buffer
	if code := run(append([]string{"node", "--run-config", filepath.Join(dir, "missing.json")}, common...), &out, &errb); code != 2 {
		t.Errorf("missing file: exit %d: %s", code, errb.String())
	}
}
