package pipeline

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"
)

// clearLine returns the cursor to the start of the line and erases it.
const clearLine = "\r\033[K"

// StatusLine is a command's one progress line on stderr: redrawn in place
// on a terminal, silent in a pipe (the gate is the tty argument of
// NewStatusLine; every method of an inert or nil line does nothing but
// Printf's plain write). Notes printed through Printf land above it. Safe
// for concurrent use.
type StatusLine struct {
	w   io.Writer
	on  bool
	now func() time.Time
	// Throttle is the least time between two redraws by Set (Show and the
	// first Set always draw).
	Throttle time.Duration

	mu    sync.Mutex
	text  string
	shown bool
	last  time.Time
}

// NewStatusLine returns the status line over w; it draws only when tty is
// true. now is the command's clock (nil: time.Now).
func NewStatusLine(w io.Writer, tty bool, now func() time.Time) *StatusLine {
	if now == nil {
		now = time.Now
	}
	return &StatusLine{w: w, on: tty, now: now, Throttle: 100 * time.Millisecond}
}

// Active reports whether the line draws (stderr is a terminal).
func (l *StatusLine) Active() bool { return l != nil && l.on }

// Set replaces the line's text, redrawing it unless the last redraw was
// less than Throttle ago.
func (l *StatusLine) Set(text string) { l.set(text, false) }

// Show replaces the line's text and redraws it now.
func (l *StatusLine) Show(text string) { l.set(text, true) }

func (l *StatusLine) set(text string, force bool) {
	if !l.Active() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.text = text
	if t := l.now(); force || !l.shown || t.Sub(l.last) >= l.Throttle {
		l.drawLocked(t)
	}
}

func (l *StatusLine) drawLocked(t time.Time) {
	fmt.Fprint(l.w, clearLine+l.text)
	l.shown, l.last = true, t
}

// Clear erases the line (the text is kept for nothing: the next Set draws).
func (l *StatusLine) Clear() {
	if !l.Active() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprint(l.w, clearLine)
	l.shown, l.text = false, ""
}

// Printf writes a note line to the line's writer; on a terminal it first
// erases the status line, which the next redraw puts back below the note.
func (l *StatusLine) Printf(format string, a ...any) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.on {
		format = clearLine + format
		l.shown = false
	}
	fmt.Fprintf(l.w, format, a...)
}

// Write makes the line an io.Writer for notes: p is printed as Printf
// prints a note.
func (l *StatusLine) Write(p []byte) (int, error) {
	l.Printf("%s", p)
	return len(p), nil
}

// Follow redraws the line with text() every interval until ctx ends or
// stop is called; stop then erases it and returns once nothing more is
// drawn.
func (l *StatusLine) Follow(ctx context.Context, every time.Duration, text func() string) (stop func()) {
	if !l.Active() {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				l.Show(text())
			}
		}
	}()
	return func() {
		cancel()
		<-done
		l.Clear()
	}
}
