package hook

import "strconv"

// A fast path for the JSON-lines form: the envelope here, the body and src
// decoders generated from event.go into jsonfast_gen.go (kinds marked
// //hook:fastjson). It accepts only plain,
// canonical input (exact lower-case keys, unescaped strings, integer literals
// for integer fields) and gives up — returning ok=false — on anything else,
// so the caller falls back to encoding/json. It also gives up on what the
// slow path would reject although it parses: a member name repeated in an
// object, a 64-bit id or digest given as a JSON number, a body value that
// fails validateBody. It never decides that input is bad: errors are always
// produced by the slow path, so both paths accept exactly the same lines and
// build exactly the same events (FuzzJSONLines checks this).

// jscan is a cursor over one line. ok turns false at the first thing the fast
// path does not handle; every method is then a no-op.
type jscan struct {
	b  []byte
	i  int
	ok bool
}

func (s *jscan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *jscan) give() { s.ok = false }

// next consumes c after optional whitespace.
func (s *jscan) next(c byte) bool {
	s.ws()
	if s.ok && s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// peek returns the next non-space byte (0 at the end).
func (s *jscan) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// rawStr returns the bytes of an unescaped string value.
func (s *jscan) rawStr() []byte {
	if !s.next('"') {
		s.give()
		return nil
	}
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		if c == '"' {
			out := s.b[start:s.i]
			s.i++
			return out
		}
		if c == '\\' || c < 0x20 {
			s.give() // escapes and control characters: slow path
			return nil
		}
		s.i++
	}
	s.give()
	return nil
}

func (s *jscan) str() string {
	b := s.rawStr()
	if !s.ok {
		return ""
	}
	return intern(b)
}

// num returns the bytes of a number literal following JSON's grammar.
func (s *jscan) num() []byte {
	s.ws()
	start := s.i
	b := s.b
	if s.i < len(b) && b[s.i] == '-' {
		s.i++
	}
	if s.i >= len(b) {
		s.give()
		return nil
	}
	if b[s.i] == '0' {
		s.i++
	} else if b[s.i] >= '1' && b[s.i] <= '9' {
		s.digits()
	} else {
		s.give()
		return nil
	}
	if s.i < len(b) && b[s.i] == '.' {
		s.i++
		if s.digits() == 0 {
			s.give()
			return nil
		}
	}
	if s.i < len(b) && (b[s.i] == 'e' || b[s.i] == 'E') {
		s.i++
		if s.i < len(b) && (b[s.i] == '+' || b[s.i] == '-') {
			s.i++
		}
		if s.digits() == 0 {
			s.give()
			return nil
		}
	}
	return b[start:s.i]
}

// digits consumes a run of decimal digits and says how long it was.
func (s *jscan) digits() int {
	d := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i - d
}

// int64v parses an integer literal; fractions, exponents and overflow give up.
func (s *jscan) int64v() int64 {
	lit := s.num()
	if !s.ok {
		return 0
	}
	neg := false
	d := lit
	if len(d) > 0 && d[0] == '-' {
		neg, d = true, d[1:]
	}
	if len(d) == 0 || len(d) > 18 {
		// 19-digit values may overflow: let strconv decide.
		v, err := strconv.ParseInt(string(lit), 10, 64)
		return orGive(s, v, err)
	}
	var v int64
	for _, c := range d {
		if c < '0' || c > '9' {
			s.give()
			return 0
		}
		v = v*10 + int64(c-'0')
	}
	if neg {
		v = -v
	}
	return v
}

// narrowed converts v to T, giving up when T cannot hold it.
func narrowed[T, F int | int32 | int64 | uint32 | uint64](v F, s *jscan) T {
	if F(T(v)) != v {
		s.give()
	}
	return T(v)
}

// orGive returns v, giving up when err (a strconv error) is not nil.
func orGive[T int64 | uint64 | float64](s *jscan, v T, err error) T {
	if err != nil {
		s.give()
	}
	return v
}

func (s *jscan) intv() int { return narrowed[int](s.int64v(), s) }

func (s *jscan) uint32v() uint32 { return narrowed[uint32](s.uint64v(), s) }

func (s *jscan) int32v() int32 { return narrowed[int32](s.int64v(), s) }

func (s *jscan) uint64v() uint64 {
	lit := s.num()
	if !s.ok {
		return 0
	}
	v, err := strconv.ParseUint(string(lit), 10, 64)
	return orGive(s, v, err)
}

func (s *jscan) float64v() float64 {
	lit := s.num()
	if !s.ok {
		return 0
	}
	v, err := strconv.ParseFloat(string(lit), 64)
	return orGive(s, v, err)
}

func (s *jscan) boolv() bool {
	s.ws()
	b := s.b[s.i:]
	if len(b) >= 4 && string(b[:4]) == "true" {
		s.i += 4
		return true
	}
	if len(b) >= 5 && string(b[:5]) == "false" {
		s.i += 5
		return false
	}
	s.give()
	return false
}

// u64v parses a Dec64/Hex64 value: a decimal or 0x-hex string. A JSON
// number (refused by the contract) gives up, so the slow path says why.
func (s *jscan) u64v() uint64 {
	raw := s.rawStr()
	if !s.ok {
		return 0
	}
	var v uint64
	var err error
	if len(raw) > 2 && raw[0] == '0' && (raw[1] == 'x' || raw[1] == 'X') {
		v, err = strconv.ParseUint(string(raw[2:]), 16, 64)
	} else {
		v, err = strconv.ParseUint(string(raw), 10, 64)
	}
	return orGive(s, v, err)
}

// members iterates over an object's members without closures (closures
// would escape and allocate per line):
//
//	for m := s.members(); m.next(); {
//		switch string(m.key) { … default: s.give() }
//	}
//
// Each iteration must consume the member's value (or give up).
type members struct {
	s    *jscan
	i    int
	key  []byte
	seen uint32 // bit n: the case numbered n in once(n) was met
}

// once marks the member numbered n (each case of the switch has its own
// number) as seen, and gives up when it was seen before: a repeated name is
// an error the slow path reports.
func (m *members) once(n uint) {
	if m.seen&(1<<n) != 0 {
		m.s.give()
	}
	m.seen |= 1 << n
}

func (s *jscan) members() members {
	if !s.next('{') {
		s.give()
	}
	return members{s: s}
}

func (m *members) next() bool {
	s := m.s
	if !s.ok || s.next('}') {
		return false
	}
	if m.i > 0 && !s.next(',') {
		s.give()
		return false
	}
	m.i++
	m.key = s.rawStr()
	if !s.ok || !s.next(':') {
		s.give()
		return false
	}
	return true
}

// elems iterates over an array's elements the same way:
//
//	for e := s.elems(); e.next(); { consume one value }
//
// It repeats members' separator steps rather than sharing them: one
// iterator for both costs array-heavy lines (a room's 61 layers) about 8%.
type elems struct {
	s *jscan
	i int
}

func (s *jscan) elems() elems {
	if !s.next('[') {
		s.give()
	}
	return elems{s: s}
}

func (e *elems) next() bool {
	s := e.s
	if !s.ok || s.next(']') {
		return false
	}
	if e.i > 0 && !s.next(',') {
		s.give()
		return false
	}
	e.i++
	return true
}

func (s *jscan) strList() []string {
	out := []string{}
	for e := s.elems(); e.next(); {
		out = append(out, s.str())
	}
	return out
}

// hex64List reads an array of Hex64 strings (a number gives up, as in u64v).
func (s *jscan) hex64List() []Hex64 {
	sums := []Hex64{}
	for e := s.elems(); e.next(); {
		sums = append(sums, Hex64(s.u64v()))
	}
	return sums
}

// skip passes over any JSON value, checking its syntax.
func (s *jscan) skip() {
	switch s.peek() {
	case '{':
		for m := s.members(); m.next(); {
			s.skip()
		}
	case '[':
		for e := s.elems(); e.next(); {
			s.skip()
		}
	case '"':
		s.rawStr()
	case 't', 'f':
		s.boolv()
	case 'n':
		if len(s.b)-s.i >= 4 && string(s.b[s.i:s.i+4]) == "null" {
			s.i += 4
			return
		}
		s.give()
	default:
		s.num()
	}
}

// intList reads an array of int literals.
func (s *jscan) intList() []int {
	out := []int{}
	for e := s.elems(); e.next(); {
		out = append(out, s.intv())
	}
	return out
}

// fastLine decodes a canonical JSON line, or gives up.
func fastLine(line []byte) (Event, bool) { return fastLineSlabs(line, nil) }

func fastLineSlabs(line []byte, sl *slabs) (Event, bool) {
	s := jscan{b: line, ok: true}
	var (
		ev       Event
		v        int64
		haveV    bool
		kindName []byte
		bodyKind Kind // kind the body was decoded as
	)
	for m := s.members(); m.next(); {
		switch string(m.key) {
		case "v":
			m.once(0)
			v, haveV = s.int64v(), true
		case "kind":
			m.once(1)
			kindName = s.rawStr()
		case "ts_ns":
			m.once(2)
			ev.TS = s.int64v()
		case "run":
			m.once(3)
			ev.Run = s.str()
		case "src":
			m.once(4)
			fastSource(&s, &ev.Src)
		case "body":
			m.once(5)
			// The canonical order puts kind before body; otherwise give up.
			k := KindByName(kindName)
			if !fastBody[k] || s.peek() != '{' {
				s.give()
				break
			}
			bodyKind, ev.Body = k, fastBodyDecode(k, &s, sl)
		default:
			s.give() // unknown or differently-cased keys: slow path
		}
	}
	s.ws()
	if !s.ok || s.i != len(line) || !haveV || v != Version || ev.Body == nil || string(kindName) != bodyKind.String() {
		return Event{}, false
	}
	if validateBody(ev.Body) != nil || validateSource(bodyKind, ev.Src) != nil {
		return Event{}, false // the slow path names the value
	}
	ev.Kind = bodyKind
	return ev, true
}
