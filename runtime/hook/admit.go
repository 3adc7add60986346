package hook

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxEventLine bounds one event in its JSON-lines form (Event.MarshalJSON,
// without the newline), which is what a trace bundle stores. It is the one
// admission rule on size shared by the collector (AdmitEvent, at ingest) and
// the bundle writer (CheckEventLine): the JSON form can be up to six times
// the bytes that arrived ('<' becomes \u003c, a float32 vector base64), so a
// frame or line within MaxFrameSize is not enough.
const MaxEventLine = MaxFrameSize

// ErrTooLarge is wrapped by the error of an event whose JSON-lines form is
// over MaxEventLine.
var ErrTooLarge = errors.New("event too large for a bundle line")

// CheckEventLine is the size rule: nil when an event of kind k whose
// JSON-lines form is n bytes may be stored, else an error wrapping
// ErrTooLarge that names both sizes.
func CheckEventLine(k Kind, n int) error {
	if n <= MaxEventLine {
		return nil
	}
	return fmt.Errorf("%s event is %d bytes as a JSON line (as a bundle stores it), over the %d-byte limit: %w", k, n, MaxEventLine, ErrTooLarge)
}

// Fast-path bounds of AdmitEvent: the JSON-lines form of an event that
// arrived as wireLen bytes is at most factor×wireLen + admitOverhead bytes,
// plus six bytes per byte of the src and run strings a collector fills in.
// Binary bodies: a string byte becomes at most 6 ('<' as \u003c), a
// float32's 4 bytes 5⅓ of base64, a 1-byte varint at most 4 ("127,"), a
// 18-byte page change 68; 8 holds. JSON bodies: an empty object "{}," in a
// list of structs becomes every non-omitempty field of the struct (a GPU
// device: 76 bytes from 3); 32 holds. TestAdmitFactorsHold checks both
// against the worst inputs of every kind.
const (
	admitBinaryFactor = 8
	admitJSONFactor   = 32
	admitOverhead     = 64 << 10 // envelope, zero-valued fields, float spellings
)

// AdmitEvent is the collector's ingest check of the size rule: it refuses
// exactly the events CheckEventLine (and so the bundle writer) refuses.
// wireLen is the size the event arrived as (frame payload or line) and
// jsonBody whether its body was JSON. Events small enough that no encoding
// can reach the limit pass without work; larger ones are measured exactly,
// without building their encoding.
func AdmitEvent(ev Event, wireLen int, jsonBody bool) error {
	if admitQuick(wireLen, jsonBody, len(ev.Src.Node)+len(ev.Src.Proc)+len(ev.Src.Role)+len(ev.Run)) {
		return nil
	}
	n, err := EventLineLen(ev)
	if err != nil {
		return err
	}
	return CheckEventLine(ev.Kind, n)
}

// admitQuick reports whether an event that arrived as wireLen bytes (with
// filled bytes of src and run strings) fits whatever its content: the
// fast path of AdmitEvent, small enough to inline into the collector's loop.
func admitQuick(wireLen int, jsonBody bool, filled int) bool {
	factor := admitBinaryFactor
	if jsonBody {
		factor = admitJSONFactor
	}
	return uint(wireLen) <= MaxEventLine && uint(filled) <= MaxEventLine &&
		wireLen*factor+6*filled <= MaxEventLine-admitOverhead
}

// EventLineLen is len(ev.MarshalJSON()) computed without encoding: the
// bytes a bundle line of ev takes (without the newline).
func EventLineLen(ev Event) (int, error) {
	if ev.Body == nil || isNilBody(ev.Body) {
		return 0, fmt.Errorf("%s event has no body", ev.Kind)
	}
	body, err := jsonLen(reflect.ValueOf(ev.Body))
	if err != nil {
		return 0, fmt.Errorf("measure %s body: %w", ev.Kind, err)
	}
	// {"v":1,"kind":K,"ts_ns":N[,"src":{...}][,"run":R],"body":B}
	n := len(`{"v":1,"kind":,"ts_ns":,"body":}`) + stringLen(ev.Kind.String()) + len(strconv.AppendInt(nil, ev.TS, 10)) + body
	if ev.Src != (Source{}) {
		// The envelope's src as AppendJSON writes it (on the stack unless
		// its strings are long).
		var scratch [128]byte
		n += len(`,"src":`) + len(appendSourceJSON(scratch[:0], ev.Src))
	}
	if ev.Run != "" {
		n += len(`,"run":`) + stringLen(ev.Run)
	}
	return n, nil
}

var (
	dec64Type    = reflect.TypeFor[Dec64]()
	hex64Type    = reflect.TypeFor[Hex64]()
	float32sType = reflect.TypeFor[Float32s]()
	marshalType  = reflect.TypeFor[json.Marshaler]()
)

// jsonLen is len(json.Marshal(v)) for the types event bodies are made of
// (structs with json tags, strings, integers, floats, bools, slices, string
// maps, pointers and the Marshalers of this package). TestEventLineLenExact
// holds it to encoding/json.
func jsonLen(v reflect.Value) (int, error) {
	switch v.Type() {
	case dec64Type:
		return 2 + len(strconv.AppendUint(nil, v.Uint(), 10)), nil
	case hex64Type:
		return 2 + 18, nil
	case float32sType: // MarshalJSON writes "" for a nil vector, not null
		return 2 + base64.StdEncoding.EncodedLen(4*v.Len()), nil
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return 4, nil
		}
		return jsonLen(v.Elem())
	}
	if v.Type().Implements(marshalType) {
		b, err := v.Interface().(json.Marshaler).MarshalJSON()
		return len(b), err
	}
	switch v.Kind() {
	case reflect.String:
		return stringLen(v.String()), nil
	case reflect.Bool:
		if v.Bool() {
			return 4, nil
		}
		return 5, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return len(strconv.AppendInt(nil, v.Int(), 10)), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return len(strconv.AppendUint(nil, v.Uint(), 10)), nil
	case reflect.Float32:
		return floatLen(v.Float(), 32)
	case reflect.Float64:
		return floatLen(v.Float(), 64)
	case reflect.Slice:
		if v.IsNil() {
			return 4, nil
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return 0, fmt.Errorf("byte slices are not part of the event model")
		}
		n := 2 + max(v.Len()-1, 0)
		for i := range v.Len() {
			m, err := jsonLen(v.Index(i))
			if err != nil {
				return 0, err
			}
			n += m
		}
		return n, nil
	case reflect.Map:
		if v.IsNil() {
			return 4, nil
		}
		if v.Type().Key().Kind() != reflect.String {
			return 0, fmt.Errorf("map keys of type %s are not part of the event model", v.Type().Key())
		}
		n := 2 + max(v.Len()-1, 0)
		it := v.MapRange()
		for it.Next() {
			m, err := jsonLen(it.Value())
			if err != nil {
				return 0, err
			}
			n += stringLen(it.Key().String()) + 1 + m
		}
		return n, nil
	case reflect.Struct:
		t := v.Type()
		n, fields := 2, 0
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() || f.Anonymous {
				if f.Anonymous {
					return 0, fmt.Errorf("embedded field %s is not part of the event model", f.Name)
				}
				continue
			}
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" && opts == "" {
				continue
			}
			if name == "" {
				name = f.Name
			}
			fv := v.Field(i)
			if strings.Contains(","+opts+",", ",omitempty,") && isEmptyJSON(fv) {
				continue
			}
			if strings.Contains(","+opts+",", ",string,") {
				return 0, fmt.Errorf("field %s: the string option is not part of the event model", f.Name)
			}
			m, err := jsonLen(fv)
			if err != nil {
				return 0, err
			}
			n += stringLen(name) + 1 + m
			fields++
		}
		return n + max(fields-1, 0), nil
	}
	return 0, fmt.Errorf("values of type %s are not part of the event model", v.Type())
}

// isEmptyJSON is encoding/json's omitempty test.
func isEmptyJSON(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool:
		return !v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int() == 0
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return v.Uint() == 0
	case reflect.Float32, reflect.Float64:
		return v.Float() == 0
	case reflect.Interface, reflect.Pointer:
		return v.IsNil()
	}
	return false
}

// floatLen is the length of encoding/json's spelling of f.
func floatLen(f float64, bits int) (int, error) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("unsupported value: %s", strconv.FormatFloat(f, 'g', -1, bits))
	}
	var scratch [64]byte
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	b := strconv.AppendFloat(scratch[:0], f, format, -1, bits)
	n := len(b)
	if format == 'e' && n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
		n-- // encoding/json writes e-7, not e-07
	}
	return n, nil
}

// stringLen is the length of s as encoding/json writes it (HTML-safe:
// '<', '>' and '&' as \u00XX; U+2028 and U+2029 escaped; invalid UTF-8 as
// \ufffd).
func stringLen(s string) int {
	n := 2
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t':
				n += 2
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				n += 6
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1, r == '\u2028', r == '\u2029':
			n += 6
		default:
			n += size
		}
		i += size
	}
	return n
}
