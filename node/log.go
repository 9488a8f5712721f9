package node

import (
	"context"
	"io"
	stdlog "log"
	"log/slog"
	"os"
	"strings"

	"github.com/libp2p/go-libp2p/gologshim"
	"github.com/rs/zerolog"
)

// NewLogger returns a zerolog logger writing to w: "json" gives one JSON object per line,
// anything else a human console format. level is a zerolog level name ("" = warn, which
// keeps a node quiet by default).
func NewLogger(w io.Writer, format, level string) (zerolog.Logger, error) {
	if w == nil {
		w = os.Stderr
	}
	lvl := zerolog.WarnLevel
	if level != "" {
		l, err := zerolog.ParseLevel(strings.ToLower(level))
		if err != nil {
			return zerolog.Nop(), err
		}
		lvl = l
	}
	if format != "json" {
		w = zerolog.ConsoleWriter{Out: w, NoColor: true, TimeFormat: "15:04:05.000"}
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

// SlogHandler is a log/slog handler that writes into a zerolog logger, so that go-libp2p
// and pubsub logs (which use slog) end up in the node's log stream with the same format
// and level filter.
type SlogHandler struct {
	l      zerolog.Logger
	attrs  []slog.Attr
	groups []string
}

// NewSlogHandler returns a handler writing to l.
func NewSlogHandler(l zerolog.Logger) *SlogHandler { return &SlogHandler{l: l} }

func zlevel(l slog.Level) zerolog.Level {
	switch {
	case l >= slog.LevelError:
		return zerolog.ErrorLevel
	case l >= slog.LevelWarn:
		return zerolog.WarnLevel
	case l >= slog.LevelInfo:
		return zerolog.InfoLevel
	}
	return zerolog.DebugLevel
}

// Enabled reports whether the zerolog logger accepts the level.
func (h *SlogHandler) Enabled(_ context.Context, l slog.Level) bool {
	return zlevel(l) >= h.l.GetLevel() && zlevel(l) >= zerolog.GlobalLevel()
}

// Handle writes the record.
func (h *SlogHandler) Handle(_ context.Context, r slog.Record) error {
	ev := h.l.WithLevel(zlevel(r.Level))
	for _, a := range h.attrs {
		ev = ev.Interface(a.Key, a.Value.Resolve().Any())
	}
	prefix := h.prefix()
	r.Attrs(func(a slog.Attr) bool {
		ev = ev.Interface(prefix+a.Key, a.Value.Resolve().Any())
		return true
	})
	ev.Msg(r.Message)
	return nil
}

func (h *SlogHandler) prefix() string {
	if len(h.groups) == 0 {
		return ""
	}
	return strings.Join(h.groups, ".") + "."
}

// WithAttrs returns a handler with extra attributes (qualified by the current groups).
func (h *SlogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append([]slog.Attr(nil), h.attrs...)
	p := h.prefix()
	for _, a := range as {
		c.attrs = append(c.attrs, slog.Attr{Key: p + a.Key, Value: a.Value})
	}
	return &c
}

// WithGroup returns a handler that prefixes the keys of later attributes with the group.
func (h *SlogHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.groups = append(append([]string(nil), h.groups...), name)
	return &c
}

// RouteLibp2pLogs sends go-libp2p's slog output (gologshim) and go-log's zap output (the
// Kademlia DHT) into l. It is process-wide.
func RouteLibp2pLogs(l zerolog.Logger) {
	gologshim.SetDefaultHandler(NewSlogHandler(l.With().Str("src", "libp2p").Logger()))
	routeGoLog(l)
	// The standard library logger (used by the mDNS responder, zeroconf) writes warnings.
	stdlog.SetFlags(0)
	stdlog.SetOutput(stdlogWriter{l.With().Str("src", "log").Logger()})
}

// stdlogWriter turns lines of the standard library logger into zerolog warnings.
type stdlogWriter struct{ l zerolog.Logger }

func (w stdlogWriter) Write(p []byte) (int, error) {
	w.l.Warn().Msg(strings.TrimSpace(string(p)))
	return len(p), nil
}
