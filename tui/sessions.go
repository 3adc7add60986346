package tui

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// sessionSort is a column the sessions table sorts by.
type sessionSort int

const (
	sortOutcome sessionSort = iota // corrupted first, then by class; the default
	sortSession                    // session id
	sortRound                      // the round that went wrong
	sortArrival                    // the order sessions finished in
	sortLimit
)

var sortNames = [sortLimit]string{"outcome", "session", "round", "finished"}

// outcomeRank orders outcome classes for the table: corrupted classes first.
var outcomeRank = map[string]int{hook.OutcomeLeak: 0, hook.OutcomeNoTool: 1, hook.OutcomeError: 2,
	hook.OutcomeTimeout: 3, hook.OutcomeMaxRounds: 4, hook.OutcomeDone: 5}

// SessionsTable is the sessions panel opened (enter): every session the run
// kept, sortable by outcome, id, failed round or finishing order, with the
// reason and the excerpt of the reply that ended it; the selected session's
// whole excerpt shows below the table.
type SessionsTable struct {
	panelBase
	keys   *KeyMap
	open   bool
	by     sessionSort
	desc   bool
	order  []int // indices into s.SessionRows, sorted
	sel    int   // index into order
	selSeq uint64
}

// NewSessionsTable returns the (closed) sessions table.
func NewSessionsTable(st *Styles, keys *KeyMap) *SessionsTable {
	return &SessionsTable{panelBase: panelBase{st: st}, keys: keys}
}

// Opened reports whether the table is shown.
func (p *SessionsTable) Opened() bool { return p.open }

// Open shows the table, sorted, the first row selected.
func (p *SessionsTable) Open() {
	p.open, p.sel, p.selSeq = true, 0, 0
	p.resort()
}

// Selected returns the selected row, if any.
func (p *SessionsTable) Selected() (SessionRow, bool) {
	if p.s == nil || p.sel < 0 || p.sel >= len(p.order) {
		return SessionRow{}, false
	}
	return p.s.SessionRows[p.order[p.sel]], true
}

// SortedBy names the sort column and direction ("outcome", false).
func (p *SessionsTable) SortedBy() (string, bool) { return sortNames[p.by], p.desc }

// Update takes StateMsg and, when open, the table's keys: move, sort by the
// next column, reverse, back.
func (p *SessionsTable) Update(msg tea.Msg) (*SessionsTable, tea.Cmd) {
	switch msg := msg.(type) {
	case StateMsg:
		p.take(msg)
		if p.open {
			p.resort()
		}
	case tea.KeyMsg:
		if !p.open {
			break
		}
		switch d, nav := p.keys.listMove(msg, max(1, p.rows()), len(p.order)); {
		case key.Matches(msg, p.keys.Back):
			p.open = false
		case nav:
			p.move(d)
		case key.Matches(msg, p.keys.Sort):
			p.by = (p.by + 1) % sortLimit
			p.resort()
		case key.Matches(msg, p.keys.Reverse):
			p.desc = !p.desc
			p.resort()
		}
	}
	return p, nil
}

func (p *SessionsTable) move(d int) {
	if len(p.order) == 0 {
		return
	}
	p.sel = max(0, min(len(p.order)-1, p.sel+d))
	p.selSeq = p.s.SessionRows[p.order[p.sel]].Seq
}

// resort orders the rows and keeps the selected session selected.
func (p *SessionsTable) resort() {
	if p.s == nil {
		p.order = p.order[:0]
		return
	}
	rows := p.s.SessionRows
	p.order = p.order[:0]
	for i := range rows {
		p.order = append(p.order, i)
	}
	less := func(a, b *SessionRow) int {
		switch p.by {
		case sortOutcome:
			ra, oka := outcomeRank[a.Outcome]
			rb, okb := outcomeRank[b.Outcome]
			if !oka {
				ra = len(outcomeRank)
			}
			if !okb {
				rb = len(outcomeRank)
			}
			if ra != rb {
				return ra - rb
			}
		case sortSession:
			if c := strings.Compare(a.ID, b.ID); c != 0 {
				return c
			}
		case sortRound:
			if a.Round != b.Round {
				return a.Round - b.Round
			}
		}
		return int(a.Seq) - int(b.Seq)
	}
	sort.SliceStable(p.order, func(i, j int) bool {
		c := less(&rows[p.order[i]], &rows[p.order[j]])
		if p.desc {
			return c > 0
		}
		return c < 0
	})
	if len(p.order) == 0 {
		p.sel = 0
		return
	}
	p.sel = min(p.sel, len(p.order)-1)
	if p.selSeq != 0 {
		for i, k := range p.order {
			if rows[k].Seq == p.selSeq {
				p.sel = i
				break
			}
		}
	}
	p.selSeq = rows[p.order[p.sel]].Seq
}

// detailLines is how many lines the selected session's excerpt may take.
func (p *SessionsTable) detailLines() int { return max(2, (p.h-2)/3) }

// rows is how many table rows fit.
func (p *SessionsTable) rows() int { return max(0, p.h-3-1-1-p.detailLines()) }

// View draws the table and, below it, the selected session in full.
func (p *SessionsTable) View() string {
	st := p.st
	iw := max(1, p.w-2)
	title := "sessions"
	if p.s != nil {
		title = fmt.Sprintf("sessions %d (corrupt %d)", p.s.SessionRowsTotal, p.s.Sessions.Corrupted)
		if p.s.SessionRowsTotal > uint64(len(p.s.SessionRows)) {
			title += fmt.Sprintf("  (newest %d kept)", len(p.s.SessionRows))
		}
	}
	dir := "↑"
	if p.desc {
		dir = "↓"
	}
	title += fmt.Sprintf("  sort: %s %s  (o next column, r reverse, esc back)", sortNames[p.by], dir)
	if p.s == nil || len(p.s.SessionRows) == 0 {
		return st.frame(title, p.notMeasured(needsSessions), p.w, p.h, true)
	}
	// session, outcome, round, request, then reason and excerpt share the rest.
	idW, reqW := 8, 18
	for _, k := range p.order {
		idW = max(idW, min(16, ansi.StringWidth(p.s.SessionRows[k].ID)))
	}
	const outW, rdW = 9, 5
	restW := max(10, iw-2-idW-1-outW-1-rdW-1-reqW-1)
	head := "  " + fmt.Sprintf("%-*s %-*s %*s %-*s %s", idW, "session", outW, "outcome", rdW, "round", reqW, "request", "reason · excerpt")
	lines := []string{st.Label.Render(fit(head, iw))}
	rows := p.rows()
	start, end := visible(p.sel, rows, len(p.order))
	for i := start; i < end; i++ {
		r := &p.s.SessionRows[p.order[i]]
		mark := "  "
		if i == p.sel {
			mark = "> "
		}
		round := "-"
		if r.Round > 0 {
			round = strconv.Itoa(r.Round)
		}
		text := r.Reason
		if r.Excerpt != "" {
			if text != "" {
				text += " · "
			}
			text += r.Excerpt
		}
		out := fit(r.Outcome, outW)
		if r.Corrupted {
			out = st.Mismatch.Render(out)
		}
		l := mark + fit(r.ID, idW) + " " + out + " " + fmt.Sprintf("%*s", rdW, round) + " " + fit(r.Request, reqW) + " " + fit(text, restW)
		if i == p.sel {
			l = st.Selected.Render(ansi.Strip(fit(l, iw)))
		}
		lines = append(lines, l)
	}
	for len(lines) < rows+1 {
		lines = append(lines, "")
	}
	// The selected session in full: its reason and the whole excerpt.
	lines = append(lines, st.Muted.Render(strings.Repeat("─", iw)))
	if r, ok := p.Selected(); ok {
		var d []string
		head := st.Label.Render("session") + " " + r.ID + "  " + st.Label.Render("outcome") + " " + r.Outcome
		if r.Round > 0 {
			head += "  " + st.Label.Render("round") + " " + strconv.Itoa(r.Round)
		}
		if r.Request != "" {
			head += "  " + st.Label.Render("request") + " " + r.Request
		}
		d = append(d, head)
		if r.Reason != "" {
			d = append(d, wrap(st.Label.Render("reason")+" "+r.Reason, iw)...)
		}
		switch {
		case r.Excerpt != "":
			d = append(d, wrap(st.Label.Render("excerpt")+" "+r.Excerpt, iw)...)
		case r.Corrupted && r.Outcome != "error":
			// A failed request has no reply (its reason says why); a reply
			// judged corrupted without one came from a producer that keeps
			// none (older repro and twin versions).
			d = append(d, st.Muted.Render("no excerpt in this session event (its producer kept none)"))
		}
		if len(d) > p.detailLines() {
			d = append(d[:p.detailLines()-1], st.Muted.Render("…"))
		}
		lines = append(lines, d...)
	}
	return st.frame(title, lines, p.w, p.h, true)
}
