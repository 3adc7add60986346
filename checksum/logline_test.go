package checksum

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

func TestParseLine(t *testing.T) {
	type want struct {
		kind    LineKind
		room    uint64
		side    hook.Side
		seqLen  int
		pages   int
		bsum    uint64
		xxh3    uint64
		pageSum []uint64
		hasRoom bool
		request string
		digest  string // DigestError field
	}
	cases := []struct {
		name string
		line string
		want want
	}{
		{"bare, hex digests", "kvcanary room_checksum side=prefill room=7 seq_len=150 pages=3 bsum=0x3016b4481a86dffe xxh3=0x5e7b8362c407b5f9",
			want{kind: LineRecord, room: 7, side: "prefill", seqLen: 150, pages: 3, bsum: 0x3016b4481a86dffe, xxh3: 0x5e7b8362c407b5f9, hasRoom: true}},
		{"timestamp and rank prefix, decimal", "[2026-03-01 10:02:03 TP0] kvcanary room_checksum side=decode room=8123 seq_len=2048 pages=32 bsum=31177 xxh3=18446744073709551615",
			want{kind: LineRecord, room: 8123, side: "decode", seqLen: 2048, pages: 32, bsum: 31177, xxh3: 1<<64 - 1, hasRoom: true}},
		{"fields reordered, tabs, CR, unknown keys, upper hex", "I1201 12:00:00.1 p.py:12] kvcanary room_checksum\txxh3=0XABCDEF bsum=0 foo=bar side=decode naked pages=1 room=0x10 seq_len=4 layer=3\r",
			want{kind: LineRecord, room: 16, side: "decode", seqLen: 4, pages: 1, bsum: 0, xxh3: 0xabcdef, hasRoom: true}},
		{"page digests and request", "kvcanary room_checksum side=prefill room=1 seq_len=70 pages=2 bsum=1 xxh3=2 dtype=fp8 request=req-9 page_xxh3=0x1,2,0x0003",
			want{kind: LineRecord, room: 1, side: "prefill", seqLen: 70, pages: 2, bsum: 1, xxh3: 2, pageSum: []uint64{1, 2, 3}, hasRoom: true, request: "req-9"}},
		{"leading zeros in hex", "kvcanary room_checksum side=prefill room=1 seq_len=1 pages=1 bsum=0x00000000000000000001 xxh3=2",
			want{kind: LineRecord, room: 1, side: "prefill", seqLen: 1, pages: 1, bsum: 1, xxh3: 2, hasRoom: true}},
		{"other line", "2026-03-01 INFO Decode batch. #running-req: 3, #token: 1234", want{kind: LineOther}},
		{"checksum word without marker", "computing checksum of buffer", want{kind: LineOther}},
		{"marker glued to more text", "kvcanary room_checksums are on", want{kind: LineOther}},
		{"empty", "", want{kind: LineOther}},
		{"missing xxh3", "kvcanary room_checksum side=prefill room=1 seq_len=1 pages=1 bsum=1", want{kind: LineMalformed}},
		{"bad side", "kvcanary room_checksum side=both room=1 seq_len=1 pages=1 bsum=1 xxh3=1", want{kind: LineMalformed}},
		{"bad room", "kvcanary room_checksum side=prefill room=x1 seq_len=1 pages=1 bsum=1 xxh3=1", want{kind: LineMalformed}},
		{"negative seq_len", "kvcanary room_checksum side=prefill room=1 seq_len=-1 pages=1 bsum=1 xxh3=1", want{kind: LineMalformed}},
		{"huge seq_len", "kvcanary room_checksum side=prefill room=1 seq_len=4294967296 pages=1 bsum=1 xxh3=1", want{kind: LineMalformed}},
		{"key twice", "kvcanary room_checksum side=prefill room=1 seq_len=1 pages=1 bsum=1 xxh3=1 bsum=2", want{kind: LineMalformed}},
		{"marker only", "kvcanary room_checksum", want{kind: LineMalformed}},
		{"bad bsum", "kvcanary room_checksum side=prefill room=1 seq_len=1 pages=1 bsum=0xZZ xxh3=1", want{kind: LineMalformed, digest: "bsum"}},
		{"empty xxh3", "kvcanary room_checksum side=prefill room=1 seq_len=1 pages=1 bsum=1 xxh3=", want{kind: LineMalformed, digest: "xxh3"}},
		{"overflowing decimal", "kvcanary room_checksum side=prefill room=1 seq_len=1 pages=1 bsum=18446744073709551616 xxh3=1", want{kind: LineMalformed, digest: "bsum"}},
		{"overlong hex", "kvcanary room_checksum side=prefill room=1 seq_len=1 pages=1 bsum=0x1ffffffffffffffff xxh3=1", want{kind: LineMalformed, digest: "bsum"}},
		{"bare 0x", "kvcanary room_checksum side=prefill room=1 seq_len=1 pages=1 bsum=0x xxh3=1", want{kind: LineMalformed, digest: "bsum"}},
		{"bad page digest", "kvcanary room_checksum side=prefill room=1 seq_len=1 pages=1 bsum=1 xxh3=1 page_xxh3=1,,2", want{kind: LineMalformed, digest: "page_xxh3"}},
		{"trailing comma in page digests", "kvcanary room_checksum side=prefill room=1 seq_len=1 pages=1 bsum=1 xxh3=1 page_xxh3=1,", want{kind: LineMalformed, digest: "page_xxh3"}},
		{"sglang mismatch with bootstrap_room", "[2026-03-01 10:00:00 DP0 TP0] ERROR Decode transfer failed for rid=abc123, bootstrap_room=8123: KV checksum mismatch (expected 0x1, got 0x2)",
			want{kind: LineEvidence, room: 8123, side: "decode", hasRoom: true, request: "abc123"}},
		{"sglang mismatch, room after text", "ERROR KV checksum mismatch for request 9f2e: room: 42.",
			want{kind: LineEvidence, room: 42, side: "decode", hasRoom: true, request: "9f2e"}},
		{"sglang mismatch without room", "ERROR KV checksum mismatch; aborting", want{kind: LineEvidence, side: "decode"}},
		{"sglang mismatch, word 'rooms' is not a room", "ERROR KV checksum mismatch in bathrooms 5", want{kind: LineEvidence, side: "decode"}},
	}
	var p LineParser
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var rec Record
			kind, err := p.Parse([]byte(c.line), &rec)
			if kind != c.want.kind {
				t.Fatalf("kind %v (reason %q, err %v), want %v", kind, p.Reason, err, c.want.kind)
			}
			var de *DigestError
			if c.want.digest != "" {
				if !errors.As(err, &de) || de.Field != c.want.digest {
					t.Fatalf("err %v, want a DigestError on %s", err, c.want.digest)
				}
				return
			}
			if err != nil {
				t.Fatalf("err %v", err)
			}
			if kind == LineMalformed && p.Reason == "" {
				t.Fatal("malformed without a reason")
			}
			if kind == LineOther || kind == LineMalformed {
				return
			}
			got := want{kind: kind, room: rec.Room, side: rec.Side, seqLen: rec.SeqLen, pages: rec.Pages, bsum: rec.Bsum, xxh3: rec.XXH3,
				pageSum: rec.PageXXH3, hasRoom: rec.HasRoom, request: rec.Request}
			if !slices.Equal(got.pageSum, c.want.pageSum) {
				t.Errorf("page digests %v, want %v", got.pageSum, c.want.pageSum)
			}
			got.pageSum, c.want.pageSum = nil, nil
			if got.kind != c.want.kind || got.room != c.want.room || got.side != c.want.side || got.seqLen != c.want.seqLen ||
				got.pages != c.want.pages || got.bsum != c.want.bsum || got.xxh3 != c.want.xxh3 || got.hasRoom != c.want.hasRoom || got.request != c.want.request {
				t.Errorf("got %+v\nwant %+v", got, c.want)
			}
			if (kind == LineEvidence) != rec.Evidence {
				t.Errorf("Evidence %v for kind %v", rec.Evidence, kind)
			}
		})
	}
}

func TestLogLineRoundTrip(t *testing.T) {
	in := Record{Room: 1<<63 + 9, Side: hook.SideDecode, SeqLen: 130, Pages: 3, Bsum: 0xdead, XXH3: 1<<64 - 1, Dtype: "bf16", PageXXH3: []uint64{1, 2, 3}}
	line := AppendLogLine([]byte("2026-01-01T00:00:00Z [rank 3] "), &in)
	var p LineParser
	var out Record
	if kind, err := p.Parse(line, &out); kind != LineRecord || err != nil {
		t.Fatalf("parse %q: %v %v", line, kind, err)
	}
	if out.Room != in.Room || out.Side != in.Side || out.SeqLen != in.SeqLen || out.Pages != in.Pages || out.Bsum != in.Bsum ||
		out.XXH3 != in.XXH3 || out.Dtype != in.Dtype || !slices.Equal(out.PageXXH3, in.PageXXH3) {
		t.Fatalf("round trip %q:\n got %+v\nwant %+v", line, out, in)
	}
}

func TestScanLog(t *testing.T) {
	input := strings.Join([]string{
		"garbage ###", // 1 skipped
		"kvcanary room_checksum side=prefill room=1 seq_len=20 pages=1 bsum=1 xxh3=2", // 2
		"kvcanary room_checksum side=prefill room=2 seq_len=20",                       // 3 malformed
		"\x00\xff\xfe binary junk",      // 4 skipped
		"",                              // 5 skipped
		"E KV checksum mismatch room=2", // 6 evidence
		"kvcanary room_checksum side=decode room=1 seq_len=20 pages=1 bsum=1 xxh3=2", // 7, no final newline
	}, "\n")
	var rooms []uint64
	var lines []int64
	st, err := ScanLog(strings.NewReader(input), "x.log", func(r *Record) error {
		rooms = append(rooms, r.Room)
		lines = append(lines, r.Line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.Lines != 7 || st.Records != 2 || st.Evidence != 1 || st.Skipped != 3 || st.Malformed != 1 {
		t.Errorf("stats %+v", st)
	}
	if !slices.Equal(st.SkippedLines, []int64{1, 4, 5}) || !slices.Equal(st.MalformedLines, []int64{3}) {
		t.Errorf("skipped lines %v, malformed lines %v", st.SkippedLines, st.MalformedLines)
	}
	if !strings.Contains(st.FirstReason, "line 3") || !strings.Contains(st.FirstReason, "missing") {
		t.Errorf("first reason %q", st.FirstReason)
	}
	if !slices.Equal(rooms, []uint64{1, 2, 1}) || !slices.Equal(lines, []int64{2, 6, 7}) {
		t.Errorf("rooms %v at lines %v", rooms, lines)
	}
}

func TestScanLogDigestErrorNamesLine(t *testing.T) {
	input := "x\nkvcanary room_checksum side=prefill room=1 seq_len=20 pages=1 bsum=1 xxh3=2\n" +
		"kvcanary room_checksum side=decode room=1 seq_len=20 pages=1 bsum=12q xxh3=2\n"
	_, err := ScanLog(strings.NewReader(input), "decode.log", func(*Record) error { return nil })
	var le *LineError
	if !errors.As(err, &le) || le.Line != 3 || le.Name != "decode.log" {
		t.Fatalf("err %v, want a LineError at decode.log:3", err)
	}
	if !strings.HasPrefix(err.Error(), "decode.log:3: malformed bsum digest") {
		t.Errorf("message %q", err.Error())
	}
}

func TestScanLogOverlongLine(t *testing.T) {
	long := "kvcanary room_checksum " + strings.Repeat("x", 3*maxLine)
	input := "kvcanary room_checksum side=prefill room=1 seq_len=20 pages=1 bsum=1 xxh3=2\n" + long +
		"\nkvcanary room_checksum side=decode room=1 seq_len=20 pages=1 bsum=1 xxh3=2\n"
	n := 0
	st, err := ScanLog(strings.NewReader(input), "x", func(*Record) error { n++; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 || st.Lines != 3 || st.Malformed != 1 || !slices.Equal(st.MalformedLines, []int64{2}) {
		t.Fatalf("records %d, stats %+v", n, st)
	}
}

func TestScanLogLongLinesKept(t *testing.T) {
	// A record line longer than the initial buffer (page digests of a long
	// room) must still parse.
	var pages []uint64
	for i := range 20000 {
		pages = append(pages, uint64(i)*0x9E3779B97F4A7C15)
	}
	r := Record{Room: 5, Side: hook.SidePrefill, SeqLen: 20000 * 64, Pages: 20000, Bsum: 1, XXH3: 2, PageXXH3: pages}
	line := string(AppendLogLine(nil, &r))
	if len(line) < 300<<10 {
		t.Fatalf("test line only %d bytes", len(line))
	}
	var got []uint64
	st, err := ScanLog(strings.NewReader("a\n"+line+"\n"), "x", func(r *Record) error {
		got = slices.Clone(r.PageXXH3)
		return nil
	})
	if err != nil || st.Records != 1 || !slices.Equal(got, pages) {
		t.Fatalf("err %v, stats %+v, %d page digests", err, st, len(got))
	}
}

// FuzzParseLine: Parse never panics, and a record it accepts survives a
// round trip through AppendLogLine.
func FuzzParseLine(f *testing.F) {
	for _, s := range []string{
		"kvcanary room_checksum side=prefill room=7 seq_len=150 pages=3 bsum=0x3016b4481a86dffe xxh3=0x5e7b8362c407b5f9",
		"[TP0] kvcanary room_checksum side=decode room=0 seq_len=4 pages=1 bsum=0 xxh3=0",
		"kvcanary room_checksum side=prefill room=1 seq_len=70 pages=2 bsum=1 xxh3=2 page_xxh3=0x1,2",
		"ERROR rid=abc bootstrap_room=12 KV checksum mismatch",
		"kvcanary room_checksum side=prefill room=1 seq_len=1 pages=1 bsum=0xZZ xxh3=1",
		"kvcanary room_checksum",
		"KV checksum mismatch room: 0x10",
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		var p LineParser
		var rec Record
		kind, err := p.Parse(line, &rec)
		if err != nil || kind != LineRecord {
			return
		}
		var q LineParser
		var back Record
		if k2, err := q.Parse(AppendLogLine(nil, &rec), &back); k2 != LineRecord || err != nil {
			t.Fatalf("re-parse of %q: %v %v", AppendLogLine(nil, &rec), k2, err)
		}
		if back.Room != rec.Room || back.Side != rec.Side || back.SeqLen != rec.SeqLen || back.Pages != rec.Pages ||
			back.Bsum != rec.Bsum || back.XXH3 != rec.XXH3 || !slices.Equal(back.PageXXH3, rec.PageXXH3) {
			t.Fatalf("round trip of %q changed the record: %+v vs %+v", line, back, rec)
		}
	})
}

// A read error names the input and the byte offset, and the records read
// before it were delivered.
func TestScanLogReadErrorNamesPosition(t *testing.T) {
	errDisk := errors.New("disk on fire")
	good := "kvcanary room_checksum side=prefill room=1 seq_len=100 pages=2 bsum=1 xxh3=2\n"
	r := io.MultiReader(strings.NewReader(good), iotest.ErrReader(errDisk))
	var n int
	st, err := ScanLog(r, "prefill.log", func(*Record) error { n++; return nil })
	want := fmt.Sprintf("read prefill.log at byte %d: ", len(good))
	if !errors.Is(err, errDisk) || !strings.Contains(err.Error(), want) {
		t.Errorf("err %v, want it to wrap the read error and say %q", err, want)
	}
	if n != 1 || st.Records != 1 {
		t.Errorf("records before the error: delivered %d, counted %d; want 1", n, st.Records)
	}
}

// TestLogLineV11Keys: rank, stage, layers, layer_bsum and page_bsum (SPEC
// §6, §9) parse, round-trip through AppendLogLine, and bad values are
// malformed lines or digest errors.
func TestLogLineV11Keys(t *testing.T) {
	in := Record{Room: 5, Side: hook.SidePrefill, SeqLen: 129, Pages: 3, Bsum: 7, XXH3: 0, Dtype: "fp8", HasRoom: true,
		Rank: 3, Stage: hook.StageSent, Layers: []int{0, 2, 60}, LayerBsum: []uint64{1, 1<<64 - 1, 3}, PageBsum: []uint64{4, 5, 6}}
	line := AppendLogLine([]byte("[TP3] "), &in)
	if !strings.Contains(string(line), " rank=3 stage=sent layers=0,2,60 layer_bsum=0x0000000000000001,0xffffffffffffffff,") {
		t.Errorf("line %s", line)
	}
	var p LineParser
	var out Record
	if kind, err := p.Parse(line, &out); kind != LineRecord || err != nil {
		t.Fatalf("parse %q: %v %v (%s)", line, kind, err, p.Reason)
	}
	if out.Rank != 3 || out.Stage != "sent" || !slices.Equal(out.Layers, in.Layers) || !slices.Equal(out.LayerBsum, in.LayerBsum) ||
		!slices.Equal(out.PageBsum, in.PageBsum) || out.Bsum != 7 {
		t.Fatalf("round trip %q:\n got %+v\nwant %+v", line, out, in)
	}
	// A v1.0 record's line is unchanged: no new keys.
	plain := AppendLogLine(nil, &Record{Room: 1, Side: hook.SideDecode, SeqLen: 1, Pages: 1, Bsum: 2, XXH3: 3})
	if string(plain) != "kvcanary room_checksum side=decode room=1 seq_len=1 pages=1 bsum=0x0000000000000002 xxh3=0x0000000000000003" {
		t.Errorf("v1.0 line %q", plain)
	}
	const base = "kvcanary room_checksum side=decode room=1 seq_len=100 pages=2 bsum=1 xxh3=0 "
	for _, c := range []struct {
		tail   string
		reason string // malformed reason, or
		digest string // DigestError field
	}{
		{"rank=-1", "rank", ""},
		{"rank=one", "rank", ""},
		{"stage=landed", `stage "landed" is not one of sent|transferred|admitted`, ""},
		{"stage=", "stage", ""},
		{"layers=0,2,1 layer_bsum=1,2,3", "not strictly ascending", ""},
		{"layers=0,x layer_bsum=1,2", "layers entry", ""},
		{"layers=", "layers entry", ""},
		{"layers=0,1 layer_bsum=1", "layer_bsum has 1 digests for 2 layers", ""},
		{"layer_bsum=1", "layer_bsum has 1 digests for 0 layers", ""},
		{"rank=1 rank=2", "rank given twice", ""},
		{"layers=0 layer_bsum=0xzz", "", "layer_bsum"},
		{"page_bsum=1,", "", "page_bsum"},
	} {
		var rec Record
		kind, err := p.Parse([]byte(base+c.tail), &rec)
		if c.digest != "" {
			var de *DigestError
			if !errors.As(err, &de) || de.Field != c.digest {
				t.Errorf("%s: %v %v, want a %s DigestError", c.tail, kind, err, c.digest)
			}
			continue
		}
		if kind != LineMalformed || err != nil || !strings.Contains(p.Reason, c.reason) {
			t.Errorf("%s: %v %v reason %q, want malformed ~%q", c.tail, kind, err, p.Reason, c.reason)
		}
	}
}
