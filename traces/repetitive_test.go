package traces

import (
	"bytes"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// TestRepetitiveEventsReadBack: a stream of identical events compresses
// like a decompression bomb (about 1,300:1); the writer pads the bundle so
// its own reader's budget reads every event back.
func TestRepetitiveEventsReadBack(t *testing.T) {
	n := 1_000_000
	if testing.Short() || raceEnabled {
		n = 200_000
	}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, Manifest{Tool: "t"})
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := w.Write(hook.Event{Kind: hook.KindReplay, TS: 5, Body: &hook.Replay{Step: 1, Mode: "graph"}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	got := countEvents(t, r)
	if got != n || r.Skipped() != 0 {
		t.Fatalf("read %d of %d identical events back, %d skipped (%v)", got, n, r.Skipped(), r.Skips()[:min(2, len(r.Skips()))])
	}
	ratio := float64(r.DecodedBytes()) / float64(buf.Len())
	t.Logf("%d events: %d bytes on disk, decoded %d (%.0f:1)", n, buf.Len(), r.DecodedBytes(), ratio)
	if ratio > decodeRatio {
		t.Fatalf("ratio %.0f over the reader's %d", ratio, decodeRatio)
	}
}
