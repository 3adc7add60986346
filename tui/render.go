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
