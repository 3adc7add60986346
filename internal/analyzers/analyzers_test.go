package analyzers

import (
	"bytes"
	"encoding/json"
	"testing"

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
// Summary() the commands write, after a run that gave every analyzer
// something to count.
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
	sections := map[string]any{}
	for _, a := range s.All() {
		sections[a.Name()] = a.Summary()
	}
	want, err := json.Marshal(sections)
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(s.Summaries())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("typed summaries\n%s\nsections\n%s", got, want)
	}
	if s.Canary.Result().Replays == 0 || s.Checksum.Result().Rooms == 0 {
		t.Errorf("nothing counted: %s", got)
	}
}
