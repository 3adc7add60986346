package main

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/kvcanary/kvcanary/canary"
	"github.com/kvcanary/kvcanary/checksum"
	"github.com/kvcanary/kvcanary/graphdiff"
	"github.com/kvcanary/kvcanary/internal/cmdutil"
)

// writeSimRunSections prints the instruments' sections of `sim run` in the
// shape of their dedicated reports: each one's headline as `checksum
// compare`, `canary report` and `graphdiff report` print it, under the
// layer it judges, then where to get the rows. A section of another kind
// (an analyzer added later) falls back to its scalar fields as key=value.
func writeSimRunSections(w io.Writer, sections map[string]any) error {
	var b strings.Builder
	b.WriteString("\n")
	names := make([]string, 0, len(sections))
	for k := range sections {
		names = append(names, k)
	}
	// The layers in the order of a hunt: transfer, buffer, compute.
	order := map[string]int{checksum.AnalyzerName: 0, "canary": 1, "graphdiff": 2}
	sort.Slice(names, func(i, j int) bool {
		oi, iok := order[names[i]]
		oj, jok := order[names[j]]
		switch {
		case iok && jok:
			return oi < oj
		case iok != jok:
			return iok
		}
		return names[i] < names[j]
	})
	for _, k := range names {
		switch s := sections[k].(type) {
		case checksum.Summary:
			fmt.Fprintf(&b, "transfer (room checksums): %s\n", checksumSummaryHeadline(s))
		case canary.Summary:
			if s.Replays == 0 && s.BetweenChecks == 0 {
				b.WriteString("buffer (replay canary):    not checked (no canary.pages events)\n")
				continue
			}
			fmt.Fprintf(&b, "buffer (replay canary):    %s\n", canaryHeadline(&s))
			fmt.Fprintf(&b, "                           %s\n", canaryBetweenHeadline(&s))
			if s.MissingStores > 0 {
				fmt.Fprintf(&b, "                           MISSING STORES: %s expected pages did not change\n", cmdutil.Commas(s.MissingStores))
			}
		case graphdiff.Summary:
			fmt.Fprintf(&b, "compute (graph vs eager):  %s\n", graphDiffHeadline(&s))
		default:
			line, err := scalarLine(s)
			if err != nil {
				return fmt.Errorf("encode %s summary: %w", k, err)
			}
			fmt.Fprintf(&b, "%s: %s\n", k, line)
		}
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
