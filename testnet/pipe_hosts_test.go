package testnet

import (
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

func directHosts(t *testing.T, n int) (*memHosts, []*mockHost) {
	t.Helper()
	m, err := newMemHosts(TransportMock)
	if err != nil {
		t.Fatal(err)
	}
	m.noIdentify, m.direct = true, true
	t.Cleanup(m.Close)
	hs := make([]*mockHost, n)
	for i := range hs {
		key, _, err := crypto.GenerateEd25519Key(nil)
		if err != nil {
			t.Fatal(err)
		}
		h, err := m.newHost(i)(key)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		hs[i] = h.(*mockHost)
		// A handler that reads until the stream fails, then closes (as handleRelease).
		hs[i].SetStreamHandler("/dpadmm/x/1", func(s network.Stream) {
			defer s.Close()
			b := make([]byte, 64)
			for {
				if _, err := s.Read(b); err != nil {
					return
				}
			}
		})
	}
	return m, hs
}

// TestDirectTrimWhileClosing: a host's trim decides nothing wrong when more than
// mockMaxConns of its pairs are open but some are being closed by the other end's trim
// (closing set, pipes not yet reset), which leaves fewer than mockMaxConns to consider.
func TestDirectTrimWhileClosing(t *testing.T) {
	m, hs := directHosts(t, mockMaxConns+2)
	h := hs[0]
	for _, r := range hs[1:] {
		if _, err := h.openDirect(t.Context(), r.ID(), "/dpadmm/x/1"); err != nil {
			t.Fatal(err)
		}
	}
	// Another end's trimDecide has marked two of h's pairs closing (and not yet killed
	// their pipes): the state between its trimDecide and its killPipes.
	m.mu.Lock()
	for _, r := range hs[1:3] {
		m.closing[pairKey(h.ID(), r.ID())] = make(chan struct{})
	}
	m.mu.Unlock()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("trimDecide panicked: %v", r)
		}
	}()
	h.trimDecide()
}

// TestDirectPeersListed: a host lists a peer (dpeers) whenever their pair has an open
// pipe, when the pair's last pipe ends as the other end opens a new one; otherwise the
// pipe would be invisible to trim and to Close, and its handler would never end.
func TestDirectPeersListed(t *testing.T) {
	m, hs := directHosts(t, 2)
	a, b := hs[0], hs[1]
	k := pairKey(a.ID(), b.ID())
	bad := 0
	for i := 0; i < 3000 && bad == 0; i++ {
		s1, err := a.openDirect(t.Context(), b.ID(), "/dpadmm/x/1")
		if err != nil {
			t.Fatal(err)
		}
		var s2 network.Stream
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); s1.Reset() }()
		go func() {
			defer wg.Done()
			s2, err = b.openDirect(t.Context(), a.ID(), "/dpadmm/x/1")
		}()
		wg.Wait()
		if err != nil {
			t.Fatal(err)
		}
		m.mu.Lock()
		open := len(m.pipes[k])
		m.mu.Unlock()
		for _, h := range []*mockHost{a, b} {
			h.cmu.Lock()
			_, listed := h.dpeers[map[bool]peer.ID{true: b.ID(), false: a.ID()}[h == a]]
			h.cmu.Unlock()
			if open > 0 && !listed {
				bad++
				t.Errorf("iteration %d: the pair has %d open pipe(s) but %s's dpeers does not list it: invisible to trim and to Close", i, open, h.ID())
			}
		}
		if bad > 0 {
			// Both hosts close: neither resets the invisible pipe, whose handler (reading,
			// as handleRelease does without a deadline) is left blocked.
			a.Close()
			b.Close()
			if _, err := s2.Write([]byte("x")); err == nil {
				t.Errorf("the pipe is still open after both hosts closed: its handler goroutine leaks")
			}
		}
		s2.Reset()
	}
}

// TestDirectPairsForgotten: a pair whose pipes and streams all ended by themselves is
// forgotten (its activity and stream set), so that what the hosts keep does not grow
// with every pair ever used.
func TestDirectPairsForgotten(t *testing.T) {
	m, hs := directHosts(t, 40)
	for i, h := range hs {
		for j, r := range hs {
			if i == j {
				continue
			}
			s, err := h.NewStream(t.Context(), r.ID(), "/dpadmm/x/1")
			if err != nil {
				t.Fatal(err)
			}
			s.Write([]byte("x"))
			s.Reset()
		}
	}
	m.trims.Wait()
	m.mu.Lock()
	use, streams, pipes := len(m.use), len(m.streams), len(m.pipes)
	m.mu.Unlock()
	if use > 100 || streams > 100 {
		t.Errorf("after every stream ended: %d pairUse and %d m.streams entries kept (%d pairs with pipes); they grow with the pairs ever used", use, streams, pipes)
	}
}

// TestDirectClosedOpener: a closed host opens no direct stream (as a libp2p host's
// NewStream fails once it is closed).
func TestDirectClosedOpener(t *testing.T) {
	_, hs := directHosts(t, 2)
	hs[0].Close()
	s, err := hs[0].NewStream(t.Context(), hs[1].ID(), "/dpadmm/x/1")
	if err == nil {
		s.Reset()
		t.Error("a closed host opened a stream")
	}
}

// TestDirectTrimKeepsUnrecorded: a direct pair with a pipe whose activity is not recorded
// (forgotten as the pair reopened, before its first write) is not closed by trim, while
// pairs idle for longer than the hosts' idle time are.
func TestDirectTrimKeepsUnrecorded(t *testing.T) {
	m, hs := directHosts(t, mockMaxConns+6)
	h := hs[0]
	for _, r := range hs[1:] {
		if _, err := h.openDirect(t.Context(), r.ID(), "/dpadmm/x/1"); err != nil {
			t.Fatal(err)
		}
	}
	fresh := hs[1].ID()
	m.mu.Lock()
	for _, r := range hs[1:] {
		k := pairKey(h.ID(), r.ID())
		if r.ID() == fresh {
			delete(m.use, k)
			continue
		}
		m.use[k] = &pairUse{last: time.Now().Add(-time.Hour), pending: map[*mockStream]time.Time{}}
	}
	m.mu.Unlock()
	closed := h.trimDecide()
	if len(closed) == 0 {
		t.Fatal("trim closed no idle pair")
	}
	for _, p := range closed {
		if p == fresh {
			t.Fatal("trim closed a pair whose activity is not recorded yet")
		}
	}
}
