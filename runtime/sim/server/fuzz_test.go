package server

import (
	"strings"
	"testing"
)

// FuzzDecodeRequest: any request body is a request or an OpenAI error with a
// message, never a panic; the conversation of an accepted one parses.
func FuzzDecodeRequest(f *testing.F) {
	f.Add(`{"model":"m","messages":[{"role":"user","content":"hi; tool rounds: 2"}],"tools":[{"type":"function","function":{"name":"f"}}]}`)
	f.Add(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"}]},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},{"role":"tool","tool_call_id":"c","content":"r"}],"stream":true}`)
	f.Add(`{"model":"m","messages":[{"role":"tool"}]}`)
	f.Add(`{"model":1}`)
	f.Add(`{"model":"m","messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"function"},"max_tokens":-1}`)
	f.Add(``)
	f.Fuzz(func(t *testing.T, in string) {
		req, aerr := decodeRequest(strings.NewReader(in), 1<<20)
		if aerr != nil {
			if aerr.Message == "" || aerr.Status < 400 {
				t.Fatalf("error without message or status: %+v", aerr)
			}
			return
		}
		c := parseConvo(req.Messages, req.texts)
		for _, tr := range c.turns {
			for _, call := range tr.calls {
				_ = paramsOf(call.Function.Arguments)
			}
		}
		_ = req.toolsOffered()
	})
}
