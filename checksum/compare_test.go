package checksum

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/spec/kvlayout"
)

func rec(side hook.Side, room uint64, seqLen int, bsum, xxh3 uint64) Record {
	return Record{Room: room, Side: side, SeqLen: seqLen, Pages: (seqLen + 63) / 64, Bsum: bsum, XXH3: xxh3, HasRoom: true}
}

func compareRecords(t *testing.T, opts Options, recs []Record) *Report {
	t.Helper()
	c := NewComparer(opts)
	for i := range recs {
		recs[i].Line = int64(i + 1)
		c.Add(&recs[i], "in")
	}
	r := c.Finish()
	if c.NeedPages() {
		for i := range recs {
			c.AddPages(&recs[i])
		}
		c.Locate()
	}
	return r
}

// The seeds' decisive result: 112 rooms, 111 match, the one mismatch a warmup
// of seq_len 4 whose decode checksum was 0.
func TestCompareSeedResult(t *testing.T) {
	var recs []Record
	recs = append(recs, rec(hook.SidePrefill, 0, 4, 31177, 0), rec(hook.SideDecode, 0, 4, 0, 0))
	for room := uint64(1); room < 112; room++ {
		b, x := room*0x9E3779B97F4A7C15, room*31
		recs = append(recs, rec(hook.SideDecode, 1000+room, 300+int(room), b, x)) // decode first: order must not matter
		recs = append(recs, rec(hook.SidePrefill, 1000+room, 300+int(room), b, x))
	}
	r := compareRecords(t, Options{WarmupMaxSeqLen: 16}, recs)
	if got, want := r.Headline(), "111/112 rooms match; 1 warmup (room 0, seq_len 4, decode 0)"; got != want {
		t.Errorf("headline %q, want %q", got, want)
	}
	if r.Failed() {
		t.Error("Failed() with only a warmup")
	}
	if len(r.NonMatching) != 1 || r.NonMatching[0].Class != ClassWarmup || r.NonMatching[0].Prefill.Bsum != 31177 || r.NonMatching[0].Decode.Bsum != 0 {
		t.Fatalf("non-matching %+v", r.NonMatching)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var shape struct {
		Rooms       int              `json:"rooms"`
		Classes     map[string]int   `json:"classes"`
		NonMatching []map[string]any `json:"non_matching"`
	}
	if err := json.Unmarshal(b, &shape); err != nil {
		t.Fatal(err)
	}
	wantClasses := map[string]int{"match": 111, "mismatch": 0, "warmup": 1, "missing-decode": 0, "missing-prefill": 0, "duplicate": 0}
	if shape.Rooms != 112 || fmt.Sprint(shape.Classes) != fmt.Sprint(wantClasses) {
		t.Errorf("json rooms %d classes %v", shape.Rooms, shape.Classes)
	}
	if len(shape.NonMatching) != 1 || shape.NonMatching[0]["room"] != "0" || shape.NonMatching[0]["class"] != "warmup" {
		t.Errorf("json non_matching %v", shape.NonMatching)
	}
}

func TestCompareClasses(t *testing.T) {
	P, D := hook.SidePrefill, hook.SideDecode
	cases := []struct {
		name   string
		opts   Options
		recs   []Record
		class  string // of room 1
		reason string // substring
		failed bool
	}{
		{"match", Options{}, []Record{rec(P, 1, 100, 5, 6), rec(D, 1, 100, 5, 6)}, ClassMatch, "", false},
		{"mismatch both digests", Options{}, []Record{rec(P, 1, 100, 5, 6), rec(D, 1, 100, 7, 8)}, ClassMismatch, "bsum and xxh3 differ", true},
		{"mismatch bsum only", Options{}, []Record{rec(P, 1, 100, 5, 6), rec(D, 1, 100, 7, 6)}, ClassMismatch, "bsum differs", true},
		{"mismatch seq_len", Options{}, []Record{rec(P, 1, 100, 5, 6), rec(D, 1, 99, 5, 6)}, ClassMismatch, "seq_len differs", true},
		{"warmup by seq_len", Options{}, []Record{rec(P, 1, 16, 5, 6), rec(D, 1, 16, 7, 8)}, ClassWarmup, "16 ≤ 16", false},
		{"not warmup just above", Options{}, []Record{rec(P, 1, 17, 5, 6), rec(D, 1, 17, 7, 8)}, ClassMismatch, "", true},
		{"warmup flag raised", Options{WarmupMaxSeqLen: 32}, []Record{rec(P, 1, 17, 5, 6), rec(D, 1, 17, 7, 8)}, ClassWarmup, "", false},
		{"seq_len rule off", Options{WarmupMaxSeqLen: -1}, []Record{rec(P, 1, 4, 5, 6), rec(D, 1, 4, 7, 8)}, ClassMismatch, "", true},
		{"warmup by decode zero", Options{}, []Record{rec(P, 1, 500, 5, 6), rec(D, 1, 500, 0, 0)}, ClassWarmup, "decode digest 0", false},
		{"decode zero bsum only is a mismatch", Options{}, []Record{rec(P, 1, 500, 5, 6), rec(D, 1, 500, 0, 6)}, ClassMismatch, "", true},
		{"missing decode", Options{}, []Record{rec(P, 1, 100, 5, 6)}, ClassMissingDecode, "", true},
		{"missing prefill", Options{}, []Record{rec(D, 1, 100, 5, 6)}, ClassMissingPrefill, "", true},
		{"short room missing decode is a warmup", Options{}, []Record{rec(P, 1, 3, 5, 6)}, ClassWarmup, "", false},
		{"duplicate prefill", Options{}, []Record{rec(P, 1, 100, 5, 6), rec(P, 1, 100, 9, 9), rec(D, 1, 100, 5, 6)}, ClassDuplicate, "more than once", true},
		{"duplicate decode", Options{}, []Record{rec(P, 1, 100, 5, 6), rec(D, 1, 100, 5, 6), rec(D, 1, 100, 5, 7)}, ClassDuplicate, "", true},
		{"identical repeat is not a duplicate", Options{}, []Record{rec(P, 1, 100, 5, 6), rec(P, 1, 100, 5, 6), rec(D, 1, 100, 5, 6)}, ClassMatch, "", false},
		{"repeated warmup room", Options{}, []Record{rec(P, 1, 4, 5, 6), rec(P, 1, 5, 9, 9), rec(D, 1, 4, 0, 0)}, ClassWarmup, "more than once", false},
		{"engine evidence overrides a match", Options{}, []Record{rec(P, 1, 100, 5, 6), rec(D, 1, 100, 5, 6), {Evidence: true, HasRoom: true, Room: 1, Side: D}}, ClassMismatch, "engine reported", true},
		{"engine evidence alone", Options{}, []Record{{Evidence: true, HasRoom: true, Room: 1, Side: D}}, ClassMismatch, "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := compareRecords(t, c.opts, slices.Clone(c.recs))
			if r.Rooms != 1 {
				t.Fatalf("rooms %d", r.Rooms)
			}
			if r.Classes.Get(c.class) != 1 {
				t.Fatalf("classes %+v, want one %s", r.Classes, c.class)
			}
			if r.Failed() != c.failed {
				t.Errorf("Failed() = %v", r.Failed())
			}
			if c.class == ClassMatch {
				if len(r.NonMatching) != 0 {
					t.Errorf("match listed as non-matching: %+v", r.NonMatching)
				}
				return
			}
			if len(r.NonMatching) != 1 || r.NonMatching[0].Class != c.class || !strings.Contains(r.NonMatching[0].Reason, c.reason) {
				t.Fatalf("non-matching %+v, want class %s reason ~%q", r.NonMatching, c.class, c.reason)
			}
			if c.class == ClassDuplicate && len(r.NonMatching[0].Duplicates) < 2 {
				t.Errorf("duplicate without both digests: %+v", r.NonMatching[0])
			}
		})
	}
}

func TestCompareUnattributedEvidenceFails(t *testing.T) {
	r := compareRecords(t, Options{}, []Record{rec(hook.SidePrefill, 1, 100, 5, 6), rec(hook.SideDecode, 1, 100, 5, 6), {Evidence: true, Side: hook.SideDecode}})
	if !r.Failed() || len(r.Unattributed) != 1 || r.Unattributed[0].Where != "in:3" {
		t.Fatalf("report %+v", r)
	}
	if !strings.Contains(r.Headline(), "without a room") {
		t.Errorf("headline %q", r.Headline())
	}
}

func TestCompareLocatesPages(t *testing.T) {
	l := mustLayout(t, "bf16")
	src := kvlayout.GenArena(l, 61, 6)
	srcPages := []uint32{5, 0, 3, 1}
	const seqLen = 230
	dst := make([]byte, 8*l.PageBytes())
	dstPages := []uint32{2, 7, 4, 6}
	pb := l.PageBytes()
	for i := range srcPages {
		copy(dst[int(dstPages[i])*pb:][:pb], src[int(srcPages[i])*pb:][:pb])
	}
	// A late chunk lands after decode read the room: entries 1 and 2 are stale.
	dst[int(dstPages[1])*pb+100] ^= 1
	dst[int(dstPages[2])*pb+5000] ^= 1
	pre, err := RecordFromEvent(NewRoomEvent(l, src, srcPages, seqLen, 42, hook.SidePrefill))
	if err != nil {
		t.Fatal(err)
	}
	dec, err := RecordFromEvent(NewRoomEvent(l, dst, dstPages, seqLen, 42, hook.SideDecode))
	if err != nil {
		t.Fatal(err)
	}
	r := compareRecords(t, Options{}, []Record{pre, dec})
	if r.Classes.Mismatch != 1 || r.PagesLocated != 1 {
		t.Fatalf("report %+v", r)
	}
	got := r.NonMatching[0]
	if !slices.Equal(got.MismatchPages, []int{1, 2}) || !slices.Equal(got.MismatchTokens, []TokenRange{{64, 192}}) {
		t.Fatalf("pages %v tokens %v, want [1 2] and [64,192)", got.MismatchPages, got.MismatchTokens)
	}
	// The tokens named are exactly the ones that differ.
	toks := kvlayout.DiffTokens(l, src, srcPages, dst, dstPages, seqLen)
	if len(toks) != 2 || toks[0] < 64 || toks[1] >= 192 {
		t.Errorf("DiffTokens %v outside the located range", toks)
	}
}

func TestDiffPages(t *testing.T) {
	pages, toks := DiffPages([]uint64{1, 2, 3, 4}, []uint64{1, 9, 3, 9}, 200)
	if !slices.Equal(pages, []int{1, 3}) || !slices.Equal(toks, []TokenRange{{64, 128}, {192, 200}}) {
		t.Errorf("pages %v toks %v", pages, toks)
	}
	pages, _ = DiffPages([]uint64{1, 2}, []uint64{1}, 100)
	if !slices.Equal(pages, []int{1}) {
		t.Errorf("length mismatch pages %v", pages)
	}
}

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCompareLogFiles(t *testing.T) {
	dir := t.TempDir()
	pre := writeFile(t, dir, "prefill.log",
		"[TP0] kvcanary room_checksum side=prefill room=1 seq_len=100 pages=2 bsum=0x5 xxh3=6 page_xxh3=1,2\n"+
			"junk line\n"+
			"[TP0] kvcanary room_checksum side=prefill room=2 seq_len=100 pages=2 bsum=7 xxh3=8 page_xxh3=1,2\n")
	dec := writeFile(t, dir, "decode.log",
		"2026 kvcanary room_checksum side=decode room=1 seq_len=100 pages=2 bsum=5 xxh3=0x6 page_xxh3=1,2\n"+
			"2026 kvcanary room_checksum side=decode room=2 seq_len=100 pages=2 bsum=7 xxh3=9 page_xxh3=1,3\n")
	r, err := Compare(Options{}, LogFile(pre), LogFile(dec))
	if err != nil {
		t.Fatal(err)
	}
	if r.Rooms != 2 || r.Classes.Match != 1 || r.Classes.Mismatch != 1 {
		t.Fatalf("report %+v", r)
	}
	if !slices.Equal(r.NonMatching[0].MismatchPages, []int{1}) {
		t.Errorf("mismatch pages %v", r.NonMatching[0].MismatchPages)
	}
	if len(r.Inputs) != 2 || r.Inputs[0].Skipped != 1 || !slices.Equal(r.Inputs[0].SkippedLines, []int64{2}) {
		t.Errorf("inputs %+v", r.Inputs)
	}
}

func TestCompareEmptyInputs(t *testing.T) {
	dir := t.TempDir()
	empty := writeFile(t, dir, "empty.log", "")
	noRecs := writeFile(t, dir, "norecs.log", "a\nb\n")
	good := writeFile(t, dir, "good.log", "kvcanary room_checksum side=prefill room=1 seq_len=100 pages=2 bsum=5 xxh3=6\n")
	_, err := Compare(Options{}, LogFile(good), LogFile(empty))
	if !errors.Is(err, ErrNoRecords) || !strings.Contains(err.Error(), "empty.log: empty input") {
		t.Errorf("empty: %v", err)
	}
	_, err = Compare(Options{}, LogFile(noRecs))
	if !errors.Is(err, ErrNoRecords) || !strings.Contains(err.Error(), "in 2 lines") {
		t.Errorf("no records: %v", err)
	}
}

type memStream struct {
	evs    []hook.Event
	i      int
	closed *int
}

func (m *memStream) Next() (hook.Event, error) {
	if m.i == len(m.evs) {
		return hook.Event{}, errEOF
	}
	m.i++
	return m.evs[m.i-1], nil
}

func (m *memStream) Close() error { *m.closed++; return nil }

func TestCompareEventSource(t *testing.T) {
	evs := []hook.Event{
		{Kind: hook.KindRunStart, Body: &hook.RunStart{}},
		{Kind: hook.KindRoomChecksum, Body: &hook.RoomChecksum{Room: 3, Side: hook.SidePrefill, SeqLen: 80, Pages: 2, Bsum: 1, XXH3: 2, PageSum: []hook.Hex64{1, 2}}},
		{Kind: hook.KindRoomChecksum, Body: &hook.RoomChecksum{Room: 3, Side: hook.SideDecode, SeqLen: 80, Pages: 2, Bsum: 1, XXH3: 3, PageSum: []hook.Hex64{1, 5}}},
		{Kind: hook.KindRoomChecksum, Body: &hook.RoomChecksum{Room: 4, Side: "sideways", SeqLen: 80}},
	}
	closed := 0
	src := EventSource("run.kvc", func() (EventStream, error) { return &memStream{evs: evs, closed: &closed}, nil })
	r, err := Compare(Options{}, src)
	if err != nil {
		t.Fatal(err)
	}
	if r.Classes.Mismatch != 1 || !slices.Equal(r.NonMatching[0].MismatchPages, []int{1}) {
		t.Fatalf("report %+v", r)
	}
	if in := r.Inputs[0]; in.Events != 4 || in.Records != 2 || in.Malformed != 1 || !slices.Equal(in.MalformedLines, []int64{4}) {
		t.Errorf("input stats %+v", in)
	}
	if closed != 2 {
		t.Errorf("stream closed %d times, want 2 (two passes)", closed)
	}
}

var errEOF = io.EOF

func TestRadixSort(t *testing.T) {
	for _, n := range []int{0, 1, 2, 100, 5000} {
		for _, gen := range []func(i int) uint64{
			func(i int) uint64 { return kvlayout.Mix64(uint64(i)) },
			func(i int) uint64 { return uint64(n - i) },
			func(i int) uint64 { return 7 },
			func(i int) uint64 { return uint64(i%3) << 56 },
		} {
			c := make([]entry, n)
			for i := range c {
				c[i] = entry{room: gen(i), bsum: uint64(i)}
			}
			want := slices.Clone(c)
			slices.SortStableFunc(want, func(a, b entry) int { return cmp.Compare(a.room, b.room) })
			radixSort(c, nil)
			if !slices.Equal(c, want) {
				t.Fatalf("n=%d: radix sort differs from a stable sort", n)
			}
		}
	}
}

func mustLayout(t testing.TB, dtype string) kvlayout.Layout {
	t.Helper()
	l, err := kvlayout.NewLayout(dtype)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
