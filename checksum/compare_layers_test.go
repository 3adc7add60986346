package checksum

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/spec/kvlayout"
)

// rrec is a v1.1 record: rank and stage set.
func rrec(side hook.Side, rank int, stage string, bsum, xxh3 uint64) Record {
	r := rec(side, 1, 300, bsum, xxh3)
	r.Rank, r.Stage = rank, stage
	return r
}

func TestCompareRanksAndStages(t *testing.T) {
	P, D := hook.SidePrefill, hook.SideDecode
	const S, T, A = hook.StageSent, hook.StageTransferred, hook.StageAdmitted
	good := func() []Record {
		return []Record{rrec(P, 0, S, 5, 6), rrec(P, 1, S, 5, 6), rrec(D, 0, T, 5, 6), rrec(D, 1, T, 5, 6), rrec(D, 0, A, 5, 6), rrec(D, 1, A, 5, 6)}
	}
	cases := []struct {
		name     string
		recs     []Record
		class    string
		reason   []string // substrings
		disagree []RecordID
		repeats  int64
	}{
		{"every rank and stage agrees", good(), ClassMatch, nil, nil, 0},
		{"ranks are not repeats of each other", append(good(), rrec(D, 1, A, 5, 6)), ClassMatch, nil, nil, 1},
		{"xxh3 0 is not computed", []Record{rrec(P, 0, S, 5, 6), rrec(D, 0, T, 5, 0), rrec(D, 1, T, 5, 0)}, ClassMatch, nil, nil, 0},
		{"decode rank disagrees", func() []Record {
			r := good()
			r[3].Bsum = 9 // decode rank 1 transferred
			r[5].Bsum = 9 // decode rank 1 admitted
			return r
		}(), ClassMismatch, []string{"decode rank 1 transferred: bsum differs", "decode rank 1 admitted: bsum differs", "(vs prefill rank 0 sent)"},
			[]RecordID{{Side: D, Rank: 1, Stage: T}, {Side: D, Rank: 1, Stage: A}}, 0},
		{"two decode ranks, one group", func() []Record {
			r := append(good(), rrec(D, 2, T, 7, 6), rrec(D, 3, T, 7, 6))
			return r
		}(), ClassMismatch, []string{"decode ranks 2,3 transferred: bsum differs"}, []RecordID{{Side: D, Rank: 2, Stage: T}, {Side: D, Rank: 3, Stage: T}}, 0},
		{"stage disagreement: transferred matches, admitted differs", func() []Record {
			r := good()
			r[4].Bsum, r[4].XXH3 = 9, 10 // decode rank 0 admitted
			return r
		}(), ClassMismatch, []string{"decode rank 0 admitted: bsum, xxh3 differ", "transferred matched: changed on the decode host after landing"},
			[]RecordID{{Side: D, Rank: 0, Stage: A}}, 0},
		{"prefill ranks disagree: the majority is the reference", func() []Record {
			return append(good(), rrec(P, 2, S, 8, 6))
		}(), ClassMismatch, []string{"prefill rank 2 sent: bsum differs"}, []RecordID{{Side: P, Rank: 2, Stage: S}}, 0},
		{"xxh3 wildcard does not hide two different xxh3", []Record{rrec(P, 0, S, 5, 0), rrec(D, 0, T, 5, 6), rrec(D, 1, T, 5, 7)}, ClassMismatch,
			[]string{"decode rank 1 transferred: xxh3 differs"}, []RecordID{{Side: D, Rank: 1, Stage: T}}, 0},
		{"one rank reporting 0 among digests", []Record{rrec(P, 0, S, 5, 6), rrec(D, 0, T, 5, 6), rrec(D, 1, T, 0, 0)}, ClassMismatch,
			[]string{"decode rank 1 transferred: bsum differs"}, []RecordID{{Side: D, Rank: 1, Stage: T}}, 0},
		{"every decode record 0 is a warmup", []Record{rrec(P, 0, S, 5, 6), rrec(D, 0, T, 0, 0), rrec(D, 1, T, 0, 0)}, ClassWarmup,
			[]string{"not transferred"}, nil, 0},
		{"same rank and stage twice is a duplicate", append(good(), rrec(D, 1, T, 5, 7)), ClassDuplicate,
			[]string{"seen more than once by one decode rank 1 transferred with different digests"}, nil, 0},
		{"one short prefill record does not make the room a warmup", func() []Record {
			r := good()
			r[0].SeqLen = 3 // prefill rank 0 claims a warmup length; rank 1 and decode say 300
			return r
		}(), ClassMismatch, []string{"prefill rank 0 sent"}, []RecordID{{Side: P, Rank: 0, Stage: S}}, 0},
		{"a repeat without the page digests is a repeat, not a duplicate", func() []Record {
			r := good()
			r[2].PageBsum = []uint64{1, 2, 3, 4, 5}
			return append(r, rrec(D, 0, T, 5, 6)) // the same producer's record, sent again without them
		}(), ClassMatch, nil, nil, 1},
		{"missing decode with ranks", []Record{rrec(P, 0, S, 5, 6), rrec(P, 1, S, 5, 6)}, ClassMissingDecode, []string{"no decode record"}, nil, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := compareRecords(t, Options{}, slices.Clone(c.recs))
			if r.Rooms != 1 || r.Classes.Get(c.class) != 1 {
				t.Fatalf("rooms %d classes %+v, want one %s; %+v", r.Rooms, r.Classes, c.class, r.NonMatching)
			}
			if r.IdenticalRepeats != c.repeats {
				t.Errorf("identical repeats %d, want %d", r.IdenticalRepeats, c.repeats)
			}
			if c.class == ClassMatch {
				if len(r.NonMatching) != 0 {
					t.Errorf("match listed: %+v", r.NonMatching)
				}
				return
			}
			rr := r.NonMatching[0]
			for _, want := range c.reason {
				if !strings.Contains(rr.Reason, want) {
					t.Errorf("reason %q lacks %q", rr.Reason, want)
				}
			}
			if c.disagree == nil {
				return
			}
			var got []RecordID
			refs := 0
			for _, rec := range rr.Records {
				if !rec.Agrees {
					got = append(got, rec.RecordID)
				}
				if rec.Reference {
					refs++
					if !rec.Agrees || rec.Side != P {
						t.Errorf("reference %+v", rec)
					}
				}
			}
			if !slices.Equal(got, c.disagree) || refs != 1 {
				t.Errorf("disagreeing %v (references %d), want %v", got, refs, c.disagree)
			}
		})
	}
}

// copyRoom copies a room's pages from src into other physical pages of a
// fresh arena, as a PD transfer does.
func copyRoom(l kvlayout.Layout, src []byte, srcPages, dstPages []uint32, dstPagesTotal int) []byte {
	pb := l.PageBytes()
	dst := make([]byte, dstPagesTotal*pb)
	for i := range srcPages {
		copy(dst[int(dstPages[i])*pb:][:pb], src[int(srcPages[i])*pb:][:pb])
	}
	return dst
}

// TestCompareNamesLayerAndPage: real multi-layer digests of a room on
// prefill (two ranks) and decode (two ranks, two stages, other physical
// pages); decode rank 1 sees one corrupted byte on layer 4 in page-table
// entry 1. Compare names that record, layer 4, entry 1 and its tokens, from
// page_bsum (the GPU hook sends no page_xxh3 and xxh3 0).
func TestCompareNamesLayerAndPage(t *testing.T) {
	l := mustLayout(t, "fp8")
	ids := []int{0, 2, 4, 6}
	srcPages, dstPages := []uint32{5, 0, 3}, []uint32{1, 7, 2}
	const seqLen = 170
	var pre, dec, bad []kvlayout.LayerArena
	for _, id := range ids {
		a := kvlayout.GenArena(l, 90+uint64(id), 6)
		pre = append(pre, kvlayout.LayerArena{Layer: id, Arena: a})
		dec = append(dec, kvlayout.LayerArena{Layer: id, Arena: copyRoom(l, a, srcPages, dstPages, 8)})
		bad = append(bad, kvlayout.LayerArena{Layer: id, Arena: copyRoom(l, a, srcPages, dstPages, 8)})
	}
	// Token 100 = entry 1, slot 36: one K byte on layer 4 (index 2).
	bad[2].Arena[int(dstPages[1])*l.PageBytes()+36*128+5] ^= 0x80
	ev := func(layers []kvlayout.LayerArena, pages []uint32, side hook.Side, rank int, stage string) Record {
		rc := NewLayersRoomEvent(l, layers, pages, seqLen, 77, side)
		rc.Rank, rc.Stage, rc.XXH3 = rank, stage, 0
		r, err := RecordFromEvent(rc)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	recs := []Record{
		ev(pre, srcPages, hook.SidePrefill, 0, hook.StageSent),
		ev(pre, srcPages, hook.SidePrefill, 1, hook.StageSent),
		ev(dec, dstPages, hook.SideDecode, 0, hook.StageTransferred),
		ev(bad, dstPages, hook.SideDecode, 1, hook.StageTransferred),
	}
	r := compareRecords(t, Options{}, recs)
	if r.Classes.Mismatch != 1 || r.PagesLocated != 1 {
		t.Fatalf("report %+v", r)
	}
	rr := r.NonMatching[0]
	if !slices.Equal(rr.MismatchLayers, []int{4}) || !slices.Equal(rr.MismatchPages, []int{1}) || !slices.Equal(rr.MismatchTokens, []TokenRange{{64, 128}}) {
		t.Fatalf("layers %v pages %v tokens %v, want [4] [1] [64,128)", rr.MismatchLayers, rr.MismatchPages, rr.MismatchTokens)
	}
	var badRec *RecordResult
	for i := range rr.Records {
		if !rr.Records[i].Agrees {
			badRec = &rr.Records[i]
		}
	}
	if badRec == nil || badRec.Rank != 1 || badRec.Side != hook.SideDecode || badRec.PagesFrom != "page_bsum" ||
		!slices.Equal(badRec.MismatchLayers, []int{4}) || !slices.Equal(badRec.Layers, ids) {
		t.Fatalf("disagreeing record %+v", badRec)
	}
	if !strings.Contains(rr.Reason, "decode rank 1 transferred: bsum differs") {
		t.Errorf("reason %q", rr.Reason)
	}
	// The JSON carries the detail.
	b, _ := json.Marshal(rr)
	for _, want := range []string{`"mismatch_layers":[4]`, `"pages_from":"page_bsum"`, `"rank":1`, `"stage":"transferred"`, `"agrees":false`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON lacks %s: %s", want, b)
		}
	}
}

func TestCompareLayersDiffer(t *testing.T) {
	p := rrec(hook.SidePrefill, 0, "", 5, 0)
	p.Layers, p.LayerBsum = []int{0, 1, 2}, []uint64{1, 2, 3}
	d := rrec(hook.SideDecode, 0, "", 6, 0)
	d.Layers, d.LayerBsum = []int{0, 1}, []uint64{1, 2}
	r := compareRecords(t, Options{}, []Record{p, d})
	if r.Classes.Mismatch != 1 {
		t.Fatalf("%+v", r)
	}
	rr := r.NonMatching[0]
	if !strings.Contains(rr.Reason, "layers, bsum differ") || !slices.Equal(rr.MismatchLayers, []int{2}) {
		t.Errorf("reason %q layers %v", rr.Reason, rr.MismatchLayers)
	}
}

// TestCompareTwoBundles: the prefill host's bundle and the decode host's,
// each with several ranks (and the hosts named by src.node), merged by one
// Compare: good rooms match, the bad one names the decode host's rank.
func TestCompareTwoBundles(t *testing.T) {
	var pevs, devs []hook.Event
	for room := uint64(1); room <= 20; room++ {
		for rank := range 4 {
			pevs = append(pevs, hook.Event{Kind: hook.KindRoomChecksum, Src: hook.Source{Node: "prefill-0"}, Body: &hook.RoomChecksum{
				Room: hook.Dec64(room), Side: hook.SidePrefill, SeqLen: 100, Pages: 2, Bsum: hook.Hex64(kvlayout.Mix64(room)), Rank: rank, Stage: hook.StageSent,
				PageBsum: []hook.Hex64{1, hook.Hex64(room)}}})
			for _, st := range []string{hook.StageTransferred, hook.StageAdmitted} {
				b, pg := kvlayout.Mix64(room), room
				if room == 13 && rank == 2 && st == hook.StageAdmitted {
					b, pg = b+1, pg+1
				}
				devs = append(devs, hook.Event{Kind: hook.KindRoomChecksum, Src: hook.Source{Node: "decode-0"}, Body: &hook.RoomChecksum{
					Room: hook.Dec64(room), Side: hook.SideDecode, SeqLen: 100, Pages: 2, Bsum: hook.Hex64(b), Rank: rank, Stage: st,
					PageBsum: []hook.Hex64{1, hook.Hex64(pg)}}})
			}
		}
	}
	closed := 0
	src := func(name string, evs []hook.Event) Source {
		return EventSource(name, func() (EventStream, error) { return &memStream{evs: evs, closed: &closed}, nil })
	}
	r, err := Compare(Options{}, src("prefill.kvtrace", pevs), src("decode.kvtrace", devs))
	if err != nil {
		t.Fatal(err)
	}
	if r.Rooms != 20 || r.Classes.Match != 19 || r.Classes.Mismatch != 1 || r.IdenticalRepeats != 0 || len(r.Inputs) != 2 {
		t.Fatalf("%s; %+v", r.Headline(), r)
	}
	rr := r.NonMatching[0]
	if uint64(rr.Room) != 13 || !strings.Contains(rr.Reason, "decode rank 2 admitted @decode-0: bsum differs") ||
		!strings.Contains(rr.Reason, "(vs prefill rank 0 sent @prefill-0)") || !strings.Contains(rr.Reason, "changed on the decode host") {
		t.Errorf("room %d reason %q", rr.Room, rr.Reason)
	}
	if !slices.Equal(rr.MismatchPages, []int{1}) || !slices.Equal(rr.MismatchTokens, []TokenRange{{64, 100}}) || r.PagesLocated != 1 {
		t.Errorf("pages %v tokens %v", rr.MismatchPages, rr.MismatchTokens)
	}
	if len(rr.Records) != 12 {
		t.Errorf("%d records listed, want 4 prefill + 8 decode", len(rr.Records))
	}
	if closed != 4 {
		t.Errorf("streams closed %d times, want 4 (two inputs, two passes)", closed)
	}
}

// A plain v1.0 pair keeps its v1.0 words and its JSON shape (no records).
func TestCompareV10ReasonsUnchanged(t *testing.T) {
	P, D := hook.SidePrefill, hook.SideDecode
	r := compareRecords(t, Options{}, []Record{rec(P, 1, 100, 5, 6), rec(P, 1, 100, 9, 9), rec(D, 1, 100, 5, 6)})
	if got := r.NonMatching[0].Reason; got != "seen more than once on one side with different digests" {
		t.Errorf("duplicate reason %q", got)
	}
	r = compareRecords(t, Options{}, []Record{rec(P, 1, 100, 5, 6), rec(D, 1, 100, 7, 8)})
	if rr := r.NonMatching[0]; rr.Reason != "bsum and xxh3 differ" || rr.Records != nil {
		t.Errorf("mismatch %+v", rr)
	}
	r = compareRecords(t, Options{}, []Record{rec(P, 1, 100, 5, 6), rec(D, 1, 100, 7, 0)})
	if rr := r.NonMatching[0]; rr.Reason != "bsum differs (xxh3 not computed)" {
		t.Errorf("mismatch %+v", rr)
	}
}

func TestEntryPacking(t *testing.T) {
	e := newEntry(1, 2, 3, 1<<40, 1<<30, 1<<20, 3, hasPageBsum|hasLayerBsum, 9, 65535)
	if e.seqLen != maxCount || e.pages() != maxPages || e.rank() != maxRank || e.stage() != 3 || e.flags() != hasPageBsum|hasLayerBsum || e.node() != 65535 || e.layers != 9 {
		t.Errorf("packed %+v: pages %d rank %d stage %d flags %d node %d", e, e.pages(), e.rank(), e.stage(), e.flags(), e.node())
	}
	e = newEntry(1, 2, 3, 100, 2, 7, 2, hasPageXXH3, 0, 4)
	if e.pages() != 2 || e.rank() != 7 || e.stage() != 2 || e.flags() != hasPageXXH3 || e.node() != 4 || !e.hasID() || e.v10() {
		t.Errorf("packed %+v", e)
	}
	if e := newEntry(1, 2, 3, 100, 2, 0, 0, 0, 0, 0); !e.v10() || e.hasID() {
		t.Errorf("v1.0 entry %+v", e)
	}
	if n := unsafe.Sizeof(entry{}); n != 40 {
		t.Errorf("entry is %d bytes, want 40", n)
	}
}
