package tui

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

func TestParseSpeed(t *testing.T) {
	for in, want := range map[string]float64{"10x": 10, "10": 10, "0.5x": 0.5, "1X": 1, "max": 0} {
		if got, err := ParseSpeed(in); err != nil || got != want {
			t.Errorf("ParseSpeed(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "fast", "-1x", "0", "0x", "NaN", "Inf", "1e400", "10xx"} {
		if _, err := ParseSpeed(in); err == nil || !strings.Contains(err.Error(), "speed") {
			t.Errorf("ParseSpeed(%q) = %v, want an error naming the speed", in, err)
		}
	}
}

// TestReplayPacesAndSkipsRejudged: at 1000x a bundle spanning 19.8 s of event
// time takes about 20 ms of wall time, never less than its span allows
// (less the pacer's slack); the
// findings of re-judging analyzers are left out; the cursor ends at the end.
func TestReplayPacesAndSkipsRejudged(t *testing.T) {
	path := writeFixtureBundle(t)
	var got []hook.Event
	c := &Cursor{}
	start := time.Now()
	err := ReplayBundle(context.Background(), path, hook.PublishFunc(func(ev hook.Event) { got = append(got, ev) }),
		ReplayOptions{Speed: 1000, Rejudge: map[string]bool{"canary": true, "checksum": true}, Cursor: c})
	el := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	want := len(fixtureEvents()) + len(gpuEvents()) - 2
	if len(got) != want {
		t.Fatalf("replayed %d events, want %d (two rejudged findings left out)", len(got), want)
	}
	for _, ev := range got {
		if f, ok := ev.Body.(*hook.Finding); ok && (f.Analyzer == "canary" || f.Analyzer == "checksum") {
			t.Fatalf("replayed a finding of a re-judging analyzer: %+v", f)
		}
	}
	// Pacing lower bound: the first to the last event is 19.8 s of event
	// time, 19.8 ms at 1000x, less the slack the pacer allows itself.
	if min := 19800*time.Microsecond - paceSlack; el < min {
		t.Fatalf("replay at 1000x took %v, less than the span allows (%v)", el, min)
	}
	st := c.State()
	if !st.Done || st.Speed != 1000 || st.FirstTS != at(0) || st.LastTS != at(19.8) || st.AtTS != at(19.8) {
		t.Fatalf("cursor %+v", st)
	}
}

func TestReplayStopsOnCancel(t *testing.T) {
	path := writeFixtureBundle(t)
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	err := ReplayBundle(ctx, path, hook.PublishFunc(func(hook.Event) {
		n++
		if n == 2 {
			// The third event is 0.1 s of event time later: at 0.001x the
			// replay waits 100 s for it, unless cancelled meanwhile.
			time.AfterFunc(10*time.Millisecond, cancel)
		}
	}), ReplayOptions{Speed: 0.001})
	if err != nil || n != 2 {
		t.Fatalf("cancelled replay: %d events, err %v", n, err)
	}
}

func TestReplayErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "garbage.kvtrace")
	os.WriteFile(bad, []byte("not a bundle"), 0o600)
	for _, p := range []string{filepath.Join(dir, "missing.kvtrace"), bad} {
		err := ReplayBundle(context.Background(), p, hook.PublishFunc(func(hook.Event) {}), ReplayOptions{})
		if err == nil || !strings.Contains(err.Error(), filepath.Base(p)) {
			t.Errorf("%s: err %v, want one naming the file", p, err)
		}
	}
}

func TestRecoverTurnsPanicIntoError(t *testing.T) {
	f := func() (err error) {
		defer Recover(&err)
		var m map[string]int
		m["x"] = 1
		return nil
	}
	if err := f(); err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Fatalf("err %v", err)
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
		Summaries: func() map[string]any { panic("boom") }})
	if err == nil || !strings.Contains(err.Error(), "panic") {
		t.Fatalf("Run after a panic: %v", err)
	}
	b := out.Bytes()
	leave, show := bytes.LastIndex(b, []byte("\x1b[?1049l")), bytes.LastIndex(b, []byte("\x1b[?25h"))
	if leave < 0 || show < 0 || bytes.LastIndex(b, []byte("\x1b[?1049h")) > leave {
		t.Fatalf("terminal not restored after the panic (leave alt screen at %d, show cursor at %d)", leave, show)
	}
}

func TestPacedHoldsEventsToTheirTime(t *testing.T) {
	var got []int64
	sink := hook.PublishFunc(func(ev hook.Event) { got = append(got, ev.TS) })
	ctx, cancel := context.WithCancel(context.Background())
	pub := Paced(ctx, sink, 2) // 60 ms of event time in 30 ms
	start := time.Now()
	for _, ts := range []int64{1e9, 1e9 + 30e6, 1e9 + 60e6} {
		pub.Publish(hook.Event{Kind: hook.KindReplay, TS: ts, Body: &hook.Replay{}})
	}
	if el := time.Since(start); el < 30*time.Millisecond-paceSlack {
		t.Fatalf("60 ms of event time at 2x took %v", el)
	}
	cancel()
	// After ctx ends nothing is held back: an event an hour later passes.
	pub.Publish(hook.Event{Kind: hook.KindReplay, TS: 1e9 + 3600e9, Body: &hook.Replay{}})
	if len(got) != 4 {
		t.Fatalf("published %v", got)
	}
	if Paced(context.Background(), sink, 0) == nil {
		t.Fatal("no publisher at speed 0")
	}
}
