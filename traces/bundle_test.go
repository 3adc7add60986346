package traces

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/testenv"
	"github.com/kvcanary/kvcanary/runtime/hook"
)

var testManifest = Manifest{
	Tool:    "kvcanary test",
	Created: time.Date(2026, 11, 29, 9, 0, 0, 123456789, time.UTC),
	Host:    hook.HostInfo{Hostname: "gpu-7", OS: "linux", Arch: "amd64", CPUs: 64, GPUs: []hook.GPUInfo{{Index: 0, Name: "H200", MemTotal: 141 << 30}}},
	Config:  hook.RunConfig{Engine: "sim", IndexKDtype: "fp8", CUDAGraph: hook.Bool(true), CUDAGraphMaxBS: 160, Seed: 7, Inject: []string{"stream-race"}},
	Run:     "r-test",
	Command: "kvcanary sim --record x.kvtrace",
	Labels:  map[string]string{"experiment": "overlap-off"},
}

// sampleEvents returns one event of every kind, with awkward values: 64-bit
// digests, NaN logits, strings that need escaping.
func sampleEvents() []hook.Event {
	src := hook.Source{Node: "gpu-7", Proc: "sglang-decode", PID: 4242}
	bodies := []hook.Body{
		&hook.RunStart{Tool: "kvcanary dev", Config: hook.RunConfig{Engine: "sim", Seed: math.MaxUint64}, Host: hook.HostInfo{Hostname: "h"}},
		&hook.RunEnd{WallNS: 12345, Steps: 99, Dropped: 3, Error: "boom \"quoted\" <html> & tab\t"},
		&hook.RoomChecksum{Room: hook.Dec64(math.MaxUint64), Side: hook.SideDecode, SeqLen: 4097, Pages: 65, Bsum: 0xdeadbeefcafef00d, XXH3: 1, PageSum: []hook.Hex64{1, 2}},
		&hook.Replay{Step: 1 << 40, BatchSize: 33, Bucket: 40, Mode: "graph", DurNS: 1500},
		&hook.CanaryPages{Step: 7, PagesTotal: 1000, PagesChecked: 1000, Changed: []hook.PageChange{{Page: 5, Owner: "req-1", Before: 1, After: 2}, {Page: 9}}, Expected: []uint32{5}, Transfer: []uint32{9}, Running: []string{"req-1"}},
		&hook.GraphDiffSample{Step: 3, Request: "req-2", Graph: hook.Float32s{1, float32(math.NaN()), float32(math.Inf(1))}, Eager: hook.Float32s{1, 2, 3}, TopKGraph: []int32{2, 1}},
		&hook.Session{ID: "s-1", Outcome: hook.OutcomeLeak, Rounds: 4, Reason: "ünïcödé ☃"},
		&hook.Sched{Phase: "decode", RunningReq: 30, QueueReq: 2, Tokens: 9000, TokenUsage: 0.93, CUDAGraph: true},
		&hook.GPU{Devices: []hook.GPUDevice{{Index: 0, MemUsed: 1 << 34, MemTotal: 1 << 37, UtilGPU: 99, TempC: 71, Xid: 79}}},
		&hook.CUDA{Call: "cuGraphLaunch", PID: 4242, TID: 4243, Stream: 0x7f00, GraphExec: 0xabc, StartNS: 10, EndNS: 20},
		&hook.Finding{Analyzer: "canary", Severity: hook.SevError, Summary: "replay wrote page 9 owned by a transfer", Evidence: map[string]string{"page": "9"}},
	}
	evs := make([]hook.Event, len(bodies))
	for i, b := range bodies {
		evs[i] = hook.Event{Kind: b.Kind(), TS: 1_796_202_000_000_000_000 + int64(i)*1000, Src: src, Run: "r-test", Body: b}
	}
	evs[3].Src = hook.Source{} // no src at all
	evs[4].Src = hook.Source{PID: 1}
	evs[5].Run = ""
	return evs
}

// writeBundle writes evs to an in-memory bundle, without the flush timer.
func writeBundle(t testing.TB, evs []hook.Event, flushEvery int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := newWriter(&buf, "test", testManifest, 0, func() time.Time { return testManifest.Created })
	if err != nil {
		t.Fatal(err)
	}
	for i, ev := range evs {
		if err := w.Write(ev); err != nil {
			t.Fatalf("write event %d: %v", i, err)
		}
		if flushEvery > 0 && (i+1)%flushEvery == 0 {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	w.SetDropped(5)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func readAll(t testing.TB, data []byte) (*Reader, []hook.Event) {
	t.Helper()
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	var evs []hook.Event
	eachEvent(t, r, func(ev hook.Event) { evs = append(evs, ev) })
	return r, evs
}

// eachEvent calls fn with every event r holds, to its end; an error other
// than io.EOF fails the test.
func eachEvent(t testing.TB, r *Reader, fn func(hook.Event)) {
	t.Helper()
	for ev, err := range r.All() {
		if err != nil {
			t.Fatal(err)
		}
		fn(ev)
	}
}

// countLines reads r to its end through the envelope-only NextLine and
// counts the lines; an error other than io.EOF fails the test.
func countLines(t testing.TB, r *Reader) int {
	t.Helper()
	n := 0
	for {
		_, _, _, err := r.NextLine()
		if err == io.EOF {
			return n
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
}

func jsonEqual(t *testing.T, want, got hook.Event) {
	t.Helper()
	a, err := want.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	b, err := got.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("event differs after round trip:\nwant %s\ngot  %s", a, b)
	}
}

func TestRoundTripAllKinds(t *testing.T) {
	evs := sampleEvents()
	if len(evs) != len(hook.Kinds()) {
		t.Fatalf("sample covers %d kinds, model has %d", len(evs), len(hook.Kinds()))
	}
	data := writeBundle(t, evs, 4)
	r, got := readAll(t, data)
	if len(got) != len(evs) {
		t.Fatalf("read %d events, wrote %d", len(got), len(evs))
	}
	for i := range evs {
		jsonEqual(t, evs[i], got[i])
	}
	m := r.Manifest()
	if m.FormatVersion != FormatVersion || m.Run != "r-test" || m.Host.GPUs[0].Name != "H200" || m.Config.CUDAGraphMaxBS != 160 || m.Labels["experiment"] != "overlap-off" || !m.Created.Equal(testManifest.Created) {
		t.Errorf("manifest did not round trip: %+v", m)
	}
	f, ok := r.Footer()
	if !ok {
		t.Fatal("no footer")
	}
	if f.Events != uint64(len(evs)) || f.Dropped != 5 || f.FirstTS != evs[0].TS || f.LastTS != evs[len(evs)-1].TS {
		t.Errorf("footer = %+v", f)
	}
	for _, k := range hook.Kinds() {
		if f.Counts[k.String()] != 1 {
			t.Errorf("footer count of %s = %d, want 1", k, f.Counts[k.String()])
		}
	}
	if r.Truncated() || r.Skipped() != 0 {
		t.Errorf("clean bundle: truncated=%v (%s) skipped=%d %v", r.Truncated(), r.TruncationReason(), r.Skipped(), r.Skips())
	}
}

func TestWriterRejectsInvalidEventAndContinues(t *testing.T) {
	var buf bytes.Buffer
	w, err := newWriter(&buf, "test", testManifest, 0, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(hook.Event{Kind: hook.KindReplay}); err == nil {
		t.Fatal("nil body accepted")
	}
	if err := w.WriteLine(hook.KindReplay, 1, []byte("{}\n{}")); err == nil {
		t.Fatal("line with a newline accepted")
	}
	if err := w.Write(sampleEvents()[3]); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(sampleEvents()[3]); !errors.Is(err, ErrClosed) {
		t.Errorf("write after close: %v, want ErrClosed", err)
	}
	r, got := readAll(t, buf.Bytes())
	f, _ := r.Footer()
	if len(got) != 1 || f.Rejected != 2 || f.Events != 1 || w.Count() != 1 {
		t.Errorf("got %d events, footer %+v", len(got), f)
	}
}

func TestCreateOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run"+Extension)
	w, err := Create(path, testManifest)
	if err != nil {
		t.Fatal(err)
	}
	// The manifest frame is on disk before any event.
	r, err := Open(path)
	if err != nil {
		t.Fatalf("open a bundle with only its manifest: %v", err)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("manifest-only bundle: Next = %v, want EOF", err)
	}
	if !r.Truncated() || !strings.Contains(r.TruncationReason(), "no footer") {
		t.Errorf("manifest-only bundle: truncated=%v %q", r.Truncated(), r.TruncationReason())
	}
	r.Close()
	for _, ev := range sampleEvents() {
		if err := w.Write(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
	r, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if n := countEvents(t, r); n != len(sampleEvents()) || r.Truncated() {
		t.Errorf("read %d events, truncated=%v", n, r.Truncated())
	}
}

// The flush timer ends a frame without any call from the user, so a writer
// killed a second after its last Write has everything on disk.
func TestWriterFlushesOnTimer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "timer.kvtrace")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := newWriter(f, path, testManifest, 20*time.Millisecond, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { w.Close(); f.Close() }()
	evs := sampleEvents()
	for _, ev := range evs {
		if err := w.Write(ev); err != nil {
			t.Fatal(err)
		}
	}
	onDisk := 0
	testenv.WaitForState(t, "every event on disk", func() bool {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		_, got := readAll(t, data)
		onDisk = len(got)
		return onDisk == len(evs)
	}, func() any { return fmt.Sprintf("%d of %d events", onDisk, len(evs)) })
}

func TestRecord(t *testing.T) {
	bus := hook.NewBus()
	sub := bus.Lossless("bundle", 16)
	var buf bytes.Buffer
	w, err := newWriter(&buf, "test", testManifest, 0, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Record(sub, w) }()
	const n = 1000
	for i := 0; i < n; i++ {
		ev := sampleEvents()[i%len(hook.Kinds())]
		ev.TS = int64(i)
		bus.Publish(ev)
	}
	bus.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	r, got := readAll(t, buf.Bytes())
	f, ok := r.Footer()
	if len(got) != n || !ok || f.Events != n || f.FirstTS != 0 || f.LastTS != n-1 {
		t.Errorf("recorded %d events, footer %+v", len(got), f)
	}
	for i, ev := range got {
		if ev.TS != int64(i) {
			t.Fatalf("event %d has ts %d: order lost", i, ev.TS)
		}
	}
}

type failWriter struct{ after int }

func (f *failWriter) Write(p []byte) (int, error) {
	if f.after <= 0 {
		return 0, fmt.Errorf("disk full")
	}
	f.after--
	return len(p), nil
}

func TestRecordKeepsDrainingAfterIOError(t *testing.T) {
	bus := hook.NewBus()
	sub := bus.Lossless("bundle", 1)
	w, err := newWriter(&failWriter{after: 1}, "test", testManifest, 0, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Record(sub, w) }()
	big := hook.Event{Kind: hook.KindFinding, Body: &hook.Finding{Severity: hook.SevInfo, Summary: strings.Repeat("x", frameBytes)}}
	for i := 0; i < 50; i++ {
		bus.Publish(big) // would block forever if Record stopped receiving
	}
	bus.Close()
	err = <-done
	if err == nil || !strings.Contains(err.Error(), "disk full") || !strings.Contains(err.Error(), "events lost") {
		t.Errorf("Record error = %v", err)
	}
}

func TestReaderJoinsLineAcrossFrames(t *testing.T) {
	// A re-compressing tool may split lines anywhere; the reader joins them.
	var plain bytes.Buffer
	plain.WriteString(`{"kvtrace":{"format_version":"1.3","tool":"other"}}` + "\n")
	line, _ := sampleEvents()[2].MarshalJSON()
	plain.Write(line)
	plain.WriteString("\n")
	enc, _ := encoder()
	cut := plain.Len() - 20
	data := enc.EncodeAll(plain.Bytes()[:cut], nil)
	data = enc.EncodeAll(plain.Bytes()[cut:], data)
	r, got := readAll(t, data)
	if len(got) != 1 || r.Skipped() != 0 {
		t.Fatalf("got %d events, skips %v", len(got), r.Skips())
	}
	if r.Manifest().FormatVersion != "1.3" {
		t.Errorf("minor version 1.3 not read: %+v", r.Manifest())
	}
	jsonEqual(t, sampleEvents()[2], got[0])
	if !r.Truncated() {
		t.Error("bundle without footer not reported truncated")
	}
}

func TestIsBundle(t *testing.T) {
	dir := t.TempDir()
	bundle := filepath.Join(dir, "run"+Extension)
	w, err := Create(bundle, testManifest)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"log":     []byte("[2025-06-01 12:00:00] Decode batch, #running-req: 1\n"),
		"empty":   nil,
		"short":   zstdMagicBytes[:3], // a prefix of the magic is not the magic
		"magic":   zstdMagicBytes,     // the magic alone is claimed; Open judges the rest
		"almostz": {0x28, 0xb5, 0x2f, 0xfe},
	}
	want := map[string]bool{"log": false, "empty": false, "short": false, "magic": true, "almostz": false}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, w := range want {
		got, err := IsBundle(filepath.Join(dir, name))
		if err != nil || got != w {
			t.Errorf("IsBundle(%s) = %v, %v; want %v", name, got, err, w)
		}
	}
	if got, err := IsBundle(bundle); err != nil || !got {
		t.Errorf("IsBundle(written bundle) = %v, %v", got, err)
	}
	missing := filepath.Join(dir, "nope")
	if _, err := IsBundle(missing); err == nil || !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("IsBundle(missing) error %v: want ErrNotExist naming the path", err)
	}
}

// An event the hook contract refuses (here a session outcome outside the
// fixed list) is not written: Write says why, and the footer counts it.
func TestWriterRefusesInvalidEvent(t *testing.T) {
	var buf bytes.Buffer
	w, err := newWriter(&buf, "test", testManifest, 0, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	bad := hook.Event{Kind: hook.KindSession, TS: 1, Body: &hook.Session{ID: "s1", Outcome: "bogus"}}
	if err := w.Write(bad); err == nil || !strings.Contains(err.Error(), `"bogus"`) {
		t.Fatalf("Write(outcome bogus) = %v, want an error naming the value", err)
	}
	good := hook.Event{Kind: hook.KindSession, TS: 2, Body: &hook.Session{ID: "s2", Outcome: hook.OutcomeLeak}}
	if err := w.Write(good); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, got := readAll(t, buf.Bytes())
	if len(got) != 1 || got[0].Body.(*hook.Session).ID != "s2" {
		t.Fatalf("bundle holds %+v, want only s2", got)
	}
	if f, ok := r.Footer(); !ok || f.Rejected != 1 {
		t.Fatalf("footer %+v, want 1 rejected", f)
	}
}
