package tui

import (
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// FilterMsg sets the findings filter (case-insensitive substring of the
// summary, analyzer, severity or any evidence value; "" shows all).
type FilterMsg struct{ Filter string }

// FindingsPanel is the scrollable, filterable findings log; enter opens the
// selected finding's evidence.
type FindingsPanel struct {
	panelBase
	keys   *KeyMap
	filter string
	shown  []int  // indices into s.Findings that pass the filter
	sel    int    // index into shown
	selSeq uint64 // Seq of the selected finding, to keep it across frames
	follow bool   // keep the newest finding selected
	drill  *FindingItem
	scroll int // evidence view scroll
}

// NewFindingsPanel returns the findings log, following the newest finding.
func NewFindingsPanel(st *Styles, keys *KeyMap) *FindingsPanel {
	return &FindingsPanel{panelBase: panelBase{st: st}, keys: keys, follow: true}
}

// Drilled reports whether the evidence view is open.
func (p *FindingsPanel) Drilled() bool { return p.drill != nil }

// Selected returns the selected finding, if any.
func (p *FindingsPanel) Selected() (FindingItem, bool) {
	if p.s == nil || p.sel < 0 || p.sel >= len(p.shown) {
		return FindingItem{}, false
	}
	return p.s.Findings[p.shown[p.sel]], true
}

// Filter is the current filter text.
func (p *FindingsPanel) Filter() string { return p.filter }

// Update takes StateMsg, FilterMsg and, when focused, navigation keys.
func (p *FindingsPanel) Update(msg tea.Msg) (*FindingsPanel, tea.Cmd) {
	switch msg := msg.(type) {
	case StateMsg:
		p.take(msg)
		p.refilter()
	case FilterMsg:
		p.filter = msg.Filter
		p.refilter()
	case tea.KeyMsg:
		if !p.focused {
			break
		}
		if p.drill != nil {
			switch {
			case key.Matches(msg, p.keys.Back), key.Matches(msg, p.keys.Drill):
				p.drill = nil
			case key.Matches(msg, p.keys.Up):
				p.scroll = max(0, p.scroll-1)
			case key.Matches(msg, p.keys.Down):
				p.scroll++
			}
			break
		}
		switch d, nav := p.keys.listMove(msg, max(1, p.h-3), len(p.shown)); {
		case nav:
			p.move(d)
		case key.Matches(msg, p.keys.Drill):
			if it, ok := p.Selected(); ok {
				p.drill, p.scroll = &it, 0
			}
		}
	}
	return p, nil
}

func (p *FindingsPanel) move(d int) {
	if len(p.shown) == 0 {
		return
	}
	p.sel = max(0, min(len(p.shown)-1, p.sel+d))
	p.follow = p.sel == len(p.shown)-1
	p.selSeq = p.s.Findings[p.shown[p.sel]].Seq
}

func (p *FindingsPanel) refilter() {
	if p.s == nil {
		return
	}
	fs := p.s.Findings
	p.shown = p.shown[:0]
	for i := range fs {
		if fs[i].matches(p.filter) {
			p.shown = append(p.shown, i)
		}
	}
	if len(p.shown) == 0 {
		p.sel = 0
		return
	}
	if p.follow {
		p.sel = len(p.shown) - 1
	} else {
		// Keep the selected finding; if it was filtered out or evicted, the
		// nearest newer one.
		p.sel = sort.Search(len(p.shown), func(i int) bool { return fs[p.shown[i]].Seq >= p.selSeq })
		p.sel = min(p.sel, len(p.shown)-1)
	}
	p.selSeq = fs[p.shown[p.sel]].Seq
}

func (p *FindingsPanel) sevTag(s hook.Severity) string {
	switch s {
	case hook.SevError:
		return p.st.Mismatch.Render("ERR")
	case hook.SevWarn:
		return p.st.Warn.Render("WRN")
	case hook.SevInfo:
		return p.st.Muted.Render("INF")
	}
	return p.st.Muted.Render(fit(quoteAll(string(s)), 3))
}

func (p *FindingsPanel) summaryStyle(it *FindingItem) string {
	if strings.HasPrefix(it.Summary, "LIVE-PAGE-OVERWRITE") {
		return p.st.Overwrite.Render(it.Summary)
	}
	if it.Severity == hook.SevError {
		return p.st.Mismatch.Render(it.Summary)
	}
	return it.Summary
}

// View draws the log (or, drilled in, the evidence view at the same size).
func (p *FindingsPanel) View() string {
	if p.drill != nil {
		return p.evidenceView()
	}
	st := p.st
	title := "findings"
	if p.s != nil {
		title = fmt.Sprintf("findings %s (error %s, warn %s)", human(p.s.FindingsTotal),
			human(p.s.BySeverity[hook.SevError]), human(p.s.BySeverity[hook.SevWarn]))
	}
	if p.filter != "" {
		title += fmt.Sprintf("  filter %q: %d shown", p.filter, len(p.shown))
	}
	if p.s != nil && p.s.FindingsTotal > uint64(len(p.s.Findings)) {
		title += fmt.Sprintf("  (newest %d kept)", len(p.s.Findings))
	}
	rows := max(0, p.h-3)
	var lines []string
	switch {
	case p.s == nil || len(p.s.Findings) == 0:
		lines = []string{st.Muted.Render("no findings yet")}
	case len(p.shown) == 0:
		lines = []string{st.Muted.Render("no finding matches the filter")}
	default:
		start, end := visible(p.sel, rows, len(p.shown))
		for i := start; i < end; i++ {
			it := &p.s.Findings[p.shown[i]]
			mark := "  "
			if i == p.sel && p.focused {
				mark = "> "
			}
			l := fmt.Sprintf("%s%s #%-4d %-9s %s", mark, p.sevTag(it.Severity), it.Seq, it.Analyzer, p.summaryStyle(it))
			if i == p.sel && p.focused {
				l = st.Selected.Render(ansi.Strip(fit(l, p.w-2)))
			}
			lines = append(lines, l)
		}
	}
	return st.frame(title, lines, p.w, p.h, p.focused)
}

func (p *FindingsPanel) evidenceView() string {
	st, it := p.st, p.drill
	iw := max(1, p.w-2)
	lines := []string{
		p.sevTag(it.Severity) + " " + st.Label.Render("analyzer") + " " + it.Analyzer + "  " + st.Label.Render("time") + " " +
			time.Unix(0, it.TS).UTC().Format("2006-01-02 15:04:05.000 UTC"),
	}
	if it.Source != "" {
		lines = append(lines, st.Label.Render("source")+" "+it.Source)
	}
	for _, l := range wrap(it.Summary, iw) {
		lines = append(lines, p.summaryStyle(&FindingItem{Summary: l, Severity: it.Severity}))
	}
	lines = append(lines, "", st.Label.Render("evidence"))
	kw := 0
	for _, kv := range it.Evidence {
		kw = max(kw, len(kv.Key))
	}
	if len(it.Evidence) == 0 {
		lines = append(lines, st.Muted.Render("(none)"))
	}
	for _, kv := range it.Evidence {
		first := true
		for _, l := range wrap(kv.Value, max(10, iw-kw-3)) {
			k := strings.Repeat(" ", kw)
			if first {
				k = fmt.Sprintf("%-*s", kw, kv.Key)
			}
			first = false
			lines = append(lines, "  "+st.Label.Render(k)+" "+l)
		}
	}
	body := max(0, p.h-3)
	p.scroll = min(p.scroll, max(0, len(lines)-body))
	lines = lines[p.scroll:]
	return st.frame(fmt.Sprintf("finding #%d evidence  (esc back, ↑/↓ scroll)", it.Seq), lines, p.w, p.h, true)
}

// wrap splits s into lines of at most w cells, between words where it can
// (a word longer than a line is cut at the cell width).
func wrap(s string, w int) []string {
	if w <= 0 || ansi.StringWidth(s) <= w {
		return []string{s}
	}
	var out []string
	line, lw := "", 0
	for _, word := range strings.Split(s, " ") {
		ww := ansi.StringWidth(word)
		switch {
		case lw == 0 && ww <= w:
			line, lw = word, ww
		case lw > 0 && lw+1+ww <= w:
			line, lw = line+" "+word, lw+1+ww
		default:
			if lw > 0 {
				out = append(out, line)
			}
			parts := hardWrap(word, w)
			out = append(out, parts[:len(parts)-1]...)
			line = parts[len(parts)-1]
			lw = ansi.StringWidth(line)
		}
	}
	return append(out, line)
}

// hardWrap splits s into lines of at most w cells, cutting anywhere.
func hardWrap(s string, w int) []string {
	if w <= 0 || ansi.StringWidth(s) <= w {
		return []string{s}
	}
	var out []string
	for ansi.StringWidth(s) > w {
		cut := ansi.Truncate(s, w, "")
		if cut == "" { // a character wider than w: give it a line
			_, size := utf8.DecodeRuneInString(s)
			cut = s[:size]
		}
		out = append(out, cut)
		s = s[len(cut):]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}
