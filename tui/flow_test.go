package tui

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/exp/teatest"

	"github.com/kvcanary/kvcanary/internal/analyzers"
	"github.com/kvcanary/kvcanary/pipeline"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/traces"
)

// writeFixtureBundle writes the fixture's events to a bundle.
func writeFixtureBundle(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fixture.kvtrace")
	w, err := traces.Create(path, traces.Manifest{Tool: "kvcanary test", Run: "fixture", Command: "test"})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range append(fixtureEvents(), gpuEvents()...) {
		if err := w.Write(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// replayFixture replays the fixture bundle into a live subscription as fast
// as it reads, moving pos when set; done receives the replay's end. The
// replay stops with the test.
func replayFixture(t *testing.T, pos pipeline.Position) (sub *hook.Subscription, done <-chan error) {
	t.Helper()
	path := writeFixtureBundle(t)
	bus := hook.NewBus()
	sub = bus.Live("tui", DefaultLiveCapacity)
	end := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		err := pipeline.ReplayBundle(ctx, path, bus, pipeline.ReplayOptions{Speed: 0, Cursor: pos})
		bus.Close()
		end <- err
	}()
	return sub, end
}

// quit presses q and returns the model the program ended with.
func quit(t *testing.T, tm *teatest.TestModel) *Model {
	t.Helper()
	tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("q")})
	tm.WaitFinished(t, teatest.WithFinalTimeout(15*time.Second))
	return tm.FinalModel(t).(*Model)
}

// waitOut waits until the output written since the last wait holds every
// one of what.
func waitOut(t *testing.T, tm *teatest.TestModel, what ...string) {
	t.Helper()
	teatest.WaitFor(t, tm.Output(), func(b []byte) bool {
		for _, w := range what {
			if !bytes.Contains(b, []byte(w)) {
				return false
			}
		}
		return true
	}, teatest.WithDuration(15*time.Second), teatest.WithCheckInterval(20*time.Millisecond))
}

// TestWatchBundleFlow is watch-on-bundle end to end through bubbletea: the
// replay fills the panels, tab walks them, enter on a finding shows its
// evidence, esc returns and q quits.
func TestWatchBundleFlow(t *testing.T) {
	cursor := &Cursor{}
	sub, done := replayFixture(t, cursor)
	m := New(Options{Title: "kvcanary watch", Source: "bundle fixture.kvtrace", Sub: sub, Cursor: cursor, Done: done,
		Summaries: func() analyzers.Summaries { return *fixtureSummaries() }, Styles: asciiStyles(), SnapshotDir: t.TempDir()})
	tm := teatest.NewTestModel(t, m, teatest.WithInitialTermSize(120, 40))

	// The replay fills every panel; the cursor reaches the end.
	waitOut(t, tm, "findings 7 (error 5, warn 2)", "corrupt 3/12", "mismatched 1", "LIVE-PAGE-OVERWRITE 1",
		"divergent 2", "retract 1 (2 req)", "xid 79", "graph launches 2", "] done")
	for _, p := range []string{"sessions", "checksum", "canary", "graphdiff", "scheduler", "gpu", "cuda", "findings"} {
		tm.Send(tea.KeyMsg{Type: tea.KeyTab})
		waitOut(t, tm, "focus: "+p)
	}
	tm.Send(tea.KeyMsg{Type: tea.KeyUp})
	tm.Send(tea.KeyMsg{Type: tea.KeyUp})
	tm.Send(tea.KeyMsg{Type: tea.KeyEnter})
	waitOut(t, tm, "finding #5 evidence", `victim "s003-r1\x1b[31m"`)
	tm.Send(tea.KeyMsg{Type: tea.KeyEsc})
	waitOut(t, tm, "focus: findings")
	fm := quit(t, tm)
	if fm.findings.Drilled() || fm.Focused() != "findings" {
		t.Fatalf("final: drilled %v focus %s", fm.findings.Drilled(), fm.Focused())
	}
	st := fm.Stats()
	if st.Events != uint64(len(fixtureEvents())+len(gpuEvents())) || st.Findings != 7 || st.Dropped != 0 {
		t.Fatalf("final stats %+v", st)
	}
	if fm.sourceErr != nil || !fm.sourceDone {
		t.Fatalf("source done %v, error %v", fm.sourceDone, fm.sourceErr)
	}
}

// TestSessionsTableFlow replays a recorded bundle with a corrupted session:
// the session is a finding, enter on the sessions panel opens the table
// with the reply's excerpt (quoted), o sorts by the next column, esc returns.
func TestSessionsTableFlow(t *testing.T) {
	sub, done := replayFixture(t, nil)
	m := New(Options{Title: "kvcanary watch", Source: "bundle fixture.kvtrace", Sub: sub, Done: done, Styles: asciiStyles()})
	tm := teatest.NewTestModel(t, m, teatest.WithInitialTermSize(120, 40))

	waitOut(t, tm, "corrupt 3/12", "session s004 leak at round 2: tool-call markup <tool_call> in content")
	tm.Send(tea.KeyMsg{Type: tea.KeyTab})
	waitOut(t, tm, "focus: sessions")
	tm.Send(tea.KeyMsg{Type: tea.KeyEnter})
	waitOut(t, tm, "sessions 12 (corrupt 3)  sort: outcome", "request chatcmpl-42", `excerpt "Let me check.\n<tool_call>{\"name\": \"get_weather\"}\x1b[2J"`)
	tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("o")})
	waitOut(t, tm, "sort: session")
	tm.Send(tea.KeyMsg{Type: tea.KeyEsc})
	waitOut(t, tm, "corrupt 3/12 = 25.0%")
	fm := quit(t, tm)
	if fm.table.Opened() || fm.Focused() != "sessions" {
		t.Fatalf("final: table open %v, focus %s", fm.table.Opened(), fm.Focused())
	}
	if by, _ := fm.table.SortedBy(); by != "session" {
		t.Fatalf("sorted by %s after o, want session", by)
	}
}
