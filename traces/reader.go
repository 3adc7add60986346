package traces

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// RecordType tells the records of a bundle apart.
type RecordType uint8

// Record types (FORMAT.md "Records").
const (
	RecordEvent    RecordType = iota + 1 // {"v":1,"kind":...}
	RecordManifest                       // {"kvtrace":{...}}
	RecordFooter                         // {"kvtrace_footer":{...}}
)

func (t RecordType) String() string {
	switch t {
	case RecordEvent:
		return "event"
	case RecordManifest:
		return "manifest"
	case RecordFooter:
		return "footer"
	}
	return "record(" + strconv.Itoa(int(t)) + ")"
}

// Position locates a record or frame in a bundle.
type Position struct {
	Frame  uint64 `json:"frame"`          // 1-based zstd frame number (0: between frames)
	Offset int64  `json:"offset"`         // byte offset of the frame (or skipped bytes) in the file
	Line   uint64 `json:"line,omitempty"` // 1-based line of the decoded stream (manifest is line 1)
}

func (p Position) String() string {
	s := ""
	if p.Frame > 0 {
		s = "frame " + strconv.FormatUint(p.Frame, 10) + " "
	}
	s += "at byte " + strconv.FormatInt(p.Offset, 10)
	if p.Line > 0 {
		s += " line " + strconv.FormatUint(p.Line, 10)
	}
	return s
}

// Skip is one piece of a bundle the reader could not use.
type Skip struct {
	Position
	Reason string `json:"reason"`
}

func (s Skip) String() string { return s.Position.String() + ": " + s.Reason }

// damagedHeadBytes is how far into a file that does not start with a zstd
// magic the reader looks for a frame before refusing it.
const damagedHeadBytes = 8 << 10

// maxSkipDetails bounds the skip list kept for reports; Skipped counts all.
const maxSkipDetails = 100

// Reader reads a bundle record by record. Not safe for concurrent use.
type Reader struct {
	name    string
	scan    *frameScanner // nil once decoding ahead
	ahead   *decodeAhead
	aheadOK bool
	closer  io.Closer
	offset  int64 // file offset after the last frame handed to the reader

	frameNo  uint64 // frames seen (complete or skipped)
	decoded  uint64 // bytes of decoded content
	frameOff int64  // offset of the frame content comes from
	content  []byte // decoded frame
	pos      int    // read position in content
	carry    []byte // a line continuing into the next frame
	lineNo   uint64
	done     bool

	manifest Manifest
	// manifestLine is returned by the first NextRecord; newReader has
	// already consumed it from the stream.
	manifestLine []byte
	manifestPos  Position
	footer       *Footer
	validate     bool

	truncated   bool
	truncReason string
	skipped     uint64
	skips       []Skip

	// manifestDamage says why the manifest could not be read when the
	// bundle's first frame is damaged but later frames are not.
	manifestDamage string
	// pending is a line read before it could be returned (the first line
	// after a damaged manifest frame).
	pending    []byte
	pendingPos Position

	ctx      context.Context
	stop     *atomic.Bool // set once ctx is done; checked per frame and line
	stopFunc func() bool
	longLine bool // discarding the rest of a line over maxReadLineBytes

	lineSkips, frameSkips int    // details kept in skips, per quota
	work                  uint64 // decoded bytes plus lineWork per line, for the budget
	ratio                 int64  // the budget's decoded bytes per compressed byte (decodeRatio)
	// budgetAt is the decoded bytes and compressed offset where the budget
	// first stopped the read (zero: it never did).
	budgetAt [2]int64
}

// lineWork is what each line costs in the decompression budget beyond its
// bytes, so a bomb of tiny junk lines is cut as early as one of long ones.
const lineWork = 64

// Open opens the bundle file at path and reads its manifest.
func Open(path string) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open bundle: %w", err)
	}
	r, err := newReader(context.Background(), f, path)
	if err != nil {
		f.Close()
		return nil, err
	}
	r.closer = f
	return r, nil
}

// IsBundle reports whether the file at path starts with the zstd magic, as
// every bundle does; commands that take a bundle or a text log tell them
// apart with it. A file shorter than the magic is not a bundle. The error
// is the open or read error, naming path.
func IsBundle(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, fmt.Errorf("open input: %w", err)
	}
	defer f.Close()
	var head [4]byte
	n, err := io.ReadFull(f, head[:])
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		return false, fmt.Errorf("read %s: %w", path, err)
	}
	return n == len(head) && bytes.Equal(head[:], zstdMagicBytes), nil
}

// NewReader reads a bundle from rd and reads its manifest.
func NewReader(rd io.Reader) (*Reader, error) { return newReader(context.Background(), rd, "bundle") }

// NewReaderContext reads a bundle from rd, named name in messages, and reads
// its manifest. Once ctx is done the reader stops within one line or frame:
// its calls return an error wrapping ctx's cause (context.Canceled). Close
// does not close rd.
func NewReaderContext(ctx context.Context, rd io.Reader, name string) (*Reader, error) {
	return newReader(ctx, rd, name)
}

func newReader(ctx context.Context, rd io.Reader, name string) (*Reader, error) {
	if _, err := decoder(); err != nil {
		return nil, fmt.Errorf("read bundle %s: zstd decoder: %w", name, err)
	}
	stop := new(atomic.Bool)
	scan := &frameScanner{name: name, src: source{r: rd}, stop: stop, ctx: ctx, ratio: decodeRatio}
	r := &Reader{name: name, scan: scan, validate: true, aheadOK: true, ctx: ctx, stop: stop, ratio: decodeRatio}
	r.stopFunc = context.AfterFunc(ctx, func() { stop.Store(true) })
	rd2, err := r.readManifest()
	if err != nil {
		r.Close()
	}
	return rd2, err
}

// readManifest reads the first record, which must be the manifest; when the
// first frame is damaged and later frames hold events, the bundle is read
// without it (ManifestDamage says why).
func (r *Reader) readManifest() (*Reader, error) {
	name, scan := r.name, r.scan
	if src := &scan.src; !src.fill(1) {
		if src.err != nil {
			return nil, fmt.Errorf("read bundle %s: %w", name, src.err)
		}
		return nil, fmt.Errorf("read bundle %s: empty file", name)
	} else if src.fill(4) && !bytes.Equal(src.peek(0, 4), zstdMagicBytes) {
		// A bundle whose first bytes are damaged still holds frames: read
		// on when one starts early on (the reader skips the damage).
		src.fill(damagedHeadBytes)
		if bytes.Index(src.peek(0, min(src.avail(), damagedHeadBytes)), zstdMagicBytes) < 0 {
			return nil, fmt.Errorf("read bundle %s: not a zstd stream: starts with % x, want % x", name, src.peek(0, 4), zstdMagicBytes)
		}
	}
	line, pos, err := r.nextLine()
	if err == nil && r.skipped > 0 && r.skips[0].Offset == 0 && pos.Line == 1 {
		// The first frame was damaged (a checksum failure, a bad block) but a
		// later one decoded: keep reading without the manifest if what
		// follows is bundle records.
		if typ, _, _, _, _ := classify(line); typ == RecordEvent || typ == RecordFooter {
			sk := &r.skips[0]
			sk.Reason = "manifest frame: " + sk.Reason
			r.manifestDamage = sk.String()
			r.pending, r.pendingPos = append([]byte(nil), line...), pos
			return r, nil
		}
	}
	if err != nil {
		if err == io.EOF {
			if r.truncated {
				return nil, fmt.Errorf("read bundle %s: not a bundle: %s before a manifest", name, r.truncReason)
			}
			if r.skipped > 0 {
				return nil, fmt.Errorf("read bundle %s: not a bundle: %s", name, r.skips[0])
			}
			return nil, fmt.Errorf("read bundle %s: not a bundle: no records", name)
		}
		return nil, fmt.Errorf("read bundle %s: %w", name, err)
	}
	if typ, _, _, _, reason := classify(line); typ != RecordManifest {
		switch {
		case typ != 0:
			reason = "a " + typ.String()
		case reason == "":
			reason = "a blank line"
		}
		return nil, fmt.Errorf("read bundle %s: not a bundle: first record (%s) is %s, want a {\"kvtrace\":…} manifest", name, pos, reason)
	}
	var mr manifestRecord
	if err := json.Unmarshal(line, &mr); err != nil || mr.Manifest == nil {
		return nil, fmt.Errorf("read bundle %s: manifest (%s): %v", name, pos, errOr(err, "empty"))
	}
	if err := CheckVersion(mr.Manifest.FormatVersion); err != nil {
		return nil, fmt.Errorf("read bundle %s: %w", name, err)
	}
	r.manifest = *mr.Manifest
	r.manifestLine = append([]byte(nil), line...)
	r.manifestPos = pos
	return r, nil
}

// ManifestDamage is "" when the manifest was read, else why it was lost:
// the bundle's first frame was damaged (the message names the frame, the
// byte and the failure, e.g. a checksum failure) while later frames were
// not. Manifest then returns the zero Manifest.
func (r *Reader) ManifestDamage() string { return r.manifestDamage }

func errOr(err error, s string) string {
	if err != nil {
		return err.Error()
	}
	return s
}

// Name is the file name (or "bundle" for NewReader) used in messages.
func (r *Reader) Name() string { return r.name }

// Frames is the number of zstd frames met so far (decoded, skipped or cut).
func (r *Reader) Frames() uint64 { return r.frameNo }

// Offset is the byte offset in the file up to which the reader has consumed.
func (r *Reader) Offset() int64 { return r.offset }

// DecodedBytes is the number of JSON-line bytes decoded so far.
func (r *Reader) DecodedBytes() uint64 { return r.decoded }

// Manifest returns the bundle's manifest.
func (r *Reader) Manifest() Manifest { return r.manifest }

// Footer returns the footer once it has been read (normally after Next
// returned io.EOF); false when the bundle has none (yet).
func (r *Reader) Footer() (*Footer, bool) { return r.footer, r.footer != nil }

// Truncated reports whether the bundle was not closed cleanly: it ends inside
// a frame, or it has no footer. Meaningful once Next has returned io.EOF.
func (r *Reader) Truncated() bool { return r.truncated || (r.done && r.footer == nil) }

// TruncationReason says why Truncated is true ("" when it is not).
func (r *Reader) TruncationReason() string {
	switch {
	case r.truncated:
		return r.truncReason
	case r.done && r.footer == nil && r.budgetAt != [2]int64{}:
		return fmt.Sprintf("stopped at the decompression budget after %d bytes from %d compressed bytes; a re-compressed bundle? (the budget allows %d:1; more is read as a decompression bomb) the events after that point were not read",
			r.budgetAt[0], r.budgetAt[1], r.ratio)
	case r.done && r.footer == nil:
		return "no footer: the writer did not close the bundle"
	}
	return ""
}

// Skipped is the number of frames, byte runs and lines skipped so far.
func (r *Reader) Skipped() uint64 { return r.skipped }

// Skips lists the first skipped pieces with their positions (at most 100
// lines and 100 frames or byte runs).
func (r *Reader) Skips() []Skip { return r.skips }

// SetValidate chooses whether NextLine checks that each event line is valid
// JSON (default true). Next always decodes fully. Turn it off only for trusted
// bundles when speed matters.
func (r *Reader) SetValidate(on bool) { r.validate = on }

// Close stops decoding ahead and closes the file opened by Open. Always
// Close a reader you stop reading before its end.
func (r *Reader) Close() error {
	if r.stopFunc != nil {
		r.stopFunc()
	}
	if r.ahead != nil {
		r.ahead.stop.stop()
	}
	if r.closer == nil {
		return nil
	}
	err := r.closer.Close()
	r.closer = nil
	return err
}

func (r *Reader) skip(p Position, format string, a ...any) {
	r.skipped++
	if len(a) == 1 && r.budgetAt == [2]int64{} {
		if why, ok := a[0].(string); ok && strings.HasPrefix(why, budgetMark) {
			r.budgetAt = [2]int64{int64(r.decoded), max(r.offset, 1)}
		}
	}
	// Lines and frames have a detail quota each, so a flood of bad lines
	// never hides a damaged frame.
	n := &r.lineSkips
	if p.Line == 0 {
		n = &r.frameSkips
	}
	if *n < maxSkipDetails {
		*n++
		r.skips = append(r.skips, Skip{Position: p, Reason: fmt.Sprintf(format, a...)})
	}
}

// All ranges over the events left in r, as Next returns them, and ends at
// the end of the bundle. A read error ends it too: it comes as the last
// pair, with a zero event.
func (r *Reader) All() iter.Seq2[hook.Event, error] {
	return func(yield func(hook.Event, error) bool) {
		for {
			ev, err := r.Next()
			if err == io.EOF || !yield(ev, err) || err != nil {
				return
			}
		}
	}
}

// Next returns the next event, decoded. Lines that are not valid events are
// skipped and counted. It returns io.EOF at the end of the bundle, including
// the end of a truncated one, and a non-nil other error only when reading the
// underlying file fails.
func (r *Reader) Next() (hook.Event, error) {
	for {
		rec, err := r.nextRecord(false)
		if err != nil {
			return hook.Event{}, err
		}
		if rec.Type != RecordEvent {
			continue
		}
		ev, _, err := hook.DecodeJSONLine(rec.Line)
		if err != nil {
			r.skip(rec.Pos, "%v", err)
			continue
		}
		return ev, nil
	}
}

// NextLine returns the next event line (without newline) and its kind and
// timestamp, without decoding the body. The line is valid until the next call.
// Lines that are not JSON (when validating, the default), have an event
// version other than 1 or an unknown kind are skipped and counted.
func (r *Reader) NextLine() (line []byte, kind hook.Kind, ts int64, err error) {
	for {
		rec, err := r.NextRecord()
		if err != nil {
			return nil, 0, 0, err
		}
		if rec.Type == RecordEvent {
			return rec.Line, rec.Kind, rec.TS, nil
		}
	}
}

// RawRecord is one line of a bundle as NextRecord returns it.
type RawRecord struct {
	Type RecordType
	Line []byte    // without newline; valid until the next call
	Kind hook.Kind // events only
	TS   int64     // events only
	Pos  Position
}

// NextRecord returns the next record of any type (manifest and footer
// included) as its raw line. Event lines are checked as by NextLine.
func (r *Reader) NextRecord() (RawRecord, error) { return r.nextRecord(true) }

// nextRecord returns the next classified line; unusable lines are skipped
// and counted here. Footers are parsed and kept as they pass. With
// checkEvents, event lines get their kind and ts_ns and, when validating, a
// JSON check; without, the caller decodes them fully.
func (r *Reader) nextRecord(checkEvents bool) (RawRecord, error) {
	if line := r.manifestLine; line != nil {
		r.manifestLine = nil
		return RawRecord{Type: RecordManifest, Line: line, Pos: r.manifestPos}, nil
	}
	for {
		line, pos, err := r.nextLine()
		if err != nil {
			return RawRecord{Pos: pos}, err
		}
		rec := RawRecord{Line: line, Pos: pos}
		var fast bool
		var reason string
		rec.Type, rec.Kind, rec.TS, fast, reason = classify(line)
		switch rec.Type {
		case 0:
			if reason != "" {
				r.skip(pos, "%s", reason)
			}
			continue
		case RecordEvent:
			if !checkEvents {
				break
			}
			if fast && r.validate && !json.Valid(line) {
				r.skip(pos, "event line is not valid JSON")
				continue
			}
			if !fast {
				rec.Kind, rec.TS, err = hook.PeekJSONLine(line)
				if err != nil {
					r.skip(pos, "%v", err)
					continue
				}
			}
		case RecordManifest:
			if pos.Line != 1 {
				r.skip(pos, "second manifest (concatenated bundles?)")
				continue
			}
		case RecordFooter:
			var fr footerRecord
			if err := json.Unmarshal(line, &fr); err != nil || fr.Footer == nil {
				r.skip(pos, "bad footer: %s", errOr(err, "empty"))
				continue
			}
			r.footer = fr.Footer
		}
		return rec, nil
	}
}

// nextLine returns the next line of the decoded stream.
func (r *Reader) nextLine() ([]byte, Position, error) {
	if r.pending != nil {
		line := r.pending
		r.pending = nil
		return line, r.pendingPos, nil
	}
	for {
		if r.stop.Load() {
			r.done = true
			return nil, Position{}, r.interrupted()
		}
		if r.pos < len(r.content) {
			rest := r.content[r.pos:]
			i := bytes.IndexByte(rest, '\n')
			if i < 0 { // continues in the next frame
				if r.longLine || len(r.carry)+len(rest) > maxReadLineBytes {
					if !r.longLine {
						r.skip(Position{Frame: r.frameNo, Offset: r.frameOff, Line: r.lineNo + 1}, "line longer than %d bytes", maxReadLineBytes)
					}
					r.longLine, r.carry = true, nil
				} else {
					r.carry = append(r.carry, rest...)
				}
				r.pos = len(r.content)
				continue
			}
			line := rest[:i]
			r.pos += i + 1
			if r.work += uint64(i) + 1 + lineWork; r.work > uint64(allowance(r.offset, r.ratio)) {
				r.skip(Position{Frame: r.frameNo, Offset: r.frameOff, Line: r.lineNo + 1},
					"%s", budgetReason(int64(r.work), r.offset, r.ratio)+" (counting "+strconv.Itoa(lineWork)+" bytes per line)")
				r.pos, r.carry, r.longLine = len(r.content), nil, false
				continue
			}
			if r.longLine { // the end of a skipped over-long line
				r.longLine = false
				r.lineNo++
				continue
			}
			if len(r.carry)+len(line) > maxReadLineBytes {
				r.lineNo++
				r.skip(Position{Frame: r.frameNo, Offset: r.frameOff, Line: r.lineNo}, "line longer than %d bytes", maxReadLineBytes)
				r.carry = nil
				continue
			}
			if len(r.carry) > 0 {
				r.carry = append(r.carry, line...)
				line = r.carry
				r.carry = r.carry[:0:0] // line keeps the old buffer
			}
			r.lineNo++
			return line, Position{Frame: r.frameNo, Offset: r.frameOff, Line: r.lineNo}, nil
		}
		if r.done {
			return nil, Position{}, io.EOF
		}
		if err := r.nextFrame(); err != nil {
			if r.stop.Load() {
				return nil, Position{}, r.interrupted()
			}
			return nil, Position{}, err
		}
		if r.done && len(r.carry) > 0 {
			pos := Position{Frame: r.frameNo, Offset: r.frameOff, Line: r.lineNo + 1}
			if r.truncated {
				r.skip(pos, "partial line at the end of a truncated bundle (%d bytes)", len(r.carry))
				r.carry = nil
				continue
			}
			line := r.carry // a last line without newline
			r.carry = nil
			r.lineNo++
			return line, pos, nil
		}
	}
}

// nextFrame moves to the next decoded frame, recording the damage met on
// the way. At the end of input it sets done (and truncated when the input
// ends inside a frame).
func (r *Reader) nextFrame() error {
	var res frameResult
	switch {
	case r.ahead != nil:
		r.ahead.recycle(r.content)
		r.content = nil
		var ok bool
		res, ok = <-r.ahead.results
		if !ok {
			return fmt.Errorf("read bundle %s: reader closed", r.name)
		}
	case r.aheadOK && r.scan.frameNo >= 1:
		// The manifest frame is read in place; from the next frame on,
		// decode ahead on another goroutine.
		r.ahead = startDecodeAhead(r.scan)
		r.scan = nil
		runtime.AddCleanup(r, func(s *stopper) { s.stop() }, r.ahead.stop)
		return r.nextFrame()
	default:
		res = r.scan.next(r.content)
	}
	for _, sk := range res.skips {
		r.skip(sk.Position, "%s", sk.Reason)
	}
	r.frameNo, r.offset = res.frameNo, res.end
	if res.err != nil {
		r.done = true
		return res.err
	}
	if res.done {
		r.done = true
		if res.truncated != "" {
			r.truncated, r.truncReason = true, res.truncated
		}
		return nil
	}
	r.content = res.content
	r.decoded += uint64(len(res.content))
	r.pos = 0
	r.frameOff = res.off
	return nil
}

// interrupted is the error of a read stopped by the reader's context.
func (r *Reader) interrupted() error {
	return fmt.Errorf("read bundle %s at byte %d: interrupted (%w)", r.name, r.offset, context.Cause(r.ctx))
}

// classify tells what a line is. Type 0 is "skip": blank lines have reason
// "", unusable ones a reason. For events in the writer's canonical form, fast
// is true and kind and ts are set.
func classify(line []byte) (typ RecordType, kind hook.Kind, ts int64, fast bool, reason string) {
	if kind, ts, ok := hook.PeekCanonicalJSONLine(line); ok {
		return RecordEvent, kind, ts, true, ""
	}
	switch {
	case bytes.HasPrefix(line, []byte(`{"`+footerKey+`":`)):
		return RecordFooter, 0, 0, false, ""
	case bytes.HasPrefix(line, []byte(`{"`+manifestKey+`":`)):
		return RecordManifest, 0, 0, false, ""
	}
	if len(bytes.TrimSpace(line)) == 0 {
		return 0, 0, 0, false, ""
	}
	var probe struct {
		V        *int            `json:"v"`
		Kind     *string         `json:"kind"`
		Manifest json.RawMessage `json:"kvtrace"`
		Footer   json.RawMessage `json:"kvtrace_footer"`
	}
	if err := json.Unmarshal(line, &probe); err != nil {
		return 0, 0, 0, false, fmt.Sprintf("not a JSON object: %v", err)
	}
	switch {
	case probe.Manifest != nil:
		return RecordManifest, 0, 0, false, ""
	case probe.Footer != nil:
		return RecordFooter, 0, 0, false, ""
	case probe.V != nil || probe.Kind != nil:
		return RecordEvent, 0, 0, false, ""
	}
	return 0, 0, 0, false, "unknown record: none of the keys v, kind, kvtrace, kvtrace_footer"
}
