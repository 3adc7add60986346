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
