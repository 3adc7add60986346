package tui

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/analyzers"
	"github.com/kvcanary/kvcanary/pipeline"
	"github.com/kvcanary/kvcanary/runtime/hook"
)

// TestCursorFollowsReplay: the replay (a source in pipeline) moves the
// dashboard's cursor through pipeline.Position; it ends at the last event.
func TestCursorFollowsReplay(t *testing.T) {
	path := writeFixtureBundle(t)
	c := &Cursor{}
	var _ pipeline.Position = c
	err := pipeline.ReplayBundle(context.Background(), path, hook.PublishFunc(func(hook.Event) {}), pipeline.ReplayOptions{Speed: 1000, Cursor: c})
	if err != nil {
		t.Fatal(err)
	}
	st := c.State()
	if !st.Done || st.Speed != 1000 || st.FirstTS != at(0) || st.LastTS != at(19.8) || st.AtTS != at(19.8) {
		t.Fatalf("cursor %+v", st)
	}
	c.Advance(at(1)) // never back
	if c.State().AtTS != at(19.8) {
		t.Fatalf("cursor moved back to %d", c.State().AtTS)
	}
}

// TestCursorLineHugeSpan: a bundle holding ts_ns -5 and 2^63-1 has a span
// whose int64 difference overflows; the status showed a negative span.
func TestCursorLineHugeSpan(t *testing.T) {
	out := cursorLine(asciiStyles(), &CursorState{FirstTS: -5, LastTS: math.MaxInt64, AtTS: 1_700_000_000_000_000_000, Speed: 10}, 80)
	if strings.Contains(out, "/-") || !strings.Contains(out, "/9223372036.9s") {
		t.Fatalf("status %q", out)
	}
}

// TestRunQuitsAndHonoursNoColor runs the real program loop on a pipe: q
// quits with no error, the stats are returned, and NO_COLOR leaves no colour
// sequences in the output. A cancelled context also ends it without error.
func TestRunQuitsAndHonoursNoColor(t *testing.T) {
	t.Setenv("NO_COLOR", "1")
	bus := hook.NewBus()
	sub := bus.Live("tui", 1024)
	evs := fixtureEvents()
	for _, ev := range evs {
		bus.Publish(ev)
	}
	bus.Close()
	var out bytes.Buffer
	pr, pw := ioPipe()
	done := make(chan error, 1)
	var st Stats
	go func() {
		var err error
		st, err = Run(context.Background(), Options{Sub: sub, In: pr, Out: &out})
		done <- err
	}()
	// Quit once the frame that holds the events has been taken.
	deadline := time.Now().Add(20 * time.Second)
	for sub.Delivered() < uint64(len(evs)) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // polling a counter, not timing the view
	}
	pw.Write([]byte("q"))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st.Events != uint64(len(evs)) || st.Findings != 7 {
		t.Fatalf("stats %+v", st)
	}
	for _, sgr := range []string{"\x1b[1m", "\x1b[7m", "\x1b[38;", "\x1b[31m", "\x1b[91m"} {
		if bytes.Contains(out.Bytes(), []byte(sgr)) {
			t.Fatalf("NO_COLOR output holds %q", sgr)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	pr2, _ := ioPipe()
	cancel()
	if _, err := Run(ctx, Options{In: pr2, Out: &bytes.Buffer{}}); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Run: %v", err)
	}
}

// ioPipe is the program's input. Not an *os.File: bubbletea's epoll cancel
// reader races with its own Close on files (a library race, not ours).
func ioPipe() (*io.PipeReader, *io.PipeWriter) { return io.Pipe() }

// TestRunRestoresTerminalOnPanic: a panic inside the program (here in the
// frame Cmd, through Options.Summaries) ends Run with an error and the
// terminal restored: the alternate screen is left and the cursor shown.
func TestRunRestoresTerminalOnPanic(t *testing.T) {
	bus := hook.NewBus()
	sub := bus.Live("tui", 16)
	defer bus.Close()
	var out bytes.Buffer
	pr, _ := ioPipe()
	_, err := Run(context.Background(), Options{Sub: sub, In: pr, Out: &out, NoColor: true,
		Summaries: func() analyzers.Summaries { panic("boom") }})
	if err == nil || !strings.Contains(err.Error(), "panic") {
		t.Fatalf("Run after a panic: %v", err)
	}
	b := out.Bytes()
	leave, show := bytes.LastIndex(b, []byte("\x1b[?1049l")), bytes.LastIndex(b, []byte("\x1b[?25h"))
	if leave < 0 || show < 0 || bytes.LastIndex(b, []byte("\x1b[?1049h")) > leave {
		t.Fatalf("terminal not restored after the panic (leave alt screen at %d, show cursor at %d)", leave, show)
	}
}
