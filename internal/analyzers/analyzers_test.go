package analyzers

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/canary"
	"github.com/kvcanary/kvcanary/checksum"
	"github.com/kvcanary/kvcanary/graphdiff"
	"github.com/kvcanary/kvcanary/runtime/hook"
)

// Every analyzer has a distinct, non-empty name (it keys report sections),
// and each call returns fresh instances (analyzers hold per-run state).
func TestAllNamesAreDistinctAndInstancesFresh(t *testing.T) {
	a, b := All(Options{WarmupMaxSeqLen: 4}), All(Options{})
	if len(a) < 3 || len(a) != len(b) {
		t.Fatalf("got %d and %d analyzers, want the same list of at least 3", len(a), len(b))
	}
	seen := map[string]bool{}
	for i, an := range a {
		name := an.Name()
		if name == "" || seen[name] {
			t.Fatalf("analyzer %d: name %q empty or repeated", i, name)
		}
		seen[name] = true
		if an == b[i] {
			t.Fatalf("analyzer %q: the same instance returned twice", name)
		}
	}
	for _, want := range []string{"canary", "checksum", "graphdiff"} {
		if !seen[want] {
			t.Errorf("analyzer %q missing from %v", want, seen)
		}
	}
}

// The typed Summaries encode exactly as the map of analyzer name to
// summary the commands wrote (pinned here with each analyzer's own Name and
// Result), after a run that gave every analyzer something to count; Sections
// is that map.
func TestSummariesMatchSections(t *testing.T) {
	s := NewSet(Options{WarmupMaxSeqLen: 8})
	emit := func(hook.Event) {}
	for _, ev := range []hook.Event{
		{Kind: hook.KindCanaryPages, Body: &hook.CanaryPages{Step: 1, Policy: "live", PagesTotal: 8, PagesChecked: 2,
			Changed: []hook.PageChange{{Page: 3, Owner: "r1", Before: 1, After: 2}}}},
		{Kind: hook.KindRoomChecksum, Body: &hook.RoomChecksum{Room: 7, Side: hook.SidePrefill, SeqLen: 100, Pages: 2, Bsum: 1, XXH3: 2, Dtype: "bf16"}},
		{Kind: hook.KindRoomChecksum, Body: &hook.RoomChecksum{Room: 7, Side: hook.SideDecode, SeqLen: 100, Pages: 2, Bsum: 1, XXH3: 3, Dtype: "bf16"}},
	} {
		for _, a := range s.All() {
			a.Observe(ev, emit)
		}
	}
	sections := map[string]any{s.Canary.Name(): s.Canary.Result(), s.Checksum.Name(): s.Checksum.Result(), s.Graphdiff.Name(): s.Graphdiff.Result()}
	want, err := json.Marshal(sections)
	if err != nil {
		t.Fatal(err)
	}
	sums := s.Summaries()
	for name, v := range map[string]any{"summaries": sums, "sections": sums.Sections()} {
		got, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s\n%s\nwant\n%s", name, got, want)
		}
	}
	if s.Canary.Result().Replays == 0 || s.Checksum.Result().Rooms == 0 {
		t.Errorf("nothing counted: %s", want)
	}
}

// A set that lacks an analyzer says so: no bus analyzer, no summary, no
// JSON key — absent, not zero. SetOf finds the analyzers in a caller's list
// and leaves the others out.
func TestPartialSet(t *testing.T) {
	full := NewSet(Options{})
	part := Set{Checksum: full.Checksum}
	if as := part.All(); len(as) != 1 || as[0] != hook.Analyzer(full.Checksum) {
		t.Fatalf("All of a checksum-only set: %v", as)
	}
	sums := part.Summaries()
	if sums.Checksum == nil || sums.Canary != nil || sums.Graphdiff != nil {
		t.Fatalf("summaries of a checksum-only set: %+v", sums)
	}
	b, err := json.Marshal(sums)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"checksum":{"rooms":0,"matched":0,"mismatched":0,"warmup":0,"missing":0}}`; string(b) != want {
		t.Errorf("JSON %s, want %s", b, want)
	}
	if m := sums.Sections(); len(m) != 1 || m["checksum"] == nil {
		t.Errorf("sections %v", m)
	}
	if b, _ := json.Marshal(Set{}.Summaries()); string(b) != "{}" {
		t.Errorf("empty set: %s", b)
	}

	other := hook.Analyzer(otherAnalyzer{})
	got := SetOf(other, full.Graphdiff, full.Canary, NewSet(Options{}).Canary)
	if got.Canary != full.Canary || got.Graphdiff != full.Graphdiff || got.Checksum != nil {
		t.Errorf("SetOf: %+v", got)
	}
	if got := SetOf(full.All()...); got != full {
		t.Errorf("SetOf(All()) = %+v, want %+v", got, full)
	}
}

type otherAnalyzer struct{}

func (otherAnalyzer) Name() string                         { return "other" }
func (otherAnalyzer) Observe(hook.Event, func(hook.Event)) {}

func TestCoverageLostByLayer(t *testing.T) {
	cc := NewCoverageCollector()
	ends := []hook.Event{
		{Kind: hook.KindRunEnd, TS: 1, Src: hook.Source{Proc: "python3", PID: 1, Role: "prefill"}, Body: &hook.RunEnd{}},
		{Kind: hook.KindRunEnd, TS: 2, Src: hook.Source{Proc: "python3", PID: 2, Role: "decode", Rank: 1},
			Body: &hook.RunEnd{Error: "4 room checksums skipped (index-K on the host)"}},
		{Kind: hook.KindRunEnd, TS: 3, Src: hook.Source{Proc: "python3", PID: 3, Role: "decode"},
			Body: &hook.RunEnd{Error: "canary.replay off: 3 errors at X"}},
	}
	for _, ev := range append(ends, ends...) { // a second read adds nothing
		cc.Observe(ev)
	}
	c := cc.Result()
	if c.Ends != 3 || c.Lossy != 2 || len(c.Producers) != 2 {
		t.Fatalf("coverage = %+v", c)
	}
	if l := c.Lost(checksum.AnalyzerName); len(l) != 1 || !strings.Contains(l[0], "pid 2") || !strings.Contains(l[0], "room checksums skipped") {
		t.Errorf("checksum lost = %q", l)
	}
	if l := c.Lost(canary.AnalyzerName); len(l) != 1 || !strings.Contains(l[0], "canary.replay off") {
		t.Errorf("canary lost = %q", l)
	}
	if l := c.Lost(graphdiff.AnalyzerName); len(l) != 0 {
		t.Errorf("graphdiff lost = %q, want nothing", l)
	}
	// A note naming no instrument, and drops, bear on every layer.
	cc.Observe(hook.Event{Kind: hook.KindRunEnd, TS: 4, Src: hook.Source{Proc: "p", PID: 4}, Body: &hook.RunEnd{Dropped: 7, Error: "canary.replay off; 2 instrument errors"}})
	c = cc.Result()
	if l := c.Lost(graphdiff.AnalyzerName); len(l) != 1 || !strings.Contains(l[0], "dropped 7 events") || !strings.Contains(l[0], "instrument errors") {
		t.Errorf("graphdiff lost = %q", l)
	}
	if c.Partial(graphdiff.AnalyzerName) == "" || (Coverage{Ends: 3}).Partial(canary.AnalyzerName) != "" {
		t.Error("Partial disagrees with Lost")
	}
}
