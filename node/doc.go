// Package node is the runtime that owns one machine and binds it to go-libp2p: identity,
// direct-stream protocols for private payloads, the GossipSub control plane, discovery,
// the durable store, the HTTP status and metrics endpoint, and logging.
//
// # Runtime loop
//
// One goroutine (Node.loop) owns the walk.Machine. Stream handlers decode and validate
// inbound frames and pass them to the loop over a channel; the loop alone touches the
// machine, the checkpoint and the ledger file. For every accepted token it applies the
// Ready contract in this order:
//
//  1. Step the machine;
//  2. append the ledger entries to <datadir>/ledger and fsync (Ready.Ledger is durable
//     before anything is sent);
//  3. write <datadir>/checkpoint.json atomically (temp file, fsync, rename, fsync of the
//     directory): u_i, K_i, the (epoch, hop) processed, and the encoded outgoing token
//     with its recipient ("custody");
//  4. send the token (in the background, so the loop keeps answering);
//  5. Advance once the receiver acked.
//
// # Hand-off protocol /dpadmm/<run>/walk/1
//
// One long-lived stream per peer carries frames: a 4-byte little-endian length, refused
// before any allocation when larger than the encoded size of a token of the run's
// dimension, then the token (see EncodeToken). The receiver answers one byte per frame:
// AckOK after it has written the token to <datadir>/inbox.token atomically, AckDuplicate
// for a retransmission of the (epoch, hop) it already stored, AckStale for an older token
// (the sender drops its copy: fencing), AckReject for anything malformed, foreign or from
// a peer outside the membership, and AckBusy when it cannot take the token yet.
//
// Validation runs cheapest first: frame size, decode (version, exact length), sender in
// the membership, run and walk, dimension, finiteness, hop within the run, then
// freshness against the last stored (epoch, hop). Rejections are logged at warn level
// with the reason and counted in dpadmm_tokens_rejected_total{reason}.
//
// Custody: the sender keeps the encoded token (in its checkpoint) until an ack. On an
// error or after AckTimeout it retries the same peer once on a fresh stream, then the
// other members in random order. Each redirection appends a "forward" ledger entry
// naming the new recipient, so the ledger records every peer that saw the release. If
// every peer fails the node keeps custody and starts over. After a restart a node with a
// token in custody resends the identical bytes (never re-noises); a node with a stored
// but unprocessed inbound token processes it. A retransmission after a lost ack can
// create a second copy if it went to another peer; receivers fence copies whose
// (epoch, hop) is not newer than what they stored, but two copies on disjoint paths are
// not merged (see Missing below).
//
// # Control plane dpadmm/<run>/control
//
// GossipSub carries JSON messages: "announce" (the RunConfig and its SHA-256 config hash:
// run, algorithm, dimension, loss, regularizer, gamma, lambda, clip, sigma, update cap,
// hops, noise), "join" (config hash, row count and addresses of the joiner), "start" (the
// ordered membership with addresses, total rows, initial holder) and "final" (the
// released model z at hop K). A node whose config hash differs refuses the announcement
// or the join with a warn line naming both hashes. The walk token never travels on
// pubsub. Node i's local loss is weighted n*rows_i/N as in the simulator, so members
// disclose their row counts to each other. The final holder republishes the model until
// every member confirmed it on /dpadmm/<run>/done/1 or FinalWait passed; the publication
// reveals which node held the token last.
//
// # Data directory
//
// identity.key (the libp2p key; the peer ID survives restarts), ledger (privacy.Entry
// lines with a CRC, Seq renumbered monotonically across restarts), checkpoint.json,
// inbox.token and model.json (released model with the node's privacy report: the local
// bound of Theorem 3 and the planned network bound of Theorem 4, each with its
// conditions and whether they hold). A checkpoint whose ledger is missing, corrupt or
// truncated makes New fail with ErrLedger.
//
// # Missing
//
// Recovery of a token lost with a crashed holder (regeneration with Epoch+1) and the
// deterministic merge of duplicate tokens are not implemented; the next-hop source is not
// checkpointed, so a restarted node's later choices differ from an uninterrupted run.
package node
