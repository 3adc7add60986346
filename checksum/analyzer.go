package checksum

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// AnalyzerName is the checksum analyzer's name and its section key in
// `sim run --json`.
const AnalyzerName = "checksum"

// Summary is the checksum section of a run report.
type Summary struct {
	Rooms      int `json:"rooms"`
	Matched    int `json:"matched"`
	Mismatched int `json:"mismatched"`
	Warmup     int `json:"warmup"`
	Missing    int `json:"missing"` // rooms with one side only when the summary was taken
	Repeats    int `json:"repeats,omitempty"`
}

type liveSide struct {
	e     entry
	pages []uint64
}

// Analyzer judges room.checksum events live: the moment both sides of a room
// are in and disagree (outside warmups), it emits an error finding. It is
// safe for concurrent use.
type Analyzer struct {
	opts Options

	mu      sync.Mutex
	pending map[uint64]*[2]*liveSide
	judged  map[uint64]struct{}
	sum     Summary
}

var _ hook.Analyzer = (*Analyzer)(nil)

// NewAnalyzer returns a checksum analyzer.
func NewAnalyzer(opts Options) *Analyzer {
	return &Analyzer{opts: opts, pending: make(map[uint64]*[2]*liveSide), judged: make(map[uint64]struct{})}
}

// Name implements hook.Analyzer.
func (a *Analyzer) Name() string { return AnalyzerName }

// Observe implements hook.Analyzer.
func (a *Analyzer) Observe(ev hook.Event, emit func(hook.Event)) {
	if ev.Kind != hook.KindRoomChecksum {
		return
	}
	rc, ok := ev.Body.(*hook.RoomChecksum)
	if !ok || rc == nil {
		return
	}
	rec, err := RecordFromEvent(rc)
	if err != nil {
		return
	}
	s, _ := sideIndex(rec.Side)
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, done := a.judged[rec.Room]; done {
		a.sum.Repeats++
		return
	}
	p := a.pending[rec.Room]
	if p == nil {
		p = new([2]*liveSide)
		a.pending[rec.Room] = p
	}
	if p[s] != nil {
		a.sum.Repeats++
		return
	}
	p[s] = &liveSide{
		e:     entry{room: rec.Room, bsum: rec.Bsum, xxh3: rec.XXH3, seqLen: uint32(min(rec.SeqLen, maxCount)), pages: uint32(min(rec.Pages, maxCount))},
		pages: rec.PageXXH3,
	}
	if p[0] == nil || p[1] == nil {
		return
	}
	delete(a.pending, rec.Room)
	a.judged[rec.Room] = struct{}{}
	a.sum.Rooms++
	pre, dec := p[0], p[1]
	wmax := a.opts.warmupMax()
	switch {
	case wmax >= 0 && int(pre.e.seqLen) <= wmax, dec.e.zero():
		a.sum.Warmup++
	case pre.e.bsum == dec.e.bsum && pre.e.xxh3 == dec.e.xxh3 && pre.e.seqLen == dec.e.seqLen:
		a.sum.Matched++
	default:
		a.sum.Mismatched++
		emit(hook.Event{Kind: hook.KindFinding, Body: mismatchFinding(rec.Room, pre, dec)})
	}
}

func mismatchFinding(room uint64, pre, dec *liveSide) *hook.Finding {
	ev := map[string]string{
		"room":         strconv.FormatUint(room, 10),
		"seq_len":      strconv.Itoa(int(pre.e.seqLen)),
		"prefill_bsum": hook.Hex64(pre.e.bsum).String(),
		"prefill_xxh3": hook.Hex64(pre.e.xxh3).String(),
		"decode_bsum":  hook.Hex64(dec.e.bsum).String(),
		"decode_xxh3":  hook.Hex64(dec.e.xxh3).String(),
	}
	if dec.e.seqLen != pre.e.seqLen {
		ev["decode_seq_len"] = strconv.Itoa(int(dec.e.seqLen))
	}
	where := ""
	if len(pre.pages) > 0 && len(dec.pages) > 0 {
		pages, toks := DiffPages(pre.pages, dec.pages, int(pre.e.seqLen))
		ev["mismatch_pages"] = joinInts(pages)
		var ts []string
		for _, t := range toks {
			ts = append(ts, fmt.Sprintf("%d-%d", t.Lo, t.Hi))
		}
		ev["mismatch_tokens"] = strings.Join(ts, ",")
		where = fmt.Sprintf(" in page-table entries %s (tokens %s)", ev["mismatch_pages"], ev["mismatch_tokens"])
	}
	return &hook.Finding{
		Analyzer: AnalyzerName,
		Severity: hook.SevError,
		Summary:  fmt.Sprintf("room %d: index-K differs between prefill and decode%s", room, where),
		Evidence: ev,
	}
}

func joinInts(xs []int) string {
	var b []byte
	for i, x := range xs {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(x), 10)
	}
	return string(b)
}

// Summary implements hook.Analyzer: a Summary value. Rooms still waiting for
// their second side count as missing, or as warmup when short or when the one
// side is a decode digest of 0 (not transferred), as Compare classifies them
// (SPEC.md §8: warmup takes precedence over missing).
func (a *Analyzer) Summary() any {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.sum
	wmax := a.opts.warmupMax()
	for _, p := range a.pending {
		s.Rooms++
		side := p[0]
		if side == nil {
			side = p[1]
		}
		if wmax >= 0 && int(side.e.seqLen) <= wmax || p[0] == nil && side.e.zero() {
			s.Warmup++
		} else {
			s.Missing++
		}
	}
	return s
}
