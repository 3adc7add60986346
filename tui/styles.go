package tui

import (
	"io"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"
)

// Styles are every look the dashboard uses, named for what they mean.
type Styles struct {
	renderer *lipgloss.Renderer

	Title     lipgloss.Style // panel titles, the header's tool name
	Label     lipgloss.Style // "matched", "queue" …
	Value     lipgloss.Style // plain numbers
	Muted     lipgloss.Style // absent data, hints
	OK        lipgloss.Style // clean results
	Warn      lipgloss.Style // warnings, retractions, drops
	Mismatch  lipgloss.Style // evidence of corruption (error findings, mismatches)
	Overwrite lipgloss.Style // LIVE-PAGE-OVERWRITE: the loudest thing on screen
	Selected  lipgloss.Style // the selected line of a list
	Spark     lipgloss.Style // sparklines and histogram bars
	Panel     lipgloss.Style // an unfocused panel's frame
	Focused   lipgloss.Style // the focused panel's frame
	Status    lipgloss.Style // the status line (paused, snapshot written …)
	HelpKey   lipgloss.Style
	HelpDesc  lipgloss.Style
}

// NewStyles builds the styles for renderer r (nil: the default renderer).
// With the ASCII profile (NO_COLOR, tests) colours and attributes vanish, so
// focus is also shown by the frame's border shape and selection by a marker.
func NewStyles(r *lipgloss.Renderer) *Styles {
	if r == nil {
		r = lipgloss.DefaultRenderer()
	}
	ns := r.NewStyle
	return &Styles{
		renderer:  r,
		Title:     ns().Bold(true).Foreground(lipgloss.AdaptiveColor{Light: "#1f4e9c", Dark: "#8ab4f8"}),
		Label:     ns().Foreground(lipgloss.AdaptiveColor{Light: "#555555", Dark: "#a0a0a0"}),
		Value:     ns(),
		Muted:     ns().Foreground(lipgloss.AdaptiveColor{Light: "#8a8a8a", Dark: "#6c6c6c"}),
		OK:        ns().Foreground(lipgloss.AdaptiveColor{Light: "#1a7f37", Dark: "#56d364"}),
		Warn:      ns().Foreground(lipgloss.AdaptiveColor{Light: "#9a6700", Dark: "#e3b341"}),
		Mismatch:  ns().Bold(true).Foreground(lipgloss.AdaptiveColor{Light: "#cf222e", Dark: "#ff7b72"}),
		Overwrite: ns().Bold(true).Reverse(true).Foreground(lipgloss.AdaptiveColor{Light: "#cf222e", Dark: "#ff7b72"}),
		Selected:  ns().Reverse(true),
		Spark:     ns().Foreground(lipgloss.AdaptiveColor{Light: "#0969da", Dark: "#79c0ff"}),
		Panel:     ns().Border(lipgloss.RoundedBorder()).BorderForeground(lipgloss.AdaptiveColor{Light: "#d0d7de", Dark: "#444c56"}),
		Focused:   ns().Border(lipgloss.DoubleBorder()).BorderForeground(lipgloss.AdaptiveColor{Light: "#0969da", Dark: "#58a6ff"}),
		Status:    ns().Foreground(lipgloss.AdaptiveColor{Light: "#9a6700", Dark: "#e3b341"}),
		HelpKey:   ns().Bold(true),
		HelpDesc:  ns().Foreground(lipgloss.AdaptiveColor{Light: "#555555", Dark: "#a0a0a0"}),
	}
}

// newRenderer returns a lipgloss renderer for the terminal behind out, with
// the ASCII profile when noColor is set. It settles the background question
// (a terminal query) before the program takes the terminal over.
func newRenderer(out io.Writer, noColor bool) *lipgloss.Renderer {
	r := lipgloss.NewRenderer(out)
	if noColor {
		r.SetColorProfile(termenv.Ascii)
		r.SetHasDarkBackground(true)
	} else {
		r.HasDarkBackground()
	}
	return r
}

// asciiStyles are the styles of golden tests: no colour, no attributes.
func asciiStyles() *Styles {
	return NewStyles(newRenderer(io.Discard, true))
}
