package cmdutil

import (
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteTable prints rows (the first is the header) as columns aligned with
// two spaces, on a terminal and in a pipe alike: a report read through less,
// a CI log or a file lines up as it does on screen (64-bit hex digests made
// tab stops useless). Scripts read --json, one object per report. tty is
// kept for styling a terminal may get later; today both print the same.
// Cells are printed as given: quote untrusted ones with Quote first. A cell
// must not contain a tab or newline.
func WriteTable(w io.Writer, tty bool, rows [][]string) error {
	_ = tty
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range rows {
		if _, err := io.WriteString(tw, strings.TrimRight(strings.Join(r, "\t"), "\t")+"\n"); err != nil {
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
