package hook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/testenv"
)

// conform makes a filled or zero body valid: enumerations get an allowed
// value, counts their absolute value, expected_owner the length of expected.
func conform(b Body) {
	abs := func(p *int) {
		if *p < 0 {
			*p = -*p
		}
	}
	abs64 := func(p *int64) {
		if *p < 0 {
			*p = -*p
		}
	}
	switch v := b.(type) {
	case *RunEnd:
		abs64(&v.WallNS)
		abs64(&v.Steps)
	case *RoomChecksum:
		v.Side = SideDecode
		abs(&v.SeqLen)
		abs(&v.Pages)
		abs(&v.Rank)
		if v.Stage != "" {
			v.Stage = StageAdmitted
		}
		// Keep the filled values (large varints) but make them ascending.
		prev := -1
		for i := range v.Layers {
			abs(&v.Layers[i])
			v.Layers[i] += prev + 1
			prev = v.Layers[i]
		}
		if len(v.LayerBsum) != len(v.Layers) {
			v.LayerBsum = make([]Hex64, len(v.Layers))
		}
		if n := len(v.PageBsum); n > 0 {
			v.SeqLen = 64*(n-1) + 1 + v.SeqLen%64
		}
	case *Replay:
		v.Mode = ModeGraph
		abs(&v.BatchSize)
		abs(&v.Bucket)
		abs64(&v.DurNS)
	case *CanaryPages:
		abs(&v.PagesTotal)
		abs(&v.PagesChecked)
		abs(&v.LivePages)
		abs(&v.LiveChecked)
		if len(v.ExpectedOwner) > 0 && len(v.ExpectedOwner) != len(v.Expected) {
			v.ExpectedOwner = make([]string, len(v.Expected))
		}
		if v.Phase != "" {
			v.Phase = PhaseBetween
		}
	case *GraphDiffSample:
		abs(&v.K)
		abs(&v.SeqLen)
		if v.Source != "" {
			v.Source = SourceIndexerTopK + "12"
		}
	case *Session:
		v.Outcome = OutcomeLeak
		abs(&v.Rounds)
		abs(&v.Round)
	case *Sched:
		abs(&v.RunningReq)
		abs(&v.QueueReq)
		abs(&v.Tokens)
		abs(&v.Retracted)
	case *Finding:
		v.Severity = SevWarn
	}
}

// validBody returns a valid body of kind k with every field set.
func validBody(t testing.TB, k Kind) Body {
	b, _ := NewBody(k)
	seed := 0
	fillNonZero(reflect.ValueOf(b).Elem(), &seed)
	conform(b)
	if err := validateBody(b); err != nil {
		t.Fatalf("conform left %s invalid: %v", k, err)
	}
	return b
}

// valueCase is one body value the event model forbids.
type valueCase struct {
	name   string
	kind   Kind
	break_ func(Body) // makes a valid body invalid
	want   string     // in the error
}

// valueCases lists every enforced constraint (validate.go) with a value that
// breaks it.
func valueCases() []valueCase {
	return []valueCase{
		{"session outcome", KindSession, func(b Body) { b.(*Session).Outcome = "lek" }, `session outcome "lek" is not one of done|maxrounds|leak|no_tool|error|timeout`},
		{"session outcome empty", KindSession, func(b Body) { b.(*Session).Outcome = "" }, `session outcome "" is not one of`},
		{"session outcome case", KindSession, func(b Body) { b.(*Session).Outcome = "DONE" }, `session outcome "DONE" is not one of`},
		{"session rounds", KindSession, func(b Body) { b.(*Session).Rounds = -1 }, "session rounds -1 is negative"},
		{"session round", KindSession, func(b Body) { b.(*Session).Round = -2 }, "session round -2 is negative"},
		{"session excerpt", KindSession, func(b Body) { b.(*Session).Excerpt = strings.Repeat("é", MaxExcerpt) }, "session excerpt is 4096 bytes, over the 2048-byte bound"},
		{"room side", KindRoomChecksum, func(b Body) { b.(*RoomChecksum).Side = "left" }, `room.checksum side "left" is not one of prefill|decode`},
		{"room side empty", KindRoomChecksum, func(b Body) { b.(*RoomChecksum).Side = "" }, `room.checksum side "" is not one of prefill|decode`},
		{"room seq_len", KindRoomChecksum, func(b Body) { b.(*RoomChecksum).SeqLen = -4096 }, "room.checksum seq_len -4096 is negative"},
		{"room pages", KindRoomChecksum, func(b Body) { b.(*RoomChecksum).Pages = -1 }, "room.checksum pages -1 is negative"},
		{"room rank", KindRoomChecksum, func(b Body) { b.(*RoomChecksum).Rank = -1 }, "room.checksum rank -1 is negative"},
		{"room stage", KindRoomChecksum, func(b Body) { b.(*RoomChecksum).Stage = "landed" }, `room.checksum stage "landed" is not one of ""|sent|transferred|admitted`},
		{"room stage case", KindRoomChecksum, func(b Body) { b.(*RoomChecksum).Stage = "Sent" }, `room.checksum stage "Sent" is not one of`},
		{"room layers negative", KindRoomChecksum, func(b Body) {
			rc := b.(*RoomChecksum)
			rc.Layers, rc.LayerBsum = []int{-1, 2}, []Hex64{1, 2}
		}, "room.checksum layers entry 0 is -1; layer ids are 0 or more"},
		{"room layers descending", KindRoomChecksum, func(b Body) {
			rc := b.(*RoomChecksum)
			rc.Layers, rc.LayerBsum = []int{0, 5, 3}, []Hex64{1, 2, 3}
		}, "room.checksum layers entry 2 is 3 after 5; layer ids must be strictly ascending"},
		{"room layers repeated", KindRoomChecksum, func(b Body) {
			rc := b.(*RoomChecksum)
			rc.Layers, rc.LayerBsum = []int{4, 4}, []Hex64{1, 2}
		}, "room.checksum layers entry 1 is 4 after 4"},
		{"room layer_bsum short", KindRoomChecksum, func(b Body) {
			rc := b.(*RoomChecksum)
			rc.Layers, rc.LayerBsum = []int{0, 1, 2}, []Hex64{1, 2}
		}, "room.checksum layer_bsum has 2 entries and layers 3; it is parallel to layers"},
		{"room layer_bsum without layers", KindRoomChecksum, func(b Body) {
			rc := b.(*RoomChecksum)
			rc.Layers, rc.LayerBsum = nil, []Hex64{1}
		}, "room.checksum layer_bsum has 1 entries and layers 0"},
		{"room layers without layer_bsum", KindRoomChecksum, func(b Body) {
			rc := b.(*RoomChecksum)
			rc.Layers, rc.LayerBsum = []int{7}, nil
		}, "room.checksum layer_bsum has 0 entries and layers 1"},
		{"room page_bsum length", KindRoomChecksum, func(b Body) {
			rc := b.(*RoomChecksum)
			rc.SeqLen, rc.PageBsum = 129, []Hex64{1, 2}
		}, "room.checksum page_bsum has 2 entries; seq_len 129 occupies 3 page-table entries (64 tokens each), one digest per entry"},
		{"room page_bsum empty room", KindRoomChecksum, func(b Body) {
			rc := b.(*RoomChecksum)
			rc.SeqLen, rc.PageBsum = 0, []Hex64{1}
		}, "room.checksum page_bsum has 1 entries; seq_len 0 occupies 0 page-table entries"},
		{"replay mode", KindReplay, func(b Body) { b.(*Replay).Mode = "cuda" }, `replay mode "cuda" is not one of graph|eager`},
		{"replay mode empty", KindReplay, func(b Body) { b.(*Replay).Mode = "" }, `replay mode "" is not one of graph|eager`},
		{"replay bs", KindReplay, func(b Body) { b.(*Replay).BatchSize = -2 }, "replay bs -2 is negative"},
		{"replay bucket", KindReplay, func(b Body) { b.(*Replay).Bucket = -8 }, "replay bucket -8 is negative"},
		{"replay dur_ns", KindReplay, func(b Body) { b.(*Replay).DurNS = -41000 }, "replay dur_ns -41000 is negative"},
		{"run.end wall_ns", KindRunEnd, func(b Body) { b.(*RunEnd).WallNS = -1 }, "run.end wall_ns -1 is negative"},
		{"run.end steps", KindRunEnd, func(b Body) { b.(*RunEnd).Steps = -3 }, "run.end steps -3 is negative"},
		{"canary pages_total", KindCanaryPages, func(b Body) { b.(*CanaryPages).PagesTotal = -1 }, "canary.pages pages_total -1 is negative"},
		{"canary pages_checked", KindCanaryPages, func(b Body) { b.(*CanaryPages).PagesChecked = -1 }, "canary.pages pages_checked -1 is negative"},
		{"canary live_pages", KindCanaryPages, func(b Body) { b.(*CanaryPages).LivePages = -1 }, "canary.pages live_pages -1 is negative"},
		{"canary live_checked", KindCanaryPages, func(b Body) { b.(*CanaryPages).LiveChecked = -1 }, "canary.pages live_checked -1 is negative"},
		{"canary expected_owner", KindCanaryPages, func(b Body) {
			cp := b.(*CanaryPages)
			cp.Expected, cp.ExpectedOwner = []uint32{1, 2, 3}, []string{"a", "b"}
		}, "canary.pages expected_owner has 2 entries and expected 3; it must be empty or parallel to expected"},
		{"canary phase", KindCanaryPages, func(b Body) { b.(*CanaryPages).Phase = "after" }, `canary.pages phase "after" is not one of ""|replay|between`},
		{"graphdiff source", KindGraphDiffSample, func(b Body) { b.(*GraphDiffSample).Source = "logits" }, `graphdiff.sample source "logits" is not one of ""|next_token_logits|indexer_topk.L (L a layer id)`},
		{"graphdiff source no layer", KindGraphDiffSample, func(b Body) { b.(*GraphDiffSample).Source = "indexer_topk." }, `graphdiff.sample source "indexer_topk." is not one of`},
		{"graphdiff source negative layer", KindGraphDiffSample, func(b Body) { b.(*GraphDiffSample).Source = "indexer_topk.-1" }, `graphdiff.sample source "indexer_topk.-1" is not one of`},
		{"graphdiff source leading zero", KindGraphDiffSample, func(b Body) { b.(*GraphDiffSample).Source = "indexer_topk.07" }, `graphdiff.sample source "indexer_topk.07" is not one of`},
		{"graphdiff source huge layer", KindGraphDiffSample, func(b Body) { b.(*GraphDiffSample).Source = "indexer_topk.9999999999" }, `graphdiff.sample source "indexer_topk.9999999999" is not one of`},
		{"graphdiff k", KindGraphDiffSample, func(b Body) { b.(*GraphDiffSample).K = -1 }, "graphdiff.sample k -1 is negative"},
		{"graphdiff seq_len", KindGraphDiffSample, func(b Body) { b.(*GraphDiffSample).SeqLen = -7 }, "graphdiff.sample seq_len -7 is negative"},
		{"sched running_req", KindSched, func(b Body) { b.(*Sched).RunningReq = -1 }, "sched running_req -1 is negative"},
		{"sched queue_req", KindSched, func(b Body) { b.(*Sched).QueueReq = -1 }, "sched queue_req -1 is negative"},
		{"sched tokens", KindSched, func(b Body) { b.(*Sched).Tokens = -1 }, "sched tokens -1 is negative"},
		{"sched retracted", KindSched, func(b Body) { b.(*Sched).Retracted = -1 }, "sched retracted -1 is negative"},
		{"finding severity", KindFinding, func(b Body) { b.(*Finding).Severity = "critical" }, `finding severity "critical" is not one of info|warn|error`},
		{"finding severity empty", KindFinding, func(b Body) { b.(*Finding).Severity = "" }, `finding severity "" is not one of info|warn|error`},
	}
}

func (c valueCase) event(t testing.TB) Event {
	b := validBody(t, c.kind)
	c.break_(b)
	return Event{Kind: c.kind, TS: 7, Src: Source{Proc: "p"}, Body: b}
}

// rawJSONLine writes ev's JSON line without validating it (the body struct
// marshalled directly), in the canonical member order the fast path takes.
func rawJSONLine(t testing.TB, ev Event) []byte {
	t.Helper()
	body, err := json.Marshal(ev.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Appendf(nil, `{"v":1,"kind":"%s","ts_ns":%d,"body":%s}`, ev.Kind, ev.TS, body)
}

func rawFrameOf(t testing.TB, ev Event, asJSON bool) []byte {
	t.Helper()
	b, err := appendFrameUnchecked(nil, ev, asJSON)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestValueConstraintsEveryPath runs every constraint through every path:
// Event.Validate, the encoders (AppendFrame, AppendFrameJSON, MarshalJSON),
// the frame decoder (binary and JSON bodies), the JSON-lines decoder (fast
// path gives up, slow path rejects), DecodeJSONLine and Event.UnmarshalJSON.
// Each rejection is bad_value, names the field and value, and leaves the
// decoder reading the next event.
func TestValueConstraintsEveryPath(t *testing.T) {
	goodFrame := mustFrame(t, replayEvent(1))
	goodLine := jsonLine(t, replayEvent(2))
	for _, c := range valueCases() {
		ev := c.event(t)
		if err := ev.Validate(); err == nil || err.Error() != c.want && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Validate = %v, want %q", c.name, err, c.want)
		}
		// Encoders refuse, leaving dst as it was.
		for name, enc := range map[string]func([]byte, Event) ([]byte, error){"AppendFrame": AppendFrame, "AppendFrameJSON": AppendFrameJSON} {
			out, err := enc([]byte("keep"), ev)
			if err == nil || !strings.Contains(err.Error(), c.want) || string(out) != "keep" {
				t.Errorf("%s: %s = %q, %v; want refusal %q", c.name, name, out, err, c.want)
			}
		}
		if b, err := json.Marshal(ev); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: MarshalJSON = %s, %v; want refusal", c.name, b, err)
		}

		// Frames, binary layout and JSON body.
		for _, asJSON := range []bool{false, true} {
			stream := append(append(append([]byte{}, goodFrame...), rawFrameOf(t, ev, asJSON)...), goodFrame...)
			d := NewFrameDecoder(bytes.NewReader(stream))
			if _, err := d.Decode(); err != nil {
				t.Fatalf("%s: first frame: %v", c.name, err)
			}
			_, err := d.Decode()
			var we *WireError
			if !errors.As(err, &we) || we.Reason != ReasonBadValue || we.Fatal || we.Offset != int64(len(goodFrame)) ||
				!strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "frame at byte ") {
				t.Errorf("%s (json body %v): frame error %v, want non-fatal bad_value %q at byte %d", c.name, asJSON, err, c.want, len(goodFrame))
			}
			if ev, err := d.Decode(); err != nil || ev.Body.(*Replay).Step != 1 {
				t.Errorf("%s (json body %v): after the rejected frame: %v, %v", c.name, asJSON, ev, err)
			}
			if _, _, err := DecodeFrame(rawFrameOf(t, ev, asJSON)); ReasonOf(err) != ReasonBadValue {
				t.Errorf("%s: DecodeFrame: %v", c.name, err)
			}
		}

		// JSON lines.
		line := rawJSONLine(t, ev)
		if _, ok := fastLine(line); ok {
			t.Errorf("%s: fast path accepted %s", c.name, line)
		}
		if _, r, err := DecodeJSONLine(line); r != ReasonBadValue || err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: DecodeJSONLine = %s, %v; want bad_value %q", c.name, r, err, c.want)
		}
		var got Event
		if err := json.Unmarshal(line, &got); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Event.UnmarshalJSON = %v, want %q", c.name, err, c.want)
		}
		d := NewJSONLinesDecoder(io.MultiReader(bytes.NewReader(goodLine), bytes.NewReader(line), strings.NewReader("\n"), bytes.NewReader(goodLine)))
		if _, err := d.Decode(); err != nil {
			t.Fatalf("%s: first line: %v", c.name, err)
		}
		_, err := d.Decode()
		var we *WireError
		if !errors.As(err, &we) || we.Reason != ReasonBadValue || we.Fatal || we.Line != 2 || !strings.HasPrefix(err.Error(), "line 2 (byte ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: line error %v, want line 2 bad_value %q", c.name, err, c.want)
		}
		if ev, err := d.Decode(); err != nil || ev.Body.(*Replay).Step != 2 {
			t.Errorf("%s: after the rejected line: %v, %v", c.name, ev, err)
		}
	}
}

// TestValueConstraintsFastPathStillFast checks the valid neighbours of the
// rejected lines still take the fast path: validation gives up only on
// invalid values.
func TestValueConstraintsFastPathStillFast(t *testing.T) {
	for _, c := range valueCases() {
		if !fastBody[c.kind] {
			continue
		}
		ev := Event{Kind: c.kind, TS: 7, Body: validBody(t, c.kind)}
		if _, ok := fastLine(rawJSONLine(t, ev)); !ok {
			t.Errorf("%s: fast path gave up on a valid %s", c.name, rawJSONLine(t, ev))
		}
	}
}

// TestValidateAcceptsEveryAllowedValue: every enumerated value and zero
// counts pass, and the exported Outcomes agree with the validator.
func TestValidateAcceptsEveryAllowedValue(t *testing.T) {
	var bodies []Body
	for _, o := range Outcomes {
		bodies = append(bodies, &Session{Outcome: o})
	}
	for _, s := range []Side{SidePrefill, SideDecode} {
		bodies = append(bodies, &RoomChecksum{Side: s})
	}
	for _, st := range []string{"", StageSent, StageTransferred, StageAdmitted} {
		bodies = append(bodies, &RoomChecksum{Side: SideDecode, Stage: st, Rank: 7})
	}
	bodies = append(bodies,
		&RoomChecksum{Side: SidePrefill, SeqLen: 129, Layers: []int{0, 3, 60}, LayerBsum: []Hex64{1, 2, 3}, PageBsum: []Hex64{4, 5, 6}},
		&RoomChecksum{Side: SidePrefill, SeqLen: 64, PageBsum: []Hex64{4}},
		&RoomChecksum{Side: SidePrefill, SeqLen: 0, Layers: []int{0}, LayerBsum: []Hex64{0}},
		// page_xxh3 keeps v1's rule: not checked against seq_len or pages.
		&RoomChecksum{Side: SidePrefill, SeqLen: 64, Pages: 9, PageSum: []Hex64{1, 2, 3}})
	for _, ph := range []string{"", PhaseReplay, PhaseBetween} {
		bodies = append(bodies, &CanaryPages{Phase: ph})
	}
	for _, src := range []string{"", SourceNextTokenLogits, "indexer_topk.0", "indexer_topk.60", "indexer_topk.2147483647"} {
		bodies = append(bodies, &GraphDiffSample{Source: src, TopKGraph: []int32{1}, TopKEager: []int32{2}})
	}
	for _, m := range []string{ModeGraph, ModeEager} {
		bodies = append(bodies, &Replay{Mode: m})
	}
	for _, s := range []Severity{SevInfo, SevWarn, SevError} {
		bodies = append(bodies, &Finding{Severity: s})
	}
	bodies = append(bodies, &RunEnd{}, &CanaryPages{}, &CanaryPages{Expected: []uint32{1}}, &GraphDiffSample{}, &Sched{},
		&RunStart{}, &GPU{}, &CUDA{StartNS: -5, EndNS: -9, Ret: -1}, &GraphDiffSample{TopKGraph: []int32{-1}, Graph: Float32s{1}, Eager: Float32s{1, 2}})
	for _, b := range bodies {
		ev := Event{Kind: b.Kind(), Body: b}
		if err := ev.Validate(); err != nil {
			t.Errorf("%s %+v: %v", b.Kind(), b, err)
			continue
		}
		line, err := json.Marshal(ev)
		if err != nil {
			t.Errorf("%s: marshal: %v", b.Kind(), err)
			continue
		}
		if _, _, err := DecodeJSONLine(line); err != nil {
			t.Errorf("%s: %s does not decode: %v", b.Kind(), line, err)
		}
	}
	if len(Outcomes) != 6 {
		t.Errorf("Outcomes = %v: the contract has six classes; update validOutcome with it", Outcomes)
	}
}

func TestValidateStructure(t *testing.T) {
	for _, tc := range []struct {
		ev   Event
		want string
	}{
		{Event{Kind: 0, Body: &Sched{}}, "invalid kind 0"},
		{Event{Kind: KindSched}, "sched event has no body"},
		{Event{Kind: KindSched, Body: (*Sched)(nil)}, "sched event has no body"},
		{Event{Kind: KindSched, Body: &RunEnd{}}, "kind sched with a run.end body"},
	} {
		if err := tc.ev.Validate(); err == nil || err.Error() != tc.want {
			t.Errorf("%+v: %v, want %q", tc.ev, err, tc.want)
		}
	}
}

// TestU64FieldsRefuseJSONNumbers: room, digests and the other 64-bit ids
// must be strings; a JSON number is bad_value naming the field, on the fast
// and slow paths, in frames with JSON bodies and in Event.UnmarshalJSON.
func TestU64FieldsRefuseJSONNumbers(t *testing.T) {
	for _, tc := range []struct {
		kind Kind
		body string
		want string
	}{
		{KindRoomChecksum, `{"room":12,"side":"decode","seq_len":4,"pages":1,"bsum":"0x1","xxh3":"0x2"}`, "room is the JSON number 12; 64-bit identifiers and digests must be a decimal string"},
		{KindRoomChecksum, `{"room":9007199254740993,"side":"decode"}`, "room is the JSON number 9007199254740993"},
		{KindRoomChecksum, `{"room":"1","side":"decode","bsum":3735928559}`, "bsum is the JSON number 3735928559; 64-bit identifiers and digests must be a 0x-hex string"},
		{KindRoomChecksum, `{"room":"1","side":"decode","xxh3":-1}`, "xxh3 is the JSON number -1"},
		{KindRoomChecksum, `{"room":"1","side":"decode","page_xxh3":["0x1",2]}`, "page_xxh3 is the JSON number 2"},
		{KindCUDA, `{"call":"cuGraphLaunch","stream":140000000000000}`, "stream is the JSON number 140000000000000"},
		{KindCanaryPages, `{"changed":[{"page":1,"before":"0x1","after":5}]}`, "changed.after is the JSON number 5"},
	} {
		line := fmt.Appendf(nil, `{"v":1,"kind":"%s","ts_ns":1,"body":%s}`, tc.kind, tc.body)
		checkLineRefused(t, line, ReasonBadValue, tc.want, func(line []byte) error {
			var ev Event
			return ev.UnmarshalJSON(line)
		})
		frame := rawFrame(append([]byte{1, byte(tc.kind), FlagJSON, 0, 0, 0, 0, 0, 0, 0, 0}, tc.body...)...)
		if _, _, err := DecodeFrame(frame); ReasonOf(err) != ReasonBadValue || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("frame with JSON body %s: %v", tc.body, err)
		}
	}
	// Strings keep every bit, in decimal or hex; null is 0.
	line := []byte(`{"v":1,"kind":"room.checksum","ts_ns":1,"body":{"room":"18446744073709551615","side":"prefill","bsum":"0xffffffffffffffff","xxh3":"12","page_xxh3":null}}`)
	ev, _, err := DecodeJSONLine(line)
	if err != nil {
		t.Fatal(err)
	}
	if rc := ev.Body.(*RoomChecksum); rc.Room != 1<<64-1 || rc.Bsum != 1<<64-1 || rc.XXH3 != 12 {
		t.Errorf("got %+v", rc)
	}
}

// checkLineRefused checks that the fast path leaves line, DecodeJSONLine
// refuses it for reason with an error holding want, and unmarshal refuses
// it with the same words.
func checkLineRefused(t *testing.T, line []byte, reason Reason, want string, unmarshal func([]byte) error) {
	t.Helper()
	if _, ok := fastLine(line); ok {
		t.Errorf("fast path accepted %s", line)
	}
	_, r, err := DecodeJSONLine(line)
	if r != reason || err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: %s, %v; want %s %q", line, r, err, reason, want)
	}
	if err := unmarshal(line); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("UnmarshalJSON %s: %v", line, err)
	}
}

// TestDuplicateKeysRejected: a repeated member name is bad_json on every
// path, compared as encoding/json matches names (case-insensitive, after
// unescaping) except inside the evidence and extra maps.
func TestDuplicateKeysRejected(t *testing.T) {
	const room = `"room":"1","side":"decode","seq_len":4,"pages":1,"bsum":"0x1","xxh3":"0x2"`
	for _, tc := range []struct{ line, want string }{
		{`{"v":1,"kind":"replay","ts_ns":1,"kind":"sched","body":{"mode":"graph"}}`, `duplicate key "kind" at column 34`},
		{`{"v":1,"kind":"replay","ts_ns":1,"body":{"mode":"graph"},"kind":"replay"}`, `duplicate key "kind"`},
		{`{"v":2,"v":1,"kind":"replay","ts_ns":1,"body":{"mode":"graph"}}`, `duplicate key "v"`},
		{`{"v":1,"kind":"replay","ts_ns":1,"ts_ns":2,"body":{"mode":"graph"}}`, `duplicate key "ts_ns"`},
		{`{"v":1,"kind":"replay","ts_ns":1,"body":{"mode":"graph"},"body":{"mode":"eager"}}`, `duplicate key "body"`},
		{`{"v":1,"kind":"replay","ts_ns":1,"src":{"pid":1},"src":{"node":"n"},"body":{"mode":"graph"}}`, `duplicate key "src"`},
		{`{"v":1,"kind":"replay","ts_ns":1,"src":{"pid":1,"pid":2},"body":{"mode":"graph"}}`, `duplicate key "pid"`},
		{`{"v":1,"kind":"replay","ts_ns":1,"run":"a","run":"b","body":{"mode":"graph"}}`, `duplicate key "run"`},
		{`{"v":1,"kind":"room.checksum","ts_ns":1,"body":{` + room + `,"room":"2"}}`, `duplicate key "room"`},
		{`{"v":1,"kind":"room.checksum","ts_ns":1,"body":{` + room + `,"side":"prefill"}}`, `duplicate key "side"`},
		{`{"v":1,"kind":"session","ts_ns":1,"body":{"id":"a","outcome":"done","id":"b"}}`, `duplicate key "id"`},
		{`{"v":1,"kind":"session","ts_ns":1,"body":{"id":"a","outcome":"leak","outcome":"done"}}`, `duplicate key "outcome"`},
		{`{"v":1,"kind":"replay","ts_ns":1,"body":{"mode":"graph","step":1,"step":2}}`, `duplicate key "step"`},
		{`{"v":1,"kind":"replay","ts_ns":1,"Kind":"sched","body":{"mode":"graph"}}`, `duplicate key "Kind"`},
		{`{"v":1,"kind":"replay","ts_ns":1,"k\u0069nd":"sched","body":{"mode":"graph"}}`, `duplicate key "kind"`},
		{`{"v":1,"kind":"replay","ts_ns":1,"body":{"mode":"graph","MODE":"eager"}}`, `duplicate key "MODE"`},
		{`{"v":1,"kind":"gpu","ts_ns":1,"body":{"devices":[{"index":0,"mem_used":1,"index":1}]}}`, `duplicate key "index"`},
		{`{"v":1,"kind":"finding","ts_ns":1,"body":{"severity":"info","evidence":{"a":"1","a":"2"}}}`, `duplicate key "a"`},
		{`{"v":1,"kind":"run.start","ts_ns":1,"body":{"config":{"extra":{"x":"1","x":"2"}}}}`, `duplicate key "x"`},
		{`{"v":1,"kind":"sched","ts_ns":1,"unknown":1,"unknown":2,"body":{}}`, `duplicate key "unknown"`},
	} {
		line := []byte(tc.line)
		if !json.Valid(line) {
			t.Fatalf("test line is not JSON: %s", line)
		}
		checkLineRefused(t, line, ReasonBadJSON, tc.want, func(line []byte) error {
			var ev Event
			return json.Unmarshal(line, &ev)
		})
		// The last line of a stream, without its newline, is complete: a
		// repeated name there is bad_json, not truncated.
		d := NewJSONLinesDecoder(bytes.NewReader(line))
		if _, err := d.Decode(); ReasonOf(err) != ReasonBadJSON {
			t.Errorf("unterminated %s: %v, want bad_json", line, err)
		}
	}
	// Frames with a JSON body.
	frame := rawFrame(append([]byte{1, byte(KindSession), FlagJSON, 0, 0, 0, 0, 0, 0, 0, 0}, `{"id":"a","outcome":"done","id":"b"}`...)...)
	if _, _, err := DecodeFrame(frame); ReasonOf(err) != ReasonBadJSON || !strings.Contains(err.Error(), `duplicate key "id" at byte 27 of the body`) {
		t.Errorf("frame: %v", err)
	}
	// Not duplicates: keys of different objects, array elements with the
	// same members, map keys that differ only in case.
	for _, line := range []string{
		`{"v":1,"kind":"cuda","ts_ns":1,"src":{"pid":1},"body":{"call":"x","pid":2}}`,
		`{"v":1,"kind":"gpu","ts_ns":1,"body":{"devices":[{"index":0,"procs":[{"pid":1},{"pid":2}]},{"index":1}]}}`,
		`{"v":1,"kind":"finding","ts_ns":1,"body":{"severity":"info","evidence":{"a":"1","A":"2","kind":"x"}}}`,
		`{"v":1,"kind":"run.start","ts_ns":1,"body":{"config":{"extra":{"x":"1","X":"2"},"seed":1},"host":{"gpus":[{"index":0,"name":"a"}]}}}`,
		`{"v":1,"kind":"session","ts_ns":1,"body":{"id":"a\"id\":","outcome":"done","requests":["id","id"]}}`,
	} {
		if _, _, err := DecodeJSONLine([]byte(line)); err != nil {
			t.Errorf("%s: %v", line, err)
		}
	}
	// Map keys really differ: both evidence entries survive.
	ev, _, _ := DecodeJSONLine([]byte(`{"v":1,"kind":"finding","ts_ns":1,"body":{"severity":"info","evidence":{"a":"1","A":"2"}}}`))
	if f, ok := ev.Body.(*Finding); !ok || len(f.Evidence) != 2 {
		t.Errorf("evidence %+v", ev.Body)
	}
}

// TestJSONLinesOlderProducerLinesSkippedNotFatal is what a bundle written
// by an older kvcanary, or a producer that predates validation, looks like
// to the decoder traces' Reader uses: lines now refused (outcome outside the
// contract, room as a number, a negative count, a repeated name) are each
// reported with their line number and skipped, and every other event is
// still returned, in order.
func TestJSONLinesOlderProducerLinesSkippedNotFatal(t *testing.T) {
	lines := []string{
		`{"v":1,"kind":"replay","ts_ns":1,"body":{"step":1,"bs":4,"bucket":4,"mode":"graph","dur_ns":10}}`,
		`{"v":1,"kind":"session","ts_ns":2,"body":{"id":"s1","outcome":"lek","rounds":3}}`,
		`{"v":1,"kind":"session","ts_ns":3,"body":{"id":"s2","outcome":"done","rounds":3}}`,
		`{"v":1,"kind":"room.checksum","ts_ns":4,"body":{"room":7,"side":"decode","seq_len":4,"pages":1,"bsum":"0x1","xxh3":"0x2"}}`,
		`{"v":1,"kind":"room.checksum","ts_ns":5,"body":{"room":"7","side":"decode","seq_len":-4,"pages":1,"bsum":"0x1","xxh3":"0x2"}}`,
		`{"v":1,"kind":"room.checksum","ts_ns":6,"body":{"room":"7","side":"prefill","seq_len":4,"pages":1,"bsum":"0x1","xxh3":"0x2"}}`,
		`{"v":1,"kind":"replay","ts_ns":7,"kind":"sched","body":{"mode":"graph"}}`,
		`{"v":1,"kind":"replay","ts_ns":8,"body":{"step":2,"mode":"eager"}}`,
		`{"v":1,"kind":"finding","ts_ns":9,"body":{"analyzer":"x","severity":"fatal","summary":"s"}}`,
		`{"v":1,"kind":"sched","ts_ns":10,"body":{"running_req":1}}`,
	}
	wantBad := map[int]Reason{2: ReasonBadValue, 4: ReasonBadValue, 5: ReasonBadValue, 7: ReasonBadJSON, 9: ReasonBadValue}
	d := NewJSONLinesDecoder(strings.NewReader(strings.Join(lines, "\n") + "\n"))
	var got []int64
	gotBad := map[int]Reason{}
	for {
		ev, err := d.Decode()
		if err == io.EOF {
			break
		}
		if err != nil {
			var we *WireError
			if !errors.As(err, &we) || we.Fatal {
				t.Fatalf("line %d: %v: want a non-fatal *WireError", d.Line(), err)
			}
			if !strings.HasPrefix(err.Error(), fmt.Sprintf("line %d (byte ", we.Line)) {
				t.Errorf("error %q does not name its line", err)
			}
			gotBad[we.Line] = we.Reason
			continue
		}
		got = append(got, ev.TS)
	}
	if fmt.Sprint(got) != "[1 3 6 8 10]" {
		t.Errorf("events %v, want [1 3 6 8 10]", got)
	}
	if fmt.Sprint(gotBad) != fmt.Sprint(wantBad) {
		t.Errorf("rejected lines %v, want %v", gotBad, wantBad)
	}
}

// TestCollectorCountsBadValuesAndKeepsServing sends every invalid value,
// a room number and a repeated name on one JSON-lines and one frames
// connection between good events: each is counted by reason, both
// connections stay up (closed by their EOF, not lost framing), and every
// good event is published.
func TestCollectorCountsBadValuesAndKeepsServing(t *testing.T) {
	c, rec := startCollector(t, ListenOptions{})
	var lines, frames []byte
	frames = append(frames, FramePreamble...)
	good := 0
	addGood := func() {
		good++
		lines = append(lines, jsonLine(t, replayEvent(uint64(good)))...)
		frames = append(frames, mustFrame(t, replayEvent(uint64(good)))...)
	}
	addGood()
	cases := valueCases()
	for i, vc := range cases {
		ev := vc.event(t)
		lines = append(append(lines, rawJSONLine(t, ev)...), '\n')
		frames = append(frames, rawFrameOf(t, ev, i%2 == 1)...)
		addGood()
	}
	lines = append(lines, `{"v":1,"kind":"room.checksum","ts_ns":1,"body":{"room":5,"side":"decode"}}`+"\n"...)
	lines = append(lines, `{"v":1,"kind":"replay","ts_ns":1,"kind":"sched","body":{"mode":"graph"}}`+"\n"...)
	frames = append(frames, rawFrame(append([]byte{1, byte(KindSession), FlagJSON, 0, 0, 0, 0, 0, 0, 0, 0}, `{"outcome":"done","outcome":"lek"}`...)...)...)
	addGood()
	for _, stream := range [][]byte{lines, frames} {
		nc := dialRaw(t, c)
		if _, err := nc.Write(stream); err != nil {
			t.Fatal(err)
		}
		nc.(interface{ CloseWrite() error }).CloseWrite()
	}
	testenv.WaitFor(t, "both connections to end", func() bool {
		st := c.Stats()
		return st.Connections == 2 && st.Open == 0
	})
	st := c.Stats()
	n := uint64(len(cases))
	want := map[string]uint64{"bad_value": 2*n + 1, "bad_json": 2}
	if fmt.Sprint(st.RejectedBy) != fmt.Sprint(want) || st.Rejected != 2*n+3 {
		t.Errorf("rejected %d by %v, want %v", st.Rejected, st.RejectedBy, want)
	}
	if st.Events != uint64(2*good) || len(rec.events()) != 2*good || st.LostFraming != 0 {
		t.Errorf("events %d (published %d), lost framing %d; want %d and 0", st.Events, len(rec.events()), st.LostFraming, 2*good)
	}
	for _, cs := range st.Conns {
		if cs.Closed != "eof" || cs.Events != uint64(good) {
			t.Errorf("conn %+v: want closed by eof after %d events", cs, good)
		}
		if !strings.Contains(cs.LastError, "byte ") {
			t.Errorf("conn %d: last error %q does not name a position", cs.ID, cs.LastError)
		}
	}
	for _, ev := range rec.events() {
		if err := ev.Validate(); err != nil {
			t.Errorf("published an invalid event: %v", err)
		}
	}
}

// TestEmitterRefusesBadValues: the emitter counts an event a collector
// would reject as Invalid, sends none of it, and keeps the queue intact.
func TestEmitterRefusesBadValues(t *testing.T) {
	c, rec := startCollector(t, ListenOptions{})
	em, err := Dial(c.Addr(), DialOptions{FlushTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cases := valueCases()
	for i, vc := range cases {
		em.Emit(replayEvent(uint64(i)))
		em.Emit(vc.event(t))
	}
	em.Emit(replayEvent(uint64(len(cases))))
	em.Close()
	st := em.Stats()
	if st.Invalid != uint64(len(cases)) || st.Sent != uint64(len(cases)+1) || st.Dropped != 0 {
		t.Fatalf("emitter stats %+v, want %d invalid and %d sent", st, len(cases), len(cases)+1)
	}
	if want := cases[len(cases)-1].want; !strings.Contains(em.LastError(), want) {
		t.Errorf("last error %q, want %q", em.LastError(), want)
	}
	testenv.WaitFor(t, "events", func() bool { return len(rec.events()) == len(cases)+1 })
	for i, ev := range rec.events() {
		if r, ok := ev.Body.(*Replay); !ok || r.Step != uint64(i) {
			t.Fatalf("event %d: %+v", i, ev.Body)
		}
	}
	if st := c.Stats(); st.Rejected != 0 {
		t.Errorf("collector rejected %d: the emitter sent an invalid event", st.Rejected)
	}
}

// TestDuplicateKeysManyMembers: objects past the linear search switch to a
// map; duplicates are still found (exactly, and ignoring case outside the
// maps), and distinct names are not reported.
func TestDuplicateKeysManyMembers(t *testing.T) {
	obj := func(n int, extra string) []byte {
		var b bytes.Buffer
		b.WriteString(`{"v":1,"kind":"finding","ts_ns":1,"body":{"severity":"info","evidence":{`)
		for i := range n {
			fmt.Fprintf(&b, `"k%d":"v",`, i)
		}
		fmt.Fprintf(&b, `"K0":"v"%s}},"unknown":{`, extra)
		for i := range n {
			fmt.Fprintf(&b, `"u%d":1,`, i)
		}
		b.WriteString(`"end":1}}`)
		return b.Bytes()
	}
	if _, _, err := DecodeJSONLine(obj(50000, "")); err != nil {
		t.Fatalf("50000 distinct names: %v", err)
	}
	if _, r, err := DecodeJSONLine(obj(50000, `,"k49999":"w"`)); r != ReasonBadJSON || !strings.Contains(fmt.Sprint(err), `duplicate key "k49999"`) {
		t.Errorf("exact repeat in a big map: %s %v", r, err)
	}
	line := bytes.Replace(obj(100, ""), []byte(`"end":1`), []byte(`"end":1,"U99":2`), 1)
	if _, r, err := DecodeJSONLine(line); r != ReasonBadJSON || !strings.Contains(fmt.Sprint(err), `duplicate key "U99"`) {
		t.Errorf("case-folded repeat in a big object: %s %v", r, err)
	}
}

// TestCanonicalNameIsEqualFold: the map key of a big object treats names as
// equal exactly when bytes.EqualFold (how encoding/json matches) does.
func TestCanonicalNameIsEqualFold(t *testing.T) {
	names := []string{"kind", "KIND", "Kind", "\u212aind", "s", "S", "\u017f", "ß", "ẞ", "ss", "σ", "Σ", "ς", "é", "É", "e", "kin", "kinds", `k\u0069nd`}
	for _, a := range names {
		for _, b := range names {
			line := []byte(`"` + a + `""` + b + `"`)
			ka := keySpan{1, 1 + len(a), strings.Contains(a, `\`)}
			kb := keySpan{len(a) + 3, len(a) + 3 + len(b), strings.Contains(b, `\`)}
			want := bytes.EqualFold(unquoteKey(line, ka), unquoteKey(line, kb))
			if got := canonicalName(line, ka, false) == canonicalName(line, kb, false); got != want || sameName(line, ka, kb, false) != want {
				t.Errorf("%q vs %q: canonical equal %v, sameName %v, EqualFold %v", a, b, got, sameName(line, ka, kb, false), want)
			}
		}
	}
}

// The maps of the model are found by reflection, so a map field added to a
// body is treated as a map (case-variant keys are distinct) without a list to
// keep; struct-valued members stay case-insensitive.
func TestMapFieldsFoundByReflection(t *testing.T) {
	for _, name := range []string{"evidence", "extra", "Evidence"} {
		if !isMapField([]byte(name)) {
			t.Errorf("%q not taken for a map field (found %v)", name, mapFields)
		}
	}
	for _, name := range []string{"config", "src", "body", "host", "kind"} {
		if isMapField([]byte(name)) {
			t.Errorf("%q taken for a map field", name)
		}
	}
}
