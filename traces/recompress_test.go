package traces

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// highRatioBundle is a bundle of n replay events, re-compressed as
// `zstdcat | zstd -19` does (one streamed frame, no padding): the events
// differ only in step and time, so it compresses far past 64:1.
func highRatioBundle(t testing.TB, n int) (recompressed []byte, plain int) {
	t.Helper()
	reason := strings.Repeat("the model answered with a tool call as the script asked; ", 5)
	var buf bytes.Buffer
	w, err := NewWriter(&buf, Manifest{Tool: "test", Run: "r"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := w.Write(hook.Event{Kind: hook.KindSession, TS: int64(1_000_000 + i*25_000), Src: hook.Source{Proc: "repro", PID: 4242},
			Body: &hook.Session{ID: fmt.Sprintf("s%06d", i), Outcome: hook.OutcomeDone, Rounds: 4, Reason: reason,
				FinishReasons: []string{"tool_calls", "tool_calls", "tool_calls", "stop"}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	dec, err := zstd.NewReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	var out bytes.Buffer
	enc, err := zstd.NewWriter(&out, zstd.WithEncoderLevel(zstd.SpeedBestCompression), zstd.WithWindowSize(8<<20))
	if err != nil {
		t.Fatal(err)
	}
	m, err := io.Copy(enc, dec)
	if err != nil {
		t.Fatal(err)
	}
	enc.Close()
	return out.Bytes(), int(m)
}

// Issue 27 D5: an honest bundle re-compressed at a high ratio reads back
// whole (before: 28% or 77% of its events were lost to the budget, and the
// reader blamed "the writer did not close the bundle").
func TestHighRatioRecompressedBundleReadsWhole(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 120 MB of JSON")
	}
	const n = 250_000 // over 100 MB of JSON: past the old budget's 32 MiB slack
	data, plain := highRatioBundle(t, n)
	ratio := float64(plain) / float64(len(data))
	t.Logf("%d events: %d bytes of JSON in %d compressed (%.0f:1)", n, plain, len(data), ratio)
	if ratio < 90 {
		t.Fatalf("fixture compresses only %.0f:1; the test needs a ratio above the old 64:1 budget", ratio)
	}
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := countEvents(t, r); got != n || r.Skipped() != 0 || r.Truncated() {
		t.Fatalf("%d of %d events, skips %v, truncated %q", got, n, r.Skips()[:min(2, len(r.Skips()))], r.TruncationReason())
	}
}

// Past the budget, the reader names the cause: the budget, with the bytes
// decoded and read, not a writer that did not close the bundle.
func TestBudgetStopNamesTheCause(t *testing.T) {
	data, _ := highRatioBundle(t, 100_000)
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.ratio, r.scan.ratio = 16, 16 // a budget this bundle passes
	countEvents(t, r)
	why := r.TruncationReason()
	if !r.Truncated() || !strings.Contains(why, "stopped at the decompression budget after") || !strings.Contains(why, "a re-compressed bundle?") || strings.Contains(why, "did not close") {
		t.Fatalf("truncated %v, reason %q", r.Truncated(), why)
	}
}
