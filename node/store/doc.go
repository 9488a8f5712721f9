// Package store is a node's data directory: the durable files a node writes before it
// sends anything, and reads back when it restarts.
//
//   - identity.key: the libp2p private key (Store.Identity, DataDirPeerID);
//   - ledger: the privacy ledger, one CRC-checked, hash-chained JSON line per entry,
//     written through privacy.LedgerChain by the node (Store.AppendLedger) and by the simulator's
//     per-node ledger files alike;
//   - checkpoint.log and inbox.log: journals of checked records (RecordMagic,
//     RecordHeader) holding a walk node's private state (Checkpoint, in a compact binary
//     encoding that refers to the previous record) and the last token it acked;
//   - gossip-journal and gossip-stale: an R-ADMM node's release journal (RADMMRecord, one
//     JSON line per release with its inputs and noise draws) and its stale-use record
//     (RADMMLog);
//   - model.json: the released model and privacy report (written by the node).
//
// A Store refuses to open a directory whose ledger is missing, corrupt, shortened or
// rewritten while a checkpoint exists (ErrLedger): a node never under-counts what it has
// spent. The package does no networking and knows no protocol: the node decides what to
// write and when; the store makes it durable and reads it back.
package store
