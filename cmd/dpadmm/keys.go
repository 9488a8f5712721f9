package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/dpadmm/dpadmm/node"
	"github.com/dpadmm/dpadmm/node/store"
)

const keysHelp = `Usage:
  dpadmm keys swarm-key [--out FILE]
  dpadmm keys allow --datadir OWNER_DIR --run NAME [--out FILE] PEER_ID[:MAX_ROWS] ...
  dpadmm keys id --datadir DIR

Keys that close a run to outsiders (see 'dpadmm node --help': --swarm-key, --allow,
--starter, --max-rows).

swarm-key  writes a new pre-shared key in Kubo's swarm.key format (the libp2p private
           network of a run: peers without the key cannot connect at all). Hand it to the
           members over a secure channel; it is a secret.
allow      writes an allow-list of the run, signed with the identity key in OWNER_DIR (the
           data directory of the node that starts the run, which is always admitted): the
           starter admits only these peers, each with at most MAX_ROWS rows when given
           (a member's weight is n*rows_i/N, so an unbounded claim can drown the others),
           and joiners accept the run only from the owner and only with listed members.
           The list is public; the signature makes it tamper-evident.
id         prints the peer ID of the identity in DIR (creating it if missing), to put on
           an allow-list or in --starter.
`

func runKeys(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("keys", "which subcommand? swarm-key, allow or id")
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, keysHelp)
		return nil
	}
	switch args[0] {
	case "swarm-key":
		fs := newFlagSet("keys swarm-key", keysHelp, stdout)
		out := fs.String("out", "", "write the key to this file (mode 0600) instead of stdout")
		if err := parseFlags(fs, args[1:]); err != nil {
			return err
		}
		var k [32]byte
		if _, err := rand.Read(k[:]); err != nil {
			return err
		}
		s := "/key/swarm/psk/1.0.0/\n/base16/\n" + hex.EncodeToString(k[:]) + "\n"
		if *out == "" {
			_, err := io.WriteString(stdout, s)
			return err
		}
		// Never replace a key: the nodes holding the old one could no longer connect.
		f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("swarm-key: %s exists: a new key would lock out every node holding that one; remove it first, or choose another --out", *out)
		}
		if err != nil {
			return err
		}
		if _, err := f.WriteString(s); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	case "allow":
		return runKeysAllow(args[1:], stdout)
	case "id":
		fs := newFlagSet("keys id", keysHelp, stdout)
		datadir := fs.String("datadir", "", "data directory")
		if err := parseFlags(fs, args[1:]); err != nil {
			return err
		}
		if *datadir == "" {
			return usagef("keys", "id needs --datadir")
		}
		id, err := store.DataDirPeerID(*datadir)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, id)
		return nil
	}
	return unknownCommand("keys", "keys command", args[0], []string{"swarm-key", "allow", "id"})
}

// runKeysAllow is 'dpadmm keys allow': a list of peers signed by the run owner's identity.
func runKeysAllow(args []string, stdout io.Writer) error {
	fs := newFlagSet("keys allow", keysHelp, stdout)
	datadir := fs.String("datadir", "", "data directory of the run's owner (the starter): its identity key signs the list")
	run := fs.String("run", "", "the run the list is for")
	out := fs.String("out", "", "write the list to this file instead of stdout")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *datadir == "" || *run == "" {
		return usagef("keys", "allow needs --datadir and --run")
	}
	if err := checkRunName("keys", *run); err != nil {
		return err
	}
	var entries []node.AllowEntry
	for _, a := range fs.Args() {
		id, rows, _ := strings.Cut(a, ":")
		if _, err := peer.Decode(id); err != nil {
			return usagef("keys", "allow: %q is not a peer ID: %v", id, err)
		}
		e := node.AllowEntry{ID: id}
		if rows != "" {
			r, err := strconv.Atoi(rows)
			if err != nil || r < 1 {
				return usagef("keys", "allow: max rows of %s must be an integer >= 1, got %q", id, rows)
			}
			e.MaxRows = r
		}
		entries = append(entries, e)
	}
	// The owner's identity must exist: signing with one made here (a mistyped
	// directory) would give a list the real starter refuses.
	if _, err := os.Stat(filepath.Join(*datadir, store.IdentityFile)); err != nil {
		return fmt.Errorf("allow: %s holds no identity (%s): give the starter's data directory (its node has run, or 'dpadmm keys id --datadir %s' created it)",
			*datadir, store.IdentityFile, *datadir)
	}
	st, err := store.Open(*datadir)
	if err != nil {
		return err
	}
	defer st.Close()
	key, err := st.Identity()
	if err != nil {
		return err
	}
	a, err := node.SignAllowList(key, *run, entries)
	if err != nil {
		return err
	}
	b, _ := json.MarshalIndent(a, "", "  ")
	b = append(b, '\n')
	if *out == "" {
		_, err := stdout.Write(b)
		return err
	}
	return os.WriteFile(*out, b, 0o644)
}
