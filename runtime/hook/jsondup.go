package hook

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"unicode"
)

// Duplicate member names. encoding/json keeps the last of two members that
// match the same field and says nothing, so {"kind":"replay",…,"kind":"sched"}
// would be read as whatever came last. The decoders refuse any object with
// two members of the same name instead, compared the way encoding/json
// matches names to struct fields: after unescaping, ignoring case
// (bytes.EqualFold). Inside the two maps of the model (finding evidence and
// run.start config.extra) keys are distinct when they differ at all, so
// there only exact repeats count.

// keySpan is one member name: the bytes between its quotes.
type keySpan struct {
	start, end int
	escaped    bool // holds a backslash: compare after unescaping
}

type dupFrame struct {
	object    bool // object (keys follow) or array
	exact     bool // a map: only exact repeats are duplicates
	expectKey bool // the next string is a member name
	keysFrom  int  // this object's names start at keys[keysFrom]
	// seen replaces the linear search once an object has more than
	// linearKeys names, so no line costs quadratic time.
	seen map[string]struct{}
}

const linearKeys = 32

// findDupKey returns the first member name that repeats an earlier name of
// the same object, and its byte offset in b. b must be valid JSON (callers
// run encoding/json on it first). Its buffers start on the stack, so the
// shallow, small objects of the event model cost no allocation.
func findDupKey(b []byte) (name string, at int, found bool) {
	var stackBuf [8]dupFrame
	var keysBuf [32]keySpan
	stack, keys := stackBuf[:0], keysBuf[:0]
	var last keySpan // most recent member name: names the value that follows
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			start := i + 1
			escaped := false
			j := start
			for ; j < len(b); j++ {
				if c := b[j]; c == '\\' {
					escaped = true
					j++
				} else if c == '"' {
					break
				}
			}
			i = j
			if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].expectKey {
				top := &stack[n-1]
				top.expectKey = false
				k := keySpan{start, j, escaped}
				last = k
				if top.seen != nil {
					c := canonicalName(b, k, top.exact)
					if _, dup := top.seen[c]; dup {
						return string(unquoteKey(b, k)), start - 1, true
					}
					top.seen[c] = struct{}{}
					continue
				}
				for _, prev := range keys[top.keysFrom:] {
					if sameName(b, prev, k, top.exact) {
						return string(unquoteKey(b, k)), start - 1, true
					}
				}
				keys = append(keys, k)
				if len(keys)-top.keysFrom > linearKeys {
					top.seen = make(map[string]struct{}, 2*linearKeys)
					for _, prev := range keys[top.keysFrom:] {
						top.seen[canonicalName(b, prev, top.exact)] = struct{}{}
					}
					keys = keys[:top.keysFrom]
				}
			}
		case '{':
			exact := false
			if n := len(stack); n > 0 && stack[n-1].object {
				exact = isMapField(unquoteKey(b, last))
			}
			stack = append(stack, dupFrame{object: true, exact: exact, expectKey: true, keysFrom: len(keys)})
		case '[':
			stack = append(stack, dupFrame{keysFrom: len(keys)})
		case '}', ']':
			if n := len(stack); n > 0 {
				keys = keys[:stack[n-1].keysFrom]
				stack = stack[:n-1]
			}
		case ',':
			if n := len(stack); n > 0 && stack[n-1].object {
				stack[n-1].expectKey = true
			}
		}
	}
	return "", 0, false
}

// isMapField reports whether a member of this name holds a map of the model
// (Finding.Evidence, RunConfig.Extra, …) rather than a struct: inside a map
// only exact repeats are duplicates.
func isMapField(name []byte) bool { return mapFields[strings.ToLower(string(name))] }

// mapFields holds the lower-cased JSON names of every map-typed field of
// every body, at any depth, found by reflection so a map field added to the
// model is handled without a list to keep.
var mapFields = func() map[string]bool {
	m := map[string]bool{}
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || seen[t] {
			return
		}
		seen[t] = true
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" || !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Map {
				m[strings.ToLower(name)] = true
				continue
			}
			walk(ft)
		}
	}
	for k := KindRunStart; k < kindLimit; k++ {
		if b, err := NewBody(k); err == nil {
			walk(reflect.TypeOf(b))
		}
	}
	return m
}()

func sameName(b []byte, x, y keySpan, exact bool) bool {
	xb, yb := b[x.start:x.end], b[y.start:y.end]
	if x.escaped || y.escaped {
		xb, yb = unquoteKey(b, x), unquoteKey(b, y)
	}
	if exact {
		return bytes.Equal(xb, yb)
	}
	return bytes.EqualFold(xb, yb)
}

// canonicalName is a map key equal for two names exactly when sameName
// says so: the name itself, or with each rune replaced by the smallest rune
// of its case-folding orbit (the equivalence bytes.EqualFold tests).
func canonicalName(b []byte, k keySpan, exact bool) string {
	name := unquoteKey(b, k)
	if exact {
		return string(name)
	}
	out := make([]rune, 0, len(name))
	for _, r := range string(name) {
		low := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			low = min(low, f)
		}
		out = append(out, low)
	}
	return string(out)
}

// unquoteKey returns the name's value (escapes resolved).
func unquoteKey(b []byte, k keySpan) []byte {
	if !k.escaped {
		return b[k.start:k.end]
	}
	var s string
	if err := json.Unmarshal(b[k.start-1:k.end+1], &s); err != nil {
		return b[k.start:k.end]
	}
	return []byte(s)
}
