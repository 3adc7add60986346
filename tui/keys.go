package tui

import (
	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
)

// KeyMap is every key the dashboard answers to, with its help text.
type KeyMap struct {
	Next     key.Binding // focus the next panel
	Prev     key.Binding // focus the previous panel
	Up       key.Binding // move in the focused list
	Down     key.Binding
	PageUp   key.Binding
	PageDown key.Binding
	Top      key.Binding
	Bottom   key.Binding
	Drill    key.Binding // open the selected finding's evidence, or the sessions table
	Back     key.Binding // leave the evidence view, the sessions table, the filter or the help
	Sort     key.Binding // sessions table: sort by the next column
	Reverse  key.Binding // sessions table: reverse the order
	Filter   key.Binding // filter the findings log
	Pause    key.Binding // freeze the view; ingest continues
	Snapshot key.Binding // write the recent events to a bundle
	Help     key.Binding
	Quit     key.Binding
}

// DefaultKeyMap returns the dashboard's keys.
func DefaultKeyMap() KeyMap {
	return KeyMap{
		Next:     key.NewBinding(key.WithKeys("tab"), key.WithHelp("tab", "next panel")),
		Prev:     key.NewBinding(key.WithKeys("shift+tab"), key.WithHelp("shift+tab", "previous panel")),
		Up:       key.NewBinding(key.WithKeys("up", "k"), key.WithHelp("↑/k", "up")),
		Down:     key.NewBinding(key.WithKeys("down", "j"), key.WithHelp("↓/j", "down")),
		PageUp:   key.NewBinding(key.WithKeys("pgup", "ctrl+u"), key.WithHelp("pgup", "page up")),
		PageDown: key.NewBinding(key.WithKeys("pgdown", "ctrl+d"), key.WithHelp("pgdn", "page down")),
		Top:      key.NewBinding(key.WithKeys("home", "g"), key.WithHelp("g", "oldest")),
		Bottom:   key.NewBinding(key.WithKeys("end", "G"), key.WithHelp("G", "newest (follow)")),
		Drill:    key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "evidence")),
		Back:     key.NewBinding(key.WithKeys("esc", "backspace"), key.WithHelp("esc", "back, clear filter")),
		Sort:     key.NewBinding(key.WithKeys("o"), key.WithHelp("o", "sort sessions")),
		Reverse:  key.NewBinding(key.WithKeys("r"), key.WithHelp("r", "reverse sort")),
		Filter:   key.NewBinding(key.WithKeys("/"), key.WithHelp("/", "filter")),
		Pause:    key.NewBinding(key.WithKeys("p"), key.WithHelp("p", "pause view")),
		Snapshot: key.NewBinding(key.WithKeys("s"), key.WithHelp("s", "snapshot")),
		Help:     key.NewBinding(key.WithKeys("?"), key.WithHelp("?", "help")),
		Quit:     key.NewBinding(key.WithKeys("q", "ctrl+c"), key.WithHelp("q", "quit")),
	}
}

// ShortHelp implements help.KeyMap: the footer line.
func (k KeyMap) ShortHelp() []key.Binding {
	// help and quit first: an 80-column footer cuts the tail, never them.
	return []key.Binding{k.Help, k.Quit, k.Next, k.Drill, k.Filter, k.Pause, k.Snapshot}
}

// compactHelp is ShortHelp with shorter texts, for a narrow footer: every
// key stays on screen.
func (k KeyMap) compactHelp() []key.Binding {
	short := func(b key.Binding, desc string) key.Binding {
		b.SetHelp(b.Help().Key, desc)
		return b
	}
	return []key.Binding{k.Help, k.Quit, short(k.Next, "next"), k.Drill, k.Filter, short(k.Pause, "pause"), k.Snapshot}
}

// FullHelp implements help.KeyMap: the `?` view.
func (k KeyMap) FullHelp() [][]key.Binding {
	return [][]key.Binding{
		{k.Next, k.Prev, k.Drill, k.Back, k.Sort, k.Reverse},
		{k.Up, k.Down, k.PageUp, k.PageDown, k.Top, k.Bottom},
		{k.Filter, k.Pause, k.Snapshot, k.Help, k.Quit},
	}
}

// listMove is how far a list key (up, down, page up and down, top, bottom)
// moves the selection in a list of n rows that shows page rows at a time;
// ok is false for any other key.
func (k *KeyMap) listMove(msg tea.KeyMsg, page, n int) (d int, ok bool) {
	switch {
	case key.Matches(msg, k.Up):
		return -1, true
	case key.Matches(msg, k.Down):
		return 1, true
	case key.Matches(msg, k.PageUp):
		return -page, true
	case key.Matches(msg, k.PageDown):
		return page, true
	case key.Matches(msg, k.Top):
		return -n, true
	case key.Matches(msg, k.Bottom):
		return n, true
	}
	return 0, false
}
