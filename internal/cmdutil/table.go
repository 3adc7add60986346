package cmdutil

import (
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteTable prints rows (the first is the header) as columns aligned with
// two spaces on a terminal (tty), and as tab-separated lines in a pipe, so
// cut and awk see one field per cell. Cells are printed as given: quote
// untrusted ones with Quote first. A cell must not contain a tab or newline.
func WriteTable(w io.Writer, tty bool, rows [][]string) error {
	if !tty {
		var b strings.Builder
		for _, r := range rows {
			b.WriteString(strings.Join(r, "\t"))
			b.WriteByte('\n')
		}
		_, err := io.WriteString(w, b.String())
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range rows {
		if _, err := io.WriteString(tw, strings.Join(r, "\t")+"\n"); err != nil {
			return err
		}
	}
	return tw.Flush()
}

// Commas formats n with thousands separators: 5120 → "5,120".
func Commas(n uint64) string {
	s := strconv.FormatUint(n, 10)
	var b strings.Builder
	b.Grow(len(s) + len(s)/3)
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
