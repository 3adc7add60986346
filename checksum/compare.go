package checksum

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// DefaultWarmupMaxSeqLen is the seq_len at or below which a room is a warmup.
const DefaultWarmupMaxSeqLen = 16

// Options tune how rooms are judged.
type Options struct {
	// WarmupMaxSeqLen: rooms with seq_len at or below it are warmups. 0 means
	// DefaultWarmupMaxSeqLen; a negative value turns the seq_len rule off
	// (a decode digest of 0 still marks a warmup).
	WarmupMaxSeqLen int
}

func (o Options) warmupMax() int {
	if o.WarmupMaxSeqLen == 0 {
		return DefaultWarmupMaxSeqLen
	}
	return o.WarmupMaxSeqLen
}

// Room classes, in report order.
const (
	ClassMatch          = "match"
	ClassMismatch       = "mismatch"
	ClassWarmup         = "warmup"
	ClassMissingDecode  = "missing-decode"
	ClassMissingPrefill = "missing-prefill"
	ClassDuplicate      = "duplicate"
)

// Classes lists the room classes in report order.
var Classes = []string{ClassMatch, ClassMismatch, ClassWarmup, ClassMissingDecode, ClassMissingPrefill, ClassDuplicate}

// ClassCounts counts rooms per class.
type ClassCounts struct {
	Match          int `json:"match"`
	Mismatch       int `json:"mismatch"`
	Warmup         int `json:"warmup"`
	MissingDecode  int `json:"missing-decode"`
	MissingPrefill int `json:"missing-prefill"`
	Duplicate      int `json:"duplicate"`
}

func (c *ClassCounts) add(class string) {
	switch class {
	case ClassMatch:
		c.Match++
	case ClassMismatch:
		c.Mismatch++
	case ClassWarmup:
		c.Warmup++
	case ClassMissingDecode:
		c.MissingDecode++
	case ClassMissingPrefill:
		c.MissingPrefill++
	case ClassDuplicate:
		c.Duplicate++
	}
}

// Get returns the count of class.
func (c ClassCounts) Get(class string) int {
	switch class {
	case ClassMatch:
		return c.Match
	case ClassMismatch:
		return c.Mismatch
	case ClassWarmup:
		return c.Warmup
	case ClassMissingDecode:
		return c.MissingDecode
	case ClassMissingPrefill:
		return c.MissingPrefill
	case ClassDuplicate:
		return c.Duplicate
	}
	return 0
}

// entry is the compact per-room, per-side record compare keeps: 32 bytes.
type entry struct {
	room   uint64
	bsum   uint64
	xxh3   uint64
	seqLen uint32
	pages  uint32 // top bit: the record carried page digests
}

const hasPagesBit = 1 << 31

func (e *entry) sameDigest(o *entry) bool {
	return e.bsum == o.bsum && e.xxh3 == o.xxh3 && e.seqLen == o.seqLen && e.pages == o.pages
}

func (e *entry) digest() SideDigest {
	return SideDigest{SeqLen: int(e.seqLen), Pages: int(e.pages &^ hasPagesBit), Bsum: hook.Hex64(e.bsum), XXH3: hook.Hex64(e.xxh3)}
}

func (e *entry) zero() bool { return e.bsum == 0 && e.xxh3 == 0 }

// evidence is an engine's own mismatch report (SGLang's abort line).
type evidence struct {
	room    uint64
	hasRoom bool
	where   string // input:line
	request string
}

// SideDigest is one side's digests of a room in a report.
type SideDigest struct {
	SeqLen int        `json:"seq_len"`
	Pages  int        `json:"pages"`
	Bsum   hook.Hex64 `json:"bsum"`
	XXH3   hook.Hex64 `json:"xxh3"`
}

// Duplicate is one of the differing records of a room seen twice on a side.
type Duplicate struct {
	Side hook.Side `json:"side"`
	SideDigest
}

// TokenRange is a half-open range of a room's token indices.
type TokenRange struct {
	Lo int `json:"lo"`
	Hi int `json:"hi"`
}

// RoomResult is one room that did not match.
type RoomResult struct {
	Room           hook.Dec64   `json:"room"`
	Class          string       `json:"class"`
	SeqLen         int          `json:"seq_len"`
	Reason         string       `json:"reason"`
	Prefill        *SideDigest  `json:"prefill,omitempty"`
	Decode         *SideDigest  `json:"decode,omitempty"`
	Duplicates     []Duplicate  `json:"duplicates,omitempty"`
	MismatchPages  []int        `json:"mismatch_pages,omitempty"`  // page-table indices whose page_xxh3 differ
	MismatchTokens []TokenRange `json:"mismatch_tokens,omitempty"` // the tokens those pages hold
	Evidence       []string     `json:"evidence,omitempty"`        // input:line of engine mismatch reports
}

// EvidenceRef is an engine mismatch report that named no room.
type EvidenceRef struct {
	Where   string `json:"where"`
	Request string `json:"request,omitempty"`
}

// InputStats describes what was read from one input.
type InputStats struct {
	Name   string `json:"name"`
	Format string `json:"format"`           // "log" | "bundle" | "events"
	Events int64  `json:"events,omitempty"` // bundle/events: events read
	LogStats
}

// Report is the result of a compare.
type Report struct {
	Rooms            int           `json:"rooms"`
	Classes          ClassCounts   `json:"classes"`
	NonMatching      []RoomResult  `json:"non_matching"`
	Unattributed     []EvidenceRef `json:"unattributed_evidence,omitempty"`
	IdenticalRepeats int64         `json:"identical_repeats,omitempty"` // records repeated with the same digests (ignored)
	WarmupMaxSeqLen  int           `json:"warmup_max_seq_len"`
	PagesLocated     int           `json:"pages_located,omitempty"` // mismatching rooms whose pages were located
	Inputs           []InputStats  `json:"inputs"`
}

// Failed reports whether the compare found a problem: any room that is not a
// match or a warmup, or an engine mismatch report without a room.
func (r *Report) Failed() bool {
	c := r.Classes
	return c.Mismatch+c.MissingDecode+c.MissingPrefill+c.Duplicate > 0 || len(r.Unattributed) > 0
}

// Headline is the one-line verdict, e.g.
// "111/112 rooms match; 1 warmup (room 0, seq_len 4, decode 0)".
func (r *Report) Headline() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d/%d rooms match", r.Classes.Match, r.Rooms)
	for _, class := range Classes[1:] {
		n := r.Classes.Get(class)
		if n == 0 {
			continue
		}
		fmt.Fprintf(&b, "; %d %s", n, class)
		var shown []string
		for i := range r.NonMatching {
			rr := &r.NonMatching[i]
			if rr.Class != class {
				continue
			}
			if len(shown) == 3 {
				shown = append(shown, "…")
				break
			}
			s := fmt.Sprintf("room %d, seq_len %d", uint64(rr.Room), rr.SeqLen)
			if rr.Decode != nil && rr.Decode.Bsum == 0 && rr.Decode.XXH3 == 0 {
				s += ", decode 0"
			}
			shown = append(shown, s)
		}
		if len(shown) > 0 {
			b.WriteString(" (" + strings.Join(shown, "; ") + ")")
		}
	}
	if n := len(r.Unattributed); n > 0 {
		fmt.Fprintf(&b, "; %d engine mismatch report(s) without a room", n)
	}
	return b.String()
}

// maxLocate bounds how many mismatching rooms get their pages located.
const maxLocate = 10000

// Comparer matches prefill against decode room by room. Feed it every record
// with Add, then call Finish. Memory is 32 bytes per record and side (plus
// slice growth), whatever the input size.
type Comparer struct {
	opts     Options
	sides    [2]store
	evidence []evidence

	report *Report
	want   map[uint64]*[2][]uint64 // pass 2: rooms whose page digests are wanted
}

// NewComparer returns an empty Comparer.
func NewComparer(opts Options) *Comparer { return &Comparer{opts: opts} }

func sideIndex(s hook.Side) (int, bool) {
	switch s {
	case hook.SidePrefill:
		return 0, true
	case hook.SideDecode:
		return 1, true
	}
	return 0, false
}

// Add records r; where names its input for evidence ("decode.log"). r is not
// retained. Records with an unknown side are ignored.
func (c *Comparer) Add(r *Record, where string) {
	if r.Evidence {
		c.evidence = append(c.evidence, evidence{room: r.Room, hasRoom: r.HasRoom, where: fmt.Sprintf("%s:%d", where, r.Line), request: r.Request})
		return
	}
	s, ok := sideIndex(r.Side)
	if !ok {
		return
	}
	e := entry{room: r.Room, bsum: r.Bsum, xxh3: r.XXH3, seqLen: uint32(min(max(r.SeqLen, 0), maxCount)), pages: uint32(min(max(r.Pages, 0), maxCount))}
	if len(r.PageXXH3) > 0 {
		e.pages |= hasPagesBit
	}
	c.sides[s].add(e)
}

// Finish classifies every room and returns the report. If NeedPages then
// reports true, feed the inputs again through AddPages and call Locate to fill
// in the mismatching pages.
func (c *Comparer) Finish() *Report {
	slices.SortFunc(c.evidence, func(a, b evidence) int { return cmp.Compare(a.room, b.room) })
	r := &Report{WarmupMaxSeqLen: c.opts.warmupMax(), NonMatching: []RoomResult{}}
	var ev []evidence
	for _, e := range c.evidence {
		if e.hasRoom {
			ev = append(ev, e)
		} else {
			r.Unattributed = append(r.Unattributed, EvidenceRef{Where: e.where, Request: e.request})
		}
	}
	p, d := c.sides[0].sorted(), c.sides[1].sorted()
	var pg, dg []entry
	k := 0
	for {
		pe, pok := p.peek()
		de, dok := d.peek()
		if !pok && !dok && k == len(ev) {
			break
		}
		room := uint64(1<<64 - 1)
		if pok {
			room = pe.room
		}
		if dok && de.room < room {
			room = de.room
		}
		if k < len(ev) && ev[k].room < room {
			room = ev[k].room
		}
		pg, dg = pg[:0], dg[:0]
		for pok && pe.room == room {
			pg = append(pg, *pe)
			p.next()
			pe, pok = p.peek()
		}
		for dok && de.room == room {
			dg = append(dg, *de)
			d.next()
			de, dok = d.peek()
		}
		k0 := k
		for k < len(ev) && ev[k].room == room {
			k++
		}
		r.Rooms++
		c.judge(r, room, pg, dg, ev[k0:k])
	}
	c.report = r
	c.evidence = nil
	c.sides = [2]store{}
	return r
}

// distinct returns g's first entry and the entries with other digests, and
// how many repeated the same digest.
func distinct(g []entry) (out []entry, repeats int64) {
	for x := range g {
		dup := false
		for y := range out {
			if out[y].sameDigest(&g[x]) {
				dup = true
				break
			}
		}
		if dup {
			repeats++
		} else {
			out = append(out, g[x])
		}
	}
	return out, repeats
}

func (c *Comparer) judge(r *Report, room uint64, pg, dg []entry, ev []evidence) {
	wmax := c.opts.warmupMax()
	var pd, dd []entry
	if len(pg) > 1 || len(dg) > 1 {
		var n1, n2 int64
		pd, n1 = distinct(pg)
		dd, n2 = distinct(dg)
		r.IdenticalRepeats += n1 + n2
	} else {
		pd, dd = pg, dg
	}
	// The common case, one record per side that matches, allocates nothing.
	if len(pd) == 1 && len(dd) == 1 && len(ev) == 0 && pd[0].bsum == dd[0].bsum && pd[0].xxh3 == dd[0].xxh3 &&
		pd[0].seqLen == dd[0].seqLen && !(wmax >= 0 && int(pd[0].seqLen) <= wmax) && !dd[0].zero() {
		r.Classes.Match++
		return
	}
	res := RoomResult{Room: hook.Dec64(room)}
	if len(pd) > 0 {
		x := pd[0].digest()
		res.Prefill = &x
		res.SeqLen = x.SeqLen
	}
	if len(dd) > 0 {
		x := dd[0].digest()
		res.Decode = &x
		if res.Prefill == nil {
			res.SeqLen = x.SeqLen
		}
	}
	for _, e := range ev {
		res.Evidence = append(res.Evidence, e.where)
	}
	isWarmupLen := func(n int) bool { return wmax >= 0 && n <= wmax }
	switch {
	case len(pd) > 1 || len(dd) > 1:
		all := true
		for _, g := range [][]entry{pd, dd} {
			for x := range g {
				all = all && isWarmupLen(int(g[x].seqLen))
			}
		}
		for _, e := range pd {
			res.Duplicates = append(res.Duplicates, Duplicate{Side: hook.SidePrefill, SideDigest: e.digest()})
		}
		for _, e := range dd {
			res.Duplicates = append(res.Duplicates, Duplicate{Side: hook.SideDecode, SideDigest: e.digest()})
		}
		if all {
			res.Class, res.Reason = ClassWarmup, fmt.Sprintf("seen more than once, every seq_len ≤ %d", wmax)
		} else {
			res.Class, res.Reason = ClassDuplicate, "seen more than once on one side with different digests"
		}
	case len(ev) > 0:
		res.Class, res.Reason = ClassMismatch, "the engine reported a KV checksum mismatch"
	case len(pd) == 1 && isWarmupLen(int(pd[0].seqLen)) || len(pd) == 0 && len(dd) == 1 && isWarmupLen(int(dd[0].seqLen)):
		res.Class, res.Reason = ClassWarmup, fmt.Sprintf("seq_len %d ≤ %d", res.SeqLen, wmax)
	case len(dd) == 1 && dd[0].zero():
		res.Class, res.Reason = ClassWarmup, "decode digest 0 (not transferred)"
	case len(dd) == 0:
		res.Class, res.Reason = ClassMissingDecode, "no decode record"
	case len(pd) == 0:
		res.Class, res.Reason = ClassMissingPrefill, "no prefill record"
	case pd[0].bsum == dd[0].bsum && pd[0].xxh3 == dd[0].xxh3 && pd[0].seqLen == dd[0].seqLen:
		res.Class = ClassMatch
	default:
		res.Class = ClassMismatch
		switch {
		case pd[0].seqLen != dd[0].seqLen:
			res.Reason = fmt.Sprintf("seq_len differs: prefill %d, decode %d", pd[0].seqLen, dd[0].seqLen)
		case pd[0].bsum != dd[0].bsum && pd[0].xxh3 != dd[0].xxh3:
			res.Reason = "bsum and xxh3 differ"
		case pd[0].bsum != dd[0].bsum:
			res.Reason = "bsum differs, xxh3 equal"
		default:
			res.Reason = "xxh3 differs, bsum equal"
		}
		if pd[0].pages&dd[0].pages&hasPagesBit != 0 && len(c.want) < maxLocate {
			if c.want == nil {
				c.want = make(map[uint64]*[2][]uint64)
			}
			c.want[room] = new([2][]uint64)
		}
	}
	r.Classes.add(res.Class)
	if res.Class != ClassMatch {
		r.NonMatching = append(r.NonMatching, res)
	}
}

// NeedPages reports whether some mismatching rooms carry page digests that a
// second pass (AddPages, then Locate) can compare.
func (c *Comparer) NeedPages() bool { return len(c.want) > 0 }

// AddPages keeps r's page digests if Finish wants them. r is not retained.
func (c *Comparer) AddPages(r *Record) {
	if r.Evidence || len(r.PageXXH3) == 0 {
		return
	}
	w, ok := c.want[r.Room]
	if !ok {
		return
	}
	s, ok := sideIndex(r.Side)
	if !ok || w[s] != nil {
		return
	}
	w[s] = slices.Clone(r.PageXXH3)
}

// Locate fills MismatchPages and MismatchTokens of the mismatching rooms whose
// page digests AddPages collected.
func (c *Comparer) Locate() {
	if c.report == nil {
		return
	}
	for i := range c.report.NonMatching {
		rr := &c.report.NonMatching[i]
		w, ok := c.want[uint64(rr.Room)]
		if !ok || w[0] == nil || w[1] == nil {
			continue
		}
		rr.MismatchPages, rr.MismatchTokens = DiffPages(w[0], w[1], rr.SeqLen)
		c.report.PagesLocated++
	}
	c.want = nil
}

// DiffPages compares two sides' RoomPages digests of a room of seqLen tokens
// and returns the differing page-table indices and the token ranges they hold
// (adjacent ranges merged). An index present on one side only differs.
func DiffPages(prefill, decode []uint64, seqLen int) ([]int, []TokenRange) {
	var pages []int
	var toks []TokenRange
	for i := 0; i < max(len(prefill), len(decode)); i++ {
		if i < len(prefill) && i < len(decode) && prefill[i] == decode[i] {
			continue
		}
		pages = append(pages, i)
		lo := i * PageTokens
		hi := min(lo+PageTokens, seqLen)
		if hi <= lo { // a page past seq_len: name its slots anyway
			hi = lo + PageTokens
		}
		if n := len(toks); n > 0 && toks[n-1].Hi == lo {
			toks[n-1].Hi = hi
		} else {
			toks = append(toks, TokenRange{Lo: lo, Hi: hi})
		}
	}
	return pages, toks
}
