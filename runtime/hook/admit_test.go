package hook

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
)

// lineLenCases are events whose JSON spelling has every special case
// encoding/json knows: escapes, HTML-safe characters, U+2028, float
// formats, nil and empty lists, nil and empty vectors.
func lineLenCases(t *testing.T) []Event {
	evs := codecCases(t)
	odd := "\"\\\b\f\n\r\t\x01\x1f\x7f<>&é\u2028\u2029😀 plain"
	for _, f := range []float64{0, math.Copysign(0, -1), 1e20, 1e21, 123456789e13, 1e-6, 9.99e-7, 1e-7, 1.5e-300, 5e-324, math.MaxFloat64, -3.25, 0.1, 1.0 / 3} {
		evs = append(evs, Event{Kind: KindSched, Body: &Sched{TokenUsage: f, NewTokenRatio: -f, GenThroughput: f / 7}})
	}
	evs = append(evs,
		Event{Kind: KindFinding, Run: odd, Src: Source{Node: odd, Proc: "<p>", PID: math.MinInt32},
			Body: &Finding{Analyzer: odd, Severity: SevInfo, Summary: strings.Repeat(odd, 3), Evidence: map[string]string{odd: odd, "": "", "<": ">"}}},
		Event{Kind: KindFinding, Body: &Finding{Severity: SevInfo, Evidence: map[string]string{}}},
		Event{Kind: KindGraphDiffSample, Body: &GraphDiffSample{Request: "r", Graph: Float32s{}, Eager: Float32s{1, float32(math.Inf(1)), float32(math.NaN())}, TopKGraph: []int32{}, TopKEager: []int32{-1, 7}}},
		Event{Kind: KindGPU, Body: &GPU{}},
		Event{Kind: KindGPU, Body: &GPU{Devices: []GPUDevice{{}, {Procs: []GPUProc{}}, {Procs: []GPUProc{{}}}}}},
		Event{Kind: KindCanaryPages, Body: &CanaryPages{Changed: []PageChange{{Owner: odd}}, Running: []string{"", odd}}},
		Event{Kind: KindRunStart, Body: &RunStart{Config: RunConfig{Extra: map[string]string{"a": odd}, Inject: []string{}}, Host: HostInfo{GPUs: []GPUInfo{{}}}}},
		Event{Kind: KindRoomChecksum, Body: &RoomChecksum{Side: SidePrefill, Room: math.MaxUint64, PageSum: []Hex64{}, Layers: []int{0, 7}, LayerBsum: []Hex64{0, math.MaxUint64}}},
	)
	return evs
}

func TestEventLineLenExact(t *testing.T) {
	for i, ev := range lineLenCases(t) {
		want, err := ev.MarshalJSON()
		if err != nil {
			t.Fatalf("case %d (%s): %v", i, ev.Kind, err)
		}
		got, err := EventLineLen(ev)
		if err != nil {
			t.Fatalf("case %d (%s): EventLineLen: %v", i, ev.Kind, err)
		}
		if got != len(want) {
			t.Errorf("case %d (%s): EventLineLen %d, MarshalJSON %d bytes: %s", i, ev.Kind, got, len(want), want)
		}
	}
	if _, err := EventLineLen(Event{Kind: KindSched}); err == nil {
		t.Error("EventLineLen of an event without a body: no error")
	}
}

func TestCheckEventLine(t *testing.T) {
	if err := CheckEventLine(KindFinding, MaxEventLine); err != nil {
		t.Fatalf("at the limit: %v", err)
	}
	err := CheckEventLine(KindFinding, MaxEventLine+1)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "16777217 bytes") || !strings.Contains(err.Error(), "16777216-byte limit") {
		t.Fatalf("one over: %v", err)
	}
}

// TestAdmitFactorsHold feeds the inputs that grow most when re-encoded as
// JSON (per byte) through both decoders and checks the fast path's bound
// on each: a JSON-lines size over factor×wire + overhead would let
// AdmitEvent pass an event the writer refuses.
func TestAdmitFactorsHold(t *testing.T) {
	const n = 4096 // elements per case: enough for per-element ratios to dominate
	rep := func(s string) string { return strings.TrimSuffix(strings.Repeat(s+",", n), ",") }
	bodies := []struct {
		kind Kind
		body string
	}{
		{KindGPU, `{"devices":[` + rep(`{}`) + `]}`},
		{KindGPU, `{"devices":[{"procs":[` + rep(`{}`) + `]}]}`},
		{KindCanaryPages, `{"changed":[` + rep(`{}`) + `]}`},
		{KindCanaryPages, `{"collateral":[` + rep(`{}`) + `],"expected":[` + rep(`0`) + `]}`},
		{KindRoomChecksum, `{"room":"1","side":"decode","seq_len":` + strconv.Itoa(64*n) + `,"page_bsum":[` + rep(`null`) + `]}`},
		{KindRunStart, `{"host":{"gpus":[` + rep(`{}`) + `]}}`},
		{KindFinding, `{"severity":"info","summary":"` + strings.Repeat("<", n) + `"}`},
		{KindSession, `{"id":"a","outcome":"done","requests":[` + rep(`"\u2028"`) + `]}`},
		{KindSched, `{"token_usage":1e20,"new_token_ratio":-1e20,"gen_throughput":1e-6}`},
	}
	for i, b := range bodies {
		l := `{"v":1,"kind":"` + b.kind.String() + `","ts_ns":0,"body":` + b.body + `}`
		ev, _, err := DecodeJSONLine([]byte(l))
		if err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		checkFactor(t, "json line", i, ev, len(l), admitJSONFactor)
		// The same body, as a producer wrote it, inside a frame.
		f := rawFrame(append([]byte{1, byte(b.kind), FlagJSON, 0, 0, 0, 0, 0, 0, 0, 0}, b.body...)...)
		ev, _, err = DecodeFrame(f)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		checkFactor(t, "frame with JSON body", i, ev, len(f)-frameHeaderLen, admitJSONFactor)
	}
	lt := strings.Repeat("<", 1)
	binaries := []Event{
		{Kind: KindFinding, Body: &Finding{Severity: SevInfo, Summary: strings.Repeat("<", n), Evidence: map[string]string{"<": "&"}}},
		{Kind: KindCanaryPages, Body: &CanaryPages{Changed: make([]PageChange, n)}},
		{Kind: KindCanaryPages, Body: &CanaryPages{Running: make([]string, n), Expected: repeated[uint32](127, n)}},
		{Kind: KindCanaryPages, Body: &CanaryPages{Running: repeated(lt, n)}},
		{Kind: KindGraphDiffSample, Body: &GraphDiffSample{Request: "r", Graph: make(Float32s, n), TopKGraph: repeated[int32](-64, n)}},
		{Kind: KindRoomChecksum, Body: &RoomChecksum{Side: SideDecode, SeqLen: 64 * n, PageBsum: make([]Hex64, n), Layers: ascendingInts(n), LayerBsum: make([]Hex64, n)}},
		{Kind: KindSession, Body: &Session{ID: "<", Outcome: OutcomeDone, Requests: repeated("\u2028", n), FinishReasons: make([]string, n)}},
	}
	for i, ev := range binaries {
		got, f := frameRoundTrip(t, ev)
		checkFactor(t, "binary frame", i, got, len(f)-frameHeaderLen, admitBinaryFactor)
	}
}

func checkFactor(t *testing.T, what string, i int, ev Event, wire, factor int) {
	t.Helper()
	n, err := EventLineLen(ev)
	if err != nil {
		t.Fatalf("%s %d: %v", what, i, err)
	}
	// Per byte, the fixed overhead aside.
	if n > factor*wire+admitOverhead || n-admitOverhead > 0 && float64(n)/float64(wire) > float64(factor) {
		t.Errorf("%s %d (%s): %d wire bytes become %d JSON bytes (×%.1f), over the assumed ×%d", what, i, ev.Kind, wire, n, float64(n)/float64(wire), factor)
	}
	t.Logf("%s %d (%s): ×%.2f", what, i, ev.Kind, float64(n)/float64(wire))
}

// repeated is n copies of v.
func repeated[T any](v T, n int) []T {
	s := make([]T, n)
	for i := range s {
		s[i] = v
	}
	return s
}

// ascendingInts is 0, 1, …, n-1: a valid layer list (layer ids ascend from
// 0; negative ids, which would expand most, are refused by Validate).
func ascendingInts(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

func TestAdmitEventRefusesWhatTheLineLimitRefuses(t *testing.T) {
	// 3 MiB of '<': a legal 3 MiB line, an 18 MiB bundle line.
	line := `{"v":1,"kind":"finding","ts_ns":1,"body":{"severity":"info","summary":"` + strings.Repeat("<", 3<<20) + `"}}`
	ev, _, err := DecodeJSONLine([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if err := AdmitEvent(ev, len(line), true); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("3 MiB of '<': AdmitEvent = %v, want ErrTooLarge", err)
	}
	// Exactly at the limit passes, one byte more does not.
	base, _ := EventLineLen(Event{Kind: KindFinding, TS: 1, Body: &Finding{Severity: SevInfo, Summary: ""}})
	at := Event{Kind: KindFinding, TS: 1, Body: &Finding{Severity: SevInfo, Summary: strings.Repeat("x", MaxEventLine-base)}}
	if err := AdmitEvent(at, MaxEventLine-64, true); err != nil {
		t.Fatalf("at the limit: %v", err)
	}
	at.Body.(*Finding).Summary += "x"
	if err := AdmitEvent(at, MaxEventLine-64, true); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("one byte over: %v", err)
	}
	// Small events skip the measurement (and pass).
	if err := AdmitEvent(replayEvent(1), 40, false); err != nil {
		t.Fatal(err)
	}
}
