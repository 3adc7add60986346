package repro

import (
	"strings"
	"testing"
)

// FuzzReadStream: any byte sequence from a server is an answer or an error,
// never a panic; an accepted stream ended with [DONE].
func FuzzReadStream(f *testing.F) {
	f.Add("data: {\"id\":\"x\",\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n")
	f.Add("data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\"\"}}]}}]}\n\ndata: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\":1}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n")
	f.Add("data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":99999}]}}]}\n\ndata: [DONE]\n")
	f.Add("data: {\"error\":{\"message\":\"x\"}}\n\n")
	f.Add(": comment\r\nevent: x\r\ndata: [DONE]\r\n")
	f.Add("data: {\"id\":\"x\",\"cho")
	f.Fuzz(func(t *testing.T, in string) {
		r, err := readStream(strings.NewReader(in))
		if err == nil && (r == nil || !strings.Contains(in, "[DONE]")) {
			t.Fatalf("accepted a stream without [DONE]: %q", in)
		}
	})
}

// FuzzReadJSON: any body is an answer or an error, never a panic.
func FuzzReadJSON(f *testing.F) {
	f.Add(`{"id":"x","choices":[{"message":{"content":"hi","tool_calls":[{"id":"a","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"stop"}]}`)
	f.Add(`{"choices":[]}`)
	f.Add(`<html>`)
	f.Add(`{"choices":[{"message":{"tool_calls":[{"function":{"name":"","arguments":"[1]"}}]}}]}`)
	f.Fuzz(func(t *testing.T, in string) {
		r, err := readJSON(strings.NewReader(in))
		if err == nil && r.round.ToolCalls != len(r.calls) {
			t.Fatalf("tool calls %d vs %d", r.round.ToolCalls, len(r.calls))
		}
	})
}
