package tui

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	tea "github.com/charmbracelet/bubbletea"
)

// Run shows the dashboard on the terminal behind opts.In/opts.Out (default
// stdin/stdout) in the alternate screen until the user quits, ctx ends or
// SIGINT/SIGTERM arrives. The terminal is restored on return, on panics (in
// Update, View and Cmds: bubbletea catches them) and on those signals. The error is the program's, or the source's
// failure delivered through opts.Done; quitting is not an error.
func Run(ctx context.Context, opts Options) (Stats, error) {
	if opts.In == nil {
		opts.In = os.Stdin
	}
	if opts.Out == nil {
		opts.Out = os.Stdout
	}
	if os.Getenv("NO_COLOR") != "" {
		opts.NoColor = true
	}
	if opts.Styles == nil {
		opts.Styles = NewStyles(newRenderer(opts.Out, opts.NoColor))
	}
	// Signals end the program through its context. bubbletea's own handler
	// is off: on SIGTERM it sends QuitMsg into a loop that a cancelled
	// context may already have stopped, and its shutdown then waits forever.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	m := New(opts)
	p := tea.NewProgram(m,
		tea.WithContext(ctx),
		tea.WithoutSignalHandler(),
		tea.WithInput(opts.In),
		tea.WithOutput(opts.Out),
		tea.WithAltScreen(),
		tea.WithFPS(max(1, int(time.Second/m.opts.FrameInterval))),
	)
	_, err := p.Run()
	switch {
	case errors.Is(err, tea.ErrProgramKilled) && ctx.Err() != nil, errors.Is(err, tea.ErrInterrupted):
		// cancelled (a signal): a normal way to stop watching
	case err != nil:
		return m.Stats(), fmt.Errorf("run dashboard: %w", err)
	}
	return m.Stats(), m.sourceErr
}

// Stats are the dashboard's counters at the end of a session, for the exit
// report ("dropped events are always reported at exit").
type Stats struct {
	Events          uint64 // events the view received
	Dropped         uint64 // events the view's live subscription dropped
	ProducerDropped uint64 // events producers reported lost (run.end)
	Findings        uint64
	LastSnapshot    string // path of the last snapshot written
	SnapshotErr     error  // the last snapshot's error, if it failed
}

// Stats returns the model's counters.
func (m *Model) Stats() Stats {
	return Stats{Events: m.agg.events, Dropped: m.dropped, ProducerDropped: m.agg.prodDropped,
		Findings: m.agg.findingsTotal, LastSnapshot: m.lastSnapshot, SnapshotErr: m.snapshotErr}
}

// Recover turns a panic in a source goroutine into an error, so the
// dashboard can stop and restore the terminal instead of dying in raw mode:
//
//	defer tui.Recover(&err)
func Recover(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("source panicked: %v", r)
	}
}
