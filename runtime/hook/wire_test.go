package hook

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// fillNonZero sets every field reachable from v to a distinct non-zero value,
// so a codec that forgets or swaps a field fails the round trip.
func fillNonZero(v reflect.Value, seed *int) {
	*seed++
	n := *seed
	switch v.Kind() {
	case reflect.String:
		v.SetString("s" + strings.Repeat("é", n%3) + string(rune('a'+n%26)))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		x := int64(n * 7919)
		if n%2 == 0 {
			x = -x
		}
		if v.Kind() == reflect.Int64 && n%3 == 0 {
			x = math.MinInt64 + int64(n)
		}
		v.SetInt(x)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		x := uint64(n * 104729)
		if v.Kind() == reflect.Uint64 && n%2 == 0 {
			x = math.MaxUint64 - uint64(n)
		}
		if v.Kind() == reflect.Uint32 && n%3 == 0 {
			x = math.MaxUint32
		}
		v.SetUint(x)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(n) + 0.25)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 3, 3)
		for i := range 3 {
			fillNonZero(s.Index(i), seed)
		}
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for range 3 {
			k := reflect.New(v.Type().Key()).Elem()
			e := reflect.New(v.Type().Elem()).Elem()
			fillNonZero(k, seed)
			fillNonZero(e, seed)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			fillNonZero(v.Field(i), seed)
		}
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fillNonZero(p.Elem(), seed)
		v.Set(p)
	}
}

// codecCases returns, for every kind, a full event (every field set), a
// bare one (zero body, no src or run) and one with src but no run. Both
// bodies are then made valid (conform).
func codecCases(t testing.TB) []Event {
	var out []Event
	seed := 0
	for _, k := range Kinds() {
		full, _ := NewBody(k)
		fillNonZero(reflect.ValueOf(full).Elem(), &seed)
		conform(full)
		bare, _ := NewBody(k)
		conform(bare)
		out = append(out,
			Event{Kind: k, TS: 1_700_000_000_123_456_789, Src: Source{Node: "gpu-node-7", Proc: "sglang-decode", PID: 4242}, Run: "run-ü1", Body: full},
			Event{Kind: k, Body: bare},
			Event{Kind: k, TS: -5, Src: Source{PID: -1}, Body: full},
		)
	}
	return out
}

func TestCodecRoundTripEveryKind(t *testing.T) {
	type codec struct {
		name string
		enc  func(Event) ([]byte, error)
		dec  func([]byte) (Event, error)
	}
	decFrames := func(b []byte) (Event, error) {
		d := NewFrameDecoder(bytes.NewReader(b))
		ev, err := d.Decode()
		if err != nil {
			return ev, err
		}
		if _, err := d.Decode(); err != io.EOF {
			t.Errorf("after one frame: %v, want io.EOF", err)
		}
		return ev, nil
	}
	codecs := []codec{
		{"binary", func(e Event) ([]byte, error) { return AppendFrame(nil, e) }, decFrames},
		{"frame-json", func(e Event) ([]byte, error) { return AppendFrameJSON(nil, e) }, decFrames},
		{"decodeframe", func(e Event) ([]byte, error) { return AppendFrame([]byte("xx")[:0], e) }, func(b []byte) (Event, error) {
			ev, n, err := DecodeFrame(b)
			if err == nil && n != len(b) {
				t.Errorf("DecodeFrame consumed %d of %d", n, len(b))
			}
			return ev, err
		}},
		{"jsonlines", func(e Event) ([]byte, error) {
			b, err := json.Marshal(e)
			return append(b, '\n'), err
		}, func(b []byte) (Event, error) {
			return NewJSONLinesDecoder(bytes.NewReader(b)).Decode()
		}},
		{"jsonlines-slow", func(e Event) ([]byte, error) { return json.Marshal(e) }, func(b []byte) (Event, error) {
			ev, _, err := slowDecodeLine(b)
			return ev, err
		}},
	}
	for _, c := range codecs {
		for i, in := range codecCases(t) {
			b, err := c.enc(in)
			if err != nil {
				t.Fatalf("%s: encode %s #%d: %v", c.name, in.Kind, i, err)
			}
			out, err := c.dec(b)
			if err != nil {
				t.Fatalf("%s: decode %s #%d: %v\n%q", c.name, in.Kind, i, err, b)
			}
			if !reflect.DeepEqual(in, out) {
				t.Errorf("%s: %s #%d round trip differs:\n in %+v\nout %+v", c.name, in.Kind, i, in.Body, out.Body)
			}
		}
	}
}

func TestBinaryFloat32sKeepNaNBits(t *testing.T) {
	nan := math.Float32frombits(0x7fc00001)
	in := Event{Kind: KindGraphDiffSample, Body: &GraphDiffSample{Graph: Float32s{nan, float32(math.Inf(-1)), -0}}}
	out, _ := frameRoundTrip(t, in)
	g := out.Body.(*GraphDiffSample).Graph
	if math.Float32bits(g[0]) != 0x7fc00001 || !math.IsInf(float64(g[1]), -1) {
		t.Fatalf("got %v", g)
	}
}

// frameRoundTrip encodes ev as a frame and decodes it back.
func frameRoundTrip(t *testing.T, ev Event) (Event, []byte) {
	t.Helper()
	f, err := AppendFrame(nil, ev)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := DecodeFrame(f)
	if err != nil {
		t.Fatal(err)
	}
	return got, f
}

func TestAppendFrameRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		ev   Event
		want string
	}{
		{"invalid kind", Event{Kind: 99, Body: &Replay{Mode: ModeGraph}}, "invalid kind 99"},
		{"no body", Event{Kind: KindReplay}, "has no body"},
		{"nil body", Event{Kind: KindReplay, Body: (*Replay)(nil)}, "has no body"},
		{"mismatch", Event{Kind: KindSched, Body: &Replay{Mode: ModeGraph}}, "kind sched with a replay body"},
		{"nan", Event{Kind: KindSched, Body: &Sched{TokenUsage: math.NaN()}}, "token_usage is NaN"},
		{"inf", Event{Kind: KindSched, Body: &Sched{GenThroughput: math.Inf(1)}}, "gen_throughput is +Inf"},
		{"utf8", Event{Kind: KindSession, Body: &Session{ID: "\xff", Outcome: OutcomeDone}}, "id is not valid UTF-8"},
		{"utf8 run", Event{Kind: KindReplay, Run: "\xfe", Body: &Replay{Mode: ModeGraph}}, "not valid UTF-8"},
		{"bad value", Event{Kind: KindSession, Body: &Session{Outcome: "lek"}}, `session outcome "lek" is not one of done|maxrounds|leak|no_tool|error|timeout`},
	} {
		dst := []byte("keep")
		out, err := AppendFrame(dst, tc.ev)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
		if string(out) != "keep" {
			t.Errorf("%s: dst changed to %q on error", tc.name, out)
		}
	}
}

// frame builds a raw frame with the given payload after the length prefix.
func rawFrame(payload ...byte) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(payload)))
	return append(b, payload...)
}

func mustFrame(t testing.TB, ev Event) []byte {
	t.Helper()
	b, err := AppendFrame(nil, ev)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func replayEvent(step uint64) Event {
	return Event{Kind: KindReplay, TS: int64(step), Body: &Replay{Step: step, BatchSize: 8, Bucket: 8, Mode: "graph", DurNS: 1200}}
}

// TestFrameDecoderBadInput checks each malformed frame is rejected with the
// right reason and offset, and that the decoder resynchronises when framing
// is intact.
func TestFrameDecoderBadInput(t *testing.T) {
	good := mustFrame(t, replayEvent(1))
	hdr := func(ver, kind, flags byte) []byte {
		return append([]byte{ver, kind, flags}, make([]byte, 8)...)
	}
	withBody := func(h []byte, body ...byte) []byte { return rawFrame(append(h, body...)...) }
	// A sched frame whose token_usage is NaN.
	nanSched := mustFrame(t, Event{Kind: KindSched, Body: &Sched{TokenUsage: 0.5}})
	i := bytes.Index(nanSched, binary.LittleEndian.AppendUint64(nil, math.Float64bits(0.5)))
	binary.LittleEndian.PutUint64(nanSched[i:], math.Float64bits(math.NaN()))
	badUTF8 := mustFrame(t, Event{Kind: KindSession, Body: &Session{ID: "abc", Outcome: OutcomeDone}})
	badUTF8[bytes.Index(badUTF8, []byte("abc"))] = 0xff
	jsonNaN := withBody(hdr(1, byte(KindSched), FlagJSON), []byte(`{"token_usage":NaN}`)...)
	jsonTrunc := withBody(hdr(1, byte(KindSched), FlagJSON), []byte(`{"token_usage":0.`)...)
	jsonUTF8 := withBody(hdr(1, byte(KindSession), FlagJSON), []byte("{\"id\":\"\xc3\x28\"}")...)
	trailing := mustFrame(t, replayEvent(2))
	trailing = append(trailing, 0)
	binary.LittleEndian.PutUint32(trailing, binary.LittleEndian.Uint32(trailing)+1)
	shortLen := mustFrame(t, replayEvent(3))
	binary.LittleEndian.PutUint32(shortLen, binary.LittleEndian.Uint32(shortLen)-2)

	for _, tc := range []struct {
		name   string
		frame  []byte
		reason Reason
		fatal  bool
		want   string
	}{
		{"unknown kind", withBody(hdr(1, 200, 0)), ReasonUnknownKind, false, "unknown event kind 200"},
		{"kind zero", withBody(hdr(1, 0, 0)), ReasonUnknownKind, false, "unknown event kind 0"},
		{"version", withBody(hdr(2, byte(KindReplay), 0)), ReasonBadVersion, false, "unsupported frame version 2"},
		{"flags", withBody(hdr(1, byte(KindReplay), 0x80)), ReasonBadFlags, false, "unknown flag bits"},
		{"empty body", withBody(hdr(1, byte(KindReplay), 0)), ReasonBadBody, false, "replay body"},
		{"run.start binary", withBody(hdr(1, byte(KindRunStart), 0)), ReasonBadBody, false, "has no binary body layout"},
		{"trailing bytes", trailing, ReasonBadBody, false, "1 trailing bytes"},
		// A length that is in range but wrong cannot be told from the
		// frame's own bytes: the body fails to decode, and the stream is
		// misaligned afterwards (checked separately).
		{"short length", shortLen, ReasonBadBody, false, "replay body"},
		{"nan", nanSched, ReasonNonFinite, false, "token_usage is NaN"},
		{"bad utf8", badUTF8, ReasonBadUTF8, false, "not valid UTF-8"},
		{"json nan", jsonNaN, ReasonNonFinite, false, "sched JSON body"},
		{"json truncated", jsonTrunc, ReasonBadJSON, false, "sched JSON body"},
		{"json utf8", jsonUTF8, ReasonBadUTF8, false, "invalid UTF-8"},
		{"json null", withBody(hdr(1, byte(KindSched), FlagJSON), []byte("null")...), ReasonBadBody, false, "no body"},
		{"huge count", withBody(hdr(1, byte(KindSession), 0), 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f), ReasonBadBody, false, "does not fit"},
		{"src truncated", withBody(hdr(1, byte(KindReplay), FlagSrc), 5, 'a'), ReasonBadBody, false, "replay envelope"},
		{"1 GB prefix", binary.LittleEndian.AppendUint32(nil, 1<<30), ReasonBadLength, true, "length prefix 1073741824"},
		{"zero length", binary.LittleEndian.AppendUint32(nil, 0), ReasonBadLength, true, "length prefix 0"},
		{"length 10", rawFrame(make([]byte, 10)...), ReasonBadLength, true, "length prefix 10"},
		{"truncated frame", good[:len(good)-1], ReasonTruncated, true, "stream ends inside a frame"},
		{"truncated prefix", good[:3], ReasonTruncated, true, "stream ends inside a frame"},
	} {
		stream := append(append([]byte{}, good...), tc.frame...)
		if tc.reason != ReasonTruncated {
			stream = append(stream, good...)
		}
		d := NewFrameDecoder(bytes.NewReader(stream))
		d.SetOffset(4)
		if _, err := d.Decode(); err != nil {
			t.Fatalf("%s: first frame: %v", tc.name, err)
		}
		_, err := d.Decode()
		we := checkWireError(t, tc.name, err, tc.reason, tc.fatal, tc.want)
		if we.Offset != int64(4+len(good)) {
			t.Errorf("%s: offset %d, want %d", tc.name, we.Offset, 4+len(good))
		}
		if !strings.Contains(err.Error(), "frame at byte ") {
			t.Errorf("%s: error %q does not name the offset", tc.name, err)
		}
		if tc.name == "short length" {
			continue
		}
		ev, err := d.Decode()
		if tc.fatal {
			if err != we {
				t.Errorf("%s: after fatal error got %v, %v", tc.name, ev, err)
			}
			continue
		}
		if err != nil || ev.Body.(*Replay).Step != 1 {
			t.Errorf("%s: after a rejected frame: %v %v, want the next good frame", tc.name, ev, err)
		}
		if _, err := d.Decode(); err != io.EOF {
			t.Errorf("%s: end: %v", tc.name, err)
		}
	}
}

// checkWireError checks that err is a *WireError of the given reason and
// fatality whose text holds want, and returns it.
func checkWireError(t *testing.T, name string, err error, reason Reason, fatal bool, want string) *WireError {
	t.Helper()
	var we *WireError
	if !errors.As(err, &we) {
		t.Fatalf("%s: err = %v, want *WireError", name, err)
	}
	if we.Reason != reason || we.Fatal != fatal || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: got %v (reason %s fatal %v), want %q reason %s fatal %v", name, err, we.Reason, we.Fatal, want, reason, fatal)
	}
	return we
}

func TestJSONLinesDecoderBadInput(t *testing.T) {
	good := `{"v":1,"kind":"replay","ts_ns":5,"body":{"step":9,"bs":4,"mode":"graph","dur_ns":10}}`
	for _, tc := range []struct {
		name   string
		line   string
		reason Reason
		fatal  bool
		want   string
	}{
		{"truncated json", `{"v":1,"kind":"replay","ts_ns":5,"body":{"step":9`, ReasonBadJSON, false, "unexpected end of JSON"},
		{"bad utf8", "{\"v\":1,\"kind\":\"session\",\"ts_ns\":5,\"body\":{\"id\":\"\xff\"}}", ReasonBadUTF8, false, "invalid UTF-8 at column 49"},
		{"nan", `{"v":1,"kind":"sched","ts_ns":5,"body":{"token_usage":NaN}}`, ReasonNonFinite, false, "invalid character 'N'"},
		{"inf", `{"v":1,"kind":"sched","ts_ns":5,"body":{"token_usage":-Infinity}}`, ReasonNonFinite, false, "invalid character 'I'"},
		{"overflow", `{"v":1,"kind":"sched","ts_ns":5,"body":{"token_usage":1e999}}`, ReasonNonFinite, false, "1e999"},
		{"nan ts", `{"v":1,"kind":"sched","ts_ns":NaN,"body":{}}`, ReasonNonFinite, false, "invalid character"},
		{"unknown kind", `{"v":1,"kind":"bogus","ts_ns":5,"body":{}}`, ReasonUnknownKind, false, `unknown event kind "bogus"`},
		{"version", `{"v":2,"kind":"sched","ts_ns":5,"body":{}}`, ReasonBadVersion, false, "unsupported event version 2"},
		{"no version", `{"kind":"sched","ts_ns":5,"body":{}}`, ReasonBadVersion, false, "unsupported event version 0"},
		{"no body", `{"v":1,"kind":"sched","ts_ns":5}`, ReasonBadBody, false, "has no body"},
		{"null body", `{"v":1,"kind":"sched","ts_ns":5,"body":null}`, ReasonBadBody, false, "has no body"},
		{"wrong type", `{"v":1,"kind":"sched","ts_ns":5,"body":{"running_req":"x"}}`, ReasonBadJSON, false, "cannot unmarshal"},
		{"room bad", `{"v":1,"kind":"room.checksum","ts_ns":5,"body":{"room":"x1"}}`, ReasonBadJSON, false, "decimal or 0x-hex"},
		{"not object", `[1,2]`, ReasonBadJSON, false, "cannot unmarshal array"},
		{"trailing", good + ` x`, ReasonBadJSON, false, "invalid character 'x'"},
	} {
		stream := good + "\n" + tc.line + "\n\n" + good + "\r\n"
		d := NewJSONLinesDecoder(strings.NewReader(stream))
		if _, err := d.Decode(); err != nil {
			t.Fatalf("%s: first line: %v", tc.name, err)
		}
		_, err := d.Decode()
		we := checkWireError(t, tc.name, err, tc.reason, tc.fatal, tc.want)
		if we.Line != 2 || we.Offset != int64(len(good)+1) || !strings.HasPrefix(err.Error(), "line 2 (byte ") {
			t.Errorf("%s: line %d offset %d (%v), want line 2 offset %d", tc.name, we.Line, we.Offset, err, len(good)+1)
		}
		ev, err := d.Decode()
		if err != nil || ev.Body.(*Replay).Step != 9 {
			t.Errorf("%s: after a rejected line: %v %v", tc.name, ev, err)
		}
		if d.Line() != 4 {
			t.Errorf("%s: Line() = %d, want 4", tc.name, d.Line())
		}
		if _, err := d.Decode(); err != io.EOF {
			t.Errorf("%s: end: %v", tc.name, err)
		}
	}
}

func TestJSONLinesUnterminatedLastLine(t *testing.T) {
	good := `{"v":1,"kind":"replay","ts_ns":5,"body":{"step":9,"bs":4,"mode":"graph","dur_ns":10}}`
	d := NewJSONLinesDecoder(strings.NewReader(good + "\n" + good))
	for range 2 {
		if _, err := d.Decode(); err != nil {
			t.Fatal(err)
		}
	}
	d = NewJSONLinesDecoder(strings.NewReader(good + "\n" + good[:20]))
	d.Decode()
	_, err := d.Decode()
	if ReasonOf(err) != ReasonTruncated {
		t.Fatalf("cut last line: %v, want reason truncated", err)
	}
	if _, err := d.Decode(); err != io.EOF {
		t.Fatalf("after cut line: %v", err)
	}
}

func TestJSONLinesTooLong(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 16 MiB")
	}
	long := bytes.Repeat([]byte(" "), MaxFrameSize+10)
	d := NewJSONLinesDecoder(io.MultiReader(bytes.NewReader(long), strings.NewReader("\n{}\n")))
	_, err := d.Decode()
	var we *WireError
	if !errors.As(err, &we) || we.Reason != ReasonTooLong || !we.Fatal {
		t.Fatalf("got %v, want fatal too_long", err)
	}
}

// TestFastJSONTakesCanonicalLines checks the fast path really handles what
// Event.MarshalJSON writes for its kinds (so benchmarks measure it), and
// builds the same event as encoding/json.
func TestFastJSONTakesCanonicalLines(t *testing.T) {
	for _, ev := range codecCases(t) {
		if !fastBody[ev.Kind] {
			continue
		}
		line, _ := json.Marshal(ev)
		got, ok := fastLine(line)
		if !ok {
			t.Errorf("%s: fast path gave up on canonical %s", ev.Kind, line)
			continue
		}
		if !reflect.DeepEqual(got, ev) {
			t.Errorf("%s: fast path built %+v, want %+v", ev.Kind, got.Body, ev.Body)
		}
	}
	// And gives up (leaving the verdict to encoding/json) on what it does
	// not handle.
	for _, line := range []string{
		`{"v":1,"kind":"replay","ts_ns":1,"body":{"step":1,"extra":2,"mode":"graph"}}`,
		`{"v":1,"kind":"replay","ts_ns":1,"body":{"Step":1,"mode":"graph"}}`,
		`{"v":1,"kind":"replay","ts_ns":1,"body":{"mode":"gr\u0061ph"}}`,
		`{"v":1,"kind":"replay","ts_ns":1.5,"body":{}}`,
		`{"v":1,"body":{"mode":"eager"},"kind":"replay"}`,
		`{"v":1,"kind":"gpu","ts_ns":1,"body":{}}`,
		`{"v":1,"kind":"replay","ts_ns":1,"body":{}} x`,
		`{"v":1,"kind":"replay","ts_ns":1,"body":{"step":null,"mode":"graph"}}`,
	} {
		if _, ok := fastLine([]byte(line)); ok {
			t.Errorf("fast path accepted %s", line)
		}
		if _, _, err := DecodeJSONLine([]byte(line)); err != nil && !strings.Contains(line, " x") && !strings.Contains(line, "1.5") {
			t.Errorf("slow path rejects %s: %v", line, err)
		}
	}
}

type zeroReader struct{}

func (zeroReader) Read([]byte) (int, error) { return 0, nil }

func TestDecodersSurviveReadersWithoutProgress(t *testing.T) {
	if _, err := NewFrameDecoder(zeroReader{}).Decode(); !errors.Is(err, io.ErrNoProgress) {
		t.Errorf("frames: %v", err)
	}
	if _, err := NewJSONLinesDecoder(zeroReader{}).Decode(); !errors.Is(err, io.ErrNoProgress) {
		t.Errorf("json lines: %v", err)
	}
}

// v11Events are the fields checksum spec v1.1 and the between-step canary
// added, with values that exercise every encoding (64-bit digests with the
// top bit set, layer ids needing several varint bytes, non-ASCII-free enums).
func v11Events() []Event {
	return []Event{
		{Kind: KindRoomChecksum, TS: 9, Src: Source{Node: "decode-host", Proc: "sglang-decode", PID: 7}, Body: &RoomChecksum{
			Room: 1<<63 + 11, Side: SideDecode, SeqLen: 129, Pages: 3, Bsum: 1<<64 - 1, XXH3: 0, Dtype: "fp8",
			Rank: 5, Stage: StageAdmitted, Layers: []int{0, 2, 60, 1000}, LayerBsum: []Hex64{1, 1<<64 - 2, 0, 0x8000000000000000},
			PageBsum: []Hex64{0xdeadbeef, 1 << 63, 3}}},
		{Kind: KindRoomChecksum, Body: &RoomChecksum{Side: SidePrefill, SeqLen: 64, Stage: StageSent, PageBsum: []Hex64{42}}},
		{Kind: KindRoomChecksum, Body: &RoomChecksum{Side: SideDecode, Stage: StageTransferred, Rank: 1 << 20, Layers: []int{3}, LayerBsum: []Hex64{9}}},
		{Kind: KindCanaryPages, Body: &CanaryPages{Step: 4, Phase: PhaseBetween, Changed: []PageChange{{Page: 3, Before: 1, After: 2}}, Expected: []uint32{3}}},
		{Kind: KindCanaryPages, Body: &CanaryPages{Step: 5, Phase: PhaseReplay}},
		{Kind: KindGraphDiffSample, Body: &GraphDiffSample{Step: 6, Request: "r", Source: "indexer_topk.17", TopKGraph: []int32{1, 2}, TopKEager: []int32{2, 1}, K: 2}},
		{Kind: KindGraphDiffSample, Body: &GraphDiffSample{Step: 7, Request: "r", Source: SourceNextTokenLogits, Graph: Float32s{1}, Eager: Float32s{1}}},
	}
}

// TestV11FieldsRoundTrip: the new fields survive the binary layout, JSON
// frame bodies and JSON lines (fast and slow paths), and the binary form is
// really used for them.
func TestV11FieldsRoundTrip(t *testing.T) {
	for i, in := range v11Events() {
		if !binaryBody[in.Kind] {
			t.Fatalf("%s travels as JSON: its binary layout is behind event.go", in.Kind)
		}
		bin := mustFrame(t, in)
		if bin[4+2]&FlagJSON != 0 {
			t.Errorf("#%d %s: AppendFrame set the JSON flag", i, in.Kind)
		}
		js, err := AppendFrameJSON(nil, in)
		if err != nil {
			t.Fatal(err)
		}
		line, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		fast, ok := fastLine(line)
		if fastBody[in.Kind] && !ok {
			t.Errorf("#%d %s: fast path gave up on %s", i, in.Kind, line)
		}
		slow, _, err := slowDecodeLine(line)
		if err != nil {
			t.Fatalf("#%d: slow path: %v", i, err)
		}
		var outs []Event
		for _, f := range [][]byte{bin, js} {
			ev, n, err := DecodeFrame(f)
			if err != nil || n != len(f) {
				t.Fatalf("#%d %s: decode frame: %v", i, in.Kind, err)
			}
			outs = append(outs, ev)
		}
		outs = append(outs, slow)
		if ok {
			outs = append(outs, fast)
		}
		for j, out := range outs {
			if !reflect.DeepEqual(in, out) {
				t.Errorf("#%d %s: codec %d round trip differs:\n in %+v\nout %+v", i, in.Kind, j, in.Body, out.Body)
			}
		}
	}
	// 64-bit digests in the new lists are strings, never numbers.
	line, _ := json.Marshal(v11Events()[0])
	for _, key := range []string{`"layer_bsum":["0x0000000000000001",`, `"page_bsum":["0x00000000deadbeef",`, `"layers":[0,2,60,1000]`, `"rank":5`, `"stage":"admitted"`} {
		if !bytes.Contains(line, []byte(key)) {
			t.Errorf("JSON line lacks %s: %s", key, line)
		}
	}
	for _, body := range []string{
		`{"room":"1","side":"decode","seq_len":64,"page_bsum":[12]}`,
		`{"room":"1","side":"decode","layers":[0],"layer_bsum":[3735928559]}`,
	} {
		l := fmt.Appendf(nil, `{"v":1,"kind":"room.checksum","ts_ns":1,"body":%s}`, body)
		if _, ok := fastLine(l); ok {
			t.Errorf("fast path accepted %s", l)
		}
		if _, r, err := DecodeJSONLine(l); r != ReasonBadValue || !strings.Contains(fmt.Sprint(err), "is the JSON number") {
			t.Errorf("%s: %s %v, want bad_value naming the JSON number", l, r, err)
		}
	}
}

// TestBinaryBodiesFromOlderProducers: a frame that ends where the fields
// appended for v1.1 begin (written by a producer built before them) decodes
// with those fields absent; one that ends inside the appended group is
// bad_body.
func TestBinaryBodiesFromOlderProducers(t *testing.T) {
	for _, tc := range []struct {
		ev       Event
		appended int // bytes the zero-valued appended fields take
	}{
		{Event{Kind: KindRoomChecksum, TS: 1, Body: &RoomChecksum{Room: 3, Side: SidePrefill, SeqLen: 100, Pages: 2, Bsum: 5, XXH3: 6, PageSum: []Hex64{1, 2}}}, 5},
		{Event{Kind: KindCanaryPages, TS: 1, Body: &CanaryPages{Step: 2, PagesTotal: 9, SlotChecked: true}}, 1},
		{Event{Kind: KindGraphDiffSample, TS: 1, Body: &GraphDiffSample{Step: 3, Request: "r", K: 4}}, 1},
		{Event{Kind: KindSession, TS: 1, Body: &Session{ID: "s1", Outcome: OutcomeLeak, Rounds: 2, Reason: "r", Requests: []string{"a", "b"}}}, 2},
	} {
		full := mustFrame(t, tc.ev)
		old := slices.Clone(full[:len(full)-tc.appended])
		binary.LittleEndian.PutUint32(old, uint32(len(old)-4))
		ev, n, err := DecodeFrame(old)
		if err != nil || n != len(old) {
			t.Fatalf("%s: older frame: %v", tc.ev.Kind, err)
		}
		if !reflect.DeepEqual(ev, tc.ev) {
			t.Errorf("%s: older frame decoded as %+v, want %+v", tc.ev.Kind, ev.Body, tc.ev.Body)
		}
		if tc.appended > 1 {
			part := slices.Clone(full[:len(full)-tc.appended+1])
			binary.LittleEndian.PutUint32(part, uint32(len(part)-4))
			if _, _, err := DecodeFrame(part); ReasonOf(err) != ReasonBadBody {
				t.Errorf("%s: frame ending inside the appended fields: %v, want bad_body", tc.ev.Kind, err)
			}
		}
	}
}

// TestSessionEvidence: a session's round and excerpt survive every codec,
// and the reason older producers sent as "error" decodes as Reason on both
// JSON paths (the fast decoder and encoding/json).
func TestSessionEvidence(t *testing.T) {
	want := Event{Kind: KindSession, TS: 7, Run: "r", Body: &Session{ID: "s004", Outcome: OutcomeLeak, Rounds: 3,
		Reason: "tool-call markup <tool_call> in content", Requests: []string{"q1", "q2", "q3"}, Round: 3,
		Excerpt: "I will call <tool_call>{\"name\": \"search\"}"}}
	fr := mustFrame(t, want)
	got, _, err := DecodeFrame(fr)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("binary: %+v, %v; want %+v", got.Body, err, want.Body)
	}
	line, err := want.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(line, []byte(`"reason":"tool-call markup`)) || bytes.Contains(line, []byte(`"error"`)) {
		t.Errorf("JSON names the reason otherwise: %s", line)
	}
	got, _, err = DecodeJSONLine(line)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("JSON: %+v, %v; want %+v", got.Body, err, want.Body)
	}
	for _, l := range []string{
		`{"v":1,"kind":"session","ts":1,"body":{"id":"s","outcome":"error","rounds":0,"error":"HTTP 503: busy"}}`,
		// An unknown key sends the line down the encoding/json path.
		`{"v":1,"kind":"session","ts":1,"body":{"id":"s","outcome":"error","rounds":0,"error":"HTTP 503: busy","later":1}}`,
	} {
		ev, _, err := DecodeJSONLine([]byte(l))
		if err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		if r := ev.Body.(*Session).Reason; r != "HTTP 503: busy" {
			t.Errorf("%s: reason %q, want the legacy error's text", l, r)
		}
	}
	long := &Session{ID: "s", Outcome: OutcomeLeak, Excerpt: strings.Repeat("x", MaxExcerpt+1)}
	if _, err := AppendFrame(nil, Event{Kind: KindSession, Body: long}); err == nil || !strings.Contains(err.Error(), "excerpt") {
		t.Errorf("an excerpt over MaxExcerpt: %v, want an error naming excerpt", err)
	}
	if _, err := AppendFrame(nil, Event{Kind: KindSession, Body: &Session{ID: "s", Outcome: OutcomeLeak, Round: -1}}); err == nil || !strings.Contains(err.Error(), "round -1 is negative") {
		t.Errorf("round -1: %v, want an error naming round", err)
	}
}
