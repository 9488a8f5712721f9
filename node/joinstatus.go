package node

import (
	"sync"
	"time"
)

// JoinStatus is what a node knows while it waits for its run to start (Status.Join):
// how many peers it has, and why it may be waiting longer than expected. It is nil once
// the membership is fixed.
type JoinStatus struct {
	// Role is "starter" (Config.Start), "joiner" or "static" (a fixed membership).
	Role string `json:"role"`
	// Refused lists, for the starter, the peers that refused its announcement because
	// their configuration differs, each with the keys that differ.
	Refused []string `json:"refused,omitempty"`
	// WaitingFor lists the --peer addresses not reachable yet, dialled again with a
	// back-off until they answer.
	WaitingFor []string `json:"waiting_for,omitempty"`
	// Joined is, for the starter, the nodes that joined so far (itself included) and, for
	// a static membership, the members connected (itself included); Want is the number
	// waited for (MinPeers, or the members).
	Joined int `json:"joined"`
	Want   int `json:"want"`
	// Announced: a joiner saw a matching announcement of the run and asked to join.
	Announced bool `json:"announced,omitempty"`
	// Missed: a joiner saw the run start without it (it arrived after the join window).
	Missed bool `json:"missed,omitempty"`
	// WindowLeft is, for the starter once Want nodes joined, how long the join window
	// stays open for late joiners (seconds).
	WindowLeft float64 `json:"join_window_left_seconds,omitempty"`
	// Connected is the number of peers connected now.
	Connected int `json:"connected"`
	// MDNS says why mDNS discovery is not running ("" when it runs or is not used).
	MDNS string `json:"mdns,omitempty"`
}

// joinState is the node's JoinStatus while the membership is being fixed.
type joinState struct {
	mu        sync.Mutex
	st        *JoinStatus // nil outside membership
	mdns      string
	windowEnd time.Time // starter: when the join window closes (zero before Want joined)
}

// begin starts the join phase in the given role.
func (j *joinState) begin(role string, want int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.st = &JoinStatus{Role: role, Want: want, Joined: 1}
	j.windowEnd = time.Time{}
}

// windowCloses records when the starter's join window closes.
func (j *joinState) windowCloses(t time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.windowEnd = t
}

// end closes the join phase.
func (j *joinState) end() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.st = nil
}

// update changes the join status, if the phase is open.
func (j *joinState) update(f func(*JoinStatus)) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.st != nil {
		f(j.st)
	}
}

// setMDNS records why mDNS is not running ("" once it runs).
func (j *joinState) setMDNS(why string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.mdns = why
}

// snapshot returns a copy of the status (nil outside the join phase).
func (j *joinState) snapshot(connected int) *JoinStatus {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.st == nil {
		return nil
	}
	c := *j.st
	c.Connected, c.MDNS = connected, j.mdns
	if !j.windowEnd.IsZero() {
		c.WindowLeft = max(time.Until(j.windowEnd).Seconds(), 0)
	}
	return &c
}
