package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Param is one parameter of a DSML tool call. String says how the value is
// carried: string="true" holds raw text, string="false" holds a JSON value.
type Param struct {
	Name   string
	String bool
	Value  string
}

// ToolCall is a parsed tool call: the function name and its arguments as a
// JSON object in parameter order (OpenAI's tool_calls[].function shape).
type ToolCall struct {
	Name      string
	Params    []Param
	Arguments string
}

// Parsed is a model output split the way an OpenAI-compatible server's DSML
// parser splits it: well-formed function_calls blocks become ToolCalls, the
// rest stays Content. Leak reports DSML markup left in Content (a malformed
// block the parser could not take).
type Parsed struct {
	Content   string
	ToolCalls []ToolCall
	Leak      bool
}

// ParseDSML parses text. It never fails: a block that is not well-formed is
// left in Content, where Leak flags it.
func ParseDSML(text string) Parsed {
	var p Parsed
	var content strings.Builder
	rest := text
	for {
		i := strings.Index(rest, TagCallsOpen)
		if i < 0 {
			content.WriteString(rest)
			break
		}
		content.WriteString(rest[:i])
		calls, n, err := parseBlock(rest[i:])
		if err != nil {
			// Malformed: keep the opening tag in content and scan on after it.
			content.WriteString(TagCallsOpen)
			rest = rest[i+len(TagCallsOpen):]
			continue
		}
		p.ToolCalls = append(p.ToolCalls, calls...)
		rest = rest[i+n:]
	}
	p.Content = strings.TrimSpace(content.String())
	p.Leak = strings.Contains(p.Content, dsmlMarker)
	return p
}

// ParseBlockError explains why a function_calls block is malformed.
type ParseBlockError struct {
	Offset int // byte offset in the block
	Reason string
}

func (e *ParseBlockError) Error() string {
	return fmt.Sprintf("malformed DSML block at byte %d: %s", e.Offset, e.Reason)
}

// parseBlock parses one block starting at s[0:] == TagCallsOpen and returns
// its calls and length.
func parseBlock(s string) ([]ToolCall, int, error) {
	pos := len(TagCallsOpen)
	fail := func(reason string) ([]ToolCall, int, error) {
		return nil, 0, &ParseBlockError{Offset: pos, Reason: reason}
	}
	skipWS := func() {
		for pos < len(s) && (s[pos] == '\n' || s[pos] == ' ' || s[pos] == '\t' || s[pos] == '\r') {
			pos++
		}
	}
	expect := func(tag string) bool {
		if strings.HasPrefix(s[pos:], tag) {
			pos += len(tag)
			return true
		}
		return false
	}
	attr := func() (string, bool) { // up to the closing quote; no markup inside
		j := strings.IndexByte(s[pos:], '"')
		if j <= 0 {
			return "", false
		}
		v := s[pos : pos+j]
		if strings.ContainsAny(v, "<>\n") || strings.Contains(v, dsmlMarker) {
			return "", false
		}
		pos += j
		return v, true
	}
	var calls []ToolCall
	for {
		skipWS()
		if expect(TagCallsClose) {
			if len(calls) == 0 {
				return fail("function_calls block without an invoke")
			}
			return calls, pos, nil
		}
		if !expect(TagInvokeOpen) {
			return fail("want invoke or </function_calls>")
		}
		name, ok := attr()
		if !ok || !expect(TagAttrEnd) {
			return fail("bad invoke name")
		}
		call := ToolCall{Name: name}
		for {
			skipWS()
			if expect(TagInvokeClose) {
				break
			}
			if !expect(TagParamOpen) {
				return fail("want parameter or </invoke>")
			}
			pname, ok := attr()
			if !ok || !expect(TagParamString) {
				return fail("bad parameter name")
			}
			var isString bool
			switch {
			case expect("true" + TagAttrEnd):
				isString = true
			case expect("false" + TagAttrEnd):
			default:
				return fail(`want string="true" or string="false"`)
			}
			j := strings.Index(s[pos:], TagParamClose)
			if j < 0 {
				return fail("unterminated parameter")
			}
			val := s[pos : pos+j]
			if strings.Contains(val, dsmlMarker) {
				return fail("markup inside a parameter value")
			}
			if !isString && !json.Valid([]byte(val)) {
				return fail("string=\"false\" value is not JSON")
			}
			pos += j + len(TagParamClose)
			call.Params = append(call.Params, Param{Name: pname, String: isString, Value: val})
		}
		call.Arguments = argumentsJSON(call.Params)
		calls = append(calls, call)
	}
}

func argumentsJSON(ps []Param) string {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, p := range ps {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(p.Name)
		b.Write(k)
		b.WriteByte(':')
		if p.String {
			v, _ := json.Marshal(p.Value)
			b.Write(v)
		} else {
			var c bytes.Buffer
			_ = json.Compact(&c, []byte(p.Value))
			b.Write(c.Bytes())
		}
	}
	b.WriteByte('}')
	return b.String()
}

// RenderDSML renders calls as one function_calls block, the exact text a
// well-behaved model emits.
func RenderDSML(calls []ToolCall) string {
	var b strings.Builder
	b.WriteString(TagCallsOpen)
	b.WriteString("\n")
	for _, c := range calls {
		b.WriteString(TagInvokeOpen + c.Name + TagAttrEnd + "\n")
		for _, p := range c.Params {
			b.WriteString(TagParamOpen + p.Name + TagParamString)
			if p.String {
				b.WriteString("true")
			} else {
				b.WriteString("false")
			}
			b.WriteString(TagAttrEnd + p.Value + TagParamClose + "\n")
		}
		b.WriteString(TagInvokeClose + "\n")
	}
	b.WriteString(TagCallsClose)
	return b.String()
}

// WireFinish is the finish reason a client sees for an engine finish reason
// and the number of tool calls the parser took from the text: "tool_calls"
// where the engine stopped after tool calls, as OpenAI-compatible servers
// say; otherwise the engine's own ("stop", "length", "abort").
func WireFinish(engine string, toolCalls int) string {
	if engine == "stop" && toolCalls > 0 {
		return "tool_calls"
	}
	return engine
}
