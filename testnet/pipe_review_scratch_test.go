package testnet

// Scratch tests of a review of the direct pipes (pipe.go, memhost.go). Not part of the change.

import (
	"sync"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

func scratchHosts(t *testing.T, n int) (*memHosts, []*mockHost) {
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

// trimDecide panics (slice bounds out of range [:-1]) when more than mockMaxConns pairs
// are open but some of them are being closed by the other end's trim (closing[k] set,
// killPipes not yet run): len(seen) < mockMaxConns.
func TestScratchTrimDecideNegative(t *testing.T) {
	m, hs := scratchHosts(t, mockMaxConns+2)
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

// dpeers must list a peer while the pair has an open pipe: addPipe and dropPipe decide
// first/last under m.mu but apply addPeer after unlocking, so a last pipe's -1 can land
// after the next pipe's +1.
func TestScratchDpeersRace(t *testing.T) {
	m, hs := scratchHosts(t, 2)
	a, b := hs[0], hs[1]
	k := pairKey(a.ID(), b.ID())
	bad := 0
	for i := 0; i < 50000 && bad == 0; i++ {
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

// A pair whose pipes all end by themselves (both sides Close, or a Reset) leaves the pair
// out of dpeers, so trim never picks it and never deletes its m.use / m.streams entries:
// they accumulate with every pair ever used (mocknet kept the connection, which trim
// then closed and forgot).
func TestScratchPairStateLeak(t *testing.T) {
	m, hs := scratchHosts(t, 40)
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

// A closed host can still open direct streams (openDirect checks only the remote end),
// and a handler runs for them; libp2p's NewStream fails on a closed host.
func TestScratchClosedOpener(t *testing.T) {
	_, hs := scratchHosts(t, 2)
	hs[0].Close()
	s, err := hs[0].NewStream(t.Context(), hs[1].ID(), "/dpadmm/x/1")
	if err == nil {
		s.Reset()
		t.Error("a closed host opened a stream")
	}
}
