package node

import (
	golog "github.com/ipfs/go-log/v2"
	"github.com/rs/zerolog"
	"go.uber.org/zap/zapcore"
)

// ZapCore is a zapcore.Core that writes into a zerolog logger. go-log (the logging
// library of the Kademlia DHT and other IPFS-era libp2p packages) logs through zap;
// RouteLibp2pLogs installs this core as go-log's primary core so that those lines end up
// in the node's log stream with the same format and level filter as its own.
type ZapCore struct {
	l      zerolog.Logger
	fields []zapcore.Field
}

// NewZapCore returns a core writing to l.
func NewZapCore(l zerolog.Logger) *ZapCore { return &ZapCore{l: l} }

// zapToZerolog maps zap levels; DPanic, Panic and Fatal become Error so that a library's
// log line can never stop the node.
func zapToZerolog(l zapcore.Level) zerolog.Level {
	switch {
	case l >= zapcore.ErrorLevel:
		return zerolog.ErrorLevel
	case l >= zapcore.WarnLevel:
		return zerolog.WarnLevel
	case l >= zapcore.InfoLevel:
		return zerolog.InfoLevel
	}
	return zerolog.DebugLevel
}

// Enabled reports whether the zerolog logger accepts the level.
func (c *ZapCore) Enabled(l zapcore.Level) bool {
	z := zapToZerolog(l)
	return z >= c.l.GetLevel() && z >= zerolog.GlobalLevel()
}

// With returns a core that adds fields to every entry.
func (c *ZapCore) With(fs []zapcore.Field) zapcore.Core {
	return &ZapCore{l: c.l, fields: append(append([]zapcore.Field(nil), c.fields...), fs...)}
}

// Check adds this core to the entry when its level is enabled.
func (c *ZapCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

// Write writes one entry: its logger name as "logger", then its fields.
func (c *ZapCore) Write(e zapcore.Entry, fs []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fs {
		f.AddTo(enc)
	}
	ev := c.l.WithLevel(zapToZerolog(e.Level))
	if e.LoggerName != "" {
		ev = ev.Str("logger", e.LoggerName)
	}
	for k, v := range enc.Fields {
		ev = ev.Interface(k, v)
	}
	ev.Msg(e.Message)
	return nil
}

// Sync does nothing: zerolog writes synchronously.
func (c *ZapCore) Sync() error { return nil }

// routeGoLog sends go-log's output into l at l's level (process-wide).
func routeGoLog(l zerolog.Logger) {
	golog.SetPrimaryCore(NewZapCore(l.With().Str("src", "golog").Logger()))
	lvl := "error"
	switch {
	case l.GetLevel() <= zerolog.DebugLevel:
		lvl = "debug"
	case l.GetLevel() <= zerolog.InfoLevel:
		lvl = "info"
	case l.GetLevel() <= zerolog.WarnLevel:
		lvl = "warn"
	}
	// "*" sets the existing loggers and the default of those created later.
	golog.SetLogLevel("*", lvl)
}
