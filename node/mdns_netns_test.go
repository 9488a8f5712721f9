//go:build netns

package node

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestMDNSNetns runs testdata/mdns_netns.sh: two `dpadmm node` processes in separate
// network namespaces joined by a veth pair discover each other by mDNS and finish a run
// with the same model. Needs root:
//
//	sudo go test -tags netns -run MDNSNetns -v ./node/
//
// The second case starts the nodes while the link is down and brings it up 3 s later:
// their mDNS services bound no usable interface and recover only by restarting.
func TestMDNSNetns(t *testing.T) {
	for _, late := range []string{"0", "1"} {
		cmd := exec.Command("sh", "node/testdata/mdns_netns.sh")
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), "LATE_LINK="+late)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "mdns netns test: PASS") {
			t.Fatalf("LATE_LINK=%s: %v\n%s", late, err, out)
		}
	}
}
