package hook

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// Wire protocol constants. WIRE.md is the normative description.
const (
	// FrameVersion is the version byte of every binary frame.
	FrameVersion = 1
	// FramePreamble opens a binary connection. A connection whose first byte
	// is '{' or JSON whitespace carries JSON lines instead.
	FramePreamble = "KVCF"
	// MaxFrameSize bounds one frame (the value of its length prefix) and one
	// JSON line. Anything larger is refused and, on a socket, ends that
	// connection: the stream cannot be trusted to be in step any more.
	MaxFrameSize = 16 << 20

	frameHeaderLen = 4             // length prefix
	frameFixedLen  = 1 + 1 + 1 + 8 // version, kind, flags, ts_ns
	minFrameLen    = frameFixedLen // smallest legal length prefix
	frameFlagsMask = FlagJSON | FlagSrc | FlagRun | FlagRole
)

// Frame flag bits (byte 6 of a frame).
const (
	FlagJSON = 1 << 0 // body is the kind's JSON object instead of its binary layout
	FlagSrc  = 1 << 1 // envelope carries src (node, proc, pid)
	FlagRun  = 1 << 2 // envelope carries the run id
	FlagRole = 1 << 3 // envelope carries src role and rank (after run)
)

// Reason classifies why an input was rejected. Reason strings are stable: they
// are the keys of the collector's rejection counts.
type Reason uint8

// Rejection reasons.
const (
	ReasonNone        Reason = iota
	ReasonBadLength          // length prefix outside [11, MaxFrameSize]: framing lost
	ReasonTruncated          // stream ended inside a frame or line
	ReasonBadVersion         // frame version byte or JSON "v" is not 1
	ReasonUnknownKind        // kind byte or "kind" string is not a v1 kind
	ReasonBadFlags           // unknown flag bits
	ReasonBadBody            // body does not decode as its kind (short, trailing bytes, wrong type)
	ReasonBadUTF8            // a string or a JSON line is not valid UTF-8
	ReasonBadJSON            // JSON syntax error, or a body that does not fit its kind
	ReasonNonFinite          // NaN or Inf where a number is expected
	ReasonTooLong            // JSON line longer than MaxFrameSize: framing lost
	ReasonBadPreamble        // first bytes are neither JSON nor the frame preamble
	ReasonBadValue           // a body value the event model forbids (outcome, side, mode, a negative count, a 64-bit id as a JSON number; at the collector, a ts_ns negative or over MaxTSAhead ahead)
	ReasonTooLarge           // the event's JSON-lines form (what a bundle stores) is over MaxEventLine
	ReasonOverBudget         // the collector's memory budget could not hold the rest of the frame or line: connection closed
	ReasonStalled            // a partial frame or line made no progress for the stall timeout: connection closed
	reasonLimit
)

var reasonNames = [reasonLimit]string{
	ReasonNone:        "none",
	ReasonBadLength:   "bad_length",
	ReasonTruncated:   "truncated",
	ReasonBadVersion:  "bad_version",
	ReasonUnknownKind: "unknown_kind",
	ReasonBadFlags:    "bad_flags",
	ReasonBadBody:     "bad_body",
	ReasonBadUTF8:     "bad_utf8",
	ReasonBadJSON:     "bad_json",
	ReasonNonFinite:   "non_finite",
	ReasonTooLong:     "too_long",
	ReasonBadPreamble: "bad_preamble",
	ReasonBadValue:    "bad_value",
	ReasonTooLarge:    "too_large",
	ReasonOverBudget:  "over_budget",
	ReasonStalled:     "stalled",
}

func (r Reason) String() string {
	if r < reasonLimit {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// Reasons lists every rejection reason in numeric order (without ReasonNone).
func Reasons() []Reason {
	rs := make([]Reason, 0, reasonLimit-1)
	for r := ReasonNone + 1; r < reasonLimit; r++ {
		rs = append(rs, r)
	}
	return rs
}

// WireError is a rejected frame or line. Offset is the byte offset in the
// stream where the frame or line starts (after any preamble the caller
// consumed, plus the decoder's base offset); Line is the 1-based line number
// for JSON lines, 0 for frames. Fatal means framing is lost: the stream cannot
// be read further and a collector closes the connection.
type WireError struct {
	Offset int64
	Line   int
	Reason Reason
	Fatal  bool
	Err    error
}

func (e *WireError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d (byte %d): %v", e.Line, e.Offset, e.Err)
	}
	return fmt.Sprintf("frame at byte %d: %v", e.Offset, e.Err)
}

func (e *WireError) Unwrap() error { return e.Err }

func (e *WireError) reason() Reason { return e.Reason }

// ReasonOf returns the rejection reason of err, or ReasonNone.
func ReasonOf(err error) Reason { return reasonIn[*WireError](err, ReasonNone) }

// reasonIn returns the reason of the first E in err's chain, or otherwise.
func reasonIn[E interface {
	error
	reason() Reason
}](err error, otherwise Reason) Reason {
	var e E
	if errors.As(err, &e) {
		return e.reason()
	}
	return otherwise
}

// bodyError is a body decoding error with a reason and the body-relative
// position; the frame decoder turns it into a WireError.
type bodyError struct {
	reason Reason
	pos    int // offset inside the frame payload, -1 when unknown
	msg    string
}

func (e *bodyError) Error() string { return e.msg }

// ---------------------------------------------------------------------------
// Encoding.

// AppendFrame appends ev as one binary frame (length prefix included) to dst.
// Src and Run are written only when set. Kinds with a binary body layout use
// it; the others (run.start) carry their JSON body with FlagJSON. It fails on
// an invalid kind, a body that does not match the kind, a body value the
// event model forbids (Event.Validate), a string that is not UTF-8, or a
// NaN/Inf in a scalar float field; dst is then returned unchanged.
func AppendFrame(dst []byte, ev Event) ([]byte, error) {
	return appendFrame(dst, ev, false)
}

// AppendFrameJSON is AppendFrame with the body always in its JSON form
// (FlagJSON), for producers without a binary encoder for a kind.
func AppendFrameJSON(dst []byte, ev Event) ([]byte, error) {
	return appendFrame(dst, ev, true)
}

func appendFrame(dst []byte, ev Event, forceJSON bool) ([]byte, error) {
	if err := ev.Validate(); err != nil {
		return dst, fmt.Errorf("encode frame: %w", err)
	}
	return appendFrameUnchecked(dst, ev, forceJSON)
}

// appendFrameUnchecked encodes without Validate (tests build the frames
// decoders must reject with it). ev's kind must be valid and match a
// non-nil body.
func appendFrameUnchecked(dst []byte, ev Event, forceJSON bool) ([]byte, error) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, FrameVersion, byte(ev.Kind), 0)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(ev.TS))
	var flags byte
	if ev.Src != (Source{}) {
		flags |= FlagSrc
		dst = appendStr(dst, ev.Src.Node)
		dst = appendStr(dst, ev.Src.Proc)
		dst = binary.LittleEndian.AppendUint32(dst, uint32(ev.Src.PID))
	}
	if ev.Run != "" {
		flags |= FlagRun
		dst = appendStr(dst, ev.Run)
	}
	// Role and rank get their own flag, so frames without them are
	// byte-identical to those of producers built before the fields existed,
	// and an older collector refuses a frame with them (bad_flags) instead of
	// misreading it.
	if ev.Src.Role != "" || ev.Src.Rank != 0 {
		flags |= FlagRole
		dst = appendStr(dst, ev.Src.Role)
		dst = binary.AppendUvarint(dst, uint64(uint32(ev.Src.Rank)))
	}
	var err error
	if binaryBody[ev.Kind] && !forceJSON {
		dst, err = appendBinaryBody(dst, ev.Body)
	} else {
		flags |= FlagJSON
		dst, err = appendJSONBody(dst, ev.Body)
	}
	if err != nil {
		return dst[:start], fmt.Errorf("encode %s frame: %w", ev.Kind, err)
	}
	if !utf8.ValidString(ev.Src.Node) || !utf8.ValidString(ev.Src.Proc) || !utf8.ValidString(ev.Run) || !utf8.ValidString(ev.Src.Role) {
		return dst[:start], fmt.Errorf("encode %s frame: src or run is not valid UTF-8", ev.Kind)
	}
	n := len(dst) - start - frameHeaderLen
	if n > MaxFrameSize {
		return dst[:start], fmt.Errorf("encode %s frame: %d bytes exceeds the %d-byte frame limit", ev.Kind, n, MaxFrameSize)
	}
	binary.LittleEndian.PutUint32(dst[start:], uint32(n))
	dst[start+6] = flags
	return dst, nil
}

// ---------------------------------------------------------------------------
// Decoding.

// FrameDecoder reads binary frames from a stream (without the preamble; a
// collector consumes that). It never panics and never allocates more than
// MaxFrameSize for a frame, whatever the input; its buffer grows as the
// bytes of a frame arrive (at most twice what is buffered), not when a
// length prefix announces them.
type FrameDecoder struct {
	streamBuf
}

// streamBuf is what the frame and JSON-lines decoders share: the reader,
// the buffer and its accounting, the stream offset and the sticky errors.
type streamBuf struct {
	r     io.Reader
	buf   []byte
	start int   // first unread byte in buf
	end   int   // end of valid data in buf
	off   int64 // stream offset of buf[start]
	fatal error
	rerr  error // read error seen while filling
	slabs slabs
	mem   *memBudget // the collector's budget for buf; nil: unaccounted

	last decoded // the last frame or line Decode returned an event for
}

func newStreamBuf(r io.Reader, mem *memBudget) streamBuf {
	return streamBuf{r: r, buf: make([]byte, decodeBufSize), mem: mem}
}

// buffered is the number of bytes of the next frame or line already read.
func (d *streamBuf) buffered() int { return d.end - d.start }

func (d *streamBuf) lastDecoded() *decoded { return &d.last }

// release gives the buffer back to the budget; the decoder is unusable after.
func (d *streamBuf) release() {
	d.mem.release(len(d.buf))
	d.buf, d.start, d.end = nil, 0, 0
	if d.fatal == nil {
		d.fatal = io.EOF
	}
}

// slide moves the unread bytes to the front of the buffer, into a
// first-size one when shrink, and says by how much they moved.
func (d *streamBuf) slide(shrink bool) (moved int) {
	moved = d.start
	if shrink {
		// After a large frame or line: give its buffer back rather than
		// keep it for the life of the connection.
		d.buf, d.end = d.mem.shrink(d.buf, d.start, d.end, decodeBufSize), d.end-d.start
		d.start = 0
	}
	if d.start > 0 {
		copy(d.buf, d.buf[d.start:d.end])
		d.end -= d.start
		d.start = 0
	}
	return moved
}

// grow makes the buffer size bytes long; when the budget refuses, the
// refusal (which needed need bytes) becomes the read error.
func (d *streamBuf) grow(size, need int) bool {
	nb, ok := d.mem.grow(d.buf, d.end, size)
	if !ok {
		d.rerr = &budgetError{need: need, have: d.end, limit: d.mem.limit}
		return false
	}
	d.buf = nb
	return true
}

// read reads once into the free end of the buffer; an error, or a reader
// returning 0, nil more than 100 times in a row (counted in zeroReads),
// becomes the read error.
func (d *streamBuf) read(zeroReads *int) {
	n, err := d.r.Read(d.buf[d.end:])
	d.end += n
	if err != nil {
		d.rerr = err
	} else if n == 0 {
		if *zeroReads++; *zeroReads > 100 {
			d.rerr = io.ErrNoProgress
		}
	}
}

// decoded describes the frame or line of the last event a decoder returned:
// where it started, its line number (JSON lines), its size (frame payload
// or line) and whether its body was JSON.
type decoded struct {
	off      int64
	line     int
	size     int
	jsonBody bool
}

// decodeBufSize is a decoder's first buffer (and the size it shrinks back
// to after a large frame or line).
const decodeBufSize = 64 << 10

// shrinkAbove is the buffer size above which a decoder gives its buffer
// back once what it holds fits in a first-size buffer: one large frame does
// not pin its memory for the rest of the connection.
const shrinkAbove = 1 << 20

// NewFrameDecoder returns a decoder reading frames from r.
func NewFrameDecoder(r io.Reader) *FrameDecoder { return newBudgetFrameDecoder(r, nil) }

// newBudgetFrameDecoder is NewFrameDecoder with its buffer accounted in mem;
// nil when mem cannot hold the first buffer.
func newBudgetFrameDecoder(r io.Reader, mem *memBudget) *FrameDecoder {
	if !mem.reserve(decodeBufSize) {
		return nil
	}
	return &FrameDecoder{newStreamBuf(r, mem)}
}

// SetOffset sets the stream offset reported for the next frame (use it when
// the caller already consumed bytes, e.g. the preamble).
func (d *FrameDecoder) SetOffset(off int64) { d.off = off }

// Offset is the stream offset of the next frame.
func (d *FrameDecoder) Offset() int64 { return d.off }

// fill ensures at least n unread bytes are buffered; it returns false when the
// stream ended (or failed, or the budget refused the room) first.
func (d *FrameDecoder) fill(n int) bool {
	if d.end-d.start >= n {
		return true
	}
	d.slide(len(d.buf) > shrinkAbove && n <= decodeBufSize && d.end-d.start <= decodeBufSize)
	zeroReads := 0
	for d.end < n {
		if d.rerr != nil {
			return false
		}
		if d.end == len(d.buf) && !d.grow(min(n, max(2*len(d.buf), decodeBufSize)), n) {
			return false
		}
		d.read(&zeroReads)
	}
	return true
}

// Decode returns the next event. At a clean end of stream it returns io.EOF.
// A rejected frame yields a *WireError; when its Fatal is false the decoder
// has skipped the frame and Decode may be called again. After a fatal error
// (lost framing, truncation, read error) every call returns that error.
func (d *FrameDecoder) Decode() (Event, error) {
	if d.fatal != nil {
		return Event{}, d.fatal
	}
	if !d.fill(frameHeaderLen) {
		return Event{}, d.endErr(d.end - d.start)
	}
	n := binary.LittleEndian.Uint32(d.buf[d.start:])
	if n < minFrameLen || n > MaxFrameSize {
		d.fatal = &WireError{Offset: d.off, Reason: ReasonBadLength, Fatal: true,
			Err: fmt.Errorf("length prefix %d outside [%d, %d]: framing lost", n, minFrameLen, MaxFrameSize)}
		return Event{}, d.fatal
	}
	total := frameHeaderLen + int(n)
	if !d.fill(total) {
		return Event{}, d.endErr(d.end - d.start)
	}
	frame := d.buf[d.start+frameHeaderLen : d.start+total]
	off := d.off
	d.start += total
	d.off += int64(total)
	ev, err := decodeFramePayload(frame, &d.slabs)
	if err != nil {
		we := &WireError{Offset: off, Reason: ReasonBadBody, Err: err}
		var be *bodyError
		if errors.As(err, &be) {
			we.Reason = be.reason
			if be.pos >= 0 {
				we.Err = fmt.Errorf("byte %d: %w", off+frameHeaderLen+int64(be.pos), err)
			}
		}
		return Event{}, we
	}
	d.last = decoded{off: off, size: int(n), jsonBody: frame[2]&FlagJSON != 0}
	return ev, nil
}

func (d *FrameDecoder) endErr(have int) error {
	if have == 0 && (d.rerr == nil || d.rerr == io.EOF) {
		d.fatal = io.EOF
		return io.EOF
	}
	var be *budgetError
	if errors.As(d.rerr, &be) {
		d.fatal = &WireError{Offset: d.off, Reason: ReasonOverBudget, Fatal: true,
			Err: fmt.Errorf("frame of %d bytes (%d of them read): %w", be.need-frameHeaderLen, be.have-frameHeaderLen, be)}
		return d.fatal
	}
	if d.rerr != nil && d.rerr != io.EOF {
		d.fatal = &WireError{Offset: d.off, Reason: ReasonTruncated, Fatal: true,
			Err: fmt.Errorf("read frame: %w", d.rerr)}
		return d.fatal
	}
	d.fatal = &WireError{Offset: d.off, Reason: ReasonTruncated, Fatal: true,
		Err: fmt.Errorf("stream ends inside a frame (%d bytes of it present): %w", have, io.ErrUnexpectedEOF)}
	return d.fatal
}

// DecodeFrame decodes one complete frame (length prefix included) from b and
// returns the event and the number of bytes consumed.
func DecodeFrame(b []byte) (Event, int, error) {
	if len(b) < frameHeaderLen {
		return Event{}, 0, &WireError{Reason: ReasonTruncated, Fatal: true, Err: io.ErrUnexpectedEOF}
	}
	n := binary.LittleEndian.Uint32(b)
	if n < minFrameLen || n > MaxFrameSize {
		return Event{}, 0, &WireError{Reason: ReasonBadLength, Fatal: true,
			Err: fmt.Errorf("length prefix %d outside [%d, %d]: framing lost", n, minFrameLen, MaxFrameSize)}
	}
	if uint64(len(b)) < frameHeaderLen+uint64(n) {
		return Event{}, 0, &WireError{Reason: ReasonTruncated, Fatal: true, Err: io.ErrUnexpectedEOF}
	}
	total := frameHeaderLen + int(n)
	ev, err := decodeFramePayload(b[frameHeaderLen:total], nil)
	if err != nil {
		we := &WireError{Reason: ReasonBadBody, Err: err}
		var be *bodyError
		if errors.As(err, &be) {
			we.Reason = be.reason
		}
		return Event{}, total, we
	}
	return ev, total, nil
}

// decodeFramePayload decodes the bytes after the length prefix.
func decodeFramePayload(p []byte, sl *slabs) (Event, error) {
	if p[0] != FrameVersion {
		return Event{}, &bodyError{ReasonBadVersion, 0,
			fmt.Sprintf("unsupported frame version %d (this build reads version %d)", p[0], FrameVersion)}
	}
	k := Kind(p[1])
	if !k.Valid() {
		return Event{}, &bodyError{ReasonUnknownKind, 1, fmt.Sprintf("unknown event kind %d", p[1])}
	}
	flags := p[2]
	if flags&^frameFlagsMask != 0 {
		return Event{}, &bodyError{ReasonBadFlags, 2, fmt.Sprintf("%s frame: unknown flag bits %#02x", k, flags&^frameFlagsMask)}
	}
	ev := Event{Kind: k, TS: int64(binary.LittleEndian.Uint64(p[3:]))}
	r := reader{b: p, off: frameFixedLen}
	if flags&FlagSrc != 0 {
		ev.Src.Node = r.str()
		ev.Src.Proc = r.str()
		ev.Src.PID = int32(r.u32())
	}
	if flags&FlagRun != 0 {
		ev.Run = r.str()
	}
	if flags&FlagRole != 0 {
		ev.Src.Role = r.str()
		ev.Src.Rank = int32(r.uint32v("src rank"))
	}
	if r.err != nil {
		return Event{}, r.error(k.String() + " envelope")
	}
	if err := validateSource(k, ev.Src); err != nil {
		return Event{}, &bodyError{ReasonBadValue, frameFixedLen, err.Error()}
	}
	bodyAt := r.off
	if flags&FlagJSON != 0 {
		body, err := decodeJSONBody(k, p[r.off:], true)
		if err != nil {
			return Event{}, &bodyError{jsonReason(err), r.off, fmt.Sprintf("%s JSON body: %v", k, err)}
		}
		ev.Body = body
	} else {
		if !binaryBody[k] {
			return Event{}, &bodyError{ReasonBadBody, r.off, fmt.Sprintf("%s has no binary body layout; set the JSON flag", k)}
		}
		ev.Body = decodeBinaryBody(k, &r, sl)
		if r.err == nil && r.off != len(p) {
			r.fail(ReasonBadBody, "%d trailing bytes", len(p)-r.off)
		}
		if r.err != nil {
			return Event{}, r.error(k.String() + " body")
		}
	}
	if err := validateBody(ev.Body); err != nil {
		return Event{}, &bodyError{ReasonBadValue, bodyAt, err.Error()}
	}
	return ev, nil
}
