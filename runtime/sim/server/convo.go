package server

import (
	"bytes"
	"encoding/json"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/kvcanary/kvcanary/runtime/sim"
	"github.com/kvcanary/kvcanary/spec/openaiwire"
)

// ToolRoundsMarker is the phrase in a first user message that sets the number
// of tool-call rounds of its session ("tool rounds: 3").
const ToolRoundsMarker = "tool rounds:"

// SessionIndex is the script index of the conversation whose first user
// message is text: FNV-1a 64 of the text, reduced to nine decimal digits.
func SessionIndex(firstUser string) int {
	h := fnv.New64a()
	h.Write([]byte(firstUser))
	return int(h.Sum64() % 1_000_000_000)
}

// ParseToolRounds returns N from the first "tool rounds: N" in text, or -1.
func ParseToolRounds(text string) int {
	i := strings.Index(strings.ToLower(text), ToolRoundsMarker)
	if i < 0 {
		return -1
	}
	rest := strings.TrimLeft(text[i+len(ToolRoundsMarker):], " \t")
	j := 0
	for j < len(rest) && j < 4 && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	n, err := strconv.Atoi(rest[:j])
	if err != nil {
		return -1
	}
	return n
}

// turn is one earlier assistant message and the tool results that answered it.
type turn struct {
	content string
	calls   []openaiwire.ToolCall
	results []string
}

// convo is what a request's messages say about its session.
type convo struct {
	firstUser  string
	toolRounds int // -1: not stated
	turns      []turn
}

// parseConvo reads a validated request: texts are its messages' contents as
// text, parallel to msgs.
func parseConvo(msgs []openaiwire.RequestMessage, texts []string) convo {
	c := convo{toolRounds: -1}
	seenUser := false
	for i := range msgs {
		m := &msgs[i]
		switch m.Role {
		case "user":
			if !seenUser {
				seenUser = true
				c.firstUser = texts[i]
				c.toolRounds = ParseToolRounds(texts[i])
			}
		case "assistant":
			c.turns = append(c.turns, turn{content: texts[i], calls: m.ToolCalls})
		case "tool":
			if n := len(c.turns); n > 0 {
				c.turns[n-1].results = append(c.turns[n-1].results, texts[i])
			}
		}
	}
	return c
}

// signature identifies an assistant message's visible content, to recognise
// the client echoing back what this server produced.
func signature(content string, calls []openaiwire.ToolCall) string {
	var b strings.Builder
	b.WriteString(content)
	for _, c := range calls {
		b.WriteString("\x00" + c.Function.Name + "\x00" + c.Function.Arguments)
	}
	return b.String()
}

// encodeTurn re-encodes an assistant message the server did not produce: its
// content, then its tool calls rendered as the DSML block a model would emit.
func encodeTurn(v *sim.Vocab, t turn) []sim.Token {
	var calls []sim.ToolCall
	for _, c := range t.calls {
		calls = append(calls, sim.ToolCall{Name: c.Function.Name, Params: paramsOf(c.Function.Arguments)})
	}
	text := t.content
	if len(calls) > 0 {
		text += sim.RenderDSML(calls)
	}
	return v.Encode(text)
}

// paramsOf turns a JSON arguments object into DSML parameters in key order:
// strings as raw text (string="true"), other values as compact JSON. Text
// that is not a JSON object becomes one raw "arguments" parameter.
func paramsOf(args string) []sim.Param {
	dec := json.NewDecoder(strings.NewReader(args))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return []sim.Param{{Name: "arguments", String: true, Value: args}}
	}
	var ps []sim.Param
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			break
		}
		k, _ := kt.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			break
		}
		var s string
		if len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &s) == nil {
			ps = append(ps, sim.Param{Name: k, String: true, Value: s})
			continue
		}
		var c bytes.Buffer
		_ = json.Compact(&c, raw)
		ps = append(ps, sim.Param{Name: k, Value: c.String()})
	}
	return ps
}
