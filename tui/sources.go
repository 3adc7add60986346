package tui

import (
	"fmt"
	"sort"
	"strings"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// SourceRow is one group of event sources: the events that came from one
// host in one role (its Src.Node and Src.Proc: "gpu-a/sglang-prefill").
type SourceRow struct {
	Name   string
	Events uint64
}

// maxSourceGroups bounds the groups kept; events of further sources count
// under "other".
const maxSourceGroups = 32

// sourceGroups counts events per source group. Events without a source
// (the analyzers' findings) are not counted.
type sourceGroups struct {
	idx   map[string]int
	rows  []SourceRow
	other uint64
	// The last event's source and its row (-1: "other"): a stream from one
	// source never builds its key again.
	last    hook.Source
	lastRow int
	cached  bool
}

// sourceKey names an event's group: host, then the engine's role and rank
// when it states them ("decode-host/decode r1"), else its process name.
func sourceKey(src hook.Source) string {
	who := src.Proc
	if src.Role != "" {
		who = fmt.Sprintf("%s r%d", src.Role, src.Rank)
	}
	switch {
	case src.Node == "":
		return who
	case who == "":
		return src.Node
	}
	return src.Node + "/" + who
}

func (g *sourceGroups) add(ev *hook.Event) {
	if ev.Src.Node == "" && ev.Src.Proc == "" && ev.Src.Role == "" {
		return
	}
	if g.cached && ev.Src == g.last {
		if g.lastRow < 0 {
			g.other++
		} else {
			g.rows[g.lastRow].Events++
		}
		return
	}
	k := sourceKey(ev.Src)
	g.last, g.cached = ev.Src, true
	if i, ok := g.idx[k]; ok {
		g.rows[i].Events++
		g.lastRow = i
		return
	}
	if len(g.rows) >= maxSourceGroups {
		g.other++
		g.lastRow = -1
		return
	}
	g.lastRow = len(g.rows)
	if g.idx == nil {
		g.idx = map[string]int{}
	}
	g.idx[k] = len(g.rows)
	g.rows = append(g.rows, SourceRow{Name: quoteAll(k), Events: 1})
}

// snapshot returns the groups by name, "other" last.
func (g *sourceGroups) snapshot() []SourceRow {
	if len(g.rows) == 0 {
		return nil
	}
	out := make([]SourceRow, len(g.rows), len(g.rows)+1)
	copy(out, g.rows)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	if g.other > 0 {
		out = append(out, SourceRow{Name: "other", Events: g.other})
	}
	return out
}

// sourcesLine is the header's grouping of several sources ("sources 2:
// gpu-a/sglang-prefill 1.2k · gpu-b/sglang-decode 980"); "" for one source,
// whose host the header already names.
func sourcesLine(st *Styles, rows []SourceRow) string {
	if len(rows) < 2 {
		return ""
	}
	parts := make([]string, 0, len(rows))
	for _, r := range rows {
		parts = append(parts, r.Name+" "+st.Value.Render(human(r.Events)))
	}
	return st.Label.Render("sources") + " " + strings.Join(parts, st.Muted.Render(" · "))
}
