package hook

import (
	"bytes"
	"io"
	"strconv"
	"sync"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"
)

// The JSON slow path's first try: json v2 decodes ~3× faster than
// encoding/json (BENCHMARKS.md, issue 15). It only ever accepts: any error,
// and any event Validate refuses, goes to encoding/json (v1DecodeLine,
// decodeJSONBody), which produces the error, so the reasons and wording
// callers see are unchanged. For that to hold, v2 must decode every line
// both accept into the same event:
//   - names match fields case-insensitively as encoding/json matches them
//     (MatchCaseInsensitiveNames, and MatchCaseSensitiveDelimiter: "ts_ns"
//     does not match "tsns", which v2 alone would allow);
//   - the model's types keep their encoding/json methods (Dec64, Hex64,
//     Float32s, RunConfig, Session), which v2 calls;
//   - findDupKey still runs where it can find something: v2 rejects a
//     repeated name when it is exact (at any depth) or matches the same
//     field, but two unknown members differing only in case pass it, and
//     WIRE.md refuses them. Such a pair needs an upper-case or non-ASCII
//     letter or an escape somewhere in the line (foldedRepeatPossible).
var v2Options = jsonv2.JoinOptions(
	jsonv2.MatchCaseInsensitiveNames(true),
	jsonv1.MatchCaseSensitiveDelimiter(true),
)

// v2Decoder is a reusable token decoder over one line. Over a
// *bytes.Buffer, jsontext parses the line in place, without a copy.
type v2Decoder struct {
	buf bytes.Buffer
	dec *jsontext.Decoder
}

var v2Decoders = sync.Pool{New: func() any {
	d := &v2Decoder{}
	d.dec = jsontext.NewDecoder(&d.buf, v2Options)
	return d
}}

// pooledLineMax is the longest line whose decoder goes back to the pool:
// the decoder's state grows with what it read, and a pool must not pin a
// long line's worth of memory (the collector's budget counts buffers, not
// this).
const pooledLineMax = 64 << 10

func (d *v2Decoder) release(n int) {
	d.buf = bytes.Buffer{}
	d.dec.Reset(&d.buf, v2Options) // drop every reference to the line
	if n <= pooledLineMax {
		v2Decoders.Put(d)
	}
}

// Envelope members, as bits of a seen-set.
const (
	envV = 1 << iota
	envKind
	envTS
	envSrc
	envRun
	envBody
)

// envNames[i] is the name of the member whose bit is 1<<i.
var envNames = [...]string{"v", "kind", "ts_ns", "src", "run", "body"}

// envMember matches a member name of the envelope as encoding/json would
// (ASCII case-insensitively); 0 for other names. ok is false for a name
// this path leaves to encoding/json (escaped or non-ASCII).
func envMember(quoted []byte) (m int, ok bool) {
	if len(quoted) < 2 {
		return 0, false
	}
	name := quoted[1 : len(quoted)-1]
	for _, c := range name {
		if c == '\\' || c >= 0x80 {
			return 0, false
		}
	}
	for i, env := range envNames {
		if asciiEqualFold(name, env) {
			return 1 << i, true
		}
	}
	return 0, true
}

func asciiEqualFold(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// v2DecodeLine decodes a valid event line, or reports false. It walks the
// envelope's members itself so a body that follows its kind (the usual
// order) is decoded once, straight into its struct.
func v2DecodeLine(line []byte) (Event, bool) {
	d := v2Decoders.Get().(*v2Decoder)
	defer d.release(len(line))
	d.buf = *bytes.NewBuffer(line)
	d.dec.Reset(&d.buf, v2Options)
	dec := d.dec
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return Event{}, false
	}
	var (
		ev      Event
		v       int
		k       Kind
		src     *Source
		body    Body
		rawBody []byte
		seen    int
	)
	for dec.PeekKind() == '"' {
		name, err := dec.ReadValue()
		if err != nil {
			return Event{}, false
		}
		m, ok := envMember(name)
		if !ok || seen&m != 0 {
			return Event{}, false // a repeat: encoding/json names it
		}
		seen |= m
		switch m {
		case envV:
			var x int64
			if x, ok = scalarInt(dec); ok {
				v = int(x)
			}
		case envKind:
			var raw jsontext.Value
			if raw, err = dec.ReadValue(); err == nil {
				k, ok = plainString(raw)
			}
		case envTS:
			ev.TS, ok = scalarInt(dec)
		case envSrc:
			err = jsonv2.UnmarshalDecode(dec, &src, v2Options)
		case envRun:
			err = jsonv2.UnmarshalDecode(dec, &ev.Run, v2Options)
		case envBody:
			if dec.PeekKind() != '{' {
				return Event{}, false // null or not an object: encoding/json says why
			}
			if seen&envKind != 0 {
				if body, err = NewBody(k); err == nil {
					err = jsonv2.UnmarshalDecode(dec, body, v2Options)
				}
			} else {
				var raw jsontext.Value
				if raw, err = dec.ReadValue(); err == nil {
					rawBody = bytes.Clone(raw)
				}
			}
		default:
			err = dec.SkipValue()
		}
		if err != nil || !ok {
			return Event{}, false
		}
	}
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '}' {
		return Event{}, false
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		return Event{}, false // trailing bytes
	}
	if v != Version || seen&envKind == 0 || seen&envBody == 0 || k == KindInvalid {
		return Event{}, false
	}
	if body == nil {
		var ok bool
		if body, ok = v2DecodeBody(k, rawBody, false); !ok {
			return Event{}, false
		}
	}
	if foldedRepeatPossible(line) {
		if _, _, dup := findDupKey(line); dup {
			return Event{}, false
		}
	}
	if src != nil {
		ev.Src = *src
	}
	if validateBody(body) != nil || validateSource(k, ev.Src) != nil {
		return Event{}, false // encoding/json's path names the rule
	}
	ev.Kind, ev.Body = k, body
	return ev, true
}

// v2DecodeBody decodes a kind's body object (values unchecked), or reports
// false; with checkDups it also refuses what findDupKey finds.
func v2DecodeBody(k Kind, b []byte, checkDups bool) (Body, bool) {
	if t := bytes.TrimSpace(b); len(t) == 0 || string(t) == "null" {
		return nil, false
	}
	body, err := NewBody(k)
	if err != nil || jsonv2.Unmarshal(b, body, v2Options) != nil {
		return nil, false
	}
	if checkDups && foldedRepeatPossible(b) {
		if _, _, dup := findDupKey(b); dup {
			return nil, false
		}
	}
	return body, true
}

// foldedRepeatPossible reports whether b holds a byte without which no two
// distinct member names can be equal under case folding: an ASCII upper-case
// letter, a non-ASCII byte (U+212A KELVIN SIGN folds to k), or a backslash
// (an escape can spell either). Without one, names equal under folding are
// equal bytes, and json v2 rejects those itself.
func foldedRepeatPossible(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 || c == '\\' || c >= 'A' && c <= 'Z' {
			return true
		}
	}
	return false
}

// scalarInt reads an integer member as encoding/json reads it into a zero
// int64: a plain integer literal, or null (0). Anything else reports false,
// for encoding/json to word.
func scalarInt(dec *jsontext.Decoder) (int64, bool) {
	raw, err := dec.ReadValue()
	if err != nil {
		return 0, false
	}
	if string(raw) == "null" {
		return 0, true
	}
	x, err := strconv.ParseInt(string(raw), 10, 64)
	return x, err == nil
}

// plainString maps a kind's quoted name, without escapes, to its Kind.
func plainString(raw []byte) (Kind, bool) {
	if len(raw) < 2 || raw[0] != '"' || bytes.IndexByte(raw, '\\') >= 0 {
		return KindInvalid, false
	}
	k := KindByName(raw[1 : len(raw)-1])
	return k, k != KindInvalid
}
