package hook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"sync"
)

// The JSON-lines envelope, written and peeked at without reflection. The
// trace bundle stores events in exactly this form, so its writer and readers
// use these functions rather than their own copy of the envelope.

// bodyEncoders hold a reusable encoder per goroutine in flight.
var bodyEncoders = sync.Pool{New: func() any {
	be := &bodyEncoder{}
	be.enc = json.NewEncoder(&be.buf)
	return be
}}

type bodyEncoder struct {
	buf bytes.Buffer
	enc *json.Encoder
}

// AppendJSON appends ev in the JSON-lines form (Event.MarshalJSON, byte for
// byte, without the trailing newline). It refuses what Validate refuses, and
// what encoding/json cannot encode, leaving dst's contents unchanged.
func AppendJSON(dst []byte, ev Event) ([]byte, error) {
	if err := ev.Validate(); err != nil {
		return dst, fmt.Errorf("marshal event: %w", err)
	}
	be := bodyEncoders.Get().(*bodyEncoder)
	defer bodyEncoders.Put(be)
	be.buf.Reset()
	if err := be.enc.Encode(ev.Body); err != nil {
		return dst, fmt.Errorf("marshal %s body: %w", ev.Kind, err)
	}
	body := bytes.TrimSuffix(be.buf.Bytes(), []byte{'\n'})
	b := append(dst, `{"v":1,"kind":"`...)
	b = append(b, kindNames[ev.Kind]...)
	b = append(b, `","ts_ns":`...)
	b = strconv.AppendInt(b, ev.TS, 10)
	if ev.Src != (Source{}) {
		b = appendSourceJSON(append(b, `,"src":`...), ev.Src)
	}
	if ev.Run != "" {
		b = appendJSONString(append(b, `,"run":`...), ev.Run)
	}
	b = append(b, `,"body":`...)
	b = append(b, body...)
	if be.buf.Cap() > 1<<20 {
		be.buf = bytes.Buffer{} // do not pin a huge body's buffer in the pool
	}
	return append(b, '}'), nil
}

// appendJSONString appends s as encoding/json would (HTML-safe escaping).
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // strings always marshal
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

var eventHead = []byte(`{"v":1,"kind":"`)

// PeekCanonicalJSONLine reads kind and ts_ns from an event line in the
// member order AppendJSON writes ({"v":1,"kind":"K","ts_ns":N,…) without
// allocating. ok is false for any other line (another order, spacing, an
// unknown kind, a ts_ns that is not an int64): PeekJSONLine reads those.
// The rest of the line is not looked at.
func PeekCanonicalJSONLine(line []byte) (k Kind, ts int64, ok bool) {
	if !bytes.HasPrefix(line, eventHead) {
		return 0, 0, false
	}
	rest := line[len(eventHead):]
	q := bytes.IndexByte(rest, '"')
	if q < 0 {
		return 0, 0, false
	}
	k = KindByName(rest[:q])
	if k == KindInvalid {
		return 0, 0, false
	}
	rest = rest[q+1:]
	const tsKey = `,"ts_ns":`
	if !bytes.HasPrefix(rest, []byte(tsKey)) {
		return 0, 0, false
	}
	rest = rest[len(tsKey):]
	i := 0
	if i < len(rest) && rest[i] == '-' {
		i++
	}
	for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
		i++
	}
	if i == 0 || i >= len(rest) || (rest[i] != ',' && rest[i] != '}') {
		return 0, 0, false
	}
	digits := rest[:i]
	neg := digits[0] == '-'
	if neg {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 19 { // 19 digits cannot overflow uint64
		return 0, 0, false
	}
	var u uint64
	for _, c := range digits {
		u = u*10 + uint64(c-'0')
	}
	switch {
	case !neg && u <= math.MaxInt64:
		return k, int64(u), true
	case neg && u <= math.MaxInt64+1:
		return k, int64(-u), true // -u wraps to the negative value for MaxInt64+1 too
	}
	return 0, 0, false
}

// PeekJSONLine reads kind and ts_ns from an event line in any member order,
// checking the version; the body is not decoded. Errors say what is wrong
// with the line.
func PeekJSONLine(line []byte) (Kind, int64, error) {
	if k, ts, ok := PeekCanonicalJSONLine(line); ok {
		return k, ts, nil
	}
	var env struct {
		V    *int   `json:"v"`
		Kind string `json:"kind"`
		TS   int64  `json:"ts_ns"`
	}
	if err := json.Unmarshal(line, &env); err != nil {
		return 0, 0, fmt.Errorf("bad event line: %w", err)
	}
	if env.V == nil || *env.V != Version {
		v := "none"
		if env.V != nil {
			v = strconv.Itoa(*env.V)
		}
		return 0, 0, fmt.Errorf("unsupported event version %s (this build reads version %d)", v, Version)
	}
	k, err := ParseKind(env.Kind)
	if err != nil {
		return 0, 0, err
	}
	return k, env.TS, nil
}
