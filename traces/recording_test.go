package traces

import (
	"io"
	"path/filepath"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

func TestRecordingWritesEverythingPublishedBeforeClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.kvtrace")
	rec, err := StartRecording(path, Manifest{Tool: "test", Run: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 10000
	for i := 1; i <= n; i++ {
		rec.Publish(hook.Event{Kind: hook.KindReplay, TS: int64(i), Body: &hook.Replay{Step: uint64(i), Mode: "graph"}})
	}
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := 0
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got++
		if ev.Body.(*hook.Replay).Step != uint64(got) {
			t.Fatalf("event %d has step %d", got, ev.Body.(*hook.Replay).Step)
		}
	}
	if got != n || r.Manifest().Run != "r1" {
		t.Fatalf("read %d events of run %q, want %d of r1", got, r.Manifest().Run, n)
	}
	if f, ok := r.Footer(); !ok || f.Events != n {
		t.Fatalf("footer = %+v, %v; want %d events", f, ok, n)
	}
}
