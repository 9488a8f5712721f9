// Package node is the runtime that owns one machine and binds it to go-libp2p: identity,
// direct-stream protocols for private payloads, the GossipSub control plane, discovery,
// the durable store, the HTTP status and metrics endpoint, and logging.
//
// # Runtime loop
//
// One goroutine (Node.loop) owns a walk.Custody, the walk machine wrapped with every
// rule of the token's custody (docs/fault-tolerance.md). Stream handlers decode and
// validate inbound frames (size, membership, run, shape, signature and lineage evidence)
// and pass them to the loop over a channel; the loop alone touches the machine, the
// checkpoint and the ledger file. It has no custody rule of its own: it gives the machine
// its inputs (hand-offs, the outcome of its own hand-offs, releases, PeerDown/PeerUp from
// the heartbeats, ticks of its clock, final models) and applies each Ready in order
// through the Walk adapter (node/drive; the node's effects are custody.go's walkFx), the
// code the fault studies of testnet apply their Readies with:
//
//  1. append the ledger entries to <datadir>/ledger (Ready.Ledger is durable before
//     anything is sent: with the checkpoint record of step 3, which carries their lines,
//     in one fsync; alone, when the Ready writes no checkpoint);
//  2. a token taken (Ready.Held): append it to <datadir>/inbox.log and fsync, before its
//     ack; unless the machine steps it at once and the node's hand-offs take under a
//     quarter of the ack timeout, when drive.Walk applies the token's Ready with its
//     step's and the ack waits for the step's checkpoint (3), which covers the token;
//     a token that the Ready's own step handed to the node itself goes in the
//     checkpoint record of that step instead (store.Checkpoint.Held, walkFx.Persist);
//  3. the walk state and, when Ready.Persist, the custody snapshot: append the checkpoint
//     to <datadir>/checkpoint.log and fsync (one checked binary record; a token still in
//     custody from the previous record is referred to, not written again): u_i, K_i, the
//     (epoch, hop) processed, the last release ("custody"), the fence, the highest epoch,
//     the recent tokens and the backups;
//  4. the messages: the ack byte of the hand-off being served, token frames (in the
//     background, signed for their recipient, one at a time per peer; the signature is
//     computed while step 3 writes, presign.go) and releases;
//  5. the events (metrics and log lines) and, at hop K, the final model;
//  6. Advance, after which the machine steps a token it took.
//
// Time reaches the machine in ticks of AckTimeout/100 (1 to 100 ms, fallback.go): the
// loop sleeps until the machine's next deadline or an input and then catches up
// (walk.Custody.CatchUp), so an idle node does not wake up between its deadlines, and a
// node whose process was stopped acts once on each overdue timer.
//
// The loop itself (node/drive, RunLoop) is the one both algorithms run: settle the
// machine's Readies, sleep until its next deadline, an input or the end of the context,
// advance its clock, hand the input over. What differs is small: the walk's inputs and
// their mapping onto custody inputs (walkLoop) on a wall clock (every custody timeout is
// real time), the R-ADMM's (exchangeLoop) on a clock of the time spent waiting (a node's
// own computing is not time its neighbours kept it waiting).
//
// # Hand-off protocol /dpadmm/<run>/walk/1
//
// One long-lived stream per peer carries frames: a 4-byte little-endian length, refused
// before any allocation when larger than the encoded size of a token of the run's
// dimension, then the token (see wire.EncodeToken). The receiver answers one byte per frame,
// its custody machine's answer: wire.AckOK after it has appended the token to
// <datadir>/inbox.log and fsynced it, or the checkpoint record of its step, wire.AckDuplicate for a retransmission of one of the last
// 16 tokens it accepted, wire.AckStale for a token not above its fence or one whose evidence
// it already took another token on (the sender drops its copy: fencing, see below),
// wire.AckReject for anything malformed, foreign, from a peer outside the membership or
// evicted, or of an implausible epoch, and wire.AckBusy when it cannot take the token yet, or
// any more (membership not fixed, paused, walk over). A node whose run is stopped (SIGINT,
// SIGTERM) tells its custody machine (walk.Custody.Stop), which takes no new token,
// answered wire.AckBusy; the node resets its own hand-off streams and
// keeps its host up while members still have a hand-off stream open to it, at most
// min(AckTimeout, 2 s) (Node.quiesce), still answering a re-send of a token it already
// took with wire.AckDuplicate (custody passed with its first ack: the token is stepped in its
// checkpoint, or in its inbox and stepped at its restart). Members stopped with it then keep the token in custody
// instead of redirecting it to a peer that is itself stopping; members that go on
// running redirect after AckTimeout.
//
// Validation runs cheapest first: frame size, decode (version, exact length), sender in
// the membership, run and walk, dimension, finiteness, hop within the run, then
// duplicates and the fence (epoch, hop, digest). Rejections are logged at warn level
// with the reason and counted in dpadmm_tokens_rejected_total{reason}.
//
// Custody: the sender keeps the encoded token (in its checkpoint) until an ack. A busy
// answer is asked again after 1, 2, 4, ... ticks (at most AckTimeout/4) until the ack
// timeout; on a refusal, an error or after AckTimeout it retries the same peer once on a
// fresh stream, then a member chosen uniformly among those not declared down (none live:
// it waits for one). Each redirection appends a "forward" ledger entry naming the new
// recipient, so the ledger records every peer that saw the release. After a restart a
// node with a token in custody resends the identical bytes at its first tick (never
// re-noises); a node with a stored but unprocessed inbound token processes it.
//
// # Token fault tolerance (docs/fault-tolerance.md)
//
// The rules are walk.Custody's; the node supplies wall-clock liveness and the wire:
//
//   - Heartbeats: every Config.Heartbeat (default 1 s) each node writes a 9-byte frame
//     (version, sequence number) to every member on /dpadmm/<run>/alive/1, whether or not
//     it holds the token; beats carry no token information. A member silent for
//     HeartbeatMisses intervals (default 15) is declared down, and up again when its beats
//     resume.
//   - Backups: each release is kept in the checkpoint (Checkpoint.Backups, written before
//     the send) with its recipient and predecessor, until the token is Depth (default 8)
//     acked hand-offs further on. When a hand-off is acked the sender sends a wire.Release
//     {Dist: 2} to its own predecessor on /dpadmm/<run>/release/1 (a 22-byte frame:
//     version, flags, epoch, hop, distance; acked with one byte); each node passes the
//     wave back with Dist+1 and drops a backup whose distance reaches Depth. Releases to
//     one peer are gathered for 2 ms (the highest distance per backup is kept) and go
//     out together on one long-lived stream; a receiver acks each frame. Acks of a
//     node's own hand-off to the recipient it named, distances and drops reach the disk
//     with the next checkpoint (nothing is sent on the strength of them; a crash before
//     it leaves a backup kept longer, and a restart that finds a newer stored token
//     marks the custody copy acked); redirections, re-sends and retirements are
//     checkpointed at once (walk.CustodyReady.Persist). A hop thus costs one fsync on
//     each side: the receiver's inbox record, and the sender's checkpoint record, which
//     carries the release's ledger lines (store.SaveCheckpointLedger: group commit).
//   - Regeneration: when the recipient of an acked, unreleased backup is declared down,
//     the node re-releases its newest such backup under epoch max(seen, backup)+1 to a
//     uniformly chosen live member, after appending (fsync) a forward entry naming it;
//     backups of lower epochs are dropped. The token keeps its hop number: the hops made
//     after that backup are lost and redone, so the run still ends at hop K with the
//     hops' noisy updates charged in full (the lost ones stay charged, their effect on
//     the model is lost).
//   - Fencing and merge: a node keeps the highest token it accepted or released,
//     ordered by (epoch, hop, walk.TokenDigest), and the highest epoch it accepted or
//     created (Checkpoint.Fence, MaxEpoch). A retransmission of one of the last 16 tokens
//     it accepted is answered wire.AckDuplicate; any other token not above both is refused with
//     wire.AckStale. The sender of a refused token drops its backup and sends wire.Release{Retire}
//     back along its chain. Two copies of one epoch thus merge where they meet: the
//     higher hop goes on, then the higher digest; a higher epoch beats any hop.
//   - Epoch bounds: a token or final model whose epoch exceeds MaxEpoch or lies more than
//     walk.EpochWindow(n) above the highest epoch seen here is refused (wire.AckReject,
//     rejected{epoch}); the third such refusal evicts its sender for the run.
//   - Slow fallback (Config.FallbackTimeout): an idle node that heard no token, ack or
//     release for the timeout re-sends its last release under a new epoch, backing off
//     and giving up after MaxFallbacks.
//
// Liveness and releases go to single members that already know the sender (the
// predecessor) or to everyone on a fixed schedule (heartbeats); nothing announces where
// the token is. Config.PauseAtHop applies to epoch 0 only, so that a regenerated token
// is not paused again.
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
// # Neighbour exchange (R-ADMM family)
//
// With Config.RADMM set, Node.RunRADMM (radmm_run.go) uses the same announce/join/start
// control plane: the announced configuration (and so the config hash) adds the
// algorithm, graph spec and seed, T, alpha, the penalty schedule, gamma and C. Once the
// membership is fixed every node builds the same graph from (spec, members, seed), finds
// its neighbours, weights its objective as testnet/sim.NewGossipSim does (C_i/B_i = C n/M,
// rho/N = C l2, M the total rows of the start message) and drives its R-ADMM exchange
// (radmm.go: a gossip.Exchange in the RADMM adapter, run by the runtime loop, on the node's
// own host, store and data directory; vectors
// over direct streams of /dpadmm/<run>/radmm/1, never GossipSub; journal and ledger
// fsynced before each send, a barrier per iteration with the stop|wait|stale policy of
// docs/radmm-network.md). Noise
// is privacy.NewSecureNoise unless a testnet seed is given. A node refuses data with a row
// of norm > 1 (Theorem V.1 needs normalised rows). model.json holds the node's own f_i(T)
// and its own Theorem V.1 figure; the network average and the network figure (the max over
// members) need the members' files. A node restarted on its data directory resumes the
// run from its journal, gossip-journal (radmm_journal.go), and refuses to when the journal
// does not reproduce its releases bit for bit.
//
// # Data directory (package node/store)
//
// identity.key (the libp2p key; the peer ID survives restarts), ledger (privacy.Entry
// lines with a CRC, Seq renumbered monotonically across restarts), checkpoint.log and
// inbox.log (journals of checked records, the last complete record being current; a
// torn last record, left by a crash during its write, is skipped; rewritten with their
// last record when they reach 1 MiB; see CheckpointLog; Store.LoadInbox and
// Store.LoadCheckpoint read them; checkpoint.json and inbox.token are the first format,
// still read, and removed by the first save of their journal) and model.json (released
// model with the node's privacy report: the local
// bound of Theorem 3 and the planned network bound of Theorem 4, each with its
// conditions and whether they hold). A checkpoint whose ledger is missing, corrupt or
// truncated makes New fail with ErrLedger.
//
// # Missing
//
// A token lost with every backup holder within Depth hand-offs is recovered only by the
// slow fallback (Config.FallbackTimeout), which rolls the walk back. The sender of a
// token stored in the inbox is taken from the evidence it holds (the signed hand-off it
// came with), so a token processed after a restart starts its release wave; the origin's
// tokens have none. Two finals resolve to the highest (epoch, hop, digest of
// z) on nodes that see both within their end window. The final holder waits FinalWait
// for the confirmation of a crashed member. The next-hop source is not checkpointed
// without Config.Sources, so a restarted node's later choices differ from an
// uninterrupted run.
//
// Why it has more than 60 exported names: it is the runtime's whole public surface for
// the command line and the launchers: the configuration (grouped by concern), the model
// and status documents (model.json, /status, their JSON types), the R-ADMM runtime, the
// defaults and profiles, and the errors a caller tells apart with errors.Is.
package node
