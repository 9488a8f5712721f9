package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKeysNeverReplace: 'keys swarm-key --out' never replaces an existing key (the nodes
// holding it would be locked out), and 'keys allow' signs only with an identity that
// exists (a mistyped directory must not get a new one that the starter then refuses).
func TestKeysNeverReplace(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "swarm.key")
	if code, _, e := runCmd("keys", "swarm-key", "--out", key); code != 0 {
		t.Fatalf("swarm-key: exit %d: %s", code, e)
	}
	first, _ := os.ReadFile(key)
	if code, _, e := runCmd("keys", "swarm-key", "--out", key); code != 1 || !strings.Contains(e, "exists") {
		t.Fatalf("second swarm-key: exit %d: %s", code, e)
	}
	if again, _ := os.ReadFile(key); string(again) != string(first) {
		t.Fatal("the key was replaced")
	}
	owner := filepath.Join(dir, "owner")
	peerID := "12D3KooWH87AmqEGCUFavYMpcUonwL3Z5SHUEuaSbdS75Ffqc5Ct"
	if code, _, e := runCmd("keys", "allow", "--datadir", owner, "--run", "closed", peerID); code != 1 || !strings.Contains(e, "holds no identity") {
		t.Fatalf("allow without an identity: exit %d: %s", code, e)
	}
	if _, err := os.Stat(owner); !os.IsNotExist(err) {
		t.Fatalf("allow created %s: %v", owner, err)
	}
	code, id, e := runCmd("keys", "id", "--datadir", owner)
	if code != 0 {
		t.Fatalf("id: exit %d: %s", code, e)
	}
	if code, out, e := runCmd("keys", "allow", "--datadir", owner, "--run", "closed", peerID); code != 0 || !strings.Contains(out, strings.TrimSpace(id)) {
		t.Fatalf("allow: exit %d: %s %s", code, out, e)
	}
}
