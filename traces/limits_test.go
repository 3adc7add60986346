package traces

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// bigBundle writes a closed bundle holding more than minJSON bytes of event
// JSON and returns it with its event count.
func bigBundle(t testing.TB, minJSON int) ([]byte, int) {
	t.Helper()
	var buf bytes.Buffer
	w, err := newWriter(&buf, "big", testManifest, 0, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	evs := sampleEvents()
	n, size := 0, 0
	for size < minJSON {
		ev := evs[n%len(evs)]
		ev.TS = int64(n)
		line, _ := ev.MarshalJSON()
		size += len(line) + 1
		if err := w.Write(ev); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), n
}

func countEvents(t testing.TB, r *Reader) int {
	t.Helper()
	n := 0
	eachEvent(t, r, func(hook.Event) { n++ })
	return n
}

// FORMAT.md promises that `zstdcat b | zstd > r` is a readable bundle: a
// single streamed frame with no content size, here over 32 MiB of JSON.
func TestRecompressedBundleOver32MiB(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 40 MiB of JSON")
	}
	data, want := bigBundle(t, 40<<20)
	plain, err := zstd.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	var re bytes.Buffer
	enc, err := zstd.NewWriter(&re, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithWindowSize(8<<20), zstd.WithEncoderCRC(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(enc, plain); err != nil {
		t.Fatal(err)
	}
	enc.Close()
	check := func(name string, b []byte) {
		r, err := NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		defer r.Close()
		if got := countEvents(t, r); got != want || r.Skipped() != 0 || r.Truncated() {
			t.Fatalf("%s: %d events of %d, skips %v, truncated %q", name, got, want, r.Skips(), r.TruncationReason())
		}
	}
	check("klauspost stream", re.Bytes())

	if _, err := exec.LookPath("zstd"); err != nil {
		t.Logf("zstd CLI not installed: %v; only the library-made stream was read", err)
		return
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "b.kvtrace")
	if err := os.WriteFile(src, data, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("sh", "-c", "zstdcat "+src+" | zstd -q -c").Output()
	if err != nil {
		t.Fatalf("zstdcat | zstd: %v", err)
	}
	check("zstdcat | zstd", out)
}

// bomb is a bundle of about 100 KB: a good manifest frame, then frames
// that each decode to 32 MiB of junk lines.
func bomb(t testing.TB) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBestCompression), zstd.WithWindowSize(8<<20), zstd.WithEncoderCRC(true))
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	out := compress(t, `{"kvtrace":{"format_version":"1.0"}}`)
	junk := bytes.Repeat([]byte("{}\n"), (maxFrameBytes-1)/3)
	frame := enc.EncodeAll(junk, nil)
	for len(out) < 100<<10 {
		out = append(out, frame...)
	}
	return out
}

var updateBomb = flag.Bool("update-bomb", false, "rewrite testdata/bomb.kvtrace")

// testdata/bomb.kvtrace is the bomb as a file, for the CLI's tests.
func TestBombFixture(t *testing.T) {
	path := filepath.Join("testdata", "bomb.kvtrace")
	if *updateBomb {
		if err := os.WriteFile(path, bomb(t), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	countEvents(t, r)
	if len(data) > 110<<10 || r.DecodedBytes() > uint64(allowance(int64(len(data)), decodeRatio)) || r.Skipped() == 0 {
		t.Fatalf("%s: %d bytes, decoded %d, skipped %d", path, len(data), r.DecodedBytes(), r.Skipped())
	}
}

// A decompression bomb is cut by the budget: the reader decodes a few MB,
// not gigabytes, and reports the rest as damage.
func TestDecompressionBombBudget(t *testing.T) {
	data := bomb(t)
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	countEvents(t, r)
	limit := uint64(allowance(int64(len(data)), decodeRatio))
	if r.DecodedBytes() > limit {
		t.Fatalf("decoded %d bytes from %d, budget %d", r.DecodedBytes(), len(data), limit)
	}
	found := false
	for _, s := range r.Skips() {
		found = found || strings.Contains(s.Reason, "decompression budget")
	}
	if !found {
		t.Fatalf("no budget damage reported; %d skips, first %v", r.Skipped(), r.Skips()[:min(3, len(r.Skips()))])
	}
}

// One flipped byte in the manifest frame: the error names a checksum
// failure of the manifest frame, and every event of the other frames is read.
func TestManifestFrameChecksumFailure(t *testing.T) {
	data := writeSample(t)
	manifestEnd := frameEnds(t, data)[0]
	checksums := 0
	for at := 6; at < manifestEnd; at++ {
		bad := append([]byte(nil), data...)
		bad[at] ^= 0x40
		r, err := NewReader(bytes.NewReader(bad))
		if err != nil {
			t.Fatalf("byte %d flipped: %v", at, err)
		}
		got := countEvents(t, r)
		r.Close()
		if got != len(sampleEvents()) {
			t.Fatalf("byte %d flipped: read %d events, want %d", at, got, len(sampleEvents()))
		}
		d := r.ManifestDamage()
		if d == "" && r.Manifest().Run == testManifest.Run && r.Manifest().Tool == testManifest.Tool {
			continue // a bit the decoder does not use (a header's unused bits)
		}
		if !strings.Contains(d, "manifest frame") || !strings.Contains(d, "frame 1") && !strings.Contains(d, "at byte 0") {
			t.Fatalf("byte %d flipped: ManifestDamage = %q", at, d)
		}
		if strings.Contains(d, "checksum failure") {
			checksums++
		}
	}
	// Flips in literals decode and fail the content checksum; flips in
	// entropy tables fail decoding first.
	if checksums == 0 {
		t.Fatalf("no flip of the manifest frame was reported as a checksum failure")
	}
	t.Logf("%d of %d flips reported as checksum failures", checksums, manifestEnd-6)
}

// frameEnds lists the end offset of every frame of a well-formed bundle.
func frameEnds(t testing.TB, data []byte) []int {
	src := source{r: bytes.NewReader(data)}
	var ends []int
	off := 0
	for {
		st, n, _ := src.scanFrame()
		if st != frameOK {
			return ends
		}
		src.consume(n)
		off += n
		ends = append(ends, off)
	}
}

func writeSample(t testing.TB) []byte {
	var buf bytes.Buffer
	w, err := newWriter(&buf, "s", testManifest, 0, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range sampleEvents() {
		if err := w.Write(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Cancelling the context stops a reader with an error wrapping the cause.
func TestReaderContextCancel(t *testing.T) {
	data, _ := bigBundle(t, 4<<20)
	ctx, cancel := context.WithCancel(context.Background())
	r, err := NewReaderContext(ctx, bytes.NewReader(data), "b.kvtrace")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	cancel()
	var n int
	for ; n < 1<<20; n++ {
		if _, err = r.Next(); err != nil {
			break
		}
	}
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "b.kvtrace") || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("after cancel: %d more events, then %v", n, err)
	}
	if _, err := r.Next(); !errors.Is(err, context.Canceled) {
		t.Fatalf("second call after cancel: %v", err)
	}
}

// Bundles may hold prompts: Create makes them readable by the owner only.
func TestCreateMode0600(t *testing.T) {
	p := filepath.Join(t.TempDir(), "b.kvtrace")
	w, err := Create(p, testManifest)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(hook.Event{Kind: hook.KindRunEnd, Body: &hook.RunEnd{}})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if m := st.Mode().Perm(); m != 0o600 {
		t.Fatalf("mode %v, want 0600", m)
	}
	// Rewriting a bundle that was world-readable narrows it too.
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	w, err = Create(p, testManifest)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	if st, _ = os.Stat(p); st.Mode().Perm() != 0o600 {
		t.Fatalf("rewritten 0644 bundle: mode %v, want 0600", st.Mode().Perm())
	}
}

// A bomb as one large frame (RLE blocks, no content size) is streamed and
// cut by the same budget.
func TestStreamedBombBudget(t *testing.T) {
	out := compress(t, `{"kvtrace":{"format_version":"1.0"}}`)
	out = append(out, 0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x58) // no FCS, no checksum, 2 MiB window
	bh := uint32(blockMaxSize)<<3 | 1<<1                  // RLE, not last
	for range 8000 {                                      // 32 KB that decode to 1 GiB of "x"
		out = append(out, byte(bh), byte(bh>>8), byte(bh>>16), 'x')
	}
	out = append(out, 1|1<<1|1<<3, 0, 0, '\n') // last block: one newline
	r, err := NewReader(bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	countEvents(t, r)
	if limit := uint64(allowance(int64(len(out)), decodeRatio)); r.DecodedBytes() > limit {
		t.Fatalf("decoded %d bytes from %d, budget %d", r.DecodedBytes(), len(out), limit)
	}
	found := false
	for _, s := range r.Skips() {
		found = found || strings.Contains(s.Reason, "decompression budget")
	}
	if !found {
		t.Fatalf("no budget damage reported: %v", r.Skips())
	}
}

// All yields what Next returns and ends at the end of the bundle, or after
// yielding a read error (here a cancelled context) as its last pair.
func TestReaderAllEndsAtEOFOrError(t *testing.T) {
	data := writeBundle(t, sampleEvents(), 2)
	if r, evs := readAll(t, data); len(evs) != len(sampleEvents()) || r.Truncated() {
		t.Fatalf("read %d of %d events, truncated %v", len(evs), len(sampleEvents()), r.Truncated())
	}
	big, _ := bigBundle(t, 4<<20)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, err := NewReaderContext(ctx, bytes.NewReader(big), "b.kvtrace")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	n, errs := 0, 0
	for ev, err := range r.All() {
		if n++; n == 1 {
			cancel()
		}
		if err != nil {
			if errs++; errs > 1 {
				t.Fatalf("pair %d: a second error (%v): the range goes on after an error", n, err)
			}
			if !errors.Is(err, context.Canceled) || ev.Body != nil {
				t.Fatalf("pair %d: %v with event %+v, want context.Canceled with a zero event", n, err, ev)
			}
		}
	}
	if errs != 1 {
		t.Fatalf("%d pairs, %d errors; want the range to end after its one error", n, errs)
	}
}
