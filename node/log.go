package node

import (
	"context"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/gologshim"
	"github.com/rs/zerolog"
)

// LogTimeFormat is the layout of the "time" field of every log line: RFC 3339 with
// milliseconds and the local offset, e.g. 2025-03-01T14:02:03.217+01:00. (zerolog's
// default, RFC 3339 in whole seconds, makes the order of a second's lines unreadable.)
const LogTimeFormat = "2006-01-02T15:04:05.000Z07:00"

// msTimestamp adds the time in LogTimeFormat to every event. It replaces zerolog's
// Timestamp, whose layout is the process-wide zerolog.TimeFieldFormat.
type msTimestamp struct{}

func (msTimestamp) Run(e *zerolog.Event, _ zerolog.Level, _ string) {
	e.Str(zerolog.TimestampFieldName, time.Now().Format(LogTimeFormat))
}

// NewLogger returns a zerolog logger writing to w: "json" gives one JSON object per line,
// anything else a human console format. level is a zerolog level name ("" = warn, which
// keeps a node quiet by default). Every line carries the time with milliseconds.
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
		w = zerolog.ConsoleWriter{Out: w, NoColor: true, TimeFormat: "15:04:05.000", FormatTimestamp: consoleTime}
	}
	return zerolog.New(w).Level(lvl).Hook(msTimestamp{}), nil
}

// consoleTime shows the time field of a console line as hours to milliseconds.
func consoleTime(i any) string {
	s, ok := i.(string)
	if !ok {
		return "???"
	}
	t, err := time.Parse(LogTimeFormat, s)
	if err != nil {
		return s
	}
	return t.Format("15:04:05.000")
}

// SlogHandler is a log/slog handler that writes into a zerolog logger, so that go-libp2p
// and pubsub logs (which use slog) end up in the node's log stream with the same format
// and level filter.
type SlogHandler struct {
	l      zerolog.Logger
	attrs  []slog.Attr
	groups []string
	// quiet: the logger is one of quietLoggers, whose warnings go out at debug level.
	quiet bool
}

// quietLoggers are go-libp2p subsystems whose warnings describe ordinary events of a
// small or changing network (an identify exchange cut short by a peer that disconnects
// or restarts, as every testnet node does at its end): they are logged at debug level.
var quietLoggers = map[string]bool{"net/identify": true}

// NewSlogHandler returns a handler writing to l.
func NewSlogHandler(l zerolog.Logger) *SlogHandler { return &SlogHandler{l: l} }

// level is the zerolog level of a record at slog level l from this handler's logger.
func (h *SlogHandler) level(l slog.Level) zerolog.Level {
	z := zlevel(l)
	if h.quiet && z == zerolog.WarnLevel {
		return zerolog.DebugLevel
	}
	return z
}

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
	return h.level(l) >= h.l.GetLevel() && h.level(l) >= zerolog.GlobalLevel()
}

// Handle writes the record.
func (h *SlogHandler) Handle(_ context.Context, r slog.Record) error {
	ev := h.l.WithLevel(h.level(r.Level))
	for _, a := range h.attrs {
		ev = ev.Interface(a.Key, attrValue(a.Value))
	}
	prefix := h.prefix()
	r.Attrs(func(a slog.Attr) bool {
		ev = ev.Interface(prefix+a.Key, attrValue(a.Value))
		return true
	})
	ev.Msg(r.Message)
	return nil
}

// attrValue is the value of a slog attribute for the log line: an error or a Stringer
// (a peer ID, a multiaddr) as its text, which encoding/json would write as {} or as
// raw bytes.
func attrValue(v slog.Value) any {
	x := v.Resolve().Any()
	switch t := x.(type) {
	case error:
		return t.Error()
	case fmt.Stringer:
		return t.String()
	}
	return x
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
		if a.Key == "logger" && quietLoggers[a.Value.String()] {
			c.quiet = true
		}
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
