package tui

import (
	"fmt"

	tea "github.com/charmbracelet/bubbletea"
)

// StepStatus is where a demo step stands.
type StepStatus int

// Step statuses.
const (
	StepRunning StepStatus = iota // started, no result yet
	StepOK                        // finished; the result is the expected, clean one
	StepFinding                   // finished; the result is evidence (corruption seen, a flag matters)
	StepFailed                    // could not run
)

// Step is one step of a guided investigation (kvcanary demo): sent once when
// it starts and again, with the same Index, when its result is known.
type Step struct {
	Index  int // 1-based; a repeated Index replaces the earlier entry
	Title  string
	Status StepStatus
	Result string // the decisive one-line result
}

// StepMsg carries one Step from Options.Steps into the program.
type StepMsg Step

// stepsDoneMsg says Options.Steps was closed.
type stepsDoneMsg struct{}

// StepsPanel lists the demo's steps and their decisive results.
type StepsPanel struct{ panelBase }

// NewStepsPanel returns the steps panel.
func NewStepsPanel(st *Styles) *StepsPanel { return &StepsPanel{panelBase{st: st}} }

// Update takes StateMsg.
func (p *StepsPanel) Update(msg tea.Msg) (*StepsPanel, tea.Cmd) { p.take(msg); return p, nil }

// View draws the panel.
func (p *StepsPanel) View() string {
	st, s := p.st, p.s
	if s == nil || len(s.Steps) == 0 {
		return st.frame("investigation", []string{st.Muted.Render("waiting for the first step")}, p.w, p.h, p.focused)
	}
	var lines []string
	for i, x := range s.Steps {
		var mark string
		switch x.Status {
		case StepRunning:
			mark = st.Warn.Render("…")
		case StepOK:
			mark = st.OK.Render("✓")
		case StepFinding:
			mark = st.Mismatch.Render("!")
		default:
			mark = st.Mismatch.Render("✗")
		}
		l := fmt.Sprintf("%s %d. %s", mark, x.Index, quoteAll(x.Title))
		if x.Result != "" {
			l += ": " + quoteAll(x.Result)
		}
		if s.StepsDone && i == len(s.Steps)-1 {
			// The conclusion is read whole, from its start.
			concl := wrap(l, max(1, p.w-2))
			if rows := max(0, p.h-3); len(concl) >= rows {
				return st.frame("investigation (finished)", concl, p.w, p.h, p.focused)
			}
			lines = append(lines, concl...)
			continue
		}
		lines = append(lines, l)
	}
	// Keep the newest steps in view.
	if rows := max(0, p.h-3); len(lines) > rows {
		lines = lines[len(lines)-rows:]
	}
	title := "investigation"
	if s.StepsDone {
		title += " (finished)"
	}
	return st.frame(title, lines, p.w, p.h, p.focused)
}

// addStep records a step in the aggregator (replacing one with its Index).
func (a *aggregator) addStep(x Step) {
	for i := range a.steps {
		if a.steps[i].Index == x.Index {
			steps := append([]Step(nil), a.steps...)
			steps[i] = x
			a.steps = steps
			return
		}
	}
	a.steps = append(a.steps, x)
}
