package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/kvcanary/kvcanary/checksum"
	"github.com/kvcanary/kvcanary/internal/analyzers"
	"github.com/kvcanary/kvcanary/internal/cmdutil"
)

// writeSimRunSections prints the instruments' sections of `sim run` in the
// shape of their dedicated reports: each one's headline as `checksum
// compare`, `canary report` and `graphdiff report` print it, under the
// layer it judges — transfer, buffer, compute, the order of a hunt — then
// where to get the rows. An analyzer that did not run has no line.
func writeSimRunSections(w io.Writer, sums analyzers.Summaries) error {
	var b strings.Builder
	b.WriteString("\n")
	if s := sums.Checksum; s != nil {
		fmt.Fprintf(&b, "transfer (room checksums): %s\n", checksumSummaryHeadline(*s))
	}
	switch s := sums.Canary; {
	case s == nil:
	case s.Replays == 0 && s.BetweenChecks == 0:
		b.WriteString("buffer (replay canary):    not checked (no canary.pages events)\n")
	default:
		fmt.Fprintf(&b, "buffer (replay canary):    %s\n", canaryHeadline(s))
		fmt.Fprintf(&b, "                           %s\n", canaryBetweenHeadline(s))
		if s.MissingStores > 0 {
			fmt.Fprintf(&b, "                           MISSING STORES: %s expected pages did not change\n", cmdutil.Commas(s.MissingStores))
		}
	}
	if s := sums.Graphdiff; s != nil {
		fmt.Fprintf(&b, "compute (graph vs eager):  %s\n", graphDiffHeadline(s))
	}
	b.WriteString("rows and samples: `kvcanary checksum compare`, `canary report`, `graphdiff report` on a --record bundle\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// checksumSummaryHeadline is the live analyzer's counts in the words of
// `checksum compare`'s headline: "22/40 rooms match; 17 mismatch; 1 warmup".
func checksumSummaryHeadline(s checksum.Summary) string {
	if s.Rooms == 0 {
		return "no rooms checked (no room.checksum events)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s/%s rooms match", cmdutil.Commas(uint64(s.Matched)), cmdutil.Commas(uint64(s.Rooms)))
	for _, c := range []struct {
		n    int
		what string
	}{{s.Mismatched, "mismatch"}, {s.Warmup, "warmup"}, {s.Missing, "with one side only"}, {s.Repeats, "repeated records"}} {
		if c.n > 0 {
			fmt.Fprintf(&b, "; %s %s", cmdutil.Commas(uint64(c.n)), c.what)
		}
	}
	return b.String()
}
