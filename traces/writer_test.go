package traces

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// The writer and the collector apply one size rule: an event the
// collector's ingest check admits is written, one it refuses the writer
// refuses, at the limit and one byte over, whatever the escaping.
func TestWriterAndCollectorShareTheSizeRule(t *testing.T) {
	if maxLineBytes != hook.MaxEventLine {
		t.Fatalf("the reader's line limit %d differs from the writer's rule %d", maxLineBytes, hook.MaxEventLine)
	}
	empty := hook.Event{Kind: hook.KindFinding, TS: 1, Body: &hook.Finding{Severity: hook.SevInfo}}
	base, err := hook.EventLineLen(empty)
	if err != nil {
		t.Fatal(err)
	}
	room := hook.MaxEventLine - base
	cases := []struct {
		name    string
		summary string
		fits    bool
	}{
		{"plain at the limit", strings.Repeat("x", room), true},
		{"plain one over", strings.Repeat("x", room+1), false},
		{"'<' at the limit", strings.Repeat("<", room/6) + strings.Repeat("x", room%6), true},
		{"'<' one over", strings.Repeat("<", room/6) + strings.Repeat("x", room%6+1), false},
		{"3 MiB of '<'", strings.Repeat("<", 3<<20), false},
	}
	var buf bytes.Buffer
	w, err := newWriter(&buf, "test", testManifest, 0, func() time.Time { return testManifest.Created })
	if err != nil {
		t.Fatal(err)
	}
	written := uint64(0)
	for _, tc := range cases {
		ev := hook.Event{Kind: hook.KindFinding, TS: 1, Body: &hook.Finding{Severity: hook.SevInfo, Summary: tc.summary}}
		admit := hook.AdmitEvent(ev, len(tc.summary)+base, true)
		werr := w.Write(ev)
		if (admit == nil) != tc.fits || (werr == nil) != tc.fits {
			t.Errorf("%s: AdmitEvent %v, Writer.Write %v; want both to accept: %v", tc.name, admit, werr, tc.fits)
		}
		if !tc.fits && !errors.Is(werr, hook.ErrTooLarge) {
			t.Errorf("%s: writer error %v does not wrap hook.ErrTooLarge", tc.name, werr)
		}
		if werr == nil {
			written++
		}
	}
	w.AddRejected(7) // what a collector refused at ingest
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, evs := readAll(t, buf.Bytes())
	f, ok := r.Footer()
	if !ok || uint64(len(evs)) != written || f.Rejected != 3+7 || w.Rejected() != 3 {
		t.Fatalf("read %d events (wrote %d); footer %+v; writer rejected %d: want footer rejected = 3 by the writer + 7 at ingest", len(evs), written, f, w.Rejected())
	}
}

// checkHookLine fails t unless the writer's envelope encoder writes ev in
// hook's JSON-lines form, byte for byte.
func checkHookLine(t *testing.T, w *Writer, ev hook.Event) {
	t.Helper()
	want, err := ev.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	got, err := w.appendEvent(nil, ev)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(want, got) {
		t.Errorf("%s:\nhook   %s\nwriter %s", ev.Kind, want, got)
	}
}

// The writer's envelope encoder must produce hook's JSON-lines form byte for byte.
func TestWriterLineIsHookForm(t *testing.T) {
	w := &Writer{}
	evs := sampleEvents()
	evs = append(evs, hook.Event{Kind: hook.KindSession, TS: -5, Src: hook.Source{Proc: "p\x01\"<"}, Run: "run\u2028x\xff", Body: &hook.Session{ID: "x", Outcome: hook.OutcomeDone}})
	for _, ev := range evs {
		checkHookLine(t, w, ev)
	}
	if _, err := w.appendEvent(nil, hook.Event{Kind: hook.KindReplay}); err == nil {
		t.Error("event without body accepted")
	}
	if _, err := w.appendEvent(nil, hook.Event{Kind: hook.KindReplay, Body: &hook.Session{}}); err == nil {
		t.Error("event with a body of another kind accepted")
	}
}

// The writer's envelope encoder writes src role and rank as hook does.
func TestWriterLineCarriesRoleRank(t *testing.T) {
	w := &Writer{}
	for _, src := range []hook.Source{
		{Node: "h", Proc: "p", PID: 2, Role: "prefill", Rank: 3},
		{Role: "decode"},
		{Node: "h", Role: "decode", Rank: 1},
	} {
		checkHookLine(t, w, hook.Event{Kind: hook.KindReplay, TS: 9, Src: src, Body: &hook.Replay{Mode: hook.ModeGraph}})
	}
}
