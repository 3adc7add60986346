package server_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/runtime/sim/server"
	"github.com/kvcanary/kvcanary/runtime/sim/server/servertest"
	"github.com/kvcanary/kvcanary/spec/openaiwire"
)

// A model calls only the tools a request offers: the twin's script, which
// draws from its own catalogue, calls an offered one instead (repro's
// preflight offers get_weather alone, and was told "the model called
// search_web" on every run).
func TestOnlyOfferedToolsAreCalled(t *testing.T) {
	tw := startQuiet(t, server.Options{})
	for i := range 8 {
		user := fmt.Sprintf(`{"role":"user","content":"task %d; tool rounds: 1"}`, i)
		resp, body := servertest.Post(t, tw.URL, `{"model":"m","messages":[`+user+`],"tools":`+servertest.ToolsJSON+`}`)
		var r openaiwire.Response
		if resp.StatusCode != 200 || json.Unmarshal(body, &r) != nil || len(r.Choices) != 1 {
			t.Fatalf("task %d: %d %s", i, resp.StatusCode, body)
		}
		calls := r.Choices[0].Message.ToolCalls
		if len(calls) != 1 || calls[0].Function.Name != "get_weather" || !json.Valid([]byte(calls[0].Function.Arguments)) {
			t.Fatalf("task %d offered get_weather alone, got %s", i, body)
		}
	}
	for _, rec := range tw.Server.Records() {
		if rec.Deviated {
			t.Fatalf("the quiet twin deviated from its script: %+v", rec)
		}
	}
}

// A request marked as a client's probe (openaiwire.ProbeHeader) is recorded
// but belongs to no session: sim serve's sessions are the client's.
func TestProbesAreNoSession(t *testing.T) {
	tw := startQuiet(t, server.Options{Judge: func(int, int, string, int, string) string { return "" }})
	for _, probe := range []bool{true, false} {
		body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"probe %v; tool rounds: 1"}],"tools":%s}`, probe, servertest.ToolsJSON)
		req, _ := http.NewRequest(http.MethodPost, tw.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if probe {
			req.Header.Set(openaiwire.ProbeHeader, "preflight")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("probe %v: status %d", probe, resp.StatusCode)
		}
	}
	recs := tw.Server.Records()
	ss := tw.Server.Sessions()
	if len(recs) != 2 || len(ss) != 1 || ss[0].Rounds != 1 {
		t.Fatalf("%d records, sessions %+v; want 2 records, 1 session of 1 round", len(recs), ss)
	}
	for _, r := range recs {
		if r.Probe != (r.ID != ss[0].Requests[0]) {
			t.Fatalf("record %+v: probe flag, session %+v", r, ss[0])
		}
	}
}

// A corrupted session's event names the round that broke, its request and
// the reply's content, as repro's do: the dashboard's sessions table then
// shows them for the twin too.
func TestSessionEventNamesTheBrokenRound(t *testing.T) {
	judge := func(round, mustCall int, content string, calls int, finish string) string {
		if round == 1 {
			return hook.OutcomeLeak // the judge's verdict, whatever the twin said
		}
		return ""
	}
	tw := startQuiet(t, server.Options{Judge: judge})
	user := `{"role":"user","content":"plan a trip; tool rounds: 1"}`
	resp, body := servertest.Post(t, tw.URL, `{"model":"m","messages":[`+user+`],"tools":`+servertest.ToolsJSON+`}`)
	var r openaiwire.Response
	if resp.StatusCode != 200 || json.Unmarshal(body, &r) != nil || len(r.Choices[0].Message.ToolCalls) != 1 {
		t.Fatalf("round 0: %d %s", resp.StatusCode, body)
	}
	tc := r.Choices[0].Message.ToolCalls[0]
	asst, _ := json.Marshal(map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
		"id": tc.ID, "type": "function", "function": map[string]string{"name": tc.Function.Name, "arguments": tc.Function.Arguments}}}})
	msgs := user + `,` + string(asst) + `,{"role":"tool","tool_call_id":"` + tc.ID + `","content":"sunny"}`
	resp, body = servertest.Post(t, tw.URL, `{"model":"m","messages":[`+msgs+`],"tools":`+servertest.ToolsJSON+`}`)
	var r2 openaiwire.Response
	if resp.StatusCode != 200 || json.Unmarshal(body, &r2) != nil || r2.Choices[0].Message.Content == nil {
		t.Fatalf("round 1: %d %s", resp.StatusCode, body)
	}
	ss := tw.Server.Sessions()
	if len(ss) != 1 {
		t.Fatalf("sessions %+v", ss)
	}
	s := ss[0]
	if s.Outcome != hook.OutcomeLeak || s.Round != 2 || len(s.Requests) != 2 || s.Requests[s.Round-1] != r2.ID ||
		s.Excerpt == "" || s.Excerpt != *r2.Choices[0].Message.Content {
		t.Fatalf("session %+v; want leak at round 2, request %s, excerpt the reply's content %q", s, r2.ID, *r2.Choices[0].Message.Content)
	}
}
