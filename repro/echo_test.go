package repro

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/kvcanary/kvcanary/spec/openaiwire"
)

// TestAppendCallsMatchesMessageForm pins the echoed assistant tool_calls to
// the message form every call had before the wire types moved to openaiwire:
// id, type and function always present (an empty id included), strings
// escaped as encoding/json escapes them, no calls as null.
func TestAppendCallsMatchesMessageForm(t *testing.T) {
	type fn struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	type messageCall struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function fn     `json:"function"`
	}
	cases := [][]openaiwire.ToolCall{
		nil,
		{},
		{{ID: "call_1", Type: "function", Function: openaiwire.FunctionCall{Name: "get_weather", Arguments: `{"location":"Oslo"}`}}},
		{{Type: "function", Function: openaiwire.FunctionCall{Name: "a<b>&c", Arguments: "{\"x\":\"\u2028é\"}"}},
			{ID: "2", Type: "function", Function: openaiwire.FunctionCall{Name: "z", Arguments: "{}"}}},
	}
	for i, calls := range cases {
		var want []byte
		if calls == nil {
			want, _ = json.Marshal([]messageCall(nil))
		} else {
			mc := make([]messageCall, len(calls))
			for j, c := range calls {
				mc[j] = messageCall{ID: c.ID, Type: c.Type, Function: fn{c.Function.Name, c.Function.Arguments}}
			}
			want, _ = json.Marshal(mc)
		}
		var got bytes.Buffer
		appendCalls(&got, calls)
		if !bytes.Equal(got.Bytes(), want) {
			t.Errorf("case %d: got %s, want %s", i, got.Bytes(), want)
		}
	}
}
