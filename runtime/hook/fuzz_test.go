package hook

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"
)

// frameSeeds are streams for FuzzFrameDecoder: every kind, a mixed stream,
// and the malformed frames of TestFrameDecoderBadInput.
func frameSeeds(t testing.TB) [][]byte {
	var seeds [][]byte
	var all []byte
	for _, ev := range codecCases(t) {
		b, err := AppendFrame(nil, ev)
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, b)
		all = append(all, b...)
		if j, err := AppendFrameJSON(nil, ev); err == nil {
			seeds = append(seeds, j)
		}
	}
	seeds = append(seeds, all)
	good := mustFrame(t, replayEvent(1))
	seeds = append(seeds,
		binary.LittleEndian.AppendUint32(nil, 1<<30),
		append(append([]byte{}, good...), good[:7]...),
		rawFrame(1, 77, 0, 0, 0, 0, 0, 0, 0, 0, 0),
		rawFrame(1, byte(KindSched), FlagJSON, 0, 0, 0, 0, 0, 0, 0, 0, '{', '"', 't', 'o', 'k', 'e', 'n', '_', 'u', 's', 'a', 'g', 'e', '"', ':', 'N', 'a', 'N', '}'),
		rawFrame(1, byte(KindSession), 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0xc3, 0x28),
	)
	// Values the event model forbids, in binary and JSON bodies; a room
	// as a JSON number; a repeated name in a JSON body.
	for i, c := range valueCases() {
		seeds = append(seeds, append(append(rawFrameOf(t, c.event(t), i%2 == 1), good...), rawFrameOf(t, c.event(t), i%2 == 0)...))
	}
	jsonBody := func(k Kind, body string) []byte {
		return rawFrame(append([]byte{1, byte(k), FlagJSON, 0, 0, 0, 0, 0, 0, 0, 0}, body...)...)
	}
	seeds = append(seeds,
		jsonBody(KindRoomChecksum, `{"room":12,"side":"decode"}`),
		jsonBody(KindSession, `{"id":"a","outcome":"done","id":"b"}`),
		jsonBody(KindFinding, `{"severity":"info","evidence":{"a":"1","A":"2"}}`),
	)
	return seeds
}

func jsonSeeds(t testing.TB) [][]byte {
	var seeds [][]byte
	var all []byte
	for _, ev := range codecCases(t) {
		l := jsonLine(t, ev)
		seeds = append(seeds, l)
		all = append(all, l...)
	}
	seeds = append(seeds, all,
		[]byte(`{"v":1,"kind":"sched","ts_ns":5,"body":{"token_usage":NaN}}`+"\n"),
		[]byte(`{"v":1,"kind":"replay","ts_ns":5,"body":{"step":9`),
		[]byte("{\"v\":1,\"kind\":\"session\",\"ts_ns\":5,\"body\":{\"id\":\"\xff\"}}\n"),
		[]byte(`{"V":1,"KIND":"replay","ts_ns":5,"body":{"Step":9,"bs":1.0}}`+"\n"),
		[]byte(`{"v":1,"kind":"room.checksum","body":{"room":18446744073709551615,"bsum":"0X1f","page_xxh3":[]},"src":{"pid":1},"src":{"node":"n"}}`+"\r\n\n  \n"),
		[]byte(`{"v":1,"kind":"replay","body":{"step":1},"kind":"sched"}`+"\n"),
		[]byte(`{"v":1,"kind":"room.checksum","ts_ns":1,"body":{"room":12,"side":"decode","bsum":3735928559}}`+"\n"),
		[]byte(`{"v":1,"kind":"replay","ts_ns":1,"k\u0069nd":"sched","Kind":"replay","body":{"mode":"graph","MODE":"x"}}`+"\n"),
		[]byte(`{"v":1,"kind":"finding","ts_ns":1,"body":{"severity":"info","evidence":{"a":"1","A":"2","a":"3"}}}`+"\n"),
		[]byte(`{"v":1,"kind":"gpu","ts_ns":1,"body":{"devices":[{"index":0},{"index":1,"index":2}]}}`+"\n"),
	)
	// Values the event model forbids, each between good lines.
	var bad []byte
	for _, c := range valueCases() {
		l := append(rawJSONLine(t, c.event(t)), '\n')
		seeds = append(seeds, l)
		bad = append(append(bad, l...), jsonLine(t, replayEvent(1))...)
	}
	seeds = append(seeds, bad)
	// Objects past the linear duplicate search (linearKeys names).
	var big bytes.Buffer
	big.WriteString(`{"v":1,"kind":"finding","ts_ns":1,"body":{"severity":"warn","evidence":{`)
	for i := range linearKeys + 8 {
		fmt.Fprintf(&big, `"e%d":"v","E%d":"w",`, i, i)
	}
	big.WriteString(`"end":"x"}},"unknown":{`)
	for i := range linearKeys + 8 {
		fmt.Fprintf(&big, `"u%d":%d,`, i, i)
	}
	big.WriteString(`"U7":1}}` + "\n")
	seeds = append(seeds, big.Bytes())
	return seeds
}

// TestWriteFuzzSeeds regenerates the committed seed corpus when
// KVCANARY_WRITE_FUZZ_SEEDS=1.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("KVCANARY_WRITE_FUZZ_SEEDS") != "1" {
		t.Skip("set KVCANARY_WRITE_FUZZ_SEEDS=1 to regenerate testdata/fuzz")
	}
	for name, seeds := range map[string][][]byte{"FuzzFrameDecoder": frameSeeds(t), "FuzzJSONLines": jsonSeeds(t), "FuzzJSONv2": jsonSeeds(t)} {
		dir := filepath.Join("testdata", "fuzz", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, s := range seeds {
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%03d", i)), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// fuzzDecode decodes a fuzz input with d (10000 events at the most):
// check gets each event, checkErr each error, which must be a *WireError;
// a fatal one ends the input.
func fuzzDecode(t *testing.T, d decoder, check func(Event), checkErr func(we *WireError, err error)) {
	for range 10000 {
		ev, err := d.Decode()
		if err == io.EOF {
			return
		}
		if err != nil {
			var we *WireError
			if !errors.As(err, &we) {
				t.Fatalf("error %v is not a *WireError", err)
			}
			checkErr(we, err)
			if we.Fatal {
				return
			}
			continue
		}
		check(ev)
	}
}

// checkAgree fails unless ref, the reference decoder, accepts the line
// that got (decoded by name) came from and builds the same event.
func checkAgree(t *testing.T, line []byte, name string, got Event, refName string, ref Event, refErr error) {
	t.Helper()
	if refErr != nil {
		t.Fatalf("%s accepted %q, %s rejects it: %v", name, line, refName, refErr)
	}
	gb, _ := json.Marshal(got)
	rb, _ := json.Marshal(ref)
	if !bytes.Equal(gb, rb) {
		t.Fatalf("%s and %s disagree on %q:\n%s %s\n%s %s", name, refName, line, name, gb, refName, rb)
	}
}

func FuzzFrameDecoder(f *testing.F) {
	f.Fuzz(func(t *testing.T, in []byte) {
		d := NewFrameDecoder(bytes.NewReader(in))
		fuzzDecode(t, d, func(ev Event) {
			// Whatever decodes re-encodes, and re-encoding is stable.
			b1, err := AppendFrame(nil, ev)
			if err != nil {
				t.Fatalf("decoded event does not re-encode: %v (%+v)", err, ev)
			}
			ev2, n, err := DecodeFrame(b1)
			if err != nil || n != len(b1) {
				t.Fatalf("re-encoded frame does not decode: %v", err)
			}
			b2, _ := AppendFrame(nil, ev2)
			if !bytes.Equal(b1, b2) {
				t.Fatalf("unstable encoding:\n%x\n%x", b1, b2)
			}
			j, err := json.Marshal(ev)
			if err != nil {
				t.Fatalf("decoded event cannot be written as JSON (bundles need that): %v", err)
			}
			// The collector's size rule measures exactly what a bundle writes.
			if n, err := EventLineLen(ev); err != nil || n != len(j) {
				t.Fatalf("EventLineLen = %d, %v; the JSON line is %d bytes: %s", n, err, len(j), j)
			}
		}, func(we *WireError, err error) {
			if we.Reason == ReasonNone || we.Offset < 0 || we.Offset > int64(len(in)) {
				t.Fatalf("bad WireError %+v", we)
			}
			if we.Fatal {
				if _, err2 := d.Decode(); err2 != err {
					t.Fatalf("after fatal %v: %v", err, err2)
				}
			}
		})
	})
}

func FuzzJSONLines(f *testing.F) {
	f.Fuzz(func(t *testing.T, in []byte) {
		// Differential: the fast path must agree with encoding/json.
		for _, line := range bytes.Split(in, []byte("\n")) {
			if !utf8.Valid(line) {
				continue // DecodeJSONLine rejects these before either path
			}
			fast, ok := fastLine(line)
			slow, _, slowErr := slowDecodeLine(line)
			if ok {
				checkAgree(t, line, "fast path", fast, "encoding/json", slow, slowErr)
			}
		}
		d := NewJSONLinesDecoder(bytes.NewReader(in))
		fuzzDecode(t, d, func(ev Event) {
			b, err := json.Marshal(ev)
			if err != nil {
				t.Fatalf("decoded event does not re-marshal: %v", err)
			}
			if n, err := EventLineLen(ev); err != nil || n != len(b) {
				t.Fatalf("EventLineLen = %d, %v; the JSON line is %d bytes: %s", n, err, len(b), b)
			}
			if _, err := AppendFrame(nil, ev); err != nil {
				t.Fatalf("decoded event does not encode as a frame: %v", err)
			}
			again, _, err := DecodeJSONLine(b)
			if err != nil {
				t.Fatalf("re-marshalled line %s does not decode: %v", b, err)
			}
			b2, _ := json.Marshal(again)
			if !bytes.Equal(b, b2) {
				t.Fatalf("unstable JSON:\n%s\n%s", b, b2)
			}
		}, func(we *WireError, err error) {
			if we.Reason == ReasonNone || we.Line < 1 {
				t.Fatalf("bad error %v", err)
			}
		})
	})
}
