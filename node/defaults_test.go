package node

import (
	"math"
	"strings"
	"testing"

	"github.com/dpadmm/dpadmm/consensus"
)

// TestDefaultConfig: the defaults form a valid walk configuration once the node's own
// fields are set, and with the neighbour-exchange parameters a valid R-ADMM one; each
// profile sets what it documents and an unknown one is refused.
func TestDefaultConfig(t *testing.T) {
	raw, _ := consensus.SyntheticLogistic(20, 3, 1, 1)
	sc, err := consensus.FitScaler(raw, consensus.ScaleUnitBall)
	if err != nil {
		t.Fatal(err)
	}
	d := sc.Apply(raw)
	c := DefaultConfig()
	c.Run, c.DataDir, c.Data = "r", t.TempDir(), d
	if err := c.Validate(); err != nil {
		t.Fatalf("walk defaults: %v", err)
	}
	c.NoControlTopic = true
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "static membership") {
		t.Errorf("no control topic without a static membership: %v", err)
	}
	c.NoControlTopic = false
	if c.Gamma != 0.03 || c.Lambda != 0.1 || c.Clip != 0.1 || c.Sigma != 1 || c.MaxUpdates != 20 || c.Delta != 1e-5 ||
		c.Hops != 60 || !c.MDNS || c.AckTimeout == 0 || len(c.Listen) != 2 {
		t.Errorf("walk defaults: %+v", c)
	}
	g := DefaultRADMMParams()
	g.Algo = "radmm"
	c.RADMM = &g
	if err := c.Validate(); err != nil {
		t.Fatalf("neighbour-exchange defaults: %v", err)
	}
	if !math.IsInf(DefaultAlpha("admm"), 1) || DefaultAlpha("radmm") != 2 || g.Gamma != 0.5 {
		t.Errorf("alpha admm %v, radmm %v, gamma %v", DefaultAlpha("admm"), DefaultAlpha("radmm"), g.Gamma)
	}
	for _, p := range Profiles {
		var c Config
		if err := ApplyProfile(&c, p); err != nil || len(c.Listen) == 0 || c.AckTimeout <= 0 || c.JoinWindow <= 0 {
			t.Errorf("profile %s: %+v, %v", p, c, err)
		}
		if loop := strings.HasPrefix(c.Listen[0], "/ip4/127.0.0.1/"); loop != (p == ProfileTest) || c.MDNS != (p == ProfileLAN) || c.NAT != (p == ProfileInternet) {
			t.Errorf("profile %s: listen %v, mdns %v, nat %v", p, c.Listen, c.MDNS, c.NAT)
		}
	}
	if err := ApplyProfile(&c, "wan"); err == nil {
		t.Error("unknown profile accepted")
	}
}
