package checksum

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"strings"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/spec/kvlayout"
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

// entry is the compact per-record form compare keeps: 40 bytes.
type entry struct {
	room   uint64
	bsum   uint64
	xxh3   uint64
	seqLen uint32
	meta   uint32 // pages (low 27 bits), stage code (2 bits), flags (3 bits)
	layers uint32 // layersKey of the record's layer ids; 0: one buffer (spec v1.0)
	who    uint32 // node index (high 16 bits; 0 is "": log lines, unnamed hosts), rank (low 16)
}

// Limits of the packed fields: larger values are clamped (a page table of
// 2^27 entries is 8 G tokens; TP ranks and hosts per compare stay far
// below 2^16).
const (
	maxPages = 1<<27 - 1
	maxRank  = 1<<16 - 1
	maxNodes = 1 << 16
)

func newEntry(room, bsum, xxh3 uint64, seqLen, pages, rank int, stage uint8, flags uint8, layers uint32, node uint16) entry {
	return entry{room: room, bsum: bsum, xxh3: xxh3, seqLen: uint32(min(max(seqLen, 0), maxCount)),
		meta:   uint32(min(max(pages, 0), maxPages)) | uint32(stage&3)<<27 | uint32(flags&7)<<29,
		layers: layers, who: uint32(node)<<16 | uint32(min(max(rank, 0), maxRank))}
}

func (e *entry) pages() int     { return int(e.meta & maxPages) }
func (e *entry) stage() uint8   { return uint8(e.meta>>27) & 3 }
func (e *entry) flags() uint8   { return uint8(e.meta >> 29) }
func (e *entry) rank() int      { return int(e.who & maxRank) }
func (e *entry) node() uint16   { return uint16(e.who >> 16) }
func (e *entry) hasID() bool    { return e.who != 0 || e.stage() != 0 }
func (e *entry) detailed() bool { return e.flags() != 0 || e.layers != 0 }

// entry flags: which localization digests the record carried.
const (
	hasPageXXH3 = 1 << iota
	hasPageBsum
	hasLayerBsum
)

// Stages in report order (hook.Stage*); stageCode indexes it.
var stageNames = [...]string{"", hook.StageSent, hook.StageTransferred, hook.StageAdmitted}

func stageCode(s string) (uint8, bool) {
	for i, n := range stageNames {
		if n == s {
			return uint8(i), true
		}
	}
	return 0, false
}

// layersKey fingerprints a layer id list (0 for none): the bsum of the ids
// as words, folded to 32 bits, with the low bit set so that no list maps to
// 0. Two lists that differ get the same key with probability 2^-31; that
// alone changes nothing, as their bsums then still differ.
func layersKey(layers []int) uint32 {
	if len(layers) == 0 {
		return 0
	}
	var s uint64
	for i, l := range layers {
		s += kvlayout.Mix64(uint64(l) ^ uint64(i+1)*kvlayout.BsumK)
	}
	return uint32(s^s>>32) | 1
}

// sameDigest: exact repeat of the same record (identity compared apart).
func (e *entry) sameDigest(o *entry) bool {
	return e.bsum == o.bsum && e.xxh3 == o.xxh3 && e.seqLen == o.seqLen && e.meta&^(3<<27) == o.meta&^(3<<27) &&
		e.layers == o.layers
}

// sameBytes: the same digests of the same room shape, whatever optional
// details (page_xxh3, page_bsum, layer digests: the flags) either carried. A
// producer's record seen once with page digests and once without is a
// repeat, not a duplicate.
func (e *entry) sameBytes(o *entry) bool {
	return e.bsum == o.bsum && e.xxh3 == o.xxh3 && e.seqLen == o.seqLen && e.pages() == o.pages() &&
		e.layers == o.layers
}

// sameID: the same producer: rank, stage and node (the side is the store's).
func (e *entry) sameID(o *entry) bool {
	return e.who == o.who && e.stage() == o.stage()
}

// agrees says two records digest the same bytes: equal seq_len, layers and
// bsum, and equal xxh3 unless either is 0 ("not computed", SPEC.md §9.4).
func (e *entry) agrees(o *entry) bool {
	return e.bsum == o.bsum && e.seqLen == o.seqLen && e.layers == o.layers &&
		(e.xxh3 == o.xxh3 || e.xxh3 == 0 || o.xxh3 == 0)
}

// v10 says the record carries nothing of spec v1.1.
func (e *entry) v10() bool { return !e.hasID() && e.layers == 0 }

func (e *entry) digest() SideDigest {
	return SideDigest{SeqLen: int(e.seqLen), Pages: e.pages(), Bsum: hook.Hex64(e.bsum), XXH3: hook.Hex64(e.xxh3)}
}

func (e *entry) zero() bool { return e.bsum == 0 && e.xxh3 == 0 }

func cmpEntry(a, b *entry) int {
	return cmp.Or(cmp.Compare(a.who, b.who), cmp.Compare(a.stage(), b.stage()),
		cmp.Compare(a.seqLen, b.seqLen), cmp.Compare(a.bsum, b.bsum), cmp.Compare(a.xxh3, b.xxh3),
		cmp.Compare(a.layers, b.layers), cmp.Compare(a.meta, b.meta))
}

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

// RecordID names one producer of a room's digest: its side, attention-TP
// rank, stage and the node it came from (SPEC.md §9.6). Records of different
// IDs are never duplicates of each other; they must agree.
type RecordID struct {
	Side  hook.Side `json:"side"`
	Rank  int       `json:"rank"`
	Stage string    `json:"stage,omitempty"`
	Node  string    `json:"node,omitempty"`
}

// String is the short human form: "decode rank 3 admitted @host-b".
func (id RecordID) String() string {
	s := fmt.Sprintf("%s rank %d", id.Side, id.Rank)
	if id.Stage != "" {
		s += " " + id.Stage
	}
	if id.Node != "" {
		s += " @" + id.Node
	}
	return s
}

// Duplicate is one of the differing records of a room seen twice on a side.
type Duplicate struct {
	Side  hook.Side `json:"side"`
	Rank  int       `json:"rank,omitempty"`
	Stage string    `json:"stage,omitempty"`
	Node  string    `json:"node,omitempty"`
	SideDigest
}

// TokenRange is a half-open range of a room's token indices.
type TokenRange struct {
	Lo int `json:"lo"`
	Hi int `json:"hi"`
}

// RecordResult is one distinct record of a non-matching room that holds
// several records per side or spec v1.1 fields, and how it compares with
// the room's reference record.
type RecordResult struct {
	RecordID
	SideDigest
	Layers    []int `json:"layers,omitempty"`    // when known (reference and disagreeing records)
	Reference bool  `json:"reference,omitempty"` // the record the others are compared with
	Agrees    bool  `json:"agrees"`
	// Differs lists what disagrees with the reference: "seq_len", "layers",
	// "bsum", "xxh3".
	Differs        []string     `json:"differs,omitempty"`
	MismatchLayers []int        `json:"mismatch_layers,omitempty"` // layer ids whose layer_bsum differ
	MismatchPages  []int        `json:"mismatch_pages,omitempty"`  // page-table indices that differ
	MismatchTokens []TokenRange `json:"mismatch_tokens,omitempty"`
	PagesFrom      string       `json:"pages_from,omitempty"` // "page_xxh3" | "page_bsum"
}

// RoomResult is one room that did not match.
type RoomResult struct {
	Room    hook.Dec64  `json:"room"`
	Class   string      `json:"class"`
	SeqLen  int         `json:"seq_len"`
	Reason  string      `json:"reason"`
	Prefill *SideDigest `json:"prefill,omitempty"`
	Decode  *SideDigest `json:"decode,omitempty"`
	// PrefillFrom and DecodeFrom name the producers (host, side, rank,
	// stage) of the digests shown as Prefill and Decode.
	PrefillFrom    *RecordID    `json:"prefill_from,omitempty"`
	DecodeFrom     *RecordID    `json:"decode_from,omitempty"`
	Duplicates     []Duplicate  `json:"duplicates,omitempty"`
	MismatchLayers []int        `json:"mismatch_layers,omitempty"` // layer ids whose layer_bsum differ (any record)
	MismatchPages  []int        `json:"mismatch_pages,omitempty"`  // page-table indices whose page digests differ
	MismatchTokens []TokenRange `json:"mismatch_tokens,omitempty"` // the tokens those pages hold
	Evidence       []string     `json:"evidence,omitempty"`        // input:line of engine mismatch reports
	// Records lists the room's distinct records (several ranks or stages per
	// side, or v1.1 fields); absent for a plain one-prefill, one-decode room.
	Records []RecordResult `json:"records,omitempty"`
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
	// Producers counts rooms by the producer (host, role, rank) of their
	// records, with the class each room got (producers.go).
	Producers []ProducerCounts `json:"producers,omitempty"`
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
// with Add, then call Finish. Memory is 40 bytes per record (plus slice
// growth), whatever the input size.
type Comparer struct {
	opts     Options
	sides    [2]store
	evidence []evidence
	nodes    []string          // node names by index; nodes[0] = ""
	nodeIdx  map[string]uint16 // and back

	report *Report
	want   map[uint64]*roomWant // pass 2: rooms whose details are wanted

	producers map[uint64]*ProducerCounts // by side<<32 | who (producers.go)
	lastKey   [2]uint64                  // per side, the last producer tallied
	lastProd  [2]*ProducerCounts
}

// roomWant is what pass 2 collects for one mismatching room: the details of
// its reference record and of each disagreeing record.
type roomWant struct {
	recs    []wantRec // [0] is the reference
	records bool      // the room's result lists Records
}

type wantRec struct {
	side int
	e    entry
	at   int // index in RoomResult.Records, or -1
	d    *detail
}

// detail is what pass 2 keeps of a record: its localization digests.
type detail struct {
	layers    []int
	layerBsum []uint64
	pageXXH3  []uint64
	pageBsum  []uint64
}

// NewComparer returns an empty Comparer.
func NewComparer(opts Options) *Comparer {
	return &Comparer{opts: opts, nodes: []string{""}, nodeIdx: map[string]uint16{"": 0}}
}

func sideIndex(s hook.Side) (int, bool) {
	switch s {
	case hook.SidePrefill:
		return 0, true
	case hook.SideDecode:
		return 1, true
	}
	return 0, false
}

// node returns the index of name, adding it (at most maxNodes-1 names;
// later ones share the last index).
func (c *Comparer) node(name string, add bool) uint16 {
	if name == "" {
		return 0
	}
	if i, ok := c.nodeIdx[name]; ok {
		return i
	}
	if !add {
		return maxNodes - 1
	}
	if len(c.nodes) == maxNodes-1 {
		return uint16(len(c.nodes) - 1)
	}
	c.nodes = append(c.nodes, name)
	c.nodeIdx[name] = uint16(len(c.nodes) - 1)
	return uint16(len(c.nodes) - 1)
}

// entryOf builds r's entry; ok is false for a record compare ignores (an
// unknown side or stage). add interns a new node name.
func (c *Comparer) entryOf(r *Record, add bool) (int, entry, bool) {
	s, ok := sideIndex(r.Side)
	if !ok {
		return 0, entry{}, false
	}
	var st uint8
	if r.Stage != "" {
		if st, ok = stageCode(r.Stage); !ok {
			return 0, entry{}, false
		}
	}
	var node uint16
	if r.Node != "" {
		node = c.node(r.Node, add)
	}
	var flags uint8
	if len(r.PageXXH3)|len(r.PageBsum)|len(r.LayerBsum) != 0 {
		flags = recordFlags(r)
	}
	var layers uint32
	if len(r.Layers) > 0 {
		layers = layersKey(r.Layers)
	}
	return s, newEntry(r.Room, r.Bsum, r.XXH3, r.SeqLen, r.Pages, r.Rank, st, flags, layers, node), true
}

func recordFlags(r *Record) uint8 {
	var f uint8
	if len(r.PageXXH3) > 0 {
		f |= hasPageXXH3
	}
	if len(r.PageBsum) > 0 {
		f |= hasPageBsum
	}
	if len(r.LayerBsum) > 0 {
		f |= hasLayerBsum
	}
	return f
}

// Add records r; where names its input for evidence ("decode.log"). r is not
// retained. Records with an unknown side or stage are ignored.
func (c *Comparer) Add(r *Record, where string) {
	if r.Evidence {
		c.evidence = append(c.evidence, evidence{room: r.Room, hasRoom: r.HasRoom, where: fmt.Sprintf("%s:%d", where, r.Line), request: r.Request})
		return
	}
	if s, e, ok := c.entryOf(r, true); ok {
		c.sides[s].add(e)
	}
}

// Finish classifies every room and returns the report. If NeedPages then
// reports true, feed the inputs again through AddPages and call Locate to fill
// in the mismatching layers and pages.
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
		before := len(r.NonMatching)
		c.judge(r, room, pg, dg, ev[k0:k])
		class := ClassMatch
		if len(r.NonMatching) > before {
			class = r.NonMatching[before].Class
		}
		c.tally(class, pg, dg)
	}
	r.Producers = c.producerList()
	c.report = r
	c.evidence = nil
	c.sides = [2]store{}
	return r
}

// distinct sorts g by record ID and digest and drops exact repeats (same
// ID, same digests), returning how many it dropped.
func distinct(g []entry) (out []entry, repeats int64) {
	if len(g) < 2 {
		return g, 0
	}
	slices.SortFunc(g, func(a, b entry) int { return cmpEntry(&a, &b) })
	out = g[:1]
	for x := 1; x < len(g); x++ {
		last := &out[len(out)-1]
		if last.sameID(&g[x]) && last.sameBytes(&g[x]) {
			if bits.OnesCount8(g[x].flags()) > bits.OnesCount8(last.flags()) {
				*last = g[x] // keep the repeat that carries more detail (pass 2 localizes from it)
			}
			repeats++
			continue
		}
		out = append(out, g[x])
	}
	return out, repeats
}

// duplicated reports whether some record ID holds different digests (g is
// distinct's output).
func duplicated(g []entry) bool {
	for x := 1; x < len(g); x++ {
		if g[x].sameID(&g[x-1]) {
			return true
		}
	}
	return false
}

func (c *Comparer) id(side int, e *entry) RecordID {
	id := RecordID{Side: hook.SidePrefill, Rank: e.rank(), Stage: stageNames[e.stage()]}
	if side == 1 {
		id.Side = hook.SideDecode
	}
	if n := int(e.node()); n < len(c.nodes) {
		id.Node = c.nodes[n]
	}
	return id
}

func (c *Comparer) judge(r *Report, room uint64, pg, dg []entry, ev []evidence) {
	wmax := c.opts.warmupMax()
	isWarmupLen := func(n uint32) bool { return wmax >= 0 && int(n) <= wmax }
	// allWarmupLen: every record of one side has a warmup length. One short
	// record among several (prefill rank 0 says 3 tokens, rank 1 says 5,000)
	// must not make the room a warmup: that would pass a disagreement as clean.
	allWarmupLen := func(g []entry) bool {
		for x := range g {
			if !isWarmupLen(g[x].seqLen) {
				return false
			}
		}
		return true
	}
	// The common case, one record per side that matches, allocates nothing.
	if len(pg) == 1 && len(dg) == 1 && len(ev) == 0 && pg[0].agrees(&dg[0]) && !isWarmupLen(pg[0].seqLen) && !dg[0].zero() {
		r.Classes.Match++
		return
	}
	pd, n1 := distinct(pg)
	dd, n2 := distinct(dg)
	r.IdenticalRepeats += n1 + n2
	res := RoomResult{Room: hook.Dec64(room)}
	if len(pd) > 0 {
		x := pd[0].digest()
		res.Prefill = &x
		res.PrefillFrom = c.from(0, &pd[0])
		res.SeqLen = x.SeqLen
	}
	if len(dd) > 0 {
		x := dd[0].digest()
		res.Decode = &x
		res.DecodeFrom = c.from(1, &dd[0])
		if res.Prefill == nil {
			res.SeqLen = x.SeqLen
		}
	}
	for _, e := range ev {
		res.Evidence = append(res.Evidence, e.where)
	}
	allZero := len(dd) > 0
	for x := range dd {
		allZero = allZero && dd[x].zero()
	}
	switch {
	case duplicated(pd) || duplicated(dd):
		all := true
		for _, g := range [][]entry{pd, dd} {
			for x := range g {
				all = all && isWarmupLen(g[x].seqLen)
			}
		}
		for s, g := range [][]entry{pd, dd} {
			for x := range g {
				id := c.id(s, &g[x])
				res.Duplicates = append(res.Duplicates, Duplicate{Side: id.Side, Rank: id.Rank, Stage: id.Stage, Node: id.Node, SideDigest: g[x].digest()})
			}
		}
		if all {
			res.Class, res.Reason = ClassWarmup, fmt.Sprintf("seen more than once, every seq_len ≤ %d", wmax)
		} else {
			res.Class, res.Reason = ClassDuplicate, "seen more than once on one side with different digests"
			if !pd0v10(pd, dd) {
				res.Reason = "seen more than once by one " + dupWho(c, pd, dd) + " with different digests"
			}
		}
	case len(ev) > 0:
		res.Class, res.Reason = ClassMismatch, "the engine reported a KV checksum mismatch"
	case len(pd) > 0 && allWarmupLen(pd) || len(pd) == 0 && len(dd) > 0 && allWarmupLen(dd):
		res.Class, res.Reason = ClassWarmup, fmt.Sprintf("seq_len %d ≤ %d", res.SeqLen, wmax)
	case allZero:
		res.Class, res.Reason = ClassWarmup, "decode digest 0 (not transferred)"
	case len(dd) == 0:
		res.Class, res.Reason = ClassMissingDecode, "no decode record"
	case len(pd) == 0:
		res.Class, res.Reason = ClassMissingPrefill, "no prefill record"
	default:
		c.agreement(&res, room, pd, dd)
	}
	r.Classes.add(res.Class)
	if res.Class != ClassMatch {
		r.NonMatching = append(r.NonMatching, res)
	}
}

// pd0v10 says the room is a plain v1.0 pair at most: no record carries v1.1
// fields.
func pd0v10(pd, dd []entry) bool {
	for _, g := range [][]entry{pd, dd} {
		for x := range g {
			if !g[x].v10() {
				return false
			}
		}
	}
	return true
}

// dupWho names the record IDs that hold several digests.
func dupWho(c *Comparer, pd, dd []entry) string {
	var who []string
	for s, g := range [][]entry{pd, dd} {
		for x := 1; x < len(g); x++ {
			if g[x].sameID(&g[x-1]) && (len(who) == 0 || who[len(who)-1] != c.id(s, &g[x]).String()) {
				who = append(who, c.id(s, &g[x]).String())
			}
		}
	}
	return strings.Join(who, ", ")
}

// agreement judges a room every side of which is present and none
// duplicated: every record must agree with every other (SPEC.md §9.6). The
// reference is a record of the largest agreeing group of prefill records
// (the bytes' origin); xxh3 is compared where both records computed it.
func (c *Comparer) agreement(res *RoomResult, room uint64, pd, dd []entry) {
	// Reference: the prefill record agreeing (bsum, seq_len, layers) with
	// the most other records of either side (a tie between two prefill ranks
	// goes to the one the decode side confirms); the first such with a
	// non-zero xxh3.
	ref := 0
	best := -1
	for x := range pd {
		n := 0
		for _, g := range [][]entry{pd, dd} {
			for y := range g {
				if pd[x].bsum == g[y].bsum && pd[x].seqLen == g[y].seqLen && pd[x].layers == g[y].layers {
					n++
				}
			}
		}
		sameGroup := pd[x].bsum == pd[ref].bsum && pd[x].seqLen == pd[ref].seqLen && pd[x].layers == pd[ref].layers
		if n > best || n == best && sameGroup && pd[ref].xxh3 == 0 && pd[x].xxh3 != 0 {
			ref, best = x, n
		}
	}
	refE := pd[ref]
	if refE.xxh3 == 0 { // take the xxh3 of the first agreeing record that computed one
		for _, g := range [][]entry{pd, dd} {
			for x := range g {
				if refE.xxh3 == 0 && g[x].agrees(&refE) && g[x].xxh3 != 0 {
					refE.xxh3 = g[x].xxh3
				}
			}
		}
	}
	var bads []badRec
	for s, g := range [][]entry{pd, dd} {
		for x := range g {
			if g[x].agrees(&refE) {
				continue
			}
			bads = append(bads, badRec{s, x, differs(&refE, &g[x])})
		}
	}
	if len(bads) == 0 {
		res.Class = ClassMatch
		return
	}
	res.Class = ClassMismatch
	p := pd[ref].digest()
	res.Prefill = &p
	res.PrefillFrom = c.from(0, &pd[ref])
	res.SeqLen = p.SeqLen
	first := [][]entry{pd, dd}[bads[0].side][bads[0].x]
	fd := first.digest()
	if bads[0].side == 1 {
		res.Decode = &fd
		res.DecodeFrom = c.from(1, &first)
	} else if len(dd) > 0 {
		d := dd[0].digest()
		res.Decode = &d
		res.DecodeFrom = c.from(1, &dd[0])
	}
	plain := len(pd) == 1 && len(dd) == 1 && pd0v10(pd, dd)
	if plain {
		res.Reason = pairReason(&pd[0], &dd[0])
	} else {
		res.Reason = c.groupReason(pd, dd, ref, bads)
	}
	// Records and pass-2 wants.
	w := &roomWant{records: !plain}
	w.recs = append(w.recs, wantRec{side: 0, e: pd[ref], at: -1})
	if w.records {
		for s, g := range [][]entry{pd, dd} {
			for x := range g {
				rr := RecordResult{RecordID: c.id(s, &g[x]), SideDigest: g[x].digest(), Agrees: true}
				if s == 0 && x == ref {
					rr.Reference = true
					w.recs[0].at = len(res.Records)
				}
				for _, b := range bads {
					if b.side == s && b.x == x {
						rr.Agrees, rr.Differs = false, b.what
						w.recs = append(w.recs, wantRec{side: s, e: g[x], at: len(res.Records)})
					}
				}
				res.Records = append(res.Records, rr)
			}
		}
	} else {
		w.recs = append(w.recs, wantRec{side: bads[0].side, e: first, at: -1})
	}
	detailed := false
	for _, wr := range w.recs {
		detailed = detailed || wr.e.detailed()
	}
	if detailed && len(c.want) < maxLocate {
		if c.want == nil {
			c.want = make(map[uint64]*roomWant)
		}
		c.want[room] = w
	}
}

// badRec is a record that disagrees with the room's reference: its side,
// its index in that side's distinct records, and what differs.
type badRec struct {
	side int
	x    int
	what []string
}

// differs lists what of e disagrees with the reference ref.
func differs(ref, e *entry) []string {
	var out []string
	if e.seqLen != ref.seqLen {
		out = append(out, "seq_len")
	}
	if e.layers != ref.layers {
		out = append(out, "layers")
	}
	if e.bsum != ref.bsum {
		out = append(out, "bsum")
	}
	if e.xxh3 != ref.xxh3 && e.xxh3 != 0 && ref.xxh3 != 0 {
		out = append(out, "xxh3")
	}
	return out
}

// pairReason explains a plain prefill/decode mismatch in the v1.0 words.
func pairReason(p, d *entry) string {
	both := p.xxh3 != 0 && d.xxh3 != 0
	switch {
	case p.seqLen != d.seqLen:
		return fmt.Sprintf("seq_len differs: prefill %d, decode %d", p.seqLen, d.seqLen)
	case p.layers != d.layers:
		return "layers differ"
	case p.bsum != d.bsum && both && p.xxh3 != d.xxh3:
		return "bsum and xxh3 differ"
	case p.bsum != d.bsum && both:
		return "bsum differs, xxh3 equal"
	case p.bsum != d.bsum:
		return "bsum differs (xxh3 not computed)"
	}
	return "xxh3 differs, bsum equal"
}

// groupReason names the disagreeing records, grouped by side, stage, node
// and what differs: "decode ranks 1,3 admitted: bsum differs (vs prefill
// rank 0 sent)", the reference last.
func (c *Comparer) groupReason(pd, dd []entry, ref int, bads []badRec) string {
	type group struct {
		side  int
		stage uint8
		node  uint16
		what  string
		ranks []int
	}
	var groups []*group
	nbad := 0
	for _, b := range bads {
		nbad++
		s := b.side
		e := [][]entry{pd, dd}[s][b.x]
		w := strings.Join(b.what, ", ")
		var g *group
		for _, h := range groups {
			if h.side == s && h.stage == e.stage() && h.node == e.node() && h.what == w {
				g = h
			}
		}
		if g == nil {
			g = &group{side: s, stage: e.stage(), node: e.node(), what: w}
			groups = append(groups, g)
		}
		g.ranks = append(g.ranks, e.rank())
	}
	var parts []string
	for i, g := range groups {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("… (%d records disagree in all)", nbad))
			break
		}
		id := c.id(g.side, &entry{meta: uint32(g.stage) << 27, who: uint32(g.node) << 16})
		who := string(id.Side) + " rank " + joinInts(g.ranks)
		if len(g.ranks) > 1 {
			who = string(id.Side) + " ranks " + joinInts(g.ranks)
		}
		if id.Stage != "" {
			who += " " + id.Stage
		}
		if id.Node != "" {
			who += " @" + id.Node
		}
		parts = append(parts, who+": "+g.what+" differ"+map[bool]string{true: "s", false: ""}[!strings.Contains(g.what, ",") && g.what != "layers"])
	}
	out := strings.Join(parts, "; ") + " (vs " + c.id(0, &pd[ref]).String() + ")"
	// A decode copy that matched as it landed but not at admission was
	// changed on the decode host in between.
	if stageHint(pd, dd, ref) {
		out += "; transferred matched: changed on the decode host after landing"
	}
	return out
}

// stageHint: some decode record of a rank and node agrees at stage
// transferred while the same rank and node disagrees at admitted.
func stageHint(pd, dd []entry, ref int) bool {
	r := &pd[ref]
	for x := range dd {
		if stageNames[dd[x].stage()] != hook.StageAdmitted || dd[x].agrees(r) {
			continue
		}
		for y := range dd {
			if stageNames[dd[y].stage()] == hook.StageTransferred && dd[y].who == dd[x].who && dd[y].agrees(r) {
				return true
			}
		}
	}
	return false
}

// NeedPages reports whether some mismatching rooms carry layer or page
// digests that a second pass (AddPages, then Locate) can compare.
func (c *Comparer) NeedPages() bool { return len(c.want) > 0 }

// AddPages keeps r's layer and page digests if Finish wants them. r is not
// retained.
func (c *Comparer) AddPages(r *Record) {
	if r.Evidence {
		return
	}
	w, ok := c.want[r.Room]
	if !ok {
		return
	}
	s, e, ok := c.entryOf(r, false)
	if !ok {
		return
	}
	for i := range w.recs {
		wr := &w.recs[i]
		if wr.d == nil && wr.side == s && wr.e.sameID(&e) && wr.e.sameDigest(&e) {
			wr.d = &detail{layers: slices.Clone(r.Layers), layerBsum: slices.Clone(r.LayerBsum),
				pageXXH3: slices.Clone(r.PageXXH3), pageBsum: slices.Clone(r.PageBsum)}
			return
		}
	}
}

// Locate fills the mismatching layers, pages and tokens of the mismatching
// rooms whose details AddPages collected: layers from layer_bsum, pages from
// page_xxh3 when both records carry it, else from page_bsum (SPEC.md §9.6).
func (c *Comparer) Locate() {
	if c.report == nil {
		return
	}
	for i := range c.report.NonMatching {
		rr := &c.report.NonMatching[i]
		w, ok := c.want[uint64(rr.Room)]
		if !ok || w.recs[0].d == nil {
			continue
		}
		ref := w.recs[0].d
		if at := w.recs[0].at; at >= 0 {
			rr.Records[at].Layers = ref.layers
		}
		var layers, pages []int
		located := false
		for _, wr := range w.recs[1:] {
			if wr.d == nil {
				continue
			}
			ls, ps, from := compareDetails(ref, wr.d)
			located = located || from != ""
			layers = append(layers, ls...)
			pages = append(pages, ps...)
			if wr.at >= 0 {
				rec := &rr.Records[wr.at]
				rec.Layers = wr.d.layers
				rec.MismatchLayers, rec.MismatchPages, rec.PagesFrom = ls, ps, from
				if len(ps) > 0 {
					rec.MismatchTokens = tokenRanges(ps, rec.SeqLen)
				}
			}
		}
		slices.Sort(layers)
		rr.MismatchLayers = slices.Compact(layers)
		slices.Sort(pages)
		rr.MismatchPages = slices.Compact(pages)
		if len(rr.MismatchPages) > 0 {
			rr.MismatchTokens = tokenRanges(rr.MismatchPages, rr.SeqLen)
		}
		if located {
			c.report.PagesLocated++
		}
		if len(rr.MismatchLayers) == 0 {
			rr.MismatchLayers = nil
		}
		if len(rr.MismatchPages) == 0 {
			rr.MismatchPages = nil
		}
	}
	c.want = nil
}

// compareDetails compares a record's digests with the reference's: the layer
// ids whose layer_bsum differ (or that one record digested and the other did
// not) and the page-table indices whose page digests differ, from
// page_xxh3 when both carry it, else page_bsum (only over the same layers:
// page_bsum combines the layers).
func compareDetails(ref, d *detail) (layers, pages []int, from string) {
	sameLayers := slices.Equal(ref.layers, d.layers)
	if sameLayers && len(ref.layerBsum) == len(ref.layers) && len(d.layerBsum) == len(d.layers) {
		for j, l := range ref.layers {
			if ref.layerBsum[j] != d.layerBsum[j] {
				layers = append(layers, l)
			}
		}
	} else if !sameLayers {
		for _, l := range ref.layers {
			if !slices.Contains(d.layers, l) {
				layers = append(layers, l)
			}
		}
		for _, l := range d.layers {
			if !slices.Contains(ref.layers, l) {
				layers = append(layers, l)
			}
		}
	}
	switch {
	case sameLayers && len(ref.pageXXH3) > 0 && len(d.pageXXH3) > 0:
		pages, _ = DiffPages(ref.pageXXH3, d.pageXXH3, 0)
		from = "page_xxh3"
	case sameLayers && len(ref.pageBsum) > 0 && len(d.pageBsum) > 0:
		pages, _ = DiffPages(ref.pageBsum, d.pageBsum, 0)
		from = "page_bsum"
	}
	return layers, pages, from
}

// DiffPages compares two sides' per-page digests (RoomPages, or page_bsum)
// of a room of seqLen tokens and returns the differing page-table indices
// and the token ranges they hold (adjacent ranges merged). An index present
// on one side only differs.
func DiffPages(prefill, decode []uint64, seqLen int) ([]int, []TokenRange) {
	var pages []int
	for i := 0; i < max(len(prefill), len(decode)); i++ {
		if i < len(prefill) && i < len(decode) && prefill[i] == decode[i] {
			continue
		}
		pages = append(pages, i)
	}
	return pages, tokenRanges(pages, seqLen)
}

// tokenRanges returns the tokens that page-table entries pages (ascending)
// hold in a room of seqLen tokens, adjacent ranges merged.
func tokenRanges(pages []int, seqLen int) []TokenRange {
	var toks []TokenRange
	for _, i := range pages {
		lo := i * kvlayout.PageTokens
		hi := min(lo+kvlayout.PageTokens, seqLen)
		if hi <= lo { // a page past seq_len: name its slots anyway
			hi = lo + kvlayout.PageTokens
		}
		if n := len(toks); n > 0 && toks[n-1].Hi == lo {
			toks[n-1].Hi = hi
		} else {
			toks = append(toks, TokenRange{Lo: lo, Hi: hi})
		}
	}
	return toks
}
