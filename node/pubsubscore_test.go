package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/rs/zerolog"

	"github.com/dpadmm/dpadmm/node/wire"
)

func TestControlVerdict(t *testing.T) {
	big := `{"type":"final","run":"r","model":[` + strings.Repeat("0,", maxControl/2) + `0]}`
	cases := map[string]string{
		`{"type":"announce","run":"r","config_hash":"x"}`: "",
		`{"type":"join","run":"r"}`:                       "",
		`{"type":"start","run":"r"}`:                      "",
		`{"type":"final","run":"r","model":[1,2]}`:        "",
		`{"type":"final","run":"other"}`:                  "foreign run",
		`{"type":"token","run":"r"}`:                      "unknown type",
		`{"type":"final","run":"r"`:                       "malformed",
		`[1,2,3]`:                                         "malformed",
		big:                                               "oversized",
	}
	for in, want := range cases {
		if got := controlVerdict("r", []byte(in)); got != want {
			t.Errorf("%.60q: verdict %q, want %q", in, got, want)
		}
	}
}

// TestControlTopicScoring: a peer that publishes junk on a run's control topic is
// rejected by the validator before relaying, counted in /metrics, and after four junk
// messages graylisted, so that even its well-formed announcement no longer reaches the
// node, while an honest peer's announcement still does.
func TestControlTopicScoring(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sh := shards(t, 2)
	var logBuf syncBuffer
	c := baseConfig("scored", sh[0], 5)
	c.DataDir = t.TempDir()
	c.Logger = zerolog.New(&logBuf)
	v, err := New(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	join := func() (*pubsub.Topic, func()) {
		h, err := libp2p.New(libp2p.ListenAddrStrings(loopback...))
		if err != nil {
			t.Fatal(err)
		}
		ps, err := pubsub.NewGossipSub(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		tp, err := ps.Join(wire.ControlTopic("scored"))
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Connect(ctx, peer.AddrInfo{ID: v.ID(), Addrs: v.Host.Addrs()}); err != nil {
			t.Fatal(err)
		}
		for len(tp.ListPeers()) == 0 {
			select {
			case <-ctx.Done():
				t.Fatal("the node never appeared on the control topic")
			case <-time.After(20 * time.Millisecond):
			}
		}
		return tp, func() { h.Close() }
	}
	atk, closeAtk := join()
	defer closeAtk()
	// Six junk messages; after the fourth (-3200) the peer is graylisted for about 12 s
	// (the count decays by 1% per second, the threshold is -2500), so the validator may
	// never see the last ones.
	junk := []string{`{"type":"token","run":"scored"}`, `{"run":"other","type":"final"}`, `not json`,
		`{"type":"x","run":"scored"}`, `[]`, `{"type":"start","run":"scored2"}`}
	for _, j := range junk {
		if err := atk.Publish(ctx, []byte(j)); err != nil {
			t.Fatal(err)
		}
	}
	count := func() float64 {
		total := 0.0
		for _, r := range []string{"malformed", "foreign run", "unknown type"} {
			total += v.metrics.labelled("dpadmm_control_rejected_total", "reason", r)
		}
		return total
	}
	for count() < 4 {
		select {
		case <-ctx.Done():
			t.Fatalf("rejected %v of %d junk messages, want at least 4", count(), len(junk))
		case <-time.After(20 * time.Millisecond):
		}
	}
	if !strings.Contains(logBuf.String(), "control message rejected before relaying") {
		t.Fatalf("no log line for the rejected messages: %s", logBuf.String())
	}
	// Nothing of the junk reached the application.
	recv := func(d time.Duration) (string, bool) {
		cctx, ccancel := context.WithTimeout(ctx, d)
		defer ccancel()
		m, err := v.sub.Next(cctx)
		if err != nil {
			return "", false
		}
		return string(m.Data), true
	}
	if m, ok := recv(300 * time.Millisecond); ok {
		t.Fatalf("junk delivered to the application: %s", m)
	}
	// The attacker is graylisted: its well-formed announcement is dropped.
	good := `{"type":"announce","run":"scored","config_hash":"h"}`
	if err := atk.Publish(ctx, []byte(good)); err != nil {
		t.Fatal(err)
	}
	if m, ok := recv(time.Second); ok {
		t.Fatalf("the graylisted peer's message was delivered: %s", m)
	}
	// An honest peer is heard.
	honest, closeHonest := join()
	defer closeHonest()
	if err := honest.Publish(ctx, []byte(good)); err != nil {
		t.Fatal(err)
	}
	if m, ok := recv(10 * time.Second); !ok || m != good {
		t.Fatalf("the honest announcement was not delivered (%q, %v)", m, ok)
	}
}
