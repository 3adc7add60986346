package repro

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/spec/runconfig"
)

func TestReadConversations(t *testing.T) {
	in := "\xef\xbb\xbf" + `{"messages":[{"role":"user","content":"hi"}]}

{"id":"two","messages":[{"role":"system","content":"s"},{"role":"user","content":"u"},{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"lookup","arguments":"{}"}}]},{"role":"tool","tool_call_id":"a","content":"r"}],"tools":[{"type":"function","function":{"name":"lookup","parameters":{"type":"object"}}}],"expect_tools":["lookup","lookup"],"rounds":5,"model":"x","stream":true}
{"messages":[{"role":"user","content":"u"}],"tool_rounds":0}
`
	cs, err := ReadConversations(strings.NewReader(in), "f.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 3 {
		t.Fatalf("%d conversations", len(cs))
	}
	c0, c1, c2 := cs[0], cs[1], cs[2]
	if c0.ID != "c000" || c0.Line != 1 || c0.ToolRounds != 1 || c0.Rounds != 0 || c0.tools != nil || len(c0.messages) != 1 {
		t.Errorf("defaults: %+v", c0)
	}
	if c1.ID != "two" || c1.Line != 3 || c1.ToolRounds != 2 || c1.Rounds != 5 || len(c1.messages) != 4 || !json.Valid(c1.tools) ||
		!strings.Contains(string(c1.tools), `"lookup"`) {
		t.Errorf("full line: %+v tools %s", c1, c1.tools)
	}
	if c2.ID != "c002" || c2.ToolRounds != 0 {
		t.Errorf("tool_rounds 0: %+v", c2)
	}
	for _, tc := range []struct{ line, want string }{
		{`{"messages":[{"role":"user"`, "f.jsonl:2: invalid JSON object"},
		{`[1,2]`, "f.jsonl:2: invalid JSON object"},
		{`{"messages":[]}`, "f.jsonl:2: messages: missing or empty"},
		{`{"tools":[]}`, "f.jsonl:2: messages: missing"},
		{`{"messages":"hi"}`, `f.jsonl:2: field "messages"`},
		{`{"messages":[{"content":"x"}]}`, `f.jsonl:2: messages[0]: want an object with a "role"`},
		{`{"messages":[{"role":"robot","content":"x"}]}`, `f.jsonl:2: messages[0]: role "robot"`},
		{`{"messages":[{"role":"system","content":"x"}]}`, "f.jsonl:2: messages: no user message"},
		{`{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"y"}]}`, "the last message is assistant"},
		{`{"messages":[{"role":"user","content":"x"}],"tool_round":2}`, `f.jsonl:2: unknown field "tool_round"`},
		{`{"messages":[{"role":"user","content":"x"}],"tools":[]}`, "tools: empty list"},
		{`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]}`, "tools[0]: want"},
		{`{"messages":[{"role":"user","content":"x"}],"tools":{"a":1}}`, "tools: want a list"},
		{`{"messages":[{"role":"user","content":"x"}],"expect_tools":["nope"]}`, `expect_tools[0]: "nope" is not an offered tool`},
		{`{"messages":[{"role":"user","content":"x"}],"tool_rounds":-1}`, "tool_rounds -1"},
		{`{"messages":[{"role":"user","content":"x"}],"rounds":0}`, "rounds 0: want at least 1"},
		{`{"messages":[{"role":"user","content":"x"}],"rounds":1,"tool_rounds":2}`, "rounds 1: below tool_rounds 2"},
		{`{"messages":[{"role":"user","content":"x"}],"id":""}`, "id: empty"},
		{`{"messages":[{"role":"user","content":"x"}],"id":"c000"}`, `f.jsonl:2: id "c000" already used on line 1`},
	} {
		_, err := ReadConversations(strings.NewReader(`{"messages":[{"role":"user","content":"first"}]}`+"\n"+tc.line+"\n"), "f.jsonl")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.line, err, tc.want)
		}
	}
	if _, err := ReadConversations(strings.NewReader("\n\n"), "empty.jsonl"); err == nil || !strings.Contains(err.Error(), "empty.jsonl: no conversations") {
		t.Errorf("empty file: %v", err)
	}
	long := `{"messages":[{"role":"user","content":"` + strings.Repeat("x", MaxConversationLine) + `"}]}`
	if _, err := ReadConversations(strings.NewReader("\n"+long+"\n"), "big.jsonl"); err == nil || !strings.Contains(err.Error(), "big.jsonl:2: line longer than") {
		t.Errorf("long line: %v", err)
	}
}

func TestLoadConversationsDigest(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.jsonl")
	data := []byte(`{"messages":[{"role":"user","content":"x"}]}` + "\n")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cs, digest, err := LoadConversations(p)
	sum := sha256.Sum256(data)
	if err != nil || len(cs) != 1 || digest != hex.EncodeToString(sum[:]) {
		t.Fatalf("%v %d %q", err, len(cs), digest)
	}
	if _, _, err := LoadConversations(filepath.Join(t.TempDir(), "missing.jsonl")); err == nil || !strings.Contains(err.Error(), "missing.jsonl") {
		t.Errorf("missing file: %v", err)
	}
}

// TestHarnessReplaysConversations: the harness sends a line's messages and
// tools as written, answers tool calls with tool results, stops at the
// line's rounds, and classifies with expect_tools.
func TestHarnessReplaysConversations(t *testing.T) {
	in := `{"id":"a","messages":[{"role":"system","content":"S"},{"role":"user","content":"first question"}],"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}],"tool_rounds":2,"rounds":3}
{"id":"b","messages":[{"role":"user","content":"second question"}],"expect_tools":["search_web"]}
{"id":"c","messages":[{"role":"user","content":"third"}],"tool_rounds":0,"rounds":2}
`
	cs, err := ReadConversations(strings.NewReader(in), "t.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	firstMsgs := map[string][]map[string]any{}
	toolNames := map[string][]string{}
	// The model calls get_weather until the conversation holds two tool
	// results, then answers.
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []map[string]any `json:"messages"`
			Tools    []struct {
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			} `json:"tools"`
		}
		body, _ := io.ReadAll(r.Body)
		json.Unmarshal(body, &req)
		user := ""
		tools := 0
		for _, m := range req.Messages {
			if m["role"] == "user" {
				user = fmt.Sprint(m["content"])
			}
			if m["role"] == "tool" {
				tools++
			}
		}
		mu.Lock()
		if _, ok := firstMsgs[user]; !ok {
			firstMsgs[user] = req.Messages
			for _, t := range req.Tools {
				toolNames[user] = append(toolNames[user], t.Function.Name)
			}
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if tools >= 2 {
			io.WriteString(w, `{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"Done."},"finish_reason":"stop"}]}`)
			return
		}
		io.WriteString(w, `{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"k","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`)
	})
	res := runFake(t, h, HarnessOptions{Sessions: 3, Rounds: 4, Model: "m", Conversations: cs})
	byID := map[string]SessionResult{}
	for _, s := range res.PerSession {
		byID[s.ID] = s
	}
	if s := byID["a"]; s.Outcome != hook.OutcomeDone || s.Rounds != 3 || s.ToolRounds != 2 {
		t.Errorf("a: %+v", s)
	}
	if s := byID["b"]; s.Outcome != hook.OutcomeNoTool || s.Rounds != 1 || !strings.Contains(s.Reason, `called "get_weather", expected "search_web"`) {
		t.Errorf("b: %+v", s)
	}
	// Tool rounds 0 and two rounds: the model keeps calling, so maxrounds.
	if s := byID["c"]; s.Outcome != hook.OutcomeMaxRounds || s.Rounds != 2 {
		t.Errorf("c: %+v", s)
	}
	if m := firstMsgs["first question"]; len(m) != 2 || m[0]["content"] != "S" {
		t.Errorf("messages of a sent as %v", m)
	}
	if n := toolNames["first question"]; len(n) != 1 || n[0] != "get_weather" {
		t.Errorf("tools of a sent as %v", n)
	}
	if n := toolNames["second question"]; len(n) != len(harnessTools) {
		t.Errorf("b without tools got %v, want the harness catalogue", n)
	}
	// Conversations not built by ReadConversations are refused.
	if _, err := RunHarness(t.Context(), HarnessOptions{URL: "http://127.0.0.1:1", Conversations: []Conversation{{ID: "x"}}}); err == nil {
		t.Error("empty conversation accepted")
	}
}

func TestWorkloadExtraAndScrub(t *testing.T) {
	temp, topP, seed := 0.0, 0.9, int64(-3)
	o := HarnessOptions{MaxTokens: 256, Sampling: Sampling{Temperature: &temp, TopP: &topP, Seed: &seed}, APIKey: "sk-abcdef",
		Headers: http.Header{"X-B": {"secret-b"}, "X-A": {"secret-a"}}, ConversationsName: "c.jsonl", ConversationsDigest: "ff",
		Conversations: make([]Conversation, 2)}
	got := o.WorkloadExtra()
	want := map[string]string{"workload.max_tokens": "256", "workload.temperature": "0", "workload.top_p": "0.9", "workload.sampling_seed": "-3",
		"workload.conversations": "c.jsonl", "workload.conversations_count": "2", "workload.conversations_sha256": "ff",
		"workload.headers": "X-A,X-B", "workload.api_key": "set"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("extra %v\nwant  %v", got, want)
	}
	for k := range got {
		if !runconfig.IsWorkloadExtra(k) {
			t.Errorf("%s is not a workload key", k)
		}
	}
	if (&HarnessOptions{}).WorkloadExtra() != nil {
		t.Error("empty options add extras")
	}
	if s := o.scrub("denied sk-abcdef for secret-a"); strings.Contains(s, "sk-abcdef") || strings.Contains(s, "secret-a") {
		t.Errorf("scrub left %q", s)
	}
	if b := string(o.samplingJSON(nil)); b != `,"max_tokens":256,"temperature":0,"top_p":0.9,"seed":-3` {
		t.Errorf("sampling JSON %s", b)
	}
	bad := 2.5
	if err := (Sampling{Temperature: &bad}).validate(); err == nil {
		t.Error("temperature 2.5 accepted")
	}
}
