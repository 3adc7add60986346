package main

import (
	"fmt"
	"strconv"

	"github.com/kvcanary/kvcanary/checksum"
	"github.com/kvcanary/kvcanary/internal/cmdutil"
)

// namedProducers: the records name their hosts (bundles recorded by a
// collector), or a side has several ranks, so grouping by (host, role,
// rank) says something. Text logs without either keep the plain table.
func namedProducers(rep *checksum.Report) bool {
	ranks := map[string]bool{}
	for _, p := range rep.Producers {
		if p.Node != "" {
			return true
		}
		ranks[string(p.Role)+"/"+strconv.Itoa(p.Rank)] = true
	}
	return len(ranks) > 2
}

// producerCell is "host prefill r0" (the host left out when unknown).
func producerCell(id *checksum.RecordID) string {
	s := fmt.Sprintf("%s r%d", id.Side, id.Rank)
	if id.Node != "" {
		s = id.Node + " " + s
	}
	return s
}

// fromCell names the producers of a room's shown digests: "A prefill r0 →
// B decode r1"; "?" for a side whose producer the input did not name.
func fromCell(rr *checksum.RoomResult) string {
	side := func(id *checksum.RecordID, have bool) string {
		switch {
		case id != nil:
			return producerCell(id)
		case have:
			return "?"
		}
		return "-"
	}
	return side(rr.PrefillFrom, rr.Prefill != nil) + " → " + side(rr.DecodeFrom, rr.Decode != nil)
}

// writeProducerTable summarizes the compare per producer (host, role,
// rank): the rooms it has records in and how many of them did not match.
func writeProducerTable(opts *ChecksumCompareOptions, rep *checksum.Report) error {
	out := opts.IO.Out
	fmt.Fprintln(out)
	rows := [][]string{{"HOST", "ROLE", "RANK", "ROOMS", "MATCH", "NON-MATCHING", "MISMATCH", "MISSING", "DUPLICATE", "WARMUP"}}
	for _, p := range rep.Producers {
		host := p.Node
		if host == "" {
			host = "?"
		}
		c := p.Classes
		rows = append(rows, []string{cmdutil.Quote(host), string(p.Role), strconv.Itoa(p.Rank), strconv.Itoa(p.Rooms),
			strconv.Itoa(c.Match), strconv.Itoa(p.NonMatching()), strconv.Itoa(c.Mismatch),
			strconv.Itoa(c.MissingDecode + c.MissingPrefill), strconv.Itoa(c.Duplicate), strconv.Itoa(c.Warmup)})
	}
	return cmdutil.WriteTable(out, opts.IO.IsStdoutTTY(), rows)
}
