package traces

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

func TestInspect(t *testing.T) {
	evs := sampleEvents()
	l := smallBundle(t, evs, 4)
	dir := t.TempDir()
	path := filepath.Join(dir, "run.kvtrace")
	if err := os.WriteFile(path, l.buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Inspect(path)
	if err != nil {
		t.Fatal(err)
	}
	if s.File != path || s.FormatVersion != "1.0" || s.Events != uint64(len(evs)) || s.Truncated || !s.HasFooter || s.FooterMismatch != "" || s.Skipped != 0 {
		t.Errorf("summary %+v", s)
	}
	if s.FirstTS != evs[0].TS || s.LastTS != evs[len(evs)-1].TS || s.SpanNS != s.LastTS-s.FirstTS {
		t.Errorf("span %d..%d (%d)", s.FirstTS, s.LastTS, s.SpanNS)
	}
	for _, k := range hook.Kinds() {
		if s.Counts[k.String()] != 1 {
			t.Errorf("count of %s = %d", k, s.Counts[k.String()])
		}
	}
	if s.Frames != uint64(len(l.ends)) || s.Bytes != int64(l.buf.Len()) || s.JSONBytes == 0 {
		t.Errorf("frames %d (want %d), bytes %d (want %d), json %d", s.Frames, len(l.ends), s.Bytes, l.buf.Len(), s.JSONBytes)
	}

	// Cut inside the third frame: events of frames 1-2 only, truncated.
	cut := filepath.Join(dir, "cut.kvtrace")
	if err := os.WriteFile(cut, l.buf.Bytes()[:l.ends[2]-1], 0o644); err != nil {
		t.Fatal(err)
	}
	s, err = Inspect(cut)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Truncated || s.HasFooter || s.Events != uint64(l.events[1]) || !strings.Contains(s.TruncationReason, "frame 3") {
		t.Errorf("cut summary: events %d (want %d), truncated %v %q", s.Events, l.events[1], s.Truncated, s.TruncationReason)
	}
}

func TestInspectFooterMismatch(t *testing.T) {
	ev, _ := sampleEvents()[3].MarshalJSON()
	data := compress(t,
		`{"kvtrace":{"format_version":"1.0"}}`,
		string(ev),
		`{"kvtrace_footer":{"events":2,"counts":{"replay":2}}}`)
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Summarize(r)
	if err != nil {
		t.Fatal(err)
	}
	if s.FooterMismatch != "footer counts 2 events, bundle holds 1" {
		t.Errorf("mismatch %q", s.FooterMismatch)
	}
}

// Timestamps at both ends of int64 (a crafted or broken producer) give the
// largest span, never a negative one from an overflowing subtraction.
func TestInspectSpanSaturates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.kvtrace")
	w, err := Create(path, testManifest)
	if err != nil {
		t.Fatal(err)
	}
	for _, ts := range []int64{-1 << 63, 1<<63 - 1} {
		if err := w.Write(hook.Event{Kind: hook.KindReplay, TS: ts, Body: &hook.Replay{Step: 1, Mode: "graph"}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := Inspect(path)
	if err != nil {
		t.Fatal(err)
	}
	if s.Events != 2 || s.FirstTS != -1<<63 || s.LastTS != 1<<63-1 || s.SpanNS != 1<<63-1 {
		t.Errorf("events %d, span %d..%d = %d; want 2 events and the saturated span %d", s.Events, s.FirstTS, s.LastTS, s.SpanNS, int64(1<<63-1))
	}
}
