// Package wire holds the byte formats that travel between nodes and their first checks:
// the walk token, length-prefixed frames, the token validator, the custody release and
// heartbeat messages, the R-ADMM exchange frame, and the names a peer sees: the run's
// protocol IDs, its control topic and the hand-off ack codes (protocol.go). Everything here is a pure function
// of its input bytes (no I/O beyond an io.Reader/io.Writer passed in, no state), and every
// decoder has a fuzz target.
package wire
