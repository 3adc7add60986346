package hook

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"testing"
)

// referenceJSON is the JSON-lines form as encoding/json writes it through
// the envelope struct: what Event.MarshalJSON produced before AppendJSON.
func referenceJSON(t *testing.T, e Event) []byte {
	t.Helper()
	body, err := json.Marshal(e.Body)
	if err != nil {
		t.Fatal(err)
	}
	env := envelope{V: Version, Kind: e.Kind.String(), TS: e.TS, Run: e.Run, Body: body}
	if e.Src != (Source{}) {
		src := e.Src
		env.Src = &src
	}
	b, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestAppendJSONMatchesEncodingJSON(t *testing.T) {
	evs := append(goldenEvents(), v11Events()...)
	evs = append(evs,
		Event{Kind: KindSession, TS: -5, Src: Source{Proc: "p\x01\"<"}, Run: "run\u2028x\xff", Body: &Session{ID: "x&y", Outcome: OutcomeDone}},
		Event{Kind: KindReplay, TS: math.MinInt64, Src: Source{PID: -3}, Body: &Replay{Mode: ModeEager}},
		Event{Kind: KindReplay, TS: math.MaxInt64, Src: Source{Node: "n", PID: 7}, Run: "r", Body: &Replay{Mode: ModeGraph}},
	)
	for _, ev := range evs {
		want := referenceJSON(t, ev)
		got, err := AppendJSON([]byte("prefix"), ev)
		if err != nil {
			t.Fatalf("%s: %v", ev.Kind, err)
		}
		if !bytes.Equal(got, append([]byte("prefix"), want...)) {
			t.Errorf("%s:\nencoding/json %s\nAppendJSON    %s", ev.Kind, want, got[len("prefix"):])
		}
		k, ts, ok := PeekCanonicalJSONLine(got[len("prefix"):])
		if !ok || k != ev.Kind || ts != ev.TS {
			t.Errorf("peek %s: kind %v ts %d ok %v, want %v %d", got, k, ts, ok, ev.Kind, ev.TS)
		}
	}
	for _, bad := range []Event{{Kind: KindReplay}, {Kind: KindReplay, Body: &Session{}}, {Kind: KindReplay, Body: &Replay{Mode: "warp"}}} {
		got, err := AppendJSON([]byte("keep"), bad)
		if err == nil || string(got) != "keep" {
			t.Errorf("%+v: got %q, %v; want an error and dst unchanged", bad, got, err)
		}
	}
}

func TestPeekJSONLine(t *testing.T) {
	for _, tc := range []struct {
		line string
		kind Kind
		ts   int64
		err  string
	}{
		{`{"v":1,"kind":"sched","ts_ns":12,"body":{}}`, KindSched, 12, ""},
		{`{"ts_ns":-4,"body":{},"kind":"cuda","v":1}`, KindCUDA, -4, ""},
		{` {"v":1, "kind":"replay"}`, KindReplay, 0, ""},
		{`{"v":2,"kind":"replay","ts_ns":1}`, 0, 0, "unsupported event version 2 (this build reads version 1)"},
		{`{"kind":"replay","ts_ns":1}`, 0, 0, "unsupported event version none (this build reads version 1)"},
		{`{"v":1,"kind":"warp","ts_ns":1}`, 0, 0, `unknown event kind "warp"`},
		{`{"v":1,"kind":"replay","ts_ns":1.5}`, 0, 0, "bad event line: json: cannot unmarshal number 1.5 into Go struct field .ts_ns of type int64"},
	} {
		k, ts, err := PeekJSONLine([]byte(tc.line))
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%s: got %v, want %q", tc.line, err, tc.err)
			}
			continue
		}
		if err != nil || k != tc.kind || ts != tc.ts {
			t.Errorf("%s: got %v %d %v, want %v %d", tc.line, k, ts, err, tc.kind, tc.ts)
		}
	}
	for _, ts := range []int64{0, 1, -1, math.MaxInt64, math.MinInt64} {
		line := `{"v":1,"kind":"replay","ts_ns":` + strconv.FormatInt(ts, 10) + `}`
		if k, got, ok := PeekCanonicalJSONLine([]byte(line)); !ok || k != KindReplay || got != ts {
			t.Errorf("%s: %v %d %v", line, k, got, ok)
		}
	}
	for _, bad := range []string{
		`{"v":1,"kind":"replay","ts_ns":9223372036854775808,"body":{}}`,
		`{"v":1,"kind":"replay","ts_ns":-9223372036854775809,"body":{}}`,
		`{"v":1,"kind":"replay","ts_ns":12`,
		`{"v":1,"kind":"replay","ts_ns":-,"body":{}}`,
		`{"v":1, "kind":"replay","ts_ns":1}`,
	} {
		if _, _, ok := PeekCanonicalJSONLine([]byte(bad)); ok {
			t.Errorf("%s: taken as canonical", bad)
		}
	}
}

func BenchmarkAppendJSON(b *testing.B) {
	evs := smallEvents(1024)
	for i := range evs {
		evs[i].Src = Source{Node: "gpu-7", Proc: "sglang-decode", PID: 4242}
		evs[i].Run = "r1"
	}
	buf := make([]byte, 0, 1<<12)
	benchEach(b, func(i int) error {
		var err error
		buf, err = AppendJSON(buf[:0], evs[i%len(evs)])
		return err
	})
}
