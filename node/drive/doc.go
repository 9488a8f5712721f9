// Package drive is the contract between a protocol machine and the driver that does its
// I/O, with no networking in it: the adapters (Walk for walk.Custody, RADMM for
// gossip.Exchange) apply each Ready strictly in the order it prescribes through an Effects
// that does the I/O, and RunLoop is the one runtime loop that owns a machine (settle the
// Readies, sleep until the machine's deadline, an input or the end, advance its clock,
// hand the input over). The node (package node) and the fault network of the testnet both
// drive the machines through this package, so that the fault studies check exactly the
// ordering that runs on the network; it imports no libp2p (TestDriveImportsNoLibp2p).
//
// The seeded streams of testnets (SeedMix, SeededSources, SeededHolder, ...) live here too,
// so that the simulator, the in-process network and a node started with --seed draw the
// same numbers.
package drive
