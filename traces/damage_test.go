package traces

import (
	"bytes"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// frameLog records each frame the writer hands over (one Write per frame)
// and how many events the bundle held after it.
type frameLog struct {
	buf    bytes.Buffer
	ends   []int // byte offset where each frame ends
	events []int // events written when that frame ended
}

func (l *frameLog) Write(p []byte) (int, error) {
	l.buf.Write(p)
	l.ends = append(l.ends, l.buf.Len())
	dec, _ := decoder()
	plain, err := dec.DecodeAll(p, nil)
	if err != nil {
		return 0, err
	}
	n := bytes.Count(plain, []byte("\n{\"v\":1,"))
	if bytes.HasPrefix(plain, []byte(`{"v":1,`)) {
		n++
	}
	if k := len(l.events); k > 0 {
		n += l.events[k-1]
	}
	l.events = append(l.events, n)
	return len(p), nil
}

// smallBundle writes evs with a frame every flushEvery events and returns the
// bundle and its frame log.
func smallBundle(t testing.TB, evs []hook.Event, flushEvery int) *frameLog {
	t.Helper()
	l := &frameLog{}
	w, err := newWriter(l, "test", testManifest, 0, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	for i, ev := range evs {
		if err := w.Write(ev); err != nil {
			t.Fatal(err)
		}
		if (i+1)%flushEvery == 0 {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return l
}

// checkCut reads data[:cut] and checks it yields exactly the events of the
// frames that end at or before cut, nothing skipped, and the right truncation.
func checkCut(t *testing.T, l *frameLog, evs []hook.Event, cut int) {
	t.Helper()
	data := l.buf.Bytes()[:cut]
	r, err := NewReader(bytes.NewReader(data))
	if cut < l.ends[0] {
		if err == nil {
			t.Fatalf("cut at %d (inside the manifest frame, %d bytes): reader accepted it", cut, l.ends[0])
		}
		return
	}
	if err != nil {
		t.Fatalf("cut at %d: %v", cut, err)
	}
	want := 0
	complete := false // cut falls on a frame boundary
	for i, end := range l.ends {
		if end <= cut {
			want = l.events[i]
		}
		complete = complete || end == cut
	}
	var got []hook.Event
	for {
		var ev hook.Event
		var err error
		if len(evs) > 100 { // big bundles: envelope only, to keep the test quick
			ev.Kind, ev.TS = 0, 0
			_, ev.Kind, ev.TS, err = r.NextLine()
		} else {
			ev, err = r.Next()
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("cut at %d: %v", cut, err)
		}
		got = append(got, ev)
	}
	if len(got) != want {
		t.Fatalf("cut at %d: read %d events, want %d (the complete frames)", cut, len(got), want)
	}
	for i := range got {
		if got[i].TS != evs[i].TS || got[i].Kind != evs[i].Kind {
			t.Fatalf("cut at %d: event %d is %s@%d, want %s@%d", cut, i, got[i].Kind, got[i].TS, evs[i].Kind, evs[i].TS)
		}
	}
	if r.Skipped() != 0 {
		t.Fatalf("cut at %d: skipped %v; a cut must yield no garbage", cut, r.Skips())
	}
	full := cut == l.buf.Len()
	if r.Truncated() == full {
		t.Fatalf("cut at %d of %d: truncated=%v (%s)", cut, l.buf.Len(), r.Truncated(), r.TruncationReason())
	}
	if !full && !complete && !strings.Contains(r.TruncationReason(), "ends inside frame") {
		t.Fatalf("cut at %d: reason %q does not say the file ends inside a frame", cut, r.TruncationReason())
	}
}

func TestTruncatedAtEveryByte(t *testing.T) {
	evs := sampleEvents()
	l := smallBundle(t, evs, 3)
	if len(l.ends) < 5 {
		t.Fatalf("want several frames, got %d", len(l.ends))
	}
	for cut := 0; cut <= l.buf.Len(); cut++ {
		checkCut(t, l, evs, cut)
	}
}

func TestTruncatedAtRandomBytes(t *testing.T) {
	var evs []hook.Event
	for i := 0; i < 2000; i++ {
		ev := sampleEvents()[i%len(hook.Kinds())]
		ev.TS = int64(i)
		evs = append(evs, ev)
	}
	l := smallBundle(t, evs, 97)
	rng := rand.New(rand.NewSource(1))
	n := 120
	if testing.Short() {
		n = 30
	}
	for i := 0; i < n; i++ {
		checkCut(t, l, evs, rng.Intn(l.buf.Len()+1))
	}
	for _, end := range l.ends { // every frame boundary and its neighbours
		for _, cut := range []int{end - 1, end, end + 1} {
			if cut >= 0 && cut <= l.buf.Len() {
				checkCut(t, l, evs, cut)
			}
		}
	}
}

func compress(t testing.TB, lines ...string) []byte {
	t.Helper()
	enc, err := encoder()
	if err != nil {
		t.Fatal(err)
	}
	return enc.EncodeAll([]byte(strings.Join(lines, "\n")+"\n"), nil)
}

func TestVersionCheck(t *testing.T) {
	for _, tc := range []struct {
		version, want string
	}{
		{"2.0", "bundle format 2.0 is newer than this kvcanary reads (1.x); upgrade kvcanary"},
		{"17.4", "bundle format 17.4 is newer than this kvcanary reads (1.x)"},
		{"0.9", "bundle format 0.9 is older than this kvcanary reads (1.x)"},
		{"1", `bad format_version "1"`},
		{"", `bad format_version ""`},
		{"1.x", `bad format_version "1.x"`},
	} {
		data := compress(t, `{"kvtrace":{"format_version":"`+tc.version+`","tool":"future"}}`)
		_, err := NewReader(bytes.NewReader(data))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("version %q: error %v, want it to contain %q", tc.version, err, tc.want)
		}
	}
	data := compress(t, `{"kvtrace":{"format_version":"1.9","tool":"newer minor","unknown_field":[1,2]}}`)
	if _, err := NewReader(bytes.NewReader(data)); err != nil {
		t.Errorf("minor version 1.9 refused: %v", err)
	}
}

func TestGarbageLinesSkippedWithPosition(t *testing.T) {
	ev0, _ := sampleEvents()[3].MarshalJSON()
	ev1, _ := sampleEvents()[6].MarshalJSON()
	data := compress(t,
		`{"kvtrace":{"format_version":"1.0"}}`,          // line 1
		string(ev0),                                     // 2
		`this is not json`,                              // 3
		`{"v":2,"kind":"replay","ts_ns":1,"body":{}}`,   // 4
		`{"v":1,"kind":"teleport","ts_ns":1,"body":{}}`, // 5
		`{"foo":1}`, // 6
		`{"v":1,"kind":"replay","ts_ns":1,"body":{"step":"x"}}`, // 7
		``, // 8: blank, ignored
		`{"v":1,"kind":"replay","ts_ns":1,"body":{"step":1`, // 9: cut JSON
		string(ev1), // 10
	)
	r, got := readAll(t, data)
	if len(got) != 2 {
		t.Fatalf("read %d events, want 2", len(got))
	}
	jsonEqual(t, sampleEvents()[3], got[0])
	jsonEqual(t, sampleEvents()[6], got[1])
	wantLines := []uint64{3, 4, 5, 6, 7, 9}
	if r.Skipped() != uint64(len(wantLines)) {
		t.Fatalf("skipped %d, want %d: %v", r.Skipped(), len(wantLines), r.Skips())
	}
	for i, s := range r.Skips() {
		if s.Line != wantLines[i] || s.Frame != 1 || s.Offset != 0 || s.Reason == "" {
			t.Errorf("skip %d = %+v (%s), want line %d of frame 1", i, s, s, wantLines[i])
		}
	}
	if !strings.Contains(r.Skips()[2].Reason, "teleport") {
		t.Errorf("unknown kind skip does not name the kind: %s", r.Skips()[2])
	}

	// NextLine applies the same rules without decoding bodies: line 7 has a
	// well-formed envelope, so only the body decoder rejects it.
	r2, err := NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if n := countLines(t, r2); n != 3 || r2.Skipped() != 5 {
		t.Errorf("NextLine: %d lines, %d skipped %v; want 3 and 5", n, r2.Skipped(), r2.Skips())
	}
}

func TestDamagedFramesSkipped(t *testing.T) {
	evs := sampleEvents()
	l := smallBundle(t, evs, 2) // manifest, 6 event frames, footer frame
	data := append([]byte(nil), l.buf.Bytes()...)
	// Corrupt the middle of frame 3 (events 2,3): its checksum fails.
	start, end := l.ends[1], l.ends[2]
	data[(start+end)/2] ^= 0xff
	// Put garbage between frames 4 and 5.
	at := l.ends[3]
	data = append(data[:at:at], append([]byte("GARBAGE!"), data[at:]...)...)
	r, got := readAll(t, data)
	if len(got) != len(evs)-2 {
		t.Fatalf("read %d events, want %d", len(got), len(evs)-2)
	}
	if got[2].TS != evs[4].TS {
		t.Errorf("event after the damaged frame is %d, want %d", got[2].TS, evs[4].TS)
	}
	skips := r.Skips()
	if len(skips) != 2 {
		t.Fatalf("skips %v, want 2", skips)
	}
	if skips[0].Frame != 3 || skips[0].Offset != int64(start) || !strings.Contains(skips[0].Reason, "undecodable frame") {
		t.Errorf("damaged frame skip = %s, want frame 3 at byte %d", skips[0], start)
	}
	if skips[1].Offset != int64(at) || !strings.Contains(skips[1].Reason, "8 bytes that are not a zstd frame") {
		t.Errorf("garbage skip = %s, want 8 bytes at byte %d", skips[1], at)
	}
	if _, ok := r.Footer(); !ok || r.Truncated() {
		t.Errorf("footer lost after damage: truncated=%v %s", r.Truncated(), r.TruncationReason())
	}
}

func TestNotABundle(t *testing.T) {
	dir := t.TempDir()
	zjson := compress(t, `{"hello":"world"}`)
	manifestOnly := compress(t, `{"kvtrace":{"format_version":"1.0"}}`)
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty.kvtrace", nil, "empty file"},
		{"text.kvtrace", []byte("{\"v\":1}\n"), "not a zstd stream"},
		{"short.kvtrace", []byte{0x28, 0xb5}, "before a manifest"},
		{"json.kvtrace", zjson, "first record"},
		{"cut.kvtrace", manifestOnly[:len(manifestOnly)-3], "file ends inside frame 1"},
	} {
		path := filepath.Join(dir, tc.name)
		if err := os.WriteFile(path, tc.data, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Open(path)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to name the file and say %q", tc.name, err, tc.want)
		}
	}
	if _, err := Open(filepath.Join(dir, "missing.kvtrace")); err == nil || !strings.Contains(err.Error(), "missing.kvtrace") {
		t.Errorf("missing file: %v", err)
	}
}

// A frame claiming more than the memory cap is skipped, not decoded.
func TestDecoderMemoryCap(t *testing.T) {
	head := compress(t, `{"kvtrace":{"format_version":"1.0"}}`)
	// A frame header with single-segment and an 8-byte content size of 1 TiB,
	// followed by one empty raw last block.
	huge := []byte{0x28, 0xb5, 0x2f, 0xfd, 0xe0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0}
	ev, _ := sampleEvents()[3].MarshalJSON()
	tail := compress(t, string(ev))
	r, got := readAll(t, append(append(head, huge...), tail...))
	if len(got) != 1 || r.Skipped() != 1 {
		t.Fatalf("got %d events, skips %v", len(got), r.Skips())
	}
	if s := r.Skips()[0]; s.Frame != 2 || !strings.Contains(s.Reason, "undecodable frame") {
		t.Errorf("skip = %s", s)
	}
}

// A frame over the whole-frame cap (compressed or decoded) is decoded as a
// stream, not held whole, and reading goes on with the next frame.
func TestLargeFrameStreamed(t *testing.T) {
	head := compress(t, `{"kvtrace":{"format_version":"1.0"}}`)
	// Frame header: magic, FHD 0 (window descriptor, no FCS, no checksum),
	// window descriptor for 2 MiB; then raw blocks of 128 KiB (blank lines)
	// until over the cap.
	frame := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x58}
	block := make([]byte, blockMaxSize)
	for i := range block {
		block[i] = ' '
	}
	block[len(block)-1] = '\n'
	for n := 0; n <= maxFrameBytes/blockMaxSize; n++ {
		bh := uint32(blockMaxSize) << 3 // raw, not last
		frame = append(frame, byte(bh), byte(bh>>8), byte(bh>>16))
		frame = append(frame, block...)
	}
	frame = append(frame, 1, 0, 0) // empty raw last block
	ev, _ := sampleEvents()[3].MarshalJSON()
	tail := compress(t, string(ev))
	data := append(append(head, frame...), tail...)
	r, got := readAll(t, data)
	if len(got) != 1 || r.Skipped() != 0 || r.Frames() != 3 {
		t.Fatalf("got %d events in %d frames, skips %v", len(got), r.Frames(), r.Skips())
	}
	if want := uint64(len(block) * (maxFrameBytes/blockMaxSize + 1)); r.DecodedBytes() < want {
		t.Errorf("decoded %d bytes, want at least %d", r.DecodedBytes(), want)
	}

	// The same frame with a bad block header in the middle: the frame is
	// damage, the event after it is still read.
	bad := append([]byte(nil), frame...)
	at := 6 + 100*(3+blockMaxSize)
	bad[at], bad[at+1], bad[at+2] = 0x07, 0, 0 // reserved block type
	r, got = readAll(t, append(append(append([]byte(nil), head...), bad...), tail...))
	if len(got) != 1 || r.Skipped() == 0 || !strings.Contains(r.Skips()[0].Reason, "not a zstd frame") {
		t.Fatalf("damaged large frame: got %d events, skips %v", len(got), r.Skips())
	}

	// Cut in the middle of the large frame: truncated, the lines decoded
	// before the cut kept (blank here), no error.
	r, got = readAll(t, append(append([]byte(nil), head...), frame[:len(frame)/2]...))
	if len(got) != 0 || !r.Truncated() || !strings.Contains(r.TruncationReason(), "file ends inside frame 2") {
		t.Fatalf("cut large frame: %d events, truncated %v %q, skips %v", len(got), r.Truncated(), r.TruncationReason(), r.Skips())
	}
}

func TestWriterRejectsHugeEvent(t *testing.T) {
	var buf bytes.Buffer
	w, err := newWriter(&buf, "test", testManifest, 0, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	huge := hook.Event{Kind: hook.KindFinding, Body: &hook.Finding{Severity: hook.SevInfo, Summary: strings.Repeat("x", maxLineBytes)}}
	if err := w.Write(huge); err == nil || !strings.Contains(err.Error(), "over the") {
		t.Fatalf("huge event: %v", err)
	}
	if err := w.WriteLine(hook.KindFinding, 0, bytes.Repeat([]byte("x"), maxLineBytes+1)); err == nil {
		t.Fatal("huge line accepted")
	}
	if err := w.Write(sampleEvents()[3]); err != nil {
		t.Fatalf("writer unusable after refusing a huge event: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, got := readAll(t, buf.Bytes())
	if f, _ := r.Footer(); len(got) != 1 || f.Rejected != 2 {
		t.Errorf("got %d events, footer %+v", len(got), f)
	}
}
