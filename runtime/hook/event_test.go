package hook

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func TestEventJSONRoundTripKeepsEveryBit(t *testing.T) {
	in := Event{Kind: KindRoomChecksum, TS: 42, Src: Source{Node: "n", PID: 7}, Run: "r",
		Body: &RoomChecksum{Room: 1<<63 + 5, Side: SideDecode, SeqLen: 4, Pages: 1, Bsum: 0xdeadbeef, XXH3: math.MaxUint64}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"room":"9223372036854775813"`, `"bsum":"0x00000000deadbeef"`, `"xxh3":"0xffffffffffffffff"`, `"v":1`, `"kind":"room.checksum"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %s", b, want)
		}
	}
	var out Event
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	rc := out.Body.(*RoomChecksum)
	if rc.Room != 1<<63+5 || rc.XXH3 != math.MaxUint64 || out.Src.PID != 7 {
		t.Fatalf("round trip lost bits: %+v %+v", out, rc)
	}
}

func TestFloat32sCarryNaN(t *testing.T) {
	in := Float32s{1, float32(math.NaN()), float32(math.Inf(-1))}
	b, _ := json.Marshal(in)
	var out Float32s
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out[0] != 1 || !math.IsNaN(float64(out[1])) || !math.IsInf(float64(out[2]), -1) {
		t.Fatalf("got %v", out)
	}
}

func TestEventJSONRejects(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"v":2,"kind":"sched","ts_ns":1,"body":{}}`, "unsupported event version 2"},
		{`{"v":1,"kind":"bogus","ts_ns":1,"body":{}}`, `unknown event kind "bogus"`},
		{`{"v":1,"kind":"sched","ts_ns":1}`, "has no body"},
		{`{"v":1,"kind":"room.checksum","ts_ns":1,"body":{"room":"x1"}}`, "decimal or 0x-hex"},
		{`{"v":1,"kind":"sched"`, "decode event"},
	} {
		var ev Event
		err := ev.UnmarshalJSON([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.in, err, tc.want)
		}
	}
}
