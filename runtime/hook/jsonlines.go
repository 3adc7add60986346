package hook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// JSONLinesDecoder reads the JSON-lines form: one event object per line, as
// Event.MarshalJSON writes it. Blank lines are skipped; a line may end in
// "\r\n". Errors name the 1-based line number and the line's byte offset.
type JSONLinesDecoder struct {
	streamBuf
	line int // lines consumed so far
}

// NewJSONLinesDecoder returns a decoder reading JSON lines from r.
func NewJSONLinesDecoder(r io.Reader) *JSONLinesDecoder { return newBudgetJSONLinesDecoder(r, nil) }

// newBudgetJSONLinesDecoder is NewJSONLinesDecoder with its buffer
// accounted in mem; nil when mem cannot hold the first buffer.
func newBudgetJSONLinesDecoder(r io.Reader, mem *memBudget) *JSONLinesDecoder {
	if !mem.reserve(decodeBufSize) {
		return nil
	}
	return &JSONLinesDecoder{streamBuf: newStreamBuf(r, mem)}
}

// Line is the number of lines consumed so far.
func (d *JSONLinesDecoder) Line() int { return d.line }

// nextLine returns the next line without its terminator, its offset, and
// whether it was terminated by '\n'. An unterminated last line is returned
// only at io.EOF; any other read error ends the stream with that error.
func (d *JSONLinesDecoder) nextLine() (line []byte, off int64, terminated bool, err error) {
	scanFrom := d.start
	zeroReads := 0
	for {
		if i := bytes.IndexByte(d.buf[scanFrom:d.end], '\n'); i >= 0 {
			nl := scanFrom + i
			line = d.buf[d.start:nl]
			off = d.off
			d.off += int64(nl + 1 - d.start)
			d.start = nl + 1
			if len(line) > MaxFrameSize {
				return nil, off, true, errLineTooLong
			}
			return line, off, true, nil
		}
		scanFrom = d.end
		if d.end-d.start > MaxFrameSize {
			return nil, d.off, false, errLineTooLong
		}
		if d.rerr != nil {
			if d.end == d.start || d.rerr != io.EOF {
				return nil, d.off, false, d.rerr
			}
			line = d.buf[d.start:d.end]
			off = d.off
			d.off += int64(d.end - d.start)
			d.start = d.end
			return line, off, false, nil
		}
		// Make room: slide to the front, grow when the line fills the buffer
		// (doubling as its bytes arrive, up to the longest line plus '\n').
		// After a long line, give its buffer back once the rest fits in a
		// first-size one.
		scanFrom -= d.slide(len(d.buf) > shrinkAbove && d.end-d.start < decodeBufSize)
		if d.end == len(d.buf) && !d.grow(min(max(2*len(d.buf), decodeBufSize), MaxFrameSize+1), 2*len(d.buf)) {
			continue
		}
		d.read(&zeroReads)
	}
}

var errLineTooLong = errors.New("line too long")

// Decode returns the next event, io.EOF at a clean end of stream, or a
// *WireError. After a non-fatal error (a bad line) Decode may be called again;
// a line longer than MaxFrameSize or a read error is fatal.
func (d *JSONLinesDecoder) Decode() (Event, error) {
	for {
		if d.fatal != nil {
			return Event{}, d.fatal
		}
		line, off, terminated, err := d.nextLine()
		if err != nil {
			var be *budgetError
			switch {
			case err == errLineTooLong:
				d.fatal = &WireError{Offset: off, Line: d.line + 1, Reason: ReasonTooLong, Fatal: true,
					Err: fmt.Errorf("line exceeds the %d-byte limit: framing lost", MaxFrameSize)}
			case err == io.EOF:
				d.fatal = io.EOF
			case errors.As(err, &be):
				d.fatal = &WireError{Offset: off, Line: d.line + 1, Reason: ReasonOverBudget, Fatal: true,
					Err: fmt.Errorf("line of more than %d bytes: %w", be.have, be)}
			default:
				d.fatal = &WireError{Offset: off, Line: d.line + 1, Reason: ReasonTruncated, Fatal: true,
					Err: fmt.Errorf("read line: %w", err)}
			}
			return Event{}, d.fatal
		}
		d.line++
		n := len(line)
		if n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		if isBlank(line) {
			continue
		}
		ev, reason, err := decodeJSONLine(line, &d.slabs)
		if err != nil {
			if !terminated && reason == ReasonBadJSON && !json.Valid(line) {
				// The stream ended inside the line: cut, like a frame cut
				// short, not a complete line with a syntax error.
				// The next Decode returns io.EOF.
				return Event{}, &WireError{Offset: off, Line: d.line, Reason: ReasonTruncated,
					Err: fmt.Errorf("stream ends inside the line (%d bytes of it present, no newline; %v): %w", n, err, io.ErrUnexpectedEOF)}
			}
			return Event{}, &WireError{Offset: off, Line: d.line, Reason: reason, Err: err}
		}
		d.last = decoded{off: off, line: d.line, size: n, jsonBody: true}
		return ev, nil
	}
}

func isBlank(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			return false
		}
	}
	return true
}

// DecodeJSONLine decodes one JSON-lines event (without the newline) and says
// why it was rejected. It accepts exactly what Event.UnmarshalJSON accepts.
// Beyond encoding/json it rejects invalid UTF-8 (which encoding/json would
// silently replace), a member name repeated in one object (encoding/json
// would keep the last), and body values the event model forbids (Validate).
// A fast path handles the canonical encoding of the high-rate kinds;
// anything it does not recognise, or would reject, goes through
// encoding/json, which produces every error.
func DecodeJSONLine(line []byte) (Event, Reason, error) { return decodeJSONLine(line, nil) }

func decodeJSONLine(line []byte, sl *slabs) (Event, Reason, error) {
	if !utf8.Valid(line) {
		i := firstInvalidUTF8(line)
		return Event{}, ReasonBadUTF8, fmt.Errorf("decode event: invalid UTF-8 at column %d", i+1)
	}
	if ev, ok := fastLineSlabs(line, sl); ok {
		return ev, ReasonNone, nil
	}
	return slowDecodeLine(line)
}

func firstInvalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// slowDecodeLine decodes a line the fast path gave up on: with json v2
// (go-json-experiment/json) when it decodes and the event is valid, else with
// encoding/json, which stays the authority on every error (its wording and
// classification are part of the contract), so both give exactly one result.
func slowDecodeLine(line []byte) (Event, Reason, error) {
	if ev, ok := v2DecodeLine(line); ok {
		return ev, ReasonNone, nil
	}
	return v1DecodeLine(line)
}

// v1DecodeLine decodes a line with encoding/json and classifies errors.
func v1DecodeLine(line []byte) (Event, Reason, error) {
	var env envelope
	if err := json.Unmarshal(line, &env); err != nil {
		r := jsonReasonFor(line, err)
		return Event{}, r, fmt.Errorf("decode event: %s%w", nonFiniteNote(r), err)
	}
	// Before anything reads a member: with a repeated "v" or "kind" what
	// encoding/json kept is not what the producer meant.
	if name, at, found := findDupKey(line); found {
		return Event{}, ReasonBadJSON, fmt.Errorf("decode event: duplicate key %s at column %d", quoteValue(name), at+1)
	}
	if env.V != Version {
		return Event{}, ReasonBadVersion, fmt.Errorf("decode event: unsupported event version %d (this build reads version %d)", env.V, Version)
	}
	k, err := ParseKind(env.Kind)
	if err != nil {
		return Event{}, ReasonUnknownKind, fmt.Errorf("decode event: %w", err)
	}
	body, err := decodeJSONBody(k, env.Body, false)
	if err != nil {
		return Event{}, jsonReason(err), fmt.Errorf("decode %s body: %w", k, err)
	}
	if err := validateBody(body); err != nil {
		return Event{}, ReasonBadValue, err
	}
	ev := Event{Kind: k, TS: env.TS, Run: env.Run, Body: body}
	if env.Src != nil {
		ev.Src = *env.Src
	}
	if err := validateSource(k, ev.Src); err != nil {
		return Event{}, ReasonBadValue, err
	}
	return ev, ReasonNone, nil
}

// reasonError carries a Reason through encoding/json-style errors.
type reasonError struct {
	why Reason
	err error
}

func (e *reasonError) Error() string  { return e.err.Error() }
func (e *reasonError) Unwrap() error  { return e.err }
func (e *reasonError) reason() Reason { return e.why }

func jsonReason(err error) Reason { return reasonIn[*reasonError](err, ReasonBadJSON) }

// jsonReasonFor classifies an encoding/json error on input b.
func jsonReasonFor(b []byte, err error) Reason {
	if hasNonFiniteLiteral(b) {
		return ReasonNonFinite
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && len(te.Value) > 7 && te.Value[:7] == "number " {
		// A number that does not fit its field: 1e999 into a float64 is
		// an infinity.
		if _, perr := strconv.ParseFloat(te.Value[7:], 64); perr != nil {
			return ReasonNonFinite
		}
	}
	return ReasonBadJSON
}

func nonFiniteNote(r Reason) string {
	if r == ReasonNonFinite {
		return "NaN or Infinity where a number is expected: "
	}
	return ""
}

// hasNonFiniteLiteral reports whether b holds NaN or Infinity (with an
// optional sign) outside a string: what Python's json.dumps writes for
// non-finite floats.
func hasNonFiniteLiteral(b []byte) bool {
	inStr := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inStr {
			switch c {
			case '\\':
				i++
			case '"':
				inStr = false
			}
			continue
		}
		switch c {
		case '"':
			inStr = true
		case 'N':
			if bytes.HasPrefix(b[i:], []byte("NaN")) {
				return true
			}
		case 'I':
			if bytes.HasPrefix(b[i:], []byte("Infinity")) {
				return true
			}
		}
	}
	return false
}

// decodeJSONBody decodes a kind's JSON body object (without checking its
// values: callers run validateBody). With checkDups it also refuses a
// member name repeated in one object (the line decoder checks whole lines
// itself). Errors carry their Reason (jsonReason).
func decodeJSONBody(k Kind, b []byte, checkDups bool) (Body, error) {
	if !utf8.Valid(b) {
		return nil, &reasonError{ReasonBadUTF8, fmt.Errorf("invalid UTF-8 at byte %d", firstInvalidUTF8(b))}
	}
	if len(bytes.TrimSpace(b)) == 0 || string(bytes.TrimSpace(b)) == "null" {
		return nil, &reasonError{ReasonBadBody, fmt.Errorf("%s event has no body", k)}
	}
	if body, ok := v2DecodeBody(k, b, checkDups); ok {
		return body, nil
	}
	return v1DecodeBody(k, b, checkDups)
}

// v1DecodeBody is decodeJSONBody with encoding/json alone.
func v1DecodeBody(k Kind, b []byte, checkDups bool) (Body, error) {
	body, err := NewBody(k)
	if err != nil {
		return nil, &reasonError{ReasonUnknownKind, err}
	}
	if err := json.Unmarshal(b, body); err != nil {
		if verr := u64NumberError(err); verr != nil {
			return nil, &reasonError{ReasonBadValue, verr}
		}
		r := jsonReasonFor(b, err)
		if r == ReasonNonFinite {
			err = fmt.Errorf("%s%w", nonFiniteNote(r), err)
		}
		return nil, &reasonError{r, err}
	}
	if checkDups {
		if name, at, found := findDupKey(b); found {
			return nil, &reasonError{ReasonBadJSON, fmt.Errorf("duplicate key %s at byte %d of the body", quoteValue(name), at)}
		}
	}
	return body, nil
}

// u64NumberError explains a Dec64 or Hex64 field given as a JSON number
// (parseU64JSON's error, completed by encoding/json with the field's name),
// or returns nil for any other error.
func u64NumberError(err error) error {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || !strings.HasPrefix(te.Value, "number ") {
		return nil
	}
	var want string
	switch te.Type {
	case reflect.TypeFor[Dec64]():
		want = "a decimal string"
	case reflect.TypeFor[Hex64]():
		want = "a 0x-hex string"
	default:
		return nil
	}
	field := te.Field
	if field == "" {
		field = "a 64-bit field"
	}
	return fmt.Errorf("%s is the JSON number %s; 64-bit identifiers and digests must be %s (jq and JavaScript lose bits of numbers above 2^53)",
		field, te.Value[len("number "):], want)
}

// appendJSONBody appends body's JSON object.
func appendJSONBody(dst []byte, body Body) ([]byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return dst, err
	}
	return append(dst, b...), nil
}
