package main

import "testing"

// TestHostsWhere: the summary's network line says where the hosts ran and how they
// talked, for each mode and transport.
func TestHostsWhere(t *testing.T) {
	for _, c := range []struct{ mode, transport, want string }{
		{"procs", "", "on loopback TCP, one process each"},
		{"mem", "tcp", "in this process, on loopback TCP"},
		{"mem", "", "in this process, on loopback TCP"},
		{"mem", "mock", "in this process, in memory (mock transport)"},
	} {
		if got := hostsWhere(c.mode, c.transport); got != c.want {
			t.Errorf("%s/%s: %q, want %q", c.mode, c.transport, got, c.want)
		}
	}
}
