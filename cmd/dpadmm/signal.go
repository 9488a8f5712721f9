package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
)

// signalCause is the cancellation cause of the context of a command stopped by a signal.
type signalCause struct{ sig syscall.Signal }

func (c signalCause) Error() string { return signalName(c.sig) + " received" }

// signalName is the conventional name of the signals the commands handle.
func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.String()
}

// signalContext returns a context canceled, with a signalCause, by the first SIGINT or
// SIGTERM. After that signal the handler is removed, so a second one ends the process
// at once (the default action). stop releases the handler.
func signalContext(parent context.Context) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			signal.Stop(ch)
			sig, _ := s.(syscall.Signal)
			cancel(signalCause{sig})
		case <-done:
		}
	}()
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			signal.Stop(ch)
			close(done)
			cancel(context.Canceled)
		})
	}
}

// interruptedBy returns the signal that canceled ctx, if a signal did.
func interruptedBy(ctx context.Context) (syscall.Signal, bool) {
	var c signalCause
	if ctx.Err() != nil && errors.As(context.Cause(ctx), &c) {
		return c.sig, true
	}
	return 0, false
}

// errInterrupted marks a command that stopped early because its context was canceled;
// run turns it into exit code 128 + the signal number (130 for SIGINT, 143 for SIGTERM).
var errInterrupted = errors.New("interrupted")

// interrupted returns an error wrapping errInterrupted that says what was written.
func interrupted(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errInterrupted}, a...)...)
}

// exitCodeOf is the exit code of a command that returned err under ctx: 128 + the
// signal number when a signal stopped it (errInterrupted, or any error once the signal
// has canceled ctx), else 0 for nil.
func exitCodeOf(ctx context.Context, err error) (int, bool) {
	if err == nil {
		return 0, false
	}
	sig, ok := interruptedBy(ctx)
	if !ok && !errors.Is(err, errInterrupted) {
		return 0, false
	}
	if !ok {
		sig = syscall.SIGINT
	}
	return 128 + int(sig), true
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progress prints progress lines to w. On a terminal each update rewrites the same line
// ('\r'); elsewhere (a file, a pipe) every update is a plain line, so that logs do not
// pile up carriage returns. A nil *progress prints nothing (--quiet).
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	tty   bool
	width int // length of the line on screen (tty)
}

// newProgress returns a printer to w, or nil when quiet.
func newProgress(w io.Writer, quiet bool) *progress {
	if quiet {
		return nil
	}
	return &progress{w: w, tty: isTerminal(w)}
}

// Printf shows one progress update.
func (p *progress) Printf(format string, a ...any) {
	if p == nil {
		return
	}
	s := strings.TrimRight(fmt.Sprintf(format, a...), "\n")
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.tty {
		fmt.Fprintln(p.w, s)
		return
	}
	pad := ""
	if n := p.width - len(s); n > 0 {
		pad = strings.Repeat(" ", n)
	}
	fmt.Fprintf(p.w, "\r%s%s", s, pad)
	p.width = len(s)
}

// Done ends the updating line on a terminal, so that the next output starts on a new line.
func (p *progress) Done() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && p.width > 0 {
		fmt.Fprintln(p.w)
	}
	p.width = 0
}

// ticker calls f every d until ctx is done or the returned stop is called; stop waits
// for a running f to return.
func ticker(ctx context.Context, d time.Duration, f func()) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				f()
			}
		}
	}()
	return func() { cancel(); wg.Wait() }
}
