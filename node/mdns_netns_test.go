//go:build netns

package node

import (
	"os/exec"
	"strings"
	"testing"
)

// TestMDNSNetns runs testdata/mdns_netns.sh: two `dpadmm node` processes in separate
// network namespaces joined by a veth pair discover each other by mDNS and finish a run
// with the same model. Needs root:
//
//	sudo go test -tags netns -run MDNSNetns -v ./node/
func TestMDNSNetns(t *testing.T) {
	cmd := exec.Command("sh", "node/testdata/mdns_netns.sh")
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "mdns netns test: PASS") {
		t.Fatalf("%v\n%s", err, out)
	}
}
