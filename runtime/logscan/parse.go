package logscan

import (
	"bytes"
	"encoding/binary"
	"strconv"
	"time"
)

// Options tune parsing. The zero value is ready to use.
type Options struct {
	// Year is used for vLLM timestamps, which print month and day but no year.
	// 0 means the current year (time.Now).
	Year int
	// Location is the zone log timestamps are in. nil means UTC.
	Location *time.Location
	// MaxLine is the longest line, in bytes, that is parsed whole; longer
	// lines are parsed by their first MaxLine bytes, the rest is skipped, and
	// they are counted in Summary.LongLines. 0 means 1 MiB (the limit
	// canary.ScanLog uses too, so both read the same lines).
	MaxLine int
}

// DefaultMaxLine is the longest line parsed when Options.MaxLine is 0.
const DefaultMaxLine = 1 << 20

func (o Options) maxLine() int {
	if o.MaxLine <= 0 {
		return DefaultMaxLine
	}
	return o.MaxLine
}

// Parser classifies and parses single lines. It keeps a one-entry timestamp
// cache, so use one Parser per goroutine.
type Parser struct {
	year int
	loc  *time.Location
	utc  bool

	cacheKey [10]byte // "YYYY-MM-DD" of the last SGLang timestamp (UTC only)
	cacheOK  bool
	cacheNS  int64 // its midnight, Unix ns
}

// NewParser returns a parser with the given options.
func NewParser(opts Options) *Parser {
	p := &Parser{year: opts.Year, loc: opts.Location}
	if p.year == 0 {
		p.year = time.Now().Year()
	}
	if p.loc == nil {
		p.loc = time.UTC
	}
	p.utc = p.loc == time.UTC
	return p
}

// Parse classifies one line (without its newline) into rec, which it resets
// first; lineNo is stored as rec.Line. Parse never fails: a line it does not
// know is KindUnrecognized.
func (p *Parser) Parse(line []byte, lineNo int64, rec *Record) {
	rec.reset(lineNo)
	for len(line) > 0 && (line[len(line)-1] == '\r' || line[len(line)-1] == ' ' || line[len(line)-1] == '\t') {
		line = line[:len(line)-1]
	}
	i := 0
	for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
		i++
	}
	if i == len(line) {
		rec.Kind = KindBlank
		return
	}
	msg, ts, eng := p.prefix(line)
	rec.TS = ts
	if !p.classify(msg, line, rec) {
		p.search(line, rec)
	}
	rec.Prefix = eng
	if rec.Kind == KindChecksumMismatch && rec.Engine == EngineUnknown {
		rec.Engine = eng
	}
}

// prefix strips a known log prefix and returns the message, its timestamp
// and the engine whose prefix it was.
func (p *Parser) prefix(line []byte) (msg []byte, ts int64, eng Engine) {
	if len(line) > 0 && line[0] == '[' {
		if ts, n, ok := p.sglangTS(line); ok {
			return line[n:], ts, EngineSGLang
		}
		return line, 0, EngineUnknown
	}
	s := line
	if len(s) > 0 && s[0] == '(' {
		// vLLM multiprocess prefix: "(APIServer pid=123) " / "(EngineCore_DP0 pid=9) ".
		j := bytes.IndexByte(s[:min(len(s), 96)], ')')
		if j < 0 || j+1 >= len(s) || s[j+1] != ' ' {
			return line, 0, EngineUnknown
		}
		s = s[j+2:]
	}
	if ts, n, ok := p.vllmTS(s); ok {
		return s[n:], ts, EngineVLLM
	}
	return line, 0, EngineUnknown
}

// classify parses msg when it starts with a known marker. It reports whether
// the marker was there; the record's kind then is final (possibly
// KindUnrecognized when the line was malformed).
func (p *Parser) classify(msg, line []byte, rec *Record) bool {
	if len(msg) == 0 {
		return false
	}
	switch msg[0] {
	case 'D':
		if sideLine(msg, line, rec, &decodeSide) {
			return true
		}
		if hasKey(msg, "Decode out of memory happened") {
			parseRetract(msg[len(mDecodeOOM):], rec)
			return true
		}
	case 'd':
		if hasKey(msg, "decode out of memory happened") {
			parseRetract(msg[len(mDecodeOOMLower):], rec)
			return true
		}
	case 'P':
		if sideLine(msg, line, rec, &prefillSide) {
			return true
		}
	case 'C':
		if hasKey(msg, "Context corruption detected: Request ") {
			parseMetadataCorruption(msg[len(mContextCorrupt):], line, rec)
			return true
		}
	case 'K':
		if hasKey(msg, "KV cache pool is full. Retract requests.") {
			parseRetract(msg[len(mPoolFull):], rec)
			return true
		}
		if hasKey(msg, "KV checksum mismatch") {
			rec.Kind, rec.Raw = KindChecksumMismatch, string(line)
			return true
		}
	case 'k':
		if hasKey(msg, "kv_canary violation:") {
			rec.Kind, rec.Engine, rec.Raw = KindCanaryViolation, EngineSGLang, string(line)
			return true
		}
	case 'E', 'A', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		if rest, idx, ok := vllmStatsHead(msg); ok {
			rec.EngineIndex = idx
			parseVLLMStats(rest, rec)
			return true
		}
	case 'S':
		if bytes.HasPrefix(msg, mSeqGroup) && bytes.Contains(msg, mPreempted) {
			rec.Kind, rec.Engine, rec.Raw, rec.Preemptions = KindPreemption, EngineVLLM, string(line), 1
			rec.Fields |= FieldPreemptions
			return true
		}
	}
	return false
}

// side holds the markers of one PD side's lines that start alike: its batch
// line ("Decode batch") and its transfer failure ("Decode transfer failed for
// request").
type side struct {
	batch, xfer []byte
	kind        Kind   // the batch line's kind
	name        string // Record.Side of its transfer failures
}

var (
	decodeSide  = side{batch: mDecodeBatch, xfer: mDecodeXfer, kind: KindDecode, name: "decode"}
	prefillSide = side{batch: mPrefillBatch, xfer: mPrefillXfer, kind: KindPrefill, name: "prefill"}
)

// sideLine parses msg when it starts with one of s's markers and reports
// whether it did.
func sideLine(msg, line []byte, rec *Record, s *side) bool {
	switch {
	case bytes.HasPrefix(msg, s.batch):
		parseBatch(msg[len(s.batch):], s.kind, rec)
	case bytes.HasPrefix(msg, s.xfer):
		parseTransferFailure(msg[len(s.xfer):], s.name, line, rec)
	default:
		return false
	}
	return true
}

// search looks for a marker anywhere in the line (journald, docker or other
// prefixes before the engine's own), parses from there, and recovers a
// timestamp from the text before it when it can.
func (p *Parser) search(line []byte, rec *Record) {
	best, which := -1, -1
	for i, m := range anywhere {
		if j := bytes.Index(line, m); j >= 0 && (best < 0 || j < best) {
			best, which = j, i
		}
	}
	if best < 0 {
		rec.Kind = KindUnrecognized
		return
	}
	msg := line[best:]
	switch which {
	case 0:
		parseBatch(msg[len(mDecodeBatch):], KindDecode, rec)
	case 1:
		parseBatch(msg[len(mPrefillBatch):], KindPrefill, rec)
	case 2:
		parseRetract(msg[len(mPoolFull):], rec)
	case 3:
		// "… out of memory happened" is preceded by "Decode " or "decode ".
		if best >= 7 && (bytes.Equal(line[best-7:best], []byte("Decode ")) || bytes.Equal(line[best-7:best], []byte("decode "))) {
			best -= 7
			parseRetract(msg[len(mOOMTail):], rec)
		} else {
			rec.Kind = KindUnrecognized
			return
		}
	case 4:
		rec.Kind, rec.Engine, rec.Raw = KindCanaryViolation, EngineSGLang, string(line)
	case 5:
		rec.Kind, rec.Raw = KindChecksumMismatch, string(line)
	case 6:
		if rest, idx, ok := vllmStatsHead(p.statsStart(line, best)); ok {
			rec.EngineIndex = idx
			parseVLLMStats(rest, rec)
		} else {
			parseVLLMStats(msg[len(mAvgPrompt):], rec)
		}
	case 7:
		rec.Kind, rec.Engine, rec.Raw, rec.Preemptions = KindPreemption, EngineVLLM, string(line), 1
		rec.Fields |= FieldPreemptions
	case 8:
		// " transfer failed for request" is preceded by "Prefill" or "Decode".
		switch {
		case best >= 7 && bytes.Equal(line[best-7:best], []byte("Prefill")):
			best -= 7
			parseTransferFailure(msg[len(mXferTail):], "prefill", line, rec)
		case best >= 6 && bytes.Equal(line[best-6:best], []byte("Decode")):
			best -= 6
			parseTransferFailure(msg[len(mXferTail):], "decode", line, rec)
		default:
			rec.Kind = KindUnrecognized
			return
		}
	case 9:
		parseMetadataCorruption(msg[len(mContextCorrupt):], line, rec)
	}
	if rec.Kind != KindUnrecognized && rec.TS == 0 {
		rec.TS = p.findTS(line[:best])
	}
}

// statsStart backs up from "Avg prompt throughput" over an "Engine NNN: " or
// "N Engines Aggregated: " head so the engine index is kept.
func (p *Parser) statsStart(line []byte, at int) []byte {
	for _, back := range []int{len("Engine 000: "), len("Engine 0000: ")} {
		if at >= back && bytes.HasPrefix(line[at-back:], mEngine) {
			return line[at-back:]
		}
	}
	return line[at:]
}

// findTS finds an SGLang or vLLM timestamp anywhere in s.
func (p *Parser) findTS(s []byte) int64 {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			if ts, _, ok := p.sglangTS(s[i:]); ok {
				return ts
			}
		case 'I', 'W', 'E', 'D', 'C':
			if i == 0 || s[i-1] == ' ' {
				if ts, _, ok := p.vllmTS(s[i:]); ok {
					return ts
				}
			}
		}
	}
	return 0
}

var (
	mDecodeBatch    = []byte("Decode batch")
	mPrefillBatch   = []byte("Prefill batch")
	mPoolFull       = []byte("KV cache pool is full. Retract requests.")
	mDecodeOOM      = []byte("Decode out of memory happened")
	mDecodeOOMLower = []byte("decode out of memory happened")
	mOOMTail        = []byte("out of memory happened")
	mCanary         = []byte("kv_canary violation:")
	mChecksum       = []byte("KV checksum mismatch")
	mAvgPrompt      = []byte("Avg prompt throughput:")
	mEngine         = []byte("Engine ")
	mSeqGroup       = []byte("Sequence group ")
	mPreempted      = []byte("preempted by PreemptionMode")
	mPrefillXfer    = []byte("Prefill transfer failed for request")
	mDecodeXfer     = []byte("Decode transfer failed for request")
	mContextCorrupt = []byte("Context corruption detected: Request ")

	mXferTail = []byte(" transfer failed for request")

	anywhere = [...][]byte{mDecodeBatch, mPrefillBatch, mPoolFull, mOOMTail, mCanary, mChecksum, mAvgPrompt, mPreempted,
		mXferTail, mContextCorrupt}
)

// ---------------------------------------------------------------------------
// Timestamps.

// sglangTS parses "[YYYY-MM-DD HH:MM:SS(.fff)?( TAGS)?] " and returns the time,
// the length of the prefix including the trailing space, and ok.
func (p *Parser) sglangTS(b []byte) (int64, int, bool) {
	if len(b) < 21 || b[0] != '[' || b[5] != '-' || b[8] != '-' || b[11] != ' ' || b[14] != ':' || b[17] != ':' {
		return 0, 0, false
	}
	h, ok1 := digits(b[12:14])
	mi, ok2 := digits(b[15:17])
	s, ok3 := digits(b[18:20])
	if !(ok1 && ok2 && ok3) || h > 23 || mi > 59 || s > 60 {
		return 0, 0, false
	}
	var base int64
	if p.cacheOK && binary.LittleEndian.Uint64(p.cacheKey[:8]) == binary.LittleEndian.Uint64(b[1:9]) &&
		p.cacheKey[8] == b[9] && p.cacheKey[9] == b[10] {
		base = p.cacheNS + int64(h*3600+mi*60+s)*int64(time.Second)
	} else {
		y, ok4 := digits(b[1:5])
		mo, ok5 := digits(b[6:8])
		d, ok6 := digits(b[9:11])
		if !(ok4 && ok5 && ok6) {
			return 0, 0, false
		}
		var ok bool
		if base, ok = p.civil(y, mo, d, h, mi, s); !ok {
			return 0, 0, false
		}
		// Cache the date's midnight (UTC only: a zone's offset can change
		// within a day, so other zones recompute every time).
		if p.utc {
			copy(p.cacheKey[:10], b[1:11])
			p.cacheNS, p.cacheOK = base-int64(h*3600+mi*60+s)*int64(time.Second), true
		}
	}
	i := 20
	frac, i := fraction(b, i)
	end := bytes.IndexByte(b[i:min(len(b), i+96)], ']')
	if end < 0 {
		return 0, 0, false
	}
	i += end + 1
	if i < len(b) && b[i] == ' ' {
		i++
	}
	return base + frac, i, true
}

var vllmLevels = [...][]byte{[]byte("INFO "), []byte("WARNING "), []byte("ERROR "), []byte("DEBUG "), []byte("CRITICAL "), []byte("WARN ")}

// vllmTS parses "LEVEL MM-DD HH:MM:SS(.fff)? [file.py:N] " (or the older
// "file.py:N] ") and returns the time, the prefix length and ok.
func (p *Parser) vllmTS(b []byte) (int64, int, bool) {
	n := 0
	for _, lv := range vllmLevels {
		if bytes.HasPrefix(b, lv) {
			n = len(lv)
			break
		}
	}
	if n == 0 || len(b) < n+14 {
		return 0, 0, false
	}
	t := b[n:]
	if t[2] != '-' || t[5] != ' ' || t[8] != ':' || t[11] != ':' {
		return 0, 0, false
	}
	mo, ok1 := digits(t[0:2])
	d, ok2 := digits(t[3:5])
	h, ok3 := digits(t[6:8])
	mi, ok4 := digits(t[9:11])
	s, ok5 := digits(t[12:14])
	if !(ok1 && ok2 && ok3 && ok4 && ok5) {
		return 0, 0, false
	}
	base, ok := p.civil(p.year, mo, d, h, mi, s)
	if !ok {
		return 0, 0, false
	}
	frac, i := fraction(t, 14)
	i += n
	// The logger location ends at the first ']' shortly after the time.
	if i < len(b) && b[i] == ' ' {
		i++
	}
	if end := bytes.IndexByte(b[i:min(len(b), i+128)], ']'); end >= 0 && bytes.IndexByte(b[i:i+end], ' ') < 0 {
		i += end + 1
		if i < len(b) && b[i] == ' ' {
			i++
		}
	}
	return base + frac, i, true
}

// fraction parses an optional ".ddd" or ",ddd" at b[i:] into nanoseconds.
func fraction(b []byte, i int) (int64, int) {
	if i >= len(b) || (b[i] != '.' && b[i] != ',') {
		return 0, i
	}
	j := i + 1
	var ns int64
	scale := int64(100_000_000)
	for j < len(b) && b[j] >= '0' && b[j] <= '9' {
		if scale > 0 {
			ns += int64(b[j]-'0') * scale
			scale /= 10
		}
		j++
	}
	if j == i+1 {
		return 0, i
	}
	return ns, j
}

func (p *Parser) civil(y, mo, d, h, mi, s int) (int64, bool) {
	if mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60 {
		return 0, false
	}
	if !p.utc {
		return time.Date(y, time.Month(mo), d, h, mi, s, 0, p.loc).UnixNano(), true
	}
	days := daysFromCivil(y, mo, d)
	return (days*86400 + int64(h*3600+mi*60+s)) * int64(time.Second), true
}

// daysFromCivil returns the days since 1970-01-01 of a proleptic Gregorian date.
func daysFromCivil(y, m, d int) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	if y < 0 && y%400 != 0 {
		era--
	}
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return int64(era)*146097 + int64(doe) - 719468
}

func digits(b []byte) (int, bool) {
	v := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, true
}

// ---------------------------------------------------------------------------
// Message bodies.

// fieldIter walks "key: value, key: value, " lists.
type fieldIter struct {
	s []byte
	i int
}

func (it *fieldIter) next() (key, val []byte, ok bool) {
	for it.i < len(it.s) && (it.s[it.i] == ' ' || it.s[it.i] == ',' || it.s[it.i] == '.') {
		it.i++
	}
	if it.i >= len(it.s) {
		return nil, nil, false
	}
	seg := it.s[it.i:]
	if j := bytes.IndexByte(seg, ','); j >= 0 {
		seg = seg[:j]
		it.i += j + 1
	} else {
		it.i = len(it.s)
	}
	c := bytes.IndexByte(seg, ':')
	if c < 0 {
		return trimSpace(seg), nil, true
	}
	return trimSpace(seg[:c]), trimSpace(seg[c+1:]), true
}

// parseBatch parses what follows "Decode batch" / "Prefill batch".
func parseBatch(rest []byte, kind Kind, rec *Record) {
	rec.Engine = EngineSGLang
	// Optional " [forward_ct]" iteration tag (SGLANG_LOG_FORWARD_ITERS).
	if len(rest) > 1 && rest[0] == ' ' && rest[1] == '[' {
		j := bytes.IndexByte(rest, ']')
		if j < 0 {
			rec.unrecognized()
			return
		}
		rest = rest[j+1:]
	}
	// Old mixed prefill: "(mixed #running-req: N). ".
	if len(rest) > 0 && rest[0] == '(' {
		j := bytes.IndexByte(rest, ')')
		if j < 0 {
			rec.unrecognized()
			return
		}
		inner := rest[1:j]
		if k := bytes.IndexByte(inner, ':'); k >= 0 {
			if v, ok := parseInt(trimSpace(inner[k+1:])); ok {
				rec.MixedRunning = v
			} else {
				rec.BadFields++
			}
		}
		rest = rest[j+1:]
	}
	if len(rest) == 0 || (rest[0] != ',' && rest[0] != '.' && rest[0] != ':') {
		rec.unrecognized()
		return
	}
	fields := rest[1:]
	if kind == KindDecode {
		fields = fastDecode(fields, rec)
	}
	it := fieldIter{s: fields}
	for {
		key, val, ok := it.next()
		if !ok {
			break
		}
		batchField(key, val, rec)
	}
	switch {
	case kind == KindDecode && rec.Fields&FieldRunningReq != 0:
		rec.Kind = KindDecode
	case kind == KindPrefill && rec.Fields&(FieldNewSeq|FieldNewToken) != 0:
		rec.Kind = KindPrefill
	default:
		rec.unrecognized()
	}
}

// fastDecode consumes the leading fields of a decode line when they come in
// the common order (#running-req, #token, token usage, cuda graph, gen
// throughput, #queue-req) and returns the rest for the general field loop,
// which handles any other order, optional fields and malformed values.
func fastDecode(s []byte, rec *Record) []byte {
	s = skipSep(s)
	var ok bool
	if s, ok = fastInt(s, "#running-req: ", &rec.RunningReq, &rec.Fields, FieldRunningReq); !ok {
		return s
	}
	if s, ok = fastInt(s, "#token: ", &rec.Tokens, &rec.Fields, FieldTokens); !ok {
		return s
	}
	if s, ok = fastFloat(s, "token usage: ", &rec.TokenUsage, &rec.Fields, FieldTokenUsage); !ok {
		return s
	}
	switch {
	case hasKey(s, "cuda graph: True"):
		rec.CUDAGraph = true
		s = skipSep(s[len("cuda graph: True"):])
		rec.Fields |= FieldCUDAGraph
	case hasKey(s, "cuda graph: False"):
		s = skipSep(s[len("cuda graph: False"):])
		rec.Fields |= FieldCUDAGraph
	}
	if s, ok = fastFloat(s, "gen throughput (token/s): ", &rec.GenThroughput, &rec.Fields, FieldGenThroughput); !ok {
		return s
	}
	s, _ = fastInt(s, "#queue-req: ", &rec.QueueReq, &rec.Fields, FieldQueueReq)
	return s
}

func hasKey(s []byte, key string) bool {
	return len(s) >= len(key) && string(s[:len(key)]) == key
}

func skipSep(s []byte) []byte {
	for len(s) > 0 && (s[0] == ',' || s[0] == ' ') {
		s = s[1:]
	}
	return s
}

// fastInt parses `key` then a decimal ending at ',' or the end of s into
// *dst, sets bit in *fields and returns the rest. On any surprise it returns
// s unchanged and false, and stores nothing.
func fastInt(s []byte, key string, dst *int, fields *uint32, bit uint32) ([]byte, bool) {
	if !hasKey(s, key) {
		return s, false
	}
	i, v := len(key), 0
	for ; i < len(s) && i-len(key) < 18 && s[i] >= '0' && s[i] <= '9'; i++ {
		v = v*10 + int(s[i]-'0')
	}
	if i == len(key) || (i < len(s) && s[i] != ',') {
		return s, false
	}
	*dst, *fields = v, *fields|bit
	return skipSep(s[i:]), true
}

// fastFloat is fastInt for "digits[.digits]". Up to 15 significant digits it
// computes mantissa / 10^frac, one correctly rounded division (so the value
// equals strconv.ParseFloat's); anything else gives up and leaves the field
// to the general loop.
func fastFloat(s []byte, key string, dst *float64, fields *uint32, bit uint32) ([]byte, bool) {
	if !hasKey(s, key) {
		return s, false
	}
	mant, nd, frac, n := decimal(s[len(key):])
	i := len(key) + n
	if (i < len(s) && s[i] != ',') || nd == 0 || nd > 15 || frac == 0 {
		return s, false
	}
	f := float64(mant)
	if frac > 0 {
		f /= pow10[frac]
	}
	*dst, *fields = f, *fields|bit
	return skipSep(s[i:]), true
}

// decimal scans "digits[.digits]" at the start of b and returns the digits
// as one integer, how many digits there were, how many of them follow the
// point (-1: no point; 0: a point and nothing after it) and how many bytes it
// consumed: it stops at the first byte that is neither a digit nor the first
// point after a digit. mant is only meaningful for nd <= 19.
func decimal(b []byte) (mant uint64, nd, frac, n int) {
	frac = -1
	for ; n < len(b); n++ {
		switch c := b[n]; {
		case c >= '0' && c <= '9':
			mant = mant*10 + uint64(c-'0')
			nd++
			if frac >= 0 {
				frac++
			}
		case c == '.' && frac < 0 && nd > 0:
			frac = 0
		default:
			return mant, nd, frac, n
		}
	}
	return mant, nd, frac, n
}

// batchField stores one key=value field of a batch line. The plain integer
// fields are switch cases, not a table: a map lookup and an indirect store
// per field made the lines that miss fastDecode 40% slower.
func batchField(key, val []byte, rec *Record) {
	var bad bool
	switch string(key) {
	case "#running-req":
		rec.RunningReq, bad = setInt(val, &rec.Fields, FieldRunningReq)
	case "#queue-req":
		rec.QueueReq, bad = setInt(val, &rec.Fields, FieldQueueReq)
	case "#new-seq":
		rec.NewSeq, bad = setInt(val, &rec.Fields, FieldNewSeq)
	case "#new-token":
		rec.NewToken, bad = setInt(val, &rec.Fields, FieldNewToken)
	case "#cached-token":
		rec.CachedToken, bad = setInt(val, &rec.Fields, FieldCachedToken)
	case "#prealloc-req", "#unbootstrapped-req":
		rec.PreallocReq, bad = setInt(val, &rec.Fields, FieldPrealloc)
	case "#transfer-req":
		rec.TransferReq, bad = setInt(val, &rec.Fields, FieldPrealloc)
	case "#inflight-req", "#transferring-req":
		rec.InflightReq, bad = setInt(val, &rec.Fields, FieldPrealloc)
	case "#retracted-req":
		rec.RetractedQueue, bad = setInt(val, &rec.Fields, FieldPrealloc)
	case "#token", "#full token", "#swa token", "#used page num":
		v, b := setInt(val, &rec.Fields, FieldTokens)
		rec.Tokens, bad = max(rec.Tokens, v), b
	case "token usage", "full token usage", "swa token usage", "page usage":
		// A value that does not parse gives v 0, which leaves the max as it is.
		v, b := setFloat(val, &rec.Fields, FieldTokenUsage)
		rec.TokenUsage, bad = max(rec.TokenUsage, v), b
	case "cuda graph", "cpu graph":
		switch string(val) {
		case "True", "true":
			rec.CUDAGraph = true
			rec.Fields |= FieldCUDAGraph
		case "False", "false":
			rec.Fields |= FieldCUDAGraph
		default:
			bad = true
		}
	case "gen throughput (token/s)":
		bad = keep(val, parseFloat, &rec.GenThroughput, &rec.Fields, FieldGenThroughput)
	case "cache hit rate":
		v, ok := parsePercent(val)
		rec.CacheHitRate, bad = v, !ok
	case "input throughput (token/s)":
		v, ok := parseFloat(val)
		rec.InputThroughput, bad = v, !ok
	case "pre-allocated usage":
		rec.PreallocUsage, bad = setFloat(val, &rec.Fields, FieldPrealloc)
	case "accept len":
		rec.AcceptLen, bad = setFloat(val, &rec.Fields, FieldAcceptLen)
	case "accept rate":
		rec.AcceptRate, bad = setFloat(val, &rec.Fields, FieldAcceptRate)
	}
	// Fields this package does not model (mamba usage, itl, …) are skipped.
	rec.bad(bad)
}

// parseTransferFailure parses what follows SGLang's "Prefill transfer failed
// for request" / "Decode transfer failed for request": Python f-string
// "{x=}" fields, " rank=4 req.rid='af2f…' req.bootstrap_room=6989861766352545488"
// (decode: "decode_req.req.rid=…", "decode_req.req.bootstrap_room=…"), then
// optionally " with exception <text>". The rid is a repr: quoted with ' (or
// " when it holds a ') and may hold spaces. A missing or malformed field is a
// bad field; the marker alone makes the line a transfer failure.
func parseTransferFailure(rest []byte, side string, line []byte, rec *Record) {
	rec.Kind, rec.Engine, rec.Side, rec.Raw = KindTransferFailure, EngineSGLang, side, string(line)
	rec.Rank = -1
	if j := bytes.Index(rest, mWithException); j >= 0 {
		rec.FailureText = string(trimSpace(rest[j+len(mWithException):]))
		rest = rest[:j]
	}
	for {
		rest = skipSep(rest)
		if len(rest) == 0 {
			break
		}
		eq := bytes.IndexByte(rest, '=')
		sp := bytes.IndexByte(rest, ' ')
		if eq < 0 || (sp >= 0 && sp < eq) {
			// A word without "=": not a field of this format.
			rec.BadFields++
			if sp < 0 {
				break
			}
			rest = rest[sp:]
			continue
		}
		key := rest[:eq]
		val, next := pyValue(rest[eq+1:])
		rest = next
		switch {
		case string(key) == "rank":
			rec.bad(keep(val, parseInt, &rec.Rank, &rec.Fields, FieldRank))
		case bytes.HasSuffix(key, []byte("rid")):
			rec.Rid = string(unquotePy(val))
			rec.Fields |= FieldRid
		case bytes.HasSuffix(key, []byte("bootstrap_room")):
			if v, ok := parseUint64(val); ok {
				rec.Room = v
				rec.Fields |= FieldRoom
			} else if string(val) != "None" {
				rec.BadFields++
			}
		}
	}
	for _, f := range [...]uint32{FieldRank, FieldRid, FieldRoom} {
		if rec.Fields&f == 0 {
			rec.BadFields++
		}
	}
}

var mWithException = []byte(" with exception ")

// pyValue splits one f-string "{x=}" value off s: a quoted repr up to its
// closing quote (spaces included), else up to the next space.
func pyValue(s []byte) (val, rest []byte) {
	if len(s) > 0 && (s[0] == '\'' || s[0] == '"') {
		if j := bytes.IndexByte(s[1:], s[0]); j >= 0 {
			return s[:j+2], s[j+2:]
		}
	}
	if j := bytes.IndexByte(s, ' '); j >= 0 {
		return s[:j], s[j:]
	}
	return s, nil
}

// unquotePy strips the quotes of a Python str repr ('x' or "x").
func unquotePy(b []byte) []byte {
	if len(b) >= 2 && (b[0] == '\'' || b[0] == '"') && b[len(b)-1] == b[0] {
		return b[1 : len(b)-1]
	}
	return b
}

// parseMetadataCorruption parses what follows SGLang's decode-side "Context
// corruption detected: Request ": "<rid> (bootstrap_room=<a>) received
// metadata from bootstrap_room=<b>. Metadata buffer index: <i>. This
// indicates metadata buffer index collision." The rid is printed bare (no
// repr), so it ends at the last " (bootstrap_room=".
func parseMetadataCorruption(rest []byte, line []byte, rec *Record) {
	rec.Kind, rec.Engine, rec.Raw = KindMetadataCorruption, EngineSGLang, string(line)
	rec.MetaIndex = -1
	const own, from, index = " (bootstrap_room=", "received metadata from bootstrap_room=", "Metadata buffer index: "
	j := bytes.LastIndex(rest, []byte(own))
	if j < 0 {
		rec.BadFields += 3
		return
	}
	rec.Rid = string(rest[:j])
	rec.Fields |= FieldRid
	rest = rest[j+len(own):]
	a, rest, _ := cut(rest, []byte(")"))
	rec.bad(keep(a, parseUint64, &rec.Room, &rec.Fields, FieldRoom))
	rec.bad(keep(digitsAfter(rest, from), parseUint64, &rec.FromRoom, &rec.Fields, FieldFrom))
	rec.bad(keep(digitsAfter(rest, index), parseInt, &rec.MetaIndex, &rec.Fields, FieldIndex))
}

// digitsAfter returns the run of digits that follows label in s: empty when
// none does, nil when label is not in s.
func digitsAfter(s []byte, label string) []byte {
	k := bytes.Index(s, []byte(label))
	if k < 0 {
		return nil
	}
	b := s[k+len(label):]
	n := 0
	for n < len(b) && b[n] >= '0' && b[n] <= '9' {
		n++
	}
	return b[:n]
}

// parseUint64 parses a decimal uint64 (bootstrap rooms use all 64 bits' worth
// of 19-20 digit values, past parseInt's 18).
func parseUint64(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseUint(string(b), 10, 64)
	return v, err == nil
}

// parseRetract parses what follows the retraction marker.
func parseRetract(rest []byte, rec *Record) {
	rec.Engine = EngineSGLang
	it := fieldIter{s: rest}
	for {
		key, val, ok := it.next()
		if !ok {
			break
		}
		switch string(key) {
		case "#retracted_reqs":
			v, bad := setInt(val, &rec.Fields, FieldRetracted)
			rec.Retracted = v
			if bad {
				rec.BadFields++
			}
		case "#new_tokens_gained":
			if v, ok := parseInt(val); ok {
				rec.NewTokensGained = v
			} else {
				rec.BadFields++
			}
		case "#new_token_ratio":
			a, b, ok := cut(val, []byte("->"))
			x, ok1 := parseFloat(trimSpace(a))
			y, ok2 := parseFloat(trimSpace(b))
			if ok && ok1 && ok2 {
				rec.RatioBefore, rec.RatioAfter = x, y
				rec.Fields |= FieldNewTokenRatio
			} else {
				rec.BadFields++
			}
		}
	}
	if rec.Fields&FieldRetracted != 0 {
		rec.Kind = KindRetract
	} else {
		rec.unrecognized()
	}
}

// vllmStatsHead recognizes "Engine 000: Avg prompt throughput:",
// "4 Engines Aggregated: Avg prompt throughput:" and a bare
// "Avg prompt throughput:" and returns what follows, with the engine index.
func vllmStatsHead(msg []byte) ([]byte, int, bool) {
	idx := -1
	switch {
	case bytes.HasPrefix(msg, mEngine):
		rest := msg[len(mEngine):]
		j := 0
		for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
			j++
		}
		if j == 0 || j > 6 || len(rest) < j+2 || rest[j] != ':' || rest[j+1] != ' ' {
			return nil, 0, false
		}
		idx, _ = digits(rest[:j])
		msg = rest[j+2:]
	case msg[0] >= '0' && msg[0] <= '9':
		j := bytes.Index(msg[:min(len(msg), 32)], []byte(" Engines Aggregated: "))
		if j < 0 {
			return nil, 0, false
		}
		msg = msg[j+len(" Engines Aggregated: "):]
	}
	if !bytes.HasPrefix(msg, mAvgPrompt) {
		return nil, 0, false
	}
	return msg[len(mAvgPrompt):], idx, true
}

// parseVLLMStats parses what follows "Avg prompt throughput:".
func parseVLLMStats(rest []byte, rec *Record) {
	rec.Engine = EngineVLLM
	// The first value belongs to "Avg prompt throughput".
	it := fieldIter{s: rest}
	first := true
	for {
		key, val, ok := it.next()
		if !ok {
			break
		}
		if first {
			// key holds the value ("0.0 tokens/s"): there was no key before it.
			first = false
			if v, ok := parseFloat(firstWord(key)); ok {
				rec.PromptThroughput = v
			} else {
				rec.BadFields++
			}
			continue
		}
		var bad bool
		switch string(key) {
		case "Avg generation throughput":
			bad = keep(firstWord(val), parseFloat, &rec.GenThroughput, &rec.Fields, FieldGenThroughput)
		case "Running":
			rec.RunningReq, bad = setInt(firstWord(val), &rec.Fields, FieldRunningReq)
		case "Waiting", "Pending":
			rec.QueueReq, bad = setInt(firstWord(val), &rec.Fields, FieldQueueReq)
		case "Preemptions":
			rec.Preemptions, bad = setInt(firstWord(val), &rec.Fields, FieldPreemptions)
		case "GPU KV cache usage":
			if bytes.HasPrefix(val, []byte("active ")) {
				val = val[len("active "):]
			}
			if string(val) == "n/a" {
				break
			}
			bad = keep(val, parsePercent, &rec.TokenUsage, &rec.Fields, FieldTokenUsage)
		case "Prefix cache hit rate":
			if string(val) == "n/a" {
				break
			}
			v, ok := parsePercent(val)
			rec.PrefixHitRate, bad = v, !ok
		}
		if bad {
			rec.BadFields++
		}
	}
	if rec.Fields&FieldRunningReq != 0 {
		rec.Kind = KindEngineStats
	} else {
		rec.unrecognized()
	}
}

// ---------------------------------------------------------------------------
// Values.

// keep parses val with parse; when it parses it stores the value in *dst
// and sets bit in *fields. It reports whether val was bad (and then stores
// nothing).
func keep[T int | uint64 | float64](val []byte, parse func([]byte) (T, bool), dst *T, fields *uint32, bit uint32) (bad bool) {
	v, ok := parse(val)
	if ok {
		*dst, *fields = v, *fields|bit
	}
	return !ok
}

// setInt parses val and sets bit in *fields when it parses. It returns the
// value (0 when it does not parse) and whether it was bad.
func setInt(val []byte, fields *uint32, bit uint32) (v int, bad bool) {
	bad = keep(val, parseInt, &v, fields, bit)
	return v, bad
}

// setFloat is setInt for decimals.
func setFloat(val []byte, fields *uint32, bit uint32) (v float64, bad bool) {
	bad = keep(val, parseFloat, &v, fields, bit)
	return v, bad
}

// parseInt parses a non-negative decimal of at most 18 digits.
func parseInt(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	return digits(b)
}

var pow10 = [...]float64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17}

// parseFloat parses "123", "0.97", "2622.21". A mantissa of at most 15 digits
// divided by an exact power of ten is one correctly rounded operation, so the
// result equals strconv.ParseFloat's; anything else goes to strconv.
func parseFloat(b []byte) (float64, bool) { return parseScaled(b, 0) }

// parseScaled parses a decimal and divides it by 10^shift in the same single
// rounding (parsePercent uses shift 2, so "99.9" gives exactly 0.999).
func parseScaled(b []byte, shift int) (float64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	mant, nd, frac, n := decimal(b)
	if n < len(b) || frac == 0 || nd > 15 {
		return slowScaled(b, shift)
	}
	e := max(frac, 0) + shift
	if e == 0 {
		return float64(mant), true
	}
	return float64(mant) / pow10[e], true
}

func slowScaled(b []byte, shift int) (float64, bool) {
	s := string(b)
	if shift != 0 {
		s += "e-" + strconv.Itoa(shift)
	}
	return slowFloat([]byte(s))
}

func slowFloat(b []byte) (float64, bool) {
	v, err := strconv.ParseFloat(string(b), 64)
	if err != nil || v != v || v < 0 || v > 1e300 {
		return 0, false
	}
	return v, true
}

// parsePercent parses "12.3%" (optionally followed by ".") into 0.123.
func parsePercent(b []byte) (float64, bool) {
	if len(b) > 0 && b[len(b)-1] == '.' {
		b = b[:len(b)-1]
	}
	if len(b) == 0 || b[len(b)-1] != '%' {
		return 0, false
	}
	return parseScaled(b[:len(b)-1], 2)
}

func firstWord(b []byte) []byte {
	if j := bytes.IndexByte(b, ' '); j >= 0 {
		return b[:j]
	}
	return b
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '.') {
		b = b[:len(b)-1]
	}
	return b
}

func cut(s, sep []byte) (before, after []byte, ok bool) {
	if i := bytes.Index(s, sep); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return s, nil, false
}
