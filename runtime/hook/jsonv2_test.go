package hook

import (
	"bytes"
	"testing"
	"unicode/utf8"
)

// checkV2AgreesWithV1: whenever the v2 try accepts a line, encoding/json
// accepts it too and builds the same event.
func checkV2AgreesWithV1(t *testing.T, line []byte) (accepted bool) {
	t.Helper()
	if !utf8.Valid(line) {
		return false
	}
	v2, ok := v2DecodeLine(line)
	if !ok {
		return false
	}
	v1, _, err := v1DecodeLine(line)
	checkAgree(t, line, "v2", v2, "encoding/json", v1, err)
	return true
}

// The v2 try takes the lines it should (non-canonical spacing and order,
// kinds without a fast path, case-variant names) and leaves every line the
// seeds hold that encoding/json rejects.
func TestJSONv2AgreesWithEncodingJSON(t *testing.T) {
	taken := 0
	for _, seed := range jsonSeeds(t) {
		for _, line := range bytes.Split(seed, []byte("\n")) {
			if checkV2AgreesWithV1(t, bytes.TrimSuffix(line, []byte("\r"))) {
				taken++
			}
		}
	}
	if taken == 0 {
		t.Fatal("v2 took no seed line")
	}
	for _, line := range []string{
		`{ "kind":"replay", "v":1, "body":{"mode":"graph","step":3}, "ts_ns":7 }`,
		`{"v":1,"KIND":"replay","ts_ns":7,"body":{"MODE":"graph"}}`,
		`{"v":1,"kind":"gpu","ts_ns":7,"body":{"devices":[{"index":0,"mem_used":1,"mem_total":2,"util_gpu":3,"util_mem":4,"temp_c":5}]}}`,
		`{"v":1,"kind":"run.start","ts_ns":7,"body":{"tool":"t","config":{"engine":"remote","cuda_graph":false,"seed":3},"host":{}}}`,
		`{"v":1,"kind":"session","ts_ns":7,"body":{"id":"a","outcome":"error","error":"HTTP 503"}}`,
		`{"v":1,"kind":"room.checksum","ts_ns":7,"body":{"room":"0x10","side":"decode","seq_len":0,"pages":0,"bsum":"1","xxh3":null}}`,
	} {
		if !checkV2AgreesWithV1(t, []byte(line)) {
			t.Errorf("v2 did not take %s", line)
		}
	}
	for _, line := range []string{
		`{"v":1,"kind":"sched","ts_ns":1,"u":1,"U":2,"body":{}}`, // case-folded repeat of an unknown name
		`{"v":1,"kind":"replay","ts_ns":7,"body":{"mode":"warp"}}`,
		`{"v":1,"kind":"room.checksum","ts_ns":7,"body":{"room":12,"side":"decode"}}`,
	} {
		if _, ok := v2DecodeLine([]byte(line)); ok {
			v1, _, err := v1DecodeLine([]byte(line))
			t.Errorf("v2 took %s (encoding/json: %v, %v)", line, v1, err)
		}
	}
	// "tsns" is an unknown member to encoding/json (v2 alone would match it
	// to ts_ns): the event has no ts on either path.
	checkV2AgreesWithV1(t, []byte(`{"v":1,"kind":"replay","tsns":7,"body":{"mode":"graph"}}`))
	if ev, _, err := DecodeJSONLine([]byte(`{"v":1,"kind":"replay","tsns":7,"body":{"mode":"graph"}}`)); err != nil || ev.TS != 0 {
		t.Errorf("tsns: %+v %v, want ts 0", ev, err)
	}
}

func FuzzJSONv2(f *testing.F) {
	for _, s := range jsonSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, line := range bytes.Split(in, []byte("\n")) {
			checkV2AgreesWithV1(t, line)
		}
	})
}

func TestFoldedRepeatPossible(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{`{"kind":"replay","kind":"x"}`, false},
		{`{"kind":"replay","KIND":"x"}`, true},
		{`{"kind":"replay","k\u0069nd":"x"}`, true},
		{"{\"kind\":1,\"\u212aind\":2}", true},
		{`{"a":"HTTP"}`, true},
	} {
		if got := foldedRepeatPossible([]byte(tc.in)); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.in, got, tc.want)
		}
	}
}
