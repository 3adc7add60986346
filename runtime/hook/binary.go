package hook

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"strconv"
	"unicode/utf8"
)

// Binary body encoding primitives. The layouts themselves — which fields, in
// which order, which appended groups — are generated from event.go into
// binary_gen.go (go generate ./runtime/hook); WIRE.md's layout table is
// generated from the same source. Encoding primitives:
//
//	u32/u64/f64  fixed little-endian
//	uvarint      unsigned LEB128 (encoding/binary.AppendUvarint)
//	varint       zigzag LEB128 (encoding/binary.AppendVarint)
//	str          uvarint byte length, then UTF-8 bytes
//	bool         one byte, 0 or 1
//	list         uvarint element count, then the elements
//	f32s         uvarint element count, then count×4 bytes of LE float32

// ---------------------------------------------------------------------------
// Encoder primitives.

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

func appendInt(b []byte, v int) []byte { return binary.AppendVarint(b, int64(v)) }

func appendU64(b []byte, v uint64) []byte { return binary.LittleEndian.AppendUint64(b, v) }

type encodeError struct{ msg string }

func (e *encodeError) Error() string { return e.msg }

// enc accumulates a body and the first problem (invalid UTF-8, non-finite).
type enc struct {
	b   []byte
	err error
}

func (e *enc) str(field, s string) {
	if e.err == nil && !utf8.ValidString(s) {
		e.err = &encodeError{field + " is not valid UTF-8"}
	}
	e.b = appendStr(e.b, s)
}

func (e *enc) strs(field string, ss []string) {
	e.b = binary.AppendUvarint(e.b, uint64(len(ss)))
	for _, s := range ss {
		e.str(field, s)
	}
}

func (e *enc) f64(field string, v float64) {
	if e.err == nil && (math.IsNaN(v) || math.IsInf(v, 0)) {
		e.err = &encodeError{fmt.Sprintf("%s is %v; JSON cannot carry it", field, v)}
	}
	e.b = binary.LittleEndian.AppendUint64(e.b, math.Float64bits(v))
}

func (e *enc) f32s(_ string, v []float32) {
	e.b = binary.AppendUvarint(e.b, uint64(len(v)))
	for _, f := range v {
		e.b = binary.LittleEndian.AppendUint32(e.b, math.Float32bits(f))
	}
}

func (e *enc) u32s(_ string, v []uint32) {
	e.b = binary.AppendUvarint(e.b, uint64(len(v)))
	for _, x := range v {
		e.b = binary.AppendUvarint(e.b, uint64(x))
	}
}

func (e *enc) hex64s(_ string, v []Hex64) {
	e.b = binary.AppendUvarint(e.b, uint64(len(v)))
	for _, h := range v {
		e.b = appendU64(e.b, uint64(h))
	}
}

func (e *enc) ints(_ string, v []int) {
	e.b = binary.AppendUvarint(e.b, uint64(len(v)))
	for _, x := range v {
		e.b = appendInt(e.b, x)
	}
}

func (e *enc) i32s(_ string, v []int32) {
	e.b = binary.AppendUvarint(e.b, uint64(len(v)))
	for _, x := range v {
		e.b = binary.AppendVarint(e.b, int64(x))
	}
}

// strMap appends a map as a list of key/value string pairs sorted by key.
func (e *enc) strMap(field string, m map[string]string) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	e.b = binary.AppendUvarint(e.b, uint64(len(keys)))
	for _, k := range keys {
		e.str(field+" key", k)
		e.str(field+" value", m[k])
	}
}

// ---------------------------------------------------------------------------
// Decoder primitives: a bounds-checked cursor with a sticky error.

type reader struct {
	b   []byte
	off int
	err *bodyError
}

func (r *reader) fail(reason Reason, format string, a ...any) {
	if r.err == nil {
		r.err = &bodyError{reason: reason, pos: r.off, msg: fmt.Sprintf(format, a...)}
	}
}

// error wraps the sticky error with what was being decoded.
func (r *reader) error(what string) error {
	return &bodyError{reason: r.err.reason, pos: r.err.pos, msg: what + ": " + r.err.msg}
}

func (r *reader) need(n int, what string) bool {
	if r.err != nil {
		return false
	}
	if len(r.b)-r.off < n {
		r.fail(ReasonBadBody, "%s: need %d bytes, %d left", what, n, len(r.b)-r.off)
		return false
	}
	return true
}

// The primitives below keep a small, inlinable fast path and move the
// failure handling out of line. After an error they keep returning zero
// values within bounds; the sticky error is reported by the caller.

func (r *reader) u32() uint32 {
	if r.off+4 <= len(r.b) {
		v := binary.LittleEndian.Uint32(r.b[r.off:])
		r.off += 4
		return v
	}
	r.need(4, "u32")
	return 0
}

func (r *reader) u64() uint64 {
	if r.off+8 <= len(r.b) {
		v := binary.LittleEndian.Uint64(r.b[r.off:])
		r.off += 8
		return v
	}
	r.need(8, "u64")
	return 0
}

func (r *reader) f64(field string) float64 {
	bits := r.u64()
	if bits&0x7ff0000000000000 == 0x7ff0000000000000 {
		r.nonFinite(field, bits)
		return 0
	}
	return math.Float64frombits(bits)
}

func (r *reader) nonFinite(field string, bits uint64) {
	r.off -= 8
	r.fail(ReasonNonFinite, "%s is %v; want a finite number", field, math.Float64frombits(bits))
}

func (r *reader) uvarint() uint64 {
	if i := r.off; i < len(r.b) {
		if c := r.b[i]; c < 0x80 {
			r.off = i + 1
			return uint64(c)
		}
	}
	return r.uvarintSlow()
}

func (r *reader) uvarintSlow() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		if n == 0 {
			r.fail(ReasonBadBody, "truncated varint")
		} else {
			r.fail(ReasonBadBody, "varint overflows 64 bits")
		}
		return 0
	}
	r.off += n
	return v
}

func (r *reader) varint() int64 {
	u := r.uvarint()
	return int64(u>>1) ^ -int64(u&1)
}

func (r *reader) int() int {
	v := r.varint()
	if strconv.IntSize == 32 && int64(int(v)) != v {
		r.overflow(v)
		return 0
	}
	return int(v)
}

func (r *reader) overflow(v int64) { r.fail(ReasonBadBody, "value %d overflows int", v) }

func (r *reader) uint32v(field string) uint32 {
	v := r.uvarint()
	if v > math.MaxUint32 {
		r.fail(ReasonBadBody, "%s %d overflows uint32", field, v)
		return 0
	}
	return uint32(v)
}

func (r *reader) bool(field string) bool {
	if r.off < len(r.b) && r.b[r.off] <= 1 {
		r.off++
		return r.b[r.off-1] == 1
	}
	if r.need(1, field) {
		r.fail(ReasonBadBody, "%s: bool byte %d, want 0 or 1", field, r.b[r.off])
	}
	return false
}

// count reads a list length and checks that count elements of at least
// minSize bytes each can fit in what is left, so no input can make the
// decoder allocate more than the frame holds.
func (r *reader) count(field string, minSize int) int {
	at := r.off
	n := r.uvarint()
	if r.err != nil {
		return 0
	}
	if n > uint64(len(r.b)-r.off)/uint64(minSize) {
		r.off = at
		r.fail(ReasonBadBody, "%s: count %d does not fit in the %d bytes left", field, n, len(r.b)-r.off)
		return 0
	}
	return int(n)
}

func (r *reader) str() string {
	at := r.off
	n := r.uvarint()
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.b)-r.off) {
		r.off = at
		r.fail(ReasonBadBody, "string of %d bytes, %d left", n, len(r.b)-r.off)
		return ""
	}
	s := r.b[r.off : r.off+int(n)]
	if !utf8.Valid(s) {
		r.fail(ReasonBadUTF8, "string is not valid UTF-8")
		return ""
	}
	r.off += int(n)
	return intern(s)
}

// intern returns a shared string for the few values high-rate events repeat,
// so decoding them does not allocate.
func intern(b []byte) string {
	switch len(b) {
	case 0:
		return ""
	case 3:
		if string(b) == "fp8" {
			return "fp8"
		}
	case 4:
		switch string(b) {
		case "bf16":
			return "bf16"
		case "done":
			return "done"
		case "live":
			return "live"
		case "warn":
			return "warn"
		case "info":
			return "info"
		case "sent":
			return "sent"
		}
	case 5:
		switch string(b) {
		case "graph":
			return "graph"
		case "eager":
			return "eager"
		case "error":
			return "error"
		}
	case 6:
		switch string(b) {
		case "decode":
			return "decode"
		case "replay":
			return "replay"
		}
	case 7:
		switch string(b) {
		case "prefill":
			return "prefill"
		case "retract":
			return "retract"
		case "between":
			return "between"
		}
	case 8:
		if string(b) == "admitted" {
			return "admitted"
		}
	case 11:
		if string(b) == "transferred" {
			return "transferred"
		}
	}
	return string(b)
}

// listOf reads a list's count and makes a list that long, checking that
// elements of at least minSize bytes each fit (nil when empty).
func listOf[T any](r *reader, field string, minSize int) []T {
	n := r.count(field, minSize)
	if n == 0 {
		return nil
	}
	return make([]T, n)
}

func (r *reader) strs(field string) []string {
	out := listOf[string](r, field, 1)
	for i := range out {
		out[i] = r.str()
	}
	return out
}

func (r *reader) f32s(field string) Float32s {
	out := listOf[float32](r, field, 4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(r.b[r.off:]))
		r.off += 4
	}
	return out
}

func (r *reader) u32list(field string) []uint32 {
	out := listOf[uint32](r, field, 1)
	for i := range out {
		out[i] = r.uint32v(field)
	}
	return out
}

func (r *reader) hex64s(field string) []Hex64 {
	out := listOf[Hex64](r, field, 8)
	for i := range out {
		out[i] = Hex64(r.u64())
	}
	return out
}

func (r *reader) i32list(field string) []int32 {
	out := listOf[int32](r, field, 1)
	for i := range out {
		v := r.varint()
		if v < math.MinInt32 || v > math.MaxInt32 {
			r.fail(ReasonBadBody, "%s: %d overflows int32", field, v)
		}
		out[i] = int32(v)
	}
	return out
}

func (r *reader) intList(field string) []int {
	out := listOf[int](r, field, 1)
	for i := range out {
		out[i] = r.int()
	}
	return out
}

// end reports whether the body has been consumed exactly. A layout's
// appended fields are read only when bytes are left, so a frame from a
// producer built before they existed still decodes (they are absent).
func (r *reader) end() bool { return r.err == nil && r.off == len(r.b) }

// slabN is how many bodies of one kind a slab chunk holds (see slabs).
const slabN = 64

func take[T any](pool *[]T) *T {
	if len(*pool) == 0 {
		*pool = make([]T, slabN)
	}
	v := &(*pool)[0]
	*pool = (*pool)[1:]
	return v
}

func (r *reader) int32v(field string) int32 {
	v := r.varint()
	if v < math.MinInt32 || v > math.MaxInt32 {
		r.fail(ReasonBadBody, "%s %d overflows int32", field, v)
	}
	return int32(v)
}

// strMap reads a list of key/value string pairs into a map (nil when empty).
func (r *reader) strMap(field string) map[string]string {
	n := r.count(field, 2)
	if n == 0 {
		return nil
	}
	m := make(map[string]string, n)
	for range n {
		key := r.str()
		m[key] = r.str()
	}
	return m
}
