package traces

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// fuzzSeeds are small bundles and broken variants of them; the same list is
// committed under testdata/fuzz/FuzzReader (regenerate with
// KVTRACE_WRITE_CORPUS=1 go test -run TestWriteFuzzCorpus).
func fuzzSeeds(t testing.TB) map[string][]byte {
	evs := sampleEvents()
	valid := writeBundle(t, evs[:6], 2)
	l := smallBundle(t, evs[:6], 3)
	seeds := map[string][]byte{
		"valid":          valid,
		"manifest-only":  l.buf.Bytes()[:l.ends[0]],
		"cut-mid-frame":  l.buf.Bytes()[:(l.ends[0]+l.ends[1])/2],
		"cut-at-frame":   l.buf.Bytes()[:l.ends[1]],
		"cut-in-footer":  l.buf.Bytes()[:l.buf.Len()-3],
		"cut-in-header":  l.buf.Bytes()[:l.ends[0]+6],
		"empty":          {},
		"not-zstd":       []byte("{\"kvtrace\":{\"format_version\":\"1.0\"}}\n"),
		"garbage-lines":  compress(t, `{"kvtrace":{"format_version":"1.0"}}`, `nope`, `{"v":1,"kind":"replay","ts_ns":1,"body":{"step":1,"bs":2,"mode":"graph","dur_ns":3}}`, `{"v":1,"kind":"x"}`),
		"future-version": compress(t, `{"kvtrace":{"format_version":"2.0"}}`),
	}
	flipped := append([]byte(nil), valid...)
	flipped[len(flipped)/2] ^= 0x40
	seeds["flipped-byte"] = flipped
	seeds["garbage-between"] = append(append(append([]byte(nil), valid[:l.ends[0]]...), "junk"...), valid[l.ends[0]:]...)
	return seeds
}

func FuzzReader(f *testing.F) {
	for _, seed := range fuzzSeeds(f) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := NewReader(bytes.NewReader(data))
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		events := 0
		eachEvent(t, r, func(ev hook.Event) {
			if _, err := ev.MarshalJSON(); err != nil {
				t.Fatalf("decoded event does not marshal: %v", err)
			}
			events++
		})
		if r.Truncated() != (r.TruncationReason() != "") {
			t.Fatalf("truncated=%v with reason %q", r.Truncated(), r.TruncationReason())
		}
		if uint64(len(r.Skips())) > r.Skipped() {
			t.Fatalf("%d skip details for %d skips", len(r.Skips()), r.Skipped())
		}
		// The envelope-only path accepts at least what full decoding accepts.
		r2, err := NewReader(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("second open failed after the first succeeded: %v", err)
		}
		if lines := countLines(t, r2); lines < events {
			t.Fatalf("NextLine read %d events, Next %d", lines, events)
		}
	})
}

func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("KVTRACE_WRITE_CORPUS") == "" {
		t.Skip("set KVTRACE_WRITE_CORPUS=1 to regenerate testdata/fuzz/FuzzReader")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzReader")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range fuzzSeeds(t) {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
