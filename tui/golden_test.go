package tui

import (
	"fmt"
	"strings"
	"testing"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/exp/golden"
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
	}{{"full", full}, {"empty", empty}, {"nosummaries", noSums}}
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
