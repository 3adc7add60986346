package server_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/sim/server"
	"github.com/kvcanary/kvcanary/runtime/sim/server/servertest"
	"github.com/kvcanary/kvcanary/spec/openaiwire"
)

// startQuiet serves a twin with instruments and multi-stream overlap off:
// without overlap the twin does not corrupt, so schema tests see the script.
func startQuiet(t *testing.T, opts server.Options) *servertest.Twin {
	t.Helper()
	opts.Config = servertest.Config()
	opts.Config.MultiStreamOverlap = false
	return servertest.Start(t, opts)
}

func newTestServer(t *testing.T) (*server.Server, *httptest.Server) {
	t.Helper()
	tw := startQuiet(t, server.Options{})
	return tw.Server, tw.HTTP
}

// testResp is a non-streamed answer, decoded with the wire types.
type testResp = openaiwire.Response

func TestChatNonStreamingToolCallThenText(t *testing.T) {
	s, hs := newTestServer(t)
	user := `{"role":"user","content":"plan a trip; tool rounds: 1"}`
	resp, body := servertest.Post(t, hs.URL, `{"model":"m","messages":[`+user+`],"tools":`+servertest.ToolsJSON+`}`)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("status %d, content type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	var r testResp
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	if r.Object != "chat.completion" || r.Model != "m" || !strings.HasPrefix(r.ID, "chatcmpl-") || len(r.Choices) != 1 {
		t.Fatalf("envelope: %s", body)
	}
	c := r.Choices[0]
	if c.Message.Role != "assistant" || c.Index != 0 {
		t.Fatalf("message: %s", body)
	}
	recs := s.Records()
	if len(recs) != 1 || recs[0].ID != r.ID || !recs[0].ExpectToolCall {
		t.Fatalf("records %+v", recs)
	}
	if recs[0].Deviated || recs[0].Broken {
		t.Fatalf("the twin without overlap deviated: %+v", recs[0])
	}
	if c.FinishReason == nil || *c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 1 || c.Message.Content != nil {
		t.Fatalf("want one tool call with null content and finish tool_calls: %s", body)
	}
	tc := c.Message.ToolCalls[0]
	if tc.Type != "function" || tc.ID == "" || tc.Function.Name == "" || !json.Valid([]byte(tc.Function.Arguments)) {
		t.Fatalf("tool call %+v", tc)
	}
	if r.Usage == nil {
		t.Fatalf("no usage: %s", body)
	}
	if r.Usage.PromptTokens < 1000 || r.Usage.CompletionTokens == 0 || r.Usage.TotalTokens != r.Usage.PromptTokens+r.Usage.CompletionTokens {
		t.Fatalf("usage %+v", r.Usage)
	}
	// Round 1 answers the call: the script now expects plain text.
	asst, _ := json.Marshal(map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
		"id": tc.ID, "type": "function", "function": map[string]string{"name": tc.Function.Name, "arguments": tc.Function.Arguments}}}})
	msgs := user + `,` + string(asst) + `,{"role":"tool","tool_call_id":"` + tc.ID + `","content":"sunny, 21 degrees"}`
	resp, body = servertest.Post(t, hs.URL, `{"model":"m","messages":[`+msgs+`],"tools":`+servertest.ToolsJSON+`}`)
	if resp.StatusCode != 200 {
		t.Fatalf("round 1: %d %s", resp.StatusCode, body)
	}
	r = testResp{}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	recs = s.Records()
	if len(recs) != 2 || recs[1].Round != 1 || recs[1].ExpectToolCall || recs[1].Reused != 1 {
		t.Fatalf("round 1 record %+v", recs[len(recs)-1])
	}
	if recs[1].Session != recs[0].Session {
		t.Fatalf("rounds landed on sessions %s and %s", recs[0].Session, recs[1].Session)
	}
	if recs[1].Deviated || (r.Choices[0].FinishReason == nil || *r.Choices[0].FinishReason != "stop" || r.Choices[0].Message.Content == nil || *r.Choices[0].Message.Content == "") {
		t.Fatalf("want a plain-text answer: %s", body)
	}
}

func TestChatStreaming(t *testing.T) {
	s, hs := newTestServer(t)
	body := `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"stream it; tool rounds: 2"}],"tools":` + servertest.ToolsJSON + `}`
	resp, err := http.Post(hs.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	type chunk = openaiwire.Chunk
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var chunks []chunk
	done := false
	var name, args, id, finish, role string
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("line without data: %q", line)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		if done {
			t.Fatalf("data after [DONE]: %q", data)
		}
		var c chunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		if c.Object != "chat.completion.chunk" || !strings.HasPrefix(c.ID, "chatcmpl-") {
			t.Fatalf("chunk envelope %q", data)
		}
		chunks = append(chunks, c)
		for _, ch := range c.Choices {
			role += ch.Delta.Role
			for _, tc := range ch.Delta.ToolCalls {
				if tc.Index == nil || *tc.Index != 0 {
					t.Fatalf("tool call delta without index 0: %q", data)
				}
				id += tc.ID
				name += tc.Function.Name
				args += tc.Function.Arguments
			}
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			}
		}
	}
	if !done {
		t.Fatal("no [DONE]")
	}
	if role != "assistant" || finish != "tool_calls" || name == "" || id == "" || !json.Valid([]byte(args)) {
		t.Fatalf("assembled role %q finish %q call %q %q(%s)", role, finish, id, name, args)
	}
	last := chunks[len(chunks)-1]
	if len(last.Choices) != 0 || last.Usage == nil || last.Usage.TotalTokens == 0 {
		t.Fatalf("want a final usage chunk with no choices, got %+v", last)
	}
	if recs := s.Records(); len(recs) != 1 || !recs[0].Stream || recs[0].Deviated {
		t.Fatalf("records %+v", recs)
	}
}

func TestChatErrors(t *testing.T) {
	_, hs := newTestServer(t)
	user := `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		name, body, param, code string
		status                  int
	}{
		{"empty", ``, "", "invalid_json", 400},
		{"not json", `{"model":`, "", "invalid_json", 400},
		{"syntax", `{"model":"m",,}`, "", "invalid_json", 400},
		{"trailing", `{"model":"m",` + user + `} {}`, "", "invalid_json", 400},
		{"wrong type", `{"model":"m","messages":"hi"}`, "messages", "invalid_type", 400},
		{"no model", `{` + user + `}`, "model", "missing_required_parameter", 400},
		{"no messages", `{"model":"m","messages":[]}`, "messages", "missing_required_parameter", 400},
		{"bad role", `{"model":"m","messages":[{"role":"robot","content":"x"}]}`, "messages[0].role", "invalid_value", 400},
		{"no user", `{"model":"m","messages":[{"role":"system","content":"x"}]}`, "messages", "invalid_value", 400},
		{"bad content", `{"model":"m","messages":[{"role":"user","content":42}]}`, "messages[0].content", "invalid_type", 400},
		{"image part", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, "messages[0].content", "invalid_type", 400},
		{"tool without id", `{"model":"m","messages":[{"role":"user","content":"x"},{"role":"tool","content":"r"}]}`, "messages[1].tool_call_id", "missing_required_parameter", 400},
		{"tool type", `{"model":"m",` + user + `,"tools":[{"type":"retrieval"}]}`, "tools[0].type", "invalid_value", 400},
		{"tool name", `{"model":"m",` + user + `,"tools":[{"type":"function","function":{}}]}`, "tools[0].function.name", "missing_required_parameter", 400},
		{"tool choice", `{"model":"m",` + user + `,"tool_choice":"sometimes"}`, "tool_choice", "invalid_value", 400},
		{"max tokens", `{"model":"m",` + user + `,"max_tokens":0}`, "max_tokens", "invalid_value", 400},
		{"n", `{"model":"m",` + user + `,"n":3}`, "n", "unsupported_value", 400},
		{"tool rounds", `{"model":"m","messages":[{"role":"user","content":"tool rounds: 999"}]}`, "messages", "invalid_value", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := servertest.Post(t, hs.URL, tc.body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			var e struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
					Code    *string `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("error body %q: %v", body, err)
			}
			if e.Error.Type != "invalid_request_error" || e.Error.Message == "" {
				t.Fatalf("error %s", body)
			}
			param := ""
			if e.Error.Param != nil {
				param = *e.Error.Param
			}
			if param != tc.param || e.Error.Code == nil || *e.Error.Code != tc.code {
				t.Fatalf("param %q code %v, want %q %q: %s", param, e.Error.Code, tc.param, tc.code, body)
			}
		})
	}
	// A syntax error names the byte offset.
	_, body := servertest.Post(t, hs.URL, `{"model":"m",,}`)
	if !strings.Contains(string(body), "byte 13") {
		t.Errorf("syntax error does not name byte 13: %s", body)
	}
}

func TestModelsHealthAndRoutes(t *testing.T) {
	_, hs := newTestServer(t)
	get := func(path string) (int, []byte) {
		resp, err := http.Get(hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	code, body := get("/v1/models")
	var m struct {
		Object string `json:"object"`
		Data   []struct {
			ID, Object, OwnedBy string
		} `json:"data"`
	}
	if code != 200 || json.Unmarshal(body, &m) != nil || m.Object != "list" || len(m.Data) != 1 || m.Data[0].ID != server.DefaultModel || m.Data[0].Object != "model" {
		t.Fatalf("models %d %s", code, body)
	}
	if code, body := get("/health"); code != 200 || !strings.Contains(string(body), `"ok"`) {
		t.Fatalf("health %d %s", code, body)
	}
	if code, body := get("/v1/nothing"); code != 404 || !strings.Contains(string(body), `"error"`) {
		t.Fatalf("unknown route %d %s", code, body)
	}
	if code, body := get("/v1/chat/completions"); code != 405 || !strings.Contains(string(body), "POST") {
		t.Fatalf("GET chat %d %s", code, body)
	}
	if code, body := get("/debug/kvcanary/requests"); code != 200 || !strings.Contains(string(body), `"requests"`) {
		t.Fatalf("debug %d %s", code, body)
	}
}

func TestParseToolRoundsAndSessionIndex(t *testing.T) {
	for in, want := range map[string]int{"tool rounds: 3": 3, "Tool Rounds:12 then": 12, "no marker": -1, "tool rounds: x": -1, "a; tool rounds:  0.": 0} {
		if got := server.ParseToolRounds(in); got != want {
			t.Errorf("server.ParseToolRounds(%q) = %d, want %d", in, got, want)
		}
	}
	if server.SessionIndex("a") == server.SessionIndex("b") {
		t.Fatal("distinct first messages share a session")
	}
}
