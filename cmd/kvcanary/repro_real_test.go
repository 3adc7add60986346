package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/repro"
	"github.com/kvcanary/kvcanary/runtime/sim"
	"github.com/kvcanary/kvcanary/sessions"
	"github.com/kvcanary/kvcanary/spec/outcome"
	"github.com/kvcanary/kvcanary/traces"
)

// chatServer is a loopback fake OpenAI server: GET /v1/models lists
// "fake-model"; every chat request is counted and answered with the message
// JSON and finish reason reply returns.
func chatServer(t *testing.T, reply func(r *http.Request, body []byte) (msg, finish string)) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var chats atomic.Int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			io.WriteString(w, `{"object":"list","data":[{"id":"fake-model"}]}`)
			return
		}
		body, _ := io.ReadAll(r.Body)
		k := chats.Add(1)
		msg, finish := reply(r, body)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"chatcmpl-%d","object":"chat.completion","choices":[{"index":0,"message":%s,"finish_reason":%q}]}`, k, msg, finish)
	}))
	t.Cleanup(hs.Close)
	return hs, &chats
}

const toolCallMsg = `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"location\":\"Paris\"}"}}]}`

// TestReproPreflightStops: each way a server cannot be measured stops in
// preflight, before any session and before the bundle is created, with exit 3
// and a hint naming the cause.
func TestReproPreflightStops(t *testing.T) {
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "http://" + dead.Addr().String()
	dead.Close()
	auth := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"error":{"message":"invalid api key","type":"auth"}}`)
	}))
	defer auth.Close()
	leaky, leakyChats := chatServer(t, func(*http.Request, []byte) (string, string) {
		return `{"role":"assistant","content":"<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}</tool_call>"}`, "stop"
	})
	jsonText, _ := chatServer(t, func(*http.Request, []byte) (string, string) {
		return `{"role":"assistant","content":"{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\"}}"}`, "stop"
	})
	prose, proseChats := chatServer(t, func(*http.Request, []byte) (string, string) {
		return `{"role":"assistant","content":"Paris is usually mild this time of year."}`, "stop"
	})
	vllmNoAuto := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			io.WriteString(w, `{"data":[{"id":"m"}]}`)
			return
		}
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":{"message":"\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set"}}`)
	}))
	defer vllmNoAuto.Close()
	for _, tc := range []struct {
		name, url string
		args      []string
		cause     string
		hint      []string
		chats     *atomic.Int64 // chat requests the server saw: the probes only
	}{
		{name: "unreachable", url: deadURL, cause: "unreachable", hint: []string{"connection refused", "--url"}},
		{name: "auth", url: auth.URL, cause: "auth", hint: []string{"HTTP 401", "invalid api key", "--api-key", "OPENAI_API_KEY"}},
		{name: "leaks markup", url: leaky.URL, cause: "no_tool_parser", hint: []string{"<tool_call>", "--tool-call-parser", "--enable-auto-tool-choice"}, chats: leakyChats},
		{name: "JSON in content", url: jsonText.URL, cause: "no_tool_parser", hint: []string{"JSON text in content", "--tool-call-parser"}},
		{name: "prose", url: prose.URL, cause: "ignores_tools", hint: []string{"answered in prose", "chat template", "--no-preflight"}, chats: proseChats},
		{name: "vllm without auto tool choice", url: vllmNoAuto.URL, cause: "no_tool_parser", hint: []string{"HTTP 400", "--enable-auto-tool-choice"}},
		{name: "model missing", url: prose.URL, args: []string{"--model", "other"}, cause: "model_missing", hint: []string{`"other"`, `"fake-model"`, "--model"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bundle := filepath.Join(t.TempDir(), "x.kvtrace")
			before := int64(0)
			if tc.chats != nil {
				before = tc.chats.Load()
			}
			args := append([]string{"--url", tc.url, "--sessions", "4", "--rounds", "2", "--tool-time", "0", "--record", bundle}, tc.args...)
			out, _, err := runRepro(t, args...)
			if cmdutil.ExitCode(err) != cmdutil.ExitInput {
				t.Fatalf("exit %d (err %v), want 3", cmdutil.ExitCode(err), err)
			}
			msg := fmt.Sprint(err)
			if !strings.Contains(msg, "preflight") || !strings.Contains(msg, ": "+tc.cause+": ") || !strings.Contains(msg, "hint:") {
				t.Errorf("error %q does not name preflight cause %s with a hint", msg, tc.cause)
			}
			for _, h := range tc.hint {
				if !strings.Contains(msg, h) {
					t.Errorf("error %q lacks %q", msg, h)
				}
			}
			if out != "" {
				t.Errorf("stdout %q: a failed preflight prints no report", out)
			}
			if _, err := os.Stat(bundle); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("bundle created before preflight passed: %v", err)
			}
			if tc.chats != nil {
				if n := tc.chats.Load() - before; n != int64(repro.PreflightProbes) {
					t.Errorf("%d chat requests, want the %d probes only", n, repro.PreflightProbes)
				}
			}
		})
	}
	// --json prints the failure as an object too.
	out, _, err := runRepro(t, "--url", leaky.URL, "--json")
	var got struct {
		Preflight struct {
			OK    bool                 `json:"ok"`
			Error repro.PreflightError `json:"error"`
		} `json:"preflight"`
	}
	if cmdutil.ExitCode(err) != cmdutil.ExitInput || json.Unmarshal([]byte(out), &got) != nil || got.Preflight.OK ||
		got.Preflight.Error.Cause != repro.CauseNoToolParser || got.Preflight.Error.Hint == "" {
		t.Errorf("--json preflight failure: err %v, %s", err, out)
	}
	// --no-preflight measures anyway; the prose model's no_tool share asks
	// for a control run (exit 0: it is a measurement).
	out, _, err = runRepro(t, "--url", prose.URL, "--sessions", "4", "--rounds", "2", "--tool-time", "0", "--no-preflight")
	if err != nil || !strings.Contains(out, "CORRUPTION sessions: 4/4") || !strings.Contains(out, "note: no_tool in 4 of 4 sessions") ||
		!strings.Contains(out, "--disable-cuda-graph") || !strings.Contains(out, "kvcanary ab") {
		t.Errorf("--no-preflight on a prose model: err %v, output %q", err, out)
	}
}

// TestReproAPIKeyAndHeaders: the key and headers reach every request
// (models, probe, chat); neither value appears in stdout, stderr or the
// decompressed bundle, even when the server echoes them in an error.
func TestReproAPIKeyAndHeaders(t *testing.T) {
	const key, team = "sk-test-4f9a1c0d2e", "team-infra-77"
	var mu sync.Mutex
	seen := map[string]int{} // path → requests with both credentials
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.Header.Get("Authorization") != "Bearer "+key || r.Header.Get("X-Team") != team {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, `{"error":{"message":"bad credentials %s / %s"}}`, r.Header.Get("Authorization"), r.Header.Get("X-Team"))
			return
		}
		mu.Lock()
		seen[r.URL.Path]++
		mu.Unlock()
		if r.URL.Path == "/v1/models" {
			io.WriteString(w, `{"data":[{"id":"m"}]}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"x","choices":[{"index":0,"message":%s,"finish_reason":"tool_calls"}]}`, toolCallMsg)
	}))
	defer hs.Close()
	bundle := filepath.Join(t.TempDir(), "auth.kvtrace")
	out, errOut, err := runRepro(t, "--url", hs.URL, "--api-key", key, "--header", "X-Team: "+team, "--sessions", "3", "--rounds", "2",
		"--tool-time", "0", "--record", bundle, "--json")
	if err != nil {
		t.Fatalf("%v: %s", err, errOut)
	}
	if seen["/v1/models"] != 1 || seen["/v1/chat/completions"] != repro.PreflightProbes+3*2 {
		t.Errorf("authenticated requests %v, want models 1 and chat %d (probes + 3 sessions × 2 rounds)", seen, repro.PreflightProbes+3*2)
	}
	text := bundleText(t, bundle)
	for _, secret := range []string{key, team} {
		if strings.Contains(out+errOut+text, secret) {
			t.Errorf("%q leaked into the output or the bundle", secret)
		}
	}
	if !strings.Contains(text, `"workload.headers":"X-Team"`) || !strings.Contains(text, `"workload.api_key":"set"`) {
		t.Errorf("bundle does not record the header name and that a key was set")
	}
	// OPENAI_API_KEY when the flag is absent; a refused key is named as
	// auth without printing it (the server echoes it in its error).
	t.Setenv("OPENAI_API_KEY", key)
	if _, errOut, err := runRepro(t, "--url", hs.URL, "--header", "X-Team:"+team, "--sessions", "1", "--rounds", "1", "--tool-time", "0"); err != nil {
		t.Fatalf("OPENAI_API_KEY: %v: %s", err, errOut)
	}
	t.Setenv("OPENAI_API_KEY", "sk-wrong-key-31337")
	out, errOut, err = runRepro(t, "--url", hs.URL, "--header", "X-Team:"+team, "--sessions", "1")
	msg := fmt.Sprint(err)
	if cmdutil.ExitCode(err) != cmdutil.ExitInput || !strings.Contains(msg, "auth") || !strings.Contains(msg, "refused the credentials") {
		t.Errorf("wrong key: %v", err)
	}
	if strings.Contains(out+errOut+msg, "sk-wrong-key-31337") || strings.Contains(out+errOut+msg, team) {
		t.Errorf("a refused key or header value was printed: %q", msg)
	}
	// --api-key and an Authorization header conflict.
	if _, _, err := runRepro(t, "--url", hs.URL, "--header", "Authorization: Basic eA=="); cmdutil.ExitCode(err) != cmdutil.ExitUsage {
		t.Errorf("Authorization header with OPENAI_API_KEY: %v, want a usage error", err)
	}
}

// TestReproSamplingRecorded: sampling settings go into every request and
// into the run configuration as workload extras; ab reads a difference in
// them as a workload confound, not as the flag under test.
func TestReproSamplingRecorded(t *testing.T) {
	var mu sync.Mutex
	var bodies []map[string]any
	hs, _ := chatServer(t, func(r *http.Request, body []byte) (string, string) {
		if r.Method == http.MethodPost { // not repro's GETs of the server's settings
			var m map[string]any
			json.Unmarshal(body, &m)
			mu.Lock()
			bodies = append(bodies, m)
			mu.Unlock()
		}
		return toolCallMsg, "tool_calls"
	})
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.kvtrace"), filepath.Join(dir, "b.kvtrace")
	if _, errOut, err := runRepro(t, "--url", hs.URL, "--sessions", "2", "--rounds", "1", "--tool-time", "0", "--record", a,
		"--temperature", "0.6", "--top-p", "0.95", "--sampling-seed", "7", "--max-tokens", "300"); err != nil {
		t.Fatalf("%v: %s", err, errOut)
	}
	if len(bodies) != repro.PreflightProbes+2 {
		t.Fatalf("%d requests", len(bodies))
	}
	for _, m := range bodies {
		if m["temperature"] != 0.6 || m["top_p"] != 0.95 || m["seed"] != 7.0 || m["max_tokens"] != 300.0 {
			t.Fatalf("request sampling %v %v %v %v", m["temperature"], m["top_p"], m["seed"], m["max_tokens"])
		}
	}
	rs, err := runStatsFromBundle(a)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"workload.temperature": "0.6", "workload.top_p": "0.95", "workload.sampling_seed": "7", "workload.max_tokens": "300"}
	for k, v := range want {
		if rs.Config.Extra[k] != v {
			t.Errorf("config extra %s = %q, want %q (extra %v)", k, rs.Config.Extra[k], v, rs.Config.Extra)
		}
	}
	// Unset: not sent.
	mu.Lock()
	bodies = nil
	mu.Unlock()
	if _, errOut, err := runRepro(t, "--url", hs.URL, "--sessions", "2", "--rounds", "1", "--tool-time", "0", "--record", b, "--temperature", "0.6",
		"--top-p", "0.95", "--sampling-seed", "7", "--max-tokens", "300", "--temperature", "0"); err != nil {
		t.Fatalf("%v: %s", err, errOut)
	}
	if bodies[0]["temperature"] != 0.0 {
		t.Errorf("--temperature 0 not sent as 0: %v", bodies[0]["temperature"])
	}
	abOut, _, err := runAB(t, a, b, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rep sessions.ABReport
	if err := json.Unmarshal([]byte(abOut), &rep); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range rep.Confounds {
		found = found || (c.Name == "extra.workload.temperature" && c.A == "0.6" && c.B == "0")
	}
	if !found || rep.FlagUnderTest != nil || len(rep.DifferingFlags) != 0 {
		t.Errorf("ab: confounds %+v, flag under test %+v, differing %+v; want temperature as a workload confound only", rep.Confounds, rep.FlagUnderTest, rep.DifferingFlags)
	}
	for _, args := range [][]string{{"--temperature", "3"}, {"--top-p", "0"}, {"--header", "NoColon"}, {"--api-key", ""}} {
		if _, _, err := runRepro(t, append([]string{"--url", hs.URL}, args...)...); cmdutil.ExitCode(err) != cmdutil.ExitUsage {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}

// TestReproConversationsTwin replays a JSONL file of three sessions against
// the twin server: one session per line, named by the lines, classified
// with the usual outcome classes, every request the twin saw accounted for
// (the preflight probe plus the sessions' requests).
func TestReproConversationsTwin(t *testing.T) {
	srv, url := serveTwinServer(t, func(*sim.Config) {})
	dir := t.TempDir()
	file := filepath.Join(dir, "mine.jsonl")
	lines := `{"id":"refund","messages":[{"role":"system","content":"You are a support agent."},{"role":"user","content":"Customer 4411 wants a refund for order 9. tool rounds: 2"}],"tool_rounds":2,"rounds":3}

{"id":"weather","model":"ignored","temperature":0.1,"messages":[{"role":"user","content":"Plan a picnic in Oslo this weekend. tool rounds: 1"}],"tool_rounds":1,"rounds":3}
{"messages":[{"role":"user","content":"Summarise the incident report for the outage. tool rounds: 2"}],"tool_rounds":2}
`
	if err := os.WriteFile(file, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(dir, "conv.kvtrace")
	out, errOut, err := runRepro(t, "--url", url, "--conversations", file, "--rounds", "3", "--tool-time", "0", "--record", bundle,
		"--run", "conv-test", "--json")
	if err != nil {
		t.Fatalf("%v: %s", err, errOut)
	}
	var got struct {
		outcome.Summary
		Requests   int                   `json:"requests"`
		PerSession []repro.SessionResult `json:"per_session"`
		Run        string                `json:"run"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if got.Sessions != 3 || got.Run != "conv-test" || got.Outcomes.Error+got.Outcomes.Timeout != 0 {
		t.Fatalf("summary %+v run %q: %s", got.Summary, got.Run, out)
	}
	ids := []string{}
	for _, s := range got.PerSession {
		ids = append(ids, s.ID)
		if s.Rounds == 0 || s.Outcome == "" {
			t.Errorf("session %+v", s)
		}
	}
	if strings.Join(ids, ",") != "refund,weather,c002" {
		t.Errorf("session ids %v", ids)
	}
	if n := len(srv.Records()); n != got.Requests+repro.PreflightProbes {
		t.Errorf("twin served %d requests, repro sent %d + %d probes", n, got.Requests, repro.PreflightProbes)
	}
	rs, err := runStatsFromBundle(bundle)
	if err != nil {
		t.Fatal(err)
	}
	if rs.Outcomes != got.Outcomes || rs.Config.Extra["workload.conversations"] != file || rs.Config.Extra["workload.conversations_count"] != "3" ||
		len(rs.Config.Extra["workload.conversations_sha256"]) != 64 {
		t.Errorf("bundle outcomes %+v config extra %v", rs.Outcomes, rs.Config.Extra)
	}
	// --sessions cycles through the lines.
	out, errOut, err = runRepro(t, "--url", url, "--conversations", file, "--sessions", "5", "--tool-time", "0", "--json", "--no-preflight")
	if err != nil {
		t.Fatalf("%v: %s", err, errOut)
	}
	json.Unmarshal([]byte(out), &got)
	if got.Sessions != 5 || got.PerSession[3].ID != "refund/1" {
		t.Errorf("cycled sessions %+v", got.PerSession)
	}
	// A bad line is an input error naming the file and line.
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte(lines+`{"messages":[{"role":"user","content":"x"}],"tool_round":2}`+"\n"), 0o644)
	_, _, err = runRepro(t, "--url", url, "--conversations", bad)
	if cmdutil.ExitCode(err) != cmdutil.ExitInput || !strings.Contains(fmt.Sprint(err), bad+":5:") || !strings.Contains(fmt.Sprint(err), `"tool_round"`) {
		t.Errorf("bad line: %v", err)
	}
}

// TestReproRunID: --run names the bundle's run and every event in it.
func TestReproRunID(t *testing.T) {
	hs, _ := chatServer(t, func(*http.Request, []byte) (string, string) { return `{"role":"assistant","content":"ok"}`, "stop" })
	bundle := filepath.Join(t.TempDir(), "run.kvtrace")
	if _, errOut, err := runRepro(t, "--url", hs.URL, "--sessions", "2", "--rounds", "1", "--tool-time", "0", "--record", bundle,
		"--run", "nightly-42", "--no-preflight"); err != nil {
		t.Fatalf("%v: %s", err, errOut)
	}
	br, err := traces.Open(bundle)
	if err != nil {
		t.Fatal(err)
	}
	defer br.Close()
	if br.Manifest().Run != "nightly-42" {
		t.Errorf("manifest run %q", br.Manifest().Run)
	}
	events := 0
	for {
		ev, err := br.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		events++
		if ev.Run != "nightly-42" {
			t.Errorf("event %s has run %q", ev.Kind, ev.Run)
		}
	}
	if events != 4 { // run.start, 2 sessions, run.end
		t.Errorf("%d events", events)
	}
}

// bundleText is a bundle's decompressed lines (manifest, events, footer).
func bundleText(t *testing.T, path string) string {
	t.Helper()
	br, err := traces.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer br.Close()
	var b strings.Builder
	for {
		rec, err := br.NextRecord()
		if err == io.EOF {
			return b.String()
		}
		if err != nil {
			t.Fatal(err)
		}
		b.Write(rec.Line)
		b.WriteByte('\n')
	}
}

// bundleRuns is a bundle's manifest run and the distinct runs of its events.
func bundleRuns(t *testing.T, path string) (string, map[string]int) {
	t.Helper()
	br, err := traces.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer br.Close()
	runs := map[string]int{}
	for {
		ev, err := br.Next()
		if err == io.EOF {
			return br.Manifest().Run, runs
		}
		if err != nil {
			t.Fatal(err)
		}
		runs[ev.Run]++
	}
}

// TestSimRunAndServeRunID: the twin's recording commands take --run too.
func TestSimRunAndServeRunID(t *testing.T) {
	dir := t.TempDir()
	b := filepath.Join(dir, "sim.kvtrace")
	if _, errOut, err := runSim(t, false, "run", "--sessions", "2", "--rounds", "1", "--record", b, "--run", "twin-a"); err != nil {
		t.Fatalf("%v: %s", err, errOut)
	}
	if run, runs := bundleRuns(t, b); run != "twin-a" || len(runs) != 1 || runs["twin-a"] == 0 {
		t.Errorf("sim run bundle: manifest run %q, event runs %v", run, runs)
	}
	ios, _, _, _ := cmdutil.Test()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := &cmdutil.Factory{IO: ios, Ctx: ctx, Now: func() time.Time { return time.Now() }}
	sb := filepath.Join(dir, "serve.kvtrace")
	addr, done := startSimServe(t, f, false, "--addr", "127.0.0.1:0", "--record", sb, "--run", "twin-b", "--no-canary", "--no-graphdiff", "--no-checksum", "--step-time", "1ms")
	if _, err := repro.RunHarness(context.Background(), repro.HarnessOptions{URL: "http://" + addr, Sessions: 2, Rounds: 1}); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if run, runs := bundleRuns(t, sb); run != "twin-b" || len(runs) != 1 || runs["twin-b"] == 0 {
		t.Errorf("sim serve bundle: manifest run %q, event runs %v", run, runs)
	}
}
