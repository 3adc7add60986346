package checksum_test

import (
	"context"
	"slices"
	"strconv"
	"testing"

	"github.com/kvcanary/kvcanary/checksum"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/runtime/sim"
	"github.com/kvcanary/kvcanary/spec/kvlayout"
	"github.com/kvcanary/kvcanary/spec/outcome"
)

// twinRooms runs a small twin workload with only the checksum instrument on
// and returns its room.checksum events, plus the findings and summary of a
// live checksum analyzer that watched the run.
func twinRooms(t *testing.T, cfg sim.Config) ([]*hook.RoomChecksum, []*hook.Finding, checksum.Summary) {
	t.Helper()
	cfg.Instruments = sim.Instruments{Checksum: true}
	w := sim.DefaultWorkload()
	w.Judge = outcome.Classifier{}.Outcome
	w.Sessions, w.Rounds = 12, 2
	if testing.Short() || raceEnabled {
		w.Sessions, w.Rounds = 3, 1
	}
	an := checksum.NewAnalyzer(checksum.Options{})
	var rooms []*hook.RoomChecksum
	var findings []*hook.Finding
	pub := hook.WithAnalyzers(hook.PublishFunc(func(ev hook.Event) {
		switch b := ev.Body.(type) {
		case *hook.RoomChecksum:
			rooms = append(rooms, b)
		case *hook.Finding:
			findings = append(findings, b)
		}
	}), an)
	if _, err := sim.Run(context.Background(), cfg, w, pub); err != nil {
		t.Fatal(err)
	}
	if len(rooms) < 4 {
		t.Fatalf("twin published %d room.checksum events", len(rooms))
	}
	return rooms, findings, an.Result()
}

func compareEvents(t *testing.T, rooms []*hook.RoomChecksum) *checksum.Report {
	t.Helper()
	c := checksum.NewComparer(checksum.Options{})
	recs := make([]checksum.Record, len(rooms))
	for i, rc := range rooms {
		r, err := checksum.RecordFromEvent(rc)
		if err != nil {
			t.Fatal(err)
		}
		recs[i] = r
		c.Add(&recs[i], "twin")
	}
	rep := c.Finish()
	if c.NeedPages() {
		for i := range recs {
			c.AddPages(&recs[i])
		}
		c.Locate()
	}
	return rep
}

// Acceptance: on the twin's baseline every non-warmup room matches and the
// warmup room (room 0, seq_len 4, decode digest 0) is classified warmup.
func TestTwinBaselineRoomsMatch(t *testing.T) {
	rooms, findings, sum := twinRooms(t, sim.DefaultConfig())
	rep := compareEvents(t, rooms)
	if rep.Failed() || rep.Classes.Mismatch != 0 {
		t.Fatalf("baseline: %s\n%+v", rep.Headline(), rep.NonMatching)
	}
	if rep.Classes.Warmup != 1 || len(rep.NonMatching) != 1 {
		t.Fatalf("baseline: want exactly one warmup room: %s", rep.Headline())
	}
	w := rep.NonMatching[0]
	if w.Room != 0 || w.Class != checksum.ClassWarmup || w.SeqLen != 4 || w.Decode == nil || w.Decode.Bsum != 0 || w.Decode.XXH3 != 0 {
		t.Errorf("warmup row %+v", w)
	}
	if rep.Classes.Match != rep.Rooms-1 || rep.Classes.Match < 2 {
		t.Errorf("baseline: %s", rep.Headline())
	}
	if len(findings) != 0 || sum.Mismatched != 0 || sum.Warmup != 1 || sum.Matched != rep.Classes.Match || sum.Missing != 0 {
		t.Errorf("live analyzer: %d findings, summary %+v", len(findings), sum)
	}
}

// Acceptance: with --inject transfer-race the decode side checksums a room
// before its last chunk lands: at least one room mismatches, and its page
// digests name exactly the pages of the one chunk that had not landed.
func TestTwinTransferRaceLocatesLateChunk(t *testing.T) {
	cfg := sim.DefaultConfig()
	cfg.Inject = []string{sim.FaultTransferRace}
	rooms, findings, sum := twinRooms(t, cfg)
	rep := compareEvents(t, rooms)
	if !rep.Failed() || rep.Classes.Mismatch < 1 {
		t.Fatalf("transfer-race: want a mismatch: %s", rep.Headline())
	}
	chunk := cfg.TransferChunkPages
	located := 0
	for _, rr := range rep.NonMatching {
		if rr.Class != checksum.ClassMismatch {
			continue
		}
		if rr.Prefill == nil || rr.Decode == nil {
			t.Fatalf("mismatch without both sides: %+v", rr)
		}
		if len(rr.MismatchPages) == 0 {
			t.Errorf("room %d: no mismatching pages located", rr.Room)
			continue
		}
		located++
		// At most one chunk is still in flight when the decode side checksums
		// (jitter may delay any chunk, not only the last): the mismatching
		// page-table entries must be exactly that chunk's pages.
		pages := rr.Prefill.Pages
		k := rr.MismatchPages[0] / chunk
		lo, hi := k*chunk, min((k+1)*chunk, pages)
		var want []int
		for p := lo; p < hi; p++ {
			want = append(want, p)
		}
		if !slices.Equal(rr.MismatchPages, want) {
			t.Errorf("room %d (%d pages, chunks of %d): mismatching page-table entries %v, want the one late chunk %v", rr.Room, pages, chunk, rr.MismatchPages, want)
		}
		if tr := rr.MismatchTokens; len(tr) != 1 || tr[0].Lo != lo*kvlayout.PageTokens || tr[0].Hi != min(hi*kvlayout.PageTokens, rr.SeqLen) {
			t.Errorf("room %d: token ranges %v, want the late chunk's tokens [%d,%d)", rr.Room, tr, lo*kvlayout.PageTokens, min(hi*kvlayout.PageTokens, rr.SeqLen))
		}
	}
	t.Logf("transfer-race: %s (%d located)", rep.Headline(), located)
	if located == 0 {
		t.Fatal("no mismatching room had its pages located")
	}
	if len(findings) == 0 || sum.Mismatched == 0 {
		t.Fatalf("live analyzer: %d findings, summary %+v", len(findings), sum)
	}
	f := findings[0]
	if f.Analyzer != "checksum" || f.Severity != hook.SevError || f.Evidence["mismatch_pages"] == "" {
		t.Errorf("finding %+v", f)
	}
	if !slices.ContainsFunc(rep.NonMatching, func(rr checksum.RoomResult) bool {
		return strconv.FormatUint(uint64(rr.Room), 10) == f.Evidence["room"]
	}) {
		t.Errorf("finding names room %s, which the compare did not flag", f.Evidence["room"])
	}
}
