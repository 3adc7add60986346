package hook

import (
	"bufio"
	"bytes"
	"flag"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// The Python engine hooks (runtime/pyhook) and the Go side share the wire
// contract. Each side commits the lines it produces; the other side's tests
// decode them. go_events.jsonl is written here (go test -run TestGoldenGoEvents
// -update-golden) and read by runtime/pyhook/tests; python_events.jsonl is
// written by the Python encoder and read by TestGoldenPythonEvents.

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/golden/go_events.jsonl")

const (
	goGolden = "testdata/golden/go_events.jsonl"
	pyGolden = "../pyhook/tests/golden/python_events.jsonl"
)

// goldenEvents holds one event of every kind the engine hooks send, with the
// fields real engines fill: 63-bit rooms, layer lists, phases, sources.
func goldenEvents() []Event {
	ts := int64(1767225600123456789)
	src := Source{Node: "gpu-7", Proc: "sglang-decode", PID: 4242}
	engine := Source{Node: "gpu-7", Proc: "sglang-decode", PID: 4242, Role: "decode", Rank: 3}
	return []Event{
		{Kind: KindRoomChecksum, TS: ts, Src: engine, Run: "r1", Body: &RoomChecksum{
			Room: 9223372036854775783, Side: SideDecode, SeqLen: 130, Pages: 3,
			Bsum: 0xfedcba9876543210, Dtype: "fp8", Request: "rid-1", Rank: 3, Stage: "admitted",
			Layers: []int{0, 1, 5}, LayerBsum: []Hex64{1, 0xffffffffffffffff, 0x8000000000000000},
			PageBsum: []Hex64{0x0123456789abcdef, 2, 3},
		}},
		{Kind: KindCanaryPages, TS: ts + 1, Src: src, Run: "r1", Body: &CanaryPages{
			Step: 77, Policy: "live", PagesTotal: 4096, PagesChecked: 12, Phase: "between",
			Changed:  []PageChange{{Page: 9, Owner: "rid-2", Before: 0xaaaaaaaaaaaaaaaa, After: 0x5555555555555555}},
			Expected: []uint32{4}, Transfer: []uint32{100, 101}, Running: []string{"rid-1", "rid-2"},
			LivePages: 10, LiveChecked: 10,
		}},
		{Kind: KindGraphDiffSample, TS: ts + 2, Src: src, Run: "r1", Body: &GraphDiffSample{
			Step: 512, Request: "rid-1", Source: "indexer_topk.7", K: 4, SeqLen: 130,
			TopKGraph: []int32{129, 3, 2, 1}, TopKEager: []int32{129, 3, 2, 0},
		}},
		{Kind: KindGraphDiffSample, TS: ts + 3, Src: src, Run: "r1", Body: &GraphDiffSample{
			Step: 512, Request: "rid-1", Source: "next_token_logits", Dtype: "bf16",
			Graph: Float32s{1.5, float32(math.Inf(-1)), -2}, Eager: Float32s{1.5, float32(math.Inf(-1)), -2.25},
		}},
		{Kind: KindReplay, TS: ts + 4, Src: src, Run: "r1", Body: &Replay{Step: 512, BatchSize: 5, Bucket: 8, Mode: "graph", DurNS: 1200}},
		{Kind: KindRunEnd, TS: ts + 5, Src: src, Run: "r1", Body: &RunEnd{WallNS: 5e9, Dropped: 17}},
	}
}

func TestGoldenGoEvents(t *testing.T) {
	var buf bytes.Buffer
	for _, ev := range goldenEvents() {
		b, err := ev.MarshalJSON()
		if err != nil {
			t.Fatalf("marshal %s: %v", ev.Kind, err)
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	if *updateGolden {
		if err := os.WriteFile(goGolden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	have, err := os.ReadFile(goGolden)
	if err != nil {
		t.Fatalf("read %s (run with -update-golden to create it): %v", goGolden, err)
	}
	if !bytes.Equal(have, buf.Bytes()) {
		t.Fatalf("%s is stale: the Go encoder now writes\n%s\nrun go test ./runtime/hook -run TestGoldenGoEvents -update-golden and check the Python tests still read it", goGolden, buf.String())
	}
	// The committed lines decode back to the same events.
	dec := NewJSONLinesDecoder(bytes.NewReader(have))
	for i, want := range goldenEvents() {
		got, err := dec.Decode()
		if err != nil {
			t.Fatalf("%s line %d: %v", goGolden, i+1, err)
		}
		a, _ := got.MarshalJSON()
		b, _ := want.MarshalJSON()
		if !bytes.Equal(a, b) {
			t.Errorf("%s line %d round trip:\n got %s\nwant %s", goGolden, i+1, a, b)
		}
	}
}

// TestGoldenPythonEvents decodes what the Python emitter writes: every line must
// pass the same decoder and value checks a collector applies, with no field
// lost (re-encoding and decoding again gives the same event).
func TestGoldenPythonEvents(t *testing.T) {
	f, err := os.Open(filepath.FromSlash(pyGolden))
	if os.IsNotExist(err) {
		t.Skipf("%s not present (written by runtime/pyhook's tests)", pyGolden)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	kinds := map[Kind]int{}
	for n := 1; sc.Scan(); n++ {
		ev, reason, err := DecodeJSONLine(sc.Bytes())
		if err != nil {
			t.Fatalf("%s:%d: %v (%s)", pyGolden, n, err, reason)
		}
		if err := ev.Validate(); err != nil {
			t.Fatalf("%s:%d: %v", pyGolden, n, err)
		}
		kinds[ev.Kind]++
		frame, err := AppendFrame(nil, ev)
		if err != nil {
			t.Fatalf("%s:%d: binary frame: %v", pyGolden, n, err)
		}
		back, err := NewFrameDecoder(bytes.NewReader(frame)).Decode()
		if err != nil {
			t.Fatalf("%s:%d: binary round trip: %v", pyGolden, n, err)
		}
		a, _ := ev.MarshalJSON()
		b, _ := back.MarshalJSON()
		if !bytes.Equal(a, b) {
			t.Errorf("%s:%d: binary round trip lost a field:\n got %s\nwant %s", pyGolden, n, b, a)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, k := range []Kind{KindRoomChecksum, KindCanaryPages, KindGraphDiffSample, KindRunEnd} {
		if kinds[k] == 0 {
			t.Errorf("%s has no %s event; the Python side must pin every kind it sends", pyGolden, k)
		}
	}
}
