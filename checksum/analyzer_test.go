package checksum

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

func roomEvent(side hook.Side, room uint64, seqLen int, bsum, xxh3 uint64, pages ...hook.Hex64) hook.Event {
	return hook.Event{Kind: hook.KindRoomChecksum, Body: &hook.RoomChecksum{
		Room: hook.Dec64(room), Side: side, SeqLen: seqLen, Pages: len(pages), Bsum: hook.Hex64(bsum), XXH3: hook.Hex64(xxh3), PageSum: pages}}
}

func TestAnalyzer(t *testing.T) {
	a := NewAnalyzer(Options{})
	if a.Name() != "checksum" {
		t.Fatalf("name %q", a.Name())
	}
	var findings []hook.Event
	emit := func(ev hook.Event) { findings = append(findings, ev) }
	P, D := hook.SidePrefill, hook.SideDecode
	for _, ev := range []hook.Event{
		{Kind: hook.KindReplay, Body: &hook.Replay{Step: 1}},
		roomEvent(P, 0, 4, 31177, 1),            // warmup
		roomEvent(D, 0, 4, 0, 0),                //
		roomEvent(P, 1, 200, 5, 6),              // match
		roomEvent(D, 1, 200, 5, 6),              //
		roomEvent(D, 2, 130, 7, 8, 1, 9, 3),     // mismatch, decode first, page 1 differs
		roomEvent(P, 2, 130, 7, 9, 1, 2, 3),     //
		roomEvent(P, 3, 300, 1, 1),              // missing decode
		roomEvent(P, 1, 200, 5, 6),              // repeat after judging
		roomEvent(D, 4, 10, 1, 1),               // short, one side: warmup
		roomEvent(D, 5, 500, 0, 0),              // decode zero, prefill never: warmup (not transferred), as Compare says
		roomEvent(P, 6, 100, 1, 1),              // repeat on a pending side
		roomEvent(P, 6, 100, 1, 2),              //
		roomEvent(hook.Side("x"), 9, 100, 1, 1), // ignored
	} {
		a.Observe(ev, emit)
	}
	if len(findings) != 1 {
		t.Fatalf("%d findings, want 1: %+v", len(findings), findings)
	}
	f := findings[0].Body.(*hook.Finding)
	if findings[0].Kind != hook.KindFinding || f.Analyzer != "checksum" || f.Severity != hook.SevError {
		t.Errorf("finding %+v", f)
	}
	for k, v := range map[string]string{"room": "2", "seq_len": "130", "prefill_xxh3": "0x0000000000000009", "decode_xxh3": "0x0000000000000008",
		"prefill_bsum": "0x0000000000000007", "mismatch_pages": "1", "mismatch_tokens": "64-128"} {
		if f.Evidence[k] != v {
			t.Errorf("evidence %s = %q, want %q", k, f.Evidence[k], v)
		}
	}
	if !strings.Contains(f.Summary, "room 2") || !strings.Contains(f.Summary, "64-128") {
		t.Errorf("summary %q", f.Summary)
	}
	s := a.Result()
	want := Summary{Rooms: 7, Matched: 1, Mismatched: 1, Warmup: 3, Missing: 2, Repeats: 2}
	if s != want {
		t.Errorf("summary %+v, want %+v", s, want)
	}
	b, _ := json.Marshal(a.Result())
	for _, k := range []string{`"rooms":7`, `"matched":1`, `"mismatched":1`, `"warmup":3`, `"missing":2`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("summary json %s lacks %s", b, k)
		}
	}
}

func TestAnalyzerOnBus(t *testing.T) {
	a := NewAnalyzer(Options{WarmupMaxSeqLen: 16})
	var mu sync.Mutex
	var kinds []hook.Kind
	pub := hook.WithAnalyzers(hook.PublishFunc(func(ev hook.Event) {
		mu.Lock()
		kinds = append(kinds, ev.Kind)
		mu.Unlock()
	}), a)
	ev := roomEvent(hook.SidePrefill, 8, 100, 1, 2)
	ev.TS = 77
	pub.Publish(ev)
	ev = roomEvent(hook.SideDecode, 8, 100, 1, 3)
	ev.TS = 78
	pub.Publish(ev)
	if len(kinds) != 3 || kinds[2] != hook.KindFinding {
		t.Fatalf("published kinds %v, want two room.checksum and a finding", kinds)
	}
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 100 {
				room := uint64(1000 + i*100 + j)
				a.Observe(roomEvent(hook.SidePrefill, room, 100, 1, 1), func(hook.Event) {})
				a.Observe(roomEvent(hook.SideDecode, room, 100, 1, 1), func(hook.Event) {})
				_ = a.Result()
			}
		}()
	}
	wg.Wait()
	if s := a.Result(); s.Matched != 400 || s.Mismatched != 1 {
		t.Errorf("summary after concurrent use %+v", s)
	}
}

// The live analyzer and Compare judge the same records the same way: the
// run summary's counts equal the compare's classes (missing-decode and
// missing-prefill together are the summary's missing).
func TestAnalyzerAgreesWithCompare(t *testing.T) {
	P, D := hook.SidePrefill, hook.SideDecode
	recs := []Record{
		rec(P, 0, 4, 31177, 1), rec(D, 0, 4, 0, 0), // warmup by seq_len
		rec(P, 1, 200, 5, 6), rec(D, 1, 200, 5, 6), // match
		rec(P, 2, 130, 7, 9), rec(D, 2, 130, 7, 8), // mismatch
		rec(P, 3, 300, 1, 1),                       // missing decode
		rec(D, 4, 300, 1, 1),                       // missing prefill
		rec(D, 5, 500, 0, 0),                       // decode 0 alone: warmup
		rec(P, 6, 200, 5, 6), rec(D, 6, 200, 0, 0), // decode 0: warmup
		rec(D, 7, 10, 3, 3), // short decode alone: warmup
	}
	c := NewComparer(Options{})
	a := NewAnalyzer(Options{})
	for i := range recs {
		c.Add(&recs[i], "t")
		a.Observe(hook.Event{Kind: hook.KindRoomChecksum, Body: recs[i].Event()}, func(hook.Event) {})
	}
	r := c.Finish()
	got := a.Result()
	want := Summary{Rooms: r.Rooms, Matched: r.Classes.Match, Mismatched: r.Classes.Mismatch, Warmup: r.Classes.Warmup,
		Missing: r.Classes.MissingDecode + r.Classes.MissingPrefill}
	if got != want || want.Warmup != 4 || want.Missing != 2 {
		t.Errorf("analyzer summary %+v, compare classes %+v (want 4 warmup, 2 missing)", got, r.Classes)
	}
}

// TestAnalyzerRanksAndStages: live, the first prefill record is the
// reference; other ranks and stages are judged against it as they arrive
// (before or after the pair), xxh3 0 is not computed, and a same-ID repeat
// is only counted.
func TestAnalyzerRanksAndStages(t *testing.T) {
	a := NewAnalyzer(Options{})
	var findings []*hook.Finding
	emit := func(ev hook.Event) { findings = append(findings, ev.Body.(*hook.Finding)) }
	ev := func(side hook.Side, room uint64, rank int, stage string, bsum, xxh3 uint64, pageBsum ...hook.Hex64) hook.Event {
		return hook.Event{Kind: hook.KindRoomChecksum, Src: hook.Source{Node: "h"}, Body: &hook.RoomChecksum{
			Room: hook.Dec64(room), Side: side, SeqLen: 100, Pages: 2, Bsum: hook.Hex64(bsum), XXH3: hook.Hex64(xxh3),
			Rank: rank, Stage: stage, PageBsum: pageBsum}}
	}
	P, D := hook.SidePrefill, hook.SideDecode
	for _, e := range []hook.Event{
		ev(P, 1, 0, "sent", 5, 6, 1, 2),
		ev(P, 1, 1, "sent", 5, 6, 1, 2), // waits for the pair
		ev(D, 1, 0, "transferred", 5, 0, 1, 2),
		ev(D, 1, 1, "transferred", 5, 0, 1, 2),
		ev(D, 1, 1, "admitted", 5, 0, 1, 2),
		ev(D, 1, 0, "admitted", 9, 0, 1, 3), // changed after landing
		ev(D, 1, 0, "admitted", 9, 0, 1, 3), // repeat
		ev(P, 2, 0, "sent", 5, 6),
		ev(D, 2, 0, "transferred", 5, 6),
	} {
		a.Observe(e, emit)
	}
	if len(findings) != 1 {
		t.Fatalf("%d findings: %+v", len(findings), findings)
	}
	f := findings[0]
	if f.Evidence["record"] != "decode rank 0 admitted @h" || f.Evidence["reference"] != "prefill rank 0 sent @h" ||
		f.Evidence["mismatch_pages"] != "1" || f.Evidence["mismatch_tokens"] != "64-100" {
		t.Errorf("finding %q %v", f.Summary, f.Evidence)
	}
	if s := a.Result(); s != (Summary{Rooms: 2, Matched: 1, Mismatched: 1, Repeats: 1}) {
		t.Errorf("summary %+v", s)
	}
}

// TestAnalyzerZeroDecodeFirst: a room whose first decode record is all zero
// (not transferred) is a warmup only while every decode record is zero; a
// later decode rank with digests makes it a mismatch, as compare judges it
// (SPEC §9.2), instead of the first zero settling the room for good.
func TestAnalyzerZeroDecodeFirst(t *testing.T) {
	ev := func(side hook.Side, room uint64, rank int, stage string, bsum, xxh3 uint64) hook.Event {
		return hook.Event{Kind: hook.KindRoomChecksum, Body: &hook.RoomChecksum{
			Room: hook.Dec64(room), Side: side, SeqLen: 100, Pages: 2, Bsum: hook.Hex64(bsum), XXH3: hook.Hex64(xxh3),
			Rank: rank, Stage: stage}}
	}
	P, D := hook.SidePrefill, hook.SideDecode
	for _, c := range []struct {
		name     string
		evs      []hook.Event
		want     Summary
		findings int
	}{
		{"every decode record zero", []hook.Event{ev(P, 1, 0, "sent", 5, 6), ev(D, 1, 0, "transferred", 0, 0), ev(D, 1, 1, "transferred", 0, 0)},
			Summary{Rooms: 1, Warmup: 1}, 0},
		{"a later decode rank with the right digests", []hook.Event{ev(P, 1, 0, "sent", 5, 6), ev(D, 1, 0, "transferred", 0, 0), ev(D, 1, 1, "transferred", 5, 6)},
			Summary{Rooms: 1, Mismatched: 1}, 1},
		{"a later corrupt decode rank", []hook.Event{ev(P, 1, 0, "sent", 5, 6), ev(D, 1, 0, "transferred", 0, 0), ev(D, 1, 1, "admitted", 9, 6)},
			Summary{Rooms: 1, Mismatched: 1}, 1},
		{"a later prefill rank that disagrees", []hook.Event{ev(P, 1, 0, "sent", 5, 6), ev(D, 1, 0, "transferred", 0, 0), ev(P, 1, 1, "sent", 7, 6)},
			Summary{Rooms: 1, Mismatched: 1}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := NewAnalyzer(Options{})
			n := 0
			for _, e := range c.evs {
				a.Observe(e, func(hook.Event) { n++ })
			}
			if s := a.Result(); s != c.want || n != c.findings {
				t.Errorf("summary %+v, %d findings; want %+v, %d", s, n, c.want, c.findings)
			}
		})
	}
}
