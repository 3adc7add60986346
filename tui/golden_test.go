package tui

import (
	"fmt"
	"math"
	"strings"
	"testing"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/exp/golden"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// viewer is what every panel offers the golden tests.
type viewer interface {
	SetSize(w, h int)
	View() string
}

func checkSize(t *testing.T, out string, w, h int) {
	t.Helper()
	lines := strings.Split(out, "\n")
	if len(lines) != h {
		t.Errorf("view has %d lines, want %d", len(lines), h)
	}
	for i, l := range lines {
		if n := len([]rune(l)); n > w {
			t.Errorf("line %d is %d cells wide, more than %d: %q", i, n, w, l)
		}
	}
}

func TestPanelGolden(t *testing.T) {
	st := asciiStyles()
	full := fixtureState(append(fixtureEvents(), gpuEvents()...), fixtureSummaries())
	empty := fixtureState(nil, nil)
	noSums := fixtureState(fixtureEvents(), nil)
	// The analyzers ran but saw none of their events (a real server's
	// bundle): panels say what would measure, never a zero.
	zeroSums := fixtureState(nil, zeroSummaries())
	keys := DefaultKeyMap()
	type pc struct {
		name string
		mk   func() (viewer, func(tea.Msg))
		h    int
	}
	panels := []pc{
		{"header", func() (viewer, func(tea.Msg)) {
			p := NewHeaderPanel(st, "kvcanary watch")
			return p, func(m tea.Msg) { p.Update(m) }
		}, 3},
		{"sessions", func() (viewer, func(tea.Msg)) { p := NewSessionsPanel(st); return p, func(m tea.Msg) { p.Update(m) } }, 9},
		{"checksum", func() (viewer, func(tea.Msg)) { p := NewChecksumPanel(st); return p, func(m tea.Msg) { p.Update(m) } }, 9},
		{"canary", func() (viewer, func(tea.Msg)) { p := NewCanaryPanel(st); return p, func(m tea.Msg) { p.Update(m) } }, 9},
		{"graphdiff", func() (viewer, func(tea.Msg)) { p := NewGraphDiffPanel(st); return p, func(m tea.Msg) { p.Update(m) } }, 10},
		{"sched", func() (viewer, func(tea.Msg)) { p := NewSchedPanel(st); return p, func(m tea.Msg) { p.Update(m) } }, 9},
		{"gpu", func() (viewer, func(tea.Msg)) { p := NewGPUPanel(st); return p, func(m tea.Msg) { p.Update(m) } }, 6},
		{"cuda", func() (viewer, func(tea.Msg)) { p := NewCUDAPanel(st); return p, func(m tea.Msg) { p.Update(m) } }, 8},
		{"findings", func() (viewer, func(tea.Msg)) {
			p := NewFindingsPanel(st, &keys)
			return p, func(m tea.Msg) { p.Update(m) }
		}, 8},
	}
	states := []struct {
		name string
		s    *State
	}{{"full", full}, {"empty", empty}, {"nosummaries", noSums}, {"zerosummaries", zeroSums}}
	for _, p := range panels {
		for _, s := range states {
			for _, w := range []int{30, 60} {
				if p.name == "header" {
					w += 60
				}
				t.Run(fmt.Sprintf("%s/%s/w%d", p.name, s.name, w), func(t *testing.T) {
					v, update := p.mk()
					v.SetSize(w, p.h)
					update(StateMsg{State: s.s})
					out := v.View()
					checkSize(t, out, w, p.h)
					golden.RequireEqual(t, out)
				})
			}
		}
	}
}

// TestHostileValuesRender: values no producer should send (negative and
// non-finite numbers, a cursor running backwards, wide characters in narrow
// evidence) render without panicking or blowing up.
func TestHostileValuesRender(t *testing.T) {
	st := asciiStyles()
	nan := math.NaN()
	evs := []hook.Event{
		{Kind: hook.KindSched, TS: -5, Body: &hook.Sched{RunningReq: -3, TokenUsage: nan, QueueReq: math.MaxInt32}},
		{Kind: hook.KindSched, TS: math.MaxInt64, Body: &hook.Sched{TokenUsage: math.Inf(1), Retracted: -1, Phase: "retract"}},
		{Kind: hook.KindGPU, TS: 1, Body: &hook.GPU{Devices: []hook.GPUDevice{{Index: -1}, {Index: 1 << 20, Name: "\x1b]0;pwn\a"}}}},
		{Kind: hook.KindSession, TS: 2, Body: &hook.Session{Outcome: "\x1b[2Jweird"}},
		{Kind: hook.KindFinding, TS: 3, Body: &hook.Finding{Severity: "\x1b", Summary: strings.Repeat("界", 300), Evidence: map[string]string{"k": strings.Repeat("界", 50)}}},
	}
	s := fixtureState(evs, nil)
	s.Cursor = &CursorState{FirstTS: 0, LastTS: 1e9, AtTS: -1e18, Speed: nan}
	keys := DefaultKeyMap()
	h, se, sc, g, fi := NewHeaderPanel(st, "t"), NewSessionsPanel(st), NewSchedPanel(st), NewGPUPanel(st), NewFindingsPanel(st, &keys)
	msg := StateMsg{State: s}
	h.Update(msg)
	se.Update(msg)
	sc.Update(msg)
	g.Update(msg)
	fi.Update(msg)
	for _, v := range []viewer{h, se, sc, g, fi} {
		v.SetSize(40, 12)
		out := v.View()
		if strings.Contains(out, "\x1b") {
			t.Fatalf("an escape reached the view:\n%q", out)
		}
	}
	f := NewFindingsPanel(st, &keys)
	f.SetFocus(true)
	f.SetSize(20, 10)
	f.Update(StateMsg{State: s})
	f.Update(tea.KeyMsg{Type: tea.KeyEnter})
	if !f.Drilled() || !strings.Contains(f.View(), "界") {
		t.Fatalf("evidence of wide characters:\n%s", f.View())
	}
}

// Unknown is not false: a run whose server did not report its settings says
// so in the header instead of "graph off overlap off".
func TestConfigLineUnknown(t *testing.T) {
	st := asciiStyles()
	got := configLine(st, &hook.RunConfig{Engine: "remote", Sessions: 4, Rounds: 2})
	if !strings.Contains(got, "graph unknown") || !strings.Contains(got, "overlap unknown") || strings.Contains(got, "off") {
		t.Errorf("unknown settings shown as %q", got)
	}
	got = configLine(st, &hook.RunConfig{Engine: "remote", CUDAGraph: hook.Bool(false), MultiStreamOverlap: hook.Bool(true), CUDAGraphMaxBS: 64})
	if !strings.Contains(got, "graph off") || strings.Contains(got, "max bs") || !strings.Contains(got, "overlap on") {
		t.Errorf("known settings shown as %q", got)
	}
}
