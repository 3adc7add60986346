package repro

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/spec/outcome"
)

// fakeChat answers like a well-behaved model: a tool call while the session
// still owes tool rounds (read from "tool rounds: N" and the assistant
// messages so far), then answer(round) as plain text.
func fakeChat(t testing.TB, answer func(round int) (content, reasoning string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []struct {
				Role    string  `json:"role"`
				Content *string `json:"content"`
			} `json:"messages"`
			Tools  []json.RawMessage `json:"tools"`
			Stream bool              `json:"stream"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		round, toolRounds := 0, 0
		for _, m := range req.Messages {
			switch m.Role {
			case "assistant":
				round++
			case "user":
				if m.Content != nil {
					fmt.Sscanf((*m.Content)[strings.Index(*m.Content, "tool rounds:"):], "tool rounds: %d", &toolRounds)
				}
			}
		}
		if len(req.Tools) == 0 {
			http.Error(w, "no tools offered", 400)
			return
		}
		msg := map[string]any{"role": "assistant"}
		finish := "tool_calls"
		if round < toolRounds {
			msg["content"] = nil
			msg["tool_calls"] = []any{map[string]any{"id": fmt.Sprintf("call_%d", round), "type": "function",
				"function": map[string]string{"name": "get_weather", "arguments": `{"location":"Paris"}`}}}
		} else {
			c, rc := answer(round)
			msg["content"] = c
			if rc != "" {
				msg["reasoning_content"] = rc
			}
			finish = "stop"
		}
		if req.Stream {
			w.Header().Set("Content-Type", "text/event-stream")
			delta := map[string]any{"role": "assistant"}
			if c, ok := msg["content"].(string); ok {
				delta["content"] = c
			}
			if rc, ok := msg["reasoning_content"]; ok {
				delta["reasoning_content"] = rc
			}
			if tc, ok := msg["tool_calls"].([]any); ok {
				call := tc[0].(map[string]any)
				call["index"] = 0
				delta["tool_calls"] = []any{call}
			}
			b, _ := json.Marshal(map[string]any{"id": "chatcmpl-s", "object": "chat.completion.chunk", "choices": []any{map[string]any{"index": 0, "delta": delta}}})
			fmt.Fprintf(w, "data: %s\n\n", b)
			b, _ = json.Marshal(map[string]any{"id": "chatcmpl-s", "object": "chat.completion.chunk", "choices": []any{map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": finish}}})
			fmt.Fprintf(w, "data: %s\n\ndata: [DONE]\n\n", b)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"id": "chatcmpl-x", "object": "chat.completion",
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}}})
	}
}

func plain(int) (string, string) { return "All done: it is sunny.", "" }

func runFake(t *testing.T, h http.Handler, opts HarnessOptions) *HarnessResult {
	t.Helper()
	hs := httptest.NewServer(h)
	defer hs.Close()
	if opts.URL == "" {
		opts.URL = hs.URL
	}
	res, err := RunHarness(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestHarnessOutcomes(t *testing.T) {
	for _, stream := range []bool{false, true} {
		// rounds 4 → tool rounds 2..4: sessions with 4 tool rounds end maxrounds.
		res := runFake(t, fakeChat(t, plain), HarnessOptions{Sessions: 30, Rounds: 4, Model: "m", Stream: stream})
		o := res.Outcomes
		if o.Done == 0 || o.MaxRounds == 0 || o.Corrupted() != 0 || o.Timeout != 0 {
			t.Fatalf("stream=%v: outcomes %+v", stream, o)
		}
		for _, s := range res.PerSession {
			want := hook.OutcomeDone
			if s.ToolRounds >= 4 {
				want = hook.OutcomeMaxRounds
			}
			if s.Outcome != want || len(s.Requests) != s.Rounds || s.Rounds != min(s.ToolRounds+1, 4) {
				t.Fatalf("stream=%v: session %+v, want %s", stream, s, want)
			}
		}
		if res.FinishReasons["tool_calls"] == 0 || res.FinishReasons["stop"] != o.Done {
			t.Fatalf("finish reasons %v", res.FinishReasons)
		}
		if res.Sessions != 30 || res.Rounds != 4 || res.Wilson95[1] <= 0 {
			t.Fatalf("summary %+v", res.Summary)
		}
	}
}

func TestHarnessClassifiesLeaksAndNoTool(t *testing.T) {
	for _, m := range outcome.DefaultLeakMarkers {
		res := runFake(t, fakeChat(t, func(int) (string, string) { return "sure " + m + " get_weather", "" }),
			HarnessOptions{Sessions: 6, Rounds: 3, Model: "m"})
		if res.Outcomes.Leak+res.Outcomes.MaxRounds != 6 || res.Outcomes.Leak == 0 {
			t.Errorf("marker %q in content: %+v", m, res.Outcomes)
		}
	}
	res := runFake(t, fakeChat(t, func(int) (string, string) { return "fine", "thinking <tool_call>{...}" }),
		HarnessOptions{Sessions: 6, Rounds: 3, Model: "m", Stream: true})
	if res.Outcomes.Leak == 0 || !strings.Contains(res.PerSession[0].Reason+res.PerSession[1].Reason+res.PerSession[2].Reason, "reasoning_content") {
		t.Errorf("reasoning leak: %+v %+v", res.Outcomes, res.PerSession[:3])
	}
	// A configured marker replaces the defaults.
	res = runFake(t, fakeChat(t, func(int) (string, string) { return "BEGIN_CALL x", "" }),
		HarnessOptions{Sessions: 6, Rounds: 3, Model: "m", Classifier: outcome.Classifier{Markers: []string{"BEGIN_CALL"}}})
	if res.Outcomes.Leak == 0 {
		t.Errorf("custom marker: %+v", res.Outcomes)
	}
	// A model that never calls a tool: no_tool in round 0.
	noTool := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":"I would rather chat."},"finish_reason":"length"}]}`)
	})
	res = runFake(t, noTool, HarnessOptions{Sessions: 5, Rounds: 3, Model: "m"})
	if res.Outcomes.NoTool != 5 || res.PerSession[0].Rounds != 1 || !strings.Contains(res.PerSession[0].Reason, "length") {
		t.Errorf("no_tool: %+v %+v", res.Outcomes, res.PerSession[0])
	}
	// Malformed tool-call arguments are no usable call.
	badArgs := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, `{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{\"x\": "}}]},"finish_reason":"tool_calls"}]}`)
	})
	res = runFake(t, badArgs, HarnessOptions{Sessions: 3, Rounds: 3, Model: "m"})
	if res.Outcomes.NoTool != 3 || !strings.Contains(res.PerSession[0].Reason, "malformed") {
		t.Errorf("bad arguments: %+v %+v", res.Outcomes, res.PerSession[0])
	}
}

func TestHarnessBadServers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		h       http.HandlerFunc
		stream  bool
		outcome string
		reason  string
	}{
		{name: "html", outcome: hook.OutcomeError, reason: "HTML", h: reply("text/html; charset=utf-8", "<html><body>502 Bad Gateway</body></html>")},
		{name: "html as json", outcome: hook.OutcomeError, reason: "HTML", h: reply("application/json", "  <!DOCTYPE html><p>login</p>")},
		{name: "500", outcome: hook.OutcomeError, reason: "HTTP 500: boom", h: func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(500)
			io.WriteString(w, `{"error":{"message":"boom","type":"server_error"}}`)
		}},
		{name: "invalid json", outcome: hook.OutcomeError, reason: "invalid JSON", h: reply("", `{"id":"x","choices":[{"message":`)},
		{name: "no choices", outcome: hook.OutcomeError, reason: "no choices", h: reply("", `{"id":"x","choices":[]}`)},
		{name: "stream cut mid-event", stream: true, outcome: hook.OutcomeError, reason: "cut mid-event",
			h: reply("text/event-stream", "data: {\"id\":\"x\",\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\ndata: {\"id\":\"x\",\"cho")},
		{name: "stream without done", stream: true, outcome: hook.OutcomeError, reason: "without [DONE]",
			h: reply("text/event-stream", "data: {\"id\":\"x\",\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n")},
		{name: "stream bad json", stream: true, outcome: hook.OutcomeError, reason: "invalid JSON", h: reply("text/event-stream", "data: {nope}\n\ndata: [DONE]\n\n")},
		{name: "stream error event", stream: true, outcome: hook.OutcomeError, reason: "server error",
			h: reply("text/event-stream", "data: {\"error\":{\"message\":\"aborted\"}}\n\ndata: [DONE]\n\n")},
		{name: "hung server", outcome: hook.OutcomeTimeout, reason: "timed out", h: stall(t, nil)},
		{name: "hung stream", stream: true, outcome: hook.OutcomeTimeout, reason: "timed out",
			h: stall(t, reply("text/event-stream", "data: {\"id\":\"x\",\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Only the hung cases need a short timeout; the others get
			// one a loaded machine cannot hit by accident.
			timeout := 30 * time.Second
			if tc.outcome == hook.OutcomeTimeout {
				timeout = 300 * time.Millisecond
			}
			res := runFake(t, tc.h, HarnessOptions{Sessions: 3, Rounds: 2, Model: "m", Stream: tc.stream, Timeout: timeout})
			for _, s := range res.PerSession {
				if s.Outcome != tc.outcome || !strings.Contains(s.Reason, tc.reason) {
					t.Fatalf("session %s: %s %q, want %s containing %q", s.ID, s.Outcome, s.Reason, tc.outcome, tc.reason)
				}
			}
		})
	}
}

func TestHarnessOptionsAndEndpoint(t *testing.T) {
	for in, want := range map[string]string{
		"http://h:1":                        "http://h:1/v1/chat/completions",
		"http://h:1/":                       "http://h:1/v1/chat/completions",
		"http://h:1/v1":                     "http://h:1/v1/chat/completions",
		"https://h/api/v1/chat/completions": "https://h/api/v1/chat/completions",
	} {
		if got, err := ChatEndpoint(in); err != nil || got != want {
			t.Errorf("ChatEndpoint(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"ftp://h", "h:1", "http://", "::"} {
		if _, err := ChatEndpoint(bad); err == nil {
			t.Errorf("ChatEndpoint(%q): want an error", bad)
		}
	}
	if _, err := RunHarness(context.Background(), HarnessOptions{URL: "http://h", Sessions: -1}); err == nil || !strings.Contains(err.Error(), "sessions") {
		t.Errorf("negative sessions: %v", err)
	}
	// Model discovery.
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			io.WriteString(w, `{"object":"list","data":[{"id":"deepseek-v3"}]}`)
			return
		}
		http.NotFound(w, r)
	}))
	defer hs.Close()
	if m := DiscoverModel(context.Background(), nil, hs.URL, time.Second); m != "deepseek-v3" {
		t.Errorf("DiscoverModel = %q", m)
	}
	if m := DiscoverModel(context.Background(), nil, hs.URL+"/nope/v1", time.Second); m != "default" {
		t.Errorf("DiscoverModel on 404 = %q", m)
	}
}

// TestHarnessCancel: a cancelled run returns what it has; every session it
// cut short is accounted for as aborted, none as an error (an error counts
// as corruption).
func TestHarnessCancel(t *testing.T) {
	var n atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if n.Add(1) == 2 { // both workers are waiting: cancel the run
			cancel()
		}
		<-r.Context().Done()
	})
	hs := httptest.NewServer(h)
	defer hs.Close()
	res, err := RunHarness(ctx, HarnessOptions{URL: hs.URL, Sessions: 5, Rounds: 2, Model: "m", Concurrency: 2})
	if err == nil || res == nil || res.Aborted != 5 || res.Outcomes.Total() != 0 {
		t.Fatalf("err %v, res %+v", err, res)
	}
}

func TestClassifierAndLoops(t *testing.T) {
	var c outcome.Classifier
	for _, tc := range []struct {
		round, toolRounds int
		r                 outcome.Round
		want              string
	}{
		{0, 1, outcome.Round{ToolCalls: 1, FinishReason: "tool_calls"}, ""},
		{0, 1, outcome.Round{Content: "text", FinishReason: "stop"}, hook.OutcomeNoTool},
		{0, 1, outcome.Round{Content: "cut", FinishReason: "length"}, hook.OutcomeNoTool},
		{1, 1, outcome.Round{Content: "answer", FinishReason: "stop"}, hook.OutcomeDone},
		{1, 1, outcome.Round{Content: "x <｜tool▁calls▁begin｜>", ToolCalls: 1}, hook.OutcomeLeak},
		{2, 1, outcome.Round{ReasoningContent: "<function_calls>"}, hook.OutcomeLeak},
		{0, 2, outcome.Round{BadToolCalls: 1, FinishReason: "tool_calls"}, hook.OutcomeNoTool},
	} {
		if got, _ := c.Judge(tc.round, tc.toolRounds, tc.r); string(got) != tc.want {
			t.Errorf("Judge(%d, %d, %+v) = %q, want %q", tc.round, tc.toolRounds, tc.r, got, tc.want)
		}
	}
	if !outcome.HasLoop(strings.Repeat("the cache is full ", 5), 4, 4) || outcome.HasLoop("a b c d e f g h i j k l m n o p", 4, 4) || outcome.HasLoop("", 4, 4) {
		t.Error("HasLoop")
	}
	if ToolRoundsFor(1, 0, 1) != 1 {
		t.Error("ToolRoundsFor(rounds=1) must be 1")
	}
	seen := map[int]bool{}
	for i := range 50 {
		n := ToolRoundsFor(7, i, 4)
		if n < 2 || n > 4 {
			t.Fatalf("ToolRoundsFor(7, %d, 4) = %d", i, n)
		}
		seen[n] = true
	}
	if len(seen) != 3 {
		t.Errorf("tool rounds spread %v", seen)
	}
	if SessionTask(1, 0, 2) == SessionTask(1, 1, 2) || SessionTask(1, 0, 2) == SessionTask(2, 0, 2) || !strings.Contains(SessionTask(1, 0, 3), "tool rounds: 3") {
		t.Error("SessionTask must be distinct per session and seed and state the tool rounds")
	}
}

// BenchmarkHarnessRequests measures the harness's own overhead: requests per
// second against a server that answers every request with a canned tool call.
func BenchmarkHarnessRequests(b *testing.B) {
	canned := []byte(`{"id":"chatcmpl-b","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"location\":\"Paris\",\"unit\":\"celsius\",\"days_ahead\":3}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":900,"completion_tokens":40,"total_tokens":940}}`)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Write(canned)
	}))
	defer hs.Close()
	const rounds = 4
	sessions := max(1, b.N/rounds)
	b.ResetTimer()
	start := time.Now()
	// No tool time: the figure is the harness's own overhead.
	res, err := RunHarness(context.Background(), HarnessOptions{URL: hs.URL, Model: "m", Sessions: sessions, Rounds: rounds, Concurrency: 32, ToolTime: ToolTime{}})
	if err != nil {
		b.Fatal(err)
	}
	el := time.Since(start)
	if res.Outcomes.MaxRounds != sessions {
		b.Fatalf("outcomes %+v", res.Outcomes)
	}
	b.ReportMetric(float64(res.Requests)/el.Seconds(), "requests/s")
}

// endless is a body that never sends a newline.
type endless struct{ n int }

func (e *endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	e.n += len(p)
	return len(p), nil
}

// TestReadStreamLongLine: an event line without end is an error once it
// passes the limit, not an unbounded read; a long line within the limit is
// read whole.
func TestReadStreamLongLine(t *testing.T) {
	body := &endless{}
	if _, err := readStreamLimit(io.MultiReader(strings.NewReader("data: "), body), 1<<20); err == nil || !strings.Contains(err.Error(), "line longer than") {
		t.Fatalf("endless line: err %v", err)
	}
	if body.n > 2<<20 {
		t.Fatalf("read %d bytes of an endless line with a 1 MiB limit", body.n)
	}
	long := strings.Repeat("x", 100<<10)
	in := `data: {"id":"x","choices":[{"delta":{"content":"` + long + `"},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n"
	r, err := readStreamLimit(strings.NewReader(in), 1<<20)
	if err != nil {
		t.Fatalf("long line within the limit: %v", err)
	}
	if r.round.Content != long || r.round.FinishReason != "stop" {
		t.Fatalf("long line within the limit: content %d bytes, finish %q", len(r.round.Content), r.round.FinishReason)
	}
}
