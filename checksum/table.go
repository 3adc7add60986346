package checksum

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/kvcanary/kvcanary/internal/safetext"
	"github.com/kvcanary/kvcanary/runtime/hook"
)

// The report's tables as rows of cells (header first), for a text sink to
// align: untrusted strings (room evidence, host names) are already quoted
// with safetext.Quote.

// NamedProducers reports whether grouping by producer says something: the
// records name their hosts (bundles recorded by a collector), or a side
// has several ranks. Text logs without either keep the plain table.
func (r *Report) NamedProducers() bool {
	ranks := map[string]bool{}
	for _, p := range r.Producers {
		if p.Node != "" {
			return true
		}
		ranks[string(p.Role)+"/"+strconv.Itoa(p.Rank)] = true
	}
	return len(ranks) > 2
}

// NonMatchingTable is the table of the first limit non-matching rooms. With
// several records per room, PREFILL is the reference record and DECODE the
// first disagreeing decode record; REASON names them all. A FROM column
// names the producers when NamedProducers.
func (r *Report) NonMatchingTable(limit int) [][]string {
	named := r.NamedProducers()
	rows := [][]string{{"ROOM", "CLASS", "SEQ_LEN", "PREFILL BSUM", "PREFILL XXH3", "DECODE BSUM", "DECODE XXH3", "PAGES", "REASON"}}
	if named {
		rows[0] = append(rows[0], "FROM")
	}
	for i := range r.NonMatching {
		if i == limit {
			break
		}
		rr := &r.NonMatching[i]
		if rr.Class == ClassDuplicate || len(rr.Duplicates) > 0 {
			rows = append(rows, duplicateRows(rr, named)...)
			continue
		}
		rows = append(rows, roomRow(rr, named))
	}
	return rows
}

// ProducerTable summarizes the compare per producer (host, role, rank): the
// rooms it has records in and how many of them did not match.
func (r *Report) ProducerTable() [][]string {
	rows := [][]string{{"HOST", "ROLE", "RANK", "ROOMS", "MATCH", "NON-MATCHING", "MISMATCH", "MISSING", "DUPLICATE", "WARMUP"}}
	for _, p := range r.Producers {
		host := p.Node
		if host == "" {
			host = "?"
		}
		c := p.Classes
		rows = append(rows, []string{safetext.Quote(host), string(p.Role), strconv.Itoa(p.Rank), strconv.Itoa(p.Rooms),
			strconv.Itoa(c.Match), strconv.Itoa(p.NonMatching()), strconv.Itoa(c.Mismatch),
			strconv.Itoa(c.MissingDecode + c.MissingPrefill), strconv.Itoa(c.Duplicate), strconv.Itoa(c.Warmup)})
	}
	return rows
}

// reasonCell is the room's reason with its quoted evidence.
func reasonCell(rr *RoomResult) string {
	reason := rr.Reason
	if len(rr.Evidence) > 0 {
		reason += " (" + safetext.Quote(strings.Join(rr.Evidence, ", ")) + ")"
	}
	return reason
}

// duplicateRows is one row per differing record of a room seen twice.
func duplicateRows(rr *RoomResult, named bool) [][]string {
	room, reason := strconv.FormatUint(uint64(rr.Room), 10), reasonCell(rr)
	var rows [][]string
	for _, d := range rr.Duplicates {
		pb, px, db, dx := "-", "-", "-", "-"
		if d.Side == hook.SidePrefill {
			pb, px = d.Bsum.String(), xxh3Cell(d.XXH3)
		} else {
			db, dx = d.Bsum.String(), xxh3Cell(d.XXH3)
		}
		who := string(d.Side)
		if d.Rank != 0 || d.Stage != "" || d.Node != "" {
			who = RecordID{Side: d.Side, Rank: d.Rank, Stage: d.Stage, Node: d.Node}.String()
		}
		row := []string{room, fmt.Sprintf("%s (%s)", rr.Class, safetext.Quote(who)), strconv.Itoa(d.SeqLen), pb, px, db, dx, "-", reason}
		if named {
			row = append(row, safetext.Quote(producerCell(&RecordID{Side: d.Side, Rank: d.Rank, Node: d.Node})))
		}
		rows = append(rows, row)
	}
	return rows
}

// roomRow is the row of a room whose sides disagree or are missing.
func roomRow(rr *RoomResult, named bool) []string {
	seq := strconv.Itoa(rr.SeqLen)
	if rr.Prefill != nil && rr.Decode != nil && rr.Prefill.SeqLen != rr.Decode.SeqLen {
		seq = fmt.Sprintf("%d/%d", rr.Prefill.SeqLen, rr.Decode.SeqLen)
	}
	pb, px, db, dx := "-", "-", "-", "-"
	if rr.Prefill != nil {
		pb, px = rr.Prefill.Bsum.String(), xxh3Cell(rr.Prefill.XXH3)
	}
	if rr.Decode != nil {
		db, dx = rr.Decode.Bsum.String(), xxh3Cell(rr.Decode.XXH3)
	}
	row := []string{strconv.FormatUint(uint64(rr.Room), 10), rr.Class, seq, pb, px, db, dx, pagesCell(rr), reasonCell(rr)}
	if named {
		row = append(row, safetext.Quote(fromCell(rr)))
	}
	return row
}

// pagesCell locates a mismatch: "8-15 (tokens 512-1024) on layers 0-2".
func pagesCell(rr *RoomResult) string {
	pages := "-"
	if len(rr.MismatchPages) > 0 {
		var ts []string
		for _, t := range rr.MismatchTokens {
			ts = append(ts, fmt.Sprintf("%d-%d", t.Lo, t.Hi))
		}
		pages = intRanges(rr.MismatchPages) + " (tokens " + strings.Join(ts, ",") + ")"
	}
	if len(rr.MismatchLayers) > 0 {
		on := "layer " + intRanges(rr.MismatchLayers)
		if len(rr.MismatchLayers) > 1 {
			on = "layers " + intRanges(rr.MismatchLayers)
		}
		if pages == "-" {
			return on
		}
		pages += " on " + on
	}
	return pages
}

// producerCell is "host prefill r0" (the host left out when unknown).
func producerCell(id *RecordID) string {
	s := fmt.Sprintf("%s r%d", id.Side, id.Rank)
	if id.Node != "" {
		s = id.Node + " " + s
	}
	return s
}

// fromCell names the producers of a room's shown digests: "A prefill r0 →
// B decode r1"; "?" for a side whose producer the input did not name.
func fromCell(rr *RoomResult) string {
	side := func(id *RecordID, have bool) string {
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

// intRanges renders sorted ints as ranges: [1 2 3 7] → "1-3,7".
func intRanges(xs []int) string {
	var parts []string
	for i := 0; i < len(xs); {
		j := i
		for j+1 < len(xs) && xs[j+1] == xs[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", xs[i], xs[j]))
		} else {
			parts = append(parts, strconv.Itoa(xs[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// xxh3Cell shows an xxh3 of 0 as "not computed" (SPEC §9: engines that
// digest on the GPU send bsum only), never as a digest that could be read as
// a value both sides happen to share.
func xxh3Cell(v hook.Hex64) string {
	if v == 0 {
		return "not computed"
	}
	return v.String()
}
