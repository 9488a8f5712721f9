package sim

import "github.com/dpadmm/dpadmm/gossip"

// NetworkReport is the part of a report specific to a run on real libp2p hosts. In such
// a report wall_seconds and us_per_hop cover the whole network run, start-up of the
// hosts and distribution of the final model included.
type NetworkReport struct {
	Mode          string `json:"mode"` // "mem" (hosts in one process) or "procs" (one process per node)
	Hosts         int    `json:"hosts"`
	LedgerEntries int    `json:"ledger_entries"` // all nodes; = hops + redirects + repeats
	Redirects     int    `json:"redirects"`
	Repeats       int    `json:"repeated_entries"`
	// Views are the peers that received a release and did not go on with the token (a
	// hand-off redirected after a withheld or lost ack), one per release and peer: each is
	// in the realised path as a view of that release (LedgerPath).
	Views         int     `json:"views"`
	HopsPerSecond float64 `json:"hops_per_second"`
	Kills         []Kill  `json:"kills,omitempty"`
	Dir           string  `json:"dir,omitempty"` // kept data directories and logs
	// Transport ("mem": tcp or mock), PeakRSSBytes (the process's peak resident set,
	// VmHWM, everything in it included), HeapBytes (live Go heap when the walk ended)
	// and their shares per host (divided by Hosts): "mem" only.
	Transport        string  `json:"transport,omitempty"`
	PeakRSSBytes     uint64  `json:"peak_rss_bytes,omitempty"`
	HeapBytes        uint64  `json:"heap_bytes,omitempty"`
	PeakRSSPerHost   float64 `json:"peak_rss_per_host_bytes,omitempty"`
	HeapPerHostBytes float64 `json:"heap_per_host_bytes,omitempty"`
}

// GossipNetworkReport is the network section of the report of a gossip run over real hosts.
type GossipNetworkReport struct {
	Mode           string  `json:"mode"` // "mem" (hosts in one process) or "procs" (one process per node)
	Hosts          int     `json:"hosts"`
	OnMissing      string  `json:"on_missing"`
	BarrierSeconds float64 `json:"barrier_timeout_seconds"`
	MaxWaitSeconds float64 `json:"max_wait_seconds"`
	// StaleUses counts the substitutions of a missing neighbour vector by its last
	// received one (policy stale); Stale lists them. Each is charged nothing extra (see
	// docs/radmm-network.md) but makes the model differ from the fault-free algorithm's.
	StaleUses     int           `json:"stale_uses"`
	Stale         []GossipStale `json:"stale"`
	LedgerEntries int           `json:"ledger_entries"` // all nodes: T+1 releases each
	Rejected      int           `json:"rejected_frames"`
	Ignored       int           `json:"ignored_frames"`
	WallSeconds   float64       `json:"wall_seconds"` // network run only (no setup, no reference solve)
	// Restarts counts the node processes killed (SIGKILL) and restarted on their data
	// directory (--procs fault injection); each resumed from its journal.
	Restarts int    `json:"restarts,omitempty"`
	Dir      string `json:"dir,omitempty"`
	Note     string `json:"note"`
}

// Kill records a token holder killed with SIGKILL and restarted by RunProcs.
type Kill struct {
	Hop   uint64 `json:"hop"`   // the holder had received the token of this hop (Hop hops done)
	Phase string `json:"phase"` // "received" or "custody" (see ProcsConfig.KillPhase)
	Node  int    `json:"node"`  // node index
	Peer  string `json:"peer"`
	// DownSeconds is the time from the SIGKILL to the start of the restarted process.
	DownSeconds float64 `json:"down_seconds"`
}

// GossipStale is one stale use of node Node.
type GossipStale struct {
	Node int `json:"node"`
	gossip.StaleUse
}
