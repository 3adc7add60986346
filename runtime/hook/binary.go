package hook

import (
	"encoding/binary"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"unicode/utf8"
)

// Binary body layouts, hand-written (no reflection on the hot path). Each
// layout lists the body struct's fields in declaration order; WIRE.md is the
// normative table. Encoding primitives:
//
//	u32/u64/f64  fixed little-endian
//	uvarint      unsigned LEB128 (encoding/binary.AppendUvarint)
//	varint       zigzag LEB128 (encoding/binary.AppendVarint)
//	str          uvarint byte length, then UTF-8 bytes
//	bool         one byte, 0 or 1
//	list         uvarint element count, then the elements
//	f32s         uvarint element count, then count×4 bytes of LE float32

// binaryFieldCount is the number of struct fields each binary layout encodes.
// init compares it with the struct: a kind whose struct gained a field the
// layout does not know yet is sent with a JSON body instead (correct, slower),
// and TestBinaryLayoutsCoverEveryField fails until binary.go catches up.
var binaryFieldCount = map[reflect.Type]int{
	reflect.TypeFor[RunEnd]():          4,
	reflect.TypeFor[RoomChecksum]():    14,
	reflect.TypeFor[Replay]():          5,
	reflect.TypeFor[PageChange]():      4,
	reflect.TypeFor[CanaryPages]():     16,
	reflect.TypeFor[GraphDiffSample](): 12,
	reflect.TypeFor[Session]():         10,
	reflect.TypeFor[Sched]():           9,
	reflect.TypeFor[CUDA]():            10,
	reflect.TypeFor[Finding]():         4,
}

// binaryKindTypes are the struct types a kind's binary layout depends on.
var binaryKindTypes = map[Kind][]reflect.Type{
	KindRunEnd:          {reflect.TypeFor[RunEnd]()},
	KindRoomChecksum:    {reflect.TypeFor[RoomChecksum]()},
	KindReplay:          {reflect.TypeFor[Replay]()},
	KindCanaryPages:     {reflect.TypeFor[CanaryPages](), reflect.TypeFor[PageChange]()},
	KindGraphDiffSample: {reflect.TypeFor[GraphDiffSample]()},
	KindSession:         {reflect.TypeFor[Session]()},
	KindSched:           {reflect.TypeFor[Sched]()},
	KindCUDA:            {reflect.TypeFor[CUDA]()},
	KindFinding:         {reflect.TypeFor[Finding]()},
}

// binaryBody[k] says AppendFrame writes kind k with its binary layout.
// run.start (nested configuration) and gpu (nested, 1 Hz telemetry whose
// fields grow with NVML) always travel as JSON.
var binaryBody [kindLimit]bool

func init() {
	for k, types := range binaryKindTypes {
		ok := true
		for _, t := range types {
			if t.NumField() != binaryFieldCount[t] {
				ok = false
			}
		}
		binaryBody[k] = ok
	}
}

// layoutDrift lists struct types whose field count differs from their binary
// layout (for the test that keeps binary.go current).
func layoutDrift() []string {
	var out []string
	for t, n := range binaryFieldCount {
		if t.NumField() != n {
			out = append(out, fmt.Sprintf("%s has %d fields, its binary layout encodes %d", t.Name(), t.NumField(), n))
		}
	}
	sort.Strings(out)
	return out
}

func isNilBody(b Body) bool {
	switch v := b.(type) {
	case *RunStart:
		return v == nil
	case *RunEnd:
		return v == nil
	case *RoomChecksum:
		return v == nil
	case *Replay:
		return v == nil
	case *CanaryPages:
		return v == nil
	case *GraphDiffSample:
		return v == nil
	case *Session:
		return v == nil
	case *Sched:
		return v == nil
	case *CUDA:
		return v == nil
	case *Finding:
		return v == nil
	}
	return false
}

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

func (e *enc) f32s(v []float32) {
	e.b = binary.AppendUvarint(e.b, uint64(len(v)))
	for _, f := range v {
		e.b = binary.LittleEndian.AppendUint32(e.b, math.Float32bits(f))
	}
}

func (e *enc) u32s(v []uint32) {
	e.b = binary.AppendUvarint(e.b, uint64(len(v)))
	for _, x := range v {
		e.b = binary.AppendUvarint(e.b, uint64(x))
	}
}

func (e *enc) pageChanges(v []PageChange) {
	e.b = binary.AppendUvarint(e.b, uint64(len(v)))
	for i := range v {
		c := &v[i]
		e.b = binary.AppendUvarint(e.b, uint64(c.Page))
		e.str("owner", c.Owner)
		e.b = appendU64(e.b, uint64(c.Before))
		e.b = appendU64(e.b, uint64(c.After))
	}
}

func (e *enc) hex64s(v []Hex64) {
	e.b = binary.AppendUvarint(e.b, uint64(len(v)))
	for _, h := range v {
		e.b = appendU64(e.b, uint64(h))
	}
}

func (e *enc) ints(v []int) {
	e.b = binary.AppendUvarint(e.b, uint64(len(v)))
	for _, x := range v {
		e.b = appendInt(e.b, x)
	}
}

func (e *enc) i32s(v []int32) {
	e.b = binary.AppendUvarint(e.b, uint64(len(v)))
	for _, x := range v {
		e.b = binary.AppendVarint(e.b, int64(x))
	}
}

// appendBinaryBody appends body's binary layout.
func appendBinaryBody(dst []byte, body Body) ([]byte, error) {
	e := enc{b: dst}
	switch v := body.(type) {
	case *RunEnd:
		e.b = binary.AppendVarint(e.b, v.WallNS)
		e.b = binary.AppendVarint(e.b, v.Steps)
		e.b = binary.AppendUvarint(e.b, v.Dropped)
		e.str("error", v.Error)
	case *RoomChecksum:
		e.b = appendU64(e.b, uint64(v.Room))
		e.str("side", string(v.Side))
		e.b = appendInt(e.b, v.SeqLen)
		e.b = appendInt(e.b, v.Pages)
		e.b = appendU64(e.b, uint64(v.Bsum))
		e.b = appendU64(e.b, uint64(v.XXH3))
		e.str("dtype", v.Dtype)
		e.str("request", v.Request)
		e.hex64s(v.PageSum)
		// Appended in checksum spec v1.1 (multi-layer, multi-rank).
		e.b = appendInt(e.b, v.Rank)
		e.str("stage", v.Stage)
		e.ints(v.Layers)
		e.hex64s(v.LayerBsum)
		e.hex64s(v.PageBsum)
	case *Replay:
		e.b = binary.AppendUvarint(e.b, v.Step)
		e.b = appendInt(e.b, v.BatchSize)
		e.b = appendInt(e.b, v.Bucket)
		e.str("mode", v.Mode)
		e.b = binary.AppendVarint(e.b, v.DurNS)
	case *CanaryPages:
		e.b = binary.AppendUvarint(e.b, v.Step)
		e.str("policy", v.Policy)
		e.b = appendInt(e.b, v.PagesTotal)
		e.b = appendInt(e.b, v.PagesChecked)
		e.pageChanges(v.Changed)
		e.u32s(v.Expected)
		e.u32s(v.Transfer)
		e.strs("running", v.Running)
		e.u32s(v.Padding)
		e.strs("expected_owner", v.ExpectedOwner)
		e.b = appendInt(e.b, v.LivePages)
		e.b = appendInt(e.b, v.LiveChecked)
		e.pageChanges(v.Collateral)
		e.u32s(v.Rewritten)
		e.b = appendBool(e.b, v.SlotChecked)
		e.str("phase", v.Phase)
	case *GraphDiffSample:
		e.b = binary.AppendUvarint(e.b, v.Step)
		e.str("request", v.Request)
		e.str("session", v.Session)
		e.str("dtype", v.Dtype)
		e.f32s(v.Graph)
		e.f32s(v.Eager)
		e.f32s(v.Ref)
		e.i32s(v.TopKGraph)
		e.i32s(v.TopKEager)
		e.b = appendInt(e.b, v.K)
		e.b = appendInt(e.b, v.SeqLen)
		e.str("source", v.Source)
	case *Session:
		e.str("id", v.ID)
		e.str("outcome", v.Outcome)
		e.b = appendInt(e.b, v.Rounds)
		e.str("reason", v.Reason)
		e.strs("finish_reasons", v.FinishReasons)
		e.b = appendBool(e.b, v.Loop)
		e.b = appendBool(e.b, v.Deviated)
		e.strs("requests", v.Requests)
		e.b = appendInt(e.b, v.Round)
		e.str("excerpt", v.Excerpt)
	case *Sched:
		e.str("phase", v.Phase)
		e.b = appendInt(e.b, v.RunningReq)
		e.b = appendInt(e.b, v.QueueReq)
		e.b = appendInt(e.b, v.Tokens)
		e.f64("token_usage", v.TokenUsage)
		e.b = appendInt(e.b, v.Retracted)
		e.f64("new_token_ratio", v.NewTokenRatio)
		e.b = appendBool(e.b, v.CUDAGraph)
		e.f64("gen_throughput", v.GenThroughput)
	case *CUDA:
		e.str("call", v.Call)
		e.b = binary.AppendUvarint(e.b, uint64(v.PID))
		e.b = binary.AppendUvarint(e.b, uint64(v.TID))
		e.b = appendU64(e.b, uint64(v.Stream))
		e.b = appendU64(e.b, uint64(v.GraphExec))
		e.b = appendU64(e.b, uint64(v.Arg))
		e.b = binary.AppendVarint(e.b, v.StartNS)
		e.b = binary.AppendVarint(e.b, v.EndNS)
		e.b = binary.AppendVarint(e.b, int64(v.Ret))
		e.b = binary.AppendUvarint(e.b, v.Bytes)
	case *Finding:
		e.str("analyzer", v.Analyzer)
		e.str("severity", string(v.Severity))
		e.str("summary", v.Summary)
		keys := make([]string, 0, len(v.Evidence))
		for k := range v.Evidence {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		e.b = binary.AppendUvarint(e.b, uint64(len(keys)))
		for _, k := range keys {
			e.str("evidence key", k)
			e.str("evidence value", v.Evidence[k])
		}
	default:
		return dst, fmt.Errorf("no binary layout for %T", body)
	}
	return e.b, e.err
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

func (r *reader) strs(field string) []string {
	n := r.count(field, 1)
	if n == 0 {
		return nil
	}
	out := make([]string, n)
	for i := range out {
		out[i] = r.str()
	}
	return out
}

func (r *reader) f32s(field string) Float32s {
	n := r.count(field, 4)
	if n == 0 {
		return nil
	}
	out := make(Float32s, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(r.b[r.off:]))
		r.off += 4
	}
	return out
}

func (r *reader) u32list(field string) []uint32 {
	n := r.count(field, 1)
	if n == 0 {
		return nil
	}
	out := make([]uint32, n)
	for i := range out {
		out[i] = r.uint32v(field)
	}
	return out
}

func (r *reader) pageChanges(field string) []PageChange {
	n := r.count(field, 1+1+8+8)
	if n == 0 {
		return nil
	}
	out := make([]PageChange, n)
	for i := range out {
		c := &out[i]
		c.Page = r.uint32v("page")
		c.Owner = r.str()
		c.Before = Hex64(r.u64())
		c.After = Hex64(r.u64())
	}
	return out
}

// end reports whether the body has been consumed exactly. A layout's
// appended fields are read only when bytes are left, so a frame from a
// producer built before they existed still decodes (they are absent).
func (r *reader) end() bool { return r.err == nil && r.off == len(r.b) }

func (r *reader) hex64s(field string) []Hex64 {
	n := r.count(field, 8)
	if n == 0 {
		return nil
	}
	out := make([]Hex64, n)
	for i := range out {
		out[i] = Hex64(r.u64())
	}
	return out
}

func (r *reader) intList(field string) []int {
	n := r.count(field, 1)
	if n == 0 {
		return nil
	}
	out := make([]int, n)
	for i := range out {
		out[i] = r.int()
	}
	return out
}

func (r *reader) i32list(field string) []int32 {
	n := r.count(field, 1)
	if n == 0 {
		return nil
	}
	out := make([]int32, n)
	for i := range out {
		v := r.varint()
		if v < math.MinInt32 || v > math.MaxInt32 {
			r.fail(ReasonBadBody, "%s: %d overflows int32", field, v)
		}
		out[i] = int32(v)
	}
	return out
}

// slabs hands out bodies of the high-rate kinds from chunks of slabN, so a
// decoder allocates once per slabN events instead of once per event. Every
// body is a distinct, never reused element; a chunk stays reachable while
// any of its bodies is. A nil *slabs allocates each body on its own.
type slabs struct {
	replay []Replay
	sched  []Sched
	room   []RoomChecksum
	cuda   []CUDA
}

const slabN = 64

func take[T any](pool *[]T) *T {
	if len(*pool) == 0 {
		*pool = make([]T, slabN)
	}
	v := &(*pool)[0]
	*pool = (*pool)[1:]
	return v
}

func (s *slabs) newReplay() *Replay {
	if s == nil {
		return &Replay{}
	}
	return take(&s.replay)
}

func (s *slabs) newSched() *Sched {
	if s == nil {
		return &Sched{}
	}
	return take(&s.sched)
}

func (s *slabs) newRoom() *RoomChecksum {
	if s == nil {
		return &RoomChecksum{}
	}
	return take(&s.room)
}

func (s *slabs) newCUDA() *CUDA {
	if s == nil {
		return &CUDA{}
	}
	return take(&s.cuda)
}

// decodeBinaryBody decodes kind k's binary layout; errors are left in r.
func decodeBinaryBody(k Kind, r *reader, sl *slabs) Body {
	switch k {
	case KindRunEnd:
		return &RunEnd{WallNS: r.varint(), Steps: r.varint(), Dropped: r.uvarint(), Error: r.str()}
	case KindRoomChecksum:
		v := sl.newRoom()
		v.Room = Dec64(r.u64())
		v.Side = Side(r.str())
		v.SeqLen = r.int()
		v.Pages = r.int()
		v.Bsum = Hex64(r.u64())
		v.XXH3 = Hex64(r.u64())
		v.Dtype = r.str()
		v.Request = r.str()
		v.PageSum = r.hex64s("page_xxh3")
		if r.end() {
			return v // a producer from before checksum spec v1.1
		}
		v.Rank = r.int()
		v.Stage = r.str()
		v.Layers = r.intList("layers")
		v.LayerBsum = r.hex64s("layer_bsum")
		v.PageBsum = r.hex64s("page_bsum")
		return v
	case KindReplay:
		v := sl.newReplay()
		v.Step = r.uvarint()
		v.BatchSize = r.int()
		v.Bucket = r.int()
		v.Mode = r.str()
		v.DurNS = r.varint()
		return v
	case KindCanaryPages:
		v := &CanaryPages{}
		v.Step = r.uvarint()
		v.Policy = r.str()
		v.PagesTotal = r.int()
		v.PagesChecked = r.int()
		v.Changed = r.pageChanges("changed")
		v.Expected = r.u32list("expected")
		v.Transfer = r.u32list("transfer")
		v.Running = r.strs("running")
		v.Padding = r.u32list("padding")
		v.ExpectedOwner = r.strs("expected_owner")
		v.LivePages = r.int()
		v.LiveChecked = r.int()
		v.Collateral = r.pageChanges("collateral")
		v.Rewritten = r.u32list("rewritten")
		v.SlotChecked = r.bool("slot_checked")
		if r.end() {
			return v // a producer from before phase
		}
		v.Phase = r.str()
		return v
	case KindGraphDiffSample:
		v := &GraphDiffSample{}
		v.Step = r.uvarint()
		v.Request = r.str()
		v.Session = r.str()
		v.Dtype = r.str()
		v.Graph = r.f32s("graph")
		v.Eager = r.f32s("eager")
		v.Ref = r.f32s("ref")
		v.TopKGraph = r.i32list("topk_graph")
		v.TopKEager = r.i32list("topk_eager")
		v.K = r.int()
		v.SeqLen = r.int()
		if r.end() {
			return v // a producer from before source
		}
		v.Source = r.str()
		return v
	case KindSession:
		v := &Session{}
		v.ID = r.str()
		v.Outcome = r.str()
		v.Rounds = r.int()
		v.Reason = r.str()
		v.FinishReasons = r.strs("finish_reasons")
		v.Loop = r.bool("loop")
		v.Deviated = r.bool("deviated")
		v.Requests = r.strs("requests")
		if r.end() {
			return v // a producer from before round and excerpt
		}
		v.Round = r.int()
		v.Excerpt = r.str()
		return v
	case KindSched:
		v := sl.newSched()
		v.Phase = r.str()
		v.RunningReq = r.int()
		v.QueueReq = r.int()
		v.Tokens = r.int()
		v.TokenUsage = r.f64("token_usage")
		v.Retracted = r.int()
		v.NewTokenRatio = r.f64("new_token_ratio")
		v.CUDAGraph = r.bool("cuda_graph")
		v.GenThroughput = r.f64("gen_throughput")
		return v
	case KindCUDA:
		v := sl.newCUDA()
		v.Call = r.str()
		v.PID = r.uint32v("pid")
		v.TID = r.uint32v("tid")
		v.Stream = Hex64(r.u64())
		v.GraphExec = Hex64(r.u64())
		v.Arg = Hex64(r.u64())
		v.StartNS = r.varint()
		v.EndNS = r.varint()
		ret := r.varint()
		if ret < math.MinInt32 || ret > math.MaxInt32 {
			r.fail(ReasonBadBody, "ret %d overflows int32", ret)
		}
		v.Ret = int32(ret)
		v.Bytes = r.uvarint()
		return v
	case KindFinding:
		v := &Finding{}
		v.Analyzer = r.str()
		v.Severity = Severity(r.str())
		v.Summary = r.str()
		if n := r.count("evidence", 2); n > 0 {
			v.Evidence = make(map[string]string, n)
			for range n {
				key := r.str()
				v.Evidence[key] = r.str()
			}
		}
		return v
	}
	r.fail(ReasonBadBody, "no binary layout for %s", k)
	return nil
}
