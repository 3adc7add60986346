package checksum_test

import (
	"context"
	"io"
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

// compareEvents compares the twin's room.checksum events as checksum
// compare does a bundle's (both passes, page location included).
func compareEvents(t *testing.T, rooms []*hook.RoomChecksum) *checksum.Report {
	t.Helper()
	rep, err := checksum.Compare(checksum.Options{}, checksum.EventSource("twin", func() (checksum.EventStream, error) {
		return &roomStream{rooms: rooms}, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	if in := rep.Inputs[0]; in.Malformed != 0 || int(in.Records) != len(rooms) {
		t.Fatalf("twin events: %d records of %d, %d malformed (%s)", in.Records, len(rooms), in.Malformed, in.FirstReason)
	}
	return rep
}

// roomStream serves room.checksum bodies as a bundle's events.
type roomStream struct{ rooms []*hook.RoomChecksum }

func (s *roomStream) Next() (hook.Event, error) {
	if len(s.rooms) == 0 {
		return hook.Event{}, io.EOF
	}
	ev := hook.Event{Kind: hook.KindRoomChecksum, Body: s.rooms[0]}
	s.rooms = s.rooms[1:]
	return ev, nil
}

func (s *roomStream) Close() error { return nil }

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
