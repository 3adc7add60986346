package tui

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/exp/golden"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/traces"
)

var wall0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

// testModel returns a model over no subscription with a fixed clock, fed one
// frame of the fixture.
func testModel(t *testing.T, w, h int, steps bool) *Model {
	t.Helper()
	return testModelOf(t, w, h, steps, append(fixtureEvents(), gpuEvents()...))
}

// testModelOf is testModel fed evs.
func testModelOf(t *testing.T, w, h int, steps bool, evs []hook.Event) *Model {
	t.Helper()
	opts := Options{Title: "kvcanary watch", Source: "bundle fixture.kvtrace", Styles: asciiStyles(), Now: func() time.Time { return wall0.Add(42 * time.Second) }}
	if steps {
		opts.Steps = make(chan Step)
	}
	m := New(opts)
	m.start = wall0
	m.lastAt = wall0
	m.Update(tea.WindowSizeMsg{Width: w, Height: h})
	m.Update(frameMsg{at: wall0.Add(time.Second), batch: &evs, open: true, summaries: fixtureSummaries(), arrived: uint64(len(evs)) + 5, dropped: 5})
	return m
}

// namedKeys are the keys the tests press by name; any other string is typed.
var namedKeys = map[string]tea.KeyType{
	"tab": tea.KeyTab, "shift+tab": tea.KeyShiftTab, "enter": tea.KeyEnter, "esc": tea.KeyEsc,
	"up": tea.KeyUp, "backspace": tea.KeyBackspace, "ctrl+u": tea.KeyCtrlU,
}

func keyMsg(s string) tea.KeyMsg {
	if k, ok := namedKeys[s]; ok {
		return tea.KeyMsg{Type: k}
	}
	return tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(s)}
}

func press(m *Model, keys ...string) tea.Cmd {
	var cmd tea.Cmd
	for _, k := range keys {
		_, cmd = m.Update(keyMsg(k))
	}
	return cmd
}

func TestModelGolden(t *testing.T) {
	for _, tc := range []struct {
		name  string
		w, h  int
		steps bool
		keys  []string
	}{
		{"120x40", 120, 40, false, nil},
		{"80x24", 80, 24, false, nil},
		{"100x30-demo", 100, 30, true, nil},
		{"80x24-demo", 80, 24, true, nil},
		{"79x24-too-small", 79, 24, false, nil},
		{"120x40-drill", 120, 40, false, []string{"up", "up", "enter"}},
		{"120x40-help", 120, 40, false, []string{"?"}},
		{"120x40-filter", 120, 40, false, []string{"/", "c", "a", "n"}},
		{"120x40-focus-canary", 120, 40, false, []string{"tab", "tab", "tab"}},
		{"120x40-sessions-table", 120, 40, false, []string{"tab", "enter"}},
		{"120x40-sessions-table-by-id-reversed", 120, 40, false, []string{"tab", "enter", "o", "r", "down"}},
		{"80x24-sessions-table", 80, 24, false, []string{"tab", "enter"}},
		{"80x24-help", 80, 24, false, []string{"?"}},
		{"80x24-paused", 80, 24, false, []string{"p"}},
		{"80x24-focus-gpu", 80, 24, false, []string{"tab", "tab", "tab", "tab", "tab", "tab"}},
		{"80x24-nofeeds", 80, 24, false, nil},
		{"80x24-demo-nofeeds", 80, 24, true, nil},
		{"120x40-nofeeds", 120, 40, false, nil},
		{"120x40-gpu-only", 120, 40, false, nil},
		{"100x30-cuda-only", 100, 30, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evs := fixtureEvents()
			switch {
			case strings.HasSuffix(tc.name, "-gpu-only"):
				evs = append(evs, onlyKind(gpuEvents(), hook.KindGPU)...)
			case strings.HasSuffix(tc.name, "-cuda-only"):
				evs = append(evs, onlyKind(gpuEvents(), hook.KindCUDA)...)
			case !strings.HasSuffix(tc.name, "-nofeeds"):
				evs = append(evs, gpuEvents()...)
			}
			m := testModelOf(t, tc.w, tc.h, tc.steps, evs)
			if tc.steps {
				m.Update(StepMsg{Index: 1, Title: "baseline", Status: StepFinding, Result: "CORRUPTION sessions: 14/80 = 18%"})
				m.Update(StepMsg{Index: 2, Title: "checksum compare", Status: StepOK, Result: "transfer clean: 160 rooms match"})
				m.Update(StepMsg{Index: 3, Title: "canary", Status: StepRunning})
				m.Update(StepMsg{Index: 4, Title: "verdict", Status: StepFinding, Result: "graph ≠ eager puts the fault in captured compute; --multi-stream-overlap=false removes it without confounds"})
				m.Update(stepsDoneMsg{})
			}
			press(m, tc.keys...)
			// Twice, as the program renders: a View must not depend on the
			// one before it (the footer once narrowed the help overlay).
			m.View()
			out := m.View()
			if tc.w >= MinWidth && tc.h >= MinHeight {
				checkSize(t, out, tc.w, tc.h)
			}
			golden.RequireEqual(t, out)
		})
	}
}

func onlyKind(evs []hook.Event, k hook.Kind) []hook.Event {
	var out []hook.Event
	for _, ev := range evs {
		if ev.Kind == k {
			out = append(out, ev)
		}
	}
	return out
}

func TestModelKeys(t *testing.T) {
	m := testModel(t, 120, 40, false)
	if m.Focused() != "findings" {
		t.Fatalf("initial focus %s, want findings", m.Focused())
	}
	want := []string{"sessions", "checksum", "canary", "graphdiff", "scheduler", "gpu", "cuda", "findings"}
	for _, w := range want {
		press(m, "tab")
		if m.Focused() != w {
			t.Fatalf("tab: focus %s, want %s", m.Focused(), w)
		}
	}
	press(m, "shift+tab")
	if m.Focused() != "cuda" {
		t.Fatalf("shift+tab: focus %s, want cuda", m.Focused())
	}
	// enter on the canary panel lists canary findings.
	press(m, "shift+tab", "shift+tab", "shift+tab", "shift+tab")
	if m.Focused() != "canary" {
		t.Fatalf("focus %s, want canary", m.Focused())
	}
	press(m, "enter")
	if m.Focused() != "findings" || m.findings.Filter() != "canary" || len(m.findings.shown) != 1 {
		t.Fatalf("enter on canary: focus %s filter %q shown %d", m.Focused(), m.findings.Filter(), len(m.findings.shown))
	}
	press(m, "enter")
	if !m.findings.Drilled() || !strings.Contains(m.View(), `victim "s003-r1\x1b[31m"`) {
		t.Fatalf("drill: evidence view missing the quoted victim:\n%s", m.View())
	}
	press(m, "esc")
	if m.findings.Drilled() {
		t.Fatal("esc did not leave the evidence view")
	}
	// Filter: typing narrows, esc clears.
	press(m, "/", "x", "y", "z")
	if !m.filtering || len(m.findings.shown) != 0 || !strings.Contains(m.View(), "no finding matches the filter") {
		t.Fatalf("filter xyz: filtering %v shown %d", m.filtering, len(m.findings.shown))
	}
	press(m, "esc")
	if m.filtering || m.findings.Filter() != "" || len(m.findings.shown) != 7 { // 4 analyzer findings, 3 corrupted sessions
		t.Fatalf("esc: filtering %v filter %q shown %d", m.filtering, m.findings.Filter(), len(m.findings.shown))
	}
	// Quit keys quit, but q is text while filtering.
	press(m, "/")
	if cmd := press(m, "q"); cmd != nil {
		t.Fatal("q while filtering quit")
	}
	press(m, "esc")
	if cmd := press(m, "q"); cmd == nil || cmd() != tea.Quit() {
		t.Fatal("q did not quit")
	}
}

func TestPauseFreezesViewNotIngest(t *testing.T) {
	m := testModel(t, 120, 40, false)
	press(m, "p")
	before := m.sessions.View()
	more := []hook.Event{{Kind: hook.KindSession, TS: at(30), Body: &hook.Session{ID: "late", Outcome: "leak"}}}
	m.Update(frameMsg{at: wall0.Add(2 * time.Second), batch: &more, open: true})
	if m.agg.sessions != 13 {
		t.Fatalf("paused: aggregator has %d sessions, want 13 (ingest continues)", m.agg.sessions)
	}
	if got := m.sessions.View(); got != before {
		t.Fatalf("paused view changed:\n%s\nwant\n%s", got, before)
	}
	if !strings.Contains(m.View(), "PAUSED") {
		t.Fatal("header does not say PAUSED")
	}
	press(m, "p")
	if !strings.Contains(m.sessions.View(), "sessions 13") {
		t.Fatalf("resumed view is stale:\n%s", m.sessions.View())
	}
}

func TestFindingsFollowAndKeepSelection(t *testing.T) {
	m := testModel(t, 120, 40, false)
	if it, _ := m.findings.Selected(); it.Seq != 7 {
		t.Fatalf("follow: selected #%d, want #7", it.Seq)
	}
	press(m, "up", "up")
	more := []hook.Event{{Kind: hook.KindFinding, TS: at(21), Body: &hook.Finding{Analyzer: "canary", Severity: hook.SevError, Summary: "x"}}}
	m.Update(frameMsg{at: wall0.Add(2 * time.Second), batch: &more, open: true})
	if it, _ := m.findings.Selected(); it.Seq != 5 {
		t.Fatalf("after a new finding: selected #%d, want #5 (selection kept)", it.Seq)
	}
	press(m, "G")
	if it, _ := m.findings.Selected(); it.Seq != 8 {
		t.Fatalf("G: selected #%d, want #8", it.Seq)
	}
}

func TestSnapshotWritesWindow(t *testing.T) {
	m := testModel(t, 120, 40, false)
	m.opts.SnapshotDir = t.TempDir()
	cmd := press(m, "s")
	if cmd == nil {
		t.Fatal("s returned no command")
	}
	msg := cmd().(SnapshotMsg)
	if msg.Err != nil {
		t.Fatal(msg.Err)
	}
	want := len(fixtureEvents()) + len(gpuEvents())
	if msg.Events != want {
		t.Fatalf("snapshot holds %d events, want %d", msg.Events, want)
	}
	m.Update(msg)
	if !strings.Contains(m.View(), "snapshot: 103 events to") || m.Stats().LastSnapshot != msg.Path {
		t.Fatalf("status line lacks the snapshot:\n%s", m.View())
	}
	sum, err := traces.Inspect(msg.Path)
	if err != nil || sum.Events != uint64(want) || sum.Manifest.Run != "fixture" || sum.Manifest.Config.Seed != 7 {
		t.Fatalf("snapshot bundle %+v, %v", sum, err)
	}
	lb := sum.Manifest.Labels
	if lb["view_sessions"] != "12" || lb["view_corrupted"] != "3" || lb["view_findings_error"] != "5" || lb["view_dropped"] != "5" {
		t.Fatalf("snapshot labels %v", lb)
	}
	// A snapshot into a directory that does not exist reports the error.
	m.opts.SnapshotDir = filepath.Join(t.TempDir(), "missing")
	if msg := press(m, "s")().(SnapshotMsg); msg.Err == nil {
		t.Fatal("snapshot into a missing directory succeeded")
	}
}

func TestWindowBounds(t *testing.T) {
	w := newWindow(10, 1<<20)
	for i := 0; i < 25; i++ {
		w.push(hook.Event{Kind: hook.KindReplay, TS: int64(i), Body: &hook.Replay{Step: uint64(i)}})
	}
	evs := w.events()
	if len(evs) != 10 || evs[0].TS != 15 || evs[9].TS != 24 || w.evicted != 15 {
		t.Fatalf("count bound: %d events from %d, evicted %d", len(evs), evs[0].TS, w.evicted)
	}
	// Bytes bound: big graph-vs-eager samples push out older events.
	w = newWindow(1000, 100_000)
	for i := 0; i < 10; i++ {
		w.push(hook.Event{Kind: hook.KindGraphDiffSample, TS: int64(i), Body: &hook.GraphDiffSample{Graph: make(hook.Float32s, 5000)}})
	}
	if w.bytes > 100_000 || w.n != 4 {
		t.Fatalf("bytes bound: %d bytes in %d events", w.bytes, w.n)
	}
}

func TestNewRunClearsPerRunPanels(t *testing.T) {
	a := newAggregator("x")
	evs := fixtureEvents()
	for i := range evs {
		a.apply(&evs[i])
	}
	second := hook.Event{Kind: hook.KindRunStart, TS: at(30), Body: &hook.RunStart{Config: hook.RunConfig{Engine: "sim", Seed: 8}}}
	a.apply(&second)
	s := a.snapshot(10)
	if s.Sessions.Total != 0 || s.Sched.Observations != 0 || s.Config.Seed != 8 || s.FindingsTotal != 7 {
		t.Fatalf("after a second run.start: sessions %d sched %d seed %d findings %d", s.Sessions.Total, s.Sched.Observations, s.Config.Seed, s.FindingsTotal)
	}
}

func TestQuitWaitsForSnapshot(t *testing.T) {
	m := testModel(t, 120, 40, false)
	m.opts.SnapshotDir = t.TempDir()
	write := press(m, "s")
	if cmd := press(m, "q"); cmd != nil {
		t.Fatal("q quit while a snapshot was being written")
	}
	if !strings.Contains(m.View(), "finishing the snapshot") {
		t.Fatal("no word that quitting waits for the snapshot")
	}
	_, cmd := m.Update(write())
	if cmd == nil || cmd() != tea.Quit() {
		t.Fatal("the finished snapshot did not complete the quit")
	}
	if m.Stats().LastSnapshot == "" {
		t.Fatal("the snapshot written before quitting is not in the stats")
	}
}

func TestSourceStatusInHeader(t *testing.T) {
	calls := 0
	m := New(Options{Sub: hook.NewBus().Live("x", 8), Styles: asciiStyles(), FrameInterval: time.Millisecond,
		SourceStatus: func() string { calls++; return "2 connections open\x1b[2J" }})
	m.Update(m.tick()())
	if calls != 1 || !strings.Contains(m.View(), `"2 connections open\x1b[2J"`) {
		t.Fatalf("status polled %d times; header:\n%s", calls, m.header.View())
	}
}

func TestStepsPanelShowsConclusionFromItsStart(t *testing.T) {
	a := newAggregator("x")
	for i := 1; i <= 8; i++ {
		a.addStep(Step{Index: i, Title: "step", Status: StepOK, Result: "fine"})
	}
	a.addStep(Step{Index: 9, Title: "verdict", Status: StepFinding, Result: strings.Repeat("a long conclusion ", 12)})
	a.stepsDone = true
	s := a.snapshot(8)
	p := NewStepsPanel(asciiStyles())
	p.SetSize(40, 6)
	p.Update(StateMsg{State: &s})
	out := p.View()
	if !strings.Contains(out, "9. verdict: a long") || strings.Contains(out, "8. step") {
		t.Fatalf("a conclusion taller than the panel should show from its start:\n%s", out)
	}
	p.SetSize(40, 30)
	if out := p.View(); !strings.Contains(out, "1. step: fine") || !strings.Contains(out, "9. verdict") {
		t.Fatalf("with room, every step and the whole conclusion:\n%s", out)
	}
}

// TestNoDataPanelsSayNotMeasured: a real server's run (sessions only, the
// analyzers' summaries empty) shows what would measure the other panels,
// never a zero that claims a measurement.
func TestNoDataPanelsSayNotMeasured(t *testing.T) {
	m := New(Options{Source: "bundle real.kvtrace", Styles: asciiStyles()})
	m.Update(tea.WindowSizeMsg{Width: 120, Height: 40})
	evs := []hook.Event{{Kind: hook.KindSession, TS: 1, Body: &hook.Session{ID: "s000", Outcome: hook.OutcomeDone, Rounds: 2}}}
	m.Update(frameMsg{at: wall0, batch: &evs, open: true, summaries: zeroSummaries()})
	out := m.View()
	for _, p := range []viewer{m.checksum, m.canary, m.graphdiff} {
		if v := p.View(); !strings.Contains(v, "not measured") || !strings.Contains(strings.Join(strings.Fields(v), " "), "needs") {
			t.Errorf("panel without data:\n%s", v)
		}
	}
	if strings.Contains(out, "LIVE-PAGE-OVERWRITE") || strings.Contains(out, "mismatched") || strings.Contains(out, "divergent") {
		t.Errorf("a panel without data shows figures:\n%s", out)
	}
	if !strings.Contains(out, "corrupt 0/1") {
		t.Errorf("the sessions panel lost its measurement:\n%s", out)
	}
	empty := New(Options{Styles: asciiStyles()})
	if v := empty.sessions.View(); !strings.Contains(v, "not measured") {
		t.Errorf("sessions panel without sessions:\n%s", v)
	}
}

// TestCorruptedSessionIsAFinding: kind, session, round, request id and the
// excerpt, quoted for the terminal.
func TestCorruptedSessionIsAFinding(t *testing.T) {
	s := fixtureState(fixtureEvents(), nil)
	var leak *FindingItem
	for i := range s.Findings {
		if s.Findings[i].Analyzer == SessionFindings && strings.Contains(s.Findings[i].Summary, "s004") {
			leak = &s.Findings[i]
		}
	}
	if leak == nil {
		t.Fatalf("no finding for the leak session in %+v", s.Findings)
	}
	want := map[string]string{"kind": "leak", "session": "s004", "round": "2", "request": "chatcmpl-42",
		"excerpt": `"Let me check.\n<tool_call>{\"name\": \"get_weather\"}\x1b[2J"`, "reason": "tool-call markup <tool_call> in content"}
	got := map[string]string{}
	for _, kv := range leak.Evidence {
		got[kv.Key] = kv.Value
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("evidence %s = %q, want %q", k, got[k], v)
		}
	}
	if leak.Severity != hook.SevError || leak.Summary != "session s004 leak at round 2: tool-call markup <tool_call> in content" {
		t.Errorf("finding %+v", leak)
	}
}
