package pipeline

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/traces"
)

const t0 = int64(1_700_000_000_000_000_000)

func at(sec float64) int64 { return t0 + int64(sec*1e9) }

// fixture is 20 replay events 1 s apart plus two findings (one of the
// canary, one of graphdiff), spanning 19 s of event time.
func fixture() []hook.Event {
	var evs []hook.Event
	for i := range 20 {
		evs = append(evs, hook.Event{Kind: hook.KindReplay, TS: at(float64(i)), Run: "r",
			Body: &hook.Replay{Step: uint64(i), BatchSize: 4, Mode: hook.ModeGraph, DurNS: 1000}})
	}
	evs = append(evs,
		hook.Event{Kind: hook.KindFinding, TS: at(3), Run: "r", Body: &hook.Finding{Analyzer: "canary", Severity: hook.SevError, Summary: "x"}},
		hook.Event{Kind: hook.KindFinding, TS: at(4), Run: "r", Body: &hook.Finding{Analyzer: "graphdiff", Severity: hook.SevWarn, Summary: "y"}})
	return evs
}

func writeBundle(t *testing.T, evs []hook.Event) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fixture.kvtrace")
	w, err := traces.Create(path, traces.Manifest{Tool: "kvcanary test", Run: "r", Command: "test"})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if err := w.Write(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

type position struct {
	speed       float64
	first, last int64
	at          int64
	done        bool
}

func (p *position) SetSpeed(s float64) { p.speed = s }
func (p *position) SetSpan(f, l int64) { p.first, p.last = f, l }
func (p *position) Advance(ts int64)   { p.at = max(p.at, ts) }
func (p *position) Finish()            { p.done = true }

func TestParseSpeed(t *testing.T) {
	for in, want := range map[string]float64{"10x": 10, "10": 10, "0.5x": 0.5, "1X": 1, "max": 0} {
		if got, err := ParseSpeed(in); err != nil || got != want {
			t.Errorf("ParseSpeed(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "fast", "-1x", "0", "0x", "NaN", "Inf", "1e400", "10xx"} {
		if _, err := ParseSpeed(in); err == nil || !strings.Contains(err.Error(), "speed") {
			t.Errorf("ParseSpeed(%q) = %v, want an error naming the speed", in, err)
		}
	}
}

// TestReplayPacesAndSkipsRejudged: at 1000x a bundle spanning 19 s of event
// time takes at least 19 ms of wall time (less the pacer's slack); the
// findings of re-judging analyzers are left out; the position ends at the end.
func TestReplayPacesAndSkipsRejudged(t *testing.T) {
	evs := fixture()
	path := writeBundle(t, evs)
	var got []hook.Event
	c := &position{}
	start := time.Now()
	err := ReplayBundle(context.Background(), path, hook.PublishFunc(func(ev hook.Event) { got = append(got, ev) }),
		ReplayOptions{Speed: 1000, Rejudge: map[string]bool{"canary": true}, Cursor: c})
	el := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(evs)-1 {
		t.Fatalf("replayed %d events, want %d (the rejudged finding left out)", len(got), len(evs)-1)
	}
	for _, ev := range got {
		if f, ok := ev.Body.(*hook.Finding); ok && f.Analyzer == "canary" {
			t.Fatalf("replayed a finding of a re-judging analyzer: %+v", f)
		}
	}
	if min := 19*time.Millisecond - paceSlack; el < min {
		t.Fatalf("replay at 1000x took %v, less than the span allows (%v)", el, min)
	}
	if !c.done || c.speed != 1000 || c.first != at(0) || c.last != at(19) || c.at != at(19) {
		t.Fatalf("position %+v", c)
	}
}

func TestReplayStopsOnCancel(t *testing.T) {
	path := writeBundle(t, fixture())
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	err := ReplayBundle(ctx, path, hook.PublishFunc(func(hook.Event) {
		n++
		if n == 1 {
			// The second event is 1 s of event time later: at 0.001x the
			// replay waits 1000 s for it, unless cancelled meanwhile.
			time.AfterFunc(10*time.Millisecond, cancel)
		}
	}), ReplayOptions{Speed: 0.001})
	if err != nil || n != 1 {
		t.Fatalf("cancelled replay: %d events, err %v", n, err)
	}
}

// TestReplayCutsHugeGaps: a bundle recorded before the collector refused
// impossible timestamps (or by another tool) can hold ts_ns -5 and 2^63-1;
// its replay at 10x used to wait ~29 years for the last event. Each wait is
// now cut to maxPaceWait; the deadline only guards against a hang.
func TestReplayCutsHugeGaps(t *testing.T) {
	defer func(w time.Duration) { maxPaceWait = w }(maxPaceWait)
	maxPaceWait = 10 * time.Millisecond
	replay := func(ts int64) hook.Event {
		return hook.Event{Kind: hook.KindReplay, TS: ts, Run: "r", Body: &hook.Replay{BatchSize: 4, Mode: hook.ModeGraph, DurNS: 1000}}
	}
	path := writeBundle(t, []hook.Event{replay(-5), replay(at(0)), replay(at(0.01)), replay(math.MaxInt64), replay(at(0.02))})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n := 0
	c := &position{}
	err := ReplayBundle(ctx, path, hook.PublishFunc(func(hook.Event) { n++ }), ReplayOptions{Speed: 10, Cursor: c})
	if err != nil || ctx.Err() != nil || n != 5 {
		t.Fatalf("replay: %d of 5 events, err %v, ctx %v (a deadline means it stalled on the gap)", n, err, ctx.Err())
	}
	if !c.done || c.at != math.MaxInt64 {
		t.Fatalf("position %+v", c)
	}
}

func TestReplayErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "garbage.kvtrace")
	os.WriteFile(bad, []byte("not a bundle"), 0o600)
	for _, p := range []string{filepath.Join(dir, "missing.kvtrace"), bad} {
		err := Replay{Path: p}.Run(context.Background(), hook.PublishFunc(func(hook.Event) {}))
		if err == nil || !strings.Contains(err.Error(), filepath.Base(p)) {
			t.Errorf("%s: err %v, want one naming the file", p, err)
		}
	}
}

func TestRecoverTurnsPanicIntoError(t *testing.T) {
	f := func() (err error) {
		defer Recover(&err)
		var m map[string]int
		m["x"] = 1
		return nil
	}
	if err := f(); err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Fatalf("err %v", err)
	}
}

func TestPacedHoldsEventsToTheirTime(t *testing.T) {
	var got []int64
	sink := hook.PublishFunc(func(ev hook.Event) { got = append(got, ev.TS) })
	ctx, cancel := context.WithCancel(context.Background())
	pub := Paced(ctx, sink, 2) // 60 ms of event time in 30 ms
	start := time.Now()
	for _, ts := range []int64{1e9, 1e9 + 30e6, 1e9 + 60e6} {
		pub.Publish(hook.Event{Kind: hook.KindReplay, TS: ts, Body: &hook.Replay{}})
	}
	if el := time.Since(start); el < 30*time.Millisecond-paceSlack {
		t.Fatalf("60 ms of event time at 2x took %v", el)
	}
	cancel()
	// After ctx ends nothing is held back: an event an hour later passes.
	pub.Publish(hook.Event{Kind: hook.KindReplay, TS: 1e9 + 3600e9, Body: &hook.Replay{}})
	if len(got) != 4 {
		t.Fatalf("published %v", got)
	}
}
