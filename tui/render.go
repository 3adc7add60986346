package tui

import (
	"fmt"
	"math"
	"strings"

	"github.com/charmbracelet/x/ansi"
)

// frame draws a panel of outer size w×h: a border (double when focused, so
// focus shows without colour), the title on the first line and the body
// lines clipped to the inside.
func (st *Styles) frame(title string, lines []string, w, h int, focused bool) string {
	if w < 4 || h < 3 {
		return ""
	}
	iw, ih := w-2, h-2
	out := make([]string, 0, ih)
	out = append(out, st.Title.Render(ansi.Truncate(title, iw, "…")))
	for _, l := range lines {
		if len(out) == ih {
			break
		}
		out = append(out, ansi.Truncate(l, iw, "…"))
	}
	for len(out) < ih {
		out = append(out, "")
	}
	box := st.Panel
	if focused {
		box = st.Focused
	}
	return box.Width(iw).Height(ih).Render(strings.Join(out, "\n"))
}

// visible is the part [start, end) of a list of n rows that a view of rows
// lines shows: the top, or scrolled just enough to keep the selected row
// sel in view.
func visible(sel, rows, n int) (start, end int) {
	if sel >= rows {
		start = sel - rows + 1
	}
	return start, min(n, start+rows)
}

// fit clips or pads each line to exactly w cells.
func fit(s string, w int) string {
	if w <= 0 {
		return ""
	}
	s = ansi.Truncate(s, w, "…")
	if n := ansi.StringWidth(s); n < w {
		s += strings.Repeat(" ", w-n)
	}
	return s
}

var sparkRunes = []rune(" ▁▂▃▄▅▆▇█")

// sparkline draws vals (oldest first) in the last w cells, scaled to the
// largest value (or to top when top > 0). A zero is blank, any positive value
// at least one eighth.
func sparkline(vals []float64, w int, top float64) string {
	if w <= 0 {
		return ""
	}
	if len(vals) > w {
		vals = vals[len(vals)-w:]
	}
	if top <= 0 {
		for _, v := range vals {
			top = math.Max(top, v)
		}
	}
	var b strings.Builder
	for i := len(vals); i < w; i++ {
		b.WriteRune(' ')
	}
	for _, v := range vals {
		switch {
		case v <= 0 || top <= 0:
			b.WriteRune(' ')
		default:
			i := int(math.Ceil(v / top * 8))
			i = max(1, min(8, i))
			b.WriteRune(sparkRunes[i])
		}
	}
	return b.String()
}

// marks draws a '^' for each bucket with a positive value (retractions).
func marks(vals []float64, w int) string {
	if w <= 0 {
		return ""
	}
	if len(vals) > w {
		vals = vals[len(vals)-w:]
	}
	var b strings.Builder
	b.WriteString(strings.Repeat(" ", w-len(vals)))
	for _, v := range vals {
		if v > 0 {
			b.WriteByte('^')
		} else {
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// bar draws a horizontal bar of n of w cells.
func bar(n, w int) string {
	n = max(0, min(n, w))
	return strings.Repeat("█", n)
}

// human formats a count compactly: 999, 1.2k, 3.4M.
func human(n uint64) string {
	switch {
	case n < 10_000:
		return fmt.Sprint(n)
	case n < 1_000_000:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	case n < 1_000_000_000:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	}
	return fmt.Sprintf("%.1fG", float64(n)/1e9)
}

// humanRate formats a per-second rate.
func humanRate(r float64) string {
	if r < 0 || math.IsNaN(r) || math.IsInf(r, 0) {
		r = 0
	}
	return human(uint64(r + 0.5))
}

// bytesGiB formats a byte count in GiB with one decimal.
func bytesGiB(b uint64) string { return fmt.Sprintf("%.1fG", float64(b)/(1<<30)) }

func pct1(x float64) string { return fmt.Sprintf("%.1f%%", 100*x) }

// flow packs items into lines of at most w cells, two spaces apart, in
// order: the first items are the ones a narrow panel keeps on screen, so a
// panel lists its decisive numbers first. An item wider than w gets a line
// of its own (and is clipped by the frame).
func flow(items []string, w int) []string {
	var lines []string
	cur, cw := "", 0
	for _, it := range items {
		iw := ansi.StringWidth(it)
		switch {
		case cur == "":
			cur, cw = it, iw
		case cw+2+iw <= w:
			cur, cw = cur+"  "+it, cw+2+iw
		default:
			lines = append(lines, cur)
			cur, cw = it, iw
		}
	}
	if cur != "" {
		lines = append(lines, cur)
	}
	return lines
}

// sparkRow is a labelled sparkline: the label, the line in the cells left
// and, at the right, the scale — the value a full cell stands for ("top 23",
// or the fixed top when top > 0). A series with no positive value says so.
func sparkRow(st *Styles, label string, vals []float64, w int, top float64, style func(...string) string) string {
	sw, scale := sparkGeom(label, vals, w, top)
	row := st.Label.Render(label) + " " + style(sparkline(vals, sw, top))
	if scale != "" {
		row += " " + st.Muted.Render(scale)
	}
	return row
}

// sparkGeom is sparkRow's layout: the line's cells and the scale text ("" when
// the row is too narrow for one).
func sparkGeom(label string, vals []float64, w int, top float64) (int, string) {
	peak := top
	if peak <= 0 {
		for _, v := range vals {
			peak = math.Max(peak, v)
		}
	}
	scale := "top " + fmtScale(peak)
	lw := ansi.StringWidth(label)
	if sw := w - lw - 1 - len(scale) - 1; sw >= 4 {
		return sw, scale
	}
	return max(0, w-lw-1), ""
}

// sparkAxis is the time axis under a panel's sparklines: how much event
// time they span (one cell a bucket of bucketNS), newest at the right.
func sparkAxis(st *Styles, cells int) string {
	secs := int64(cells) * bucketNS / 1e9
	return st.Muted.Render(fmt.Sprintf("sparklines: last %ds, 1 cell = %ds →now", secs, bucketNS/1e9))
}

func fmtScale(v float64) string {
	switch {
	case v <= 0 || math.IsNaN(v) || math.IsInf(v, 0):
		return "0"
	case v < 10 && v != math.Trunc(v):
		return fmt.Sprintf("%.2f", v)
	}
	return human(uint64(v + 0.5))
}
