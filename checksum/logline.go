package checksum

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/spec/kvlayout"
)

// LineKind says what ParseLine found in one log line.
type LineKind uint8

// Line kinds.
const (
	LineOther     LineKind = iota // no checksum marker: an ordinary log line (or garbage)
	LineRecord                    // a kvcanary room_checksum record
	LineEvidence                  // an SGLang "KV checksum mismatch" abort
	LineMalformed                 // the room_checksum marker, but an unusable record
)

func (k LineKind) String() string {
	switch k {
	case LineOther:
		return "other"
	case LineRecord:
		return "record"
	case LineEvidence:
		return "evidence"
	case LineMalformed:
		return "malformed"
	}
	return fmt.Sprintf("LineKind(%d)", uint8(k))
}

// DigestError is a malformed digest on an otherwise valid room_checksum line.
type DigestError struct {
	Field string // "bsum", "xxh3", "page_xxh3", "layer_bsum" or "page_bsum"
	Value string // the offending value, truncated
}

func (e *DigestError) Error() string {
	return fmt.Sprintf("malformed %s digest %q: want decimal or 0x-hex unsigned 64-bit", e.Field, e.Value)
}

// Markers (SPEC.md §6, §7). Both contain "checksum", so a line is searched once.
var (
	markWord     = []byte("checksum")
	markRecPre   = []byte("kvcanary room_")
	markEviPre   = []byte("KV ")
	markEviPost  = []byte(" mismatch")
	keyBootstrap = []byte("bootstrap_room")
	keyRoom      = []byte("room")
)

// Field bits of a room_checksum line.
const (
	fSide = 1 << iota
	fRoom
	fSeqLen
	fPages
	fBsum
	fXXH3
	fDtype
	fPageXXH3
	fRequest
	fRank
	fStage
	fLayers
	fLayerBsum
	fPageBsum
	fRequired = fSide | fRoom | fSeqLen | fPages | fBsum | fXXH3
)

// maxCount bounds seq_len and pages so they fit the compact compare entry.
const maxCount = 1<<31 - 1

// LineParser parses log lines. It reuses one page-digest buffer, so a
// Record's PageXXH3 is valid only until the next Parse. The zero value is ready.
type LineParser struct {
	pages     []uint64
	layers    []int
	layerBsum []uint64
	pageBsum  []uint64
	Reason    string // why the last LineMalformed line was rejected
}

// Parse reads one log line (without its newline) into rec. Its PageXXH3,
// Layers, LayerBsum and PageBsum are valid until the next Parse. It returns
// LineOther for lines without a marker, LineMalformed (with p.Reason) for a
// room_checksum line missing a required field or holding a bad side, room,
// seq_len or pages, and a *DigestError for a malformed digest. Parse never
// panics on any input.
func (p *LineParser) Parse(line []byte, rec *Record) (LineKind, error) {
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	i := 0
	for {
		j := bytes.Index(line[i:], markWord)
		if j < 0 {
			return LineOther, nil
		}
		j += i
		end := j + len(markWord)
		if j >= len(markRecPre) && bytes.Equal(line[j-len(markRecPre):j], markRecPre) &&
			(end == len(line) || line[end] == ' ' || line[end] == '\t') {
			return p.parseRecord(line[end:], rec)
		}
		if j >= len(markEviPre) && bytes.Equal(line[j-len(markEviPre):j], markEviPre) && bytes.HasPrefix(line[end:], markEviPost) {
			parseEvidence(line, rec)
			return LineEvidence, nil
		}
		i = end
	}
}

func (p *LineParser) malformed(format string, a ...any) (LineKind, error) {
	p.Reason = fmt.Sprintf(format, a...)
	return LineMalformed, nil
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' }

func (p *LineParser) parseRecord(rest []byte, rec *Record) (LineKind, error) {
	*rec = Record{HasRoom: true}
	p.pages, p.layers, p.layerBsum, p.pageBsum = p.pages[:0], p.layers[:0], p.layerBsum[:0], p.pageBsum[:0]
	var seen uint
	for len(rest) > 0 {
		for len(rest) > 0 && isBlank(rest[0]) {
			rest = rest[1:]
		}
		k := 0
		for k < len(rest) && !isBlank(rest[k]) {
			k++
		}
		tok := rest[:k]
		rest = rest[k:]
		eq := bytes.IndexByte(tok, '=')
		if eq <= 0 {
			continue
		}
		key, val := tok[:eq], tok[eq+1:]
		var bit uint
		var bad string // why val is malformed: p.Reason is "<key> <val> <bad>"
		var err error  // a malformed digest
		switch string(key) {
		case "side":
			bit = fSide
			switch string(val) {
			case "prefill":
				rec.Side = hook.SidePrefill
			case "decode":
				rec.Side = hook.SideDecode
			default:
				bad = "is neither prefill nor decode"
			}
		case "room":
			bit = fRoom
			var ok bool
			if rec.Room, ok = parseU64(val); !ok {
				bad = "is not a number"
			}
		case "seq_len":
			bit = fSeqLen
			rec.SeqLen, bad = parseCount(val)
		case "pages":
			bit = fPages
			rec.Pages, bad = parseCount(val)
		case "bsum":
			bit = fBsum
			rec.Bsum, err = parseDigest(val, "bsum")
		case "xxh3":
			bit = fXXH3
			rec.XXH3, err = parseDigest(val, "xxh3")
		case "dtype":
			bit = fDtype
			switch string(val) {
			case kvlayout.DtypeBF16:
				rec.Dtype = kvlayout.DtypeBF16
			case kvlayout.DtypeFP8:
				rec.Dtype = kvlayout.DtypeFP8
			default:
				rec.Dtype = string(val)
			}
		case "request":
			bit = fRequest
			rec.Request = string(val)
		case "page_xxh3":
			bit = fPageXXH3
			p.pages, err = digestList(val, "page_xxh3", p.pages)
			rec.PageXXH3 = p.pages
		case "layer_bsum":
			bit = fLayerBsum
			p.layerBsum, err = digestList(val, "layer_bsum", p.layerBsum)
			rec.LayerBsum = p.layerBsum
		case "page_bsum":
			bit = fPageBsum
			p.pageBsum, err = digestList(val, "page_bsum", p.pageBsum)
			rec.PageBsum = p.pageBsum
		case "rank":
			bit = fRank
			rec.Rank, bad = parseCount(val)
		case "stage":
			bit = fStage
			if st, ok := stageCode(string(val)); ok && st != 0 {
				rec.Stage = stageNames[st]
			} else {
				bad = "is not one of sent|transferred|admitted"
			}
		case "layers":
			bit = fLayers
			for f := range bytes.SplitSeq(val, []byte{','}) {
				v, ok := parseU64(f)
				if !ok || v > maxCount {
					return p.malformed("layers entry %q is not a layer id", trunc(f))
				}
				if n := len(p.layers); n > 0 && int(v) <= p.layers[n-1] {
					return p.malformed("layers %q are not strictly ascending", trunc(val))
				}
				p.layers = append(p.layers, int(v))
			}
			rec.Layers = p.layers
		default:
			continue
		}
		switch {
		case err != nil:
			return LineMalformed, err
		case bad != "":
			return p.malformed("%s %q %s", key, trunc(val), bad)
		case seen&bit != 0:
			return p.malformed("%s given twice", key)
		}
		seen |= bit
	}
	if seen&fRequired != fRequired {
		var missing []string
		for _, f := range []struct {
			bit  uint
			name string
		}{{fSide, "side"}, {fRoom, "room"}, {fSeqLen, "seq_len"}, {fPages, "pages"}, {fBsum, "bsum"}, {fXXH3, "xxh3"}} {
			if seen&f.bit == 0 {
				missing = append(missing, f.name)
			}
		}
		return p.malformed("missing %v", missing)
	}
	if len(rec.LayerBsum) != len(rec.Layers) {
		return p.malformed("layer_bsum has %d digests for %d layers", len(rec.LayerBsum), len(rec.Layers))
	}
	return LineRecord, nil
}

// parseCount parses a seq_len, pages or rank value; bad says why it is not one.
func parseCount(val []byte) (n int, bad string) {
	v, ok := parseU64(val)
	if !ok || v > maxCount {
		return 0, "is not a number below 2^31"
	}
	return int(v), ""
}

// parseDigest parses one digest of field.
func parseDigest(val []byte, field string) (uint64, error) {
	v, ok := parseU64(val)
	if !ok {
		return 0, &DigestError{Field: field, Value: trunc(val)}
	}
	return v, nil
}

// digestList parses comma-separated digests into dst[:0].
func digestList(val []byte, field string, dst []uint64) ([]uint64, error) {
	for len(val) > 0 {
		c := bytes.IndexByte(val, ',')
		if c < 0 {
			c = len(val)
		}
		v, err := parseDigest(val[:c], field)
		if err != nil {
			return dst, err
		}
		dst = append(dst, v)
		if c == len(val) {
			break
		}
		val = val[c+1:]
		if len(val) == 0 {
			return dst, &DigestError{Field: field, Value: "(trailing comma)"}
		}
	}
	return dst, nil
}

// parseEvidence fills rec from an SGLang "KV checksum mismatch" line: the room
// from bootstrap_room or room (=, :, or blanks before the number), the request
// from rid=, request_id= or "request ".
func parseEvidence(line []byte, rec *Record) {
	*rec = Record{Evidence: true, Side: hook.SideDecode}
	if v, ok := numberAfterKey(line, keyBootstrap); ok {
		rec.Room, rec.HasRoom = v, true
	} else if v, ok := numberAfterKey(line, keyRoom); ok {
		rec.Room, rec.HasRoom = v, true
	}
	for _, key := range []string{"rid=", "request_id=", "request "} {
		if i := bytes.Index(line, []byte(key)); i >= 0 {
			v := line[i+len(key):]
			k := 0
			for k < len(v) && !isBlank(v[k]) && v[k] != ',' && v[k] != ';' && v[k] != ')' && v[k] != '"' && v[k] != '\'' {
				k++
			}
			if k > 0 && v[k-1] == ':' || k > 0 && v[k-1] == '.' {
				k--
			}
			if k > 0 {
				rec.Request = string(v[:k])
				break
			}
		}
	}
}

// numberAfterKey finds key as a whole word (not preceded by a letter, digit or
// underscore, unless key itself is bootstrap_room) followed by =, : or blanks
// and a number, and returns the number.
func numberAfterKey(line, key []byte) (uint64, bool) {
	i := 0
	for {
		j := bytes.Index(line[i:], key)
		if j < 0 {
			return 0, false
		}
		j += i
		i = j + len(key)
		if j > 0 && isWordByte(line[j-1]) {
			continue
		}
		v := line[i:]
		k := 0
		for k < len(v) && (v[k] == '=' || v[k] == ':' || isBlank(v[k])) {
			k++
		}
		if k == 0 {
			continue
		}
		v = v[k:]
		n := 0
		for n < len(v) && isWordByte(v[n]) {
			n++
		}
		if x, ok := parseU64(v[:n]); ok {
			return x, true
		}
	}
}

func isWordByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// parseU64 parses decimal or 0x/0X-prefixed hex without allocating.
func parseU64(b []byte) (uint64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	if len(b) > 2 && b[0] == '0' && (b[1] == 'x' || b[1] == 'X') {
		b = b[2:]
		if len(b) > 16 {
			for len(b) > 16 && b[0] == '0' {
				b = b[1:]
			}
			if len(b) > 16 {
				return 0, false
			}
		}
		var v uint64
		for _, c := range b {
			var d byte
			switch {
			case c >= '0' && c <= '9':
				d = c - '0'
			case c >= 'a' && c <= 'f':
				d = c - 'a' + 10
			case c >= 'A' && c <= 'F':
				d = c - 'A' + 10
			default:
				return 0, false
			}
			v = v<<4 | uint64(d)
		}
		return v, true
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

func trunc(b []byte) string {
	const n = 40
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// maxLine bounds one log line; longer lines are skipped and counted.
const maxLine = 1 << 20

// firstLines is how many line numbers of each skipped kind LogStats keeps.
const firstLines = 5

// LogStats counts what ScanLog read.
type LogStats struct {
	Bytes          int64   `json:"bytes"`
	Lines          int64   `json:"lines"`
	Records        int64   `json:"records"`
	Evidence       int64   `json:"evidence,omitempty"`
	Skipped        int64   `json:"skipped"`                   // lines without a checksum record
	SkippedLines   []int64 `json:"skipped_lines,omitempty"`   // first few
	Malformed      int64   `json:"malformed"`                 // room_checksum lines that could not be used
	MalformedLines []int64 `json:"malformed_lines,omitempty"` // first few
	FirstReason    string  `json:"first_malformed_reason,omitempty"`
}

// LineError names the input and line of a malformed digest.
type LineError struct {
	Name string
	Line int64
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("%s:%d: %v", e.Name, e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

// ScanLog reads a text log from r (name is used in errors) and calls fn for
// every record and evidence line. The record is reused between calls. Lines
// without a marker are skipped and counted; malformed room_checksum lines are
// skipped and counted with their line numbers; a malformed digest stops the
// scan with a *LineError. An error from fn stops the scan and is returned.
func ScanLog(r io.Reader, name string, fn func(*Record) error) (LogStats, error) {
	var st LogStats
	var p LineParser
	var rec Record
	buf := make([]byte, 256<<10)
	start, end := 0, 0
	overlong := false // discarding the rest of a too-long line
	handle := func(line []byte) error {
		st.Lines++
		if overlong {
			overlong = false
			st.skip(&st.Malformed, &st.MalformedLines)
			if st.FirstReason == "" {
				st.FirstReason = fmt.Sprintf("line %d is longer than %d bytes", st.Lines, maxLine)
			}
			return nil
		}
		kind, err := p.Parse(line, &rec)
		if err != nil {
			return &LineError{Name: name, Line: st.Lines, Err: err}
		}
		switch kind {
		case LineOther:
			st.skip(&st.Skipped, &st.SkippedLines)
			return nil
		case LineMalformed:
			st.skip(&st.Malformed, &st.MalformedLines)
			if st.FirstReason == "" {
				st.FirstReason = fmt.Sprintf("line %d: %s", st.Lines, p.Reason)
			}
			return nil
		case LineEvidence:
			st.Evidence++
		case LineRecord:
			st.Records++
		}
		rec.Line = st.Lines
		return fn(&rec)
	}
	for {
		n, rerr := r.Read(buf[end:])
		st.Bytes += int64(n)
		end += n
		for {
			i := bytes.IndexByte(buf[start:end], '\n')
			if i < 0 {
				break
			}
			if err := handle(buf[start : start+i]); err != nil {
				return st, err
			}
			start += i + 1
		}
		if rerr != nil {
			if !errors.Is(rerr, io.EOF) {
				return st, fmt.Errorf("read %s at byte %d: %w", name, st.Bytes, rerr)
			}
			if start < end || overlong {
				if err := handle(buf[start:end]); err != nil {
					return st, err
				}
			}
			return st, nil
		}
		if start > 0 {
			end = copy(buf, buf[start:end])
			start = 0
		}
		if end == len(buf) {
			if len(buf) < maxLine {
				nb := make([]byte, 2*len(buf))
				copy(nb, buf[:end])
				buf = nb
			} else {
				overlong = true // keep reading; the line's end is counted once
				end = 0
			}
		}
	}
}

func (st *LogStats) skip(n *int64, lines *[]int64) {
	*n++
	if len(*lines) < firstLines {
		*lines = append(*lines, st.Lines)
	}
}
